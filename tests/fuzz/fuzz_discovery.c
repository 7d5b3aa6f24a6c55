/* fuzz_discovery — libFuzzer target: arbitrary beacons into LAN discovery.
 *
 * The input is one beacon payload: it is decoded (gossip_disc_decode: a
 * decoded announcement must re-encode to the same bytes) and offered to an
 * offline gossip_disc of a 4-node ring, as heard from a fixed address at a
 * time taken from the input (gossip_disc_offer: whatever it believes must
 * be an endpoint of that address and the announced port).  Built and run
 * by scripts/fuzz.sh.
 */
#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "gossip/gossip_discovery.h"
#include "topology/topo.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static topo        *s_t;
static gossip_disc *s_d;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    if (!s_t) {
        s_t = topo_generate("undirected_ring", 4, 0, 0, err, sizeof err);
        s_t->discovery = TOPO_DISCOVERY_LAN;
        s_t->discovery_port = TOPO_DISCOVERY_PORT_DEFAULT;
        gossip_disc_config c;
        gossip_disc_config_default(&c);
        c.offline = 1;
        c.tcp_port = 40000;
        c.run_id = 0x0123456789abcdefULL; /* what a seed of LPGD,1,0,... must carry */
        s_d = gossip_disc_new(s_t, 0, &c, err, sizeof err);
        assert(s_d);
    }
    gossip_disc_msg m;
    if (gossip_disc_decode(data, size, &m, err, sizeof err) == 0) {
        uint8_t buf[GOSSIP_DISC_BYTES_KEY];
        size_t len = gossip_disc_encode(&m, buf);
        assert(len == size && memcmp(buf, data, len) == 0);
    }
    double now = size ? data[size - 1] : 0; /* the clock moves with the input */
    int rank = -1;
    gossip_disc_event ev = gossip_disc_offer(s_d, "10.1.2.3", data, size, now, &rank);
    if (ev != GOSSIP_DISC_NOTHING) {
        assert(rank > 0 && rank < 4);
        char want[64];
        snprintf(want, sizeof want, "tcp://10.1.2.3:%u", m.port);
        assert(!strcmp(gossip_disc_endpoint(s_d, rank), want));
    }
    return 0;
}

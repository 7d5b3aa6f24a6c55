/* test_gossip_discovery — the LAN discovery announcement and what a node
 * believes of it (gossip_discovery.h), without sockets: an offline
 * gossip_disc is fed announcements by hand (gossip_disc_offer).
 *
 * Codec: round trips with and without a CURVE key (extreme values), the
 * exact layout of a known message, and malformed input (every truncation,
 * a byte too many, bad magic, another version, unknown flags, a key flag
 * without key, TCP port 0, random bytes) each rejected with a reason.
 * Belief: a neighbour found, refreshed, contested by a second endpoint
 * while it lives, moved after its silence; another run ignored and logged
 * once per sender; our own rank from elsewhere; ranks outside the
 * topology; the list of neighbours not found; with `security: curve` only
 * the listed key is believed.  The end-to-end test with real beacons is
 * tests/test_node_netns.c (network namespaces).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <zmq.h>

#include "gossip/gossip_discovery.h"
#include "nn/nn_core.h"
#include "topology/topo.h"

#define S_RUN 0x0123456789abcdefULL

/* ---- codec ------------------------------------------------------------------ */

static void test_round_trip(void **state)
{
    (void)state;
    gossip_disc_msg cases[3] = {
        {S_RUN, 3, 47001, 0, {0}},
        {UINT64_MAX, UINT32_MAX, 65535, 1, {0}},
        {0, 0, 1, 1, {0}},
    };
    for (int b = 0; b < 32; b++) {
        cases[1].key[b] = (uint8_t)(0xff - b);
        cases[2].key[b] = (uint8_t)(b * 7);
    }
    for (int k = 0; k < 3; k++) {
        uint8_t buf[GOSSIP_DISC_BYTES_KEY];
        size_t len = gossip_disc_encode(&cases[k], buf);
        assert_int_equal(len, cases[k].has_key ? GOSSIP_DISC_BYTES_KEY : GOSSIP_DISC_BYTES);
        gossip_disc_msg m;
        char why[256];
        assert_int_equal(gossip_disc_decode(buf, len, &m, why, sizeof why), 0);
        assert_true(m.run_id == cases[k].run_id);
        assert_int_equal(m.rank, cases[k].rank);
        assert_int_equal(m.port, cases[k].port);
        assert_int_equal(m.has_key, cases[k].has_key);
        assert_memory_equal(m.key, cases[k].key, 32);
    }
    /* the layout, byte by byte (little-endian) */
    uint8_t buf[GOSSIP_DISC_BYTES_KEY];
    assert_int_equal(gossip_disc_encode(&cases[0], buf), 20);
    const uint8_t want[20] = {'L', 'P', 'G', 'D', 1, 0, 0x99, 0xb7, 0xef, 0xcd, 0xab, 0x89,
                              0x67, 0x45, 0x23, 0x01, 3, 0, 0, 0};
    assert_memory_equal(buf, want, 20);
}

static void s_bad(const uint8_t *buf, size_t len, int rc, const char *what)
{
    gossip_disc_msg m;
    char why[256] = "";
    int got = gossip_disc_decode(buf, len, &m, why, sizeof why);
    if (got != rc || !strstr(why, what)) {
        print_error("%zu bytes: expected %d '%s', got %d '%s'\n", len, rc, what, got, why);
        fail();
    }
}

static void test_malformed(void **state)
{
    (void)state;
    gossip_disc_msg m = {S_RUN, 2, 5000, 1, {0}};
    uint8_t good[GOSSIP_DISC_BYTES_KEY + 1], buf[GOSSIP_DISC_BYTES_KEY + 1];
    size_t len = gossip_disc_encode(&m, good);
    /* every truncation, and one byte too many */
    for (size_t l = 0; l < len; l++)
        s_bad(good, l, -1, l < 6 ? "no magic" : "bytes, expected 52");
    good[len] = 0;
    s_bad(good, len + 1, -1, "53 bytes, expected 52");
    memcpy(buf, good, len);
    buf[0] = 'X';
    s_bad(buf, len, -1, "no magic");
    memcpy(buf, good, len);
    buf[4] = 2;
    s_bad(buf, len, -2, "version 2");
    memcpy(buf, good, len);
    buf[5] = 3;
    s_bad(buf, len, -1, "unknown flags 0x03");
    memcpy(buf, good, len);
    s_bad(buf, GOSSIP_DISC_BYTES, -1, "20 bytes, expected 52"); /* key flag, no key */
    buf[6] = buf[7] = 0;
    s_bad(buf, len, -1, "TCP port 0");
    /* random bytes behind the magic: never accepted unless well-formed */
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    for (int k = 0; k < 20000; k++) {
        memcpy(buf, GOSSIP_DISC_MAGIC, 4);
        size_t l = 4 + (size_t)(k % 50);
        for (size_t b = 4; b < l; b++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            buf[b] = (uint8_t)x;
        }
        gossip_disc_msg r;
        char why[256];
        int rc = gossip_disc_decode(buf, l, &r, why, sizeof why);
        if (rc == 0)
            assert_true((l == 20 && buf[5] == 0) || (l == 52 && buf[5] == 1));
    }
}

/* ---- belief ----------------------------------------------------------------- */

typedef struct {
    topo        *t;
    gossip_disc *d;
    FILE        *log;
} s_fix;

/* A 4-node undirected ring with `discovery: lan`, node 0's view. */
static s_fix s_fixture(int curve, uint8_t pub[4][32])
{
    s_fix f;
    char err[256];
    f.t = topo_generate("undirected_ring", 4, 0, 0, err, sizeof err);
    assert_non_null(f.t);
    f.t->discovery = TOPO_DISCOVERY_LAN;
    f.t->discovery_port = TOPO_DISCOVERY_PORT_DEFAULT;
    if (curve) {
        f.t->security_curve = 1;
        for (int k = 0; k < 4; k++) {
            char sec[41];
            assert_int_equal(zmq_curve_keypair(f.t->nodes[k].pubkey, sec), 0);
            assert_non_null(zmq_z85_decode(pub[k], f.t->nodes[k].pubkey));
        }
    }
    f.log = tmpfile();
    assert_non_null(f.log);
    gossip_disc_config c;
    gossip_disc_config_default(&c);
    c.offline = 1;
    c.tcp_port = 40000;
    c.run_id = S_RUN;
    c.log = f.log;
    f.d = gossip_disc_new(f.t, 0, &c, err, sizeof err);
    assert_non_null(f.d);
    return f;
}

static void s_free(s_fix *f)
{
    gossip_disc_destroy(&f->d);
    gossip_disc_destroy(&f->d); /* safe on NULL */
    topo_destroy(&f->t);
    fclose(f->log);
}

/* Offers an announcement (rank, port, run, key or NULL) from ip at now. */
static gossip_disc_event s_offer(s_fix *f, const char *ip, uint32_t rank, uint16_t port,
                                 uint64_t run, const uint8_t *key, double now, int *got)
{
    gossip_disc_msg m = {run, rank, port, key != NULL, {0}};
    if (key)
        memcpy(m.key, key, 32);
    uint8_t buf[GOSSIP_DISC_BYTES_KEY];
    size_t len = gossip_disc_encode(&m, buf);
    *got = -1;
    return gossip_disc_offer(f->d, ip, buf, len, now, got);
}

/* Lines of the log containing `what`. */
static int s_count(FILE *log, const char *what)
{
    fflush(log);
    rewind(log);
    char line[1024];
    int count = 0;
    while (fgets(line, sizeof line, log))
        count += strstr(line, what) != NULL;
    fseek(log, 0, SEEK_END);
    return count;
}

static void test_found_contested_moved(void **state)
{
    (void)state;
    s_fix f = s_fixture(0, NULL);
    int j;
    char miss[256];
    assert_int_equal(gossip_disc_missing(f.d, miss, sizeof miss), 2);
    assert_string_equal(miss, "n1 (rank 1), n3 (rank 3)");
    assert_string_equal(gossip_disc_endpoint(f.d, 1), "");
    assert_int_equal(s_offer(&f, "10.0.0.2", 1, 5001, S_RUN, NULL, 100, &j), GOSSIP_DISC_FOUND);
    assert_int_equal(j, 1);
    assert_string_equal(gossip_disc_endpoint(f.d, 1), "tcp://10.0.0.2:5001");
    assert_int_equal(gossip_disc_missing(f.d, miss, sizeof miss), 1);
    assert_string_equal(miss, "n3 (rank 3)");
    /* a refresh changes nothing */
    assert_int_equal(s_offer(&f, "10.0.0.2", 1, 5001, S_RUN, NULL, 101, &j), GOSSIP_DISC_NOTHING);
    /* a second endpoint while the first lives: ignored, logged once */
    for (int k = 0; k < 3; k++)
        assert_int_equal(s_offer(&f, "10.0.0.9", 1, 6000, S_RUN, NULL, 102 + k, &j),
                         GOSSIP_DISC_NOTHING);
    assert_string_equal(gossip_disc_endpoint(f.d, 1), "tcp://10.0.0.2:5001");
    assert_int_equal(s_count(f.log, "is announced from tcp://10.0.0.2:5001 and from"), 1);
    /* the first keeps announcing (at 104), so at 108 it is not silent yet */
    assert_int_equal(s_offer(&f, "10.0.0.2", 1, 5001, S_RUN, NULL, 104, &j), GOSSIP_DISC_NOTHING);
    assert_int_equal(s_offer(&f, "10.0.0.9", 1, 6000, S_RUN, NULL, 108, &j), GOSSIP_DISC_NOTHING);
    /* silent for 5 s: the newer endpoint is taken */
    assert_int_equal(s_offer(&f, "10.0.0.9", 1, 6000, S_RUN, NULL, 109.5, &j), GOSSIP_DISC_MOVED);
    assert_int_equal(j, 1);
    assert_string_equal(gossip_disc_endpoint(f.d, 1), "tcp://10.0.0.9:6000");
    /* a non-neighbour is found too (it may become one in a schedule) */
    assert_int_equal(s_offer(&f, "10.0.0.3", 2, 5002, S_RUN, NULL, 110, &j), GOSSIP_DISC_FOUND);
    assert_int_equal(j, 2);
    assert_int_equal(s_count(f.log, "all neighbours found"), 0);
    assert_int_equal(s_offer(&f, "10.0.0.4", 3, 5003, S_RUN, NULL, 110, &j), GOSSIP_DISC_FOUND);
    assert_int_equal(s_count(f.log, "all neighbours found"), 1);
    assert_int_equal(gossip_disc_missing(f.d, miss, sizeof miss), 0);
    assert_string_equal(miss, "");
    gossip_disc_stats st;
    gossip_disc_stats_get(f.d, &st);
    assert_int_equal(st.moved, 1);
    assert_int_equal(st.contested, 4);
    assert_int_equal(st.accepted, 6); /* found 3, refreshed 2, moved 1 */
    s_free(&f);
}

/* Two announcers of rank 1: the spoofer first (believed), the real node
 * second (kept as the alternative).  The spoofer's endpoint does not
 * answer: gossip_disc_unanswered moves to the other; the spoofer, still
 * announcing, stays the alternative and takes nothing back while the
 * believed one answers.  Without an alternative, or one silent for
 * silent_s, nothing moves. */
static void test_two_announcers(void **state)
{
    (void)state;
    s_fix f = s_fixture(0, NULL);
    int j;
    assert_int_equal(gossip_disc_unanswered(f.d, 1, 99, 3), GOSSIP_DISC_NOTHING);
    assert_int_equal(s_offer(&f, "10.0.0.66", 1, 6666, S_RUN, NULL, 100, &j), GOSSIP_DISC_FOUND);
    assert_int_equal(gossip_disc_unanswered(f.d, 1, 100.5, 3), GOSSIP_DISC_NOTHING);
    assert_int_equal(s_offer(&f, "10.0.0.2", 1, 5001, S_RUN, NULL, 101, &j), GOSSIP_DISC_NOTHING);
    assert_string_equal(gossip_disc_endpoint(f.d, 1), "tcp://10.0.0.66:6666");
    assert_int_equal(gossip_disc_unanswered(f.d, 1, 103, 3), GOSSIP_DISC_MOVED);
    assert_string_equal(gossip_disc_endpoint(f.d, 1), "tcp://10.0.0.2:5001");
    assert_int_equal(s_count(f.log, "tcp://10.0.0.66:6666 did not answer within 3.0 s; trying "
                                    "tcp://10.0.0.2:5001"), 1);
    /* the spoofer keeps announcing: not believed again by itself */
    for (int k = 0; k < 3; k++) {
        assert_int_equal(s_offer(&f, "10.0.0.2", 1, 5001, S_RUN, NULL, 104 + k, &j),
                         GOSSIP_DISC_NOTHING);
        assert_int_equal(s_offer(&f, "10.0.0.66", 1, 6666, S_RUN, NULL, 104 + k, &j),
                         GOSSIP_DISC_NOTHING);
    }
    assert_string_equal(gossip_disc_endpoint(f.d, 1), "tcp://10.0.0.2:5001");
    /* the other rank's table is untouched; an alternative silent too long is not taken */
    assert_int_equal(gossip_disc_unanswered(f.d, 3, 107, 3), GOSSIP_DISC_NOTHING);
    assert_int_equal(s_offer(&f, "10.0.0.2", 1, 5001, S_RUN, NULL, 110, &j), GOSSIP_DISC_NOTHING);
    assert_int_equal(gossip_disc_unanswered(f.d, 1, 112, 3), GOSSIP_DISC_NOTHING);
    assert_string_equal(gossip_disc_endpoint(f.d, 1), "tcp://10.0.0.2:5001");
    gossip_disc_stats st;
    gossip_disc_stats_get(f.d, &st);
    assert_int_equal(st.unanswered, 1);
    assert_int_equal(st.moved, 1);
    s_free(&f);
}

static void test_ignored(void **state)
{
    (void)state;
    s_fix f = s_fixture(0, NULL);
    int j;
    /* another run: ignored, logged once per sender */
    for (int k = 0; k < 4; k++)
        assert_int_equal(s_offer(&f, "10.0.0.5", 1, 7000, S_RUN + 1, NULL, k, &j),
                         GOSSIP_DISC_NOTHING);
    assert_int_equal(s_offer(&f, "10.0.0.6", 3, 7000, S_RUN + 1, NULL, 5, &j),
                     GOSSIP_DISC_NOTHING);
    assert_int_equal(s_count(f.log, "another run"), 2);
    assert_string_equal(gossip_disc_endpoint(f.d, 1), "");
    /* another version of the codec counts as another run */
    uint8_t buf[GOSSIP_DISC_BYTES_KEY];
    gossip_disc_msg m = {S_RUN, 1, 7000, 0, {0}};
    size_t len = gossip_disc_encode(&m, buf);
    buf[4] = 9;
    assert_int_equal(gossip_disc_offer(f.d, "10.0.0.7", buf, len, 6, &j), GOSSIP_DISC_NOTHING);
    assert_int_equal(s_count(f.log, "another lpgossip version"), 1);
    /* our own rank announced by someone else */
    assert_int_equal(s_offer(&f, "10.0.0.8", 0, 7000, S_RUN, NULL, 7, &j), GOSSIP_DISC_NOTHING);
    assert_int_equal(s_count(f.log, "also announces rank 0 (ours)"), 1);
    /* a rank outside the topology, junk: malformed, logged a few times */
    assert_int_equal(s_offer(&f, "10.0.0.8", 4, 7000, S_RUN, NULL, 8, &j), GOSSIP_DISC_NOTHING);
    const uint8_t junk[8] = {'L', 'P', 'G', 'D', 1, 0, 'x', 'x'};
    for (int k = 0; k < 10; k++)
        assert_int_equal(gossip_disc_offer(f.d, "10.0.0.8", junk, sizeof junk, 9, &j),
                         GOSSIP_DISC_NOTHING);
    assert_int_equal(s_count(f.log, "ignored a beacon from 10.0.0.8"), 5);
    gossip_disc_stats st;
    gossip_disc_stats_get(f.d, &st);
    assert_int_equal(st.foreign, 6);
    assert_int_equal(st.malformed, 11);
    assert_int_equal(st.contested, 1);
    assert_int_equal(st.accepted, 0);
    char miss[256];
    assert_int_equal(gossip_disc_missing(f.d, miss, sizeof miss), 2);
    s_free(&f);
}

static void test_curve_keys(void **state)
{
    (void)state;
    uint8_t pub[4][32];
    s_fix f = s_fixture(1, pub);
    int j;
    /* no key, or rank 3's key claiming rank 1: ignored, logged once per sender */
    assert_int_equal(s_offer(&f, "10.0.0.2", 1, 5001, S_RUN, NULL, 1, &j), GOSSIP_DISC_NOTHING);
    assert_int_equal(s_offer(&f, "10.0.0.9", 1, 5009, S_RUN, pub[3], 1, &j), GOSSIP_DISC_NOTHING);
    assert_int_equal(s_offer(&f, "10.0.0.9", 1, 5009, S_RUN, pub[3], 2, &j), GOSSIP_DISC_NOTHING);
    assert_int_equal(s_count(f.log, "no CURVE public key"), 1);
    assert_int_equal(s_count(f.log, "is not the one"), 1);
    assert_string_equal(gossip_disc_endpoint(f.d, 1), "");
    /* the listed key */
    assert_int_equal(s_offer(&f, "10.0.0.2", 1, 5001, S_RUN, pub[1], 3, &j), GOSSIP_DISC_FOUND);
    assert_string_equal(gossip_disc_endpoint(f.d, 1), "tcp://10.0.0.2:5001");
    gossip_disc_stats st;
    gossip_disc_stats_get(f.d, &st);
    assert_int_equal(st.bad_key, 3);
    assert_int_equal(st.accepted, 1);
    s_free(&f);
}

static void test_bad_config(void **state)
{
    (void)state;
    char err[256];
    topo *t = topo_generate("complete", 2, 0, 0, err, sizeof err);
    gossip_disc_config c;
    gossip_disc_config_default(&c);
    c.offline = 1;
    c.tcp_port = 0;
    assert_null(gossip_disc_new(t, 0, &c, err, sizeof err));
    assert_non_null(strstr(err, "no valid TCP port"));
    c.tcp_port = 5000;
    assert_null(gossip_disc_new(t, 2, &c, err, sizeof err));
    assert_non_null(strstr(err, "rank 2 outside"));
    topo_destroy(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_found_contested_moved),
        cmocka_unit_test(test_two_announcers),
        cmocka_unit_test(test_ignored),
        cmocka_unit_test(test_curve_keys),
        cmocka_unit_test(test_bad_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

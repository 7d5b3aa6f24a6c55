/* fuzz_codec — libFuzzer target: arbitrary bytes into the gossip decoder.
 *
 * Decodes against a fixed small layout (4 tensors), in validate-only and
 * full mode; both must agree, and a message that decodes is applied to a
 * buffer (indices in range) and re-encoded from its decoded form.
 * Built and run by scripts/fuzz.sh.
 */
#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gossip/gossip_codec.h"
#include "nn/nn_core.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static nn_arena       s_layout;
static gossip_payload s_payload;
static float         *s_dst;
static int            s_ready;

static void s_init(void)
{
    nn_arena_init(&s_layout);
    nn_arena_add(&s_layout, "a", 1, (int[]){ 7 });
    nn_arena_add(&s_layout, "b", 2, (int[]){ 3, 5 });
    nn_arena_add(&s_layout, "c", 1, (int[]){ 600 });
    nn_arena_add(&s_layout, "d", 1, (int[]){ 1 });
    gossip_payload_init(&s_payload, &s_layout);
    s_dst = nn_xcalloc(s_layout.numel, sizeof *s_dst);
    s_ready = 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!s_ready)
        s_init();
    char err[512];
    gossip_header h;
    int rc1 = gossip_msg_decode(data, size, &s_layout, &h, NULL, err, sizeof err);
    int rc2 = gossip_msg_decode(data, size, &s_layout, &h, &s_payload, err, sizeof err);
    if (rc1 != rc2)
        abort();
    if (rc2 == 0) {
        memset(s_dst, 0, s_layout.numel * sizeof *s_dst);
        gossip_payload_add(&s_payload, &s_layout, s_dst);
    }
    return 0;
}

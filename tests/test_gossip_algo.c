/* test_gossip_algo — the gossip algorithms (gossip_node, gossip_sim).
 *
 * Consensus with lr = 0 on every paper/shipped topology for dpsgd (SGP),
 * choco and deepsqueeze, with and without compression: the de-biased
 * z_i = x_i/psi_i of every node reaches the average of the initial vectors,
 * and the total mass sum_i x_i (and sum_i psi_i = n) is kept every round.
 * Distributed least squares reaches the global optimum with Choco + top-k +
 * q8.  Public copies stay bit-identical between owner and holders.  Message
 * handling: early messages, duplicates, strangers, stale, byte counters.
 * DGC and +deflate reach consensus with choco; eSGD's residual decay
 * follows e = B*(v - c) exactly; momentum-factor masking zeroes exactly the
 * coordinates a message carried; options an algorithm cannot honour are
 * refused at creation.
 *
 * Topologies come from the shipped topologies/NAME.yaml (topo_load) when the
 * file exists, otherwise they are built by hand with the paper weights:
 * directed rings 1/2 self + 1/2 predecessor, undirected ring 1/3, 4x4 torus
 * 1/5, complete 1/4, exponential graph with 1/4 to self and i+1, i+2, i+4,
 * the one-peer exponential schedule i -> i + 2^(t mod 3) with 1/2, and a
 * star whose hub splits its mass 8 ways and leaves 2 ways: column but not
 * row stochastic, so push-sum is needed.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/tk.h"
#include "tests/tk_gossip.h"

#include "gossip/gossip_codec.h"
#include "gossip/gossip_node.h"
#include "gossip/gossip_sim.h"
#include "nn/nn_core.h"
#include "nn/nn_optim.h"
#include "topology/topo.h"

static const char *s_topos[] = { "ring8", "ring16", "torus4x4", "ring8-undirected",
                                 "exp8", "complete4", "onepeer-exp8", "star8" };
#define S_NTOPOS (sizeof s_topos / sizeof s_topos[0])

/* ---- consensus ---------------------------------------------------------- */

typedef struct {
    gossip_algo algo;
    const char *comp;
    double      eta;
    int         rounds;
    double      tol;       /* max |z_i - avg| at the end */
    int         big;       /* tk_gossip_layout_of(big) */
    uint64_t    ipe;       /* iterations per epoch (dgc warm-up) */
} s_case;

/* Runs one case; returns the final max error, checks mass every round. */
static double s_consensus(const char *tname, const s_case *c)
{
    char err[512];
    topo *t = tk_gossip_topo(tname);
    nn_arena L;
    tk_gossip_layout_of(&L, c->big);
    size_t d = L.numel;
    int n = t->n;
    gossip_config cfg;
    gossip_config_default(&cfg);
    cfg.algo = c->algo;
    snprintf(cfg.compressor, sizeof cfg.compressor, "%s", c->comp);
    cfg.eta = c->eta;
    cfg.push_sum = 1;
    cfg.iters_per_epoch = c->ipe;
    gossip_sim *sim = gossip_sim_new(&cfg, &L, t, err, sizeof err);
    if (!sim)
        fail_msg("%s", err);
    float **x = tk_gossip_vectors(n, d, 1234);
    double *mass = nn_xcalloc(d, sizeof(double)), *avg = nn_xcalloc(d, sizeof(double));
    for (int i = 0; i < n; i++)
        for (size_t k = 0; k < d; k++)
            mass[k] += x[i][k];
    for (size_t k = 0; k < d; k++)
        avg[k] = mass[k] / n;
    double worst_mass = 0.0;
    for (int r = 0; r < c->rounds; r++) {
        if (gossip_sim_step(sim, x, (uint64_t)r, err, sizeof err) < 0)
            fail_msg("%s %s: %s", tname, c->comp, err);
        double psum = 0.0;
        for (int i = 0; i < n; i++)
            psum += gossip_node_psi(gossip_sim_node(sim, i));
        if (fabs(psum - n) > 1e-9 * n)
            fail_msg("%s %s round %d: sum psi = %.12g, expected %d", tname, c->comp, r, psum, n);
        for (size_t k = 0; k < d; k++) {
            double s = 0.0;
            for (int i = 0; i < n; i++)
                s += x[i][k];
            double e = fabs(s - mass[k]);
            worst_mass = e > worst_mass ? e : worst_mass;
        }
    }
    /* float32 arithmetic: the mass drifts by rounding only */
    if (worst_mass > 1e-3)
        fail_msg("%s %s/%s: mass not conserved: max |sum_i x_i - initial| = %g",
                 tname, gossip_algo_name(c->algo), c->comp, worst_mass);
    double maxerr = 0.0;
    float *z = nn_xcalloc(d, sizeof(float));
    for (int i = 0; i < n; i++) {
        gossip_node_debias(gossip_sim_node(sim, i), x[i], z);
        for (size_t k = 0; k < d; k++) {
            double e = fabs(z[k] - avg[k]);
            maxerr = e > maxerr ? e : maxerr;
        }
    }
    free(z);
    free(mass);
    free(avg);
    tk_gossip_vectors_free(x, n);
    gossip_sim_destroy(&sim);
    nn_arena_free(&L);
    topo_destroy(&t);
    return maxerr;
}

/* Every case on every topology (half of them in quick mode), or on the
 * topologies named in `only` (NULL-terminated) when it is not NULL. */
static void s_run_cases_on(const s_case *cases, size_t ncases, const char *const *only)
{
    for (size_t ti = 0; ti < S_NTOPOS; ti++) {
        int listed = !only;
        for (size_t k = 0; only && only[k]; k++)
            listed |= !strcmp(only[k], s_topos[ti]);
        if (!listed || (tk_quick() && ti % 2))
            continue;
        for (size_t ci = 0; ci < ncases; ci++) {
            double e = s_consensus(s_topos[ti], &cases[ci]);
            printf("  consensus %-17s %-12s %-14s eta %-5g rounds %5d: max |z-avg| = %.2e (tol %.0e)\n",
                   s_topos[ti], gossip_algo_name(cases[ci].algo), cases[ci].comp, cases[ci].eta,
                   cases[ci].rounds, e, cases[ci].tol);
            if (!(e <= cases[ci].tol))
                fail_msg("consensus on %s with %s/%s: max |z - avg| = %g > %g", s_topos[ti],
                         gossip_algo_name(cases[ci].algo), cases[ci].comp, e, cases[ci].tol);
        }
    }
}

static void s_run_cases(const s_case *cases, size_t ncases)
{
    s_run_cases_on(cases, ncases, NULL);
}

static void test_consensus_uncompressed(void **state)
{
    (void)state;
    static const s_case cases[] = {
        { GOSSIP_DPSGD, "identity", 1.0, 1500, 1e-5, 0, 0 },
        { GOSSIP_CHOCO, "identity", 1.0, 1500, 1e-5, 0, 0 },
        { GOSSIP_DEEPSQUEEZE, "identity", 1.0, 1500, 1e-5, 0, 0 },
    };
    s_run_cases(cases, sizeof cases / sizeof cases[0]);
}

static void test_consensus_compressed(void **state)
{
    (void)state;
    /* Choco compresses differences: the error vanishes, convergence is to
     * float precision.  DeepSqueeze compresses the model itself: with a
     * constant eta it settles at a floor proportional to eta times the
     * compression error (initial spread max|x - avg| is about 3). */
    static const s_case cases[] = {
        { GOSSIP_CHOCO, "topk:0.1+q8", 0.15, 4000, 1e-4, 0, 0 },
        { GOSSIP_DEEPSQUEEZE, "q8", 0.5, 1500, 1e-2, 0, 0 },
    };
    s_run_cases(cases, sizeof cases / sizeof cases[0]);
}

/* DGC and the lossless pass with choco: as top-k, the error vanishes.
 * The layout has a 300-value tensor, so DGC samples a threshold there;
 * the warm-up case starts at 25% density and reaches 10% after 3 epochs
 * of 100 rounds.  Same tolerance as topk:0.1+q8 above, on the 8-node
 * graphs: a directed ring, column-stochastic ones (push-sum) and the
 * time-varying one-peer schedule. */
static void test_consensus_dgc_deflate(void **state)
{
    (void)state;
    static const s_case cases[] = {
        { GOSSIP_CHOCO, "dgc:0.1+q8", 0.15, 4000, 1e-4, 1, 0 },
        { GOSSIP_CHOCO, "topk:0.1+q8+deflate", 0.15, 4000, 1e-4, 1, 0 },
        { GOSSIP_CHOCO, "dgc:0.1,warmup=3+q8+deflate", 0.15, 4000, 1e-4, 1, 100 },
    };
    static const char *const only[] = { "ring8", "exp8", "onepeer-exp8", "star8", NULL };
    s_run_cases_on(cases, sizeof cases / sizeof cases[0], only);
}

/* DeepSqueeze with top-k on the fixed graphs; on the one-peer schedule its
 * floor is about 0.7 (see docs/gossip.md), so it is not asserted there.
 * With eSGD's residual decay (rdecay=0.9) small coordinates are never
 * amplified past the sent ones, so they stay unsent: the floor is about
 * 0.2-0.3 instead of 0.03-0.06 (measured); asserted only to stay bounded. */
static void test_consensus_deepsqueeze_topk(void **state)
{
    (void)state;
    static const s_case cases[] = {
        { GOSSIP_DEEPSQUEEZE, "topk:0.1+q8", 0.02, 5000, 0.1, 0, 0 },
        { GOSSIP_DEEPSQUEEZE, "topk:0.1,rdecay=0.9+q8", 0.02, 5000, 1.0, 0, 0 },
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (size_t ti = 0; ti < S_NTOPOS; ti++) {
            const s_case *c = &cases[ci];
            if ((tk_quick() && ti % 2) || !strcmp(s_topos[ti], "onepeer-exp8"))
                continue;
            double e = s_consensus(s_topos[ti], c);
            printf("  consensus %-17s deepsqueeze  %-14s eta %-5g rounds %5d: max |z-avg| = %.2e (tol %.0e)\n",
                   s_topos[ti], c->comp, c->eta, c->rounds, e, c->tol);
            if (!(e <= c->tol))
                fail_msg("deepsqueeze %s consensus on %s: %g > %g", c->comp, s_topos[ti], e, c->tol);
        }
}

/* ---- optimization: distributed least squares ---------------------------- */

/* Solves the p x p system M y = r (double, Gaussian elimination with
 * partial pivoting); M and r are overwritten. */
static void s_solve(double *M, double *r, int p)
{
    for (int c = 0; c < p; c++) {
        int piv = c;
        for (int i = c + 1; i < p; i++)
            if (fabs(M[i * p + c]) > fabs(M[piv * p + c]))
                piv = i;
        for (int j = 0; j < p; j++) {
            double t = M[c * p + j];
            M[c * p + j] = M[piv * p + j];
            M[piv * p + j] = t;
        }
        double t = r[c];
        r[c] = r[piv];
        r[piv] = t;
        for (int i = c + 1; i < p; i++) {
            double f = M[i * p + c] / M[c * p + c];
            for (int j = c; j < p; j++)
                M[i * p + j] -= f * M[c * p + j];
            r[i] -= f * r[c];
        }
    }
    for (int c = p - 1; c >= 0; c--) {
        for (int j = c + 1; j < p; j++)
            r[c] -= M[c * p + j] * r[j];
        r[c] /= M[c * p + c];
    }
}

/* Node i minimizes f_i(x) = ||A_i x - b_i||^2 / (2m) with its own A_i, b_i
 * (different b_i per node: non-IID).  The optimum of sum_i f_i comes from
 * the normal equations.  Choco with topk:0.1+q8 on ring8 and a decaying
 * learning rate 0.1/(1 + t/30) must bring every node's de-biased z_i within
 * 1% (relative l2) of it in 6000 rounds (measured 2e-3). */
static void test_least_squares_choco(void **state)
{
    (void)state;
    enum { N = 8, M = 40, P = 24 };

    char err[512];
    topo *t = tk_gossip_topo("ring8");
    nn_arena L;
    nn_arena_init(&L);
    nn_arena_add(&L, "w", 1, (int[]){ 20 });
    nn_arena_add(&L, "b", 1, (int[]){ 4 });
    nn_arena_alloc(&L);
    static double A[N][M][P], b[N][M];
    nn_rng r;
    nn_rng_seed(&r, 99);
    double MtM[P * P] = { 0 }, Mtb[P] = { 0 }, xtrue[P];
    for (int p = 0; p < P; p++)
        xtrue[p] = nn_rng_normal(&r);
    for (int i = 0; i < N; i++)
        for (int m = 0; m < M; m++) {
            b[i][m] = nn_rng_normal(&r) + 0.5 * i; /* noise, non-IID shift */
            for (int p = 0; p < P; p++) {
                A[i][m][p] = nn_rng_normal(&r);
                b[i][m] += A[i][m][p] * xtrue[p];
            }
            for (int p = 0; p < P; p++) {
                Mtb[p] += A[i][m][p] * b[i][m];
                for (int q = 0; q < P; q++)
                    MtM[p * P + q] += A[i][m][p] * A[i][m][q];
            }
        }
    s_solve(MtM, Mtb, P); /* Mtb = x* */
    double xs_norm = 0.0;
    for (int p = 0; p < P; p++)
        xs_norm += Mtb[p] * Mtb[p];
    xs_norm = sqrt(xs_norm);

    gossip_config cfg;
    gossip_config_default(&cfg);
    cfg.algo = GOSSIP_CHOCO;
    snprintf(cfg.compressor, sizeof cfg.compressor, "topk:0.1+q8");
    cfg.eta = 0.15;
    gossip_sim *sim = gossip_sim_new(&cfg, &L, t, err, sizeof err);
    if (!sim)
        fail_msg("%s", err);
    float *x[N], z[P];
    for (int i = 0; i < N; i++)
        x[i] = nn_xcalloc(P, sizeof(float)); /* identical start x0 = 0 */
    int rounds = 6000;
    for (int it = 0; it < rounds; it++) {
        double lr = 0.1 / (1.0 + it / 30.0); /* decaying: removes the O(lr) bias */
        for (int i = 0; i < N; i++) {
            gossip_node_debias(gossip_sim_node(sim, i), x[i], z);
            double g[P] = { 0 };
            for (int m = 0; m < M; m++) {
                double res = -b[i][m];
                for (int p = 0; p < P; p++)
                    res += A[i][m][p] * z[p];
                for (int p = 0; p < P; p++)
                    g[p] += A[i][m][p] * res / M;
            }
            for (int p = 0; p < P; p++)
                x[i][p] -= (float)(lr * g[p]);
        }
        if (gossip_sim_step(sim, x, (uint64_t)it, err, sizeof err) < 0)
            fail_msg("%s", err);
    }
    double worst = 0.0;
    for (int i = 0; i < N; i++) {
        gossip_node_debias(gossip_sim_node(sim, i), x[i], z);
        double e = 0.0;
        for (int p = 0; p < P; p++)
            e += (z[p] - Mtb[p]) * (z[p] - Mtb[p]);
        e = sqrt(e) / xs_norm;
        worst = e > worst ? e : worst;
    }
    printf("  least squares ring8 choco topk:0.1+q8: max_i ||z_i - x*|| / ||x*|| = %.2e (tol 1e-2)\n", worst);
    assert_true(worst <= 1e-2);
    for (int i = 0; i < N; i++)
        free(x[i]);
    gossip_sim_destroy(&sim);
    nn_arena_free(&L);
    topo_destroy(&t);
}

/* ---- public copies stay bit-identical ------------------------------------ */

static void s_bit_identity(const char *tname, const char *comp)
{
    char err[512];
    topo *t = tk_gossip_topo(tname);
    nn_arena L;
    tk_gossip_layout_of(&L, 1);
    gossip_config cfg;
    gossip_config_default(&cfg);
    cfg.algo = GOSSIP_CHOCO;
    snprintf(cfg.compressor, sizeof cfg.compressor, "%s", comp);
    cfg.eta = 0.1;
    gossip_sim *sim = gossip_sim_new(&cfg, &L, t, err, sizeof err);
    if (!sim)
        fail_msg("%s", err);
    float **x = tk_gossip_vectors(t->n, L.numel, 5);
    nn_rng r;
    nn_rng_seed(&r, 6);
    for (int it = 0; it < 300; it++) {
        for (int i = 0; i < t->n; i++) /* a noisy "local step" */
            for (size_t k = 0; k < L.numel; k++)
                x[i][k] += 0.01f * nn_rng_normal(&r);
        if (gossip_sim_step(sim, x, (uint64_t)it, err, sizeof err) < 0)
            fail_msg("%s", err);
    }
    int pairs = 0;
    for (int i = 0; i < t->n; i++)
        for (int j = 0; j < t->n; j++) {
            const float *held = gossip_node_xhat_of(gossip_sim_node(sim, j), i);
            if (!held)
                continue;
            const float *own = gossip_node_xhat_self(gossip_sim_node(sim, i));
            assert_memory_equal(own, held, L.numel * sizeof(float));
            pairs++;
        }
    assert_true(pairs > 0);
    tk_gossip_vectors_free(x, t->n);
    gossip_sim_destroy(&sim);
    nn_arena_free(&L);
    topo_destroy(&t);
}

static void test_public_copies_bit_identical(void **state)
{
    (void)state;
    s_bit_identity("ring8", "topk:0.1+q8");
    s_bit_identity("torus4x4", "qsgd:16");
    s_bit_identity("onepeer-exp8", "randk:0.2+q8");
    s_bit_identity("star8", "topk:0.05");
    s_bit_identity("ring8", "dgc:0.1+q8+deflate");
    s_bit_identity("exp8", "dgc:0.05");
    s_bit_identity("torus4x4", "q8+deflate");
}

/* ---- message handling ---------------------------------------------------- */

/* What admission and then gossip_node_receive_decoded make of msg, its
 * header decoded first without a layout (as the transport does). */
static gossip_recv_code s_code(gossip_node *g, const uint8_t *msg, size_t len)
{
    char err[512];
    gossip_header h;
    assert_int_equal(gossip_msg_decode_header(msg, len, NULL, &h, err, sizeof err), 0);
    gossip_recv_code c = gossip_node_admit(g, &h, err, sizeof err);
    return c != GOSSIP_RECV_OK ? c : gossip_node_receive_decoded(g, &h, msg, len, err, sizeof err);
}

static void test_messages_and_counters(void **state)
{
    (void)state;
    char err[512];
    topo *t = tk_gossip_topo("ring8");
    nn_arena L;
    tk_gossip_layout(&L);
    gossip_config cfg;
    gossip_config_default(&cfg);
    cfg.algo = GOSSIP_CHOCO;
    snprintf(cfg.compressor, sizeof cfg.compressor, "topk:0.1+q8");
    cfg.eta = 0.1;
    gossip_node *g[8];
    for (int i = 0; i < 8; i++) {
        g[i] = gossip_node_new(&cfg, &L, t, i, err, sizeof err);
        assert_non_null(g[i]);
    }
    float **x = tk_gossip_vectors(8, L.numel, 3);
    /* node 0 prepares t = 0; node 1 receives it */
    assert_int_equal(gossip_node_prepare(g[0], x[0], 0, err, sizeof err), 0);
    assert_int_equal(gossip_node_ndest(g[0]), 1);
    int to = -1;
    const uint8_t *msg;
    size_t len = gossip_node_outbox(g[0], 0, &to, &msg);
    assert_true(len > GOSSIP_HEADER_BYTES);
    assert_int_equal(to, 1);
    assert_int_equal(gossip_node_outbox(g[0], 1, &to, &msg), 0);
    gossip_stats st;
    gossip_node_stats(g[0], &st);
    assert_int_equal(st.bytes_sent, len);
    uint8_t *msg0 = nn_xmalloc(len);
    size_t len0 = len;
    memcpy(msg0, msg, len);
    assert_false(gossip_node_ready(g[1], 0));
    assert_int_equal(gossip_node_receive(g[1], msg, len, err, sizeof err), 0);
    assert_true(gossip_node_ready(g[1], 0));
    /* duplicate */
    assert_int_equal(gossip_node_receive(g[1], msg, len, err, sizeof err), -1);
    assert_non_null(strstr(err, "duplicate"));
    assert_int_equal(s_code(g[1], msg, len), GOSSIP_RECV_DUPLICATE);
    /* node 2 is not an out-neighbour of node 0 */
    assert_int_equal(gossip_node_receive(g[2], msg, len, err, sizeof err), -1);
    assert_non_null(strstr(err, "not an in-neighbour"));
    assert_int_equal(s_code(g[2], msg, len), GOSSIP_RECV_NOT_NEIGHBOUR);
    assert_true(gossip_recv_refused(GOSSIP_RECV_NOT_NEIGHBOUR));
    assert_false(gossip_recv_refused(GOSSIP_RECV_IGNORED));
    /* a node cannot receive its own message */
    assert_int_equal(gossip_node_receive(g[0], msg, len, err, sizeof err), -1);
    /* corrupted bytes are rejected with the codec's reason */
    uint8_t *bad = nn_xmalloc(len);
    memcpy(bad, msg, len);
    bad[0] ^= 0xff;
    assert_int_equal(gossip_node_receive(g[1], bad, len, err, sizeof err), -1);
    assert_non_null(strstr(err, "magic"));
    free(bad);
    /* mix before prepare is refused; after prepare it works */
    assert_int_equal(gossip_node_mix(g[1], x[1], 0, err, sizeof err), -1);
    assert_non_null(strstr(err, "not prepared"));
    assert_int_equal(gossip_node_prepare(g[1], x[1], 0, err, sizeof err), 0);
    assert_int_equal(gossip_node_prepare(g[1], x[1], 0, err, sizeof err), -1);
    assert_int_equal(gossip_node_mix(g[1], x[1], 0, err, sizeof err), 0);
    assert_int_equal(gossip_node_iter(g[1]), 1);
    /* iteration 0 again, now that node 1 is at 1: a replay, refused by
     * admission (the sender's sequence), whatever the slots hold */
    assert_int_equal(gossip_node_receive(g[1], msg0, len0, err, sizeof err), -1);
    assert_non_null(strstr(err, "replayed"));
    assert_int_equal(s_code(g[1], msg0, len0), GOSSIP_RECV_DUPLICATE);
    /* the window (choco: a late update is never of no use) */
    assert_int_equal(gossip_node_window(g[1], -1, 0), GOSSIP_WIN_IN);
    assert_int_equal(gossip_node_window(g[1], -1, GOSSIP_WINDOW), GOSSIP_WIN_IN);
    assert_int_equal(gossip_node_window(g[1], -1, 1 + GOSSIP_WINDOW), GOSSIP_WIN_AHEAD);
    free(msg0);
    gossip_node_stats(g[1], &st);
    assert_int_equal(st.iter_bytes_recv, len);
    assert_int_equal(st.bytes_recv, len);
    /* node 0 mixes t = 0 without node 7's message: refused */
    assert_false(gossip_node_ready(g[0], 0));
    assert_int_equal(gossip_node_mix(g[0], x[0], 0, err, sizeof err), -1);
    /* early message: node 0 runs t = 1 (after a fake t = 0 from node 7), node 1
     * receives t = 1 while at 1 -- and a message for t = 1 + WINDOW is refused */
    assert_int_equal(gossip_node_prepare(g[7], x[7], 0, err, sizeof err), 0);
    len = gossip_node_outbox(g[7], 0, &to, &msg);
    assert_int_equal(to, 0);
    assert_int_equal(gossip_node_receive(g[0], msg, len, err, sizeof err), 0);
    assert_int_equal(gossip_node_mix(g[0], x[0], 0, err, sizeof err), 0);
    assert_int_equal(gossip_node_prepare(g[0], x[0], 1, err, sizeof err), 0);
    len = gossip_node_outbox(g[0], 0, &to, &msg);
    assert_int_equal(gossip_node_receive(g[1], msg, len, err, sizeof err), 0);
    assert_true(gossip_node_ready(g[1], 1));
    /* a node at iteration 0 receiving iteration 1: on a FIFO connection that
     * proves node 0's update of iteration 0 lost, so (choco) the copy waits
     * for node 0's RESYNC, which then holds both updates */
    gossip_node *late = gossip_node_new(&cfg, &L, t, 1, err, sizeof err);
    assert_false(gossip_node_ready(late, 0));
    assert_int_equal(gossip_node_receive(late, msg, len, err, sizeof err), 0);
    assert_false(gossip_node_ready(late, 0));
    assert_true(gossip_node_peer_state(late, 0) & GOSSIP_PEER_WANTS_RESYNC);
    const uint8_t *rs;
    size_t rlen = gossip_node_resync_msg(g[0], 1, &rs);
    assert_int_equal(gossip_node_receive(late, rs, rlen, err, sizeof err), 0);
    assert_true(gossip_node_ready(late, 0));
    assert_true(gossip_node_ready(late, 1));
    assert_memory_equal(gossip_node_xhat_of(late, 0), gossip_node_xhat_self(g[0]),
                        L.numel * sizeof(float));
    gossip_node_destroy(&late);
    for (int i = 0; i < 8; i++)
        gossip_node_destroy(&g[i]);
    assert_null(g[0]);
    gossip_node_destroy(&g[0]); /* safe on NULL */
    tk_gossip_vectors_free(x, 8);
    nn_arena_free(&L);
    topo_destroy(&t);
}

/* Totals of the simulator equal the encoded sizes times destinations, with
 * and without the lossless pass (bytes as sent; bytes_sent_plain counts
 * them before deflate). */
static void s_byte_counters(const char *comp)
{
    char err[512];
    topo *t = tk_gossip_topo("torus4x4");
    nn_arena L;
    tk_gossip_layout_of(&L, 1);
    gossip_config cfg;
    gossip_config_default(&cfg);
    cfg.algo = GOSSIP_CHOCO;
    snprintf(cfg.compressor, sizeof cfg.compressor, "%s", comp);
    cfg.eta = 0.1;
    gossip_sim *sim = gossip_sim_new(&cfg, &L, t, err, sizeof err);
    float **x = tk_gossip_vectors(16, L.numel, 8);
    for (int i = 0; i < 16; i++) /* multiples of 1/4: q8 codes with few values, deflate gains */
        for (size_t k = 0; k < L.numel; k++)
            x[i][k] = roundf(4.0f * x[i][k]) / 4.0f;
    uint64_t expect = 0, recv = 0;
    for (int it = 0; it < 5; it++) {
        for (int i = 0; i < 16; i++) {
            gossip_node *g = gossip_sim_node(sim, i);
            assert_int_equal(gossip_node_prepare(g, x[i], (uint64_t)it, err, sizeof err), 0);
        }
        for (int i = 0; i < 16; i++) {
            int to;
            const uint8_t *msg;
            size_t len;
            assert_int_equal(gossip_node_ndest(gossip_sim_node(sim, i)), 4);
            for (int k = 0; (len = gossip_node_outbox(gossip_sim_node(sim, i), k, &to, &msg)) > 0; k++) {
                gossip_header h;
                assert_int_equal(gossip_msg_decode(msg, len, &L, &h, NULL, err, sizeof err), 0);
                assert_int_equal(h.iter, it);
                expect += len;
                recv += len;
                assert_int_equal(gossip_node_receive(gossip_sim_node(sim, to), msg, len, err, sizeof err), 0);
            }
        }
        for (int i = 0; i < 16; i++)
            assert_int_equal(gossip_node_mix(gossip_sim_node(sim, i), x[i], (uint64_t)it, err, sizeof err), 0);
    }
    assert_int_equal(gossip_sim_bytes_sent(sim), expect);
    uint64_t got = 0;
    for (int i = 0; i < 16; i++) {
        gossip_stats st;
        gossip_node_stats(gossip_sim_node(sim, i), &st);
        got += st.bytes_recv;
    }
    assert_int_equal(got, recv);
    uint64_t sent = 0, plain = 0;
    for (int i = 0; i < 16; i++) {
        gossip_stats st;
        gossip_node_stats(gossip_sim_node(sim, i), &st);
        sent += st.bytes_sent;
        plain += st.bytes_sent_plain;
    }
    assert_int_equal(sent, expect);
    printf("  byte counters %-20s: %llu bytes sent, %llu before deflate\n", comp,
           (unsigned long long)sent, (unsigned long long)plain);
    if (strstr(comp, "deflate"))
        assert_true(plain > sent);
    else
        assert_int_equal(plain, sent);
    tk_gossip_vectors_free(x, 16);
    gossip_sim_destroy(&sim);
    nn_arena_free(&L);
    topo_destroy(&t);
}

static void test_sim_byte_counters(void **state)
{
    (void)state;
    s_byte_counters("topk:0.1+q8");
    s_byte_counters("q8+deflate");
}

/* Push-sum matters on star8: psi moves away from 1 and x alone is biased. */
static void test_push_sum_needed_on_star(void **state)
{
    (void)state;
    char err[512];
    topo *t = tk_gossip_topo("star8");
    nn_arena L;
    tk_gossip_layout(&L);
    gossip_config cfg;
    gossip_config_default(&cfg);
    cfg.push_sum = 0;
    assert_null(gossip_node_new(&cfg, &L, t, 0, err, sizeof err));
    assert_non_null(strstr(err, "doubly stochastic"));
    cfg.push_sum = 1;
    gossip_sim *sim = gossip_sim_new(&cfg, &L, t, err, sizeof err);
    float **x = tk_gossip_vectors(8, L.numel, 9);
    for (int it = 0; it < 50; it++)
        assert_int_equal(gossip_sim_step(sim, x, (uint64_t)it, err, sizeof err), 0);
    double psi0 = gossip_node_psi(gossip_sim_node(sim, 0));
    assert_true(fabs(psi0 - 1.0) > 0.5); /* hub: psi -> 32/11 */
    tk_gossip_vectors_free(x, 8);
    gossip_sim_destroy(&sim);
    nn_arena_free(&L);
    topo_destroy(&t);
}

/* ---- eSGD residual decay, DGC momentum masking ---------------------------- */

/* Two nodes g[0..2) of the complete graph on 2 (W = 1/2 everywhere) with
 * algorithm a, compressor comp and eta, over tk_gossip_layout_of(L, big); cfg gets
 * their config.  Returns the topology (owned). */
static topo *s_pair_new(gossip_algo a, const char *comp, double eta, int big, gossip_config *cfg,
                        nn_arena *L, gossip_node **g)
{
    char err[512];
    topo *t = topo_generate("complete", 2, 0, 0, err, sizeof err);
    if (!t)
        fail_msg("%s", err);
    tk_gossip_layout_of(L, big);
    gossip_config_default(cfg);
    cfg->algo = a;
    cfg->eta = eta;
    snprintf(cfg->compressor, sizeof cfg->compressor, "%s", comp);
    for (int i = 0; i < 2; i++) {
        g[i] = gossip_node_new(cfg, L, t, i, err, sizeof err);
        if (!g[i])
            fail_msg("%s", err);
    }
    return t;
}

/* Both prepare iteration it. */
static void s_pair_prepare(gossip_node **g, float **x, uint64_t it)
{
    char err[512];
    for (int i = 0; i < 2; i++)
        if (gossip_node_prepare(g[i], x[i], it, err, sizeof err) < 0)
            fail_msg("%s", err);
}

/* Both exchange their prepared messages and mix iteration it. */
static void s_pair_finish(gossip_node **g, float **x, uint64_t it)
{
    char err[512];
    for (int i = 0; i < 2; i++) {
        int to;
        const uint8_t *msg;
        size_t len = gossip_node_outbox(g[i], 0, &to, &msg);
        assert_true(len > 0);
        if (gossip_node_receive(g[to], msg, len, err, sizeof err) < 0)
            fail_msg("%s", err);
    }
    for (int i = 0; i < 2; i++)
        assert_int_equal(gossip_node_mix(g[i], x[i], it, err, sizeof err), 0);
}

/* Frees the pair, its two vectors, the layout and the topology. */
static void s_pair_free(gossip_node **g, float **x, nn_arena *L, topo **t)
{
    tk_gossip_vectors_free(x, 2);
    for (int i = 0; i < 2; i++)
        gossip_node_destroy(&g[i]);
    nn_arena_free(L);
    topo_destroy(t);
}

static void s_pair_round(gossip_node **g, float **x, uint64_t it)
{
    s_pair_prepare(g, x, it);
    s_pair_finish(g, x, it);
}

/* The decoded own message of g (prepared): into p. */
static void s_own_payload(gossip_node *g, const nn_arena *L, gossip_payload *p)
{
    const uint8_t *msg;
    char err[512];
    size_t len = gossip_node_outbox(g, 0, NULL, &msg);
    assert_true(len > 0);
    if (gossip_msg_decode(msg, len, L, NULL, p, err, sizeof err) < 0)
        fail_msg("%s", err);
}

/* DeepSqueeze with topk:F,rdecay=B: e_{t+1} = B * (v_t - c_t) with
 * v_t = x+_t + e_t, c_t the decoded message, in float, bit for bit. */
static void test_rdecay_recurrence(void **state)
{
    (void)state;
    gossip_config cfg;
    nn_arena L;
    gossip_node *g[2];
    topo *t = s_pair_new(GOSSIP_DEEPSQUEEZE, "topk:0.25,rdecay=0.5+q8", 0.3, 0, &cfg, &L, g);
    size_t d = L.numel;
    float **x = tk_gossip_vectors(2, d, 31);
    float *v = nn_xcalloc(d, sizeof *v), *e = nn_xcalloc(d, sizeof *e);
    gossip_payload p;
    gossip_payload_init(&p, &L);
    char name[32];
    for (uint64_t it = 0; it < 5; it++) {
        const float *eb = gossip_node_vec(g[0], 0, name, sizeof name);
        assert_string_equal(name, "e");
        for (size_t k = 0; k < d; k++)
            v[k] = x[0][k] + eb[k];
        s_pair_prepare(g, x, it);
        s_own_payload(g[0], &L, &p);
        memcpy(e, v, d * sizeof *e);
        gossip_payload_sub(&p, &L, e);
        size_t nonzero = 0;
        for (size_t k = 0; k < d; k++) {
            e[k] = 0.5f * e[k];
            nonzero += e[k] != 0.0f;
        }
        assert_memory_equal(gossip_node_vec(g[0], 0, name, sizeof name), e, d * sizeof *e);
        assert_true(nonzero > d / 2); /* unsent coordinates, q8 error on sent ones */
        s_pair_finish(g, x, it);
    }
    printf("  rdecay: deepsqueeze topk:0.25,rdecay=0.5+q8: e = 0.5*(v - c) bit for bit over 5 rounds\n");
    gossip_payload_free(&p);
    free(v);
    free(e);
    s_pair_free(g, x, &L, &t);
}

/* choco dgc: gossip_node_mask_sent zeroes the SGD momentum exactly where
 * the last message carried values (its indices), nothing else; the mask
 * is checkpoint state ("sent"). */
static void test_dgc_momentum_mask(void **state)
{
    (void)state;
    char err[512];
    gossip_config cfg;
    nn_arena L;
    gossip_node *g[2];
    topo *t = s_pair_new(GOSSIP_CHOCO, "dgc:0.05+q8", 0.2, 1, &cfg, &L, g);
    size_t d = L.numel;
    assert_true(gossip_node_masks_momentum(g[0]));
    /* a small SGD with a filled momentum buffer */
    nn_sgd_config sc = nn_sgd_defaults();
    nn_sgd sgd;
    nn_sgd_init(&sgd, &L, &sc);
    float **x = tk_gossip_vectors(2, d, 41), **grad = tk_gossip_vectors(1, d, 42);
    nn_sgd_step(&sgd, x[0], grad[0], 0.1f);
    float *before = nn_xmalloc(d * sizeof *before);
    for (size_t k = 0; k < d; k++)
        assert_true(sgd.mom.data[k] != 0.0f);
    /* nothing prepared yet: nothing masked */
    assert_int_equal(gossip_node_mask_sent(g[0], sgd.mom.data), 0);
    gossip_payload p;
    gossip_payload_init(&p, &L);
    uint8_t *carried = nn_xcalloc(d, 1);
    for (uint64_t it = 0; it < 4; it++) {
        nn_sgd_step(&sgd, x[0], grad[0], 0.1f); /* momentum nonzero again */
        memcpy(before, sgd.mom.data, d * sizeof *before);
        s_pair_round(g, x, it);
        size_t m = gossip_node_mask_sent(g[0], sgd.mom.data);
        char name[32];
        int nv = gossip_node_nvec(g[0]);
        const float *sent = gossip_node_vec(g[0], nv - 1, name, sizeof name);
        assert_string_equal(name, "sent");
        size_t ones = 0;
        for (size_t k = 0; k < d; k++) {
            assert_true(sent[k] == 0.0f || sent[k] == 1.0f);
            ones += sent[k] == 1.0f;
            if (sent[k] == 1.0f)
                assert_true(sgd.mom.data[k] == 0.0f);
            else
                assert_true(sgd.mom.data[k] == before[k]);
        }
        assert_int_equal(m, ones);
        assert_true(ones > 0 && ones < d);
    }
    /* the mask is exactly the message's indices: prepare once more (the
     * message is still in the outbox) and decode it */
    nn_sgd_step(&sgd, x[0], grad[0], 0.1f);
    assert_int_equal(gossip_node_prepare(g[0], x[0], 4, err, sizeof err), 0);
    s_own_payload(g[0], &L, &p);
    size_t total = 0;
    for (size_t b = 0; b < p.nblocks; b++) {
        size_t lo, hi;
        gossip_compressor c;
        gossip_compressor_parse(&c, cfg.compressor, err, sizeof err);
        gossip_compressor_k_range(&c, L.views[b].numel, &lo, &hi);
        assert_in_range(p.blocks[b].k, lo, hi);
        for (size_t i = 0; i < p.blocks[b].k; i++)
            carried[L.views[b].offset + p.blocks[b].idx[i]] = 1;
        total += p.blocks[b].k;
    }
    memcpy(before, sgd.mom.data, d * sizeof *before);
    assert_int_equal(gossip_node_mask_sent(g[0], sgd.mom.data), total);
    for (size_t k = 0; k < d; k++)
        assert_true(carried[k] ? sgd.mom.data[k] == 0.0f : sgd.mom.data[k] == before[k]);
    /* checkpoint: the mask is state; a restored mask must be 0/1 */
    gossip_node_state st;
    gossip_node_export(g[1], &st);
    int nv = gossip_node_nvec(g[1]);
    assert_int_equal(nv, 1 + 1 + 1); /* xhat.self, xhat.0, sent */
    const float *vec[3];
    char name[32];
    float *bad = nn_xcalloc(d, sizeof *bad);
    for (int k = 0; k < nv; k++)
        vec[k] = gossip_node_vec(g[1], k, name, sizeof name);
    bad[3] = 0.5f;
    vec[2] = bad;
    assert_int_equal(gossip_node_import(g[1], &st, vec, err, sizeof err), -1);
    assert_non_null(strstr(err, "'sent'"));
    bad[3] = 1.0f;
    assert_int_equal(gossip_node_import(g[1], &st, vec, err, sizeof err), 0);
    float *zero = nn_xcalloc(d, sizeof *zero);
    assert_int_equal(gossip_node_mask_sent(g[1], zero), 1);
    /* top-k does not mask */
    snprintf(cfg.compressor, sizeof cfg.compressor, "topk:0.05+q8");
    gossip_node *tk = gossip_node_new(&cfg, &L, t, 0, err, sizeof err);
    assert_false(gossip_node_masks_momentum(tk));
    assert_int_equal(gossip_node_prepare(tk, x[0], 0, err, sizeof err), 0);
    assert_int_equal(gossip_node_mask_sent(tk, sgd.mom.data), 0);
    assert_int_equal(gossip_node_nvec(tk), 2);
    /* a dgc receiver refuses a top-k sender whose counts are off its range */
    snprintf(cfg.compressor, sizeof cfg.compressor, "topk:0.5+q8");
    gossip_node *wide = gossip_node_new(&cfg, &L, t, 1, err, sizeof err);
    assert_int_equal(gossip_node_prepare(wide, x[1], 0, err, sizeof err), 0);
    snprintf(cfg.compressor, sizeof cfg.compressor, "dgc:0.05+q8");
    gossip_node *recv = gossip_node_new(&cfg, &L, t, 0, err, sizeof err);
    const uint8_t *msg;
    size_t len = gossip_node_outbox(wide, 0, NULL, &msg);
    assert_int_equal(gossip_node_receive(recv, msg, len, err, sizeof err), -1);
    assert_non_null(strstr(err, "dgc:0.05+q8 gives type 4 with"));
    gossip_node_destroy(&recv);
    gossip_node_destroy(&wide);
    gossip_node_destroy(&tk);
    free(zero);
    free(bad);
    free(carried);
    free(before);
    gossip_payload_free(&p);
    nn_sgd_free(&sgd);
    tk_gossip_vectors_free(grad, 1);
    s_pair_free(g, x, &L, &t);
}

static void test_config_errors(void **state)
{
    (void)state;
    char err[512];
    topo *t = tk_gossip_topo("ring8");
    nn_arena L;
    tk_gossip_layout(&L);
    gossip_config cfg;
    gossip_config_default(&cfg);
    snprintf(cfg.compressor, sizeof cfg.compressor, "topk:0.01");
    assert_null(gossip_node_new(&cfg, &L, t, 0, err, sizeof err));
    assert_non_null(strstr(err, "dpsgd"));
    cfg.algo = GOSSIP_CHOCO;
    cfg.eta = 0.0;
    assert_null(gossip_node_new(&cfg, &L, t, 0, err, sizeof err));
    assert_non_null(strstr(err, "eta"));
    cfg.eta = 0.5;
    snprintf(cfg.compressor, sizeof cfg.compressor, "bogus");
    assert_null(gossip_node_new(&cfg, &L, t, 0, err, sizeof err));
    assert_non_null(strstr(err, "unknown compressor"));
    snprintf(cfg.compressor, sizeof cfg.compressor, "q8");
    assert_null(gossip_node_new(&cfg, &L, t, 8, err, sizeof err));
    assert_non_null(strstr(err, "rank 8"));
    t->sched[0].w[0] = 0.7; /* column 0 sums to 1.2 */
    assert_null(gossip_node_new(&cfg, &L, t, 0, err, sizeof err));
    assert_non_null(strstr(err, "column sum 1.2 at node n0"));
    /* options an algorithm cannot honour */
    t->sched[0].w[0] = 0.5;
    static const struct { gossip_algo a; const char *c; const char *what; } refused[] = {
        { GOSSIP_CHOCO, "topk:0.1,rdecay=0.5", "cannot decay" },
        { GOSSIP_CHOCO, "topk:0.1,rdecay=0.5+q8+deflate", "only deepsqueeze" },
        { GOSSIP_DPSGD, "topk:0.1,rdecay=0.5", "dpsgd sends the whole model" },
        { GOSSIP_DEEPSQUEEZE, "dgc:0.1", "needs choco" },
        { GOSSIP_DPSGD, "dgc:0.1+q8", "dpsgd sends the whole model" },
        { GOSSIP_CHOCO, "dgc:0.1,warmup=2", "iterations per epoch" },
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        cfg.algo = refused[i].a;
        snprintf(cfg.compressor, sizeof cfg.compressor, "%s", refused[i].c);
        err[0] = 0;
        assert_null(gossip_node_new(&cfg, &L, t, 0, err, sizeof err));
        if (!strstr(err, refused[i].what))
            fail_msg("%s with %s: error '%s' lacks '%s'", gossip_algo_name(refused[i].a), refused[i].c, err,
                     refused[i].what);
    }
    cfg.algo = GOSSIP_CHOCO; /* what the same options are fine with */
    cfg.iters_per_epoch = 10;
    snprintf(cfg.compressor, sizeof cfg.compressor, "dgc:0.1,warmup=2+q8+deflate");
    gossip_node *ok = gossip_node_new(&cfg, &L, t, 0, err, sizeof err);
    assert_non_null(ok);
    gossip_node_destroy(&ok);
    cfg.algo = GOSSIP_DEEPSQUEEZE;
    snprintf(cfg.compressor, sizeof cfg.compressor, "topk:0.1,rdecay=0.5+q8");
    ok = gossip_node_new(&cfg, &L, t, 0, err, sizeof err);
    assert_non_null(ok);
    gossip_node_destroy(&ok);
    gossip_algo a;
    assert_int_equal(gossip_algo_parse("sgp", &a, err, sizeof err), 0);
    assert_int_equal(a, GOSSIP_DPSGD);
    assert_int_equal(gossip_algo_parse("choco", &a, err, sizeof err), 0);
    assert_int_equal(a, GOSSIP_CHOCO);
    assert_int_equal(gossip_algo_parse("adam", &a, err, sizeof err), -1);
    nn_arena_free(&L);
    topo_destroy(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_consensus_uncompressed),
        cmocka_unit_test(test_consensus_compressed),
        cmocka_unit_test(test_consensus_dgc_deflate),
        cmocka_unit_test(test_consensus_deepsqueeze_topk),
        cmocka_unit_test(test_least_squares_choco),
        cmocka_unit_test(test_public_copies_bit_identical),
        cmocka_unit_test(test_messages_and_counters),
        cmocka_unit_test(test_sim_byte_counters),
        cmocka_unit_test(test_push_sum_needed_on_star),
        cmocka_unit_test(test_rdecay_recurrence),
        cmocka_unit_test(test_dgc_momentum_mask),
        cmocka_unit_test(test_config_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

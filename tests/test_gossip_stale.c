/* test_gossip_stale — bounded-staleness gossip (gossip_node with
 * cfg.staleness = S > 0, gossip_sim --delays), mostly in the simulator.
 *
 * Consensus (lr = 0) with messages up to S rounds late: SGP (dpsgd with
 * push-sum) reaches the exact average and conserves sum x and sum psi every
 * round once the mass in flight is counted; choco with the catch-up credit
 * reaches the exact average too (identity) or within its compression bound
 * (top-k + q8); deepsqueeze within its quantization bound.  S > 0 without
 * delays, and the in-flight queue with zero delays, are bit-identical to the
 * synchronous path.  The slow node's step pattern, the --delays parser, the
 * configuration checks and the adaptive deadline; SGP's step scale.  SGP
 * over a jammed link: kept shares conserve sum x and sum psi exactly, the
 * stand-ins of lost messages do not.  Choco's deferred updates (no values)
 * keep the copies equal and the exact average; malformed ones are refused.
 * Nodes driven message by message (late, duplicate and replayed messages,
 * late neighbours): test_gossip_late.c.
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

#include "gossip/gossip_link.h"
#include "gossip/gossip_node.h"
#include "gossip/gossip_sim.h"
#include "nn/nn_core.h"
#include "tests/tk_gossip.h"
#include "topology/topo.h"

typedef struct {
    gossip_algo algo;
    const char *comp;
    double      eta;
    int         S;
    const char *delays;
    int         rounds;
    double      tol;        /* max |z_i - avg| / max |avg| at the end */
    int         check_mass; /* SGP: sum x, sum psi (+ in flight) every round */
} s_case;

static gossip_sim *s_sim(const s_case *c, const topo *t, const nn_arena *L)
{
    char err[512];
    gossip_config cfg = tk_gossip_cfg(c->algo, c->comp, c->eta, c->S);
    gossip_sim *sim = gossip_sim_new(&cfg, L, t, err, sizeof err);
    if (!sim)
        fail_msg("%s", err);
    gossip_delays dl;
    if (gossip_delays_parse(c->delays, c->S, &dl, err, sizeof err) < 0 ||
        gossip_sim_set_delays(sim, &dl, 7, err, sizeof err) < 0)
        fail_msg("%s", err);
    return sim;
}

/* Mass check of one SGP round: sum_i x_i + in flight = initial, likewise psi. */
static void s_check_mass(gossip_sim *sim, float **x, const double *mass, size_t d, int n,
                         const char *what, int r)
{
    double *xs = nn_xcalloc(d, sizeof *xs), psum = 0.0;
    gossip_sim_inflight(sim, xs, &psum);
    for (int i = 0; i < n; i++) {
        psum += gossip_node_psi(gossip_sim_node(sim, i));
        for (size_t k = 0; k < d; k++)
            xs[k] += x[i][k];
    }
    if (fabs(psum - n) > 1e-9 * n)
        fail_msg("%s round %d: sum psi + in flight = %.15g, expected %d", what, r, psum, n);
    for (size_t k = 0; k < d; k++)
        if (fabs(xs[k] - mass[k]) > 1e-4)
            fail_msg("%s round %d: sum x + in flight at %zu = %.9g, expected %.9g", what, r, k,
                     xs[k], mass[k]);
    free(xs);
}

/* Runs one case; returns max_i |z_i - avg| / max |avg|. */
static double s_consensus(const char *tname, const s_case *c)
{
    char err[512], what[256];
    topo *t = tk_gossip_topo(tname);
    nn_arena L;
    tk_gossip_layout(&L);
    size_t d = L.numel;
    int n = t->n;
    snprintf(what, sizeof what, "%s %s/%s S=%d %s", tname, gossip_algo_name(c->algo), c->comp, c->S,
             c->delays);
    gossip_sim *sim = s_sim(c, t, &L);
    float **x = tk_gossip_vectors(n, d, 1234);
    double *mass = nn_xcalloc(d, sizeof(double)), amax = 0.0;
    for (int i = 0; i < n; i++)
        for (size_t k = 0; k < d; k++)
            mass[k] += x[i][k];
    for (size_t k = 0; k < d; k++)
        amax = fmax(amax, fabs(mass[k] / n));
    for (int r = 0; r < c->rounds; r++) {
        if (gossip_sim_step(sim, x, (uint64_t)r, err, sizeof err) < 0)
            fail_msg("%s: %s", what, err);
        if (c->check_mass)
            s_check_mass(sim, x, mass, d, n, what, r);
    }
    double maxerr = 0.0;
    float *z = nn_xcalloc(d, sizeof(float));
    for (int i = 0; i < n; i++) {
        gossip_node_debias(gossip_sim_node(sim, i), x[i], z);
        for (size_t k = 0; k < d; k++)
            maxerr = fmax(maxerr, fabs(z[k] - mass[k] / n));
    }
    free(z);
    free(mass);
    tk_gossip_vectors_free(x, n);
    gossip_sim_destroy(&sim);
    nn_arena_free(&L);
    topo_destroy(&t);
    double rel = maxerr / amax;
    printf("  %-50s rounds %4d: max |z-avg|/max|avg| = %.2e (tol %.0e)\n", what, c->rounds, rel, c->tol);
    if (!(rel <= c->tol))
        fail_msg("%s: relative error %g > %g", what, rel, c->tol);
    return rel;
}

static void test_sgp_exact_average(void **state)
{
    (void)state;
    const char *topos[] = { "ring8", "exp8", "onepeer-exp8", "star8", "complete4" };
    for (size_t ti = 0; ti < sizeof topos / sizeof topos[0]; ti++) {
        s_case c = { GOSSIP_DPSGD, "identity", 1.0, 3, "random:3", 2000, 2e-6, 1 };
        s_consensus(topos[ti], &c);
        s_case f = { GOSSIP_DPSGD, "identity", 1.0, 2, "fixed:2", 2000, 5e-6, 1 };
        s_consensus(topos[ti], &f);
    }
    s_case slow = { GOSSIP_DPSGD, "identity", 1.0, 4, "slow:3:0.33", 600, 2e-6, 1 };
    s_consensus("ring8", &slow);
}

static void test_choco_exact_average(void **state)
{
    (void)state;
    const char *topos[] = { "ring8", "exp8", "onepeer-exp8", "complete4" };
    for (size_t ti = 0; ti < sizeof topos / sizeof topos[0]; ti++) {
        s_case c = { GOSSIP_CHOCO, "identity", 0.5, 3, "random:3", 2000, 2e-6, 0 };
        s_consensus(topos[ti], &c);
        s_case q = { GOSSIP_CHOCO, "q8", 0.5, 2, "random:2", 1500, 1e-5, 0 };
        s_consensus(topos[ti], &q);
        s_case k = { GOSSIP_CHOCO, "topk:0.1+q8", 0.1, 2, "random:2", 3000, 1e-5, 0 };
        s_consensus(topos[ti], &k);
    }
}

/* avg = the mean of the n vectors x (d each); returns max_k |avg_k|. */
static double s_mean_of(float **x, int n, size_t d, double *avg)
{
    double amax = 0.0;
    for (int i = 0; i < n; i++)
        for (size_t k = 0; k < d; k++)
            avg[k] += x[i][k] / n;
    for (size_t k = 0; k < d; k++)
        amax = fmax(amax, fabs(avg[k]));
    return amax;
}

/* The set-up the SGP runs below share: topology tname, its layout, a
 * simulator of c, node vectors x (seed 99) and, for the training runs,
 * targets b (seed 4321) with their mean and its largest |value|. */
typedef struct {
    topo       *t;
    nn_arena    L;
    gossip_sim *sim;
    size_t      d;
    int         n;
    float     **x, **b;
    double     *bavg, bmax;
} s_sgp;

static void s_sgp_open(s_sgp *r, const char *tname, const s_case *c, int targets)
{
    memset(r, 0, sizeof *r);
    r->t = tk_gossip_topo(tname);
    tk_gossip_layout(&r->L);
    r->d = r->L.numel;
    r->n = r->t->n;
    r->sim = s_sim(c, r->t, &r->L);
    r->x = tk_gossip_vectors(r->n, r->d, 99);
    if (targets) {
        r->b = tk_gossip_vectors(r->n, r->d, 4321);
        r->bavg = nn_xcalloc(r->d, sizeof(double));
        r->bmax = s_mean_of(r->b, r->n, r->d, r->bavg);
    }
}

static void s_sgp_close(s_sgp *r)
{
    tk_gossip_vectors_free(r->x, r->n);
    if (r->b)
        tk_gossip_vectors_free(r->b, r->n);
    free(r->bavg);
    gossip_sim_destroy(&r->sim);
    nn_arena_free(&r->L);
    topo_destroy(&r->t);
}

/* max over nodes and coordinates of |z_i - avg| (z_i: node i's de-biased
 * x_i; inf when one is not finite). */
static double s_z_err(gossip_sim *sim, float **x, int n, size_t d, const double *avg)
{
    double e = 0.0;
    float *z = nn_xcalloc(d, sizeof(float));
    for (int i = 0; i < n; i++) {
        gossip_node_debias(gossip_sim_node(sim, i), x[i], z);
        for (size_t k = 0; k < d; k++)
            e = isfinite(z[k]) ? fmax(e, fabs(z[k] - avg[k])) : INFINITY;
    }
    free(z);
    return e;
}

/* A choco run's asks before each round (s_choco_run). */
typedef void (*s_asks)(gossip_sim *sim, int n, nn_rng *r, void *ctx);

/* Consensus of case c on tname with asks(ctx) before every round; node
 * `slow`'s stats into *st; fails, naming `what`, unless the nodes agree on
 * the exact average within c->tol. */
static void s_choco_run(const char *tname, const s_case *c, int slow, s_asks asks, void *ctx,
                        const char *what, gossip_stats *st)
{
    char err[512];
    topo *t = tk_gossip_topo(tname);
    nn_arena L;
    tk_gossip_layout(&L);
    size_t d = L.numel;
    int n = t->n;
    gossip_sim *sim = s_sim(c, t, &L);
    float **x = tk_gossip_vectors(n, d, 4321);
    double *avg = nn_xcalloc(d, sizeof(double)), amax = s_mean_of(x, n, d, avg);
    nn_rng r;
    nn_rng_seed(&r, 17);
    for (int it = 0; it < c->rounds; it++) {
        asks(sim, n, &r, ctx);
        if (gossip_sim_step(sim, x, (uint64_t)it, err, sizeof err) < 0)
            fail_msg("%s %s: %s", tname, what, err);
    }
    double maxerr = s_z_err(sim, x, n, d, avg);
    gossip_node_stats(gossip_sim_node(sim, slow), st);
    printf("  %-10s choco/%-12s %s: max |z-avg|/max|avg| = %.2e, node %d sent %llu B, "
           "skipped %llu on edges\n", tname, c->comp, what, maxerr / amax, slow,
           (unsigned long long)st->bytes_sent, (unsigned long long)st->edge_deferred);
    if (!(maxerr / amax <= c->tol))
        fail_msg("%s %s %s: relative error %g > %g", tname, c->comp, what, maxerr / amax, c->tol);
    free(avg);
    tk_gossip_vectors_free(x, n);
    gossip_sim_destroy(&sim);
    nn_arena_free(&L);
    topo_destroy(&t);
}

typedef struct {
    int slow, defer, refused;
} s_defer_ctx;

/* Node `slow` asks to defer its update every round (every other ask is
 * taken: never two in a row), every other node on about one round in 3
 * (gossip_node_defer_update). */
static void s_defer_asks(gossip_sim *sim, int n, nn_rng *r, void *ctx)
{
    s_defer_ctx *k = ctx;
    for (int i = 0; i < n && k->defer; i++)
        if (i == k->slow || nn_rng_uniform(r) < 0.33)
            k->refused += gossip_node_defer_update(gossip_sim_node(sim, i)) == 0 ? 0 : 1;
}

/* Consensus of case c on tname with s_defer_asks (defer = 1) or none;
 * returns the bytes node `slow` sent. */
static uint64_t s_deferred_run(const char *tname, const s_case *c, int slow, int defer)
{
    s_defer_ctx k = { slow, defer, 0 };
    gossip_stats st;
    s_choco_run(tname, c, slow, s_defer_asks, &k, defer ? "deferred" : "not deferred", &st);
    if (defer && k.refused < c->rounds / 3) /* half the slow node's asks */
        fail_msg("%s: %d deferrals refused, expected the second of every two in a row", tname,
                 k.refused);
    return st.bytes_sent;
}

/* Deferred updates (choco): the copies stay equal, so the exact average
 * and consensus hold with messages up to S rounds late; a node that
 * defers every other round sends half its full updates. */
static void test_choco_deferred(void **state)
{
    (void)state;
    const char *topos[] = { "ring8", "complete4" };
    for (size_t ti = 0; ti < 2; ti++) {
        s_case k = { GOSSIP_CHOCO, "topk:0.1+q8", 0.1, 2, "random:2", 4000, 1e-5, 0 };
        uint64_t full = s_deferred_run(topos[ti], &k, 2, 0);
        uint64_t deferred = s_deferred_run(topos[ti], &k, 2, 1);
        /* half its full updates, plus the deferred ones' headers (this
         * layout's full update is ~100 bytes, a deferred one ~55) */
        assert_true(deferred * 100 < full * 85);
        s_case id = { GOSSIP_CHOCO, "identity", 0.3, 2, "random:2", 2000, 2e-6, 0 };
        s_deferred_run(topos[ti], &id, 2, 1);
    }
}

typedef struct {
    int    slow;
    double skip;
} s_edge_ctx;

/* With skip >= 0 every edge into and out of node `slow` is its own and
 * asks to skip its update on about `skip` of the rounds (a slow link); the
 * other edges share. */
static void s_edge_asks(gossip_sim *sim, int n, nn_rng *r, void *ctx)
{
    const s_edge_ctx *k = ctx;
    for (int i = 0; i < n && k->skip >= 0.0; i++)
        for (int j = 0; j < n; j++) {
            gossip_node *g = gossip_sim_node(sim, i);
            if ((i != k->slow && j != k->slow) || gossip_node_edge_own(g, j) < 0)
                continue;
            if (nn_rng_uniform(r) < k->skip)
                gossip_node_edge_defer(g, j); /* -1 past the cap */
        }
}

/* Edge copies (choco): s_edge_asks on case c; node `slow`'s stats. */
static void s_edges_run(const char *tname, const s_case *c, int slow, double skip,
                        gossip_stats *st)
{
    s_edge_ctx k = { slow, skip };
    char what[64];
    snprintf(what, sizeof what, "edges skipping %.2f", skip);
    s_choco_run(tname, c, slow, s_edge_asks, &k, what, st);
}

/* A slow node's edges with copies of their own may skip 9 updates in 10
 * (the shared deferral diverged at 2 in 3): the exact average still holds
 * and the slow node sends a fraction of the bytes. */
static void test_choco_edges(void **state)
{
    (void)state;
    const char *topos[] = { "ring8", "complete4" };
    const int nout[] = { 1, 3 };
    gossip_stats shared, own;
    for (size_t ti = 0; ti < 2; ti++) {
        s_case k = { GOSSIP_CHOCO, "topk:0.1+q8", 0.1, 2, "random:2", 6000, 1e-5, 0 };
        s_edges_run(topos[ti], &k, 2, -1.0, &shared);
        /* every edge its own, nothing skipped: the same as sharing */
        s_edges_run(topos[ti], &k, 2, 0.0, &own);
        assert_true(own.bytes_sent == shared.bytes_sent && own.edges_own == (uint64_t)nout[ti]);
        s_edges_run(topos[ti], &k, 2, 0.9, &own);
        /* asked every round: the cap (1 in a row at eta 0.1) */
        s_edges_run(topos[ti], &k, 2, 1.0, &own);
        assert_int_equal(own.edge_deferred, (uint64_t)(nout[ti] * k.rounds / 2));
        /* ... at eta 0.03: 5 in a row on the ring, 2 on complete4 */
        k.eta = 0.03;
        k.rounds = 12000;
        k.tol = 2e-5; /* 8e-6 on the ring with every edge shared */
        s_edges_run(topos[ti], &k, 2, 1.0, &own);
        int cap = ti == 0 ? 5 : 2;
        assert_int_equal(own.edge_deferred, (uint64_t)(nout[ti] * k.rounds * cap / (cap + 1)));
        s_case id = { GOSSIP_CHOCO, "identity", 0.3, 2, "random:2", 3000, 2e-6, 0 };
        s_edges_run(topos[ti], &id, 2, 1.0, &own);
    }
}

/* A deferred update is choco's only, with empty blocks; others refused. */
static void test_deferred_refusals(void **state)
{
    (void)state;
    char err[512];
    topo *t = tk_gossip_topo("ring8");
    nn_arena L;
    tk_gossip_layout(&L);
    gossip_config cfg = tk_gossip_cfg(GOSSIP_CHOCO, "topk:0.1+q8", 0.1, 2);
    gossip_node *a = gossip_node_new(&cfg, &L, t, 0, err, sizeof err);
    gossip_node *b = gossip_node_new(&cfg, &L, t, 1, err, sizeof err);
    assert_non_null(a);
    assert_non_null(b);
    float **x = tk_gossip_vectors(2, L.numel, 9);
    assert_int_equal(gossip_node_defer_update(a), 0);
    assert_int_equal(gossip_node_prepare(a, x[0], 0, err, sizeof err), 0);
    assert_int_equal(gossip_node_defer_update(a), -1); /* already prepared */
    const uint8_t *m;
    int to;
    size_t len = gossip_node_outbox(a, 0, &to, &m);
    assert_true(len > 0 && len < 80);
    assert_int_equal(gossip_node_receive(b, m, len, err, sizeof err), 0);
    for (size_t k = 0; k < L.numel; k++) /* nothing moved, on either side */
        assert_true(gossip_node_xhat_self(a)[k] == 0.0f && gossip_node_xhat_of(b, 0)[k] == 0.0f);
    /* the flag on a message with a value */
    float v = 1.0f;
    uint32_t idx = 0;
    gossip_cblock blk[3];
    for (size_t i = 0; i < 3; i++)
        blk[i] = (gossip_cblock){ GOSSIP_BLK_SPARSE_F32, (uint32_t)L.views[i].numel, i == 1, &idx,
                                  &v, NULL, NULL };
    gossip_header h = { GOSSIP_VERSION, GOSSIP_MSG_GOSSIP,
                        GOSSIP_FLAG_PUSH_SUM | GOSSIP_FLAG_DEFERRED, 0, 1, 1.0,
                        gossip_layout_fingerprint(&L), 0, 0, 0 };
    gossip_buf out = { 0 };
    size_t n = gossip_msg_encode(&h, blk, 3, &out);
    assert_int_equal(gossip_node_receive(b, out.data, n, err, sizeof err), -1);
    assert_non_null(strstr(err, "must be empty"));
    /* ... on another kind */
    h.kind = GOSSIP_MSG_RESYNC;
    blk[1].k = 0;
    n = gossip_msg_encode(&h, blk, 3, &out);
    gossip_header hd;
    assert_int_equal(gossip_msg_decode_header(out.data, n, &L, &hd, err, sizeof err), -1);
    assert_non_null(strstr(err, "deferred flag"));
    /* ... to dpsgd, which has no copies to leave alone */
    gossip_config sc = tk_gossip_cfg(GOSSIP_DPSGD, "q8", 1.0, 2);
    gossip_node *c = gossip_node_new(&sc, &L, t, 1, err, sizeof err);
    assert_non_null(c);
    assert_int_equal(gossip_node_defer_update(c), -1);
    h.kind = GOSSIP_MSG_GOSSIP;
    h.iter = 0;
    n = gossip_msg_encode(&h, blk, 3, &out);
    assert_int_equal(gossip_node_receive(c, out.data, n, err, sizeof err), -1);
    assert_non_null(strstr(err, "does not have"));
    gossip_buf_free(&out);
    gossip_node_destroy(&c);
    gossip_node_destroy(&a);
    gossip_node_destroy(&b);
    tk_gossip_vectors_free(x, 2);
    nn_arena_free(&L);
    topo_destroy(&t);
}

static void test_deepsqueeze_bound(void **state)
{
    (void)state;
    const char *topos[] = { "ring8", "exp8", "complete4" };
    for (size_t ti = 0; ti < sizeof topos / sizeof topos[0]; ti++) {
        s_case c = { GOSSIP_DEEPSQUEEZE, "identity", 1.0, 3, "random:3", 2000, 2e-6, 0 };
        s_consensus(topos[ti], &c);
        s_case q = { GOSSIP_DEEPSQUEEZE, "q8", 0.5, 2, "random:2", 1500, 1e-2, 0 };
        s_consensus(topos[ti], &q);
    }
}

/* Runs `rounds` rounds of case c (delays as given) and returns the x. */
static float **s_run(const char *tname, const s_case *c, int rounds, int *n_out, size_t *d_out)
{
    char err[512];
    topo *t = tk_gossip_topo(tname);
    nn_arena L;
    tk_gossip_layout(&L);
    gossip_sim *sim = s_sim(c, t, &L);
    float **x = tk_gossip_vectors(t->n, L.numel, 99);
    for (int r = 0; r < rounds; r++)
        if (gossip_sim_step(sim, x, (uint64_t)r, err, sizeof err) < 0)
            fail_msg("%s: %s", tname, err);
    *n_out = t->n;
    *d_out = L.numel;
    gossip_sim_destroy(&sim);
    nn_arena_free(&L);
    topo_destroy(&t);
    return x;
}

/* S = 0 through the queue (fixed:0) and S > 0 without delays give the
 * synchronous result bit for bit. */
static void test_bit_identical_without_delays(void **state)
{
    (void)state;
    const s_case base[] = {
        { GOSSIP_DPSGD, "q8", 1.0, 0, "none", 0, 0, 0 },
        { GOSSIP_CHOCO, "topk:0.1+q8", 0.3, 0, "none", 0, 0, 0 },
        { GOSSIP_DEEPSQUEEZE, "q8", 0.5, 0, "none", 0, 0, 0 },
    };
    const char *topos[] = { "ring8", "onepeer-exp8" };
    for (size_t ti = 0; ti < 2; ti++)
        for (size_t a = 0; a < 3; a++) {
            int n;
            size_t d;
            float **ref = s_run(topos[ti], &base[a], 50, &n, &d);
            s_case q = base[a], st = base[a];
            q.delays = "fixed:0";
            st.S = 2;
            float **xq = s_run(topos[ti], &q, 50, &n, &d), **xs = s_run(topos[ti], &st, 50, &n, &d);
            for (int i = 0; i < n; i++) {
                if (memcmp(ref[i], xq[i], d * sizeof(float)))
                    fail_msg("%s %s: fixed:0 differs from the direct path at node %d", topos[ti],
                             gossip_algo_name(base[a].algo), i);
                if (memcmp(ref[i], xs[i], d * sizeof(float)))
                    fail_msg("%s %s: S=2 without delays differs from S=0 at node %d", topos[ti],
                             gossip_algo_name(base[a].algo), i);
            }
            tk_gossip_vectors_free(ref, n);
            tk_gossip_vectors_free(xq, n);
            tk_gossip_vectors_free(xs, n);
        }
}

static void test_delays_parse(void **state)
{
    (void)state;
    char err[512];
    gossip_delays dl;
    assert_int_equal(gossip_delays_parse("none", 0, &dl, err, sizeof err), 0);
    assert_int_equal(dl.kind, GOSSIP_DELAY_NONE);
    assert_int_equal(gossip_delays_parse("fixed:2", 2, &dl, err, sizeof err), 0);
    assert_int_equal(dl.kind, GOSSIP_DELAY_FIXED);
    assert_int_equal(dl.d, 2);
    assert_int_equal(gossip_delays_parse("random:3", 4, &dl, err, sizeof err), 0);
    assert_int_equal(dl.kind, GOSSIP_DELAY_RANDOM);
    assert_int_equal(gossip_delays_parse("slow:3:0.25", 2, &dl, err, sizeof err), 0);
    assert_int_equal(dl.slow_rank, 3);
    assert_int_equal(dl.d, 2);
    assert_true(fabs(dl.slow_frac - 0.25) < 1e-12);
    assert_int_equal(gossip_delays_parse("random:3", 2, &dl, err, sizeof err), -1);
    assert_non_null(strstr(err, "--staleness 2"));
    assert_non_null(strstr(err, "3 rounds"));
    const char *bad[] = { "", "fixed", "fixed:", "fixed:x", "fixed:-1", "later:1", "slow:1",
                          "slow:1:0", "slow:1:1.5", "slow:x:0.5", "none:1", "random:1:2" };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
        if (gossip_delays_parse(bad[k], 4, &dl, err, sizeof err) != -1)
            fail_msg("--delays '%s' accepted", bad[k]);
    assert_int_equal(gossip_delays_parse("slow:1:0.5", 0, &dl, err, sizeof err), -1);
}

/* slow:R:F: R steps on floor(T F) of T rounds, never two skipped more than
 * ceil(1/F) apart; the others always step. */
static void test_slow_steps(void **state)
{
    (void)state;
    char err[512];
    topo *t = tk_gossip_topo("ring8");
    nn_arena L;
    tk_gossip_layout(&L);
    s_case c = { GOSSIP_DPSGD, "identity", 1.0, 2, "slow:5:0.3333333333", 0, 0, 0 };
    gossip_sim *sim = s_sim(&c, t, &L);
    int steps = 0, others = 0;
    for (uint64_t r = 0; r < 300; r++) {
        steps += gossip_sim_steps(sim, 5, r);
        others += gossip_sim_steps(sim, 4, r);
    }
    assert_int_equal(steps, 99); /* floor(300 / 3) minus the rounding of F */
    assert_int_equal(others, 300);
    gossip_delays dl;
    assert_int_equal(gossip_delays_parse("slow:9:0.5", 2, &dl, err, sizeof err), 0);
    assert_int_equal(gossip_sim_set_delays(sim, &dl, 1, err, sizeof err), -1);
    gossip_sim_destroy(&sim);
    nn_arena_free(&L);
    topo_destroy(&t);
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
    cfg.staleness = GOSSIP_STALE_MAX + 1;
    assert_null(gossip_node_new(&cfg, &L, t, 0, err, sizeof err));
    assert_non_null(strstr(err, "staleness"));
    cfg.staleness = -1;
    assert_null(gossip_node_new(&cfg, &L, t, 0, err, sizeof err));
    cfg.staleness = 2;
    cfg.push_sum = 0;
    topo *u = tk_gossip_topo("ring8-undirected");
    assert_null(gossip_node_new(&cfg, &L, u, 0, err, sizeof err));
    assert_non_null(strstr(err, "push-sum"));
    cfg.algo = GOSSIP_CHOCO; /* choco keeps its copies: fine */
    gossip_node *g = gossip_node_new(&cfg, &L, u, 0, err, sizeof err);
    assert_non_null(g);
    gossip_node_destroy(&g);
    topo_destroy(&u);
    nn_arena_free(&L);
    topo_destroy(&t);
}

/* Adaptive deadline: median + 6 MAD of the gaps; robust to one outlier;
 * nothing before 8 gaps; the input is left as it was. */
static void test_gap_deadline(void **state)
{
    (void)state;
    double g[GOSSIP_PEER_GAPS];
    for (int k = 0; k < GOSSIP_PEER_GAPS; k++)
        g[k] = 0.1;
    assert_true(gossip_link_gap_deadline(g, 7) == 0.0);
    assert_true(fabs(gossip_link_gap_deadline(g, 8) - 0.1) < 1e-12);
    /* 0.1, 0.2 alternating: median 0.15, MAD 0.05 -> 0.45 */
    for (int k = 0; k < 16; k++)
        g[k] = k % 2 ? 0.2 : 0.1;
    assert_true(fabs(gossip_link_gap_deadline(g, 16) - 0.45) < 1e-12);
    assert_true(g[0] == 0.1 && g[1] == 0.2 && g[15] == 0.2); /* unchanged */
    /* one 30 s outlier (a checkpoint) among 0.1 s gaps moves nothing */
    for (int k = 0; k < 9; k++)
        g[k] = k == 4 ? 30.0 : 0.1;
    assert_true(fabs(gossip_link_gap_deadline(g, 9) - 0.1) < 1e-12);
    /* a slow peer (3 s steps) gets a deadline above its gaps */
    for (int k = 0; k < 32; k++)
        g[k] = 3.0 + 0.01 * (k % 5);
    double d = gossip_link_gap_deadline(g, 32);
    assert_true(d > 3.04 && d < 3.5);
    assert_true(gossip_link_gap_deadline(g, GOSSIP_PEER_GAPS + 1) == 0.0);
}

/* SGP training with late messages: node i minimises |z - b_i|^2 / 2 (its
 * gradient z_i - b_i) with x_i -= lr_r * s_i * (z_i - b_i), s_i =
 * gossip_node_step_scale (1 when !scaled), lr_r decaying linearly to 0 at
 * 100 rounds before the end (then mixing only).  With messages up to S rounds late psi swings
 * (0.05..1.5 on ring8 with random:4), so a step of lr on x moves z by up to
 * 20 lr; the scale makes it lr / mean(psi), mean(psi) taken as at least
 * 0.75.  Returns the final max_i |z_i - mean b| / max |mean b| (inf when
 * some z is not finite); the largest step on any z over lr into *gain. */
static double s_sgp_train(const char *tname, int S, const char *delays, double lr, int scaled,
                          int rounds, double *gain)
{
    char err[512];
    s_case c = { GOSSIP_DPSGD, "identity", 1.0, S, delays, 0, 0, 0 };
    s_sgp R;
    s_sgp_open(&R, tname, &c, 1);
    float *z = nn_xcalloc(R.d, sizeof(float));
    for (int r = 0; r < rounds; r++) {
        double step = r < rounds - 100 ? lr * (1.0 - (double)r / (rounds - 100)) : 0.0; /* decays to 0; the last rounds only mix */
        for (int i = 0; i < R.n && step > 0.0; i++) {
            gossip_node *g = gossip_sim_node(R.sim, i);
            double a = step * (scaled ? gossip_node_step_scale(g) : 1.0);
            *gain = fmax(*gain, a / step / gossip_node_psi(g));
            gossip_node_debias(g, R.x[i], z);
            for (size_t k = 0; k < R.d; k++)
                R.x[i][k] -= (float)(a * (z[k] - R.b[i][k]));
        }
        if (gossip_sim_step(R.sim, R.x, (uint64_t)r, err, sizeof err) < 0)
            fail_msg("%s: %s", tname, err);
    }
    double e = s_z_err(R.sim, R.x, R.n, R.d, R.bavg) / R.bmax;
    free(z);
    s_sgp_close(&R);
    return e;
}

static void test_sgp_step_scale(void **state)
{
    (void)state;
    /* with S = 0 the scale is exactly 1 */
    double gain = 0.0, gain0 = 0.0;
    assert_true(s_sgp_train("ring8", 0, "none", 1.0, 1, 150, &gain) ==
                s_sgp_train("ring8", 0, "none", 1.0, 0, 150, &gain0));
    /* lr 1 with curvature 1: stable while the step on z stays below 2; on ring8 with random:4
     * the unscaled steps diverge (4e6 when this test was written), the scaled ones settle */
    const char *cases[][2] = { { "ring8", "random:4" }, { "complete4", "random:4" },
                               { "ring8", "slow:1:0.3333" }, { "onepeer-exp8", "random:2" } };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        int S = cases[c][1][0] == 'r' ? cases[c][1][7] - '0' : 2;
        gain = gain0 = 0.0;
        double e = s_sgp_train(cases[c][0], S, cases[c][1], 1.0, 1, 400, &gain);
        double e0 = s_sgp_train(cases[c][0], S, cases[c][1], 1.0, 0, 400, &gain0);
        printf("  SGP %-13s %-14s S=%d lr 1: max |z - mean b| / max|mean b| = %.2e (unscaled "
               "steps: %.2e); largest step on z %.2f lr (unscaled %.2f lr)\n", cases[c][0],
               cases[c][1], S, e, e0, gain, gain0);
        if (!(e < 0.3))
            fail_msg("%s %s: SGP with scaled steps ended %g (relative) from the optimum", cases[c][0],
                     cases[c][1], e);
        if (!(gain <= 1.0 / 0.75 + 1e-9)) /* the nodes that get little mass */
            fail_msg("%s %s: a step on z of %g lr (at most 1/0.75)", cases[c][0], cases[c][1],
                     gain);
    }
}

/* Owed steps (gossip_node_step_apply): SGP on `tname` with the messages to
 * and from rank 2 kept half the time (at most S in a row), so psi piles up
 * before it and drains after it; node i minimises |z - b_i|^2 / 2 with
 * x1 = x - lr * (z - b_i) weighed in by gossip_node_step_apply.  Every
 * round, sum x + in flight + sum owed must be the start plus every step in
 * full (weight max(s, 1), s the step scale): nothing a step could not take
 * is lost.  Returns the final max |z_i - mean b| / max |mean b|; the
 * weight owed over the run and the weight still owed at the end into
 * owed[0..1], the steps that owed and that repaid into steps[0..1]. */
/* One round of s_owed_run: every node's step (lr) weighed in, what the
 * steps give in full added to want, the weight owed to *owed; then the
 * check of sum x + in flight + sum owed against want. */
static void s_owed_round(s_sgp *R, double lr, double *want, double *owed, const char *tname,
                         int r)
{
    float *z = nn_xcalloc(R->d, sizeof(float)), *x1 = nn_xcalloc(R->d, sizeof(float));
    double *have = nn_xcalloc(R->d, sizeof(double)), psum = 0.0, left;
    for (int i = 0; i < R->n && lr > 0.0; i++) {
        gossip_node *g = gossip_sim_node(R->sim, i);
        double w = gossip_node_step_scale(g);
        gossip_node_debias(g, R->x[i], z);
        for (size_t k = 0; k < R->d; k++) {
            x1[k] = R->x[i][k] - (float)(lr * (z[k] - R->b[i][k]));
            want[k] += (w > 1.0 ? w : 1.0) * ((double)x1[k] - R->x[i][k]);
        }
        *owed += w < 1.0 ? 1.0 - w : 0.0;
        gossip_node_step_apply(g, R->x[i], x1);
    }
    gossip_sim_inflight(R->sim, have, &psum);
    for (int i = 0; i < R->n; i++) {
        const float *o = gossip_node_step_owed(gossip_sim_node(R->sim, i), &left);
        for (size_t k = 0; k < R->d; k++)
            have[k] += R->x[i][k] + (o ? o[k] : 0.0f);
    }
    for (size_t k = 0; k < R->d; k++)
        if (fabs(have[k] - want[k]) > 1e-3 * (1.0 + fabs(want[k])))
            fail_msg("%s round %d: sum x + in flight + owed at %zu = %.9g, the steps in full "
                     "give %.9g", tname, r, k, have[k], want[k]);
    free(z);
    free(x1);
    free(have);
}

static double s_owed_run(const char *tname, int rounds, double owed[2], uint64_t steps[2])
{
    char err[512];
    s_case c = { GOSSIP_DPSGD, "identity", 1.0, 2, "none", rounds, 0, 0 };
    s_sgp R;
    s_sgp_open(&R, tname, &c, 1);
    gossip_sim_set_jam(R.sim, 2, 0.5, 1, 11);
    double *want = nn_xcalloc(R.d, sizeof(double));
    for (int i = 0; i < R.n; i++)
        for (size_t k = 0; k < R.d; k++)
            want[k] += R.x[i][k];
    owed[0] = owed[1] = 0.0;
    for (int r = 0; r < rounds; r++) {
        s_owed_round(&R, r < rounds - 100 ? 0.5 : 0.0, want, &owed[0], tname, r); /* the last rounds only mix */
        if (gossip_sim_step(R.sim, R.x, (uint64_t)r, err, sizeof err) < 0)
            fail_msg("%s round %d: %s", tname, r, err);
    }
    steps[0] = steps[1] = 0;
    for (int i = 0; i < R.n; i++) {
        double left;
        gossip_node_step_owed(gossip_sim_node(R.sim, i), &left);
        owed[1] += left;
        gossip_stats st;
        gossip_node_stats(gossip_sim_node(R.sim, i), &st);
        steps[0] += st.steps_owed;
        steps[1] += st.steps_repaid;
    }
    double e = s_z_err(R.sim, R.x, R.n, R.d, R.bavg) / R.bmax;
    free(want);
    s_sgp_close(&R);
    return e;
}

static void test_sgp_owed_steps(void **state)
{
    (void)state;
    const char *topos[] = { "ring8", "complete4" };
    for (size_t ti = 0; ti < sizeof topos / sizeof *topos; ti++) {
        double owed[2];
        uint64_t steps[2];
        double e = s_owed_run(topos[ti], 600, owed, steps);
        printf("  %-9s owed %.1f steps' weight in %llu steps, %llu repaid, %.2f left; max |z - "
               "mean b| / max|mean b| = %.2e\n", topos[ti], owed[0], (unsigned long long)steps[0],
               (unsigned long long)steps[1], owed[1], e);
        if (!(steps[0] > 0 && owed[0] > 1.0))
            fail_msg("%s: the jam made no step owe (%llu)", topos[ti], (unsigned long long)steps[0]);
        if (!(steps[1] > 0 && owed[1] < 0.5 * owed[0]))
            fail_msg("%s: %.2f of %.2f owed is left after %llu repayments", topos[ti], owed[1],
                     owed[0], (unsigned long long)steps[1]);
        if (!(e < 0.3))
            fail_msg("%s: ended %g (relative) from the optimum", topos[ti], e);
    }
}

/* SGP over a jammed link: rounds of `topo` with messages to and from rank
 * 2 not sent half the time (at most S in a row).  Returns the largest
 * |sum psi - n| over the rounds (sum x likewise into *xdev, identity only)
 * and the final max |z_i - avg| / max |avg| into *rel. */
static double s_jam_run(const char *tname, const char *comp, int keep, int rounds, double *xdev,
                        double *rel, uint64_t *jammed)
{
    char err[512];
    s_case c = { GOSSIP_DPSGD, comp, 1.0, 2, "none", rounds, 0, 0 };
    s_sgp R;
    s_sgp_open(&R, tname, &c, 0);
    gossip_sim_set_jam(R.sim, 2, 0.5, keep, 11);
    const size_t d = R.d;
    double *mass = nn_xcalloc(d, sizeof(double)), *xs = nn_xcalloc(d, sizeof(double));
    double amax = s_mean_of(R.x, R.n, d, mass), pdev = 0.0; /* mass: the mean for now */
    for (size_t k = 0; k < d; k++)
        mass[k] *= R.n;
    *xdev = 0.0;
    for (int r = 0; r < rounds; r++) {
        if (gossip_sim_step(R.sim, R.x, (uint64_t)r, err, sizeof err) < 0)
            fail_msg("%s jammed, keep %d, round %d: %s", tname, keep, r, err);
        double psum = 0.0;
        memset(xs, 0, d * sizeof *xs);
        gossip_sim_inflight(R.sim, xs, &psum); /* none: no delays */
        for (int i = 0; i < R.n; i++) {
            psum += gossip_node_psi(gossip_sim_node(R.sim, i));
            for (size_t k = 0; k < d; k++)
                xs[k] += R.x[i][k];
        }
        pdev = fmax(pdev, fabs(psum - R.n));
        for (size_t k = 0; k < d; k++)
            *xdev = fmax(*xdev, fabs(xs[k] - mass[k]));
    }
    for (size_t k = 0; k < d; k++)
        mass[k] /= R.n;
    *rel = s_z_err(R.sim, R.x, R.n, d, mass) / amax;
    *jammed = gossip_sim_jammed(R.sim);
    gossip_stats st;
    gossip_node_stats(gossip_sim_node(R.sim, 2), &st);
    printf("  %-17s %-8s keep %d: %llu messages not sent (rank 2 kept %llu); max |sum psi - n| "
           "%.2e, max |sum x - sum x0| %.2e, max |z-avg|/max|avg| %.2e\n", tname, comp, keep,
           (unsigned long long)*jammed, (unsigned long long)st.shares_kept, pdev, *xdev, *rel);
    free(mass);
    free(xs);
    s_sgp_close(&R);
    return pdev;
}

/* A message the transport could not take (its queue to a slow peer full):
 * the sender keeps its share and says so in its next message to that peer
 * (GOSSIP_FLAG_KEPT), the receiver mixes nothing for it.  sum psi = n and
 * sum x stay exact every round, and the nodes reach the exact average.
 * Without keeping (the message simply lost, the receiver mixing its own
 * value in its place) the same jam moves sum psi and sum x away: that is
 * where the mass went. */
static void test_sgp_kept_shares(void **state)
{
    (void)state;
    const char *topos[] = { "ring8-undirected", "ring8", "complete4" };
    for (size_t ti = 0; ti < sizeof topos / sizeof *topos; ti++) {
        double xdev, rel;
        uint64_t jammed;
        double pdev = s_jam_run(topos[ti], "identity", 1, 1500, &xdev, &rel, &jammed);
        assert_true(jammed > 100);
        if (!(pdev <= 1e-9 * 8) || !(xdev <= 1e-4))
            fail_msg("%s: kept shares, mass not conserved: |sum psi - n| %g, |sum x - x0| %g",
                     topos[ti], pdev, xdev);
        if (!(rel <= 2e-6))
            fail_msg("%s: kept shares, no exact average: %g", topos[ti], rel);
        pdev = s_jam_run(topos[ti], "identity", 0, 1500, &xdev, &rel, &jammed);
        if (!(pdev > 1e-3 && xdev > 1e-3))
            fail_msg("%s: lost messages with stand-ins conserved the mass (|sum psi - n| %g): the "
                     "jam does not reach the mixing", topos[ti], pdev);
    }
    double xdev, rel; /* q8: psi exact, the average within q8's own error (no consensus
                       * to the last bit: every round re-quantizes x) */
    uint64_t jammed;
    double pdev = s_jam_run("ring8-undirected", "q8", 1, 1500, &xdev, &rel, &jammed);
    if (!(pdev <= 1e-9 * 8) || !(rel <= 5e-2))
        fail_msg("q8 kept shares: |sum psi - n| %g, relative error %g", pdev, rel);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_delays_parse),
        cmocka_unit_test(test_gap_deadline),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_slow_steps),
        cmocka_unit_test(test_bit_identical_without_delays),
        cmocka_unit_test(test_sgp_exact_average),
        cmocka_unit_test(test_choco_exact_average),
        cmocka_unit_test(test_deepsqueeze_bound),
        cmocka_unit_test(test_choco_deferred),
        cmocka_unit_test(test_choco_edges),
        cmocka_unit_test(test_deferred_refusals),
        cmocka_unit_test(test_sgp_step_scale),
        cmocka_unit_test(test_sgp_owed_steps),
        cmocka_unit_test(test_sgp_kept_shares),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

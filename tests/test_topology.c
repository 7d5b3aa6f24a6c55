/* test_topology — topology files, generators, validation, spectra, report,
 * and the `lpgossip topology` command.
 *
 * Spectral gaps are checked against closed forms (rings, torus, complete)
 * or against an independent estimate written here: |lambda_2| of a column-
 * stochastic W is the spectral radius of W - v 1^T (v the Perron vector,
 * found by Gaussian elimination), estimated by repeated squaring (Gelfand's
 * formula with 2^60 steps).  Never against numbers printed by the code
 * under test.  Broken files in tests/data/topo/bad-*.yaml must fail with a
 * message naming the file, the line and what is wrong.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/tk.h"

#include "nn/nn_core.h"
#include "node/node_cmds.h"
#include "topology/topo.h"

#define PI 3.14159265358979323846

/* ---- independent reference for |lambda_2| ------------------------------ */

/* Solves (W - I) v = 0 with sum(v) = 1 (last equation replaced) by Gaussian
 * elimination with partial pivoting. */
static void s_perron(const double *w, int n, double *v)
{
    double *a = calloc((size_t)n * (n + 1), sizeof *a);
    assert_non_null(a);
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < n; j++)
            a[i * (n + 1) + j] = w[i * n + j] - (i == j);
        a[i * (n + 1) + n] = 0;
    }
    for (int j = 0; j <= n; j++)
        a[(n - 1) * (n + 1) + j] = 1.0;
    for (int c = 0; c < n; c++) {
        int p = c;
        for (int r = c + 1; r < n; r++)
            if (fabs(a[r * (n + 1) + c]) > fabs(a[p * (n + 1) + c]))
                p = r;
        for (int j = 0; j <= n; j++) {
            double t = a[c * (n + 1) + j];
            a[c * (n + 1) + j] = a[p * (n + 1) + j];
            a[p * (n + 1) + j] = t;
        }
        assert_true(fabs(a[c * (n + 1) + c]) > 1e-12);
        for (int r = 0; r < n; r++) {
            if (r == c)
                continue;
            double f = a[r * (n + 1) + c] / a[c * (n + 1) + c];
            for (int j = c; j <= n; j++)
                a[r * (n + 1) + j] -= f * a[c * (n + 1) + j];
        }
    }
    for (int i = 0; i < n; i++)
        v[i] = a[i * (n + 1) + n] / a[i * (n + 1) + i];
    free(a);
}

/* Spectral radius of W - v 1^T by 60 normalized squarings. */
static double s_ref_lambda2(const double *w, int n)
{
    double *v = malloc((size_t)n * sizeof *v), *m = malloc((size_t)n * n * sizeof *m),
           *t = malloc((size_t)n * n * sizeof *t);
    assert_true(v && m && t);
    s_perron(w, n, v);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            m[i * n + j] = w[i * n + j] - v[i];
    /* W'^(2^k) = m_k C_k with m_{k+1} = (m_k/|m_k|)^2, so
     * log C_K / 2^K = sum_k log|m_k| / 2^k */
    double logc = 0, scale = 1, rho = -1;
    for (int k = 0; k < 60 && rho < 0; k++) {
        double norm = 0;
        for (int i = 0; i < n * n; i++)
            norm += m[i] * m[i];
        norm = sqrt(norm);
        if (norm < 1e-280) {
            rho = 0.0;
            break;
        }
        for (int i = 0; i < n * n; i++)
            m[i] /= norm;
        logc += log(norm) * scale;   /* contribution of this level, per step */
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                double s = 0;
                for (int l = 0; l < n; l++)
                    s += m[i * n + l] * m[l * n + j];
                t[i * n + j] = s;
            }
        memcpy(m, t, (size_t)n * n * sizeof *m);
        scale /= 2;
    }
    if (rho < 0) {
        double norm = 0;
        for (int i = 0; i < n * n; i++)
            norm += m[i] * m[i];
        rho = norm == 0 ? 0.0 : exp(logc + 0.5 * log(norm) * scale);
    }
    free(v);
    free(m);
    free(t);
    return rho;
}

static void s_close(double got, double want, double atol, const char *what)
{
    if (!(fabs(got - want) <= atol)) {
        print_error("%s: got %.12g, want %.12g (atol %g)\n", what, got, want, atol);
        fail();
    }
}

static topo *s_load(const char *path)
{
    char err[1024] = "";
    topo *t = topo_load(path, err, sizeof err);
    if (!t)
        print_error("%s\n", err);
    assert_non_null(t);
    return t;
}

/* ---- spectra ----------------------------------------------------------- */

static void test_spectral_closed_forms(void **state)
{
    (void)state;
    char err[256];
    for (int n = 2; n <= 20; n++) {
        topo *t = topo_generate("directed_ring", n, 0, 0, err, sizeof err);
        assert_non_null(t);
        /* eigenvalues 1/2 + 1/2 e^{2 pi i k/n}: |lambda_2| = cos(pi/n) */
        s_close(topo_spectral_gap(t->sched[0].w, n), 1 - cos(PI / n), 1e-10, "directed ring gap");
        topo_destroy(&t);
        if (n >= 3) {
            t = topo_generate("undirected_ring", n, 0, 0, err, sizeof err);
            assert_non_null(t);
            double l2 = 0;
            for (int k = 1; k < n; k++)
                l2 = fmax(l2, fabs(1.0 / 3 + 2.0 / 3 * cos(2 * PI * k / n)));
            s_close(topo_lambda2(t->sched[0].w, n), l2, 1e-10, "undirected ring lambda2");
            topo_destroy(&t);
        }
        t = topo_generate("complete", n, 0, 0, err, sizeof err);
        assert_non_null(t);
        s_close(topo_spectral_gap(t->sched[0].w, n), 1.0, 1e-7, "complete gap");
        topo_destroy(&t);
    }
    /* torus r x c with 1/5: (1 + 2 cos(2 pi a/r) + 2 cos(2 pi b/c)) / 5 */
    int dims[][2] = { { 4, 4 }, { 3, 5 }, { 4, 6 }, { 5, 5 } };
    for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++) {
        int r = dims[d][0], c = dims[d][1];
        topo *t = topo_generate("torus", 0, r, c, err, sizeof err);
        assert_non_null(t);
        assert_int_equal(t->n, r * c);
        double l2 = 0;
        for (int a = 0; a < r; a++)
            for (int b = 0; b < c; b++)
                if (a || b)
                    l2 = fmax(l2, fabs((1 + 2 * cos(2 * PI * a / r) + 2 * cos(2 * PI * b / c)) / 5));
        s_close(topo_lambda2(t->sched[0].w, t->n), l2, 1e-10, "torus lambda2");
        if (r == 4 && c == 4)
            s_close(topo_spectral_gap(t->sched[0].w, 16), 0.4, 1e-10, "torus4x4 gap");
        topo_destroy(&t);
    }
    /* one node: nothing to mix, gap 1 */
    double one = 1.0;
    s_close(topo_spectral_gap(&one, 1), 1.0, 0, "n=1");
}

static void test_spectral_against_reference(void **state)
{
    (void)state;
    nn_rng rng;
    nn_rng_seed(&rng, 42);
    for (int trial = 0; trial < 40; trial++) {
        int n = 2 + (int)nn_rng_below(&rng, 11);
        double *w = calloc((size_t)n * n, sizeof *w);
        /* random sparse column-stochastic matrix with a ring for connectivity */
        for (int j = 0; j < n; j++) {
            double sum = 0;
            for (int i = 0; i < n; i++) {
                int keep = i == j || i == (j + 1) % n || nn_rng_uniform(&rng) < 0.3;
                w[i * n + j] = keep ? 0.05 + nn_rng_uniform(&rng) : 0;
                sum += w[i * n + j];
            }
            for (int i = 0; i < n; i++)
                w[i * n + j] /= sum;
        }
        double got = topo_lambda2(w, n), want = s_ref_lambda2(w, n);
        s_close(got, want, 1e-7 + 1e-7 * want, "random matrix lambda2");
        free(w);
    }
    /* eigenvalues sorted by modulus: a 3-cycle permutation has the cube
     * roots of unity, all of modulus 1 */
    double p[9] = { 0, 0, 1, 1, 0, 0, 0, 1, 0 }, re[3], im[3];
    assert_int_equal(topo_eigenvalues(p, 3, re, im), 0);
    s_close(re[0], 1.0, 1e-12, "first eigenvalue real");
    for (int k = 0; k < 3; k++)
        s_close(hypot(re[k], im[k]), 1.0, 1e-12, "root of unity modulus");
    s_close(re[1], -0.5, 1e-12, "second eigenvalue");
    s_close(fabs(im[1]), sqrt(3) / 2, 1e-12, "second eigenvalue imag");
}

/* ---- shipped files ----------------------------------------------------- */

static void test_shipped_files(void **state)
{
    (void)state;
    struct {
        const char *file;
        int n, nsched, doubly;
        double gap;       /* closed form, or < 0: use the reference */
    } cases[] = {
        { "topologies/ring8.yaml", 8, 1, 1, 1 - cos(PI / 8) },
        { "topologies/ring16.yaml", 16, 1, 1, 1 - cos(PI / 16) },
        { "topologies/ring8-undirected.yaml", 8, 1, 1, 1 - (1.0 / 3 + 2.0 / 3 * cos(2 * PI / 8)) },
        { "topologies/torus4x4.yaml", 16, 1, 1, 1 - 3.0 / 5 },
        { "topologies/complete4.yaml", 4, 1, 1, 1.0 },
        { "topologies/complete8.yaml", 8, 1, 1, 1.0 },
        { "topologies/star8.yaml", 8, 1, 0, -1 },
        { "topologies/exp8.yaml", 8, 1, 0, -1 },
        { "topologies/onepeer-exp8.yaml", 8, 3, 1, -2 },
        { "topologies/example-lan.yaml", 4, 1, 1, 1 - (1.0 / 3 + 2.0 / 3 * cos(2 * PI / 4)) },
        { "topologies/lab4-lan.yaml", 4, 1, 1, 1 - (1.0 / 3 + 2.0 / 3 * cos(2 * PI / 4)) },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        topo *t = s_load(cases[k].file);
        char err[512];
        assert_int_equal(topo_validate(t, err, sizeof err), 0);
        assert_int_equal(t->n, cases[k].n);
        assert_int_equal(t->nsched, cases[k].nsched);
        assert_int_equal(topo_is_doubly_stochastic(t), cases[k].doubly);
        assert_true(strlen(t->description) > 0);
        if (cases[k].gap >= 0) {
            s_close(topo_spectral_gap(t->sched[0].w, t->n), cases[k].gap, 1e-7, cases[k].file);
        } else if (cases[k].gap == -1) {
            s_close(topo_lambda2(t->sched[0].w, t->n), s_ref_lambda2(t->sched[0].w, t->n), 1e-7, cases[k].file);
        } else {
            /* one-peer exponential: step 0 is the directed ring (cos(pi/8)),
             * steps 1 and 2 are disconnected (|lambda_2| = 1), and the
             * product over the period is exact averaging */
            s_close(topo_lambda2(t->sched[0].w, 8), cos(PI / 8), 1e-9, "onepeer step 0");
            s_close(topo_lambda2(t->sched[1].w, 8), 1.0, 1e-9, "onepeer step 1");
            s_close(topo_lambda2(t->sched[2].w, 8), 1.0, 1e-9, "onepeer step 2");
            double prod[64];
            topo_period_product(t, prod);
            for (int i = 0; i < 64; i++)
                s_close(prod[i], 1.0 / 8, 1e-15, "onepeer product entry");
            s_close(topo_spectral_gap(prod, 8), 1.0, 1e-7, "onepeer product gap");
        }
        topo_destroy(&t);
    }
    /* the paper's ring: 1/2 self, 1/2 from the predecessor */
    topo *t = s_load("topologies/ring8.yaml");
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 8; j++)
            assert_true(t->sched[0].w[i * 8 + j] == (j == i || j == (i + 7) % 8 ? 0.5 : 0.0));
    topo_destroy(&t);
    /* exp8: i sends to i+1, i+2, i+4; even nodes keep 1/2, odd 1/4 */
    t = s_load("topologies/exp8.yaml");
    for (int j = 0; j < 8; j++) {
        double self = j % 2 ? 0.25 : 0.5, out = j % 2 ? 0.25 : 1.0 / 6;
        s_close(t->sched[0].w[j * 8 + j], self, 1e-15, "exp8 self");
        for (int h = 1; h < 8; h *= 2)
            s_close(t->sched[0].w[((j + h) % 8) * 8 + j], out, 1e-15, "exp8 edge");
    }
    topo_destroy(&t);
    /* endpoints and keys of the example */
    t = s_load("topologies/example-lan.yaml");
    assert_int_equal(t->security_curve, 1);
    int g = topo_find_node(t, "gamma");
    assert_int_equal(g, 2);
    assert_string_equal(t->nodes[g].endpoint, "tcp://192.168.1.12:5555");
    for (int i = 0; i < 4; i++)
        assert_int_equal(strlen(t->nodes[i].pubkey), 40);
    topo_destroy(&t);
}

/* ---- generators = explicit files --------------------------------------- */

static void s_same(const topo *a, const topo *b, double tol)
{
    assert_int_equal(a->n, b->n);
    assert_int_equal(a->nsched, b->nsched);
    for (int s = 0; s < a->nsched; s++)
        for (int i = 0; i < a->n * a->n; i++)
            s_close(a->sched[s].w[i], b->sched[s].w[i], tol, "same matrix");
}

static void test_generators_equal_explicit(void **state)
{
    (void)state;
    char err[512];
    struct {
        const char *file, *kind;
        int n, rows, cols;
    } cases[] = {
        { "tests/data/topo/ring8-edges.yaml", "directed_ring", 8, 0, 0 },
        { "tests/data/topo/torus4x4-edges.yaml", "torus", 16, 4, 4 },
        { "tests/data/topo/star8-matrix.yaml", "star", 8, 0, 0 },
        { "tests/data/topo/exp8-uniform.yaml", "exponential", 8, 0, 0 },
        { "tests/data/topo/complete4-matrix.yaml", "complete", 4, 0, 0 },
        { "tests/data/topo/ring8-undirected-uniform.yaml", "undirected_ring", 8, 0, 0 },
        { "topologies/ring8.yaml", "directed_ring", 8, 0, 0 },
        { "topologies/torus4x4.yaml", "torus", 16, 4, 4 },
        { "topologies/star8.yaml", "star", 8, 0, 0 },
        { "topologies/complete4.yaml", "complete", 4, 0, 0 },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        topo *f = s_load(cases[k].file);
        topo *g = topo_generate(cases[k].kind, cases[k].n, cases[k].rows, cases[k].cols, err, sizeof err);
        assert_non_null(g);
        s_same(f, g, 1e-15);
        topo_destroy(&f);
        topo_destroy(&g);
    }
    /* the one-peer schedule: circulant generators = explicit edges */
    topo *a = s_load("topologies/onepeer-exp8.yaml"), *b = s_load("tests/data/topo/onepeer-exp8-edges.yaml");
    s_same(a, b, 0);
    topo_destroy(&a);
    topo_destroy(&b);
    /* exponential graph of n nodes: i sends to i + 2^k for 2^k < n, weight
     * 1/(1 + out-degree) in each column */
    for (int n = 2; n <= 12; n++) {
        topo *t = topo_generate("exponential", n, 0, 0, err, sizeof err);
        assert_non_null(t);
        int deg = 0;
        for (int h = 1; h < n; h *= 2)
            deg++;
        for (int j = 0; j < n; j++) {
            s_close(t->sched[0].w[j * n + j], 1.0 / (deg + 1), 1e-15, "exponential self");
            for (int h = 1; h < n; h *= 2)
                s_close(t->sched[0].w[((j + h) % n) * n + j], 1.0 / (deg + 1), 1e-15, "exponential edge");
        }
        topo_destroy(&t);
    }
    /* bad generator arguments */
    assert_null(topo_generate("hypercube", 8, 0, 0, err, sizeof err));
    assert_non_null(strstr(err, "unknown generator 'hypercube'"));
    assert_null(topo_generate("torus", 16, 4, 3, err, sizeof err));
    assert_non_null(strstr(err, "torus 4 x 3 has 12 nodes, not 16"));
    assert_null(topo_generate("directed_ring", 0, 0, 0, err, sizeof err));
    assert_non_null(strstr(err, "out of range"));
    assert_null(topo_generate("complete", TOPO_MAX_NODES + 1, 0, 0, err, sizeof err));
    /* a single node is a valid (trivial) topology */
    topo *one = topo_generate("directed_ring", 1, 0, 0, err, sizeof err);
    assert_non_null(one);
    assert_true(one->sched[0].w[0] == 1.0);
    topo_destroy(&one);
}

/* ---- broken files ------------------------------------------------------ */

static void test_broken_files(void **state)
{
    (void)state;
    struct {
        const char *file;
        int line;
        const char *what;
    } cases[] = {
        { "bad-unknown-key.yaml", 3, "unknown key 'grahp'" },
        { "bad-wrong-type.yaml", 6, "rows: 'four' is not an integer" },
        { "bad-duplicate-id.yaml", 6, "duplicate node id 'b' (first at line 4)" },
        { "bad-missing-node.yaml", 8, "'n9' is not a node" },
        { "bad-column-sum.yaml", 10, "column sum 0.7 at node n3" },
        { "bad-not-connected.yaml", 3, "not strongly connected: node n5 unreachable from n0" },
        { "bad-missing-self.yaml", 4, "missing self weight for node n2" },
        { "bad-weight-range.yaml", 7, "weight 1.5 out of [0, 1]" },
        { "bad-endpoint.yaml", 6, "bad endpoint 'tcp://10.0.0.2'" },
        { "bad-key-length.yaml", 8, "the key has 39 characters" },
        { "bad-bad-z85.yaml", 5, "not in the Z85 alphabet" },
        { "bad-schedule-size.yaml", 6, "schedule[1]: matrix: 3 rows, expected 4" },
        { "bad-yaml-syntax.yaml", 6, "YAML syntax error" },
        { "bad-duplicate-edge.yaml", 7, "duplicate edge n0 -> n1" },
        { "bad-curve-no-key.yaml", 6, "security: curve but node b has no key" },
        { "bad-torus-size.yaml", 5, "torus 4 x 3 has 12 nodes but the file has 16" },
        { "bad-matrix-diagonal.yaml", 6, "missing self weight: node n1" },
        { "bad-duplicate-key.yaml", 5, "duplicate key 'nodes'" },
        { "bad-empty.yaml", 1, "empty file" },
        { "bad-graph-and-schedule.yaml", 3, "exactly one of 'graph' or 'schedule'" },
        { "bad-not-a-number.yaml", 5, "'half' is not a number" },
        { "bad-schedule-disconnected.yaml", 3, "node n1 unreachable from n0" },
        { "bad-duplicate-pubkey.yaml", 10, "nodes alpha and beta (line 4) have the same public key" },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char path[256], where[300], err[1024] = "";
        snprintf(path, sizeof path, "tests/data/topo/%s", cases[k].file);
        assert_int_equal(access(path, R_OK), 0);
        topo *t = topo_load(path, err, sizeof err);
        snprintf(where, sizeof where, "%s:%d: ", path, cases[k].line);
        if (t || !strstr(err, where) || !strstr(err, cases[k].what)) {
            print_error("%s: expected '%s...%s', got '%s'\n", cases[k].file, where, cases[k].what, err);
            topo_destroy(&t);
            fail();
        }
    }
    /* every bad-*.yaml in the folder is in the table above */
    FILE *ls = popen("ls tests/data/topo/ | grep -c '^bad-'", "r");
    assert_non_null(ls);
    int count = 0;
    assert_int_equal(fscanf(ls, "%d", &count), 1);
    pclose(ls);
    assert_int_equal(count, (int)(sizeof cases / sizeof cases[0]));
    /* a file that does not exist */
    char err[512];
    assert_null(topo_load("tests/data/topo/no-such-file.yaml", err, sizeof err));
    assert_non_null(strstr(err, "no-such-file.yaml: cannot open"));
}

/* Errors from strings: messages use the given name; more cases that need no
 * fixture file each. */
static void test_parse_strings(void **state)
{
    (void)state;
    struct {
        const char *yaml, *what;
    } bad[] = {
        { "nodes: 0\ngraph: {generator: complete}\n", "inline.yaml:1: nodes: 0 is out of range" },
        { "nodes: 4\ngraph: {generator: complete, rows: 2}\n", "inline.yaml:2: graph: 'rows' does not apply" },
        { "nodes: 4\ngraph: [1, 2]\n", "inline.yaml:2: graph: expected a mapping" },
        { "nodes: 4\n", "give exactly one of 'graph' or 'schedule'" },
        { "graph: {generator: complete}\n", "inline.yaml:1: missing 'nodes'" },
        { "- a\n- b\n", "inline.yaml:1: topology: expected a mapping" },
        { "nodes: 2\ngraph: {edges: [{from: n0, to: n0, weight: 1}], self: 1}\n", "goes under 'self'" },
        { "nodes: 2\ngraph: {edges: [{from: n0, to: n1}], self: 1/2}\n", "missing weight" },
        { "nodes: 2\ngraph: {edges: [{from: n0, to: n1, weight: 1/2}]}\n", "missing self weights" },
        { "nodes: 2\ngraph: {generator: complete, edges: []}\n", "give only one of" },
        { "nodes: 2\ngraph: {}\n", "needs one of" },
        { "nodes: 4\ngraph: {generator: circulant, offsets: [4]}\n", "multiple of the node count" },
        { "nodes: 4\ngraph: {generator: circulant}\n", "needs offsets" },
        { "nodes: 4\ngraph: {generator: star, hub: n7}\n", "'n7' is not a node" },
        { "nodes: 4\ngraph: {generator: complete, self: 0}\n", "must be in (0, 1]" },
        { "nodes: 2\ngraph: {matrix: [[1/2, 1/2], [1/2, 0/0]]}\n", "'0/0' is not a number" },
        { "nodes: 2\ngraph: {matrix: [[1/2, 1/2], [1/2, 1e999]]}\n", "is not a number" },
        { "nodes: 2\ngraph: {matrix: [[1/2, 1/2], [1/2]]}\n", "1 entries, expected 2" },
        { "nodes: 2\ngraph: {matrix: [[0.6, 1/2], [0.3, 1/2]]}\n", "inline.yaml:2: graph: column sum 0.9 at node n0" },
        { "nodes: 2\nsecurity: maybe\ngraph: {generator: complete}\n", "inline.yaml:2: security: expected" },
        { "nodes: 2\ndiscovery: wifi\ngraph: {generator: complete}\n",
          "inline.yaml:2: discovery: expected 'none' or 'lan'" },
        { "nodes: 2\ndiscovery: [lan]\ngraph: {generator: complete}\n", "inline.yaml:2: discovery: expected a string" },
        { "nodes: 2\ndiscovery_port: 4000\ngraph: {generator: complete}\n",
          "inline.yaml:2: discovery_port is only used with 'discovery: lan'" },
        { "nodes: 2\ndiscovery: none\ndiscovery_port: 4000\ngraph: {generator: complete}\n",
          "inline.yaml:3: discovery_port is only used" },
        { "nodes: 2\ndiscovery: lan\ndiscovery_port: 0\ngraph: {generator: complete}\n",
          "inline.yaml:3: discovery_port: 0 is out of range 1..65535" },
        { "nodes: 2\ndiscovery: lan\ndiscovery_port: 65536\ngraph: {generator: complete}\n",
          "discovery_port: 65536 is out of range" },
        { "nodes: 2\ndiscovery: lan\ndiscovery_port: udp\ngraph: {generator: complete}\n",
          "inline.yaml:3: discovery_port: 'udp' is not an integer" },
        { "nodes: 2\ndiscovery: lan\ndiscovery: lan\ngraph: {generator: complete}\n", "duplicate key 'discovery'" },
        { "nodes: [a, {id: b, host: h}]\ngraph: {generator: complete}\n", "host and port go together" },
        { "nodes: [{id: a, endpoint: 'tcp://x:1', port: 3}]\ngraph: {generator: complete}\n", "not both" },
        { "nodes: [{id: a, endpoint: 'tcp://x:70000'}]\ngraph: {generator: complete}\n", "port must be" },
        { "nodes: [{id: a, endpoint: 'udp://x:7'}]\ngraph: {generator: complete}\n", "must start with tcp://" },
        { "nodes: [{id: a, endpoint: 'tcp://x:7'}, {id: b, endpoint: 'tcp://x:7'}]\ngraph: {generator: complete}\n",
          "duplicate endpoint" },
        { "nodes: ['a b']\ngraph: {generator: complete}\n", "bad node id" },
        { "nodes: 2\ngraph: {generator: complete}\n---\nnodes: 3\n", "more than one YAML document" },
        { "nodes: 2\ngraph: {generator: directed_ring}\nschedule: []\n", "exactly one of" },
        { "nodes: 2\nschedule: []\n", "schedule: 0 graphs" },
        { "nodes: 1024\nschedule: [{generator: complete}, {generator: complete}, {generator: complete},"
          " {generator: complete}, {generator: complete}]\n", "too large" },
        { "nodes: 2\ngraph: {weights: uniform, self: {n0: 1}, edges: [{from: n0, to: n1}]}\n", "one number" },
        { "nodes: 2\ngraph: {weights: even, edges: []}\n", "only choice is 'uniform'" },
        { "nodes: 3\ngraph: {edges: [{from: n0, to: n1, weight: 1/2}, {from: n1, to: n0, weight: 1/2}], "
          "self: {n0: 1/2, n1: 1/2, n2: 1/2, n0: 1}}\n", "duplicate self weight for node n0" },
        { "nodes: 2\ngraph: {generator: complete}\nextra: 1\n", "inline.yaml:3: topology: unknown key 'extra'" },
        { "nodes: 2\ngraph: {generator: complete, description: [x]}\n", "expected a string" },
        { "nodes: 2\ngraph: {generator: \"compl\\0ete\"}\n", "NUL byte" },
        { "nodes: &a [*a]\ngraph: {generator: complete}\n", "inline.yaml:1:" },
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char err[1024] = "";
        topo *t = topo_parse(bad[k].yaml, strlen(bad[k].yaml), "inline.yaml", err, sizeof err);
        if (t || !strstr(err, bad[k].what)) {
            print_error("case %zu: expected '%s', got '%s'\n", k, bad[k].what, err);
            topo_destroy(&t);
            fail();
        }
    }
    /* the input need not be NUL-terminated: only len bytes are read */
    const char good[] = "nodes: 3\ngraph: {generator: undirected_ring}\nXXXX";
    char err[256];
    topo *t = topo_parse(good, strlen(good) - 4, "inline.yaml", err, sizeof err);
    assert_non_null(t);
    assert_string_equal(t->name, "inline.yaml");
    topo_destroy(&t);
    /* uniform edges with a given self weight: keep 1/2, split the rest */
    const char u[] = "nodes: 3\ngraph: {weights: uniform, self: 1/2, edges: [{from: n0, to: [n1, n2]}, "
                     "{from: n1, to: n0}, {from: n2, to: n0}]}\n";
    t = topo_parse(u, strlen(u), "u.yaml", err, sizeof err);
    assert_non_null(t);
    s_close(t->sched[0].w[0], 0.5, 0, "self");
    s_close(t->sched[0].w[1 * 3 + 0], 0.25, 0, "n0 -> n1");
    s_close(t->sched[0].w[0 * 3 + 1], 0.5, 0, "n1 -> n0");
    topo_destroy(&t);
    /* discovery: default none; lan with the default or a given port; nodes
     * without endpoints are fine either way (the node, not the parser,
     * needs them when discovery is none) */
    const char *const disc[] = {"nodes: 2\ngraph: {generator: complete}\n",
                                "nodes: 2\ndiscovery: lan\ngraph: {generator: complete}\n",
                                "nodes: [a, {id: b, endpoint: 'tcp://h:7'}]\ndiscovery: lan\n"
                                "discovery_port: 40001\ngraph: {generator: complete}\n",
                                "nodes: 2\ndiscovery: none\ngraph: {generator: complete}\n"};
    const int disc_kind[] = {TOPO_DISCOVERY_NONE, TOPO_DISCOVERY_LAN, TOPO_DISCOVERY_LAN,
                             TOPO_DISCOVERY_NONE};
    const int disc_port[] = {0, TOPO_DISCOVERY_PORT_DEFAULT, 40001, 0};
    for (int k = 0; k < 4; k++) {
        t = topo_parse(disc[k], strlen(disc[k]), "d.yaml", err, sizeof err);
        assert_non_null(t);
        assert_int_equal(t->discovery, disc_kind[k]);
        assert_int_equal(t->discovery_port, disc_port[k]);
        topo_destroy(&t);
    }
    topo_destroy(&t);   /* safe on NULL */
    topo_destroy(NULL);
}

/* Hand-built topos (as gossip tests make them) go through topo_validate. */
static void test_validate_hand_built(void **state)
{
    (void)state;
    char err[512];
    topo *t = topo_generate("directed_ring", 4, 0, 0, err, sizeof err);
    assert_non_null(t);
    assert_int_equal(topo_validate(t, err, sizeof err), 0);
    t->sched[0].w[1 * 4 + 0] = 0.3;   /* n0 now sends 0.5 + 0.3 */
    assert_int_equal(topo_validate(t, err, sizeof err), -1);
    assert_non_null(strstr(err, "column sum 0.8 at node n0"));
    t->sched[0].w[1 * 4 + 0] = 0.5;
    t->sched[0].w[2 * 4 + 2] = 0.0;
    t->sched[0].w[3 * 4 + 2] = 1.0;
    assert_int_equal(topo_validate(t, err, sizeof err), -1);
    assert_non_null(strstr(err, "missing self weight: node n2"));
    t->sched[0].w[2 * 4 + 2] = 0.5;
    t->sched[0].w[3 * 4 + 2] = 0.5;
    snprintf(t->nodes[3].id, sizeof t->nodes[3].id, "n1");
    assert_int_equal(topo_validate(t, err, sizeof err), -1);
    assert_non_null(strstr(err, "duplicate node id 'n1'"));
    snprintf(t->nodes[3].id, sizeof t->nodes[3].id, "n3");
    t->security_curve = 1;
    assert_int_equal(topo_validate(t, err, sizeof err), -1);
    assert_non_null(strstr(err, "public key"));
    t->security_curve = 0;
    snprintf(t->nodes[0].pubkey, sizeof t->nodes[0].pubkey, "%s", "0123456789012345678901234567890123456789");
    snprintf(t->nodes[2].pubkey, sizeof t->nodes[2].pubkey, "%s", t->nodes[0].pubkey);
    assert_int_equal(topo_validate(t, err, sizeof err), -1);
    assert_non_null(strstr(err, "nodes n0 and n2 have the same public key"));
    t->nodes[0].pubkey[0] = t->nodes[2].pubkey[0] = '\0';
    t->sched[0].w[0] = 1.5;
    assert_int_equal(topo_validate(t, err, sizeof err), -1);
    assert_non_null(strstr(err, "outside [0, 1]"));
    t->sched[0].w[0] = 0.5;
    assert_int_equal(topo_validate(t, err, sizeof err), 0);
    topo_destroy(&t);
    assert_null(t);
}

/* ---- schedules and neighbours ------------------------------------------ */

static void test_schedule_and_neighbors(void **state)
{
    (void)state;
    topo *t = s_load("topologies/onepeer-exp8.yaml");
    int nb[8];
    for (uint64_t it = 0; it < 12; it++) {
        int h = 1 << (it % 3);
        const double *w = topo_weights(t, it);
        assert_ptr_equal(w, t->sched[it % 3].w);
        for (int i = 0; i < 8; i++)
            for (int j = 0; j < 8; j++) {
                double want = (j == i || i == (j + h) % 8) ? 0.5 : 0.0;
                assert_true(w[i * 8 + j] == want);
            }
        for (int i = 0; i < 8; i++) {
            assert_int_equal(topo_out_neighbors(t, it, i, nb), 1);
            assert_int_equal(nb[0], (i + h) % 8);
            assert_int_equal(topo_in_neighbors(t, it, i, nb), 1);
            assert_int_equal(nb[0], (i + 8 - h) % 8);
        }
    }
    /* over the whole period node 0 sends to 1, 2, 4 and hears from 4, 6, 7 */
    assert_int_equal(topo_out_neighbors_any(t, 0, nb), 3);
    assert_int_equal(nb[0], 1);
    assert_int_equal(nb[1], 2);
    assert_int_equal(nb[2], 4);
    assert_int_equal(topo_in_neighbors_any(t, 0, nb), 3);
    assert_int_equal(nb[0], 4);
    assert_int_equal(nb[1], 6);
    assert_int_equal(nb[2], 7);
    assert_int_equal(topo_find_node(t, "n5"), 5);
    assert_int_equal(topo_find_node(t, "n8"), -1);
    assert_int_equal(topo_find_node(t, NULL), -1);
    topo_destroy(&t);
    /* star: the hub hears from every spoke */
    t = s_load("topologies/star8.yaml");
    assert_int_equal(topo_in_neighbors(t, 5, 0, nb), 7);
    assert_int_equal(topo_out_neighbors(t, 5, 3, nb), 1);
    assert_int_equal(nb[0], 0);
    topo_destroy(&t);
}

/* ---- report ------------------------------------------------------------ */

static char *s_slurp(FILE *f)
{
    long len = ftell(f);
    rewind(f);
    char *s = calloc((size_t)len + 1, 1);
    assert_non_null(s);
    assert_int_equal(fread(s, 1, (size_t)len, f), (size_t)len);
    return s;
}

static void test_report(void **state)
{
    (void)state;
    topo *t = s_load("topologies/star8.yaml");
    FILE *f = tmpfile();
    assert_non_null(f);
    assert_int_equal(topo_report(t, f, 0), 0);
    char *text = s_slurp(f);
    fclose(f);
    assert_non_null(strstr(text, "nodes       8: n0 n1"));
    assert_non_null(strstr(text, "14 edges"));
    assert_non_null(strstr(text, "in-degree 1..7 (n0 7, n1 1"));
    assert_non_null(strstr(text, "column stochastic only"));
    assert_non_null(strstr(text, "needs push-sum"));
    /* star8: spoke-difference vectors give 1/2, the hub/spoke block gives
     * 1 and -3/8, so |lambda_2| = 1/2 */
    assert_non_null(strstr(text, "|lambda_2| 0.500000000   spectral gap 0.500000000"));
    free(text);
    f = tmpfile();
    assert_int_equal(topo_report(t, f, 1), 0);
    char *json = s_slurp(f);
    fclose(f);
    assert_non_null(strstr(json, "\"n\":8"));
    assert_non_null(strstr(json, "\"period\":1"));
    assert_non_null(strstr(json, "\"in_degree\":[7,1,1,1,1,1,1,1]"));
    assert_non_null(strstr(json, "\"doubly_stochastic\":false"));
    assert_non_null(strstr(json, "\"push_sum_required\":true"));
    assert_non_null(strstr(json, "\"period_product\":null"));
    const char *g = strstr(json, "\"spectral_gap\":");
    assert_non_null(g);
    s_close(strtod(g + strlen("\"spectral_gap\":"), NULL), 0.5, 1e-9, "json gap");
    int depth = 0, min_depth = 0;
    for (const char *p = json; *p; p++) {
        depth += (*p == '{' || *p == '[') - (*p == '}' || *p == ']');
        min_depth = depth < min_depth ? depth : min_depth;
    }
    assert_int_equal(depth, 0);
    assert_int_equal(min_depth, 0);
    free(json);
    topo_destroy(&t);
    /* schedule: the product over one period */
    t = s_load("topologies/onepeer-exp8.yaml");
    f = tmpfile();
    assert_int_equal(topo_report(t, f, 1), 0);
    json = s_slurp(f);
    fclose(f);
    const char *pp = strstr(json, "\"period_product\":{\"lambda2\":");
    assert_non_null(pp);
    assert_true(fabs(strtod(pp + strlen("\"period_product\":{\"lambda2\":"), NULL)) < 1e-7);
    assert_non_null(strstr(json, "\"period\":3"));
    assert_non_null(strstr(json, "\"discovery\":\"none\",\"discovery_port\":0"));
    free(json);
    topo_destroy(&t);
    /* discovery: a line in the text, two keys in the JSON */
    t = s_load("topologies/lab4-lan.yaml");
    for (int as_json = 0; as_json < 2; as_json++) {
        f = tmpfile();
        assert_int_equal(topo_report(t, f, as_json), 0);
        text = s_slurp(f);
        fclose(f);
        assert_non_null(strstr(text, as_json ? "\"discovery\":\"lan\",\"discovery_port\":47820"
                                              : "discovery   lan (UDP broadcast beacons on port 47820)"));
        free(text);
    }
    topo_destroy(&t);
}

/* ---- the command ------------------------------------------------------- */

/* Runs node_cmd_topology with stdout and stderr sent to /dev/null. */
static int s_cmd(int argc, const char **argv)
{
    fflush(stdout);
    fflush(stderr);
    int out = dup(1), errfd = dup(2);
    FILE *null = fopen("/dev/null", "w");
    assert_non_null(null);
    dup2(fileno(null), 1);
    dup2(fileno(null), 2);
    int rc = node_cmd_topology(argc, (char **)argv);
    fflush(stdout);
    fflush(stderr);
    dup2(out, 1);
    dup2(errfd, 2);
    close(out);
    close(errfd);
    fclose(null);
    return rc;
}

static void test_cmd_exit_codes(void **state)
{
    (void)state;
    const char *ok[] = { "topology", "topologies/torus4x4.yaml" };
    assert_int_equal(s_cmd(2, ok), 0);
    const char *ok_json[] = { "topology", "--json", "topologies/onepeer-exp8.yaml" };
    assert_int_equal(s_cmd(3, ok_json), 0);
    const char *json_after[] = { "topology", "topologies/exp8.yaml", "--json" };
    assert_int_equal(s_cmd(3, json_after), 0);
    const char *help[] = { "topology", "--help" };
    assert_int_equal(s_cmd(2, help), 0);
    const char *bad[] = { "topology", "tests/data/topo/bad-column-sum.yaml" };
    assert_int_equal(s_cmd(2, bad), 2);
    const char *missing[] = { "topology", "tests/data/topo/no-such-file.yaml" };
    assert_int_equal(s_cmd(2, missing), 2);
    const char *none[] = { "topology" };
    assert_int_equal(s_cmd(1, none), 2);
    const char *unknown[] = { "topology", "--frobnicate", "topologies/ring8.yaml" };
    assert_int_equal(s_cmd(3, unknown), 2);
    const char *two[] = { "topology", "topologies/ring8.yaml", "topologies/ring16.yaml" };
    assert_int_equal(s_cmd(3, two), 2);
}

/* ---- robustness: mutated inputs never crash ---------------------------- */

/* Hostile YAML: nesting and size limits refuse before libyaml builds a
 * document (100,000 nested '[' took 15 s before the limit, quadratic in
 * libyaml's scanner).  Timing is printed, not asserted. */
static char *s_repeat(const char *head, const char *unit, size_t times, const char *tail,
                      size_t *len)
{
    size_t hl = strlen(head), ul = strlen(unit), tl = strlen(tail);
    *len = hl + ul * times + tl;
    char *s = nn_xmalloc(*len + 1), *p = s;
    memcpy(p, head, hl);
    p += hl;
    for (size_t k = 0; k < times; k++, p += ul)
        memcpy(p, unit, ul);
    memcpy(p, tail, tl + 1);
    return s;
}

static void s_expect_refused_yaml(const char *what, const char *yaml, size_t len, const char *want)
{
    char err[1024] = "";
    double t0 = nn_now();
    topo *t = topo_parse(yaml, len, "hostile.yaml", err, sizeof err);
    double dt = nn_now() - t0;
    print_message("%s (%zu bytes): refused in %.3f s: %s\n", what, len, dt, err);
    if (t || !strstr(err, want)) {
        topo_destroy(&t);
        fail_msg("%s: expected '%s', got '%s'", what, want, err);
    }
}

static void test_hostile_yaml(void **state)
{
    (void)state;
    size_t len;
    char *s = s_repeat("", "[", 100000, "", &len);
    s_expect_refused_yaml("100,000 nested [", s, len, "hostile.yaml:1: nested more than 32 deep");
    free(s);
    s = s_repeat("nodes: 2\ngraph: ", "{a: ", 50000, "1", &len);
    s_expect_refused_yaml("50,000 nested {a:", s, len, "hostile.yaml:2: nested more than 32 deep");
    free(s);
    s = s_repeat("", "- ", 100000, "x\n", &len);
    s_expect_refused_yaml("100,000 nested block lists", s, len, "nested more than 32 deep");
    free(s);
    /* the limit is 32: 32 levels pass the first pass (and fail the schema) */
    s = s_repeat("", "[", 32, "", &len);
    char *closed = s_repeat(s, "]", 32, "\n", &len);
    char err[1024];
    assert_null(topo_parse(closed, len, "deep.yaml", err, sizeof err));
    assert_null(strstr(err, "nested"));
    free(closed);
    free(s);
    s = s_repeat("", "[", 33, "", &len);
    closed = s_repeat(s, "]", 33, "\n", &len);
    s_expect_refused_yaml("33 nested [", closed, len, "nested more than 32 deep");
    free(closed);
    free(s);
    /* more values than any topology needs (2^21): about 4 MB of "1," */
    s = s_repeat("nodes: 2\ngraph: {matrix: [", "1,", (2u << 20) + 10, "1]}\n", &len);
    s_expect_refused_yaml("2,097,162 values", s, len, "more than 2097152 YAML values");
    free(s);
    /* the largest full matrix (1024 x 1024, the identity) gets through the
     * limits to the schema, which refuses it as not connected */
    int n = TOPO_MAX_NODES;
    size_t cap = (size_t)n * (size_t)n * 2 + 8 * (size_t)n + 64, k = 0;
    char *m = nn_xmalloc(cap);
    k += (size_t)snprintf(m + k, cap - k, "nodes: %d\ngraph:\n  matrix:\n", n);
    for (int i = 0; i < n; i++) {
        memcpy(m + k, "  - [", 5);
        k += 5;
        for (int j = 0; j < n; j++) {
            m[k++] = i == j ? '1' : '0';
            m[k++] = j + 1 < n ? ',' : ']';
        }
        m[k++] = '\n';
    }
    double t0 = nn_now();
    topo *t = topo_parse(m, k, "big.yaml", err, sizeof err);
    print_message("a full %dx%d matrix (%zu bytes): through the limits in %.3f s: %s\n", n, n, k,
                  nn_now() - t0, err);
    assert_null(t);
    assert_non_null(strstr(err, "not strongly connected"));
    free(m);
}

static void test_mutations_never_crash(void **state)
{
    (void)state;
    const char *files[] = { "topologies/exp8.yaml", "topologies/example-lan.yaml", "topologies/onepeer-exp8.yaml",
                            "tests/data/topo/star8-matrix.yaml", "tests/data/topo/torus4x4-edges.yaml" };
    int rounds = tk_quick() ? 150 : 600;
    static const char alphabet[] = " \n:-[]{},#'\"&*!|>0123456789./abcnxyz";
    nn_rng rng;
    nn_rng_seed(&rng, 7);
    int parsed = 0;
    for (size_t k = 0; k < sizeof files / sizeof files[0]; k++) {
        FILE *f = fopen(files[k], "rb");
        assert_non_null(f);
        char src[8192];
        size_t len = fread(src, 1, sizeof src, f);
        fclose(f);
        for (int r = 0; r < rounds; r++) {
            char buf[8192];
            memcpy(buf, src, len);
            size_t l = len;
            int edits = 1 + (int)nn_rng_below(&rng, 4);
            for (int e = 0; e < edits; e++) {
                size_t at = nn_rng_below(&rng, (uint32_t)l);
                switch (nn_rng_below(&rng, 3)) {
                case 0: buf[at] = alphabet[nn_rng_below(&rng, sizeof alphabet - 1)]; break;
                case 1: l = at + 1; break;                                 /* truncate */
                default: buf[at] = (char)nn_rng_below(&rng, 256); break;   /* any byte */
                }
            }
            char err[1024] = "";
            topo *t = topo_parse(buf, l, "mutant.yaml", err, sizeof err);
            if (t) {
                parsed++;
                assert_int_equal(topo_validate(t, err, sizeof err), 0);
                topo_destroy(&t);
            } else {
                assert_true(strncmp(err, "mutant.yaml", 11) == 0);
            }
        }
    }
    assert_true(parsed > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spectral_closed_forms),
        cmocka_unit_test(test_spectral_against_reference),
        cmocka_unit_test(test_shipped_files),
        cmocka_unit_test(test_generators_equal_explicit),
        cmocka_unit_test(test_broken_files),
        cmocka_unit_test(test_parse_strings),
        cmocka_unit_test(test_validate_hand_built),
        cmocka_unit_test(test_schedule_and_neighbors),
        cmocka_unit_test(test_report),
        cmocka_unit_test(test_cmd_exit_codes),
        cmocka_unit_test(test_hostile_yaml),
        cmocka_unit_test(test_mutations_never_crash),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

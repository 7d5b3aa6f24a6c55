/* lp_conv_shift — the 8-bit conv's shift path: stride-1 "same" convs on
 * shifted rows of pair or quad grids of codes, no im2col (forward, and the
 * input gradient as the same conv with the kernel flipped).
 *
 * Owns:    the grids of a chunk of samples, the packed kernel lanes, the
 *          shifted-row GEMM (lp_shiftgemm, lp_shiftgemm_q, lp_tilegemm) on
 *          chunks split over the pool, the dequantization with its affine
 *          correction, the path's scratch size; the row kernels' scalar
 *          twins (lp_pair_plane_ref, lp_tap_sum_row_ref, lp_quad_row_ref,
 *          lp_tap_isum_row_ref; lp_simd.h).
 * Exposes: lp_conv_shift, lp_conv_shift_bytes (lp_conv.h); the twins
 *          (lp_simd.h).
 * Callers: lp_conv.c (lp_conv2d_forward, the input gradient, the scratch
 *          size); the twins: lp_kern.c's tables, tests.
 *
 * The correction's tables (tap ranges, prefix sums, row classes, base
 * rows) are lp_conv.c's, shared with the im2col path. */
#include "lowprec/lp_conv.h"

#include <assert.h>
#include <string.h>

#include "lowprec/lp_gemm.h"
#include "lowprec/lp_kern.h"
#include "lowprec/lp_layer_common.h"
#include "lowprec/lp_simd.h"
#include "lowprec/lp_tile.h"
#include "nn/nn_pool.h"

/* ---- shift path (stride-1 "same" convs, every level) ------------------------
 * The integer twin of nn's im2col-free convolution (nn_conv.c): codes of nb
 * samples go into a zero-bordered grid of int16 channel pairs (portable and
 * AVX2: lp_shiftgemm, vpmaddwd) or byte quads (AVX-512 VNNI: lp_shiftgemm_q,
 * vpdpbusd; lp_gemm.h), and the GEMM reads the shifted rows directly:
 *   S[m][j] = sum_{c, t} a[m][c][t] * b[c][j + toff[t]]
 * (no im2col, no col2im; pad columns produce unused sums).  The forward is
 * the conv of the input codes with the weight codes (m = oc); the input
 * gradient of a stride-1 same conv is the same conv of the gradient codes
 * with the kernel flipped and the channels swapped (m = c), so both use
 * lp_conv_shift.  Border pixels see fewer taps: the affine correction uses
 * SB(p) = sum of the codes b over the taps inside the image (pad codes are
 * 0) and SA(m, p) = the sum of a over the same taps (2-D prefix sums over
 * the kernel), exactly as the im2col path.  Quads hold the weight codes
 * shifted by -128 (vpdpbusd multiplies u8 by s8); the correction adds
 * 128*SB back in int32 before the same double arithmetic, so every level
 * gives the same floats.  (Before the quads, the AVX-512 level used im2col +
 * vpdpbusd here: resnet20's int8 step was 1.31x the FP32 step on an EPYC
 * Zen 4, 0.75x with them.) */

/* Samples per chunk of the shift path: >= 1024 grid columns. */
static int s_shift_nb(int N, int H, int W, int pad)
{
    size_t plane = (size_t)(H + 2 * pad) * (W + 2 * pad);
    int nb = (int)((1024 + plane - 1) / plane);
    return nb < 1 ? 1 : nb > N ? N : nb;
}

/* Lanes of one variant of a pair row (see lp_conv_shift): pad lanes, pad
 * zero rows, nb samples of H rows + pad zero rows, pad lanes; rows of W. */
static size_t s_vlen(int nb, int H, int W, int pad)
{
    return (size_t)2 * pad + ((size_t)pad + (size_t)nb * (H + pad)) * W;
}

/* (The pair layout's rows and packed A are the largest of the three
 * layouts, except the tile layout's grid for one quad row and its packed A
 * for M not a multiple of 16: the max of the two is taken.) */
/* Bytes of one thread's part of lp_conv_shift scratch: the grid, the channel
 * sums and the GEMM sums of a chunk, and the dequant row sums. */
static size_t s_shift_thread_bytes(int N, int nch, int M, int H, int W, int K, int pad)
{
    const int np = (nch + 1) / 2, nq = (nch + 3) / 4, nb = s_shift_nb(N, H, W, pad);
    const size_t cs = (size_t)nb * (H + 2 * pad) * (W + 2 * pad), vlen = s_vlen(nb, H, W, pad);
    const size_t gp = (size_t)np * K * vlen, gt = (size_t)nq * K * (vlen + 1);
    size_t s = 0;
    s += LP_ALIGN64((gp > gt ? gp : gt) * 4);
    s += LP_ALIGN64(cs * 4);
    s += LP_ALIGN64((size_t)M * vlen * 4);
    s += LP_ALIGN64((size_t)H * W * sizeof(double));
    s += LP_ALIGN64((size_t)H * W * sizeof(float)); /* a plane, when adding */
    return s;
}

/* Threads lp_conv_shift may use: its chunks of samples, at most
 * LP_CONV_MAX_THREADS (the thread parts its scratch holds). */
static int s_shift_threads(int N, int H, int W, int pad)
{
    const int nb = s_shift_nb(N, H, W, pad), chunks = (N + nb - 1) / nb;
    int nt = nn_pool_threads();
    nt = nt > LP_CONV_MAX_THREADS ? LP_CONV_MAX_THREADS : nt;
    return nt > chunks ? chunks : nt;
}

/* Samples per chunk when nt threads run lp_conv_shift: s_shift_nb's, made
 * smaller where its chunks would not split evenly (3 chunks of resnet20's
 * 8x8 stage on 2 threads ran 2 on one thread): the fewest chunks that are
 * a multiple of nt, as long as that stays within twice the count.  The
 * floats of a sample do not depend on its chunk (integer sums, then
 * per-sample dequantization). */
static int s_shift_nb_at(int N, int H, int W, int pad, int nt)
{
    const int nb = s_shift_nb(N, H, W, pad), chunks = (N + nb - 1) / nb;
    if (nt <= 1 || chunks % nt == 0)
        return nb;
    const int want = (chunks + nt - 1) / nt * nt;
    if (want > 2 * chunks || want > N)
        return nb;
    return (N + want - 1) / want;
}

size_t lp_conv_shift_bytes(int N, int nch, int M, int H, int W, int K, int pad)
{
    const int np = (nch + 1) / 2, nq = (nch + 3) / 4, T = K * K, nb = s_shift_nb(N, H, W, pad);
    const size_t ap = lp_shift_pack_lanes(M, np * T), at = lp_tile_pack_lanes(M, K, nq * K);
    const int parts = LP_CONV_MAX_THREADS < (N + nb - 1) / nb ? LP_CONV_MAX_THREADS
                                                              : (N + nb - 1) / nb;
    size_t s = 0;
    s += LP_ALIGN64((ap > at ? ap : at) * 4);
    s += LP_ALIGN64((size_t)M * (K + 1) * (K + 1) * 4);
    s += LP_ALIGN64((size_t)(H + W) * 2 * sizeof(int));
    s += LP_ALIGN64((size_t)M * lp_conv_max_classes(H, K) * W * sizeof(double));
    s += LP_ALIGN64((size_t)H * sizeof(int));
    return s + (size_t)parts * s_shift_thread_bytes(N, nch, M, H, W, K, pad);
}

void lp_pair_plane_ref(uint32_t *dst, size_t vstride, int V, int32_t *chs, size_t ldc,
                       const uint8_t *r0, const uint8_t *r1, int H, int W)
{
    const int pad = (V - 1) / 2;
    for (int h = 0; h < H; h++)
        for (int w = 0; w < W; w++) {
            const size_t i = (size_t)h * W + w;
            uint8_t v0 = r0[i], v1 = r1 ? r1[i] : 0;
            for (int v = 0; v < V; v++) {
                const int dx = v - pad, wrap = dx < 0 ? w >= W + dx : w < dx;
                dst[(size_t)v * vstride + i] = wrap ? 0 : lp_pair(v0, v1);
            }
            if (chs)
                chs[(size_t)h * ldc + w] += v0 + v1;
        }
}

void lp_tap_sum_row_ref(double *t, const int32_t *s, const int *off, int T, double c, size_t n)
{
    for (size_t w = 0; w < n; w++) {
        int32_t sum = 0;
        for (int k = 0; k < T; k++)
            sum += s[(ptrdiff_t)w + off[k]];
        t[w] = c * sum;
    }
}

void lp_quad_row_ref(uint32_t *dst, int32_t *chs, const uint8_t *const r[4], size_t n)
{
    for (size_t w = 0; w < n; w++) {
        uint8_t c[4];
        for (int l = 0; l < 4; l++)
            c[l] = r[l] ? r[l][w] : 0;
        dst[w] = lp_quad(c[0], c[1], c[2], c[3]);
        if (chs)
            chs[w] += c[0] + c[1] + c[2] + c[3];
    }
}

void lp_tap_isum_row_ref(int32_t *sb, const int32_t *s, const int *off, int T, size_t n)
{
    for (size_t w = 0; w < n; w++) {
        int32_t sum = 0;
        for (int k = 0; k < T; k++)
            sum += s[(ptrdiff_t)w + off[k]];
        sb[w] = sum;
    }
}

/* The row kernels lp_conv_shift uses at the current CPU level. */
typedef struct {
    int quad; /* 1: byte quads (lp_shiftgemm_q), 0: int16 pairs */
    int tile; /* 1: quads in the tile layout (lp_tilegemm; quad is 1 too) */
    int model; /* 1: the tile kernel on the software model (tests) */
    void (*pair_plane)(uint32_t *, size_t, int, int32_t *, size_t, const uint8_t *,
                       const uint8_t *, int, int);
    void (*quad_row)(uint32_t *, int32_t *, const uint8_t *const[4], size_t);
    void (*tap_sum_row)(double *, const int32_t *, const int *, int, double, size_t);
    void (*tap_isum_row)(int32_t *, const int32_t *, const int *, int, size_t);
    void (*dequant_rows)(float *, const int32_t *, const double *, double, const double *,
                         size_t, int);
    void (*dequant_row_q)(float *, const int32_t *, const int32_t *, double, double,
                          const double *, size_t);
} s_conv_rows;

static s_conv_rows s_rows(void)
{
    const lp_kern_t *k = lp_kern();
    s_conv_rows r = {k->quads,        0,           0,
                     k->pair_plane,   k->quad_row, k->tap_sum_row,
                     k->tap_isum_row, k->dequant_rows, k->dequant_row_q};
    if (lp_tile_ready() || lp_tile_model_forced()) {
        r.quad = r.tile = 1;
        r.model = !lp_tile_ready();
    }
    return r;
}

/* Geometry of one lp_conv_shift call: L codes per 32-bit lane (2: int16
 * pairs, 4: byte quads), np lane rows of the grid, V column-shift variants
 * of each, vlen lanes per variant, J0 the first data lane of a variant,
 * ldb lanes per lane row: V*vlen, or V*(vlen + 1) in the tile layout,
 * where tap (kh, kw) of lane row p is row p*K + kw at stride vlen + 1 of
 * kernel row kh's group (lp_tile.h; the last V lanes of a row unused). */
typedef struct {
    int L, np, T, K, pad, H, W, nb, V, tile;
    size_t vlen, ldb, J0, plane;
} s_shift_geo;

static s_shift_geo s_geo(const s_conv_rows *rows, int N, int nch, int H, int W, int K, int pad,
                         int nt)
{
    s_shift_geo g;
    g.L = rows->quad ? 4 : 2;
    g.tile = rows->tile;
    g.np = (nch + g.L - 1) / g.L;
    g.T = K * K;
    g.K = K;
    g.pad = pad;
    g.H = H;
    g.W = W;
    g.nb = s_shift_nb_at(N, H, W, pad, nt);
    g.V = 2 * pad + 1;
    g.vlen = s_vlen(g.nb, H, W, pad);
    g.ldb = (size_t)g.V * (g.vlen + (rows->tile ? 1 : 0));
    g.J0 = (size_t)pad + (size_t)pad * W;
    g.plane = (size_t)(H + 2 * pad) * (W + 2 * pad);
    return g;
}

/* Rows [m0, m1) of Ap (M, np*T), the lanes of the kernel codes a (M, nch,
 * T): pairs (lp_pair) or quads shifted to signed bytes (lp_quad_s8),
 * m-tiles of 4 (tap t = kh*K + kw of lane row p: lane p*T + t), or in the
 * tile layout (group kh, row p*K + kw; lp_tile.h).  Writes those rows'
 * lanes only: Ap is zeroed first by the caller (rows past M and channels
 * past nch stay zero). */
static void s_shift_pack_rows(uint32_t *Ap, const uint8_t *a, int m0, int m1, int M, int nch,
                              const s_shift_geo *g)
{
    const int T = g->T, K2 = g->np * T, K = g->K;
    for (int m = m0; m < m1; m++)
        for (int p = 0; p < g->np; p++)
            for (int t = 0; t < T; t++) {
                const uint8_t *am = a + (size_t)m * nch * T;
                uint8_t c[4] = {0, 0, 0, 0}; /* padding channels meet b codes of 0 */
                for (int l = 0; l < g->L; l++)
                    if (g->L * p + l < nch)
                        c[l] = am[(size_t)(g->L * p + l) * T + t];
                const size_t at = g->tile ? lp_tile_a_at(M, K2 / K, m, t / K, p * K + t % K)
                                          : (size_t)(m / 4) * K2 * 4 + ((size_t)p * T + t) * 4 + m % 4;
                Ap[at] = g->L == 4 ? lp_quad_s8(c[0], c[1], c[2], c[3]) : lp_pair(c[0], c[1]);
            }
}

/* The grid of samples [n0, n0+cnt) of the codes b (N, nch, H, W): np lane
 * rows, each in V copies; copy v (column shift dx = v - pad) has the columns
 * zeroed that only a read wrapping into the neighbouring row reaches (the
 * last -dx, or the first dx), so a tap reads zeros exactly where the image
 * has none; the pad rows above, between and below the samples are zero.
 * chs (cnt, Hp, Wp) = per-pixel sums of the codes over the channels,
 * zero-bordered.  Overwrites grid and chs. */
static void s_shift_grid(uint32_t *grid, int32_t *chs, const uint8_t *b, int nch, int n0,
                         int cnt, const s_shift_geo *g, const s_conv_rows *rows)
{
    const int H = g->H, W = g->W, pad = g->pad, Wp = W + 2 * pad;
    const size_t P = (size_t)H * W, xper = (size_t)nch * P;
    memset(chs, 0, (size_t)cnt * g->plane * 4);
    for (int p = 0; p < g->np; p++)
        for (int v = 0; v < g->V; v++) {
            uint32_t *gv = grid + (size_t)p * g->ldb + (size_t)v * g->vlen;
            memset(gv, 0, g->J0 * 4);
            for (int j = 0; j < cnt; j++)
                memset(gv + g->J0 + ((size_t)j * (H + pad) + H) * W, 0, (size_t)pad * W * 4);
            size_t end = g->J0 + (size_t)cnt * (H + pad) * W;
            memset(gv + end, 0, (g->vlen - end) * 4);
        }
    for (int j = 0; j < cnt; j++) {
        const uint8_t *x = b + (size_t)(n0 + j) * xper;
        for (int p = 0; p < g->np; p++) {
            const uint8_t *xr[4] = {NULL, NULL, NULL, NULL};
            for (int l = 0; l < g->L; l++)
                if (g->L * p + l < nch)
                    xr[l] = x + (size_t)(g->L * p + l) * P;
            uint32_t *gp = grid + (size_t)p * g->ldb + g->J0 + (size_t)j * (H + pad) * W;
            if (g->L == 2) { /* the plane in every variant, one call */
                rows->pair_plane(gp, g->vlen, g->V,
                                 chs + (size_t)j * g->plane + (size_t)pad * Wp + pad,
                                 (size_t)Wp, xr[0], xr[1], H, W);
                continue;
            }
            for (int h = 0; h < H; h++) {
                const uint8_t *r[4];
                for (int l = 0; l < 4; l++)
                    r[l] = xr[l] ? xr[l] + (size_t)h * W : NULL;
                int32_t *ch = chs + (size_t)j * g->plane + (size_t)(pad + h) * Wp + pad;
                for (int v = 0; v < g->V; v++) {
                    const int dx = v - pad;
                    uint32_t *gv = gp + (size_t)h * W + (size_t)v * g->vlen;
                    rows->quad_row(gv, dx ? NULL : ch, r, (size_t)W);
                    const int z0 = dx < 0 ? W + dx : 0, z1 = dx < 0 ? W : dx;
                    for (int w = z0 < 0 ? 0 : z0; w < (z1 > W ? W : z1); w++)
                        gv[w] = 0;
                }
            }
        }
    }
}

/* y[i] += x[i], i < n (a plane in L1: the compiler's vectors). */
static void s_add_plane(float *restrict y, const float *restrict x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] += x[i];
}

/* out rows of sample j of a chunk from its sums Sm (M, vlen): the affine
 * correction with SB = the channel sums chs over the taps inside the image
 * (ctoff), restoring the quads' 128 shift first.  sb: scratch of H*W
 * doubles.  Overwrites out (M, H, W); with `plane` (scratch of H*W floats)
 * adds to it instead: each channel's values made there, then out += them,
 * one rounding each, the floats of overwriting a temporary and adding it. */
static void s_shift_dequant(float *out, const int32_t *Sm, const int32_t *chs, const int *ctoff,
                            double cS, double cSB, const double *bases, const int *hcls, int nh,
                            int M, int j, const s_shift_geo *g, const s_conv_rows *rows,
                            double *sb, float *plane)
{
    const int H = g->H, W = g->W, pad = g->pad, Wp = W + 2 * pad, T = g->T;
    const size_t P = (size_t)H * W;
    const int32_t *cj = chs + (size_t)j * g->plane + (size_t)pad * Wp + pad;
    int32_t *isb = (int32_t *)(void *)sb;
    for (int h = 0; h < H; h++) {
        if (rows->quad)
            rows->tap_isum_row(isb + (size_t)h * W, cj + (size_t)h * Wp, ctoff, T, (size_t)W);
        else
            rows->tap_sum_row(sb + (size_t)h * W, cj + (size_t)h * Wp, ctoff, T, cSB, (size_t)W);
    }
    for (int m = 0; m < M; m++) {
        const int32_t *Sr = Sm + (size_t)m * g->vlen + g->J0 + (size_t)j * (H + pad) * W;
        float *o = plane ? plane : out + (size_t)m * P;
        for (int h = 0; h < H;) {
            const double *base = bases + ((size_t)m * nh + hcls[h]) * W;
            const size_t off = (size_t)h * W;
            int h1 = h + 1; /* the run of rows of h's class (they share base) */
            while (h1 < H && hcls[h1] == hcls[h])
                h1++;
            if (rows->quad) {
                for (int k = 0; k < h1 - h; k++)
                    rows->dequant_row_q(o + off + (size_t)k * W, Sr + off + (size_t)k * W,
                                        isb + off + (size_t)k * W, cS, cSB, base, (size_t)W);
            } else {
                rows->dequant_rows(o + off, Sr + off, sb + off, cS, base, (size_t)W, h1 - h);
            }
            h = h1;
        }
        if (plane)
            s_add_plane(out + (size_t)m * P, plane, P);
    }
}

/* The sums of lp_shiftgemm_q from the tile layout: K groups (kernel rows
 * kh, at offset (kh - pad)*W - pad) of np*K rows at stride vlen + 1
 * (s_shift_geo). */
static void s_shift_tilegemm(int32_t *S, const uint32_t *Ap, int M, const uint32_t *B,
                             const s_shift_geo *g, const s_conv_rows *rows, size_t n)
{
    ptrdiff_t goff[LP_SHIFT_TMAX];
    for (int kh = 0; kh < g->K; kh++)
        goff[kh] = (ptrdiff_t)(kh - g->pad) * g->W - g->pad;
    const int R = g->np * g->K;
    if (!rows->model)
        lp_tilegemm(S, g->vlen, Ap, M, B, goff, g->K, R, g->vlen + 1, n);
    else /* a broken tile rule is counted by the model */
        (void)lp_tilegemm_emu(S, g->vlen, Ap, M, B, goff, g->K, R, g->vlen + 1, n);
}

typedef struct {
    uint32_t *Ap;
    int32_t *pre;
    double *bases;
    const uint8_t *a;
    const float *bias;
    const int *hcls, *rh, *rw;
    const s_shift_geo *g;
    int M, nch, nh;
    double cSA, cK;
} s_prep_job;

/* Thread t's kernel rows of lp_conv_shift's preparation: packed lanes,
 * tap prefix sums and correction bases of rows [m0, m1), each row one
 * thread's. */
static void s_prep_worker(void *arg, int t, int nt)
{
    const s_prep_job *j = arg;
    const int K = j->g->K;
    size_t m0, m1;
    nn_pool_share((size_t)j->M, t, nt, 1, &m0, &m1);
    if (m1 <= m0)
        return;
    s_shift_pack_rows(j->Ap, j->a, (int)m0, (int)m1, j->M, j->nch, j->g);
    lp_conv_tap_prefix_rows(j->pre, j->a, (int)m0, (int)m1, j->nch, K, K);
    lp_conv_base_rows_of(j->bases, j->hcls, j->nh, j->pre, j->rh, j->rw, (int)m0, (int)m1,
                         j->g->H, j->g->W, K, K, j->nch, j->cSA, j->cK, j->bias);
}

/* Threads of the preparation: a kernel row's work is about nch*T lanes
 * and H*W bases; fewer threads for small kernels. */
static int s_prep_threads(int M, int nch, const s_shift_geo *g)
{
    const size_t work = (size_t)M * ((size_t)nch * g->T * 2 + (size_t)g->H * g->W);
    int nt = nn_pool_threads();
    nt = nt > M ? M : nt;
    while (nt > 1 && work / (size_t)nt < ((size_t)1 << 13))
        nt--;
    return nt < 1 ? 1 : nt;
}

/* out (N, M, H, W) = the stride-1 same conv (K x K, pad = (K-1)/2) of the
 * codes b (N, nch, H, W) with the kernel codes a (M, nch, K, K), in real
 * values: sum over the taps inside the image of (sa*a + ma)(sb*b + mb),
 * plus bias[m] (may be NULL).  Overwrites out.  Scratch:
 * lp_conv_shift_bytes(N, nch, M, H, W, K, pad).  Pairs and vpmaddwd at the
 * portable and AVX2 levels, quads and vpdpbusd at AVX-512 VNNI: the same
 * floats either way. */
/* The sample-independent part of a shift conv, shared by its threads. */
typedef struct {
    float *out;
    const uint8_t *b;
    const uint32_t *Ap;
    const double *bases;
    const int *hcls;
    unsigned char *parts; /* thread t's scratch at t * part */
    size_t part;
    s_shift_geo g;
    s_conv_rows rows;
    int N, nch, M, nh;
    int add; /* out += the conv, not out = */
    int toff[LP_SHIFT_TMAX], ctoff[LP_SHIFT_TMAX];
    double cS, cSB;
} s_shift_job;

/* Thread t of nt: chunks [nc*t/nt, nc*(t+1)/nt) of nb samples each, in its
 * own scratch part; every sample's floats are those of one thread. */
static void s_shift_worker(void *arg, int t, int nt)
{
    const s_shift_job *j = arg;
    const s_shift_geo *g = &j->g;
    const int H = g->H, W = g->W, pad = g->pad, M = j->M;
    unsigned char *sp = j->parts + (size_t)t * j->part;
    uint32_t *grid = lp_take(&sp, (size_t)g->np * g->ldb * 4);
    int32_t *chs = lp_take(&sp, (size_t)g->nb * g->plane * 4);
    int32_t *Sm = lp_take(&sp, (size_t)M * g->vlen * 4);
    double *tx = lp_take(&sp, (size_t)H * W * sizeof(double));
    float *plane = j->add ? lp_take(&sp, (size_t)H * W * sizeof(float)) : NULL;
    size_t c0, c1;
    nn_pool_share((size_t)(j->N + g->nb - 1) / g->nb, t, nt, 1, &c0, &c1);
    for (int n0 = (int)c0 * g->nb; n0 < (int)c1 * g->nb && n0 < j->N; n0 += g->nb) {
        const int cnt = j->N - n0 < g->nb ? j->N - n0 : g->nb;
        s_shift_grid(grid, chs, j->b, j->nch, n0, cnt, g, &j->rows);
        /* only the real pixels' sums are computed (rows of W, not Wp) */
        const size_t n = ((size_t)cnt * (H + pad) - pad) * W;
        if (j->rows.tile)
            s_shift_tilegemm(Sm + g->J0, j->Ap, M, grid + g->J0, g, &j->rows, n);
        else if (j->rows.quad)
            lp_shiftgemm_q(Sm + g->J0, g->vlen, j->Ap, M, grid + g->J0, g->ldb, g->np, j->toff,
                           g->T, n);
        else
            lp_shiftgemm(Sm + g->J0, g->vlen, j->Ap, M, grid + g->J0, g->ldb, g->np, j->toff,
                         g->T, n);
        for (int s = 0; s < cnt; s++)
            s_shift_dequant(j->out + (size_t)(n0 + s) * M * H * W, Sm, chs, j->ctoff, j->cS,
                            j->cSB, j->bases, j->hcls, j->nh, M, s, g, &j->rows, tx, plane);
    }
}

/* out (N, M, H, W) = the stride-1 same conv (K x K, pad = (K-1)/2) of the
 * codes b (N, nch, H, W) with the kernel codes a (M, nch, K, K), in real
 * values: sum over the taps inside the image of (sa*a + ma)(sb*b + mb),
 * plus bias[m] (may be NULL).  Overwrites out.  Scratch:
 * lp_conv_shift_bytes(N, nch, M, H, W, K, pad).  Pairs and vpmaddwd at the
 * portable and AVX2 levels, quads and vpdpbusd at AVX-512 VNNI: the same
 * floats either way.  Chunks of samples split over the threads of
 * nn_pool.h: the same floats for any thread count.  add: out += the conv
 * (s_shift_dequant). */
void lp_conv_shift(float *out, const uint8_t *b, lp_qparams bqp, const uint8_t *a,
                   lp_qparams aqp, const float *bias, int N, int nch, int M, int H, int W, int K,
                   int pad, int add, void *scratch)
{
    s_shift_job j = {.out = out, .b = b, .N = N, .nch = nch, .M = M, .add = add};
    j.rows = s_rows();
    const int nt = s_shift_threads(N, H, W, pad);
    j.g = s_geo(&j.rows, N, nch, H, W, K, pad, nt);
    const s_shift_geo *g = &j.g;
    const int T = g->T, K2 = g->np * T, Wp = W + 2 * pad;
    const size_t PS = (size_t)(K + 1) * (K + 1);
    unsigned char *sp = (unsigned char *)scratch;
    uint32_t *Ap = lp_take(&sp, (g->tile ? lp_tile_pack_lanes(M, K, g->np * K)
                                        : lp_shift_pack_lanes(M, K2)) * 4);
    int32_t *pre = lp_take(&sp, (size_t)M * PS * 4);
    int *rh = lp_take(&sp, (size_t)(H + W) * 2 * sizeof(int)), *rw = rh + 2 * H;
    double *bases = lp_take(&sp, (size_t)M * lp_conv_max_classes(H, K) * W * sizeof(double));
    int *hcls = lp_take(&sp, (size_t)H * sizeof(int));

    memset(Ap, 0, (g->tile ? lp_tile_pack_lanes(M, K, K2 / K) : lp_shift_pack_lanes(M, K2)) * 4);
    for (int o = 0; o < H; o++)
        lp_conv_tap_range(o, 1, pad, K, H, &rh[2 * o], &rh[2 * o + 1]);
    for (int o = 0; o < W; o++)
        lp_conv_tap_range(o, 1, pad, K, W, &rw[2 * o], &rw[2 * o + 1]);
    /* tap (kh, kw) reads variant kw, shifted by rows and columns; ctoff the
     * same taps in the zero-bordered (Wp-wide) grid of channel sums */
    assert(T <= LP_SHIFT_TMAX);
    for (int kh = 0; kh < K; kh++)
        for (int kw = 0; kw < K; kw++) {
            j.toff[kh * K + kw] = (int)((size_t)kw * g->vlen) + (kh - pad) * W + (kw - pad);
            j.ctoff[kh * K + kw] = (kh - pad) * Wp + (kw - pad);
        }
    const double sa = aqp.scale, ma = aqp.min, sb = bqp.scale, mb = bqp.min;
    const double cSA = sa * mb, cK = ma * mb;
    j.cS = sa * sb;
    j.cSB = ma * sb;
    j.nh = lp_conv_row_classes(hcls, rh, H, K);
    /* the kernel rows' lanes, prefix sums and bases, split by rows */
    s_prep_job pj = {Ap, pre, bases, a, bias, hcls, rh, rw, g, M, nch, j.nh, cSA, cK};
    nn_pool_run(s_prep_threads(M, nch, g), s_prep_worker, &pj);
    j.Ap = Ap;
    j.bases = bases;
    j.hcls = hcls;
    j.parts = sp;
    j.part = s_shift_thread_bytes(N, nch, M, H, W, K, pad);
    /* on the tile path (AMX, or its model) each thread runs the tile
     * kernel on its own tiles */
    nn_pool_run(nt, s_shift_worker, &j);
}

/* lp_gemm — see lp_gemm.h: packing, the portable kernel, the reference and
 * the dispatchers (through the kernel table, lp_kern.h; the SIMD kernels
 * are in lp_gemm_<isa>.c). */
#include "lowprec/lp_gemm.h"

#include <assert.h>
#include <string.h>

#include "lowprec/lp_kern.h"
#include "lowprec/lp_simd.h"
#include "lowprec/lp_tile.h"

/* Byte offset of packed A's tile part (lp_gemm.h). */
static size_t s_tile_part(int M, int K)
{
    return (size_t)lp_gemm_k4(K) * (size_t)lp_gemm_mp(M) * (4 + 8);
}

size_t lp_gemm_pack_a_bytes(int M, int K)
{
    return s_tile_part(M, K) + lp_tile_pack_lanes(M, 1, lp_gemm_k4(K)) * 4;
}

size_t lp_gemm_pack_b_bytes(int K, int N)
{
    return (size_t)lp_gemm_k4(K) * (size_t)lp_gemm_np(N) * 4;
}

void lp_gemm_pack_a_ref(int8_t *Ap, int32_t *rowsum, const uint8_t *A, ptrdiff_t rs, ptrdiff_t cs,
                    int M, int K)
{
    const int K4 = lp_gemm_k4(K), Mp = lp_gemm_mp(M);
    memset(Ap, 0, lp_gemm_pack_a_bytes(M, K));
    uint16_t *A16 = (uint16_t *)(void *)(Ap + (size_t)K4 * Mp * 4);
    int8_t *At = Ap + s_tile_part(M, K);
    for (int m = 0; m < M; m++) {
        int32_t s = 0;
        const uint8_t *row = A + m * rs;
        for (int k = 0; k < K; k++) {
            int v = row[k * cs];
            s += v;
            Ap[((size_t)(k >> 2) * Mp + m) * 4 + (k & 3)] = (int8_t)(v - 128);
            /* row tile m/4, group k4, row m%4, lane k&1, half (k&2 ? high : low) */
            A16[((((size_t)(m >> 2) * K4 + (k >> 2)) * 4 + (m & 3)) * 2 + (k & 1)) * 2 +
                ((k >> 1) & 1)] = (uint16_t)v;
            At[lp_tile_a_at(M, K4, m, 0, k >> 2) * 4 + (k & 3)] = (int8_t)(v - 128);
        }
        if (rowsum)
            rowsum[m] = s;
    }
}

/* Column group k4 (codes 4*k4 .. 4*k4+3, zero past K) of all M rows into
 * the three layouts of lp_gemm_pack_a_ref: quads (k4-major, contiguous in
 * m), the tile part (stride kr quads in m) and the 16-bit pairs of the AVX2
 * kernel ([v0 v2 v1 v3] per row of a 4-row tile); adds the codes to rowsum. */
static void s_pack_group(int8_t *Ap, uint16_t *A16, int8_t *At, int32_t *rowsum,
                         const uint8_t *A, ptrdiff_t rs, ptrdiff_t cs, int M, int K, int k4)
{
    const int K4 = lp_gemm_k4(K), Mp = lp_gemm_mp(M);
    const int kr = lp_tile_depth(K4), Mtp = lp_tile_mp(M);
    const int kn = K - 4 * k4 < 4 ? K - 4 * k4 : 4;
    int8_t *q = Ap + (size_t)k4 * Mp * 4;
    int8_t *t = At + (((size_t)(k4 / kr) * Mtp) * kr + (size_t)(k4 % kr)) * 4;
    uint16_t *h = A16 + (size_t)k4 * 16;
    const uint8_t *col = A + (ptrdiff_t)(4 * k4) * cs;
    if (kn == 4 && cs == 1) { /* four codes in a row: one 32-bit load */
        for (int m = 0; m < M; m++) {
            uint32_t c;
            memcpy(&c, col + (ptrdiff_t)m * rs, 4);
            const uint32_t w = c ^ 0x80808080u;
            memcpy(q + (size_t)m * 4, &w, 4);
            memcpy(t + (size_t)m * kr * 4, &w, 4);
            const uint32_t v0 = c & 0xffu, v1 = c >> 8 & 0xffu, v2 = c >> 16 & 0xffu, v3 = c >> 24;
            const uint16_t hv[4] = {(uint16_t)v0, (uint16_t)v2, (uint16_t)v1, (uint16_t)v3};
            memcpy(h + ((size_t)(m >> 2) * K4 * 4 + (size_t)(m & 3)) * 4, hv, 8);
            if (rowsum)
                rowsum[m] += (int32_t)(v0 + v1 + v2 + v3);
        }
        return;
    }
    for (int m = 0; m < M; m++) {
        const uint8_t *p = col + (ptrdiff_t)m * rs;
        uint32_t v0 = p[0], v1 = 0, v2 = 0, v3 = 0;
        if (kn == 4) {
            v1 = p[cs];
            v2 = p[2 * cs];
            v3 = p[3 * cs];
        } else {
            v1 = kn > 1 ? p[cs] : 0;
            v2 = kn > 2 ? p[2 * cs] : 0;
        }
        uint32_t w = (v0 ^ 0x80u) | (v1 ^ 0x80u) << 8 | (v2 ^ 0x80u) << 16 | (v3 ^ 0x80u) << 24;
        if (kn < 4) /* codes past K stay 0 */
            w &= kn == 1 ? 0xffu : kn == 2 ? 0xffffu : 0xffffffu;
        memcpy(q + (size_t)m * 4, &w, 4);
        memcpy(t + (size_t)m * kr * 4, &w, 4);
        uint16_t *hm = h + ((size_t)(m >> 2) * K4 * 4 + (size_t)(m & 3)) * 4;
        hm[0] = (uint16_t)v0;
        hm[1] = (uint16_t)v2;
        hm[2] = (uint16_t)v1;
        hm[3] = (uint16_t)v3;
        if (rowsum)
            rowsum[m] += (int32_t)(v0 + v1 + v2 + v3);
    }
}

void lp_gemm_pack_a(int8_t *Ap, int32_t *rowsum, const uint8_t *A, ptrdiff_t rs, ptrdiff_t cs,
                    int M, int K)
{
    const int K4 = lp_gemm_k4(K), Mp = lp_gemm_mp(M);
    memset(Ap, 0, lp_gemm_pack_a_bytes(M, K));
    if (rowsum)
        memset(rowsum, 0, (size_t)M * sizeof *rowsum);
    uint16_t *A16 = (uint16_t *)(void *)(Ap + (size_t)K4 * Mp * 4);
    int8_t *At = Ap + s_tile_part(M, K);
    for (int k4 = 0; k4 < K4; k4++)
        s_pack_group(Ap, A16, At, rowsum, A, rs, cs, M, K, k4);
}

/* Tiles pay where a tile's depth holds at least 4 of the K4 rows (16
 * codes) or all of them. */
static int s_tile_pays(int K)
{
    const int K4 = lp_gemm_k4(K), kr = lp_tile_depth(K4);
    return kr >= 4 || kr == K4;
}

/* Whether lp_gemm_u8u8 at depth K runs on the tiles now. */
static int s_on_tiles(int K)
{
    return lp_tile_model_forced() || (s_tile_pays(K) && lp_tile_ready());
}

/* Row m of A into the quads of packed A (Mp rows a group), codes past K
 * zero; returns its sum. */
static int32_t s_quad_row(int8_t *q, size_t Mp, const uint8_t *row, ptrdiff_t cs, int K)
{
    int32_t s = 0;
    int k = 0;
    if (cs == 1)
        for (; k + 4 <= K; k += 4, q += Mp * 4) { /* four codes in a row */
            uint32_t c;
            memcpy(&c, row + k, 4);
            s += (int32_t)((c & 0xffu) + (c >> 8 & 0xffu) + (c >> 16 & 0xffu) + (c >> 24));
            c ^= 0x80808080u;
            memcpy(q, &c, 4);
        }
    for (; k < K; k += 4, q += Mp * 4)
        for (int j = 0; j < 4; j++) {
            const int v = k + j < K ? row[(ptrdiff_t)(k + j) * cs] : 128;
            s += k + j < K ? v : 0;
            q[j] = (int8_t)(v - 128);
        }
    return s;
}

void lp_gemm_pack_a_run(int8_t *Ap, int32_t *rowsum, const uint8_t *A, ptrdiff_t rs,
                        ptrdiff_t cs, int M, int K)
{
    if (!lp_kern()->gemm_quads || s_on_tiles(K)) {
        lp_gemm_pack_a(Ap, rowsum, A, rs, cs, M, K);
        return;
    }
    const int K4 = lp_gemm_k4(K), Mp = lp_gemm_mp(M);
    for (int m = 0; m < M; m++) {
        const int32_t s = s_quad_row(Ap + (size_t)m * 4, (size_t)Mp, A + m * rs, cs, K);
        if (rowsum)
            rowsum[m] = s;
    }
    for (int k4 = 0; k4 < K4 && Mp > M; k4++) /* padding rows */
        memset(Ap + ((size_t)k4 * Mp + M) * 4, 0, (size_t)(Mp - M) * 4);
}

void lp_pack_b_t_ref(uint8_t *Bp, const uint8_t *B, ptrdiff_t cs, int K4, int N, int Np)
{
    for (int k4 = 0; k4 < K4; k4++)
        for (int n = 0; n < N; n++)
            memcpy(Bp + ((size_t)k4 * Np + (size_t)n) * 4, B + (ptrdiff_t)n * cs + 4 * k4, 4);
}

void lp_pack_b_4rows_ref(uint8_t *dst, const uint8_t *r0, ptrdiff_t rs, int N)
{
    const uint8_t *r1 = r0 + rs, *r2 = r1 + rs, *r3 = r2 + rs;
    for (int n = 0; n < N; n++) {
        const uint32_t w = (uint32_t)r0[n] | (uint32_t)r1[n] << 8 | (uint32_t)r2[n] << 16 |
                           (uint32_t)r3[n] << 24;
        memcpy(dst + 4 * (size_t)n, &w, 4);
    }
}

void lp_gemm_pack_b(uint8_t *Bp, const uint8_t *B, ptrdiff_t rs, ptrdiff_t cs, int K, int N)
{
    const lp_kern_t *kern = lp_kern();
    const int K4 = lp_gemm_k4(K), Np = lp_gemm_np(N);
    const int full = rs == 1 && cs != 1 ? K / 4 : 0; /* the transposed view's full groups */
    kern->pack_b_t(Bp, B, cs, full, N, Np);
    for (int k4 = 0; k4 < K4; k4++) {
        uint8_t *dst = Bp + (size_t)k4 * Np * 4;
        int kn = K - 4 * k4 < 4 ? K - 4 * k4 : 4;
        if (k4 < full) {
            /* packed above */
        } else if (kn == 4 && cs == 1) {
            kern->pack_b_4rows(dst, B + (4 * k4) * rs, rs, N);
        } else {
            for (int n = 0; n < N; n++)
                for (int j = 0; j < 4; j++)
                    dst[4 * n + j] = j < kn ? B[(4 * k4 + j) * rs + n * cs] : 0;
        }
        memset(dst + 4 * (size_t)N, 0, 4 * (size_t)(Np - N));
    }
}

void lp_gemm_u8u8_ref(int32_t *C, const uint8_t *A, const uint8_t *B, int M, int N, int K)
{
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            int32_t s = 0;
            for (int k = 0; k < K; k++)
                s += (int32_t)A[(size_t)m * K + k] * (int32_t)B[(size_t)k * N + n];
            C[(size_t)m * N + n] = s;
        }
}

/* The product on AMX tiles (lp_tile.h with one group: B's K4 rows of Np
 * lanes are the rows, A's tile part the weights), then the 128 shift of A
 * restored with B's column sums.  model: on the software tile model. */
static void s_gemm_tile(int32_t *C, int ldc, const int8_t *Ap, const uint8_t *Bp, int M, int N,
                        int K, int32_t *colsum, int model)
{
    const int K4 = lp_gemm_k4(K), Np = lp_gemm_np(N);
    const uint32_t *At = (const uint32_t *)(const void *)(Ap + s_tile_part(M, K));
    const uint32_t *B = (const uint32_t *)(const void *)Bp;
    const ptrdiff_t goff[1] = {0};
    if (!model)
        lp_tilegemm(C, (size_t)ldc, At, M, B, goff, 1, K4, (size_t)Np, (size_t)N);
    else /* a broken tile rule is counted by the model */
        (void)lp_tilegemm_emu(C, (size_t)ldc, At, M, B, goff, 1, K4, (size_t)Np, (size_t)N);
    int32_t cs[LP_GEMM_NR];
    for (int n0 = 0; n0 < N; n0 += LP_GEMM_NR) {
        const int w = N - n0 < LP_GEMM_NR ? N - n0 : LP_GEMM_NR;
        for (int n = 0; n < w; n++)
            cs[n] = 0;
        for (int k4 = 0; k4 < K4; k4++) {
            const uint8_t *b = Bp + ((size_t)k4 * Np + n0) * 4;
            for (int n = 0; n < w; n++)
                cs[n] += b[4 * n] + b[4 * n + 1] + b[4 * n + 2] + b[4 * n + 3];
        }
        for (int m = 0; m < M; m++)
            for (int n = 0; n < w; n++)
                C[(size_t)m * ldc + n0 + n] += 128 * cs[n];
        if (colsum)
            memcpy(colsum + n0, cs, (size_t)w * 4);
    }
}

void lp_gemm_u8u8(int32_t *C, int ldc, const int8_t *Ap, const uint8_t *Bp, int M, int N, int K,
                  int32_t *colsum)
{
    assert(M >= 1 && N >= 1 && K >= 1 && K <= LP_GEMM_MAX_K && ldc >= N);
    if (s_on_tiles(K)) {
        s_gemm_tile(C, ldc, Ap, Bp, M, N, K, colsum, lp_kern()->tilegemm == NULL);
        return;
    }
    lp_kern()->gemm(C, ldc, Ap, Bp, M, N, K, colsum); /* a depth the tiles would waste */
}

/* ---- shifted-row GEMM ------------------------------------------------------ */

void lp_shiftgemm_ref(int32_t *S, size_t ldc, const uint32_t *Ap, int M, const uint32_t *B,
                      size_t ldb, int np, const int *toff, int T, size_t n)
{
    const size_t K2 = (size_t)np * T;
    for (int m = 0; m < M; m++)
        for (size_t j = 0; j < n; j++) {
            int32_t acc = 0;
            for (int p = 0; p < np; p++)
                for (int t = 0; t < T; t++) {
                    uint32_t a = Ap[(size_t)(m / 4) * K2 * 4 + ((size_t)p * T + t) * 4 + m % 4];
                    uint32_t b = (B + (size_t)p * ldb + toff[t])[j];
                    acc += (int32_t)(a & 0xFFFF) * (int32_t)(b & 0xFFFF) +
                           (int32_t)(a >> 16) * (int32_t)(b >> 16);
                }
            S[(size_t)m * ldc + j] = acc;
        }
}

void lp_shiftgemm(int32_t *S, size_t ldc, const uint32_t *Ap, int M, const uint32_t *B,
                  size_t ldb, int np, const int *toff, int T, size_t n)
{
    assert(M >= 1 && np >= 1 && T >= 1 && 2 * (size_t)np * T <= LP_GEMM_MAX_K);
    lp_kern()->shiftgemm(S, ldc, Ap, M, B, ldb, np, toff, T, n);
}

void lp_shiftgemm_q_ref(int32_t *S, size_t ldc, const uint32_t *Ap, int M, const uint32_t *B,
                        size_t ldb, int nq, const int *toff, int T, size_t n)
{
    const size_t K = (size_t)nq * T;
    for (int m = 0; m < M; m++)
        for (size_t j = 0; j < n; j++) {
            int32_t acc = 0;
            for (int p = 0; p < nq; p++)
                for (int t = 0; t < T; t++) {
                    uint32_t a = Ap[(size_t)(m / 4) * K * 4 + ((size_t)p * T + t) * 4 + m % 4];
                    uint32_t b = (B + (size_t)p * ldb + toff[t])[j];
                    for (int l = 0; l < 4; l++)
                        acc += (int32_t)(int8_t)(uint8_t)(a >> 8 * l) *
                               (int32_t)(uint8_t)(b >> 8 * l);
                }
            S[(size_t)m * ldc + j] = acc;
        }
}

void lp_shiftgemm_q(int32_t *S, size_t ldc, const uint32_t *Ap, int M, const uint32_t *B,
                    size_t ldb, int nq, const int *toff, int T, size_t n)
{
    assert(M >= 1 && nq >= 1 && T >= 1 && 4 * (size_t)nq * T <= LP_GEMM_MAX_K);
    lp_kern()->shiftgemm_q(S, ldc, Ap, M, B, ldb, nq, toff, T, n);
}

void lp_dequant_row_q_ref(float *out, const int32_t *S, const int32_t *SB, double c, double cb,
                          const double *base, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = (float)(c * (S[i] + 128 * SB[i]) + cb * SB[i] + base[i]);
}

void lp_dequant_row_q(float *out, const int32_t *S, const int32_t *SB, double c, double cb,
                      const double *base, size_t n)
{
    lp_kern()->dequant_row_q(out, S, SB, c, cb, base, n);
}

void lp_dequant_row_ref(float *out, const int32_t *S, const double *t, double c,
                        const double *base, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = (float)(c * S[i] + t[i] + base[i]);
}

void lp_dequant_lin_ref(float *out, const int32_t *S, const double *tw, double c, double tx,
                        double t4, const float *bias, size_t n)
{
    if (bias)
        for (size_t j = 0; j < n; j++)
            out[j] = (float)(c * S[j] + tw[j] + tx + t4) + bias[j];
    else
        for (size_t j = 0; j < n; j++)
            out[j] = (float)(c * S[j] + tw[j] + tx + t4);
}

void lp_dequant_lin(float *out, const int32_t *S, const double *tw, double c, double tx,
                    double t4, const float *bias, size_t n)
{
    lp_kern()->dequant_lin(out, S, tw, c, tx, t4, bias, n);
}

void lp_dequant_rows_ref(float *out, const int32_t *S, const double *t, double c,
                         const double *base, size_t W, int rows)
{
    for (int r = 0; r < rows; r++)
        lp_dequant_row_ref(out + (size_t)r * W, S + (size_t)r * W, t + (size_t)r * W, c, base, W);
}

void lp_dequant_rows(float *out, const int32_t *S, const double *t, double c,
                     const double *base, size_t W, int rows)
{
    lp_kern()->dequant_rows(out, S, t, c, base, W, rows);
}

void lp_dequant_row(float *out, const int32_t *S, const double *t, double c, const double *base,
                    size_t n)
{
    lp_kern()->dequant_row(out, S, t, c, base, n);
}

/* nn_safetensors_weights — nn_safetensors_load_weights (nn_safetensors.h):
 * pretrained weights chosen per view, F16 / BF16 / F64 converted to F32.
 * Reads through the module-internal reader of nn_safetensors_int.h, so the
 * header is validated exactly as for every other load. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn_safetensors.h"
#include "nn/nn_safetensors_int.h"

/* "[a,b,c]" of a shape. */
static void s_shape_str(char *buf, size_t len, const uint64_t *shape, int ndim)
{
    size_t l = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < ndim && l + 24 < len; d++)
        l += (size_t)snprintf(buf + l, len - l, "%s%" PRIu64, d ? "," : "", shape[d]);
    snprintf(buf + l, len - l, "]");
}

/* IEEE binary16 -> float (subnormals, infinities and NaN included). */
static float s_half(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023u, u;
    if (e == 31) {
        u = sign | 0x7f800000u | (m << 13);
    } else if (e) {
        u = sign | ((e + 112) << 23) | (m << 13);
    } else { /* zero or subnormal: m * 2^-24, exact in float */
        float f = (float)m * 0x1p-24f;
        return sign ? -f : f;
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* dst[0..numel) from the raw little-endian values of dtype en->dtype. */
static void s_convert(float *dst, const unsigned char *raw, const nn_st_entry *en, size_t numel)
{
    for (size_t i = 0; i < numel; i++) {
        const unsigned char *b = raw + i * en->esize;
        uint64_t u = 0;
        for (size_t k = 0; k < en->esize; k++)
            u |= (uint64_t)b[k] << (8 * k);
        if (en->esize == 8) { /* F64, rounded to nearest */
            double d;
            memcpy(&d, &u, 8);
            dst[i] = (float)d;
        } else if (en->esize == 4) { /* F32 */
            uint32_t u32 = (uint32_t)u;
            memcpy(&dst[i], &u32, 4);
        } else if (!strcmp(en->dtype, "BF16")) { /* the upper half of an F32 */
            uint32_t u32 = (uint32_t)u << 16;
            memcpy(&dst[i], &u32, 4);
        } else {
            dst[i] = s_half((uint16_t)u);
        }
    }
}

/* One wanted view: 1 filled, 0 absent and not required, -1 error. */
static int s_load_weight(const nn_st_file *f, nn_arena *a, size_t v, int required,
                         const char *path, char *err, size_t errlen)
{
    const nn_view *vw = &a->views[v];
    const nn_st_entry *en = nn_st_find(f, vw->name);
    if (!en)
        return required ? nn_errf(err, errlen, "%s: tensor '%s' missing", path, vw->name) : 0;
    if (strcmp(en->dtype, "F32") && strcmp(en->dtype, "F16") && strcmp(en->dtype, "BF16") &&
        strcmp(en->dtype, "F64"))
        return nn_errf(err, errlen, "%s: tensor '%s': dtype %s cannot be loaded as weights "
                       "(F32, F16, BF16 and F64 can)", path, vw->name, en->dtype);
    int same = en->ndim == vw->ndim;
    for (int d = 0; same && d < vw->ndim; d++)
        same = en->shape[d] == (uint64_t)vw->shape[d];
    if (!same) {
        uint64_t want[NN_MAX_NDIM];
        char gs[256], ws[256];
        for (int d = 0; d < vw->ndim; d++)
            want[d] = (uint64_t)vw->shape[d];
        s_shape_str(gs, sizeof gs, en->shape, en->ndim);
        s_shape_str(ws, sizeof ws, want, vw->ndim);
        return nn_errf(err, errlen, "%s: tensor '%s': shape %s, the model's is %s", path,
                       vw->name, gs, ws);
    }
    unsigned char *raw = nn_xmalloc(vw->numel * en->esize + 1);
    int rc = nn_st_read(f, en, raw, path, err, errlen);
    if (rc == 0)
        s_convert(a->data + vw->offset, raw, en, vw->numel);
    free(raw);
    return rc == 0 ? 1 : -1;
}

int nn_safetensors_load_weights(const char *path, nn_arena *a, const unsigned char *want,
                                int required, size_t *loaded, char *err, size_t errlen)
{
    nn_st_file *f = nn_st_open(path, err, errlen);
    if (!f)
        return -1;
    size_t n = 0;
    int rc = 0;
    for (size_t v = 0; v < a->nviews && rc >= 0; v++)
        if (!want || want[v]) {
            rc = s_load_weight(f, a, v, required, path, err, errlen);
            n += rc > 0;
        }
    nn_st_close(&f);
    if (loaded)
        *loaded = n;
    return rc < 0 ? -1 : 0;
}

/* nn_vec — GNU C generic vector types for the portable level's blocked
 * kernels (the _blk files of nn/ and lowprec/): the baseline vector width of any
 * target (16 bytes: SSE2, NEON, ...; the compiler emits scalar code where
 * a target has no vector unit), no intrinsics.  Unaligned loads go
 * through memcpy. */
#ifndef NN_VEC_H
#define NN_VEC_H

#include <stdint.h>
#include <string.h>

typedef float    nn_f32x4 __attribute__((vector_size(16)));
typedef double   nn_f64x4 __attribute__((vector_size(32)));
typedef int32_t  nn_i32x4 __attribute__((vector_size(16)));
typedef uint32_t nn_u32x4 __attribute__((vector_size(16)));
typedef int16_t  nn_i16x8 __attribute__((vector_size(16)));
typedef uint16_t nn_u16x8 __attribute__((vector_size(16)));
typedef int8_t   nn_i8x8  __attribute__((vector_size(8)));
typedef uint8_t  nn_u8x8  __attribute__((vector_size(8)));
typedef uint8_t  nn_u8x4  __attribute__((vector_size(4)));

static inline nn_f32x4 nn_vec_ld(const float *x)
{
    nn_f32x4 v;
    memcpy(&v, x, sizeof v);
    return v;
}

/* lanes of a where m is set (all ones), else of b */
static inline nn_f32x4 nn_vec_pick(nn_i32x4 m, nn_f32x4 a, nn_f32x4 b)
{
    return (nn_f32x4)(((nn_i32x4)a & m) | ((nn_i32x4)b & ~m));
}

#endif

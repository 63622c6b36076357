/* The rounding a KV cache row may carry, worked out from the values it was made from (not by
   comparing with forge__kv_encode): tests/test_types.c checks the CPU's rows with it, and
   tests/test_kernels.c the GPU's. Include after forge.h. */
#ifndef FORGE_TEST_KV_ROUNDING_H
#define FORGE_TEST_KV_ROUNDING_H

#include <math.h>

/* Elements of out (a row of storage type `storage` decoded back) beyond the type's rounding of x
   (n a multiple of 32): f32 exact; f16 half an ulp; q8_0 half a step of d = amax / 127, plus d's own
   f16 rounding over 127 steps; q4_0 half a step of d = max / -8 (the value of largest magnitude maps
   to -8), a whole step where +8 is clamped to 7. */
static uint32_t kv_rounding_beyond(uint32_t storage, const float *x, const float *out, uint32_t n) {
    uint32_t i, j, beyond = 0;
    for (i = 0; i < n; i += 32) {
        double amax = 0.0, max = 0.0, d;
        for (j = 0; j < 32; j++)
            if (fabs((double)x[i + j]) > amax) amax = fabs((double)x[i + j]), max = x[i + j];
        d = storage == FORGE_TYPE_Q8_0 ? amax / 127.0 : fabs(max) / 8.0;
        for (j = 0; j < 32; j++) {
            const double want = x[i + j], err = fabs((double)out[i + j] - want);
            double bound;
            if (storage == FORGE_TYPE_F32) bound = 0.0;
            else if (storage == FORGE_TYPE_F16) bound = fabs(want) / 2048.0 + 3e-8;
            else if (storage == FORGE_TYPE_Q8_0) bound = d * (0.5 + 127.0 / 2048.0) + 1e-7;
            else bound = d * (fabs(want) / (d > 0 ? d : 1.0) > 7.5 ? 1.0 : 0.5) + d * 8.0 / 2048.0 + 1e-7;
            beyond += err > bound;
        }
    }
    return beyond;
}

#endif

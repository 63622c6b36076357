/* Random weight blocks for the product tests (tests/test_matmul.c on the CPU, tests/test_kernels.c on
   the GPU): a reproducible xorshift64* stream (seeded by TEST_RNG_SEED, defined before including this
   file), random bytes with every f16/bf16/f32 field of a block set to a finite value, and the list
   of every weight type. Include after test.h. */
#ifndef FORGE_TEST_RANDOM_BLOCKS_H
#define FORGE_TEST_RANDOM_BLOCKS_H

#ifndef TEST_RNG_SEED
#define TEST_RNG_SEED 0x9e3779b97f4a7c15ull
#endif

static uint64_t rng_state = TEST_RNG_SEED;
TEST__MAYBE_UNUSED static uint32_t rng_u32(void) { /* xorshift64*: reproducible on every platform */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545f4914f6cdd1dull) >> 32);
}
TEST__MAYBE_UNUSED static float rng_uniform(float lo, float hi) { return lo + (hi - lo) * (float)(rng_u32() >> 8) / 16777216.0f; }

TEST__MAYBE_UNUSED static void put_half(uint8_t *p, float v) {
    uint16_t h = forge_f32_to_f16(v);
    p[0] = (uint8_t)(h & 0xff);
    p[1] = (uint8_t)(h >> 8);
}

/* A random scale: either sign, magnitudes over two decades, never NaN or infinite. */
TEST__MAYBE_UNUSED static float random_scale(void) {
    float v = rng_uniform(0.002f, 0.2f);
    return (rng_u32() & 1) ? -v : v;
}

/* Random bytes, then every f16/bf16/f32 field set to a finite value (offsets from forge.h's layouts). */
TEST__MAYBE_UNUSED static void random_blocks(uint32_t type, uint8_t *dst, uint64_t n_blocks) {
    const forge_type_traits *t = forge_type_info(type);
    uint64_t i, bytes = n_blocks * t->block_bytes;
    for (i = 0; i < bytes; i++) dst[i] = (uint8_t)rng_u32();
    for (i = 0; i < n_blocks; i++) {
        uint8_t *b = dst + i * t->block_bytes;
        switch (type) {
        case FORGE_TYPE_F32: {
            float v = rng_uniform(-1.0f, 1.0f);
            memcpy(b, &v, 4); /* the tests run on little-endian hosts */
            break;
        }
        case FORGE_TYPE_F16: put_half(b, rng_uniform(-1.0f, 1.0f)); break;
        case FORGE_TYPE_BF16: {
            float v = rng_uniform(-1.0f, 1.0f);
            uint32_t bits;
            memcpy(&bits, &v, 4);
            b[0] = (uint8_t)(bits >> 16);
            b[1] = (uint8_t)(bits >> 24);
            break;
        }
        case FORGE_TYPE_Q4_0: case FORGE_TYPE_Q5_0: case FORGE_TYPE_Q8_0: case FORGE_TYPE_IQ4_NL: case FORGE_TYPE_IQ4_XS:
            put_half(b, random_scale());
            break;
        case FORGE_TYPE_Q4_1: case FORGE_TYPE_Q5_1: case FORGE_TYPE_Q4_K: case FORGE_TYPE_Q5_K:
            put_half(b, random_scale());
            put_half(b + 2, random_scale());
            break;
        case FORGE_TYPE_Q2_K:
            put_half(b + 80, random_scale());
            put_half(b + 82, random_scale());
            break;
        case FORGE_TYPE_Q3_K: put_half(b + 108, random_scale()); break;
        case FORGE_TYPE_Q6_K: put_half(b + 208, random_scale()); break;
        default: break;
        }
    }
}

static const uint32_t all_types[] = {FORGE_TYPE_F32,  FORGE_TYPE_F16,  FORGE_TYPE_BF16, FORGE_TYPE_Q4_0,   FORGE_TYPE_Q4_1,
                                     FORGE_TYPE_Q5_0, FORGE_TYPE_Q5_1, FORGE_TYPE_Q8_0, FORGE_TYPE_Q2_K,   FORGE_TYPE_Q3_K,
                                     FORGE_TYPE_Q4_K, FORGE_TYPE_Q5_K, FORGE_TYPE_Q6_K, FORGE_TYPE_IQ4_NL, FORGE_TYPE_IQ4_XS};
#define N_TYPES (sizeof all_types / sizeof all_types[0])

#endif

/* Tests of the CPU backend: matrix products on quantized blocks against a double-precision
   reference built from forge_dequantize, bitwise equality across thread counts, and the thread
   pool (every task run exactly once, thousands of runs, create/destroy, allocation failure).
   Ends with a small benchmark that prints, never asserts: GB/s of weights read by a 4096x4096
   matrix-vector product and GFLOP/s of a 512-token prefill. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime for the benchmark */
#define FORGE_IMPLEMENTATION
#include "../forge.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TEST_SANITIZED 1
#endif
#endif

#define TEST_RNG_SEED 0x9e3779b97f4a7c15ull
#include "random_blocks.h"

static void test_half_conversion(void) {
    uint32_t h;
    int mismatches = 0;
    TEST_CASE("branch-free f16 conversion");
    for (h = 0; h < 65536; h++) {
        float a = forge_f16_to_f32((uint16_t)h), b = forge__half_bits((uint16_t)h);
        if (isnan(a) ? !isnan(b) : memcmp(&a, &b, sizeof a) != 0) mismatches++;
    }
    CHECK(mismatches == 0, "%d of 65536 halves differ from forge_f16_to_f32", mismatches);
}

typedef struct {
    uint32_t type, n_rows, n_cols, n_tokens;
    uint8_t *w;
    uint64_t row_bytes;
    float *x, *y, *y_first;
    double *ref, *bound; /* bound: sum |w*x| per output, the scale of rounding error */
    void *work;
} case_data;

static int setup_case(case_data *c, uint32_t type, uint32_t n_rows, uint32_t n_cols, uint32_t n_tokens) {
    const forge_type_traits *t = forge_type_info(type);
    float *row;
    uint32_t r, k, tok;
    memset(c, 0, sizeof *c);
    c->type = type;
    c->n_rows = n_rows;
    c->n_cols = n_cols;
    c->n_tokens = n_tokens;
    c->row_bytes = (uint64_t)n_cols / t->block_elems * t->block_bytes;
    c->w = (uint8_t *)malloc((size_t)(c->row_bytes * n_rows));
    c->x = (float *)malloc(sizeof(float) * n_cols * n_tokens);
    c->y = (float *)malloc(sizeof(float) * n_rows * n_tokens);
    c->y_first = (float *)malloc(sizeof(float) * n_rows * n_tokens);
    c->ref = (double *)malloc(sizeof(double) * n_rows * n_tokens);
    c->bound = (double *)malloc(sizeof(double) * n_rows * n_tokens);
    row = (float *)malloc(sizeof(float) * n_cols);
    if (!c->w || !c->x || !c->y || !c->y_first || !c->ref || !c->bound || !row) {
        free(row);
        return 0;
    }
    random_blocks(type, c->w, (uint64_t)n_rows * (n_cols / t->block_elems));
    for (k = 0; k < n_cols * n_tokens; k++) c->x[k] = rng_uniform(-2.0f, 2.0f);
    for (r = 0; r < n_rows; r++) {
        forge_dequantize(type, c->w + r * c->row_bytes, row, n_cols);
        for (tok = 0; tok < n_tokens; tok++) {
            double sum = 0, mag = 0;
            const float *x = c->x + (size_t)tok * n_cols;
            for (k = 0; k < n_cols; k++) {
                sum += (double)row[k] * (double)x[k];
                mag += fabs((double)row[k] * (double)x[k]);
            }
            c->ref[(size_t)tok * n_rows + r] = sum;
            c->bound[(size_t)tok * n_rows + r] = mag;
        }
    }
    free(row);
    return 1;
}

static void free_case(case_data *c) {
    free(c->w);
    free(c->x);
    free(c->y);
    free(c->y_first);
    free(c->ref);
    free(c->bound);
}

static double worst_rel = 0; /* largest |y - ref| / |ref| over outputs not lost to cancellation */
static double worst_norm = 0; /* largest |y - ref| / sum|w*x| over all outputs */

/* Runs one product on `pool` and compares it with the reference. Returns the number of bad outputs. */
static int run_and_compare(case_data *c, forge__pool *pool, void *work) {
    uint32_t i, n = c->n_rows * c->n_tokens;
    int bad = 0;
    for (i = 0; i < n; i++) c->y[i] = -12345.0f; /* every output must be written */
    forge__matmul(pool, c->type, c->w, c->row_bytes, c->n_rows, c->n_cols, c->x, c->y, c->n_tokens, work);
    for (i = 0; i < n; i++) {
        double err = fabs((double)c->y[i] - c->ref[i]);
        double norm = c->bound[i] > 0 ? err / c->bound[i] : err;
        if (norm > worst_norm) worst_norm = norm;
        if (fabs(c->ref[i]) > 0.01 * c->bound[i] && err / fabs(c->ref[i]) > worst_rel) worst_rel = err / fabs(c->ref[i]);
        /* relative to the sum of magnitudes: an output near zero through cancellation keeps the
           absolute error of its terms, not a relative error of its own */
        if (!(err <= 1e-5 * c->bound[i] + 1e-30)) {
            if (bad < 3)
                printf("  %s %ux%u tokens %u: output %u = %.9g, reference %.9g (sum|wx| %.3g)\n",
                       forge_type_name(c->type), c->n_rows, c->n_cols, c->n_tokens, i, (double)c->y[i], c->ref[i],
                       c->bound[i]);
            bad++;
        }
    }
    return bad;
}

static void test_matmul_all_types(void) {
    static const uint32_t rows_list[] = {1, 7, 64, 300};
    static const uint32_t tokens_list[] = {1, 3, 17};
    static const uint32_t cols_32[] = {32, 96, 512, 4096}, cols_256[] = {256, 768, 4096}, cols_1[] = {1, 7, 33, 100, 512, 4096};
    forge__pool *pools[3] = {NULL, NULL, NULL};
    uint32_t p, ti;
    void *work = NULL;
    TEST_CASE("matmul: every type against the double reference, 1/2/3 threads bitwise equal");
    for (p = 0; p < 3; p++) CHECK(forge__pool_create(p + 1, NULL, &pools[p], NULL) == FORGE_OK, "pool of %u", p + 1);
    if (!pools[0] || !pools[1] || !pools[2]) return;
    work = malloc(forge__matmul_work_bytes(pools[2], 4096));
    for (ti = 0; ti < N_TYPES; ti++) {
        const uint32_t type = all_types[ti];
        const forge_type_traits *t = forge_type_info(type);
        const uint32_t *cols = t->block_elems == 1 ? cols_1 : t->block_elems == 32 ? cols_32 : cols_256;
        const uint32_t n_cols_list = t->block_elems == 1 ? 6 : t->block_elems == 32 ? 4 : 3;
        uint32_t ri, ci, ki;
        int bad = 0, differ = 0, cases = 0;
        for (ri = 0; ri < 4; ri++)
            for (ci = 0; ci < n_cols_list; ci++)
                for (ki = 0; ki < 3; ki++) {
                    case_data c;
                    uint32_t n_rows = rows_list[ri], n_cols = cols[ci], n_tokens = tokens_list[ki];
                    /* the largest shapes only with the larger row counts' smaller partners, to stay fast */
                    if (n_cols == 4096 && n_rows == 300 && n_tokens == 17) continue;
                    if (!setup_case(&c, type, n_rows, n_cols, n_tokens)) {
                        CHECK(0, "out of memory");
                        free_case(&c);
                        continue;
                    }
                    for (p = 0; p < 3; p++) {
                        bad += run_and_compare(&c, pools[p], work);
                        if (p == 0) memcpy(c.y_first, c.y, sizeof(float) * n_rows * n_tokens);
                        else if (memcmp(c.y_first, c.y, sizeof(float) * n_rows * n_tokens) != 0) {
                            if (differ < 3)
                                printf("  %s %ux%u tokens %u: %u threads differ from 1\n", t->name, n_rows, n_cols, n_tokens,
                                       p + 1);
                            differ++;
                        }
                    }
                    cases++;
                    free_case(&c);
                }
        CHECK(bad == 0, "%s: %d outputs off the reference by more than 1e-5 of sum|w*x|", t->name, bad);
        CHECK(differ == 0, "%s: %d products differ between thread counts", t->name, differ);
        CHECK(cases > 0, "%s: no cases", t->name);
    }
    printf("worst error: %.3g of sum|w*x|; %.3g relative (outputs with |y| > 1%% of sum|w*x|)\n", worst_norm, worst_rel);
    free(work);
    for (p = 0; p < 3; p++) forge__pool_destroy(pools[p]);
}

/* ---- products on 8-bit activations (forge__matmul_q8) ----
   The reference here is the test's own: each block type's layout decoded into doubles from its
   description (not forge_dequantize), and the activations rounded by the rule the header states
   (d = max|x| / 127 per 32, q = x / d to nearest, ties to even). The integer products must match
   sum w * q * d within float rounding; against the unrounded x they stand within the rounding's own
   error. */
static double ref_half(const uint8_t *p) { return (double)forge_f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }

static void ref_k_scale_min(int j, const uint8_t *s, int *sc, int *mn) { /* 6-bit packed scales of Q4_K/Q5_K */
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* One block of `type` at b into out (32 or 256 doubles). */
static void ref_block(uint32_t type, const uint8_t *b, double *out) {
    int j, i;
    switch (type) {
    case FORGE_TYPE_Q4_0:
        for (j = 0; j < 16; j++) out[j] = ref_half(b) * ((b[2 + j] & 15) - 8), out[j + 16] = ref_half(b) * ((b[2 + j] >> 4) - 8);
        break;
    case FORGE_TYPE_Q4_1:
        for (j = 0; j < 16; j++)
            out[j] = ref_half(b) * (b[4 + j] & 15) + ref_half(b + 2), out[j + 16] = ref_half(b) * (b[4 + j] >> 4) + ref_half(b + 2);
        break;
    case FORGE_TYPE_Q5_0: case FORGE_TYPE_Q5_1: {
        const int q1 = type == FORGE_TYPE_Q5_1, at = q1 ? 4 : 2;
        const uint32_t h = (uint32_t)b[at] | (uint32_t)b[at + 1] << 8 | (uint32_t)b[at + 2] << 16 | (uint32_t)b[at + 3] << 24;
        for (j = 0; j < 32; j++) {
            const int nib = j < 16 ? b[at + 4 + j] & 15 : b[at + 4 + j - 16] >> 4;
            const int v = nib + (int)((h >> j & 1) << 4);
            out[j] = q1 ? ref_half(b) * v + ref_half(b + 2) : ref_half(b) * (v - 16);
        }
        break;
    }
    case FORGE_TYPE_Q8_0:
        for (j = 0; j < 32; j++) out[j] = ref_half(b) * (int8_t)b[2 + j];
        break;
    case FORGE_TYPE_Q4_K: case FORGE_TYPE_Q5_K: { /* 8 groups of 32; group g: nibble g&1 of qs[32*(g/2) + l] */
        const int five = type == FORGE_TYPE_Q5_K;
        const uint8_t *qh = b + 16, *qs = b + (five ? 48 : 16);
        for (i = 0; i < 8; i++) {
            int sc, mn;
            ref_k_scale_min(i, b + 4, &sc, &mn);
            for (j = 0; j < 32; j++) {
                int v = (i & 1) ? qs[32 * (i / 2) + j] >> 4 : qs[32 * (i / 2) + j] & 15;
                if (five) v += ((qh[j] >> i) & 1) << 4;
                out[32 * i + j] = ref_half(b) * sc * v - ref_half(b + 2) * mn;
            }
        }
        break;
    }
    case FORGE_TYPE_Q6_K: /* two halves of 128: element 32k + l of a half from ql/qh as the format lays out */
        for (i = 0; i < 2; i++)
            for (j = 0; j < 128; j++) {
                const int k = j / 32, l = j % 32;
                const uint8_t lo = b[64 * i + l + 32 * (k & 1)], hi = b[128 + 32 * i + l];
                const int v = ((k < 2 ? lo & 15 : lo >> 4) | (((hi >> (2 * k)) & 3) << 4)) - 32;
                out[128 * i + j] = ref_half(b + 208) * (int8_t)b[192 + 8 * i + j / 16] * v;
            }
        break;
    default: break;
    }
}

static void ref_round_q8(const float *x, uint32_t n, double *xq) {
    uint32_t b, j;
    for (b = 0; b < n / 32; b++) {
        float amax = 0, d, inv;
        for (j = 0; j < 32; j++) amax = fabsf(x[32 * b + j]) > amax ? fabsf(x[32 * b + j]) : amax;
        d = amax / 127.0f;
        inv = amax > 0 ? 127.0f / amax : 0.0f;
        for (j = 0; j < 32; j++) xq[32 * b + j] = (double)d * nearbyint((double)(x[32 * b + j] * inv));
    }
}

static void test_matmul_q8(void) {
    static const uint32_t types[] = {FORGE_TYPE_Q4_0, FORGE_TYPE_Q4_1, FORGE_TYPE_Q5_0, FORGE_TYPE_Q5_1,
                                     FORGE_TYPE_Q8_0, FORGE_TYPE_Q4_K, FORGE_TYPE_Q5_K, FORGE_TYPE_Q6_K};
    static const uint32_t tokens_list[] = {1, 3, 17};
    /* 1024 columns: 32 blocks; 640: 20, a last group of 4 blocks in the VNNI forms (Gemma 3 270M's rows) */
    static const uint32_t cols_list[] = {1024, 640};
    const uint32_t n_rows = 37;
    uint32_t n_cols = 1024, ci;
    forge__pool *pools[2] = {NULL, NULL};
    float *x = (float *)malloc(sizeof(float) * n_cols * 17), *y = (float *)malloc(sizeof(float) * n_rows * 17);
    float *y_first = (float *)malloc(sizeof(float) * n_rows * 17);
    double *xq = (double *)malloc(sizeof(double) * n_cols * 17), *row = (double *)malloc(sizeof(double) * n_cols);
    uint8_t *w = (uint8_t *)malloc((size_t)n_rows * n_cols / 32 * 34 + 1);
    void *work = malloc(forge__matmul_q8_work_bytes(2, n_cols, 17) + 3);
    uint32_t ti, ki, i, r, p;
    TEST_CASE("matmul on 8-bit activations: portable and vector forms against a double reference");
    CHECK(forge__pool_create(1, NULL, &pools[0], NULL) == FORGE_OK && forge__pool_create(2, NULL, &pools[1], NULL) == FORGE_OK,
          "pools");
    if (!x || !y || !y_first || !xq || !row || !w || !work || !pools[0] || !pools[1]) {
        CHECK(0, "out of memory");
        goto done;
    }
    { /* the rounding itself: ties to even, zeros, one large element */
        float v[32];
        forge__q8_block blk;
        for (i = 0; i < 32; i++) v[i] = (float)i - 16.0f; /* amax 16: x * 127/16, e.g. -16 -> -127 */
        v[1] = 0.5f * 16.0f / 127.0f;                        /* exactly half a step: rounds to 0 */
        v[3] = 1.5f * 16.0f / 127.0f;                        /* one and a half steps: rounds to 2 */
        forge__q8_quantize(v, &blk, 1);
        CHECK(blk.q[0] == -127 && blk.q[31] == 119 && blk.q[16] == 0, "q8 ends: %d %d %d", blk.q[0], blk.q[31], blk.q[16]);
        CHECK(blk.d == 16.0f / 127.0f, "q8 scale %.9g", (double)blk.d);
        for (i = 0; i < 32; i++) v[i] = 0.0f;
        forge__q8_quantize(v, &blk, 1);
        CHECK(blk.d == 0.0f && blk.ds == 0.0f && blk.q[5] == 0, "q8 of zeros");
        v[7] = NAN; /* a broken input stays visible in the products */
        forge__q8_quantize(v, &blk, 1);
        CHECK(isnan(blk.d) && blk.q[7] == 0, "q8 of a NaN: scale %g", (double)blk.d);
        v[7] = INFINITY;
        forge__q8_quantize(v, &blk, 1);
        CHECK(isnan(blk.d) && blk.q[7] == 0, "q8 of an infinity: scale %g", (double)blk.d);
    }
#ifdef FORGE__AVX2
    if (FORGE__AVX2_PRESENT()) { /* the vector rounding: the same bytes and floats as the portable one */
        static float v[64 * 32];
        forge__q8_block a[64], b[64];
        int same = 1;
        for (i = 0; i < 64 * 32; i++) v[i] = rng_uniform(-3.0f, 3.0f) * (i % 61 == 0 ? 50.0f : 1.0f);
        for (i = 0; i < 32; i++) v[32 + i] = (float)i - 16.0f, v[64 + i] = 0.0f, v[96 + i] = -1e-30f * (float)(i + 1);
        v[33] = 0.5f * 16.0f / 127.0f, v[35] = 1.5f * 16.0f / 127.0f, v[36] = -2.5f * 16.0f / 127.0f; /* ties */
        forge__q8_quantize(v, a, 64);
        forge__q8_quantize_avx2(v, b, 64);
        for (i = 0; i < 64; i++)
            same &= a[i].d == b[i].d && a[i].ds == b[i].ds && memcmp(a[i].q, b[i].q, 32) == 0;
        CHECK(same, "q8 rounding: AVX2 form differs from the portable one");
        v[200] = NAN, v[300] = -INFINITY;
        forge__q8_quantize_avx2(v, b, 64);
        CHECK(isnan(b[6].d) && b[6].q[200 % 32] == 0 && isnan(b[9].d) && b[9].q[300 % 32] == 0 && b[8].d == a[8].d,
              "q8 rounding (AVX2) of a NaN and an infinity");
    }
#endif
#ifdef FORGE__NEON
    { /* the ARM forms (NEON, vdotq_s32 where targeted): the portable floats, bit for bit, for one token and
         for a step's unpacked rows */
        static float v[2 * 64 * 32];
        static forge__q8_block xb[2 * 64];
        static forge__q8_row_block unpacked[64];
        int dot_differ = 0, row_differ = 0, picked = 1, round;
        CHECK(forge__q8_simd_level(1) == 1 && forge__q8_simd_level(2) == 1 && forge__q8_simd_level(0) == 0, "NEON level");
        for (round = 0; round < 4; round++)
            for (ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
                const forge_type_traits *t = forge_type_info(types[ti]);
                float a, b, ya[2], yb[2];
                for (i = 0; i < 2 * 64 * 32; i++) v[i] = rng_uniform(-2.0f, 2.0f) * (i % 53 == 0 ? 20.0f : 1.0f);
                if (round == 3) for (i = 0; i < 32; i++) v[32 * 5 + i] = 0.0f; /* a zero block */
                forge__q8_quantize(v, xb, 2 * 64);
                random_blocks(types[ti], w, 64 * 32 / t->block_elems);
                picked &= forge__qdot_for(types[ti], 1) != forge__qdot_for(types[ti], 0) &&
                          forge__q8_rowdot_for(types[ti], 1) == forge__q8_rowdot_neon;
                a = forge__qdot_for(types[ti], 0)(w, xb, 64);
                b = forge__qdot_for(types[ti], 1)(w, xb, 64);
                dot_differ += memcmp(&a, &b, sizeof a) != 0;
                forge__q8_row_unpack(types[ti], w, unpacked, 64);
                forge__q8_rowdot(unpacked, xb, 64, 2, 64, ya);
                forge__q8_rowdot_neon(unpacked, xb, 64, 2, 64, yb);
                row_differ += memcmp(ya, yb, sizeof ya) != 0 || memcmp(&a, &ya[0], sizeof a) != 0;
            }
        CHECK(picked, "the NEON forms are the ones level 1 picks");
        CHECK(dot_differ == 0, "NEON one-token products: %d of 32 differ from the portable ones", dot_differ);
        CHECK(row_differ == 0, "NEON products of unpacked rows: %d of 32 differ from the portable ones", row_differ);
    }
#endif
    for (ci = 0; ci < 2; ci++)
    for (ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const forge_type_traits *t = forge_type_info(types[ti]);
        uint64_t row_bytes;
        int simd, bad = 0, differ = 0, alone = 0;
        double worst = 0, err2 = 0, ref2 = 0;
        n_cols = cols_list[ci];
        if (n_cols % t->block_elems != 0) continue;
        row_bytes = (uint64_t)n_cols / t->block_elems * t->block_bytes;
        random_blocks(types[ti], w, (uint64_t)n_rows * (n_cols / t->block_elems));
        for (ki = 0; ki < 3; ki++) {
            const uint32_t n_tokens = tokens_list[ki];
            for (i = 0; i < n_cols * n_tokens; i++) x[i] = rng_uniform(-2.0f, 2.0f) * (i % 97 == 0 ? 8.0f : 1.0f);
            for (i = 0; i < n_tokens; i++) ref_round_q8(x + (size_t)i * n_cols, n_cols, xq + (size_t)i * n_cols);
            for (simd = 0; simd < 3; simd++) /* portable, AVX2, AVX-512 VNNI where present */
                for (p = 0; p < 2; p++) {
                    for (i = 0; i < n_rows * n_tokens; i++) y[i] = -12345.0f;
                    forge__matmul_q8(pools[p], types[ti], w, row_bytes, n_rows, n_cols, x, y, n_tokens, (uint8_t *)work + 3, simd);
                    for (r = 0; r < n_rows; r++) {
                        uint32_t b, tok;
                        for (b = 0; b < n_cols / t->block_elems; b++)
                            ref_block(types[ti], w + r * row_bytes + b * t->block_bytes, row + b * t->block_elems);
                        for (tok = 0; tok < n_tokens; tok++) {
                            double sum = 0, mag = 0, exact = 0, err;
                            const float got = y[(size_t)tok * n_rows + r];
                            for (i = 0; i < n_cols; i++) {
                                sum += row[i] * xq[(size_t)tok * n_cols + i];
                                mag += fabs(row[i] * xq[(size_t)tok * n_cols + i]);
                                exact += row[i] * (double)x[(size_t)tok * n_cols + i];
                            }
                            err = fabs((double)got - sum);
                            if (err / mag > worst) worst = err / mag;
                            if (!(err <= 2e-6 * mag)) {
                                if (bad < 3)
                                    printf("  %s simd %d tokens %u row %u: %.9g, reference %.9g (sum|wx| %.3g)\n", t->name,
                                           simd, n_tokens, r, (double)got, sum, mag);
                                bad++;
                            }
                            err2 += ((double)got - exact) * ((double)got - exact);
                            ref2 += exact * exact;
                        }
                    }
                    if (p == 0) memcpy(y_first, y, sizeof(float) * n_rows * n_tokens);
                    else if (memcmp(y_first, y, sizeof(float) * n_rows * n_tokens) != 0) differ++;
                    if (p == 1 && n_tokens > 1) { /* each token alone gets the same sums, bit for bit */
                        uint32_t tok;
                        for (tok = 0; tok < n_tokens; tok++) {
                            forge__matmul_q8(pools[1], types[ti], w, row_bytes, n_rows, n_cols, x + (size_t)tok * n_cols, y_first,
                                             1, work, simd);
                            if (memcmp(y_first, y + (size_t)tok * n_rows, sizeof(float) * n_rows) != 0) alone++;
                        }
                        memcpy(y_first, y, sizeof(float) * n_rows * n_tokens);
                    }
                }
        }
        CHECK(bad == 0, "%s x %u: %d outputs off sum w*q*d by more than 2e-6 of sum|w*q*d| (worst %.3g)", t->name, n_cols, bad, worst);
        CHECK(differ == 0, "%s x %u: %d products differ between 1 and 2 threads", t->name, n_cols, differ);
        CHECK(alone == 0, "%s x %u: %d tokens of a step get other sums than alone", t->name, n_cols, alone);
        CHECK(sqrt(err2 / ref2) < 0.02, "%s x %u: %.3g relative L2 from the unrounded product", t->name, n_cols, sqrt(err2 / ref2));
        printf("  %s x %u: worst %.3g of sum|w*q*d|, %.3g relative L2 from f32 activations\n", t->name, n_cols, worst, sqrt(err2 / ref2));
    }
    { /* an unsupported type or no work area: zeros */
        for (i = 0; i < n_rows; i++) y[i] = 1.0f;
        forge__matmul_q8(pools[1], FORGE_TYPE_F16, w, n_cols * 2, n_rows, n_cols, x, y, 1, work, 1);
        CHECK(y[0] == 0.0f && y[n_rows - 1] == 0.0f, "F16 on 8-bit activations gives zeros");
        CHECK(!forge__matmul_q8_supported(FORGE_TYPE_F16, 64) && !forge__matmul_q8_supported(FORGE_TYPE_Q4_K, 128) &&
                  forge__matmul_q8_supported(FORGE_TYPE_Q4_K, 512) && forge__matmul_q8_supported(FORGE_TYPE_Q4_0, 32),
              "forge__matmul_q8_supported");
    }
done:
    free(x);
    free(y);
    free(y_first);
    free(xq);
    free(row);
    free(w);
    free(work);
    forge__pool_destroy(pools[0]);
    forge__pool_destroy(pools[1]);
}

static void test_matmul_edges(void) {
    case_data c;
    forge__pool *pool = NULL;
    void *work;
    uint8_t *unaligned;
    int bad;
    TEST_CASE("matmul: odd work alignment, row stride, unsupported type");
    CHECK(forge__pool_create(2, NULL, &pool, NULL) == FORGE_OK, "pool");
    if (!setup_case(&c, FORGE_TYPE_Q4_K, 33, 512, 5)) {
        CHECK(0, "out of memory");
        free_case(&c);
        forge__pool_destroy(pool);
        return;
    }
    work = malloc(forge__matmul_work_bytes(pool, 512) + 3);
    bad = run_and_compare(&c, pool, (uint8_t *)work + 3); /* any pointer will do */
    CHECK(bad == 0, "work area at an odd address: %d bad outputs", bad);
    /* rows padded apart (row_bytes larger than one row) and weights at an odd address */
    {
        uint64_t stride = c.row_bytes + 7;
        uint32_t r, i;
        float *y = (float *)malloc(sizeof(float) * c.n_rows * c.n_tokens);
        unaligned = (uint8_t *)malloc((size_t)(stride * c.n_rows + 1));
        for (r = 0; r < c.n_rows; r++) memcpy(unaligned + 1 + r * stride, c.w + r * c.row_bytes, (size_t)c.row_bytes);
        forge__matmul(pool, c.type, unaligned + 1, stride, c.n_rows, c.n_cols, c.x, y, c.n_tokens, work);
        forge__matmul(pool, c.type, c.w, c.row_bytes, c.n_rows, c.n_cols, c.x, c.y, c.n_tokens, work);
        CHECK(memcmp(y, c.y, sizeof(float) * c.n_rows * c.n_tokens) == 0, "strided rows give the same result");
        forge__matmul(pool, c.type, unaligned + 1, stride, c.n_rows, c.n_cols, c.x, y, 1, NULL);
        forge__matmul(pool, c.type, c.w, c.row_bytes, c.n_rows, c.n_cols, c.x, c.y, 1, NULL);
        CHECK(memcmp(y, c.y, sizeof(float) * c.n_rows) == 0, "strided rows, one token (no work area needed)");
        for (i = 0; i < c.n_rows; i++) y[i] = 1.0f;
        forge__matmul(pool, 99, c.w, c.row_bytes, c.n_rows, c.n_cols, c.x, y, 1, work);
        CHECK(y[0] == 0.0f && y[c.n_rows - 1] == 0.0f, "unsupported type gives zeros");
        CHECK(!forge__matmul_supported(99, 512) && !forge__matmul_supported(FORGE_TYPE_Q4_K, 128) &&
                  forge__matmul_supported(FORGE_TYPE_Q4_K, 512) && forge__matmul_supported(FORGE_TYPE_F16, 3),
              "forge__matmul_supported");
        forge__matmul(NULL, c.type, c.w, c.row_bytes, c.n_rows, c.n_cols, c.x, y, c.n_tokens, work);
        forge__matmul(pool, c.type, c.w, c.row_bytes, c.n_rows, c.n_cols, c.x, c.y, c.n_tokens, work);
        CHECK(memcmp(y, c.y, sizeof(float) * c.n_rows * c.n_tokens) == 0, "a NULL pool runs on the caller, same result");
        free(y);
        free(unaligned);
    }
    free(work);
    free_case(&c);
    forge__pool_destroy(pool);
}

/* ---- pool ---- */

typedef struct {
    uint32_t *hits; /* one slot per task: tasks never share a slot, so no atomics are needed */
    uint32_t pool_size;
    uint32_t bad_thread;
    uint32_t *thread_seen; /* per thread index */
} count_ctx;

/* Several matrices on the same activations in one call (q, k, v; gate and up): each matrix's outputs
   the same bits as its own forge__matmul_q8 call, at every vector level, for one token and for a
   prompt, with parts of mixed types and sizes (one of 0 rows); a set the call does not take gives zeros. */
static void test_matmul_q8_parts(void) {
    static const uint32_t types[] = {FORGE_TYPE_Q4_K, FORGE_TYPE_Q6_K, FORGE_TYPE_Q4_K, FORGE_TYPE_Q5_0, FORGE_TYPE_Q8_0, FORGE_TYPE_Q4_1};
    static const uint32_t rows[] = {70, 33, 0, 17, 48, 5};
    static const uint32_t token_counts[] = {1, 3, 9};
    const uint32_t n_cols = 512;
    forge__pool *pool = NULL;
    forge__q8_part parts[FORGE__Q8_MAX_PARTS];
    uint8_t *w[6];
    float *x, *y[6], *alone;
    void *work;
    uint32_t i, ti, set, simd, bad = 0, checked = 0;
    TEST_CASE("matmul on 8-bit activations: several matrices in one call, each as alone");
    CHECK(forge__pool_create(2, NULL, &pool, NULL) == FORGE_OK, "pool");
    x = (float *)malloc(sizeof(float) * n_cols * 9);
    alone = (float *)malloc(sizeof(float) * 70 * 9);
    work = malloc(forge__matmul_q8_work_bytes(2, n_cols, 9));
    for (i = 0; i < n_cols * 9; i++) x[i] = rng_uniform(-2.0f, 2.0f);
    for (i = 0; i < 6; i++) {
        const forge_type_traits *t = forge_type_info(types[i]);
        w[i] = (uint8_t *)malloc((size_t)(rows[i] + 1) * (n_cols / t->block_elems) * t->block_bytes);
        y[i] = (float *)malloc(sizeof(float) * (rows[i] + 1) * 9);
        random_blocks(types[i], w[i], (uint64_t)rows[i] * (n_cols / t->block_elems));
    }
    for (set = 0; set < 2; set++) /* the K-quants (q, k, v as Qwen's), then 32-element types (as Gemma's) */
        for (simd = 0; simd < 3; simd++)
            for (ti = 0; ti < 3; ti++) {
                const uint32_t n_tokens = token_counts[ti], first = set * 3, n_parts = 3;
                for (i = 0; i < n_parts; i++) {
                    const forge_type_traits *t = forge_type_info(types[first + i]);
                    parts[i].type = types[first + i], parts[i].w = w[first + i], parts[i].n_rows = rows[first + i];
                    parts[i].row_bytes = (uint64_t)(n_cols / t->block_elems) * t->block_bytes, parts[i].y = y[first + i];
                }
                CHECK(forge__matmul_q8_parts_supported(parts, n_parts, n_cols), "set %u supported", set);
                forge__matmul_q8_parts(pool, parts, n_parts, n_cols, x, n_tokens, work, (int)simd);
                for (i = 0; i < n_parts; i++) {
                    if (parts[i].n_rows == 0) continue;
                    forge__matmul_q8(pool, parts[i].type, parts[i].w, parts[i].row_bytes, parts[i].n_rows, n_cols, x, alone, n_tokens, work,
                                     (int)simd);
                    bad += memcmp(alone, parts[i].y, sizeof(float) * parts[i].n_rows * n_tokens) != 0;
                    checked++;
                }
            }
    CHECK(bad == 0, "%u of %u matrices differ from their own call", bad, checked);
    parts[0].type = FORGE_TYPE_F16; /* not on 8-bit activations: zeros */
    for (i = 0; i < parts[0].n_rows; i++) parts[0].y[i] = 1.0f;
    CHECK(!forge__matmul_q8_parts_supported(parts, 3, n_cols), "F16 in a set is not supported");
    forge__matmul_q8_parts(pool, parts, 3, n_cols, x, 1, work, 2);
    CHECK(parts[0].y[0] == 0.0f && parts[0].y[parts[0].n_rows - 1] == 0.0f, "an unsupported set gives zeros");
    for (i = 0; i < 6; i++) free(w[i]), free(y[i]);
    free(x);
    free(alone);
    free(work);
    forge__pool_destroy(pool);
}

static void count_task(void *ctx, uint32_t task, uint32_t n_tasks, uint32_t thread) {
    count_ctx *c = (count_ctx *)ctx;
    (void)n_tasks;
    c->hits[task]++;
    if (thread >= c->pool_size) c->hits[task] += 1000; /* shows up as a wrong count */
    else c->thread_seen[thread] = 1;
}

static int counting_run(forge__pool *pool, uint32_t n_tasks, uint32_t *hits, uint32_t *seen) {
    count_ctx c;
    uint32_t i;
    int ok = 1;
    c.hits = hits;
    c.pool_size = forge__pool_size(pool);
    c.bad_thread = 0;
    c.thread_seen = seen;
    memset(hits, 0, sizeof(uint32_t) * (n_tasks ? n_tasks : 1));
    forge__pool_run(pool, count_task, &c, n_tasks);
    for (i = 0; i < n_tasks; i++) ok &= hits[i] == 1;
    return ok;
}

static size_t live_bytes, live_blocks;
static int fail_next_alloc;
static void *counting_alloc(size_t size, void *user) {
    size_t *p;
    (void)user;
    if (fail_next_alloc) {
        fail_next_alloc = 0;
        return NULL;
    }
    p = (size_t *)malloc(size + 16);
    if (!p) return NULL;
    p[0] = size;
    live_bytes += size;
    live_blocks++;
    return (char *)p + 16;
}
static void counting_free(void *ptr, void *user) {
    size_t *p = (size_t *)((char *)ptr - 16);
    (void)user;
    live_bytes -= p[0];
    live_blocks--;
    free(p);
}

static void test_pool(void) {
    static uint32_t hits[4096], seen[FORGE_MAX_THREADS];
    forge__pool *pool = NULL;
    forge_allocator a;
    forge_error e;
    uint32_t i, n;
    int ok;

#ifdef FORGE_NO_THREADS
    const int threads_off = 1; /* every pool has one participant */
#else
    const int threads_off = 0;
#endif
    memset(&e, 0, sizeof e);
    TEST_CASE("pool: sizes");
    CHECK(forge_cpu_count() >= 1, "forge_cpu_count() = %u", forge_cpu_count());
    /* (create outside CHECK: its message arguments may be evaluated before its condition) */
    ok = forge__pool_create(0, NULL, &pool, &e) == FORGE_OK;
    CHECK(ok && forge__pool_size(pool) == (threads_off ? 1 : forge_cpu_default_threads()), "0 threads: the default policy, %u",
          forge__pool_size(pool));
    forge__pool_destroy(pool);
    ok = forge__pool_create(1, NULL, &pool, &e) == FORGE_OK;
    CHECK(ok && forge__pool_size(pool) == 1, "1 thread");
    CHECK(counting_run(pool, 100, hits, seen), "one thread runs every task once");
    forge__pool_destroy(pool);
    ok = forge__pool_create(100000, NULL, &pool, &e) == FORGE_OK;
    CHECK(ok && forge__pool_size(pool) == (threads_off ? 1 : FORGE_MAX_THREADS), "clamped to FORGE_MAX_THREADS: %u",
          forge__pool_size(pool));
    forge__pool_destroy(pool);
    forge__pool_destroy(NULL);
    CHECK(forge__pool_size(NULL) == 1, "NULL pool has one participant");
    CHECK(forge__pool_create(2, NULL, NULL, &e) == FORGE_ERR_ARGUMENT, "NULL out");

    TEST_CASE("pool: many threads, every task exactly once");
    CHECK(forge__pool_create(64, NULL, &pool, &e) == FORGE_OK, "64 threads: %s", e.message);
    if (pool) {
        ok = 1;
        memset(seen, 0, sizeof seen);
        for (n = 0; n <= 300; n += 7) ok &= counting_run(pool, n, hits, seen);
        ok &= counting_run(pool, 4096, hits, seen);
        CHECK(ok, "some task ran zero or several times, or saw a bad thread index");
        for (i = 0, n = 0; i < forge__pool_size(pool); i++) n += seen[i];
        printf("64-thread pool: %u of 64 thread indices took tasks\n", n);
        forge__pool_destroy(pool);
    }

    TEST_CASE("pool: 10000 small runs");
    CHECK(forge__pool_create(3, NULL, &pool, &e) == FORGE_OK, "3 threads");
    if (pool) {
        ok = 1;
        for (i = 0; i < 10000; i++) ok &= counting_run(pool, 1 + i % 9, hits, seen);
        CHECK(ok, "a run lost or repeated a task");
        forge__pool_destroy(pool);
    }

    TEST_CASE("pool: create and destroy repeatedly, with a counting allocator");
    a.alloc = counting_alloc;
    a.free = counting_free;
    a.user_data = NULL;
    ok = 1;
    for (i = 0; i < 40; i++) {
        pool = NULL;
        if (forge__pool_create(1 + i % 9, &a, &pool, &e) != FORGE_OK) ok = 0;
        if (i % 2) ok &= counting_run(pool, 50, hits, seen);
        forge__pool_destroy(pool);
    }
    CHECK(ok, "create/run/destroy cycle failed");
    CHECK(live_blocks == 0 && live_bytes == 0, "%lu blocks (%lu bytes) left allocated", (unsigned long)live_blocks,
          (unsigned long)live_bytes);
    fail_next_alloc = 1;
    pool = (forge__pool *)&e; /* must be reset to NULL on failure */
    CHECK(forge__pool_create(4, &a, &pool, &e) == FORGE_ERR_HOST_MEMORY && pool == NULL && e.result == FORGE_ERR_HOST_MEMORY,
          "allocation failure reported: %s", e.message);
    CHECK(live_blocks == 0, "nothing left after a failed create");
}

/* ---- benchmark (printed, not asserted) ---- */

static double now_seconds(void) {
#if defined(CLOCK_MONOTONIC) && !defined(_WIN32)
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
#else
    return (double)clock() / CLOCKS_PER_SEC;
#endif
}

static void benchmark(uint32_t max_threads) {
    static const uint32_t types[] = {FORGE_TYPE_Q4_K, FORGE_TYPE_Q4_0, FORGE_TYPE_Q8_0, FORGE_TYPE_F16, FORGE_TYPE_Q6_K, FORGE_TYPE_Q5_K};
    forge__pool *pool = NULL;
    uint32_t i, n = 4096, threads;
    float *x = (float *)malloc(sizeof(float) * 512 * 4096), *y = (float *)malloc(sizeof(float) * 512 * 4096);
    uint8_t *w = (uint8_t *)malloc((size_t)n * n * 2);
    void *work, *q8_work;
    if (!x || !y || !w) {
        free(x);
        free(y);
        free(w);
        return;
    }
    for (i = 0; i < 512 * 4096; i++) x[i] = rng_uniform(-1, 1);
    for (threads = 1; threads <= max_threads; threads *= 2) {
        if (forge__pool_create(threads, NULL, &pool, NULL) != FORGE_OK) break;
        work = malloc(forge__matmul_work_bytes(pool, n));
        q8_work = malloc(forge__matmul_q8_work_bytes(threads, n, 512));
        for (i = 0; i < sizeof types / sizeof types[0]; i++) {
            const forge_type_traits *t = forge_type_info(types[i]);
            uint64_t row_bytes = (uint64_t)n / t->block_elems * t->block_bytes;
            double start, best = 1e30;
            int rep;
            random_blocks(types[i], w, (uint64_t)n * (n / t->block_elems));
            for (rep = 0; rep < 5; rep++) {
                start = now_seconds();
                forge__matmul(pool, types[i], w, row_bytes, n, n, x, y, 1, work);
                start = now_seconds() - start;
                if (start < best) best = start;
            }
            printf("bench: %u thread%s %-4s 4096x4096 matvec %7.3f ms  %6.2f GB/s of weights\n", threads,
                   threads > 1 ? "s" : " ", t->name, best * 1e3, (double)row_bytes * n / best / 1e9);
            if (forge__matmul_q8_supported(types[i], n) && q8_work) { /* the default CPU products: 8-bit activations */
                for (best = 1e30, rep = 0; rep < 5; rep++) {
                    start = now_seconds();
                    forge__matmul_q8(pool, types[i], w, row_bytes, n, n, x, y, 1, q8_work, 2);
                    start = now_seconds() - start;
                    if (start < best) best = start;
                }
                printf("bench: %u thread%s %-4s 4096x4096 matvec %7.3f ms  %6.2f GB/s of weights (8-bit activations)\n",
                       threads, threads > 1 ? "s" : " ", t->name, best * 1e3, (double)row_bytes * n / best / 1e9);
            }
        }
        {
            uint32_t m = 1024, tokens = 512;
            double start, best = 1e30;
            int rep;
            random_blocks(FORGE_TYPE_Q4_0, w, (uint64_t)m * (m / 32));
            for (rep = 0; rep < 2; rep++) {
                start = now_seconds();
                forge__matmul(pool, FORGE_TYPE_Q4_0, w, m / 32 * 18, m, m, x, y, tokens, work);
                start = now_seconds() - start;
                if (start < best) best = start;
            }
            printf("bench: %u thread%s Q4_0 1024x1024 x 512 tokens prefill %7.2f ms  %6.2f GFLOP/s\n", threads,
                   threads > 1 ? "s" : " ", best * 1e3, 2.0 * m * m * tokens / best / 1e9);
            for (best = 1e30, rep = 0; q8_work && rep < 2; rep++) {
                start = now_seconds();
                forge__matmul_q8(pool, FORGE_TYPE_Q4_0, w, m / 32 * 18, m, m, x, y, tokens, q8_work, 2);
                start = now_seconds() - start;
                if (start < best) best = start;
            }
            printf("bench: %u thread%s Q4_0 1024x1024 x 512 tokens prefill %7.2f ms  %6.2f GFLOP/s (8-bit activations)\n",
                   threads, threads > 1 ? "s" : " ", best * 1e3, 2.0 * m * m * tokens / best / 1e9);
        }
        { /* the K-quant files' types, prefill of a prompt of 64 and 512 tokens on 8-bit activations */
            static const uint32_t k_types[] = {FORGE_TYPE_Q4_K, FORGE_TYPE_Q6_K};
            static const uint32_t k_tokens[] = {64, 512};
            const uint32_t m = 1536;
            uint32_t ki, ni;
            for (ki = 0; ki < 2 && q8_work; ki++)
                for (ni = 0; ni < 2; ni++) {
                    const forge_type_traits *t = forge_type_info(k_types[ki]);
                    const uint64_t row_bytes = (uint64_t)m / 256 * t->block_bytes;
                    double start, best = 1e30;
                    int rep;
                    random_blocks(k_types[ki], w, (uint64_t)m * (m / 256));
                    for (rep = 0; rep < 3; rep++) {
                        start = now_seconds();
                        forge__matmul_q8(pool, k_types[ki], w, row_bytes, m, m, x, y, k_tokens[ni], q8_work, 2);
                        start = now_seconds() - start;
                        if (start < best) best = start;
                    }
                    printf("bench: %u thread%s %-4s 1536x1536 x %3u tokens prefill %7.2f ms  %6.2f GFLOP/s (8-bit activations)\n",
                           threads, threads > 1 ? "s" : " ", t->name, k_tokens[ni], best * 1e3,
                           2.0 * m * m * k_tokens[ni] / best / 1e9);
                }
        }
        free(work);
        free(q8_work);
        forge__pool_destroy(pool);
    }
    free(x);
    free(y);
    free(w);
}

int main(int argc, char **argv) {
    int bench_only = argc > 1 && strcmp(argv[1], "--bench") == 0, no_bench = argc > 1 && strcmp(argv[1], "--no-bench") == 0;
    /* --bench [max threads]: only the benchmark, with 1, 2, 4 ... threads up to max (default 2) */
    uint32_t max_threads = bench_only && argc > 2 ? (uint32_t)atoi(argv[2]) : 2u;
    if (!bench_only) {
        double start = now_seconds();
        test_half_conversion();
        test_matmul_all_types();
        printf("products: %.2f s\n", now_seconds() - start);
        test_matmul_edges();
        start = now_seconds();
        test_matmul_q8();
        test_matmul_q8_parts();
        printf("8-bit products: %.2f s\n", now_seconds() - start);
        start = now_seconds();
        test_pool();
        printf("pool: %.2f s\n", now_seconds() - start);
    }
#ifdef TEST_SANITIZED
    (void)no_bench;
    if (!bench_only) printf("benchmark skipped under sanitizers\n");
    else benchmark(max_threads);
#else
    if (!no_bench) benchmark(max_threads);
#endif
    return test_summary();
}

/* Unit tests of the tensor type table: block geometry, half-precision conversion, and
   dequantization of blocks whose values are worked out by hand from the format description.
   (Every type is also checked against the gguf Python package on every fixture tensor, in
   tests/check_fixtures.py.) */
#define FORGE_IMPLEMENTATION
#include "../forge.h"
#include "test.h"
#include "kv_rounding.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void test_geometry(void) {
    /* (id, name, elements per block, bytes per block) as the GGUF format defines them */
    static const struct { uint32_t id; const char *name; uint32_t elems, bytes; } expected[] = {
        {0, "F32", 1, 4},       {1, "F16", 1, 2},       {30, "BF16", 1, 2},     {2, "Q4_0", 32, 18},
        {3, "Q4_1", 32, 20},    {6, "Q5_0", 32, 22},    {7, "Q5_1", 32, 24},    {8, "Q8_0", 32, 34},
        {10, "Q2_K", 256, 84},  {11, "Q3_K", 256, 110}, {12, "Q4_K", 256, 144}, {13, "Q5_K", 256, 176},
        {14, "Q6_K", 256, 210}, {20, "IQ4_NL", 32, 18}, {23, "IQ4_XS", 256, 136}};
    size_t i;
    uint32_t id;
    int supported = 0;
    TEST_CASE("type geometry");
    for (i = 0; i < sizeof expected / sizeof expected[0]; i++) {
        const forge_type_traits *t = forge_type_info(expected[i].id);
        CHECK(t != NULL, "type %u missing", expected[i].id);
        if (!t) continue;
        CHECK(strcmp(t->name, expected[i].name) == 0, "type %u named %s", expected[i].id, t->name);
        CHECK(t->block_elems == expected[i].elems && t->block_bytes == expected[i].bytes, "%s: %u elems %u bytes",
              t->name, t->block_elems, t->block_bytes);
        CHECK(strcmp(forge_type_name(expected[i].id), expected[i].name) == 0, "forge_type_name(%u)", expected[i].id);
    }
    for (id = 0; id < 1000; id++) supported += forge_type_info(id) != NULL;
    CHECK(supported == 15, "%d supported ids, expected exactly 15", supported);
    CHECK(forge_type_info(16) == NULL && strcmp(forge_type_name(16), "IQ2_XXS") == 0, "IQ2_XXS known by name only");
    CHECK(forge_type_name(4) && forge_type_info(4) == NULL, "retired id 4");
    CHECK(forge_type_name(500) == NULL, "id 500 has no name");

    TEST_CASE("type bytes");
    {
        uint64_t bytes = 0;
        CHECK(forge_type_bytes(FORGE_TYPE_Q4_K, 4096 * 256, &bytes) == FORGE_OK && bytes == 4096ull * 144, "Q4_K bytes %llu",
              (unsigned long long)bytes);
        CHECK(forge_type_bytes(FORGE_TYPE_Q8_0, 33, &bytes) == FORGE_ERR_TENSOR_BLOCK, "33 Q8_0 elements");
        CHECK(forge_type_bytes(FORGE_TYPE_F32, 1ull << 62, &bytes) == FORGE_ERR_OVERFLOW, "2^62 f32 elements");
        CHECK(forge_type_bytes(99, 32, &bytes) == FORGE_ERR_ARGUMENT, "unknown type");
    }
}

static void test_half(void) {
    uint32_t h;
    int mismatches = 0;
    TEST_CASE("f16 conversion");
    CHECK(forge_f16_to_f32(0x3c00) == 1.0f, "1.0");
    CHECK(forge_f16_to_f32(0xc000) == -2.0f, "-2.0");
    CHECK(forge_f16_to_f32(0x7bff) == 65504.0f, "largest half");
    CHECK(forge_f16_to_f32(0x0001) == ldexpf(1.0f, -24), "smallest subnormal");
    CHECK(forge_f16_to_f32(0x03ff) == ldexpf(1023.0f, -24), "largest subnormal");
    CHECK(isinf(forge_f16_to_f32(0x7c00)) && isnan(forge_f16_to_f32(0x7e00)), "inf and nan");
    CHECK(signbit(forge_f16_to_f32(0x8000)) && forge_f16_to_f32(0x8000) == 0.0f, "negative zero");
    /* every half that is not NaN survives the round trip exactly */
    for (h = 0; h < 65536; h++) {
        float f = forge_f16_to_f32((uint16_t)h);
        if (isnan(f)) continue;
        if (forge_f32_to_f16(f) != h) mismatches++;
    }
    CHECK(mismatches == 0, "%d halves changed in a round trip", mismatches);
    CHECK(forge_f32_to_f16(1.0f + ldexpf(1.0f, -11)) == 0x3c00, "tie rounds to even (down)");
    CHECK(forge_f32_to_f16(1.0f + 3 * ldexpf(1.0f, -11)) == 0x3c02, "tie rounds to even (up)");
    CHECK(forge_f32_to_f16(1e6f) == 0x7c00, "overflow to inf");
    CHECK(forge_bf16_to_f32(0x3f80) == 1.0f && forge_bf16_to_f32(0xc040) == -3.0f, "bf16");
}

static void test_blocks(void) {
    uint8_t block[256];
    float out[256];
    int j, bad;

    TEST_CASE("Q4_0 block");
    /* d = 0.5 (0x3800); byte j holds element j (low nibble) and element j+16 (high nibble) */
    memset(block, 0, sizeof block);
    block[0] = 0x00; block[1] = 0x38;
    for (j = 0; j < 16; j++) block[2 + j] = (uint8_t)(j | ((15 - j) << 4));
    CHECK(forge_dequantize(FORGE_TYPE_Q4_0, block, out, 32) == FORGE_OK, "dequantize");
    CHECK(out[0] == -4.0f && out[8] == 0.0f && out[15] == 3.5f, "low nibbles: %g %g %g", out[0], out[8], out[15]);
    CHECK(out[16] == 3.5f && out[31] == -4.0f, "high nibbles: %g %g", out[16], out[31]);

    TEST_CASE("Q4_1 block");
    /* d = 2 (0x4000), m = -1 (0xbc00) */
    block[0] = 0x00; block[1] = 0x40; block[2] = 0x00; block[3] = 0xbc;
    for (j = 0; j < 16; j++) block[4 + j] = (uint8_t)(j | (j << 4));
    forge_dequantize(FORGE_TYPE_Q4_1, block, out, 32);
    CHECK(out[0] == -1.0f && out[5] == 9.0f && out[21] == 9.0f && out[31] == 29.0f, "%g %g %g %g", out[0], out[5], out[21], out[31]);

    TEST_CASE("Q5_0 block");
    /* d = 1; the fifth bit of element j is bit j of the 32-bit word after d */
    memset(block, 0, sizeof block);
    block[0] = 0x00; block[1] = 0x3c;
    block[2] = 0x01; block[5] = 0x80; /* bits 0 and 31: elements 0 and 31 get +16 */
    for (j = 0; j < 16; j++) block[6 + j] = 0xff;
    forge_dequantize(FORGE_TYPE_Q5_0, block, out, 32);
    CHECK(out[0] == 15.0f && out[1] == -1.0f && out[31] == 15.0f && out[16] == -1.0f, "%g %g %g %g", out[0], out[1], out[31], out[16]);

    TEST_CASE("Q8_0 block");
    memset(block, 0, sizeof block);
    block[0] = 0x00; block[1] = 0x34; /* d = 0.25 */
    for (j = 0; j < 32; j++) block[2 + j] = (uint8_t)(int8_t)(j - 16);
    forge_dequantize(FORGE_TYPE_Q8_0, block, out, 32);
    for (bad = 0, j = 0; j < 32; j++) bad += out[j] != (float)(j - 16) * 0.25f;
    CHECK(bad == 0, "%d wrong values", bad);

    TEST_CASE("IQ4_NL block");
    memset(block, 0, sizeof block);
    block[0] = 0x00; block[1] = 0x3c; /* d = 1: values are the level table itself */
    block[2] = 0xf0; /* element 0 -> level 0, element 16 -> level 15 */
    forge_dequantize(FORGE_TYPE_IQ4_NL, block, out, 32);
    CHECK(out[0] == -127.0f && out[16] == 113.0f && out[1] == -127.0f, "%g %g", out[0], out[16]);

    TEST_CASE("Q6_K block");
    /* all 6-bit values 32 (zero after the -32 offset) except element 0 = 63 -> +31; scale[0] = 2, d = 1 */
    memset(block, 0, sizeof block);
    for (j = 0; j < 64; j++) block[128 + j] = 0xaa; /* high bits 2 everywhere -> value 32 */
    block[0] = 0x0f; block[128] = 0xab;              /* element 0: low 15, high 3 -> 63 */
    for (j = 0; j < 16; j++) block[192 + j] = 2;
    block[208] = 0x00; block[209] = 0x3c;
    forge_dequantize(FORGE_TYPE_Q6_K, block, out, 256);
    for (bad = 0, j = 1; j < 256; j++) bad += out[j] != 0.0f;
    CHECK(out[0] == 62.0f && bad == 0, "element 0 = %g, %d others nonzero", out[0], bad);

    TEST_CASE("Q6_K block: sixteen distinct scales, every 6-bit value");
    /* each element read from the format's description, one element at a time: element e of the
       super-block is in half h = e / 128, quarter k = (e % 128) / 32, lane l = e % 32; its low four
       bits are a nibble of ql[64 h + 32 (k % 2) + l] (low for k < 2), its high two bits are bits
       2k, 2k+1 of qh[32 h + l], and its scale is scales[8 h + 2 k + l / 16] */
    {
        uint32_t state = 12345u, e;
        float want;
        for (j = 0; j < 192; j++) state = state * 1103515245u + 12345u, block[j] = (uint8_t)(state >> 16);
        for (j = 0; j < 16; j++) block[192 + j] = (uint8_t)(int8_t)(j * 7 - 50); /* -50 .. 55, all distinct */
        block[208] = 0x00; block[209] = 0x38;                                    /* d = 0.5 */
        forge_dequantize(FORGE_TYPE_Q6_K, block, out, 256);
        for (bad = 0, e = 0; e < 256; e++) {
            uint32_t h = e / 128, k = (e % 128) / 32, l = e % 32;
            uint8_t low_byte = block[64 * h + 32 * (k % 2) + l];
            int low = k < 2 ? low_byte & 0xf : low_byte >> 4;
            int high = (block[128 + 32 * h + l] >> (2 * k)) & 3;
            want = 0.5f * (float)(int8_t)block[192 + 8 * h + 2 * k + l / 16] * (float)((low | (high << 4)) - 32);
            if (out[e] != want && bad++ == 0) printf("  Q6_K element %u: %g, expected %g\n", e, out[e], want);
        }
        CHECK(bad == 0, "%d of 256 elements differ", bad);
    }

    TEST_CASE("Q4_K block: eight distinct scales and mins in their 6-bit packing");
    /* sub-block j (32 elements) of the super-block: for j < 4 scale = scales[j] & 63 and
       min = scales[j + 4] & 63; else scale = (scales[j + 4] & 15) | (scales[j - 4] >> 6) << 4 and
       min = (scales[j + 4] >> 4) | (scales[j] >> 6) << 4. Element 32 j + l is the low nibble of
       qs[32 (j / 2) + l] for even j, the high nibble for odd j; value d * scale * q - dmin * min. */
    {
        static const uint8_t sc[8] = {1, 5, 9, 13, 33, 47, 61, 63}, mn[8] = {2, 7, 11, 17, 40, 50, 58, 62};
        uint32_t state = 777u, e;
        float want;
        memset(block, 0, sizeof block);
        block[0] = 0x00; block[1] = 0x38; /* d = 0.5 */
        block[2] = 0x00; block[3] = 0x34; /* dmin = 0.25 */
        for (j = 0; j < 4; j++) {
            block[4 + j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
            block[4 + j + 4] = (uint8_t)((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
            block[4 + j + 8] = (uint8_t)((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
        }
        for (j = 0; j < 128; j++) state = state * 1103515245u + 12345u, block[16 + j] = (uint8_t)(state >> 16);
        forge_dequantize(FORGE_TYPE_Q4_K, block, out, 256);
        for (bad = 0, e = 0; e < 256; e++) {
            uint32_t sub = e / 32, l = e % 32;
            uint8_t byte = block[16 + 32 * (sub / 2) + l];
            int q = sub % 2 ? byte >> 4 : byte & 15;
            int scale, min;
            if (sub < 4) {
                scale = block[4 + sub] & 63, min = block[4 + sub + 4] & 63;
            } else {
                scale = (block[4 + sub + 4] & 15) | ((block[4 + sub - 4] >> 6) << 4);
                min = (block[4 + sub + 4] >> 4) | ((block[4 + sub] >> 6) << 4);
            }
            if (scale != sc[sub] || min != mn[sub]) { /* the packing written above must read back */
                bad++;
                continue;
            }
            want = 0.5f * (float)scale * (float)q - 0.25f * (float)min;
            if (fabsf(out[e] - want) > 1e-6f && bad++ == 0) printf("  Q4_K element %u: %g, expected %g\n", e, out[e], want);
        }
        CHECK(bad == 0, "%d of 256 elements differ", bad);
    }

    TEST_CASE("dequantize arguments");
    CHECK(forge_dequantize(FORGE_TYPE_Q4_K, block, out, 100) == FORGE_ERR_TENSOR_BLOCK, "partial block");
    CHECK(forge_dequantize(16, block, out, 256) == FORGE_ERR_ARGUMENT, "unsupported type");
}

/* n_rows random rows of n_cols elements of `type` in the file's layout, each block's f16 d (its high byte
   d_hi bytes into the block) held finite at about 2^-4; their dequantized values; and the rows as the
   upload packs them (forge__gpu_pack, over poisoned bytes). 0 when out of memory (recorded). */
static size_t layout_rows(uint32_t type, uint32_t n_cols, uint32_t n_rows, uint32_t d_hi, uint32_t *seed, uint8_t **file, uint8_t **packed,
                          float **ref) {
    const forge_type_traits *tt = forge_type_info(type);
    const size_t nb = n_cols / tt->block_elems, row = nb * tt->block_bytes, bytes = n_rows * row;
    size_t i, j;
    *file = (uint8_t *)malloc(bytes), *packed = (uint8_t *)malloc(bytes), *ref = (float *)malloc((size_t)n_rows * n_cols * sizeof(float));
    if (!*file || !*packed || !*ref) {
        CHECK(0, "out of memory");
        free(*file), free(*packed), free(*ref);
        return 0;
    }
    for (i = 0; i < bytes; i++) *seed = *seed * 1664525u + 1013904223u, (*file)[i] = (uint8_t)(*seed >> 24);
    for (j = 0; j < n_rows * nb; j++) (*file)[j * tt->block_bytes + d_hi] = 0x2c; /* 0x2c00 + a little */
    CHECK(forge_dequantize(type, *file, *ref, (uint64_t)n_rows * n_cols) == FORGE_OK, "dequantize");
    memset(*packed, 0xee, bytes);
    forge__gpu_pack(type, *file, *packed, 0, n_rows, row);
    return bytes;
}

/* The device layout of Q6_K rows (forge__gpu_pack_q6_k, described in forge_kernels.hip >>weights):
   every element read back from the packed rows by the layout's own description equals the file's
   dequantized value, bit for bit, for even and odd counts of super-blocks (the odd rows of an odd
   count keep d first); and the upload packs every Q6_K matrix, a row at a time. */
static void test_q6_k_device_layout(void) {
    static const uint32_t widths[] = {1536, 2048, 4096, 256, 1280, 8960};
    uint32_t seed = 12345u;
    size_t w;
    TEST_CASE("Q6_K device layout");
    for (w = 0; w < sizeof widths / sizeof widths[0]; w++) {
        const uint32_t n_cols = widths[w], nb = n_cols / 256, n_rows = 3;
        uint8_t *file, *packed;
        float *ref;
        uint32_t r, c, bad = 0;
        if (!layout_rows(FORGE_TYPE_Q6_K, n_cols, n_rows, 209, &seed, &file, &packed, &ref)) return;
        for (r = 0; r < n_rows; r++) {
            const uint32_t o = nb % 2 && r % 2 ? 2 * nb : 0, dpos = o ? 0 : 208 * nb; /* where ql, qh, scales and d begin */
            const uint8_t *row = packed + (size_t)r * nb * 210;
            for (c = 0; c < n_cols; c++) {
                const uint32_t blk = c / 256, e = c % 256, half = e / 128, k = (e % 128) / 32, l = e % 32;
                const uint8_t lo = row[o + 128 * blk + 16 * (4 * half + l / 8) + 8 * (k & 1) + l % 8];
                const uint8_t hi = row[o + 128 * nb + 64 * blk + 32 * half + l];
                const int q = (((k >> 1) ? lo >> 4 : lo & 0xf) | (((hi >> (2 * k)) & 3) << 4)) - 32;
                const int8_t scale = (int8_t)row[o + 192 * nb + 16 * blk + 8 * half + 2 * k + l / 16];
                const uint16_t dh = (uint16_t)(row[dpos + 2 * blk] | (row[dpos + 2 * blk + 1] << 8));
                const float v = forge_f16_to_f32(dh) * (float)scale * (float)q;
                bad += v != ref[(size_t)r * n_cols + c];
            }
        }
        CHECK(bad == 0, "%u columns: %u of %u values differ", n_cols, bad, n_rows * n_cols);
        free(file), free(packed), free(ref);
    }
    {
        forge_gguf_tensor t;
        memset(&t, 0, sizeof t);
        t.type = FORGE_TYPE_Q6_K, t.n_dims = 2, t.ne[0] = 4096, t.ne[1] = 8;
        CHECK(forge__gpu_packed_row_bytes(&t, FORGE__MATRIX) == 16 * 210, "a 4096-wide Q6_K matrix is packed a row at a time");
        CHECK(forge__gpu_packed_row_bytes(&t, FORGE__VECTOR) == 0, "a Q6_K vector goes to f32, not packed");
        t.ne[0] = 1536;
        CHECK(forge__gpu_packed_row_bytes(&t, FORGE__MATRIX) == 6 * 210, "a 1536-wide Q6_K matrix is packed (rows 4-aligned)");
        t.ne[0] = 8960;
        CHECK(forge__gpu_packed_row_bytes(&t, FORGE__MATRIX) == 35 * 210, "an 8960-wide Q6_K matrix (35 super-blocks) is packed too");
        t.type = FORGE_TYPE_Q4_K, t.ne[0] = 4096;
        CHECK(forge__gpu_packed_row_bytes(&t, FORGE__MATRIX) == 0, "Q4_K keeps the file's layout");
    }
}

/* The device layout of Q4_0 and Q8_0 rows of 256k elements (forge__gpu_pack_q0, forge_kernels.hip
   >>weights): read back by the layout's description (scales first, then the quants), every element
   equals the file's dequantized value bit for bit; the upload packs exactly those widths. */
static void test_q0_device_layout(void) {
    static const uint32_t widths[] = {256, 4096, 14336, 1536};
    static const uint32_t types[] = {FORGE_TYPE_Q4_0, FORGE_TYPE_Q8_0};
    uint32_t seed = 777u;
    size_t w, k;
    TEST_CASE("Q4_0 / Q8_0 device layout");
    for (k = 0; k < 2; k++)
        for (w = 0; w < sizeof widths / sizeof widths[0]; w++) {
            const uint32_t type = types[k], n_cols = widths[w], nb = n_cols / 32, n_rows = 3, qb = type == FORGE_TYPE_Q4_0 ? 16 : 32;
            uint8_t *file, *packed;
            float *ref;
            forge_gguf_tensor t;
            uint32_t r, c, bad = 0;
            if (!layout_rows(type, n_cols, n_rows, 1, &seed, &file, &packed, &ref)) return;
            memset(&t, 0, sizeof t);
            t.type = type, t.n_dims = 2, t.ne[0] = n_cols, t.ne[1] = n_rows;
            CHECK(forge__gpu_packed_row_bytes(&t, FORGE__MATRIX) == nb * (2 + qb), "%s %u columns: packed a row at a time",
                  forge_type_info(type)->name, n_cols);
            for (r = 0; r < n_rows; r++) {
                const uint8_t *row = packed + (size_t)r * nb * (2 + qb);
                for (c = 0; c < n_cols; c++) {
                    const uint32_t blk = c / 32, e = c % 32;
                    const float d = forge_f16_to_f32((uint16_t)(row[2 * blk] | (row[2 * blk + 1] << 8)));
                    const uint8_t q = row[2 * nb + qb * blk + (qb == 16 ? e % 16 : e)];
                    const int v = qb == 16 ? (e < 16 ? q & 0xf : q >> 4) - 8 : (int8_t)q;
                    bad += (float)v * d != ref[(size_t)r * n_cols + c];
                }
            }
            CHECK(bad == 0, "%s %u columns: %u of %u values differ", forge_type_info(type)->name, n_cols, bad, n_rows * n_cols);
            free(file), free(packed), free(ref);
        }
    {
        forge_gguf_tensor t;
        memset(&t, 0, sizeof t);
        t.type = FORGE_TYPE_Q4_0, t.n_dims = 2, t.ne[0] = 896, t.ne[1] = 8;
        CHECK(forge__gpu_packed_row_bytes(&t, FORGE__MATRIX) == 0, "an 896-wide Q4_0 matrix keeps the file's layout");
        t.type = FORGE_TYPE_Q8_0;
        CHECK(forge__gpu_packed_row_bytes(&t, FORGE__MATRIX) == 0, "an 896-wide Q8_0 matrix keeps the file's layout");
        t.ne[0] = 4864;
        CHECK(forge__gpu_packed_row_bytes(&t, FORGE__MATRIX) == 152 * 34, "a 4864-wide Q8_0 matrix is packed");
        t.ne[0] = 4096;
        CHECK(forge__gpu_packed_row_bytes(&t, FORGE__VECTOR) == 0, "a Q8_0 vector goes to f32, not packed");
        t.type = FORGE_TYPE_Q4_1;
        CHECK(forge__gpu_packed_row_bytes(&t, FORGE__MATRIX) == 0, "Q4_1 keeps the file's layout");
    }
}

static void test_results(void) {
    int r;
    TEST_CASE("result names");
    for (r = 0; r < FORGE_RESULT_COUNT; r++) {
        CHECK(strncmp(forge_result_name((forge_result)r), "FORGE_", 6) == 0, "name of %d", r);
        CHECK(forge_result_string((forge_result)r)[0] != 0, "text of %d", r);
    }
    CHECK(strcmp(forge_result_name(FORGE_ERR_TRUNCATED), "FORGE_ERR_TRUNCATED") == 0, "truncated");
}

/* The CPU cache's rows (forge__kv_encode) decoded back against the float64 values they were made
   from, within each type's rounding (kv_rounding.h). */
static void test_kv_rows(void) {
    static const forge_kv_type types[] = {FORGE_KV_F32, FORGE_KV_F16, FORGE_KV_Q8_0, FORGE_KV_Q4_0};
    uint32_t state = 99u, k, rep, i;
    float x[128], out[128];
    uint8_t row[512];
    TEST_CASE("KV cache rows decode within their type's rounding");
    for (k = 0; k < 4; k++) {
        const uint32_t storage = forge__kv_storage_type(types[k]);
        uint32_t beyond = 0;
        for (rep = 0; rep < 100; rep++) {
            for (i = 0; i < 128; i++) state = state * 1103515245u + 12345u, x[i] = ((float)(state >> 8) / 16777216.0f * 6.0f - 3.0f);
            if (rep == 0)
                for (i = 32; i < 64; i++) x[i] = 0.0f; /* a block of zeros: d = 0 */
            forge__kv_encode(types[k], x, 128, row);
            forge_dequantize(storage, row, out, 128);
            beyond += kv_rounding_beyond(storage, x, out, 128);
        }
        CHECK(beyond == 0, "%s: %u of 12800 values decode beyond their rounding", forge_kv_type_name(types[k]), beyond);
    }
}

/* The attention's f16 rows 8 halves at a time (F16C, where this machine has it) against the scalar
   conversion: every one of the 65536 halves, the same bits (a NaN stays a NaN of the same sign). */
static void test_half_rows(void) {
    TEST_CASE("f16 rows 8 at a time");
#ifdef FORGE__AVX2
    if (FORGE__AVX2_PRESENT()) {
        static uint8_t src[2 * 65536];
        static float dst[65536];
        uint32_t h;
        int mismatches = 0;
        for (h = 0; h < 65536; h++) src[2 * h] = (uint8_t)(h & 0xff), src[2 * h + 1] = (uint8_t)(h >> 8);
        forge__avx2_halves(src, dst, 65536);
        for (h = 0; h < 65536; h++) {
            const float want = forge_f16_to_f32((uint16_t)h);
            uint32_t a, b;
            memcpy(&a, &dst[h], 4), memcpy(&b, &want, 4);
            if (want != want ? !(dst[h] != dst[h]) || (a >> 31) != (b >> 31) : a != b) mismatches++;
        }
        CHECK(mismatches == 0, "%d of 65536 halves differ from the scalar conversion", mismatches);
        return;
    }
#endif
    printf("  skipped: no F16C on this machine or in this build (the scalar conversion serves)\n");
}

/* The feed-forward's gated activations 8 lanes at a time (AVX2, where this machine has it) against the
   portable forms: GELU (tanh form; forge__gelu in double) and SiLU (expf), every 1/2000 from -40 to 40,
   u = 1 and a second pass with u = 0.75, lengths that leave a last part of fewer than 8, and the edges.
   Bounds: |vector - scalar| <= 5e-7 |x| (the scalar GELU's 1 + tanh loses its relative accuracy
   below -6, where both are within 1e-16 |x| of 0), and <= 2e-6 |scalar| where x > -4 (GELU) or
   everywhere (SiLU); zeros, tiny and huge values, infinities and NaN as the scalar forms give them. */
static void test_glu_lanes(void) {
    TEST_CASE("GELU and SiLU 8 lanes at a time");
#ifdef FORGE__AVX2
    if (FORGE__AVX2_PRESENT()) {
        enum { N = 160003 };
        static float x[N], u[N], out[N];
        static const float edges[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-40f, -1e-40f, 1e10f, -1e10f, 3.4e38f, -3.4e38f,
                                      88.0f, -88.0f, 89.0f, -89.0f, 9.5f, -9.5f, 10.0f, -10.0f};
        const float specials[] = {INFINITY, -INFINITY, NAN};
        uint32_t i, act, pass;
        for (i = 0; i < N; i++) x[i] = -40.0f + (float)i / 2000.0f;
        for (act = 0; act < 2; act++)
            for (pass = 0; pass < 2; pass++) {
                const float scale = pass ? 0.75f : 1.0f;
                double worst_x = 0.0, worst_rel = 0.0;
                for (i = 0; i < N; i++) u[i] = scale;
                forge__avx2_glu(x, u, out, N, (int)act);
                for (i = 0; i < N; i++) {
                    const double ref = (act ? (double)forge__gelu(x[i]) : (double)(x[i] / (1.0f + expf(-x[i])))) * scale;
                    const double err = fabs((double)out[i] - ref);
                    if (x[i] != 0.0f && err / fabs(x[i]) > worst_x) worst_x = err / fabs(x[i]);
                    if ((!act || x[i] > -4.0f) && ref != 0.0 && err / fabs(ref) > worst_rel) worst_rel = err / fabs(ref);
                }
                printf("  %s, u = %.2f: |d| / |x| %.2e, |d| / |scalar| %.2e\n", act ? "gelu" : "silu", scale, worst_x, worst_rel);
                CHECK(worst_x <= 5e-7, "%s: an error of %.2e |x|", act ? "gelu" : "silu", worst_x);
                CHECK(worst_rel <= 2e-6, "%s: a relative error of %.2e", act ? "gelu" : "silu", worst_rel);
            }
        for (act = 0; act < 2; act++) {
            float in[21], ones[21], got[21];
            int bad = 0;
            for (i = 0; i < 21; i++) in[i] = i < 18 ? edges[i] : specials[i - 18], ones[i] = 1.0f;
            forge__avx2_glu(in, ones, got, 21, (int)act); /* 21: a last part of 5 */
            for (i = 0; i < 21; i++) {
                const float want = act ? forge__gelu(in[i]) : in[i] / (1.0f + expf(-in[i]));
                const int same = want != want ? got[i] != got[i]
                                              : isinf(want) ? got[i] == want
                                                            : fabs((double)got[i] - want) <= 5e-7 * fabs((double)in[i]) + 1e-37;
                if (!same) printf("  %s(%g): %g, the scalar form %g\n", act ? "gelu" : "silu", in[i], got[i], want), bad++;
            }
            CHECK(bad == 0, "%s: %d of 21 edge values differ from the scalar form", act ? "gelu" : "silu", bad);
        }
        return;
    }
#endif
    printf("  skipped: no AVX2 on this machine or in this build (the scalar forms serve)\n");
}

int main(void) {
    test_geometry();
    test_half();
    test_half_rows();
    test_glu_lanes();
    test_blocks();
    test_q6_k_device_layout();
    test_q0_device_layout();
    test_results();
    test_kv_rows();
    return test_summary();
}

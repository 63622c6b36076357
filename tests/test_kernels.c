/* GPU kernel tests: every launcher of forge_kernels.hip against the CPU reference on fresh random
   inputs, for every weight type and every KV cache type, on the first device. Each check is a
   normalized error ||gpu - ref|| / ||ref|| against a documented threshold:

     matmul / matvec, all weight types  1e-5   reference: forge_dequantize + double dot; the GPU
                                                dequantizes exactly, only f32 summation order differs
     matmul on the matrix units         1e-3   prompt batches (NVIDIA sm_80+, all types but F32 and
                                                BF16): f16 weights and activations, about 3e-4
     embed                              1e-6   dequantize and scale: one or two roundings
     rmsnorm, headnorm                  1e-5   float sum of squares on the GPU, double on the CPU
     rope (NORM, NEOX, partial, factors) 1e-5  against the definition in float64
     kv_store                           bytes  must equal forge__kv_encode byte for byte (Q8_0 / Q4_0 rows
                                                in the GPU order: quants, then scales), also into a
                                                ring of cells (position p in cell p % n_cells)
     attention over the same cache      1e-5   every cache type; single pass and split-KV; sliding
                                                window, ring of cells (unused cells poisoned), soft-cap
     prompt attention (n_tokens > 1)    1e-3   may run on the matrix units (NVIDIA sm_80+, every cache
                                                type but F32): Q, K, V and the softmax weights as f16,
                                                f32 sums, about 3e-4; F32 caches keep 1e-5
     attention vs unquantized f32 K/V   f32 1e-5, f16 2e-3, q8_0 3e-2, q4_0 3e-1: the cache's own
                                                quantization noise, a sanity bound, not a kernel bound
     add, swiglu, geglu, glu_split,     1e-6   elementwise, expf / tanhf differ by an ulp or two
     softcap, sigmoid_scale
     copy_cols                          exact
     argmax                             exact index, including ties (first wins)
     moe_route                          ids exact where p ties exactly (lower index first), else equal
                                                up to 1e-6 relative in p; weights 1e-6
     matmul_id, all weight types        1e-5   as matmul; per-pair matvec and the gathered tiled path
     moe_sum                            1e-6

   Outputs are poisoned with NaN before each launch, so an unwritten element fails the check. Ends
   with timing tables (print, never assert: decode products, matvec bandwidth, prompt products,
   experts, decode attention at depths 128 to 64K, a decode step's rope + store + attention as two
   launches and as one) and "N passed, N failed". `test_kernels products`, `test_kernels attention`
   and `test_kernels rope-attention` print that table alone, without the checks; any other argument
   skips the tables.
   Build: make GPU=nvidia test-gpu (the kernels with nvcc, this file with the C compiler). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime for the bandwidth table */
#define FORGE_HIP
#define FORGE_IMPLEMENTATION
#include "../forge.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* the launchers are declared by forge.h's GPU section (FORGE_HIP), the one copy of their signatures */

/* ---- helpers ---- */

static char msg[512];

#define TEST_RNG_SEED 0x2545f4914f6cdd1dull
#include "random_blocks.h"
#include "kv_rounding.h"

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "out of host memory (%zu bytes)\n", bytes);
        exit(2);
    }
    return p;
}

/* Device buffer with a copy of host data (or NaN poison when host is NULL). Failures end the test:
   nothing after them would mean anything. */
static void *dev_alloc(size_t bytes, const void *host) {
    void *d = NULL;
    if (forge_hip_arena_alloc(bytes ? bytes : 4, &d, msg, sizeof msg)) {
        printf("FATAL: %s\n", msg);
        exit(2);
    }
    if (host) {
        if (forge_hip_copy_to_device(d, host, bytes, NULL, msg, sizeof msg) || forge_hip_stream_sync(NULL, msg, sizeof msg)) {
            printf("FATAL: %s\n", msg);
            exit(2);
        }
    } else {
        size_t i, n = bytes / 4;
        float *poison = (float *)xmalloc(bytes);
        for (i = 0; i < n; i++) poison[i] = NAN;
        forge_hip_copy_to_device(d, poison, n * 4, NULL, msg, sizeof msg);
        forge_hip_stream_sync(NULL, msg, sizeof msg);
        free(poison);
    }
    return d;
}

/* A weight matrix (rows of n_cols elements of `type`, in file order) as forge's upload places it on
   the device: packed into the device layout where the upload packs it (forge__gpu_packed_row_bytes,
   forge__gpu_pack), every other matrix as is. */
static void *dev_weights(uint32_t type, uint32_t n_cols, size_t bytes, const void *host) {
    forge_gguf_tensor t;
    uint64_t row;
    void *d;
    uint8_t *packed;
    memset(&t, 0, sizeof t);
    t.type = type, t.n_dims = 2, t.ne[0] = n_cols;
    row = forge__gpu_packed_row_bytes(&t, FORGE__MATRIX);
    if (!row) return dev_alloc(bytes, host);
    packed = (uint8_t *)xmalloc(bytes);
    forge__gpu_pack(type, (const uint8_t *)host, packed, 0, bytes / row, row);
    d = dev_alloc(bytes, packed);
    free(packed);
    return d;
}

/* Waits for the stream and copies back; returns 0 and records a failure when either step fails. */
/* The workspace a step's products of n_rows rows and n_tokens tokens of n_cols columns take, as a
   context sizes it: room for the split path's parts and for the rows paths' forms. */
static size_t rows_workspace_bytes(uint32_t n_rows, uint32_t n_tokens, uint32_t n_cols) {
    const size_t split = forge_hip_matmul_split_bytes(n_rows, n_tokens), forms = forge_hip_rows_bytes(n_tokens * n_cols);
    return split > forms ? split : forms;
}

static int dev_fetch(void *host, const void *d, size_t bytes) {
    if (forge_hip_stream_sync(NULL, msg, sizeof msg) || forge_hip_copy_from_device(host, d, bytes, NULL, msg, sizeof msg) ||
        forge_hip_stream_sync(NULL, msg, sizeof msg)) {
        CHECK(0, "device error: %s", msg);
        return 0;
    }
    return 1;
}

/* ||gpu - ref|| / ||ref||; NaN or an infinite value anywhere in gpu gives +inf. */
static double norm_error_d(const float *gpu, const double *ref, size_t n) {
    double diff = 0.0, norm = 0.0;
    size_t i;
    for (i = 0; i < n; i++) {
        if (!isfinite(gpu[i])) return INFINITY;
        diff += (gpu[i] - ref[i]) * (gpu[i] - ref[i]);
        norm += ref[i] * ref[i];
    }
    return norm > 0 ? sqrt(diff / norm) : sqrt(diff);
}
static double norm_error_f(const float *gpu, const float *ref, size_t n) {
    double *r = (double *)xmalloc(n * sizeof(double));
    size_t i;
    double e;
    for (i = 0; i < n; i++) r[i] = ref[i];
    e = norm_error_d(gpu, r, n);
    free(r);
    return e;
}

static void random_floats(float *x, size_t n, float lo, float hi) {
    size_t i;
    for (i = 0; i < n; i++) x[i] = rng_uniform(lo, hi);
}

/* ---- matmul ---- */

/* Random weights of `type` (*w), activations (*x) and a bias (*bias) for a product of n_rows x n_cols by
   n_tokens tokens, and its double reference [n_tokens][n_rows] (the bias added where with_bias); the
   caller frees all four. */
static double *matmul_reference(uint32_t type, uint32_t n_rows, uint32_t n_cols, uint32_t n_tokens, int with_bias, uint8_t **w, float **x,
                                float **bias) {
    const forge_type_traits *t = forge_type_info(type);
    const size_t row_bytes = (size_t)n_cols / t->block_elems * t->block_bytes;
    float *wf = (float *)xmalloc((size_t)n_rows * n_cols * sizeof(float));
    double *ref = (double *)xmalloc((size_t)n_tokens * n_rows * sizeof(double));
    uint32_t r, c, k;
    *w = (uint8_t *)xmalloc(row_bytes * n_rows);
    *x = (float *)xmalloc((size_t)n_tokens * n_cols * sizeof(float));
    *bias = (float *)xmalloc(n_rows * sizeof(float));
    random_blocks(type, *w, (uint64_t)n_rows * (n_cols / t->block_elems));
    forge_dequantize(type, *w, wf, (uint64_t)n_rows * n_cols);
    random_floats(*x, (size_t)n_tokens * n_cols, -1.0f, 1.0f);
    random_floats(*bias, n_rows, -1.0f, 1.0f);
    for (k = 0; k < n_tokens; k++)
        for (r = 0; r < n_rows; r++) {
            double sum = with_bias ? (*bias)[r] : 0.0;
            for (c = 0; c < n_cols; c++) sum += (double)wf[(size_t)r * n_cols + c] * (*x)[(size_t)k * n_cols + c];
            ref[(size_t)k * n_rows + r] = sum;
        }
    free(wf);
    return ref;
}

static void check_matmul(uint32_t type, uint32_t n_rows, uint32_t n_cols, uint32_t n_tokens, int with_bias) {
    const forge_type_traits *t = forge_type_info(type);
    const size_t row_bytes = (size_t)n_cols / t->block_elems * t->block_bytes;
    uint8_t *w;
    float *x, *bias, *y = (float *)xmalloc((size_t)n_tokens * n_rows * sizeof(float));
    double *ref = matmul_reference(type, n_rows, n_cols, n_tokens, with_bias, &w, &x, &bias);
    /* prompt batches may run on the matrix units: f16 operands, about 3e-4 (F32 and BF16 stay f32) */
    const double tolerance = n_tokens > 1 && type != FORGE_TYPE_F32 && type != FORGE_TYPE_BF16 ? 1e-3 : 1e-5;
    void *dw, *dx, *dy, *db;
    double err;
    int rc;
    dw = dev_weights(type, n_cols, row_bytes * n_rows, w);
    dx = dev_alloc((size_t)n_tokens * n_cols * sizeof(float), x);
    db = dev_alloc(n_rows * sizeof(float), bias);
    dy = dev_alloc((size_t)n_tokens * n_rows * sizeof(float), NULL);
    if (n_tokens == 1)
        rc = forge_hip_matvec(type, dw, n_rows, n_cols, (const float *)dx, (float *)dy, with_bias ? (const float *)db : NULL, NULL,
                              msg, sizeof msg);
    else
        rc = forge_hip_matmul(type, dw, n_rows, n_cols, (const float *)dx, (float *)dy, n_tokens,
                              with_bias ? (const float *)db : NULL, NULL, msg, sizeof msg);
    CHECK(rc == 0, "%s launch: %s", t->name, msg);
    if (dev_fetch(y, dy, (size_t)n_tokens * n_rows * sizeof(float))) {
        err = norm_error_d(y, ref, (size_t)n_tokens * n_rows);
        printf("  matmul %-6s %5u x %5u, %3u token%s%s: err %.2e\n", t->name, n_rows, n_cols, n_tokens, n_tokens > 1 ? "s" : " ",
               with_bias ? " +bias" : "      ", err);
        CHECK(err < tolerance, "matmul %s %ux%u tokens %u: normalized error %.3e", t->name, n_rows, n_cols, n_tokens, err);
    }
    forge_hip_arena_free(dw), forge_hip_arena_free(dx), forge_hip_arena_free(dy), forge_hip_arena_free(db);
    free(w), free(x), free(bias), free(y), free(ref);
}

/* What the prompt checks below share: weights w (n_rows rows of type), activations x and bias put on
   the device, the unstaged product (forge_hip_matmul) into y0 and the staged one with a workspace of
   ws_bytes (none: 0) into y, fetched; same counts the values equal bit for bit. ok: both came back.
   bias: the device bias as the products took it (NULL without). */
typedef struct {
    uint32_t type, n_rows, n_cols, n_tokens;
    void *dw, *dx, *db, *dy, *dy0, *dws;
    const float *bias;
    size_t ws_bytes;
    float *y, *y0;
    size_t n_out, same;
    int ok;
} prompt_pair;

static void prompt_pair_run(uint32_t type, uint32_t n_rows, uint32_t n_cols, uint32_t n_tokens, const uint8_t *w, const float *x,
                            const float *bias, int with_bias, size_t ws_bytes, prompt_pair *pp) {
    const forge_type_traits *t = forge_type_info(type);
    const size_t row_bytes = (size_t)n_cols / t->block_elems * t->block_bytes;
    size_t i;
    pp->type = type, pp->n_rows = n_rows, pp->n_cols = n_cols, pp->n_tokens = n_tokens, pp->ws_bytes = ws_bytes;
    pp->n_out = (size_t)n_tokens * n_rows, pp->same = 0;
    pp->y = (float *)xmalloc(pp->n_out * sizeof(float)), pp->y0 = (float *)xmalloc(pp->n_out * sizeof(float));
    pp->dw = dev_weights(type, n_cols, row_bytes * n_rows, w), pp->dx = dev_alloc((size_t)n_tokens * n_cols * sizeof(float), x);
    pp->db = dev_alloc(n_rows * sizeof(float), bias), pp->dy = dev_alloc(pp->n_out * sizeof(float), NULL);
    pp->dy0 = dev_alloc(pp->n_out * sizeof(float), NULL), pp->dws = ws_bytes ? dev_alloc(ws_bytes, NULL) : NULL;
    pp->bias = with_bias ? (const float *)pp->db : NULL;
    CHECK(forge_hip_matmul(type, pp->dw, n_rows, n_cols, (const float *)pp->dx, (float *)pp->dy0, n_tokens, pp->bias, NULL, msg, sizeof msg) == 0,
          "%s %ux%u matmul: %s", t->name, n_rows, n_cols, msg);
    CHECK(forge_hip_matmul_split(type, pp->dw, n_rows, n_cols, (const float *)pp->dx, (float *)pp->dy, n_tokens, pp->bias, pp->dws, ws_bytes, NULL, msg,
                                 sizeof msg) == 0,
          "%s %ux%u staged matmul: %s", t->name, n_rows, n_cols, msg);
    pp->ok = dev_fetch(pp->y, pp->dy, pp->n_out * sizeof(float)) && dev_fetch(pp->y0, pp->dy0, pp->n_out * sizeof(float));
    if (pp->ok)
        for (i = 0; i < pp->n_out; i++) pp->same += memcmp(&pp->y[i], &pp->y0[i], sizeof(float)) == 0;
}

static void prompt_pair_free(prompt_pair *pp) {
    forge_hip_arena_free(pp->dw), forge_hip_arena_free(pp->dx), forge_hip_arena_free(pp->db), forge_hip_arena_free(pp->dy);
    forge_hip_arena_free(pp->dy0);
    if (pp->dws) forge_hip_arena_free(pp->dws);
    free(pp->y), free(pp->y0);
}

/* Where the warpgroup kernel took the pair's staged product y (which then has its own sums, not
   forge_hip_matmul's bits), the product again with it switched off (the mma.sync tiles): y within 1e-5
   of those, and pp->same set to how many of those are the bits of y0 (forge_hip_matmul's); elsewhere
   pp->same is left as it is. */
static void staged_without_wgmma(prompt_pair *pp) {
    const uint32_t n_rows = pp->n_rows, n_cols = pp->n_cols, n_tokens = pp->n_tokens;
    const size_t n_out = pp->n_out;
    forge_hip_scope scope;
    void *dy;
    float *y_mma;
    double err = 0.0;
    size_t i;
    if (!pp->ws_bytes || !forge_hip_prompt_wgmma(n_cols) ||
        !forge_hip_prompt_staged(pp->type, n_rows, n_cols, n_tokens < 512 ? n_tokens : 512, pp->ws_bytes))
        return;
    y_mma = (float *)xmalloc(n_out * sizeof(float));
    dy = dev_alloc(n_out * sizeof(float), NULL);
    CHECK(forge_hip_enter(0, FORGE_HIP_NO_WGMMA, &scope, msg, sizeof msg) == 0, "enter: %s", msg);
    CHECK(!forge_hip_prompt_wgmma(n_cols), "FORGE_HIP_NO_WGMMA turns the warpgroup kernel off");
    CHECK(forge_hip_matmul_split(pp->type, pp->dw, n_rows, n_cols, (const float *)pp->dx, (float *)dy, n_tokens, pp->bias, pp->dws, pp->ws_bytes,
                                 NULL, msg, sizeof msg) == 0,
          "staged matmul without wgmma: %s", msg);
    forge_hip_leave(&scope);
    if (dev_fetch(y_mma, dy, n_out * sizeof(float))) {
        err = norm_error_f(pp->y, y_mma, n_out);
        printf("    warpgroup kernel against the mma.sync tiles: %.2e\n", err);
        CHECK(err < 1e-5, "prompt %s %ux%u tokens %u: the warpgroup kernel %.3e from the mma.sync tiles", forge_type_info(pp->type)->name, n_rows,
              n_cols, n_tokens, err);
        for (pp->same = 0, i = 0; i < n_out; i++) pp->same += memcmp(&y_mma[i], &pp->y0[i], sizeof(float)) == 0;
    }
    forge_hip_arena_free(dy);
    free(y_mma);
}

/* A prompt product with a workspace for its activations in f16 (forge_hip_matmul_split past 64 tokens):
   the same bits as forge_hip_matmul (the same sums in the same order) where the staged kernel runs on the
   mma.sync tiles, within 1e-3 of a double reference everywhere (where it does not run, the columns may be
   split: same_bits 0); where the warpgroup kernel runs (sm_90a code), within 1e-5 of the mma.sync tiles,
   which then give the same bits as forge_hip_matmul; ws_tokens sets the workspace (fewer tokens than the
   batch: chunks). */
static void check_matmul_prompt(uint32_t type, uint32_t n_rows, uint32_t n_cols, uint32_t n_tokens, uint32_t ws_tokens, int with_bias,
                                int same_bits) {
    const forge_type_traits *t = forge_type_info(type);
    const size_t ws_bytes = ws_tokens ? forge_hip_prompt_bytes(ws_tokens, n_cols) : 0;
    uint8_t *w;
    float *x, *bias;
    double *ref = matmul_reference(type, n_rows, n_cols, n_tokens, with_bias, &w, &x, &bias);
    prompt_pair pp;
    prompt_pair_run(type, n_rows, n_cols, n_tokens, w, x, bias, with_bias, ws_bytes, &pp);
    if (pp.ok) {
        const double err = norm_error_d(pp.y, ref, pp.n_out);
        printf("  prompt %-6s %5u x %5u, %3u tokens, workspace %3u tokens%s: err %.2e, %.4f of the values as without it\n", t->name, n_rows,
               n_cols, n_tokens, ws_tokens, with_bias ? " +bias" : "      ", err, (double)pp.same / pp.n_out);
        CHECK(err < 1e-3, "prompt matmul %s %ux%u tokens %u: normalized error %.3e", t->name, n_rows, n_cols, n_tokens, err);
        if (same_bits) /* the warpgroup kernel: the mma.sync tiles keep the unstaged product's bits */
            staged_without_wgmma(&pp);
        CHECK(!same_bits || pp.same == pp.n_out, "prompt matmul %s %ux%u tokens %u workspace %u: %zu of %zu values differ from the unstaged product",
              t->name, n_rows, n_cols, n_tokens, ws_tokens, pp.n_out - pp.same, pp.n_out);
    }
    prompt_pair_free(&pp);
    free(w), free(x), free(bias), free(ref);
}

/* forge_hip_swiglu_f16 against forge_hip_swiglu: its f16 rows the rounded values of the same h, gate the same
   bits (keep) or untouched; then a staged down product on those rows against the same product of h */
static void check_swiglu_f16(uint32_t n_ff, uint32_t n_tokens, uint32_t down_type, uint32_t down_rows, int keep) {
    const forge_type_traits *td = forge_type_info(down_type);
    const size_t n = (size_t)n_tokens * n_ff, nd = (size_t)n_tokens * down_rows;
    const size_t down_bytes = (size_t)n_ff / td->block_elems * td->block_bytes * down_rows;
    float *g = (float *)xmalloc(n * sizeof(float)), *u = (float *)xmalloc(n * sizeof(float)), *h = (float *)xmalloc(n * sizeof(float));
    float *g_after = (float *)xmalloc(n * sizeof(float)), *o = (float *)xmalloc(2 * nd * sizeof(float));
    uint16_t *h16 = (uint16_t *)xmalloc(n * sizeof(uint16_t));
    uint8_t *wd = (uint8_t *)xmalloc(down_bytes);
    void *dg, *dg2, *du, *dh16, *dwd, *dout, *ws;
    size_t i, bad16 = 0;
    int form = FORGE_HIP_FORM_F16_PROMPT;
    const int staged = forge_hip_prompt_staged(down_type, down_rows, n_ff, n_tokens, n * sizeof(uint16_t));
    random_floats(g, n, -6.0f, 6.0f), random_floats(u, n, -2.0f, 2.0f);
    random_blocks(down_type, wd, (uint64_t)down_rows * (n_ff / td->block_elems));
    dg = dev_alloc(n * sizeof(float), g), dg2 = dev_alloc(n * sizeof(float), g), du = dev_alloc(n * sizeof(float), u);
    dh16 = dev_alloc(n * sizeof(uint16_t), NULL), dwd = dev_weights(down_type, n_ff, down_bytes, wd), dout = dev_alloc(2 * nd * sizeof(float), NULL);
    ws = dev_alloc(forge_hip_prompt_bytes(n_tokens, n_ff), NULL);
    CHECK(forge_hip_swiglu_f16((float *)dg, (const float *)du, n, dh16, keep, NULL, msg, sizeof msg) == 0, "swiglu f16: %s", msg);
    CHECK(forge_hip_swiglu((float *)dg2, (const float *)du, n, NULL, msg, sizeof msg) == 0, "swiglu: %s", msg);
    /* the down product on the f16 rows (its x the gate buffer: read only where not staged) and on h */
    CHECK(forge_hip_matmul_prompt(down_type, dwd, down_rows, n_ff, (const float *)dg, (float *)dout, n_tokens, NULL, dh16, n * sizeof(uint16_t),
                                  &form, NULL, msg, sizeof msg) == 0 &&
              forge_hip_matmul_prompt(down_type, dwd, down_rows, n_ff, (const float *)dg2, (float *)dout + nd, n_tokens, NULL, ws,
                                      forge_hip_prompt_bytes(n_tokens, n_ff), NULL, NULL, msg, sizeof msg) == 0,
          "down on the rows and on h: %s", msg);
    if (dev_fetch(g_after, dg, n * sizeof(float)) && dev_fetch(h, dg2, n * sizeof(float)) && dev_fetch(h16, dh16, n * sizeof(uint16_t)) &&
        dev_fetch(o, dout, 2 * nd * sizeof(float))) {
        const int gate_ok = memcmp(g_after, keep ? h : g, n * sizeof(float)) == 0;
        const int same_down = memcmp(o, o + nd, nd * sizeof(float)) == 0;
        for (i = 0; i < n; i++) bad16 += h16[i] != forge_f32_to_f16(h[i]);
        printf("  swiglu as f16 rows, %u x %u%s: %zu f16 values off, gate %s, %s down product (%s x %u) %s\n", n_tokens, n_ff,
               keep ? ", kept" : "", bad16, gate_ok ? (keep ? "the same bits as swiglu's" : "untouched") : "differs",
               staged ? "staged" : "unstaged", td->name, down_rows, same_down ? "the same bits" : "differs");
        CHECK(bad16 == 0 && gate_ok && (same_down || !staged), "swiglu f16 %ux%u keep %d: %zu off, gate %d, down %d", n_tokens, n_ff, keep, bad16,
              gate_ok, same_down);
    }
    forge_hip_arena_free(dg), forge_hip_arena_free(dg2), forge_hip_arena_free(du), forge_hip_arena_free(dh16), forge_hip_arena_free(dwd);
    forge_hip_arena_free(dout), forge_hip_arena_free(ws);
    free(g), free(u), free(h), free(g_after), free(o), free(h16), free(wd);
}

/* A staged product large enough for the 128 x 128 tiles forge__mms_tile picks for Q4_0 / Q8_0 in the device
   layout (q, k and v of the 8B from 6144 rows; a down projection of 8192 columns or more), against the
   unstaged product bit for bit and a float64 reference on 512 sampled outputs (the whole reference would
   take the CPU too long); where the warpgroup kernel runs, it within 1e-5 of the mma.sync tiles and those
   bit for bit against the unstaged product */
static void check_prompt_tile(uint32_t type, uint32_t n_rows, uint32_t n_cols, uint32_t n_tokens) {
    const forge_type_traits *t = forge_type_info(type);
    const size_t row_bytes = (size_t)n_cols / t->block_elems * t->block_bytes;
    const size_t ws_bytes = forge_hip_prompt_bytes(n_tokens, n_cols);
    uint8_t *w = (uint8_t *)xmalloc(row_bytes * n_rows);
    float *x = (float *)xmalloc((size_t)n_tokens * n_cols * sizeof(float)), *bias = (float *)xmalloc(n_rows * sizeof(float));
    float *wf = (float *)xmalloc(n_cols * sizeof(float));
    prompt_pair pp;
    size_t i;
    random_blocks(type, w, (uint64_t)n_rows * (n_cols / t->block_elems));
    random_floats(x, (size_t)n_tokens * n_cols, -1.0f, 1.0f), random_floats(bias, n_rows, -1.0f, 1.0f);
    prompt_pair_run(type, n_rows, n_cols, n_tokens, w, x, bias, 1, ws_bytes, &pp);
    if (pp.ok) {
        double e2 = 0.0, r2 = 0.0;
        uint32_t seed = 12345u, k, r, c;
        for (i = 0; i < 512; i++) {
            double sum;
            seed = seed * 1664525u + 1013904223u, r = (seed >> 8) % n_rows;
            seed = seed * 1664525u + 1013904223u, k = (seed >> 8) % n_tokens;
            forge_dequantize(type, w + (size_t)r * row_bytes, wf, n_cols);
            for (sum = bias[r], c = 0; c < n_cols; c++) sum += (double)wf[c] * x[(size_t)k * n_cols + c];
            e2 += (pp.y[(size_t)k * n_rows + r] - sum) * (pp.y[(size_t)k * n_rows + r] - sum), r2 += sum * sum;
        }
        printf("  prompt %-6s %5u x %5u, %3u tokens (the wide tiles): err %.2e on 512 sampled outputs, %.4f of the values as without it\n", t->name,
               n_rows, n_cols, n_tokens, sqrt(e2 / r2), (double)pp.same / pp.n_out);
        /* the warpgroup kernel: the mma.sync tiles keep the unstaged product's bits */
        staged_without_wgmma(&pp);
        CHECK(sqrt(e2 / r2) < 1e-3 && pp.same == pp.n_out, "prompt %s %ux%u, %u tokens: error %.2e, %zu of %zu values differ from the unstaged product",
              t->name, n_rows, n_cols, n_tokens, sqrt(e2 / r2), pp.n_out - pp.same, pp.n_out);
    }
    prompt_pair_free(&pp);
    free(w), free(x), free(bias), free(wf);
}

/* A prompt's norm that also writes its f16 rows (forge_hip_add_rmsnorm, FORGE_HIP_FORM_F16_PROMPT) and two
   staged products of that input after it (q and k; gate and up): the products take the rows the norm
   left, and the second those the first left (their x here is a buffer of zeros: a product making its own
   rows would give zeros), with the same bits as the add, the norm and the products each making their
   rows; with the residual add and without. */
static void check_prompt_form(uint32_t type, uint32_t n_rows, uint32_t n_cols, uint32_t n_tokens, int with_add) {
    const forge_type_traits *t = forge_type_info(type);
    const size_t row_bytes = (size_t)n_cols / t->block_elems * t->block_bytes, m = (size_t)n_tokens * n_cols, ny = (size_t)n_tokens * n_rows;
    const size_t ws_bytes = forge_hip_prompt_bytes(n_tokens, n_cols);
    float *x = (float *)xmalloc(m * sizeof(float)), *r = (float *)xmalloc(m * sizeof(float)), *w = (float *)xmalloc(n_cols * sizeof(float));
    float *ya = (float *)xmalloc(m * sizeof(float)), *yb = (float *)xmalloc(m * sizeof(float)), *o = (float *)xmalloc(4 * ny * sizeof(float));
    uint8_t *wq = (uint8_t *)xmalloc(2 * row_bytes * n_rows);
    void *xa, *xb, *dr, *dw, *dya, *dyb, *dzero, *dw1, *dw2, *ws, *wsb, *dout;
    int form = FORGE_HIP_FORM_F16_PROMPT, k, same = 0;
    CHECK(forge_hip_prompt_form_ok(n_tokens, n_cols, ws_bytes), "%u tokens of %u columns: the prompt workspace holds their rows", n_tokens, n_cols);
    random_floats(x, m, -2.0f, 2.0f), random_floats(r, m, -2.0f, 2.0f), random_floats(w, n_cols, 0.5f, 1.5f);
    random_blocks(type, wq, 2 * (uint64_t)n_rows * (n_cols / t->block_elems));
    xa = dev_alloc(m * sizeof(float), x), xb = dev_alloc(m * sizeof(float), x), dr = dev_alloc(m * sizeof(float), r);
    dw = dev_alloc(n_cols * sizeof(float), w), dya = dev_alloc(m * sizeof(float), NULL), dyb = dev_alloc(m * sizeof(float), NULL);
    dzero = dev_alloc(m * sizeof(float), NULL), ws = dev_alloc(ws_bytes, NULL), wsb = dev_alloc(ws_bytes, NULL);
    memset(ya, 0, m * sizeof(float));
    forge_hip_copy_to_device(dzero, ya, m * sizeof(float), NULL, msg, sizeof msg);
    dw1 = dev_weights(type, n_cols, row_bytes * n_rows, wq), dw2 = dev_weights(type, n_cols, row_bytes * n_rows, wq + row_bytes * n_rows);
    dout = dev_alloc(4 * ny * sizeof(float), NULL);
    CHECK(forge_hip_add_rmsnorm((float *)xa, with_add ? (const float *)dr : NULL, (const float *)dw, (float *)dya, n_tokens, n_cols, 1e-5f, ws,
                                FORGE_HIP_FORM_F16_PROMPT, NULL, msg, sizeof msg) == 0,
          "add_rmsnorm with the prompt's rows: %s", msg);
    for (k = 0; k < 2; k++) {
        CHECK(forge_hip_matmul_prompt(type, k ? dw2 : dw1, n_rows, n_cols, (const float *)dzero, (float *)dout + k * ny, n_tokens, NULL, ws,
                                      ws_bytes, &form, NULL, msg, sizeof msg) == 0,
              "product %d on the norm's rows: %s", k, msg);
        CHECK(form == FORGE_HIP_FORM_F16_PROMPT, "product %d leaves the rows for the next (form %d)", k, form);
    }
    if (with_add) forge_hip_add((float *)xb, (const float *)dr, m, NULL, msg, sizeof msg);
    forge_hip_rmsnorm((const float *)xb, (const float *)dw, (float *)dyb, n_tokens, n_cols, 1e-5f, NULL, msg, sizeof msg);
    for (k = 0; k < 2; k++)
        CHECK(forge_hip_matmul_split(type, k ? dw2 : dw1, n_rows, n_cols, (const float *)dyb, (float *)dout + (2 + k) * ny, n_tokens, NULL, wsb,
                                     ws_bytes, NULL, msg, sizeof msg) == 0,
              "product %d making its rows: %s", k, msg);
    if (dev_fetch(ya, dya, m * sizeof(float)) && dev_fetch(yb, dyb, m * sizeof(float)) && dev_fetch(o, dout, 4 * ny * sizeof(float))) {
        size_t i, nonzero = 0;
        for (i = 0; i < 2 * ny; i++) nonzero += o[i] != 0.0f;
        same = memcmp(ya, yb, m * sizeof(float)) == 0 && memcmp(o, o + 2 * ny, 2 * ny * sizeof(float)) == 0;
        printf("  prompt's norm with its f16 rows%s, %s %u x %u, %u tokens, two products: %s (%zu of %zu outputs nonzero)\n",
               with_add ? " (and the add)" : "", t->name, n_rows, n_cols, n_tokens, same ? "the same bits as making the rows" : "differs",
               nonzero, 2 * ny);
        CHECK(same && nonzero > ny, "prompt's norm with its f16 rows, %s %ux%u, %u tokens: not the same bits", t->name, n_rows, n_cols, n_tokens);
    }
    /* rows the product cannot take: a type the staged kernel does not read (it makes nothing for the next),
       and more tokens than the workspace holds at once (chunks of half the tokens, 65 or more: staged) */
    form = FORGE_HIP_FORM_F16_PROMPT;
    CHECK(forge_hip_matmul_prompt(FORGE_TYPE_Q5_K, dw1, 64, 256, (const float *)dyb, (float *)dout, n_tokens, NULL, ws, ws_bytes, &form, NULL, msg,
                                  sizeof msg) == 0 && form == 0,
          "an unstaged product leaves no rows (form %d): %s", form, msg);
    CHECK(!forge_hip_prompt_form_ok(n_tokens, n_cols, ws_bytes - 2) && !forge_hip_prompt_form_ok(64, n_cols, ws_bytes) &&
              !forge_hip_prompt_form_ok(513, 32, (size_t)1 << 30),
          "forge_hip_prompt_form_ok: a workspace too small, 64 tokens, 513 tokens refused");
    form = FORGE_HIP_FORM_F16_PROMPT;
    CHECK(forge_hip_matmul_prompt(type, dw1, n_rows, n_cols, (const float *)dyb, (float *)dout + 2 * ny, n_tokens, NULL, wsb, ws_bytes / 2, &form,
                                  NULL, msg, sizeof msg) == 0 && form == 0,
          "a product in chunks leaves no rows (form %d): %s", form, msg);
    if (dev_fetch(o + 2 * ny, (float *)dout + 2 * ny, ny * sizeof(float)))
        CHECK(memcmp(o, o + 2 * ny, ny * sizeof(float)) == 0, "a product in chunks makes its own rows, whatever the form said");
    forge_hip_arena_free(xa), forge_hip_arena_free(xb), forge_hip_arena_free(dr), forge_hip_arena_free(dw), forge_hip_arena_free(dya);
    forge_hip_arena_free(dyb), forge_hip_arena_free(dzero), forge_hip_arena_free(ws), forge_hip_arena_free(wsb), forge_hip_arena_free(dw1);
    forge_hip_arena_free(dw2), forge_hip_arena_free(dout);
    free(x), free(r), free(w), free(ya), free(yb), free(o), free(wq);
}

/* Up to three prompt products of one input (forge_hip_matmul_prompt_group: q, k and v; gate and up):
   those of one type in one launch, the others alone; each output the same bits as that product alone
   (forge_hip_matmul_split), with their biases; ws_tokens sets the workspace (fewer tokens than the
   batch: chunks); form_after: what the workspace holds after them (the f16 rows where the last
   product ran on the staged kernel in one chunk). */
static void check_prompt_group(const uint32_t types[3], const uint32_t rows[3], uint32_t n, uint32_t n_cols, uint32_t n_tokens,
                               uint32_t ws_tokens, int form_after) {
    const size_t ws_bytes = forge_hip_prompt_bytes(ws_tokens, n_cols), m = (size_t)n_tokens * n_cols;
    float *x = (float *)xmalloc(m * sizeof(float)), *ya = NULL, *yb = NULL;
    void *dx = NULL, *ws = NULL, *wsb = NULL, *dw[3] = {NULL, NULL, NULL}, *db[3] = {NULL, NULL, NULL}, *da[3] = {NULL, NULL, NULL},
         *dref[3] = {NULL, NULL, NULL};
    forge_hip_product p[3];
    size_t ny_all = 0;
    uint32_t i, differ = 0;
    int form = 0;
    random_floats(x, m, -1.0f, 1.0f);
    dx = dev_alloc(m * sizeof(float), x);
    ws = dev_alloc(ws_bytes, NULL), wsb = dev_alloc(ws_bytes, NULL);
    memset(p, 0, sizeof p);
    for (i = 0; i < n; i++) {
        const forge_type_traits *t = forge_type_info(types[i]);
        const size_t row_bytes = (size_t)n_cols / t->block_elems * t->block_bytes, ny = (size_t)n_tokens * rows[i];
        uint8_t *wq = (uint8_t *)xmalloc(row_bytes * rows[i]);
        float *bias = (float *)xmalloc(rows[i] * sizeof(float));
        random_blocks(types[i], wq, (uint64_t)rows[i] * (n_cols / t->block_elems));
        random_floats(bias, rows[i], -1.0f, 1.0f);
        dw[i] = dev_weights(types[i], n_cols, row_bytes * rows[i], wq), db[i] = dev_alloc(rows[i] * sizeof(float), bias);
        da[i] = dev_alloc(ny * sizeof(float), NULL), dref[i] = dev_alloc(ny * sizeof(float), NULL);
        p[i].type = types[i], p[i].w = dw[i], p[i].n_rows = rows[i], p[i].y = (float *)da[i], p[i].bias = i != 1 ? (const float *)db[i] : NULL;
        CHECK(forge_hip_matmul_split(types[i], dw[i], rows[i], n_cols, (const float *)dx, (float *)dref[i], n_tokens, p[i].bias, wsb, ws_bytes, NULL,
                                     msg, sizeof msg) == 0,
              "product %u alone: %s", i, msg);
        ny_all += ny;
        free(wq), free(bias);
    }
    CHECK(forge_hip_matmul_prompt_group(n, p, n_cols, (const float *)dx, n_tokens, ws, ws_bytes, &form, NULL, msg, sizeof msg) == 0,
          "the group: %s", msg);
    ya = (float *)xmalloc(ny_all * sizeof(float)), yb = (float *)xmalloc(ny_all * sizeof(float));
    {
        size_t at = 0;
        for (i = 0; i < n; i++) {
            const size_t ny = (size_t)n_tokens * rows[i];
            if (dev_fetch(ya + at, da[i], ny * sizeof(float)) && dev_fetch(yb + at, dref[i], ny * sizeof(float)))
                differ += memcmp(ya + at, yb + at, ny * sizeof(float)) != 0;
            at += ny;
        }
    }
    printf("  prompt group of %u, %s %u rows first, %u columns, %u tokens, workspace %u tokens: %s, form after %d\n", n,
           forge_type_info(types[0])->name, rows[0], n_cols, n_tokens, ws_tokens, differ ? "differs" : "each the same bits as alone", form);
    CHECK(differ == 0, "prompt group: %u of %u products differ from the product alone", differ, n);
    CHECK(form == form_after, "prompt group: form %d after it, expected %d", form, form_after);
    for (i = 0; i < n; i++) forge_hip_arena_free(dw[i]), forge_hip_arena_free(db[i]), forge_hip_arena_free(da[i]), forge_hip_arena_free(dref[i]);
    forge_hip_arena_free(dx), forge_hip_arena_free(ws), forge_hip_arena_free(wsb);
    free(x), free(ya), free(yb);
}

static void test_matmul_prompt(void) {
    TEST_CASE("prompt products with the activations staged as f16");
    /* the workspace: none up to 64 tokens, then up to 512 tokens of the columns in f16 (none at all in
       builds without the matrix-unit path: AMD) */
    CHECK(forge_hip_prompt_bytes(64, 4096) == 0 && (forge_hip_prompt_bytes(65, 4096) == 0 || forge_hip_prompt_bytes(65, 4096) == (size_t)65 * 4096 * 2) &&
              forge_hip_prompt_bytes(4096, 14336) == (forge_hip_prompt_bytes(65, 4096) ? (size_t)512 * 14336 * 2 : 0),
          "forge_hip_prompt_bytes: %zu %zu %zu", forge_hip_prompt_bytes(64, 4096), forge_hip_prompt_bytes(65, 4096),
          forge_hip_prompt_bytes(4096, 14336));
    /* blocks of 64 tokens (the grid would not fill the device with 128), partial row and token tiles,
       one chunk and several */
    check_matmul_prompt(FORGE_TYPE_Q4_0, 200, 1024, 130, 512, 1, 1);
    check_matmul_prompt(FORGE_TYPE_Q4_0, 200, 1024, 300, 100, 0, 1); /* chunks of 100, 100, 100 */
    check_matmul_prompt(FORGE_TYPE_Q8_0, 300, 1024, 100, 512, 0, 1);
    check_matmul_prompt(FORGE_TYPE_Q4_K, 328, 2048, 257, 512, 1, 1);
    check_matmul_prompt(FORGE_TYPE_Q4_K, 96, 512, 200, 70, 0, 1);     /* chunks of 70, 70, 60 */
    check_matmul_prompt(FORGE_TYPE_Q6_K, 136, 2048, 140, 512, 1, 1);  /* rows 16-aligned on the device */
    check_matmul_prompt(FORGE_TYPE_Q6_K, 136, 1536, 140, 512, 0, 1);  /* 4-aligned */
    check_matmul_prompt(FORGE_TYPE_Q6_K, 136, 1280, 140, 512, 1, 1);  /* 2-aligned (an odd count of super-blocks) */
    /* blocks of 128 tokens (the grid fills the device) */
    check_matmul_prompt(FORGE_TYPE_Q8_0, 8200, 256, 150, 512, 1, 1);
    check_matmul_prompt(FORGE_TYPE_Q4_0, 8256, 512, 129, 512, 0, 1);
    check_matmul_prompt(FORGE_TYPE_Q6_K, 8448, 512, 130, 512, 1, 1);
    /* Q4_K of 8192 rows or more: 128 rows x 128 tokens a block, 64 columns a step */
    check_matmul_prompt(FORGE_TYPE_Q4_K, 8320, 256, 200, 512, 1, 1);
    /* unstaged, as before: a workspace of 64 tokens, types the staged kernel does not take, columns not
       a multiple of 128 */
    check_matmul_prompt(FORGE_TYPE_Q4_0, 300, 512, 129, 64, 0, 0);
    check_matmul_prompt(FORGE_TYPE_Q5_K, 128, 512, 100, 512, 1, 0);
    check_matmul_prompt(FORGE_TYPE_F16, 128, 96, 100, 512, 0, 0);
    check_matmul_prompt(FORGE_TYPE_Q4_0, 128, 320, 100, 512, 1, 0);
    if (forge_hip_prompt_bytes(65, 4096)) { /* the staged path (not on AMD) */
        check_prompt_form(FORGE_TYPE_Q4_0, 1024, 4096, 200, 1);
        check_prompt_form(FORGE_TYPE_Q8_0, 8448, 512, 130, 0);
        check_prompt_form(FORGE_TYPE_Q4_K, 512, 1024, 512, 1);
        check_prompt_form(FORGE_TYPE_Q6_K, 256, 1536, 140, 0);
        check_prompt_tile(FORGE_TYPE_Q4_0, 4096, 14336, 512); /* the 8B's down projection: 2 x 4 warps */
        check_prompt_tile(FORGE_TYPE_Q8_0, 4000, 8192, 450);  /* partial row and token blocks */
        check_prompt_tile(FORGE_TYPE_Q8_0, 6144, 4096, 512);  /* the 8B's q, k and v: 128 x 128 */
        check_prompt_tile(FORGE_TYPE_Q4_0, 6200, 4096, 400);
        check_swiglu_f16(14336, 130, FORGE_TYPE_Q4_0, 256, 0); /* the 8B's down width */
        check_swiglu_f16(4864, 200, FORGE_TYPE_Q8_0, 896, 1);  /* Qwen2.5-0.5B's; h kept */
        check_swiglu_f16(8960, 100, FORGE_TYPE_Q6_K, 128, 0);  /* Qwen2.5-1.5B's (an odd count of Q6_K super-blocks) */
        /* where a down product reads the f16 rows alone: a staged type, one chunk, past 64 tokens */
        CHECK(forge_hip_prompt_staged(FORGE_TYPE_Q4_0, 4096, 14336, 512, (size_t)512 * 14336 * 2) &&
                  forge_hip_prompt_staged(FORGE_TYPE_Q6_K, 896, 4864, 150, (size_t)150 * 4864 * 2) &&
                  !forge_hip_prompt_staged(FORGE_TYPE_Q5_K, 4096, 14336, 512, (size_t)512 * 14336 * 2) &&
                  !forge_hip_prompt_staged(FORGE_TYPE_Q4_0, 4096, 14336, 513, (size_t)513 * 14336 * 2) &&
                  !forge_hip_prompt_staged(FORGE_TYPE_Q4_0, 4096, 14336, 64, (size_t)64 * 14336 * 2) &&
                  !forge_hip_prompt_staged(FORGE_TYPE_Q4_0, 4096, 14336, 512, (size_t)511 * 14336 * 2) &&
                  !forge_hip_prompt_staged(FORGE_TYPE_Q8_0, 128, 288, 130, (size_t)130 * 288 * 2) &&
                  forge_hip_prompt_staged(FORGE_TYPE_Q8_0, 128, 320, 130, (size_t)130 * 320 * 2) == forge_hip_prompt_wgmma(320),
              "forge_hip_prompt_staged: a staged product in one chunk, and not a Q5_K, 513 or 64 tokens, a short workspace, 288 columns; 320 "
              "columns on the warpgroup kernel only");
        CHECK(forge_hip_swiglu_f16((float *)(uintptr_t)256, (const float *)(uintptr_t)256, 6, (void *)(uintptr_t)256, 0, NULL, msg, sizeof msg) != 0 &&
                  strstr(msg, "swiglu") != NULL,
              "forge_hip_swiglu_f16 refuses a count not a multiple of 4 (%s)", msg);
    } else
        CHECK(!forge_hip_prompt_staged(FORGE_TYPE_Q4_0, 4096, 14336, 512, (size_t)512 * 14336 * 2), "no staged products here");
    { /* q, k and v of one type; of two (Q4_K_M's v); gate and up (128 x 128 tiles); in chunks; more than the
         staged kernel takes (Q5_K alone) */
        static const uint32_t q4[3] = {FORGE_TYPE_Q4_0, FORGE_TYPE_Q4_0, FORGE_TYPE_Q4_0}, km[3] = {FORGE_TYPE_Q4_K, FORGE_TYPE_Q4_K, FORGE_TYPE_Q6_K};
        static const uint32_t q8[3] = {FORGE_TYPE_Q8_0, FORGE_TYPE_Q8_0, FORGE_TYPE_Q8_0}, mix[3] = {FORGE_TYPE_Q4_K, FORGE_TYPE_Q5_K, FORGE_TYPE_Q4_K};
        static const uint32_t qkv[3] = {300, 100, 100}, qkv2[3] = {256, 64, 136}, gu[3] = {8448, 8448, 0}, small[3] = {128, 32, 32};
        const int rows_left = FORGE_HIP_FORM_F16_PROMPT;
        check_prompt_group(q4, qkv, 3, 1024, 200, 512, rows_left);
        check_prompt_group(km, qkv2, 3, 2048, 150, 512, rows_left);
        check_prompt_group(q8, gu, 2, 512, 130, 512, rows_left);
        check_prompt_group(q4, qkv, 3, 1024, 200, 70, 0); /* chunks of 70, 70, 60: no rows left whole */
        check_prompt_group(mix, small, 3, 512, 100, 512, 0); /* Q5_K last, off the staged kernel */
        check_prompt_group(q8, small, 3, 896, 129, 512, rows_left); /* Qwen2.5-0.5B's width: the file's layout */
    }
}

static void test_matmul(void) {
    size_t i;
    TEST_CASE("matmul / matvec, every weight type");
    for (i = 0; i < N_TYPES; i++) {
        uint32_t type = all_types[i];
        check_matmul(type, 300, 1024, 1, 0);   /* decode; 300 rows: a partial block of rows */
        check_matmul(type, 129, 2304, 1, 1);   /* decode with bias, 9 super-blocks a row */
        check_matmul(type, 200, 1024, 37, 1);  /* prompt: partial row and token tiles */
        check_matmul(type, 64, 256, 70, 0);
        check_matmul(type, 8448, 256, 130, 1); /* enough row blocks for the large matrix-unit tile */
        check_matmul(type, 96, 4096, 5, 0);    /* a few tokens over long rows */
    }
    /* the remaining matrix-unit tiles (few tokens, many rows) for the types with their own readers */
    check_matmul(FORGE_TYPE_Q4_K, 16896, 256, 20, 0);
    check_matmul(FORGE_TYPE_Q6_K, 16896, 256, 50, 1);
    check_matmul(FORGE_TYPE_Q4_0, 16896, 256, 50, 0);
    check_matmul(FORGE_TYPE_Q8_0, 16896, 256, 20, 1);
    check_matmul(FORGE_TYPE_F16, 16896, 256, 64, 0);
    /* float types with rows that are not a multiple of 32 take the element path */
    check_matmul(FORGE_TYPE_F32, 70, 100, 1, 1);
    check_matmul(FORGE_TYPE_F16, 70, 100, 1, 0);
    check_matmul(FORGE_TYPE_BF16, 70, 98, 5, 1);
    check_matmul(FORGE_TYPE_F32, 33, 45, 9, 0);
    /* refusals */
    CHECK(forge_hip_matvec(FORGE_TYPE_Q4_K, NULL, 4, 100, NULL, NULL, NULL, NULL, msg, sizeof msg) == -1 && strstr(msg, "256"),
          "a Q4_K row of 100 elements must be refused: %s", msg);
    CHECK(forge_hip_matvec(9, NULL, 4, 64, NULL, NULL, NULL, NULL, msg, sizeof msg) == -1, "type 9 (Q8_1) must be refused");
    /* Q6_K in the device layout is read with aligned loads: a matrix (or an expert) that is not aligned
       as its rows are is refused before anything runs; nothing is dereferenced */
    CHECK(forge_hip_matvec(FORGE_TYPE_Q6_K, (const void *)(uintptr_t)8, 4, 2048, NULL, NULL, NULL, NULL, msg, sizeof msg) == -1 &&
              strstr(msg, "16-byte aligned"),
          "a 2048-wide Q6_K matrix at an 8-aligned address must be refused: %s", msg);
    CHECK(forge_hip_matvec_q8(FORGE_TYPE_Q6_K, (const void *)(uintptr_t)2, 4, 1536, NULL, NULL, NULL, 0, -1.0f, NULL, msg, sizeof msg) == -1 &&
              strstr(msg, "4-byte aligned"),
          "a 1536-wide Q6_K matrix at a 2-aligned address must be refused: %s", msg);
    CHECK(forge_hip_matvec_q8(FORGE_TYPE_Q6_K, (const void *)(uintptr_t)6, 4, 8960, NULL, NULL, NULL, 0, -1.0f, NULL, msg, sizeof msg) == -1 &&
              strstr(msg, "4-byte aligned"),
          "an 8960-wide Q6_K matrix (its odd rows 2-aligned) at a 2-aligned address must be refused: %s", msg);
    CHECK(forge_hip_matmul_id(FORGE_TYPE_Q6_K, (const void *)(uintptr_t)256, 3 * 1680 + 8, 3, 2048, NULL, 0, NULL, 1, 1, NULL, NULL, msg,
                              sizeof msg) == -1 &&
              strstr(msg, "experts"),
          "Q6_K experts 8 bytes off the 16-byte rows must be refused: %s", msg);
}

/* ---- embed ---- */

static void test_embed(void) {
    size_t i;
    TEST_CASE("embed, every weight type");
    for (i = 0; i < N_TYPES; i++) {
        const uint32_t type = all_types[i], n_vocab = 50, n_tokens = 7;
        const forge_type_traits *t = forge_type_info(type);
        const uint32_t n = (t->block_elems == 1) ? 100 : 512;
        const size_t row_bytes = (size_t)n / t->block_elems * t->block_bytes;
        uint8_t *table = (uint8_t *)xmalloc(row_bytes * n_vocab);
        float *ref = (float *)xmalloc((size_t)n_tokens * n * sizeof(float)), *got = (float *)xmalloc((size_t)n_tokens * n * sizeof(float));
        int32_t tokens[7];
        void *dt, *dtok, *dy;
        uint32_t k, j;
        const float scale = 1.5f;
        random_blocks(type, table, (uint64_t)n_vocab * (n / t->block_elems));
        for (k = 0; k < n_tokens; k++) {
            tokens[k] = (int32_t)(rng_u32() % n_vocab);
            forge_dequantize(type, table + (size_t)tokens[k] * row_bytes, ref + (size_t)k * n, n);
            for (j = 0; j < n; j++) ref[(size_t)k * n + j] *= scale;
        }
        dt = dev_weights(type, n, row_bytes * n_vocab, table);
        dtok = dev_alloc(sizeof tokens, tokens);
        dy = dev_alloc((size_t)n_tokens * n * sizeof(float), NULL);
        CHECK(forge_hip_embed(type, dt, n_vocab, n, (const int32_t *)dtok, n_tokens, scale, (float *)dy, NULL, msg, sizeof msg) == 0,
              "%s embed: %s", t->name, msg);
        if (dev_fetch(got, dy, (size_t)n_tokens * n * sizeof(float))) {
            double err = norm_error_f(got, ref, (size_t)n_tokens * n);
            printf("  embed  %-6s n %u: err %.2e\n", t->name, n, err);
            CHECK(err < 1e-6, "embed %s: normalized error %.3e", t->name, err);
        }
        forge_hip_arena_free(dt), forge_hip_arena_free(dtok), forge_hip_arena_free(dy);
        free(table), free(ref), free(got);
    }
}

/* ---- rmsnorm, headnorm ---- */

static void test_norms(void) {
    const uint32_t rows = 5, n = 4096, heads = 8, head_dim = 128;
    const float eps = 1e-5f;
    float *x = (float *)xmalloc((size_t)rows * n * sizeof(float)), *w = (float *)xmalloc(n * sizeof(float));
    float *ref = (float *)xmalloc((size_t)rows * n * sizeof(float)), *got = (float *)xmalloc((size_t)rows * n * sizeof(float));
    void *dx, *dw, *dy;
    uint32_t r;
    double err;
    TEST_CASE("rmsnorm and per-head norm");
    random_floats(x, (size_t)rows * n, -2.0f, 2.0f);
    random_floats(w, n, 0.5f, 1.5f);
    for (r = 0; r < rows; r++) forge__rmsnorm_row(x + (size_t)r * n, w, ref + (size_t)r * n, n, eps);
    dx = dev_alloc((size_t)rows * n * sizeof(float), x);
    dw = dev_alloc(n * sizeof(float), w);
    dy = dev_alloc((size_t)rows * n * sizeof(float), NULL);
    CHECK(forge_hip_rmsnorm((const float *)dx, (const float *)dw, (float *)dy, rows, n, eps, NULL, msg, sizeof msg) == 0, "rmsnorm: %s", msg);
    if (dev_fetch(got, dy, (size_t)rows * n * sizeof(float))) {
        err = norm_error_f(got, ref, (size_t)rows * n);
        printf("  rmsnorm %u x %u: err %.2e\n", rows, n, err);
        CHECK(err < 1e-5, "rmsnorm: normalized error %.3e", err);
    }
    /* heads: rows of head_dim in place, weights of head_dim (the first head_dim of w) */
    for (r = 0; r < rows * heads; r++) forge__rmsnorm_row(x + (size_t)r * head_dim, w, ref + (size_t)r * head_dim, head_dim, eps);
    CHECK(forge_hip_headnorm((float *)dx, (const float *)dw, rows, heads, head_dim, eps, NULL, msg, sizeof msg) == 0, "headnorm: %s", msg);
    if (dev_fetch(got, dx, (size_t)rows * heads * head_dim * sizeof(float))) {
        err = norm_error_f(got, ref, (size_t)rows * heads * head_dim);
        printf("  headnorm %u tokens x %u heads x %u: err %.2e\n", rows, heads, head_dim, err);
        CHECK(err < 1e-5, "headnorm: normalized error %.3e", err);
    }
    { /* the residual add and the norm that reads it in one launch: the same bits as the two launches */
        const uint32_t widths[3] = {1536, 4096, 96};
        float *r2 = (float *)xmalloc((size_t)rows * n * sizeof(float)), *x2 = (float *)xmalloc((size_t)rows * n * sizeof(float));
        float *got2 = (float *)xmalloc((size_t)rows * n * sizeof(float));
        size_t i;
        for (i = 0; i < 3; i++) {
            const size_t m = (size_t)rows * widths[i];
            void *xa, *xb, *dr, *ya, *yb;
            random_floats(x2, m, -2.0f, 2.0f), random_floats(r2, m, -2.0f, 2.0f);
            xa = dev_alloc(m * sizeof(float), x2), xb = dev_alloc(m * sizeof(float), x2), dr = dev_alloc(m * sizeof(float), r2);
            ya = dev_alloc(m * sizeof(float), NULL), yb = dev_alloc(m * sizeof(float), NULL);
            forge_hip_add((float *)xa, (const float *)dr, m, NULL, msg, sizeof msg);
            forge_hip_rmsnorm((const float *)xa, (const float *)dw, (float *)ya, rows, widths[i], eps, NULL, msg, sizeof msg);
            CHECK(forge_hip_add_rmsnorm((float *)xb, (const float *)dr, (const float *)dw, (float *)yb, rows, widths[i], eps, NULL, 0, NULL, msg,
                                        sizeof msg) == 0,
                  "add_rmsnorm: %s", msg);
            if (dev_fetch(ref, xa, m * sizeof(float)) && dev_fetch(got, xb, m * sizeof(float)) && dev_fetch(x2, ya, m * sizeof(float)) &&
                dev_fetch(got2, yb, m * sizeof(float))) {
                const int same = memcmp(ref, got, m * sizeof(float)) == 0 && memcmp(x2, got2, m * sizeof(float)) == 0;
                printf("  add_rmsnorm %u x %u: %s add then rmsnorm\n", rows, widths[i], same ? "the same bits as" : "differs from");
                CHECK(same, "add_rmsnorm %u x %u: not the bits of add then rmsnorm", rows, widths[i]);
            }
            forge_hip_arena_free(xa), forge_hip_arena_free(xb), forge_hip_arena_free(dr), forge_hip_arena_free(ya), forge_hip_arena_free(yb);
        }
        free(r2), free(x2), free(got2);
    }
    forge_hip_arena_free(dx), forge_hip_arena_free(dw), forge_hip_arena_free(dy);
    free(x), free(w), free(ref), free(got);
}

/* ---- rope ---- */

/* Rotary embedding from its definition, in float64 and one output element at a time (not a copy of
   forge__rope): dimension d below n_rot belongs to pair i with partner p (NORM: i = d / 2, p = d ^ 1;
   NEOX: i = d % (n_rot / 2), p = d -+ n_rot / 2), the pair (first, second) turns by the angle
   theta_i = pos * scale * base^(-2i / n_rot) / factor_i, and dimensions from n_rot on are untouched. */
static void rope_ref(float *x, uint32_t n_tokens, uint32_t n_heads, uint32_t head_dim, uint32_t n_rot, int neox, uint32_t pos0,
                     float base, float scale, const float *factors) {
    static double out[1024];
    uint32_t t, h, d, half = n_rot / 2;
    for (t = 0; t < n_tokens; t++)
        for (h = 0; h < n_heads; h++) {
            float *v = x + ((size_t)t * n_heads + h) * head_dim;
            for (d = 0; d < head_dim && d < 1024; d++) {
                uint32_t i = neox ? d % half : d / 2, p;
                int first = neox ? d < half : d % 2 == 0;
                double theta, c, s;
                if (d >= n_rot) {
                    out[d] = v[d];
                    continue;
                }
                p = neox ? (first ? d + half : d - half) : d ^ 1u;
                theta = (double)(pos0 + t) * (double)scale * pow((double)base, -2.0 * (double)i / (double)n_rot) /
                        (double)(factors ? factors[i] : 1.0f);
                c = cos(theta), s = sin(theta);
                out[d] = first ? (double)v[d] * c - (double)v[p] * s : (double)v[p] * s + (double)v[d] * c;
            }
            for (d = 0; d < head_dim && d < 1024; d++) v[d] = (float)out[d];
        }
}

static void test_rope(void) {
    static const struct {
        uint32_t head_dim, n_rot;
        int mode;
        uint32_t pos0;
        float base, scale;
        int factors;
    } cases[] = {{128, 128, 0, 0, 10000.0f, 1.0f, 0},    {128, 128, 2, 1000, 10000.0f, 1.0f, 0}, {128, 64, 2, 4090, 1000000.0f, 0.25f, 0},
                 {64, 32, 0, 77, 10000.0f, 1.0f, 0},      {128, 128, 2, 30000, 500000.0f, 1.0f, 1}, {256, 256, 2, 5, 10000.0f, 0.5f, 1}};
    size_t c;
    TEST_CASE("rope NORM / NEOX, partial, scaled, with factors");
    for (c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const uint32_t n_tokens = 6, n_heads = 5, hd = cases[c].head_dim, n = n_tokens * n_heads * hd;
        float *x = (float *)xmalloc(n * sizeof(float)), *ref = (float *)xmalloc(n * sizeof(float)), *got = (float *)xmalloc(n * sizeof(float));
        float factors[128];
        void *dx, *df = NULL;
        random_floats(x, n, -1.0f, 1.0f);
        random_floats(factors, 128, 1.0f, 8.0f);
        memcpy(ref, x, n * sizeof(float));
        rope_ref(ref, n_tokens, n_heads, hd, cases[c].n_rot, cases[c].mode == 2, cases[c].pos0, cases[c].base, cases[c].scale,
                 cases[c].factors ? factors : NULL);
        dx = dev_alloc(n * sizeof(float), x);
        if (cases[c].factors) df = dev_alloc(sizeof factors, factors);
        CHECK(forge_hip_rope((float *)dx, n_tokens, n_heads, hd, cases[c].n_rot, cases[c].mode, cases[c].pos0, cases[c].base,
                             cases[c].scale, (const float *)df, NULL, msg, sizeof msg) == 0, "rope: %s", msg);
        if (dev_fetch(got, dx, n * sizeof(float))) {
            double err = norm_error_f(got, ref, n);
            printf("  rope %s head_dim %u n_rot %u pos0 %u base %g scale %g%s: err %.2e\n", cases[c].mode == 2 ? "NEOX" : "NORM", hd,
                   cases[c].n_rot, cases[c].pos0, cases[c].base, cases[c].scale, cases[c].factors ? " factors" : "", err);
            CHECK(err < 1e-5, "rope case %zu: normalized error %.3e", c, err);
        }
        forge_hip_arena_free(dx), forge_hip_arena_free(df);
        free(x), free(ref), free(got);
    }
    CHECK(forge_hip_rope(NULL, 1, 1, 64, 66, 0, 0, 1e4f, 1.0f, NULL, NULL, msg, sizeof msg) == -1, "n_rot > head_dim must be refused");
}

/* ---- KV cache: store and attention ---- */

static const forge_kv_type kv_types[] = {FORGE_KV_F32, FORGE_KV_F16, FORGE_KV_Q8_0, FORGE_KV_Q4_0};

/* A CPU cache row (forge__kv_encode: blocks of [f16 scale][quants]) put in the GPU cache's order, as
   forge_kernels.hip >>kv states it: the quants of every block, then the blocks' scales. F32 and F16
   rows are the same on both. */
static void gpu_row_order(forge_kv_type kv, uint8_t *row, uint32_t dim) {
    const uint32_t storage = forge__kv_storage_type(kv), n_blocks = dim / 32;
    const uint32_t qb = storage == FORGE_TYPE_Q8_0 ? 32 : 16, bb = qb + 2;
    uint8_t tmp[512 / 32 * 34]; /* the widest head the kernels take */
    uint32_t b;
    if ((storage != FORGE_TYPE_Q8_0 && storage != FORGE_TYPE_Q4_0) || (size_t)n_blocks * bb > sizeof tmp) return;
    for (b = 0; b < n_blocks; b++) {
        memcpy(tmp + b * qb, row + b * bb + 2, qb);
        memcpy(tmp + n_blocks * qb + 2 * b, row + b * bb, 2);
    }
    memcpy(row, tmp, (size_t)n_blocks * bb);
}

/* gpu_row_order undone: the GPU cache's row back in blocks of [f16 scale][quants]. */
static void cpu_row_order(forge_kv_type kv, uint8_t *row, uint32_t dim) {
    const uint32_t storage = forge__kv_storage_type(kv), n_blocks = dim / 32;
    const uint32_t qb = storage == FORGE_TYPE_Q8_0 ? 32 : 16, bb = qb + 2;
    uint8_t tmp[512 / 32 * 34];
    uint32_t b;
    if ((storage != FORGE_TYPE_Q8_0 && storage != FORGE_TYPE_Q4_0) || (size_t)n_blocks * bb > sizeof tmp) return;
    for (b = 0; b < n_blocks; b++) {
        memcpy(tmp + b * bb + 2, row + b * qb, qb);
        memcpy(tmp + b * bb, row + n_blocks * qb + 2 * b, 2);
    }
    memcpy(row, tmp, (size_t)n_blocks * bb);
}

/* One stored row decoded back against the float64 values it was made from, within the type's
   rounding (kv_rounding.h). Returns the elements beyond their bound. */
static uint32_t decoded_row_errors(forge_kv_type kv, const uint8_t *gpu_row, const float *x, uint32_t dim) {
    const uint32_t storage = forge__kv_storage_type(kv);
    uint8_t row[512 / 32 * 34 + 2048];
    float out[512];
    const forge_type_traits *t = forge_type_info(storage);
    if (dim > 512) return dim;
    memcpy(row, gpu_row, (size_t)dim / t->block_elems * t->block_bytes);
    cpu_row_order(kv, row, dim);
    if (forge_dequantize(storage, row, out, dim) != FORGE_OK) return dim;
    return kv_rounding_beyond(storage, x, out, dim);
}

/* n_cells 0: a cache of n_ctx rows, position p in row p; else a ring of n_cells rows, p in p % n_cells */
static void check_kv_store(forge_kv_type kv, uint32_t n_cells) {
    const uint32_t storage = forge__kv_storage_type(kv), n_ctx = 40, n_kv = 3, hd = 128, hdv = 64, n_tokens = 9, pos0 = 17;
    const uint32_t n_rows = n_cells ? n_cells : n_ctx;
    const forge_type_traits *t = forge_type_info(storage);
    const size_t rk = hd / t->block_elems * t->block_bytes, rv = hdv / t->block_elems * t->block_bytes;
    const size_t kbytes = rk * n_kv * n_rows, vbytes = rv * n_kv * n_rows;
    float *k = (float *)xmalloc((size_t)n_tokens * n_kv * hd * sizeof(float)), *v = (float *)xmalloc((size_t)n_tokens * n_kv * hdv * sizeof(float));
    uint8_t *ek = (uint8_t *)xmalloc(kbytes), *ev = (uint8_t *)xmalloc(vbytes), *gk = (uint8_t *)xmalloc(kbytes), *gv = (uint8_t *)xmalloc(vbytes);
    void *dk, *dv, *ck, *cv;
    uint32_t tok, h;
    size_t j, diff = 0;
    random_floats(k, (size_t)n_tokens * n_kv * hd, -3.0f, 3.0f);
    random_floats(v, (size_t)n_tokens * n_kv * hdv, -3.0f, 3.0f);
    k[5] = 0.0f, v[7] = -3.0f; /* a zero and an exact extreme */
    for (j = 0; j < 32; j++) k[hd + j] = 0.0f; /* an all-zero block: d = 0 */
    /* the inputs forge__kv_encode defines for any float: NaN, +inf, -inf, denormals (token 1) */
    k[(size_t)n_kv * hd + 3] = NAN, k[(size_t)n_kv * hd + 32 + 31] = INFINITY, k[(size_t)n_kv * hd + 64] = -INFINITY;
    for (j = 0; j < 32; j++) k[(size_t)n_kv * hd + 96 + j] = (float)((int)j - 16) * 1e-40f;
    v[(size_t)n_kv * hdv + 1] = NAN;
    for (j = 0; j < 32; j++) v[(size_t)n_kv * hdv + 32 + j] = j == 5 ? 1e-41f : 0.0f;
    memset(ek, 0xAB, kbytes), memset(ev, 0xAB, vbytes);
    for (tok = 0; tok < n_tokens; tok++)
        for (h = 0; h < n_kv; h++) {
            const uint32_t cell = (pos0 + tok) % n_rows;
            forge__kv_encode(kv, k + ((size_t)tok * n_kv + h) * hd, hd, ek + ((size_t)cell * n_kv + h) * rk);
            forge__kv_encode(kv, v + ((size_t)tok * n_kv + h) * hdv, hdv, ev + ((size_t)cell * n_kv + h) * rv);
            gpu_row_order(kv, ek + ((size_t)cell * n_kv + h) * rk, hd);
            gpu_row_order(kv, ev + ((size_t)cell * n_kv + h) * rv, hdv);
        }
    dk = dev_alloc((size_t)n_tokens * n_kv * hd * sizeof(float), k);
    dv = dev_alloc((size_t)n_tokens * n_kv * hdv * sizeof(float), v);
    { /* the cache starts as the same 0xAB filler, so untouched rows must stay equal too */
        uint8_t *fill = (uint8_t *)xmalloc(kbytes > vbytes ? kbytes : vbytes);
        memset(fill, 0xAB, kbytes > vbytes ? kbytes : vbytes);
        ck = dev_alloc(kbytes, fill);
        cv = dev_alloc(vbytes, fill);
        free(fill);
    }
    CHECK(forge_hip_kv_store(storage, (const float *)dk, (const float *)dv, ck, cv, n_tokens, n_kv, hd, hdv, pos0, n_cells, NULL, msg,
                             sizeof msg) == 0,
          "kv_store %s: %s", t->name, msg);
    if (dev_fetch(gk, ck, kbytes) && dev_fetch(gv, cv, vbytes)) {
        for (j = 0; j < kbytes; j++) diff += gk[j] != ek[j];
        for (j = 0; j < vbytes; j++) diff += gv[j] != ev[j];
        printf("  kv_store %-4s %s %2u rows: %zu of %zu bytes differ\n", t->name, n_cells ? "ring of" : "cache  ", n_rows, diff,
               kbytes + vbytes);
        CHECK(diff == 0, "kv_store %s (n_cells %u): %zu bytes differ from forge__kv_encode", t->name, n_cells, diff);
        { /* and, independently of forge__kv_encode, each stored row decodes to its values within the type's rounding */
            uint32_t beyond = 0;
            for (tok = 0; tok < n_tokens; tok++)
                for (h = 0; h < n_kv; h++) {
                    const uint32_t cell = (pos0 + tok) % n_rows;
                    beyond += decoded_row_errors(kv, gk + ((size_t)cell * n_kv + h) * rk, k + ((size_t)tok * n_kv + h) * hd, hd);
                    beyond += decoded_row_errors(kv, gv + ((size_t)cell * n_kv + h) * rv, v + ((size_t)tok * n_kv + h) * hdv, hdv);
                }
            CHECK(beyond == 0, "kv_store %s (n_cells %u): %u stored values decode beyond their rounding", t->name, n_cells, beyond);
        }
    }
    forge_hip_arena_free(dk), forge_hip_arena_free(dv), forge_hip_arena_free(ck), forge_hip_arena_free(cv);
    free(k), free(v), free(ek), free(ev), free(gk), free(gv);
}

/* One decode token: rope of q and k and the cache store in one launch, bit for bit what forge_hip_rope
   twice and forge_hip_kv_store do (the same arithmetic), at a position given as an argument and one
   read from device memory, into a full cache and into a ring. */
static void check_rope_store(forge_kv_type kv, uint32_t n_head, uint32_t n_kv, uint32_t hd, uint32_t n_rot, int mode, uint32_t pos,
                             uint32_t n_cells, int use_dev_pos) {
    const uint32_t storage = forge__kv_storage_type(kv), n_rows = n_cells ? n_cells : pos + 1;
    const forge_type_traits *t = forge_type_info(storage);
    const size_t rk = hd / t->block_elems * t->block_bytes, cbytes = rk * n_kv * n_rows;
    const size_t nq = (size_t)n_head * hd, nk = (size_t)n_kv * hd;
    float *q = (float *)xmalloc(nq * sizeof(float)), *k = (float *)xmalloc(nk * sizeof(float)), *v = (float *)xmalloc(nk * sizeof(float));
    float *a = (float *)xmalloc((nq + nk) * sizeof(float)), *b = (float *)xmalloc((nq + nk) * sizeof(float));
    uint8_t *ca = (uint8_t *)xmalloc(2 * cbytes), *cb = (uint8_t *)xmalloc(2 * cbytes);
    void *dq[2], *dk[2], *dv, *dc[2], *dpos;
    size_t j, diff = 0;
    int i;
    random_floats(q, nq, -2.0f, 2.0f), random_floats(k, nk, -2.0f, 2.0f), random_floats(v, nk, -2.0f, 2.0f);
    dv = dev_alloc(nk * sizeof(float), v);
    dpos = dev_alloc(sizeof pos, &pos);
    memset(ca, 0x5A, 2 * cbytes);
    for (i = 0; i < 2; i++) dq[i] = dev_alloc(nq * sizeof(float), q), dk[i] = dev_alloc(nk * sizeof(float), k), dc[i] = dev_alloc(2 * cbytes, ca);
    forge_hip_rope((float *)dq[0], 1, n_head, hd, n_rot, mode, pos, 10000.0f, 1.0f, NULL, NULL, msg, sizeof msg);
    forge_hip_rope((float *)dk[0], 1, n_kv, hd, n_rot, mode, pos, 10000.0f, 1.0f, NULL, NULL, msg, sizeof msg);
    forge_hip_kv_store(storage, (const float *)dk[0], (const float *)dv, dc[0], (uint8_t *)dc[0] + cbytes, 1, n_kv, hd, hd, pos, n_cells, NULL,
                       msg, sizeof msg);
    CHECK(forge_hip_rope_store(storage, (float *)dq[1], (float *)dk[1], (const float *)dv, n_head, n_kv, hd, hd, n_rot, mode,
                               use_dev_pos ? 0 : pos, use_dev_pos ? (const uint32_t *)dpos : NULL, 10000.0f, 1.0f, NULL, dc[1],
                               (uint8_t *)dc[1] + cbytes, n_cells, NULL, msg, sizeof msg) == 0,
          "rope_store: %s", msg);
    if (dev_fetch(a, dq[0], nq * sizeof(float)) && dev_fetch(a + nq, dk[0], nk * sizeof(float)) && dev_fetch(b, dq[1], nq * sizeof(float)) &&
        dev_fetch(b + nq, dk[1], nk * sizeof(float)) && dev_fetch(ca, dc[0], 2 * cbytes) && dev_fetch(cb, dc[1], 2 * cbytes)) {
        for (j = 0; j < 2 * cbytes; j++) diff += ca[j] != cb[j];
        CHECK(memcmp(a, b, (nq + nk) * sizeof(float)) == 0 && diff == 0, "rope_store %s %s: q/k %s, %zu cache bytes differ", t->name,
              mode == 2 ? "NEOX" : "NORM", memcmp(a, b, (nq + nk) * sizeof(float)) ? "differ" : "equal", diff);
    }
    for (i = 0; i < 2; i++) forge_hip_arena_free(dq[i]), forge_hip_arena_free(dk[i]), forge_hip_arena_free(dc[i]);
    forge_hip_arena_free(dv), forge_hip_arena_free(dpos);
    free(q), free(k), free(v), free(a), free(b), free(ca), free(cb);
}

/* A step of several sequences: rope of q and k and the store of k and v in one launch
   (forge_hip_rope_store_rows), bit for bit what forge_hip_rope_rows twice and forge_hip_kv_store_rows
   give: four rows of two sequences at their own positions (a ring where n_cells), the last a padding
   row (FORGE_HIP_ROW_NO_STORE) that rotates and stores nothing. */
static void check_rope_store_rows(forge_kv_type kv, uint32_t n_head, uint32_t n_kv, uint32_t hd, uint32_t n_rot, int mode, uint32_t n_cells) {
    const uint32_t storage = forge__kv_storage_type(kv), n_rows = n_cells ? n_cells : 64, n_tokens = 4;
    const uint32_t pos[4] = {40, 7, 8, 40}, seq[4] = {1, 0, 0, 1 | FORGE_HIP_ROW_NO_STORE};
    const forge_type_traits *t = forge_type_info(storage);
    const size_t rk = hd / t->block_elems * t->block_bytes, region = rk * n_kv * n_rows, stride = 2 * region;
    const size_t nq = (size_t)n_tokens * n_head * hd, nk = (size_t)n_tokens * n_kv * hd;
    float *q = (float *)xmalloc(nq * sizeof(float)), *k = (float *)xmalloc(nk * sizeof(float)), *v = (float *)xmalloc(nk * sizeof(float));
    float *a = (float *)xmalloc((nq + nk) * sizeof(float)), *b = (float *)xmalloc((nq + nk) * sizeof(float));
    uint8_t *ca = (uint8_t *)xmalloc(2 * stride), *cb = (uint8_t *)xmalloc(2 * stride);
    void *dq[2], *dk[2], *dv, *dc[2], *dpos, *dseq;
    size_t j, diff = 0;
    int i;
    random_floats(q, nq, -2.0f, 2.0f), random_floats(k, nk, -2.0f, 2.0f), random_floats(v, nk, -2.0f, 2.0f);
    dv = dev_alloc(nk * sizeof(float), v);
    dpos = dev_alloc(sizeof pos, pos), dseq = dev_alloc(sizeof seq, seq);
    memset(ca, 0x5A, 2 * stride);
    for (i = 0; i < 2; i++) dq[i] = dev_alloc(nq * sizeof(float), q), dk[i] = dev_alloc(nk * sizeof(float), k), dc[i] = dev_alloc(2 * stride, ca);
    forge_hip_rope_rows((float *)dq[0], n_tokens, n_head, hd, n_rot, mode, (const uint32_t *)dpos, 10000.0f, 1.0f, NULL, NULL, msg, sizeof msg);
    forge_hip_rope_rows((float *)dk[0], n_tokens, n_kv, hd, n_rot, mode, (const uint32_t *)dpos, 10000.0f, 1.0f, NULL, NULL, msg, sizeof msg);
    forge_hip_kv_store_rows(storage, (const float *)dk[0], (const float *)dv, dc[0], (uint8_t *)dc[0] + region, n_tokens, n_kv, hd, hd,
                            (const uint32_t *)dpos, (const uint32_t *)dseq, stride, n_cells, NULL, msg, sizeof msg);
    CHECK(forge_hip_rope_store_rows(storage, (float *)dq[1], (float *)dk[1], (const float *)dv, n_tokens, n_head, n_kv, hd, hd, n_rot, mode,
                                    (const uint32_t *)dpos, (const uint32_t *)dseq, stride, 10000.0f, 1.0f, NULL, dc[1],
                                    (uint8_t *)dc[1] + region, n_cells, NULL, msg, sizeof msg) == 0,
          "rope_store_rows: %s", msg);
    if (dev_fetch(a, dq[0], nq * sizeof(float)) && dev_fetch(a + nq, dk[0], nk * sizeof(float)) && dev_fetch(b, dq[1], nq * sizeof(float)) &&
        dev_fetch(b + nq, dk[1], nk * sizeof(float)) && dev_fetch(ca, dc[0], 2 * stride) && dev_fetch(cb, dc[1], 2 * stride)) {
        size_t stored = 0;
        for (j = 0; j < 2 * stride; j++) diff += ca[j] != cb[j], stored += cb[j] != 0x5A;
        CHECK(memcmp(a, b, (nq + nk) * sizeof(float)) == 0 && diff == 0 && stored > 0, "rope_store_rows %s %s: q/k %s, %zu cache bytes differ",
              t->name, mode == 2 ? "NEOX" : "NORM", memcmp(a, b, (nq + nk) * sizeof(float)) ? "differ" : "equal", diff);
    }
    for (i = 0; i < 2; i++) forge_hip_arena_free(dq[i]), forge_hip_arena_free(dk[i]), forge_hip_arena_free(dc[i]);
    forge_hip_arena_free(dv), forge_hip_arena_free(dpos), forge_hip_arena_free(dseq);
    free(q), free(k), free(v), free(a), free(b), free(ca), free(cb);
}

static void test_rope_store(void) {
    size_t i;
    TEST_CASE("decode rope + KV store in one launch");
    for (i = 0; i < sizeof kv_types / sizeof kv_types[0]; i++) {
        check_rope_store_rows(kv_types[i], 32, 8, 128, 128, 0, 0);
        check_rope_store_rows(kv_types[i], 14, 2, 64, 48, 2, 16); /* partial NEOX, a ring */
    }
    for (i = 0; i < sizeof kv_types / sizeof kv_types[0]; i++) {
        check_rope_store(kv_types[i], 32, 8, 128, 128, 0, 1234, 0, 0);
        check_rope_store(kv_types[i], 32, 8, 128, 128, 0, 1234, 0, 1);
        check_rope_store(kv_types[i], 14, 2, 64, 48, 2, 77, 16, 1); /* partial NEOX, a ring */
        check_rope_store(kv_types[i], 8, 1, 256, 256, 2, 5, 0, 0);
    }
    CHECK(forge_hip_rope_store(FORGE_TYPE_Q8_0, NULL, NULL, NULL, 4, 4, 40, 40, 40, 0, 0, NULL, 1e4f, 1.0f, NULL, NULL, NULL, 0, NULL, msg,
                               sizeof msg) == -1,
          "a q8_0 cache of 40-wide heads must be refused");
}

/* A step of several sequences' store (forge_hip_kv_store_rows): rows of two sequences at their own
   positions, each sequence's cache seq_stride bytes after the one before, and a row that pads the step
   (FORGE_HIP_ROW_NO_STORE, naming sequence 0 at row 0's position with other values) that must store
   nothing: the caches must be exactly what the real rows encode, the rest untouched. */
static void check_kv_store_rows(forge_kv_type kv) {
    const uint32_t storage = forge__kv_storage_type(kv), n_cells = 16, n_kv = 2, hd = 64, n_tokens = 4;
    const uint32_t pos[4] = {3, 5, 6, 3}, seq[4] = {0, 1, 1, 0 | FORGE_HIP_ROW_NO_STORE};
    const forge_type_traits *t = forge_type_info(storage);
    const size_t rk = hd / t->block_elems * t->block_bytes, region = rk * n_kv * n_cells, stride = 2 * region;
    float *k = (float *)xmalloc((size_t)n_tokens * n_kv * hd * sizeof(float)), *v = (float *)xmalloc((size_t)n_tokens * n_kv * hd * sizeof(float));
    uint8_t *want = (uint8_t *)xmalloc(2 * stride), *got = (uint8_t *)xmalloc(2 * stride);
    void *dk, *dv, *dc, *dpos, *dseq;
    uint32_t tok, h;
    size_t j, diff = 0;
    random_floats(k, (size_t)n_tokens * n_kv * hd, -3.0f, 3.0f);
    random_floats(v, (size_t)n_tokens * n_kv * hd, -3.0f, 3.0f);
    memset(want, 0xAB, 2 * stride);
    for (tok = 0; tok < 3; tok++) /* the padding row (3) leaves the cache as row 0 made it */
        for (h = 0; h < n_kv; h++) {
            uint8_t *base = want + (size_t)seq[tok] * stride + ((size_t)pos[tok] * n_kv + h) * rk;
            forge__kv_encode(kv, k + ((size_t)tok * n_kv + h) * hd, hd, base);
            forge__kv_encode(kv, v + ((size_t)tok * n_kv + h) * hd, hd, base + region);
            gpu_row_order(kv, base, hd);
            gpu_row_order(kv, base + region, hd);
        }
    dk = dev_alloc((size_t)n_tokens * n_kv * hd * sizeof(float), k);
    dv = dev_alloc((size_t)n_tokens * n_kv * hd * sizeof(float), v);
    dpos = dev_alloc(sizeof pos, pos);
    dseq = dev_alloc(sizeof seq, seq);
    memset(got, 0xAB, 2 * stride);
    dc = dev_alloc(2 * stride, got);
    CHECK(forge_hip_kv_store_rows(storage, (const float *)dk, (const float *)dv, dc, (uint8_t *)dc + region, n_tokens, n_kv, hd, hd,
                                  (const uint32_t *)dpos, (const uint32_t *)dseq, stride, n_cells, NULL, msg, sizeof msg) == 0,
          "kv_store_rows %s: %s", t->name, msg);
    if (dev_fetch(got, dc, 2 * stride)) {
        for (j = 0; j < 2 * stride; j++) diff += got[j] != want[j];
        CHECK(diff == 0, "kv_store_rows %s: %zu of %zu bytes differ from the real rows' encoding", t->name, diff, 2 * stride);
    }
    forge_hip_arena_free(dk), forge_hip_arena_free(dv), forge_hip_arena_free(dc), forge_hip_arena_free(dpos), forge_hip_arena_free(dseq);
    free(k), free(v), free(want), free(got);
}

static void test_kv_store(void) {
    size_t i;
    TEST_CASE("kv_store, every cache type, bytes equal to forge__kv_encode, plain and ring");
    for (i = 0; i < 4; i++) {
        check_kv_store(kv_types[i], 0);
        check_kv_store(kv_types[i], 12); /* positions 17..25 wrap: cells 5..11, then 0..1 */
        check_kv_store_rows(kv_types[i]);
    }
    CHECK(forge_hip_kv_store(FORGE_TYPE_F16, NULL, NULL, NULL, NULL, 13, 2, 64, 64, 0, 12, NULL, msg, sizeof msg) == -1 && strstr(msg, "12"),
          "13 tokens into a ring of 12 cells must be refused: %s", msg);
}

/* forge__attn_task's arithmetic without a context: double accumulation over dequantized rows.
   kf/vf: dequantized K/V by position [n_ctx][n_kv][dim]. Token t at P = pos0 + t reads positions
   max(0, P - window + 1)..P (window 0: 0..P); softcap > 0 bends each score as softcap * tanh(s / softcap). */
static void attention_ref(const float *q, const float *kf, const float *vf, double *out, uint32_t n_tokens, uint32_t n_head,
                          uint32_t n_kv, uint32_t hd, uint32_t hdv, uint32_t pos0, uint32_t window, float softcap) {
    uint32_t t, h, p, i;
    double *acc = (double *)xmalloc(hdv * sizeof(double));
    const double scale = 1.0 / sqrt((double)hd);
    for (t = 0; t < n_tokens; t++)
        for (h = 0; h < n_head; h++) {
            const uint32_t kvh = h / (n_head / n_kv), last = pos0 + t, first = window && last + 1 > window ? last + 1 - window : 0;
            const float *qr = q + ((size_t)t * n_head + h) * hd;
            double max = -INFINITY, sum = 0.0;
            for (i = 0; i < hdv; i++) acc[i] = 0.0;
            for (p = first; p <= last; p++) {
                const float *kr = kf + ((size_t)p * n_kv + kvh) * hd, *vr = vf + ((size_t)p * n_kv + kvh) * hdv;
                double s = 0.0, w;
                for (i = 0; i < hd; i++) s += (double)qr[i] * kr[i];
                s *= scale;
                if (softcap > 0.0f) s = softcap * tanh(s / softcap);
                if (s > max) {
                    double shrink = exp(max - s);
                    for (i = 0; i < hdv; i++) acc[i] *= shrink;
                    sum *= shrink;
                    max = s;
                }
                w = exp(s - max);
                sum += w;
                for (i = 0; i < hdv; i++) acc[i] += w * vr[i];
            }
            for (i = 0; i < hdv; i++) out[((size_t)t * n_head + h) * hdv + i] = acc[i] / sum;
        }
    free(acc);
}

/* n_cells 0: the device cache holds every position 0..pos0+n_tokens-1 in its own row (positions
   outside a window hold real data the kernel must skip); else a ring of n_cells rows holding the
   positions the batch reads at p % n_cells, every other row 0xFF bytes: NaN in every cache type, so
   a read of a wrong cell shows up as a non-finite output. */
static void check_attention(forge_kv_type kv, uint32_t n_head, uint32_t n_kv, uint32_t hd, uint32_t hdv, uint32_t n_tokens, uint32_t pos0,
                            int split, uint32_t window, uint32_t n_cells, float softcap) {
    const uint32_t storage = forge__kv_storage_type(kv), n_ctx = pos0 + n_tokens, n_cache = n_cells ? n_cells : n_ctx;
    const uint32_t oldest = window && pos0 + 1 > window ? pos0 + 1 - window : 0;
    const forge_type_traits *t = forge_type_info(storage);
    const size_t rk = hd / t->block_elems * t->block_bytes, rv = hdv / t->block_elems * t->block_bytes;
    const size_t n_rows = (size_t)n_ctx * n_kv, n_out = (size_t)n_tokens * n_head * hdv;
    float *kraw = (float *)xmalloc(n_rows * hd * sizeof(float)), *vraw = (float *)xmalloc(n_rows * hdv * sizeof(float));
    float *kf = (float *)xmalloc(n_rows * hd * sizeof(float)), *vf = (float *)xmalloc(n_rows * hdv * sizeof(float));
    float *q = (float *)xmalloc((size_t)n_tokens * n_head * hd * sizeof(float)), *got = (float *)xmalloc(n_out * sizeof(float));
    uint8_t *ck = (uint8_t *)xmalloc(n_rows * rk), *cv = (uint8_t *)xmalloc(n_rows * rv);
    uint8_t *cache_k = (uint8_t *)xmalloc((size_t)n_cache * n_kv * rk), *cache_v = (uint8_t *)xmalloc((size_t)n_cache * n_kv * rv);
    double *ref = (double *)xmalloc(n_out * sizeof(double)), *ref_raw = (double *)xmalloc(n_out * sizeof(double));
    size_t r, scratch_bytes = split ? forge_hip_attention_scratch_bytes(n_ctx, n_tokens, n_head, hdv) : 0;
    void *dq, *dout, *dk, *dv, *scratch = NULL;
    forge_hip_attention_args a;
    uint32_t p;
    /* keys with a spread that makes the softmax peaked in places, as trained models do */
    random_floats(kraw, n_rows * hd, -1.0f, 1.0f);
    random_floats(vraw, n_rows * hdv, -1.0f, 1.0f);
    random_floats(q, (size_t)n_tokens * n_head * hd, -2.0f, 2.0f);
    for (r = 0; r < n_rows; r++) {
        forge__kv_encode(kv, kraw + r * hd, hd, ck + r * rk);
        forge__kv_encode(kv, vraw + r * hdv, hdv, cv + r * rv);
        forge_dequantize(storage, ck + r * rk, kf + r * hd, hd);
        forge_dequantize(storage, cv + r * rv, vf + r * hdv, hdv);
        gpu_row_order(kv, ck + r * rk, hd), gpu_row_order(kv, cv + r * rv, hdv);
    }
    memset(cache_k, 0xFF, (size_t)n_cache * n_kv * rk), memset(cache_v, 0xFF, (size_t)n_cache * n_kv * rv);
    for (p = n_cells ? oldest : 0; p < n_ctx; p++) { /* the rows a ring still holds; all of them without one */
        memcpy(cache_k + (size_t)(p % n_cache) * n_kv * rk, ck + (size_t)p * n_kv * rk, n_kv * rk);
        memcpy(cache_v + (size_t)(p % n_cache) * n_kv * rv, cv + (size_t)p * n_kv * rv, n_kv * rv);
    }
    attention_ref(q, kf, vf, ref, n_tokens, n_head, n_kv, hd, hdv, pos0, window, softcap);
    attention_ref(q, kraw, vraw, ref_raw, n_tokens, n_head, n_kv, hd, hdv, pos0, window, softcap);
    dq = dev_alloc((size_t)n_tokens * n_head * hd * sizeof(float), q);
    dk = dev_alloc((size_t)n_cache * n_kv * rk, cache_k);
    dv = dev_alloc((size_t)n_cache * n_kv * rv, cache_v);
    dout = dev_alloc(n_out * sizeof(float), NULL);
    if (scratch_bytes) scratch = dev_alloc(scratch_bytes, NULL);
    memset(&a, 0, sizeof a);
    a.q = (const float *)dq, a.out = (float *)dout, a.cache_k = dk, a.cache_v = dv;
    a.kv_type = storage, a.n_tokens = n_tokens, a.n_head = n_head, a.n_head_kv = n_kv, a.head_dim = hd, a.head_dim_v = hdv, a.pos0 = pos0;
    a.window = window, a.n_cells = n_cells, a.softcap = softcap;
    CHECK(forge_hip_attention(&a, scratch, scratch_bytes, NULL, msg, sizeof msg) == 0, "attention %s: %s", t->name, msg);
    if (dev_fetch(got, dout, n_out * sizeof(float))) {
        double err = norm_error_d(got, ref, n_out), err_raw = norm_error_d(got, ref_raw, n_out);
        double bound = kv == FORGE_KV_F32 ? 1e-5 : kv == FORGE_KV_F16 ? 2e-3 : kv == FORGE_KV_Q8_0 ? 3e-2 : 3e-1;
        const double tolerance = n_tokens > 1 && kv != FORGE_KV_F32 ? 1e-3 : 1e-5; /* prompts: f16 operands on the matrix units */
        printf("  attention %-4s heads %2u/%u dims %3u/%3u tokens %3u pos0 %4u %s window %4u cells %4u cap %2g: err %.2e (vs unquantized K/V %.2e)\n",
               t->name, n_head, n_kv, hd, hdv, n_tokens, pos0, scratch_bytes ? "split " : "single", window, n_cells, (double)softcap, err,
               err_raw);
        CHECK(err < tolerance, "attention %s heads %u/%u dims %u/%u tokens %u pos0 %u window %u cells %u softcap %g: normalized error %.3e",
              t->name, n_head, n_kv, hd, hdv, n_tokens, pos0, window, n_cells, (double)softcap, err);
        CHECK(err_raw < bound, "attention %s vs unquantized K/V: %.3e over the bound %.0e", t->name, err_raw, bound);
    }
    if (n_tokens == 1) { /* the decode step of a graph: position from device memory, grid for a longer context */
        const uint32_t at_max = n_cells && !window ? pos0 : pos0 + 5000;
        const size_t at_bytes = split ? forge_hip_attention_scratch_bytes(at_max + 1, 1, n_head, hdv) : 0;
        void *at_scratch = at_bytes ? dev_alloc(at_bytes, NULL) : NULL, *dpos = dev_alloc(sizeof pos0, &pos0);
        forge_hip_attention_args b = a;
        b.pos0 = at_max;
        CHECK(forge_hip_attention_at(&b, (const uint32_t *)dpos, at_scratch, at_bytes, NULL, msg, sizeof msg) == 0, "attention_at %s: %s",
              t->name, msg);
        if (dev_fetch(got, dout, n_out * sizeof(float))) {
            double err = norm_error_d(got, ref, n_out);
            printf("  attention_at %-4s heads %2u/%u dims %3u/%3u pos %5u (grid for %5u) %s window %4u cells %4u cap %2g: err %.2e\n",
                   t->name, n_head, n_kv, hd, hdv, pos0, at_max, at_bytes ? "split " : "single", window, n_cells, (double)softcap, err);
            CHECK(err < 1e-5, "attention_at %s heads %u/%u dims %u/%u pos %u window %u cells %u softcap %g: normalized error %.3e", t->name,
                  n_head, n_kv, hd, hdv, pos0, window, n_cells, (double)softcap, err);
        }
        if (at_bytes) { /* the splits merged in the same launch: zeroed counters, left zeroed, the same bits on a replay */
            uint32_t *counts = (uint32_t *)xmalloc(n_head * sizeof(uint32_t));
            float *again = (float *)xmalloc(n_out * sizeof(float));
            void *dcount = dev_alloc(n_head * sizeof(uint32_t), NULL);
            uint32_t h, nonzero = 0;
            memset(counts, 0, n_head * sizeof(uint32_t));
            forge_hip_copy_to_device(dcount, counts, n_head * sizeof(uint32_t), NULL, msg, sizeof msg);
            b.counters = (uint32_t *)dcount;
            CHECK(forge_hip_attention_at(&b, (const uint32_t *)dpos, at_scratch, at_bytes, NULL, msg, sizeof msg) == 0 &&
                      dev_fetch(got, dout, n_out * sizeof(float)) &&
                      forge_hip_attention_at(&b, (const uint32_t *)dpos, at_scratch, at_bytes, NULL, msg, sizeof msg) == 0 &&
                      dev_fetch(again, dout, n_out * sizeof(float)) && dev_fetch(counts, dcount, n_head * sizeof(uint32_t)),
                  "attention_at with counters %s: %s", t->name, msg);
            {
                double err = norm_error_d(got, ref, n_out);
                for (h = 0; h < n_head; h++) nonzero += counts[h] != 0;
                printf("  attention_at %-4s heads %2u/%u dims %3u/%3u pos %5u (grid for %5u) merged in the launch: err %.2e\n", t->name,
                       n_head, n_kv, hd, hdv, pos0, at_max, err);
                CHECK(err < 1e-5, "attention_at merged in the launch %s heads %u/%u dims %u/%u pos %u window %u cells %u: error %.3e", t->name,
                      n_head, n_kv, hd, hdv, pos0, window, n_cells, err);
                CHECK(memcmp(got, again, n_out * sizeof(float)) == 0, "attention_at merged in the launch %s pos %u: a replay differs", t->name,
                      pos0);
                CHECK(nonzero == 0, "attention_at %s pos %u: %u merge counters left nonzero", t->name, pos0, nonzero);
            }
            forge_hip_arena_free(dcount), free(counts), free(again);
        }
        forge_hip_arena_free(at_scratch), forge_hip_arena_free(dpos);
    }
    forge_hip_arena_free(dq), forge_hip_arena_free(dk), forge_hip_arena_free(dv), forge_hip_arena_free(dout), forge_hip_arena_free(scratch);
    free(kraw), free(vraw), free(kf), free(vf), free(q), free(got), free(ck), free(cv), free(cache_k), free(cache_v), free(ref), free(ref_raw);
}

static void test_attention(void) {
    size_t i;
    forge_hip_attention_args a;
    TEST_CASE("attention, every cache type, single pass and split-KV, window, ring, soft-cap");
    for (i = 0; i < 4; i++) {
        check_attention(kv_types[i], 8, 2, 128, 128, 1, 3000, 0, 0, 0, 0.0f);  /* decode, long context, one pass */
        check_attention(kv_types[i], 8, 2, 128, 128, 1, 3000, 1, 0, 0, 0.0f);  /* the same, split over the context */
        check_attention(kv_types[i], 8, 2, 128, 128, 20, 50, 0, 0, 0, 0.0f);   /* prompt continuing a context */
        check_attention(kv_types[i], 4, 4, 64, 64, 3, 600, 1, 0, 0, 0.0f);     /* small heads, no grouping, split */
        check_attention(kv_types[i], 6, 3, 192, 128, 5, 0, 0, 0, 0, 0.0f);     /* K and V of different widths, from 0 */
        check_attention(kv_types[i], 16, 8, 256, 256, 2, 700, 1, 0, 0, 0.0f);  /* wide heads */
        check_attention(kv_types[i], 8, 4, 256, 256, 1, 1000, 1, 128, 0, 50.0f); /* window in a full cache, split, soft-cap */
        check_attention(kv_types[i], 8, 4, 256, 256, 5, 300, 1, 64, 68, 0.0f);   /* ring of exactly window + tokens - 1 cells */
        check_attention(kv_types[i], 4, 2, 128, 128, 20, 30, 0, 8, 30, 0.7f);    /* prompt in a ring with 3 spare cells, hard cap */
        check_attention(kv_types[i], 8, 2, 128, 128, 3, 100, 1, 512, 0, 0.0f);   /* window wider than the context */
        check_attention(kv_types[i], 4, 2, 128, 128, 20, 0, 0, 8, 0, 30.0f);     /* prompt from 0 across the window */
        check_attention(kv_types[i], 8, 4, 256, 256, 1, 2000, 1, 0, 0, 1.0f);    /* soft-cap alone, long context, saturating */
        check_attention(kv_types[i], 4, 1, 256, 256, 1, 3000, 1, 1024, 1024, 0.0f); /* decode in a ring of window cells */
        check_attention(kv_types[i], 32, 8, 128, 128, 1, 16000, 1, 0, 0, 0.0f);  /* llama-3-8b decode, long context, group of 4 */
        check_attention(kv_types[i], 16, 2, 128, 128, 1, 20000, 1, 0, 0, 0.0f);  /* group of 8, longer */
        check_attention(kv_types[i], 8, 1, 64, 64, 1, 5000, 1, 0, 0, 0.0f);      /* small heads, group of 8 */
        check_attention(kv_types[i], 8, 2, 256, 256, 1, 8000, 1, 4096, 0, 30.0f); /* wide heads, window, soft-cap */
        check_attention(kv_types[i], 12, 2, 128, 128, 1, 6000, 1, 0, 0, 0.0f);  /* group of 6 */
        check_attention(kv_types[i], 8, 8, 128, 128, 1, 5000, 1, 2048, 2048, 0.0f); /* no grouping, ring of window cells */
        check_attention(kv_types[i], 16, 8, 64, 64, 1, 12000, 1, 1000, 1500, 0.5f); /* ring with spare cells, hard cap */
        check_attention(kv_types[i], 8, 2, 128, 128, 1, 7000, 0, 0, 0, 0.0f);     /* no scratch: one pass per block */
        check_attention(kv_types[i], 32, 8, 128, 128, 1, 0, 1, 0, 0, 0.0f);      /* decode at the first positions: one split, */
        check_attention(kv_types[i], 32, 8, 128, 128, 1, 127, 1, 0, 0, 0.0f);    /* still one (128 positions), */
        check_attention(kv_types[i], 32, 8, 128, 128, 1, 128, 1, 0, 0, 0.0f);    /* five, */
        check_attention(kv_types[i], 12, 2, 128, 128, 1, 200, 1, 0, 0, 0.0f);    /* seven (a group of 6), */
        check_attention(kv_types[i], 12, 2, 128, 128, 1, 300, 1, 0, 0, 0.0f);    /* ten */
        check_attention(kv_types[i], 40, 2, 64, 64, 1, 500, 1, 0, 0, 0.0f);      /* a group of 20: five blocks of four */
        check_attention(kv_types[i], 14, 2, 128, 128, 1, 900, 1, 100, 0, 0.0f);  /* a group of 7: blocks of 4 and 3, window */
        check_attention(kv_types[i], 8, 8, 64, 64, 7, 50, 0, 0, 100, 0.0f);      /* n_cells without a window: no wrap */
    }
    /* the heads a decode block takes follow the span (1 below 129 positions for 32 / 8, 2 to 8192, 4
       beyond; a graph's grid is sized for pos + 5000 above): every part size against the reference */
    for (i = 0; i < 4; i++) {
        check_attention(kv_types[i], 32, 8, 128, 128, 1, 9000, 1, 0, 0, 0.0f); /* parts of 4, the grid's too */
        check_attention(kv_types[i], 32, 8, 128, 128, 1, 3000, 0, 0, 0, 0.0f); /* parts of 2, no scratch */
    }
    /* a record is (m, l, o) per head; a decode step of more than 128 positions splits into chunks of 32
       or more positions, at most 128 splits; prompts into chunks of 256, at most 32 */
    CHECK(forge_hip_attention_scratch_bytes(128, 1, 32, 128) == 0, "a context of up to 128 positions needs no scratch");
    CHECK(forge_hip_attention_scratch_bytes(129, 1, 32, 128) == (size_t)5 * 32 * 130 * 4, "129 positions: five decode splits");
    CHECK(forge_hip_attention_scratch_bytes(300, 1, 32, 128) == (size_t)10 * 32 * 130 * 4, "a short context: ten decode splits");
    CHECK(forge_hip_attention_scratch_bytes(32768, 1, 32, 128) == (size_t)128 * 32 * 130 * 4, "scratch of a long context");
    CHECK(forge_hip_attention_scratch_bytes(32768, 8, 32, 128) == (size_t)32 * 8 * 32 * 130 * 4, "scratch of a long context, 8 tokens");
    memset(&a, 0, sizeof a);
    a.kv_type = FORGE_TYPE_F16, a.n_tokens = 5, a.n_head = 4, a.n_head_kv = 2, a.head_dim = 64, a.head_dim_v = 64, a.pos0 = 300;
    a.window = 64, a.n_cells = 67; /* needs 68 */
    CHECK(forge_hip_attention(&a, NULL, 0, NULL, msg, sizeof msg) == -1 && strstr(msg, "67"), "a ring too small must be refused: %s", msg);
    a.n_cells = 0, a.softcap = -1.0f;
    CHECK(forge_hip_attention(&a, NULL, 0, NULL, msg, sizeof msg) == -1, "a negative soft-cap must be refused");
}

/* Prompt batches (n_tokens > 1) run the tiled kernels: query tiles of one KV head's group against
   tiles of the cache. Token counts around the tiles (2, 17, 64, 300), from position 0 and deep in a
   context, head dims 64 / 128 / 256 and uneven K / V widths, group ratios 1, 4, 6 and 8, windows in
   full caches and in rings of exactly window + tokens - 1 cells, soft-caps, and split positions. */
static void test_attention_prompt(void) {
    size_t i;
    TEST_CASE("prompt attention, tiled: every cache type, token counts, head dims, groups, window, ring, soft-cap, splits");
    for (i = 0; i < 4; i++) {
        check_attention(kv_types[i], 8, 8, 64, 64, 2, 0, 0, 0, 0, 0.0f);          /* two tokens from 0, no grouping */
        check_attention(kv_types[i], 8, 2, 128, 128, 2, 4000, 1, 0, 0, 0.0f);     /* two tokens deep in a context, split */
        check_attention(kv_types[i], 32, 8, 128, 128, 17, 0, 0, 0, 0, 0.0f);      /* llama-3-8b's heads, a partial tile */
        check_attention(kv_types[i], 32, 4, 128, 128, 17, 700, 1, 0, 0, 0.0f);    /* group of 8, continuing, split */
        check_attention(kv_types[i], 8, 8, 64, 64, 64, 0, 0, 0, 0, 0.0f);         /* one whole tile */
        check_attention(kv_types[i], 16, 2, 64, 64, 64, 1000, 1, 0, 0, 0.0f);     /* group of 8 over a long context, split */
        check_attention(kv_types[i], 8, 2, 128, 128, 300, 0, 0, 0, 0, 0.0f);      /* several tiles from 0, causal edges */
        check_attention(kv_types[i], 8, 1, 64, 64, 300, 600, 1, 0, 0, 0.0f);      /* 300 continuing, group of 8, split */
        check_attention(kv_types[i], 12, 2, 128, 128, 100, 700, 1, 0, 0, 0.0f);   /* qwen2.5's group of 6, split */
        check_attention(kv_types[i], 8, 4, 256, 256, 17, 500, 1, 64, 80, 50.0f);  /* gemma dims, window in a ring, soft-cap */
        check_attention(kv_types[i], 8, 8, 256, 256, 64, 0, 0, 32, 0, 30.0f);     /* window narrower than a tile, from 0 */
        check_attention(kv_types[i], 8, 1, 256, 256, 300, 500, 1, 128, 427, 0.0f); /* group of 8, ring of window + 299 cells */
        check_attention(kv_types[i], 8, 2, 128, 128, 17, 3000, 1, 1024, 1040, 0.0f); /* wide window in a ring, split */
        check_attention(kv_types[i], 4, 4, 128, 128, 300, 50, 0, 100, 0, 0.7f);   /* window in a full cache, hard cap */
        check_attention(kv_types[i], 6, 3, 192, 128, 64, 50, 0, 0, 0, 0.0f);      /* K and V of different widths */
        check_attention(kv_types[i], 8, 2, 64, 128, 17, 30, 0, 0, 0, 0.0f);       /* V wider than K */
    }
    /* float caches also take head dims that are not multiples of 32 (80: the matrix units; 72: not) */
    check_attention(FORGE_KV_F16, 4, 2, 80, 80, 17, 10, 0, 0, 0, 0.0f);
    check_attention(FORGE_KV_F16, 4, 2, 72, 72, 64, 10, 0, 16, 0, 0.0f);
    check_attention(FORGE_KV_F32, 4, 2, 72, 72, 64, 10, 0, 16, 0, 0.0f);
    check_attention(FORGE_KV_F16, 4, 2, 320, 320, 5, 40, 0, 0, 0, 0.0f);     /* wider than the tiles: the per-query kernel */
}

/* ---- elementwise and argmax ---- */

static void test_elementwise(void) {
    const size_t n = 100003;
    float *a = (float *)xmalloc(n * sizeof(float)), *b = (float *)xmalloc(n * sizeof(float)), *ref = (float *)xmalloc(n * sizeof(float));
    float *got = (float *)xmalloc(n * sizeof(float));
    void *da, *db, *dout, *dscratch;
    int32_t index = -1;
    size_t i;
    TEST_CASE("add, swiglu, argmax");
    random_floats(a, n, -8.0f, 8.0f);
    random_floats(b, n, -2.0f, 2.0f);
    da = dev_alloc(n * sizeof(float), a);
    db = dev_alloc(n * sizeof(float), b);
    for (i = 0; i < n; i++) ref[i] = a[i] + b[i];
    CHECK(forge_hip_add((float *)da, (const float *)db, n, NULL, msg, sizeof msg) == 0, "add: %s", msg);
    if (dev_fetch(got, da, n * sizeof(float))) {
        double err = norm_error_f(got, ref, n);
        printf("  add %zu: err %.2e\n", n, err);
        CHECK(err < 1e-6, "add: normalized error %.3e", err);
    }
    forge_hip_copy_to_device(da, a, n * sizeof(float), NULL, msg, sizeof msg);
    for (i = 0; i < n; i++) ref[i] = a[i] / (1.0f + expf(-a[i])) * b[i];
    CHECK(forge_hip_swiglu((float *)da, (const float *)db, n, NULL, msg, sizeof msg) == 0, "swiglu: %s", msg);
    if (dev_fetch(got, da, n * sizeof(float))) {
        double err = norm_error_f(got, ref, n);
        printf("  swiglu %zu: err %.2e\n", n, err);
        CHECK(err < 1e-6, "swiglu: normalized error %.3e", err);
    }
    forge_hip_arena_free(da), forge_hip_arena_free(db);

    { /* argmax over a vocabulary-sized vector: a planted maximum, then a tie (first wins), then all equal */
        const uint32_t vocab = 151936;
        float *logits = (float *)xmalloc(vocab * sizeof(float));
        random_floats(logits, vocab, -10.0f, 10.0f);
        logits[123457] = 11.0f;
        da = dev_alloc(vocab * sizeof(float), logits);
        dout = dev_alloc(sizeof(int32_t), NULL);
        dscratch = dev_alloc(forge_hip_argmax_scratch_bytes(), NULL);
        CHECK(forge_hip_argmax((const float *)da, vocab, dscratch, (int32_t *)dout, NULL, msg, sizeof msg) == 0, "argmax: %s", msg);
        if (dev_fetch(&index, dout, sizeof index)) CHECK(index == 123457, "argmax: %d, expected 123457", (int)index);
        logits[99] = 11.0f;
        forge_hip_copy_to_device(da, logits, vocab * sizeof(float), NULL, msg, sizeof msg);
        forge_hip_argmax((const float *)da, vocab, dscratch, (int32_t *)dout, NULL, msg, sizeof msg);
        if (dev_fetch(&index, dout, sizeof index)) CHECK(index == 99, "argmax tie: %d, expected 99", (int)index);
        for (i = 0; i < vocab; i++) logits[i] = -3.0f;
        forge_hip_copy_to_device(da, logits, vocab * sizeof(float), NULL, msg, sizeof msg);
        forge_hip_argmax((const float *)da, vocab, dscratch, (int32_t *)dout, NULL, msg, sizeof msg);
        if (dev_fetch(&index, dout, sizeof index)) CHECK(index == 0, "argmax all equal: %d, expected 0", (int)index);
        /* the last of several maxima far apart in the vector, the others -inf and NaN */
        for (i = 0; i < vocab; i++) logits[i] = i % 7 ? -INFINITY : NAN;
        logits[150001] = 1.0f, logits[77] = 1.0f, logits[5000] = 1.0f;
        forge_hip_copy_to_device(da, logits, vocab * sizeof(float), NULL, msg, sizeof msg);
        forge_hip_argmax((const float *)da, vocab, dscratch, (int32_t *)dout, NULL, msg, sizeof msg);
        if (dev_fetch(&index, dout, sizeof index)) CHECK(index == 77, "argmax with -inf and NaN: %d, expected 77", (int)index);
        forge_hip_argmax((const float *)da, 1000, dscratch, (int32_t *)dout, NULL, msg, sizeof msg);
        if (dev_fetch(&index, dout, sizeof index)) CHECK(index == 77, "argmax of 1000: %d, expected 77", (int)index);
        for (i = 0; i < vocab; i++) logits[i] = -INFINITY;
        forge_hip_copy_to_device(da, logits, vocab * sizeof(float), NULL, msg, sizeof msg);
        forge_hip_argmax((const float *)da, vocab, dscratch, (int32_t *)dout, NULL, msg, sizeof msg);
        if (dev_fetch(&index, dout, sizeof index)) CHECK(index == 0, "argmax all -inf: %d, expected 0", (int)index);
        forge_hip_arena_free(da), forge_hip_arena_free(dout), forge_hip_arena_free(dscratch);
        free(logits);
    }
    free(a), free(b), free(ref), free(got);
}

/* ---- geglu, glu_split, copy_cols, softcap, sigmoid_scale ---- */

static double gelu_ref(double x) { return 0.5 * x * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x))); }

static void check_glu_split(uint32_t n_tokens, uint32_t n, int act) {
    const size_t n_in = (size_t)n_tokens * 2 * n, n_out = (size_t)n_tokens * n;
    float *src = (float *)xmalloc(n_in * sizeof(float)), *got = (float *)xmalloc(n_out * sizeof(float));
    double *ref = (double *)xmalloc(n_out * sizeof(double));
    void *ds, *dd;
    size_t t, i;
    random_floats(src, n_in, -6.0f, 6.0f);
    for (t = 0; t < n_tokens; t++)
        for (i = 0; i < n; i++) {
            const double g = src[t * 2 * n + i], u = src[t * 2 * n + n + i];
            ref[t * n + i] = (act ? gelu_ref(g) : g / (1.0 + exp(-g))) * u;
        }
    ds = dev_alloc(n_in * sizeof(float), src);
    dd = dev_alloc(n_out * sizeof(float), NULL);
    CHECK(forge_hip_glu_split((float *)dd, (const float *)ds, n_tokens, n, act, NULL, msg, sizeof msg) == 0, "glu_split: %s", msg);
    if (dev_fetch(got, dd, n_out * sizeof(float))) {
        double err = norm_error_d(got, ref, n_out);
        printf("  glu_split %s %u tokens x %u: err %.2e\n", act ? "gelu" : "silu", n_tokens, n, err);
        CHECK(err < 1e-6, "glu_split act %d %u x %u: normalized error %.3e", act, n_tokens, n, err);
    }
    forge_hip_arena_free(ds), forge_hip_arena_free(dd);
    free(src), free(got), free(ref);
}

static void test_rows_more(void) {
    const size_t n = 100003;
    float *a = (float *)xmalloc(n * sizeof(float)), *b = (float *)xmalloc(n * sizeof(float)), *got = (float *)xmalloc(n * sizeof(float));
    double *ref = (double *)xmalloc(n * sizeof(double));
    void *da, *db;
    size_t i, t;
    TEST_CASE("geglu, glu_split, copy_cols, softcap, sigmoid_scale");
    random_floats(a, n, -6.0f, 6.0f);
    random_floats(b, n, -2.0f, 2.0f);
    da = dev_alloc(n * sizeof(float), a);
    db = dev_alloc(n * sizeof(float), b);
    for (i = 0; i < n; i++) ref[i] = gelu_ref(a[i]) * b[i];
    CHECK(forge_hip_geglu((float *)da, (const float *)db, n, NULL, msg, sizeof msg) == 0, "geglu: %s", msg);
    if (dev_fetch(got, da, n * sizeof(float))) {
        double err = norm_error_d(got, ref, n);
        printf("  geglu %zu: err %.2e\n", n, err);
        CHECK(err < 1e-6, "geglu: normalized error %.3e", err);
    }
    { /* soft-cap over values well past the cap, so tanh saturates */
        for (i = 0; i < n; i++) a[i] = rng_uniform(-150.0f, 150.0f), ref[i] = 30.0 * tanh(a[i] / 30.0);
        forge_hip_copy_to_device(da, a, n * sizeof(float), NULL, msg, sizeof msg);
        CHECK(forge_hip_softcap((float *)da, n, 30.0f, NULL, msg, sizeof msg) == 0, "softcap: %s", msg);
        if (dev_fetch(got, da, n * sizeof(float))) {
            double err = norm_error_d(got, ref, n);
            printf("  softcap 30 over %zu: err %.2e\n", n, err);
            CHECK(err < 1e-6, "softcap: normalized error %.3e", err);
        }
    }
    forge_hip_arena_free(da), forge_hip_arena_free(db);
    check_glu_split(7, 1000, 0);
    check_glu_split(7, 1000, 1);
    check_glu_split(70000, 3, 1); /* more tokens than one grid dimension holds */
    { /* copy_cols: the middle of a fused QKV row, exact */
        const uint32_t n_tokens = 9, width = 1000, offset = 300, cols = 500;
        float *src = (float *)xmalloc((size_t)n_tokens * width * sizeof(float)), *want = (float *)xmalloc((size_t)n_tokens * cols * sizeof(float));
        void *ds, *dd;
        size_t diff = 0;
        random_floats(src, (size_t)n_tokens * width, -1.0f, 1.0f);
        for (t = 0; t < n_tokens; t++) memcpy(want + t * cols, src + t * width + offset, cols * sizeof(float));
        ds = dev_alloc((size_t)n_tokens * width * sizeof(float), src);
        dd = dev_alloc((size_t)n_tokens * cols * sizeof(float), NULL);
        CHECK(forge_hip_copy_cols((float *)dd, (const float *)ds, n_tokens, width, offset, cols, NULL, msg, sizeof msg) == 0, "copy_cols: %s", msg);
        if (dev_fetch(got, dd, (size_t)n_tokens * cols * sizeof(float))) {
            for (i = 0; i < (size_t)n_tokens * cols; i++) diff += memcmp(got + i, want + i, sizeof(float)) != 0;
            printf("  copy_cols %u tokens, columns %u..%u of %u: %zu differ\n", n_tokens, offset, offset + cols, width, diff);
            CHECK(diff == 0, "copy_cols: %zu values differ", diff);
        }
        CHECK(forge_hip_copy_cols((float *)dd, (const float *)ds, n_tokens, width, 600, 401, NULL, msg, sizeof msg) == -1,
              "columns past the row must be refused");
        forge_hip_arena_free(ds), forge_hip_arena_free(dd);
        free(src), free(want);
    }
    { /* sigmoid_scale: one gate per token */
        const uint32_t n_tokens = 13, cols = 777;
        float gates[13];
        void *dx, *ds;
        random_floats(a, (size_t)n_tokens * cols, -3.0f, 3.0f);
        random_floats(gates, n_tokens, -8.0f, 8.0f);
        for (t = 0; t < n_tokens; t++)
            for (i = 0; i < cols; i++) ref[t * cols + i] = a[t * cols + i] / (1.0 + exp(-(double)gates[t]));
        dx = dev_alloc((size_t)n_tokens * cols * sizeof(float), a);
        ds = dev_alloc(sizeof gates, gates);
        CHECK(forge_hip_sigmoid_scale((float *)dx, (const float *)ds, n_tokens, cols, NULL, msg, sizeof msg) == 0, "sigmoid_scale: %s", msg);
        if (dev_fetch(got, dx, (size_t)n_tokens * cols * sizeof(float))) {
            double err = norm_error_d(got, ref, (size_t)n_tokens * cols);
            printf("  sigmoid_scale %u tokens x %u: err %.2e\n", n_tokens, cols, err);
            CHECK(err < 1e-6, "sigmoid_scale: normalized error %.3e", err);
        }
        forge_hip_arena_free(dx), forge_hip_arena_free(ds);
    }
    CHECK(forge_hip_softcap(NULL, 10, 0.0f, NULL, msg, sizeof msg) == -1, "a zero cap must be refused");
    CHECK(forge_hip_glu_split(NULL, NULL, 1, 4, 2, NULL, msg, sizeof msg) == -1, "activation 2 must be refused");
    free(a), free(b), free(got), free(ref);
}

/* ---- mixture of experts ---- */

/* p = softmax(logits) in float as the spec says, then the k largest p, the lower index on ties */
static void moe_route_ref(const float *logits, uint32_t n_expert, uint32_t k, int renorm, float *p, uint32_t *ids, float *weights) {
    uint32_t e, i;
    float max = -INFINITY, sum = 0.0f, chosen = 0.0f;
    unsigned char taken[256] = {0};
    for (e = 0; e < n_expert; e++) max = logits[e] > max ? logits[e] : max;
    for (e = 0; e < n_expert; e++) p[e] = expf(logits[e] - max), sum += p[e];
    for (e = 0; e < n_expert; e++) p[e] /= sum;
    for (i = 0; i < k; i++) {
        uint32_t best = n_expert;
        for (e = 0; e < n_expert; e++)
            if (!taken[e] && (best == n_expert || p[e] > p[best])) best = e;
        taken[best] = 1, ids[i] = best, weights[i] = p[best], chosen += p[best];
    }
    if (renorm)
        for (i = 0; i < k; i++) weights[i] /= chosen;
}

static void check_moe_route(uint32_t n_tokens, uint32_t n_expert, uint32_t k, int renorm) {
    float *logits = (float *)xmalloc((size_t)n_tokens * n_expert * sizeof(float)), *got = (float *)xmalloc((size_t)n_tokens * 2 * k * sizeof(float));
    float *p = (float *)xmalloc(n_expert * sizeof(float)), *want_w = (float *)xmalloc((size_t)n_tokens * k * sizeof(float));
    float *got_w = (float *)xmalloc((size_t)n_tokens * k * sizeof(float));
    uint32_t *ids = (uint32_t *)xmalloc(k * sizeof(uint32_t));
    void *dl, *dr;
    uint32_t t, i, e, bad_ids = 0;
    random_floats(logits, (size_t)n_tokens * n_expert, -4.0f, 4.0f);
    for (e = 0; e < n_expert; e++) logits[e] = 0.5f; /* token 0: every expert ties */
    if (n_tokens > 1 && n_expert > 2) logits[n_expert + 1] = logits[n_expert + n_expert - 1] = 9.0f; /* token 1: two equal maxima */
    dl = dev_alloc((size_t)n_tokens * n_expert * sizeof(float), logits);
    dr = dev_alloc((size_t)n_tokens * 2 * k * sizeof(float), NULL);
    CHECK(forge_hip_moe_route((const float *)dl, n_tokens, n_expert, k, renorm, (float *)dr, NULL, msg, sizeof msg) == 0, "moe_route: %s", msg);
    if (dev_fetch(got, dr, (size_t)n_tokens * 2 * k * sizeof(float))) {
        double err;
        for (t = 0; t < n_tokens; t++) {
            unsigned char seen[256] = {0};
            moe_route_ref(logits + (size_t)t * n_expert, n_expert, k, renorm, p, ids, want_w + (size_t)t * k);
            for (i = 0; i < k; i++) {
                const float id = got[(size_t)t * 2 * k + i];
                const uint32_t g = (uint32_t)id;
                got_w[(size_t)t * k + i] = got[(size_t)t * 2 * k + k + i];
                if (!(id >= 0.0f && id < (float)n_expert) || (float)g != id || seen[g]) { bad_ids++; continue; }
                seen[g] = 1;
                /* exact where p ties exactly (tokens 0 and 1 plant ties); elsewhere a different device
                   sum order may swap two p within an ulp or two */
                if (t < 2 ? g != ids[i] : fabsf(p[g] - p[ids[i]]) > 1e-6f * p[ids[i]]) bad_ids++;
            }
        }
        err = norm_error_f(got_w, want_w, (size_t)n_tokens * k);
        printf("  moe_route %2u tokens, top %3u of %3u%s: %u wrong ids, weights err %.2e\n", n_tokens, k, n_expert, renorm ? " renorm" : "       ",
               bad_ids, err);
        CHECK(bad_ids == 0, "moe_route top %u of %u: %u ids wrong", k, n_expert, bad_ids);
        CHECK(err < 1e-6, "moe_route top %u of %u: weights normalized error %.3e", k, n_expert, err);
    }
    forge_hip_arena_free(dl), forge_hip_arena_free(dr);
    free(logits), free(got), free(p), free(want_w), free(got_w), free(ids);
}

/* A route of k distinct experts per token, drawn from all but the last expert when k < n_expert (so
   the tiled path meets an expert nobody chose), weights random. */
static void random_route(float *route, uint32_t n_tokens, uint32_t n_expert, uint32_t k) {
    const uint32_t pool = k < n_expert ? n_expert - 1 : n_expert;
    uint32_t t, i, perm[256];
    for (t = 0; t < n_tokens; t++) {
        for (i = 0; i < pool; i++) perm[i] = i;
        for (i = 0; i < k; i++) { /* partial Fisher-Yates */
            const uint32_t j = i + rng_u32() % (pool - i), tmp = perm[i];
            perm[i] = perm[j], perm[j] = tmp;
            route[(size_t)t * 2 * k + i] = (float)perm[i];
            route[(size_t)t * 2 * k + k + i] = rng_uniform(0.0f, 1.0f);
        }
    }
}

static void check_matmul_id(uint32_t type, uint32_t n_expert, uint32_t k, uint32_t n_rows, uint32_t n_cols, uint32_t n_tokens, int x_per_slot) {
    const forge_type_traits *tt = forge_type_info(type);
    const size_t row_bytes = (size_t)n_cols / tt->block_elems * tt->block_bytes, expert_bytes = row_bytes * n_rows;
    const size_t n_pairs = (size_t)n_tokens * k, n_x = (x_per_slot ? n_pairs : n_tokens) * n_cols, n_out = n_pairs * n_rows;
    uint8_t *w = (uint8_t *)xmalloc(expert_bytes * n_expert);
    float *wf = (float *)xmalloc((size_t)n_expert * n_rows * n_cols * sizeof(float)), *x = (float *)xmalloc(n_x * sizeof(float));
    float *route = (float *)xmalloc(n_pairs * 2 * sizeof(float)), *got = (float *)xmalloc(n_out * sizeof(float));
    double *ref = (double *)xmalloc(n_out * sizeof(double));
    void *dw, *dx, *dr, *dy;
    size_t pair;
    uint32_t r, c;
    random_blocks(type, w, (uint64_t)n_expert * n_rows * (n_cols / tt->block_elems));
    forge_dequantize(type, w, wf, (uint64_t)n_expert * n_rows * n_cols);
    random_floats(x, n_x, -1.0f, 1.0f);
    random_route(route, n_tokens, n_expert, k);
    for (pair = 0; pair < n_pairs; pair++) {
        const uint32_t e = (uint32_t)route[(pair / k) * 2 * k + pair % k];
        const float *xin = x + (x_per_slot ? pair : pair / k) * n_cols;
        for (r = 0; r < n_rows; r++) {
            const float *wr = wf + ((size_t)e * n_rows + r) * n_cols;
            double s = 0.0;
            for (c = 0; c < n_cols; c++) s += (double)wr[c] * xin[c];
            ref[pair * n_rows + r] = s;
        }
    }
    dw = dev_weights(type, n_cols, expert_bytes * n_expert, w);
    dx = dev_alloc(n_x * sizeof(float), x);
    dr = dev_alloc(n_pairs * 2 * sizeof(float), route);
    dy = dev_alloc(n_out * sizeof(float), NULL);
    CHECK(forge_hip_matmul_id(type, dw, expert_bytes, n_rows, n_cols, (const float *)dx, x_per_slot, (const float *)dr, k, n_tokens, (float *)dy,
                              NULL, msg, sizeof msg) == 0,
          "matmul_id %s: %s", tt->name, msg);
    if (dev_fetch(got, dy, n_out * sizeof(float))) {
        double err = norm_error_d(got, ref, n_out);
        printf("  matmul_id %-6s %u experts top %u, %4u x %4u, %3u tokens (%4zu pairs)%s: err %.2e\n", tt->name, n_expert, k, n_rows, n_cols,
               n_tokens, n_pairs, x_per_slot ? " x per slot" : "           ", err);
        CHECK(err < 1e-5, "matmul_id %s %u experts top %u %ux%u tokens %u: normalized error %.3e", tt->name, n_expert, k, n_rows, n_cols, n_tokens,
              err);
    }
    forge_hip_arena_free(dw), forge_hip_arena_free(dx), forge_hip_arena_free(dr), forge_hip_arena_free(dy);
    free(w), free(wf), free(x), free(route), free(got), free(ref);
}

static void check_moe_sum(uint32_t n_tokens, uint32_t k, uint32_t n) {
    const size_t n_src = (size_t)n_tokens * k * n, n_out = (size_t)n_tokens * n;
    float *src = (float *)xmalloc(n_src * sizeof(float)), *route = (float *)xmalloc((size_t)n_tokens * 2 * k * sizeof(float));
    float *got = (float *)xmalloc(n_out * sizeof(float));
    double *ref = (double *)xmalloc(n_out * sizeof(double));
    void *ds, *dr, *dd;
    size_t t, j, i;
    random_floats(src, n_src, -2.0f, 2.0f);
    random_route(route, n_tokens, 8, k);
    for (t = 0; t < n_tokens; t++)
        for (i = 0; i < n; i++) {
            double s = 0.0;
            for (j = 0; j < k; j++) s += (double)route[t * 2 * k + k + j] * src[(t * k + j) * n + i];
            ref[t * n + i] = s;
        }
    ds = dev_alloc(n_src * sizeof(float), src);
    dr = dev_alloc((size_t)n_tokens * 2 * k * sizeof(float), route);
    dd = dev_alloc(n_out * sizeof(float), NULL);
    CHECK(forge_hip_moe_sum((const float *)ds, (const float *)dr, n_tokens, k, n, (float *)dd, NULL, msg, sizeof msg) == 0, "moe_sum: %s", msg);
    if (dev_fetch(got, dd, n_out * sizeof(float))) {
        double err = norm_error_d(got, ref, n_out);
        printf("  moe_sum %u tokens, %u slots, width %u: err %.2e\n", n_tokens, k, n, err);
        CHECK(err < 1e-6, "moe_sum %u tokens k %u: normalized error %.3e", n_tokens, k, err);
    }
    forge_hip_arena_free(ds), forge_hip_arena_free(dr), forge_hip_arena_free(dd);
    free(src), free(route), free(got), free(ref);
}

static void test_moe(void) {
    static const uint32_t main_types[] = {FORGE_TYPE_F32, FORGE_TYPE_F16, FORGE_TYPE_Q4_0, FORGE_TYPE_Q8_0, FORGE_TYPE_Q4_K, FORGE_TYPE_Q6_K};
    size_t i;
    TEST_CASE("moe_route, matmul_id (every weight type), moe_sum");
    check_moe_route(37, 4, 2, 0);
    check_moe_route(37, 8, 2, 1);
    check_moe_route(37, 8, 4, 0);
    check_moe_route(37, 60, 4, 1);
    check_moe_route(37, 128, 8, 1);
    check_moe_route(37, 256, 8, 0);
    check_moe_route(5, 256, 256, 1); /* every expert: a full sort */
    check_moe_route(3, 1, 1, 0);
    for (i = 0; i < sizeof main_types / sizeof main_types[0]; i++) {
        check_matmul_id(main_types[i], 4, 2, 96, 512, 1, 0);     /* decode */
        check_matmul_id(main_types[i], 8, 4, 130, 256, 5, 1);    /* a few tokens, each slot its own input */
        check_matmul_id(main_types[i], 8, 2, 70, 256, 600, 0);   /* prompt: gathered tiles, partial row tile */
        check_matmul_id(main_types[i], 4, 4, 100, 512, 300, 1);  /* prompt, input per slot, every expert used */
    }
    for (i = 0; i < N_TYPES; i++) { /* every weight type, both paths */
        check_matmul_id(all_types[i], 8, 2, 64, 256, 3, 0);
        check_matmul_id(all_types[i], 4, 2, 64, 256, 520, 1);
    }
    /* float rows that are not a multiple of 32 take the element path */
    check_matmul_id(FORGE_TYPE_F32, 4, 2, 33, 100, 3, 1);
    check_matmul_id(FORGE_TYPE_F16, 4, 2, 33, 70, 600, 0);
    check_moe_sum(37, 2, 1000);
    check_moe_sum(37, 4, 2048);
    check_moe_sum(1, 8, 4096);
    CHECK(forge_hip_moe_route(NULL, 1, 8, 9, 0, NULL, NULL, msg, sizeof msg) == -1, "k above n_expert must be refused");
    CHECK(forge_hip_moe_route(NULL, 1, 300, 2, 0, NULL, NULL, msg, sizeof msg) == -1, "300 experts must be refused");
    CHECK(forge_hip_matmul_id(FORGE_TYPE_Q4_K, NULL, 1000, 4, 100, NULL, 0, NULL, 2, 1, NULL, NULL, msg, sizeof msg) == -1 && strstr(msg, "256"),
          "a Q4_K row of 100 elements must be refused: %s", msg);
    CHECK(forge_hip_matmul_id(FORGE_TYPE_F32, NULL, 1000, 4, 256, NULL, 0, NULL, 2, 1, NULL, NULL, msg, sizeof msg) == -1,
          "experts smaller than their rows must be refused");
}

/* ---- a bandwidth table: prints, never asserts ---- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void bench_matvec(void) {
    const uint32_t n_rows = 4096 * 4, n_cols = 4096, reps = 50;
    size_t i;
    printf("matvec %u x %u (weights from device memory, 50 launches, GB/s of weights):\n", n_rows, n_cols);
    for (i = 0; i < N_TYPES; i++) {
        const forge_type_traits *t = forge_type_info(all_types[i]);
        const size_t bytes = (size_t)n_cols / t->block_elems * t->block_bytes * n_rows;
        uint8_t *w = (uint8_t *)xmalloc(bytes);
        float *x = (float *)xmalloc(n_cols * sizeof(float));
        void *dw, *dx, *dy;
        uint32_t k;
        double t0, t1;
        random_blocks(all_types[i], w, (uint64_t)n_rows * (n_cols / t->block_elems));
        random_floats(x, n_cols, -1.0f, 1.0f);
        dw = dev_weights(all_types[i], n_cols, bytes, w), dx = dev_alloc(n_cols * sizeof(float), x), dy = dev_alloc(n_rows * sizeof(float), NULL);
        forge_hip_matvec(all_types[i], dw, n_rows, n_cols, (const float *)dx, (float *)dy, NULL, NULL, msg, sizeof msg);
        forge_hip_stream_sync(NULL, msg, sizeof msg);
        t0 = now_s();
        for (k = 0; k < reps; k++) forge_hip_matvec(all_types[i], dw, n_rows, n_cols, (const float *)dx, (float *)dy, NULL, NULL, msg, sizeof msg);
        forge_hip_stream_sync(NULL, msg, sizeof msg);
        t1 = now_s();
        printf("  %-6s %7.1f MiB  %7.1f us  %7.1f GB/s\n", t->name, bytes / 1048576.0, (t1 - t0) / reps * 1e6, bytes * reps / (t1 - t0) / 1e9);
        forge_hip_arena_free(dw), forge_hip_arena_free(dx), forge_hip_arena_free(dy);
        free(w), free(x);
    }
}

/* Prompt matmul: the Llama-3-8B projections over a batch of 512 tokens (a warm-up, then 10 launches). */
/* Seconds a launch of the product takes over `reps` launches after a warm-up; ws NULL runs it as
   forge_hip_matmul does, a prompt workspace stages its activations as f16. */
static double time_matmul(uint32_t type, const void *dw, uint32_t n_rows, uint32_t n_cols, const void *dx, void *dy, uint32_t n_tokens,
                          void *ws, size_t ws_bytes, uint32_t reps) {
    double t0;
    uint32_t k;
    forge_hip_matmul_split(type, dw, n_rows, n_cols, (const float *)dx, (float *)dy, n_tokens, NULL, ws, ws_bytes, NULL, msg, sizeof msg);
    forge_hip_stream_sync(NULL, msg, sizeof msg);
    t0 = now_s();
    for (k = 0; k < reps; k++)
        forge_hip_matmul_split(type, dw, n_rows, n_cols, (const float *)dx, (float *)dy, n_tokens, NULL, ws, ws_bytes, NULL, msg, sizeof msg);
    forge_hip_stream_sync(NULL, msg, sizeof msg);
    return (now_s() - t0) / reps;
}

static void bench_matmul(void) {
    static const uint32_t types[] = {FORGE_TYPE_Q4_K, FORGE_TYPE_Q6_K, FORGE_TYPE_Q4_0, FORGE_TYPE_Q8_0, FORGE_TYPE_F16, FORGE_TYPE_Q5_K};
    static const uint32_t shapes[][2] = {{4096, 4096}, {1024, 4096}, {14336, 4096}, {4096, 14336}};
    const uint32_t n_tokens = 512, reps = 10;
    size_t i, j;
    printf("matmul, %u tokens (10 launches, TFLOP/s; staged: with the prompt workspace, forge_hip_matmul_split):\n", n_tokens);
    for (i = 0; i < sizeof types / sizeof types[0]; i++)
        for (j = 0; j < sizeof shapes / sizeof shapes[0]; j++) {
            const forge_type_traits *t = forge_type_info(types[i]);
            const uint32_t n_rows = shapes[j][0], n_cols = shapes[j][1];
            const size_t bytes = (size_t)n_cols / t->block_elems * t->block_bytes * n_rows, ws_bytes = forge_hip_prompt_bytes(n_tokens, n_cols);
            const double flop = 2.0 * n_rows * n_cols * n_tokens;
            uint8_t *w = (uint8_t *)xmalloc(bytes);
            float *x = (float *)xmalloc((size_t)n_tokens * n_cols * sizeof(float));
            void *dw, *dx, *dy, *dws;
            double plain, staged;
            random_blocks(types[i], w, (uint64_t)n_rows * (n_cols / t->block_elems));
            random_floats(x, (size_t)n_tokens * n_cols, -1.0f, 1.0f);
            dw = dev_weights(types[i], n_cols, bytes, w), dx = dev_alloc((size_t)n_tokens * n_cols * sizeof(float), x);
            dy = dev_alloc((size_t)n_tokens * n_rows * sizeof(float), NULL), dws = dev_alloc(ws_bytes, NULL);
            plain = time_matmul(types[i], dw, n_rows, n_cols, dx, dy, n_tokens, NULL, 0, reps);
            staged = time_matmul(types[i], dw, n_rows, n_cols, dx, dy, n_tokens, dws, ws_bytes, reps);
            printf("  %-6s %5u x %5u  %8.1f us  %6.1f TFLOP/s   staged %8.1f us  %6.1f TFLOP/s\n", t->name, n_rows, n_cols, plain * 1e6,
                   flop / plain / 1e12, staged * 1e6, flop / staged / 1e12);
            forge_hip_arena_free(dw), forge_hip_arena_free(dx), forge_hip_arena_free(dy), forge_hip_arena_free(dws);
            free(w), free(x);
        }
}

/* Steps of several sequences: a product of B tokens through forge_hip_matmul_rows_q8 (8-bit activations,
   each weight read once for up to 16 tokens) and through forge_hip_matmul_split (the matrix units, columns
   split), on the Llama-3-8B and Qwen2.5-1.5B shapes (a warm-up, then 20 launches; GB/s of weights). */
static void bench_rows(uint32_t only_rows, uint32_t only_tokens) {
    static const uint32_t types[] = {FORGE_TYPE_Q4_K, FORGE_TYPE_Q6_K, FORGE_TYPE_Q4_0, FORGE_TYPE_Q8_0};
    static const uint32_t shapes[][2] = {{4096, 4096}, {1024, 4096}, {14336, 4096}, {4096, 14336}, {1536, 1536}, {8960, 1536}, {1536, 8960}};
    static const uint32_t tokens[] = {1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64};
    const uint32_t reps = 20;
    size_t i, j, b;
    int path;
    printf("products of B tokens (20 launches; us a launch: dp4a / f16 matrix units (Q4_K, Q6_K) / f16 matrix units, columns split):\n");
    for (i = 0; i < sizeof types / sizeof types[0]; i++)
        for (j = 0; j < sizeof shapes / sizeof shapes[0]; j++) {
            const forge_type_traits *t = forge_type_info(types[i]);
            const uint32_t n_rows = shapes[j][0], n_cols = shapes[j][1], max_tokens = 64;
            const size_t bytes = (size_t)n_cols / t->block_elems * t->block_bytes * n_rows;
            const size_t ws = rows_workspace_bytes(n_rows, max_tokens, n_cols);
            uint8_t *w = (uint8_t *)xmalloc(bytes);
            float *x = (float *)xmalloc((size_t)max_tokens * n_cols * sizeof(float));
            void *dw, *dx, *dy, *dws;
            if ((types[i] == FORGE_TYPE_Q6_K && j > 3) || (only_rows && n_rows != only_rows)) { /* the 8B's shapes for Q6_K */
                free(w), free(x);
                continue;
            }
            random_blocks(types[i], w, (uint64_t)n_rows * (n_cols / t->block_elems));
            random_floats(x, (size_t)max_tokens * n_cols, -1.0f, 1.0f);
            dw = dev_weights(types[i], n_cols, bytes, w), dx = dev_alloc((size_t)max_tokens * n_cols * sizeof(float), x);
            dy = dev_alloc((size_t)max_tokens * n_rows * sizeof(float), NULL), dws = dev_alloc(ws, NULL);
            printf("  %-5s %5u x %5u:", t->name, n_rows, n_cols);
            for (b = 0; b < sizeof tokens / sizeof tokens[0]; b++) {
                double us[3];
                if (only_tokens && tokens[b] != only_tokens) continue;
                for (path = 0; path < 3; path++) { /* 0: dp4a, 1: matrix units (Q4_K, Q6_K), 2: split (f16) */
                    uint32_t k;
                    double t0 = 0.0;
                    for (k = 0; k <= reps; k++) {
                        if (k == 1) forge_hip_stream_sync(NULL, msg, sizeof msg), t0 = now_s(); /* after a warm-up */
                        if (path == 2)
                            forge_hip_matmul_split(types[i], dw, n_rows, n_cols, (const float *)dx, (float *)dy, tokens[b], NULL, dws, ws, NULL, msg,
                                                   sizeof msg);
                        else
                            forge_hip_matmul_rows_q8_path(path + 2, types[i], dw, n_rows, n_cols, (const float *)dx, (float *)dy, tokens[b], NULL,
                                                          dws, ws, NULL, msg, sizeof msg);
                    }
                    forge_hip_stream_sync(NULL, msg, sizeof msg);
                    us[path] = (now_s() - t0) / reps * 1e6;
                }
                printf("  B%u %.1f/%.1f/%.1f", tokens[b], us[0], us[1], us[2]);
            }
            printf("  (%.1f MiB)\n", bytes / 1048576.0);
            forge_hip_arena_free(dw), forge_hip_arena_free(dx), forge_hip_arena_free(dy), forge_hip_arena_free(dws);
            free(w), free(x);
        }
}

/* MoE matmul timings on either side of the tiled path's threshold (1024 pairs): the per-pair matvec
   reads an expert once per pair, the tiled path once per 64 pairs of that expert. */
static void bench_moe(void) {
    static const struct {
        uint32_t n_expert, k, n_rows, n_cols, n_tokens;
    } cases[] = {{8, 2, 4096, 2048, 1},   {8, 2, 4096, 2048, 16},  {8, 2, 4096, 2048, 511}, {8, 2, 4096, 2048, 512},
                 {64, 8, 1024, 2048, 1},  {64, 8, 1024, 2048, 127}, {64, 8, 1024, 2048, 128}, {64, 8, 1024, 2048, 512}};
    const uint32_t reps = 10;
    size_t c;
    printf("matmul_id Q4_K (10 launches; GB/s: expert bytes read by the per-pair path / time):\n");
    for (c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const forge_type_traits *t = forge_type_info(FORGE_TYPE_Q4_K);
        const uint32_t n_expert = cases[c].n_expert, k = cases[c].k, n_rows = cases[c].n_rows, n_cols = cases[c].n_cols, n_tokens = cases[c].n_tokens;
        const size_t expert_bytes = (size_t)n_cols / t->block_elems * t->block_bytes * n_rows, n_pairs = (size_t)n_tokens * k;
        uint8_t *w = (uint8_t *)xmalloc(expert_bytes * n_expert);
        float *x = (float *)xmalloc((size_t)n_tokens * n_cols * sizeof(float)), *route = (float *)xmalloc(n_pairs * 2 * sizeof(float));
        void *dw, *dx, *dr, *dy;
        uint32_t r;
        double t0, t1;
        random_blocks(FORGE_TYPE_Q4_K, w, (uint64_t)n_expert * n_rows * (n_cols / 256));
        random_floats(x, (size_t)n_tokens * n_cols, -1.0f, 1.0f);
        random_route(route, n_tokens, n_expert, k);
        dw = dev_alloc(expert_bytes * n_expert, w), dx = dev_alloc((size_t)n_tokens * n_cols * sizeof(float), x);
        dr = dev_alloc(n_pairs * 2 * sizeof(float), route), dy = dev_alloc(n_pairs * n_rows * sizeof(float), NULL);
        forge_hip_matmul_id(FORGE_TYPE_Q4_K, dw, expert_bytes, n_rows, n_cols, (const float *)dx, 0, (const float *)dr, k, n_tokens, (float *)dy, NULL,
                            msg, sizeof msg);
        forge_hip_stream_sync(NULL, msg, sizeof msg);
        t0 = now_s();
        for (r = 0; r < reps; r++)
            forge_hip_matmul_id(FORGE_TYPE_Q4_K, dw, expert_bytes, n_rows, n_cols, (const float *)dx, 0, (const float *)dr, k, n_tokens, (float *)dy,
                                NULL, msg, sizeof msg);
        forge_hip_stream_sync(NULL, msg, sizeof msg);
        t1 = now_s();
        printf("  %3u experts top %u, %4u x %4u, %3u tokens (%4zu pairs, %s): %9.1f us  %7.1f GB/s\n", n_expert, k, n_rows, n_cols, n_tokens,
               n_pairs, n_pairs >= 1024 ? "tiled " : "matvec", (t1 - t0) / reps * 1e6, (double)expert_bytes * n_pairs * reps / (t1 - t0) / 1e9);
        forge_hip_arena_free(dw), forge_hip_arena_free(dx), forge_hip_arena_free(dr), forge_hip_arena_free(dy);
        free(w), free(x), free(route);
    }
}

/* ---- decode on 8-bit activations ---- */

/* The rounding the device does: groups of 32, d = max|x| / 127, q = x * (127 / max|x|) rounded to
   nearest even; dq receives d * q. */
static void q8_ref(const float *x, size_t n, int8_t *q, float *dq) {
    size_t g, i;
    for (g = 0; g < n / 32; g++) {
        float amax = 0.0f, d, inv;
        for (i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[32 * g + i]));
        d = amax / 127.0f, inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        for (i = 0; i < 32; i++) {
            float v = x[32 * g + i] * inv;
            q[32 * g + i] = (int8_t)lrintf(v);
            dq[32 * g + i] = d * (float)q[32 * g + i];
        }
    }
}

/* the device's quantized vector: its bytes equal q8_ref's, and its scales and sums match */
static int check_q8_vector(const void *dq8, const float *x, size_t n, const char *what) {
    const size_t bytes = forge_hip_q8_bytes((uint32_t)n), ds = (n + 255) / 256 * 256;
    uint8_t *got = (uint8_t *)xmalloc(bytes);
    int8_t *q = (int8_t *)xmalloc(n);
    float *dq = (float *)xmalloc(n * sizeof(float));
    size_t i, bad = 0, bad_ds = 0;
    int ok = 0;
    q8_ref(x, n, q, dq);
    if (dev_fetch(got, dq8, bytes)) {
        for (i = 0; i < n; i++) bad += (int8_t)got[i] != q[i];
        for (i = 0; i < n / 32; i++) {
            float f[4], d = 0.0f, s0 = 0.0f, s1 = 0.0f;
            size_t j;
            memcpy(f, got + ds + 16 * i, 16);
            for (j = 0; j < 32; j++) d = fmaxf(d, fabsf(x[32 * i + j]));
            d /= 127.0f;
            for (j = 0; j < 16; j++) s0 += (float)q[32 * i + j], s1 += (float)q[32 * i + 16 + j];
            bad_ds += f[0] != d || fabsf(f[1] - d * s0) > 1e-6f * (1.0f + fabsf(d * s0)) || fabsf(f[2] - d * s1) > 1e-6f * (1.0f + fabsf(d * s1));
        }
        CHECK(bad == 0 && bad_ds == 0, "%s: %zu of %zu bytes and %zu of %zu group scales differ from the rounding rule", what, bad, n, bad_ds,
              n / 32);
        ok = bad == 0 && bad_ds == 0;
    }
    free(got), free(q), free(dq);
    return ok;
}

void forge_hip_set_staging(int on); /* test hook of forge_kernels.hip: 0 off, 1 where the rule allows, -1 as the calling thread's switch says */

/* The decode products stage a block's weight rows in shared memory where the shape allows it
   (sm_90, forge__stage_ok): the same product with staging off must give the same bits, since only
   where the weights are read from changes. y0: the starting y (accumulate); got: the result to
   match. With w_up the product is forge_hip_glu_q8 (flag its activation, got h), else
   forge_hip_matvec_q8 (flag accumulate). */
static void check_staged_alike(uint32_t type, void *dw, void *dw_up, uint32_t n_rows, uint32_t n_cols, void *dq8, const float *y0, void *db,
                               int flag, const float *got) {
    float *again = (float *)xmalloc(n_rows * sizeof(float));
    void *dy = dev_alloc(n_rows * sizeof(float), y0), *dout = dw_up ? dev_alloc(forge_hip_q8_bytes(n_rows), NULL) : NULL;
    int ok;
    forge_hip_set_staging(0);
    ok = (dw_up ? forge_hip_glu_q8(type, dw, dw_up, n_rows, n_cols, dq8, (float *)dy, dout, flag, -1.0f, NULL, msg, sizeof msg)
                : forge_hip_matvec_q8(type, dw, n_rows, n_cols, dq8, (float *)dy, (const float *)db, flag, -1.0f, NULL, msg, sizeof msg)) == 0;
    forge_hip_set_staging(-1);
    CHECK(ok, "%s %ux%u without staging: %s", forge_type_info(type)->name, n_rows, n_cols, msg);
    if (ok && dev_fetch(again, dy, n_rows * sizeof(float)))
        CHECK(memcmp(again, got, n_rows * sizeof(float)) == 0, "%s %ux%u: the staged and unstaged products differ", forge_type_info(type)->name,
              n_rows, n_cols);
    forge_hip_arena_free(dy);
    if (dout) forge_hip_arena_free(dout);
    free(again);
}

/* y = W x over quantized x: against a double product of the dequantized weights and the rounded
   activations (what the integer path computes, up to float rounding: 1e-5), and against the f32
   activations (the rounding itself: 2e-2). Also y += W x (+ bias) into a residual. */
static void check_matvec_q8(uint32_t type, uint32_t n_rows, uint32_t n_cols, int with_bias, int accumulate) {
    const forge_type_traits *t = forge_type_info(type);
    const size_t row_bytes = (size_t)n_cols / t->block_elems * t->block_bytes;
    uint8_t *w = (uint8_t *)xmalloc(row_bytes * n_rows);
    float *wf = (float *)xmalloc((size_t)n_rows * n_cols * sizeof(float)), *x = (float *)xmalloc(n_cols * sizeof(float));
    float *dq = (float *)xmalloc(n_cols * sizeof(float)), *bias = (float *)xmalloc(n_rows * sizeof(float));
    float *y0 = (float *)xmalloc(n_rows * sizeof(float)), *y = (float *)xmalloc(n_rows * sizeof(float));
    int8_t *q = (int8_t *)xmalloc(n_cols);
    double *ref = (double *)xmalloc(n_rows * sizeof(double)), *ref32 = (double *)xmalloc(n_rows * sizeof(double));
    void *dw, *dx, *dq8, *dy, *db;
    uint32_t r, c;
    random_blocks(type, w, (uint64_t)n_rows * (n_cols / t->block_elems));
    forge_dequantize(type, w, wf, (uint64_t)n_rows * n_cols);
    random_floats(x, n_cols, -1.0f, 1.0f);
    x[5] = 7.0f; /* one large value in a group: the others round coarser */
    random_floats(bias, n_rows, -1.0f, 1.0f);
    random_floats(y0, n_rows, -3.0f, 3.0f);
    q8_ref(x, n_cols, q, dq);
    for (r = 0; r < n_rows; r++) {
        double s = (with_bias ? bias[r] : 0.0) + (accumulate ? y0[r] : 0.0), s32 = s;
        for (c = 0; c < n_cols; c++) s += (double)wf[(size_t)r * n_cols + c] * dq[c], s32 += (double)wf[(size_t)r * n_cols + c] * x[c];
        ref[r] = s, ref32[r] = s32;
    }
    dw = dev_weights(type, n_cols, row_bytes * n_rows, w), dx = dev_alloc(n_cols * sizeof(float), x), dq8 = dev_alloc(forge_hip_q8_bytes(n_cols), NULL);
    db = dev_alloc(n_rows * sizeof(float), bias), dy = dev_alloc(n_rows * sizeof(float), y0);
    CHECK(forge_hip_q8_quantize((const float *)dx, n_cols, dq8, NULL, msg, sizeof msg) == 0, "q8 quantize: %s", msg);
    CHECK(forge_hip_matvec_q8(type, dw, n_rows, n_cols, dq8, (float *)dy, with_bias ? (const float *)db : NULL, accumulate, -1.0f, NULL,
                              msg, sizeof msg) == 0,
          "matvec q8 %s: %s", t->name, msg);
    if (check_q8_vector(dq8, x, n_cols, "q8 quantize") && dev_fetch(y, dy, n_rows * sizeof(float))) {
        check_staged_alike(type, dw, NULL, n_rows, n_cols, dq8, y0, with_bias ? db : NULL, accumulate, y);
        const double err = norm_error_d(y, ref, n_rows), err32 = norm_error_d(y, ref32, n_rows);
        printf("  matvec q8 %-5s %5u x %5u%s%s: err %.2e (vs f32 activations %.2e)\n", t->name, n_rows, n_cols, with_bias ? " +bias" : "",
               accumulate ? " +=" : "", err, err32);
        CHECK(err < 1e-5, "matvec q8 %s %ux%u: normalized error %.3e against the rounded activations", t->name, n_rows, n_cols, err);
        CHECK(err32 < 2e-2, "matvec q8 %s %ux%u: normalized error %.3e against f32 activations", t->name, n_rows, n_cols, err32);
    }
    forge_hip_arena_free(dw), forge_hip_arena_free(dx), forge_hip_arena_free(dq8), forge_hip_arena_free(db), forge_hip_arena_free(dy);
    free(w), free(wf), free(x), free(dq), free(bias), free(y0), free(y), free(q), free(ref), free(ref32);
}

/* Y = W X for a few tokens through forge_hip_matmul_rows_q8 (a step of several sequences). expect says
   which path the shape takes, and so the reference: ROWS_Q8 (dp4a) against a double product of the
   dequantized weights and each token's activations rounded by the test's own 8-bit rule (1e-5), and
   against the f32 activations (2e-2); ROWS_F16 (Q4_K on the f16 matrix units, weights exact; Q6_K
   with s (q - 32) rounded to f16, as the reference rounds them) against
   the activations rounded to f16 (1e-5) and against f32 (1e-3); ROWS_SPLIT (a type without a rows
   reader, or more tokens than the paths take: forge_hip_matmul_split) against f32 (1e-3). */
enum { ROWS_Q8, ROWS_SPLIT, ROWS_F16 };
/* Q6_K weights as the f16 matrix units take them: d times s (q - 32) rounded to f16 (exact to 2048) */
static void q6_k_f16_weights(const uint8_t *w, uint64_t n_blocks, float *out) {
    uint64_t b;
    int half, l;
    for (b = 0; b < n_blocks; b++, w += 210, out += 256) {
        const uint8_t *ql = w, *qh = w + 128;
        const int8_t *sc = (const int8_t *)(w + 192);
        const float d = forge_f16_to_f32((uint16_t)(w[208] | w[209] << 8));
        for (half = 0; half < 2; half++, ql += 64, qh += 32, sc += 8)
            for (l = 0; l < 32; l++) {
                const int q[4] = {(ql[l] & 15) | ((qh[l] & 3) << 4), (ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4),
                                  (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4), (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)};
                int k;
                for (k = 0; k < 4; k++)
                    out[128 * half + 32 * k + l] = d * forge_f16_to_f32(forge_f32_to_f16((float)(sc[l / 16 + 2 * k] * (q[k] - 32))));
            }
    }
}
static void check_matmul_rows_q8(int path, uint32_t type, uint32_t n_rows, uint32_t n_cols, uint32_t n_tokens, int with_bias, int expect) {
    const forge_type_traits *t = forge_type_info(type);
    const size_t row_bytes = (size_t)n_cols / t->block_elems * t->block_bytes, nx = (size_t)n_tokens * n_cols, ny = (size_t)n_tokens * n_rows;
    uint8_t *w = (uint8_t *)xmalloc(row_bytes * n_rows);
    float *wf = (float *)xmalloc((size_t)n_rows * n_cols * sizeof(float)), *x = (float *)xmalloc(nx * sizeof(float));
    float *dq = (float *)xmalloc(nx * sizeof(float)), *bias = (float *)xmalloc(n_rows * sizeof(float)), *y = (float *)xmalloc(ny * sizeof(float));
    float *wr = expect == ROWS_F16 && type == FORGE_TYPE_Q6_K ? (float *)xmalloc((size_t)n_rows * n_cols * sizeof(float)) : wf;
    int8_t *q = (int8_t *)xmalloc(nx);
    double *ref = (double *)xmalloc(ny * sizeof(double)), *ref32 = (double *)xmalloc(ny * sizeof(double));
    const size_t ws_bytes = rows_workspace_bytes(n_rows, n_tokens, n_cols);
    void *dw, *dx, *dy, *db, *dws;
    uint32_t r, c, k;
    size_t e;
    random_blocks(type, w, (uint64_t)n_rows * (n_cols / t->block_elems));
    forge_dequantize(type, w, wf, (uint64_t)n_rows * n_cols);
    random_floats(x, nx, -1.0f, 1.0f);
    for (k = 0; k < n_tokens; k++) x[(size_t)k * n_cols + (7 * k) % n_cols] = 6.0f; /* a large value in one group a token */
    random_floats(bias, n_rows, -1.0f, 1.0f);
    if (expect == ROWS_F16 && type == FORGE_TYPE_Q6_K) q6_k_f16_weights(w, (uint64_t)n_rows * (n_cols / 256), wr);
    if (expect == ROWS_F16)
        for (e = 0; e < nx; e++) dq[e] = forge_f16_to_f32(forge_f32_to_f16(x[e]));
    else
        for (k = 0; k < n_tokens; k++) q8_ref(x + (size_t)k * n_cols, n_cols, q + (size_t)k * n_cols, dq + (size_t)k * n_cols);
    for (k = 0; k < n_tokens; k++)
        for (r = 0; r < n_rows; r++) {
            double s = with_bias ? bias[r] : 0.0, s32 = s;
            for (c = 0; c < n_cols; c++) {
                s += (double)wr[(size_t)r * n_cols + c] * dq[(size_t)k * n_cols + c];
                s32 += (double)wf[(size_t)r * n_cols + c] * x[(size_t)k * n_cols + c];
            }
            ref[(size_t)k * n_rows + r] = s, ref32[(size_t)k * n_rows + r] = s32;
        }
    dw = dev_weights(type, n_cols, row_bytes * n_rows, w), dx = dev_alloc(nx * sizeof(float), x), db = dev_alloc(n_rows * sizeof(float), bias);
    dy = dev_alloc(ny * sizeof(float), NULL), dws = dev_alloc(ws_bytes, NULL);
    CHECK((path ? forge_hip_matmul_rows_q8_path(path, type, dw, n_rows, n_cols, (const float *)dx, (float *)dy, n_tokens,
                                                with_bias ? (const float *)db : NULL, dws, ws_bytes, NULL, msg, sizeof msg)
                : forge_hip_matmul_rows_q8(type, dw, n_rows, n_cols, (const float *)dx, (float *)dy, n_tokens, with_bias ? (const float *)db : NULL,
                                           dws, ws_bytes, NULL, msg, sizeof msg)) == 0,
          "matmul rows q8 %s: %s", t->name, msg);
    if (dev_fetch(y, dy, ny * sizeof(float))) {
        const double err = norm_error_d(y, ref, ny), err32 = norm_error_d(y, ref32, ny);
        printf("  matmul rows q8 %-5s %5u x %5u, %2u tokens%s, %s: err %.2e (vs f32 activations %.2e)\n", t->name, n_rows, n_cols, n_tokens,
               with_bias ? " +bias" : "", expect == ROWS_SPLIT ? "split path" : expect == ROWS_F16 ? "f16 matrix units" : "dp4a", err, err32);
        if (expect == ROWS_SPLIT)
            CHECK(err32 < 1e-3, "matmul %s %ux%u x %u on the split path: normalized error %.3e", t->name, n_rows, n_cols, n_tokens, err32);
        else {
            CHECK(err < 1e-5, "matmul rows q8 %s %ux%u x %u: normalized error %.3e against the rounded activations", t->name, n_rows, n_cols,
                  n_tokens, err);
            CHECK(err32 < (expect == ROWS_F16 ? 1e-3 : 2e-2), "matmul rows q8 %s %ux%u x %u: normalized error %.3e against f32 activations",
                  t->name, n_rows, n_cols, n_tokens, err32);
        }
    }
    forge_hip_arena_free(dw), forge_hip_arena_free(dx), forge_hip_arena_free(db), forge_hip_arena_free(dy), forge_hip_arena_free(dws);
    if (wr != wf) free(wr);
    free(w), free(wf), free(x), free(dq), free(bias), free(y), free(q), free(ref), free(ref32);
}

/* Up to three products of one input through forge_hip_matmul_rows_q8_group (q, k, v; gate, up):
   each output against the same product alone through forge_hip_matmul_rows_q8 (1e-5: a launch of more
   blocks may give a block more warps, and so another order of the warps' shares) and against a
   double product of the dequantized weights and the f32 activations (1e-3 for Q4_K of 8 tokens or
   more, on the f16 matrix units; 2e-2 else, 8-bit activations). */
static void check_matmul_rows_group(uint32_t n, const uint32_t *types, const uint32_t *rows, uint32_t n_cols, uint32_t n_tokens) {
    const size_t nx = (size_t)n_tokens * n_cols;
    float *x = (float *)xmalloc(nx * sizeof(float)), *wf[3], *bias[3];
    void *dx, *dws, *dw[3], *db[3], *dy[3], *dy1[3];
    forge_hip_product p[3];
    uint32_t i, r, c, k, most = 0;
    int form = 0;
    size_t ws_bytes;
    random_floats(x, nx, -1.0f, 1.0f);
    for (i = 0; i < n; i++) most = rows[i] > most ? rows[i] : most;
    ws_bytes = rows_workspace_bytes(most, n_tokens, n_cols);
    dx = dev_alloc(nx * sizeof(float), x), dws = dev_alloc(ws_bytes, NULL);
    for (i = 0; i < n; i++) {
        const forge_type_traits *t = forge_type_info(types[i]);
        const size_t row_bytes = (size_t)n_cols / t->block_elems * t->block_bytes, ny = (size_t)n_tokens * rows[i];
        uint8_t *w = (uint8_t *)xmalloc(row_bytes * rows[i]);
        wf[i] = (float *)xmalloc((size_t)rows[i] * n_cols * sizeof(float)), bias[i] = (float *)xmalloc(rows[i] * sizeof(float));
        random_blocks(types[i], w, (uint64_t)rows[i] * (n_cols / t->block_elems));
        forge_dequantize(types[i], w, wf[i], (uint64_t)rows[i] * n_cols);
        random_floats(bias[i], rows[i], -1.0f, 1.0f);
        dw[i] = dev_weights(types[i], n_cols, row_bytes * rows[i], w), db[i] = dev_alloc(rows[i] * sizeof(float), bias[i]);
        dy[i] = dev_alloc(ny * sizeof(float), NULL), dy1[i] = dev_alloc(ny * sizeof(float), NULL);
        p[i].type = types[i], p[i].w = dw[i], p[i].n_rows = rows[i], p[i].y = (float *)dy[i], p[i].bias = i == 1 ? (const float *)db[i] : NULL;
        free(w);
    }
    CHECK(forge_hip_matmul_rows_q8_group(n, p, n_cols, (const float *)dx, n_tokens, dws, ws_bytes, &form, NULL, msg, sizeof msg) == 0,
          "matmul rows group: %s", msg);
    for (i = 0; i < n; i++)
        CHECK(forge_hip_matmul_rows_q8(types[i], dw[i], rows[i], n_cols, (const float *)dx, (float *)dy1[i], n_tokens, p[i].bias, dws, ws_bytes,
                                       NULL, msg, sizeof msg) == 0,
              "matmul rows alone: %s", msg);
    for (i = 0; i < n; i++) {
        const forge_type_traits *t = forge_type_info(types[i]);
        const size_t ny = (size_t)n_tokens * rows[i];
        const double bound = types[i] == FORGE_TYPE_Q4_K && n_tokens >= 8 ? 1e-3 : 2e-2;
        float *y = (float *)xmalloc(ny * sizeof(float)), *y1 = (float *)xmalloc(ny * sizeof(float));
        double *ref = (double *)xmalloc(ny * sizeof(double)), *alone = (double *)xmalloc(ny * sizeof(double));
        for (k = 0; k < n_tokens; k++)
            for (r = 0; r < rows[i]; r++) {
                double sum = i == 1 ? bias[i][r] : 0.0;
                for (c = 0; c < n_cols; c++) sum += (double)wf[i][(size_t)r * n_cols + c] * x[(size_t)k * n_cols + c];
                ref[(size_t)k * rows[i] + r] = sum;
            }
        if (dev_fetch(y, dy[i], ny * sizeof(float)) && dev_fetch(y1, dy1[i], ny * sizeof(float))) {
            size_t e;
            double err, err32;
            for (e = 0; e < ny; e++) alone[e] = y1[e];
            err = norm_error_d(y, alone, ny), err32 = norm_error_d(y, ref, ny);
            printf("  matmul rows group %u of %u: %-5s %5u x %5u, %2u tokens: err %.2e against alone, %.2e against f32 activations\n", i + 1, n,
                   t->name, rows[i], n_cols, n_tokens, err, err32);
            CHECK(err < 1e-5 && err32 < bound, "matmul rows group %u of %u (%s %ux%u, %u tokens): normalized error %.3e against alone, %.3e against f32",
                  i + 1, n, t->name, rows[i], n_cols, n_tokens, err, err32);
        }
        free(y), free(y1), free(ref), free(alone);
    }
    for (i = 0; i < n; i++) {
        forge_hip_arena_free(dw[i]), forge_hip_arena_free(db[i]), forge_hip_arena_free(dy[i]), forge_hip_arena_free(dy1[i]);
        free(wf[i]), free(bias[i]);
    }
    forge_hip_arena_free(dx), forge_hip_arena_free(dws);
    free(x);
}

/* A norm that also writes the f16 form of its rows (forge_hip_add_rmsnorm with a workspace): a Q4_K
   or Q6_K product that finds the form there gives the same bits as the add, the norm and the product
   that makes its own form; with the residual add and without. want: the form the product asks for
   (forge_hip_matmul_rows_q8_group_form); other: the norm writes the other f16 form instead, which the
   product must not take for its own (it makes its form over it: the same bits still). */
static void check_norm_form(uint32_t type, uint32_t n_out, uint32_t n, uint32_t n_tokens, int with_add, int want, int other) {
    const forge_type_traits *t = forge_type_info(type);
    const size_t row_bytes = (size_t)n / t->block_elems * t->block_bytes, m = (size_t)n_tokens * n, ny = (size_t)n_tokens * n_out;
    const size_t ws_bytes = rows_workspace_bytes(n_out, n_tokens, n);
    float *x = (float *)xmalloc(m * sizeof(float)), *r = (float *)xmalloc(m * sizeof(float)), *w = (float *)xmalloc(n * sizeof(float));
    float *ya = (float *)xmalloc(m * sizeof(float)), *yb = (float *)xmalloc(m * sizeof(float));
    float *oa = (float *)xmalloc(ny * sizeof(float)), *ob = (float *)xmalloc(ny * sizeof(float));
    uint8_t *wq = (uint8_t *)xmalloc(row_bytes * n_out);
    void *xa, *xb, *dr, *dw, *dya, *dyb, *dwq, *wsa, *wsb, *doa, *dob;
    forge_hip_product one;
    int form, written;
    random_floats(x, m, -2.0f, 2.0f), random_floats(r, m, -2.0f, 2.0f), random_floats(w, n, 0.5f, 1.5f);
    random_blocks(type, wq, (uint64_t)n_out * (n / t->block_elems));
    xa = dev_alloc(m * sizeof(float), x), xb = dev_alloc(m * sizeof(float), x), dr = dev_alloc(m * sizeof(float), r);
    dw = dev_alloc(n * sizeof(float), w), dya = dev_alloc(m * sizeof(float), NULL), dyb = dev_alloc(m * sizeof(float), NULL);
    dwq = dev_weights(type, n, row_bytes * n_out, wq), wsa = dev_alloc(ws_bytes, NULL), wsb = dev_alloc(ws_bytes, NULL);
    doa = dev_alloc(ny * sizeof(float), NULL), dob = dev_alloc(ny * sizeof(float), NULL);
    CHECK(forge_hip_matmul_rows_q8_group_form(1, NULL, n, n_tokens, ws_bytes) == 0, "no products: no form");
    memset(&one, 0, sizeof one);
    one.type = type, one.w = dwq, one.n_rows = n_out, one.y = (float *)doa;
    form = forge_hip_matmul_rows_q8_group_form(1, &one, n, n_tokens, ws_bytes);
    CHECK(form == want, "%s %ux%u, %u tokens: the product asks for form %d, expected %d", t->name, n_out, n, n_tokens, form, want);
    written = other ? (want == FORGE_HIP_FORM_F16 ? FORGE_HIP_FORM_F16_ROWS : FORGE_HIP_FORM_F16) : want;
    CHECK(forge_hip_add_rmsnorm((float *)xa, with_add ? (const float *)dr : NULL, (const float *)dw, (float *)dya, n_tokens, n, 1e-5f, wsa, written,
                                NULL, msg, sizeof msg) == 0,
          "add_rmsnorm with the form: %s", msg);
    form = written;
    CHECK(forge_hip_matmul_rows_q8_form(type, dwq, n_out, n, (const float *)dya, (float *)doa, n_tokens, NULL, wsa, ws_bytes, &form, NULL, msg,
                                        sizeof msg) == 0,
          "product on the norm's form: %s", msg);
    if (with_add) forge_hip_add((float *)xb, (const float *)dr, m, NULL, msg, sizeof msg);
    forge_hip_rmsnorm((const float *)xb, (const float *)dw, (float *)dyb, n_tokens, n, 1e-5f, NULL, msg, sizeof msg);
    CHECK(forge_hip_matmul_rows_q8(type, dwq, n_out, n, (const float *)dyb, (float *)dob, n_tokens, NULL, wsb, ws_bytes, NULL, msg, sizeof msg) == 0,
          "product making its form: %s", msg);
    if (dev_fetch(ya, dya, m * sizeof(float)) && dev_fetch(yb, dyb, m * sizeof(float)) && dev_fetch(oa, doa, ny * sizeof(float)) &&
        dev_fetch(ob, dob, ny * sizeof(float))) {
        const int same = memcmp(ya, yb, m * sizeof(float)) == 0 && memcmp(oa, ob, ny * sizeof(float)) == 0;
        printf("  norm with the f16 form %d%s, %s %u x %u, %u tokens: %s\n", written, with_add ? " (and the add)" : "", t->name, n_out, n,
               n_tokens, same ? "the same bits as the product making its form" : "differs");
        CHECK(same, "norm with the f16 form, %s %ux%u, %u tokens: not the same bits", t->name, n_out, n, n_tokens);
    }
    forge_hip_arena_free(xa), forge_hip_arena_free(xb), forge_hip_arena_free(dr), forge_hip_arena_free(dw), forge_hip_arena_free(dya);
    forge_hip_arena_free(dyb), forge_hip_arena_free(dwq), forge_hip_arena_free(wsa), forge_hip_arena_free(wsb), forge_hip_arena_free(doa);
    forge_hip_arena_free(dob);
    free(x), free(r), free(w), free(ya), free(yb), free(oa), free(ob), free(wq);
}

static void test_matmul_rows_q8(void) {
    static const uint32_t types[] = {FORGE_TYPE_Q4_0, FORGE_TYPE_Q8_0, FORGE_TYPE_Q4_K, FORGE_TYPE_Q6_K};
    size_t i;
    TEST_CASE("products of a few tokens on 8-bit activations (steps of several sequences)");
    for (i = 0; i < sizeof types / sizeof types[0]; i++) {
        const int k_quant = types[i] == FORGE_TYPE_Q4_K || types[i] == FORGE_TYPE_Q6_K, mmh = k_quant;
        /* what path 3 gives: Q6_K takes the matrix units where its rows are 16-aligned on the device (2048 columns) */
#define UNITS(n_cols) (mmh && (types[i] == FORGE_TYPE_Q4_K || (n_cols) % 2048 == 0) ? ROWS_F16 : ROWS_SPLIT)
        /* dp4a (forge__k_mvq_rows) */
        check_matmul_rows_q8(2, types[i], 300, 1024, 1, 1, ROWS_Q8);   /* one token; a partial block of rows */
        check_matmul_rows_q8(2, types[i], 129, 2304, 3, 0, ROWS_Q8);   /* 9 super-blocks a row */
        check_matmul_rows_q8(2, types[i], 1536, 8960, 4, 1, ROWS_Q8);  /* Qwen2.5-1.5B's down projection (Q6_K: odd super-blocks) */
        check_matmul_rows_q8(2, types[i], 256, 1536, 8, 0, ROWS_Q8);   /* Q6_K rows 4-aligned in the device layout */
        check_matmul_rows_q8(2, types[i], 1024, 4096, 7, 1, ROWS_Q8);
        check_matmul_rows_q8(2, types[i], 200, 1024, 9, 1, ROWS_Q8);   /* a launch of up to 16 tokens, 9 of them */
        check_matmul_rows_q8(2, types[i], 96, 8192, 12, 0, ROWS_Q8);   /* few rows, long rows: waves split over the columns */
        check_matmul_rows_q8(2, types[i], 64, 256, 12, 1, ROWS_Q8);    /* one super-block a row */
        /* 16 tokens: the dp4a path's most for Q4_0 and Q8_0, past it for Q4_K and Q6_K (their scales cost more a token) */
        check_matmul_rows_q8(2, types[i], 517, 1536, 16, 1, k_quant ? ROWS_SPLIT : ROWS_Q8);
        check_matmul_rows_q8(2, types[i], 200, 1024, 17, 1, ROWS_SPLIT); /* more tokens than the path takes */
        /* the f16 matrix units (forge__k_mmh_rows, forge__k_mmh6_rows): Q4_K and 16-aligned Q6_K of up to 32 tokens; the others take the split path */
        check_matmul_rows_q8(3, types[i], 300, 1024, 1, 1, UNITS(1024)); /* one token; a partial tile of rows */
        check_matmul_rows_q8(3, types[i], 129, 2304, 3, 0, UNITS(2304)); /* 9 super-blocks: half super-blocks a piece */
        check_matmul_rows_q8(3, types[i], 1536, 8960, 8, 1, UNITS(8960));
        check_matmul_rows_q8(3, types[i], 17, 256, 11, 1, UNITS(256));  /* fewer rows than a tile */
        check_matmul_rows_q8(3, types[i], 1024, 4096, 16, 0, UNITS(4096));
        check_matmul_rows_q8(3, types[i], 96, 8192, 13, 1, UNITS(8192)); /* few rows, long rows: eight warps a block */
        check_matmul_rows_q8(3, types[i], 517, 1536, 16, 1, UNITS(1536));
        check_matmul_rows_q8(3, types[i], 200, 1024, 17, 1, UNITS(1024)); /* four token tiles */
        check_matmul_rows_q8(3, types[i], 9000, 2048, 32, 0, UNITS(2048)); /* four warps a block, whole super-blocks, 32 tokens */
        /* Q4_K of 17 to 64 tokens and 4096 rows or more: blocks sharing the activations (forge__k_mmh4_rows) */
        check_matmul_rows_q8(3, types[i], 4100, 1024, 24, 1, types[i] == FORGE_TYPE_Q4_K ? ROWS_F16 : ROWS_SPLIT); /* a partial block of rows */
        check_matmul_rows_q8(3, types[i], 4096, 2304, 47, 1, types[i] == FORGE_TYPE_Q4_K ? ROWS_F16 : ROWS_SPLIT); /* odd super-blocks */
        check_matmul_rows_q8(3, types[i], 4096, 4096, 64, 0, types[i] == FORGE_TYPE_Q4_K ? ROWS_F16 : ROWS_SPLIT);
        check_matmul_rows_q8(3, types[i], 200, 1024, 33, 1, ROWS_SPLIT);  /* more tokens than forge__k_mmh_rows takes, fewer rows than the other */
        check_matmul_rows_q8(3, types[i], 4096, 1024, 65, 1, ROWS_SPLIT); /* more tokens than either takes */
        /* the path chosen for the shape */
        check_matmul_rows_q8(0, types[i], 1024, 4096, 5, 1, ROWS_Q8);
        check_matmul_rows_q8(0, types[i], 517, 1536, 12, 1, types[i] == FORGE_TYPE_Q4_K ? ROWS_F16 : ROWS_Q8);
        check_matmul_rows_q8(0, types[i], 300, 4096, 12, 1, k_quant ? ROWS_F16 : ROWS_Q8); /* Q6_K from 9 tokens where its rows are 16-aligned */
        check_matmul_rows_q8(0, types[i], 517, 1536, 40, 1, ROWS_SPLIT);
        check_matmul_rows_q8(0, types[i], 4096, 1536, 40, 1, types[i] == FORGE_TYPE_Q4_K ? ROWS_F16 : ROWS_SPLIT);
        check_matmul_rows_q8(0, types[i], 517, 1536, 72, 1, ROWS_SPLIT);
#undef UNITS
    }
    check_matmul_rows_q8(0, FORGE_TYPE_Q5_K, 200, 1024, 4, 1, ROWS_SPLIT); /* no rows reader */
    check_matmul_rows_q8(0, FORGE_TYPE_F16, 200, 1024, 4, 0, ROWS_SPLIT);
    { /* products of one input in one launch (forge_hip_matmul_rows_q8_group) */
        static const uint32_t qkv[3] = {FORGE_TYPE_Q4_K, FORGE_TYPE_Q4_K, FORGE_TYPE_Q4_K}, qk_v6[3] = {FORGE_TYPE_Q4_K, FORGE_TYPE_Q4_K, FORGE_TYPE_Q6_K};
        static const uint32_t odd[3] = {40, 1536, 256}, llama[3] = {4096, 1024, 1024}, ffn[2] = {8960, 8960};
        static const uint32_t staged2[2] = {4096, 4096}, staged3[3] = {4100, 4096, 4096};
        check_matmul_rows_group(3, qkv, odd, 1536, 12);   /* 40 rows (not whole blocks) go last */
        check_matmul_rows_group(3, qk_v6, odd, 1536, 16); /* v Q6_K alone after q and k */
        check_matmul_rows_group(3, qkv, llama, 4096, 9);
        check_matmul_rows_group(3, qkv, llama, 4096, 24); /* q on the staged kernel, k and v together */
        check_matmul_rows_group(3, qk_v6, llama, 4096, 32);
        check_matmul_rows_group(2, qkv, ffn, 1536, 16);
        check_matmul_rows_group(3, qkv, llama, 4096, 5); /* dp4a: each alone */
        check_matmul_rows_group(1, qkv, ffn, 1536, 13);
        check_matmul_rows_group(2, qkv, staged2, 1024, 24); /* on the staged kernel together (no split) */
        check_matmul_rows_group(3, qkv, staged3, 1024, 40); /* 4100 rows (not whole 128-row blocks) go last; eight token tiles */
        check_matmul_rows_group(3, qk_v6, staged3, 1024, 64); /* the Q6_K one alone */
        {
            forge_hip_product three[3];
            memset(three, 0, sizeof three);
            three[0].type = three[1].type = three[2].type = FORGE_TYPE_Q4_K, three[0].n_rows = 1536, three[1].n_rows = three[2].n_rows = 256;
            CHECK(forge_hip_matmul_rows_q8_group_form(3, three, 1536, 12, 1 << 20) == FORGE_HIP_FORM_F16_ROWS &&
                      forge_hip_matmul_rows_q8_group_form(3, three, 1536, 5, 1 << 20) == 0,
                  "the f16 form is made first for Q4_K of 12 tokens, not of 5 (dp4a)");
            three[0].n_rows = three[1].n_rows = 4096;
            CHECK(forge_hip_matmul_rows_q8_group_form(2, three, 1024, 24, 1 << 22) == FORGE_HIP_FORM_F16 &&
                      forge_hip_matmul_rows_q8_group_form(2, three, 1024, 12, 1 << 22) == FORGE_HIP_FORM_F16_ROWS,
                  "two products of 4096 rows: the staged kernel's form at 24 tokens, the rows kernel's at 12");
        }
    }
    check_norm_form(FORGE_TYPE_Q4_K, 1536, 1536, 12, 1, FORGE_HIP_FORM_F16_ROWS, 0);
    check_norm_form(FORGE_TYPE_Q4_K, 8960, 1536, 16, 0, FORGE_HIP_FORM_F16_ROWS, 0);
    check_norm_form(FORGE_TYPE_Q4_K, 1536, 1536, 8, 1, FORGE_HIP_FORM_F16_ROWS, 1); /* the other form there: made again */
    check_norm_form(FORGE_TYPE_Q4_K, 4096, 4096, 24, 1, FORGE_HIP_FORM_F16, 0);     /* the staged kernel */
    check_norm_form(FORGE_TYPE_Q4_K, 4096, 4096, 24, 0, FORGE_HIP_FORM_F16, 1);
    check_norm_form(FORGE_TYPE_Q6_K, 1024, 4096, 16, 1, FORGE_HIP_FORM_F16, 0);     /* Q6_K on the f16 units */
    check_norm_form(FORGE_TYPE_Q6_K, 1024, 4096, 12, 0, FORGE_HIP_FORM_F16, 1);
    { /* a rows-order form of rows that are not 256s wide is refused, nothing written */
        void *dx = dev_alloc(4 * 96 * sizeof(float), NULL), *dy = dev_alloc(4 * 96 * sizeof(float), NULL), *dw = dev_alloc(96 * sizeof(float), NULL);
        void *ws = dev_alloc(1 << 16, NULL);
        CHECK(forge_hip_add_rmsnorm((float *)dx, NULL, (const float *)dw, (float *)dy, 4, 96, 1e-5f, ws, FORGE_HIP_FORM_F16_ROWS, NULL, msg,
                                    sizeof msg) != 0 && strstr(msg, "256") != NULL,
              "add_rmsnorm: the rows form of 96 columns refused (%s)", msg);
        CHECK(forge_hip_add_rmsnorm((float *)dx, NULL, (const float *)dw, (float *)dy, 4, 96, 1e-5f, ws, 7, NULL, msg, sizeof msg) != 0,
              "add_rmsnorm: an unknown form refused");
        forge_hip_arena_free(dx), forge_hip_arena_free(dy), forge_hip_arena_free(dw), forge_hip_arena_free(ws);
    }
}

/* h = act(gate x) * (up x) in one launch, and h rounded into a second quantized vector */
static void check_glu_q8(uint32_t type, uint32_t n_rows, uint32_t n_cols, int act) {
    const forge_type_traits *t = forge_type_info(type);
    const size_t row_bytes = (size_t)n_cols / t->block_elems * t->block_bytes, n_w = (size_t)n_rows * n_cols;
    uint8_t *wg = (uint8_t *)xmalloc(row_bytes * n_rows), *wu = (uint8_t *)xmalloc(row_bytes * n_rows);
    float *fg = (float *)xmalloc(n_w * sizeof(float)), *fu = (float *)xmalloc(n_w * sizeof(float));
    float *x = (float *)xmalloc(n_cols * sizeof(float)), *dq = (float *)xmalloc(n_cols * sizeof(float));
    float *h = (float *)xmalloc(n_rows * sizeof(float));
    int8_t *q = (int8_t *)xmalloc(n_cols);
    double *ref = (double *)xmalloc(n_rows * sizeof(double));
    void *dwg, *dwu, *dx, *dq8, *dh, *dout;
    uint32_t r, c;
    random_blocks(type, wg, (uint64_t)n_rows * (n_cols / t->block_elems));
    random_blocks(type, wu, (uint64_t)n_rows * (n_cols / t->block_elems));
    forge_dequantize(type, wg, fg, n_w);
    forge_dequantize(type, wu, fu, n_w);
    random_floats(x, n_cols, -1.0f, 1.0f);
    q8_ref(x, n_cols, q, dq);
    for (r = 0; r < n_rows; r++) {
        double g = 0.0, u = 0.0;
        for (c = 0; c < n_cols; c++) g += (double)fg[(size_t)r * n_cols + c] * dq[c], u += (double)fu[(size_t)r * n_cols + c] * dq[c];
        ref[r] = (act ? gelu_ref(g) : g / (1.0 + exp(-g))) * u;
    }
    dwg = dev_weights(type, n_cols, row_bytes * n_rows, wg), dwu = dev_weights(type, n_cols, row_bytes * n_rows, wu);
    dx = dev_alloc(n_cols * sizeof(float), x);
    dq8 = dev_alloc(forge_hip_q8_bytes(n_cols), NULL), dh = dev_alloc(n_rows * sizeof(float), NULL);
    dout = dev_alloc(forge_hip_q8_bytes(n_rows), NULL);
    forge_hip_q8_quantize((const float *)dx, n_cols, dq8, NULL, msg, sizeof msg);
    CHECK(forge_hip_glu_q8(type, dwg, dwu, n_rows, n_cols, dq8, (float *)dh, dout, act, -1.0f, NULL, msg, sizeof msg) == 0, "glu q8 %s: %s",
          t->name, msg);
    if (dev_fetch(h, dh, n_rows * sizeof(float))) {
        check_staged_alike(type, dwg, dwu, n_rows, n_cols, dq8, NULL, NULL, act, h);
        const double err = norm_error_d(h, ref, n_rows);
        printf("  glu q8 %-5s %5u x %5u %s: err %.2e\n", t->name, n_rows, n_cols, act ? "gelu" : "silu", err);
        CHECK(err < 1e-4, "glu q8 %s %ux%u: normalized error %.3e", t->name, n_rows, n_cols, err);
        check_q8_vector(dout, h, n_rows, "glu q8 output");
    }
    forge_hip_arena_free(dwg), forge_hip_arena_free(dwu), forge_hip_arena_free(dx), forge_hip_arena_free(dq8), forge_hip_arena_free(dh);
    forge_hip_arena_free(dout);
    free(wg), free(wu), free(fg), free(fu), free(x), free(dq), free(h), free(q), free(ref);
}

/* q, k and v of one input in one launch: each output as its own forge_hip_matvec_q8 gives it (the
   column split may differ, so up to float rounding) */
static void check_matvec3_q8(uint32_t type_a, uint32_t type_b, uint32_t rows_q, uint32_t rows_kv, uint32_t n_cols, int with_bias) {
    const uint32_t rows[3] = {rows_q, rows_kv, rows_kv}, types[3] = {type_a, type_a, type_b};
    void *dw[3], *dy[3], *dy1[3], *db[3], *dx, *dq8;
    float *x = (float *)xmalloc(n_cols * sizeof(float)), *got = (float *)xmalloc(rows_q * sizeof(float)), *want = (float *)xmalloc(rows_q * sizeof(float));
    const void *w_arg[3];
    float *y_arg[3];
    const float *b_arg[3];
    double worst = 0.0;
    int i;
    random_floats(x, n_cols, -1.0f, 1.0f);
    dx = dev_alloc(n_cols * sizeof(float), x), dq8 = dev_alloc(forge_hip_q8_bytes(n_cols), NULL);
    forge_hip_q8_quantize((const float *)dx, n_cols, dq8, NULL, msg, sizeof msg);
    for (i = 0; i < 3; i++) {
        const forge_type_traits *t = forge_type_info(types[i]);
        const size_t bytes = (size_t)n_cols / t->block_elems * t->block_bytes * rows[i];
        uint8_t *w = (uint8_t *)xmalloc(bytes);
        float *bias = (float *)xmalloc(rows[i] * sizeof(float));
        random_blocks(types[i], w, (uint64_t)rows[i] * (n_cols / t->block_elems));
        random_floats(bias, rows[i], -1.0f, 1.0f);
        dw[i] = dev_weights(types[i], n_cols, bytes, w), db[i] = dev_alloc(rows[i] * sizeof(float), bias);
        dy[i] = dev_alloc(rows[i] * sizeof(float), NULL), dy1[i] = dev_alloc(rows[i] * sizeof(float), NULL);
        w_arg[i] = dw[i], y_arg[i] = (float *)dy[i], b_arg[i] = with_bias ? (const float *)db[i] : NULL;
        forge_hip_matvec_q8(types[i], dw[i], rows[i], n_cols, dq8, (float *)dy1[i], b_arg[i], 0, -1.0f, NULL, msg, sizeof msg);
        free(w), free(bias);
    }
    CHECK(forge_hip_matvec3_q8(type_a, type_b, w_arg, rows, n_cols, dq8, y_arg, b_arg, -1.0f, NULL, msg, sizeof msg) == 0, "matvec3 q8: %s", msg);
    for (i = 0; i < 3; i++)
        if (dev_fetch(got, dy[i], rows[i] * sizeof(float)) && dev_fetch(want, dy1[i], rows[i] * sizeof(float))) {
            const double err = norm_error_f(got, want, rows[i]);
            worst = err > worst ? err : worst;
        }
    printf("  matvec3 q8 %-5s %-5s %5u + 2 x %4u rows x %5u%s: err %.2e against three launches\n", forge_type_info(type_a)->name,
           forge_type_info(type_b)->name, rows_q, rows_kv, n_cols, with_bias ? " +bias" : "", worst);
    CHECK(worst < 1e-6, "matvec3 q8: normalized error %.3e against three launches", worst);
    for (i = 0; i < 3; i++) forge_hip_arena_free(dw[i]), forge_hip_arena_free(dy[i]), forge_hip_arena_free(dy1[i]), forge_hip_arena_free(db[i]);
    forge_hip_arena_free(dx), forge_hip_arena_free(dq8);
    free(x), free(got), free(want);
}

/* decode attention that also writes its output quantized: the output as forge_hip_attention_at's,
   the quantized vector as the rounding rule of that output; one pass and split with merge */
static void check_attention_q8(forge_kv_type kv, uint32_t n_head, uint32_t n_kv, uint32_t hd, uint32_t pos, int counters) {
    const uint32_t storage = forge__kv_storage_type(kv), n_ctx = 4096;
    const forge_type_traits *t = forge_type_info(storage);
    const size_t rk = hd / t->block_elems * t->block_bytes, cache_bytes = rk * n_kv * n_ctx, n_out = (size_t)n_head * hd;
    const size_t scratch_bytes = forge_hip_attention_scratch_bytes(n_ctx, 1, n_head, hd);
    float *kv_rows = (float *)xmalloc((size_t)n_ctx * n_kv * hd * sizeof(float)), *q = (float *)xmalloc(n_out * sizeof(float));
    float *o1 = (float *)xmalloc(n_out * sizeof(float)), *o2 = (float *)xmalloc(n_out * sizeof(float));
    void *dkv_f, *dk, *dv, *dq, *dout1, *dout2, *dq8, *dpos, *scratch, *dcount;
    forge_hip_attention_args a;
    random_floats(kv_rows, (size_t)n_ctx * n_kv * hd, -1.0f, 1.0f);
    random_floats(q, n_out, -1.0f, 1.0f);
    dkv_f = dev_alloc((size_t)n_ctx * n_kv * hd * sizeof(float), kv_rows);
    dk = dev_alloc(cache_bytes, NULL), dv = dev_alloc(cache_bytes, NULL);
    forge_hip_kv_store(storage, (const float *)dkv_f, (const float *)dkv_f, dk, dv, n_ctx, n_kv, hd, hd, 0, 0, NULL, msg, sizeof msg);
    dq = dev_alloc(n_out * sizeof(float), q), dout1 = dev_alloc(n_out * sizeof(float), NULL), dout2 = dev_alloc(n_out * sizeof(float), NULL);
    dq8 = dev_alloc(forge_hip_q8_bytes((uint32_t)n_out), NULL), dpos = dev_alloc(sizeof pos, &pos), scratch = dev_alloc(scratch_bytes, NULL);
    dcount = dev_alloc(n_head * sizeof(uint32_t), NULL);
    forge_hip_memset(dcount, 0, n_head * sizeof(uint32_t), NULL, msg, sizeof msg);
    memset(&a, 0, sizeof a);
    a.q = (const float *)dq, a.cache_k = dk, a.cache_v = dv, a.kv_type = storage, a.n_tokens = 1, a.n_head = n_head, a.n_head_kv = n_kv;
    a.head_dim = hd, a.head_dim_v = hd, a.pos0 = n_ctx - 1;
    a.out = (float *)dout1, a.counters = counters ? (uint32_t *)dcount : NULL;
    CHECK(forge_hip_attention_at(&a, (const uint32_t *)dpos, scratch, scratch_bytes, NULL, msg, sizeof msg) == 0, "attention_at: %s", msg);
    a.out = (float *)dout2;
    CHECK(forge_hip_attention_at_q8(&a, (const uint32_t *)dpos, dq8, scratch, scratch_bytes, NULL, msg, sizeof msg) == 0,
          "attention_at_q8: %s", msg);
    if (dev_fetch(o1, dout1, n_out * sizeof(float)) && dev_fetch(o2, dout2, n_out * sizeof(float))) {
        CHECK(memcmp(o1, o2, n_out * sizeof(float)) == 0, "attention_at_q8 %s pos %u: its output differs from attention_at's", t->name, pos);
        if (check_q8_vector(dq8, o2, n_out, "attention_at_q8"))
            printf("  attention q8 %-4s %u heads / %u, head_dim %u, position %u%s: output and its rounding as the rule\n", t->name, n_head,
                   n_kv, hd, pos, counters ? ", merged in the launch" : "");
    }
    forge_hip_arena_free(dkv_f), forge_hip_arena_free(dk), forge_hip_arena_free(dv), forge_hip_arena_free(dq), forge_hip_arena_free(dout1);
    forge_hip_arena_free(dout2), forge_hip_arena_free(dq8), forge_hip_arena_free(dpos), forge_hip_arena_free(scratch);
    forge_hip_arena_free(dcount);
    free(kv_rows), free(q), free(o1), free(o2);
}

/* One decode token's rope, cache store and attention in one launch (forge_hip_rope_attention_q8),
   bit for bit what forge_hip_rope_store then forge_hip_attention_at_q8 give: the output, its
   quantized form and every byte of both caches, over a cache whose rows (the token's cell included)
   hold earlier rows. Where the tile kernel takes the shape the query and key buffers come back
   unrotated (one launch); elsewhere the two launches rotate them in place. The fused launch runs
   twice more with the rotation's angles shared (rope.angles): once computing and writing them over
   a table of NaNs, then, on fresh buffers, reading them; both give the same bits again. */
static void check_rope_attention(forge_kv_type kv, uint32_t n_head, uint32_t n_kv, uint32_t hd, uint32_t n_rot, int mode, uint32_t pos,
                                 uint32_t n_cells, uint32_t window, int counters, int factors, int fused) {
    const uint32_t storage = forge__kv_storage_type(kv), n_ctx = 8192, n_rows = n_cells ? n_cells : n_ctx;
    const forge_type_traits *t = forge_type_info(storage);
    const size_t rk = hd / t->block_elems * t->block_bytes, cbytes = rk * n_kv * n_rows, nq = (size_t)n_head * hd, nk = (size_t)n_kv * hd;
    const size_t scratch_bytes = forge_hip_attention_scratch_bytes(n_ctx, 1, n_head, hd), q8_bytes = forge_hip_q8_bytes((uint32_t)nq);
    float *rows = (float *)xmalloc((size_t)n_rows * nk * sizeof(float)), *q = (float *)xmalloc(nq * sizeof(float));
    float *k = (float *)xmalloc(nk * sizeof(float)), *v = (float *)xmalloc(nk * sizeof(float)), *ff = (float *)xmalloc(hd * sizeof(float));
    float *o[4], *qb = (float *)xmalloc(nq * sizeof(float)), *kb = (float *)xmalloc(nk * sizeof(float)), angles[512];
    uint8_t *c[4], *b8[4];
    void *drows, *dv, *dpos, *dff, *dfreq, *dang, *dq[4], *dk[4], *dc[4], *dout[4], *dq8[4], *scratch[4], *dcount[4];
    forge_hip_attention_args a;
    forge_hip_rope_args rope;
    int i, ok = 1;
    size_t j, diff = 0;
    random_floats(rows, (size_t)n_rows * nk, -1.0f, 1.0f), random_floats(q, nq, -2.0f, 2.0f);
    random_floats(k, nk, -2.0f, 2.0f), random_floats(v, nk, -2.0f, 2.0f), random_floats(ff, hd, 1.0f, 8.0f);
    drows = dev_alloc((size_t)n_rows * nk * sizeof(float), rows), dv = dev_alloc(nk * sizeof(float), v);
    dpos = dev_alloc(sizeof pos, &pos), dff = dev_alloc(hd * sizeof(float), ff), dfreq = dev_alloc(hd / 2 * sizeof(double), NULL);
    for (j = 0; j < 512; j++) angles[j] = NAN;
    dang = dev_alloc(n_rot * sizeof(float), angles);
    for (i = 0; i < 4; i++) {
        dq[i] = dev_alloc(nq * sizeof(float), q), dk[i] = dev_alloc(nk * sizeof(float), k), dc[i] = dev_alloc(2 * cbytes, NULL);
        forge_hip_kv_store(storage, (const float *)drows, (const float *)drows, dc[i], (uint8_t *)dc[i] + cbytes, n_rows, n_kv, hd, hd, 0, 0,
                           NULL, msg, sizeof msg);
        dout[i] = dev_alloc(nq * sizeof(float), NULL), dq8[i] = dev_alloc(q8_bytes, NULL), scratch[i] = dev_alloc(scratch_bytes, NULL);
        dcount[i] = dev_alloc(n_head * sizeof(uint32_t), NULL);
        forge_hip_memset(dcount[i], 0, n_head * sizeof(uint32_t), NULL, msg, sizeof msg);
        o[i] = (float *)xmalloc(nq * sizeof(float)), c[i] = (uint8_t *)xmalloc(2 * cbytes), b8[i] = (uint8_t *)xmalloc(q8_bytes);
    }
    memset(&a, 0, sizeof a);
    a.cache_k = dc[0], a.cache_v = (uint8_t *)dc[0] + cbytes, a.kv_type = storage, a.n_tokens = 1, a.n_head = n_head, a.n_head_kv = n_kv;
    a.head_dim = hd, a.head_dim_v = hd, a.pos0 = n_ctx - 1, a.window = window, a.n_cells = n_cells;
    a.q = (const float *)dq[0], a.out = (float *)dout[0], a.counters = counters ? (uint32_t *)dcount[0] : NULL;
    CHECK(forge_hip_rope_store(storage, (float *)dq[0], (float *)dk[0], (const float *)dv, n_head, n_kv, hd, hd, n_rot, mode, 0,
                               (const uint32_t *)dpos, 10000.0f, 0.5f, factors ? (const float *)dff : NULL, (void *)a.cache_k,
                               (void *)a.cache_v, n_cells, NULL, msg, sizeof msg) == 0 &&
              forge_hip_attention_at_q8(&a, (const uint32_t *)dpos, dq8[0], scratch[0], scratch_bytes, NULL, msg, sizeof msg) == 0,
          "rope_store + attention_at_q8: %s", msg);
    memset(&rope, 0, sizeof rope);
    rope.n_rot = n_rot, rope.mode = mode, rope.freq_base = 10000.0f, rope.freq_scale = 0.5f;
    rope.freq_factors = factors ? (const float *)dff : NULL, rope.freq = (const double *)dfreq;
    CHECK(forge_hip_rope_freqs((double *)dfreq, n_rot, 10000.0f, NULL, msg, sizeof msg) == 0, "rope_freqs: %s", msg);
    for (i = 1; i < 4; i++) { /* 1: angles computed; 2: computed and written to dang; 3: read from dang */
        a.cache_k = dc[i], a.cache_v = (uint8_t *)dc[i] + cbytes;
        a.q = (const float *)dq[i], a.out = (float *)dout[i], a.counters = counters ? (uint32_t *)dcount[i] : NULL;
        rope.angles = i > 1 ? (float *)dang : NULL, rope.angles_ready = i == 3;
        CHECK(forge_hip_rope_attention_q8(&a, &rope, (float *)dk[i], (const float *)dv, (const uint32_t *)dpos, dq8[i], scratch[i],
                                          scratch_bytes, NULL, msg, sizeof msg) == 0,
              "rope_attention_q8 (angles %s): %s", i == 1 ? "none" : i == 2 ? "written" : "read", msg);
    }
    if (dev_fetch(angles, dang, n_rot * sizeof(float))) { /* the written angles, against the host's float64 */
        double worst = 0.0;
        for (j = 0; j < n_rot / 2; j++) {
            double theta = (double)pos * 0.5 * pow(10000.0, -2.0 * (double)j / (double)n_rot);
            if (factors) theta /= (double)ff[j];
            worst = fmax(worst, fmax(fabs(angles[j] - cos(theta)), fabs(angles[n_rot / 2 + j] - sin(theta))));
            if (angles[j] != angles[j] || angles[n_rot / 2 + j] != angles[n_rot / 2 + j]) worst = 1.0;
        }
        CHECK(worst < 1e-6, "rope_attention_q8 %s pos %u: the written angles are %g from cos/sin", t->name, pos, worst);
    }
    ok = dev_fetch(o[0], dout[0], nq * sizeof(float)) && dev_fetch(c[0], dc[0], 2 * cbytes) && dev_fetch(b8[0], dq8[0], q8_bytes);
    for (i = 2; i < 4; i++) {
        const int fetched = ok && dev_fetch(o[i], dout[i], nq * sizeof(float)) && dev_fetch(c[i], dc[i], 2 * cbytes) &&
                            dev_fetch(b8[i], dq8[i], q8_bytes);
        CHECK(fetched && memcmp(o[0], o[i], nq * sizeof(float)) == 0 && memcmp(b8[0], b8[i], q8_bytes) == 0 && memcmp(c[0], c[i], 2 * cbytes) == 0,
              "rope_attention_q8 %s pos %u with the angles %s: not the bits of rope_store + attention_at_q8", t->name, pos,
              i == 2 ? "written" : "read");
    }
    ok = ok && dev_fetch(o[1], dout[1], nq * sizeof(float)) && dev_fetch(c[1], dc[1], 2 * cbytes) && dev_fetch(b8[1], dq8[1], q8_bytes);
    if (ok && dev_fetch(qb, dq[1], nq * sizeof(float)) && dev_fetch(kb, dk[1], nk * sizeof(float))) {
        const int untouched = memcmp(qb, q, nq * sizeof(float)) == 0 && memcmp(kb, k, nk * sizeof(float)) == 0;
        for (j = 0; j < 2 * cbytes; j++) diff += c[0][j] != c[1][j];
        printf("  rope+attention %-4s %2u heads / %u, head_dim %3u, rot %3u %s, position %4u%s%s%s: %s, %zu cache bytes differ\n", t->name,
               n_head, n_kv, hd, n_rot, mode == 2 ? "NEOX" : "NORM", pos, n_cells ? ", ring" : "", counters ? ", counters" : "",
               factors ? ", factors" : "", untouched ? "one launch" : "two launches", diff);
        CHECK(memcmp(o[0], o[1], nq * sizeof(float)) == 0 && memcmp(b8[0], b8[1], q8_bytes) == 0 && diff == 0,
              "rope_attention_q8 %s pos %u: output %s, q8 %s, %zu cache bytes differ from rope_store + attention_at_q8", t->name, pos,
              memcmp(o[0], o[1], nq * sizeof(float)) ? "differs" : "equal", memcmp(b8[0], b8[1], q8_bytes) ? "differs" : "equal", diff);
        CHECK(untouched == fused, "rope_attention_q8 %s head_dim %u: expected %s", t->name, hd, fused ? "one launch" : "two launches");
    }
    for (i = 0; i < 4; i++) {
        forge_hip_arena_free(dq[i]), forge_hip_arena_free(dk[i]), forge_hip_arena_free(dc[i]), forge_hip_arena_free(dout[i]);
        forge_hip_arena_free(dq8[i]), forge_hip_arena_free(scratch[i]), forge_hip_arena_free(dcount[i]);
        free(o[i]), free(c[i]), free(b8[i]);
    }
    forge_hip_arena_free(drows), forge_hip_arena_free(dv), forge_hip_arena_free(dpos), forge_hip_arena_free(dff), forge_hip_arena_free(dfreq);
    forge_hip_arena_free(dang);
    free(rows), free(q), free(k), free(v), free(ff), free(qb), free(kb);
}

static void test_rope_attention(void) {
    static const uint32_t positions[] = {0, 40, 127, 128, 300, 5000};
    forge_hip_attention_args a;
    forge_hip_rope_args rope;
    size_t i;
    TEST_CASE("decode rope + KV store + attention in one launch");
    for (i = 0; i < sizeof positions / sizeof positions[0]; i++) {
        check_rope_attention(FORGE_KV_F16, 32, 8, 128, 128, 0, positions[i], 0, 0, 1, 0, 1); /* Llama-3-8B */
        check_rope_attention(FORGE_KV_Q8_0, 12, 2, 128, 128, 2, positions[i], 0, 0, i % 2, 0, 1); /* Qwen2.5-1.5B */
    }
    check_rope_attention(FORGE_KV_Q4_0, 32, 8, 128, 128, 0, 3000, 0, 0, 1, 1, 1);
    check_rope_attention(FORGE_KV_F16, 14, 2, 64, 48, 2, 77, 0, 0, 0, 0, 1);      /* partial rotary */
    check_rope_attention(FORGE_KV_F16, 24, 4, 64, 64, 0, 900, 0, 0, 1, 0, 1);     /* groups of 6: two blocks of 3 heads */
    check_rope_attention(FORGE_KV_Q4_0, 14, 2, 64, 48, 2, 77, 0, 0, 0, 0, 0);     /* 36- and 68-byte rows: not the tile kernel's */
    check_rope_attention(FORGE_KV_Q8_0, 24, 4, 64, 64, 0, 900, 0, 0, 1, 0, 0);
    check_rope_attention(FORGE_KV_F16, 8, 1, 256, 256, 2, 130, 0, 0, 1, 1, 1);    /* groups of 8 */
    check_rope_attention(FORGE_KV_F16, 8, 4, 256, 128, 2, 700, 512, 512, 1, 0, 1); /* a ring: cell 700 % 512 held position 188 */
    check_rope_attention(FORGE_KV_Q8_0, 16, 8, 128, 128, 2, 4100, 1024, 1000, 0, 0, 1);
    check_rope_attention(FORGE_KV_F32, 16, 16, 64, 64, 0, 700, 0, 0, 1, 0, 0); /* shapes the tile kernel does not take */
    check_rope_attention(FORGE_KV_F16, 16, 4, 96, 96, 2, 300, 0, 0, 1, 0, 0);
    check_rope_attention(FORGE_KV_F16, 16, 4, 128, 128, 0, 300, 32, 32, 1, 0, 0);
    { /* refusals: nothing is launched, so the pointers are never read */
        void *fake = (void *)(uintptr_t)64;
        memset(&a, 0, sizeof a);
        a.kv_type = FORGE_TYPE_F16, a.n_tokens = 1, a.n_head = 8, a.n_head_kv = 8, a.head_dim = 64, a.head_dim_v = 64, a.pos0 = 100;
        a.q = (const float *)fake;
        memset(&rope, 0, sizeof rope);
        rope.n_rot = 63, rope.freq_base = 1e4f, rope.freq_scale = 1.0f, rope.freq = (const double *)fake;
        CHECK(forge_hip_rope_attention_q8(&a, &rope, (float *)fake, (const float *)fake, (const uint32_t *)fake, fake, NULL, 0, NULL, msg,
                                          sizeof msg) == -1 && strstr(msg, "rotary"),
              "an odd rotary width must be refused: %s", msg);
        rope.n_rot = 64, rope.mode = 1;
        CHECK(forge_hip_rope_attention_q8(&a, &rope, (float *)fake, (const float *)fake, (const uint32_t *)fake, fake, NULL, 0, NULL, msg,
                                          sizeof msg) == -1,
              "rope mode 1 must be refused");
        rope.mode = 0, rope.freq = NULL;
        CHECK(forge_hip_rope_attention_q8(&a, &rope, (float *)fake, (const float *)fake, (const uint32_t *)fake, fake, NULL, 0, NULL, msg,
                                          sizeof msg) == -1 && strstr(msg, "table"),
              "no frequency table must be refused: %s", msg);
        rope.freq = (const double *)fake;
        CHECK(forge_hip_rope_attention_q8(&a, &rope, NULL, (const float *)fake, (const uint32_t *)fake, fake, NULL, 0, NULL, msg,
                                          sizeof msg) == -1,
              "no key rows must be refused");
        a.n_tokens = 2;
        CHECK(forge_hip_rope_attention_q8(&a, &rope, (float *)fake, (const float *)fake, (const uint32_t *)fake, fake, NULL, 0, NULL, msg,
                                          sizeof msg) == -1,
              "two tokens must be refused");
        CHECK(forge_hip_rope_freqs(NULL, 64, 1e4f, NULL, msg, sizeof msg) == -1 && forge_hip_rope_freqs((double *)fake, 0, 1e4f, NULL, msg,
                                                                                                      sizeof msg) == -1,
              "rope_freqs without a table or with no rotated dims must be refused");
    }
}

/* The kernels' sum over 32 lanes in butterfly order (each step adds the lane m apart): lane 0's total */
static float butterfly32(float lane[32]) {
    uint32_t t;
    int m;
    for (m = 16; m > 0; m >>= 1) {
        float next[32];
        for (t = 0; t < 32; t++) next[t] = lane[t] + lane[t ^ (uint32_t)m];
        memcpy(lane, next, sizeof next);
    }
    return lane[0];
}

/* forge__q8_norm_scale on the host: each lane's groups in order, then the butterfly over 32 lanes */
static float norm_scale_ref(const float *fourth, uint32_t n, float eps) {
    float lane[32];
    uint32_t t, g;
    for (t = 0; t < 32; t++) {
        lane[t] = 0.0f;
        for (g = t; g < n / 32; g += 32) lane[t] += fourth[g];
    }
    return 1.0f / sqrtf(butterfly32(lane) / (float)n + eps);
}

/* A residual product that prepares the RMS norm after it (forge_hip_matvec_norm_q8), and the
   products that read its output as a normalized input:
   - the residual is forge_hip_matvec_q8's with accumulate (up to the order of its column sums);
   - the quantized vector is y * norm_w by the rounding rule, each group's fourth float the sum of
     squares of y in the kernel's butterfly order (exact);
   - a product with norm_eps is the plain product of the same vector times the norm's factor, to the
     bit (with and without bias), and within the activations' rounding (2e-2) of a double product of
     rmsnorm(y) * norm_w; three products in one launch and the gate/up launch as their single
     launches give them. */
static void check_norm_q8(uint32_t type, uint32_t n_embd, uint32_t n_in, uint32_t type2, uint32_t n_out, int with_bias) {
    const forge_type_traits *t = forge_type_info(type), *t2 = forge_type_info(type2);
    const size_t row_bytes = (size_t)n_in / t->block_elems * t->block_bytes, row2 = (size_t)n_embd / t2->block_elems * t2->block_bytes;
    const size_t ds = (n_embd + 255) / 256 * 256, qn_bytes = forge_hip_q8_bytes(n_embd);
    const float eps = 1e-5f;
    uint8_t *w = (uint8_t *)xmalloc(row_bytes * n_embd), *w2 = (uint8_t *)xmalloc(row2 * n_out), *got = (uint8_t *)xmalloc(qn_bytes);
    float *a = (float *)xmalloc(n_in * sizeof(float)), *x0 = (float *)xmalloc(n_embd * sizeof(float));
    float *nw = (float *)xmalloc(n_embd * sizeof(float)), *bias = (float *)xmalloc(n_embd * sizeof(float));
    float *b2 = (float *)xmalloc(n_out * sizeof(float)), *y = (float *)xmalloc(n_embd * sizeof(float));
    float *y_ref = (float *)xmalloc(n_embd * sizeof(float)), *v = (float *)xmalloc(n_embd * sizeof(float));
    float *fourth = (float *)xmalloc(n_embd / 32 * sizeof(float)), *f2 = (float *)xmalloc((size_t)n_out * n_embd * sizeof(float));
    float *out_n = (float *)xmalloc(n_out * sizeof(float)), *out_p = (float *)xmalloc(n_out * sizeof(float));
    float *out_b = (float *)xmalloc(n_out * sizeof(float));
    double *ref = (double *)xmalloc(n_out * sizeof(double));
    void *dw, *dw2, *da, *dqa, *dy, *dy_ref, *dnw, *db, *db2, *dqn, *dout, *dout2, *dout3[3], *dglu, *dglu_q;
    uint32_t i, r, bad_sq = 0, bad_n = 0, bad_b = 0;
    double res_err;
    float scale;
    random_blocks(type, w, (uint64_t)n_embd * (n_in / t->block_elems));
    random_blocks(type2, w2, (uint64_t)n_out * (n_embd / t2->block_elems));
    forge_dequantize(type2, w2, f2, (uint64_t)n_out * n_embd);
    random_floats(a, n_in, -1.0f, 1.0f), random_floats(x0, n_embd, -3.0f, 3.0f), random_floats(nw, n_embd, 0.5f, 1.5f);
    random_floats(bias, n_embd, -1.0f, 1.0f), random_floats(b2, n_out, -1.0f, 1.0f);
    dw = dev_weights(type, n_in, row_bytes * n_embd, w), dw2 = dev_weights(type2, n_embd, row2 * n_out, w2);
    da = dev_alloc(n_in * sizeof(float), a);
    dqa = dev_alloc(forge_hip_q8_bytes(n_in), NULL), dy = dev_alloc(n_embd * sizeof(float), x0);
    dy_ref = dev_alloc(n_embd * sizeof(float), x0), dnw = dev_alloc(n_embd * sizeof(float), nw);
    db = dev_alloc(n_embd * sizeof(float), bias), db2 = dev_alloc(n_out * sizeof(float), b2), dqn = dev_alloc(qn_bytes, NULL);
    dout = dev_alloc(n_out * sizeof(float), NULL), dout2 = dev_alloc(n_out * sizeof(float), NULL);
    for (i = 0; i < 3; i++) dout3[i] = dev_alloc(n_out * sizeof(float), NULL);
    dglu = dev_alloc(n_out * sizeof(float), NULL), dglu_q = dev_alloc(forge_hip_q8_bytes(n_out), NULL);
    forge_hip_q8_quantize((const float *)da, n_in, dqa, NULL, msg, sizeof msg);
    CHECK(forge_hip_matvec_norm_q8(type, dw, n_embd, n_in, dqa, (float *)dy, with_bias ? (const float *)db : NULL, (const float *)dnw, dqn,
                                   NULL, msg, sizeof msg) == 0,
          "matvec norm q8 %s: %s", t->name, msg);
    forge_hip_matvec_q8(type, dw, n_embd, n_in, dqa, (float *)dy_ref, with_bias ? (const float *)db : NULL, 1, -1.0f, NULL, msg, sizeof msg);
    if (!dev_fetch(y, dy, n_embd * sizeof(float)) || !dev_fetch(y_ref, dy_ref, n_embd * sizeof(float)) || !dev_fetch(got, dqn, qn_bytes))
        goto done;
    for (i = 0; i < n_embd; i++) v[i] = y[i] * nw[i];
    res_err = norm_error_f(y, y_ref, n_embd); /* the columns may split differently: up to float rounding */
    CHECK(res_err < 1e-6, "matvec norm q8 %s %ux%u: the residual is %.3e from matvec q8's", t->name, n_embd, n_in, res_err);
    check_q8_vector(dqn, v, n_embd, "matvec norm q8 output");
    for (i = 0; i < n_embd / 32; i++) { /* the group's butterfly, as the kernel's lanes add */
        float lane[32], want;
        for (r = 0; r < 32; r++) lane[r] = y[32 * i + r] * y[32 * i + r];
        want = butterfly32(lane);
        memcpy(&fourth[i], got + ds + 16 * i + 12, sizeof(float));
        bad_sq += memcmp(&fourth[i], &want, sizeof(float)) != 0;
    }
    CHECK(bad_sq == 0, "matvec norm q8: %u of %u group sums of squares differ", bad_sq, n_embd / 32);
    scale = norm_scale_ref(fourth, n_embd, eps);
    /* the reader: normalized, plain, normalized with bias */
    forge_hip_matvec_q8(type2, dw2, n_out, n_embd, dqn, (float *)dout, NULL, 0, eps, NULL, msg, sizeof msg);
    forge_hip_matvec_q8(type2, dw2, n_out, n_embd, dqn, (float *)dout2, NULL, 0, -1.0f, NULL, msg, sizeof msg);
    CHECK(forge_hip_matvec_q8(type2, dw2, n_out, n_embd, dqn, (float *)dout3[0], (const float *)db2, 0, eps, NULL, msg, sizeof msg) == 0,
          "matvec q8 normalized: %s", msg);
    if (dev_fetch(out_n, dout, n_out * sizeof(float)) && dev_fetch(out_p, dout2, n_out * sizeof(float)) &&
        dev_fetch(out_b, dout3[0], n_out * sizeof(float))) {
        double ss = 0.0, err;
        for (r = 0; r < n_out; r++) {
            const float want = out_p[r] * scale, want_b = want + b2[r];
            bad_n += memcmp(&out_n[r], &want, sizeof(float)) != 0;
            bad_b += memcmp(&out_b[r], &want_b, sizeof(float)) != 0;
        }
        for (i = 0; i < n_embd; i++) ss += (double)y[i] * y[i];
        for (r = 0; r < n_out; r++) {
            double s = 0.0;
            for (i = 0; i < n_embd; i++) s += (double)f2[(size_t)r * n_embd + i] * (y[i] / sqrt(ss / n_embd + eps) * nw[i]);
            ref[r] = s;
        }
        err = norm_error_d(out_n, ref, n_out);
        printf("  norm q8 %-5s %5u x %5u%s -> %-5s %5u rows: err %.2e against rmsnorm in double\n", t->name, n_embd, n_in,
               with_bias ? " +bias" : "", t2->name, n_out, err);
        CHECK(bad_n == 0 && bad_b == 0, "matvec q8 normalized %s: %u and %u (with bias) of %u rows are not the plain rows times the scale",
              t2->name, bad_n, bad_b, n_out);
        CHECK(err < 2e-2, "matvec q8 normalized %s: normalized error %.3e against rmsnorm in double", t2->name, err);
    }
    /* three products of the normalized input in one launch, and gate/up */
    if (forge_hip_matvec3_q8_ok(type2, type2)) {
        const void *w3[3];
        const uint32_t rows3[3] = {n_out, n_out, n_out};
        float *y3[3];
        const float *b3[3] = {NULL, NULL, NULL};
        for (i = 0; i < 3; i++) w3[i] = dw2, y3[i] = (float *)dout3[i];
        CHECK(forge_hip_matvec3_q8(type2, type2, w3, rows3, n_embd, dqn, y3, b3, eps, NULL, msg, sizeof msg) == 0,
              "matvec3 q8 normalized: %s", msg);
        for (i = 0; i < 3; i++)
            if (dev_fetch(out_b, dout3[i], n_out * sizeof(float))) {
                const double err = norm_error_f(out_b, out_n, n_out);
                CHECK(err < 1e-6, "matvec3 q8 normalized: output %u is %.3e from the single launch", i, err);
            }
    }
    if (n_out % 32 == 0) {
        CHECK(forge_hip_glu_q8(type2, dw2, dw2, n_out, n_embd, dqn, (float *)dglu, dglu_q, 0, eps, NULL, msg, sizeof msg) == 0,
              "glu q8 normalized: %s", msg);
        if (dev_fetch(out_b, dglu, n_out * sizeof(float))) { /* gate = up: h = silu(g) * g, g the single product's row */
            double err;
            for (r = 0; r < n_out; r++) ref[r] = out_n[r] / (1.0 + exp(-(double)out_n[r])) * out_n[r];
            err = norm_error_d(out_b, ref, n_out); /* the launches add the columns in different orders */
            CHECK(err < 1e-5, "glu q8 normalized: %.3e from silu(g) * u of the single products", err);
        }
    }
done:
    forge_hip_arena_free(dw), forge_hip_arena_free(dw2), forge_hip_arena_free(da), forge_hip_arena_free(dqa), forge_hip_arena_free(dy);
    forge_hip_arena_free(dy_ref), forge_hip_arena_free(dnw), forge_hip_arena_free(db), forge_hip_arena_free(db2), forge_hip_arena_free(dqn);
    forge_hip_arena_free(dout), forge_hip_arena_free(dout2), forge_hip_arena_free(dglu), forge_hip_arena_free(dglu_q);
    for (i = 0; i < 3; i++) forge_hip_arena_free(dout3[i]);
    free(w), free(w2), free(got), free(a), free(x0), free(nw), free(bias), free(b2), free(y), free(y_ref), free(v), free(fourth), free(f2);
    free(out_n), free(out_p), free(out_b), free(ref);
}

static void test_q8(void) {
    static const uint32_t q8_types[] = {FORGE_TYPE_Q4_0, FORGE_TYPE_Q8_0, FORGE_TYPE_Q4_K, FORGE_TYPE_Q6_K};
    size_t i;
    TEST_CASE("decode on 8-bit activations");
    for (i = 0; i < sizeof q8_types / sizeof q8_types[0]; i++) {
        const uint32_t type = q8_types[i];
        CHECK(forge_hip_q8_type(type) == 1, "type %u should have an 8-bit path", type);
        check_matvec_q8(type, 300, 1024, 0, 0);  /* a partial block of rows */
        check_matvec_q8(type, 129, 2304, 1, 1);  /* bias and accumulate, the columns split over waves */
        check_matvec_q8(type, 1024, 4096, 0, 1); /* a narrow projection */
        check_matvec_q8(type, 5000, 1536, 1, 0);
        check_matvec_q8(type, 1536, 8960, 0, 1); /* Qwen2.5-1.5B's down projection: rows staged in shared memory (sm_90) */
        check_matvec_q8(type, 1030, 8960, 1, 0); /* staged, the last block's rows partly past the end */
        check_glu_q8(type, 320, 1536, 0);
        check_glu_q8(type, 96, 4096, 1);
    }
    check_matvec3_q8(FORGE_TYPE_Q4_K, FORGE_TYPE_Q6_K, 4096, 1024, 4096, 0); /* Llama-3-8B q, k, v */
    check_matvec3_q8(FORGE_TYPE_Q4_K, FORGE_TYPE_Q4_K, 1536, 256, 1536, 1);  /* Qwen2.5-1.5B, with biases */
    check_matvec3_q8(FORGE_TYPE_Q4_K, FORGE_TYPE_Q6_K, 1536, 256, 1536, 1);  /* its Q6_K value rows, 4-aligned in the device layout */
    check_matvec3_q8(FORGE_TYPE_Q4_0, FORGE_TYPE_Q4_0, 300, 100, 1024, 1);
    check_matvec3_q8(FORGE_TYPE_Q8_0, FORGE_TYPE_Q8_0, 2048, 512, 2048, 0);
    check_matvec3_q8(FORGE_TYPE_Q6_K, FORGE_TYPE_Q6_K, 896, 128, 2304, 1);
    CHECK(forge_hip_matvec3_q8_ok(FORGE_TYPE_Q6_K, FORGE_TYPE_Q4_K) == 0, "Q6_K then Q4_K is not a pair the launch takes");
    check_norm_q8(FORGE_TYPE_Q4_K, 4096, 4096, FORGE_TYPE_Q4_K, 1024, 0); /* Llama-3-8B: output projection -> k */
    check_norm_q8(FORGE_TYPE_Q6_K, 1536, 8960, FORGE_TYPE_Q4_K, 256, 1);  /* Qwen2.5-1.5B: down -> gate */
    check_norm_q8(FORGE_TYPE_Q6_K, 2048, 1536, FORGE_TYPE_Q6_K, 256, 0);  /* Q6_K in the device layout, rows 4- then 16-aligned */
    check_norm_q8(FORGE_TYPE_Q4_0, 64, 1024, FORGE_TYPE_Q8_0, 96, 1);     /* two blocks of rows */
    check_norm_q8(FORGE_TYPE_Q8_0, 2048, 2048, FORGE_TYPE_Q6_K, 300, 0);  /* a reader without a gate/up shape */
    check_norm_q8(FORGE_TYPE_Q4_K, 8192, 4096, FORGE_TYPE_Q4_0, 64, 1);   /* enough blocks to fill the machine unsplit */
    check_attention_q8(FORGE_KV_F16, 32, 8, 128, 5, 0);    /* one pass */
    check_attention_q8(FORGE_KV_F16, 32, 8, 128, 3000, 0); /* split, merged by a second launch */
    check_attention_q8(FORGE_KV_F16, 32, 8, 128, 3000, 1); /* split, merged in the launch */
    check_attention_q8(FORGE_KV_Q8_0, 12, 2, 128, 2000, 1);
    check_attention_q8(FORGE_KV_F32, 16, 16, 64, 700, 1);
    check_attention_q8(FORGE_KV_F16, 8, 1, 256, 100, 1);
    check_attention_q8(FORGE_KV_F16, 16, 1, 128, 100, 1);  /* a group of 16: four blocks of four heads */
    check_attention_q8(FORGE_KV_F16, 16, 1, 96, 100, 1);   /* heads the decode kernel does not take: a quantize launch after */
    { /* rmsnorm with its quantized output: the f32 result as forge_hip_rmsnorm, the bytes as the rule */
        const uint32_t n = 4096;
        float *x = (float *)xmalloc(n * sizeof(float)), *w = (float *)xmalloc(n * sizeof(float)), *y = (float *)xmalloc(n * sizeof(float));
        float *y2 = (float *)xmalloc(n * sizeof(float));
        void *dx, *dw, *dy, *dy2, *dq8;
        random_floats(x, n, -2.0f, 2.0f), random_floats(w, n, 0.5f, 1.5f);
        dx = dev_alloc(n * sizeof(float), x), dw = dev_alloc(n * sizeof(float), w), dy = dev_alloc(n * sizeof(float), NULL);
        dy2 = dev_alloc(n * sizeof(float), NULL), dq8 = dev_alloc(forge_hip_q8_bytes(n), NULL);
        CHECK(forge_hip_rmsnorm_q8((const float *)dx, (const float *)dw, (float *)dy, n, 1e-5f, dq8, NULL, msg, sizeof msg) == 0,
              "rmsnorm q8: %s", msg);
        forge_hip_rmsnorm((const float *)dx, (const float *)dw, (float *)dy2, 1, n, 1e-5f, NULL, msg, sizeof msg);
        if (dev_fetch(y, dy, n * sizeof(float)) && dev_fetch(y2, dy2, n * sizeof(float))) {
            const double err = norm_error_f(y, y2, n);
            CHECK(err < 1e-6, "rmsnorm q8: its f32 output is %.3e from rmsnorm's", err);
            check_q8_vector(dq8, y, n, "rmsnorm q8");
        }
        forge_hip_arena_free(dx), forge_hip_arena_free(dw), forge_hip_arena_free(dy), forge_hip_arena_free(dy2), forge_hip_arena_free(dq8);
        free(x), free(w), free(y), free(y2);
    }
    /* refusals */
    CHECK(forge_hip_q8_type(FORGE_TYPE_F16) == 0 && forge_hip_q8_type(FORGE_TYPE_Q5_K) == 0, "F16 and Q5_K have no 8-bit path");
    CHECK(forge_hip_matvec_q8(FORGE_TYPE_F16, NULL, 4, 64, NULL, NULL, NULL, 0, -1.0f, NULL, msg, sizeof msg) == -1 && strstr(msg, "8-bit"),
          "an F16 matvec on 8-bit activations must be refused: %s", msg);
    CHECK(forge_hip_matvec_q8(FORGE_TYPE_Q4_K, NULL, 4, 100, NULL, NULL, NULL, 0, -1.0f, NULL, msg, sizeof msg) == -1 && strstr(msg, "256"),
          "a Q4_K row of 100 elements must be refused: %s", msg);
    CHECK(forge_hip_q8_quantize(NULL, 100, NULL, NULL, msg, sizeof msg) == -1, "a width of 100 must be refused");
    CHECK(forge_hip_glu_q8(FORGE_TYPE_Q4_0, NULL, NULL, 40, 64, NULL, NULL, NULL, 0, -1.0f, NULL, msg, sizeof msg) == -1 && strstr(msg, "32"),
          "glu q8 over 40 rows must be refused: %s", msg);
    CHECK(forge_hip_matvec_norm_q8(FORGE_TYPE_Q4_K, NULL, 40, 256, NULL, NULL, NULL, (const float *)msg, NULL, NULL, msg, sizeof msg) == -1 &&
              strstr(msg, "32"),
          "matvec norm q8 over 40 rows must be refused: %s", msg);
    CHECK(forge_hip_matvec_norm_q8_ok(FORGE_TYPE_Q4_K, 40, 4096) == 0 && forge_hip_matvec_norm_q8_ok(FORGE_TYPE_F16, 1u << 20, 4096) == 0,
          "40 rows are not whole groups, F16 has no 8-bit path: no prepared norm");
    CHECK(forge_hip_matvec_norm_q8_ok(FORGE_TYPE_Q6_K, 1u << 20, 8960) == 0, "Q6_K rows of an odd count of super-blocks: no prepared norm");
    CHECK(forge_hip_matvec_norm_q8_ok(FORGE_TYPE_Q6_K, 4096, 14336) == forge_hip_matvec_norm_q8_ok(FORGE_TYPE_Q4_K, 4096, 14336),
          "Q6_K rows in the device layout: prepared where Q4_K's would be");
    CHECK(forge_hip_matvec_norm_q8(FORGE_TYPE_Q4_K, NULL, 64, 256, NULL, NULL, NULL, NULL, NULL, NULL, msg, sizeof msg) == -1 &&
              strstr(msg, "norm weights"),
          "matvec norm q8 without norm weights must be refused: %s", msg);
    CHECK(forge_hip_matvec_norm_q8(FORGE_TYPE_F16, NULL, 64, 256, NULL, NULL, NULL, (const float *)msg, NULL, NULL, msg, sizeof msg) == -1 &&
              strstr(msg, "8-bit"),
          "an F16 matvec norm q8 must be refused: %s", msg);
}

/* Decode products at the shapes of real models, the f32-activation kernel against the 8-bit one:
   microseconds a launch and GB/s of the weights it reads (200 launches after a warm-up). The
   launches walk through copies of the matrix that together exceed 256 MiB, so the weights come from
   device memory and not from a cache that still holds the last launch's. "glu" rows time the
   gate/up launch (two matrices of the shape, the activation between them), as a decode step runs
   it; its bytes count both matrices. */
static void bench_decode_shapes(void) {
    static const struct { uint32_t type, rows, cols; int glu; const char *what; } shapes[] = {
        {FORGE_TYPE_Q4_K, 4096, 4096, 0, "8B q/o"},          {FORGE_TYPE_Q4_K, 1024, 4096, 0, "8B k"},
        {FORGE_TYPE_Q6_K, 1024, 4096, 0, "8B v"},            {FORGE_TYPE_Q4_K, 14336, 4096, 0, "8B gate/up"},
        {FORGE_TYPE_Q4_K, 14336, 4096, 1, "8B glu"},         {FORGE_TYPE_Q6_K, 4096, 14336, 0, "8B down (Q6_K)"},
        {FORGE_TYPE_Q4_K, 4096, 14336, 0, "8B down (Q4_K)"}, {FORGE_TYPE_Q6_K, 128256, 4096, 0, "8B head"},
        {FORGE_TYPE_Q4_K, 1536, 1536, 0, "1.5B q/o"},        {FORGE_TYPE_Q4_K, 256, 1536, 0, "1.5B k/v"},
        {FORGE_TYPE_Q4_K, 8960, 1536, 1, "1.5B glu"},        {FORGE_TYPE_Q6_K, 1536, 8960, 0, "1.5B down"},
        {FORGE_TYPE_Q6_K, 151936, 1536, 0, "1.5B head"},     {FORGE_TYPE_Q4_0, 14336, 4096, 1, "8B glu Q4_0"},
        {FORGE_TYPE_Q8_0, 14336, 4096, 1, "8B glu Q8_0"},    {FORGE_TYPE_Q4_0, 4096, 14336, 0, "8B down Q4_0"},
    };
    const uint32_t reps = 200;
    size_t i;
    printf("decode products (us a launch, GB/s of weights, weights from device memory): f32 activations | 8-bit activations\n");
    for (i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const forge_type_traits *t = forge_type_info(shapes[i].type);
        const size_t bytes = (size_t)shapes[i].cols / t->block_elems * t->block_bytes * shapes[i].rows;
        const size_t launch_bytes = bytes * (shapes[i].glu ? 2 : 1);
        uint32_t n_copies = (uint32_t)((((size_t)256 << 20) + bytes - 1) / bytes), c, k;
        uint8_t *w = (uint8_t *)xmalloc(bytes);
        float *x = (float *)xmalloc(shapes[i].cols * sizeof(float));
        void *dw[64], *dx, *dy, *dq8, *dq8_out;
        double t0, t1, t2;
        if (n_copies < 2) n_copies = 2;
        if (n_copies > 64) n_copies = 64;
        random_blocks(shapes[i].type, w, (uint64_t)shapes[i].rows * (shapes[i].cols / t->block_elems));
        random_floats(x, shapes[i].cols, -1.0f, 1.0f);
        for (c = 0; c < n_copies; c++) dw[c] = dev_weights(shapes[i].type, shapes[i].cols, bytes, w);
        dx = dev_alloc(shapes[i].cols * sizeof(float), x), dy = dev_alloc(shapes[i].rows * sizeof(float), NULL);
        dq8 = dev_alloc(forge_hip_q8_bytes(shapes[i].cols), NULL), dq8_out = dev_alloc(forge_hip_q8_bytes(shapes[i].rows), NULL);
        forge_hip_q8_quantize((const float *)dx, shapes[i].cols, dq8, NULL, msg, sizeof msg);
        if (shapes[i].glu) /* a warm-up launch of each kernel timed below */
            forge_hip_glu_q8(shapes[i].type, dw[0], dw[1], shapes[i].rows, shapes[i].cols, dq8, (float *)dy, dq8_out, 0, -1.0f, NULL, msg,
                             sizeof msg);
        else {
            forge_hip_matvec(shapes[i].type, dw[0], shapes[i].rows, shapes[i].cols, (const float *)dx, (float *)dy, NULL, NULL, msg, sizeof msg);
            forge_hip_matvec_q8(shapes[i].type, dw[0], shapes[i].rows, shapes[i].cols, dq8, (float *)dy, NULL, 0, -1.0f, NULL, msg,
                                sizeof msg);
        }
        forge_hip_stream_sync(NULL, msg, sizeof msg);
        t0 = now_s();
        for (k = 0; k < reps && !shapes[i].glu; k++)
            forge_hip_matvec(shapes[i].type, dw[k % n_copies], shapes[i].rows, shapes[i].cols, (const float *)dx, (float *)dy, NULL, NULL,
                             msg, sizeof msg);
        forge_hip_stream_sync(NULL, msg, sizeof msg);
        t1 = now_s();
        for (k = 0; k < reps; k++) {
            if (shapes[i].glu)
                forge_hip_glu_q8(shapes[i].type, dw[k % n_copies], dw[(k + 1) % n_copies], shapes[i].rows, shapes[i].cols, dq8,
                                 (float *)dy, dq8_out, 0, -1.0f, NULL, msg, sizeof msg);
            else
                forge_hip_matvec_q8(shapes[i].type, dw[k % n_copies], shapes[i].rows, shapes[i].cols, dq8, (float *)dy, NULL, 0, -1.0f, NULL,
                                    msg, sizeof msg);
        }
        forge_hip_stream_sync(NULL, msg, sizeof msg);
        t2 = now_s();
        if (shapes[i].glu)
            printf("  %-16s %-5s %6u x %5u %7.2f MiB |                   | %7.1f us %6.0f GB/s\n", shapes[i].what, t->name, shapes[i].rows,
                   shapes[i].cols, launch_bytes / 1048576.0, (t2 - t1) / reps * 1e6, launch_bytes * reps / (t2 - t1) / 1e9);
        else
            printf("  %-16s %-5s %6u x %5u %7.2f MiB | %7.1f us %6.0f GB/s | %7.1f us %6.0f GB/s\n", shapes[i].what, t->name,
                   shapes[i].rows, shapes[i].cols, launch_bytes / 1048576.0, (t1 - t0) / reps * 1e6, bytes * reps / (t1 - t0) / 1e9,
                   (t2 - t1) / reps * 1e6, bytes * reps / (t2 - t1) / 1e9);
        for (c = 0; c < n_copies; c++) forge_hip_arena_free(dw[c]);
        forge_hip_arena_free(dx), forge_hip_arena_free(dy), forge_hip_arena_free(dq8), forge_hip_arena_free(dq8_out);
        free(w), free(x);
    }
}

/* Decode attention at depth, Llama-3-8B shape (32 query heads, 8 KV heads, 128 dims): one layer's
   launch as the graph replays it (position read from device memory, splits merged in the launch);
   microseconds a launch and GB/s of the K and V rows it reads (50 launches after a warm-up). */
static void bench_attention_decode(void) {
    static const forge_kv_type kinds[] = {FORGE_KV_F16, FORGE_KV_Q8_0, FORGE_KV_Q4_0};
    static const uint32_t depths[] = {128, 4096, 16384, 65536};
    const uint32_t n_head = 32, n_kv = 8, hd = 128, reps = 50, distinct = 512;
    size_t i, j;
    printf("decode attention, heads 32/8, dims 128 (us a launch, GB/s of K and V rows; splits merged in the launch | by a second):\n");
    for (i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        const uint32_t storage = forge__kv_storage_type(kinds[i]);
        const forge_type_traits *t = forge_type_info(storage);
        const size_t row = hd / t->block_elems * t->block_bytes;
        for (j = 0; j < sizeof depths / sizeof depths[0]; j++) {
            const uint32_t n_ctx = depths[j];
            const size_t cache = (size_t)n_ctx * n_kv * row, scratch_bytes = forge_hip_attention_scratch_bytes(n_ctx, 1, n_head, hd);
            uint8_t *host = (uint8_t *)xmalloc(cache);
            float *x = (float *)xmalloc(hd * sizeof(float)), *q = (float *)xmalloc((size_t)n_head * hd * sizeof(float));
            uint32_t *zeros = (uint32_t *)calloc(n_head, sizeof(uint32_t)), pos = n_ctx - 1, k;
            void *dk, *dv, *dq, *dout, *scratch, *dpos, *dcount;
            forge_hip_attention_args a;
            double t0, t1, t2;
            size_t r;
            for (r = 0; r < distinct; r++) { /* distinct rows, repeated over the cache */
                random_floats(x, hd, -1.0f, 1.0f);
                forge__kv_encode(kinds[i], x, hd, host + r * row);
                gpu_row_order(kinds[i], host + r * row, hd);
            }
            for (r = distinct; r < (size_t)n_ctx * n_kv; r++) memcpy(host + r * row, host + (r % distinct) * row, row);
            random_floats(q, (size_t)n_head * hd, -2.0f, 2.0f);
            dk = dev_alloc(cache, host), dv = dev_alloc(cache, host), dq = dev_alloc((size_t)n_head * hd * sizeof(float), q);
            dout = dev_alloc((size_t)n_head * hd * sizeof(float), NULL), scratch = dev_alloc(scratch_bytes, NULL);
            dpos = dev_alloc(sizeof pos, &pos), dcount = dev_alloc(n_head * sizeof(uint32_t), zeros);
            memset(&a, 0, sizeof a);
            a.q = (const float *)dq, a.out = (float *)dout, a.cache_k = dk, a.cache_v = dv, a.kv_type = storage, a.n_tokens = 1;
            a.n_head = n_head, a.n_head_kv = n_kv, a.head_dim = hd, a.head_dim_v = hd, a.pos0 = pos, a.scale = 0.088f;
            a.counters = (uint32_t *)dcount;
            CHECK(forge_hip_attention_at(&a, (const uint32_t *)dpos, scratch, scratch_bytes, NULL, msg, sizeof msg) == 0 &&
                      forge_hip_stream_sync(NULL, msg, sizeof msg) == 0,
                  "bench attention_at %s: %s", t->name, msg);
            t0 = now_s();
            for (k = 0; k < reps; k++) forge_hip_attention_at(&a, (const uint32_t *)dpos, scratch, scratch_bytes, NULL, msg, sizeof msg);
            forge_hip_stream_sync(NULL, msg, sizeof msg);
            t1 = now_s();
            a.counters = NULL; /* the splits merged by a second launch */
            for (k = 0; k < reps; k++) forge_hip_attention_at(&a, (const uint32_t *)dpos, scratch, scratch_bytes, NULL, msg, sizeof msg);
            forge_hip_stream_sync(NULL, msg, sizeof msg);
            t2 = now_s();
            printf("  %-5s depth %6u: %8.1f us  %6.0f GB/s  (x32 layers: %5.2f ms) | merge launch %8.1f us\n", t->name, n_ctx,
                   (t1 - t0) / reps * 1e6, 2.0 * cache * reps / (t1 - t0) / 1e9, (t1 - t0) / reps * 32e3, (t2 - t1) / reps * 1e6);
            forge_hip_arena_free(dk), forge_hip_arena_free(dv), forge_hip_arena_free(dq), forge_hip_arena_free(dout);
            forge_hip_arena_free(scratch), forge_hip_arena_free(dpos), forge_hip_arena_free(dcount);
            free(host), free(x), free(q), free(zeros);
        }
    }
}

/* One decode token's rope, cache store and attention: two launches (forge_hip_rope_store, then
   forge_hip_attention_at_q8) against one (forge_hip_rope_attention_q8), back to back on a stream. */
static void bench_rope_attention(void) {
    static const forge_kv_type kinds[] = {FORGE_KV_F16, FORGE_KV_Q8_0};
    static const uint32_t depths[] = {128, 1024, 4096};
    const uint32_t n_head = 32, n_kv = 8, hd = 128, reps = 400;
    size_t i, j;
    printf("decode rope + store + attention, heads 32/8, dims 128 (us a step: attention alone | two launches | one launch):\n");
    for (i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        const uint32_t storage = forge__kv_storage_type(kinds[i]);
        const forge_type_traits *t = forge_type_info(storage);
        const size_t row = hd / t->block_elems * t->block_bytes;
        for (j = 0; j < sizeof depths / sizeof depths[0]; j++) {
            const uint32_t n_ctx = depths[j], pos = n_ctx - 1, nq = n_head * hd, nk = n_kv * hd;
            const size_t cache = (size_t)n_ctx * n_kv * row, scratch_bytes = forge_hip_attention_scratch_bytes(n_ctx, 1, n_head, hd);
            float *q = (float *)xmalloc(nq * sizeof(float)), *k = (float *)xmalloc(nk * sizeof(float));
            uint32_t *zeros = (uint32_t *)calloc(n_head, sizeof(uint32_t)), r;
            void *dk, *dv, *dq, *dkr, *dvr, *dout, *scratch, *dpos, *dcount, *dq8, *dfreq = dev_alloc(hd / 2 * sizeof(double), NULL);
            forge_hip_attention_args a;
            forge_hip_rope_args rope;
            double t0, t1, t2, t3;
            random_floats(q, nq, -2.0f, 2.0f), random_floats(k, nk, -2.0f, 2.0f);
            dk = dev_alloc(cache, NULL), dv = dev_alloc(cache, NULL), dq = dev_alloc(nq * sizeof(float), q);
            dkr = dev_alloc(nk * sizeof(float), k), dvr = dev_alloc(nk * sizeof(float), k);
            dout = dev_alloc(nq * sizeof(float), NULL), scratch = dev_alloc(scratch_bytes, NULL), dq8 = dev_alloc(forge_hip_q8_bytes(nq), NULL);
            dpos = dev_alloc(sizeof pos, &pos), dcount = dev_alloc(n_head * sizeof(uint32_t), zeros);
            memset(&a, 0, sizeof a);
            a.q = (const float *)dq, a.out = (float *)dout, a.cache_k = dk, a.cache_v = dv, a.kv_type = storage, a.n_tokens = 1;
            a.n_head = n_head, a.n_head_kv = n_kv, a.head_dim = hd, a.head_dim_v = hd, a.pos0 = pos, a.counters = (uint32_t *)dcount;
            memset(&rope, 0, sizeof rope);
            rope.n_rot = hd, rope.freq_base = 5e5f, rope.freq_scale = 1.0f, rope.freq = (const double *)dfreq;
            CHECK(forge_hip_rope_freqs((double *)dfreq, hd, 5e5f, NULL, msg, sizeof msg) == 0 &&
                      forge_hip_rope_attention_q8(&a, &rope, (float *)dkr, (const float *)dvr, (const uint32_t *)dpos, dq8, scratch,
                                                  scratch_bytes, NULL, msg, sizeof msg) == 0 &&
                      forge_hip_stream_sync(NULL, msg, sizeof msg) == 0,
                  "bench rope_attention %s: %s", t->name, msg);
            t0 = now_s();
            for (r = 0; r < reps; r++)
                forge_hip_attention_at_q8(&a, (const uint32_t *)dpos, dq8, scratch, scratch_bytes, NULL, msg, sizeof msg);
            forge_hip_stream_sync(NULL, msg, sizeof msg);
            t1 = now_s();
            for (r = 0; r < reps; r++) {
                forge_hip_rope_store(storage, (float *)dq, (float *)dkr, (const float *)dvr, n_head, n_kv, hd, hd, hd, 0, 0,
                                     (const uint32_t *)dpos, 5e5f, 1.0f, NULL, dk, dv, 0, NULL, msg, sizeof msg);
                forge_hip_attention_at_q8(&a, (const uint32_t *)dpos, dq8, scratch, scratch_bytes, NULL, msg, sizeof msg);
            }
            forge_hip_stream_sync(NULL, msg, sizeof msg);
            t2 = now_s();
            for (r = 0; r < reps; r++)
                forge_hip_rope_attention_q8(&a, &rope, (float *)dkr, (const float *)dvr, (const uint32_t *)dpos, dq8, scratch, scratch_bytes,
                                            NULL, msg, sizeof msg);
            forge_hip_stream_sync(NULL, msg, sizeof msg);
            t3 = now_s();
            printf("  %-5s depth %5u: %7.2f us | %7.2f us | %7.2f us\n", t->name, n_ctx, (t1 - t0) / reps * 1e6, (t2 - t1) / reps * 1e6,
                   (t3 - t2) / reps * 1e6);
            forge_hip_arena_free(dk), forge_hip_arena_free(dv), forge_hip_arena_free(dq), forge_hip_arena_free(dkr);
            forge_hip_arena_free(dvr), forge_hip_arena_free(dout), forge_hip_arena_free(scratch), forge_hip_arena_free(dq8);
            forge_hip_arena_free(dpos), forge_hip_arena_free(dcount), forge_hip_arena_free(dfreq);
            free(q), free(k), free(zeros);
        }
    }
}

int main(int argc, char **argv) {
    forge_hip_device_info info;
    if (forge_hip_device_query(0, &info, msg, sizeof msg)) {
        printf("no device: %s\n", msg);
        printf("0 passed, 1 failed\n");
        return 1;
    }
    printf("device: %s (%s), wave %d, %.1f GiB free\n", info.name, info.arch, info.wave_size, info.free_bytes / 1073741824.0);
    if (argc > 1 && strcmp(argv[1], "products") == 0) { /* the decode product table alone, no checks */
        bench_decode_shapes();
        return test_summary();
    }
    if (argc > 1 && strcmp(argv[1], "rows") == 0) { /* the few-token product table alone, no checks */
        bench_rows(argc > 2 ? (uint32_t)atoi(argv[2]) : 0, argc > 3 ? (uint32_t)atoi(argv[3]) : 0); /* [rows [tokens]]: one shape (a profiler's run) */
        return test_summary();
    }
    if (argc > 1 && strcmp(argv[1], "attention") == 0) { /* the decode attention table alone, no checks */
        bench_attention_decode();
        return test_summary();
    }
    if (argc > 1 && strcmp(argv[1], "rope-attention") == 0) { /* the decode rope + attention table alone, no checks */
        bench_rope_attention();
        return test_summary();
    }
    test_matmul();
    test_matmul_prompt();
    test_embed();
    test_norms();
    test_rope();
    test_kv_store();
    test_rope_store();
    test_rope_attention();
    test_attention();
    test_attention_prompt();
    test_elementwise();
    test_rows_more();
    test_moe();
    test_q8();
    test_matmul_rows_q8();
    if (argc < 2) bench_decode_shapes(), bench_matvec(), bench_matmul(), bench_moe(), bench_attention_decode(), bench_rope_attention(); /* any argument skips the tables */
    return test_summary();
}

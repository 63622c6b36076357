/* Tests of hidden-state capture: the request parser, the values at every point checked against
   identities the forward pass must satisfy (the stream leaving a layer is what entered plus what
   attention and the FFN added; the next layer starts from it; the head applied to the final
   capture gives the logits), chunked runs equal to one unchunked run, f16/bf16 as the rounding of
   the f32 values, and the plan growing by exactly the staging, refused like any other bill.
   Attention patterns against a float64 softmax computed here from the file's weights and the
   captured resid_pre (norm, Q/K projections, rope, scores, masks, soft-cap), rows summing to 1,
   chunked equal to unchunked, a window of heads and keys equal to the full pattern's slice. */
#define FORGE_IMPLEMENTATION
#include "../forge.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const int32_t tokens[32] = {1,  300, 301, 512, 777, 1000, 5,   42,  259, 260, 1023, 3,   999, 100, 200, 17,
                                   18, 19,  400, 401, 402, 650,  651, 652, 653, 10,  11,   12,  900, 901, 902, 1020};

static void test_parse(forge_model *m) {
    forge_capture c[FORGE_MAX_CAPTURES];
    uint32_t n = 0;
    forge_error e;
    char name[96];
    const uint32_t L = forge_model_config(m)->n_layer; /* 4 */

    TEST_CASE("capture parse: layers crossed with points, negative layers, final once");
    CHECK(forge_capture_parse(forge_model_config(m), "0,-1", "resid_post,attn_out,final", c, FORGE_MAX_CAPTURES, &n, &e) ==
              FORGE_OK, "%s", e.message);
    CHECK(n == 5, "5 captures, got %u", n);
    CHECK(n == 5 && c[0].layer == 0 && c[0].point == FORGE_CAPTURE_RESID_POST && c[1].point == FORGE_CAPTURE_ATTN_OUT &&
              c[2].layer == L - 1 && c[2].point == FORGE_CAPTURE_RESID_POST && c[4].point == FORGE_CAPTURE_FINAL,
          "order: layer by layer, final last");
    CHECK(strcmp(forge_capture_name(&c[2], name, sizeof name), "blocks.3.hook_resid_post") == 0, "name %s", name);
    CHECK(strcmp(forge_capture_name(&c[4], name, sizeof name), "ln_final.hook_normalized") == 0, "name %s", name);

    TEST_CASE("capture parse: ranges, all, repeats dropped");
    CHECK(forge_capture_parse(forge_model_config(m), "1-2,2", "mlp_out", c, FORGE_MAX_CAPTURES, &n, &e) == FORGE_OK && n == 2 &&
              c[0].layer == 1 && c[1].layer == 2,
          "1-2,2 -> 2 captures (%u): %s", n, e.message);
    CHECK(forge_capture_parse(forge_model_config(m), "all", "resid_pre", c, FORGE_MAX_CAPTURES, &n, &e) == FORGE_OK && n == L,
          "all -> %u", n);

    TEST_CASE("capture parse: hook names");
    CHECK(forge_capture_parse(forge_model_config(m), NULL, "blocks.2.hook_resid_pre,blocks.-1.hook_mlp_out,ln_final.hook_normalized",
                              c, FORGE_MAX_CAPTURES, &n, &e) == FORGE_OK &&
              n == 3 && c[0].layer == 2 && c[0].point == FORGE_CAPTURE_RESID_PRE && c[1].layer == L - 1 &&
              c[1].point == FORGE_CAPTURE_MLP_OUT && c[2].point == FORGE_CAPTURE_FINAL,
          "three hooks: %s", e.message);

    TEST_CASE("capture parse: refusals name the culprit");
    CHECK(forge_capture_parse(forge_model_config(m), "4", "resid_post", c, FORGE_MAX_CAPTURES, &n, &e) == FORGE_ERR_ARGUMENT &&
              strstr(e.message, "'4'"),
          "layer 4 of 4: %s", e.message);
    CHECK(forge_capture_parse(forge_model_config(m), "-5", "resid_post", c, FORGE_MAX_CAPTURES, &n, &e) == FORGE_ERR_ARGUMENT,
          "layer -5: %s", e.message);
    CHECK(forge_capture_parse(forge_model_config(m), "0", "resid", c, FORGE_MAX_CAPTURES, &n, &e) == FORGE_ERR_ARGUMENT &&
              strstr(e.message, "resid"),
          "unknown point: %s", e.message);
    CHECK(forge_capture_parse(forge_model_config(m), "x", "resid_post", c, FORGE_MAX_CAPTURES, &n, &e) == FORGE_ERR_ARGUMENT,
          "bad layer: %s", e.message);
    CHECK(forge_capture_parse(forge_model_config(m), "3-1", "resid_post", c, FORGE_MAX_CAPTURES, &n, &e) == FORGE_ERR_ARGUMENT,
          "backwards range: %s", e.message);
    CHECK(forge_capture_parse(forge_model_config(m), NULL, "resid_post", c, FORGE_MAX_CAPTURES, &n, &e) == FORGE_ERR_ARGUMENT,
          "a point without layers: %s", e.message);
    CHECK(forge_capture_parse(forge_model_config(m), NULL, "blocks.1.hook_nothing", c, FORGE_MAX_CAPTURES, &n, &e) ==
              FORGE_ERR_ARGUMENT,
          "bad hook: %s", e.message);
    CHECK(forge_capture_parse(forge_model_config(m), "all", "resid_pre,resid_post", c, 3, &n, &e) == FORGE_ERR_LIMIT,
          "capacity: %s", e.message);
}

/* Everything one run captured, gathered from the chunks. */
typedef struct gathered {
    float *rows[FORGE_MAX_CAPTURES]; /* [32][width] each, f32 */
    uint16_t *halves[FORGE_MAX_CAPTURES];
    uint32_t n_captures, width[FORGE_MAX_CAPTURES], tokens_seen, chunks, out_of_order;
    forge_capture_dtype dtype;
} gathered;

static void on_chunk(void *user, const forge_capture_chunk *chunk) {
    gathered *g = (gathered *)user;
    uint32_t i;
    if (chunk->pos != g->tokens_seen) g->out_of_order++;
    g->n_captures = chunk->n_captures;
    for (i = 0; i < chunk->n_captures; i++) {
        g->width[i] = chunk->width[i];
        if (chunk->dtype == FORGE_CAPTURE_F32) {
            if (!g->rows[i]) g->rows[i] = (float *)calloc(32 * (size_t)chunk->width[i], sizeof(float));
            memcpy(g->rows[i] + (size_t)chunk->pos * chunk->width[i], chunk->data[i],
                   (size_t)chunk->n_tokens * chunk->width[i] * sizeof(float));
        } else {
            if (!g->halves[i]) g->halves[i] = (uint16_t *)calloc(32 * (size_t)chunk->width[i], sizeof(uint16_t));
            memcpy(g->halves[i] + (size_t)chunk->pos * chunk->width[i], chunk->data[i],
                   (size_t)chunk->n_tokens * chunk->width[i] * sizeof(uint16_t));
        }
    }
    g->tokens_seen += chunk->n_tokens;
    g->chunks++;
}

static void gathered_free(gathered *g) {
    uint32_t i;
    for (i = 0; i < FORGE_MAX_CAPTURES; i++) free(g->rows[i]), free(g->halves[i]);
    memset(g, 0, sizeof *g);
}

/* A CPU context of n_ctx positions on 2 threads capturing c, its chunks gathered into g (emptied). */
static forge_context_desc capture_desc(const forge_capture *c, uint32_t n, uint32_t n_ctx, uint32_t batch, gathered *g) {
    forge_context_desc d;
    memset(&d, 0, sizeof d);
    memset(g, 0, sizeof *g);
    d.backend = FORGE_BACKEND_CPU;
    d.n_ctx = n_ctx;
    d.n_batch = batch;
    d.n_threads = 2;
    d.captures = c;
    d.n_captures = n;
    d.on_capture = on_chunk;
    d.capture_user_data = g;
    return d;
}

static int run(forge_model *m, const forge_capture *c, uint32_t n, uint32_t batch, forge_capture_dtype dtype, gathered *g,
               float *last_logits) {
    forge_context_desc d = capture_desc(c, n, 64, batch, g);
    forge_context *ctx = NULL;
    forge_error e;
    int ok;
    d.capture_dtype = dtype;
    ok = forge_context_create(m, &d, &ctx, &e) == FORGE_OK;
    CHECK(ok, "context with %u captures: %s", n, e.message);
    if (!ok) return 0;
    ok = forge_eval(ctx, tokens, 32, &e) == FORGE_OK;
    CHECK(ok, "eval: %s", e.message);
    if (ok && last_logits) {
        uint32_t rows;
        const float *l = forge_context_logits(ctx, &rows);
        memcpy(last_logits, l, forge_model_config(m)->n_vocab * sizeof(float));
    }
    forge_context_destroy(ctx);
    CHECK(g->tokens_seen == 32 && g->out_of_order == 0, "chunks cover the 32 tokens in order (%u seen, %u chunks)", g->tokens_seen,
          g->chunks);
    return ok;
}

static double max_diff(const float *a, const float *b, size_t n, double *scale) {
    double d = 0.0, s = 0.0;
    size_t i;
    for (i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        s = fmax(s, fabs((double)a[i]));
    }
    if (scale) *scale = s;
    return d;
}

/* Every point of every layer, and the identities they obey. */
/* The weight types whose CPU products take 8-bit activations (forge.h, >>impl-cpu). */
static int rounds_to_8_bits(uint32_t type) {
    return type == FORGE_TYPE_Q4_0 || type == FORGE_TYPE_Q4_1 || type == FORGE_TYPE_Q5_0 || type == FORGE_TYPE_Q5_1 ||
           type == FORGE_TYPE_Q8_0 || type == FORGE_TYPE_Q4_K || type == FORGE_TYPE_Q5_K || type == FORGE_TYPE_Q6_K;
}

static void test_identities(forge_model *m, const char *label) {
    const forge_config *c = forge_model_config(m);
    const uint32_t L = c->n_layer, E = c->n_embd;
    forge_capture caps[FORGE_MAX_CAPTURES];
    uint32_t n = 0, l, t, i, j;
    forge_error e;
    gathered g;
    float *logits = (float *)malloc(c->n_vocab * sizeof(float));
    char text[160];

    snprintf(text, sizeof text, "capture %s: resid_post = resid_pre + attn_out + mlp_out, layer to layer, head to logits", label);
    TEST_CASE(text);
    CHECK(forge_capture_parse(c, "all", "resid_pre,attn_out,mlp_out,resid_post,final", caps, FORGE_MAX_CAPTURES, &n, &e) == FORGE_OK &&
              n == 4 * L + 1,
          "%u captures: %s", n, e.message);
    if (!run(m, caps, n, 512, FORGE_CAPTURE_F32, &g, logits)) goto done;
    for (l = 0; l < L; l++) {
        const float *pre = g.rows[4 * l], *att = g.rows[4 * l + 1], *mlp = g.rows[4 * l + 2], *post = g.rows[4 * l + 3];
        uint32_t bad = 0;
        for (i = 0; i < 32 * E; i++) /* the same two f32 additions the forward pass makes, so exactly equal */
            if ((pre[i] + att[i]) + mlp[i] != post[i]) bad++;
        CHECK(bad == 0, "layer %u: %u of %u values differ", l, bad, 32 * E);
        if (l + 1 < L) CHECK(memcmp(post, g.rows[4 * (l + 1)], 32 * E * sizeof(float)) == 0, "layer %u's output is layer %u's input", l, l + 1);
    }
    { /* the final capture is the output norm of the last resid_post, and the head turns it into the logits */
        const forge_gguf *gg = forge_model_gguf(m);
        const forge_gguf_tensor *norm = forge_gguf_find_tensor(gg, "output_norm.weight");
        const forge_gguf_tensor *head = forge_gguf_find_tensor(gg, c->tied_output ? "token_embd.weight" : "output.weight");
        const float *post = g.rows[4 * L - 1], *fin = g.rows[4 * L];
        float *w = (float *)malloc(E * sizeof(float)), *row = (float *)malloc(E * sizeof(float));
        double *xin = (double *)malloc(E * sizeof(double));
        double worst = 0.0, scale = 0.0, lw = 0.0, ls = 0.0;
        uint64_t row_bytes = head->n_bytes / head->ne[1];
        forge_dequantize(norm->type, norm->data, w, E);
        for (t = 0; t < 32; t++) {
            double ss = 0.0;
            for (i = 0; i < E; i++) ss += (double)post[t * E + i] * post[t * E + i];
            for (i = 0; i < E; i++) {
                double want = post[t * E + i] / sqrt(ss / E + (double)c->rms_eps) * w[i];
                worst = fmax(worst, fabs(want - fin[t * E + i]));
                scale = fmax(scale, fabs(want));
            }
        }
        CHECK(worst <= 1e-5 * scale, "final = rmsnorm(last resid_post): %.2e of %.2e", worst, scale);
        for (i = 0; i < E; i++) xin[i] = fin[31 * E + i];
        if (rounds_to_8_bits(head->type) && E % 32 == 0) /* the CPU's 8-bit products: max|x| / 127 per 32, to nearest even */
            for (i = 0; i < E; i += 32) {
                float amax = 0.0f, inv;
                for (j = 0; j < 32; j++) amax = fmaxf(amax, fabsf((float)xin[i + j]));
                inv = amax > 0.0f ? 127.0f / amax : 0.0f;
                for (j = 0; j < 32; j++) xin[i + j] = (double)(amax / 127.0f) * nearbyint((double)((float)xin[i + j] * inv));
            }
        for (j = 0; j < c->n_vocab; j++) { /* the last token's logits from its final row */
            double dot = 0.0;
            forge_dequantize(head->type, head->data + j * row_bytes, row, E);
            for (i = 0; i < E; i++) dot += (double)row[i] * xin[i];
            if (c->final_softcap > 0.0f) dot = c->final_softcap * tanh(dot / c->final_softcap);
            lw = fmax(lw, fabs(dot - logits[j]));
            ls = fmax(ls, fabs(dot));
        }
        CHECK(lw <= 1e-4 * ls, "head(final) = logits: %.2e of %.2e", lw, ls);
        free(w);
        free(row);
        free(xin);
    }
done:
    gathered_free(&g);
    free(logits);
}

/* Chunks of 1, 7 and 32 tokens through the KV cache give what one batch gives (within 1e-4 of the
   largest value: one token at a time the products take the decode path, which sums in another order). */
static void test_chunks(forge_model *m) {
    const forge_config *c = forge_model_config(m);
    forge_capture caps[FORGE_MAX_CAPTURES];
    uint32_t n = 0, k, i;
    static const uint32_t batches[3] = {1, 7, 32};
    gathered ref, g;
    forge_error e;
    TEST_CASE("capture: chunks of 1, 7 and 32 tokens equal one batch");
    CHECK(forge_capture_parse(c, "0,-1", "resid_pre,resid_post,attn_out,final", caps, FORGE_MAX_CAPTURES, &n, &e) == FORGE_OK, "%s",
          e.message);
    if (!run(m, caps, n, 512, FORGE_CAPTURE_F32, &ref, NULL)) return;
    for (k = 0; k < 3; k++) {
        double worst = 0.0, scale = 0.0;
        if (!run(m, caps, n, batches[k], FORGE_CAPTURE_F32, &g, NULL)) break;
        CHECK(g.chunks == (32 + batches[k] - 1) / batches[k], "%u chunks of %u", g.chunks, batches[k]);
        for (i = 0; i < n; i++) {
            double s;
            worst = fmax(worst, max_diff(ref.rows[i], g.rows[i], 32 * (size_t)g.width[i], &s));
            scale = fmax(scale, s);
        }
        CHECK(worst <= 1e-4 * scale, "chunks of %u: largest difference %.2e of %.2e", batches[k], worst, scale);
        gathered_free(&g);
    }
    TEST_CASE("capture: f16 and bf16 are the f32 values rounded");
    {
        forge_capture_dtype types[2] = {FORGE_CAPTURE_F16, FORGE_CAPTURE_BF16};
        for (k = 0; k < 2; k++) {
            uint32_t bad = 0;
            if (!run(m, caps, n, 512, types[k], &g, NULL)) break;
            for (i = 0; i < n; i++) {
                uint32_t j;
                for (j = 0; j < 32 * g.width[i]; j++) {
                    uint16_t want = k == 0 ? forge_f32_to_f16(ref.rows[i][j]) : forge__f32_to_bf16(ref.rows[i][j]);
                    if (g.halves[i][j] != want) bad++;
                }
            }
            CHECK(bad == 0, "%s: %u values differ from the rounding of f32", forge_capture_dtype_name(types[k]), bad);
            if (k == 1) { /* and bf16 widens back to within its precision */
                float back = forge_bf16_to_f32(g.halves[0][5]), want = ref.rows[0][5];
                CHECK(fabs(back - want) <= fabs(want) / 128.0, "bf16 %g vs f32 %g", back, want);
            }
            gathered_free(&g);
        }
    }
    gathered_free(&ref);
}

/* The plan grows by exactly the staging; a budget that holds the model but not the staging refuses. */
static void test_plan(forge_model *m) {
    const forge_config *c = forge_model_config(m);
    forge_capture caps[FORGE_MAX_CAPTURES];
    forge_context_desc d;
    forge_plan without, with;
    forge_memory_reading mem;
    forge_context *ctx = NULL;
    forge_error e;
    uint32_t n = 0;
    TEST_CASE("capture: the plan grows by the staging exactly, and the budget counts it");
    CHECK(forge_capture_parse(c, "all", "resid_post,final", caps, FORGE_MAX_CAPTURES, &n, &e) == FORGE_OK, "%s", e.message);
    memset(&d, 0, sizeof d);
    d.backend = FORGE_BACKEND_CPU;
    d.n_ctx = 256;
    d.n_batch = 100;
    d.n_threads = 2;
    CHECK(forge_plan_compute(m, &d, &without, &e) == FORGE_OK, "%s", e.message);
    d.captures = caps;
    d.n_captures = n;
    d.capture_dtype = FORGE_CAPTURE_BF16;
    CHECK(forge_plan_compute(m, &d, &with, &e) == FORGE_OK, "%s", e.message);
    /* 5 captures x 100 rows x 256 values x 2 bytes, each region a multiple of 64 bytes */
    CHECK(with.capture_bytes == (uint64_t)n * 100 * c->n_embd * 2 && without.capture_bytes == 0, "capture_bytes %llu",
          (unsigned long long)with.capture_bytes);
    CHECK(with.total_bytes - without.total_bytes == with.capture_bytes, "total grew by %llu",
          (unsigned long long)(with.total_bytes - without.total_bytes));
    /* a reading where 70% of free memory is one byte short of the plan with captures, enough without */
    memset(&mem, 0, sizeof mem);
    snprintf(mem.device, sizeof mem.device, "test device");
    mem.free_bytes = (uint64_t)((double)(with.total_bytes - 1) / 0.7);
    while ((uint64_t)((double)mem.free_bytes * 0.7) >= with.total_bytes) mem.free_bytes--;
    mem.total_bytes = mem.free_bytes * 2;
    d.memory = &mem;
    d.mem_fraction = 0.7;
    CHECK(forge_context_create(m, &d, &ctx, &e) == FORGE_ERR_BUDGET && ctx == NULL && strstr(e.message, "captures"),
          "refused with the captures: %s", e.message);
    d.n_captures = 0;
    d.captures = NULL;
    CHECK(forge_context_create(m, &d, &ctx, &e) == FORGE_OK, "fits without them: %s", e.message);
    forge_context_destroy(ctx);

    TEST_CASE("capture: bad requests are refused before anything is allocated");
    d.memory = NULL;
    d.captures = caps;
    d.n_captures = FORGE_MAX_CAPTURES + 1;
    CHECK(forge_context_create(m, &d, &ctx, &e) == FORGE_ERR_ARGUMENT && ctx == NULL, "too many: %s", e.message);
    caps[0].layer = c->n_layer;
    d.n_captures = 1;
    CHECK(forge_context_create(m, &d, &ctx, &e) == FORGE_ERR_ARGUMENT && strstr(e.message, "layer"), "layer out of range: %s",
          e.message);
    caps[0].layer = 0;
    caps[0].point = (forge_capture_point)9;
    CHECK(forge_context_create(m, &d, &ctx, &e) == FORGE_ERR_ARGUMENT, "bad point: %s", e.message);
    caps[0].point = FORGE_CAPTURE_RESID_PRE;
    d.capture_dtype = (forge_capture_dtype)7;
    CHECK(forge_context_create(m, &d, &ctx, &e) == FORGE_ERR_ARGUMENT, "bad type: %s", e.message);
}

/* ---- attention patterns ---- */

/* One context over the 32 tokens with an f32 KV cache; captures gathered into g. */
static int run_patterns(forge_model *m, const forge_capture *c, uint32_t n, uint32_t batch, uint32_t head_first, uint32_t n_heads,
                        uint32_t key_first, uint32_t n_keys, gathered *g, forge_plan *plan) {
    forge_context_desc d = capture_desc(c, n, 32, batch, g);
    forge_context *ctx = NULL;
    forge_error e;
    int ok;
    d.kv_type = FORGE_KV_F32;
    d.pattern_head_first = head_first;
    d.pattern_n_heads = n_heads;
    d.pattern_key_first = key_first;
    d.pattern_n_keys = n_keys;
    ok = forge_context_create(m, &d, &ctx, &e) == FORGE_OK;
    CHECK(ok, "context with patterns: %s", e.message);
    if (!ok) return 0;
    if (plan) *plan = *forge_context_plan(ctx);
    ok = forge_eval(ctx, tokens, 32, &e) == FORGE_OK;
    CHECK(ok, "eval: %s", e.message);
    forge_context_destroy(ctx);
    return ok && g->tokens_seen == 32;
}

/* rows x cols of a weight, dequantized into doubles */
static double *weight64(const forge_gguf_tensor *t) {
    uint64_t rows = t->n_dims > 1 ? t->ne[1] : 1, cols = t->ne[0], r, i;
    uint64_t row_bytes = t->n_bytes / rows;
    double *w = (double *)malloc(rows * cols * sizeof(double));
    float *row = (float *)malloc(cols * sizeof(float));
    for (r = 0; r < rows; r++) {
        forge_dequantize(t->type, t->data + r * row_bytes, row, cols);
        for (i = 0; i < cols; i++) w[r * cols + i] = row[i];
    }
    free(row);
    return w;
}

/* y[o] = w[o] . x (+ bias[o]) for out rows of `in` columns */
static void matvec64(const double *w, const double *bias, const double *x, double *y, uint32_t out, uint32_t in) {
    uint32_t o, i;
    for (o = 0; o < out; o++) {
        double s = bias ? bias[o] : 0.0;
        for (i = 0; i < in; i++) s += w[(uint64_t)o * in + i] * x[i];
        y[o] = s;
    }
}

static void rmsnorm64(double *x, const double *w, uint32_t n, double eps) {
    double ss = 0.0;
    uint32_t i;
    for (i = 0; i < n; i++) ss += x[i] * x[i];
    ss = 1.0 / sqrt(ss / n + eps);
    for (i = 0; i < n; i++) x[i] = x[i] * ss * w[i];
}

static void rope64(const forge_config *c, uint32_t layer, double *v, uint32_t pos) {
    const double base = c->layer_is_swa[layer] ? c->rope_freq_base_swa : c->rope_freq_base;
    const double scale = c->layer_is_swa[layer] ? c->rope_freq_scale_swa : c->rope_freq_scale;
    uint32_t i, half = c->n_rot / 2;
    for (i = 0; i < half; i++) {
        double theta = pos * scale * pow(base, -2.0 * i / c->n_rot);
        uint32_t a = c->rope_type == FORGE_ROPE_NEOX ? i : 2 * i, b = c->rope_type == FORGE_ROPE_NEOX ? i + half : 2 * i + 1;
        double x0 = v[a], x1 = v[b];
        v[a] = x0 * cos(theta) - x1 * sin(theta);
        v[b] = x0 * sin(theta) + x1 * cos(theta);
    }
}

/* The float64 pattern of one layer, [32 tokens][n_head][32 keys], from the layer's input rows. */
static double *reference_pattern(forge_model *m, uint32_t layer, const float *resid_pre) {
    const forge_config *c = forge_model_config(m);
    const forge_gguf *g = forge_model_gguf(m);
    const uint32_t E = c->n_embd, H = c->layer_n_head[layer], HK = c->layer_n_head_kv[layer], D = c->head_dim;
    char name[96];
    const forge_gguf_tensor *t;
    double *norm, *wq, *wk, *bq = NULL, *bk = NULL, *qn = NULL, *kn = NULL, *x, *q, *k, *out;
    uint32_t tok, h, p, i;
#define FIND(suffix) (snprintf(name, sizeof name, "blk.%u.%s", layer, suffix), forge_gguf_find_tensor(g, name))
    norm = weight64(FIND("attn_norm.weight"));
    wq = weight64(FIND("attn_q.weight"));
    wk = weight64(FIND("attn_k.weight"));
    if ((t = FIND("attn_q.bias"))) bq = weight64(t);
    if ((t = FIND("attn_k.bias"))) bk = weight64(t);
    if ((t = FIND("attn_q_norm.weight"))) qn = weight64(t);
    if ((t = FIND("attn_k_norm.weight"))) kn = weight64(t);
#undef FIND
    x = (double *)malloc(E * sizeof(double));
    q = (double *)malloc(32 * (size_t)H * D * sizeof(double));
    k = (double *)malloc(32 * (size_t)HK * D * sizeof(double));
    out = (double *)calloc(32 * (size_t)H * 32, sizeof(double));
    for (tok = 0; tok < 32; tok++) {
        for (i = 0; i < E; i++) x[i] = resid_pre[(size_t)tok * E + i];
        rmsnorm64(x, norm, E, c->rms_eps);
        matvec64(wq, bq, x, q + (size_t)tok * H * D, H * D, E);
        matvec64(wk, bk, x, k + (size_t)tok * HK * D, HK * D, E);
        for (h = 0; h < H; h++) {
            if (qn) rmsnorm64(q + ((size_t)tok * H + h) * D, qn, D, c->rms_eps);
            rope64(c, layer, q + ((size_t)tok * H + h) * D, tok);
        }
        for (h = 0; h < HK; h++) {
            if (kn) rmsnorm64(k + ((size_t)tok * HK + h) * D, kn, D, c->rms_eps);
            rope64(c, layer, k + ((size_t)tok * HK + h) * D, tok);
        }
    }
    for (tok = 0; tok < 32; tok++)
        for (h = 0; h < H; h++) {
            const uint32_t first = c->layer_is_swa[layer] && tok >= c->n_swa ? tok - c->n_swa + 1 : 0;
            double s[32], max = -INFINITY, sum = 0.0;
            for (p = first; p <= tok; p++) {
                double dot = 0.0;
                for (i = 0; i < D; i++) dot += q[((size_t)tok * H + h) * D + i] * k[((size_t)p * HK + h / (H / HK)) * D + i];
                dot *= c->attn_scale;
                if (c->attn_softcap > 0.0f) dot = c->attn_softcap * tanh(dot / c->attn_softcap);
                s[p] = dot;
                max = fmax(max, dot);
            }
            for (p = first; p <= tok; p++) sum += exp(s[p] - max);
            for (p = first; p <= tok; p++) out[((size_t)tok * H + h) * 32 + p] = exp(s[p] - max) / sum;
        }
    free(norm), free(wq), free(wk), free(bq), free(bk), free(qn), free(kn), free(x), free(q), free(k);
    return out;
}

static void test_patterns(forge_model *m, uint32_t layer, const char *label, double tolerance) {
    const forge_config *c = forge_model_config(m);
    const uint32_t H = c->layer_n_head[layer];
    forge_capture caps[2];
    gathered full, g;
    forge_plan plan;
    double *ref, worst = 0.0, worst_sum = 0.0;
    uint32_t t, h, p, bad = 0, k;
    char text[200];

    snprintf(text, sizeof text, "pattern %s layer %u%s: every head and key against a float64 softmax, rows sum to 1", label, layer,
             c->layer_is_swa[layer] ? " (sliding window)" : "");
    TEST_CASE(text);
    caps[0].layer = layer, caps[0].point = FORGE_CAPTURE_RESID_PRE;
    caps[1].layer = layer, caps[1].point = FORGE_CAPTURE_ATTN_PATTERN;
    if (!run_patterns(m, caps, 2, 32, 0, 0, 0, 0, &full, &plan)) return;
    CHECK(full.width[1] == H * 32 && plan.pattern_n_keys == 32 && plan.pattern_n_heads == H && plan.pattern_key_first == 0,
          "a row is %u heads x 32 keys (width %u, plan %u x %u)", H, full.width[1], plan.pattern_n_heads, plan.pattern_n_keys);
    CHECK(plan.pattern_bytes == 32ull * H * 32 * 4 && plan.capture_bytes == plan.pattern_bytes + 32ull * c->n_embd * 4,
          "pattern_bytes %llu of capture_bytes %llu", (unsigned long long)plan.pattern_bytes, (unsigned long long)plan.capture_bytes);
    ref = reference_pattern(m, layer, full.rows[0]);
    for (t = 0; t < 32; t++)
        for (h = 0; h < H; h++) {
            const float *row = full.rows[1] + ((size_t)t * H + h) * 32;
            double sum = 0.0;
            for (p = 0; p < 32; p++) {
                worst = fmax(worst, fabs(row[p] - ref[((size_t)t * H + h) * 32 + p]));
                if (p > t && row[p] != 0.0f) bad++; /* a key after the query */
                sum += row[p];
            }
            worst_sum = fmax(worst_sum, fabs(sum - 1.0));
        }
    CHECK(worst <= tolerance, "largest difference from the float64 softmax %.3g (tolerance %.1g)", worst, tolerance);
    CHECK(worst_sum <= 1e-5, "rows sum to 1 within %.2g", worst_sum);
    CHECK(bad == 0, "%u probabilities of keys after their query are not 0", bad);
    free(ref);

    snprintf(text, sizeof text, "pattern %s layer %u: chunks of 1 and 5 equal one batch; heads 1-2 x keys 3..12 are its slice", label,
             layer);
    TEST_CASE(text);
    for (k = 0; k < 2; k++) {
        static const uint32_t batches[2] = {1, 5};
        double d = 0.0, scale = 0.0;
        if (!run_patterns(m, caps + 1, 1, batches[k], 0, 0, 0, 0, &g, NULL)) break;
        d = max_diff(full.rows[1], g.rows[0], 32 * (size_t)H * 32, &scale);
        CHECK(d <= 1e-4 * scale, "chunks of %u: %.2e of %.2e", batches[k], d, scale);
        gathered_free(&g);
    }
    if (run_patterns(m, caps + 1, 1, 32, 1, 2, 3, 10, &g, &plan)) {
        uint32_t differ = 0;
        CHECK(g.width[0] == 2 * 10 && plan.pattern_n_keys == 10 && plan.pattern_bytes == forge__align64(32ull * 20 * 4),
              "width %u, keys %u, bytes %llu", g.width[0], plan.pattern_n_keys, (unsigned long long)plan.pattern_bytes);
        for (t = 0; t < 32; t++)
            for (h = 0; h < 2; h++)
                for (p = 0; p < 10; p++)
                    if (g.rows[0][((size_t)t * 2 + h) * 10 + p] != full.rows[1][((size_t)t * H + 1 + h) * 32 + 3 + p]) differ++;
        CHECK(differ == 0, "%u values of the window differ from the full pattern's", differ);
        gathered_free(&g);
    }
    gathered_free(&full);
}

/* Patterns of a step of two sequences (forge_eval_batch): each row against its own sequence's keys,
   as the sequence evaluated alone gives them. */
typedef struct seq_patterns {
    float rows[2][16 * 8 * 32]; /* [sequence][position][head][key] */
    uint32_t width, seen;
} seq_patterns;

static void on_seq_chunk(void *user, const forge_capture_chunk *chunk) {
    seq_patterns *g = (seq_patterns *)user;
    uint32_t t;
    g->width = chunk->width[0];
    for (t = 0; t < chunk->n_tokens && g->width <= 8 * 32; t++) {
        uint32_t seq = chunk->seq ? chunk->seq[t] : 0, pos = chunk->positions ? chunk->positions[t] : chunk->pos + t;
        if (seq < 2 && pos < 16) {
            memcpy(g->rows[seq] + (size_t)pos * g->width, (const float *)chunk->data[0] + (size_t)t * g->width, g->width * sizeof(float));
            g->seen++;
        }
    }
}

static void test_pattern_sequences(forge_model *m) {
    static seq_patterns alone[2], together;
    const forge_config *c = forge_model_config(m);
    forge_capture cap;
    forge_context_desc d;
    forge_context *ctx = NULL;
    forge_batch step;
    forge_error e;
    int32_t ids[16];
    uint32_t seq_of[16], i, k;
    double worst = 0.0;
    TEST_CASE("pattern: a step of two sequences gives each row its own sequence's pattern");
    if (c->n_head > 8) return;
    cap.layer = 1, cap.point = FORGE_CAPTURE_ATTN_PATTERN;
    memset(&d, 0, sizeof d);
    d.backend = FORGE_BACKEND_CPU;
    d.n_ctx = 32;
    d.n_batch = 16;
    d.n_threads = 2;
    d.kv_type = FORGE_KV_F32;
    d.captures = &cap;
    d.n_captures = 1;
    d.on_capture = on_seq_chunk;
    for (k = 0; k < 2; k++) { /* sequence k alone, tokens 16k .. 16k + 15, lands in alone[k].rows[0] */
        memset(&alone[k], 0, sizeof alone[k]);
        d.capture_user_data = &alone[k];
        CHECK(forge_context_create(m, &d, &ctx, &e) == FORGE_OK && forge_eval(ctx, tokens + 16 * k, 16, &e) == FORGE_OK, "%s",
              e.message);
        forge_context_destroy(ctx);
        ctx = NULL;
    }
    memset(&together, 0, sizeof together);
    d.n_seq = 2;
    d.capture_user_data = &together;
    CHECK(forge_context_create(m, &d, &ctx, &e) == FORGE_OK, "%s", e.message);
    for (k = 0; ctx && k < 2; k++) { /* two steps of 16 rows, the sequences interleaved */
        for (i = 0; i < 16; i++) {
            seq_of[i] = i % 2;
            ids[i] = tokens[16 * (i % 2) + 8 * k + i / 2];
        }
        step.tokens = ids;
        step.seq = seq_of;
        step.n_tokens = 16;
        CHECK(forge_eval_batch(ctx, &step, &e) == FORGE_OK, "step %u: %s", k, e.message);
    }
    forge_context_destroy(ctx);
    CHECK(together.seen == 32 && together.width == c->n_head * 32, "%u rows of width %u", together.seen, together.width);
    for (k = 0; k < 2; k++)
        for (i = 0; i < 16 * together.width; i++) worst = fmax(worst, fabs((double)together.rows[k][i] - alone[k].rows[0][i]));
    CHECK(worst <= 1e-5, "largest difference from each sequence alone %.3g", worst);
}

/* The window's bytes are in the plan and the refusal; windows outside the model or the context are refused. */
static void test_pattern_plan(forge_model *m) {
    const forge_config *c = forge_model_config(m);
    forge_capture cap;
    forge_context_desc d;
    forge_verdict v;
    forge_memory_reading mem;
    forge_context *ctx = NULL;
    forge_plan small;
    memset(&small, 0, sizeof small);
    forge_error e;
    TEST_CASE("pattern: the plan counts the window, the refusal names it, bad windows are refused");
    cap.layer = 1, cap.point = FORGE_CAPTURE_ATTN_PATTERN;
    memset(&d, 0, sizeof d);
    d.backend = FORGE_BACKEND_CPU;
    d.n_ctx = 4096;
    d.n_batch = 512;
    d.n_threads = 2;
    d.captures = &cap;
    d.n_captures = 1;
    CHECK(forge_plan_compute(m, &d, &small, &e) == FORGE_OK && small.pattern_bytes == 512ull * c->n_head * 4096 * 4 &&
              small.capture_bytes == small.pattern_bytes,
          "the full square of 4096: %llu bytes (%s)", (unsigned long long)small.pattern_bytes, e.message);
    d.pattern_key_first = 4000;
    CHECK(forge_plan_compute(m, &d, &small, &e) == FORGE_OK && small.pattern_n_keys == 96 &&
              small.pattern_bytes == 512ull * c->n_head * 96 * 4,
          "keys 4000 .. 4095: %u keys, %llu bytes", small.pattern_n_keys, (unsigned long long)small.pattern_bytes);
    d.pattern_key_first = 0;
    memset(&mem, 0, sizeof mem); /* a budget the model fits without the square but not with it */
    snprintf(mem.device, sizeof mem.device, "test device");
    mem.free_bytes = (uint64_t)((double)(small.total_bytes - small.capture_bytes + 512ull * c->n_head * 4096 * 2) / 0.7);
    mem.total_bytes = mem.free_bytes * 2;
    d.memory = &mem;
    d.mem_fraction = 0.7;
    CHECK(forge_plan_check(m, &d, &v, &e) == FORGE_OK && !v.fits && strstr(v.message, "attention patterns") &&
              strstr(v.message, "keys 0 .. 4095") && v.max_ctx_that_fits > 0 && v.max_ctx_that_fits < 4096,
          "refused: %s (max ctx %u)", v.message, v.max_ctx_that_fits);
    CHECK(forge_context_create(m, &d, &ctx, &e) == FORGE_ERR_BUDGET && !ctx && strstr(e.message, "attention patterns"), "%s", e.message);
    d.memory = NULL;
    d.pattern_head_first = c->n_head;
    CHECK(forge_context_create(m, &d, &ctx, &e) == FORGE_ERR_ARGUMENT && !ctx && strstr(e.message, "heads"), "heads past the last: %s",
          e.message);
    d.pattern_head_first = 2;
    d.pattern_n_heads = c->n_head - 1;
    CHECK(forge_context_create(m, &d, &ctx, &e) == FORGE_ERR_ARGUMENT && !ctx, "too many heads: %s", e.message);
    d.pattern_head_first = 0;
    d.pattern_n_heads = 0;
    d.pattern_key_first = 4000;
    d.pattern_n_keys = 97;
    CHECK(forge_context_create(m, &d, &ctx, &e) == FORGE_ERR_ARGUMENT && !ctx && strstr(e.message, "outside the context"),
          "keys past the context: %s", e.message);

    TEST_CASE("pattern: hook names parse and print");
    {
        forge_capture caps[4];
        uint32_t n = 0;
        char name[64];
        CHECK(forge_capture_parse(c, "1", "pattern", caps, 4, &n, &e) == FORGE_OK && n == 1 && caps[0].point == FORGE_CAPTURE_ATTN_PATTERN &&
                  strcmp(forge_capture_name(&caps[0], name, sizeof name), "blocks.1.attn.hook_pattern") == 0,
              "pattern of layer 1: %s", e.message);
        CHECK(forge_capture_parse(c, NULL, "blocks.-1.attn.hook_pattern,blocks.0.hook_resid_post", caps, 4, &n, &e) == FORGE_OK && n == 2 &&
                  caps[0].layer == c->n_layer - 1 && caps[0].point == FORGE_CAPTURE_ATTN_PATTERN,
              "hook name: %s", e.message);
        CHECK(forge_capture_parse(c, NULL, "blocks.0.hook_pattern", caps, 4, &n, &e) == FORGE_ERR_ARGUMENT &&
                  forge_capture_parse(c, NULL, "blocks.0.attn.hook_resid_post", caps, 4, &n, &e) == FORGE_ERR_ARGUMENT,
              "malformed pattern hooks refused: %s", e.message);
    }
}

int main(void) {
    forge_model *llama = test_open_fixture("tiny-llama-q8_0.gguf");
    forge_model *gemma2 = test_open_fixture("tiny-gemma2-f16.gguf");
    forge_model *moe = test_open_fixture("tiny-qwen2moe-q4_k_m.gguf");
    forge_model *llama_f16 = test_open_fixture("tiny-llama-f16.gguf");
    if (llama) {
        test_parse(llama);
        test_identities(llama, "llama");
        test_chunks(llama);
        test_plan(llama);
    }
    if (llama_f16) { /* measured: 1.5e-7 (llama), 1.3e-7 (gemma2) from the float64 softmax with an f32 cache */
        test_patterns(llama_f16, 1, "llama f16", 1e-5);
        test_pattern_plan(llama_f16);
        test_pattern_sequences(llama_f16);
    }
    if (gemma2) {
        test_identities(gemma2, "gemma2 (post-norms, soft-caps, window)");
        test_patterns(gemma2, forge_model_config(gemma2)->layer_is_swa[0] ? 0 : 1, "gemma2 f16 (soft-cap)", 1e-5);
    }
    if (moe) test_identities(moe, "qwen2moe (experts + shared expert)");
    forge_model_close(llama);
    forge_model_close(gemma2);
    forge_model_close(moe);
    forge_model_close(llama_f16);
    return test_summary();
}

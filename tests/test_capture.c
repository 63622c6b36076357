/* Tests of hidden-state capture: the request parser, the values at every point checked against
   identities the forward pass must satisfy (the stream leaving a layer is what entered plus what
   attention and the FFN added; the next layer starts from it; the head applied to the final
   capture gives the logits), chunked runs equal to one unchunked run, f16/bf16 as the rounding of
   the f32 values, and the plan growing by exactly the staging, refused like any other bill. */
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

static int run(forge_model *m, const forge_capture *c, uint32_t n, uint32_t batch, forge_capture_dtype dtype, gathered *g,
               float *last_logits) {
    forge_context_desc d;
    forge_context *ctx = NULL;
    forge_error e;
    int ok;
    memset(&d, 0, sizeof d);
    memset(g, 0, sizeof *g);
    d.backend = FORGE_BACKEND_CPU;
    d.n_ctx = 64;
    d.n_batch = batch;
    d.n_threads = 2;
    d.captures = c;
    d.n_captures = n;
    d.capture_dtype = dtype;
    d.on_capture = on_chunk;
    d.capture_user_data = g;
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

int main(void) {
    forge_model *llama = test_open_fixture("tiny-llama-q8_0.gguf");
    forge_model *gemma2 = test_open_fixture("tiny-gemma2-f16.gguf");
    forge_model *moe = test_open_fixture("tiny-qwen2moe-q4_k_m.gguf");
    if (llama) {
        test_parse(llama);
        test_identities(llama, "llama");
        test_chunks(llama);
        test_plan(llama);
    }
    if (gemma2) test_identities(gemma2, "gemma2 (post-norms, soft-caps, window)");
    if (moe) test_identities(moe, "qwen2moe (experts + shared expert)");
    forge_model_close(llama);
    forge_model_close(gemma2);
    forge_model_close(moe);
    return test_summary();
}

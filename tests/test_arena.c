/* The memory promises of the CPU context, checked on every fixture family with no download:

   - the plan is the arena: forge_context_create carves its regions from the one arena it allocates
     and refuses when the last region does not end where the arena ends (so a plan that lacks a term,
     or counts one twice, fails every creation here); each family is created with every KV type,
     with and without captures, in one batch and in ring-sized batches that make sliding-window
     layers reuse their rows; the plan's KV cache, logits and capture terms are checked against the
     rows the context writes, worked out in the test (a term that is short but carved as planned
     would overrun its neighbour inside the arena, where no sanitizer sees it);
   - the context is filled to its last position (the sanitizer build sees any write past the arena,
     whose last region is the KV cache) and a token more is refused;
   - nothing is allocated after load: FORGE_MALLOC and FORGE_FREE count every call, and no
     forge_eval, forge_eval_batch, forge_context_sample, forge_sampler_sample or forge_generator_step
     may make one;
   - a sequence evaluated in batches of 5 ends with the logits of the same sequence evaluated at once;
     in a context of three sequences, the last one (its cache the arena's last bytes) filled through
     forge_eval_batch ends with the first one's logits.

   With FORGE_TEST_QUICK set (the sanitizer build in tests/run.sh) it runs the families with sliding windows,
   MoE and captures, and one KV type beside f16. Each check is one property; the counts printed at the
   end say how many configurations were created and filled. */
#include <stddef.h>
#include <stdlib.h>

static long test_host_allocs, test_host_frees; /* every FORGE_MALLOC and FORGE_FREE of the process */
static void *test_counted_malloc(size_t size) {
    test_host_allocs++;
    return malloc(size);
}
static void test_counted_free(void *ptr) {
    if (ptr) test_host_frees++;
    free(ptr);
}
#define FORGE_MALLOC(size) test_counted_malloc(size)
#define FORGE_FREE(ptr) test_counted_free(ptr)
#define FORGE_IMPLEMENTATION
#include "../forge.h"
#include "test.h"

#include <math.h>
#include <string.h>

#define N_CTX 32
#define RING_BATCH 5
#define SEQS 3

static const char *const families[] = {
    "tiny-llama-f16.gguf",     "tiny-qwen2-f16.gguf",     "tiny-qwen3-f16.gguf",    "tiny-gemma-f16.gguf",
    "tiny-gemma2-f16.gguf",    "tiny-gemma3-q4_k_m.gguf", "tiny-phi3-f16.gguf",     "tiny-llama-moe-q4_k_m.gguf",
    "tiny-qwen2moe-f16.gguf",  "tiny-qwen3moe-f16.gguf",  "tiny-glm4-q4_k_m.gguf",  "ext-llama2-tiny-random.gguf",
};
/* the sanitizer build's share: sliding windows (both gemma kinds), MoE with a shared expert, partial rotary */
static const char *const quick_families[] = {"tiny-gemma2-f16.gguf", "tiny-gemma3-q4_k_m.gguf", "tiny-qwen2moe-f16.gguf",
                                             "tiny-phi3-f16.gguf"};

static long configs_created, positions_filled, draws_counted, steps_counted;

/* Bytes of one element of a KV type, worked out here: f32 4, f16 2, q8_0 34 per 32, q4_0 18 per 32. */
static double kv_element_bytes(forge_kv_type kv) {
    return kv == FORGE_KV_F32 ? 4.0 : kv == FORGE_KV_Q8_0 ? 34.0 / 32 : kv == FORGE_KV_Q4_0 ? 18.0 / 32 : 2.0;
}

/* The plan's terms against what the context will write, worked out here without forge's own helpers
   (1 when all hold):
   every row of logits a step keeps (every row's with all_logits, else one for each sequence), every
   capture's rows, and every position each sequence's layer must hold (a sliding-window layer: its
   window and a batch less one, at most the context). */
static int check_terms(const forge_plan *p, const forge_config *c, forge_kv_type kv, uint32_t n_seq, uint32_t n_batch,
                        uint32_t n_logits, uint32_t n_caps, uint32_t capture_bytes, const char *what) {
    double kv_bytes = 0;
    uint32_t il;
    int ok;
    for (il = 0; il < c->n_layer; il++) {
        uint32_t rows = N_CTX;
        if (c->layer_is_swa[il] && c->n_swa && c->n_swa + n_batch - 1 < rows) rows = c->n_swa + n_batch - 1;
        kv_bytes += (double)n_seq * rows * c->layer_n_head_kv[il] * (c->head_dim + c->head_dim_v) * kv_element_bytes(kv);
    }
    ok = CHECK((double)p->kv_bytes == kv_bytes, "%s: KV cache %llu bytes, %.0f expected", what, (unsigned long long)p->kv_bytes,
               kv_bytes);
    ok &= CHECK(p->logits_bytes >= (uint64_t)n_logits * c->n_vocab * 4 && p->logits_bytes < (uint64_t)n_logits * c->n_vocab * 4 + 64,
                "%s: logits %llu bytes for %u rows of %u", what, (unsigned long long)p->logits_bytes, n_logits, c->n_vocab);
    ok &= CHECK(p->capture_bytes >= (uint64_t)n_caps * n_batch * c->n_embd * capture_bytes &&
                    p->capture_bytes <= (uint64_t)n_caps * (n_batch * c->n_embd * capture_bytes + 63),
                "%s: capture staging %llu bytes for %u captures of %u rows", what, (unsigned long long)p->capture_bytes, n_caps,
                n_batch);
    return ok;
}

static int32_t token_at(uint32_t i, uint32_t n_vocab) { return (int32_t)((i * 7919u + 13u) % n_vocab); }

static int logits_finite(const float *l, size_t n) {
    size_t i;
    for (i = 0; i < n; i++)
        if (!isfinite(l[i])) return 0;
    return 1;
}

static double rel_l2(const float *a, const float *b, size_t n) {
    double d = 0, r = 0;
    size_t i;
    for (i = 0; i < n; i++) d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), r += (double)b[i] * b[i];
    return r > 0 ? sqrt(d / r) : sqrt(d);
}

/* Creates a context of N_CTX positions in batches of n_batch, fills it to its last position with no
   allocation, and refuses one token more. Copies the last logits row to last_row (n_vocab floats).
   In ring-sized batches the context has SEQS sequences: the last one, whose cache ends the arena, is
   filled too (forge_eval_batch), and ends with the first one's logits. */
static int fill(forge_model *m, const char *name, forge_kv_type kv, uint32_t n_batch, int capture, float *last_row) {
    const forge_config *c = forge_model_config(m);
    static forge_capture caps[FORGE_MAX_CAPTURES];
    static int32_t tokens[N_CTX + 1];
    forge_context_desc d;
    forge_context *ctx = NULL;
    forge_error e;
    uint32_t n_caps = 0, i, rows = 0, step = n_batch == N_CTX ? N_CTX : 1 + n_batch; /* uneven calls over batches */
    long allocs, frees;
    const float *l;
    const forge_plan *p;
    char what[160];
    int ok = 1;

    const uint32_t n_seq = capture ? 1 : SEQS;
    snprintf(what, sizeof what, "%s kv %s batch %u%s, %u sequences", name, forge_kv_type_name(kv), n_batch, capture ? " captures" : "",
             n_seq);
    memset(&d, 0, sizeof d);
    d.backend = FORGE_BACKEND_CPU;
    d.n_ctx = N_CTX;
    d.n_batch = n_batch;
    d.kv_type = kv;
    d.n_threads = n_batch == N_CTX ? 2 : 1; /* two threads' matmul rows in the arena; one where steps are many and small */
    d.mem_fraction = 1.0;
    d.all_logits = capture;
    d.n_seq = n_seq;
    if (capture) {
        if (!CHECK(forge_capture_parse(c, "all", "resid_pre,attn_out,mlp_out,resid_post,final", caps, FORGE_MAX_CAPTURES, &n_caps,
                                       &e) == FORGE_OK && n_caps == 4 * c->n_layer + 1,
                   "%s: capture list: %s", what, e.message))
            return 0;
        d.captures = caps;
        d.n_captures = n_caps;
        d.capture_dtype = kv == FORGE_KV_Q4_0 ? FORGE_CAPTURE_BF16 : FORGE_CAPTURE_F32;
    }
    for (i = 0; i <= N_CTX; i++) tokens[i] = token_at(i, c->n_vocab);
    if (!CHECK(forge_context_create(m, &d, &ctx, &e) == FORGE_OK, "%s: create: %s", what, e.message)) return 0;
    configs_created++;
    p = forge_context_plan(ctx);
    if (!check_terms(p, c, kv ? kv : FORGE_KV_F16, n_seq, n_batch, capture ? n_batch : FORGE__MIN(n_seq, n_batch), n_caps,
                     capture ? forge_capture_dtype_bytes(d.capture_dtype) : 0, what)) { /* filling would overrun the arena */
        forge_context_destroy(ctx);
        return 0;
    }
    CHECK(forge_context_arena_bytes(ctx) == p->total_bytes - p->weights_bytes && p->kv_type == (kv ? kv : FORGE_KV_F16),
          "%s: the arena is the plan less the mapped weights", what);
    allocs = test_host_allocs, frees = test_host_frees;
    for (i = 0; i < N_CTX && ok; i += step) ok = forge_eval(ctx, tokens + i, FORGE__MIN(step, N_CTX - i), &e) == FORGE_OK;
    CHECK(ok, "%s: eval at %u: %s", what, i - step, ok ? "" : e.message);
    CHECK(test_host_allocs == allocs && test_host_frees == frees, "%s: filling allocated %ld and freed %ld times", what,
          test_host_allocs - allocs, test_host_frees - frees);
    if (ok) {
        positions_filled += N_CTX;
        CHECK(forge_context_pos(ctx) == N_CTX, "%s: filled to %u", what, forge_context_pos(ctx));
        l = forge_context_logits(ctx, &rows);
        ok = CHECK(l && rows >= 1 && logits_finite(l, (size_t)rows * c->n_vocab), "%s: %u finite rows of logits", what, rows);
        if (ok) memcpy(last_row, l + (size_t)(rows - 1) * c->n_vocab, c->n_vocab * sizeof(float));
        CHECK(forge_eval(ctx, tokens + N_CTX, 1, &e) == FORGE_ERR_ARGUMENT && strstr(e.message, "do not fit"),
              "%s: a token past the last position is refused: %s", what, e.message);
    }
    if (ok && n_seq > 1) { /* the last sequence, whose KV cache is the arena's last bytes */
        static uint32_t seq_ids[N_CTX];
        forge_batch b;
        const float *row;
        for (i = 0; i < N_CTX; i++) seq_ids[i] = n_seq - 1;
        allocs = test_host_allocs, frees = test_host_frees;
        for (i = 0; i < N_CTX && ok; i += n_batch) {
            b.tokens = tokens + i, b.seq = seq_ids, b.n_tokens = FORGE__MIN(n_batch, N_CTX - i);
            ok = forge_eval_batch(ctx, &b, &e) == FORGE_OK;
        }
        CHECK(ok && forge_seq_pos(ctx, n_seq - 1) == N_CTX, "%s: sequence %u filled to %u: %s", what, n_seq - 1,
              forge_seq_pos(ctx, n_seq - 1), ok ? "" : e.message);
        CHECK(test_host_allocs == allocs && test_host_frees == frees, "%s: forge_eval_batch allocated %ld and freed %ld times", what,
              test_host_allocs - allocs, test_host_frees - frees);
        row = forge_seq_logits(ctx, n_seq - 1);
        CHECK(ok && row && rel_l2(row, last_row, c->n_vocab) < 1e-4, "%s: sequence %u ends with sequence 0's logits (rel L2 %.2e)",
              what, n_seq - 1, row ? rel_l2(row, last_row, c->n_vocab) : -1.0);
        b.tokens = tokens + N_CTX, b.seq = seq_ids, b.n_tokens = 1;
        CHECK(forge_eval_batch(ctx, &b, &e) == FORGE_ERR_ARGUMENT && strstr(e.message, "do not fit"),
              "%s: a row past sequence %u's last position is refused: %s", what, n_seq - 1, e.message);
        positions_filled += N_CTX;
    }
    forge_context_destroy(ctx);
    return ok;
}

/* Draws from the last logits with the context's and the sampler's own path: no allocation either way. */
static void draws(forge_model *m, const char *name) {
    const forge_config *c = forge_model_config(m);
    forge_context_desc d;
    forge_context *ctx = NULL;
    forge_sampler *s = NULL;
    forge_sampler_desc sd;
    forge_error e;
    int32_t tok = 0, t = 0;
    uint32_t rows = 0, i;
    long allocs, frees;
    const float *l;
    memset(&d, 0, sizeof d);
    d.backend = FORGE_BACKEND_CPU;
    d.n_ctx = N_CTX;
    d.n_threads = 1;
    d.mem_fraction = 1.0;
    memset(&sd, 0, sizeof sd);
    sd.temperature = 0.8f, sd.top_k = 40, sd.top_p = 0.9f, sd.min_p = 0.02f, sd.repeat_penalty = 1.1f, sd.seed = 7;
    if (!CHECK(forge_context_create(m, &d, &ctx, &e) == FORGE_OK && forge_sampler_create(&sd, c->n_vocab, &s, &e) == FORGE_OK,
               "%s: context and sampler: %s", name, e.message))
        goto out;
    tok = token_at(0, c->n_vocab);
    if (!CHECK(forge_eval(ctx, &tok, 1, &e) == FORGE_OK, "%s: eval: %s", name, e.message)) goto out;
    allocs = test_host_allocs, frees = test_host_frees;
    for (i = 0; i < 16; i++) {
        if (forge_context_sample(ctx, s, &tok, &e) != FORGE_OK) break;
        forge_sampler_accept(s, tok);
        l = forge_context_logits(ctx, &rows);
        if (!l || forge_sampler_sample(s, l, &t, &e) != FORGE_OK || forge_eval(ctx, &tok, 1, &e) != FORGE_OK) break;
        draws_counted += 2;
    }
    CHECK(i == 16, "%s: draw %u: %s", name, i, e.message);
    CHECK(test_host_allocs == allocs && test_host_frees == frees, "%s: 32 draws and 16 evals allocated %ld and freed %ld times",
          name, test_host_allocs - allocs, test_host_frees - frees);
out:
    forge_sampler_destroy(s);
    forge_context_destroy(ctx);
}

/* A generator's steps (the prompt's batches and new tokens) allocate nothing; the prompt may. */
static void generator_steps(forge_model *m, const char *name) {
    forge_context_desc d;
    forge_context *ctx = NULL;
    forge_tokenizer *tok = NULL;
    forge_generator *gen = NULL;
    forge_sampler_desc sd;
    forge_error e;
    forge_step st;
    long allocs, frees;
    int i, ok = 1;
    static const char prompt[] = "the quick fox"; /* a token a character or two in the tiny vocabularies */
    memset(&d, 0, sizeof d);
    d.backend = FORGE_BACKEND_CPU;
    d.n_ctx = N_CTX;
    d.n_batch = 8;
    d.n_threads = 1;
    d.mem_fraction = 1.0;
    memset(&sd, 0, sizeof sd);
    sd.temperature = 0.7f, sd.top_k = 20, sd.seed = 3;
    if (!CHECK(forge_context_create(m, &d, &ctx, &e) == FORGE_OK &&
                   forge_tokenizer_create(forge_model_gguf(m), NULL, &tok, &e) == FORGE_OK &&
                   forge_generator_create(ctx, tok, &sd, &gen, &e) == FORGE_OK &&
                   forge_generator_prompt(gen, prompt, sizeof prompt - 1, 0, &e) == FORGE_OK,
               "%s: generator: %s", name, e.message))
        goto out;
    allocs = test_host_allocs, frees = test_host_frees;
    for (i = 0; i < N_CTX && ok; i++) {
        ok = forge_generator_step(gen, &st, &e) == FORGE_OK;
        if (ok) steps_counted++;
        if (ok && st.done) break;
    }
    CHECK(ok && st.done, "%s: the generator ran until an end token or a full context (position %u, step %d): %s", name,
          forge_context_pos(ctx), i, ok ? "" : e.message);
    CHECK(test_host_allocs == allocs && test_host_frees == frees, "%s: %d steps allocated %ld and freed %ld times", name, i,
          test_host_allocs - allocs, test_host_frees - frees);
out:
    forge_generator_destroy(gen);
    forge_tokenizer_destroy(tok);
    forge_context_destroy(ctx);
}

static void family(const char *name, int quick) {
    static const forge_kv_type all_kv[] = {FORGE_KV_F32, FORGE_KV_F16, FORGE_KV_Q8_0, FORGE_KV_Q4_0};
    static const forge_kv_type quick_kv[] = {FORGE_KV_F16, FORGE_KV_Q4_0};
    static float whole[32000], ring[32000];
    const forge_kv_type *kvs = quick ? quick_kv : all_kv;
    size_t n_kv = quick ? 2 : 4, k;
    forge_model *m;
    const forge_config *c;
    TEST_CASE(name);
    m = test_open_fixture(name);
    if (!m) return;
    c = forge_model_config(m);
    if (!CHECK(c->n_vocab <= 32000, "%s: vocabulary of %u", name, c->n_vocab)) goto out;
    for (k = 0; k < n_kv; k++) {
        forge_plan p;
        forge_context_desc d;
        forge_error e;
        memset(&d, 0, sizeof d);
        d.backend = FORGE_BACKEND_CPU;
        d.n_ctx = N_CTX;
        d.kv_type = kvs[k];
        if (kvs[k] >= FORGE_KV_Q8_0 && c->head_dim % 32) { /* 32-element blocks: refused clearly, before anything */
            forge_context *ctx = NULL;
            d.mem_fraction = 1.0;
            CHECK(forge_plan_compute(m, &d, &p, &e) == FORGE_ERR_UNSUPPORTED &&
                      forge_context_create(m, &d, &ctx, &e) == FORGE_ERR_UNSUPPORTED && !ctx,
                  "%s: kv %s with head size %u is refused: %s", name, forge_kv_type_name(kvs[k]), c->head_dim, e.message);
            continue;
        }
        if (fill(m, name, kvs[k], N_CTX, 1, whole) && fill(m, name, kvs[k], RING_BATCH, 0, ring))
            CHECK(rel_l2(ring, whole, c->n_vocab) < 1e-4, "%s kv %s: batches of %d end with the logits of one batch (rel L2 %.2e)",
                  name, forge_kv_type_name(kvs[k]), RING_BATCH, rel_l2(ring, whole, c->n_vocab));
    }
    draws(m, name);
    generator_steps(m, name);
out:
    forge_model_close(m);
}

int main(void) {
    const int quick = getenv("FORGE_TEST_QUICK") != NULL;
    size_t i;
    if (quick)
        for (i = 0; i < sizeof quick_families / sizeof *quick_families; i++) family(quick_families[i], 1);
    else
        for (i = 0; i < sizeof families / sizeof *families; i++) family(families[i], 0);
    printf("%ld contexts created and filled to their last position (%ld positions), %ld draws and %ld generator steps "
           "counted without an allocation\n",
           configs_created, positions_filled, draws_counted, steps_counted);
    return test_summary();
}

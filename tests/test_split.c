/* Tests of one model split by layers across devices (forge_context_desc.n_devices). On the CPU
   backend the parts are separate host arenas standing in for devices: the split logic, the plans by
   device, the budgets by device, the refusals and the boundary copies run as they do on GPUs. Every
   fixture family split at every layer boundary (and in three parts) gives the logits of the whole
   model bit for bit, prompt chunks, decode steps, several sequences and captures included; greedy
   continuations are the same; the plan's parts add up to the whole, each device is checked against
   its own budget, forge's own split follows the budgets, a failure on any part frees what the others
   took, and bad descriptors are refused with the numbers. FORGE_TEST_BACKEND=gpu runs the same on
   the GPU backend (parts on GPU 0 twice, or on GPUs 0 and 1 with FORGE_TEST_DEVICES=2, where
   FORGE_TEST_MODEL=FILE adds each device's memory against its part and 10,000 decode steps). */
#define FORGE_IMPLEMENTATION
#include "../forge.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static forge_backend backend;
static int second_device; /* the GPU index of the second part (0: both parts on one card) */

static forge_memory_reading reading(uint64_t free_bytes) {
    forge_memory_reading r;
    memset(&r, 0, sizeof r);
    snprintf(r.device, sizeof r.device, "test device");
    r.total_bytes = 64ull << 30;
    r.free_bytes = free_bytes;
    return r;
}

static forge_memory_reading mem;

static forge_context_desc desc_of(uint32_t n_seq) {
    forge_context_desc d;
    memset(&d, 0, sizeof d);
    d.backend = backend;
    d.n_seq = n_seq;
    d.n_ctx = 64;
    d.n_batch = 7; /* prompts in several chunks */
    d.n_threads = 2;
    d.memory = &mem;
    /* on the GPU the decode step fuses a product with the norm after it, across a layer boundary; a
       split cannot (the norm is on the next device), so both sides run without that fusion and then
       run the same kernels: bit for bit */
    d.gpu_norm_fusion = -1;
    return d;
}

/* A split in two parts at layer b (b layers on the first). */
static void split_at(forge_context_desc *d, uint32_t n_layer, uint32_t b) {
    d->n_devices = 2;
    d->devices[0] = 0;
    d->devices[1] = second_device;
    d->split_layers[0] = b;
    d->split_layers[1] = n_layer - b;
}

#define N_PROMPT 17
#define N_DECODE 6
static const int32_t prompt[N_PROMPT] = {1, 300, 301, 512, 777, 1000, 5, 42, 259, 260, 1023, 3, 999, 100, 200, 17, 18};

/* The logits after the prompt and after each greedy decode step (rows of n_vocab), and the tokens chosen. */
static int run_greedy(const forge_model *m, const forge_context_desc *d, float *logits, int32_t *chosen) {
    const uint32_t n_vocab = forge_model_config(m)->n_vocab;
    forge_context *ctx = NULL;
    forge_error e;
    int32_t toks[N_PROMPT];
    uint32_t i, rows = 0;
    int ok = 1;
    for (i = 0; i < N_PROMPT; i++) toks[i] = prompt[i] % (int32_t)n_vocab;
    if (!CHECK(forge_context_create(m, d, &ctx, &e) == FORGE_OK, "create: %s", e.message)) return 0;
    ok = CHECK(forge_eval(ctx, toks, N_PROMPT, &e) == FORGE_OK, "prompt: %s", e.message);
    for (i = 0; ok && i <= N_DECODE; i++) {
        const float *l = forge_context_logits(ctx, &rows);
        ok = CHECK(l && rows >= 1, "logits of step %u", i);
        if (!ok) break;
        memcpy(logits + (size_t)i * n_vocab, l + (size_t)(rows - 1) * n_vocab, n_vocab * sizeof(float));
        ok = CHECK(forge_context_argmax(ctx, &chosen[i], &e) == FORGE_OK, "argmax: %s", e.message);
        if (ok && i < N_DECODE) ok = CHECK(forge_eval(ctx, &chosen[i], 1, &e) == FORGE_OK, "decode: %s", e.message);
    }
    forge_context_destroy(ctx);
    return ok;
}

/* Several sequences of different lengths in one batch step, then a decode step of all of them: every
   sequence's logits rows. */
static int run_batch(const forge_model *m, const forge_context_desc *d, float *logits) {
    const uint32_t n_vocab = forge_model_config(m)->n_vocab;
    forge_context *ctx = NULL;
    forge_error e;
    forge_batch b;
    int32_t toks[12];
    uint32_t seq[12], i, s;
    int ok;
    if (!CHECK(forge_context_create(m, d, &ctx, &e) == FORGE_OK, "create: %s", e.message)) return 0;
    static const uint32_t seqs[12] = {0, 0, 0, 0, 0, 1, 1, /* then a step with every sequence in it */ 1, 1, 2, 2, 0};
    for (i = 0; i < 12; i++) { /* 6, 4 and 2 rows of sequences 0, 1, 2 */
        toks[i] = prompt[(i * 3) % N_PROMPT] % (int32_t)n_vocab;
        seq[i] = seqs[i];
    }
    memset(&b, 0, sizeof b);
    b.tokens = toks, b.seq = seq, b.n_tokens = 7;
    ok = CHECK(forge_eval_batch(ctx, &b, &e) == FORGE_OK, "batch: %s", e.message);
    b.tokens = toks + 7, b.seq = seq + 7, b.n_tokens = 5;
    ok = ok && CHECK(forge_eval_batch(ctx, &b, &e) == FORGE_OK, "batch: %s", e.message);
    for (s = 0; ok && s < 3; s++) {
        const float *l = forge_seq_logits(ctx, s);
        ok = CHECK(l != NULL, "sequence %u has logits", s);
        if (ok) memcpy(logits + (size_t)s * n_vocab, l, n_vocab * sizeof(float));
    }
    forge_context_destroy(ctx);
    return ok;
}

static uint64_t tensor_bytes(const forge_model *m, const char *name) {
    const forge_gguf_tensor *t = forge_gguf_find_tensor(forge_model_gguf(m), name);
    return t ? t->n_bytes : 0;
}

/* The plan of a split: its parts add up to the whole, each holds its layers' cache, every part its
   scratch, the last the logits; the weights are the whole's plus what two parts both read. */
static void check_plan_parts(const forge_model *m, const char *name, const forge_context_desc *d, uint32_t b) {
    const forge_config *c = forge_model_config(m);
    forge_context_desc one = *d;
    forge_plan whole, split;
    forge_error e;
    uint64_t kv0 = 0, w = 0, kv = 0, total = 0, extra;
    uint32_t il;
    one.n_devices = 0;
    memset(one.split_layers, 0, sizeof one.split_layers);
    if (!CHECK(forge_plan_compute(m, &one, &whole, &e) == FORGE_OK && forge_plan_compute(m, d, &split, &e) == FORGE_OK, "%s: plan: %s",
               name, e.message))
        return;
    CHECK(whole.n_parts == 1 && whole.parts[0].total_bytes == whole.total_bytes && whole.parts[0].n_layers == c->n_layer,
          "%s: one part holds the whole (%u parts)", name, whole.n_parts);
    CHECK(split.n_parts == 2 && split.parts[0].layer_first == 0 && split.parts[0].n_layers == b && split.parts[1].layer_first == b &&
              split.parts[1].n_layers == c->n_layer - b,
          "%s: layers 0-%u and %u-%u (got %u+%u)", name, b - 1, b, c->n_layer - 1, split.parts[0].n_layers, split.parts[1].n_layers);
    for (il = 0; il < b; il++) {
        uint64_t one_layer = (uint64_t)forge_kv_layer_cells(c, il, whole.n_ctx, whole.n_batch) * c->layer_n_head_kv[il] *
                             (c->head_dim + c->head_dim_v) * 2u; /* f16 */
        kv0 += one_layer * whole.n_seq;
    }
    CHECK(split.parts[0].kv_bytes == kv0, "%s: part 0's cache is its %u layers' (%llu, want %llu)", name, b,
          (unsigned long long)split.parts[0].kv_bytes, (unsigned long long)kv0);
    for (il = 0; il < split.n_parts; il++) {
        w += split.parts[il].weights_bytes, kv += split.parts[il].kv_bytes, total += split.parts[il].total_bytes;
        CHECK(split.parts[il].scratch_bytes == whole.scratch_bytes, "%s: part %u's scratch is the whole's", name, il);
    }
    CHECK(kv == whole.kv_bytes && split.kv_bytes == whole.kv_bytes, "%s: the parts' caches add up to the whole's", name);
    CHECK(total == split.total_bytes, "%s: the parts add up to the total", name);
    CHECK(split.parts[0].logits_bytes == 0 && split.parts[1].logits_bytes == whole.logits_bytes, "%s: logits with the last part", name);
    extra = c->tied_output ? tensor_bytes(m, "token_embd.weight") : 0; /* the embedding on the first, the head on the last */
    CHECK(w == whole.weights_bytes + extra && split.weights_bytes == w, "%s: weights %llu = whole %llu + %llu read by both", name,
          (unsigned long long)w, (unsigned long long)whole.weights_bytes, (unsigned long long)extra);
}

static int same_bits(const float *a, const float *b, size_t n, size_t *at) {
    size_t i;
    for (i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) {
            *at = i;
            return 0;
        }
    return 1;
}

/* Every boundary of two parts, and three parts where there are layers for it: the whole model's logits. */
static void test_family(const char *name) {
    forge_model *m = test_open_fixture(name);
    const forge_config *c;
    size_t n;
    float *ref, *got, *bref, *bgot;
    int32_t ref_tok[N_DECODE + 1], got_tok[N_DECODE + 1];
    uint32_t b;
    size_t at = 0;
    if (!m) return;
    TEST_CASE(name);
    c = forge_model_config(m);
    n = (size_t)(N_DECODE + 1) * c->n_vocab;
    ref = (float *)malloc(n * sizeof(float)), got = (float *)malloc(n * sizeof(float));
    bref = (float *)malloc(3 * (size_t)c->n_vocab * sizeof(float)), bgot = (float *)malloc(3 * (size_t)c->n_vocab * sizeof(float));
    if (ref && got && bref && bgot) {
        forge_context_desc d = desc_of(1), d3 = desc_of(3);
        if (run_greedy(m, &d, ref, ref_tok) && run_batch(m, &d3, bref)) {
            for (b = 1; b < c->n_layer; b++) {
                split_at(&d, c->n_layer, b);
                check_plan_parts(m, name, &d, b);
                if (run_greedy(m, &d, got, got_tok)) {
                    CHECK(same_bits(ref, got, n, &at), "%s split at layer %u: logits differ from the whole model's at step %u, token %u (%g vs %g)",
                          name, b, (unsigned)(at / c->n_vocab), (unsigned)(at % c->n_vocab), ref[at], got[at]);
                    CHECK(memcmp(ref_tok, got_tok, sizeof ref_tok) == 0, "%s split at layer %u: greedy tokens differ", name, b);
                }
                split_at(&d3, c->n_layer, b);
                if (run_batch(m, &d3, bgot))
                    CHECK(same_bits(bref, bgot, 3 * (size_t)c->n_vocab, &at), "%s split at layer %u: a batch of 3 sequences differs (sequence %u)",
                          name, b, (unsigned)(at / c->n_vocab));
            }
            if (c->n_layer >= 3) { /* three parts: 1, 1, the rest */
                d = desc_of(1);
                d.n_devices = 3;
                d.devices[1] = second_device;
                d.split_layers[0] = 1, d.split_layers[1] = 1, d.split_layers[2] = c->n_layer - 2;
                if (run_greedy(m, &d, got, got_tok))
                    CHECK(same_bits(ref, got, n, &at) && memcmp(ref_tok, got_tok, sizeof ref_tok) == 0, "%s in three parts: logits differ at %u",
                          name, (unsigned)at);
            }
        }
    }
    free(ref), free(got), free(bref), free(bgot);
    forge_model_close(m);
}

/* Captures of layers on both sides of a boundary: the same rows as the whole model's. */
static void test_captures(void) {
    forge_model *m = test_open_fixture(backend == FORGE_BACKEND_GPU ? "tiny-llama-q4_0.gguf" : "tiny-llama-q8_0.gguf");
    forge_capture caps[3];
    const forge_config *c;
    forge_context *one = NULL, *two = NULL;
    forge_context_desc d;
    forge_error e;
    int32_t toks[N_PROMPT];
    uint32_t i;
    TEST_CASE("captures across a boundary");
    if (!m) return;
    c = forge_model_config(m);
    memset(caps, 0, sizeof caps);
    caps[0].layer = 0, caps[0].point = FORGE_CAPTURE_RESID_POST;
    caps[1].layer = c->n_layer - 1, caps[1].point = FORGE_CAPTURE_RESID_POST;
    caps[2].layer = c->n_layer - 1, caps[2].point = FORGE_CAPTURE_ATTN_PATTERN;
    for (i = 0; i < N_PROMPT; i++) toks[i] = prompt[i] % (int32_t)c->n_vocab;
    d = desc_of(1);
    d.captures = caps, d.n_captures = 3;
    d.n_batch = 32;
    if (CHECK(forge_context_create(m, &d, &one, &e) == FORGE_OK, "create: %s", e.message)) {
        forge_plan p;
        split_at(&d, c->n_layer, c->n_layer / 2);
        if (CHECK(forge_context_create(m, &d, &two, &e) == FORGE_OK, "create split: %s", e.message)) {
            forge_capture_chunk a, b;
            p = *forge_context_plan(two);
            CHECK(p.parts[0].capture_bytes == forge_context_plan(one)->capture_bytes && p.parts[1].capture_bytes == p.parts[0].capture_bytes,
                  "each part that captures keeps the staging");
            CHECK(forge_eval(one, toks, N_PROMPT, &e) == FORGE_OK && forge_eval(two, toks, N_PROMPT, &e) == FORGE_OK, "eval: %s", e.message);
            if (CHECK(forge_context_captures(one, &a) && forge_context_captures(two, &b) && a.n_captures == 3 && b.n_captures == 3,
                      "chunks delivered"))
                for (i = 0; i < 3; i++) {
                    uint32_t w = forge_context_plan(one)->pattern_n_keys * forge_context_plan(one)->pattern_n_heads;
                    size_t bytes = (size_t)N_PROMPT * (i == 2 ? w : c->n_embd) * sizeof(float);
                    CHECK(memcmp(a.data[i], b.data[i], bytes) == 0, "capture %u: the same rows split and whole", i);
                }
        }
    }
    forge_context_destroy(one);
    forge_context_destroy(two);
    forge_model_close(m);
}

/* Each device against its own budget: forge's split follows the budgets; a split that leaves one
   device short is refused naming it, with a split that fits; nothing is allocated. */
static void test_budgets(void) {
    forge_model *m = test_open_fixture(backend == FORGE_BACKEND_GPU ? "tiny-llama-q4_0.gguf" : "tiny-llama-q8_0.gguf");
    forge_memory_reading readings[2];
    forge_context_desc d;
    forge_verdict v;
    forge_plan whole;
    forge_error e;
    forge_context *ctx = NULL;
    test_counting count;
    uint64_t layer_part, fixed;
    TEST_CASE("budgets by device");
    if (!m) return;
    d = desc_of(1);
    forge_plan_compute(m, &d, &whole, &e);
    d.n_devices = 2, d.devices[0] = 0, d.devices[1] = 1; /* readings given: nothing is asked of the devices */
    /* device 1 takes its fixed terms and about one layer; device 0 everything else with room */
    {
        forge_plan even;
        forge_plan_compute(m, &d, &even, &e);
        CHECK(even.n_parts == 2 && even.parts[0].n_layers == 2 && even.parts[1].n_layers == 2, "no budgets: an even split (%u+%u)",
              even.parts[0].n_layers, even.parts[1].n_layers);
        layer_part = (even.parts[0].weights_bytes + even.parts[0].kv_bytes) / 2; /* about one layer's bytes */
        fixed = even.parts[1].total_bytes - even.parts[1].weights_bytes - even.parts[1].kv_bytes;
    }
    readings[0] = reading((uint64_t)((double)(whole.total_bytes * 2) / 0.7));
    readings[1] = reading((uint64_t)((double)(fixed + layer_part * 3 / 2 + (16u << 10)) / 0.7));
    d.device_memory = readings;
    if (CHECK(forge_plan_check(m, &d, &v, &e) == FORGE_OK, "check: %s", e.message)) {
        CHECK(v.fits && v.n_devices == 2 && v.devices[0].fits && v.devices[1].fits, "forge's split fits: %s", v.message);
        CHECK(v.plan.parts[0].n_layers == 3 && v.plan.parts[1].n_layers == 1, "the small device takes one layer (%u+%u): %s",
              v.plan.parts[0].n_layers, v.plan.parts[1].n_layers, v.message);
        CHECK(v.devices[1].plan_bytes == v.plan.parts[1].total_bytes && v.devices[1].budget_bytes < v.devices[0].budget_bytes,
              "each device's own bill and budget");
    }
    d.split_layers[0] = 2, d.split_layers[1] = 2; /* the caller's even split leaves device 1 short */
    if (CHECK(forge_plan_check(m, &d, &v, &e) == FORGE_OK, "check: %s", e.message)) {
        CHECK(!v.fits && v.devices[0].fits && !v.devices[1].fits, "device 1 is short: %s", v.message);
        CHECK(strstr(v.message, "device 0 (layers 0-1)") && strstr(v.message, "(layers 2-3)") && strstr(v.message, "short by ") &&
                  strstr(v.message, "--split ") && strstr(v.message, "a device more"),
              "the refusal names the device, the layers, a split that fits and a device more: %s", v.message);
        CHECK(v.split_that_fits[0] > v.split_that_fits[1] && v.split_that_fits[1] > 0.0, "the split that fits leans on device 0 (%g, %g)",
              v.split_that_fits[0], v.split_that_fits[1]);
    }
    test_counting_init(&count, -1);
    d.allocator.alloc = test_counting_alloc, d.allocator.free = test_counting_free, d.allocator.user_data = &count;
    CHECK(forge_context_create(m, &d, &ctx, &e) == FORGE_ERR_BUDGET && ctx == NULL && count.live == 0 && count.allocs == count.frees, "refused, nothing held (the plan's own temporary schedule aside): %s",
          e.message);
    /* repeated indices share a device's budget: two parts on one small card do not fit where each alone would */
    memset(d.split_layers, 0, sizeof d.split_layers);
    d.devices[1] = 0;
    readings[0] = reading((uint64_t)((double)(whole.total_bytes) / 0.7));
    if (CHECK(forge_plan_check(m, &d, &v, &e) == FORGE_OK, "check: %s", e.message))
        CHECK(v.n_devices == 1 && !v.fits && v.devices[0].plan_bytes == v.plan.total_bytes,
              "two parts on device 0 are billed together (%u devices, %llu of %llu)", v.n_devices,
              (unsigned long long)v.devices[0].plan_bytes, (unsigned long long)v.devices[0].budget_bytes);
    forge_model_close(m);
}

/* A failure at any allocation of a split context frees what the parts before it took. */
static void test_transactional(void) {
    forge_model *m = test_open_fixture(backend == FORGE_BACKEND_GPU ? "tiny-qwen2-q8_0.gguf" : "tiny-qwen2-f16.gguf");
    forge_context_desc d;
    test_counting count;
    long k, needed = -1;
    TEST_CASE("split: transactional creation");
    if (!m) return;
    d = desc_of(2);
    split_at(&d, forge_model_config(m)->n_layer, 1);
    d.allocator.alloc = test_counting_alloc, d.allocator.free = test_counting_free;
    for (k = 0; k < 64 && needed < 0; k++) {
        forge_context *ctx = NULL;
        forge_error e;
        forge_result r;
        test_counting_init(&count, k);
        d.allocator.user_data = &count;
        r = forge_context_create(m, &d, &ctx, &e);
        if (r == FORGE_OK) {
            needed = k;
            CHECK(count.allocs >= 2 + 1, "a split context takes an arena for each part (%ld allocations)", count.allocs);
            forge_context_destroy(ctx);
            CHECK(count.live == 0, "everything freed after destroy (%ld live)", count.live);
        } else {
            CHECK(r == FORGE_ERR_HOST_MEMORY && ctx == NULL && count.live == 0, "failing allocation %ld: %s, %ld live", k, e.message, count.live);
        }
    }
    CHECK(needed > 0, "creation succeeds once allocations are allowed (%ld)", needed);
    forge_model_close(m);
}

static void expect_refused(const forge_model *m, const forge_context_desc *d, const char *needle, const char *what) {
    forge_plan p;
    forge_error e;
    forge_context *ctx = NULL;
    forge_result r = forge_plan_compute(m, d, &p, &e);
    CHECK(r == FORGE_ERR_ARGUMENT && strstr(e.message, needle), "%s: refused naming '%s' (%d: %s)", what, needle, (int)r, e.message);
    r = forge_context_create(m, d, &ctx, &e);
    CHECK(r == FORGE_ERR_ARGUMENT && ctx == NULL, "%s: no context (%d)", what, (int)r);
}

static void test_bad_descriptors(void) {
    forge_model *m = test_open_fixture("tiny-gemma2-f16.gguf"); /* 3 layers */
    forge_context_desc d;
    uint32_t L;
    TEST_CASE("split: bad descriptors");
    if (!m) return;
    L = forge_model_config(m)->n_layer;
    d = desc_of(1);
    d.n_devices = FORGE_MAX_DEVICES + 1;
    expect_refused(m, &d, "FORGE_MAX_DEVICES", "too many devices");
    d = desc_of(1);
    d.n_devices = L + 1;
    expect_refused(m, &d, "at least one layer", "more devices than layers");
    d = desc_of(1);
    d.n_devices = 2, d.devices[1] = -1;
    expect_refused(m, &d, "negative", "a negative GPU index");
    d = desc_of(1);
    d.n_devices = 2, d.split[0] = 0.5;
    expect_refused(m, &d, "1 of 2 devices a share", "a share for one device of two");
    d = desc_of(1);
    d.n_devices = 2, d.split[0] = 0.5, d.split[1] = NAN;
    expect_refused(m, &d, "not a finite number", "a NaN share");
    d = desc_of(1);
    d.n_devices = 2, d.split_layers[0] = 1, d.split_layers[1] = L;
    expect_refused(m, &d, "summing to", "layers that do not add up");
    d = desc_of(1);
    d.n_devices = 2, d.split_layers[0] = L;
    expect_refused(m, &d, "1 of 2 devices given layers", "layers for one device of two");
    forge_model_close(m);
}

#ifdef FORGE_HIP
void forge_hip_fail_allocation_after(long k);

/* On two GPUs, a model of a few hundred MiB (FORGE_TEST_MODEL): each device's free memory falls by its
   part of the plan (within 2%), one allocation each; 10,000 decode steps leave both flat; destroy
   gives both back; a failing allocation on the second device gives the first its memory back. */
static void test_device_memory(const char *path) {
    forge_model *m = NULL;
    forge_context *ctx = NULL;
    forge_context_desc d;
    forge_error e;
    forge_memory_reading before[2], after[2], later[2];
    unsigned long allocations;
    int32_t t = 42;
    int i, k, steps = 0;
    TEST_CASE("split: device memory by device");
    if (!CHECK(forge_model_open(path, NULL, &m, &e) == FORGE_OK, "open %s: %s", path, e.message)) return;
    memset(&d, 0, sizeof d);
    d.backend = FORGE_BACKEND_GPU;
    d.n_ctx = 4096;
    d.n_devices = 2, d.devices[0] = 0, d.devices[1] = 1;
    for (k = 0; k < 2; k++) forge_memory_query_gpu(k, &before[k], &e);
    allocations = forge_gpu_allocation_count();
    if (!CHECK(forge_context_create(m, &d, &ctx, &e) == FORGE_OK, "create: %s", e.message)) {
        forge_model_close(m);
        return;
    }
    for (k = 0; k < 2; k++) {
        const forge_plan_part *q = &forge_context_plan(ctx)->parts[k];
        double taken;
        forge_memory_query_gpu(k, &after[k], &e);
        taken = (double)before[k].free_bytes - (double)after[k].free_bytes;
        printf("  GPU %d: part %llu bytes (layers %u-%u), free memory fell by %.0f (%.3f of the part)\n", k, (unsigned long long)q->total_bytes,
               q->layer_first, q->layer_first + q->n_layers - 1, taken, taken / (double)q->total_bytes);
        CHECK(fabs(taken - (double)q->total_bytes) <= 0.02 * (double)q->total_bytes, "GPU %d within 2%%: %.0f vs %llu", k, taken,
              (unsigned long long)q->total_bytes);
    }
    CHECK(forge_gpu_allocation_count() == allocations + 2, "one device allocation a device: %lu", forge_gpu_allocation_count() - allocations);
    CHECK(forge_eval(ctx, &t, 1, &e) == FORGE_OK, "eval: %s", e.message);
    for (k = 0; k < 2; k++) forge_memory_query_gpu(k, &after[k], &e);
    for (i = 0; i < 10000; i++) {
        if (forge_context_pos(ctx) + 1 >= 4096) forge_context_reset(ctx);
        if (forge_eval(ctx, &t, 1, &e) != FORGE_OK || forge_context_argmax(ctx, &t, &e) != FORGE_OK) break;
        steps++;
    }
    CHECK(steps == 10000, "10,000 decode steps: %d (%s)", steps, e.message);
    for (k = 0; k < 2; k++) {
        forge_memory_query_gpu(k, &later[k], &e);
        CHECK(later[k].free_bytes == after[k].free_bytes, "GPU %d free memory flat: %llu then %llu", k, (unsigned long long)after[k].free_bytes,
              (unsigned long long)later[k].free_bytes);
    }
    CHECK(forge_gpu_allocation_count() == allocations + 2, "nothing allocated while decoding");
    forge_context_destroy(ctx);
    for (k = 0; k < 2; k++) {
        forge_memory_query_gpu(k, &later[k], &e);
        CHECK(later[k].free_bytes == before[k].free_bytes, "GPU %d: destroy gives it all back (%llu vs %llu)", k,
              (unsigned long long)later[k].free_bytes, (unsigned long long)before[k].free_bytes);
    }
    ctx = NULL;
    forge_hip_fail_allocation_after(1); /* the second device's arena */
    CHECK(forge_context_create(m, &d, &ctx, &e) == FORGE_ERR_IO && ctx == NULL && strstr(e.message, "GPU 1"), "GPU 1 fails: %s", e.message);
    forge_hip_fail_allocation_after(-1);
    for (k = 0; k < 2; k++) {
        forge_memory_query_gpu(k, &later[k], &e);
        CHECK(later[k].free_bytes == before[k].free_bytes, "GPU %d: where it was after the failure on GPU 1 (%llu vs %llu)", k,
              (unsigned long long)later[k].free_bytes, (unsigned long long)before[k].free_bytes);
    }
    forge_model_close(m);
}
#endif

int main(void) {
    const char *b = getenv("FORGE_TEST_BACKEND");
    size_t f;
    backend = b && strcmp(b, "gpu") == 0 ? FORGE_BACKEND_GPU : FORGE_BACKEND_CPU;
    second_device = getenv("FORGE_TEST_DEVICES") && atoi(getenv("FORGE_TEST_DEVICES")) >= 2 ? 1 : 0;
    mem = reading(32ull << 30);
    for (f = 0; f < TEST_N_FAMILIES; f++) test_family(backend == FORGE_BACKEND_GPU ? test_gpu_families[f] : test_cpu_families[f]);
    test_captures();
    test_budgets();
    test_transactional();
    test_bad_descriptors();
#ifdef FORGE_HIP
    if (backend == FORGE_BACKEND_GPU && second_device && getenv("FORGE_TEST_MODEL")) test_device_memory(getenv("FORGE_TEST_MODEL"));
#endif
    return test_summary();
}

/* Tests of the memory plan, the budget and the CPU context: the plan's terms checked by hand and
   against the schedule's own lifetimes, verdicts at the budget's boundary, the solver against a
   brute-force search, every allocation failing in turn, and the forward pass evaluated in one
   batch and token by token. (Logits against llama.cpp and the float64 reference are checked for
   every fixture by tests/check_fixtures.py through `forge eval`.) */
#define _POSIX_C_SOURCE 200809L /* setenv, unsetenv: the default fraction is checked with FORGE_MEM_FRACTION set */
#define _DEFAULT_SOURCE /* madvise in <sys/mman.h>: desc.cpu_copy_weights takes huge pages and lets the file's pages go */
#define FORGE_IMPLEMENTATION
#include "../forge.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FORGE__TEST_STR_(x) #x
#define FORGE__TEST_STR(x) FORGE__TEST_STR_(x)

static const int32_t fixture_tokens[32] = {1,  300, 301, 512, 777, 1000, 5,   42,  259, 260, 1023,
                                           3,  999, 100, 200, 17,  18,   19,  400, 401, 402, 650,
                                           651, 652, 653, 10, 11,  12,   900, 901, 902, 1020};


static forge_memory_reading reading(uint64_t free_bytes) {
    forge_memory_reading r;
    memset(&r, 0, sizeof r);
    snprintf(r.device, sizeof r.device, "test device");
    r.total_bytes = free_bytes * 2;
    r.free_bytes = free_bytes;
    return r;
}

static void test_plan_terms(forge_model *m) {
    forge_context_desc d;
    forge_plan p;
    forge_error e;
    forge__schedule s;
    uint64_t weights = 0, i, peak_live = 0, scratch;
    uint32_t a, b, op;
    int overlaps = 0;
    const forge_gguf *g = forge_model_gguf(m);

    TEST_CASE("plan: terms of tiny-llama at 256 positions, batches of 32, every logit kept");
    memset(&d, 0, sizeof d);
    d.n_ctx = 256;
    d.n_batch = 32;
    d.all_logits = 1;
    d.n_threads = 2;
    if (!CHECK(forge_plan_compute(m, &d, &p, &e) == FORGE_OK, "plan: %s", e.message)) return;
    for (i = 0; i < forge_gguf_tensor_count(g); i++) weights += forge_gguf_tensor_at(g, i)->n_bytes;
    CHECK(p.weights_bytes == weights, "weights %llu, every tensor of the file is used: %llu", (unsigned long long)p.weights_bytes,
          (unsigned long long)weights);
    /* 4 layers x 256 positions x 2 KV heads x (32 + 32) x 2 bytes */
    CHECK(p.kv_bytes == 4ull * 256 * 2 * 64 * 2, "kv %llu", (unsigned long long)p.kv_bytes);
    CHECK(p.logits_bytes == 32ull * 1024 * 4, "logits %llu", (unsigned long long)p.logits_bytes);
    CHECK(p.n_ctx == 256 && p.n_batch == 32 && p.n_logits == 32 && p.kv_type == FORGE_KV_F16, "resolved fields");
    CHECK(p.total_bytes == p.weights_bytes + p.kv_bytes + p.scratch_bytes + p.logits_bytes + p.capture_bytes + p.reserve_bytes,
          "total is the sum of the terms");
    d.all_logits = 0;
    CHECK(forge_plan_compute(m, &d, &p, &e) == FORGE_OK && p.logits_bytes == 1024 * 4 + 0 && p.n_logits == 1,
          "last token only: %llu", (unsigned long long)p.logits_bytes);

    TEST_CASE("plan: scratch packing against the schedule's lifetimes");
    if (!CHECK(forge__schedule_build(m, NULL, &s, NULL, 0, &e) == FORGE_OK, "schedule: %s", e.message)) return;
    scratch = forge__schedule_pack(&s, 32);
    CHECK(scratch == p.scratch_bytes, "the plan's scratch is the packed schedule's: %llu vs %llu", (unsigned long long)scratch,
          (unsigned long long)p.scratch_bytes);
    for (a = 0; a < s.n_values; a++)
        for (b = a + 1; b < s.n_values; b++) {
            const forge__value *x = &s.values[a], *y = &s.values[b];
            uint64_t xs = forge__align64((uint64_t)x->width * 32 * 4), ys = forge__align64((uint64_t)y->width * 32 * 4);
            int alive_together = !(x->last < y->first || y->last < x->first);
            int share_bytes = x->offset < y->offset + ys && y->offset < x->offset + xs;
            if (alive_together && share_bytes) overlaps++;
        }
    CHECK(overlaps == 0, "%d pairs of values alive at once share bytes", overlaps);
    for (op = 0; op < s.n_ops; op++) {
        uint64_t live = 0;
        for (a = 0; a < s.n_values; a++)
            if (s.values[a].first <= op && op <= s.values[a].last) live += forge__align64((uint64_t)s.values[a].width * 32 * 4);
        if (live > peak_live) peak_live = live;
    }
    CHECK(scratch >= peak_live && scratch <= peak_live + peak_live / 4, "scratch %llu for a peak of %llu live bytes",
          (unsigned long long)scratch, (unsigned long long)peak_live);
    forge__schedule_free(&s, NULL);
}

static void test_budget(forge_model *m) {
    forge_context_desc d;
    forge_verdict v;
    forge_plan p;
    forge_error e;
    forge_memory_reading r;
    forge_context *ctx = NULL;
    test_counting count;
    uint64_t total;
    uint32_t k, expected_ctx = 0;
    int kv, expected_kv = FORGE_KV_DEFAULT;
    test_counting_init(&count, -1);

    memset(&d, 0, sizeof d);
    d.n_ctx = 4096;
    d.n_threads = 2;
    d.mem_fraction = 1.0;
    CHECK(forge_plan_compute(m, &d, &p, &e) == FORGE_OK, "plan: %s", e.message);
    total = p.total_bytes;

    TEST_CASE("budget: exactly enough fits, one byte less does not");
    r = reading(total);
    d.memory = &r;
    CHECK(forge_plan_check(m, &d, &v, &e) == FORGE_OK && v.fits && v.budget_bytes == total, "at the boundary: %s", v.message);
    r = reading(total - 1);
    CHECK(forge_plan_check(m, &d, &v, &e) == FORGE_OK && !v.fits, "one byte short");
    CHECK(strstr(v.message, "but the budget is") != NULL && strstr(v.message, "test device") && strstr(v.message, "4096 tokens f16"),
          "message: %s", v.message);

    TEST_CASE("budget: fraction and headroom");
    r = reading(total * 2);
    d.mem_fraction = 0.5;
    CHECK(forge_plan_check(m, &d, &v, &e) == FORGE_OK && v.fits && v.budget_bytes == total, "half of twice the plan");
    d.mem_headroom_bytes = 1;
    CHECK(forge_plan_check(m, &d, &v, &e) == FORGE_OK && !v.fits && v.budget_bytes == total - 1, "headroom of one byte");
    d.mem_headroom_bytes = 0;
    d.mem_fraction = 0.0; /* the default: the library reads no environment, forge_context_desc_apply_env does */
    {
        static char saved[64];
        const char *env = getenv("FORGE_MEM_FRACTION");
        int had = env != NULL;
        forge_context_desc with_env;
        if (had) snprintf(saved, sizeof saved, "%s", env);
        setenv("FORGE_MEM_FRACTION", "0.25", 1);
        CHECK(forge_plan_check(m, &d, &v, &e) == FORGE_OK && fabs(v.mem_fraction - 0.70) < 1e-12,
              "default 70%% whatever FORGE_MEM_FRACTION says: %g", v.mem_fraction);
        with_env = d;
        CHECK(forge_context_desc_apply_env(&with_env, &e) == FORGE_OK && forge_plan_check(m, &with_env, &v, &e) == FORGE_OK &&
                  fabs(v.mem_fraction - 0.25) < 1e-12,
              "FORGE_MEM_FRACTION=0.25 through forge_context_desc_apply_env: %g", v.mem_fraction);
        if (had) setenv("FORGE_MEM_FRACTION", saved, 1);
        else unsetenv("FORGE_MEM_FRACTION");
    }
    d.mem_fraction = 1.5;
    CHECK(forge_plan_check(m, &d, &v, &e) == FORGE_ERR_ARGUMENT, "fraction above 1 refused");
    d.mem_fraction = 1.0;
    { /* a thread count the pool would cap is refused, and the message names the cap */
        uint32_t threads = d.n_threads;
        d.n_threads = FORGE_MAX_THREADS + 1;
        CHECK(forge_plan_check(m, &d, &v, &e) == FORGE_ERR_ARGUMENT && strstr(e.message, "limit of " FORGE__TEST_STR(FORGE_MAX_THREADS)),
              "%u threads: %s", d.n_threads, e.message);
        d.n_threads = FORGE_MAX_THREADS;
        CHECK(forge_plan_check(m, &d, &v, &e) == FORGE_OK, "%u threads: %s", d.n_threads, e.message);
        d.n_threads = threads;
    }

    TEST_CASE("budget: what would fit, against a brute-force search");
    r = reading(total - total / 8);
    CHECK(forge_plan_check(m, &d, &v, &e) == FORGE_OK && !v.fits, "an eighth short");
    for (k = 256; k <= 4096; k += 256) {
        forge_context_desc t = d;
        t.n_ctx = k;
        if (forge_plan_compute(m, &t, &p, NULL) == FORGE_OK && p.total_bytes <= r.free_bytes) expected_ctx = k;
    }
    for (kv = FORGE_KV_Q8_0; kv <= FORGE_KV_Q4_0 && expected_kv == FORGE_KV_DEFAULT; kv++) {
        forge_context_desc t = d;
        t.kv_type = (forge_kv_type)kv;
        if (forge_plan_compute(m, &t, &p, NULL) == FORGE_OK && p.total_bytes <= r.free_bytes) expected_kv = kv;
    }
    CHECK(v.max_ctx_that_fits == expected_ctx && expected_ctx > 0 && expected_ctx < 4096, "largest context %u, expected %u",
          v.max_ctx_that_fits, expected_ctx);
    CHECK((int)v.kv_type_that_fits == expected_kv && expected_kv != FORGE_KV_DEFAULT, "KV type %s, expected %s",
          forge_kv_type_name(v.kv_type_that_fits), forge_kv_type_name((forge_kv_type)expected_kv));
    CHECK(strstr(v.message, "fits: --ctx") != NULL && strstr(v.message, "--kv") != NULL, "message: %s", v.message);
    { /* past the trained context (4096), the suggestion stops there, however much more would fit */
        forge_context_desc t = d;
        int ok;
        t.n_ctx = 16384;
        CHECK(forge_plan_compute(m, &t, &p, NULL) == FORGE_OK, "plan at 16384");
        r = reading(p.total_bytes);
        t.n_ctx = 65536;
        ok = forge_plan_check(m, &t, &v, &e) == FORGE_OK; /* (outside CHECK: its arguments may be read first) */
        CHECK(ok && !v.fits && v.max_ctx_that_fits == forge_model_config(m)->n_ctx_train,
              "65536 asked, 16384 would fit: suggested %u (trained %u)", v.max_ctx_that_fits, forge_model_config(m)->n_ctx_train);
    }
    r = reading(1024);
    CHECK(forge_plan_check(m, &d, &v, &e) == FORGE_OK && !v.fits && v.max_ctx_that_fits == 0 &&
              v.kv_type_that_fits == FORGE_KV_DEFAULT && strstr(v.message, "nothing fits"),
          "1 KiB: %s", v.message);

    TEST_CASE("budget: a refused context allocates nothing");
    d.allocator.alloc = test_counting_alloc;
    d.allocator.free = test_counting_free;
    d.allocator.user_data = &count;
    r = reading(total - 1);
    CHECK(forge_context_create(m, &d, &ctx, &e) == FORGE_ERR_BUDGET && ctx == NULL && e.result == FORGE_ERR_BUDGET,
          "refused: %s", e.message);
    CHECK(count.live == 0, "%ld allocations left", count.live);

    TEST_CASE("budget: the warn policy allocates anyway");
    d.policy = FORGE_BUDGET_WARN;
    CHECK(forge_context_create(m, &d, &ctx, &e) == FORGE_OK && ctx != NULL, "warn: %s", e.message);
    forge_context_destroy(ctx);
    CHECK(count.live == 0, "%ld allocations left after destroy", count.live);
}

static void test_allocation_failures(forge_model *m) {
    forge_context_desc d;
    forge_context *ctx;
    forge_error e;
    forge_memory_reading r = reading(1ull << 40);
    test_counting count;
    long k;
    int failures = 0, leaks = 0;
    forge_result res = FORGE_ERR_HOST_MEMORY;
    int copy;
    TEST_CASE("context: every allocation failing in turn returns everything (the weights read from the file, then copied)");
    for (copy = 0; copy < 2; copy++) {
        memset(&d, 0, sizeof d);
        d.n_ctx = 256;
        d.n_threads = 3;
        d.memory = &r;
        d.cpu_copy_weights = copy;
        d.allocator.alloc = test_counting_alloc;
        d.allocator.free = test_counting_free;
        res = FORGE_ERR_HOST_MEMORY;
        failures = leaks = 0;
        for (k = 0; k < 64 && res != FORGE_OK; k++) {
            test_counting_init(&count, k);
            d.allocator.user_data = &count;
            ctx = NULL;
            res = forge_context_create(m, &d, &ctx, &e);
            if (res == FORGE_OK) {
                forge_context_destroy(ctx);
            } else {
                failures++;
                if (res != FORGE_ERR_HOST_MEMORY || ctx != NULL) leaks += 1000;
            }
            if (count.live != 0) leaks++;
        }
        CHECK(res == FORGE_OK && failures >= 3 + 2 * copy, "copy %d: %d failure points before success", copy, failures);
        CHECK(leaks == 0, "copy %d: %d runs left memory or returned the wrong code", copy, leaks);
    }
}

static float max_abs(const float *x, size_t n) {
    float m = 0.0f;
    size_t i;
    for (i = 0; i < n; i++) m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
    return m;
}

static void test_eval(forge_model *m, const char *name) {
    forge_context_desc d;
    forge_context *ctx = NULL;
    forge_error e;
    forge_memory_reading r = reading(1ull << 40);
    const forge_config *c = forge_model_config(m);
    float *batch = NULL;
    const float *logits;
    uint32_t rows, t;
    size_t n = (size_t)32 * c->n_vocab;
    float worst = 0.0f, scale;
    char label[128];

    snprintf(label, sizeof label, "eval %s: one batch equals token by token", name);
    TEST_CASE(label);
    memset(&d, 0, sizeof d);
    d.n_ctx = 64;
    d.n_batch = 32;
    d.all_logits = 1;
    d.n_threads = 2;
    d.memory = &r;
    if (!CHECK(forge_context_create(m, &d, &ctx, &e) == FORGE_OK, "create: %s", e.message)) return;
    CHECK(forge_context_arena_bytes(ctx) == forge_context_plan(ctx)->total_bytes - forge_context_plan(ctx)->weights_bytes,
          "the arena is the plan (weights stay mapped)");
    batch = (float *)malloc(n * sizeof *batch);
    if (!batch) return;
    CHECK(forge_eval(ctx, fixture_tokens, 32, &e) == FORGE_OK, "eval: %s", e.message);
    logits = forge_context_logits(ctx, &rows);
    CHECK(logits && rows == 32, "%u rows", rows);
    if (logits) memcpy(batch, logits, n * sizeof *batch);
    scale = max_abs(batch, n);
    CHECK(forge_context_pos(ctx) == 32, "position %u", forge_context_pos(ctx));
    forge_context_reset(ctx);
    for (t = 0; t < 32; t++) {
        size_t i;
        if (forge_eval(ctx, fixture_tokens + t, 1, &e) != FORGE_OK) break;
        logits = forge_context_logits(ctx, &rows);
        for (i = 0; i < c->n_vocab; i++) {
            float diff = fabsf(logits[i] - batch[(size_t)t * c->n_vocab + i]);
            if (diff > worst) worst = diff;
        }
    }
    CHECK(t == 32 && rows == 1, "token by token: %s", e.message);
    CHECK(worst <= 1e-4f * scale, "largest difference %g for logits up to %g", (double)worst, (double)scale);

    TEST_CASE("eval: refusals");
    CHECK(forge_eval(ctx, fixture_tokens, 33, &e) == FORGE_ERR_ARGUMENT && strstr(e.message, "64"), "context full: %s", e.message);
    {
        int32_t bad = (int32_t)c->n_vocab;
        CHECK(forge_eval(ctx, &bad, 1, &e) == FORGE_ERR_ARGUMENT && forge_context_pos(ctx) == 32, "token outside the vocabulary");
    }
    CHECK(forge_eval(ctx, fixture_tokens, 0, &e) == FORGE_ERR_ARGUMENT, "no tokens");
    forge_context_destroy(ctx);
    free(batch);
}

/* An allocator that sums the bytes it hands out (sizes kept in a header before each block). */
typedef struct test_bytes {
    uint64_t taken;
} test_bytes;

static void *test_bytes_alloc(size_t size, void *user_data) {
    size_t *p = (size_t *)malloc(size + 64);
    if (!p) return NULL;
    *p = size;
    ((test_bytes *)user_data)->taken += size;
    return (char *)p + 64;
}

static void test_bytes_free(void *ptr, void *user_data) {
    (void)user_data;
    if (ptr) free((char *)ptr - 64);
}

/* desc.cpu_copy_weights: every family's logits the same bits with the product matrices copied as
   read from the file (a batch with every row's logits, then steps of one token), the copy within
   the bound its documentation gives, and every allocation failing in turn returns everything. */
static void test_copy_weights(void) {
    forge_memory_reading r = reading(1ull << 40);
    int f;
    TEST_CASE("context: the CPU's copy of the weights gives the same logits as the mapped file");
    for (f = 0; f < TEST_N_FAMILIES; f++) {
        forge_model *m = test_open_fixture(test_cpu_families[f]);
        forge_context *ctx[2] = {NULL, NULL};
        test_bytes bytes[2] = {{0}, {0}};
        forge_error e;
        const forge_config *c;
        float *logits[2] = {NULL, NULL};
        uint32_t rows[2] = {0, 0}, n_vocab, t;
        int k, same = 1;
        uint64_t n_tensors;
        if (!m) continue;
        c = forge_model_config(m);
        n_vocab = c->n_vocab;
        n_tensors = forge_gguf_tensor_count(forge_model_gguf(m));
        for (k = 0; k < 2; k++) {
            forge_context_desc d;
            memset(&d, 0, sizeof d);
            d.backend = FORGE_BACKEND_CPU;
            d.n_ctx = 64;
            d.n_batch = 16;
            d.all_logits = 1;
            d.n_threads = 2;
            d.memory = &r;
            d.cpu_copy_weights = k;
            d.allocator.alloc = test_bytes_alloc;
            d.allocator.free = test_bytes_free;
            d.allocator.user_data = &bytes[k];
            CHECK(forge_context_create(m, &d, &ctx[k], &e) == FORGE_OK, "%s, copy %d: %s", test_cpu_families[f], k, e.message);
            logits[k] = (float *)malloc((size_t)16 * n_vocab * sizeof(float));
        }
        if (ctx[0] && ctx[1] && logits[0] && logits[1]) {
            const forge_plan *p = forge_context_plan(ctx[1]);
            uint64_t copy = bytes[1].taken - bytes[0].taken;
            CHECK(copy > 0 && copy <= p->weights_bytes + (2u << 20) + 64 * n_tensors,
                  "%s: the copy took %llu bytes, the plan's weights %llu", test_cpu_families[f], (unsigned long long)copy,
                  (unsigned long long)p->weights_bytes);
            CHECK(forge_context_arena_bytes(ctx[1]) == forge_context_arena_bytes(ctx[0]), "%s: the arena unchanged", test_cpu_families[f]);
            for (t = 0; t < 5 && same; t++) { /* a batch of 16 rows, then 4 steps of one token */
                const uint32_t n = t == 0 ? 16 : 1;
                const int32_t *tokens = t == 0 ? fixture_tokens : fixture_tokens + 15 + t;
                for (k = 0; k < 2; k++) {
                    const float *l;
                    if (!CHECK(forge_eval(ctx[k], tokens, n, &e) == FORGE_OK, "%s: eval: %s", test_cpu_families[f], e.message)) same = 0;
                    l = forge_context_logits(ctx[k], &rows[k]);
                    if (l && rows[k] <= 16) memcpy(logits[k], l, (size_t)rows[k] * n_vocab * sizeof(float));
                }
                if (same && (rows[0] != rows[1] || rows[0] != n ||
                             memcmp(logits[0], logits[1], (size_t)rows[0] * n_vocab * sizeof(float))))
                    same = 0;
            }
            CHECK(same, "%s: the logits of the copy and the file differ (step %u)", test_cpu_families[f], t);
        }
        for (k = 0; k < 2; k++) {
            forge_context_destroy(ctx[k]);
            free(logits[k]);
        }
        forge_model_close(m);
    }
}

static void test_kv_types(forge_model *m) {
    forge_context_desc d;
    forge_error e;
    forge_memory_reading r = reading(1ull << 40);
    float *ref = NULL;
    static const int order[4] = {FORGE_KV_F16, FORGE_KV_F32, FORGE_KV_Q8_0, FORGE_KV_Q4_0};
    int k;
    const forge_config *c = forge_model_config(m);
    size_t n = (size_t)32 * c->n_vocab;
    TEST_CASE("eval: every KV cache type runs, quantized ones close to f16");
    memset(&d, 0, sizeof d);
    d.n_ctx = 64;
    d.all_logits = 1;
    d.n_threads = 2;
    d.memory = &r;
    d.cpu_no_q8 = 1; /* f32 products: 8-bit ones would turn the caches' small differences into steps of their rounding */
    ref = (float *)malloc(n * sizeof *ref);
    for (k = 0; ref && k < 4; k++) {
        const int kv = order[k]; /* f16 first: the others are compared with it */
        forge_context *ctx = NULL;
        const float *logits;
        uint32_t rows;
        double num = 0.0, den = 0.0;
        size_t i;
        d.kv_type = (forge_kv_type)kv;
        if (!CHECK(forge_context_create(m, &d, &ctx, &e) == FORGE_OK, "%s: %s", forge_kv_type_name(d.kv_type), e.message)) continue;
        CHECK(forge_eval(ctx, fixture_tokens, 32, &e) == FORGE_OK, "eval: %s", e.message);
        logits = forge_context_logits(ctx, &rows);
        if (kv == FORGE_KV_F16) memcpy(ref, logits, n * sizeof *ref);
        for (i = 0; i < n; i++) {
            num += ((double)logits[i] - ref[i]) * ((double)logits[i] - ref[i]);
            den += (double)ref[i] * ref[i];
        }
        /* f32 differs from f16 by f16 rounding only; q8_0 and q4_0 by their quantization */
        CHECK(sqrt(num / den) < (kv == FORGE_KV_Q4_0 ? 0.2 : kv == FORGE_KV_Q8_0 ? 0.05 : 0.01), "%s: relative L2 %g from f16",
              forge_kv_type_name(d.kv_type), sqrt(num / den));
        forge_context_destroy(ctx);
    }
    free(ref);
}

typedef struct warnings {
    int count;
    double last;
} warnings;

static void on_warn(void *user, const forge_memory_reading *r, double used) {
    warnings *w = (warnings *)user;
    (void)r;
    w->count++;
    w->last = used;
}

static void test_monitor(void) {
    forge_monitor m;
    warnings w = {0, 0.0};
    forge_memory_reading r;
    double used = 0.0;
    forge_error e;
    TEST_CASE("monitor: warns once per crossing of 85%");
    memset(&m, 0, sizeof m);
    m.warn = on_warn;
    m.user_data = &w;
    r = reading(50);                /* total 100, free 50: 50% used */
    CHECK(forge_monitor_poll(&m, &r, &used, &e) == FORGE_OK && used == 0.5 && w.count == 0, "50%%");
    r.free_bytes = 15;              /* 85% used: at the threshold */
    forge_monitor_poll(&m, &r, &used, &e);
    CHECK(w.count == 1 && w.last == 0.85, "crossing warns: %d at %g", w.count, w.last);
    r.free_bytes = 5;
    forge_monitor_poll(&m, &r, &used, &e);
    CHECK(w.count == 1, "staying above does not warn again");
    r.free_bytes = 40;
    forge_monitor_poll(&m, &r, &used, &e);
    r.free_bytes = 10;
    forge_monitor_poll(&m, &r, &used, &e);
    CHECK(w.count == 2 && w.last == 0.9, "a new crossing warns again");
    m.threshold = 0.95;
    m.above = 0;
    forge_monitor_poll(&m, &r, &used, &e);
    CHECK(w.count == 2, "90%% is below a 95%% threshold");
    r.total_bytes = 0;
    forge_monitor_poll(&m, &r, &used, &e);
    CHECK(used == 1.0 && w.count == 3, "a reading of zero total counts as full");
    m.threshold = 2.0;
    CHECK(forge_monitor_poll(&m, &r, &used, &e) == FORGE_ERR_ARGUMENT, "threshold above 1");
    m.threshold = 0.0;
    CHECK(forge_monitor_poll(&m, NULL, &used, &e) == FORGE_OK && used >= 0.0 && used <= 1.0, "this machine: %g", used);
}

/* forge_context_sample on the CPU: the host sampler's token for every setting, and its refusals */
static void test_context_sample(forge_model *m) {
    static const int32_t prompt[8] = {1, 15, 300, 42, 7, 900, 12, 5};
    forge_sampler_desc d[6];
    forge_context_desc cd;
    forge_context *ctx = NULL;
    forge_sampler *other = NULL;
    forge_error e;
    int32_t token = 7;
    int i;
    TEST_CASE("forge_context_sample (CPU) equals forge_sampler_sample");
    memset(d, 0, sizeof d);
    d[1].temperature = 0.8f, d[1].top_k = 40, d[1].seed = 1;
    d[2].temperature = 1.5f, d[2].seed = 2;
    d[3].temperature = 0.7f, d[3].top_p = 0.9f, d[3].min_p = 0.05f, d[3].seed = 3;
    d[4].temperature = 1.0f, d[4].top_k = 5, d[4].repeat_penalty = 1.3f, d[4].seed = 4;
    d[5].temperature = 2.0f, d[5].top_k = 300, d[5].top_p = 0.95f, d[5].seed = 5;
    memset(&cd, 0, sizeof cd);
    cd.n_ctx = 64;
    cd.backend = FORGE_BACKEND_CPU;
    if (!CHECK(forge_context_create(m, &cd, &ctx, &e) == FORGE_OK, "create: %s", e.message)) return;
    CHECK(forge_sampler_create(&d[1], 7, &other, &e) == FORGE_OK, "sampler: %s", e.message);
    CHECK(forge_context_sample(ctx, other, &token, &e) == FORGE_ERR_ARGUMENT && token == -1, "before any eval: refused");
    for (i = 0; i < 6; i++) {
        int same = test_sample_walk(ctx, forge_model_config(m)->n_vocab, prompt, 8, &d[i], 40);
        CHECK(same == 40, "setting %d: %d of 40 tokens equal", i, same);
    }
    CHECK(forge_context_sample(ctx, other, &token, &e) == FORGE_ERR_ARGUMENT && strstr(e.message, "sampler"),
          "a sampler for another vocabulary: %s", e.message);
    CHECK(forge_context_sample(ctx, NULL, &token, &e) == FORGE_ERR_ARGUMENT, "no sampler: refused");
    forge_sampler_destroy(other);
    forge_context_destroy(ctx);
}

/* The quantized cache stores are defined for every float: a block with a NaN or an infinity becomes
   a NaN scale over the codes of zero (so it reads back as NaN), a block whose scale is below float's
   normal range (denormal inputs) becomes zeros, and a finite block reads back close to its values. */
static void test_kv_encode_special(void) {
    static const forge_kv_type kinds[2] = {FORGE_KV_Q8_0, FORGE_KV_Q4_0};
    const float denormal = 1e-40f, nan_value = (float)NAN, inf_value = (float)INFINITY;
    float x[7 * 32], back[7 * 32];
    uint8_t row[7 * 34];
    uint32_t k, b, j;
    TEST_CASE("kv cache: quantized stores of NaN, infinities and denormals are defined");
    for (j = 0; j < 7 * 32; j++) x[j] = (float)((int)(j % 13) - 6) * 0.25f;
    x[0 * 32 + 5] = nan_value;              /* block 0: one NaN */
    x[1 * 32 + 31] = inf_value;             /* block 1: +inf */
    x[2 * 32 + 0] = -inf_value;             /* block 2: -inf */
    for (j = 0; j < 32; j++) x[3 * 32 + j] = (float)((int)j - 16) * denormal; /* block 3: denormals and a zero */
    for (j = 0; j < 32; j++) x[4 * 32 + j] = j == 3 ? denormal : 0.0f;          /* block 4: one denormal */
    for (j = 0; j < 32; j++) x[5 * 32 + j] = (float)((int)j - 16) * 1e-30f;     /* block 5: small but normal */
    /* block 6: ordinary values */
    for (k = 0; k < 2; k++) {
        const forge_type_traits *t = forge_type_info(forge__kv_storage_type(kinds[k]));
        const uint32_t bb = t->block_bytes;
        const uint8_t zero_code = kinds[k] == FORGE_KV_Q8_0 ? 0x00 : 0x88;
        memset(row, 0xAB, sizeof row);
        forge__kv_encode(kinds[k], x, 7 * 32, row);
        t->dequantize(row, back, 7);
        for (b = 0; b < 3; b++) {
            int codes_zero = 1, all_nan = 1;
            for (j = 2; j < bb; j++) codes_zero &= row[b * bb + j] == zero_code;
            for (j = 0; j < 32; j++) all_nan &= isnan(back[b * 32 + j]) != 0;
            CHECK(row[b * bb] == 0x00 && row[b * bb + 1] == 0x7e && codes_zero,
                  "%s block %u (non-finite): scale %02x%02x, codes all %02x: %d", t->name, b, row[b * bb + 1], row[b * bb],
                  zero_code, codes_zero);
            CHECK(all_nan, "%s block %u reads back as NaN", t->name, b);
        }
        for (b = 3; b < 5; b++) {
            int codes_zero = 1;
            for (j = 2; j < bb; j++) codes_zero &= row[b * bb + j] == zero_code;
            CHECK(row[b * bb] == 0 && (row[b * bb + 1] & 0x7f) == 0 && codes_zero, "%s block %u (denormal, a zero scale of either sign): scale %02x%02x, codes zero %d",
                  t->name, b, row[b * bb + 1], row[b * bb], codes_zero);
            for (j = 0; j < 32; j++) CHECK(back[b * 32 + j] == 0.0f, "%s block %u value %u reads back %g", t->name, b, j, (double)back[b * 32 + j]);
        }
        for (b = 5; b < 7; b++) {
            double worst = 0.0, amax = 0.0;
            for (j = 0; j < 32; j++) amax = fabs(x[b * 32 + j]) > amax ? fabs(x[b * 32 + j]) : amax;
            for (j = 0; j < 32; j++) worst = fabs(back[b * 32 + j] - x[b * 32 + j]) > worst ? fabs(back[b * 32 + j] - x[b * 32 + j]) : worst;
            if (b == 5) { /* a scale below f16's range: the block is zeros, never infinities */
                for (j = 0; j < 32; j++) CHECK(back[b * 32 + j] == 0.0f, "%s block 5 value %u reads back %g", t->name, j, (double)back[b * 32 + j]);
            } else {
                CHECK(worst <= amax / (kinds[k] == FORGE_KV_Q8_0 ? 127.0 : 8.0), "%s block %u: error %g of a largest value %g", t->name, b,
                      worst, amax);
            }
        }
    }
}

int main(void) {
    test_monitor();
    test_kv_encode_special();
    forge_model *llama = test_open_fixture("tiny-llama-q4_0.gguf");
    forge_model *qwen3 = test_open_fixture("tiny-qwen3-q8_0.gguf");
    if (llama) {
        test_plan_terms(llama);
        test_budget(llama);
        test_allocation_failures(llama);
        test_eval(llama, "tiny-llama-q4_0");
        test_kv_types(llama);
        test_context_sample(llama);
    }
    if (qwen3) test_eval(qwen3, "tiny-qwen3-q8_0");
    test_copy_weights();
    forge_model_close(llama);
    forge_model_close(qwen3);
    return test_summary();
}

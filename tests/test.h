/* test.h - the smallest test harness that does the job.

   TEST_CASE("name") names the case that the following checks belong to; CHECK(cond, fmt, ...)
   counts a pass or prints the case, the place and the message of a failure; test_summary() prints
   "N passed, N failed" as the last line and returns the process exit status (non-zero on any
   failure). Everything is static: include it in one file per test program. */
#ifndef FORGE_TEST_H
#define FORGE_TEST_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#if defined(__GNUC__) || defined(__clang__)
#define TEST__PRINTF_LIKE(fmt_index, first_arg) __attribute__((format(printf, fmt_index, first_arg)))
#define TEST__MAYBE_UNUSED __attribute__((unused)) /* not every test program uses every helper */
#else
#define TEST__PRINTF_LIKE(fmt_index, first_arg)
#define TEST__MAYBE_UNUSED
#endif

typedef struct test_state {
    int passed;
    int failed;
    int cases;
    const char *current_case;
} test_state;

static test_state test__state = {0, 0, 0, "(no case)"};

/* Starting a case sends what the last one printed, so a suite's output streams through a pipe. */
static void test_case(const char *name) {
    fflush(stdout);
    test__state.current_case = name;
    test__state.cases++;
}

TEST__PRINTF_LIKE(5, 6)
static int test_check(int ok, const char *file, int line, const char *expression, const char *fmt, ...) {
    va_list args;
    if (ok) {
        test__state.passed++;
        return 1;
    }
    test__state.failed++;
    printf("FAIL [%s] %s:%d: %s: ", test__state.current_case, file, line, expression);
    va_start(args, fmt);
    vprintf(fmt, args);
    va_end(args);
    printf("\n");
    fflush(stdout);
    return 0;
}

/* The format is part of __VA_ARGS__ so that a message without arguments is still strict C99. */
#define TEST_CASE(name) test_case(name)
#define CHECK(cond, ...) test_check((cond) ? 1 : 0, __FILE__, __LINE__, #cond, __VA_ARGS__)

/* A host allocator (the two functions of a forge_allocator, user data a test_counting) that counts
   what it hands out and can refuse: once `allocs` allocations have succeeded and fail_after >= 0
   of them is reached, every further allocation fails. live = allocated and not yet freed. */
typedef struct test_counting {
    long calls, allocs, frees, live, fail_after;
} test_counting;

TEST__MAYBE_UNUSED static void test_counting_init(test_counting *c, long fail_after) {
    c->calls = c->allocs = c->frees = c->live = 0;
    c->fail_after = fail_after;
}

TEST__MAYBE_UNUSED static void *test_counting_alloc(size_t size, void *user_data) {
    test_counting *c = (test_counting *)user_data;
    void *p;
    c->calls++;
    if (c->fail_after >= 0 && c->allocs >= c->fail_after) return NULL;
    p = malloc(size);
    if (p) c->allocs++, c->live++;
    return p;
}

TEST__MAYBE_UNUSED static void test_counting_free(void *ptr, void *user_data) {
    test_counting *c = (test_counting *)user_data;
    if (ptr) c->frees++, c->live--;
    free(ptr);
}

/* One fixture file of every family: sliding windows (gemma2, gemma3), soft-caps (gemma2), experts (the
   three MoE files); on the CPU, and the same families on the GPU in the files its other suites read. */
#define TEST_N_FAMILIES 12
TEST__MAYBE_UNUSED static const char *const test_cpu_families[TEST_N_FAMILIES] = {
    "tiny-llama-q8_0.gguf",    "tiny-llama-q4_k_m.gguf", "tiny-qwen2-f16.gguf",     "tiny-qwen3-q4_k_m.gguf",
    "tiny-gemma-f16.gguf",     "tiny-gemma2-f16.gguf",   "tiny-gemma3-q4_k_m.gguf", "tiny-phi3-f16.gguf",
    "tiny-glm4-f16.gguf",      "tiny-llama-moe-f16.gguf", "tiny-qwen2moe-q4_k_m.gguf", "tiny-qwen3moe-f16.gguf"};
TEST__MAYBE_UNUSED static const char *const test_gpu_families[TEST_N_FAMILIES] = {
    "tiny-llama-q4_0.gguf",    "tiny-llama-q4_k_m.gguf", "tiny-qwen2-q8_0.gguf",    "tiny-qwen3-q4_k_m.gguf",
    "tiny-gemma-q4_k_m.gguf",  "tiny-gemma2-f16.gguf",   "tiny-gemma3-q4_k_m.gguf", "tiny-phi3-q4_k_m.gguf",
    "tiny-glm4-q4_k_m.gguf",   "tiny-llama-moe-q4_k_m.gguf", "tiny-qwen2moe-q4_k_m.gguf", "tiny-qwen3moe-q4_k_m.gguf"};

/* Opens FORGE_FIXTURES/models/NAME (default ../shared/fixtures), failing a check when it cannot. */
TEST__MAYBE_UNUSED static forge_model *test_open_fixture(const char *name) {
    char path[512];
    const char *dir = getenv("FORGE_FIXTURES");
    forge_model *m = NULL;
    forge_error e;
    snprintf(path, sizeof path, "%s/models/%s", dir ? dir : "../shared/fixtures", name);
    CHECK(forge_model_open(path, NULL, &m, &e) == FORGE_OK, "open %s: %s", path, e.message);
    return m;
}

/* forge_context_sample against forge_sampler_sample on the same logits: two samplers made from d,
   one fed through each, over `steps` steps from the prompt (each step evaluates the token drawn).
   Returns the steps whose tokens agreed (steps when all did). */
TEST__MAYBE_UNUSED static int test_sample_walk(forge_context *ctx, uint32_t n_vocab, const int32_t *prompt, uint32_t n_prompt,
                                               const forge_sampler_desc *d, int steps) {
    forge_sampler *a = NULL, *b = NULL;
    forge_error e;
    uint32_t rows = 0, i;
    int step, same = 0;
    if (!CHECK(forge_sampler_create(d, n_vocab, &a, &e) == FORGE_OK && forge_sampler_create(d, n_vocab, &b, &e) == FORGE_OK, "samplers: %s",
               e.message))
        goto out;
    forge_context_reset(ctx);
    if (!CHECK(forge_eval(ctx, prompt, n_prompt, &e) == FORGE_OK, "eval: %s", e.message)) goto out;
    for (i = 0; i < n_prompt; i++) forge_sampler_accept(a, prompt[i]), forge_sampler_accept(b, prompt[i]);
    /* the calls' results are checked once, at the first failure: the pass count stays one of properties */
    for (step = 0; step < steps; step++) {
        int32_t ta = -1, tb = -2;
        const float *l;
        if (forge_context_sample(ctx, a, &ta, &e) != FORGE_OK) {
            CHECK(0, "forge_context_sample at step %d: %s", step, e.message);
            break;
        }
        l = forge_context_logits(ctx, &rows);
        if (!l || rows < 1) {
            CHECK(0, "no logits at step %d", step);
            break;
        }
        if (forge_sampler_sample(b, l + (size_t)(rows - 1) * n_vocab, &tb, &e) != FORGE_OK) {
            CHECK(0, "forge_sampler_sample at step %d: %s", step, e.message);
            break;
        }
        if (ta != tb) break;
        same++;
        forge_sampler_accept(a, ta), forge_sampler_accept(b, tb);
        if (forge_context_pos(ctx) + 1 >= forge_context_plan(ctx)->n_ctx) break;
        if (forge_eval(ctx, &ta, 1, &e) != FORGE_OK) {
            CHECK(0, "eval at step %d: %s", step, e.message);
            break;
        }
    }
out:
    forge_sampler_destroy(a);
    forge_sampler_destroy(b);
    return same;
}

static int test_summary(void) {
    printf("%d cases\n", test__state.cases);
    printf("%d passed, %d failed\n", test__state.passed, test__state.failed);
    fflush(stdout);
    return test__state.failed ? 1 : 0;
}

#endif /* FORGE_TEST_H */

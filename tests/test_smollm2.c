/* Greedy generation on the real SmolLM2-135M-Instruct (Q4_1, llama architecture, byte-level BPE
   "smollm" tokenizer) against an independent engine: tests/data/smollm2_greedy.txt holds, for a few
   plain-text prompts, llama.cpp's prompt token ids and its greedy continuation. This test checks
   that forge tokenizes each prompt to the same ids and that its generator (forge_generator_prompt +
   forge_generator_step with the default greedy sampler) produces the same first `agree` tokens.
   llama.cpp quantizes activations to 8 bits inside its quantized products where forge keeps f32, so
   the two paths may part where two logits nearly tie; the data file records how far they are
   required to agree and keeps the reference's ids beyond that.

   The model is a required input (CI fetches it before the tests): FORGE_SMOLLM2 names the file, else
   $HOME/.cache/forge/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf. A missing model is a failure.
   FORGE_SMOLLM2_DATA overrides the data file (default tests/data/smollm2_greedy.txt, from the
   repository root). Also checked: the context allocates exactly the plan less the mapped weights,
   and no step allocates. The generation speed is printed, not asserted. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#define FORGE_IMPLEMENTATION
#include "../forge.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "greedy_data.h"

static void run_case(forge_generator *gen, const forge_tokenizer *tok, const greedy_case *c, double *seconds,
                     long *tokens, test_counting *alloc_count) {
    int32_t ids[GREEDY_MAX_IDS], got[GREEDY_MAX_IDS];
    size_t n_ids = 0, i;
    long n_got = 0, calls_before;
    int done = 0, tokenized_ok;
    forge_error e;
    forge_step step;
    double t0 = 0;

    /* the tokenizer */
    if (!CHECK(forge_tokenize(tok, c->prompt, c->prompt_len, 0, 0, ids, GREEDY_MAX_IDS, &n_ids, &e) == FORGE_OK,
               "line %d: tokenize: %s", c->line, e.message))
        return;
    for (i = 0; i < n_ids && i < c->n_prompt_ids; i++)
        if (ids[i] != c->prompt_ids[i]) break;
    tokenized_ok = i == n_ids && i == c->n_prompt_ids;
    if (!CHECK(tokenized_ok, "line %d: forge tokenizes the prompt to %lu ids, the reference to %lu (first difference at %lu)",
               c->line, (unsigned long)n_ids, (unsigned long)c->n_prompt_ids, (unsigned long)i))
        return;

    /* the generator: prompt, then one token per step */
    forge_generator_reset(gen);
    if (!CHECK(forge_generator_prompt(gen, c->prompt, c->prompt_len, 0, &e) == FORGE_OK, "line %d: prompt: %s", c->line,
               e.message))
        return;
    calls_before = alloc_count->calls;
    while (n_got < c->agree && !done) {
        if (!CHECK(forge_generator_step(gen, &step, &e) == FORGE_OK, "line %d: step: %s", c->line, e.message)) return;
        if (step.token < 0) {
            if (step.prompt_left == 0) t0 = now_seconds(); /* the prompt is read: time the generation */
            continue;
        }
        got[n_got++] = step.token;
        done = step.done;
    }
    *seconds += now_seconds() - t0;
    *tokens += n_got;
    CHECK(alloc_count->calls == calls_before, "line %d: the steps allocated %ld times", c->line,
          alloc_count->calls - calls_before);
    CHECK(n_got == c->agree, "line %d: generation ended after %ld tokens, %ld wanted", c->line, n_got, c->agree);
    for (i = 0; i < (size_t)n_got; i++)
        if (got[i] != c->greedy_ids[i]) break;
    if (CHECK(i == (size_t)n_got, "line %d: greedy token %lu is %d, llama.cpp's is %d", c->line, (unsigned long)i,
              i < (size_t)n_got ? got[i] : -1, i < (size_t)n_got ? c->greedy_ids[i] : -1))
        printf("ok %.40s...: %ld greedy tokens agree\n", c->prompt, n_got);
}

int main(void) {
    static greedy_case cases[GREEDY_MAX_CASES];
    const char *model_path = getenv("FORGE_SMOLLM2");
    const char *data_path = getenv("FORGE_SMOLLM2_DATA");
    char default_path[1024];
    forge_model *model = NULL;
    forge_tokenizer *tok = NULL;
    forge_context *ctx = NULL;
    forge_generator *gen = NULL;
    forge_context_desc desc;
    forge_error e;
    test_counting alloc_count;
    double seconds = 0;
    long tokens = 0;
    int n_cases, i;

    test_counting_init(&alloc_count, -1);

    if (!model_path || !*model_path) {
        const char *home = getenv("HOME");
        snprintf(default_path, sizeof default_path, "%s/.cache/forge/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                 home ? home : ".");
        model_path = default_path;
    }
    if (!data_path || !*data_path) data_path = "tests/data/smollm2_greedy.txt";

    TEST_CASE("data file");
    n_cases = read_cases(data_path, cases, GREEDY_MAX_CASES);
    CHECK(n_cases >= 3, "%s: %d prompts, at least 3 wanted", data_path, n_cases);
    for (i = 0; i < n_cases; i++)
        CHECK(cases[i].n_prompt_ids > 0 && cases[i].agree >= 32 && (size_t)cases[i].agree <= cases[i].n_greedy_ids,
              "line %d: agree %ld with %lu greedy ids (32 to all of them wanted)", cases[i].line, cases[i].agree,
              (unsigned long)cases[i].n_greedy_ids);

    TEST_CASE("model");
    if (!CHECK(forge_model_open(model_path, NULL, &model, &e) == FORGE_OK,
               "the SmolLM2 model is required (fetch it with tools/fetch_model.sh smollm2, or set FORGE_SMOLLM2): "
               "%s: %s", model_path, e.message))
        return test_summary();
    if (!CHECK(forge_tokenizer_create(forge_model_gguf(model), NULL, &tok, &e) == FORGE_OK, "tokenizer: %s", e.message))
        goto out;
    CHECK(strcmp(forge_tokenizer_pre_name(tok), "smollm") == 0, "pre-tokenizer %s", forge_tokenizer_pre_name(tok));
    CHECK(forge_tokenizer_add_bos(tok) == 0, "SmolLM2 adds no BOS");

    TEST_CASE("context inside the plan");
    memset(&desc, 0, sizeof desc);
    desc.n_ctx = 256;
    desc.allocator.alloc = test_counting_alloc;
    desc.allocator.free = test_counting_free;
    desc.allocator.user_data = &alloc_count;
    if (!CHECK(forge_context_create(model, &desc, &ctx, &e) == FORGE_OK, "context: %s", e.message)) goto out;
    CHECK(forge_context_plan(ctx)->n_ctx == 256, "n_ctx %u", forge_context_plan(ctx)->n_ctx);
    CHECK(forge_context_arena_bytes(ctx) == forge_context_plan(ctx)->total_bytes - forge_context_plan(ctx)->weights_bytes,
          "arena %llu bytes, plan total %llu less weights %llu", (unsigned long long)forge_context_arena_bytes(ctx),
          (unsigned long long)forge_context_plan(ctx)->total_bytes,
          (unsigned long long)forge_context_plan(ctx)->weights_bytes);
    if (!CHECK(forge_generator_create(ctx, tok, NULL, &gen, &e) == FORGE_OK, "generator: %s", e.message)) goto out;

    TEST_CASE("greedy generation against llama.cpp");
    for (i = 0; i < n_cases; i++) run_case(gen, tok, &cases[i], &seconds, &tokens, &alloc_count);
    CHECK(forge_context_arena_bytes(ctx) == forge_context_plan(ctx)->total_bytes - forge_context_plan(ctx)->weights_bytes,
          "the arena changed size while generating");
    if (seconds > 0)
        printf("generation speed: %ld tokens in %.2f s, %.1f tokens/s (n_ctx 256, f16 KV cache, the default thread count)\n", tokens,
               seconds, (double)tokens / seconds);

out:
    forge_generator_destroy(gen);
    forge_context_destroy(ctx);
    CHECK(alloc_count.live == 0, "%ld blocks of the context's allocator still live", alloc_count.live);
    forge_tokenizer_destroy(tok);
    forge_model_close(model);
    return test_summary();
}

/* Greedy generation of any real model against an independent engine's reference, one data file per
   model (tests/data/<model>_greedy.txt, the format of tests/data/smollm2_greedy.txt: '#' comments and,
   per prompt, the lines prompt:, prompt_ids:, greedy_ids: and agree:).

   usage: test_greedy MODEL.gguf DATA.txt [MIN_AGREE]

   For each prompt, forge on the CPU evaluates the reference's prompt_ids as they are (so that the
   model is checked apart from the tokenizer), then picks tokens with the greedy sampler, one forge_eval
   per token, for as many tokens as the reference holds, and counts how many leading tokens agree. A
   prompt passes when at least MIN_AGREE tokens agree (default 32; the file's agree: line is read but
   not used) or when the whole reference agrees and ends in an end-of-generation token. The
   reference's engine quantizes activations inside its quantized products where forge keeps f32, so
   the two may part where the top two logits nearly tie: at the first difference both logits are
   printed. forge's CPU products round activations to 8 bits as well (in their own order of sums), so
   there a prompt also passes when it parts where forge's own top two logits nearly tie (2% of the
   row's range, the GPU tests' rule); FORGE_CPU_NO_Q8=1 runs the f32 products, held to MIN_AGREE.
   Separately checked: forge's tokenizer gives the reference's prompt_ids. A model forge cannot run
   fails at the first step that refuses it, with forge's message. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#define FORGE_IMPLEMENTATION
#include "../forge.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "greedy_data.h"

/* The shown part of a prompt: its first 40 bytes, control characters as spaces. */
static const char *short_prompt(const greedy_case *c, char *out, size_t capacity) {
    size_t i, n = c->prompt_len < capacity - 1 ? c->prompt_len : capacity - 1;
    if (n > 40) n = 40;
    for (i = 0; i < n; i++) out[i] = (unsigned char)c->prompt[i] < 32 ? ' ' : c->prompt[i];
    out[n] = 0;
    return out;
}

typedef struct greedy_totals {
    double seconds;   /* generation steps only */
    long tokens;
    double prompt_seconds;
    long prompt_tokens;
} greedy_totals;

static void run_case(forge_context *ctx, const forge_tokenizer *tok, forge_sampler *sampler, const greedy_case *c,
                     long min_agree, int near_tie_ok, greedy_totals *totals) {
    static int32_t ids[GREEDY_MAX_IDS];
    size_t n_ids = 0, i;
    long n_ref = (long)c->n_greedy_ids, n_same = 0, required;
    int32_t token = -1, ref_eog;
    uint32_t n_vocab = forge_tokenizer_n_vocab(tok), n_rows = 0;
    const float *logits = NULL;
    char shown[48];
    forge_error e;
    double t0;

    /* the tokenizer, on its own */
    if (CHECK(forge_tokenize(tok, c->prompt, c->prompt_len, forge_tokenizer_add_bos(tok), 0, ids, GREEDY_MAX_IDS,
                             &n_ids, &e) == FORGE_OK,
              "line %d: tokenize: %s", c->line, e.message)) {
        for (i = 0; i < n_ids && i < c->n_prompt_ids; i++)
            if (ids[i] != c->prompt_ids[i]) break;
        CHECK(i == n_ids && i == c->n_prompt_ids,
              "line %d: forge tokenizes the prompt to %lu ids, the reference to %lu (first difference at %lu: %d, %d)",
              c->line, (unsigned long)n_ids, (unsigned long)c->n_prompt_ids, (unsigned long)i,
              i < n_ids ? ids[i] : -1, i < c->n_prompt_ids ? c->prompt_ids[i] : -1);
    }

    /* the model: the reference's prompt ids, then greedy tokens while they agree */
    forge_context_reset(ctx);
    forge_sampler_reset(sampler);
    t0 = now_seconds();
    if (!CHECK(forge_eval(ctx, c->prompt_ids, (uint32_t)c->n_prompt_ids, &e) == FORGE_OK, "line %d: prompt: %s",
               c->line, e.message))
        return;
    totals->prompt_seconds += now_seconds() - t0;
    totals->prompt_tokens += (long)c->n_prompt_ids;
    t0 = now_seconds();
    while (n_same < n_ref) {
        logits = forge_context_logits(ctx, &n_rows);
        if (!CHECK(logits != NULL && n_rows >= 1, "line %d: no logits after token %ld", c->line, n_same)) return;
        if (!CHECK(forge_sampler_sample(sampler, logits + (size_t)(n_rows - 1) * n_vocab, &token, &e) == FORGE_OK,
                   "line %d: sample: %s", c->line, e.message))
            return;
        if (token != c->greedy_ids[n_same]) break;
        n_same++;
        if (n_same == n_ref || forge_tokenizer_is_eog(tok, token)) break;
        if (!CHECK(forge_eval(ctx, &token, 1, &e) == FORGE_OK, "line %d: step %ld: %s", c->line, n_same, e.message))
            return;
    }
    totals->seconds += now_seconds() - t0;
    totals->tokens += n_same;

    ref_eog = forge_tokenizer_is_eog(tok, c->greedy_ids[n_ref - 1]);
    required = min_agree < n_ref ? min_agree : n_ref;
    if (n_same < n_ref) {
        const float *row = logits + (size_t)(n_rows - 1) * n_vocab;
        int32_t ref = c->greedy_ids[n_same];
        float ref_logit = ref >= 0 && (uint32_t)ref < n_vocab ? row[ref] : 0.0f, lo = row[0], hi = row[0];
        uint32_t v;
        for (v = 1; v < n_vocab; v++) lo = row[v] < lo ? row[v] : lo, hi = row[v] > hi ? row[v] : hi;
        printf("line %d \"%s\": %ld of %ld greedy tokens agree; at %ld forge takes %d (logit %.4f), the reference %d "
               "(forge's logit %.4f, %.4f below; row range %.2f)\n",
               c->line, short_prompt(c, shown, sizeof shown), n_same, n_ref, n_same, token, (double)row[token], ref,
               (double)ref_logit, (double)(row[token] - ref_logit), (double)(hi - lo));
        if (near_tie_ok && n_same < required && row[token] - ref_logit <= 0.02f * (hi - lo)) {
            printf("ok line %d: parted at a near-tie of forge's top two (8-bit products)\n", c->line);
            return;
        }
    } else {
        printf("line %d \"%s\": all %ld greedy tokens agree%s\n", c->line, short_prompt(c, shown, sizeof shown), n_ref,
               ref_eog ? " (the last ends the generation)" : "");
    }
    if (CHECK(n_same >= required || (n_same == n_ref && ref_eog),
              "line %d: %ld leading greedy tokens agree with the reference, %ld wanted", c->line, n_same, required))
        printf("ok line %d: %ld >= %ld greedy tokens agree\n", c->line, n_same, required);
    fflush(stdout);
}

int main(int argc, char **argv) {
    static greedy_case cases[GREEDY_MAX_CASES];
    forge_model *model = NULL;
    forge_tokenizer *tok = NULL;
    forge_context *ctx = NULL;
    forge_sampler *sampler = NULL;
    forge_context_desc desc;
    forge_error e;
    greedy_totals totals = {0, 0, 0, 0};
    long min_agree = 32;
    int n_cases, i;
    double t_start = now_seconds();

    if (argc < 3 || argc > 4 || (argc == 4 && (min_agree = strtol(argv[3], NULL, 10)) < 1)) {
        fprintf(stderr, "usage: test_greedy MODEL.gguf DATA.txt [MIN_AGREE (default 32, at least 1)]\n");
        CHECK(0, "bad arguments");
        return test_summary();
    }

    TEST_CASE("data file");
    n_cases = read_cases(argv[2], cases, GREEDY_MAX_CASES);
    if (!CHECK(n_cases >= 1, "%s: no prompts", argv[2])) return test_summary();

    TEST_CASE("model");
    if (!CHECK(forge_model_open(argv[1], NULL, &model, &e) == FORGE_OK, "%s: %s", argv[1], e.message))
        return test_summary();
    if (!CHECK(forge_tokenizer_create(forge_model_gguf(model), NULL, &tok, &e) == FORGE_OK, "tokenizer: %s", e.message))
        goto out;
    memset(&desc, 0, sizeof desc);
    /* FORGE_TEST_BACKEND=gpu runs the same check on the GPU backend (device runs) */
    desc.backend = getenv("FORGE_TEST_BACKEND") && strcmp(getenv("FORGE_TEST_BACKEND"), "gpu") == 0 ? FORGE_BACKEND_GPU
                                                                                                 : FORGE_BACKEND_CPU;
    desc.n_ctx = 512;
    desc.n_batch = 512;
    desc.n_threads = forge_cpu_count(); /* a test has the machine to itself: every processor */
    desc.cpu_no_q8 = getenv("FORGE_CPU_NO_Q8") && strcmp(getenv("FORGE_CPU_NO_Q8"), "") != 0 && strcmp(getenv("FORGE_CPU_NO_Q8"), "0") != 0;
    if (!CHECK(forge_context_create(model, &desc, &ctx, &e) == FORGE_OK, "context: %s", e.message)) goto out;
    if (!CHECK(forge_sampler_create(NULL, forge_tokenizer_n_vocab(tok), &sampler, &e) == FORGE_OK, "sampler: %s",
               e.message))
        goto out;
    for (i = 0; i < n_cases; i++)
        if (!CHECK(cases[i].n_prompt_ids + cases[i].n_greedy_ids <= 512, "line %d: %lu ids do not fit n_ctx 512",
                   cases[i].line, (unsigned long)(cases[i].n_prompt_ids + cases[i].n_greedy_ids)))
            goto out;

    TEST_CASE("greedy generation against the reference");
    for (i = 0; i < n_cases; i++)
        run_case(ctx, tok, sampler, &cases[i], min_agree, desc.backend == FORGE_BACKEND_CPU && !desc.cpu_no_q8, &totals);
    printf("prompts: %ld tokens in %.2f s; generation: %ld tokens in %.2f s (%.1f tokens/s); "
           "whole run %.2f s (%s%s, n_ctx 512, f16 KV cache)\n",
           totals.prompt_tokens, totals.prompt_seconds, totals.tokens, totals.seconds,
           totals.seconds > 0 ? (double)totals.tokens / totals.seconds : 0.0, now_seconds() - t_start,
           desc.backend == FORGE_BACKEND_GPU ? "GPU" : "CPU",
           desc.backend == FORGE_BACKEND_GPU ? "" : desc.cpu_no_q8 ? ", f32 products" : ", 8-bit products");

out:
    forge_sampler_destroy(sampler);
    forge_context_destroy(ctx);
    forge_tokenizer_destroy(tok);
    forge_model_close(model);
    return test_summary();
}

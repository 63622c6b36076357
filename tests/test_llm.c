/* test_llm.c - the short path (forge_llm) and what a host program may rely on.

   On SmolLM2-135M-Instruct (FORGE_SMOLLM2, or the cache tools/fetch_model.sh fills):
   - refusals: a NULL path, a missing file, a file that is not GGUF, a plan over the budget, an
     allocator with one callback of two; each leaves *out NULL and no block of the allocator live
   - a streamed chat turn equal, byte for byte, to the layered path (model, tokenizer, context,
     generator, forge_chat_render) with the same greedy settings; the same again after a reset; a
     second turn that continues the conversation; max_tokens, the cancel flag, plain continuation
   - sampling chosen by a field (temperature), repeatable for a seed
   Without the model (the rest needs none):
   - the environment is read only by forge_context_desc_apply_env: FORGE_MEM_FRACTION and the GPU
     switches set in the environment change nothing until it is called
   - the default thread count is the documented policy */
#define _POSIX_C_SOURCE 200809L /* setenv, unsetenv */
#define FORGE_IMPLEMENTATION
#include "../forge.h"
#include "test.h"

#include <string.h>

typedef struct collected {
    char text[8192];
    size_t len;
    int pieces;
    int cancel_after; /* sets *flag once this many pieces have come; 0: never */
    int *flag;
} collected;

static void collect(void *user_data, const char *text, size_t len) {
    collected *c = (collected *)user_data;
    size_t n = len < sizeof c->text - 1 - c->len ? len : sizeof c->text - 1 - c->len;
    memcpy(c->text + c->len, text, n);
    c->len += n;
    c->text[c->len] = 0;
    c->pieces++;
    if (c->cancel_after && c->pieces >= c->cancel_after && c->flag) *c->flag = 1;
}

static void collect_reset(collected *c) { memset(c, 0, sizeof *c); }

/* The same turn through the layers: what forge_llm_chat must produce. */
static int layered_reply(const char *path, const char *message, uint32_t n_ctx, uint32_t max_tokens, collected *out) {
    forge_model *model = NULL;
    forge_tokenizer *tok = NULL;
    forge_context *ctx = NULL;
    forge_generator *gen = NULL;
    forge_context_desc desc;
    forge_sampler_desc greedy;
    forge_chat_message m;
    forge_error e;
    char prompt[1024];
    size_t len = 0;
    uint32_t n = 0;
    int ok = 0;
    memset(&desc, 0, sizeof desc);
    memset(&greedy, 0, sizeof greedy);
    desc.n_ctx = n_ctx;
    desc.backend = FORGE_BACKEND_CPU;
    m.role = "user";
    m.content = message;
    if (forge_model_open(path, NULL, &model, &e) || forge_tokenizer_create(forge_model_gguf(model), NULL, &tok, &e) ||
        forge_context_create(model, &desc, &ctx, &e) || forge_generator_create(ctx, tok, &greedy, &gen, &e) ||
        forge_chat_render(forge_chat_detect(forge_model_gguf(model)), &m, 1, 1, prompt, sizeof prompt, &len, &e) ||
        forge_generator_prompt(gen, prompt, len, 1, &e)) {
        printf("  layered path: %s\n", e.message);
        goto done;
    }
    while (n < max_tokens) {
        forge_step step;
        if (forge_generator_step(gen, &step, &e)) goto done;
        if (step.token < 0) continue;
        n++;
        if (step.text_len) collect(out, step.text, step.text_len);
        if (step.done) break;
    }
    ok = 1;
done:
    forge_generator_destroy(gen);
    forge_context_destroy(ctx);
    forge_tokenizer_destroy(tok);
    forge_model_close(model);
    return ok;
}

static void test_environment(void) {
    forge_context_desc d;
    forge_error e;
    TEST_CASE("no side effects: the environment is read only when asked");
    setenv("FORGE_MEM_FRACTION", "0.25", 1);
    setenv("FORGE_NO_GRAPH", "1", 1);
    setenv("FORGE_NO_Q8", "1", 1);
    setenv("FORGE_NORM_FUSION", "0", 1);
    setenv("FORGE_NO_PDL", "yes", 1);
    setenv("FORGE_NO_STAGE", "0", 1); /* "0" is off */
    memset(&d, 0, sizeof d);
    CHECK(forge_context_desc_apply_env(&d, &e) == FORGE_OK, "apply_env: %s", e.message);
    CHECK(d.mem_fraction == 0.25, "FORGE_MEM_FRACTION -> mem_fraction %g", d.mem_fraction);
    CHECK(d.gpu_no_graph == 1 && d.gpu_no_q8 == 1 && d.gpu_no_pdl == 1 && d.gpu_no_stage == 0,
          "switches: graph %d q8 %d pdl %d stage %d", d.gpu_no_graph, d.gpu_no_q8, d.gpu_no_pdl, d.gpu_no_stage);
    CHECK(d.gpu_norm_fusion == -1, "FORGE_NORM_FUSION=0 -> gpu_norm_fusion %d", d.gpu_norm_fusion);
    memset(&d, 0, sizeof d);
    d.mem_fraction = 0.5;
    d.gpu_norm_fusion = 1;
    CHECK(forge_context_desc_apply_env(&d, &e) == FORGE_OK && d.mem_fraction == 0.5 && d.gpu_norm_fusion == 1,
          "fields the program set are kept: %g %d", d.mem_fraction, d.gpu_norm_fusion);
    setenv("FORGE_MEM_FRACTION", "1.5", 1);
    memset(&d, 0, sizeof d);
    CHECK(forge_context_desc_apply_env(&d, &e) == FORGE_ERR_ARGUMENT && strstr(e.message, "FORGE_MEM_FRACTION") &&
              d.mem_fraction == 0.0 && d.gpu_no_graph == 0,
          "an unreadable value is refused by name, desc unchanged: %s", e.message);
    setenv("FORGE_MEM_FRACTION", "abc", 1);
    CHECK(forge_context_desc_apply_env(&d, &e) == FORGE_ERR_ARGUMENT, "FORGE_MEM_FRACTION=abc refused");
    setenv("FORGE_NORM_FUSION", "2", 1);
    unsetenv("FORGE_MEM_FRACTION");
    CHECK(forge_context_desc_apply_env(&d, &e) == FORGE_ERR_ARGUMENT && strstr(e.message, "FORGE_NORM_FUSION"),
          "FORGE_NORM_FUSION=2 refused: %s", e.message);
    CHECK(forge_context_desc_apply_env(NULL, &e) == FORGE_ERR_ARGUMENT, "NULL desc");
    unsetenv("FORGE_NORM_FUSION");
    unsetenv("FORGE_NO_GRAPH");
    unsetenv("FORGE_NO_Q8");
    unsetenv("FORGE_NO_PDL");
    unsetenv("FORGE_NO_STAGE");

    TEST_CASE("threads: the default policy");
    CHECK(forge_cpu_default_threads() == (forge_cpu_count() + 1) / 2 && forge_cpu_default_threads() >= 1 &&
              forge_cpu_default_threads() <= forge_cpu_count(),
          "default %u of %u processors", forge_cpu_default_threads(), forge_cpu_count());
}

static void test_allocator_halves(const char *path) {
    forge_allocator half;
    forge_llm_desc d;
    forge_llm *llm = (forge_llm *)&d; /* not NULL, so the test sees it cleared */
    forge_model_desc md;
    forge_model *model = (forge_model *)&d;
    forge_sampler_desc sd;
    forge_sampler *sampler = (forge_sampler *)&d;
    forge_gguf *gguf = (forge_gguf *)&d;
    forge_error e;
    static const unsigned char empty[1] = {0};
    int which;
    TEST_CASE("allocator: one callback of two is refused at creation");
    for (which = 0; which < 2; which++) {
        memset(&half, 0, sizeof half);
        if (which == 0) half.alloc = test_counting_alloc; /* alloc without free */
        else half.free = test_counting_free;              /* free without alloc */
        memset(&d, 0, sizeof d);
        d.context.allocator = half;
        CHECK(forge_llm_open(path, &d, &llm, &e) == FORGE_ERR_ARGUMENT && !llm && strstr(e.message, "allocator"),
              "forge_llm_open (%s only): %s", which ? "free" : "alloc", e.message);
        memset(&md, 0, sizeof md);
        md.allocator = half;
        CHECK(forge_model_open(path, &md, &model, &e) == FORGE_ERR_ARGUMENT && !model, "forge_model_open: %s", e.message);
        CHECK(forge_model_from_memory(empty, 1, &md, &model, &e) == FORGE_ERR_ARGUMENT && !model,
              "forge_model_from_memory: %s", e.message);
        memset(&sd, 0, sizeof sd);
        sd.allocator = half;
        CHECK(forge_sampler_create(&sd, 100, &sampler, &e) == FORGE_ERR_ARGUMENT && !sampler, "forge_sampler_create: %s",
              e.message);
        CHECK(forge_gguf_parse(empty, 1, &half, &gguf, &e) == FORGE_ERR_ARGUMENT && !gguf, "forge_gguf_parse: %s", e.message);
        {
            forge_file file;
            CHECK(forge_file_open(path, &half, &file, &e) == FORGE_ERR_ARGUMENT, "forge_file_open: %s", e.message);
        }
        if (forge_model_open(path, NULL, &model, &e) == FORGE_OK) {
            forge_context_desc cd;
            forge_context *ctx = (forge_context *)&d;
            forge_tokenizer *tok = (forge_tokenizer *)&d;
            forge_verdict verdict;
            memset(&cd, 0, sizeof cd);
            cd.allocator = half;
            CHECK(forge_context_create(model, &cd, &ctx, &e) == FORGE_ERR_ARGUMENT && !ctx, "forge_context_create: %s", e.message);
            CHECK(forge_plan_check(model, &cd, &verdict, &e) == FORGE_ERR_ARGUMENT, "forge_plan_check: %s", e.message);
            CHECK(forge_tokenizer_create(forge_model_gguf(model), &half, &tok, &e) == FORGE_ERR_ARGUMENT && !tok,
                  "forge_tokenizer_create: %s", e.message);
            forge_model_close(model);
            model = NULL;
        }
    }
}

int main(void) {
    const char *path = getenv("FORGE_SMOLLM2");
    char default_path[1024];
    forge_llm_desc d;
    forge_llm *llm = NULL;
    forge_error e;
    forge_memory_reading small;
    test_counting count;
    collected got, want;
    const forge_reply *reply;
    int cancel = 0;
    uint32_t pos;

    test_environment();

    if (!path || !*path) {
        const char *home = getenv("HOME");
        snprintf(default_path, sizeof default_path, "%s/.cache/forge/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                 home ? home : ".");
        path = default_path;
    }
    test_allocator_halves(path);

    TEST_CASE("refusals leave nothing behind");
    test_counting_init(&count, -1);
    memset(&d, 0, sizeof d);
    d.context.allocator.alloc = test_counting_alloc;
    d.context.allocator.free = test_counting_free;
    d.context.allocator.user_data = &count;
    llm = (forge_llm *)&d;
    CHECK(forge_llm_open(NULL, &d, &llm, &e) == FORGE_ERR_ARGUMENT && !llm, "NULL path: %s", e.message);
    CHECK(forge_llm_open(path, &d, NULL, &e) == FORGE_ERR_ARGUMENT, "NULL out: %s", e.message);
    CHECK(forge_llm_open("/nonexistent/model.gguf", &d, &llm, &e) == FORGE_ERR_IO && !llm && strstr(e.message, "nonexistent"),
          "missing file: %s", e.message);
    CHECK(forge_llm_open("Makefile", &d, &llm, &e) == FORGE_ERR_MAGIC && !llm, "not a GGUF file: %s", e.message);
    CHECK(forge_llm_open_memory(NULL, 0, &d, &llm, &e) == FORGE_ERR_ARGUMENT && !llm, "NULL bytes: %s", e.message);
    CHECK(count.live == 0, "%ld blocks live after the refusals", count.live);
    CHECK(forge_llm_chat(NULL, "hi", NULL, NULL, &e) == FORGE_ERR_ARGUMENT, "chat on NULL");
    CHECK(forge_llm_generate(NULL, "hi", NULL, NULL, &e) == FORGE_ERR_ARGUMENT, "generate on NULL");
    forge_llm_close(NULL);
    forge_llm_reset(NULL);
    CHECK(forge_llm_last_reply(NULL) == NULL && forge_llm_context(NULL) == NULL, "accessors on NULL");

    TEST_CASE("budget refusal");
    memset(&small, 0, sizeof small);
    snprintf(small.device, sizeof small.device, "test: 8 MiB free");
    small.total_bytes = 64u << 20;
    small.free_bytes = 8u << 20;
    d.context.memory = &small;
    if (!CHECK(forge_llm_open(path, &d, &llm, &e) != FORGE_ERR_IO,
               "the SmolLM2 model is required (fetch it with tools/fetch_model.sh smollm2, or set FORGE_SMOLLM2): %s: %s",
               path, e.message))
        return test_summary();
    CHECK(forge_llm_open(path, &d, &llm, &e) == FORGE_ERR_BUDGET && !llm && strstr(e.message, "budget"),
          "8 MiB free: %s", e.message);
    CHECK(count.live == 0, "%ld blocks live after the budget refusal", count.live);
    d.context.memory = NULL;

    TEST_CASE("threads: n_threads 0 plans and runs forge_cpu_default_threads()");
    {
        forge_model *m = NULL;
        forge_context_desc cd;
        forge_plan p0, pd, pmore;
        memset(&cd, 0, sizeof cd);
        cd.backend = FORGE_BACKEND_CPU;
        cd.n_ctx = 256;
        if (CHECK(forge_model_open(path, NULL, &m, &e) == FORGE_OK, "open: %s", e.message)) {
            CHECK(forge_plan_compute(m, &cd, &p0, &e) == FORGE_OK, "plan: %s", e.message);
            cd.n_threads = forge_cpu_default_threads();
            CHECK(forge_plan_compute(m, &cd, &pd, &e) == FORGE_OK, "plan: %s", e.message);
            cd.n_threads = forge_cpu_default_threads() + 1;
            CHECK(forge_plan_compute(m, &cd, &pmore, &e) == FORGE_OK, "plan: %s", e.message);
            CHECK(p0.reserve_bytes == pd.reserve_bytes && pmore.reserve_bytes > pd.reserve_bytes,
                  "reserve with 0 threads %llu, with the default %llu, with one more %llu", (unsigned long long)p0.reserve_bytes,
                  (unsigned long long)pd.reserve_bytes, (unsigned long long)pmore.reserve_bytes);
            forge_model_close(m);
        }
    }

    TEST_CASE("the environment changes nothing unless applied");
    setenv("FORGE_MEM_FRACTION", "0.000001", 1);
    d.context.n_ctx = 512;
    d.context.backend = FORGE_BACKEND_CPU;
    d.max_tokens = 24;
    CHECK(forge_llm_open(path, &d, &llm, &e) == FORGE_OK, "FORGE_MEM_FRACTION=0.000001 in the environment: %s", e.message);
    forge_llm_close(llm);
    llm = NULL;
    {
        forge_llm_desc applied = d;
        CHECK(forge_context_desc_apply_env(&applied.context, &e) == FORGE_OK, "apply: %s", e.message);
        CHECK(forge_llm_open(path, &applied, &llm, &e) == FORGE_ERR_BUDGET && !llm, "applied, it refuses: %s", e.message);
    }
    unsetenv("FORGE_MEM_FRACTION");
    CHECK(count.live == 0, "%ld blocks live", count.live);

    TEST_CASE("a streamed chat turn equals the layered path");
    if (!CHECK(forge_llm_open(path, &d, &llm, &e) == FORGE_OK, "open: %s", e.message)) return test_summary();
    CHECK(forge_llm_chat_format(llm) == FORGE_CHAT_CHATML, "format %s", forge_chat_format_name(forge_llm_chat_format(llm)));
    collect_reset(&got);
    collect_reset(&want);
    CHECK(forge_llm_chat(llm, "What is the capital of France?", collect, &got, &e) == FORGE_OK, "chat: %s", e.message);
    reply = forge_llm_last_reply(llm);
    CHECK(reply->reply_tokens > 0 && reply->reply_tokens <= 24 && reply->prompt_tokens > 5 &&
              (reply->stop == FORGE_STOP_END_OF_TURN || reply->stop == FORGE_STOP_MAX_TOKENS),
          "%u prompt tokens, %u reply tokens, stop %d", reply->prompt_tokens, reply->reply_tokens, (int)reply->stop);
    CHECK(got.len > 0 && got.pieces > 1, "%d pieces, %lu bytes", got.pieces, (unsigned long)got.len);
    CHECK(layered_reply(path, "What is the capital of France?", 512, 24, &want), "the layered path ran");
    CHECK(got.len == want.len && memcmp(got.text, want.text, got.len) == 0, "short path '%s' against layers '%s'", got.text,
          want.text);
    printf("  reply: %s\n", got.text);
    {
        long calls = count.calls;
        collect_reset(&got);
        forge_llm_reset(llm);
        CHECK(forge_llm_context(llm) && forge_context_pos(forge_llm_context(llm)) == 0, "reset empties the context");
        CHECK(forge_llm_chat(llm, "What is the capital of France?", collect, &got, &e) == FORGE_OK, "chat: %s", e.message);
        CHECK(got.len == want.len && memcmp(got.text, want.text, got.len) == 0, "greedy again after a reset: '%s'", got.text);
        /* the turn's text, the prompt queue and the tokenizer's two passes over it; nothing per token */
        CHECK(count.calls - calls <= 4, "a turn made %ld allocations", count.calls - calls);
    }

    TEST_CASE("a second turn continues the conversation");
    pos = forge_context_pos(forge_llm_context(llm));
    collect_reset(&got);
    CHECK(forge_llm_chat(llm, "And of Italy?", collect, &got, &e) == FORGE_OK, "chat: %s", e.message);
    reply = forge_llm_last_reply(llm);
    CHECK(forge_context_pos(forge_llm_context(llm)) > pos + 5 && reply->reply_tokens > 0 && got.len > 0,
          "position %u -> %u, %u tokens", pos, forge_context_pos(forge_llm_context(llm)), reply->reply_tokens);
    printf("  second turn: %s\n", got.text);

    TEST_CASE("cancel flag");
    forge_llm_close(llm);
    llm = NULL;
    d.cancel = &cancel;
    d.max_tokens = 0;
    if (!CHECK(forge_llm_open(path, &d, &llm, &e) == FORGE_OK, "open: %s", e.message)) return test_summary();
    collect_reset(&got);
    got.cancel_after = 3;
    got.flag = &cancel;
    CHECK(forge_llm_chat(llm, "Write a long story about a dragon.", collect, &got, &e) == FORGE_OK, "chat: %s", e.message);
    reply = forge_llm_last_reply(llm);
    CHECK(reply->stop == FORGE_STOP_CANCELLED && got.pieces == 3 && reply->reply_tokens >= 3 && reply->reply_tokens <= 4,
          "stop %d after %d pieces, %u tokens", (int)reply->stop, got.pieces, reply->reply_tokens);
    collect_reset(&got);
    CHECK(forge_llm_chat(llm, "Hello", collect, &got, &e) == FORGE_OK && forge_llm_last_reply(llm)->stop == FORGE_STOP_CANCELLED &&
              forge_llm_last_reply(llm)->reply_tokens == 0,
          "with the flag still set, a turn stops before its first step");
    cancel = 0;
    d.max_tokens = 6;
    forge_llm_close(llm);
    llm = NULL;

    TEST_CASE("plain continuation and max_tokens");
    d.cancel = NULL;
    if (!CHECK(forge_llm_open(path, &d, &llm, &e) == FORGE_OK, "open: %s", e.message)) return test_summary();
    collect_reset(&got);
    CHECK(forge_llm_generate(llm, "The capital of France is", collect, &got, &e) == FORGE_OK, "generate: %s", e.message);
    reply = forge_llm_last_reply(llm);
    CHECK(reply->stop == FORGE_STOP_MAX_TOKENS && reply->reply_tokens == 6, "stop %d, %u tokens", (int)reply->stop,
          reply->reply_tokens);
    pos = forge_context_pos(forge_llm_context(llm));
    CHECK(forge_llm_generate(llm, "", collect, &got, &e) == FORGE_OK && forge_llm_last_reply(llm)->reply_tokens == 6 &&
              forge_context_pos(forge_llm_context(llm)) == pos + 6,
          "an empty text continues: %u -> %u", pos, forge_context_pos(forge_llm_context(llm)));
    printf("  continuation: The capital of France is%s\n", got.text);
    forge_llm_close(llm);
    llm = NULL;

    TEST_CASE("sampled by a field, repeatable for a seed");
    d.sampler.temperature = 0.8f;
    d.sampler.top_k = 40;
    d.sampler.seed = 7;
    d.max_tokens = 16;
    if (!CHECK(forge_llm_open(path, &d, &llm, &e) == FORGE_OK, "open: %s", e.message)) return test_summary();
    collect_reset(&got);
    collect_reset(&want);
    CHECK(forge_llm_chat(llm, "Name a color.", collect, &want, &e) == FORGE_OK, "chat: %s", e.message);
    forge_llm_reset(llm);
    CHECK(forge_llm_chat(llm, "Name a color.", collect, &got, &e) == FORGE_OK, "chat: %s", e.message);
    CHECK(got.len == want.len && memcmp(got.text, want.text, got.len) == 0, "seed 7 twice: '%s' and '%s'", want.text, got.text);
    forge_llm_close(llm);
    CHECK(count.live == 0, "%ld blocks of the allocator live after close", count.live);
    return test_summary();
}

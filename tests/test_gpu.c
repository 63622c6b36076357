/* The GPU backend against the CPU backend, and the memory promises on a real device.

   usage: test_gpu FIXTURES_DIR [BIG_MODEL.gguf [DEPTH_MODEL.gguf]]
   - the recorded decode graph against plain launches (gpu_no_graph): identical greedy tokens
     and logits, after a reset too, with sliding-window rings, soft-caps, MoE, q8_0 caches and
     split attention; forge_context_argmax against the host's argmax; the greedy generator on the
     GPU against the CPU; 10,000 decode steps with free memory and the allocation count unchanged;
     the upload's progress callback; a failing pinned allocation leaves nothing behind;
   - every runnable fixture in FIXTURES_DIR/models: logits of the fixture sequence on the GPU against
     the CPU (normalized error below 1e-2: prompt products run on the tensor cores with f16 activations)
     and, with an f16 cache, against the fixture's float64 reference within its own tolerance; 24 greedy
     tokens identical (with a q8_0 cache they may part only at a near-tie of the CPU's top two); every
     family (Gemma 1/2/3, Phi-3, GLM-4, the MoE families), sliding windows in small batches (ring
     rows), and every capture point of every layer;
   - with BIG_MODEL (a few hundred MiB, e.g. from `forge mkmodel`): device memory taken by context
     creation equals the plan within 2%; one device allocation per context and none while decoding;
     free memory identical after 1000 decode steps; a plan larger than free memory is refused with
     nothing taken; a failing device allocation leaves free memory where it was;
   - forge_context_sample: the host sampler's token on the device path, with the cost of a draw on
     BIG_MODEL's vocabulary;
   - with DEPTH_MODEL: free device memory and the allocation count unchanged at depths 16K and 64K
     ($FORGE_TEST_DEPTH), f16 and q8_0 caches. */
#define _POSIX_C_SOURCE 200809L /* setenv, unsetenv */
#define FORGE_IMPLEMENTATION
#include "../forge.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#ifdef __cplusplus
extern "C" {
#endif
void forge_hip_fail_allocation_after(long k);
void forge_hip_fail_host_allocation_after(long k);
#ifdef __cplusplus
}
#endif

static const int32_t tokens[32] = {1,   300, 301, 512, 777, 1000, 5,   42,  259, 260, 1023, 3,   999, 100, 200, 17,
                                   18,  19,  400, 401, 402, 650,  651, 652, 653, 10,  11,   12,  900, 901, 902, 1020};

static int greedy(forge_context *ctx, int32_t *out, int n, const int32_t *prompt, uint32_t n_prompt, uint32_t n_vocab) {
    int i;
    uint32_t rows, v;
    forge_context_reset(ctx);
    if (forge_eval(ctx, prompt, n_prompt, NULL) != FORGE_OK) return 0;
    for (i = 0; i < n; i++) {
        const float *l = forge_context_logits(ctx, &rows);
        int32_t best = 0;
        l += (size_t)(rows - 1) * n_vocab;
        for (v = 1; v < n_vocab; v++)
            if (l[v] > l[best]) best = (int32_t)v;
        out[i] = best;
        if (forge_eval(ctx, &best, 1, NULL) != FORGE_OK) return 0;
    }
    return 1;
}

/* The fixture's tolerance against its float64 reference, read from index.json (0 when not found). */
static double fixture_tolerance(const char *dir, const char *name) {
    char path[1024], key[256];
    static char text[1 << 20];
    const char *at;
    size_t n;
    FILE *f;
    snprintf(path, sizeof path, "%s/models/index.json", dir);
    f = fopen(path, "rb");
    if (!f) return 0.0;
    n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    snprintf(key, sizeof key, "\"%s\": {", name);
    at = strstr(text, key);
    if (!at || !(at = strstr(at, "\"tolerance_rel_l2_vs_reference\":"))) return 0.0;
    return atof(at + strlen("\"tolerance_rel_l2_vs_reference\":"));
}

/* GPU logits of the fixture sequence against the float64 reference (outside truth): relative L2. */
static double vs_reference(const char *dir, const char *name, const float *logits, uint32_t n_vocab) {
    char path[1024];
    float *ref = (float *)malloc((size_t)32 * n_vocab * sizeof(float));
    double num = 0.0, den = 0.0;
    size_t i, got = 0;
    FILE *f;
    char base[256];
    snprintf(base, sizeof base, "%s", name);
    if (strlen(base) > 5) base[strlen(base) - 5] = '\0'; /* drop ".gguf" */
    snprintf(path, sizeof path, "%s/models/%s.ref64.f32", dir, base);
    f = fopen(path, "rb");
    if (f && ref) got = fread(ref, sizeof(float), (size_t)32 * n_vocab, f);
    if (f) fclose(f);
    if (got != (size_t)32 * n_vocab) {
        free(ref);
        return -1.0;
    }
    for (i = 0; i < got; i++) {
        num += ((double)logits[i] - ref[i]) * ((double)logits[i] - ref[i]);
        den += (double)ref[i] * ref[i];
    }
    free(ref);
    return sqrt(num / den);
}

/* Prompt batches multiply on the tensor cores with activations rounded to f16 (about 3e-4 of an
   output's norm per product, tests/PERF.md), the CPU in f32: through a few layers the logits differ
   by up to a few 1e-3 (llama.cpp's own distance to the float64 reference is 1e-3 to 3e-2). */
#define GPU_VS_CPU_BOUND 1e-2

/* gpu_norm_fusion for the contexts compare_fixture and graph_vs_plain make (0: forge's choice) */
static int test_norm_fusion = 0;

static void compare_fixture(const char *dir, const char *name, forge_kv_type kv, uint32_t batch) {
    char path[1024], label[256];
    forge_model *m = NULL;
    forge_context *cpu = NULL, *gpu = NULL;
    forge_context_desc d;
    forge_error e;
    const float *lc, *lg;
    uint32_t rc = 0, rg = 0, n_vocab;
    double num = 0.0, den = 0.0;
    int32_t tc[24], tg[24];
    size_t i;
    snprintf(path, sizeof path, "%s/models/%s", dir, name);
    snprintf(label, sizeof label, "GPU vs CPU: %s, %s KV, batches of %u", name, forge_kv_type_name(kv), batch ? batch : 512);
    TEST_CASE(label);
    if (!CHECK(forge_model_open(path, NULL, &m, &e) == FORGE_OK, "open: %s", e.message)) return;
    memset(&d, 0, sizeof d);
        d.n_ctx = 64;
    d.all_logits = 1;
    d.kv_type = kv;
    d.n_batch = batch;
    d.gpu_norm_fusion = test_norm_fusion;
    d.cpu_no_q8 = 1; /* the CPU side is the reference: f32 products */
    d.backend = FORGE_BACKEND_CPU;
    CHECK(forge_context_create(m, &d, &cpu, &e) == FORGE_OK, "cpu: %s", e.message);
    d.backend = FORGE_BACKEND_GPU;
    CHECK(forge_context_create(m, &d, &gpu, &e) == FORGE_OK, "gpu: %s", e.message);
    if (cpu && gpu) {
        n_vocab = forge_model_config(m)->n_vocab;
        CHECK(forge_eval(cpu, tokens, 32, &e) == FORGE_OK, "cpu eval: %s", e.message);
        CHECK(forge_eval(gpu, tokens, 32, &e) == FORGE_OK, "gpu eval: %s", e.message);
        lc = forge_context_logits(cpu, &rc);
        lg = forge_context_logits(gpu, &rg);
        if (batch) { /* in small batches only the last batch's rows are kept: compare those */
            uint32_t keep = 32 % batch ? 32 % batch : batch;
            if (CHECK(lc && lg && rc == keep && rg == keep, "rows %u %u", rc, rg))
                for (i = 0; i < (size_t)keep * forge_model_config(m)->n_vocab; i++) {
                    num += ((double)lg[i] - lc[i]) * ((double)lg[i] - lc[i]);
                    den += (double)lc[i] * lc[i];
                }
            CHECK(den > 0 && sqrt(num / den) < GPU_VS_CPU_BOUND, "normalized error %.3g", den > 0 ? sqrt(num / den) : -1.0);
            printf("  %-32s %-5s batch %u normalized error GPU vs CPU %.3g\n", name, forge_kv_type_name(kv), batch,
                   den > 0 ? sqrt(num / den) : -1.0);
        } else if (CHECK(lc && lg && rc == 32 && rg == 32, "rows %u %u", rc, rg)) {
            for (i = 0; i < (size_t)32 * n_vocab; i++) {
                num += ((double)lg[i] - lc[i]) * ((double)lg[i] - lc[i]);
                den += (double)lc[i] * lc[i];
            }
            CHECK(sqrt(num / den) < GPU_VS_CPU_BOUND, "normalized error %.3g", sqrt(num / den));
            if (kv == FORGE_KV_F16) { /* the outside truth: the fixture's float64 reference, its own tolerance */
                double tol = fixture_tolerance(dir, name), rel = vs_reference(dir, name, lg, n_vocab);
                CHECK(tol > 0 && rel >= 0 && rel <= tol, "GPU vs float64 reference: rel L2 %.3g (tolerance %.3g)", rel, tol);
                printf("  %-32s %-5s GPU vs CPU %.3g, GPU vs float64 reference %.3g (tolerance %.3g)\n", name,
                       forge_kv_type_name(kv), sqrt(num / den), rel, tol);
            } else {
                printf("  %-32s %-5s normalized error GPU vs CPU %.3g\n", name, forge_kv_type_name(kv), sqrt(num / den));
            }
        }
        d.all_logits = 0;
        if (CHECK(greedy(cpu, tc, 24, tokens, 8, n_vocab) && greedy(gpu, tg, 24, tokens, 8, n_vocab), "greedy runs")) {
            int same = 0;
            while (same < 24 && tc[same] == tg[same]) same++;
            /* decode products on 8-bit activations (the default) and a q8_0 cache (which rounds keys and
               values that differ in the last f16 bit to different steps) can flip a near-tie of these
               random models; with f32 activations and an f16 cache the paths must not part (below) */
            if (same < 24) { /* where they part, the CPU's own top two must nearly tie (2% of the row's range) */
                uint32_t rows, v;
                const float *l;
                float lo, hi;
                int j, ok = 1;
                forge_context_reset(cpu);
                ok &= forge_eval(cpu, tokens, 8, NULL) == FORGE_OK;
                for (j = 0; j < same && ok; j++) ok &= forge_eval(cpu, &tc[j], 1, NULL) == FORGE_OK;
                l = ok ? forge_context_logits(cpu, &rows) : NULL;
                if (CHECK(l != NULL, "replay on the CPU")) {
                    l += (size_t)(rows - 1) * n_vocab;
                    lo = hi = l[0];
                    for (v = 1; v < n_vocab; v++) lo = l[v] < lo ? l[v] : lo, hi = l[v] > hi ? l[v] : hi;
                    CHECK(l[tc[same]] - l[tg[same]] <= 0.02f * (hi - lo),
                          "parted after %d tokens at a gap of %.4f (row range %.2f): not a near-tie", same,
                          (double)(l[tc[same]] - l[tg[same]]), (double)(hi - lo));
                    printf("  %-32s %-5s parted after %d tokens where the CPU's top two are %.4f apart (row range %.2f)\n",
                           name, forge_kv_type_name(kv), same, (double)(l[tc[same]] - l[tg[same]]), (double)(hi - lo));
                }
            }
            if (same < 24) printf("  %-32s %-5s greedy tokens identical for %d of 24\n", name, forge_kv_type_name(kv), same);
        }
        if (kv == FORGE_KV_F16) { /* gpu_no_q8: decode on f32 activations, the CPU's arithmetic */
            forge_context *exact = NULL;
            int ok;
            d.gpu_no_q8 = 1;
            d.backend = FORGE_BACKEND_GPU;
            ok = forge_context_create(m, &d, &exact, &e) == FORGE_OK;
            d.gpu_no_q8 = 0;
            if (CHECK(ok, "gpu (f32 activations): %s", e.message) && CHECK(greedy(exact, tg, 24, tokens, 8, n_vocab), "greedy run")) {
                int same = 0;
                while (same < 24 && tc[same] == tg[same]) same++;
                CHECK(same == 24, "f32 activations: 24 greedy tokens identical (%d)", same);
            }
            forge_context_destroy(exact);
        }
    }
    forge_context_destroy(cpu);
    forge_context_destroy(gpu);
    forge_model_close(m);
}

/* Remembers whether the context just created recorded its decode graph (user: an int). */
static void graph_log(void *user, forge_log_level level, const char *message) {
    (void)level;
    if (strstr(message, "decode graph:")) *(int *)user = strstr(message, "recorded") != NULL;
}

static int32_t host_argmax(const float *row, uint32_t n) {
    uint32_t v, best = 0;
    for (v = 1; v < n; v++)
        if (row[v] > row[best]) best = v;
    return (int32_t)best;
}

/* The same decode on a context that replays the recorded graph and on one of plain launches: every
   step's logits within 1e-5 (the splits are the same, so they agree bit for bit), the same greedy
   tokens, and the same again after forge_context_reset. n_prompt tokens first (in n_batch batches),
   then n_steps greedy steps. */
static void graph_vs_plain(const char *dir, const char *name, forge_kv_type kv, uint32_t batch, uint32_t n_ctx, uint32_t n_prompt,
                           uint32_t n_steps) {
    char path[1024], label[256];
    forge_model *m = NULL;
    forge_context *ctx[2] = {NULL, NULL};
    forge_context_desc d;
    forge_error e;
    int recorded[2] = {-1, -1}, run, k;
    int32_t *prompt = NULL, *toks[2] = {NULL, NULL}, first_run[512];
    uint32_t i, n_vocab, rows[2];
    double worst = 0.0;
    snprintf(path, sizeof path, "%s/models/%s", dir, name);
    snprintf(label, sizeof label, "decode graph vs plain launches: %s, %s KV, batches of %u, n_ctx %u, %u + %u tokens", name,
             forge_kv_type_name(kv), batch ? batch : 512, n_ctx, n_prompt, n_steps);
    TEST_CASE(label);
    if (!CHECK(forge_model_open(path, NULL, &m, &e) == FORGE_OK, "open: %s", e.message)) return;
    n_vocab = forge_model_config(m)->n_vocab;
    memset(&d, 0, sizeof d);
        d.backend = FORGE_BACKEND_GPU;
    d.n_ctx = n_ctx;
    d.n_batch = batch;
    d.kv_type = kv;
    d.log = graph_log;
    d.gpu_norm_fusion = test_norm_fusion;
    for (k = 0; k < 2; k++) {
        d.gpu_no_graph = k;
        d.log_user_data = &recorded[k];
        CHECK(forge_context_create(m, &d, &ctx[k], &e) == FORGE_OK, "create: %s", e.message);
    }
    CHECK(recorded[0] == 1 && recorded[1] == 0, "graph recorded %d, plain %d", recorded[0], recorded[1]);
    prompt = (int32_t *)malloc((n_prompt + 1) * sizeof *prompt);
    toks[0] = (int32_t *)malloc((n_steps + 1) * sizeof(int32_t));
    toks[1] = (int32_t *)malloc((n_steps + 1) * sizeof(int32_t));
    if (!ctx[0] || !ctx[1] || !prompt || !toks[0] || !toks[1] || n_steps > 512) goto out;
    for (i = 0; i < n_prompt; i++) prompt[i] = tokens[i % 32] % (int32_t)n_vocab;
    for (run = 0; run < 2; run++) {
        for (k = 0; k < 2; k++) {
            forge_context_reset(ctx[k]);
            if (!CHECK(forge_eval(ctx[k], prompt, n_prompt, &e) == FORGE_OK, "prompt: %s", e.message)) goto out;
        }
        for (i = 0; i < n_steps; i++) {
            const float *l[2];
            uint32_t v;
            for (k = 0; k < 2; k++) {
                l[k] = forge_context_logits(ctx[k], &rows[k]);
                if (!CHECK(l[k] != NULL, "logits at step %u", i)) goto out;
                l[k] += (size_t)(rows[k] - 1) * n_vocab;
            }
            for (v = 0; v < n_vocab; v++) {
                double diff = fabs((double)l[0][v] - l[1][v]);
                if (!(diff <= worst)) worst = diff; /* NaN makes it NaN */
            }
            for (k = 0; k < 2; k++) {
                toks[k][i] = host_argmax(l[k], n_vocab);
                if (!CHECK(forge_eval(ctx[k], &toks[k][i], 1, &e) == FORGE_OK, "step %u: %s", i, e.message)) goto out;
            }
        }
        CHECK(memcmp(toks[0], toks[1], n_steps * sizeof(int32_t)) == 0, "run %d: greedy tokens identical", run);
        if (run == 0) memcpy(first_run, toks[0], n_steps * sizeof(int32_t));
        else CHECK(memcmp(first_run, toks[0], n_steps * sizeof(int32_t)) == 0, "after a reset: the same tokens");
    }
    CHECK(worst <= 1e-5, "logits differ by %.3g", worst);
    printf("  %-30s %-5s batch %3u n_ctx %5u: graph vs plain, largest logit difference %.3g over %u steps x 2\n", name,
           forge_kv_type_name(kv), batch ? batch : 512, n_ctx, worst, n_steps);
out:
    free(prompt);
    free(toks[0]);
    free(toks[1]);
    forge_context_destroy(ctx[0]);
    forge_context_destroy(ctx[1]);
    forge_model_close(m);
}

/* forge_context_argmax against the host's argmax of the same logits, after a prompt (plain
   launches, every row kept) and after decode steps (the graph), on the GPU and the CPU. */
static void argmax_matches(const char *dir, const char *name) {
    char path[1024];
    forge_model *m = NULL;
    forge_context *ctx = NULL;
    forge_context_desc d;
    forge_error e;
    int k, step;
    snprintf(path, sizeof path, "%s/models/%s", dir, name);
    TEST_CASE("forge_context_argmax equals the host's argmax (GPU and CPU, prompt and decode)");
    if (!CHECK(forge_model_open(path, NULL, &m, &e) == FORGE_OK, "open: %s", e.message)) return;
    for (k = 0; k < 2; k++) {
        int32_t token = -1, next;
        uint32_t rows = 0;
        const float *l;
        memset(&d, 0, sizeof d);
        d.cpu_no_q8 = 1; /* the CPU side is the reference: f32 products */
        d.backend = k ? FORGE_BACKEND_CPU : FORGE_BACKEND_GPU;
        d.n_ctx = 64;
        d.all_logits = 1;
        if (!CHECK(forge_context_create(m, &d, &ctx, &e) == FORGE_OK, "create: %s", e.message)) break;
        CHECK(forge_context_argmax(ctx, &token, &e) == FORGE_ERR_ARGUMENT && token == -1, "before any eval: refused");
        CHECK(forge_eval(ctx, tokens, 20, &e) == FORGE_OK, "eval: %s", e.message);
        for (step = 0; step < 8; step++) {
            CHECK(forge_context_argmax(ctx, &token, &e) == FORGE_OK, "argmax: %s", e.message);
            l = forge_context_logits(ctx, &rows);
            if (!CHECK(l && rows >= 1, "logits")) break;
            next = host_argmax(l + (size_t)(rows - 1) * forge_model_config(m)->n_vocab, forge_model_config(m)->n_vocab);
            CHECK(token == next, "%s step %d: argmax %d, host %d", k ? "CPU" : "GPU", step, token, next);
            CHECK(forge_context_argmax(ctx, &token, &e) == FORGE_OK && token == next, "again, from the host copy: %d", token);
            CHECK(forge_eval(ctx, &next, 1, &e) == FORGE_OK, "eval: %s", e.message);
        }
        forge_context_destroy(ctx);
        ctx = NULL;
    }
    forge_model_close(m);
}

/* The generator with the greedy sampler: on the GPU it takes forge_context_argmax; the tokens are
   the CPU's. */
static void generator_greedy(const char *dir, const char *name) {
    char path[1024];
    forge_model *m = NULL;
    forge_tokenizer *tok = NULL;
    forge_context *ctx[2] = {NULL, NULL};
    forge_generator *gen[2] = {NULL, NULL};
    forge_context_desc d;
    forge_error e;
    int32_t out[2][24];
    int n[2] = {0, 0}, k;
    snprintf(path, sizeof path, "%s/models/%s", dir, name);
    TEST_CASE("greedy generator: GPU (device argmax, f32 activations) tokens equal the CPU's");
    if (!CHECK(forge_model_open(path, NULL, &m, &e) == FORGE_OK, "open: %s", e.message)) return;
    if (!CHECK(forge_tokenizer_create(forge_model_gguf(m), NULL, &tok, &e) == FORGE_OK, "tokenizer: %s", e.message)) goto out;
    for (k = 0; k < 2; k++) {
        memset(&d, 0, sizeof d);
        d.cpu_no_q8 = 1; /* the CPU side is the reference: f32 products */
        d.backend = k ? FORGE_BACKEND_CPU : FORGE_BACKEND_GPU;
        d.n_ctx = 64;
        d.gpu_no_q8 = !k;
        if (!CHECK(forge_context_create(m, &d, &ctx[k], &e) == FORGE_OK, "create: %s", e.message)) goto out;
        if (!CHECK(forge_generator_create(ctx[k], tok, NULL, &gen[k], &e) == FORGE_OK, "generator: %s", e.message)) goto out;
        if (!CHECK(forge_generator_prompt(gen[k], "the quick brown fox", 19, 0, &e) == FORGE_OK, "prompt: %s", e.message)) goto out;
        while (n[k] < 24) {
            forge_step st;
            if (!CHECK(forge_generator_step(gen[k], &st, &e) == FORGE_OK, "step: %s", e.message)) goto out;
            if (st.token >= 0) out[k][n[k]++] = st.token;
            if (st.done) break;
        }
    }
    CHECK(n[0] == n[1] && memcmp(out[0], out[1], (size_t)n[0] * sizeof(int32_t)) == 0, "%d and %d tokens, identical", n[0], n[1]);
out:
    for (k = 0; k < 2; k++) {
        forge_generator_destroy(gen[k]);
        forge_context_destroy(ctx[k]);
    }
    forge_tokenizer_destroy(tok);
    forge_model_close(m);
}

typedef struct progress_log {
    uint32_t calls;
    int monotone;
    uint64_t last_done, last_total;
} progress_log;

static void progress_record(void *user, uint64_t done, uint64_t total) {
    progress_log *p = (progress_log *)user;
    if (p->calls && (done < p->last_done || total != p->last_total)) p->monotone = 0;
    if (done > total) p->monotone = 0;
    p->calls++;
    p->last_done = done;
    p->last_total = total;
}

/* 10,000 decode steps (graph replays, greedy through forge_context_argmax) with free device memory
   and the allocation count unchanged; the upload's progress; a failing pinned allocation. */
static void decode_steps(const char *dir, const char *name) {
    char path[1024];
    forge_model *m = NULL;
    forge_context *ctx = NULL;
    forge_context_desc d;
    forge_error e;
    forge_memory_reading start, now;
    progress_log progress;
    unsigned long allocations;
    int recorded = -1;
    int32_t t = 42;
    uint32_t i;
    snprintf(path, sizeof path, "%s/models/%s", dir, name);
    TEST_CASE("decode: 10,000 graph steps, free device memory and the allocation count unchanged");
    if (!CHECK(forge_model_open(path, NULL, &m, &e) == FORGE_OK, "open: %s", e.message)) return;
    memset(&d, 0, sizeof d);
        memset(&progress, 0, sizeof progress);
    progress.monotone = 1;
    d.backend = FORGE_BACKEND_GPU;
    d.n_ctx = 10240;
    d.log = graph_log;
    d.log_user_data = &recorded;
    d.on_progress = progress_record;
    d.progress_user_data = &progress;
    if (!CHECK(forge_context_create(m, &d, &ctx, &e) == FORGE_OK, "create: %s", e.message)) goto out;
    CHECK(recorded == 1, "the decode graph was recorded");
    CHECK(progress.calls >= 1 && progress.monotone && progress.last_done == progress.last_total &&
              progress.last_total == forge_context_plan(ctx)->weights_bytes,
          "progress: %u calls, monotone %d, last %llu of %llu (weights %llu)", progress.calls, progress.monotone,
          (unsigned long long)progress.last_done, (unsigned long long)progress.last_total,
          (unsigned long long)forge_context_plan(ctx)->weights_bytes);
    allocations = forge_gpu_allocation_count();
    forge_memory_query_gpu(0, &start, &e);
    for (i = 0; i < 10000; i++)
        if (forge_eval(ctx, &t, 1, &e) != FORGE_OK || forge_context_argmax(ctx, &t, &e) != FORGE_OK) break;
    forge_memory_query_gpu(0, &now, &e);
    CHECK(i == 10000 && forge_context_pos(ctx) == 10000, "10,000 steps: %u (%s)", i, i < 10000 ? e.message : "");
    CHECK(now.free_bytes == start.free_bytes && forge_gpu_allocation_count() == allocations,
          "free device memory %llu, at creation %llu; allocations +%lu", (unsigned long long)now.free_bytes,
          (unsigned long long)start.free_bytes, forge_gpu_allocation_count() - allocations);
    printf("  %s: 10,000 decode steps, free device memory %llu bytes before and %llu after\n", name,
           (unsigned long long)start.free_bytes, (unsigned long long)now.free_bytes);
    forge_context_destroy(ctx);
    ctx = NULL;

    TEST_CASE("upload: a failing pinned staging allocation returns an error and leaves nothing behind");
    forge_memory_query_gpu(0, &start, &e);
    forge_hip_fail_host_allocation_after(1); /* the step slots are the first pinned allocation, the staging the second */
    CHECK(forge_context_create(m, &d, &ctx, &e) == FORGE_ERR_HOST_MEMORY && ctx == NULL, "refused: %s", e.message);
    forge_hip_fail_host_allocation_after(-1);
    forge_context_destroy(ctx);
    ctx = NULL;
    printf("  %s\n", e.message);
    forge_memory_query_gpu(0, &now, &e);
    CHECK(now.free_bytes == start.free_bytes, "free %llu vs %llu", (unsigned long long)now.free_bytes,
          (unsigned long long)start.free_bytes);
out:
    forge_context_destroy(ctx);
    forge_model_close(m);
}

/* Every capture point of every layer, GPU against CPU, in chunks of 7. */
static void compare_captures(const char *dir, const char *name) {
    char path[1024], label[256];
    forge_model *m = NULL;
    forge_context *ctx[2] = {NULL, NULL};
    forge_context_desc d;
    forge_capture caps[FORGE_MAX_CAPTURES];
    forge_capture_chunk chunk[2];
    uint32_t n = 0, k, i, t;
    forge_error e;
    double num = 0.0, den = 0.0;
    snprintf(path, sizeof path, "%s/models/%s", dir, name);
    snprintf(label, sizeof label, "GPU vs CPU captures: %s, every point of every layer, bf16 and f32", name);
    TEST_CASE(label);
    if (!CHECK(forge_model_open(path, NULL, &m, &e) == FORGE_OK, "open: %s", e.message)) return;
    CHECK(forge_capture_parse(forge_model_config(m), "all", "resid_pre,attn_out,mlp_out,resid_post,final", caps,
                              FORGE_MAX_CAPTURES, &n, &e) == FORGE_OK, "%s", e.message);
    memset(&d, 0, sizeof d);
        d.n_ctx = 64;
    d.n_batch = 7;
    d.captures = caps;
    d.n_captures = n;
    for (k = 0; k < 2; k++) {
        d.cpu_no_q8 = 1; /* the CPU side is the reference: f32 products */
        d.backend = k ? FORGE_BACKEND_GPU : FORGE_BACKEND_CPU;
        CHECK(forge_context_create(m, &d, &ctx[k], &e) == FORGE_OK, "create: %s", e.message);
        if (ctx[k]) CHECK(forge_eval(ctx[k], tokens, 32, &e) == FORGE_OK, "eval: %s", e.message);
    }
    if (ctx[0] && ctx[1] && forge_context_captures(ctx[0], &chunk[0]) && forge_context_captures(ctx[1], &chunk[1])) {
        CHECK(chunk[0].n_tokens == 4 && chunk[1].n_tokens == 4 && chunk[1].pos == 28, "last chunk: 4 tokens at 28");
        for (i = 0; i < n; i++)
            for (t = 0; t < chunk[0].n_tokens * chunk[0].width[i]; t++) {
                double a = ((const float *)chunk[0].data[i])[t], b = ((const float *)chunk[1].data[i])[t];
                num += (a - b) * (a - b);
                den += a * a;
            }
        CHECK(den > 0 && sqrt(num / den) < GPU_VS_CPU_BOUND, "normalized error %.3g", den > 0 ? sqrt(num / den) : -1.0);
        printf("  %-32s captures normalized error GPU vs CPU %.3g\n", name, den > 0 ? sqrt(num / den) : -1.0);
    }
    forge_context_destroy(ctx[0]);
    forge_context_destroy(ctx[1]);
    forge_model_close(m);
}

/* Attention patterns, GPU against CPU: every row of every chunk gathered, in chunks of 7 (prompt
   kernels) and of 1 (decode, graphs and plain launches), heads 1-3 against keys 2 .. 41 of 64. */
typedef struct pattern_rows {
    float rows[32 * 3 * 40];
    uint32_t seen;
} pattern_rows;

static void pattern_gather(void *user, const forge_capture_chunk *chunk) {
    pattern_rows *g = (pattern_rows *)user;
    if (chunk->width[0] == 3 * 40 && chunk->pos + chunk->n_tokens <= 32) {
        memcpy(g->rows + (size_t)chunk->pos * 120, chunk->data[0], (size_t)chunk->n_tokens * 120 * sizeof(float));
        g->seen += chunk->n_tokens;
    }
}

static void compare_patterns(const char *dir, const char *name, uint32_t layer) {
    static pattern_rows got[2];
    char path[1024], label[256];
    forge_model *m = NULL;
    forge_context *ctx = NULL;
    forge_context_desc d;
    forge_capture cap;
    forge_error e;
    static const uint32_t batches[] = {7, 1};
    uint32_t k, batch, i, b;
    snprintf(path, sizeof path, "%s/models/%s", dir, name);
    if (!CHECK(forge_model_open(path, NULL, &m, &e) == FORGE_OK, "open: %s", e.message)) return;
    cap.layer = layer, cap.point = FORGE_CAPTURE_ATTN_PATTERN;
    for (b = 0; b < sizeof batches / sizeof batches[0]; b++) {
        double worst = 0.0, worst_sum = 0.0;
        batch = batches[b];
        snprintf(label, sizeof label, "GPU vs CPU attention pattern: %s layer %u, heads 1-3 x keys 2..41, chunks of %u", name, layer, batch);
        TEST_CASE(label);
        memset(&d, 0, sizeof d);
        d.n_ctx = 64;
        d.n_batch = batch;
        d.gpu_no_q8 = 1; /* decode steps (chunks of 1) on f32 activations: the kernel's own error, not the rounding's */
        d.captures = &cap;
        d.n_captures = 1;
        d.on_capture = pattern_gather;
        d.pattern_head_first = 1, d.pattern_n_heads = 3, d.pattern_key_first = 2, d.pattern_n_keys = 40;
        for (k = 0; k < 2; k++) {
            memset(&got[k], 0, sizeof got[k]);
            d.cpu_no_q8 = 1; /* the CPU side is the reference: f32 products */
            d.backend = k ? FORGE_BACKEND_GPU : FORGE_BACKEND_CPU;
            d.capture_user_data = &got[k];
            CHECK(forge_context_create(m, &d, &ctx, &e) == FORGE_OK, "create: %s", e.message);
            if (ctx) CHECK(forge_eval(ctx, tokens, 32, &e) == FORGE_OK && got[k].seen == 32, "eval: %s", e.message);
            forge_context_destroy(ctx);
            ctx = NULL;
        }
        { /* the GPU's prompt products run on f16 activations: normalized error, as for the other captures;
             rows whose visible keys all lie in the window (a sliding-window layer's later rows) sum to 1 */
            const forge_config *c = forge_model_config(m);
            double num = 0.0, den = 0.0;
            for (i = 0; i < 32 * 3; i++) {
                const uint32_t t = i / 3;
                double sum_gpu = 0.0;
                uint32_t j;
                for (j = 0; j < 40; j++) {
                    const double a = got[0].rows[i * 40 + j], b = got[1].rows[i * 40 + j];
                    num += (a - b) * (a - b);
                    den += a * a;
                    worst = fmax(worst, fabs(a - b));
                    sum_gpu += b;
                }
                if (c->layer_is_swa[layer] && t >= c->n_swa + 1 && t <= 41) worst_sum = fmax(worst_sum, fabs(sum_gpu - 1.0));
            }
            CHECK(den > 0 && sqrt(num / den) < GPU_VS_CPU_BOUND, "normalized error %.3g (largest difference %.3g)",
                  den > 0 ? sqrt(num / den) : -1.0, worst);
            CHECK(worst_sum <= 1e-5, "GPU rows holding every visible key sum to 1 within %.3g", worst_sum);
            printf("  %-32s pattern GPU vs CPU, chunks of %u: normalized error %.3g, largest difference %.3g\n", name, batch,
                   den > 0 ? sqrt(num / den) : -1.0, worst);
        }
    }
    forge_model_close(m);
}

/* Nothing allocated after load on the device or through the context's host allocator: prompt
   batches (ring-sized on a sliding-window model), decode steps, device and host sampler draws, the
   device argmax, and a generator's steps. */
static void allocations_everywhere(const char *dir, const char *name) {
    static const char prompt[] = "the quick fox";
    char path[1024];
    forge_model *m = NULL;
    forge_context *ctx = NULL;
    forge_tokenizer *tok = NULL;
    forge_generator *gen = NULL;
    forge_sampler *s = NULL;
    forge_sampler_desc sd;
    forge_context_desc d;
    forge_error e;
    forge_step st;
    test_counting count;
    unsigned long device;
    long host;
    int32_t tokens[20], t = 0;
    uint32_t i;
    int ok = 1;
    snprintf(path, sizeof path, "%s/models/%s", dir, name);
    TEST_CASE("memory: no allocation in evals, draws and generator steps (fixture)");
    if (!CHECK(forge_model_open(path, NULL, &m, &e) == FORGE_OK, "open %s: %s", path, e.message)) return;
    test_counting_init(&count, -1);
    memset(&d, 0, sizeof d);
        d.backend = FORGE_BACKEND_GPU;
    d.n_ctx = 128;
    d.n_batch = 3;
    d.allocator.alloc = test_counting_alloc;
    d.allocator.free = test_counting_free;
    d.allocator.user_data = &count;
    memset(&sd, 0, sizeof sd);
    sd.temperature = 0.8f, sd.top_k = 40, sd.repeat_penalty = 1.1f, sd.seed = 5;
    if (!CHECK(forge_context_create(m, &d, &ctx, &e) == FORGE_OK && forge_sampler_create(&sd, forge_model_config(m)->n_vocab, &s, &e) == FORGE_OK &&
                   forge_tokenizer_create(forge_model_gguf(m), NULL, &tok, &e) == FORGE_OK,
               "create: %s", e.message))
        goto out;
    for (i = 0; i < 20; i++) tokens[i] = (int32_t)((i * 7919u + 13u) % forge_model_config(m)->n_vocab);
    device = forge_gpu_allocation_count();
    host = count.calls;
    ok = forge_eval(ctx, tokens, 20, &e) == FORGE_OK;
    for (i = 0; i < 40 && ok; i++) {
        const float *l;
        uint32_t rows = 0;
        int32_t host_token = -1;
        ok = forge_context_sample(ctx, s, &t, &e) == FORGE_OK && forge_context_argmax(ctx, &host_token, &e) == FORGE_OK;
        if (ok && i % 8 == 0) { /* the host path too: the logits copied back, then drawn on the host */
            l = forge_context_logits(ctx, &rows);
            ok = l && rows && forge_sampler_sample(s, l + (size_t)(rows - 1) * forge_model_config(m)->n_vocab, &host_token, &e) == FORGE_OK;
        }
        forge_sampler_accept(s, t);
        if (ok) ok = forge_eval(ctx, &t, 1, &e) == FORGE_OK;
    }
    CHECK(ok, "step %u: %s", i, e.message);
    CHECK(forge_gpu_allocation_count() == device && count.calls == host,
          "20 prompt tokens, 40 steps and 45 draws: %lu device and %ld host allocations", forge_gpu_allocation_count() - device,
          count.calls - host);
    forge_context_reset(ctx);
    if (!CHECK(forge_generator_create(ctx, tok, &sd, &gen, &e) == FORGE_OK &&
                   forge_generator_prompt(gen, prompt, sizeof prompt - 1, 0, &e) == FORGE_OK,
               "generator: %s", e.message))
        goto out;
    device = forge_gpu_allocation_count();
    host = count.calls;
    for (i = 0, ok = 1; i < 64 && ok; i++) {
        ok = forge_generator_step(gen, &st, &e) == FORGE_OK;
        if (ok && st.done) break;
    }
    CHECK(ok, "generator step %u: %s", i, e.message);
    CHECK(forge_gpu_allocation_count() == device && count.calls == host, "%u generator steps: %lu device and %ld host allocations", i,
          forge_gpu_allocation_count() - device, count.calls - host);
out:
    forge_generator_destroy(gen);
    forge_tokenizer_destroy(tok);
    forge_sampler_destroy(s);
    forge_context_destroy(ctx);
    forge_model_close(m);
}

static void memory_promises(const char *path) {
    forge_model *m = NULL;
    forge_context *ctx = NULL;
    forge_context_desc d;
    forge_error e;
    forge_memory_reading before, after, later;
    progress_log progress;
    unsigned long allocations;
    int32_t t = 42;
    int i;
    double taken;
    TEST_CASE("memory: device memory taken equals the plan");
    if (!CHECK(forge_model_open(path, NULL, &m, &e) == FORGE_OK, "open %s: %s", path, e.message)) return;
    memset(&d, 0, sizeof d);
        d.backend = FORGE_BACKEND_GPU;
    d.n_ctx = 4096;
    memset(&progress, 0, sizeof progress);
    progress.monotone = 1;
    d.on_progress = progress_record;
    d.progress_user_data = &progress;
    forge_memory_query_gpu(0, &before, &e);
    allocations = forge_gpu_allocation_count();
    if (!CHECK(forge_context_create(m, &d, &ctx, &e) == FORGE_OK, "create: %s", e.message)) return;
    CHECK(progress.monotone && progress.last_done == progress.last_total && progress.last_total == forge_context_plan(ctx)->weights_bytes &&
              progress.calls >= forge_context_plan(ctx)->weights_bytes / (32u << 20),
          "progress: %u calls for %llu bytes, monotone %d, last %llu of %llu", progress.calls,
          (unsigned long long)forge_context_plan(ctx)->weights_bytes, progress.monotone, (unsigned long long)progress.last_done,
          (unsigned long long)progress.last_total);
    forge_memory_query_gpu(0, &after, &e);
    taken = (double)before.free_bytes - (double)after.free_bytes;
    printf("  plan %llu bytes, arena %llu, free memory fell by %.0f (%.3f of the plan)\n",
           (unsigned long long)forge_context_plan(ctx)->total_bytes, (unsigned long long)forge_context_arena_bytes(ctx), taken,
           taken / (double)forge_context_plan(ctx)->total_bytes);
    CHECK(forge_context_arena_bytes(ctx) == forge_context_plan(ctx)->total_bytes, "arena == plan");
    CHECK(fabs(taken - (double)forge_context_plan(ctx)->total_bytes) <= 0.02 * (double)forge_context_plan(ctx)->total_bytes,
          "within 2%%: %.0f vs %llu", taken, (unsigned long long)forge_context_plan(ctx)->total_bytes);
    CHECK(forge_gpu_allocation_count() == allocations + 1, "one device allocation: %lu", forge_gpu_allocation_count() - allocations);

    TEST_CASE("memory: nothing allocated while decoding, free memory unchanged after 1000 steps");
    CHECK(forge_eval(ctx, &t, 1, &e) == FORGE_OK, "eval: %s", e.message);
    forge_memory_query_gpu(0, &after, &e);
    for (i = 0; i < 1000 && forge_eval(ctx, &t, 1, &e) == FORGE_OK; i++) {
    }
    forge_memory_query_gpu(0, &later, &e);
    CHECK(i == 1000, "1000 steps: %s", e.message);
    CHECK(later.free_bytes == after.free_bytes, "free memory %llu then %llu", (unsigned long long)after.free_bytes,
          (unsigned long long)later.free_bytes);
    CHECK(forge_gpu_allocation_count() == allocations + 1, "still one allocation");
    forge_context_destroy(ctx);
    forge_memory_query_gpu(0, &later, &e);
    CHECK(later.free_bytes == before.free_bytes, "destroy returns it all: %llu vs %llu", (unsigned long long)later.free_bytes,
          (unsigned long long)before.free_bytes);

    TEST_CASE("memory: a plan larger than free memory is refused with nothing taken");
    d.n_ctx = 1u << 26; /* 64M positions: a KV cache of terabytes */
    forge_memory_query_gpu(0, &before, &e);
    ctx = NULL;
    CHECK(forge_context_create(m, &d, &ctx, &e) == FORGE_ERR_BUDGET && ctx == NULL, "refused: %s", e.message);
    forge_context_destroy(ctx);
    ctx = NULL;
    printf("  %s\n", e.message);
    forge_memory_query_gpu(0, &after, &e);
    CHECK(after.free_bytes == before.free_bytes && forge_gpu_allocation_count() == allocations + 1, "nothing taken");

    TEST_CASE("memory: a failing device allocation leaves free memory where it was");
    d.n_ctx = 4096;
    forge_hip_fail_allocation_after(0);
    CHECK(forge_context_create(m, &d, &ctx, &e) == FORGE_ERR_IO && ctx == NULL, "injected failure: %s", e.message);
    forge_context_destroy(ctx);
    forge_hip_fail_allocation_after(-1);
    forge_memory_query_gpu(0, &after, &e);
    CHECK(after.free_bytes == before.free_bytes, "free %llu vs %llu", (unsigned long long)after.free_bytes,
          (unsigned long long)before.free_bytes);

    TEST_CASE("memory: q8_0 KV cache below f16 at the same context");
    {
        forge_plan p16, p8;
        d.n_ctx = 65536;
        d.kv_type = FORGE_KV_F16;
        forge_plan_compute(m, &d, &p16, &e);
        d.kv_type = FORGE_KV_Q8_0;
        forge_plan_compute(m, &d, &p8, &e);
        CHECK(p8.kv_bytes < p16.kv_bytes && p8.total_bytes < p16.total_bytes, "q8_0 %llu < f16 %llu",
              (unsigned long long)p8.total_bytes, (unsigned long long)p16.total_bytes);
    }
    forge_model_close(m);
}

/* Free device memory and the allocation count do not move while the sequence grows to 16K and 64K
   positions (prompt batches of 512, then decode steps), for f16 and q8_0 caches. */
static void memory_at_depth(const char *path) {
    static int32_t batch[512];
    forge_model *m = NULL;
    forge_context *ctx = NULL;
    forge_context_desc d;
    forge_error e;
    forge_memory_reading start, now;
    unsigned long allocations;
    uint32_t depth_max = 65536, pos = 0, i, k;
    const char *env = getenv("FORGE_TEST_DEPTH");
    static const forge_kv_type kinds[2] = {FORGE_KV_F16, FORGE_KV_Q8_0};
    if (env && atoi(env) > 0) depth_max = (uint32_t)atoi(env);
    if (!CHECK(forge_model_open(path, NULL, &m, &e) == FORGE_OK, "open %s: %s", path, e.message)) return;
    for (i = 0; i < 512; i++) batch[i] = (int32_t)(1 + (i * 7919u) % 1000u);
    for (k = 0; k < 2; k++) {
        char label[160];
        snprintf(label, sizeof label, "memory: flat at depths 0, 16K and %uK (%s KV cache)", depth_max / 1024, forge_kv_type_name(kinds[k]));
        TEST_CASE(label);
        memset(&d, 0, sizeof d);
                d.backend = FORGE_BACKEND_GPU;
        d.n_ctx = depth_max + 64;
        d.kv_type = kinds[k];
        if (!CHECK(forge_context_create(m, &d, &ctx, &e) == FORGE_OK, "create: %s", e.message)) continue;
        allocations = forge_gpu_allocation_count();
        forge_memory_query_gpu(0, &start, &e);
        {
            uint32_t marks[2] = {16384, depth_max}, next = 0;
            while (next < 2) {
                pos = forge_context_pos(ctx);
                if (pos + 512 <= marks[next]) {
                    if (!CHECK(forge_eval(ctx, batch, 512, &e) == FORGE_OK, "prefill at %u: %s", pos, e.message)) break;
                    continue;
                }
                { /* at the mark (to within a batch): a few decode steps, then the reading */
                    int32_t t = 42;
                    for (i = 0; i < 16 && forge_eval(ctx, &t, 1, &e) == FORGE_OK; i++) {
                    }
                    forge_memory_query_gpu(0, &now, &e);
                    CHECK(i == 16 && now.free_bytes == start.free_bytes && forge_gpu_allocation_count() == allocations,
                          "depth %u: free memory %llu (at creation %llu), allocations +%lu", forge_context_pos(ctx),
                          (unsigned long long)now.free_bytes, (unsigned long long)start.free_bytes,
                          forge_gpu_allocation_count() - allocations);
                    printf("  %s KV: depth %u, free device memory %llu bytes (at creation %llu), plan %llu\n",
                           forge_kv_type_name(kinds[k]), forge_context_pos(ctx), (unsigned long long)now.free_bytes,
                           (unsigned long long)start.free_bytes, (unsigned long long)forge_context_plan(ctx)->total_bytes);
                }
                next++;
            }
        }
        forge_context_destroy(ctx);
        ctx = NULL;
    }
    forge_model_close(m);
}

/* Decode, one token at a time (products on 8-bit activations where the weight type has that path):
   the 32 rows of logits against the fixture's float64 reference within its own tolerance, and,
   printed beside it, the same decode with f32 activations (gpu_no_q8). */
static void decode_vs_reference(const char *dir, const char *name) {
    char path[1024], label[256];
    forge_model *m = NULL;
    forge_context_desc d;
    forge_error e;
    double rel[2] = {-1.0, -1.0}, tol;
    uint32_t n_vocab, i, rows;
    int pass;
    float *all;
    snprintf(path, sizeof path, "%s/models/%s", dir, name);
    snprintf(label, sizeof label, "decode one token at a time vs float64 reference: %s", name);
    TEST_CASE(label);
    if (!CHECK(forge_model_open(path, NULL, &m, &e) == FORGE_OK, "open: %s", e.message)) return;
    n_vocab = forge_model_config(m)->n_vocab;
    all = (float *)malloc((size_t)32 * n_vocab * sizeof(float));
    tol = fixture_tolerance(dir, name);
    memset(&d, 0, sizeof d);
        d.backend = FORGE_BACKEND_GPU;
    d.n_ctx = 64;
    d.n_batch = 1;
    for (pass = 0; pass < 2 && all; pass++) {
        forge_context *ctx = NULL;
        int ok = 1;
        d.gpu_no_q8 = pass == 1;
        ok = forge_context_create(m, &d, &ctx, &e) == FORGE_OK;
        if (!CHECK(ok, "gpu: %s", e.message)) break;
        for (i = 0; i < 32 && ok; i++) {
            const float *l;
            ok = forge_eval(ctx, &tokens[i], 1, &e) == FORGE_OK && (l = forge_context_logits(ctx, &rows)) != NULL && rows == 1;
            if (ok) memcpy(all + (size_t)i * n_vocab, l, n_vocab * sizeof(float));
        }
        if (CHECK(ok, "decode step %u: %s", i, e.message)) rel[pass] = vs_reference(dir, name, all, n_vocab);
        forge_context_destroy(ctx);
    }
    CHECK(tol > 0 && rel[0] >= 0 && rel[0] <= tol, "decode vs float64 reference: rel L2 %.3g (tolerance %.3g)", rel[0], tol);
    printf("  %-32s decode vs float64 reference %.3g (f32 activations %.3g, tolerance %.3g)\n", name, rel[0], rel[1], tol);
    free(all);
    forge_model_close(m);
}

/* Writes a row of logits where the last eval's last row lives on the device, as if an eval had
   produced it (the row count and the host copy's state set to match). */
static int inject_logits(forge_context *ctx, const float *row, uint32_t n_vocab) {
    char message[256];
    float *dev = (float *)(void *)(ctx->dev + ctx->dev_logits);
    if (forge_hip_copy_to_device(dev, row, n_vocab * sizeof(float), ctx->stream, message, sizeof message) != 0 ||
        forge_hip_stream_sync(ctx->stream, message, sizeof message) != 0)
        return 0;
    ctx->n_logit_rows = 1;
    ctx->logits_on_host = 0;
    return 1;
}

/* forge_context_sample on the GPU: the host sampler's token on the same logits for every setting,
   the device path taken exactly where it should be, and crafted rows (ties, signed zeros, masked
   tokens leaving fewer than top_k, NaN, all masked). */
static void sample_on_device(const char *dir, const char *name) {
    static const int32_t prompt[8] = {1, 15, 300, 42, 7, 900, 12, 5};
    char path[1024];
    forge_model *m = NULL;
    forge_context *ctx = NULL;
    forge_context_desc cd;
    forge_sampler_desc d[11];
    forge_error e;
    uint32_t n_vocab, v;
    int i;
    float *row;
    snprintf(path, sizeof path, "%s/models/%s", dir, name);
    TEST_CASE("forge_context_sample on the GPU equals forge_sampler_sample");
    if (!CHECK(forge_model_open(path, NULL, &m, &e) == FORGE_OK, "open: %s", e.message)) return;
    n_vocab = forge_model_config(m)->n_vocab;
    memset(&cd, 0, sizeof cd);
    cd.n_ctx = 64;
    cd.backend = FORGE_BACKEND_GPU;
    if (!CHECK(forge_context_create(m, &cd, &ctx, &e) == FORGE_OK, "create: %s", e.message)) {
        forge_model_close(m);
        return;
    }
    memset(d, 0, sizeof d);
    d[1].temperature = 0.8f, d[1].top_k = 40, d[1].seed = 11;
    d[2].temperature = 1.0f, d[2].top_k = 1, d[2].seed = 12;
    d[3].temperature = 1.3f, d[3].top_k = 255, d[3].seed = 13;
    d[4].temperature = 0.7f, d[4].top_k = 50, d[4].top_p = 0.9f, d[4].min_p = 0.05f, d[4].seed = 14;
    d[5].temperature = 1.0f, d[5].seed = 15;                                   /* no top-k: host */
    d[6].temperature = 0.9f, d[6].top_p = 0.95f, d[6].seed = 16;               /* host */
    d[7].temperature = 1.0f, d[7].top_k = 256, d[7].seed = 17;                 /* above the device's 255: host */
    d[8].temperature = 1.0f, d[8].top_k = 40, d[8].repeat_penalty = 1.2f, d[8].seed = 18;
    d[9].repeat_penalty = 1.5f, d[9].repeat_last_n = 16;                       /* greedy with a penalty */
    d[10].temperature = 0.9f, d[10].top_k = 20, d[10].repeat_penalty = 0.8f, d[10].min_p = 0.1f, d[10].seed = 20;
    for (i = 0; i < 11; i++) {
        const uint32_t before = ctx->n_device_samples;
        const int device = i <= 4 || i >= 8, same = test_sample_walk(ctx, n_vocab, prompt, 8, &d[i], 40);
        CHECK(same == 40, "setting %d: %d of 40 tokens equal to the host sampler's", i, same);
        CHECK(ctx->n_device_samples - before == (device ? 40u : 0u), "setting %d: %u of 40 draws from device candidates, expected %d", i,
              ctx->n_device_samples - before, device ? 40 : 0);
        printf("  setting %d (temp %.1f top_k %d top_p %.2f min_p %.2f penalty %.1f): %d of 40 equal, %u from the device\n", i,
               (double)d[i].temperature, (int)d[i].top_k, (double)d[i].top_p, (double)d[i].min_p, (double)d[i].repeat_penalty, same,
               ctx->n_device_samples - before);
    }
    row = (float *)malloc(n_vocab * sizeof(float));
    for (i = 0; i < 6 && row; i++) { /* crafted rows, 20 seeds each */
        forge_sampler_desc sd;
        int seed, equal = 0;
        for (v = 0; v < n_vocab; v++) {
            switch (i) {
            case 0: row[v] = (float)(v % 7) * 0.5f; break;                         /* many exact ties */
            case 1: row[v] = v % 3 == 0 ? 0.0f : v % 3 == 1 ? -0.0f : -1.0f; break; /* signed zeros tie */
            case 2: row[v] = v % 100 == 3 ? (float)v * 0.01f : -INFINITY; break;    /* 10 finite, top_k 40 */
            case 3: row[v] = v < 40 ? (float)(v % 5) : -INFINITY; break;           /* exactly top_k finite */
            case 4: row[v] = v == 500 ? NAN : 0.1f * (float)(v % 11); break;       /* NaN: the host's message */
            default: row[v] = -INFINITY; break;                                    /* nothing to draw */
            }
        }
        for (seed = 0; seed < 20; seed++) {
            forge_sampler *a = NULL, *b = NULL;
            forge_error ea, eb;
            int32_t ta = -1, tb = -1;
            forge_result ra, rb;
            memset(&sd, 0, sizeof sd);
            sd.temperature = 1.0f, sd.top_k = 40, sd.top_p = seed % 2 ? 0.8f : 0.0f, sd.seed = (uint64_t)seed;
            if (forge_sampler_create(&sd, n_vocab, &a, &ea) != FORGE_OK || forge_sampler_create(&sd, n_vocab, &b, &eb) != FORGE_OK ||
                !inject_logits(ctx, row, n_vocab)) {
                forge_sampler_destroy(a), forge_sampler_destroy(b);
                break;
            }
            ra = forge_context_sample(ctx, a, &ta, &ea);
            rb = forge_sampler_sample(b, row, &tb, &eb);
            equal += ra == rb && ta == tb && (ra == FORGE_OK || strcmp(ea.message, eb.message) == 0);
            forge_sampler_destroy(a), forge_sampler_destroy(b);
        }
        CHECK(equal == 20, "crafted row %d: %d of 20 draws equal to the host sampler's (result, token, message)", i, equal);
    }
    free(row);
    forge_context_destroy(ctx);
    forge_model_close(m);
}

/* A 151,936-token vocabulary (a Qwen2.5 shape): forge_context_sample (top_k 40, top_p 0.95) on the
   device against copying the logits and sampling on the host; microseconds a draw. */
static void sample_timing(const char *path) {
    static const int32_t prompt[4] = {1, 2, 3, 4};
    forge_model *m = NULL;
    forge_context *ctx = NULL;
    forge_context_desc cd;
    forge_sampler_desc sd;
    forge_sampler *s = NULL;
    forge_error e;
    int32_t token;
    uint32_t rows, n_vocab;
    int k;
    double t0, t1, t2;
    TEST_CASE("sampling cost: device candidates against the copied vocabulary");
    if (!CHECK(forge_model_open(path, NULL, &m, &e) == FORGE_OK, "open: %s", e.message)) return;
    n_vocab = forge_model_config(m)->n_vocab;
    memset(&cd, 0, sizeof cd);
    cd.n_ctx = 256;
    cd.backend = FORGE_BACKEND_GPU;
    memset(&sd, 0, sizeof sd);
    sd.temperature = 0.8f, sd.top_k = 40, sd.top_p = 0.95f, sd.seed = 1;
    if (CHECK(forge_context_create(m, &cd, &ctx, &e) == FORGE_OK, "create: %s", e.message) &&
        CHECK(forge_sampler_create(&sd, n_vocab, &s, &e) == FORGE_OK, "sampler: %s", e.message) &&
        CHECK(forge_eval(ctx, prompt, 4, &e) == FORGE_OK, "eval: %s", e.message)) {
        forge_context_sample(ctx, s, &token, &e); /* warm-up */
        t0 = now_seconds();
        for (k = 0; k < 50; k++) CHECK(forge_context_sample(ctx, s, &token, &e) == FORGE_OK, "sample: %s", e.message);
        t1 = now_seconds();
        for (k = 0; k < 50; k++) {
            const float *l;
            ctx->logits_on_host = 0; /* copy again, as after every step */
            l = forge_context_logits(ctx, &rows);
            CHECK(l && forge_sampler_sample(s, l + (size_t)(rows - 1) * n_vocab, &token, &e) == FORGE_OK, "host sample");
        }
        t2 = now_seconds();
        printf("  vocabulary %u: device candidates %.1f us a draw, copy + host sampler %.1f us a draw\n", n_vocab, (t1 - t0) / 50 * 1e6,
               (t2 - t1) / 50 * 1e6);
        CHECK(ctx->n_device_samples == 51, "every draw from device candidates (%u)", ctx->n_device_samples);
    }
    forge_sampler_destroy(s);
    forge_context_destroy(ctx);
    forge_model_close(m);
}

/* The count of norms prepared by a product in the decode graph's log line (-1: no such line). */
static void prepared_log(void *user, forge_log_level level, const char *message) {
    const char *at = strstr(message, "replayed at every position (");
    (void)level;
    if (at) *(int *)user = atoi(at + strlen("replayed at every position ("));
}

/* FORGE_NORM_FUSION: with 1 every residual product whose norm after it is read only by products
   prepares that norm (two a layer in these models: after the attention output and after the FFN,
   the last one feeding the head), with 0 none does; the decode with prepared norms is checked
   against the CPU and graph against plain launches by the callers. */
static void norms_prepared(const char *dir, const char *name) {
    static const char *const modes[2] = {"0", "1"};
    char path[1024], label[256];
    forge_model *m = NULL;
    forge_error e;
    int i;
    snprintf(path, sizeof path, "%s/models/%s", dir, name);
    snprintf(label, sizeof label, "norms prepared by the products before them: %s", name);
    TEST_CASE(label);
    if (!CHECK(forge_model_open(path, NULL, &m, &e) == FORGE_OK, "open: %s", e.message)) return;
    for (i = 0; i < 2; i++) {
        forge_context *ctx = NULL;
        forge_context_desc d;
        int count = -1;
        memset(&d, 0, sizeof d);
                d.n_ctx = 64;
        d.backend = FORGE_BACKEND_GPU;
        d.log = prepared_log;
        d.log_user_data = &count;
        d.gpu_norm_fusion = modes[i][0] == '1' ? 1 : -1;
        if (CHECK(forge_context_create(m, &d, &ctx, &e) == FORGE_OK, "gpu: %s", e.message)) {
            const int want = i ? 2 * (int)forge_model_config(m)->n_layer : 0;
            CHECK(count == want, "FORGE_NORM_FUSION=%s: %d norms prepared, expected %d", modes[i], count, want);
            printf("  %-32s FORGE_NORM_FUSION=%s: %d norms prepared in the decode graph\n", name, modes[i], count);
        }
        forge_context_destroy(ctx);
    }
    forge_model_close(m);
}

/* The calling thread's current device, read through forge_hip_enter (which reports what it found). */
static int current_device(void) {
    forge_hip_scope scope;
    char message[128];
    if (forge_hip_enter(0, 0, &scope, message, sizeof message) != 0) return -1;
    forge_hip_leave(&scope);
    return scope.device;
}

/* The library leaves the calling thread's device as it found it: queries, and a context's whole life
   (create, eval, argmax, logits, destroy) on another device when there are two. */
static void device_left_as_found(const char *dir) {
    char path[512];
    forge_memory_reading r;
    forge_model *m = NULL;
    forge_context *ctx = NULL;
    forge_context_desc d;
    forge_error e;
    int before = current_device(), device;
    int32_t token = 1;
    TEST_CASE("the calling thread's current device is left as found");
    (void)forge_gpu_available();
    (void)forge_memory_query_gpu(0, &r, NULL);
    CHECK(current_device() == before, "device %d before the queries, %d after", before, current_device());
    device = forge_memory_query_gpu(1, &r, NULL) == FORGE_OK ? 1 : 0;
    if (!device) printf("  one device: the context runs on the current one\n");
    snprintf(path, sizeof path, "%s/models/tiny-llama-q4_k_m.gguf", dir);
    if (!CHECK(forge_model_open(path, NULL, &m, &e) == FORGE_OK, "open: %s", e.message)) return;
    memset(&d, 0, sizeof d);
        d.backend = FORGE_BACKEND_GPU;
    d.device = device;
    d.n_ctx = 64;
    if (CHECK(forge_context_create(m, &d, &ctx, &e) == FORGE_OK, "create on device %d: %s", device, e.message)) {
        CHECK(current_device() == before, "after create: %d, before %d", current_device(), before);
        CHECK(forge_eval(ctx, &token, 1, &e) == FORGE_OK && forge_context_argmax(ctx, &token, &e) == FORGE_OK &&
                  forge_context_logits(ctx, NULL) != NULL,
              "eval: %s", e.message);
        CHECK(current_device() == before, "after eval: %d, before %d", current_device(), before);
        forge_context_destroy(ctx);
        CHECK(current_device() == before, "after destroy: %d, before %d", current_device(), before);
    }
    forge_model_close(m);
}

int main(int argc, char **argv) {
    static const char *const fixtures[] = {"tiny-llama-f16.gguf",      "tiny-llama-q4_0.gguf",     "tiny-llama-q4_k_m.gguf",
                                           "tiny-llama-q6_k.gguf",     "tiny-llama-iq4_xs.gguf",   "tiny-qwen2-q8_0.gguf",
                                           "tiny-qwen3-q4_k_m.gguf",   "tiny-gemma-q4_k_m.gguf",   "tiny-gemma2-f16.gguf",
                                           "tiny-gemma3-q4_k_m.gguf",  "tiny-phi3-q4_k_m.gguf",    "tiny-llama-moe-q4_k_m.gguf",
                                           "tiny-qwen2moe-q4_k_m.gguf", "tiny-qwen3moe-q4_k_m.gguf", "tiny-glm4-q4_k_m.gguf",
                                           "ext-llama2-tiny-random.gguf"};
    size_t i;
    if (argc < 2) {
        fprintf(stderr, "usage: %s FIXTURES_DIR [BIG_MODEL.gguf]\n", argv[0]);
        return 2;
    }
    TEST_CASE("a GPU answers");
    if (!CHECK(forge_gpu_available(), "no GPU")) return test_summary();
    device_left_as_found(argv[1]);
    for (i = 0; i < sizeof fixtures / sizeof fixtures[0]; i++) {
        compare_fixture(argv[1], fixtures[i], FORGE_KV_F16, 0);
        if (i + 1 < sizeof fixtures / sizeof fixtures[0]) /* the last has heads of 4: no q8_0 cache */
            compare_fixture(argv[1], fixtures[i], FORGE_KV_Q8_0, 0);
    }
    /* sliding windows of 8 in batches of 1 and 3: the local layers' rows are reused as a ring */
    compare_fixture(argv[1], "tiny-gemma2-f16.gguf", FORGE_KV_F16, 1);
    compare_fixture(argv[1], "tiny-gemma3-q4_k_m.gguf", FORGE_KV_Q8_0, 3);
    compare_captures(argv[1], "tiny-gemma3-q4_k_m.gguf");
    compare_captures(argv[1], "tiny-qwen2moe-q4_k_m.gguf");
    compare_patterns(argv[1], "tiny-gemma2-f16.gguf", 0); /* a sliding window and a soft-cap */
    compare_patterns(argv[1], "tiny-llama-q4_k_m.gguf", 2);
    /* the decode graph: rings of sliding windows in small batches, soft-caps, MoE, q8_0, split attention */
    graph_vs_plain(argv[1], "tiny-gemma3-f16.gguf", FORGE_KV_F16, 3, 64, 8, 48);
    graph_vs_plain(argv[1], "tiny-gemma3-f16.gguf", FORGE_KV_Q8_0, 1, 64, 5, 50);
    graph_vs_plain(argv[1], "tiny-gemma2-f16.gguf", FORGE_KV_F16, 1, 64, 8, 48);
    graph_vs_plain(argv[1], "tiny-llama-f16.gguf", FORGE_KV_F16, 0, 64, 8, 48);
    graph_vs_plain(argv[1], "tiny-llama-f16.gguf", FORGE_KV_F16, 0, 1024, 500, 200);
    graph_vs_plain(argv[1], "tiny-qwen2-q8_0.gguf", FORGE_KV_Q8_0, 0, 2048, 250, 300);
    graph_vs_plain(argv[1], "tiny-qwen3moe-q4_k_m.gguf", FORGE_KV_F16, 0, 64, 8, 40);
    graph_vs_plain(argv[1], "tiny-glm4-q4_k_m.gguf", FORGE_KV_F16, 0, 64, 8, 40);
    for (i = 0; i + 1 < sizeof fixtures / sizeof fixtures[0]; i++) decode_vs_reference(argv[1], fixtures[i]);
    graph_vs_plain(argv[1], "tiny-llama-q4_k_m.gguf", FORGE_KV_F16, 0, 256, 20, 200);
    /* one graph for each band of positions (the attention's blocks sized by the span): decode across
       the bands' ends at 128 (above) and 8192 positions */
    graph_vs_plain(argv[1], "tiny-llama-q4_k_m.gguf", FORGE_KV_F16, 0, 8400, 8150, 100);
    graph_vs_plain(argv[1], "tiny-gemma-q4_k_m.gguf", FORGE_KV_F16, 0, 64, 8, 40);
    /* norms prepared by the residual products (the speed rule leaves these small models to the
       norm launch; FORGE_NORM_FUSION=1 takes the path wherever the shapes allow) */
    norms_prepared(argv[1], "tiny-llama-q4_k_m.gguf");
    norms_prepared(argv[1], "tiny-qwen2-q8_0.gguf");
    norms_prepared(argv[1], "tiny-phi3-q4_k_m.gguf");
    norms_prepared(argv[1], "tiny-gemma-q4_k_m.gguf");
    test_norm_fusion = 1;
    compare_fixture(argv[1], "tiny-gemma-q4_k_m.gguf", FORGE_KV_F16, 0);
    compare_fixture(argv[1], "tiny-llama-q4_k_m.gguf", FORGE_KV_F16, 0);
    compare_fixture(argv[1], "tiny-llama-q4_0.gguf", FORGE_KV_Q8_0, 0);
    compare_fixture(argv[1], "tiny-qwen2-q8_0.gguf", FORGE_KV_F16, 0);
    compare_fixture(argv[1], "tiny-phi3-q4_k_m.gguf", FORGE_KV_F16, 0);
    graph_vs_plain(argv[1], "tiny-llama-q4_k_m.gguf", FORGE_KV_F16, 0, 256, 20, 200);
    graph_vs_plain(argv[1], "tiny-qwen2-q8_0.gguf", FORGE_KV_Q8_0, 0, 256, 20, 100);
    test_norm_fusion = 0;
    argmax_matches(argv[1], "tiny-llama-q4_k_m.gguf");
    generator_greedy(argv[1], "tiny-llama-q4_k_m.gguf");
    sample_on_device(argv[1], "tiny-llama-q4_k_m.gguf");
    decode_steps(argv[1], "tiny-llama-q4_k_m.gguf");
    allocations_everywhere(argv[1], "tiny-gemma3-q4_k_m.gguf");
    TEST_CASE("the memory checks' model");
    if (CHECK(argc > 2 && argv[2][0], "no model for the GPU memory checks: make GPU=nvidia test-gpu GPU_MODEL=FILE "
                                      "(forge mkmodel makes one)")) {
        memory_promises(argv[2]);
        sample_timing(argv[2]);
    }
    if (argc > 3) memory_at_depth(argv[3]);
    return test_summary();
}

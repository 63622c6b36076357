/* The long fixtures on the GPU: FIXTURES_DIR/long/ holds, for eight models, one causal sequence of
   1,536 tokens with the logits of a float64 evaluation at 56 positions (0, every 64th, and the last
   32). Each GPU path evaluates the whole sequence and its logits at those positions are held
   to the outside truth:

   - "prompt": batches of 512 tokens (products on the matrix units with f16 operands, prompt attention
     in query tiles);
   - "decode": one token a step from the first (the recorded decode graph, decode attention, and for
     Q4_0/Q8_0/Q4_K/Q6_K weights the products on 8-bit activations);
   - "decode-f32": the same with desc.gpu_no_q8 (f32 activations), on the quantized file only (the
     f16 files take no 8-bit path);
   - "prompt" with a q8_0 cache.

   Bounds: with an f16 cache, the index's tolerance against the float64 reference and its argmax
   agreement (the outer bound, made for llama.cpp); for every run, INNER times forge's own distance
   measured on an H100 (relative L2 over the 56 positions and at the worst one, the table below), so
   that a regression the outer bound lets through fails here.

   usage: test_long_gpu FIXTURES_DIR */
#define FORGE_IMPLEMENTATION
#include "../forge.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LONG_MAX_TOKENS 4096
#define LONG_MAX_POSITIONS 256

/* forge's distance to the float64 reference per file and path (relative L2 over the positions, the
   worst position's), measured on an H100 on 2026-11-26 (the commit that added this table); the bound is
   INNER times each. The 8-bit decode products of the quantized file stand 150x further than its f32
   ones, still a third of the index's tolerance. */
#define INNER 2.0
static const struct {
    const char *file, *path;
    double rel, worst;
} measured[] = {
    {"tiny-llama-f16.gguf", "prompt", 6.34e-04, 8.32e-04},
    {"tiny-llama-f16.gguf", "decode", 1.23e-04, 2.70e-04},
    {"tiny-llama-f16.gguf", "prompt/q8_0", 3.05e-03, 7.89e-03},
    {"tiny-qwen2-f16.gguf", "prompt", 5.29e-04, 8.18e-04},
    {"tiny-qwen2-f16.gguf", "decode", 9.57e-05, 2.61e-04},
    {"tiny-qwen2-f16.gguf", "prompt/q8_0", 2.27e-03, 7.23e-03},
    {"tiny-gemma2-f16.gguf", "prompt", 8.04e-04, 1.15e-03},
    {"tiny-gemma2-f16.gguf", "decode", 3.67e-04, 5.42e-04},
    {"tiny-gemma2-f16.gguf", "prompt/q8_0", 9.36e-03, 1.15e-02},
    {"tiny-gemma3-f16.gguf", "prompt", 8.95e-04, 1.17e-03},
    {"tiny-gemma3-f16.gguf", "decode", 3.98e-04, 5.16e-04},
    {"tiny-gemma3-f16.gguf", "prompt/q8_0", 1.01e-02, 1.43e-02},
    {"tiny-phi3-f16.gguf", "prompt", 4.67e-04, 6.80e-04},
    {"tiny-phi3-f16.gguf", "decode", 8.41e-05, 2.50e-04},
    {"tiny-phi3-f16.gguf", "prompt/q8_0", 2.03e-03, 6.48e-03},
    {"tiny-glm4-f16.gguf", "prompt", 5.18e-04, 7.30e-04},
    {"tiny-glm4-f16.gguf", "decode", 1.62e-04, 3.08e-04},
    {"tiny-glm4-f16.gguf", "prompt/q8_0", 4.27e-03, 6.63e-03},
    {"tiny-qwen3moe-f16.gguf", "prompt", 6.54e-04, 1.53e-03},
    {"tiny-qwen3moe-f16.gguf", "decode", 8.46e-05, 2.15e-04},
    {"tiny-qwen3moe-f16.gguf", "prompt/q8_0", 3.37e-03, 8.70e-03},
    {"tiny-llama-q4_k_m.gguf", "prompt", 8.89e-04, 1.20e-03},
    {"tiny-llama-q4_k_m.gguf", "decode", 1.91e-02, 2.40e-02},
    {"tiny-llama-q4_k_m.gguf", "decode-f32", 1.24e-04, 3.16e-04},
    {"tiny-llama-q4_k_m.gguf", "prompt/q8_0", 3.16e-03, 8.12e-03},
};

static char index_text[1 << 21];

/* Integers of the JSON array that starts at the first '[' at or after p; returns how many (-1 when
   malformed or more than capacity). */
static int read_ints(const char *p, int32_t *out, int capacity) {
    int n = 0;
    char *end;
    p = strchr(p, '[');
    if (!p) return -1;
    p++;
    for (;;) {
        long v;
        while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t' || *p == ',') p++;
        if (*p == ']') return n;
        v = strtol(p, &end, 10);
        if (end == p || n >= capacity) return -1;
        out[n++] = (int32_t)v;
        p = end;
    }
}

/* The string value of "key" in the entry [p, stop): copied into out; 0 when absent. */
static int read_string(const char *p, const char *stop, const char *key, char *out, size_t capacity) {
    char pattern[64];
    const char *at, *end;
    snprintf(pattern, sizeof pattern, "\"%s\": \"", key);
    at = strstr(p, pattern);
    if (!at || at >= stop) return 0;
    at += strlen(pattern);
    end = strchr(at, '"');
    if (!end || (size_t)(end - at) >= capacity) return 0;
    memcpy(out, at, (size_t)(end - at));
    out[end - at] = '\0';
    return 1;
}

static double read_number(const char *p, const char *stop, const char *key) {
    char pattern[64];
    const char *at;
    snprintf(pattern, sizeof pattern, "\"%s\": ", key);
    at = strstr(p, pattern);
    if (!at || at >= stop) return -1.0;
    return atof(at + strlen(pattern));
}

typedef struct long_case {
    char file[128], model[2048], reference[2048];
    int32_t tokens[LONG_MAX_TOKENS];
    int n_tokens;
    double tolerance;
    int min_agree;
} long_case;

/* Runs one path; rows receives the logits at the positions (n_positions x n_vocab, the model's
   vocabulary as the caller read it). 0 on failure. */
static int run_path(const long_case *c, const char *path, forge_kv_type kv, const int32_t *positions, int n_positions, float *rows,
                    uint32_t n_vocab) {
    forge_model *model = NULL;
    forge_context *ctx = NULL;
    forge_context_desc d;
    forge_error e;
    const int prompt = strcmp(path, "prompt") == 0;
    uint32_t n_rows = 0;
    int ok = 0, next = 0, i;
    if (!CHECK(forge_model_open(c->model, NULL, &model, &e) == FORGE_OK, "%s: %s", c->file, e.message)) return 0;
    memset(&d, 0, sizeof d);
    d.backend = FORGE_BACKEND_GPU;
    d.n_ctx = (uint32_t)c->n_tokens;
    d.n_batch = prompt ? 512 : 1;
    d.all_logits = prompt;
    d.kv_type = kv;
    d.gpu_no_q8 = strcmp(path, "decode-f32") == 0;
    if (!CHECK(forge_context_create(model, &d, &ctx, &e) == FORGE_OK, "%s %s: context: %s", c->file, path, e.message)) goto out;
    if (!CHECK(forge_model_config(model)->n_vocab == n_vocab, "%s: vocabulary of %u, %u expected", c->file,
               forge_model_config(model)->n_vocab, n_vocab))
        goto out;
    for (i = 0; i < c->n_tokens;) {
        const int n = prompt ? (c->n_tokens - i < 512 ? c->n_tokens - i : 512) : 1;
        const float *lg;
        if (!CHECK(forge_eval(ctx, c->tokens + i, (uint32_t)n, &e) == FORGE_OK, "%s %s: eval at %d: %s", c->file, path, i, e.message))
            goto out;
        lg = forge_context_logits(ctx, &n_rows);
        if (!CHECK(lg && n_rows == (uint32_t)n, "%s %s: %u rows of logits after %d tokens", c->file, path, n_rows, n)) goto out;
        while (next < n_positions && positions[next] < i + n) {
            memcpy(rows + (size_t)next * n_vocab, lg + (size_t)(positions[next] - i) * n_vocab, n_vocab * sizeof(float));
            next++;
        }
        i += n;
    }
    ok = CHECK(next == n_positions, "%s %s: %d of %d positions seen", c->file, path, next, n_positions);
out:
    forge_context_destroy(ctx);
    forge_model_close(model);
    return ok;
}

static void check_path(const long_case *c, const char *path, forge_kv_type kv, const int32_t *positions, int n_positions,
                       uint32_t n_vocab, const float *ref) {
    float *rows = (float *)malloc((size_t)n_positions * n_vocab * sizeof(float));
    double num = 0.0, den = 0.0, worst = 0.0, rel;
    int agree = 0, p, found = 0;
    size_t k;
    char label[64];
    snprintf(label, sizeof label, "%s%s", path, kv == FORGE_KV_F16 ? "" : "/q8_0");
    if (!CHECK(rows != NULL, "out of host memory")) return;
    if (!run_path(c, path, kv, positions, n_positions, rows, n_vocab)) {
        free(rows);
        return;
    }
    for (p = 0; p < n_positions; p++) {
        const float *g = rows + (size_t)p * n_vocab, *r = ref + (size_t)p * n_vocab;
        double pn = 0.0, pd = 0.0;
        uint32_t v, gb = 0, rb = 0;
        for (v = 0; v < n_vocab; v++) {
            const double diff = (double)g[v] - r[v];
            pn += diff * diff, pd += (double)r[v] * r[v];
            if (g[v] > g[gb]) gb = v;
            if (r[v] > r[rb]) rb = v;
        }
        num += pn, den += pd;
        if (pd > 0 && sqrt(pn / pd) > worst) worst = sqrt(pn / pd);
        agree += gb == rb;
    }
    rel = sqrt(num / den);
    printf("  %-26s %-12s rel L2 %.2e, worst position %.2e, argmax %d/%d\n", c->file, label, rel, worst, agree, n_positions);
    if (kv == FORGE_KV_F16)
        CHECK(rel <= c->tolerance && agree >= c->min_agree, "%s %s: rel L2 %.3e (tolerance %.3e), argmax %d of %d (need %d)", c->file,
              label, rel, c->tolerance, agree, n_positions, c->min_agree);
    for (k = 0; k < sizeof measured / sizeof measured[0]; k++)
        if (strcmp(measured[k].file, c->file) == 0 && strcmp(measured[k].path, label) == 0) {
            found = 1;
            CHECK(rel <= INNER * measured[k].rel && worst <= INNER * measured[k].worst,
                  "%s %s: inner bound: rel L2 %.3e (bound %.3e), worst %.3e (bound %.3e)", c->file, label, rel, INNER * measured[k].rel,
                  worst, INNER * measured[k].worst);
        }
    CHECK(found, "%s %s: no measured distance in the table", c->file, label);
    free(rows);
}

int main(int argc, char **argv) {
    static long_case c;
    static int32_t positions[LONG_MAX_POSITIONS];
    char path[1024];
    const char *at, *files;
    int n_positions, n_cases = 0;
    size_t n;
    FILE *f;
    if (argc != 2) {
        fprintf(stderr, "usage: %s FIXTURES_DIR\n", argv[0]);
        return 2;
    }
    TEST_CASE("long/index.json");
    if (!CHECK(forge_gpu_available(), "no GPU")) return test_summary();
    snprintf(path, sizeof path, "%s/long/index.json", argv[1]);
    f = fopen(path, "rb");
    if (!CHECK(f != NULL, "cannot open %s", path)) return test_summary();
    n = fread(index_text, 1, sizeof index_text - 1, f);
    fclose(f);
    index_text[n] = '\0';
    at = strstr(index_text, "\"positions\":");
    n_positions = at ? read_ints(at, positions, LONG_MAX_POSITIONS) : -1;
    files = strstr(index_text, "\"files\":");
    if (!CHECK(n_positions > 0 && files, "%s: no positions or files", path)) return test_summary();

    TEST_CASE("long sequences on the GPU against the float64 reference");
    for (at = strchr(files, '{') + 1;;) { /* "name": { ... } entries; an entry holds no braces of its own */
        const char *name = strchr(at, '"'), *open, *stop;
        float *ref;
        char model_rel[512], ref_name[512];
        size_t got = 0, want;
        uint32_t n_vocab;
        if (!name || (strchr(at, '}') && strchr(at, '}') < name)) break;
        open = strchr(name, '{');
        stop = open ? strchr(open, '}') : NULL;
        if (!CHECK(open && stop && (size_t)(strchr(name + 1, '"') - name - 1) < sizeof c.file, "%s: malformed entry", path)) break;
        memcpy(c.file, name + 1, (size_t)(strchr(name + 1, '"') - name - 1));
        c.file[strchr(name + 1, '"') - name - 1] = '\0';
        c.n_tokens = read_ints(strstr(open, "\"tokens\":"), c.tokens, LONG_MAX_TOKENS);
        c.tolerance = read_number(open, stop, "tolerance_rel_l2_vs_reference");
        c.min_agree = (int)read_number(open, stop, "min_argmax_agree_vs_reference");
        if (!CHECK(read_string(open, stop, "model", model_rel, sizeof model_rel) &&
                       read_string(open, stop, "reference_logits", ref_name, sizeof ref_name) && c.n_tokens > 0 && c.tolerance > 0 &&
                       c.min_agree > 0,
                   "%s: entry incomplete", c.file))
            break;
        snprintf(c.reference, sizeof c.reference, "%.1000s/long/%s", argv[1], ref_name);
        snprintf(c.model, sizeof c.model, "%.1000s/long/%s", argv[1], model_rel);
        n_cases++;
        at = stop + 1;
        { /* the reference: n_positions rows of the model's vocabulary, float32 */
            forge_model *m = NULL;
            forge_error e;
            if (!CHECK(forge_model_open(c.model, NULL, &m, &e) == FORGE_OK, "%s: %s", c.file, e.message)) continue;
            n_vocab = forge_model_config(m)->n_vocab;
            want = (size_t)n_positions * n_vocab;
            forge_model_close(m);
        }
        ref = (float *)malloc(want * sizeof(float));
        f = fopen(c.reference, "rb");
        if (f && ref) got = fread(ref, sizeof(float), want, f);
        if (f) fclose(f);
        if (CHECK(got == want, "%s: %zu of %zu reference values", c.reference, got, want)) {
            check_path(&c, "prompt", FORGE_KV_F16, positions, n_positions, n_vocab, ref);
            check_path(&c, "decode", FORGE_KV_F16, positions, n_positions, n_vocab, ref);
            if (strstr(c.file, "-f16.") == NULL) check_path(&c, "decode-f32", FORGE_KV_F16, positions, n_positions, n_vocab, ref);
            check_path(&c, "prompt", FORGE_KV_Q8_0, positions, n_positions, n_vocab, ref);
        }
        free(ref);
    }
    CHECK(n_cases == 8, "%d long sequences in the index, 8 expected", n_cases);
    return test_summary();
}

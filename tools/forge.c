/* forge: the command-line tool around forge.h.

   forge info FILE [--json]        what a GGUF file holds and the configuration forge derives from it
   forge plan FILE [options]       the memory bill and the verdict against the budget
   forge run -m FILE -p PROMPT     generate text
   forge chat -m FILE              talk with a chat model
   forge tokenize -m FILE TEXT     token ids of a text
   forge eval -m FILE --tokens ... logits of a token sequence
   forge extract -m FILE -f TEXT   hidden states of chosen layers, streamed into .npy files
   forge serve -m FILE             an OpenAI-compatible HTTP server (built where libmicrohttpd and cJSON are)

   Every command exits 0 on success and 1 on failure, with the reason on stderr. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#define _DEFAULT_SOURCE /* madvise(MADV_HUGEPAGE) in <sys/mman.h>: the copy of the CPU's weights in 2 MiB pages */
#define FORGE_IMPLEMENTATION
#include "../forge.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h> /* isatty */

/* ---- output helpers ------------------------------------------------------------------------- */

/* Writes bytes as the inside of a JSON string: escapes quotes, backslashes and control bytes, and
   replaces byte sequences that are not valid UTF-8 with U+FFFD so the output always parses. */
static void json_chars(FILE *out, const char *text, uint64_t len) {
    const unsigned char *s = (const unsigned char *)text;
    uint64_t i = 0;
    while (i < len) {
        unsigned char c = s[i];
        uint64_t n = 0, k;
        if (c == '"' || c == '\\') {
            fputc('\\', out);
            fputc(c, out);
            i++;
            continue;
        }
        if (c < 0x20) {
            if (c == '\n') fputs("\\n", out);
            else if (c == '\t') fputs("\\t", out);
            else if (c == '\r') fputs("\\r", out);
            else fprintf(out, "\\u%04x", c);
            i++;
            continue;
        }
        if (c < 0x80) {
            fputc(c, out);
            i++;
            continue;
        }
        if (c >= 0xc2 && c <= 0xdf) n = 1;
        else if (c >= 0xe0 && c <= 0xef) n = 2;
        else if (c >= 0xf0 && c <= 0xf4) n = 3;
        if (n == 0 || i + n >= len) { /* not a lead byte, or the sequence runs past the end */
            fputs("\\ufffd", out);
            i++;
            continue;
        }
        for (k = 1; k <= n; k++)
            if ((s[i + k] & 0xc0) != 0x80) break;
        /* reject overlong three-byte forms, surrogates and values above U+10FFFF */
        if (k <= n || (c == 0xe0 && s[i + 1] < 0xa0) || (c == 0xed && s[i + 1] > 0x9f) ||
            (c == 0xf0 && s[i + 1] < 0x90) || (c == 0xf4 && s[i + 1] > 0x8f)) {
            fputs("\\ufffd", out);
            i++;
            continue;
        }
        fwrite(s + i, 1, (size_t)(n + 1), out);
        i += n + 1;
    }
}

static void json_str(FILE *out, const char *text, uint64_t len) {
    fputc('"', out);
    json_chars(out, text, len);
    fputc('"', out);
}

static void json_cstr(FILE *out, const char *text) { json_str(out, text, strlen(text)); }

/* JSON has no NaN or infinity: they become null. 9 digits restore any float32, 17 any float64. */
static void json_number(FILE *out, double v, int digits) {
    if (isnan(v) || isinf(v)) fputs("null", out);
    else fprintf(out, "%.*g", digits, v);
}

static void json_float(FILE *out, double v) { json_number(out, v, 9); }

/* Text mode shows strings on one line, escaped and cut. */
static void text_str(FILE *out, forge_gguf_str s, uint64_t max_len) {
    uint64_t i, n = s.len < max_len ? s.len : max_len;
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c == '\n') fputs("\\n", out);
        else if (c < 0x20 || c == 0x7f) fprintf(out, "\\x%02x", c);
        else fputc(c, out);
    }
    if (s.len > max_len) fprintf(out, "... (%llu bytes)", (unsigned long long)s.len);
}

static void human_bytes(char *buf, size_t size, uint64_t bytes) {
    if (bytes >= (1ull << 30)) snprintf(buf, size, "%.2f GiB", (double)bytes / (double)(1ull << 30));
    else if (bytes >= (1ull << 20)) snprintf(buf, size, "%.2f MiB", (double)bytes / (double)(1ull << 20));
    else if (bytes >= (1ull << 10)) snprintf(buf, size, "%.2f KiB", (double)bytes / (double)(1ull << 10));
    else snprintf(buf, size, "%llu B", (unsigned long long)bytes);
}

/* ---- forge info ----------------------------------------------------------------------------- */

typedef struct type_total {
    uint64_t tensors, elements, bytes;
} type_total;

static void print_scalar(FILE *out, const forge_gguf_kv *kv, uint64_t i, int json) {
    forge_gguf_type t = kv->elem_type;
    int64_t iv;
    double fv;
    if (t == FORGE_GGUF_STRING) {
        if (json) json_str(out, kv->strs[i].ptr, kv->strs[i].len);
        else text_str(out, kv->strs[i], 120);
    } else if (t == FORGE_GGUF_BOOL) {
        fputs(kv->data[i] ? "true" : "false", out);
    } else if (t == FORGE_GGUF_FLOAT32 || t == FORGE_GGUF_FLOAT64) {
        if (kv->type == FORGE_GGUF_ARRAY) forge_gguf_kv_float_at(kv, i, &fv, NULL);
        else forge_gguf_kv_float(kv, &fv, NULL);
        json_number(out, fv, t == FORGE_GGUF_FLOAT64 ? 17 : 9);
    } else if (t == FORGE_GGUF_UINT64) {
        /* uint64 may exceed int64: print the raw value */
        const uint8_t *p = kv->data + 8 * i;
        uint64_t u = 0;
        int b;
        for (b = 7; b >= 0; b--) u = (u << 8) | p[b];
        fprintf(out, "%llu", (unsigned long long)u);
    } else {
        forge_result r = kv->type == FORGE_GGUF_ARRAY ? forge_gguf_kv_int_at(kv, i, &iv, NULL) : forge_gguf_kv_int(kv, &iv, NULL);
        if (r) iv = 0;
        fprintf(out, "%lld", (long long)iv);
    }
}

static const char *token_text(const forge_gguf *g, int32_t id, uint64_t *len) {
    const forge_gguf_kv *tokens = forge_gguf_find_kv(g, "tokenizer.ggml.tokens");
    *len = 0;
    if (id < 0 || !tokens || tokens->elem_type != FORGE_GGUF_STRING || tokens->type != FORGE_GGUF_ARRAY ||
        (uint64_t)id >= tokens->count)
        return "";
    *len = tokens->strs[id].len;
    return tokens->strs[id].ptr;
}

static void print_config_json(FILE *out, const forge_gguf *g, const forge_config *c) {
    const char *ft = forge_file_type_name(c->file_type);
    uint64_t len;
    const char *text;
    fprintf(out, "{\"arch\": ");
    json_cstr(out, c->arch_name);
    fprintf(out, ", \"file_type\": ");
    if (c->file_type == UINT32_MAX) fputs("null", out);
    else fprintf(out, "%u", c->file_type);
    fprintf(out, ", \"file_type_name\": ");
    if (ft) json_cstr(out, ft);
    else fputs("null", out);
    fprintf(out,
            ", \"n_vocab\": %u, \"n_ctx_train\": %u, \"n_embd\": %u, \"n_layer\": %u, \"n_head\": %u, \"n_head_kv\": %u"
            ", \"n_ff\": %u, \"head_dim\": %u, \"head_dim_v\": %u, \"n_rot\": %u, \"rope_type\": %d",
            c->n_vocab, c->n_ctx_train, c->n_embd, c->n_layer, c->n_head, c->n_head_kv, c->n_ff, c->head_dim, c->head_dim_v,
            c->n_rot, (int)c->rope_type);
    fprintf(out, ", \"rope_freq_base\": ");
    json_float(out, c->rope_freq_base);
    fprintf(out, ", \"rope_freq_scale\": ");
    json_float(out, c->rope_freq_scale);
    fprintf(out, ", \"rope_freq_base_swa\": ");
    json_float(out, c->rope_freq_base_swa);
    fprintf(out, ", \"rope_freq_scale_swa\": ");
    json_float(out, c->rope_freq_scale_swa);
    fprintf(out, ", \"attn_scale\": ");
    json_float(out, c->attn_scale);
    fprintf(out, ", \"rms_eps\": ");
    json_float(out, c->rms_eps);
    fprintf(out,
            ", \"n_expert\": %u, \"n_expert_used\": %u, \"n_ff_exp\": %u, \"n_ff_shexp\": %u, \"n_swa\": %u, \"swa_pattern\": %u",
            c->n_expert, c->n_expert_used, c->n_ff_exp, c->n_ff_shexp, c->n_swa, c->swa_pattern);
    fprintf(out, ", \"attn_softcap\": ");
    json_float(out, c->attn_softcap);
    fprintf(out, ", \"final_softcap\": ");
    json_float(out, c->final_softcap);
    fprintf(out, ", \"embd_scale\": ");
    json_float(out, c->embd_scale);
    fprintf(out,
            ", \"tied_output\": %s, \"has_rope_freqs\": %s, \"has_qkv_bias\": %s, \"has_qk_norm\": %s, \"has_post_norms\": %s"
            ", \"fused_qkv\": %s, \"fused_gate_up\": %s, \"vocab_type\": ",
            c->tied_output ? "true" : "false", c->has_rope_freqs ? "true" : "false", c->has_qkv_bias ? "true" : "false",
            c->has_qk_norm ? "true" : "false", c->has_post_norms ? "true" : "false", c->fused_qkv ? "true" : "false",
            c->fused_gate_up ? "true" : "false");
    json_cstr(out, forge_vocab_type_name(c->vocab_type));
    fprintf(out, ", \"bos_id\": %d, \"bos_text\": ", (int)c->bos_id);
    text = token_text(g, c->bos_id, &len);
    json_str(out, text, len);
    fprintf(out, ", \"eos_id\": %d, \"eos_text\": ", (int)c->eos_id);
    text = token_text(g, c->eos_id, &len);
    json_str(out, text, len);
    fprintf(out, ", \"eot_id\": %d, \"unk_id\": %d, \"pad_id\": %d, \"add_bos\": %s", (int)c->eot_id, (int)c->unk_id,
            (int)c->pad_id, c->add_bos ? "true" : "false");
    {
        uint32_t il;
        fprintf(out, ", \"layer_is_swa\": [");
        for (il = 0; il < c->n_layer; il++) fprintf(out, "%s%s", il ? ", " : "", c->layer_is_swa[il] ? "true" : "false");
        fprintf(out, "]");
    }
    fputc('}', out);
}

static void print_config_text(FILE *out, const forge_gguf *g, const forge_config *c) {
    const char *ft = forge_file_type_name(c->file_type);
    uint64_t len;
    const char *text;
    fprintf(out, "config\n");
    fprintf(out, "  arch %s, file type %s\n", c->arch_name, ft ? ft : "unknown");
    fprintf(out, "  layers %u, n_embd %u, n_ff %u, vocab %u, context %u\n", c->n_layer, c->n_embd, c->n_ff, c->n_vocab,
            c->n_ctx_train);
    fprintf(out, "  heads %u, kv heads %u, head dim %u (v %u), rotary dims %u (%s), rope base %g, rope scale %g\n",
            c->n_head, c->n_head_kv, c->head_dim, c->head_dim_v, c->n_rot, c->rope_type == FORGE_ROPE_NEOX ? "neox" : "norm",
            (double)c->rope_freq_base, (double)c->rope_freq_scale);
    fprintf(out, "  rms eps %g, output %s%s%s%s%s\n", (double)c->rms_eps, c->tied_output ? "tied to token_embd" : "own tensor",
            c->has_qkv_bias ? ", qkv bias" : "", c->has_qk_norm ? ", q/k norm" : "", c->has_post_norms ? ", post norms" : "",
            c->has_rope_freqs ? ", rope_freqs" : "");
    if (c->n_expert)
        fprintf(out, "  experts %u (%u used), expert ff %u, shared expert ff %u\n", c->n_expert, c->n_expert_used,
                c->n_ff_exp, c->n_ff_shexp);
    if (c->n_swa) {
        uint32_t il, local = 0;
        for (il = 0; il < c->n_layer; il++) local += c->layer_is_swa[il] != 0;
        fprintf(out, "  sliding window %u on %u of %u layers, local rope base %g\n", c->n_swa, local, c->n_layer,
                (double)c->rope_freq_base_swa);
    }
    if (c->attn_softcap > 0 || c->final_softcap > 0)
        fprintf(out, "  soft-caps: attention %g, final %g\n", (double)c->attn_softcap, (double)c->final_softcap);
    text = token_text(g, c->bos_id, &len);
    fprintf(out, "  vocab %s, bos %d '%.*s'", forge_vocab_type_name(c->vocab_type), (int)c->bos_id, (int)len, text);
    text = token_text(g, c->eos_id, &len);
    fprintf(out, ", eos %d '%.*s', add bos %s\n", (int)c->eos_id, (int)len, text, c->add_bos ? "yes" : "no");
}

#define INFO_USAGE \
    "usage: forge info FILE [--json]\n" \
    "  what a GGUF file holds: metadata, the configuration forge derives from it, the tensor table and totals;\n" \
    "  exit 1 when the file is neither a model nor a vocabulary forge can use\n" \
    "  --json                one JSON object instead of text\n" \
    "  -h, --help            this text\n"

static int wants_help(int argc, char **argv);
static int usage_error(const char *command, const char *usage);

static int cmd_info(int argc, char **argv) {
    const char *path = NULL;
    int json = 0, i, config_ok = 0, vocab_only, model_ok = 1;
    forge_file file;
    forge_gguf *g = NULL;
    forge_config *config;
    forge_error err, config_err, model_err;
    forge_result r;
    type_total totals[FORGE_TYPE_ID_LIMIT];
    uint64_t total_bytes = 0, n;
    FILE *out = stdout;

    if (wants_help(argc, argv)) {
        fputs(INFO_USAGE, stdout);
        return 0;
    }
    for (i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) json = 1;
        else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "forge info: unknown option '%s'\n", argv[i]);
            return usage_error("info", INFO_USAGE);
        } else if (!path) path = argv[i];
        else {
            fprintf(stderr, "forge info: one file at a time ('%s' and '%s')\n", path, argv[i]);
            return 1;
        }
    }
    if (!path) {
        return usage_error("info", INFO_USAGE);
    }
    if ((r = forge_file_open(path, NULL, &file, &err))) {
        fprintf(stderr, "forge info: %s\n", err.message);
        return 1;
    }
    if ((r = forge_gguf_parse(file.bytes, (size_t)file.size, NULL, &g, &err))) {
        fprintf(stderr, "forge info: %s: %s (%s)\n", path, err.message, forge_result_name(r));
        forge_file_close(&file);
        return 1;
    }
    config = (forge_config *)malloc(sizeof *config);
    if (!config) {
        fprintf(stderr, "forge info: out of memory\n");
        forge_gguf_free(g);
        forge_file_close(&file);
        return 1;
    }
    vocab_only = forge_gguf_tensor_count(g) == 0;
    config_err.result = FORGE_OK;
    config_err.message[0] = 0;
    if (!vocab_only) {
        /* what every other verb does: the configuration, then the model (tensors, their shapes, every
           one read by the schedule); info shows what it can and fails where they would */
        forge_model *model = NULL;
        config_ok = forge_config_derive(g, config, &config_err) == FORGE_OK;
        if (config_ok && forge_model_from_memory(file.bytes, (size_t)file.size, NULL, &model, &model_err) != FORGE_OK) model_ok = 0;
        forge_model_close(model);
    } else { /* no tensors: usable only as a vocabulary */
        forge_tokenizer *tok = NULL;
        if (forge_tokenizer_create(g, NULL, &tok, &model_err) != FORGE_OK) model_ok = 0;
        forge_tokenizer_destroy(tok);
    }

    memset(totals, 0, sizeof totals);
    n = forge_gguf_tensor_count(g);
    for (i = 0; (uint64_t)i < n; i++) {
        const forge_gguf_tensor *t = forge_gguf_tensor_at(g, (uint64_t)i);
        totals[t->type].tensors++;
        totals[t->type].elements += t->n_elements;
        totals[t->type].bytes += t->n_bytes;
        total_bytes += t->n_bytes;
    }

    if (json) {
        uint64_t k;
        int first = 1;
        fprintf(out, "{\"file\": ");
        json_cstr(out, path);
        fprintf(out, ", \"file_bytes\": %llu, \"gguf\": {\"version\": %u, \"alignment\": %llu, \"kv_count\": %llu, "
                     "\"tensor_count\": %llu, \"data_offset\": %llu},\n \"metadata\": {",
                (unsigned long long)file.size, forge_gguf_version(g), (unsigned long long)forge_gguf_alignment(g),
                (unsigned long long)forge_gguf_kv_count(g), (unsigned long long)n,
                (unsigned long long)forge_gguf_data_offset(g));
        for (k = 0; k < forge_gguf_kv_count(g); k++) {
            const forge_gguf_kv *kv = forge_gguf_kv_at(g, k);
            fprintf(out, "%s\n  ", k ? "," : "");
            json_str(out, kv->key.ptr, kv->key.len);
            fprintf(out, ": ");
            if (kv->type == FORGE_GGUF_ARRAY)
                fprintf(out, "{\"type\": \"array\", \"elem_type\": \"%s\", \"count\": %llu}",
                        forge_gguf_type_name(kv->elem_type), (unsigned long long)kv->count);
            else print_scalar(out, kv, 0, 1);
        }
        fprintf(out, "},\n \"vocab_only\": %s,\n \"config\": ", vocab_only ? "true" : "false");
        if (config_ok) print_config_json(out, g, config);
        else fputs("null", out);
        fprintf(out, ",\n \"config_error\": ");
        if (config_err.result) json_cstr(out, config_err.message);
        else fputs("null", out);
        fprintf(out, ",\n \"usable\": %s, \"refusal\": ", config_ok || vocab_only ? model_ok ? "true" : "false" : "false");
        if (config_err.result) json_cstr(out, config_err.message);
        else if (!model_ok) json_cstr(out, model_err.message);
        else fputs("null", out);
        fprintf(out, ",\n \"tensors\": [");
        for (k = 0; k < n; k++) {
            const forge_gguf_tensor *t = forge_gguf_tensor_at(g, k);
            uint32_t d;
            fprintf(out, "%s\n  {\"name\": ", k ? "," : "");
            json_str(out, t->name.ptr, t->name.len);
            fprintf(out, ", \"type\": \"%s\", \"shape\": [", forge_type_info(t->type)->name);
            for (d = 0; d < t->n_dims; d++) fprintf(out, "%s%llu", d ? ", " : "", (unsigned long long)t->ne[d]);
            fprintf(out, "], \"bytes\": %llu, \"offset\": %llu}", (unsigned long long)t->n_bytes,
                    (unsigned long long)t->offset);
        }
        fprintf(out, "],\n \"totals\": [");
        for (i = 0; i < FORGE_TYPE_ID_LIMIT; i++) {
            if (!totals[i].tensors) continue;
            fprintf(out, "%s\n  {\"type\": \"%s\", \"tensors\": %llu, \"elements\": %llu, \"bytes\": %llu}", first ? "" : ",",
                    forge_type_info((uint32_t)i)->name, (unsigned long long)totals[i].tensors,
                    (unsigned long long)totals[i].elements, (unsigned long long)totals[i].bytes);
            first = 0;
        }
        fprintf(out, "],\n \"total_bytes\": %llu}\n", (unsigned long long)total_bytes);
    } else {
        char size_text[32], bytes_text[32];
        uint64_t k;
        human_bytes(size_text, sizeof size_text, file.size);
        fprintf(out, "file      %s (%s, GGUF v%u, alignment %llu, %llu keys, %llu tensors)\n", path, size_text,
                forge_gguf_version(g), (unsigned long long)forge_gguf_alignment(g),
                (unsigned long long)forge_gguf_kv_count(g), (unsigned long long)n);
        fprintf(out, "metadata\n");
        for (k = 0; k < forge_gguf_kv_count(g); k++) {
            const forge_gguf_kv *kv = forge_gguf_kv_at(g, k);
            fprintf(out, "  ");
            text_str(out, kv->key, 120);
            fprintf(out, " = ");
            if (kv->type == FORGE_GGUF_ARRAY) {
                uint64_t e, shown = kv->count < 4 ? kv->count : 4;
                fprintf(out, "[%s x %llu:", forge_gguf_type_name(kv->elem_type), (unsigned long long)kv->count);
                for (e = 0; e < shown; e++) {
                    fputc(' ', out);
                    if (kv->elem_type == FORGE_GGUF_STRING) {
                        fputc('\'', out);
                        text_str(out, kv->strs[e], 24);
                        fputc('\'', out);
                    } else print_scalar(out, kv, e, 0);
                }
                fprintf(out, "%s]\n", kv->count > shown ? " ..." : "");
            } else {
                print_scalar(out, kv, 0, 0);
                fputc('\n', out);
            }
        }
        if (vocab_only && model_ok) fprintf(out, "config\n  vocabulary-only file: no tensors, no model configuration\n");
        else if (vocab_only) fprintf(out, "config\n  no tensors, and not a vocabulary: %s\n", model_err.message);
        else if (config_ok) print_config_text(out, g, config);
        else fprintf(out, "config\n  not derivable: %s\n", config_err.message);
        if (config_ok && !model_ok) fprintf(out, "  not usable as a model: %s\n", model_err.message);
        fprintf(out, "tensors\n  %-40s %-7s %-26s %12s\n", "name", "type", "shape", "bytes");
        for (k = 0; k < n; k++) {
            const forge_gguf_tensor *t = forge_gguf_tensor_at(g, k);
            char shape[96];
            int used = 0;
            uint32_t d;
            for (d = 0; d < t->n_dims && used < (int)sizeof shape; d++)
                used += snprintf(shape + used, sizeof shape - (size_t)used, "%s%llu", d ? " x " : "",
                                 (unsigned long long)t->ne[d]);
            fprintf(out, "  %-40.*s %-7s %-26s %12llu\n", (int)(t->name.len < 120 ? t->name.len : 120), t->name.ptr,
                    forge_type_info(t->type)->name, shape, (unsigned long long)t->n_bytes);
        }
        fprintf(out, "totals\n  %-7s %8s %14s %14s\n", "type", "tensors", "elements", "bytes");
        for (i = 0; i < FORGE_TYPE_ID_LIMIT; i++) {
            if (!totals[i].tensors) continue;
            human_bytes(bytes_text, sizeof bytes_text, totals[i].bytes);
            fprintf(out, "  %-7s %8llu %14llu %14s\n", forge_type_info((uint32_t)i)->name,
                    (unsigned long long)totals[i].tensors, (unsigned long long)totals[i].elements, bytes_text);
        }
        human_bytes(bytes_text, sizeof bytes_text, total_bytes);
        fprintf(out, "  %-7s %8llu %14s %14s\n", "all", (unsigned long long)n, "", bytes_text);
    }
    if (!config_ok && !vocab_only)
        fprintf(stderr, "forge info: %s: %s (%s)\n", path, config_err.message, forge_result_name(config_err.result));
    else if (!model_ok)
        fprintf(stderr, "forge info: %s: %s (%s)\n", path, model_err.message, forge_result_name(model_err.result));
    free(config);
    forge_gguf_free(g);
    forge_file_close(&file);
    if (fflush(out) != 0 || ferror(out)) {
        fprintf(stderr, "forge info: could not write the output\n");
        return 1;
    }
    return (config_ok || vocab_only) && model_ok ? 0 : 1;
}

/* ---- shared option parsing -------------------------------------------------------------------- */

/* Every numeric flag is read here, whole and strictly (no sign where none is allowed, no trailing
   text, no NaN, nothing out of range), and a refusal names the flag, the text and the range. */
static int parse_uint_in(const char *text, const char *flag, uint64_t lo, uint64_t hi, uint64_t *out) {
    char *end = NULL;
    unsigned long long v = 0;
    errno = 0;
    if (text[0] >= '0' && text[0] <= '9') v = strtoull(text, &end, 10);
    if (!end || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "forge: %s '%s' must be an integer in [%llu, %llu]\n", flag, text, (unsigned long long)lo,
                (unsigned long long)hi);
        return 0;
    }
    *out = (uint64_t)v;
    return 1;
}

static int parse_u32_in(const char *text, const char *flag, uint32_t lo, uint32_t hi, uint32_t *out) {
    uint64_t v;
    if (!parse_uint_in(text, flag, lo, hi, &v)) return 0;
    *out = (uint32_t)v;
    return 1;
}

/* A comma-separated list of at most `most` integers, each in [lo, hi]. */
static int parse_u32_list(const char *text, const char *flag, uint32_t lo, uint32_t hi, uint32_t *out, uint32_t most, uint32_t *n_out) {
    const char *item = text;
    *n_out = 0;
    for (;;) {
        char one[32];
        size_t len = strcspn(item, ",");
        if (*n_out == most) {
            fprintf(stderr, "forge: %s '%s' lists more than %u values\n", flag, text, most);
            return 0;
        }
        if (len >= sizeof one) {
            fprintf(stderr, "forge: %s '%s': each value must be an integer in [%u, %u]\n", flag, text, lo, hi);
            return 0;
        }
        snprintf(one, sizeof one, "%.*s", (int)len, item);
        if (!parse_u32_in(one, flag, lo, hi, &out[*n_out])) return 0;
        (*n_out)++;
        if (!item[len]) return 1;
        item += len + 1;
    }
}

/* A finite number in [lo, hi], or (lo, hi] when lo_open. */
static int parse_number_in(const char *text, const char *flag, double lo, double hi, int lo_open, double *out) {
    char *end = NULL;
    double v = strtod(text, &end);
    if (!end || end == text || *end || !isfinite(v) || (lo_open ? !(v > lo) : !(v >= lo)) || !(v <= hi)) {
        fprintf(stderr, "forge: %s '%s' must be a number in %c%g, %g]\n", flag, text, lo_open ? '(' : '[', lo, hi);
        return 0;
    }
    *out = v;
    return 1;
}

static int parse_fraction(const char *text, double *out) { return parse_number_in(text, "--mem-fraction", 0.0, 1.0, 1, out); }

/* A size in bytes: a number with an optional binary unit (K, M, G, T, P; "KiB", "MB" and "G" all
   mean powers of 1024), at most 1 PiB. */
static int parse_size(const char *text, const char *flag, uint64_t *out) {
    char *end = NULL;
    double v = text[0] >= '0' && text[0] <= '9' ? strtod(text, &end) : -1.0, unit = 1.0;
    if (end && *end) {
        const char *units = "KMGTP", *at = strchr(units, end[0] & ~0x20);
        if (at && end[0]) {
            unit = (double)(1ull << (10 * (at - units + 1)));
            end++;
            if (*end == 'i') end++;
            if (*end == 'B') end++;
        } else if (*end == 'B') end++;
    }
    if (!end || *end || !(v >= 0.0) || !(v * unit <= (double)(1ull << 50))) {
        fprintf(stderr, "forge: %s '%s' must be a size such as 0, 512M or 2G, at most 1P\n", flag, text);
        return 0;
    }
    *out = (uint64_t)(v * unit);
    return 1;
}

static void log_warning(void *user, forge_log_level level, const char *message) {
    (void)user;
    if (level == FORGE_LOG_WARN) fprintf(stderr, "forge: warning: %s\n", message);
}

/* Weight upload progress (the GPU streams the weights into its arena): bytes and percent on one
   stderr line, redrawn at most ten times a second, only on a terminal and without --quiet. On the
   CPU the weights stay in the mapped file and the library reports one finished call: nothing shows. */
typedef struct upload_progress {
    int shown;
    struct timespec last;
} upload_progress;

static void upload_progress_print(void *user, uint64_t done_bytes, uint64_t total_bytes) {
    upload_progress *u = (upload_progress *)user;
    struct timespec now;
    char done_text[32], total_text[32];
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (!u->shown && done_bytes >= total_bytes) return; /* finished at the first report: nothing was streamed */
    if (u->shown && done_bytes < total_bytes &&
        (double)(now.tv_sec - u->last.tv_sec) + (double)(now.tv_nsec - u->last.tv_nsec) * 1e-9 < 0.1)
        return;
    u->shown = 1, u->last = now;
    human_bytes(done_text, sizeof done_text, done_bytes);
    human_bytes(total_text, sizeof total_text, total_bytes);
    fprintf(stderr, "\rforge: uploading the weights: %s of %s (%.0f%%)%s", done_text, total_text,
            total_bytes ? 100.0 * (double)done_bytes / (double)total_bytes : 100.0, done_bytes >= total_bytes ? "\n" : "");
}

static void upload_progress_setup(forge_context_desc *desc, upload_progress *u, int quiet) {
    memset(u, 0, sizeof *u);
    if (quiet || !isatty(fileno(stderr))) return;
    desc->on_progress = upload_progress_print;
    desc->progress_user_data = u;
}

#define QUIET_HELP "  --quiet               no progress on stderr (shown only when stderr is a terminal)\n"

#define CLI_STR_(x) #x
#define CLI_STR(x) CLI_STR_(x)
#define CONTEXT_OPTIONS_HELP \
    "  -c, --ctx N           positions of the KV cache, [0, 1073741824]; 0 = min(trained context, 4096)\n" \
    "  --kv TYPE             KV cache type: f32, f16 (default), q8_0, q4_0\n" \
    "  -b, --batch N         most tokens per step, [0, 65536]; 0 = 512\n" \
    "  -t, --threads N       CPU threads, [0, " CLI_STR(FORGE_MAX_THREADS) "]; default every core; 0 = half of them\n" \
    "  --mem-fraction F      share of free memory the plan may take, in (0, 1]; default $FORGE_MEM_FRACTION or 0.70\n" \
    "  --headroom SIZE       memory kept free on top of the fraction (e.g. 512M, 2G); default 0\n" \
    "  --on-budget POLICY    refuse (default): a plan over the budget allocates nothing; warn: allocate anyway\n" \
    "  --gpu, --cpu          the backend; default the GPU when this build has one and it answers\n" \
    "  --no-copy-weights     CPU: the products read the mapped file, not a copy of their matrices in 2 MiB pages\n" \
    "  --device N            GPU index, [0, 255]\n" \
    "  --seqs N              sequence slots, each with its own KV cache, [1, " CLI_STR(FORGE_MAX_SEQ) "]; default 1\n" \
    "  --devices LIST        split the layers across these GPUs, in order (e.g. 0,1); each has its own budget\n" \
    "  --split LIST          each device's share of the layers' bytes (e.g. 0.6,0.4); default by each one's budget\n" \
    "  --split-layers LIST   each device's layers (e.g. 40,40), summing to the model's\n"

/* A command's context before its flags: forge's defaults, then the FORGE_* environment variables
   (the library reads none by itself), and every core: the CLI is the only program running it. */
static int context_defaults(forge_context_desc *desc) {
    forge_error err;
    memset(desc, 0, sizeof *desc);
    if (forge_context_desc_apply_env(desc, &err) != FORGE_OK) {
        fprintf(stderr, "forge: %s\n", err.message);
        return 0;
    }
    desc->n_threads = forge_cpu_count() < FORGE_MAX_THREADS ? forge_cpu_count() : FORGE_MAX_THREADS;
    desc->cpu_copy_weights = 1; /* the CPU's product matrices copied once into huge pages (--no-copy-weights) */
    return 1;
}

/* --devices, --split and --split-layers: lists of one length each (a split without --devices names
   GPUs 0 .. N-1). */
static int parse_split_option(const char *opt, const char *value, forge_context_desc *desc) {
    uint32_t list[FORGE_MAX_DEVICES + 1], n = 0, i;
    if (!strcmp(opt, "--split")) { /* shares: numbers above 0 */
        const char *item = value;
        for (;;) {
            char one[64];
            double share;
            size_t len = strcspn(item, ",");
            if (n == FORGE_MAX_DEVICES || len >= sizeof one) {
                fprintf(stderr, "forge: --split '%s': at most %d shares\n", value, FORGE_MAX_DEVICES);
                return 0;
            }
            snprintf(one, sizeof one, "%.*s", (int)len, item);
            if (!parse_number_in(one, "--split", 0.0, 1e9, 1, &share)) return 0;
            desc->split[n++] = share;
            if (!item[len]) break;
            item += len + 1;
        }
    } else if (!parse_u32_list(value, opt, !strcmp(opt, "--devices") ? 0 : 1, !strcmp(opt, "--devices") ? 255 : 1u << 20, list,
                               FORGE_MAX_DEVICES, &n)) {
        return 0;
    } else if (!strcmp(opt, "--devices")) {
        if (n < 2) {
            fprintf(stderr, "forge: --devices '%s': a split takes two devices or more (one device: --device N)\n", value);
            return 0;
        }
        for (i = 0; i < n; i++) desc->devices[i] = (int)list[i];
    } else {
        for (i = 0; i < n; i++) desc->split_layers[i] = list[i];
    }
    if (n < 2) {
        fprintf(stderr, "forge: %s '%s': a split takes two devices or more\n", opt, value);
        return 0;
    }
    if (desc->n_devices && desc->n_devices != n) {
        fprintf(stderr, "forge: %s '%s' lists %u devices, another option %u\n", opt, value, n, desc->n_devices);
        return 0;
    }
    if (!desc->n_devices && strcmp(opt, "--devices"))
        for (i = 0; i < n; i++) desc->devices[i] = (int)i; /* GPUs 0 .. n-1 until --devices says otherwise */
    desc->n_devices = n;
    return 1;
}

/* Options every command that makes a context shares; returns 1 if argv[*i] was one (consuming its value). */
static int context_option(int argc, char **argv, int *i, forge_context_desc *desc, int *bad) {
    const char *opt = argv[*i];
    const char *value = *i + 1 < argc ? argv[*i + 1] : NULL;
    forge_error err;
    if (!strcmp(opt, "--gpu") || !strcmp(opt, "--cpu")) {
        desc->backend = !strcmp(opt, "--gpu") ? FORGE_BACKEND_GPU : FORGE_BACKEND_CPU;
        return 1;
    }
    if (!strcmp(opt, "--no-copy-weights")) {
        desc->cpu_copy_weights = 0;
        return 1;
    }
    if (strcmp(opt, "--ctx") && strcmp(opt, "-c") && strcmp(opt, "--kv") && strcmp(opt, "--mem-fraction") &&
        strcmp(opt, "--batch") && strcmp(opt, "-b") && strcmp(opt, "--threads") && strcmp(opt, "-t") &&
        strcmp(opt, "--device") && strcmp(opt, "--headroom") && strcmp(opt, "--on-budget") && strcmp(opt, "--seqs") &&
        strcmp(opt, "--devices") && strcmp(opt, "--split") && strcmp(opt, "--split-layers"))
        return 0;
    if (!value) {
        fprintf(stderr, "forge: %s needs a value\n", opt);
        *bad = 1;
        return 1;
    }
    (*i)++;
    if (!strcmp(opt, "--ctx") || !strcmp(opt, "-c")) *bad |= !parse_u32_in(value, "--ctx", 0, 1u << 30, &desc->n_ctx);
    else if (!strcmp(opt, "--batch") || !strcmp(opt, "-b")) *bad |= !parse_u32_in(value, "--batch", 0, 65536, &desc->n_batch);
    else if (!strcmp(opt, "--threads") || !strcmp(opt, "-t"))
        *bad |= !parse_u32_in(value, "--threads", 0, FORGE_MAX_THREADS, &desc->n_threads);
    else if (!strcmp(opt, "--seqs")) *bad |= !parse_u32_in(value, "--seqs", 1, FORGE_MAX_SEQ, &desc->n_seq);
    else if (!strcmp(opt, "--mem-fraction")) *bad |= !parse_fraction(value, &desc->mem_fraction);
    else if (!strcmp(opt, "--headroom")) *bad |= !parse_size(value, "--headroom", &desc->mem_headroom_bytes);
    else if (!strcmp(opt, "--on-budget")) {
        if (!strcmp(value, "refuse")) desc->policy = FORGE_BUDGET_REFUSE;
        else if (!strcmp(value, "warn")) desc->policy = FORGE_BUDGET_WARN;
        else {
            fprintf(stderr, "forge: --on-budget '%s' must be refuse or warn\n", value);
            *bad = 1;
        }
        desc->log = log_warning;
    } else if (!strcmp(opt, "--devices") || !strcmp(opt, "--split") || !strcmp(opt, "--split-layers")) {
        *bad |= !parse_split_option(opt, value, desc);
    } else if (!strcmp(opt, "--device")) {
        uint32_t device = 0;
        *bad |= !parse_u32_in(value, "--device", 0, 255, &device);
        desc->device = (int)device;
    } else if (forge_kv_type_parse(value, &desc->kv_type, &err) != FORGE_OK) {
        fprintf(stderr, "forge: %s\n", err.message);
        *bad = 1;
    }
    return 1;
}

/* A context longer than the model was trained for is allowed (forge plans and runs it), but said. */
static void warn_ctx(const forge_model *model, uint32_t n_ctx, const char *command) {
    uint32_t trained = forge_model_config(model)->n_ctx_train;
    if (trained && n_ctx > trained)
        fprintf(stderr, "forge %s: warning: a context of %u positions is above the %u the model was trained on; "
                        "expect its output to degrade past %u\n",
                command, n_ctx, trained, trained);
}

/* A command's arguments were wrong: its usage line, and where the rest is. */
static int usage_error(const char *command, const char *usage) {
    fprintf(stderr, "%.*s  (forge %s --help lists every option)\n", (int)strcspn(usage, "\n"), usage, command);
    return 1;
}

/* -h or --help anywhere among a command's arguments */
static int wants_help(int argc, char **argv) {
    int i;
    for (i = 0; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return 1;
    return 0;
}

/* Non-finite logits mean the weights or the arithmetic went wrong (NaN weights, an infinite scale);
   every command that evaluates reports them as a failure instead of passing them on. */
static int logits_finite(const forge_context *ctx, uint32_t n_vocab, const char *command) {
    uint32_t rows = 0;
    const float *logits = forge_context_logits(ctx, &rows);
    uint64_t i, n = (uint64_t)rows * n_vocab;
    for (i = 0; logits && i < n; i++)
        if (!isfinite(logits[i])) {
            fprintf(stderr, "forge %s: the model produced a non-finite logit (%g at row %llu, token %llu): its weights or "
                            "activations hold NaN or infinite values\n",
                    command, (double)logits[i], (unsigned long long)(i / n_vocab), (unsigned long long)(i % n_vocab));
            return 0;
        }
    return 1;
}

/* ---- forge plan ----------------------------------------------------------------------------- */

#define PLAN_USAGE \
    "usage: forge plan FILE [options]\n" \
    "  the memory bill of a context and whether it fits the budget (exit 1 when it does not)\n" \
    "  --json                the plan and the verdict as one JSON object\n" CONTEXT_OPTIONS_HELP \
    "  -h, --help            this text\n"

static int cmd_plan(int argc, char **argv) {
    const char *path = NULL;
    int json = 0, bad = 0, i;
    forge_context_desc desc;
    forge_model *model;
    forge_verdict v;
    forge_error err;
    const forge_plan *p = &v.plan;
    if (wants_help(argc, argv)) {
        fputs(PLAN_USAGE, stdout);
        return 0;
    }
    if (!context_defaults(&desc)) return 1;
    for (i = 0; i < argc; i++) {
        if (context_option(argc, argv, &i, &desc, &bad)) continue;
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "forge plan: unknown option '%s'\n", argv[i]);
            bad = 1;
        } else if (!path) path = argv[i];
        else bad = 1;
    }
    if (bad || !path) {
        return usage_error("plan", PLAN_USAGE);
    }
    if (forge_model_open(path, NULL, &model, &err) != FORGE_OK) {
        fprintf(stderr, "forge plan: %s\n", err.message);
        return 1;
    }
    warn_ctx(model, desc.n_ctx, "plan");
    if (forge_plan_check(model, &desc, &v, &err) != FORGE_OK) {
        fprintf(stderr, "forge plan: %s\n", err.message);
        forge_model_close(model);
        return 1;
    }
    if (json) {
        forge_host_memory host;
        memset(&host, 0, sizeof host);
        forge_host_memory_query(&host, NULL);
        printf("{\"file\": ");
        json_cstr(stdout, path);
        printf(", \"system\": {\"memory_total_bytes\": %llu, \"memory_available_bytes\": %llu}", (unsigned long long)host.total_bytes,
               (unsigned long long)host.available_bytes);
        printf(", \"device\": {\"name\": ");
        json_cstr(stdout, v.memory.device);
        printf(", \"arch\": ");
        json_cstr(stdout, v.memory.arch);
        printf(", \"wave_size\": %d, \"fp16\": %s, \"bf16\": %s", v.memory.wave_size, v.memory.fp16 ? "true" : "false",
               v.memory.bf16 ? "true" : "false");
        printf(", \"total_bytes\": %llu, \"free_bytes\": %llu, \"reading_adjusted\": %s}", (unsigned long long)v.memory.total_bytes,
               (unsigned long long)v.memory.free_bytes, v.memory.adjusted ? "true" : "false");
        printf(", \"n_ctx\": %u, \"n_batch\": %u, \"kv_type\": \"%s\"", p->n_ctx, p->n_batch, forge_kv_type_name(p->kv_type));
        printf(", \"n_seq\": %u, \"seq_kv_bytes\": %llu, \"seq_bytes\": %llu, \"max_seq_that_fits\": %u", p->n_seq,
               (unsigned long long)(p->kv_bytes / p->n_seq), (unsigned long long)v.seq_bytes, v.max_seq_that_fits);
        printf(", \"plan\": {\"weights_bytes\": %llu, \"kv_bytes\": %llu, \"scratch_bytes\": %llu, \"logits_bytes\": %llu, "
               "\"capture_bytes\": %llu, \"pattern_bytes\": %llu, \"reserve_bytes\": %llu, \"total_bytes\": %llu}",
               (unsigned long long)p->weights_bytes, (unsigned long long)p->kv_bytes, (unsigned long long)p->scratch_bytes,
               (unsigned long long)p->logits_bytes, (unsigned long long)p->capture_bytes, (unsigned long long)p->pattern_bytes,
               (unsigned long long)p->reserve_bytes, (unsigned long long)p->total_bytes);
        printf(", \"parts\": [");
        {
            uint32_t k;
            for (k = 0; k < p->n_parts; k++) {
                const forge_plan_part *q = &p->parts[k];
                printf("%s{\"device\": %d, \"layer_first\": %u, \"n_layers\": %u, \"weights_bytes\": %llu, \"kv_bytes\": %llu, "
                       "\"scratch_bytes\": %llu, \"logits_bytes\": %llu, \"capture_bytes\": %llu, \"reserve_bytes\": %llu, \"total_bytes\": %llu}",
                       k ? ", " : "", q->device, q->layer_first, q->n_layers, (unsigned long long)q->weights_bytes, (unsigned long long)q->kv_bytes,
                       (unsigned long long)q->scratch_bytes, (unsigned long long)q->logits_bytes, (unsigned long long)q->capture_bytes,
                       (unsigned long long)q->reserve_bytes, (unsigned long long)q->total_bytes);
            }
            printf("], \"devices\": [");
            for (k = 0; k < v.n_devices; k++) {
                printf("%s{\"device\": %d, \"name\": ", k ? ", " : "", v.devices[k].device);
                json_cstr(stdout, v.devices[k].memory.device);
                printf(", \"free_bytes\": %llu, \"plan_bytes\": %llu, \"budget_bytes\": %llu, \"fits\": %s}",
                       (unsigned long long)v.devices[k].memory.free_bytes, (unsigned long long)v.devices[k].plan_bytes,
                       (unsigned long long)v.devices[k].budget_bytes, v.devices[k].fits ? "true" : "false");
            }
            printf("]");
        }
        printf(", \"mem_fraction\": ");
        json_float(stdout, v.mem_fraction);
        printf(", \"budget_bytes\": %llu, \"fits\": %s", (unsigned long long)v.budget_bytes, v.fits ? "true" : "false");
        if (v.fits) printf(", \"max_ctx_that_fits\": null, \"kv_type_that_fits\": null");
        else {
            printf(", \"max_ctx_that_fits\": %u, \"kv_type_that_fits\": ", v.max_ctx_that_fits);
            if (v.kv_type_that_fits == FORGE_KV_DEFAULT) printf("null");
            else printf("\"%s\"", forge_kv_type_name(v.kv_type_that_fits));
        }
        printf(", \"message\": ");
        json_cstr(stdout, v.message);
        printf("}\n");
    } else {
        char a[32];
        printf("plan for %s: %u positions of %s KV cache, batches of %u tokens", path, p->n_ctx, forge_kv_type_name(p->kv_type),
               p->n_batch);
        if (p->n_seq > 1) printf(", %u sequences", p->n_seq);
        printf("\n");
        human_bytes(a, sizeof a, p->weights_bytes);  printf("  weights   %14llu  %s\n", (unsigned long long)p->weights_bytes, a);
        human_bytes(a, sizeof a, p->kv_bytes);       printf("  KV cache  %14llu  %s\n", (unsigned long long)p->kv_bytes, a);
        human_bytes(a, sizeof a, p->scratch_bytes);  printf("  scratch   %14llu  %s\n", (unsigned long long)p->scratch_bytes, a);
        human_bytes(a, sizeof a, p->logits_bytes);   printf("  logits    %14llu  %s\n", (unsigned long long)p->logits_bytes, a);
        human_bytes(a, sizeof a, p->capture_bytes);  printf("  captures  %14llu  %s\n", (unsigned long long)p->capture_bytes, a);
        human_bytes(a, sizeof a, p->reserve_bytes);  printf("  reserve   %14llu  %s\n", (unsigned long long)p->reserve_bytes, a);
        human_bytes(a, sizeof a, p->total_bytes);    printf("  total     %14llu  %s\n", (unsigned long long)p->total_bytes, a);
        if (p->n_parts > 1) {
            uint32_t k;
            for (k = 0; k < p->n_parts; k++) {
                human_bytes(a, sizeof a, p->parts[k].total_bytes);
                printf("  device %-3d%14llu  %s (layers %u-%u)\n", p->parts[k].device, (unsigned long long)p->parts[k].total_bytes, a,
                       p->parts[k].layer_first, p->parts[k].layer_first + p->parts[k].n_layers - 1);
            }
            for (k = 0; k < v.n_devices; k++) {
                human_bytes(a, sizeof a, v.devices[k].budget_bytes);
                printf("  budget %-3d%14llu  %s (%.0f%% of free memory on %s)%s\n", v.devices[k].device, (unsigned long long)v.devices[k].budget_bytes,
                       a, v.mem_fraction * 100.0, v.devices[k].memory.device, v.devices[k].fits ? "" : ": short");
            }
        } else {
            human_bytes(a, sizeof a, v.budget_bytes);
            printf("  budget    %14llu  %s (%.0f%% of free memory on %s)\n", (unsigned long long)v.budget_bytes, a,
                   v.mem_fraction * 100.0, v.memory.device);
        }
        human_bytes(a, sizeof a, v.seq_bytes);
        printf("  sequences %14u  up to %u fit; one more costs %llu bytes (%s)\n", p->n_seq, v.max_seq_that_fits,
               (unsigned long long)v.seq_bytes, a);
        printf("%s: %s\n", v.fits ? "fits" : "does not fit", v.message);
    }
    if (!v.fits) fprintf(stderr, "forge plan: %s\n", v.message);
    forge_model_close(model);
    return v.fits ? 0 : 1;
}

/* A comma-separated list of token ids ("1,300,301") into a new array (the caller frees *ids, on
   failure too); -1 with the reason printed after `who` when the text is not such a list. */
static int cli_parse_ids(const char *who, const char *text, int32_t **ids, size_t *n_ids) {
    const char *s = text;
    size_t cap = 0;
    *ids = NULL, *n_ids = 0;
    while (*s) {
        char *end = NULL;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v > 0x7fffffffL || (*end && *end != ',')) {
            fprintf(stderr, "%s: --tokens: '%s' is not a list of token ids\n", who, text);
            return -1;
        }
        if (*n_ids == cap) {
            int32_t *grown;
            cap = cap ? 2 * cap : 64;
            grown = (int32_t *)realloc(*ids, cap * sizeof **ids);
            if (!grown) {
                fprintf(stderr, "%s: out of memory for the token ids\n", who);
                return -1;
            }
            *ids = grown;
        }
        (*ids)[(*n_ids)++] = (int32_t)v;
        s = *end ? end + 1 : end;
    }
    return 0;
}

/* ---- forge eval ----------------------------------------------------------------------------- */

#define EVAL_USAGE \
    "usage: forge eval -m FILE --tokens IDS --logits OUT.f32 [options]\n" \
    "  the logits of every position of a token sequence, written as float32 [n_tokens][n_vocab];\n" \
    "  exit 1 when any logit is NaN or infinite\n" \
    "  -m, --model FILE      the GGUF model\n" \
    "  --tokens IDS          comma-separated token ids, each in [0, 2147483647] and below the vocabulary size\n" \
    "  --logits OUT.f32      where the logits go\n" QUIET_HELP CONTEXT_OPTIONS_HELP \
    "  -h, --help            this text\n"

static int cmd_eval(int argc, char **argv) {
    const char *path = NULL, *token_text = NULL, *out_path = NULL;
    int bad = 0, i, quiet = 0;
    upload_progress upload;
    forge_context_desc desc;
    forge_model *model = NULL;
    forge_context *ctx = NULL;
    forge_error err;
    int32_t *tokens = NULL;
    uint32_t n_tokens = 0, done = 0, n_vocab;
    FILE *out = NULL;
    int status = 1;
    if (wants_help(argc, argv)) {
        fputs(EVAL_USAGE, stdout);
        return 0;
    }
    if (!context_defaults(&desc)) return 1;
    for (i = 0; i < argc; i++) {
        if (context_option(argc, argv, &i, &desc, &bad)) continue;
        if ((!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) && i + 1 < argc) path = argv[++i];
        else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) token_text = argv[++i];
        else if (!strcmp(argv[i], "--logits") && i + 1 < argc) out_path = argv[++i];
        else if (!strcmp(argv[i], "--quiet")) quiet = 1;
        else {
            fprintf(stderr, "forge eval: unexpected '%s'\n", argv[i]);
            bad = 1;
        }
    }
    if (bad || !path || !token_text || !out_path) {
        return usage_error("eval", EVAL_USAGE);
    }
    upload_progress_setup(&desc, &upload, quiet);
    { /* the ids, comma-separated */
        size_t n = 0;
        if (cli_parse_ids("forge eval", token_text, &tokens, &n)) goto done;
        if (n > 0x7fffffffu) {
            fprintf(stderr, "forge eval: too many tokens\n");
            goto done;
        }
        n_tokens = (uint32_t)n;
    }
    if (n_tokens == 0) {
        fprintf(stderr, "forge eval: --tokens is empty\n");
        goto done;
    }
    if (forge_model_open(path, NULL, &model, &err) != FORGE_OK) {
        fprintf(stderr, "forge eval: %s\n", err.message);
        goto done;
    }
    desc.all_logits = 1;
    if (!desc.n_ctx) desc.n_ctx = n_tokens < 256 ? 256 : n_tokens;
    warn_ctx(model, desc.n_ctx, "eval");
    if (forge_context_create(model, &desc, &ctx, &err) != FORGE_OK) {
        fprintf(stderr, "forge eval: %s\n", err.message);
        goto done;
    }
    out = fopen(out_path, "wb");
    if (!out) {
        fprintf(stderr, "forge eval: cannot write '%s'\n", out_path);
        goto done;
    }
    n_vocab = forge_model_config(model)->n_vocab;
    /* one step per batch, so the logits of every position are kept */
    while (done < n_tokens) {
        uint32_t step = n_tokens - done, rows;
        const float *logits;
        if (step > forge_context_plan(ctx)->n_batch) step = forge_context_plan(ctx)->n_batch;
        if (forge_eval(ctx, tokens + done, step, &err) != FORGE_OK) {
            fprintf(stderr, "forge eval: %s\n", err.message);
            goto done;
        }
        if (!logits_finite(ctx, n_vocab, "eval")) goto done;
        logits = forge_context_logits(ctx, &rows);
        if (rows != step || fwrite(logits, sizeof(float), (size_t)rows * n_vocab, out) != (size_t)rows * n_vocab) {
            fprintf(stderr, "forge eval: could not write the logits\n");
            goto done;
        }
        done += step;
    }
    if (fclose(out) != 0) {
        out = NULL;
        fprintf(stderr, "forge eval: could not write '%s'\n", out_path);
        goto done;
    }
    out = NULL;
    fprintf(stderr, "forge eval: %u tokens, %u logits each, written to %s\n", n_tokens, n_vocab, out_path);
    status = 0;
done:
    if (out) fclose(out);
    forge_context_destroy(ctx);
    forge_model_close(model);
    free(tokens);
    return status;
}

/* ---- text generation: run, chat, tokenize ---------------------------------------------------- */

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* --monitor: long-running commands poll the memory of the device their context is on (the GPU's
   own reading, not the host's) and warn once each time its use crosses the threshold upwards. */
typedef struct cli_monitor {
    forge_monitor monitor; /* threshold 0: off */
    int gpu, device;
    double last_poll_s;
    const char *command;
} cli_monitor;

#define MONITOR_HELP "  --monitor F           warn when the device's memory in use crosses F of its total, in [0, 1]; default 0.85; 0 = off\n"

static void monitor_warn(void *user, const forge_memory_reading *reading, double used) {
    const cli_monitor *m = (const cli_monitor *)user;
    char used_text[32], total_text[32];
    human_bytes(used_text, sizeof used_text, reading->total_bytes - reading->free_bytes);
    human_bytes(total_text, sizeof total_text, reading->total_bytes);
    fprintf(stderr, "forge %s: warning: %.1f%% of the memory of %s is in use (%s of %s), above the --monitor threshold of %.3g%%\n",
            m->command, used * 100.0, reading->device, used_text, total_text, m->monitor.threshold * 100.0);
}

static void monitor_start(cli_monitor *m, double threshold, const forge_context *ctx, int device, const char *command) {
    memset(m, 0, sizeof *m);
    m->monitor.threshold = threshold;
    m->monitor.warn = monitor_warn;
    m->monitor.user_data = m;
    m->gpu = forge_context_plan(ctx)->backend == FORGE_BACKEND_GPU;
    m->device = device;
    m->last_poll_s = -1.0;
    m->command = command;
}

/* At most four readings a second: a step can be much shorter than a query. */
static void monitor_poll(cli_monitor *m) {
    forge_memory_reading reading;
    double t = now_seconds();
    if (m->monitor.threshold <= 0.0 || (m->last_poll_s >= 0.0 && t - m->last_poll_s < 0.25)) return;
    m->last_poll_s = t;
    if ((m->gpu ? forge_memory_query_gpu(m->device, &reading, NULL) : forge_memory_query_cpu(&reading, NULL)) == FORGE_OK)
        forge_monitor_poll(&m->monitor, &reading, NULL, NULL);
}

typedef struct cli_run {
    forge_model *model;
    forge_tokenizer *tok;
    forge_context *ctx;
    forge_generator *gen;
    forge_chat_format format;
    int line_open; /* the text written to stdout so far does not end with a newline */
    int weights_copied; /* the CPU's product matrices read from a copy (desc.cpu_copy_weights), not the file */
    cli_monitor monitor;
} cli_run;

static void run_close(cli_run *s) {
    forge_generator_destroy(s->gen);
    forge_context_destroy(s->ctx);
    forge_tokenizer_destroy(s->tok);
    forge_model_close(s->model);
    memset(s, 0, sizeof *s);
}

static int run_open(cli_run *s, const char *path, const forge_context_desc *desc, const forge_sampler_desc *sampler,
                        const char *command) {
    forge_error err;
    memset(s, 0, sizeof *s);
    if (forge_model_open(path, NULL, &s->model, &err) == FORGE_OK) warn_ctx(s->model, desc->n_ctx, command);
    if (!s->model || forge_tokenizer_create(forge_model_gguf(s->model), NULL, &s->tok, &err) != FORGE_OK ||
        forge_context_create(s->model, desc, &s->ctx, &err) != FORGE_OK ||
        forge_generator_create(s->ctx, s->tok, sampler, &s->gen, &err) != FORGE_OK) {
        fprintf(stderr, "forge %s: %s\n", command, err.message);
        run_close(s);
        return 0;
    }
    s->format = forge_chat_detect(forge_model_gguf(s->model));
    s->weights_copied = desc->cpu_copy_weights && forge_context_plan(s->ctx)->backend == FORGE_BACKEND_CPU;
    return 1;
}

#define SAMPLER_OPTIONS_HELP \
    "  --temp T              temperature, [0, 100]; 0 = greedy (the default)\n" \
    "  --top-k K             keep the K likeliest tokens, [0, 2147483647]; 0 = off\n" \
    "  --top-p P             nucleus mass, [0, 1]; 0 or 1 = off\n" \
    "  --min-p P             drop tokens below P times the likeliest one's probability, [0, 1]; 0 = off\n" \
    "  --repeat-penalty R    [0, 100]; 0 or 1 = off, above 1 discourages repeats\n" \
    "  --repeat-last-n N     recent tokens the penalty looks at, [0, 1048576]; 0 = 64\n" \
    "  --seed S              the sampler's seed, [0, 18446744073709551615]; -1 = a random one, printed on stderr\n"

/* Options of the sampler; returns 1 if argv[*i] was one. *random_seed is set by --seed -1. */
static int sampler_option(int argc, char **argv, int *i, forge_sampler_desc *d, int *random_seed, int *bad) {
    const char *opt = argv[*i], *value = *i + 1 < argc ? argv[*i + 1] : NULL;
    double v = 0.0;
    uint64_t n = 0;
    if (strcmp(opt, "--temp") && strcmp(opt, "--top-k") && strcmp(opt, "--top-p") && strcmp(opt, "--min-p") &&
        strcmp(opt, "--repeat-penalty") && strcmp(opt, "--repeat-last-n") && strcmp(opt, "--seed"))
        return 0;
    if (!value) {
        fprintf(stderr, "forge: %s needs a value\n", opt);
        *bad = 1;
        return 1;
    }
    (*i)++;
    if (!strcmp(opt, "--temp")) {
        if (parse_number_in(value, opt, 0.0, 100.0, 0, &v)) d->temperature = (float)v;
        else *bad = 1;
    } else if (!strcmp(opt, "--top-p") || !strcmp(opt, "--min-p")) {
        if (parse_number_in(value, opt, 0.0, 1.0, 0, &v)) *(!strcmp(opt, "--top-p") ? &d->top_p : &d->min_p) = (float)v;
        else *bad = 1;
    } else if (!strcmp(opt, "--repeat-penalty")) {
        if (parse_number_in(value, opt, 0.0, 100.0, 0, &v)) d->repeat_penalty = (float)v;
        else *bad = 1;
    } else if (!strcmp(opt, "--top-k")) {
        if (parse_uint_in(value, opt, 0, INT32_MAX, &n)) d->top_k = (int32_t)n;
        else *bad = 1;
    } else if (!strcmp(opt, "--repeat-last-n")) {
        if (parse_uint_in(value, opt, 0, 1u << 20, &n)) d->repeat_last_n = (int32_t)n;
        else *bad = 1;
    } else if (!strcmp(value, "-1")) { /* llama.cpp's habit: a random seed */
        *random_seed = 1;
    } else if (parse_uint_in(value, opt, 0, UINT64_MAX, &n)) {
        d->seed = n, *random_seed = 0;
    } else {
        fprintf(stderr, "forge: (--seed -1 picks a random seed)\n");
        *bad = 1;
    }
    return 1;
}

/* A seed for --seed -1 from the clock and the process, mixed so that close clocks give far seeds. */
static uint64_t random_seed_value(void) {
    struct timespec ts;
    uint64_t x;
    clock_gettime(CLOCK_REALTIME, &ts);
    x = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)clock() << 32);
    x ^= x >> 30, x *= 0xbf58476d1ce4e5b9ull, x ^= x >> 27, x *= 0x94d049bb133111ebull, x ^= x >> 31;
    return x;
}

/* Generates until the end of the turn or n_predict tokens (0: reads the prompt only); streams the
   text to stdout and ends it with a newline, so piped turns and the summary never share a line. */
static int generate(cli_run *s, uint32_t n_predict, uint32_t *n_prompt, uint32_t *n_generated, double *prompt_s,
                    double *gen_s, int32_t *last_token, const char *command) {
    forge_step step;
    forge_error err;
    double t0 = now_seconds(), t1 = t0;
    int reading = 1;
    const uint32_t n_vocab = forge_model_config(s->model)->n_vocab;
    *n_generated = 0;
    *last_token = -1;
    *n_prompt = 0;
    for (;;) {
        uint32_t before = forge_context_pos(s->ctx);
        monitor_poll(&s->monitor);
        if (forge_generator_step(s->gen, &step, &err) != FORGE_OK) {
            if (s->line_open) fputc('\n', stdout), s->line_open = 0;
            fprintf(stderr, "forge %s: %s\n", command, err.message);
            return 0;
        }
        if (step.token < 0) {
            *n_prompt += forge_context_pos(s->ctx) - before;
            continue;
        }
        if (reading) {
            t1 = now_seconds();
            reading = 0;
            if (!logits_finite(s->ctx, n_vocab, command)) return 0;
        }
        if (*n_generated >= n_predict) break; /* -n 0: the prompt is read, nothing is generated */
        fwrite(step.text, 1, step.text_len, stdout);
        if (step.text_len) s->line_open = step.text[step.text_len - 1] != '\n';
        fflush(stdout);
        *last_token = step.token;
        (*n_generated)++;
        if (step.done || *n_generated >= n_predict) break;
    }
    *prompt_s = t1 - t0;
    *gen_s = now_seconds() - t1;
    if (s->line_open) fputc('\n', stdout), s->line_open = 0;
    fflush(stdout);
    return logits_finite(s->ctx, n_vocab, command);
}

static void print_summary(cli_run *s, uint32_t n_prompt, uint32_t n_gen, double prompt_s, double gen_s) {
    const forge_plan *p = forge_context_plan(s->ctx);
    char total[32], arena[32];
    human_bytes(total, sizeof total, p->total_bytes);
    human_bytes(arena, sizeof arena, forge_context_arena_bytes(s->ctx));
    fprintf(stderr, "[prompt %u tokens, %.1f t/s | generation %u tokens, %.1f t/s | memory %s planned (arena %s, "
                    "weights %s)]\n",
            n_prompt, prompt_s > 0 ? n_prompt / prompt_s : 0.0, n_gen, gen_s > 0 && n_gen ? n_gen / gen_s : 0.0, total, arena,
            s->weights_copied ? "copied" : "mapped");
}

#define RUN_USAGE \
    "usage: forge run -m FILE -p PROMPT [options]\n" \
    "  generates text from a prompt and streams it to stdout (greedy unless sampling options are given);\n" \
    "  a summary line goes to stderr\n" \
    "  -m, --model FILE      the GGUF model\n" \
    "  -p, --prompt TEXT     the prompt\n" \
    "  -n, --n-predict N     most tokens to generate, [0, 1073741824]; default 256; 0 = read the prompt only\n" \
    "  --chat                send the prompt as a user turn in the model's chat format\n" \
    "  --system TEXT         a system message before it (with --chat)\n" MONITOR_HELP QUIET_HELP SAMPLER_OPTIONS_HELP CONTEXT_OPTIONS_HELP \
    "  -h, --help            this text\n"

#define CHAT_USAGE \
    "usage: forge chat -m FILE [options]\n" \
    "  talks with a chat model: each line of stdin is a user turn, each reply goes to stdout;\n" \
    "  an empty line or the end of input quits\n" \
    "  -m, --model FILE      the GGUF model\n" \
    "  -n, --n-predict N     most tokens of each reply, [0, 1073741824]; default 256\n" \
    "  --system TEXT         a system message before the first turn\n" MONITOR_HELP QUIET_HELP SAMPLER_OPTIONS_HELP CONTEXT_OPTIONS_HELP \
    "  -h, --help            this text\n"

static int cmd_run(int argc, char **argv, int chat_mode) {
    const char *path = NULL, *prompt = NULL, *system = NULL;
    int bad = 0, i, use_chat = chat_mode, status = 1, random_seed = 0, quiet = 0;
    uint32_t n_predict = 256;
    double monitor = 0.85;
    upload_progress upload;
    forge_context_desc desc;
    forge_sampler_desc sampler;
    cli_run s;
    forge_error err;
    char *text = NULL;
    const char *command = chat_mode ? "chat" : "run";
    memset(&sampler, 0, sizeof sampler);
    sampler.temperature = 0.0f;
    if (wants_help(argc, argv)) {
        fputs(chat_mode ? CHAT_USAGE : RUN_USAGE, stdout);
        return 0;
    }
    if (!context_defaults(&desc)) return 1;
    for (i = 0; i < argc; i++) {
        if (context_option(argc, argv, &i, &desc, &bad) || sampler_option(argc, argv, &i, &sampler, &random_seed, &bad))
            continue;
        if ((!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) && i + 1 < argc) path = argv[++i];
        else if (!chat_mode && (!strcmp(argv[i], "-p") || !strcmp(argv[i], "--prompt")) && i + 1 < argc) prompt = argv[++i];
        else if ((!strcmp(argv[i], "-n") || !strcmp(argv[i], "--n-predict")) && i + 1 < argc)
            bad |= !parse_u32_in(argv[++i], "-n", 0, 1u << 30, &n_predict);
        else if (!strcmp(argv[i], "--system") && i + 1 < argc) system = argv[++i];
        else if (!strcmp(argv[i], "--monitor") && i + 1 < argc) bad |= !parse_number_in(argv[++i], "--monitor", 0.0, 1.0, 0, &monitor);
        else if (!strcmp(argv[i], "--quiet")) quiet = 1;
        else if (!chat_mode && !strcmp(argv[i], "--chat")) use_chat = 1;
        else {
            fprintf(stderr, "forge %s: unexpected '%s'\n", command, argv[i]);
            bad = 1;
        }
    }
    if (bad || !path || (!chat_mode && !prompt)) {
        return usage_error(command, chat_mode ? CHAT_USAGE : RUN_USAGE);
    }
    upload_progress_setup(&desc, &upload, quiet);
    if (random_seed) {
        sampler.seed = random_seed_value();
        fprintf(stderr, "forge %s: seed %llu\n", command, (unsigned long long)sampler.seed);
    }
    if (!run_open(&s, path, &desc, &sampler, command)) return 1;
    monitor_start(&s.monitor, monitor, s.ctx, desc.device, command);
    if (!chat_mode) {
        uint32_t n_prompt, n_gen;
        double ps, gs;
        int32_t last;
        size_t len = strlen(prompt), needed = 0;
        const char *input = prompt;
        if (use_chat) {
            forge_chat_message m[2];
            size_t n = 0;
            if (system) m[n].role = "system", m[n].content = system, n++;
            m[n].role = "user", m[n].content = prompt, n++;
            forge_chat_render(s.format, m, n, 1, NULL, 0, &needed, NULL);
            text = (char *)malloc(needed + 1);
            if (!text || forge_chat_render(s.format, m, n, 1, text, needed, &len, &err) != FORGE_OK) goto done;
            input = text;
        }
        if (forge_generator_prompt(s.gen, input, len, use_chat, &err) != FORGE_OK) {
            fprintf(stderr, "forge run: %s\n", err.message);
            goto done;
        }
        if (!generate(&s, n_predict, &n_prompt, &n_gen, &ps, &gs, &last, command)) goto done;
        print_summary(&s, n_prompt, n_gen, ps, gs);
        status = 0;
    } else {
        char line[4096];
        int first = 1;
        if (s.format == FORGE_CHAT_NONE) fprintf(stderr, "forge chat: the model declares no chat format forge knows; turns are sent as plain text\n");
        fprintf(stderr, "forge chat (%s format); an empty line or end of input quits\n", forge_chat_format_name(s.format));
        for (;;) {
            forge_chat_message m[2];
            size_t n = 0, needed = 0, len = 0, offset;
            uint32_t n_prompt, n_gen;
            double ps, gs;
            int32_t last;
            fprintf(stderr, "> ");
            if (!fgets(line, sizeof line, stdin)) break;
            line[strcspn(line, "\r\n")] = 0;
            if (!line[0]) break;
            if (first && system) m[n].role = "system", m[n].content = system, n++;
            m[n].role = "user", m[n].content = line, n++;
            /* a later turn follows the end-of-turn token the model produced, which its format ends with a newline */
            offset = !first && (s.format == FORGE_CHAT_CHATML || s.format == FORGE_CHAT_GEMMA) ? 1 : 0;
            forge_chat_render(s.format, m, n, 1, NULL, 0, &needed, NULL);
            free(text);
            text = (char *)malloc(needed + offset + 1);
            if (!text) goto done;
            text[0] = '\n';
            if (forge_chat_render(s.format, m, n, 1, text + offset, needed, &len, &err) != FORGE_OK ||
                forge_generator_prompt(s.gen, text, len + offset, 1, &err) != FORGE_OK) {
                fprintf(stderr, "forge chat: %s\n", err.message);
                goto done;
            }
            if (!generate(&s, n_predict, &n_prompt, &n_gen, &ps, &gs, &last, command)) goto done;
            print_summary(&s, n_prompt, n_gen, ps, gs);
            if (last >= 0 && forge_tokenizer_is_eog(s.tok, last) && forge_generator_commit(s.gen, last, &err) != FORGE_OK) {
                fprintf(stderr, "forge chat: %s\n", err.message);
                goto done;
            }
            first = 0;
        }
        status = 0;
    }
done:
    free(text);
    run_close(&s);
    return status;
}

#define TOKENIZE_USAGE \
    "usage: forge tokenize -m FILE TEXT [options]\n" \
    "  the token ids of a text, on one line; a vocabulary-only GGUF (no tensors) is enough\n" \
    "  -m, --model FILE      the GGUF model or vocabulary\n" \
    "  --special             parse special tokens written in the text (\"<|im_start|>\")\n" \
    "  --bos, --no-bos       add the beginning-of-sequence token or not; default the model's choice\n" \
    "  --pieces              one token a line: its id and its text\n" \
    "  -h, --help            this text\n"

static int cmd_tokenize(int argc, char **argv) {
    const char *path = NULL, *text = NULL;
    int special = 0, bos = -1, pieces = 0, i, bad = 0;
    forge_file file;
    forge_gguf *g = NULL;
    forge_tokenizer *tok = NULL;
    forge_error err;
    int32_t *ids = NULL;
    size_t n = 0, k;
    int status = 1, file_open = 0;
    if (wants_help(argc, argv)) {
        fputs(TOKENIZE_USAGE, stdout);
        return 0;
    }
    for (i = 0; i < argc; i++) {
        if ((!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) && i + 1 < argc) path = argv[++i];
        else if (!strcmp(argv[i], "--special")) special = 1;
        else if (!strcmp(argv[i], "--no-bos")) bos = 0;
        else if (!strcmp(argv[i], "--bos")) bos = 1;
        else if (!strcmp(argv[i], "--pieces")) pieces = 1;
        else if (!text) text = argv[i];
        else {
            fprintf(stderr, "forge tokenize: one text at a time (quote it): unexpected '%s'\n", argv[i]);
            bad = 1;
        }
    }
    if (bad || !path || !text) return usage_error("tokenize", TOKENIZE_USAGE);
    /* the file and its tokenizer only: a vocabulary-only GGUF has no tensors for a model */
    if (forge_file_open(path, NULL, &file, &err) != FORGE_OK) {
        fprintf(stderr, "forge tokenize: %s\n", err.message);
        return 1;
    }
    file_open = 1;
    if (forge_gguf_parse(file.bytes, (size_t)file.size, NULL, &g, &err) != FORGE_OK ||
        forge_tokenizer_create(g, NULL, &tok, &err) != FORGE_OK) {
        fprintf(stderr, "forge tokenize: %s: %s\n", path, err.message);
        goto done;
    }
    if (bos < 0) bos = forge_tokenizer_add_bos(tok);
    forge_tokenize(tok, text, strlen(text), bos, special, NULL, 0, &n, NULL);
    ids = (int32_t *)malloc((n ? n : 1) * sizeof *ids);
    if (!ids || forge_tokenize(tok, text, strlen(text), bos, special, ids, n, &n, &err) != FORGE_OK) {
        fprintf(stderr, "forge tokenize: %s\n", ids ? err.message : "out of memory");
        goto done;
    }
    for (k = 0; k < n; k++) {
        if (pieces) {
            const char *piece = "";
            size_t len = 0;
            forge_token_to_piece(tok, ids[k], 1, &piece, &len, NULL);
            printf("%6d '", (int)ids[k]);
            text_str(stdout, (forge_gguf_str){piece, len}, 200);
            printf("'\n");
        } else {
            printf("%s%d", k ? " " : "", (int)ids[k]);
        }
    }
    if (!pieces) printf("\n");
    status = 0;
done:
    free(ids);
    forge_tokenizer_destroy(tok);
    forge_gguf_free(g);
    if (file_open) forge_file_close(&file);
    return status;
}

#include "mkmodel.c"
#include "extract.c"
#ifdef FORGE_SERVE
#include "serve.c"
#else
static int cmd_serve(int argc, char **argv) {
    (void)argc, (void)argv;
    fprintf(stderr, "forge serve: this forge was built without the server (the build found no libmicrohttpd or cJSON "
                    "headers: install libmicrohttpd-dev and libcjson-dev, then rebuild)\n");
    return 1;
}
#endif

/* ---- forge bench ------------------------------------------------------------------------------ */

/* Prompt processing (pp) and generation (tg) speed in the manner of llama-bench: pp = one batch of
   n_prompt tokens, tg = n_gen single-token steps, both measured after `depth` tokens already in the
   context; a warm-up run, then the median of the repetitions and their spread. Two columns
   llama-bench lacks: the bytes the plan promised and the peak the process really took (device
   memory on the GPU, the resident set on the CPU). */
#include <sys/resource.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct bench_row {
    char test[48];
    uint32_t depth;
    double median, lo, hi;
} bench_row;

static uint64_t peak_host_bytes(void) {
    struct rusage u;
    if (getrusage(RUSAGE_SELF, &u) != 0) return 0;
    return (uint64_t)u.ru_maxrss * 1024; /* Linux reports KiB */
}

/* Free memory of the context's GPUs, summed over the devices of a split (each counted once). */
static forge_result bench_gpu_free(const forge_context_desc *d, forge_memory_reading *out) {
    const uint32_t n = d->n_devices > 1 ? d->n_devices : 1;
    uint32_t i, j;
    uint64_t sum = 0;
    memset(out, 0, sizeof *out);
    for (i = 0; i < n; i++) {
        const int device = n > 1 ? d->devices[i] : d->device;
        forge_memory_reading r;
        for (j = 0; j < i && d->devices[j] != device; j++) {}
        if (j < i) continue;
        if (forge_memory_query_gpu(device, &r, NULL) != FORGE_OK) return FORGE_ERR_IO;
        sum += r.free_bytes;
    }
    out->free_bytes = sum;
    return FORGE_OK;
}

/* The peak a bench row reports. GPU: how far free device memory (of every device of a split) fell
   from before the context (the lowest reading taken); CPU: the process's peak resident set. */
static uint64_t bench_peak_bytes(int gpu, const forge_memory_reading *before, uint64_t lowest_free) {
    if (!gpu) return peak_host_bytes();
    return lowest_free <= before->free_bytes ? before->free_bytes - lowest_free : 0;
}

#define BENCH_USAGE \
    "usage: forge bench -m FILE [options]\n" \
    "  prompt (pp) and generation (tg) speed in the manner of llama-bench: a warm-up run, then the median of\n" \
    "  the repetitions and their range, with the bytes the plan promised and the peak the process took\n" \
    "  -m FILE               the GGUF model\n" \
    "  -p N                  prompt tokens of the pp test, [0, 1073741824]; default 512; 0 = no pp test\n" \
    "  -n N                  generated tokens of the tg test, [0, 1073741824]; default 128; 0 = no tg test\n" \
    "  -d LIST               depths (tokens already in the context), comma-separated, at most 16, each\n" \
    "                        [0, 1073741824]; default 0; depth + the larger of -p and -n at most 1073741824\n" \
    "  -r N                  repetitions, [1, 64]; default 5\n" \
    "  -ctk TYPE, -ctv TYPE  KV cache type (one for keys and values): f32, f16, q8_0, q4_0\n" \
    "  -o FORMAT             md (default), csv or json\n" \
    "  --seqs LIST           sequence counts, comma-separated, each [1, " CLI_STR(FORGE_MAX_SEQ) "], at most 16: the aggregate\n" \
    "                        speed of that many sequences decoded together (llama-batched-bench's way); -p and -n\n" \
    "                        are per sequence and above 0, -d does not apply, -b defaults to 512\n" \
    QUIET_HELP \
    "  (-b/--batch defaults to 2048 here, whatever -p is, as llama-bench's does)\n" CONTEXT_OPTIONS_HELP \
    "  -h, --help            this text\n"

/* Many sequences at once, in the manner of llama-batched-bench (-npp, -ntg, -npl): for each count B of
   sequences, a context of B sequences of n_prompt + n_gen positions; PP = the B prompts of n_prompt
   tokens evaluated together in steps of up to n_batch rows (sequences interleaved), TG = n_gen steps
   of one token for each sequence (fixed tokens, no sampling, as the peer's tool does); aggregate
   tokens per second over all sequences, the median of the repetitions, planned and peak bytes. */
/* The last step's logits of sequence seq can be read (on the GPU: the step is finished) and are finite,
   as every verb requires; otherwise says why and returns 0. */
static int bench_seq_logits_ok(const forge_context *ctx, uint32_t seq, uint32_t n_vocab) {
    const float *row = forge_seq_logits(ctx, seq);
    uint32_t k;
    if (!row) {
        fprintf(stderr, "forge bench: the logits of sequence %u could not be read\n", seq);
        return 0;
    }
    for (k = 0; k < n_vocab && isfinite(row[k]); k++) {
    }
    if (k < n_vocab)
        fprintf(stderr, "forge bench: the model produced a non-finite logit (%g at token %u of sequence %u): its weights or "
                        "activations hold NaN or infinite values\n",
                (double)row[k], k, seq);
    return k == n_vocab;
}

static int bench_seqs(forge_model *model, forge_context_desc desc, const uint32_t *counts, uint32_t n_counts, uint32_t n_prompt,
                      uint32_t n_gen, uint32_t reps, const char *format, const char *name, int gpu) {
    const uint32_t n_vocab = forge_model_config(model)->n_vocab;
    uint32_t ci, r, t, s;
    forge_error err;
    int32_t *tokens = NULL;
    uint32_t *seq = NULL;
    int status = 1;
    if (!strcmp(format, "md")) {
        printf("| model | backend | kv | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | planned bytes | peak bytes |\n");
        printf("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    } else if (!strcmp(format, "csv")) {
        printf("model,backend,kv,pp,tg,b,n_kv,t_pp,s_pp,t_tg,s_tg,repetitions,planned_bytes,peak_bytes\n");
    } else {
        printf("[");
    }
    for (ci = 0; ci < n_counts; ci++) {
        const uint32_t b = counts[ci];
        forge_context *ctx = NULL;
        forge_memory_reading before, now;
        uint64_t lowest_free = UINT64_MAX, peak;
        double pp_s[64], tg_s[64];
        const forge_plan *p;
        desc.n_seq = b;
        if (!desc.n_ctx) desc.n_ctx = n_prompt + n_gen;
        memset(&before, 0, sizeof before);
        if (gpu) bench_gpu_free(&desc, &before);
        if (forge_context_create(model, &desc, &ctx, &err) != FORGE_OK) goto fail;
        p = forge_context_plan(ctx);
        free(tokens), free(seq);
        tokens = (int32_t *)malloc((size_t)p->n_batch * sizeof *tokens);
        seq = (uint32_t *)malloc((size_t)p->n_batch * sizeof *seq);
        if (!tokens || !seq) {
            forge_context_destroy(ctx);
            fprintf(stderr, "forge bench: out of host memory\n");
            goto done;
        }
        for (r = 0; r <= reps; r++) { /* run 0 warms up */
            double t0;
            uint32_t rows_left = b * n_prompt, row = 0;
            forge_context_reset(ctx);
            t0 = now_seconds();
            while (rows_left) { /* every prompt, interleaved: row k of the whole is token k / b of sequence k % b */
                forge_batch batch;
                uint32_t n = rows_left < p->n_batch ? rows_left : p->n_batch;
                for (t = 0; t < n; t++, row++) seq[t] = row % b, tokens[t] = (int32_t)((row / b * 7919u + seq[t] * 31u + 13u) % n_vocab);
                batch.tokens = tokens, batch.seq = seq, batch.n_tokens = n;
                if (forge_eval_batch(ctx, &batch, &err) != FORGE_OK) goto fail_ctx;
                rows_left -= n;
            }
            if (!bench_seq_logits_ok(ctx, b - 1, n_vocab)) { /* waits for the device's last step */
                forge_context_destroy(ctx);
                goto done;
            }
            if (r) pp_s[r - 1] = now_seconds() - t0;
            t0 = now_seconds();
            for (t = 0; t < n_gen; t++) {
                forge_batch batch;
                uint32_t done_rows = 0;
                while (done_rows < b) { /* one token each; more sequences than a batch holds take several steps */
                    uint32_t n = b - done_rows < p->n_batch ? b - done_rows : p->n_batch;
                    for (s = 0; s < n; s++) seq[s] = done_rows + s, tokens[s] = (int32_t)(((t + 1) * 104729u + seq[s]) % n_vocab);
                    batch.tokens = tokens, batch.seq = seq, batch.n_tokens = n;
                    if (forge_eval_batch(ctx, &batch, &err) != FORGE_OK) goto fail_ctx;
                    done_rows += n;
                }
            }
            if (!bench_seq_logits_ok(ctx, b - 1, n_vocab)) {
                forge_context_destroy(ctx);
                goto done;
            }
            if (r) tg_s[r - 1] = now_seconds() - t0;
            if (gpu && bench_gpu_free(&desc, &now) == FORGE_OK && now.free_bytes < lowest_free) lowest_free = now.free_bytes;
        }
        qsort(pp_s, reps, sizeof pp_s[0], cmp_double);
        qsort(tg_s, reps, sizeof tg_s[0], cmp_double);
        peak = bench_peak_bytes(gpu, &before, lowest_free);
        {
            const double tpp = pp_s[reps / 2], ttg = tg_s[reps / 2];
            const char *backend = p->backend == FORGE_BACKEND_GPU ? "GPU" : "CPU";
            const uint32_t n_kv = b * (n_prompt + n_gen);
            if (!strcmp(format, "md"))
                printf("| %s | %s | %s | %u | %u | %u | %u | %.3f | %.1f | %.3f | %.1f | %llu | %llu |\n", name, backend,
                       forge_kv_type_name(p->kv_type), n_prompt, n_gen, b, n_kv, tpp, b * n_prompt / tpp, ttg, b * n_gen / ttg,
                       (unsigned long long)p->total_bytes, (unsigned long long)peak);
            else if (!strcmp(format, "csv"))
                printf("%s,%s,%s,%u,%u,%u,%u,%.4f,%.3f,%.4f,%.3f,%u,%llu,%llu\n", name, backend, forge_kv_type_name(p->kv_type), n_prompt,
                       n_gen, b, n_kv, tpp, b * n_prompt / tpp, ttg, b * n_gen / ttg, reps, (unsigned long long)p->total_bytes,
                       (unsigned long long)peak);
            else {
                printf("%s\n {\"model\": ", ci ? "," : "");
                json_cstr(stdout, name);
                printf(", \"backend\": \"%s\", \"kv_type\": \"%s\", \"pp\": %u, \"tg\": %u, \"b\": %u, \"n_kv\": %u, \"t_pp\": %.4f, "
                       "\"s_pp\": %.3f, \"t_tg\": %.4f, \"s_tg\": %.3f, \"repetitions\": %u, \"planned_bytes\": %llu, \"peak_bytes\": %llu}",
                       backend, forge_kv_type_name(p->kv_type), n_prompt, n_gen, b, n_kv, tpp, b * n_prompt / tpp, ttg, b * n_gen / ttg,
                       reps, (unsigned long long)p->total_bytes, (unsigned long long)peak);
            }
            fflush(stdout);
        }
        forge_context_destroy(ctx);
        continue;
    fail_ctx:
        forge_context_destroy(ctx);
        goto fail;
    }
    if (!strcmp(format, "json")) printf("\n]\n");
    status = 0;
    goto done;
fail:
    fprintf(stderr, "forge bench: %s\n", err.message);
done:
    free(tokens);
    free(seq);
    return status;
}

static int cmd_bench(int argc, char **argv) {
    const char *path = NULL, *format = "md";
    uint32_t n_prompt = 512, n_gen = 128, reps = 5, depths[16] = {0}, n_depths = 1, r, t, di, max_depth = 0, n_vocab;
    int bad = 0, i, status = 1, gpu, quiet = 0, progress;
    upload_progress upload;
    forge_context_desc desc;
    forge_model *model = NULL;
    forge_context *ctx = NULL;
    forge_error err;
    forge_memory_reading before, now;
    int32_t *tokens = NULL;
    double pp[64], tg[64];
    bench_row rows[32];
    uint32_t n_rows = 0;
    uint64_t lowest_free = UINT64_MAX;
    forge_kv_type ctk = FORGE_KV_DEFAULT, ctv = FORGE_KV_DEFAULT;
    uint32_t seq_counts[16], n_seq_counts = 0;
    if (wants_help(argc, argv)) {
        fputs(BENCH_USAGE, stdout);
        return 0;
    }
    if (!context_defaults(&desc)) return 1;
    for (i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--seqs") && i + 1 < argc) { /* a list of sequence counts: the batched bench */
            bad |= !parse_u32_list(argv[++i], "--seqs", 1, FORGE_MAX_SEQ, seq_counts, 16, &n_seq_counts);
            continue;
        }
        if (context_option(argc, argv, &i, &desc, &bad)) continue;
        if (!strcmp(argv[i], "-m") && i + 1 < argc) path = argv[++i];
        else if (!strcmp(argv[i], "-p") && i + 1 < argc) bad |= !parse_u32_in(argv[++i], "-p", 0, 1u << 30, &n_prompt);
        else if (!strcmp(argv[i], "-n") && i + 1 < argc) bad |= !parse_u32_in(argv[++i], "-n", 0, 1u << 30, &n_gen);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) bad |= !parse_u32_in(argv[++i], "-r", 1, 64, &reps);
        else if (!strcmp(argv[i], "-o") && i + 1 < argc) {
            format = argv[++i];
            if (strcmp(format, "md") && strcmp(format, "csv") && strcmp(format, "json")) {
                fprintf(stderr, "forge bench: -o '%s' must be md, csv or json\n", format);
                bad = 1;
            }
        } else if (!strcmp(argv[i], "--quiet")) quiet = 1;
        else if ((!strcmp(argv[i], "-ctk") || !strcmp(argv[i], "-ctv")) && i + 1 < argc) {
            forge_kv_type *dst = !strcmp(argv[i], "-ctk") ? &ctk : &ctv;
            if (forge_kv_type_parse(argv[++i], dst, &err) != FORGE_OK) {
                fprintf(stderr, "forge bench: %s\n", err.message);
                bad = 1;
            }
        } else if (!strcmp(argv[i], "-d") && i + 1 < argc) {
            bad |= !parse_u32_list(argv[++i], "-d", 0, 1u << 30, depths, 16, &n_depths);
        } else {
            fprintf(stderr, "forge bench: unexpected '%s'\n", argv[i]);
            bad = 1;
        }
    }
    if (ctk != FORGE_KV_DEFAULT && ctv != FORGE_KV_DEFAULT && ctk != ctv) {
        fprintf(stderr, "forge bench: forge keeps keys and values in one KV type (-ctk %s, -ctv %s)\n", forge_kv_type_name(ctk),
                forge_kv_type_name(ctv));
        return 1;
    }
    if (ctk != FORGE_KV_DEFAULT || ctv != FORGE_KV_DEFAULT) desc.kv_type = ctk != FORGE_KV_DEFAULT ? ctk : ctv;
    if (bad || !path) return usage_error("bench", BENCH_USAGE);
    if (n_prompt == 0 && n_gen == 0) {
        fprintf(stderr, "forge bench: -p 0 and -n 0 leave nothing to measure\n");
        return 1;
    }
    if (n_seq_counts) { /* the batched bench: -p and -n per sequence, -d does not apply */
        const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        if (n_depths != 1 || depths[0] != 0) {
            fprintf(stderr, "forge bench: --seqs measures from an empty context; -d does not apply\n");
            return 1;
        }
        if (n_prompt == 0 || n_gen == 0) {
            fprintf(stderr, "forge bench: --seqs measures both phases: -p and -n must be above 0\n");
            return 1;
        }
        if (forge_model_open(path, NULL, &model, &err) != FORGE_OK) goto fail;
        if (!desc.n_batch) desc.n_batch = 512;
        gpu = desc.backend == FORGE_BACKEND_GPU || (desc.backend == FORGE_BACKEND_AUTO && forge_gpu_available());
        status = bench_seqs(model, desc, seq_counts, n_seq_counts, n_prompt, n_gen, reps, format, name, gpu);
        forge_model_close(model);
        return status;
    }
    for (di = 0; di < n_depths; di++) max_depth = depths[di] > max_depth ? depths[di] : max_depth;
    /* both terms are at most 2^30, so the sum is exact in 64 bits */
    if ((uint64_t)max_depth + (n_prompt > n_gen ? n_prompt : n_gen) > (1u << 30)) {
        fprintf(stderr, "forge bench: depth %u + %u tokens is above forge's largest context, 1073741824 positions\n", max_depth,
                n_prompt > n_gen ? n_prompt : n_gen);
        return 1;
    }
    progress = !quiet && isatty(fileno(stderr));
    upload_progress_setup(&desc, &upload, quiet);
    if (forge_model_open(path, NULL, &model, &err) != FORGE_OK) goto fail;
    n_vocab = forge_model_config(model)->n_vocab;
    if (!desc.n_ctx) desc.n_ctx = max_depth + (n_prompt > n_gen ? n_prompt : n_gen);
    if (!desc.n_batch) desc.n_batch = 2048; /* llama-bench's default; the library caps it at the context */
    warn_ctx(model, desc.n_ctx, "bench");
    memset(&before, 0, sizeof before);
    gpu = desc.backend == FORGE_BACKEND_GPU || (desc.backend == FORGE_BACKEND_AUTO && forge_gpu_available());
    if (gpu) bench_gpu_free(&desc, &before);
    if (forge_context_create(model, &desc, &ctx, &err) != FORGE_OK) goto fail;
    if ((uint64_t)max_depth + n_prompt + 1 > forge_context_plan(ctx)->n_ctx + 1ull) {
        fprintf(stderr, "forge bench: depth %u + %u prompt tokens do not fit a context of %u positions\n", max_depth, n_prompt,
                forge_context_plan(ctx)->n_ctx);
        goto done;
    }
    tokens = (int32_t *)malloc(((size_t)max_depth + n_prompt + 1) * sizeof *tokens);
    if (!tokens) {
        fprintf(stderr, "forge bench: out of memory for %llu tokens\n", (unsigned long long)max_depth + n_prompt + 1);
        goto done;
    }
    for (t = 0; t < max_depth + n_prompt + 1; t++) tokens[t] = (int32_t)((t * 7919u + 13u) % n_vocab);
    for (di = 0; di < n_depths; di++) {
        uint32_t depth = depths[di];
        for (r = 0; r <= reps; r++) { /* run 0 warms up */
            double t0, t1;
            if (n_prompt) {
                forge_context_reset(ctx);
                if (depth && forge_eval(ctx, tokens, depth, &err) != FORGE_OK) goto fail;
                t0 = now_seconds();
                if (forge_eval(ctx, tokens + depth, n_prompt, &err) != FORGE_OK) goto fail;
                t1 = now_seconds();
                if (r) pp[r - 1] = n_prompt / (t1 - t0);
                if (!logits_finite(ctx, n_vocab, "bench")) goto done;
            }
            if (n_gen) {
                forge_context_reset(ctx);
                if (depth && forge_eval(ctx, tokens, depth, &err) != FORGE_OK) goto fail;
                t0 = now_seconds();
                { /* greedy decode: each token is the argmax of the step before (on the GPU the vocabulary stays there) */
                    int32_t next = tokens[depth];
                    for (t = 0; t < n_gen; t++)
                        if (forge_eval(ctx, &next, 1, &err) != FORGE_OK || forge_context_argmax(ctx, &next, &err) != FORGE_OK)
                            goto fail;
                }
                t1 = now_seconds();
                if (r) tg[r - 1] = n_gen / (t1 - t0);
                if (!logits_finite(ctx, n_vocab, "bench")) goto done;
            }
            if (gpu && bench_gpu_free(&desc, &now) == FORGE_OK && now.free_bytes < lowest_free)
                lowest_free = now.free_bytes;
        }
        if (n_prompt) {
            qsort(pp, reps, sizeof pp[0], cmp_double);
            snprintf(rows[n_rows].test, sizeof rows[n_rows].test, "pp%u", n_prompt);
            rows[n_rows].depth = depth, rows[n_rows].median = pp[reps / 2], rows[n_rows].lo = pp[0], rows[n_rows].hi = pp[reps - 1];
            n_rows++;
        }
        if (n_gen) {
            qsort(tg, reps, sizeof tg[0], cmp_double);
            snprintf(rows[n_rows].test, sizeof rows[n_rows].test, "tg%u", n_gen);
            rows[n_rows].depth = depth, rows[n_rows].median = tg[reps / 2], rows[n_rows].lo = tg[0], rows[n_rows].hi = tg[reps - 1];
            n_rows++;
        }
        if (progress) /* each depth's rows as they finish; the table follows on stdout */
            for (t = n_rows - (n_prompt ? 1u : 0u) - (n_gen ? 1u : 0u); t < n_rows; t++)
                fprintf(stderr, "forge bench: %s @ d%u: %.1f t/s (%.1f .. %.1f), depth %u of %u\n", rows[t].test, rows[t].depth,
                        rows[t].median, rows[t].lo, rows[t].hi, di + 1, n_depths);
    }
    {
        const forge_plan *p = forge_context_plan(ctx);
        const char *backend = p->backend == FORGE_BACKEND_GPU ? "GPU" : "CPU";
        uint64_t peak = bench_peak_bytes(gpu, &before, lowest_free);
        const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        if (!strcmp(format, "md")) {
            printf("| model | backend | kv | test | t/s | min .. max | planned bytes | peak bytes |\n");
            printf("| --- | --- | --- | --- | ---: | ---: | ---: | ---: |\n");
        } else if (!strcmp(format, "csv")) {
            printf("model,backend,kv,test,depth,t_s,min,max,repetitions,planned_bytes,peak_bytes,n_batch\n");
        } else {
            printf("[");
        }
        for (t = 0; t < n_rows; t++) {
            const bench_row *b = &rows[t];
            if (!strcmp(format, "md"))
                printf("| %s | %s | %s | %s @ d%u | %.1f | %.1f .. %.1f | %llu | %llu |\n", name, backend, forge_kv_type_name(p->kv_type),
                       b->test, b->depth, b->median, b->lo, b->hi, (unsigned long long)p->total_bytes, (unsigned long long)peak);
            else if (!strcmp(format, "csv"))
                printf("%s,%s,%s,%s,%u,%.3f,%.3f,%.3f,%u,%llu,%llu,%u\n", name, backend, forge_kv_type_name(p->kv_type), b->test,
                       b->depth, b->median, b->lo, b->hi, reps, (unsigned long long)p->total_bytes, (unsigned long long)peak, p->n_batch);
            else {
                printf("%s\n {\"model\": ", t ? "," : "");
                json_cstr(stdout, name);
                printf(", \"backend\": \"%s\", \"kv_type\": \"%s\", \"test\": \"%s\", \"depth\": %u, \"t_s\": %.3f, \"min\": %.3f, "
                       "\"max\": %.3f, \"repetitions\": %u, \"planned_bytes\": %llu, \"peak_bytes\": %llu, \"n_batch\": %u}",
                       backend, forge_kv_type_name(p->kv_type), b->test, b->depth, b->median, b->lo, b->hi, reps,
                       (unsigned long long)p->total_bytes, (unsigned long long)peak, p->n_batch);
            }
        }
        if (!strcmp(format, "json")) printf("\n]\n");
    }
    status = 0;
    goto done;
fail:
    fprintf(stderr, "forge bench: %s\n", err.message);
done:
    free(tokens);
    forge_context_destroy(ctx);
    forge_model_close(model);
    return status;
}

/* ---- main ----------------------------------------------------------------------------------- */

static void usage(FILE *out) {
    fprintf(out,
            "forge %s: run GGUF language models within a known memory budget\n"
            "\n"
            "usage: forge COMMAND [ARGS]   (forge COMMAND --help lists every option of a command)\n"
            "  info FILE [--json]   metadata, derived configuration, tensor table and totals of a GGUF file\n"
            "  plan FILE [--ctx N] [--kv TYPE] [--mem-fraction F] [--headroom SIZE] [--json]\n"
            "                       the memory bill and whether it fits the budget (exit 1 when not)\n"
            "  run -m FILE -p PROMPT [--chat] [-n N] [--temp T] ...\n"
            "                       generate text (greedy unless sampling options are given)\n"
            "  chat -m FILE         talk with a chat model\n"
            "  bench -m FILE [-p 512] [-n 128] [-d 0,16384] [-r 5] [-ctk TYPE] [-o md|csv|json]\n"
            "                       prompt and generation speed, planned and peak memory\n"
            "  bench -m FILE --seqs 1,4,16,64 [-p 128] [-n 128]\n"
            "                       aggregate speed of many sequences decoded together\n"
            "  tokenize -m FILE TEXT  token ids of a text\n"
            "  mkmodel --shape NAME --type MIX -o FILE [--layers N] [--vocab N] [--seed S] [--dry-run]\n"
            "                       a synthetic GGUF with the exact shapes of a real model and random blocks\n"
            "  extract -m FILE -f TEXT --layers 0,12,-1 --points resid_post [--chunk 512] -o DIR\n"
            "                       hidden states streamed chunk by chunk into .npy files\n"
            "  serve -m FILE [--port 8080] [--seqs 4] [--models DIR]\n"
            "                       an OpenAI-compatible HTTP server; 507 with the numbers when a model does not fit\n"
            "  eval -m FILE --tokens IDS --logits OUT.f32\n"
            "                       logits of every position of a token sequence, as float32 [n][n_vocab]\n"
            "  version              print the version\n"
            "  help                 this text\n",
            FORGE_VERSION_STRING);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 1;
    }
    if (strcmp(argv[1], "info") == 0) return cmd_info(argc - 2, argv + 2);
    if (strcmp(argv[1], "plan") == 0) return cmd_plan(argc - 2, argv + 2);
    if (strcmp(argv[1], "eval") == 0) return cmd_eval(argc - 2, argv + 2);
    if (strcmp(argv[1], "run") == 0) return cmd_run(argc - 2, argv + 2, 0);
    if (strcmp(argv[1], "bench") == 0) return cmd_bench(argc - 2, argv + 2);
    if (strcmp(argv[1], "chat") == 0) return cmd_run(argc - 2, argv + 2, 1);
    if (strcmp(argv[1], "tokenize") == 0) return cmd_tokenize(argc - 2, argv + 2);
    if (strcmp(argv[1], "mkmodel") == 0) return cmd_mkmodel(argc - 2, argv + 2);
    if (strcmp(argv[1], "extract") == 0) return cmd_extract(argc - 2, argv + 2);
    if (strcmp(argv[1], "serve") == 0) return cmd_serve(argc - 2, argv + 2);
    if (strcmp(argv[1], "version") == 0 || strcmp(argv[1], "--version") == 0) {
        printf("forge %s\n", FORGE_VERSION_STRING);
        return 0;
    }
    if (strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "forge: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 1;
}

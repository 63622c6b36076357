/* forge: the command-line tool around forge.h.

   forge info FILE [--json]     what a GGUF file holds and the configuration forge derives from it

   Every command exits 0 on success and 1 on failure, with the reason on stderr. */
#define FORGE_IMPLEMENTATION
#include "../forge.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    if (c->n_swa)
        fprintf(out, "  sliding window %u on %u of every %u layers, local rope base %g\n", c->n_swa, c->swa_pattern - 1,
                c->swa_pattern, (double)c->rope_freq_base_swa);
    if (c->attn_softcap > 0 || c->final_softcap > 0)
        fprintf(out, "  soft-caps: attention %g, final %g\n", (double)c->attn_softcap, (double)c->final_softcap);
    text = token_text(g, c->bos_id, &len);
    fprintf(out, "  vocab %s, bos %d '%.*s'", forge_vocab_type_name(c->vocab_type), (int)c->bos_id, (int)len, text);
    text = token_text(g, c->eos_id, &len);
    fprintf(out, ", eos %d '%.*s', add bos %s\n", (int)c->eos_id, (int)len, text, c->add_bos ? "yes" : "no");
}

static int cmd_info(int argc, char **argv) {
    const char *path = NULL;
    int json = 0, i, config_ok = 0, vocab_only;
    forge_file file;
    forge_gguf *g = NULL;
    forge_config *config;
    forge_error err, config_err;
    forge_result r;
    type_total totals[FORGE_TYPE_ID_LIMIT];
    uint64_t total_bytes = 0, n;
    FILE *out = stdout;

    for (i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) json = 1;
        else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "forge info: unknown option '%s'\nusage: forge info FILE [--json]\n", argv[i]);
            return 1;
        } else if (!path) path = argv[i];
        else {
            fprintf(stderr, "forge info: one file at a time ('%s' and '%s')\n", path, argv[i]);
            return 1;
        }
    }
    if (!path) {
        fprintf(stderr, "usage: forge info FILE [--json]\n");
        return 1;
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
    if (!vocab_only) config_ok = forge_config_derive(g, config, &config_err) == FORGE_OK;

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
        if (vocab_only) fprintf(out, "config\n  vocabulary-only file: no tensors, no model configuration\n");
        else if (config_ok) print_config_text(out, g, config);
        else fprintf(out, "config\n  not derivable: %s\n", config_err.message);
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
    free(config);
    forge_gguf_free(g);
    forge_file_close(&file);
    if (fflush(out) != 0 || ferror(out)) {
        fprintf(stderr, "forge info: could not write the output\n");
        return 1;
    }
    return config_ok || vocab_only ? 0 : 1;
}

/* ---- main ----------------------------------------------------------------------------------- */

static void usage(FILE *out) {
    fprintf(out,
            "forge %s: run GGUF language models within a known memory budget\n"
            "\n"
            "usage: forge COMMAND [ARGS]\n"
            "  info FILE [--json]   metadata, derived configuration, tensor table and totals of a GGUF file\n"
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

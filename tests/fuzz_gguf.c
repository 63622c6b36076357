/* fuzz_gguf.c - libFuzzer target for forge's GGUF reader, configuration derivation, tokenizer and
   one step of evaluation with each KV cache type.

   Each input is copied into an exactly-sized heap block (so AddressSanitizer sees any read past
   its end) and parsed. When the parse succeeds, every accessor is exercised: each kv through
   every typed getter (every element of arrays, plus one index past the end), each tensor's first
   and last data byte, the configuration, and the dequantization of the first row of each tensor
   smaller than 1 MiB.

      clang -g -O1 -fsanitize=fuzzer,address,undefined tests/fuzz_gguf.c -o /tmp/fuzz_gguf -lm
      /tmp/fuzz_gguf -max_total_time=60 /tmp/corpus_dir ../shared/fixtures/models/ */
#define FORGE_IMPLEMENTATION
#include "../forge.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_MAX_DEQUANTIZE_BYTES (1u << 20)

/* Reads land here so the compiler cannot drop them. */
static volatile uint64_t fuzz_sink;

static void touch_string(forge_gguf_str s) {
    uint64_t i, sum = 0;
    for (i = 0; i < s.len; i++) sum += (uint8_t)s.ptr[i];
    fuzz_sink += sum;
}

static void walk_kv(const forge_gguf_kv *kv) {
    forge_error error;
    int64_t integer;
    double real;
    int boolean;
    forge_gguf_str text;
    uint64_t i;

    touch_string(kv->key);
    fuzz_sink += (uint64_t)forge_gguf_kv_int(kv, &integer, &error);
    fuzz_sink += (uint64_t)forge_gguf_kv_float(kv, &real, &error);
    fuzz_sink += (uint64_t)forge_gguf_kv_bool(kv, &boolean, &error);
    if (forge_gguf_kv_str(kv, &text, &error) == FORGE_OK) touch_string(text);
    fuzz_sink += (uint64_t)strlen(forge_gguf_type_name(kv->type));
    if (kv->type != FORGE_GGUF_ARRAY) return;
    /* one past the end too: the getters must refuse it, not read it */
    for (i = 0; i <= kv->count; i++) {
        fuzz_sink += (uint64_t)forge_gguf_kv_int_at(kv, i, &integer, &error);
        fuzz_sink += (uint64_t)forge_gguf_kv_float_at(kv, i, &real, &error);
        if (kv->elem_type == FORGE_GGUF_STRING && i < kv->count) touch_string(kv->strs[i]);
    }
}

static void walk_tensor(const forge_gguf_tensor *tensor) {
    const forge_type_traits *traits = forge_type_info(tensor->type);
    float *row;

    touch_string(tensor->name);
    fuzz_sink += tensor->data[0] + tensor->data[tensor->n_bytes - 1];
    if (!traits || tensor->n_bytes >= FUZZ_MAX_DEQUANTIZE_BYTES) return;
    /* ne[0] is a whole number of blocks and the row lies inside the tensor: the parser checked */
    row = (float *)malloc((size_t)tensor->ne[0] * sizeof *row);
    if (!row) return;
    if (forge_dequantize(tensor->type, tensor->data, row, tensor->ne[0]) == FORGE_OK)
        fuzz_sink += (uint64_t)(row[0] == row[tensor->ne[0] - 1]);
    free(row);
}

/* A tokenizer built from the file: texts that reach every pre-tokenizer path (markup, TeX, code,
   scripts, emoji, spaces, a bad UTF-8 byte) tokenized with and without special tokens, the ids
   turned back into text, and ids taken from the input itself (any int32) detokenized. */
static void walk_tokenizer(const forge_gguf *gguf, const uint8_t *data, size_t size) {
    static const char *const texts[] = {
        "Hello world! It's 2024.", "<|im_start|>user\nhi<|im_end|>\n", "$$\\int_0^1 x^2\\,dx$$",
        "def f(x):\n\treturn x  # ok\n\n", "\xe4\xbd\xa0\xe5\xa5\xbd \xd0\x96 \xf0\x9f\x98\x80\xe2\x80\x8d \xe3\x80\x80x",
        "   \r\n\t!!!???...", "bad \xff\xfe utf-8 \xc3", ""};
    forge_tokenizer *tok = NULL;
    forge_error error;
    int32_t ids[256];
    char out[2048];
    size_t t, n, k, n_bytes;
    if (forge_tokenizer_create(gguf, NULL, &tok, &error) != FORGE_OK) return;
    for (t = 0; t < sizeof texts / sizeof texts[0]; t++) {
        int special;
        for (special = 0; special <= 1; special++) {
            if (forge_tokenize(tok, texts[t], strlen(texts[t]), special, special, ids, 256, &n, &error) != FORGE_OK) continue;
            for (k = 0; k < n; k++) {
                const char *piece;
                size_t len;
                if (forge_token_to_piece(tok, ids[k], special, &piece, &len, &error) == FORGE_OK && len) fuzz_sink += (uint8_t)piece[len - 1];
            }
            if (forge_detokenize(tok, ids, n, special, out, sizeof out, &n_bytes, &error) == FORGE_OK) fuzz_sink += n_bytes;
        }
    }
    /* ids from the input's last bytes: negative, past the vocabulary, anything */
    for (k = 0, n = 0; k + 4 <= size && n < 16; k += 4, n++) {
        uint32_t bits = (uint32_t)data[size - k - 1] | (uint32_t)data[size - k - 2] << 8 | (uint32_t)data[size - k - 3] << 16 |
                        (uint32_t)data[size - k - 4] << 24;
        ids[n] = (int32_t)bits;
    }
    if (forge_detokenize(tok, ids, n, 1, out, sizeof out, &n_bytes, &error) == FORGE_OK) fuzz_sink += n_bytes;
    forge_tokenizer_destroy(tok);
}

#ifdef __cplusplus
extern "C"
#endif
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *copy = (uint8_t *)malloc(size ? size : 1);
    forge_gguf *gguf = NULL;
    forge_model *model = NULL;
    forge_error error;
    uint64_t i;

    if (!copy) return 0;
    if (size) memcpy(copy, data, size);
    if (forge_gguf_parse(copy, size, NULL, &gguf, &error) == FORGE_OK) {
        forge_config *config = (forge_config *)malloc(sizeof *config);
        fuzz_sink += forge_gguf_version(gguf) + forge_gguf_alignment(gguf) + forge_gguf_data_offset(gguf);
        for (i = 0; i < forge_gguf_kv_count(gguf); i++) walk_kv(forge_gguf_kv_at(gguf, i));
        for (i = 0; i < forge_gguf_tensor_count(gguf); i++) walk_tensor(forge_gguf_tensor_at(gguf, i));
        walk_tokenizer(gguf, copy, size);
        if (config) {
            fuzz_sink += (uint64_t)forge_config_derive(gguf, config, &error);
            free(config);
        }
        forge_gguf_free(gguf);
        /* the model path parses again and derives: it must agree and free everything */
        if (forge_model_from_memory(copy, size, NULL, &model, &error) == FORGE_OK) {
            forge_context_desc desc;
            forge_plan plan;
            forge_context *ctx = NULL;
            forge_memory_reading memory;
            fuzz_sink += forge_model_config(model)->n_layer;
            /* a hostile configuration must plan without overflow and, when small, run a step */
            memset(&desc, 0, sizeof desc);
            desc.n_ctx = 8;
            desc.n_threads = 1;
            if (forge_plan_compute(model, &desc, &plan, &error) == FORGE_OK && plan.total_bytes < (64u << 20)) {
                int32_t tokens[2] = {0, 1};
                static const forge_kv_type kv_types[3] = {FORGE_KV_F16, FORGE_KV_Q8_0, FORGE_KV_Q4_0};
                int kv;
                memset(&memory, 0, sizeof memory);
                memory.total_bytes = memory.free_bytes = 1u << 30;
                desc.memory = &memory;
                /* every cache type: the quantized stores take whatever the hostile weights produce
                   (NaN, infinities, denormals) and must stay defined */
                for (kv = 0; kv < 3; kv++) {
                    desc.kv_type = kv_types[kv];
                    if (forge_context_create(model, &desc, &ctx, &error) == FORGE_OK) {
                        uint32_t n_vocab = forge_model_config(model)->n_vocab;
                        fuzz_sink += (uint64_t)forge_eval(ctx, tokens, n_vocab > 1 ? 2 : 1, &error);
                        forge_context_destroy(ctx);
                        ctx = NULL;
                    }
                }
            }
            forge_model_close(model);
        }
    }
    free(copy);
    return 0;
}

/* fuzz_gguf.c - libFuzzer target for forge's GGUF reader and configuration derivation.

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
                memset(&memory, 0, sizeof memory);
                memory.total_bytes = memory.free_bytes = 1u << 30;
                desc.memory = &memory;
                if (forge_context_create(model, &desc, &ctx, &error) == FORGE_OK) {
                    uint32_t n_vocab = forge_model_config(model)->n_vocab;
                    fuzz_sink += (uint64_t)forge_eval(ctx, tokens, n_vocab > 1 ? 2 : 1, &error);
                    forge_context_destroy(ctx);
                }
            }
            forge_model_close(model);
        }
    }
    free(copy);
    return 0;
}

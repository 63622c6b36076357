/* gguf_writer.h - builds GGUF files in memory, for tests only.

   Two levels:
     - raw pieces (gw_header, gw_kv_*, gw_tensor_info, gw_pad, ...) appended to a growable byte
       buffer, so a test can write any file, including ones no honest writer would produce;
     - gw_build_model: a small VALID llama / qwen2 / qwen3 model (F32 weights), with options to
       omit or reshape keys and tensors and to add extra keys, which the malformed-file and
       configuration tests bend one field at a time.

   GGUF layout (little-endian): "GGUF", u32 version, u64 tensor_count, u64 kv_count, the kvs
   (string key, u32 value type, value), the tensor infos (string name, u32 n_dims, u64 ne[n_dims],
   u32 type, u64 offset into the data section), zero padding to general.alignment (default 32),
   then the data section. A string is a u64 length and that many bytes; an array is a u32 element
   type, a u64 count and the elements.

   The gw_ prefix keeps these names apart from forge's and from ggml's gguf_*. Functions are
   static inline so that a file using only a few of them still builds warning-free. Allocation
   failure is recorded in the buffer (out_of_memory) rather than checked at every append. */
#ifndef FORGE_TEST_GGUF_WRITER_H
#define FORGE_TEST_GGUF_WRITER_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* GGUF metadata value types (the numbers are the file format's). */
enum {
    GW_U8 = 0, GW_I8 = 1, GW_U16 = 2, GW_I16 = 3, GW_U32 = 4, GW_I32 = 5, GW_F32 = 6, GW_BOOL = 7,
    GW_STRING = 8, GW_ARRAY = 9, GW_U64 = 10, GW_I64 = 11, GW_F64 = 12
};

/* Tensor type ids used by the builder and the tests (ggml's numbering). */
enum { GW_TYPE_F32 = 0, GW_TYPE_F16 = 1, GW_TYPE_Q4_0 = 2, GW_TYPE_Q8_0 = 8, GW_TYPE_Q4_K = 12 };

/* ---------------------------------------------------------------------------------------------
   byte buffer and raw pieces */

typedef struct gw_buffer {
    uint8_t *bytes;
    size_t size;
    size_t capacity;
    int out_of_memory; /* set once any append could not grow the buffer; the content is then short */
} gw_buffer;

static inline void gw_init(gw_buffer *buffer) {
    buffer->bytes = NULL;
    buffer->size = 0;
    buffer->capacity = 0;
    buffer->out_of_memory = 0;
}

static inline void gw_free(gw_buffer *buffer) {
    free(buffer->bytes);
    gw_init(buffer);
}

/* Makes room for n more bytes; returns 0 (and marks the buffer) when memory runs out. */
static inline int gw_reserve(gw_buffer *buffer, size_t n) {
    size_t needed, capacity;
    uint8_t *grown;
    if (buffer->out_of_memory) return 0;
    if (n > (size_t)-1 - buffer->size) {
        buffer->out_of_memory = 1;
        return 0;
    }
    needed = buffer->size + n;
    if (needed <= buffer->capacity) return 1;
    capacity = buffer->capacity ? buffer->capacity : 256;
    while (capacity < needed) capacity = capacity > (size_t)-1 / 2 ? needed : capacity * 2;
    grown = (uint8_t *)realloc(buffer->bytes, capacity);
    if (!grown) {
        buffer->out_of_memory = 1;
        return 0;
    }
    buffer->bytes = grown;
    buffer->capacity = capacity;
    return 1;
}

static inline void gw_bytes(gw_buffer *buffer, const void *data, size_t n) {
    if (n == 0 || !gw_reserve(buffer, n)) return;
    memcpy(buffer->bytes + buffer->size, data, n);
    buffer->size += n;
}

static inline void gw_zeros(gw_buffer *buffer, size_t n) {
    if (n == 0 || !gw_reserve(buffer, n)) return;
    memset(buffer->bytes + buffer->size, 0, n);
    buffer->size += n;
}

/* Integers are written byte by byte so the files are little-endian whatever the host is. */
static inline void gw_uint(gw_buffer *buffer, uint64_t value, unsigned n_bytes) {
    uint8_t little_endian[8];
    unsigned i;
    for (i = 0; i < n_bytes; i++) little_endian[i] = (uint8_t)(value >> (8 * i));
    gw_bytes(buffer, little_endian, n_bytes);
}

static inline void gw_u8(gw_buffer *buffer, uint8_t value) { gw_uint(buffer, value, 1); }
static inline void gw_u16(gw_buffer *buffer, uint16_t value) { gw_uint(buffer, value, 2); }
static inline void gw_u32(gw_buffer *buffer, uint32_t value) { gw_uint(buffer, value, 4); }
static inline void gw_u64(gw_buffer *buffer, uint64_t value) { gw_uint(buffer, value, 8); }

static inline void gw_f32(gw_buffer *buffer, float value) {
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    gw_u32(buffer, bits);
}

static inline void gw_f64(gw_buffer *buffer, double value) {
    uint64_t bits;
    memcpy(&bits, &value, sizeof bits);
    gw_u64(buffer, bits);
}

/* Overwrites a field already written (tests bend one field of a valid file). */
static inline void gw_patch_uint(gw_buffer *buffer, size_t at, uint64_t value, unsigned n_bytes) {
    unsigned i;
    if (at > buffer->size || n_bytes > buffer->size - at) return;
    for (i = 0; i < n_bytes; i++) buffer->bytes[at + i] = (uint8_t)(value >> (8 * i));
}

/* Zero bytes up to the next multiple of alignment (a power of two or not: tests use both). */
static inline void gw_pad(gw_buffer *buffer, uint64_t alignment) {
    if (alignment == 0) return;
    if (buffer->size % alignment) gw_zeros(buffer, (size_t)(alignment - buffer->size % alignment));
}

/* A GGUF string: u64 length, then the bytes. */
static inline void gw_str(gw_buffer *buffer, const char *text) {
    size_t len = strlen(text);
    gw_u64(buffer, len);
    gw_bytes(buffer, text, len);
}

/* A string whose length field says one thing and whose bytes say another (for hostile files). */
static inline void gw_str_claiming(gw_buffer *buffer, uint64_t claimed_len, const char *bytes, size_t n_bytes) {
    gw_u64(buffer, claimed_len);
    gw_bytes(buffer, bytes, n_bytes);
}

static inline void gw_header(gw_buffer *buffer, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    gw_bytes(buffer, "GGUF", 4);
    gw_u32(buffer, version);
    gw_u64(buffer, n_tensors);
    gw_u64(buffer, n_kv);
}

/* Size in bytes of one element of a fixed-size value type, 0 for strings, arrays and unknown ids. */
static inline size_t gw_value_size(uint32_t type) {
    switch (type) {
    case GW_U8: case GW_I8: case GW_BOOL: return 1;
    case GW_U16: case GW_I16: return 2;
    case GW_U32: case GW_I32: case GW_F32: return 4;
    case GW_U64: case GW_I64: case GW_F64: return 8;
    default: return 0;
    }
}

/* Key and value type; the caller writes the value. */
static inline void gw_key(gw_buffer *buffer, const char *key, uint32_t type) {
    gw_str(buffer, key);
    gw_u32(buffer, type);
}

static inline void gw_kv_u8(gw_buffer *b, const char *key, uint8_t v) { gw_key(b, key, GW_U8); gw_u8(b, v); }
static inline void gw_kv_i8(gw_buffer *b, const char *key, int8_t v) { gw_key(b, key, GW_I8); gw_u8(b, (uint8_t)v); }
static inline void gw_kv_u16(gw_buffer *b, const char *key, uint16_t v) { gw_key(b, key, GW_U16); gw_u16(b, v); }
static inline void gw_kv_i16(gw_buffer *b, const char *key, int16_t v) { gw_key(b, key, GW_I16); gw_u16(b, (uint16_t)v); }
static inline void gw_kv_u32(gw_buffer *b, const char *key, uint32_t v) { gw_key(b, key, GW_U32); gw_u32(b, v); }
static inline void gw_kv_i32(gw_buffer *b, const char *key, int32_t v) { gw_key(b, key, GW_I32); gw_u32(b, (uint32_t)v); }
static inline void gw_kv_f32(gw_buffer *b, const char *key, float v) { gw_key(b, key, GW_F32); gw_f32(b, v); }
static inline void gw_kv_bool(gw_buffer *b, const char *key, int v) { gw_key(b, key, GW_BOOL); gw_u8(b, (uint8_t)(v != 0)); }
static inline void gw_kv_str(gw_buffer *b, const char *key, const char *v) { gw_key(b, key, GW_STRING); gw_str(b, v); }
static inline void gw_kv_u64(gw_buffer *b, const char *key, uint64_t v) { gw_key(b, key, GW_U64); gw_u64(b, v); }
static inline void gw_kv_i64(gw_buffer *b, const char *key, int64_t v) { gw_key(b, key, GW_I64); gw_u64(b, (uint64_t)v); }
static inline void gw_kv_f64(gw_buffer *b, const char *key, double v) { gw_key(b, key, GW_F64); gw_f64(b, v); }

/* Key, ARRAY, element type and count; the caller writes the elements (or, in hostile files, fewer). */
static inline void gw_kv_array_header(gw_buffer *buffer, const char *key, uint32_t elem_type, uint64_t count) {
    gw_key(buffer, key, GW_ARRAY);
    gw_u32(buffer, elem_type);
    gw_u64(buffer, count);
}

/* A numeric array; elements points at count values of the C type matching elem_type
   (uint32_t for GW_U32, float for GW_F32, uint8_t for GW_BOOL, ...). */
static inline void gw_kv_array(gw_buffer *buffer, const char *key, uint32_t elem_type, const void *elements,
                               uint64_t count) {
    size_t elem_size = gw_value_size(elem_type);
    const uint8_t *at = (const uint8_t *)elements;
    uint64_t i;
    gw_kv_array_header(buffer, key, elem_type, count);
    for (i = 0; i < count; i++, at += elem_size) {
        /* through the host type of that width, so the value (not the host byte order) is written */
        uint8_t v8;
        uint16_t v16;
        uint32_t v32;
        uint64_t v64;
        switch (elem_size) {
        case 1: memcpy(&v8, at, 1); gw_u8(buffer, v8); break;
        case 2: memcpy(&v16, at, 2); gw_u16(buffer, v16); break;
        case 4: memcpy(&v32, at, 4); gw_u32(buffer, v32); break;
        case 8: memcpy(&v64, at, 8); gw_u64(buffer, v64); break;
        default: return; /* strings and arrays go through their own writers */
        }
    }
}

static inline void gw_kv_array_str(gw_buffer *buffer, const char *key, const char *const *strings, uint64_t count) {
    uint64_t i;
    gw_kv_array_header(buffer, key, GW_STRING, count);
    for (i = 0; i < count; i++) gw_str(buffer, strings[i]);
}

/* One tensor info; ne[0] is the innermost dimension (the row length). */
static inline void gw_tensor_info(gw_buffer *buffer, const char *name, uint32_t n_dims, const uint64_t *ne,
                                  uint32_t type, uint64_t offset) {
    uint32_t d;
    gw_str(buffer, name);
    gw_u32(buffer, n_dims);
    for (d = 0; d < n_dims; d++) gw_u64(buffer, ne[d]);
    gw_u32(buffer, type);
    gw_u64(buffer, offset);
}

/* ---------------------------------------------------------------------------------------------
   a small valid model */

#define GW_MAX_NAMES 8        /* entries in the omit lists */
#define GW_TENSOR_NAME_BYTES 64

typedef struct gw_model_options {
    const char *arch;       /* "llama", "qwen2" (adds attn_q/k/v.bias), "qwen3" (adds attn_q/k_norm) */
    uint32_t version;       /* GGUF version written in the header */
    uint32_t n_vocab;       /* token_embd's vocabulary dimension */
    uint32_t n_token_strings; /* length of the tokenizer arrays (n_vocab unless a test bends it) */
    uint32_t n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx;
    uint32_t head_dim;      /* 0: n_embd / n_head and no key_length; else key_length = value_length = head_dim */
    const uint32_t *layer_n_head_kv; /* when set: head_count_kv is a u32 array of n_layer, shapes per layer */
    uint32_t n_rot;         /* 0: no rope.dimension_count key */
    int tied_output;        /* 1: no output.weight (token_embd serves as the head) */
    uint32_t alignment;     /* 0: no general.alignment key (GGUF's default 32); else written as u32 and used */
    const char *omit_keys[GW_MAX_NAMES];    /* full key names not to write */
    const char *omit_tensors[GW_MAX_NAMES]; /* tensor names not to write */
    const char *reshape_tensor;             /* this tensor is written with the shape below instead */
    uint32_t reshape_n_dims;
    uint64_t reshape_ne[4];
    const char *extra_tensor;               /* when set: one more F32 vector of n_embd under this name */
    /* Appends extra kvs (after the model's own) and returns how many it wrote. */
    uint64_t (*write_extra_kvs)(gw_buffer *kvs, void *user_data);
    void *user_data;
} gw_model_options;

/* Where the pieces of a built file are, so tests can cut or patch it at the right place. */
typedef struct gw_model_layout {
    uint64_t n_tensors, n_kv;
    size_t kvs_begin;       /* first byte of the first kv (24: right after the header) */
    size_t infos_begin;     /* first byte of the first tensor info */
    size_t infos_end;       /* one past the last tensor info */
    size_t data_offset;     /* start of the data section (infos_end padded to the alignment) */
    size_t data_end;        /* one past the last tensor's data: the file's size */
} gw_model_layout;

/* A 2-layer llama small enough that truncating it at every offset stays fast. */
static inline void gw_model_options_init(gw_model_options *options) {
    memset(options, 0, sizeof *options);
    options->arch = "llama";
    options->version = 3;
    options->n_vocab = 16;
    options->n_token_strings = 16;
    options->n_embd = 16;
    options->n_layer = 2;
    options->n_head = 4;
    options->n_head_kv = 2;
    options->n_ff = 32;
    options->n_ctx = 128;
}

typedef struct gw__tensor_spec {
    char name[GW_TENSOR_NAME_BYTES];
    uint32_t n_dims;
    uint64_t ne[4];
} gw__tensor_spec;

typedef struct gw__model_builder {
    const gw_model_options *options;
    gw_buffer kvs;
    uint64_t n_kv;
    gw__tensor_spec *tensors;
    uint64_t n_tensors, tensor_capacity;
    int out_of_memory;
} gw__model_builder;

static inline int gw__listed(const char *const *names, const char *name) {
    int i;
    for (i = 0; i < GW_MAX_NAMES; i++)
        if (names[i] && strcmp(names[i], name) == 0) return 1;
    return 0;
}

/* Starts a kv unless the options omit it; returns 0 when the caller must skip writing it. */
static inline int gw__begin_kv(gw__model_builder *builder, const char *key, uint32_t type) {
    if (gw__listed(builder->options->omit_keys, key)) return 0;
    gw_key(&builder->kvs, key, type);
    builder->n_kv++;
    return 1;
}

static inline void gw__arch_key(char *out, size_t out_size, const char *arch, const char *suffix) {
    snprintf(out, out_size, "%s.%s", arch, suffix);
}

static inline void gw__model_u32(gw__model_builder *builder, const char *suffix, uint32_t value) {
    char key[128];
    gw__arch_key(key, sizeof key, builder->options->arch, suffix);
    if (gw__begin_kv(builder, key, GW_U32)) gw_u32(&builder->kvs, value);
}

static inline void gw__add_tensor(gw__model_builder *builder, const char *name, uint32_t n_dims, uint64_t ne0,
                                  uint64_t ne1) {
    const gw_model_options *o = builder->options;
    gw__tensor_spec *spec;
    if (gw__listed(o->omit_tensors, name)) return;
    if (builder->n_tensors == builder->tensor_capacity) {
        uint64_t capacity = builder->tensor_capacity ? builder->tensor_capacity * 2 : 32;
        gw__tensor_spec *grown =
            (gw__tensor_spec *)realloc(builder->tensors, (size_t)capacity * sizeof *builder->tensors);
        if (!grown) {
            builder->out_of_memory = 1;
            return;
        }
        builder->tensors = grown;
        builder->tensor_capacity = capacity;
    }
    spec = &builder->tensors[builder->n_tensors++];
    memset(spec, 0, sizeof *spec);
    snprintf(spec->name, sizeof spec->name, "%s", name);
    spec->n_dims = n_dims;
    spec->ne[0] = ne0;
    spec->ne[1] = n_dims > 1 ? ne1 : 1;
    spec->ne[2] = 1;
    spec->ne[3] = 1;
    if (o->reshape_tensor && strcmp(o->reshape_tensor, name) == 0) {
        spec->n_dims = o->reshape_n_dims;
        memcpy(spec->ne, o->reshape_ne, sizeof spec->ne);
    }
}

static inline void gw__add_layer_tensor(gw__model_builder *builder, uint32_t layer, const char *suffix,
                                        uint32_t n_dims, uint64_t ne0, uint64_t ne1) {
    char name[GW_TENSOR_NAME_BYTES];
    snprintf(name, sizeof name, "blk.%u.%s", (unsigned)layer, suffix);
    gw__add_tensor(builder, name, n_dims, ne0, ne1);
}

static inline void gw__write_metadata(gw__model_builder *builder) {
    const gw_model_options *o = builder->options;
    gw_buffer *kvs = &builder->kvs;
    uint32_t i;
    char key[128];

    if (gw__begin_kv(builder, "general.architecture", GW_STRING)) gw_str(kvs, o->arch);
    if (o->alignment && gw__begin_kv(builder, "general.alignment", GW_U32)) gw_u32(kvs, o->alignment);
    if (gw__begin_kv(builder, "general.name", GW_STRING)) gw_str(kvs, "forge-test-model");
    gw__model_u32(builder, "block_count", o->n_layer);
    gw__model_u32(builder, "context_length", o->n_ctx);
    gw__model_u32(builder, "embedding_length", o->n_embd);
    gw__model_u32(builder, "feed_forward_length", o->n_ff);
    gw__model_u32(builder, "attention.head_count", o->n_head);
    gw__arch_key(key, sizeof key, o->arch, "attention.head_count_kv");
    if (o->layer_n_head_kv) {
        if (gw__begin_kv(builder, key, GW_ARRAY)) {
            gw_u32(kvs, GW_U32);
            gw_u64(kvs, o->n_layer);
            for (i = 0; i < o->n_layer; i++) gw_u32(kvs, o->layer_n_head_kv[i]);
        }
    } else {
        gw__model_u32(builder, "attention.head_count_kv", o->n_head_kv);
    }
    gw__arch_key(key, sizeof key, o->arch, "attention.layer_norm_rms_epsilon");
    if (gw__begin_kv(builder, key, GW_F32)) gw_f32(kvs, 1e-5f);
    if (o->head_dim) {
        gw__model_u32(builder, "attention.key_length", o->head_dim);
        gw__model_u32(builder, "attention.value_length", o->head_dim);
    }
    if (o->n_rot) gw__model_u32(builder, "rope.dimension_count", o->n_rot);

    if (gw__begin_kv(builder, "tokenizer.ggml.model", GW_STRING)) gw_str(kvs, "llama");
    if (gw__begin_kv(builder, "tokenizer.ggml.tokens", GW_ARRAY)) {
        gw_u32(kvs, GW_STRING);
        gw_u64(kvs, o->n_token_strings);
        for (i = 0; i < o->n_token_strings; i++) {
            char token[32];
            if (i == 0) snprintf(token, sizeof token, "<unk>");
            else if (i == 1) snprintf(token, sizeof token, "<s>");
            else if (i == 2) snprintf(token, sizeof token, "</s>");
            else snprintf(token, sizeof token, "tok%u", (unsigned)i);
            gw_str(kvs, token);
        }
    }
    if (gw__begin_kv(builder, "tokenizer.ggml.scores", GW_ARRAY)) {
        gw_u32(kvs, GW_F32);
        gw_u64(kvs, o->n_token_strings);
        for (i = 0; i < o->n_token_strings; i++) gw_f32(kvs, -(float)i);
    }
    if (gw__begin_kv(builder, "tokenizer.ggml.token_type", GW_ARRAY)) {
        gw_u32(kvs, GW_I32);
        gw_u64(kvs, o->n_token_strings);
        /* llama.cpp's token types: 1 normal, 2 unknown, 3 control */
        for (i = 0; i < o->n_token_strings; i++) gw_u32(kvs, i == 0 ? 2u : i < 3 ? 3u : 1u);
    }
    if (gw__begin_kv(builder, "tokenizer.ggml.bos_token_id", GW_U32)) gw_u32(kvs, 1);
    if (gw__begin_kv(builder, "tokenizer.ggml.eos_token_id", GW_U32)) gw_u32(kvs, 2);
    if (o->write_extra_kvs) builder->n_kv += o->write_extra_kvs(kvs, o->user_data);
}

static inline void gw__plan_tensors(gw__model_builder *builder) {
    const gw_model_options *o = builder->options;
    uint32_t head_dim = o->head_dim ? o->head_dim : (o->n_head ? o->n_embd / o->n_head : o->n_embd);
    uint64_t n_embd_q = (uint64_t)o->n_head * head_dim;
    int is_qwen2 = strcmp(o->arch, "qwen2") == 0;
    int is_qwen3 = strcmp(o->arch, "qwen3") == 0;
    uint32_t layer;

    gw__add_tensor(builder, "token_embd.weight", 2, o->n_embd, o->n_vocab);
    gw__add_tensor(builder, "output_norm.weight", 1, o->n_embd, 1);
    if (o->extra_tensor) gw__add_tensor(builder, o->extra_tensor, 1, o->n_embd, 1);
    if (!o->tied_output) gw__add_tensor(builder, "output.weight", 2, o->n_embd, o->n_vocab);
    for (layer = 0; layer < o->n_layer; layer++) {
        uint32_t n_head_kv = o->layer_n_head_kv ? o->layer_n_head_kv[layer] : o->n_head_kv;
        uint64_t n_embd_kv = (uint64_t)n_head_kv * head_dim;
        gw__add_layer_tensor(builder, layer, "attn_norm.weight", 1, o->n_embd, 1);
        gw__add_layer_tensor(builder, layer, "attn_q.weight", 2, o->n_embd, n_embd_q);
        gw__add_layer_tensor(builder, layer, "attn_k.weight", 2, o->n_embd, n_embd_kv);
        gw__add_layer_tensor(builder, layer, "attn_v.weight", 2, o->n_embd, n_embd_kv);
        if (is_qwen2) {
            gw__add_layer_tensor(builder, layer, "attn_q.bias", 1, n_embd_q, 1);
            gw__add_layer_tensor(builder, layer, "attn_k.bias", 1, n_embd_kv, 1);
            gw__add_layer_tensor(builder, layer, "attn_v.bias", 1, n_embd_kv, 1);
        }
        if (is_qwen3) {
            gw__add_layer_tensor(builder, layer, "attn_q_norm.weight", 1, head_dim, 1);
            gw__add_layer_tensor(builder, layer, "attn_k_norm.weight", 1, head_dim, 1);
        }
        gw__add_layer_tensor(builder, layer, "attn_output.weight", 2, n_embd_q, o->n_embd);
        gw__add_layer_tensor(builder, layer, "ffn_norm.weight", 1, o->n_embd, 1);
        gw__add_layer_tensor(builder, layer, "ffn_gate.weight", 2, o->n_embd, o->n_ff);
        gw__add_layer_tensor(builder, layer, "ffn_up.weight", 2, o->n_embd, o->n_ff);
        gw__add_layer_tensor(builder, layer, "ffn_down.weight", 2, o->n_ff, o->n_embd);
    }
}

static inline uint64_t gw__align_up(uint64_t value, uint64_t alignment) {
    return value % alignment ? value + (alignment - value % alignment) : value;
}

/* Writes the model into out (which it initializes); returns 1 on success, 0 when memory ran out. */
static inline int gw_build_model(gw_buffer *out, const gw_model_options *options, gw_model_layout *layout) {
    gw__model_builder builder;
    uint64_t alignment = options->alignment ? options->alignment : 32;
    uint64_t *offsets = NULL;
    uint64_t next_offset = 0, i, value_index = 0;
    gw_model_layout where;
    int ok;

    memset(&builder, 0, sizeof builder);
    memset(&where, 0, sizeof where);
    builder.options = options;
    gw_init(&builder.kvs);
    gw_init(out);
    gw__write_metadata(&builder);
    gw__plan_tensors(&builder);

    offsets = (uint64_t *)malloc((size_t)(builder.n_tensors ? builder.n_tensors : 1) * sizeof *offsets);
    if (!offsets) builder.out_of_memory = 1;
    for (i = 0; offsets && i < builder.n_tensors; i++) {
        const gw__tensor_spec *spec = &builder.tensors[i];
        next_offset = gw__align_up(next_offset, alignment);
        offsets[i] = next_offset;
        next_offset += spec->ne[0] * spec->ne[1] * spec->ne[2] * spec->ne[3] * 4;
    }

    gw_header(out, options->version, builder.n_tensors, builder.n_kv);
    where.n_tensors = builder.n_tensors;
    where.n_kv = builder.n_kv;
    where.kvs_begin = out->size;
    if (builder.kvs.size) gw_bytes(out, builder.kvs.bytes, builder.kvs.size);
    where.infos_begin = out->size;
    for (i = 0; offsets && i < builder.n_tensors; i++) {
        const gw__tensor_spec *spec = &builder.tensors[i];
        gw_tensor_info(out, spec->name, spec->n_dims, spec->ne, GW_TYPE_F32, offsets[i]);
    }
    where.infos_end = out->size;
    gw_pad(out, alignment);
    where.data_offset = out->size;
    /* F32 data: a small repeating pattern, so dequantized values are finite and not all equal */
    for (i = 0; offsets && i < builder.n_tensors; i++) {
        const gw__tensor_spec *spec = &builder.tensors[i];
        uint64_t n = spec->ne[0] * spec->ne[1] * spec->ne[2] * spec->ne[3], j;
        gw_zeros(out, (size_t)(where.data_offset + offsets[i] - out->size));
        for (j = 0; j < n; j++, value_index++) gw_f32(out, (float)((int)(value_index % 13) - 6) * 0.015625f);
    }
    where.data_end = out->size;

    ok = !builder.out_of_memory && !builder.kvs.out_of_memory && !out->out_of_memory;
    free(offsets);
    free(builder.tensors);
    gw_free(&builder.kvs);
    if (layout) *layout = where;
    return ok;
}

#endif /* FORGE_TEST_GGUF_WRITER_H */

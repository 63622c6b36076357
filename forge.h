/* forge.h - v0.1 - run GGUF language models without ever running the machine out of memory
   Single-header C99 library. MIT License (see the end of this file).

   Do this:
      #define FORGE_IMPLEMENTATION
   before you include this file in *one* C or C++ file to create the implementation.

      #include ...
      #include ...
      #define FORGE_IMPLEMENTATION
      #include "forge.h"

   Every other file includes "forge.h" without the define.

   WHAT IT DOES (today)
      - reads GGUF files (versions 2 and 3) from memory or from a read-only mapping, treating
        every byte as hostile: each length is checked against the bytes left, every product and
        sum against overflow, every tensor's data against the file; no tensor data is copied
      - knows the tensor types F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K
        IQ4_NL IQ4_XS (block sizes and dequantization to f32); any other type is refused by name
      - derives a model configuration (heads, head size, rotary dims, rope type, context, vocab,
        experts, sliding windows) for llama, qwen2, qwen3, gemma, gemma2, gemma3, phi3, qwen2moe,
        qwen3moe and glm4 files, and checks that every tensor the configuration implies is present
        with the right shape; no dimension of a derived configuration is ever zero
      - computes the exact bytes of a KV cache (f32, f16, q8_0, q4_0) and reads host memory as a
        process can use it, within a container's cgroup limit
      - samples tokens: greedy, temperature, top-k, top-p, min-p, repetition penalty, seeded

   OPTIONS (define before including)
      FORGE_STATIC        every function gets static linkage (vendoring into one translation unit)
      FORGE_NO_STDIO      no file loading (forge_gguf_parse and forge_model_from_memory remain)
      FORGE_NO_MMAP       load files with read() into host memory instead of mapping them
      FORGE_MALLOC/FORGE_FREE  default host allocator (when no forge_allocator is given)

   CONTENTS (search for the markers)
      >>results     result codes and the error record
      >>types       tensor type table and dequantization
      >>gguf        GGUF reader
      >>config      architectures and configuration derivation
      >>sampler     token sampling
      >>model       model object: file + index + configuration
      >>plan        memory arithmetic: KV cache bytes, host memory
      >>impl        implementation

   ERRORS
      Every fallible function returns forge_result (FORGE_OK == 0) and, when given a forge_error,
      fills it with the code and a one-line message that names the key or tensor and the numbers.
      The library never exits, aborts or prints.
*/
#ifndef FORGE_H
#define FORGE_H

#include <stddef.h>
#include <stdint.h>

#define FORGE_VERSION_MAJOR 0
#define FORGE_VERSION_MINOR 1
#define FORGE_VERSION_STRING "0.1.0"

#ifndef FORGE_API
#ifdef FORGE_STATIC
#if defined(__GNUC__) || defined(__clang__)
#define FORGE_API static __attribute__((unused)) /* a vendoring file need not call every function */
#else
#define FORGE_API static
#endif
#else
#define FORGE_API extern
#endif
#endif

/* Limits applied to every file before anything is allocated from what it claims.
   Real models are far inside them (largest vocabularies ~260k tokens, ~3k tensors). */
#ifndef FORGE_GGUF_MAX_KV
#define FORGE_GGUF_MAX_KV 65536u
#endif
#ifndef FORGE_GGUF_MAX_TENSORS
#define FORGE_GGUF_MAX_TENSORS 1048576u
#endif
#ifndef FORGE_GGUF_MAX_STRING_BYTES
#define FORGE_GGUF_MAX_STRING_BYTES (64u << 20)
#endif
#ifndef FORGE_GGUF_MAX_ARRAY_COUNT
#define FORGE_GGUF_MAX_ARRAY_COUNT (1u << 28)
#endif
#ifndef FORGE_GGUF_MAX_NAME_BYTES
#define FORGE_GGUF_MAX_NAME_BYTES 1024u
#endif
#ifndef FORGE_GGUF_MAX_ALIGNMENT
#define FORGE_GGUF_MAX_ALIGNMENT 65536u
#endif
#define FORGE_GGUF_MAX_DIMS 4
#define FORGE_GGUF_DEFAULT_ALIGNMENT 32u
#ifndef FORGE_MAX_LAYERS
#define FORGE_MAX_LAYERS 512
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* >>results ------------------------------------------------------------------------------------ */

#define FORGE__RESULT_LIST(X)                                                                     \
    X(OK, "ok")                                                                                   \
    X(ERR_ARGUMENT, "invalid argument")                                                           \
    X(ERR_IO, "file could not be read")                                                           \
    X(ERR_HOST_MEMORY, "out of host memory")                                                      \
    X(ERR_MAGIC, "not a GGUF file")                                                               \
    X(ERR_BIG_ENDIAN, "big-endian GGUF file")                                                     \
    X(ERR_VERSION, "unsupported GGUF version")                                                    \
    X(ERR_TRUNCATED, "file ends early")                                                           \
    X(ERR_LIMIT, "a count or length exceeds the reader's limits")                                 \
    X(ERR_OVERFLOW, "a size overflows")                                                           \
    X(ERR_VALUE_TYPE, "unknown metadata value type")                                              \
    X(ERR_NESTED_ARRAY, "arrays of arrays are not supported")                                     \
    X(ERR_ALIGNMENT, "bad general.alignment")                                                     \
    X(ERR_DUPLICATE_KEY, "duplicate metadata key")                                                \
    X(ERR_DUPLICATE_TENSOR, "duplicate tensor name")                                              \
    X(ERR_TENSOR_DIMS, "bad tensor dimensions")                                                   \
    X(ERR_TENSOR_TYPE, "unsupported tensor type")                                                 \
    X(ERR_TENSOR_BLOCK, "tensor row is not a whole number of blocks")                             \
    X(ERR_TENSOR_OFFSET, "tensor data misplaced")                                                 \
    X(ERR_MISSING_KEY, "required metadata key missing")                                           \
    X(ERR_KEY_TYPE, "metadata key has the wrong type")                                            \
    X(ERR_CONFIG, "inconsistent model configuration")                                             \
    X(ERR_ARCH, "unsupported architecture")                                                       \
    X(ERR_MISSING_TENSOR, "required tensor missing")                                              \
    X(ERR_TENSOR_SHAPE, "tensor has the wrong shape")                                             \
    X(ERR_UNSUPPORTED, "feature not supported")

typedef enum forge_result {
#define FORGE__RESULT_ENUM(name, text) FORGE_##name,
    FORGE__RESULT_LIST(FORGE__RESULT_ENUM)
#undef FORGE__RESULT_ENUM
    FORGE_RESULT_COUNT
} forge_result;

#define FORGE_ERROR_MESSAGE_BYTES 512

/* Filled by every fallible call that is given one; message is NUL-terminated and self-contained. */
typedef struct forge_error {
    forge_result result;
    char message[FORGE_ERROR_MESSAGE_BYTES];
} forge_error;

FORGE_API const char *forge_result_name(forge_result result);   /* "FORGE_ERR_TRUNCATED" */
FORGE_API const char *forge_result_string(forge_result result); /* "file ends early" */

/* Host allocation callbacks; all zero means FORGE_MALLOC/FORGE_FREE (malloc/free). */
typedef struct forge_allocator {
    void *(*alloc)(size_t size, void *user_data);
    void (*free)(void *ptr, void *user_data);
    void *user_data;
} forge_allocator;

/* >>types -------------------------------------------------------------------------------------- */

/* Tensor type ids as stored in GGUF files (ggml's numbering). Only the ones forge reads are named;
   forge_type_info returns NULL for every other id. */
typedef enum forge_type {
    FORGE_TYPE_F32 = 0,
    FORGE_TYPE_F16 = 1,
    FORGE_TYPE_Q4_0 = 2,
    FORGE_TYPE_Q4_1 = 3,
    FORGE_TYPE_Q5_0 = 6,
    FORGE_TYPE_Q5_1 = 7,
    FORGE_TYPE_Q8_0 = 8,
    FORGE_TYPE_Q2_K = 10,
    FORGE_TYPE_Q3_K = 11,
    FORGE_TYPE_Q4_K = 12,
    FORGE_TYPE_Q5_K = 13,
    FORGE_TYPE_Q6_K = 14,
    FORGE_TYPE_IQ4_NL = 20,
    FORGE_TYPE_IQ4_XS = 23,
    FORGE_TYPE_BF16 = 30,
    FORGE_TYPE_ID_LIMIT = 64 /* ids at or above this are not ggml types at all */
} forge_type;

typedef struct forge_type_traits {
    forge_type type;
    const char *name;     /* "Q4_K" */
    uint32_t block_elems; /* elements per block (1 for F32/F16/BF16) */
    uint32_t block_bytes; /* bytes per block */
    /* dst[0 .. n_blocks*block_elems) = values of n_blocks consecutive blocks at src */
    void (*dequantize)(const void *src, float *dst, uint64_t n_blocks);
} forge_type_traits;

/* Traits of a supported type, NULL for any other id (including ids ggml knows but forge does not). */
FORGE_API const forge_type_traits *forge_type_info(uint32_t type_id);
/* Name of any id ggml has used ("IQ2_XXS" too), or NULL when the id was never a ggml type. */
FORGE_API const char *forge_type_name(uint32_t type_id);
/* Bytes of n_elements of a supported type; FORGE_ERR_TENSOR_BLOCK when n_elements is not a whole
   number of blocks, FORGE_ERR_OVERFLOW when the result does not fit in 64 bits. */
FORGE_API forge_result forge_type_bytes(uint32_t type_id, uint64_t n_elements, uint64_t *out_bytes);
/* Dequantizes n_elements (a whole number of blocks) of a supported type into dst. */
FORGE_API forge_result forge_dequantize(uint32_t type_id, const void *src, float *dst, uint64_t n_elements);
FORGE_API float forge_f16_to_f32(uint16_t h);
FORGE_API uint16_t forge_f32_to_f16(float f); /* round to nearest even */
FORGE_API float forge_bf16_to_f32(uint16_t h);

/* >>gguf --------------------------------------------------------------------------------------- */

typedef enum forge_gguf_type {
    FORGE_GGUF_UINT8 = 0,
    FORGE_GGUF_INT8 = 1,
    FORGE_GGUF_UINT16 = 2,
    FORGE_GGUF_INT16 = 3,
    FORGE_GGUF_UINT32 = 4,
    FORGE_GGUF_INT32 = 5,
    FORGE_GGUF_FLOAT32 = 6,
    FORGE_GGUF_BOOL = 7,
    FORGE_GGUF_STRING = 8,
    FORGE_GGUF_ARRAY = 9,
    FORGE_GGUF_UINT64 = 10,
    FORGE_GGUF_INT64 = 11,
    FORGE_GGUF_FLOAT64 = 12,
    FORGE_GGUF_TYPE_COUNT
} forge_gguf_type;

/* A string inside the file: NOT NUL-terminated, may contain any bytes. */
typedef struct forge_gguf_str {
    const char *ptr;
    uint64_t len;
} forge_gguf_str;

typedef struct forge_gguf_kv {
    forge_gguf_str key;
    forge_gguf_type type;       /* FORGE_GGUF_ARRAY for arrays */
    forge_gguf_type elem_type;  /* element type of an array, else == type */
    uint64_t count;             /* array element count; 1 for a scalar */
    const uint8_t *data;        /* little-endian bytes of a scalar or of a numeric array's elements */
    const forge_gguf_str *strs; /* the string (count 1) or the elements of a string array */
} forge_gguf_kv;

typedef struct forge_gguf_tensor {
    forge_gguf_str name;
    uint32_t type;                     /* a forge_type id, always a supported one */
    uint32_t n_dims;                   /* 1..4 */
    uint64_t ne[FORGE_GGUF_MAX_DIMS];  /* elements per dimension, ne[0] innermost; unused ones are 1 */
    uint64_t n_elements;
    uint64_t n_bytes;
    uint64_t offset;                   /* from the start of the data section */
    const uint8_t *data;               /* into the caller's buffer: never copied */
} forge_gguf_tensor;

typedef struct forge_gguf forge_gguf; /* read-only index over a caller-owned buffer */

/* Parses a GGUF image in memory; does no I/O. The buffer must outlive the index. */
FORGE_API forge_result forge_gguf_parse(const void *bytes, size_t size, const forge_allocator *allocator,
                                        forge_gguf **out, forge_error *error);
FORGE_API void forge_gguf_free(forge_gguf *gguf);

FORGE_API uint32_t forge_gguf_version(const forge_gguf *gguf);
FORGE_API uint64_t forge_gguf_alignment(const forge_gguf *gguf);
FORGE_API uint64_t forge_gguf_data_offset(const forge_gguf *gguf); /* start of the data section */
FORGE_API uint64_t forge_gguf_kv_count(const forge_gguf *gguf);
FORGE_API const forge_gguf_kv *forge_gguf_kv_at(const forge_gguf *gguf, uint64_t index);
FORGE_API const forge_gguf_kv *forge_gguf_find_kv(const forge_gguf *gguf, const char *key);
FORGE_API uint64_t forge_gguf_tensor_count(const forge_gguf *gguf);
FORGE_API const forge_gguf_tensor *forge_gguf_tensor_at(const forge_gguf *gguf, uint64_t index);
FORGE_API const forge_gguf_tensor *forge_gguf_find_tensor(const forge_gguf *gguf, const char *name);

/* Typed reads of a value. _int accepts every integer width and fails when the value does not fit
   in int64; _float accepts FLOAT32/FLOAT64 and converts integers; _bool accepts BOOL; _str STRING.
   Anything else is FORGE_ERR_KEY_TYPE with the key and both types named.
   The *_at forms read element i of an array. */
FORGE_API forge_result forge_gguf_kv_int(const forge_gguf_kv *kv, int64_t *out, forge_error *error);
FORGE_API forge_result forge_gguf_kv_float(const forge_gguf_kv *kv, double *out, forge_error *error);
FORGE_API forge_result forge_gguf_kv_bool(const forge_gguf_kv *kv, int *out, forge_error *error);
FORGE_API forge_result forge_gguf_kv_str(const forge_gguf_kv *kv, forge_gguf_str *out, forge_error *error);
FORGE_API forge_result forge_gguf_kv_int_at(const forge_gguf_kv *kv, uint64_t i, int64_t *out, forge_error *error);
FORGE_API forge_result forge_gguf_kv_float_at(const forge_gguf_kv *kv, uint64_t i, double *out, forge_error *error);
FORGE_API const char *forge_gguf_type_name(forge_gguf_type type); /* "uint32", "array", ... */
/* 1 when the string equals the NUL-terminated text. */
FORGE_API int forge_gguf_str_eq(forge_gguf_str s, const char *text);

/* A file opened read-only: mapped where the platform allows, read into host memory otherwise. */
typedef struct forge_file {
    const uint8_t *bytes;
    uint64_t size;
    int mapped;  /* 1 when bytes is a read-only mapping */
    forge_allocator allocator;
} forge_file;

#ifndef FORGE_NO_STDIO
FORGE_API forge_result forge_file_open(const char *path, const forge_allocator *allocator, forge_file *out,
                                       forge_error *error);
FORGE_API void forge_file_close(forge_file *file);
#endif

/* >>config ------------------------------------------------------------------------------------- */

typedef enum forge_arch {
    FORGE_ARCH_UNKNOWN = 0,
    FORGE_ARCH_LLAMA,
    FORGE_ARCH_QWEN2,
    FORGE_ARCH_QWEN3,
    FORGE_ARCH_GEMMA,
    FORGE_ARCH_GEMMA2,
    FORGE_ARCH_GEMMA3,
    FORGE_ARCH_PHI3,
    FORGE_ARCH_QWEN2MOE,
    FORGE_ARCH_QWEN3MOE,
    FORGE_ARCH_GLM4,
    FORGE_ARCH_COUNT
} forge_arch;

typedef enum forge_rope_type {
    FORGE_ROPE_NORM = 0, /* rotate adjacent pairs (x[2i], x[2i+1]) */
    FORGE_ROPE_NEOX = 2  /* rotate halves (x[i], x[i + n_rot/2]) */
} forge_rope_type;

typedef enum forge_vocab_type {
    FORGE_VOCAB_NONE = 0,
    FORGE_VOCAB_SPM,  /* tokenizer.ggml.model "llama": SentencePiece-style */
    FORGE_VOCAB_BPE,  /* "gpt2": byte-level BPE */
    FORGE_VOCAB_WPM,  /* "bert" */
    FORGE_VOCAB_UGM,  /* "t5" */
    FORGE_VOCAB_RWKV, /* "rwkv" */
    FORGE_VOCAB_OTHER
} forge_vocab_type;

/* Everything forge derives from a file, validated: no dimension is zero, every division exact. */
typedef struct forge_config {
    forge_arch arch;
    char arch_name[32];
    uint32_t file_type;           /* general.file_type, or UINT32_MAX when absent */
    uint32_t n_vocab;
    uint32_t n_ctx_train;
    uint32_t n_embd;
    uint32_t n_layer;
    uint32_t n_head;              /* largest over layers when given per layer */
    uint32_t n_head_kv;           /* largest over layers */
    uint32_t n_ff;                /* largest over layers (dense FFN width; 0 only for MoE-only files) */
    uint32_t head_dim;            /* key (and query) head size */
    uint32_t head_dim_v;          /* value head size */
    uint32_t n_rot;               /* rotary dimensions, even, <= head_dim */
    forge_rope_type rope_type;
    float rope_freq_base;
    float rope_freq_scale;        /* 1 / linear scaling factor */
    float rope_freq_base_swa;     /* base used on sliding-window layers */
    int has_rope_freqs;           /* rope_freqs.weight present: per-dimension factors (llama3 style) */
    float rms_eps;
    uint32_t n_expert;            /* 0 for dense models */
    uint32_t n_expert_used;
    uint32_t n_ff_exp;            /* width of one routed expert */
    uint32_t n_ff_shexp;          /* width of the shared expert, 0 when none */
    uint32_t n_swa;               /* sliding window size, 0 when every layer attends to the whole context */
    uint32_t swa_pattern;         /* every swa_pattern-th layer is global; 0 when n_swa is 0 */
    float attn_softcap;           /* 0 = none */
    float final_softcap;          /* 0 = none */
    float embd_scale;             /* multiplier applied to token embeddings (gemma: sqrt(n_embd)), else 1 */
    int tied_output;              /* 1 when output.weight is absent and token_embd serves as the head */
    int has_qkv_bias;
    int has_qk_norm;
    int has_post_norms;
    int fused_qkv;
    int fused_gate_up;            /* ffn_up holds gate and up (no separate ffn_gate) */
    forge_vocab_type vocab_type;
    int32_t bos_id, eos_id, eot_id, unk_id, pad_id; /* -1 when absent */
    int add_bos;                  /* tokenizer.ggml.add_bos_token, or the vocab type's default */
    uint8_t layer_is_swa[FORGE_MAX_LAYERS];
    uint32_t layer_n_head[FORGE_MAX_LAYERS];
    uint32_t layer_n_head_kv[FORGE_MAX_LAYERS];
    uint32_t layer_n_ff[FORGE_MAX_LAYERS];
} forge_config;

/* Derives and validates the configuration of a parsed file: metadata rules of the architecture,
   then every tensor the configuration implies (present, right shape). */
FORGE_API forge_result forge_config_derive(const forge_gguf *gguf, forge_config *out, forge_error *error);
FORGE_API const char *forge_arch_name(forge_arch arch);
FORGE_API const char *forge_vocab_type_name(forge_vocab_type type); /* "SPM", "BPE", ... */
/* llama.cpp's names for general.file_type values ("Q4_K - Medium"); NULL for unknown ids. */
FORGE_API const char *forge_file_type_name(uint32_t file_type);

/* >>sampler ------------------------------------------------------------------------------------ */

/* Turns one row of logits into one token id. The sampler owns its scratch (one block allocated at
   create: a candidate array of n_vocab entries and the repetition history), so sampling never
   allocates; it keeps the history of accepted tokens and its random state, nothing else.

   Order of application, each step only when it is on:
      1. repetition penalty  every distinct token among the last repeat_last_n accepted tokens has
                             its logit divided by repeat_penalty when positive, multiplied when
                             negative (llama.cpp's rule; applied once however often the token occurs)
      2. greedy              temperature == 0: the largest logit wins, the lowest index on ties;
                             steps 3-7 are skipped
      3. top-k               keep the k largest logits (ties: the lower index is larger)
      4. temperature         logits divided by temperature
      5. softmax             probabilities, computed in double with the largest logit subtracted
      6. top-p               keep the smallest prefix of the tokens sorted by probability whose mass
                             reaches top_p; renormalize
      7. min-p               keep tokens whose probability is at least min_p times the largest;
                             renormalize
      8. draw                one uniform double in [0, 1) from the sampler's own xoshiro256**
                             generator (seeded through splitmix64) picks from what is left
   Logits of -inf mean "never this token" (e.g. masked by a grammar); NaN and +inf are refused.
   Cost: O(n_vocab) per token, plus O(n_vocab log k) for top-k. Top-p without top-k sorts only
   the most likely candidates, as many as its mass needs (256, 1024, ...); a flat distribution
   sorts them all, O(n_vocab log n_vocab), some 25 ms for a 150k vocabulary.

   Zero-initialized, the desc means greedy decoding with nothing else on. */
typedef struct forge_sampler_desc {
    float temperature;     /* 0 = greedy (argmax); > 0 scales logits by 1/temperature; finite */
    int32_t top_k;         /* 0 = off; keep the top_k most likely tokens (above n_vocab: off) */
    float top_p;           /* 0 or 1 = off; nucleus mass in (0, 1) */
    float min_p;           /* 0 = off; in (0, 1]: drop tokens below min_p * the largest probability */
    float repeat_penalty;  /* 0 or 1 = off; > 1 discourages repetition, in (0, 1) encourages it */
    int32_t repeat_last_n; /* how many recent accepted tokens the penalty looks at; 0 = 64 */
    uint64_t seed;         /* same seed, same logits, same accepted tokens: same tokens */
    forge_allocator allocator;
} forge_sampler_desc;

typedef struct forge_sampler forge_sampler;

/* desc may be NULL (greedy). FORGE_ERR_ARGUMENT names the field and its value when a field is NaN,
   infinite or out of range, or when n_vocab is 0 or above INT32_MAX. */
FORGE_API forge_result forge_sampler_create(const forge_sampler_desc *desc, uint32_t n_vocab, forge_sampler **out,
                                            forge_error *error);
/* logits: n_vocab floats, not modified. FORGE_ERR_ARGUMENT names the first NaN or +inf logit, or
   says that every logit is -inf; *out_token is then -1. */
FORGE_API forge_result forge_sampler_sample(forge_sampler *s, const float *logits, int32_t *out_token,
                                            forge_error *error);
/* Records a token for the repetition penalty: call it for each prompt token and for each token
   sampled (sample does not record its own choice). Ids outside [0, n_vocab) are ignored. */
FORGE_API void forge_sampler_accept(forge_sampler *s, int32_t token);
/* Forgets the history and restarts the generator from the seed: the sampler behaves as new. */
FORGE_API void forge_sampler_reset(forge_sampler *s);
FORGE_API void forge_sampler_destroy(forge_sampler *s);

/* >>model -------------------------------------------------------------------------------------- */

typedef struct forge_model forge_model; /* file (mapped) + GGUF index + configuration; no device memory */

typedef struct forge_model_desc {
    forge_allocator allocator;
} forge_model_desc;

#ifndef FORGE_NO_STDIO
FORGE_API forge_result forge_model_open(const char *path, const forge_model_desc *desc, forge_model **out,
                                        forge_error *error);
#endif
/* The bytes must outlive the model. */
FORGE_API forge_result forge_model_from_memory(const void *bytes, size_t size, const forge_model_desc *desc,
                                               forge_model **out, forge_error *error);
FORGE_API void forge_model_close(forge_model *model);
FORGE_API const forge_config *forge_model_config(const forge_model *model);
FORGE_API const forge_gguf *forge_model_gguf(const forge_model *model);

/* >>plan --------------------------------------------------------------------------------------- */

/* Element type of the KV cache. Zero means the default, f16. The quantized types store keys and
   values in 32-element blocks, so they need head sizes that are multiples of 32. */
typedef enum forge_kv_type {
    FORGE_KV_DEFAULT = 0,
    FORGE_KV_F32,
    FORGE_KV_F16,
    FORGE_KV_Q8_0,
    FORGE_KV_Q4_0,
    FORGE_KV_TYPE_COUNT
} forge_kv_type;

FORGE_API const char *forge_kv_type_name(forge_kv_type type); /* "f16", "q8_0", ... */
/* Parses "f32", "f16", "q8_0" or "q4_0" (any case). */
FORGE_API forge_result forge_kv_type_parse(const char *text, forge_kv_type *out, forge_error *error);
/* Exact bytes of the KV cache for n_ctx positions: over every layer,
   n_ctx x n_head_kv x (head_dim + head_dim_v) elements of the type, in whole blocks.
   Llama-3-8B at 8192 positions of f16 is exactly 1 GiB; Qwen2.5-0.5B at 2048 is 24 MiB. */
FORGE_API forge_result forge_kv_cache_bytes(const forge_config *config, uint32_t n_ctx, forge_kv_type type,
                                            uint64_t *out_bytes, forge_error *error);

/* Host memory as a process can use it: physical memory and what is available without swapping,
   both lowered to a container's cgroup limit (v1 or v2) when one applies. */
typedef struct forge_host_memory {
    uint64_t total_bytes;
    uint64_t available_bytes;
    int cgroup_limited; /* 1 when a cgroup limit lowered either figure */
    int adjusted;       /* 1 when a reading made no sense (available above total, total 0) and was clamped */
} forge_host_memory;

#ifndef FORGE_NO_STDIO
FORGE_API forge_result forge_host_memory_query(forge_host_memory *out, forge_error *error);
#endif

#ifdef __cplusplus
}
#endif
#endif /* FORGE_H */

/* >>impl =============================================================================================== */
#ifdef FORGE_IMPLEMENTATION
#ifndef FORGE__IMPLEMENTED
#define FORGE__IMPLEMENTED

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef FORGE_MALLOC
#define FORGE_MALLOC(size) malloc(size)
#define FORGE_FREE(ptr) free(ptr)
#endif

#if defined(__GNUC__) || defined(__clang__)
#define FORGE__PRINTF(fmt_index, args_index) __attribute__((format(printf, fmt_index, args_index)))
#else
#define FORGE__PRINTF(fmt_index, args_index)
#endif

#define FORGE__MIN(a, b) ((a) < (b) ? (a) : (b))
#define FORGE__MAX(a, b) ((a) > (b) ? (a) : (b))
/* printf arguments for a file string, cut so one hostile name cannot fill the whole message */
#define FORGE__STR_ARGS(s) (int)FORGE__MIN((s).len, 160u), (s).ptr

typedef unsigned long long forge__ull;

/* >>impl-results */

FORGE_API const char *forge_result_name(forge_result result) {
    switch (result) {
#define FORGE__RESULT_NAME(name, text) case FORGE_##name: return "FORGE_" #name;
        FORGE__RESULT_LIST(FORGE__RESULT_NAME)
#undef FORGE__RESULT_NAME
    default: return "FORGE_(unknown result)";
    }
}

FORGE_API const char *forge_result_string(forge_result result) {
    switch (result) {
#define FORGE__RESULT_TEXT(name, text) case FORGE_##name: return text;
        FORGE__RESULT_LIST(FORGE__RESULT_TEXT)
#undef FORGE__RESULT_TEXT
    default: return "unknown result";
    }
}

static forge_result forge__fail(forge_error *error, forge_result result, const char *fmt, ...) FORGE__PRINTF(3, 4);
static forge_result forge__fail(forge_error *error, forge_result result, const char *fmt, ...) {
    if (error) {
        va_list args;
        error->result = result;
        va_start(args, fmt);
        vsnprintf(error->message, sizeof error->message, fmt, args);
        va_end(args);
    }
    return result;
}

static void forge__ok(forge_error *error) {
    if (error) {
        error->result = FORGE_OK;
        error->message[0] = 0;
    }
}

static void *forge__alloc(const forge_allocator *a, size_t size) {
    if (size == 0) size = 1;
    if (a && a->alloc) return a->alloc(size, a->user_data);
    return FORGE_MALLOC(size);
}

static void forge__free(const forge_allocator *a, void *ptr) {
    if (!ptr) return;
    if (a && a->free) a->free(ptr, a->user_data);
    else FORGE_FREE(ptr);
}

/* Little-endian loads that work on any host and any alignment. */
static uint16_t forge__le16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t forge__le32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t forge__le64(const uint8_t *p) { return (uint64_t)forge__le32(p) | ((uint64_t)forge__le32(p + 4) << 32); }
static float forge__lef32(const uint8_t *p) {
    uint32_t bits = forge__le32(p);
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}
static double forge__lef64(const uint8_t *p) {
    uint64_t bits = forge__le64(p);
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

/* Overflow-checked arithmetic on sizes read from files. Return 0 on overflow. */
static int forge__mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
    if (a != 0 && b > UINT64_MAX / a) return 0;
    *out = a * b;
    return 1;
}
static int forge__add_u64(uint64_t a, uint64_t b, uint64_t *out) {
    if (b > UINT64_MAX - a) return 0;
    *out = a + b;
    return 1;
}

/* >>impl-types */

FORGE_API float forge_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exponent = (h >> 10) & 0x1fu;
    uint32_t mantissa = h & 0x3ffu;
    uint32_t bits;
    float f;
    if (exponent == 0) {
        if (mantissa == 0) {
            bits = sign;
        } else { /* subnormal: renormalize */
            exponent = 127 - 15 + 1;
            while ((mantissa & 0x400u) == 0) {
                mantissa <<= 1;
                exponent--;
            }
            mantissa &= 0x3ffu;
            bits = sign | (exponent << 23) | (mantissa << 13);
        }
    } else if (exponent == 31) {
        bits = sign | 0x7f800000u | (mantissa << 13);
    } else {
        bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
    }
    memcpy(&f, &bits, sizeof f);
    return f;
}

FORGE_API uint16_t forge_f32_to_f16(float value) {
    uint32_t bits, sign, mantissa;
    int32_t exponent;
    memcpy(&bits, &value, sizeof bits);
    sign = (bits >> 16) & 0x8000u;
    exponent = (int32_t)((bits >> 23) & 0xffu);
    mantissa = bits & 0x7fffffu;
    if (exponent == 255) return (uint16_t)(sign | 0x7c00u | (mantissa ? 0x200u : 0u));
    exponent = exponent - 127 + 15;
    if (exponent >= 31) return (uint16_t)(sign | 0x7c00u);
    if (exponent <= 0) {
        uint32_t shift, half, rounded;
        if (exponent < -10) return (uint16_t)sign;
        mantissa |= 0x800000u;
        shift = (uint32_t)(14 - exponent);
        half = 1u << (shift - 1);
        rounded = mantissa >> shift;
        if ((mantissa & ((1u << shift) - 1)) > half || ((mantissa & ((1u << shift) - 1)) == half && (rounded & 1u)))
            rounded++;
        return (uint16_t)(sign | rounded);
    } else {
        uint32_t result = sign | ((uint32_t)exponent << 10) | (mantissa >> 13);
        uint32_t rest = mantissa & 0x1fffu;
        if (rest > 0x1000u || (rest == 0x1000u && (result & 1u))) result++; /* may carry into the exponent: correct */
        return (uint16_t)result;
    }
}

FORGE_API float forge_bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static float forge__half(const uint8_t *p) { return forge_f16_to_f32(forge__le16(p)); }

/* Block layouts (bytes, in file order):
   Q4_0  [d f16][16 x nibble pairs]            value = (q - 8) * d, low nibbles are elements 0..15
   Q4_1  [d f16][m f16][16 x nibble pairs]     value = q * d + m
   Q5_0  [d f16][32 high bits u32][16 pairs]   value = (q | hi << 4) - 16) * d
   Q5_1  [d f16][m f16][hi u32][16 pairs]      value = (q | hi << 4) * d + m
   Q8_0  [d f16][32 x int8]                    value = q * d
   K-quants use super-blocks of 256 elements with 6- or 8-bit sub-block scales; see each function. */

static void forge__dq_f32(const void *src, float *dst, uint64_t n) {
    const uint8_t *p = (const uint8_t *)src;
    uint64_t i;
    for (i = 0; i < n; i++) dst[i] = forge__lef32(p + 4 * i);
}

static void forge__dq_f16(const void *src, float *dst, uint64_t n) {
    const uint8_t *p = (const uint8_t *)src;
    uint64_t i;
    for (i = 0; i < n; i++) dst[i] = forge__half(p + 2 * i);
}

static void forge__dq_bf16(const void *src, float *dst, uint64_t n) {
    const uint8_t *p = (const uint8_t *)src;
    uint64_t i;
    for (i = 0; i < n; i++) dst[i] = forge_bf16_to_f32(forge__le16(p + 2 * i));
}

static void forge__dq_q4_0(const void *src, float *dst, uint64_t n_blocks) {
    const uint8_t *b = (const uint8_t *)src;
    uint64_t i;
    int j;
    for (i = 0; i < n_blocks; i++, b += 18, dst += 32) {
        float d = forge__half(b);
        for (j = 0; j < 16; j++) {
            dst[j] = (float)((b[2 + j] & 0xf) - 8) * d;
            dst[j + 16] = (float)((b[2 + j] >> 4) - 8) * d;
        }
    }
}

static void forge__dq_q4_1(const void *src, float *dst, uint64_t n_blocks) {
    const uint8_t *b = (const uint8_t *)src;
    uint64_t i;
    int j;
    for (i = 0; i < n_blocks; i++, b += 20, dst += 32) {
        float d = forge__half(b), m = forge__half(b + 2);
        for (j = 0; j < 16; j++) {
            dst[j] = (float)(b[4 + j] & 0xf) * d + m;
            dst[j + 16] = (float)(b[4 + j] >> 4) * d + m;
        }
    }
}

static void forge__dq_q5_0(const void *src, float *dst, uint64_t n_blocks) {
    const uint8_t *b = (const uint8_t *)src;
    uint64_t i;
    int j;
    for (i = 0; i < n_blocks; i++, b += 22, dst += 32) {
        float d = forge__half(b);
        uint32_t high = forge__le32(b + 2);
        for (j = 0; j < 16; j++) {
            int lo = (b[6 + j] & 0xf) | (int)(((high >> j) & 1u) << 4);
            int hi = (b[6 + j] >> 4) | (int)(((high >> (j + 16)) & 1u) << 4);
            dst[j] = (float)(lo - 16) * d;
            dst[j + 16] = (float)(hi - 16) * d;
        }
    }
}

static void forge__dq_q5_1(const void *src, float *dst, uint64_t n_blocks) {
    const uint8_t *b = (const uint8_t *)src;
    uint64_t i;
    int j;
    for (i = 0; i < n_blocks; i++, b += 24, dst += 32) {
        float d = forge__half(b), m = forge__half(b + 2);
        uint32_t high = forge__le32(b + 4);
        for (j = 0; j < 16; j++) {
            int lo = (b[8 + j] & 0xf) | (int)(((high >> j) & 1u) << 4);
            int hi = (b[8 + j] >> 4) | (int)(((high >> (j + 16)) & 1u) << 4);
            dst[j] = (float)lo * d + m;
            dst[j + 16] = (float)hi * d + m;
        }
    }
}

static void forge__dq_q8_0(const void *src, float *dst, uint64_t n_blocks) {
    const uint8_t *b = (const uint8_t *)src;
    uint64_t i;
    int j;
    for (i = 0; i < n_blocks; i++, b += 34, dst += 32) {
        float d = forge__half(b);
        for (j = 0; j < 32; j++) dst[j] = (float)(int8_t)b[2 + j] * d;
    }
}

/* Q2_K (84 bytes / 256): [scales 16: low nibble scale, high nibble min][qs 64: 2-bit][d f16][dmin f16].
   Each 128-element half reads 32 bytes of qs four times at shifts 0,2,4,6; each 16 elements has a scale. */
static void forge__dq_q2_k(const void *src, float *dst, uint64_t n_blocks) {
    const uint8_t *b = (const uint8_t *)src;
    uint64_t i;
    for (i = 0; i < n_blocks; i++, b += 84) {
        const uint8_t *scales = b, *qs = b + 16;
        float d = forge__half(b + 80), dmin = forge__half(b + 82);
        int half, shift, l, s = 0;
        for (half = 0; half < 2; half++, qs += 32) {
            for (shift = 0; shift < 8; shift += 2) {
                int part;
                for (part = 0; part < 2; part++, s++) {
                    float dl = d * (float)(scales[s] & 0xf), ml = dmin * (float)(scales[s] >> 4);
                    for (l = 0; l < 16; l++) *dst++ = dl * (float)((qs[part * 16 + l] >> shift) & 3) - ml;
                }
            }
        }
    }
}

/* Q3_K (110 bytes / 256): [hmask 32][qs 64: low 2 bits][scales 12: sixteen 6-bit values][d f16].
   Scale j: low 4 bits from byte j (j < 8) or the high nibble of byte j-8; high 2 bits from byte 8 + j%4
   at bit 2*(j/4). A clear hmask bit subtracts 4 from the 2-bit value. */
static void forge__dq_q3_k(const void *src, float *dst, uint64_t n_blocks) {
    const uint8_t *b = (const uint8_t *)src;
    uint64_t i;
    for (i = 0; i < n_blocks; i++, b += 110) {
        const uint8_t *hmask = b, *qs = b + 32, *packed = b + 96;
        float d = forge__half(b + 108);
        int scale[16], j, half, shift, l, s = 0;
        uint8_t bit = 1;
        for (j = 0; j < 16; j++) {
            int low = j < 8 ? (packed[j] & 0xf) : (packed[j - 8] >> 4);
            int high = (packed[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
            scale[j] = (low | (high << 4)) - 32;
        }
        for (half = 0; half < 2; half++, qs += 32) {
            for (shift = 0; shift < 8; shift += 2, bit = (uint8_t)(bit << 1)) {
                int part;
                for (part = 0; part < 2; part++, s++) {
                    float dl = d * (float)scale[s];
                    for (l = 0; l < 16; l++) {
                        int k = part * 16 + l;
                        int q = ((qs[k] >> shift) & 3) - ((hmask[k] & bit) ? 0 : 4);
                        *dst++ = dl * (float)q;
                    }
                }
            }
        }
    }
}

/* Scale and min j (0..7) of the 12-byte packed 6-bit table used by Q4_K and Q5_K. */
static void forge__k4_scale_min(int j, const uint8_t *packed, int *scale, int *min) {
    if (j < 4) {
        *scale = packed[j] & 63;
        *min = packed[j + 4] & 63;
    } else {
        *scale = (packed[j + 4] & 0xf) | ((packed[j - 4] >> 6) << 4);
        *min = (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4);
    }
}

/* Q4_K (144 bytes / 256): [d f16][dmin f16][scales 12][qs 128]; each 64 elements read 32 bytes,
   low nibbles then high nibbles, each 32 with its own scale and min. */
static void forge__dq_q4_k(const void *src, float *dst, uint64_t n_blocks) {
    const uint8_t *b = (const uint8_t *)src;
    uint64_t i;
    for (i = 0; i < n_blocks; i++, b += 144) {
        float d = forge__half(b), dmin = forge__half(b + 2);
        const uint8_t *packed = b + 4, *qs = b + 16;
        int chunk, l;
        for (chunk = 0; chunk < 4; chunk++, qs += 32) {
            int sc, mn;
            float d1, m1, d2, m2;
            forge__k4_scale_min(2 * chunk, packed, &sc, &mn);
            d1 = d * (float)sc;
            m1 = dmin * (float)mn;
            forge__k4_scale_min(2 * chunk + 1, packed, &sc, &mn);
            d2 = d * (float)sc;
            m2 = dmin * (float)mn;
            for (l = 0; l < 32; l++) *dst++ = d1 * (float)(qs[l] & 0xf) - m1;
            for (l = 0; l < 32; l++) *dst++ = d2 * (float)(qs[l] >> 4) - m2;
        }
    }
}

/* Q5_K (176 bytes / 256): [d][dmin][scales 12][qh 32][qs 128]; as Q4_K plus a fifth bit from qh,
   bit 2*chunk for the low-nibble half and 2*chunk+1 for the high-nibble half. */
static void forge__dq_q5_k(const void *src, float *dst, uint64_t n_blocks) {
    const uint8_t *b = (const uint8_t *)src;
    uint64_t i;
    for (i = 0; i < n_blocks; i++, b += 176) {
        float d = forge__half(b), dmin = forge__half(b + 2);
        const uint8_t *packed = b + 4, *qh = b + 16, *qs = b + 48;
        int chunk, l;
        for (chunk = 0; chunk < 4; chunk++, qs += 32) {
            int sc, mn;
            float d1, m1, d2, m2;
            uint8_t bit_lo = (uint8_t)(1u << (2 * chunk)), bit_hi = (uint8_t)(2u << (2 * chunk));
            forge__k4_scale_min(2 * chunk, packed, &sc, &mn);
            d1 = d * (float)sc;
            m1 = dmin * (float)mn;
            forge__k4_scale_min(2 * chunk + 1, packed, &sc, &mn);
            d2 = d * (float)sc;
            m2 = dmin * (float)mn;
            for (l = 0; l < 32; l++) *dst++ = d1 * (float)((qs[l] & 0xf) + ((qh[l] & bit_lo) ? 16 : 0)) - m1;
            for (l = 0; l < 32; l++) *dst++ = d2 * (float)((qs[l] >> 4) + ((qh[l] & bit_hi) ? 16 : 0)) - m2;
        }
    }
}

/* Q6_K (210 bytes / 256): [ql 128: low 4 bits][qh 64: high 2 bits][scales 16 x int8][d f16].
   Each 128-element half: element l + 32*k takes a nibble of ql and two bits of qh, k = 0..3. */
static void forge__dq_q6_k(const void *src, float *dst, uint64_t n_blocks) {
    const uint8_t *b = (const uint8_t *)src;
    uint64_t i;
    for (i = 0; i < n_blocks; i++, b += 210) {
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *scales = (const int8_t *)(b + 192);
        float d = forge__half(b + 208);
        int half, l;
        for (half = 0; half < 2; half++, ql += 64, qh += 32, scales += 8, dst += 128) {
            for (l = 0; l < 32; l++) {
                int s = l / 16;
                int q1 = ((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                dst[l] = d * (float)scales[s] * (float)q1;
                dst[l + 32] = d * (float)scales[s + 2] * (float)q2;
                dst[l + 64] = d * (float)scales[s + 4] * (float)q3;
                dst[l + 96] = d * (float)scales[s + 6] * (float)q4;
            }
        }
    }
}

/* The 16 non-uniform levels shared by IQ4_NL and IQ4_XS. */
static const int8_t forge__iq4_levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                             1,    13,   25,  38,  53,  69,  89,  113};

/* IQ4_NL (18 bytes / 32): [d f16][16 nibble pairs], value = d * level[q]. */
static void forge__dq_iq4_nl(const void *src, float *dst, uint64_t n_blocks) {
    const uint8_t *b = (const uint8_t *)src;
    uint64_t i;
    int j;
    for (i = 0; i < n_blocks; i++, b += 18, dst += 32) {
        float d = forge__half(b);
        for (j = 0; j < 16; j++) {
            dst[j] = d * (float)forge__iq4_levels[b[2 + j] & 0xf];
            dst[j + 16] = d * (float)forge__iq4_levels[b[2 + j] >> 4];
        }
    }
}

/* IQ4_XS (136 bytes / 256): [d f16][scales_h u16][scales_l 4][qs 128]; eight 32-element groups,
   group g has a 6-bit scale (low 4 bits from scales_l, high 2 from scales_h) minus 32. */
static void forge__dq_iq4_xs(const void *src, float *dst, uint64_t n_blocks) {
    const uint8_t *b = (const uint8_t *)src;
    uint64_t i;
    for (i = 0; i < n_blocks; i++, b += 136) {
        float d = forge__half(b);
        uint16_t scales_h = forge__le16(b + 2);
        const uint8_t *scales_l = b + 4, *qs = b + 8;
        int g, j;
        for (g = 0; g < 8; g++, qs += 16, dst += 32) {
            int scale = ((scales_l[g / 2] >> (4 * (g % 2))) & 0xf) | (((scales_h >> (2 * g)) & 3) << 4);
            float dl = d * (float)(scale - 32);
            for (j = 0; j < 16; j++) {
                dst[j] = dl * (float)forge__iq4_levels[qs[j] & 0xf];
                dst[j + 16] = dl * (float)forge__iq4_levels[qs[j] >> 4];
            }
        }
    }
}

static const forge_type_traits forge__type_table[] = {
    {FORGE_TYPE_F32, "F32", 1, 4, forge__dq_f32},
    {FORGE_TYPE_F16, "F16", 1, 2, forge__dq_f16},
    {FORGE_TYPE_BF16, "BF16", 1, 2, forge__dq_bf16},
    {FORGE_TYPE_Q4_0, "Q4_0", 32, 18, forge__dq_q4_0},
    {FORGE_TYPE_Q4_1, "Q4_1", 32, 20, forge__dq_q4_1},
    {FORGE_TYPE_Q5_0, "Q5_0", 32, 22, forge__dq_q5_0},
    {FORGE_TYPE_Q5_1, "Q5_1", 32, 24, forge__dq_q5_1},
    {FORGE_TYPE_Q8_0, "Q8_0", 32, 34, forge__dq_q8_0},
    {FORGE_TYPE_Q2_K, "Q2_K", 256, 84, forge__dq_q2_k},
    {FORGE_TYPE_Q3_K, "Q3_K", 256, 110, forge__dq_q3_k},
    {FORGE_TYPE_Q4_K, "Q4_K", 256, 144, forge__dq_q4_k},
    {FORGE_TYPE_Q5_K, "Q5_K", 256, 176, forge__dq_q5_k},
    {FORGE_TYPE_Q6_K, "Q6_K", 256, 210, forge__dq_q6_k},
    {FORGE_TYPE_IQ4_NL, "IQ4_NL", 32, 18, forge__dq_iq4_nl},
    {FORGE_TYPE_IQ4_XS, "IQ4_XS", 256, 136, forge__dq_iq4_xs},
};

FORGE_API const forge_type_traits *forge_type_info(uint32_t type_id) {
    size_t i;
    for (i = 0; i < sizeof forge__type_table / sizeof forge__type_table[0]; i++)
        if ((uint32_t)forge__type_table[i].type == type_id) return &forge__type_table[i];
    return NULL;
}

FORGE_API const char *forge_type_name(uint32_t type_id) {
    /* every id ggml has assigned, so a refusal can say what the file holds; NULL marks retired ids */
    static const char *const names[] = {
        "F32",     "F16",    "Q4_0",    "Q4_1",  "Q4_2",   "Q4_3",   "Q5_0",     "Q5_1",     "Q8_0",     "Q8_1",
        "Q2_K",    "Q3_K",   "Q4_K",    "Q5_K",  "Q6_K",   "Q8_K",   "IQ2_XXS",  "IQ2_XS",   "IQ3_XXS",  "IQ1_S",
        "IQ4_NL",  "IQ3_S",  "IQ2_S",   "IQ4_XS", "I8",    "I16",    "I32",      "I64",      "F64",      "IQ1_M",
        "BF16",    "Q4_0_4_4", "Q4_0_4_8", "Q4_0_8_8", "TQ1_0", "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8",
        "MXFP4"};
    if (type_id >= sizeof names / sizeof names[0]) return NULL;
    return names[type_id];
}

FORGE_API forge_result forge_type_bytes(uint32_t type_id, uint64_t n_elements, uint64_t *out_bytes) {
    const forge_type_traits *t = forge_type_info(type_id);
    if (!t || !out_bytes) return FORGE_ERR_ARGUMENT;
    if (n_elements % t->block_elems != 0) return FORGE_ERR_TENSOR_BLOCK;
    if (!forge__mul_u64(n_elements / t->block_elems, t->block_bytes, out_bytes)) return FORGE_ERR_OVERFLOW;
    return FORGE_OK;
}

FORGE_API forge_result forge_dequantize(uint32_t type_id, const void *src, float *dst, uint64_t n_elements) {
    const forge_type_traits *t = forge_type_info(type_id);
    if (!t || (!src && n_elements) || (!dst && n_elements)) return FORGE_ERR_ARGUMENT;
    if (n_elements % t->block_elems != 0) return FORGE_ERR_TENSOR_BLOCK;
    t->dequantize(src, dst, n_elements / t->block_elems);
    return FORGE_OK;
}

/* >>impl-gguf */

struct forge_gguf {
    const uint8_t *bytes;
    uint64_t size;
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset;
    uint64_t n_kv, n_tensors, n_strs;
    forge_gguf_kv *kv;
    forge_gguf_tensor *tensors;
    forge_gguf_str *strs;
    uint32_t *kv_slots, *tensor_slots; /* open-addressing tables of index + 1, 0 = empty */
    uint64_t kv_slot_mask, tensor_slot_mask;
    forge_allocator allocator;
};

static const uint8_t forge__gguf_value_bytes[FORGE_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

FORGE_API const char *forge_gguf_type_name(forge_gguf_type type) {
    static const char *const names[FORGE_GGUF_TYPE_COUNT] = {"uint8", "int8",   "uint16", "int16", "uint32",
                                                            "int32", "float32", "bool",  "string", "array",
                                                            "uint64", "int64",  "float64"};
    if ((unsigned)type >= FORGE_GGUF_TYPE_COUNT) return "unknown";
    return names[type];
}

FORGE_API int forge_gguf_str_eq(forge_gguf_str s, const char *text) {
    size_t n = text ? strlen(text) : 0;
    return s.len == n && (n == 0 || memcmp(s.ptr, text, n) == 0);
}

typedef struct forge__cursor {
    const uint8_t *bytes;
    uint64_t size, pos;
} forge__cursor;

static uint64_t forge__left(const forge__cursor *c) { return c->size - c->pos; }

static forge_result forge__need(forge__cursor *c, uint64_t n, const char *what, forge_error *e) {
    if (n > forge__left(c))
        return forge__fail(e, FORGE_ERR_TRUNCATED, "file ends at byte %llu while reading %s (needs %llu more bytes)",
                           (forge__ull)c->size, what, (forge__ull)(n - forge__left(c)));
    return FORGE_OK;
}

/* Reads a length-prefixed string; limit bounds the length before it is compared with the bytes left. */
static forge_result forge__read_str(forge__cursor *c, uint64_t limit, const char *what, forge_gguf_str *out,
                                    forge_error *e) {
    uint64_t len;
    forge_result r = forge__need(c, 8, what, e);
    if (r) return r;
    len = forge__le64(c->bytes + c->pos);
    if (len > limit)
        return forge__fail(e, FORGE_ERR_LIMIT, "%s at byte %llu has length %llu, above the limit of %llu", what,
                           (forge__ull)c->pos, (forge__ull)len, (forge__ull)limit);
    c->pos += 8;
    r = forge__need(c, len, what, e);
    if (r) return r;
    out->ptr = (const char *)(c->bytes + c->pos);
    out->len = len;
    c->pos += len;
    return FORGE_OK;
}

static int forge__is_int_type(forge_gguf_type t) {
    return t == FORGE_GGUF_UINT8 || t == FORGE_GGUF_INT8 || t == FORGE_GGUF_UINT16 || t == FORGE_GGUF_INT16 ||
           t == FORGE_GGUF_UINT32 || t == FORGE_GGUF_INT32 || t == FORGE_GGUF_UINT64 || t == FORGE_GGUF_INT64;
}

/* Reads an integer element; *is_negative set for negative signed values, *out holds the magnitude bits. */
static void forge__load_int(forge_gguf_type t, const uint8_t *p, int64_t *value, uint64_t *unsigned_value,
                            int *is_unsigned_large) {
    int64_t v = 0;
    uint64_t u = 0;
    *is_unsigned_large = 0;
    switch (t) {
    case FORGE_GGUF_UINT8: v = p[0]; break;
    case FORGE_GGUF_INT8: v = (int8_t)p[0]; break;
    case FORGE_GGUF_UINT16: v = forge__le16(p); break;
    case FORGE_GGUF_INT16: v = (int16_t)forge__le16(p); break;
    case FORGE_GGUF_UINT32: v = forge__le32(p); break;
    case FORGE_GGUF_INT32: v = (int32_t)forge__le32(p); break;
    case FORGE_GGUF_INT64: v = (int64_t)forge__le64(p); break;
    case FORGE_GGUF_UINT64:
        u = forge__le64(p);
        if (u > (uint64_t)INT64_MAX) *is_unsigned_large = 1;
        v = (int64_t)(u & (uint64_t)INT64_MAX);
        break;
    default: break;
    }
    *value = v;
    if (unsigned_value) *unsigned_value = u;
}

static uint64_t forge__hash(const char *p, uint64_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    uint64_t i;
    for (i = 0; i < n; i++) {
        h ^= (uint8_t)p[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* Names are the first member of both forge_gguf_kv and forge_gguf_tensor; stride walks either array. */
static const forge_gguf_str *forge__name_at(const void *base, size_t stride, uint32_t index) {
    return (const forge_gguf_str *)(const void *)((const char *)base + (size_t)index * stride);
}

static uint32_t forge__slot_lookup(const uint32_t *slots, uint64_t mask, const void *base, size_t stride,
                                   const char *name, uint64_t len) {
    uint64_t i;
    if (!slots) return 0;
    for (i = forge__hash(name, len) & mask;; i = (i + 1) & mask) {
        uint32_t slot = slots[i];
        const forge_gguf_str *s;
        if (slot == 0) return 0;
        s = forge__name_at(base, stride, slot - 1);
        if (s->len == len && (len == 0 || memcmp(s->ptr, name, (size_t)len) == 0)) return slot;
    }
}

/* Inserts index; returns the existing index + 1 when the name is already present, else 0. */
static uint32_t forge__slot_insert(uint32_t *slots, uint64_t mask, const void *base, size_t stride, uint32_t index) {
    const forge_gguf_str *name = forge__name_at(base, stride, index);
    uint64_t i;
    for (i = forge__hash(name->ptr, name->len) & mask;; i = (i + 1) & mask) {
        uint32_t slot = slots[i];
        const forge_gguf_str *s;
        if (slot == 0) {
            slots[i] = index + 1;
            return 0;
        }
        s = forge__name_at(base, stride, slot - 1);
        if (s->len == name->len && (name->len == 0 || memcmp(s->ptr, name->ptr, (size_t)name->len) == 0)) return slot;
    }
}

static uint64_t forge__slot_capacity(uint64_t n) {
    uint64_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    return cap;
}

/* One walk over the header, metadata and tensor infos. The first walk (g->kv == NULL) validates
   every length and counts strings; the second fills the arrays of the allocated index. */
static forge_result forge__gguf_walk(forge_gguf *g, forge_error *e) {
    forge__cursor c;
    forge_result r;
    uint64_t i, n_strs = 0, data_end = 0;
    forge_gguf_str data_end_name = {"?", 1};
    const int fill = g->kv != NULL;
    c.bytes = g->bytes;
    c.size = g->size;
    c.pos = 0;

    if (c.size < 4) return forge__fail(e, FORGE_ERR_TRUNCATED, "file is %llu bytes, too short for a GGUF header", (forge__ull)c.size);
    if (memcmp(c.bytes, "GGUF", 4) != 0)
        return forge__fail(e, FORGE_ERR_MAGIC, "file starts with bytes %02x %02x %02x %02x, not 'GGUF'", c.bytes[0],
                           c.bytes[1], c.bytes[2], c.bytes[3]);
    c.pos = 4;
    if ((r = forge__need(&c, 20, "the header", e))) return r;
    g->version = forge__le32(c.bytes + 4);
    if (g->version != 2 && g->version != 3) {
        uint32_t v = g->version;
        uint32_t swapped = (v >> 24) | ((v >> 8) & 0xff00u) | ((v << 8) & 0xff0000u) | (v << 24);
        if (swapped >= 1 && swapped <= 3)
            return forge__fail(e, FORGE_ERR_BIG_ENDIAN,
                               "GGUF version reads as %u little-endian, %u big-endian: big-endian files are not supported",
                               v, swapped);
        return forge__fail(e, FORGE_ERR_VERSION, "GGUF version %u; forge reads versions 2 and 3", v);
    }
    g->n_tensors = forge__le64(c.bytes + 8);
    g->n_kv = forge__le64(c.bytes + 16);
    c.pos = 24;
    if (g->n_tensors > FORGE_GGUF_MAX_TENSORS)
        return forge__fail(e, FORGE_ERR_LIMIT, "tensor count %llu is above the limit of %u", (forge__ull)g->n_tensors,
                           FORGE_GGUF_MAX_TENSORS);
    if (g->n_kv > FORGE_GGUF_MAX_KV)
        return forge__fail(e, FORGE_ERR_LIMIT, "metadata key count %llu is above the limit of %u", (forge__ull)g->n_kv,
                           FORGE_GGUF_MAX_KV);
    /* a key takes at least 13 bytes (length, one byte of value type... ), a tensor info at least 32 */
    if (g->n_kv * 13 > forge__left(&c))
        return forge__fail(e, FORGE_ERR_TRUNCATED, "%llu metadata keys need at least %llu bytes; the file has %llu left",
                           (forge__ull)g->n_kv, (forge__ull)(g->n_kv * 13), (forge__ull)forge__left(&c));
    g->alignment = FORGE_GGUF_DEFAULT_ALIGNMENT;

    for (i = 0; i < g->n_kv; i++) {
        forge_gguf_str key = {NULL, 0};
        uint32_t type, elem_type;
        uint64_t count = 1, value_pos;
        forge_gguf_kv *kv = fill ? &g->kv[i] : NULL;
        if ((r = forge__read_str(&c, FORGE_GGUF_MAX_NAME_BYTES, "a metadata key", &key, e))) return r;
        if ((r = forge__need(&c, 4, "a value type", e))) return r;
        type = forge__le32(c.bytes + c.pos);
        c.pos += 4;
        if (type >= FORGE_GGUF_TYPE_COUNT)
            return forge__fail(e, FORGE_ERR_VALUE_TYPE, "key '%.*s' has value type %u; known types are 0..%d",
                               FORGE__STR_ARGS(key), type, FORGE_GGUF_TYPE_COUNT - 1);
        elem_type = type;
        if (type == FORGE_GGUF_ARRAY) {
            if ((r = forge__need(&c, 12, "an array header", e))) return r;
            elem_type = forge__le32(c.bytes + c.pos);
            count = forge__le64(c.bytes + c.pos + 4);
            c.pos += 12;
            if (elem_type == FORGE_GGUF_ARRAY)
                return forge__fail(e, FORGE_ERR_NESTED_ARRAY, "key '%.*s' is an array of arrays", FORGE__STR_ARGS(key));
            if (elem_type >= FORGE_GGUF_TYPE_COUNT)
                return forge__fail(e, FORGE_ERR_VALUE_TYPE, "key '%.*s' is an array of value type %u; known types are 0..%d",
                                   FORGE__STR_ARGS(key), elem_type, FORGE_GGUF_TYPE_COUNT - 1);
            if (count > FORGE_GGUF_MAX_ARRAY_COUNT)
                return forge__fail(e, FORGE_ERR_LIMIT, "key '%.*s' has %llu array elements, above the limit of %u",
                                   FORGE__STR_ARGS(key), (forge__ull)count, FORGE_GGUF_MAX_ARRAY_COUNT);
        }
        value_pos = c.pos;
        if (kv) {
            kv->key = key;
            kv->type = (forge_gguf_type)type;
            kv->elem_type = (forge_gguf_type)elem_type;
            kv->count = count;
            kv->data = NULL;
            kv->strs = NULL;
        }
        if (elem_type == FORGE_GGUF_STRING) {
            uint64_t k;
            /* count <= 2^28, so count * 8 cannot overflow */
            if (count * 8 > forge__left(&c))
                return forge__fail(e, FORGE_ERR_TRUNCATED, "key '%.*s' claims %llu strings; the file has %llu bytes left",
                                   FORGE__STR_ARGS(key), (forge__ull)count, (forge__ull)forge__left(&c));
            if (kv) kv->strs = g->strs + n_strs;
            for (k = 0; k < count; k++) {
                forge_gguf_str s = {NULL, 0};
                if ((r = forge__read_str(&c, FORGE_GGUF_MAX_STRING_BYTES, "a string value", &s, e))) return r;
                if (fill) g->strs[n_strs] = s;
                n_strs++;
            }
        } else {
            uint64_t bytes = count * forge__gguf_value_bytes[elem_type]; /* <= 2^31 */
            if (bytes > forge__left(&c))
                return forge__fail(e, FORGE_ERR_TRUNCATED, "key '%.*s' needs %llu value bytes; the file has %llu left",
                                   FORGE__STR_ARGS(key), (forge__ull)bytes, (forge__ull)forge__left(&c));
            if (kv) kv->data = c.bytes + value_pos;
            c.pos += bytes;
        }
        if (forge_gguf_str_eq(key, "general.alignment")) {
            int64_t v = 0;
            uint64_t u;
            int large;
            if (type == FORGE_GGUF_ARRAY || !forge__is_int_type((forge_gguf_type)type))
                return forge__fail(e, FORGE_ERR_ALIGNMENT, "general.alignment has type %s; it must be an integer",
                                   forge_gguf_type_name((forge_gguf_type)type));
            forge__load_int((forge_gguf_type)type, c.bytes + value_pos, &v, &u, &large);
            if (large || v <= 0 || v > (int64_t)FORGE_GGUF_MAX_ALIGNMENT || (v & (v - 1)) != 0)
                return forge__fail(e, FORGE_ERR_ALIGNMENT,
                                   "general.alignment is %lld; it must be a power of two from 1 to %u",
                                   large ? -1LL : (long long)v, FORGE_GGUF_MAX_ALIGNMENT);
            g->alignment = (uint64_t)v;
        }
    }

    if (g->n_tensors * 32 > forge__left(&c))
        return forge__fail(e, FORGE_ERR_TRUNCATED, "%llu tensor infos need at least %llu bytes; the file has %llu left",
                           (forge__ull)g->n_tensors, (forge__ull)(g->n_tensors * 32), (forge__ull)forge__left(&c));

    for (i = 0; i < g->n_tensors; i++) {
        forge_gguf_str name = {NULL, 0};
        uint32_t n_dims, type, d;
        uint64_t ne[FORGE_GGUF_MAX_DIMS] = {1, 1, 1, 1}, n_elements = 1, n_bytes, offset, end;
        const forge_type_traits *traits;
        if ((r = forge__read_str(&c, FORGE_GGUF_MAX_NAME_BYTES, "a tensor name", &name, e))) return r;
        if ((r = forge__need(&c, 4, "a tensor's dimension count", e))) return r;
        n_dims = forge__le32(c.bytes + c.pos);
        c.pos += 4;
        if (n_dims == 0 || n_dims > FORGE_GGUF_MAX_DIMS)
            return forge__fail(e, FORGE_ERR_TENSOR_DIMS, "tensor '%.*s' has %u dimensions; forge reads 1 to %d",
                               FORGE__STR_ARGS(name), n_dims, FORGE_GGUF_MAX_DIMS);
        if ((r = forge__need(&c, 8ull * n_dims + 12, "a tensor's shape, type and offset", e))) return r;
        for (d = 0; d < n_dims; d++) {
            ne[d] = forge__le64(c.bytes + c.pos + 8ull * d);
            if (ne[d] == 0)
                return forge__fail(e, FORGE_ERR_TENSOR_DIMS, "tensor '%.*s' has size 0 in dimension %u",
                                   FORGE__STR_ARGS(name), d);
            if (ne[d] > (uint64_t)INT64_MAX || !forge__mul_u64(n_elements, ne[d], &n_elements) ||
                n_elements > (uint64_t)INT64_MAX)
                return forge__fail(e, FORGE_ERR_OVERFLOW,
                                   "tensor '%.*s': element count overflows at dimension %u (size %llu)",
                                   FORGE__STR_ARGS(name), d, (forge__ull)ne[d]);
        }
        c.pos += 8ull * n_dims;
        type = forge__le32(c.bytes + c.pos);
        offset = forge__le64(c.bytes + c.pos + 4);
        c.pos += 12;
        traits = forge_type_info(type);
        if (!traits) {
            const char *type_name = forge_type_name(type);
            return forge__fail(e, FORGE_ERR_TENSOR_TYPE, "tensor '%.*s' has type %s (id %u), which forge does not support",
                               FORGE__STR_ARGS(name), type_name ? type_name : "unknown", type);
        }
        if (ne[0] % traits->block_elems != 0)
            return forge__fail(e, FORGE_ERR_TENSOR_BLOCK,
                               "tensor '%.*s' of type %s has rows of %llu elements, not a multiple of the block size %u",
                               FORGE__STR_ARGS(name), traits->name, (forge__ull)ne[0], traits->block_elems);
        if (!forge__mul_u64(n_elements / traits->block_elems, traits->block_bytes, &n_bytes))
            return forge__fail(e, FORGE_ERR_OVERFLOW, "tensor '%.*s': byte size of %llu %s elements overflows",
                               FORGE__STR_ARGS(name), (forge__ull)n_elements, traits->name);
        if (offset % g->alignment != 0)
            return forge__fail(e, FORGE_ERR_TENSOR_OFFSET, "tensor '%.*s' has offset %llu, not a multiple of the alignment %llu",
                               FORGE__STR_ARGS(name), (forge__ull)offset, (forge__ull)g->alignment);
        if (!forge__add_u64(offset, n_bytes, &end))
            return forge__fail(e, FORGE_ERR_TENSOR_OFFSET, "tensor '%.*s': offset %llu plus size %llu overflows",
                               FORGE__STR_ARGS(name), (forge__ull)offset, (forge__ull)n_bytes);
        if (end > data_end) {
            data_end = end;
            data_end_name = name;
        }
        if (fill) {
            forge_gguf_tensor *t = &g->tensors[i];
            t->name = name;
            t->type = type;
            t->n_dims = n_dims;
            memcpy(t->ne, ne, sizeof ne);
            t->n_elements = n_elements;
            t->n_bytes = n_bytes;
            t->offset = offset;
            t->data = NULL;
        }
    }

    /* c.pos <= size and alignment <= 2^16: the sum cannot overflow */
    g->data_offset = (c.pos + g->alignment - 1) / g->alignment * g->alignment;
    if (g->n_tensors > 0 && (g->data_offset > g->size || data_end > g->size - g->data_offset))
        return forge__fail(e, FORGE_ERR_TENSOR_OFFSET,
                           "tensor '%.*s' ends %llu bytes into the data section, which starts at byte %llu of a "
                           "%llu-byte file",
                           FORGE__STR_ARGS(data_end_name), (forge__ull)data_end, (forge__ull)g->data_offset,
                           (forge__ull)g->size);
    if (g->data_offset > g->size) g->data_offset = g->size; /* no tensors: no data section */
    if (fill) {
        for (i = 0; i < g->n_tensors; i++) g->tensors[i].data = g->bytes + g->data_offset + g->tensors[i].offset;
    } else {
        g->n_strs = n_strs;
    }
    return FORGE_OK;
}

typedef struct forge__span {
    uint64_t begin, end;
    uint32_t index;
} forge__span;

static int forge__span_cmp(const void *a, const void *b) {
    const forge__span *x = (const forge__span *)a, *y = (const forge__span *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->index < y->index ? -1 : (x->index > y->index);
}

static size_t forge__align8(size_t n) { return (n + 7) & ~(size_t)7; }

FORGE_API forge_result forge_gguf_parse(const void *bytes, size_t size, const forge_allocator *allocator,
                                        forge_gguf **out, forge_error *error) {
    forge_gguf probe, *g;
    forge_result r;
    uint64_t kv_cap, tensor_cap, total, i;
    size_t off_kv, off_tensors, off_strs, off_kv_slots, off_tensor_slots, off_spans;
    forge__span *spans;
    char *block;

    if (out) *out = NULL;
    if (!out || (!bytes && size)) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_gguf_parse: null argument");
    memset(&probe, 0, sizeof probe);
    probe.bytes = (const uint8_t *)bytes;
    probe.size = size;
    if (allocator) probe.allocator = *allocator;
    if ((r = forge__gguf_walk(&probe, error))) return r;

    /* Everything the index needs in one allocation; every count here is bounded by the file size. */
    kv_cap = forge__slot_capacity(probe.n_kv);
    tensor_cap = forge__slot_capacity(probe.n_tensors);
    off_kv = forge__align8(sizeof(forge_gguf));
    off_tensors = off_kv + forge__align8((size_t)probe.n_kv * sizeof(forge_gguf_kv));
    off_strs = off_tensors + forge__align8((size_t)probe.n_tensors * sizeof(forge_gguf_tensor));
    off_kv_slots = off_strs + forge__align8((size_t)probe.n_strs * sizeof(forge_gguf_str));
    off_tensor_slots = off_kv_slots + forge__align8((size_t)kv_cap * sizeof(uint32_t));
    off_spans = off_tensor_slots + forge__align8((size_t)tensor_cap * sizeof(uint32_t));
    total = (uint64_t)off_spans + probe.n_tensors * sizeof(forge__span);
    if (total > (uint64_t)SIZE_MAX / 2 || probe.n_strs > (uint64_t)SIZE_MAX / sizeof(forge_gguf_str) / 2)
        return forge__fail(error, FORGE_ERR_LIMIT, "index of %llu bytes does not fit in this address space", (forge__ull)total);
    block = (char *)forge__alloc(allocator, (size_t)total);
    if (!block)
        return forge__fail(error, FORGE_ERR_HOST_MEMORY, "could not allocate %llu bytes for the GGUF index", (forge__ull)total);
    memset(block, 0, (size_t)total);
    g = (forge_gguf *)(void *)block;
    *g = probe;
    g->kv = (forge_gguf_kv *)(void *)(block + off_kv);
    g->tensors = (forge_gguf_tensor *)(void *)(block + off_tensors);
    g->strs = (forge_gguf_str *)(void *)(block + off_strs);
    g->kv_slots = (uint32_t *)(void *)(block + off_kv_slots);
    g->tensor_slots = (uint32_t *)(void *)(block + off_tensor_slots);
    g->kv_slot_mask = kv_cap - 1;
    g->tensor_slot_mask = tensor_cap - 1;
    spans = (forge__span *)(void *)(block + off_spans);
    if ((r = forge__gguf_walk(g, error))) goto fail; /* cannot fail after the first walk passed; kept for safety */

    for (i = 0; i < g->n_kv; i++) {
        uint32_t prev = forge__slot_insert(g->kv_slots, g->kv_slot_mask, g->kv, sizeof(forge_gguf_kv), (uint32_t)i);
        if (prev) {
            r = forge__fail(error, FORGE_ERR_DUPLICATE_KEY, "metadata key '%.*s' appears twice (entries %u and %llu)",
                            FORGE__STR_ARGS(g->kv[i].key), prev - 1, (forge__ull)i);
            goto fail;
        }
    }
    for (i = 0; i < g->n_tensors; i++) {
        uint32_t prev =
            forge__slot_insert(g->tensor_slots, g->tensor_slot_mask, g->tensors, sizeof(forge_gguf_tensor), (uint32_t)i);
        if (prev) {
            r = forge__fail(error, FORGE_ERR_DUPLICATE_TENSOR, "tensor name '%.*s' appears twice (tensors %u and %llu)",
                            FORGE__STR_ARGS(g->tensors[i].name), prev - 1, (forge__ull)i);
            goto fail;
        }
        spans[i].begin = g->tensors[i].offset;
        spans[i].end = g->tensors[i].offset + g->tensors[i].n_bytes;
        spans[i].index = (uint32_t)i;
    }
    if (g->n_tensors > 1) qsort(spans, (size_t)g->n_tensors, sizeof *spans, forge__span_cmp);
    for (i = 1; i < g->n_tensors; i++) {
        if (spans[i].begin < spans[i - 1].end) {
            const forge_gguf_tensor *a = &g->tensors[spans[i - 1].index], *b = &g->tensors[spans[i].index];
            r = forge__fail(error, FORGE_ERR_TENSOR_OFFSET,
                            "tensors '%.*s' [%llu, %llu) and '%.*s' [%llu, %llu) overlap in the data section",
                            FORGE__STR_ARGS(a->name), (forge__ull)spans[i - 1].begin, (forge__ull)spans[i - 1].end,
                            FORGE__STR_ARGS(b->name), (forge__ull)spans[i].begin, (forge__ull)spans[i].end);
            goto fail;
        }
    }
    *out = g;
    forge__ok(error);
    return FORGE_OK;
fail:
    forge__free(allocator, block);
    return r;
}

FORGE_API void forge_gguf_free(forge_gguf *gguf) {
    if (gguf) {
        forge_allocator a = gguf->allocator;
        forge__free(&a, gguf);
    }
}

FORGE_API uint32_t forge_gguf_version(const forge_gguf *g) { return g ? g->version : 0; }
FORGE_API uint64_t forge_gguf_alignment(const forge_gguf *g) { return g ? g->alignment : 0; }
FORGE_API uint64_t forge_gguf_data_offset(const forge_gguf *g) { return g ? g->data_offset : 0; }
FORGE_API uint64_t forge_gguf_kv_count(const forge_gguf *g) { return g ? g->n_kv : 0; }
FORGE_API uint64_t forge_gguf_tensor_count(const forge_gguf *g) { return g ? g->n_tensors : 0; }

FORGE_API const forge_gguf_kv *forge_gguf_kv_at(const forge_gguf *g, uint64_t index) {
    return g && index < g->n_kv ? &g->kv[index] : NULL;
}

FORGE_API const forge_gguf_tensor *forge_gguf_tensor_at(const forge_gguf *g, uint64_t index) {
    return g && index < g->n_tensors ? &g->tensors[index] : NULL;
}

FORGE_API const forge_gguf_kv *forge_gguf_find_kv(const forge_gguf *g, const char *key) {
    uint32_t slot;
    if (!g || !key) return NULL;
    slot = forge__slot_lookup(g->kv_slots, g->kv_slot_mask, g->kv, sizeof(forge_gguf_kv), key, strlen(key));
    return slot ? &g->kv[slot - 1] : NULL;
}

FORGE_API const forge_gguf_tensor *forge_gguf_find_tensor(const forge_gguf *g, const char *name) {
    uint32_t slot;
    if (!g || !name) return NULL;
    slot = forge__slot_lookup(g->tensor_slots, g->tensor_slot_mask, g->tensors, sizeof(forge_gguf_tensor), name,
                              strlen(name));
    return slot ? &g->tensors[slot - 1] : NULL;
}

static forge_result forge__wrong_type(const forge_gguf_kv *kv, const char *wanted, forge_error *e) {
    if (kv->type == FORGE_GGUF_ARRAY)
        return forge__fail(e, FORGE_ERR_KEY_TYPE, "key '%.*s' is an array of %s; expected %s", FORGE__STR_ARGS(kv->key),
                           forge_gguf_type_name(kv->elem_type), wanted);
    return forge__fail(e, FORGE_ERR_KEY_TYPE, "key '%.*s' has type %s; expected %s", FORGE__STR_ARGS(kv->key),
                       forge_gguf_type_name(kv->type), wanted);
}

static forge_result forge__int_value(const forge_gguf_kv *kv, forge_gguf_type t, const uint8_t *p, int64_t *out,
                                     forge_error *e) {
    int64_t v = 0;
    uint64_t u;
    int large;
    forge__load_int(t, p, &v, &u, &large);
    if (large)
        return forge__fail(e, FORGE_ERR_KEY_TYPE, "key '%.*s' holds %llu, which does not fit in a signed 64-bit integer",
                           FORGE__STR_ARGS(kv->key), (forge__ull)u);
    *out = v;
    return FORGE_OK;
}

FORGE_API forge_result forge_gguf_kv_int(const forge_gguf_kv *kv, int64_t *out, forge_error *e) {
    if (!kv || !out) return forge__fail(e, FORGE_ERR_ARGUMENT, "forge_gguf_kv_int: null argument");
    if (kv->type == FORGE_GGUF_ARRAY || !forge__is_int_type(kv->type)) return forge__wrong_type(kv, "an integer", e);
    return forge__int_value(kv, kv->type, kv->data, out, e);
}

FORGE_API forge_result forge_gguf_kv_int_at(const forge_gguf_kv *kv, uint64_t i, int64_t *out, forge_error *e) {
    if (!kv || !out) return forge__fail(e, FORGE_ERR_ARGUMENT, "forge_gguf_kv_int_at: null argument");
    if (kv->type != FORGE_GGUF_ARRAY || !forge__is_int_type(kv->elem_type))
        return forge__wrong_type(kv, "an array of integers", e);
    if (i >= kv->count)
        return forge__fail(e, FORGE_ERR_ARGUMENT, "key '%.*s': element %llu of %llu", FORGE__STR_ARGS(kv->key),
                           (forge__ull)i, (forge__ull)kv->count);
    return forge__int_value(kv, kv->elem_type, kv->data + i * forge__gguf_value_bytes[kv->elem_type], out, e);
}

static forge_result forge__float_value(const forge_gguf_kv *kv, forge_gguf_type t, const uint8_t *p, double *out,
                                       forge_error *e) {
    if (t == FORGE_GGUF_FLOAT32) *out = forge__lef32(p);
    else if (t == FORGE_GGUF_FLOAT64) *out = forge__lef64(p);
    else {
        int64_t v = 0;
        forge_result r = forge__int_value(kv, t, p, &v, e);
        if (r) return r;
        *out = (double)v;
    }
    return FORGE_OK;
}

FORGE_API forge_result forge_gguf_kv_float(const forge_gguf_kv *kv, double *out, forge_error *e) {
    if (!kv || !out) return forge__fail(e, FORGE_ERR_ARGUMENT, "forge_gguf_kv_float: null argument");
    if (kv->type != FORGE_GGUF_FLOAT32 && kv->type != FORGE_GGUF_FLOAT64 && !forge__is_int_type(kv->type))
        return forge__wrong_type(kv, "a number", e);
    return forge__float_value(kv, kv->type, kv->data, out, e);
}

FORGE_API forge_result forge_gguf_kv_float_at(const forge_gguf_kv *kv, uint64_t i, double *out, forge_error *e) {
    if (!kv || !out) return forge__fail(e, FORGE_ERR_ARGUMENT, "forge_gguf_kv_float_at: null argument");
    if (kv->type != FORGE_GGUF_ARRAY ||
        (kv->elem_type != FORGE_GGUF_FLOAT32 && kv->elem_type != FORGE_GGUF_FLOAT64 && !forge__is_int_type(kv->elem_type)))
        return forge__wrong_type(kv, "an array of numbers", e);
    if (i >= kv->count)
        return forge__fail(e, FORGE_ERR_ARGUMENT, "key '%.*s': element %llu of %llu", FORGE__STR_ARGS(kv->key),
                           (forge__ull)i, (forge__ull)kv->count);
    return forge__float_value(kv, kv->elem_type, kv->data + i * forge__gguf_value_bytes[kv->elem_type], out, e);
}

FORGE_API forge_result forge_gguf_kv_bool(const forge_gguf_kv *kv, int *out, forge_error *e) {
    if (!kv || !out) return forge__fail(e, FORGE_ERR_ARGUMENT, "forge_gguf_kv_bool: null argument");
    if (kv->type != FORGE_GGUF_BOOL) return forge__wrong_type(kv, "a bool", e);
    *out = kv->data[0] != 0;
    return FORGE_OK;
}

FORGE_API forge_result forge_gguf_kv_str(const forge_gguf_kv *kv, forge_gguf_str *out, forge_error *e) {
    if (!kv || !out) return forge__fail(e, FORGE_ERR_ARGUMENT, "forge_gguf_kv_str: null argument");
    if (kv->type != FORGE_GGUF_STRING) return forge__wrong_type(kv, "a string", e);
    *out = kv->strs[0];
    return FORGE_OK;
}

/* >>impl-file */

#ifndef FORGE_NO_STDIO
#if !defined(FORGE_NO_MMAP) && defined(_WIN32)
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>
#define FORGE__MAP_WIN32 1
#elif !defined(FORGE_NO_MMAP) && (defined(__unix__) || defined(__APPLE__))
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#define FORGE__MAP_POSIX 1
#endif

static forge_result forge__read_whole(const char *path, const forge_allocator *allocator, forge_file *out,
                                      forge_error *e) {
    FILE *f = fopen(path, "rb");
    long end;
    uint8_t *buf;
    if (!f) return forge__fail(e, FORGE_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    if (fseek(f, 0, SEEK_END) != 0 || (end = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return forge__fail(e, FORGE_ERR_IO, "cannot find the size of '%s'", path);
    }
    buf = (uint8_t *)forge__alloc(allocator, (size_t)end);
    if (!buf) {
        fclose(f);
        return forge__fail(e, FORGE_ERR_HOST_MEMORY, "cannot allocate %ld bytes to read '%s'", end, path);
    }
    if (end > 0 && fread(buf, 1, (size_t)end, f) != (size_t)end) {
        fclose(f);
        forge__free(allocator, buf);
        return forge__fail(e, FORGE_ERR_IO, "short read of '%s'", path);
    }
    fclose(f);
    out->bytes = buf;
    out->size = (uint64_t)end;
    out->mapped = 0;
    return FORGE_OK;
}

FORGE_API forge_result forge_file_open(const char *path, const forge_allocator *allocator, forge_file *out,
                                       forge_error *error) {
    if (!out || !path) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_file_open: null argument");
    memset(out, 0, sizeof *out);
    if (allocator) out->allocator = *allocator;
#if defined(FORGE__MAP_POSIX)
    {
        struct stat st;
        int fd = open(path, O_RDONLY);
        if (fd < 0) return forge__fail(error, FORGE_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
        if (fstat(fd, &st) != 0) {
            close(fd);
            return forge__fail(error, FORGE_ERR_IO, "cannot stat '%s'", path);
        }
        if (S_ISDIR(st.st_mode)) {
            close(fd);
            return forge__fail(error, FORGE_ERR_IO, "'%s' is a directory", path);
        }
        if (st.st_size > 0 && (uint64_t)st.st_size <= (uint64_t)SIZE_MAX) {
            void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
            if (p != MAP_FAILED) {
                close(fd);
                out->bytes = (const uint8_t *)p;
                out->size = (uint64_t)st.st_size;
                out->mapped = 1;
                forge__ok(error);
                return FORGE_OK;
            }
        }
        close(fd); /* empty or unmappable (a pipe, say): read it instead */
    }
#elif defined(FORGE__MAP_WIN32)
    {
        HANDLE file = CreateFileA(path, GENERIC_READ, FILE_SHARE_READ, NULL, OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, NULL);
        if (file != INVALID_HANDLE_VALUE) {
            LARGE_INTEGER size;
            if (GetFileSizeEx(file, &size) && size.QuadPart > 0) {
                HANDLE mapping = CreateFileMappingA(file, NULL, PAGE_READONLY, 0, 0, NULL);
                if (mapping) {
                    void *p = MapViewOfFile(mapping, FILE_MAP_READ, 0, 0, 0);
                    CloseHandle(mapping);
                    if (p) {
                        CloseHandle(file);
                        out->bytes = (const uint8_t *)p;
                        out->size = (uint64_t)size.QuadPart;
                        out->mapped = 1;
                        forge__ok(error);
                        return FORGE_OK;
                    }
                }
            }
            CloseHandle(file);
        }
    }
#endif
    {
        forge_result r = forge__read_whole(path, allocator, out, error);
        if (r == FORGE_OK) forge__ok(error);
        return r;
    }
}

FORGE_API void forge_file_close(forge_file *file) {
    if (!file || !file->bytes) return;
    if (file->mapped) {
#if defined(FORGE__MAP_POSIX)
        munmap((void *)(uintptr_t)file->bytes, (size_t)file->size);
#elif defined(FORGE__MAP_WIN32)
        UnmapViewOfFile(file->bytes);
#endif
    } else {
        forge__free(&file->allocator, (void *)(uintptr_t)file->bytes);
    }
    file->bytes = NULL;
    file->size = 0;
}
#endif /* FORGE_NO_STDIO */

/* >>impl-config */

typedef struct forge__arch_rules {
    forge_arch arch;
    const char *name;
    forge_rope_type rope_type;
    uint8_t qkv_bias_required; /* biases are optional elsewhere, but used when present */
    uint8_t qk_norm;           /* per-head RMSNorm of Q and K */
    uint8_t post_norms;        /* norms after attention and after the FFN */
    uint8_t fused_gate_up;     /* ffn_up carries gate and up, no ffn_gate */
    uint8_t gemma_family;      /* embeddings scaled by sqrt(n_embd), output tied */
    uint8_t moe;               /* experts required */
} forge__arch_rules;

static const forge__arch_rules forge__archs[] = {
    {FORGE_ARCH_LLAMA, "llama", FORGE_ROPE_NORM, 0, 0, 0, 0, 0, 0},
    {FORGE_ARCH_QWEN2, "qwen2", FORGE_ROPE_NEOX, 1, 0, 0, 0, 0, 0},
    {FORGE_ARCH_QWEN3, "qwen3", FORGE_ROPE_NEOX, 0, 1, 0, 0, 0, 0},
    {FORGE_ARCH_GEMMA, "gemma", FORGE_ROPE_NEOX, 0, 0, 0, 0, 1, 0},
    {FORGE_ARCH_GEMMA2, "gemma2", FORGE_ROPE_NEOX, 0, 0, 1, 0, 1, 0},
    {FORGE_ARCH_GEMMA3, "gemma3", FORGE_ROPE_NEOX, 0, 1, 1, 0, 1, 0},
    {FORGE_ARCH_PHI3, "phi3", FORGE_ROPE_NEOX, 0, 0, 0, 1, 0, 0},
    {FORGE_ARCH_QWEN2MOE, "qwen2moe", FORGE_ROPE_NEOX, 1, 0, 0, 0, 0, 1},
    {FORGE_ARCH_QWEN3MOE, "qwen3moe", FORGE_ROPE_NEOX, 0, 1, 0, 0, 0, 1},
    {FORGE_ARCH_GLM4, "glm4", FORGE_ROPE_NORM, 0, 0, 1, 1, 0, 0},
};

FORGE_API const char *forge_arch_name(forge_arch arch) {
    size_t i;
    for (i = 0; i < sizeof forge__archs / sizeof forge__archs[0]; i++)
        if (forge__archs[i].arch == arch) return forge__archs[i].name;
    return "unknown";
}

FORGE_API const char *forge_vocab_type_name(forge_vocab_type type) {
    switch (type) {
    case FORGE_VOCAB_NONE: return "none";
    case FORGE_VOCAB_SPM: return "SPM";
    case FORGE_VOCAB_BPE: return "BPE";
    case FORGE_VOCAB_WPM: return "WPM";
    case FORGE_VOCAB_UGM: return "UGM";
    case FORGE_VOCAB_RWKV: return "RWKV";
    default: return "other";
    }
}

FORGE_API const char *forge_file_type_name(uint32_t file_type) {
    static const char *const names[] = {
        "all F32",           "F16",               "Q4_0",              "Q4_1",          NULL,
        NULL,                NULL,                "Q8_0",              "Q5_0",          "Q5_1",
        "Q2_K - Medium",     "Q3_K - Small",      "Q3_K - Medium",     "Q3_K - Large",  "Q4_K - Small",
        "Q4_K - Medium",     "Q5_K - Small",      "Q5_K - Medium",     "Q6_K",          "IQ2_XXS - 2.0625 bpw",
        "IQ2_XS - 2.3125 bpw", "Q2_K - Small",    "IQ3_XS - 3.3 bpw",  "IQ3_XXS - 3.0625 bpw", "IQ1_S - 1.5625 bpw",
        "IQ4_NL - 4.5 bpw",  "IQ3_S - 3.4375 bpw", "IQ3_S mix - 3.66 bpw", "IQ2_S - 2.5 bpw", "IQ2_M - 2.7 bpw",
        "IQ4_XS - 4.25 bpw", "IQ1_M - 1.75 bpw",  "BF16"};
    if (file_type >= sizeof names / sizeof names[0]) return NULL;
    return names[file_type];
}

/* Reading metadata for the configuration: "{arch}.suffix" keys, each failure naming the key. */
typedef struct forge__keys {
    const forge_gguf *g;
    const char *arch;
    forge_error *e;
    char key[160];
} forge__keys;

static const forge_gguf_kv *forge__arch_kv(forge__keys *k, const char *suffix) {
    snprintf(k->key, sizeof k->key, "%s.%s", k->arch, suffix);
    return forge_gguf_find_kv(k->g, k->key);
}

/* A dimension: an integer key, 0 .. limit. *found tells whether the key exists. */
static forge_result forge__key_u32(forge__keys *k, const forge_gguf_kv *kv, const char *name, uint32_t limit,
                                   uint32_t *out) {
    int64_t v = 0;
    forge_result r = forge_gguf_kv_int(kv, &v, k->e);
    if (r) return r;
    if (v < 0 || (uint64_t)v > limit)
        return forge__fail(k->e, FORGE_ERR_CONFIG, "%s is %lld; it must be between 0 and %u", name, (long long)v, limit);
    *out = (uint32_t)v;
    return FORGE_OK;
}

static forge_result forge__arch_u32(forge__keys *k, const char *suffix, int required, uint32_t fallback, uint32_t limit,
                                    uint32_t *out) {
    const forge_gguf_kv *kv = forge__arch_kv(k, suffix);
    if (!kv) {
        if (required) return forge__fail(k->e, FORGE_ERR_MISSING_KEY, "required key '%s' is missing", k->key);
        *out = fallback;
        return FORGE_OK;
    }
    return forge__key_u32(k, kv, k->key, limit, out);
}

static forge_result forge__arch_f32(forge__keys *k, const char *suffix, int required, float fallback, float *out) {
    const forge_gguf_kv *kv = forge__arch_kv(k, suffix);
    double v = 0.0;
    forge_result r;
    if (!kv) {
        if (required) return forge__fail(k->e, FORGE_ERR_MISSING_KEY, "required key '%s' is missing", k->key);
        *out = fallback;
        return FORGE_OK;
    }
    if ((r = forge_gguf_kv_float(kv, &v, k->e))) return r;
    if (!(v == v) || v > 3.0e38 || v < -3.0e38)
        return forge__fail(k->e, FORGE_ERR_CONFIG, "key '%s' is %g, not a finite number", k->key, v);
    *out = (float)v;
    return FORGE_OK;
}

/* A per-layer value: one integer for every layer, or an array with one entry per layer. */
static forge_result forge__arch_layers(forge__keys *k, const char *suffix, int required, const uint32_t *fallback,
                                       uint32_t n_layer, uint32_t limit, uint32_t *out, uint32_t *out_max) {
    const forge_gguf_kv *kv = forge__arch_kv(k, suffix);
    uint32_t i, max = 0;
    forge_result r;
    if (!kv) {
        if (required || !fallback) return forge__fail(k->e, FORGE_ERR_MISSING_KEY, "required key '%s' is missing", k->key);
        for (i = 0; i < n_layer; i++) out[i] = fallback[i];
    } else if (kv->type == FORGE_GGUF_ARRAY) {
        if (kv->count != n_layer)
            return forge__fail(k->e, FORGE_ERR_CONFIG, "key '%s' has %llu entries for %u layers", k->key,
                               (forge__ull)kv->count, n_layer);
        for (i = 0; i < n_layer; i++) {
            int64_t v = 0;
            if ((r = forge_gguf_kv_int_at(kv, i, &v, k->e))) return r;
            if (v < 0 || (uint64_t)v > limit)
                return forge__fail(k->e, FORGE_ERR_CONFIG, "key '%s' is %lld at layer %u; it must be between 0 and %u",
                                   k->key, (long long)v, i, limit);
            out[i] = (uint32_t)v;
        }
    } else {
        uint32_t v = 0;
        if ((r = forge__key_u32(k, kv, k->key, limit, &v))) return r;
        for (i = 0; i < n_layer; i++) out[i] = v;
    }
    for (i = 0; i < n_layer; i++) max = FORGE__MAX(max, out[i]);
    *out_max = max;
    return FORGE_OK;
}

static forge_result forge__token_id(forge__keys *k, const char *key, uint32_t n_vocab, int32_t *out) {
    const forge_gguf_kv *kv = forge_gguf_find_kv(k->g, key);
    int64_t v = 0;
    forge_result r;
    *out = -1;
    if (!kv) return FORGE_OK;
    if ((r = forge_gguf_kv_int(kv, &v, k->e))) return r;
    if (v < 0 || v >= (int64_t)n_vocab)
        return forge__fail(k->e, FORGE_ERR_CONFIG, "%s is %lld, outside the vocabulary of %u tokens", key, (long long)v,
                           n_vocab);
    *out = (int32_t)v;
    return FORGE_OK;
}

/* Checks one tensor against the shape the configuration implies (missing trailing dims count as 1). */
typedef enum { FORGE__OPTIONAL = 0, FORGE__REQUIRED = 1 } forge__need_kind;
typedef enum { FORGE__ANY_TYPE = 0, FORGE__FLOAT_TYPE = 1 } forge__type_kind;

static forge_result forge__expect(forge__keys *k, forge__need_kind need, forge__type_kind type_kind,
                                  uint64_t d0, uint64_t d1, uint64_t d2, const forge_gguf_tensor **out,
                                  const char *fmt, ...) FORGE__PRINTF(8, 9);
static forge_result forge__expect(forge__keys *k, forge__need_kind need, forge__type_kind type_kind,
                                  uint64_t d0, uint64_t d1, uint64_t d2, const forge_gguf_tensor **out,
                                  const char *fmt, ...) {
    char name[96];
    const forge_gguf_tensor *t;
    va_list args;
    va_start(args, fmt);
    vsnprintf(name, sizeof name, fmt, args);
    va_end(args);
    if (out) *out = NULL;
    t = forge_gguf_find_tensor(k->g, name);
    if (!t) {
        if (need == FORGE__REQUIRED)
            return forge__fail(k->e, FORGE_ERR_MISSING_TENSOR, "required tensor '%s' [%llu, %llu%s] is missing", name,
                               (forge__ull)d0, (forge__ull)d1, d2 > 1 ? ", ..." : "");
        return FORGE_OK;
    }
    if (t->ne[0] != d0 || t->ne[1] != d1 || t->ne[2] != d2 || t->ne[3] != 1)
        return forge__fail(k->e, FORGE_ERR_TENSOR_SHAPE,
                           "tensor '%s' has shape [%llu, %llu, %llu, %llu]; the configuration implies [%llu, %llu, %llu, 1]",
                           name, (forge__ull)t->ne[0], (forge__ull)t->ne[1], (forge__ull)t->ne[2], (forge__ull)t->ne[3],
                           (forge__ull)d0, (forge__ull)d1, (forge__ull)d2);
    if (type_kind == FORGE__FLOAT_TYPE && t->type != FORGE_TYPE_F32 && t->type != FORGE_TYPE_F16 &&
        t->type != FORGE_TYPE_BF16)
        return forge__fail(k->e, FORGE_ERR_TENSOR_TYPE, "tensor '%s' has type %s; norms and biases must be F32, F16 or BF16",
                           name, forge_type_info(t->type)->name);
    if (out) *out = t;
    return FORGE_OK;
}

/* Largest values a configuration may hold; far above any real model, low enough that products of
   two of them fit comfortably in 64 bits and sizes derived from them stay meaningful. */
#define FORGE__MAX_DIM (1u << 24)
#define FORGE__MAX_CTX (1u << 30)

static forge_result forge__derive_tensors(forge__keys *k, const forge__arch_rules *rules, forge_config *c) {
    forge_result r;
    const forge_gguf_tensor *t;
    uint32_t il;
    const uint64_t embd = c->n_embd, vocab = c->n_vocab;

    if ((r = forge__expect(k, FORGE__REQUIRED, FORGE__ANY_TYPE, embd, vocab, 1, NULL, "token_embd.weight"))) return r;
    if ((r = forge__expect(k, FORGE__REQUIRED, FORGE__FLOAT_TYPE, embd, 1, 1, NULL, "output_norm.weight"))) return r;
    if ((r = forge__expect(k, FORGE__OPTIONAL, FORGE__ANY_TYPE, embd, vocab, 1, &t, "output.weight"))) return r;
    c->tied_output = t == NULL;
    if ((r = forge__expect(k, FORGE__OPTIONAL, FORGE__FLOAT_TYPE, c->n_rot / 2, 1, 1, &t, "rope_freqs.weight"))) return r;
    c->has_rope_freqs = t != NULL;
    c->fused_qkv = forge_gguf_find_tensor(k->g, "blk.0.attn_qkv.weight") != NULL;
    c->has_qkv_bias = rules->qkv_bias_required || forge_gguf_find_tensor(k->g, "blk.0.attn_q.bias") != NULL ||
                      forge_gguf_find_tensor(k->g, "blk.0.attn_qkv.bias") != NULL;

    for (il = 0; il < c->n_layer; il++) {
        const uint64_t q = (uint64_t)c->layer_n_head[il] * c->head_dim;
        const uint64_t kv_k = (uint64_t)c->layer_n_head_kv[il] * c->head_dim;
        const uint64_t kv_v = (uint64_t)c->layer_n_head_kv[il] * c->head_dim_v;
        const uint64_t out_in = (uint64_t)c->layer_n_head[il] * c->head_dim_v;
        const uint64_t ff = c->layer_n_ff[il];
        const forge__need_kind bias = c->has_qkv_bias ? FORGE__REQUIRED : FORGE__OPTIONAL;

        if ((r = forge__expect(k, FORGE__REQUIRED, FORGE__FLOAT_TYPE, embd, 1, 1, NULL, "blk.%u.attn_norm.weight", il)))
            return r;
        if (c->fused_qkv) {
            if ((r = forge__expect(k, FORGE__REQUIRED, FORGE__ANY_TYPE, embd, q + kv_k + kv_v, 1, NULL,
                                   "blk.%u.attn_qkv.weight", il)))
                return r;
            if ((r = forge__expect(k, FORGE__OPTIONAL, FORGE__FLOAT_TYPE, q + kv_k + kv_v, 1, 1, NULL,
                                   "blk.%u.attn_qkv.bias", il)))
                return r;
        } else {
            if ((r = forge__expect(k, FORGE__REQUIRED, FORGE__ANY_TYPE, embd, q, 1, NULL, "blk.%u.attn_q.weight", il)) ||
                (r = forge__expect(k, FORGE__REQUIRED, FORGE__ANY_TYPE, embd, kv_k, 1, NULL, "blk.%u.attn_k.weight", il)) ||
                (r = forge__expect(k, FORGE__REQUIRED, FORGE__ANY_TYPE, embd, kv_v, 1, NULL, "blk.%u.attn_v.weight", il)) ||
                (r = forge__expect(k, bias, FORGE__FLOAT_TYPE, q, 1, 1, NULL, "blk.%u.attn_q.bias", il)) ||
                (r = forge__expect(k, bias, FORGE__FLOAT_TYPE, kv_k, 1, 1, NULL, "blk.%u.attn_k.bias", il)) ||
                (r = forge__expect(k, bias, FORGE__FLOAT_TYPE, kv_v, 1, 1, NULL, "blk.%u.attn_v.bias", il)))
                return r;
        }
        if ((r = forge__expect(k, FORGE__REQUIRED, FORGE__ANY_TYPE, out_in, embd, 1, NULL, "blk.%u.attn_output.weight", il)))
            return r;
        if (rules->qk_norm &&
            ((r = forge__expect(k, FORGE__REQUIRED, FORGE__FLOAT_TYPE, c->head_dim, 1, 1, NULL, "blk.%u.attn_q_norm.weight", il)) ||
             (r = forge__expect(k, FORGE__REQUIRED, FORGE__FLOAT_TYPE, c->head_dim, 1, 1, NULL, "blk.%u.attn_k_norm.weight", il))))
            return r;
        if (rules->post_norms &&
            ((r = forge__expect(k, FORGE__REQUIRED, FORGE__FLOAT_TYPE, embd, 1, 1, NULL, "blk.%u.post_attention_norm.weight", il)) ||
             (r = forge__expect(k, FORGE__REQUIRED, FORGE__FLOAT_TYPE, embd, 1, 1, NULL, "blk.%u.post_ffw_norm.weight", il))))
            return r;
        if ((r = forge__expect(k, FORGE__REQUIRED, FORGE__FLOAT_TYPE, embd, 1, 1, NULL, "blk.%u.ffn_norm.weight", il)))
            return r;
        if (c->n_expert > 0) {
            const uint64_t fe = c->n_ff_exp, ne = c->n_expert;
            if ((r = forge__expect(k, FORGE__REQUIRED, FORGE__ANY_TYPE, embd, ne, 1, NULL, "blk.%u.ffn_gate_inp.weight", il)) ||
                (r = forge__expect(k, FORGE__REQUIRED, FORGE__ANY_TYPE, embd, fe, ne, NULL, "blk.%u.ffn_gate_exps.weight", il)) ||
                (r = forge__expect(k, FORGE__REQUIRED, FORGE__ANY_TYPE, embd, fe, ne, NULL, "blk.%u.ffn_up_exps.weight", il)) ||
                (r = forge__expect(k, FORGE__REQUIRED, FORGE__ANY_TYPE, fe, embd, ne, NULL, "blk.%u.ffn_down_exps.weight", il)))
                return r;
            if (c->n_ff_shexp > 0) {
                const uint64_t fs = c->n_ff_shexp;
                if ((r = forge__expect(k, FORGE__OPTIONAL, FORGE__ANY_TYPE, embd, 1, 1, NULL, "blk.%u.ffn_gate_inp_shexp.weight", il)) ||
                    (r = forge__expect(k, FORGE__REQUIRED, FORGE__ANY_TYPE, embd, fs, 1, NULL, "blk.%u.ffn_gate_shexp.weight", il)) ||
                    (r = forge__expect(k, FORGE__REQUIRED, FORGE__ANY_TYPE, embd, fs, 1, NULL, "blk.%u.ffn_up_shexp.weight", il)) ||
                    (r = forge__expect(k, FORGE__REQUIRED, FORGE__ANY_TYPE, fs, embd, 1, NULL, "blk.%u.ffn_down_shexp.weight", il)))
                    return r;
            }
        } else if (rules->fused_gate_up) {
            if ((r = forge__expect(k, FORGE__REQUIRED, FORGE__ANY_TYPE, embd, 2 * ff, 1, NULL, "blk.%u.ffn_up.weight", il)) ||
                (r = forge__expect(k, FORGE__REQUIRED, FORGE__ANY_TYPE, ff, embd, 1, NULL, "blk.%u.ffn_down.weight", il)))
                return r;
        } else {
            if ((r = forge__expect(k, FORGE__REQUIRED, FORGE__ANY_TYPE, embd, ff, 1, NULL, "blk.%u.ffn_gate.weight", il)) ||
                (r = forge__expect(k, FORGE__REQUIRED, FORGE__ANY_TYPE, embd, ff, 1, NULL, "blk.%u.ffn_up.weight", il)) ||
                (r = forge__expect(k, FORGE__REQUIRED, FORGE__ANY_TYPE, ff, embd, 1, NULL, "blk.%u.ffn_down.weight", il)))
                return r;
        }
    }
    return FORGE_OK;
}

static forge_result forge__derive_vocab(forge__keys *k, forge_config *c) {
    const forge_gguf_kv *kv = forge_gguf_find_kv(k->g, "tokenizer.ggml.model");
    const forge_gguf_kv *tokens = forge_gguf_find_kv(k->g, "tokenizer.ggml.tokens");
    const char *per_token[2] = {"tokenizer.ggml.scores", "tokenizer.ggml.token_type"};
    forge_result r;
    int i;

    c->vocab_type = FORGE_VOCAB_NONE;
    if (kv) {
        forge_gguf_str model = {NULL, 0};
        if ((r = forge_gguf_kv_str(kv, &model, k->e))) return r;
        if (forge_gguf_str_eq(model, "llama")) c->vocab_type = FORGE_VOCAB_SPM;
        else if (forge_gguf_str_eq(model, "gpt2")) c->vocab_type = FORGE_VOCAB_BPE;
        else if (forge_gguf_str_eq(model, "bert")) c->vocab_type = FORGE_VOCAB_WPM;
        else if (forge_gguf_str_eq(model, "t5")) c->vocab_type = FORGE_VOCAB_UGM;
        else if (forge_gguf_str_eq(model, "rwkv")) c->vocab_type = FORGE_VOCAB_RWKV;
        else if (forge_gguf_str_eq(model, "none") || forge_gguf_str_eq(model, "no_vocab")) c->vocab_type = FORGE_VOCAB_NONE;
        else c->vocab_type = FORGE_VOCAB_OTHER;
    }
    if (tokens) {
        if (tokens->type != FORGE_GGUF_ARRAY || tokens->elem_type != FORGE_GGUF_STRING)
            return forge__wrong_type(tokens, "an array of strings", k->e);
        if (tokens->count == 0 || tokens->count > FORGE__MAX_DIM)
            return forge__fail(k->e, FORGE_ERR_CONFIG, "tokenizer.ggml.tokens has %llu entries; expected 1 to %u",
                               (forge__ull)tokens->count, FORGE__MAX_DIM);
        c->n_vocab = (uint32_t)tokens->count;
    } else {
        forge_result rr = forge__arch_u32(k, "vocab_size", 1, 0, FORGE__MAX_DIM, &c->n_vocab);
        if (rr == FORGE_ERR_MISSING_KEY)
            return forge__fail(k->e, FORGE_ERR_MISSING_KEY,
                               "the vocabulary size is unknown: neither tokenizer.ggml.tokens nor %s.vocab_size is present",
                               k->arch);
        if (rr) return rr;
        if (c->n_vocab == 0) return forge__fail(k->e, FORGE_ERR_CONFIG, "%s.vocab_size is 0", k->arch);
    }
    for (i = 0; i < 2; i++) {
        const forge_gguf_kv *arr = forge_gguf_find_kv(k->g, per_token[i]);
        if (!arr) continue;
        if (arr->type != FORGE_GGUF_ARRAY || arr->elem_type == FORGE_GGUF_STRING)
            return forge__wrong_type(arr, "an array of numbers", k->e);
        if (arr->count != c->n_vocab)
            return forge__fail(k->e, FORGE_ERR_CONFIG, "%s has %llu entries for a vocabulary of %u tokens", per_token[i],
                               (forge__ull)arr->count, c->n_vocab);
    }
    kv = forge_gguf_find_kv(k->g, "tokenizer.ggml.merges");
    if (kv && (kv->type != FORGE_GGUF_ARRAY || kv->elem_type != FORGE_GGUF_STRING))
        return forge__wrong_type(kv, "an array of strings", k->e);
    if ((r = forge__token_id(k, "tokenizer.ggml.bos_token_id", c->n_vocab, &c->bos_id)) ||
        (r = forge__token_id(k, "tokenizer.ggml.eos_token_id", c->n_vocab, &c->eos_id)) ||
        (r = forge__token_id(k, "tokenizer.ggml.eot_token_id", c->n_vocab, &c->eot_id)) ||
        (r = forge__token_id(k, "tokenizer.ggml.unknown_token_id", c->n_vocab, &c->unk_id)) ||
        (r = forge__token_id(k, "tokenizer.ggml.padding_token_id", c->n_vocab, &c->pad_id)))
        return r;
    c->add_bos = c->vocab_type == FORGE_VOCAB_SPM;
    kv = forge_gguf_find_kv(k->g, "tokenizer.ggml.add_bos_token");
    if (kv && (r = forge_gguf_kv_bool(kv, &c->add_bos, k->e))) return r;
    return FORGE_OK;
}

FORGE_API forge_result forge_config_derive(const forge_gguf *g, forge_config *out, forge_error *error) {
    forge__keys k;
    const forge_gguf_kv *kv;
    const forge__arch_rules *rules = NULL;
    forge_gguf_str arch = {NULL, 0};
    forge_config *c = out;
    forge_result r;
    uint32_t il, n_swa_default = 0;
    size_t i;

    if (!g || !out) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_config_derive: null argument");
    memset(c, 0, sizeof *c);
    k.g = g;
    k.e = error;
    k.arch = c->arch_name;

    kv = forge_gguf_find_kv(g, "general.architecture");
    if (!kv) return forge__fail(error, FORGE_ERR_MISSING_KEY, "required key 'general.architecture' is missing");
    if ((r = forge_gguf_kv_str(kv, &arch, error))) return r;
    for (i = 0; i < sizeof forge__archs / sizeof forge__archs[0]; i++)
        if (forge_gguf_str_eq(arch, forge__archs[i].name)) rules = &forge__archs[i];
    if (!rules)
        return forge__fail(error, FORGE_ERR_ARCH,
                           "architecture '%.*s' is not supported (forge knows llama, qwen2, qwen3, gemma, gemma2, gemma3, "
                           "phi3, qwen2moe, qwen3moe, glm4)",
                           FORGE__STR_ARGS(arch));
    c->arch = rules->arch;
    snprintf(c->arch_name, sizeof c->arch_name, "%s", rules->name);
    c->rope_type = rules->rope_type;
    c->has_qk_norm = rules->qk_norm;
    c->has_post_norms = rules->post_norms;
    c->fused_gate_up = rules->fused_gate_up;

    c->file_type = UINT32_MAX;
    kv = forge_gguf_find_kv(g, "general.file_type");
    if (kv && (r = forge__key_u32(&k, kv, "general.file_type", UINT32_MAX - 1, &c->file_type))) return r;

    if ((r = forge__arch_u32(&k, "block_count", 1, 0, UINT32_MAX, &c->n_layer))) return r;
    if (c->n_layer == 0) return forge__fail(error, FORGE_ERR_CONFIG, "%s.block_count is 0", k.arch);
    if (c->n_layer > FORGE_MAX_LAYERS)
        return forge__fail(error, FORGE_ERR_LIMIT, "%s.block_count is %u, above forge's limit of %d layers", k.arch,
                           c->n_layer, FORGE_MAX_LAYERS);
    if ((r = forge__arch_u32(&k, "embedding_length", 1, 0, FORGE__MAX_DIM, &c->n_embd))) return r;
    if (c->n_embd == 0) return forge__fail(error, FORGE_ERR_CONFIG, "%s.embedding_length is 0", k.arch);
    if ((r = forge__arch_u32(&k, "context_length", 1, 0, FORGE__MAX_CTX, &c->n_ctx_train))) return r;
    if (c->n_ctx_train == 0) return forge__fail(error, FORGE_ERR_CONFIG, "%s.context_length is 0", k.arch);

    if ((r = forge__arch_layers(&k, "attention.head_count", 1, NULL, c->n_layer, FORGE__MAX_DIM, c->layer_n_head,
                                &c->n_head)))
        return r;
    if ((r = forge__arch_layers(&k, "attention.head_count_kv", 0, c->layer_n_head, c->n_layer, FORGE__MAX_DIM,
                                c->layer_n_head_kv, &c->n_head_kv)))
        return r;
    for (il = 0; il < c->n_layer; il++) {
        uint32_t h = c->layer_n_head[il], hkv = c->layer_n_head_kv[il];
        if (h == 0) return forge__fail(error, FORGE_ERR_CONFIG, "%s.attention.head_count is 0 at layer %u", k.arch, il);
        if (hkv == 0) return forge__fail(error, FORGE_ERR_CONFIG, "%s.attention.head_count_kv is 0 at layer %u", k.arch, il);
        if (h % hkv != 0)
            return forge__fail(error, FORGE_ERR_CONFIG,
                               "layer %u has %u query heads and %u KV heads; the query heads must be a multiple", il, h, hkv);
    }

    /* head size: key_length when given, else n_embd / n_head, which must then divide exactly */
    {
        uint32_t key_length = 0, value_length = 0, h0 = c->layer_n_head[0];
        if ((r = forge__arch_u32(&k, "attention.key_length", 0, 0, FORGE__MAX_DIM, &key_length)) ||
            (r = forge__arch_u32(&k, "attention.value_length", 0, 0, FORGE__MAX_DIM, &value_length)))
            return r;
        if ((key_length == 0 || value_length == 0) && c->n_embd % h0 != 0)
            return forge__fail(error, FORGE_ERR_CONFIG,
                               "%s.embedding_length %u is not a multiple of %s.attention.head_count %u and no "
                               "%s.attention.key_length/value_length gives the head size",
                               k.arch, c->n_embd, k.arch, h0, k.arch);
        c->head_dim = key_length ? key_length : c->n_embd / h0;
        c->head_dim_v = value_length ? value_length : c->n_embd / h0;
        if (c->head_dim == 0 || c->head_dim_v == 0)
            return forge__fail(error, FORGE_ERR_CONFIG, "head size is 0 (key_length %u, value_length %u)", key_length,
                               value_length);
    }
    if ((r = forge__arch_u32(&k, "rope.dimension_count", 0, c->head_dim, FORGE__MAX_DIM, &c->n_rot))) return r;
    if (c->n_rot == 0 || c->n_rot % 2 != 0 || c->n_rot > c->head_dim)
        return forge__fail(error, FORGE_ERR_CONFIG, "%s.rope.dimension_count is %u; it must be even, nonzero and at most the head size %u",
                           k.arch, c->n_rot, c->head_dim);

    if ((r = forge__arch_u32(&k, "expert_count", 0, 0, 4096, &c->n_expert)) ||
        (r = forge__arch_u32(&k, "expert_used_count", 0, 0, 4096, &c->n_expert_used)))
        return r;
    if (rules->moe && c->n_expert == 0)
        return forge__fail(error, FORGE_ERR_CONFIG, "%s is a mixture-of-experts architecture but %s.expert_count is %s",
                           k.arch, k.arch, forge__arch_kv(&k, "expert_count") ? "0" : "missing");
    if (c->n_expert > 0 && (c->n_expert_used == 0 || c->n_expert_used > c->n_expert))
        return forge__fail(error, FORGE_ERR_CONFIG, "%s.expert_used_count is %u; it must be 1 to expert_count %u", k.arch,
                           c->n_expert_used, c->n_expert);
    if (c->n_expert == 0 && c->n_expert_used != 0)
        return forge__fail(error, FORGE_ERR_CONFIG, "%s.expert_used_count is %u without experts", k.arch, c->n_expert_used);

    if ((r = forge__arch_layers(&k, "feed_forward_length", c->n_expert == 0, NULL, c->n_layer, FORGE__MAX_DIM,
                                c->layer_n_ff, &c->n_ff))) {
        if (r != FORGE_ERR_MISSING_KEY || c->n_expert == 0) return r;
        memset(c->layer_n_ff, 0, sizeof c->layer_n_ff);
        c->n_ff = 0;
    }
    if (c->n_expert == 0)
        for (il = 0; il < c->n_layer; il++)
            if (c->layer_n_ff[il] == 0)
                return forge__fail(error, FORGE_ERR_CONFIG, "%s.feed_forward_length is 0 at layer %u", k.arch, il);
    if (c->n_expert > 0) {
        if ((r = forge__arch_u32(&k, "expert_feed_forward_length", 0, c->n_ff, FORGE__MAX_DIM, &c->n_ff_exp)) ||
            (r = forge__arch_u32(&k, "expert_shared_feed_forward_length", 0, 0, FORGE__MAX_DIM, &c->n_ff_shexp)))
            return r;
        if (c->n_ff_exp == 0)
            return forge__fail(error, FORGE_ERR_CONFIG, "the expert width is 0 (%s.expert_feed_forward_length)", k.arch);
        if (c->arch == FORGE_ARCH_QWEN2MOE && c->n_ff_shexp == 0 && forge_gguf_find_tensor(g, "blk.0.ffn_up_shexp.weight"))
            c->n_ff_shexp = c->n_ff; /* shared expert present without its own width key */
    }

    if ((r = forge__arch_f32(&k, "attention.layer_norm_rms_epsilon", 1, 0.0f, &c->rms_eps))) return r;
    if (!(c->rms_eps > 0.0f) || c->rms_eps > 1.0f)
        return forge__fail(error, FORGE_ERR_CONFIG, "%s.attention.layer_norm_rms_epsilon is %g; it must be in (0, 1]",
                           k.arch, (double)c->rms_eps);
    if ((r = forge__arch_f32(&k, "rope.freq_base", 0, 10000.0f, &c->rope_freq_base))) return r;
    if (!(c->rope_freq_base > 0.0f))
        return forge__fail(error, FORGE_ERR_CONFIG, "%s.rope.freq_base is %g; it must be positive", k.arch,
                           (double)c->rope_freq_base);

    /* rope scaling: none and linear are computed exactly; other kinds are refused rather than approximated */
    c->rope_freq_scale = 1.0f;
    {
        const forge_gguf_kv *type_kv = forge__arch_kv(&k, "rope.scaling.type");
        float factor = 0.0f;
        int linear = 1;
        if (type_kv) {
            forge_gguf_str scaling = {NULL, 0};
            if ((r = forge_gguf_kv_str(type_kv, &scaling, error))) return r;
            if (forge_gguf_str_eq(scaling, "none")) linear = 0;
            else if (!forge_gguf_str_eq(scaling, "linear"))
                return forge__fail(error, FORGE_ERR_UNSUPPORTED, "rope scaling type '%.*s' (%s.rope.scaling.type) is not supported",
                                   FORGE__STR_ARGS(scaling), k.arch);
        }
        if ((r = forge__arch_f32(&k, "rope.scaling.factor", 0, 0.0f, &factor))) return r;
        if (factor == 0.0f && (r = forge__arch_f32(&k, "rope.scale_linear", 0, 0.0f, &factor))) return r;
        if (factor < 0.0f) return forge__fail(error, FORGE_ERR_CONFIG, "rope scaling factor %g is negative", (double)factor);
        if (linear && factor > 0.0f) c->rope_freq_scale = 1.0f / factor;
    }

    /* sliding windows: gemma2 alternates (even layers local), gemma3 has one global layer per pattern */
    c->rope_freq_base_swa = c->rope_freq_base;
    c->embd_scale = 1.0f;
    if (c->arch == FORGE_ARCH_GEMMA2) n_swa_default = 4096;
    if (c->arch == FORGE_ARCH_GEMMA3) n_swa_default = 4096;
    if (c->arch == FORGE_ARCH_GEMMA2 || c->arch == FORGE_ARCH_GEMMA3) {
        if ((r = forge__arch_u32(&k, "attention.sliding_window", 0, n_swa_default, FORGE__MAX_CTX, &c->n_swa))) return r;
        c->swa_pattern = 2;
        if (c->arch == FORGE_ARCH_GEMMA3) {
            if ((r = forge__arch_u32(&k, "attention.sliding_window_pattern", 0, 6, FORGE_MAX_LAYERS, &c->swa_pattern)))
                return r;
            if ((r = forge__arch_f32(&k, "rope.freq_base_swa", 0, 10000.0f, &c->rope_freq_base_swa))) return r;
        }
        if (c->n_swa == 0) c->swa_pattern = 0;
        for (il = 0; il < c->n_layer; il++)
            c->layer_is_swa[il] = (uint8_t)(c->swa_pattern > 0 && il % c->swa_pattern < c->swa_pattern - 1);
    }
    if (c->arch == FORGE_ARCH_GEMMA2) {
        if ((r = forge__arch_f32(&k, "attn_logit_softcapping", 0, 50.0f, &c->attn_softcap)) ||
            (r = forge__arch_f32(&k, "final_logit_softcapping", 0, 30.0f, &c->final_softcap)))
            return r;
    }
    if (c->arch == FORGE_ARCH_GEMMA3 && (r = forge__arch_f32(&k, "final_logit_softcapping", 0, 0.0f, &c->final_softcap)))
        return r;
    if (c->attn_softcap < 0.0f || c->final_softcap < 0.0f)
        return forge__fail(error, FORGE_ERR_CONFIG, "soft-cap values must not be negative (%g, %g)", (double)c->attn_softcap,
                           (double)c->final_softcap);
    if (rules->gemma_family) c->embd_scale = (float)sqrt((double)c->n_embd);

    if ((r = forge__derive_vocab(&k, c))) return r;
    if ((r = forge__derive_tensors(&k, rules, c))) return r;
    forge__ok(error);
    return FORGE_OK;
}

/* >>impl-sampler */

#include <float.h>

#define FORGE__SAMPLER_DEFAULT_LAST_N 64

typedef struct forge__candidate {
    float logit;
    int32_t id;
    double weight; /* exp((logit - max) / temperature); unnormalized probability */
} forge__candidate;

struct forge_sampler {
    forge_sampler_desc desc; /* defaults filled in, "off" values normalized to 0 */
    uint32_t n_vocab;
    forge__candidate *candidates; /* n_vocab entries, in the same allocation as the sampler */
    int32_t *history;             /* ring of the last history_capacity accepted tokens */
    uint32_t history_capacity, history_count, history_next;
    uint64_t rng[4];
};

/* splitmix64 (Steele, Lea, Flood 2014): expands the 64-bit seed into xoshiro's 256-bit state */
static uint64_t forge__splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t forge__rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

/* xoshiro256** (Blackman, Vigna 2018) */
static uint64_t forge__xoshiro_next(uint64_t s[4]) {
    uint64_t result = forge__rotl64(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = forge__rotl64(s[3], 45);
    return result;
}

/* uniform in [0, 1): the top 53 bits as a double's mantissa */
static double forge__uniform01(uint64_t s[4]) { return (double)(forge__xoshiro_next(s) >> 11) * (1.0 / 9007199254740992.0); }

static void forge__sampler_seed(forge_sampler *s) {
    uint64_t state = s->desc.seed;
    int i;
    for (i = 0; i < 4; i++) s->rng[i] = forge__splitmix64(&state); /* never all zero: splitmix64 is a bijection */
}

/* The order used everywhere: larger logit first, lower id first among equal logits. */
static int forge__candidate_worse(const forge__candidate *a, const forge__candidate *b) {
    return a->logit < b->logit || (a->logit == b->logit && a->id > b->id);
}

/* min-heap on that order: c[0] is the worst */
static void forge__candidate_sift_down(forge__candidate *c, size_t n, size_t i) {
    for (;;) {
        size_t child = 2 * i + 1;
        forge__candidate tmp;
        if (child >= n) return;
        if (child + 1 < n && forge__candidate_worse(&c[child + 1], &c[child])) child++;
        if (!forge__candidate_worse(&c[child], &c[i])) return;
        tmp = c[i];
        c[i] = c[child];
        c[child] = tmp;
        i = child;
    }
}

/* Moves the k best of c[0..n) to c[0..k), sorted best first, and the others to c[k..n), in
   O(n log k) with no memory outside the array; with k == n it is a heapsort of the whole array. */
static void forge__candidates_top_k(forge__candidate *c, size_t n, size_t k) {
    size_t i;
    if (k == 0) return;
    for (i = k / 2; i-- > 0;) forge__candidate_sift_down(c, k, i);
    for (i = k; i < n; i++) {
        if (forge__candidate_worse(&c[0], &c[i])) { /* swap, so the array stays a permutation */
            forge__candidate tmp = c[0];
            c[0] = c[i];
            c[i] = tmp;
            forge__candidate_sift_down(c, k, 0);
        }
    }
    for (i = k - 1; i > 0; i--) { /* pop the worst to the back */
        forge__candidate tmp = c[0];
        c[0] = c[i];
        c[i] = tmp;
        forge__candidate_sift_down(c, i, 0);
    }
}

/* Rounds up to 16 bytes so each piece of the one allocation is aligned for double. */
static size_t forge__round16(size_t n) { return (n + 15) & ~(size_t)15; }

FORGE_API forge_result forge_sampler_create(const forge_sampler_desc *desc, uint32_t n_vocab, forge_sampler **out,
                                            forge_error *error) {
    forge_sampler_desc d;
    forge_sampler *s;
    size_t head_bytes, candidate_bytes, history_bytes;
    uint32_t history_capacity = 0;
    uint64_t total_bytes;
    if (out) *out = NULL;
    if (!out) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_sampler_create: null out");
    if (desc) d = *desc;
    else memset(&d, 0, sizeof d);
    /* NaN fails every comparison, so each check is written to pass only for good values */
    if (!(d.temperature >= 0.0f && d.temperature <= FLT_MAX))
        return forge__fail(error, FORGE_ERR_ARGUMENT, "sampler temperature %g: must be finite and >= 0",
                           (double)d.temperature);
    if (d.top_k < 0) return forge__fail(error, FORGE_ERR_ARGUMENT, "sampler top_k %ld: must be >= 0 (0 = off)", (long)d.top_k);
    if (!(d.top_p >= 0.0f && d.top_p <= 1.0f))
        return forge__fail(error, FORGE_ERR_ARGUMENT, "sampler top_p %g: must be in [0, 1] (0 or 1 = off)", (double)d.top_p);
    if (!(d.min_p >= 0.0f && d.min_p <= 1.0f))
        return forge__fail(error, FORGE_ERR_ARGUMENT, "sampler min_p %g: must be in [0, 1] (0 = off)", (double)d.min_p);
    if (!(d.repeat_penalty >= 0.0f && d.repeat_penalty <= FLT_MAX))
        return forge__fail(error, FORGE_ERR_ARGUMENT, "sampler repeat_penalty %g: must be finite and >= 0 (0 or 1 = off)",
                           (double)d.repeat_penalty);
    if (d.repeat_last_n < 0)
        return forge__fail(error, FORGE_ERR_ARGUMENT, "sampler repeat_last_n %ld: must be >= 0 (0 = %d)",
                           (long)d.repeat_last_n, FORGE__SAMPLER_DEFAULT_LAST_N);
    if (n_vocab == 0 || n_vocab > (uint32_t)INT32_MAX)
        return forge__fail(error, FORGE_ERR_ARGUMENT, "sampler n_vocab %lu: must be in [1, %ld]", (unsigned long)n_vocab,
                           (long)INT32_MAX);
    if (d.top_p == 1.0f) d.top_p = 0.0f;
    if (d.repeat_penalty == 1.0f) d.repeat_penalty = 0.0f;
    if (d.repeat_last_n == 0) d.repeat_last_n = FORGE__SAMPLER_DEFAULT_LAST_N;
    if ((uint32_t)d.top_k >= n_vocab) d.top_k = 0;
    if (d.repeat_penalty > 0.0f) history_capacity = (uint32_t)d.repeat_last_n;

    /* both counts are below 2^31, so the sum fits in 64 bits; it may not fit in a 32-bit size_t */
    total_bytes = 64 + (uint64_t)n_vocab * sizeof(forge__candidate) + (uint64_t)history_capacity * sizeof(int32_t);
    if (!(total_bytes <= (uint64_t)SIZE_MAX))
        return forge__fail(error, FORGE_ERR_OVERFLOW, "sampler of %lu tokens and %lu history entries does not fit in memory",
                           (unsigned long)n_vocab, (unsigned long)history_capacity);
    head_bytes = forge__round16(sizeof(forge_sampler));
    candidate_bytes = forge__round16((size_t)n_vocab * sizeof(forge__candidate));
    history_bytes = (size_t)history_capacity * sizeof(int32_t);
    s = (forge_sampler *)forge__alloc(&d.allocator, head_bytes + candidate_bytes + history_bytes);
    if (!s)
        return forge__fail(error, FORGE_ERR_HOST_MEMORY, "cannot allocate a sampler for %lu tokens (%llu bytes)",
                           (unsigned long)n_vocab, (forge__ull)(head_bytes + candidate_bytes + history_bytes));
    memset(s, 0, sizeof *s);
    s->desc = d;
    s->n_vocab = n_vocab;
    s->candidates = (forge__candidate *)(void *)((char *)s + head_bytes);
    s->history = history_capacity ? (int32_t *)(void *)((char *)s + head_bytes + candidate_bytes) : NULL;
    s->history_capacity = history_capacity;
    forge__sampler_seed(s);
    *out = s;
    forge__ok(error);
    return FORGE_OK;
}

FORGE_API void forge_sampler_accept(forge_sampler *s, int32_t token) {
    if (!s || !s->history_capacity || token < 0 || (uint32_t)token >= s->n_vocab) return;
    s->history[s->history_next] = token;
    s->history_next = (s->history_next + 1) % s->history_capacity;
    if (s->history_count < s->history_capacity) s->history_count++;
}

FORGE_API void forge_sampler_reset(forge_sampler *s) {
    if (!s) return;
    s->history_count = 0;
    s->history_next = 0;
    forge__sampler_seed(s);
}

FORGE_API void forge_sampler_destroy(forge_sampler *s) {
    forge_allocator a;
    if (!s) return;
    a = s->desc.allocator;
    forge__free(&a, s);
}

/* llama.cpp's rule; -inf stays masked, a finite result stays finite (a penalty below 1 could
   otherwise turn a huge logit into +inf, a penalty above 1 a huge negative one into -inf) */
static float forge__repeat_penalize(float logit, float penalty) {
    double v = logit > 0.0f ? (double)logit / penalty : (double)logit * penalty;
    if (logit < -FLT_MAX) return logit;
    if (v > FLT_MAX) return FLT_MAX;
    if (v < -FLT_MAX) return -FLT_MAX;
    return (float)v;
}

FORGE_API forge_result forge_sampler_sample(forge_sampler *s, const float *logits, int32_t *out_token,
                                            forge_error *error) {
    forge__candidate *c;
    const forge_sampler_desc *d;
    size_t n = 0, i, k;
    uint32_t v, h;
    int sorted = 0;
    double max_logit, total, u, cumulative;
    if (out_token) *out_token = -1;
    if (!s || !logits || !out_token) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_sampler_sample: null argument");
    c = s->candidates;
    d = &s->desc;

    for (v = 0; v < s->n_vocab; v++) {
        float x = logits[v];
        if (!(x <= FLT_MAX)) /* NaN or +inf */
            return forge__fail(error, FORGE_ERR_ARGUMENT, "logit %lu of %lu is %s", (unsigned long)v,
                               (unsigned long)s->n_vocab, x != x ? "NaN" : "+inf");
        c[v].logit = x;
        c[v].id = (int32_t)v;
    }

    /* 1. repetition penalty. c[] is still indexed by token id. A token that occurs several times
       is penalized once: only while its logit still equals the caller's (a penalty that leaves the
       value unchanged, as for 0 or -inf, leaves it unchanged when repeated too). */
    if (d->repeat_penalty > 0.0f) {
        for (h = 0; h < s->history_count; h++) {
            int32_t t = s->history[h];
            if (c[t].logit == logits[t]) c[t].logit = forge__repeat_penalize(logits[t], d->repeat_penalty);
        }
    }

    /* 2. greedy: the first maximum in ascending id order is the lowest index; -inf never wins */
    if (d->temperature == 0.0f) {
        uint32_t best = 0;
        for (v = 1; v < s->n_vocab; v++)
            if (c[v].logit > c[best].logit) best = v;
        if (!(c[best].logit >= -FLT_MAX))
            return forge__fail(error, FORGE_ERR_ARGUMENT, "all %lu logits are -inf: no token can be sampled",
                               (unsigned long)s->n_vocab);
        *out_token = (int32_t)best;
        forge__ok(error);
        return FORGE_OK;
    }

    /* masked tokens (-inf) are never candidates; order is kept, so ids stay ascending */
    for (v = 0; v < s->n_vocab; v++)
        if (c[v].logit >= -FLT_MAX) c[n++] = c[v];
    if (n == 0)
        return forge__fail(error, FORGE_ERR_ARGUMENT, "all %lu logits are -inf: no token can be sampled",
                           (unsigned long)s->n_vocab);

    /* 3. top-k */
    if (d->top_k > 0 && (size_t)d->top_k < n) {
        k = (size_t)d->top_k;
        forge__candidates_top_k(c, n, k);
        n = k;
        sorted = 1;
    }

    /* 4, 5. temperature and softmax; the max is subtracted before dividing, so a tiny temperature
       sends the others to 0 instead of overflowing */
    max_logit = c[0].logit;
    if (!sorted)
        for (i = 1; i < n; i++) max_logit = FORGE__MAX(max_logit, (double)c[i].logit);
    total = 0.0;
    for (i = 0; i < n; i++) {
        c[i].weight = exp(((double)c[i].logit - max_logit) / d->temperature);
        total += c[i].weight;
    }

    /* 6. top-p: the smallest prefix, most likely first, whose mass reaches top_p. Without top-k,
       only as much is sorted as the mass needs: the best 256, then 4 times more, until their mass
       reaches the target (the best k are the first k of a full sort, so the answer is the same).
       A flat distribution ends up sorting every candidate. */
    if (d->top_p > 0.0f) {
        double target = (double)d->top_p * total;
        size_t ordered = sorted ? n : 0; /* c[0..ordered) is sorted, most likely first */
        k = 256;
        while (ordered == 0) {
            if (k >= n / 2) k = n;
            forge__candidates_top_k(c, n, k);
            cumulative = 0.0;
            for (i = 0; i < k; i++) cumulative += c[i].weight;
            if (cumulative >= target || k == n) ordered = k;
            else k *= 4;
        }
        cumulative = 0.0; /* summed in the same order as above, so a partial sort always ends inside */
        for (i = 0; i < ordered; i++) {
            cumulative += c[i].weight;
            if (cumulative >= target) break;
        }
        if (i < ordered) { /* rounding can leave the full sum a hair short of target: then all stay */
            n = i + 1;
            total = cumulative;
        }
    }

    /* 7. min-p: the most likely token has weight exp(0) == 1, so the threshold is min_p itself */
    if (d->min_p > 0.0f) {
        size_t kept = 0;
        total = 0.0;
        for (i = 0; i < n; i++) {
            if (c[i].weight >= (double)d->min_p) {
                c[kept++] = c[i];
                total += c[i].weight;
            }
        }
        n = kept; /* never 0: the maximum has weight 1 >= min_p */
    }

    /* 8. draw */
    u = forge__uniform01(s->rng) * total;
    cumulative = 0.0;
    for (i = 0; i + 1 < n; i++) {
        cumulative += c[i].weight;
        if (u < cumulative) break;
    }
    *out_token = c[i].id;
    forge__ok(error);
    return FORGE_OK;
}

/* >>impl-model */

struct forge_model {
    forge_allocator allocator;
    forge_file file; /* bytes == NULL when the model reads caller memory */
    forge_gguf *gguf;
    forge_config config;
};

static forge_result forge__model_init(const void *bytes, size_t size, const forge_model_desc *desc, forge_model **out,
                                      forge_file *file, forge_error *error) {
    const forge_allocator *a = desc ? &desc->allocator : NULL;
    forge_model *m = (forge_model *)forge__alloc(a, sizeof *m);
    forge_result r;
    if (!m) return forge__fail(error, FORGE_ERR_HOST_MEMORY, "cannot allocate the model object (%u bytes)", (unsigned)sizeof *m);
    memset(m, 0, sizeof *m);
    if (a) m->allocator = *a;
    if ((r = forge_gguf_parse(bytes, size, a, &m->gguf, error)) || (r = forge_config_derive(m->gguf, &m->config, error))) {
        forge_gguf_free(m->gguf);
        forge__free(a, m);
        return r;
    }
    if (file) m->file = *file;
    *out = m;
    return FORGE_OK;
}

FORGE_API forge_result forge_model_from_memory(const void *bytes, size_t size, const forge_model_desc *desc,
                                               forge_model **out, forge_error *error) {
    if (out) *out = NULL;
    if (!out) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_model_from_memory: null argument");
    return forge__model_init(bytes, size, desc, out, NULL, error);
}

#ifndef FORGE_NO_STDIO
FORGE_API forge_result forge_model_open(const char *path, const forge_model_desc *desc, forge_model **out,
                                        forge_error *error) {
    forge_file file;
    forge_result r;
    if (out) *out = NULL;
    if (!out || !path) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_model_open: null argument");
    if ((r = forge_file_open(path, desc ? &desc->allocator : NULL, &file, error))) return r;
    if ((r = forge__model_init(file.bytes, (size_t)file.size, desc, out, &file, error))) {
        char prefix[FORGE_ERROR_MESSAGE_BYTES];
        forge_file_close(&file);
        if (error) { /* say which file: a process may open several */
            snprintf(prefix, sizeof prefix, "%s", error->message);
            snprintf(error->message, sizeof error->message, "%.200s: %.300s", path, prefix);
        }
        return r;
    }
    return FORGE_OK;
}
#endif

FORGE_API void forge_model_close(forge_model *m) {
    forge_allocator a;
    if (!m) return;
    a = m->allocator;
    forge_gguf_free(m->gguf);
#ifndef FORGE_NO_STDIO
    forge_file_close(&m->file);
#endif
    forge__free(&a, m);
}

FORGE_API const forge_config *forge_model_config(const forge_model *m) { return m ? &m->config : NULL; }
FORGE_API const forge_gguf *forge_model_gguf(const forge_model *m) { return m ? m->gguf : NULL; }

/* >>impl-plan */

FORGE_API const char *forge_kv_type_name(forge_kv_type type) {
    switch (type) {
    case FORGE_KV_DEFAULT:
    case FORGE_KV_F16: return "f16";
    case FORGE_KV_F32: return "f32";
    case FORGE_KV_Q8_0: return "q8_0";
    case FORGE_KV_Q4_0: return "q4_0";
    default: return "unknown";
    }
}

static int forge__ieq(const char *a, const char *b) {
    for (; *a && *b; a++, b++) {
        char x = *a >= 'A' && *a <= 'Z' ? (char)(*a - 'A' + 'a') : *a;
        char y = *b >= 'A' && *b <= 'Z' ? (char)(*b - 'A' + 'a') : *b;
        if (x != y) return 0;
    }
    return *a == *b;
}

FORGE_API forge_result forge_kv_type_parse(const char *text, forge_kv_type *out, forge_error *error) {
    int t;
    if (!text || !out) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_kv_type_parse: null argument");
    for (t = FORGE_KV_F32; t < FORGE_KV_TYPE_COUNT; t++) {
        if (forge__ieq(text, forge_kv_type_name((forge_kv_type)t))) {
            *out = (forge_kv_type)t;
            return FORGE_OK;
        }
    }
    return forge__fail(error, FORGE_ERR_ARGUMENT, "KV cache type '%.40s' is not one of f32, f16, q8_0, q4_0", text);
}

static uint32_t forge__kv_storage_type(forge_kv_type type) {
    switch (type) {
    case FORGE_KV_F32: return FORGE_TYPE_F32;
    case FORGE_KV_Q8_0: return FORGE_TYPE_Q8_0;
    case FORGE_KV_Q4_0: return FORGE_TYPE_Q4_0;
    default: return FORGE_TYPE_F16;
    }
}

FORGE_API forge_result forge_kv_cache_bytes(const forge_config *c, uint32_t n_ctx, forge_kv_type type,
                                            uint64_t *out_bytes, forge_error *error) {
    uint32_t storage, il;
    uint64_t total = 0, row_k, row_v;
    const forge_type_traits *traits;
    if (!c || !out_bytes) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_kv_cache_bytes: null argument");
    if ((unsigned)type >= FORGE_KV_TYPE_COUNT)
        return forge__fail(error, FORGE_ERR_ARGUMENT, "KV cache type %d is not a forge_kv_type", (int)type);
    if (n_ctx == 0) return forge__fail(error, FORGE_ERR_ARGUMENT, "a context of 0 positions");
    storage = forge__kv_storage_type(type);
    traits = forge_type_info(storage);
    /* each head's key and value row is quantized on its own, so it must hold whole blocks */
    if (c->head_dim % traits->block_elems != 0 || c->head_dim_v % traits->block_elems != 0)
        return forge__fail(error, FORGE_ERR_UNSUPPORTED,
                           "a %s KV cache needs head sizes that are multiples of %u; this model's are %u and %u",
                           forge_kv_type_name(type), traits->block_elems, c->head_dim, c->head_dim_v);
    row_k = (uint64_t)c->head_dim / traits->block_elems * traits->block_bytes;
    row_v = (uint64_t)c->head_dim_v / traits->block_elems * traits->block_bytes;
    for (il = 0; il < c->n_layer; il++) {
        /* heads <= 2^24, rows <= 2^26 bytes, n_ctx < 2^32, layers <= 512: no step can overflow */
        total += (uint64_t)n_ctx * c->layer_n_head_kv[il] * (row_k + row_v);
    }
    *out_bytes = total;
    return FORGE_OK;
}

#ifndef FORGE_NO_STDIO
/* The host memory query reads the kernel's text files; the parsers below are separate from the
   reading so that the tests can feed them any text. */

/* Value of "Field:   123 kB" in /proc/meminfo text, in bytes. */
static int forge__meminfo_bytes(const char *text, const char *field, uint64_t *out) {
    size_t n = strlen(field);
    const char *p = text;
    while (p && *p) {
        if (strncmp(p, field, n) == 0 && p[n] == ':') {
            uint64_t v = 0;
            int digits = 0;
            p += n + 1;
            while (*p == ' ' || *p == '\t') p++;
            while (*p >= '0' && *p <= '9' && digits < 19) v = v * 10 + (uint64_t)(*p++ - '0'), digits++;
            if (!digits) return 0;
            while (*p == ' ') p++;
            *out = strncmp(p, "kB", 2) == 0 ? v * 1024 : v;
            return 1;
        }
        p = strchr(p, '\n');
        if (p) p++;
    }
    return 0;
}

/* A cgroup number file: digits, or "max" (v2) for no limit. Returns 0 when unreadable. */
static int forge__cgroup_number(const char *text, uint64_t *out) {
    uint64_t v = 0;
    int digits = 0;
    if (strncmp(text, "max", 3) == 0) {
        *out = UINT64_MAX;
        return 1;
    }
    while (*text >= '0' && *text <= '9' && digits < 20) {
        uint64_t d = (uint64_t)(*text++ - '0');
        if (v > (UINT64_MAX - d) / 10) return 0;
        v = v * 10 + d;
        digits++;
    }
    if (!digits) return 0;
    *out = v;
    return 1;
}

/* "key value" line of a cgroup memory.stat file. */
static int forge__stat_value(const char *text, const char *key, uint64_t *out) {
    size_t n = strlen(key);
    const char *p = text;
    while (p && *p) {
        if (strncmp(p, key, n) == 0 && p[n] == ' ') return forge__cgroup_number(p + n + 1, out);
        p = strchr(p, '\n');
        if (p) p++;
    }
    return 0;
}

/* The memory cgroup of this process from /proc/self/cgroup: "0::/path" (v2) or "N:...memory...:/path" (v1). */
static int forge__cgroup_path(const char *text, int want_v2, char *path, size_t path_size) {
    const char *line = text;
    while (line && *line) {
        const char *end = strchr(line, '\n'), *c1 = strchr(line, ':'), *c2;
        size_t len;
        if (!end) end = line + strlen(line);
        if (c1 && c1 < end && (c2 = strchr(c1 + 1, ':')) != NULL && c2 < end) {
            int match;
            if (want_v2) match = c1 - line == 1 && line[0] == '0' && c2 == c1 + 1;
            else {
                const char *s = c1 + 1;
                match = 0;
                while (s < c2) { /* comma-separated controller list */
                    const char *comma = s;
                    while (comma < c2 && *comma != ',') comma++;
                    if (comma - s == 6 && strncmp(s, "memory", 6) == 0) match = 1;
                    s = comma + 1;
                }
            }
            len = (size_t)(end - (c2 + 1));
            if (match && len < path_size) {
                memcpy(path, c2 + 1, len);
                path[len] = 0;
                return 1;
            }
        }
        line = *end ? end + 1 : end;
    }
    return 0;
}

/* Combines the readings: total and available lowered to the cgroup's limit and what is left of it. */
static void forge__host_memory_combine(uint64_t total, uint64_t available, uint64_t cg_limit, uint64_t cg_usage,
                                       uint64_t cg_reclaimable, forge_host_memory *out) {
    memset(out, 0, sizeof *out);
    if (total == 0) {
        out->adjusted = 1; /* nothing trustworthy: report nothing available */
        available = 0;
    }
    if (available > total) {
        out->adjusted = 1;
        available = total;
    }
    if (cg_limit != UINT64_MAX && cg_limit < total) {
        uint64_t used = cg_usage > cg_reclaimable ? cg_usage - cg_reclaimable : 0;
        uint64_t left = cg_limit > used ? cg_limit - used : 0;
        out->cgroup_limited = 1;
        total = cg_limit;
        if (left < available) available = left;
    }
    out->total_bytes = total;
    out->available_bytes = available;
}

/* Reads a small text file into buf (NUL-terminated); 0 when it cannot be read. */
static int forge__read_text(const char *path, char *buf, size_t size) {
    FILE *f = fopen(path, "rb");
    size_t n;
    if (!f) return 0;
    n = fread(buf, 1, size - 1, f);
    fclose(f);
    buf[n] = 0;
    return n > 0;
}

FORGE_API forge_result forge_host_memory_query(forge_host_memory *out, forge_error *error) {
    char text[8192], path[512], file[640];
    uint64_t total = 0, available = 0, limit = UINT64_MAX, usage = 0, reclaimable = 0;
    if (!out) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_host_memory_query: null argument");
    memset(out, 0, sizeof *out);
    if (forge__read_text("/proc/meminfo", text, sizeof text)) {
        if (!forge__meminfo_bytes(text, "MemTotal", &total))
            return forge__fail(error, FORGE_ERR_IO, "/proc/meminfo has no MemTotal line");
        if (!forge__meminfo_bytes(text, "MemAvailable", &available)) { /* kernels before 3.14 */
            uint64_t free_bytes = 0, cached = 0;
            forge__meminfo_bytes(text, "MemFree", &free_bytes);
            forge__meminfo_bytes(text, "Cached", &cached);
            available = free_bytes + cached;
        }
        /* cgroup v2 first, then v1; the process's own group, then the root of the mount */
        if (forge__read_text("/proc/self/cgroup", text, sizeof text)) {
            const char *v2_files[2] = {"memory.max", "memory.current"};
            const char *v1_files[2] = {"memory.limit_in_bytes", "memory.usage_in_bytes"};
            int version;
            for (version = 2; version >= 1 && limit == UINT64_MAX; version--) {
                const char *base = version == 2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory";
                const char **names = version == 2 ? v2_files : v1_files;
                char cgroup_text[8192];
                int attempt;
                if (!forge__cgroup_path(text, version == 2, path, sizeof path)) continue;
                for (attempt = 0; attempt < 2 && limit == UINT64_MAX; attempt++) {
                    const char *dir = attempt == 0 ? path : "";
                    uint64_t v;
                    snprintf(file, sizeof file, "%s%s/%s", base, dir, names[0]);
                    if (!forge__read_text(file, cgroup_text, sizeof cgroup_text) || !forge__cgroup_number(cgroup_text, &v))
                        continue;
                    limit = v;
                    snprintf(file, sizeof file, "%s%s/%s", base, dir, names[1]);
                    if (forge__read_text(file, cgroup_text, sizeof cgroup_text)) forge__cgroup_number(cgroup_text, &usage);
                    snprintf(file, sizeof file, "%s%s/memory.stat", base, dir);
                    if (forge__read_text(file, cgroup_text, sizeof cgroup_text))
                        forge__stat_value(cgroup_text, version == 2 ? "inactive_file" : "total_inactive_file",
                                          &reclaimable);
                }
            }
        }
    } else {
#if defined(FORGE__MAP_POSIX) && defined(_SC_PHYS_PAGES) && defined(_SC_AVPHYS_PAGES)
        long pages = sysconf(_SC_PHYS_PAGES), free_pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        if (pages <= 0 || page <= 0) return forge__fail(error, FORGE_ERR_IO, "cannot read the size of host memory");
        total = (uint64_t)pages * (uint64_t)page;
        available = free_pages > 0 ? (uint64_t)free_pages * (uint64_t)page : 0;
#elif defined(FORGE__MAP_WIN32)
        MEMORYSTATUSEX status;
        status.dwLength = sizeof status;
        if (!GlobalMemoryStatusEx(&status)) return forge__fail(error, FORGE_ERR_IO, "GlobalMemoryStatusEx failed");
        total = status.ullTotalPhys;
        available = status.ullAvailPhys;
#else
        return forge__fail(error, FORGE_ERR_UNSUPPORTED, "no way to read host memory on this platform");
#endif
    }
    forge__host_memory_combine(total, available, limit, usage, reclaimable, out);
    forge__ok(error);
    return FORGE_OK;
}
#endif /* FORGE_NO_STDIO */

#endif /* FORGE__IMPLEMENTED */
#endif /* FORGE_IMPLEMENTATION */
/* >>impl-end */

/*
forge is released under the MIT License:

Copyright (c) 2026 the forge authors

Permission is hereby granted, free of charge, to any person obtaining a copy of this software and
associated documentation files (the "Software"), to deal in the Software without restriction,
including without limitation the rights to use, copy, modify, merge, publish, distribute,
sublicense, and/or sell copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all copies or
substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING BUT
NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND
NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM,
DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM, OUT
OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
*/

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

   Compile: cc -std=c99 prog.c -lm -pthread (the CPU backend). For a GPU, compile the file that
   defines FORGE_IMPLEMENTATION with -DFORGE_HIP and link forge_kernels.hip, built by hipcc (AMD) or
   by nvcc -x cu (NVIDIA); see README, "Build for AMD and NVIDIA".

   FIRST PROGRAM (>>generate, "the short path")
      forge_llm_open(path, NULL, &llm, &error)      model + tokenizer + budget-checked context
      forge_llm_chat(llm, "Hi", on_text, user_data, &error)    streams the reply, piece by piece
      forge_llm_close(llm)
   Then the layers, each usable alone: forge_model_open (the file), forge_plan_check (will it fit?),
   forge_context_create (the memory, after the budget check), forge_tokenizer_create, forge_eval /
   forge_context_sample (one step), forge_generator_* (bounded steps for a frame loop).

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
      - plans the exact bytes a context takes (weights, KV cache of f32, f16, q8_0 or q4_0, scratch,
        logits, captures, the backend's reserve), checks the plan against a budget (70% of free
        memory by default) before allocating, and refuses with every term and what would fit
      - runs the forward pass on the CPU (products straight from quantized blocks, a thread pool,
        bitwise the same for any thread count) or on a GPU through HIP (AMD) or CUDA (NVIDIA) with
        forge_kernels.hip: one device arena, decode graphs, 8-bit activation products
      - tokenizes and detokenizes (SentencePiece and byte-level BPE, llama.cpp's pre-tokenizers),
        streaming whole UTF-8 characters
      - samples tokens: greedy, temperature, top-k, top-p, min-p, repetition penalty, seeded
      - chat formats ChatML, Llama 3 and Gemma, recognized from the file's template
      - captures hidden states (residual stream, attention and MLP outputs, final norm) per batch,
        and attention patterns (softmax probabilities of chosen heads against a window of keys)
      - many sequences on one model (n_seq): the weights once, a KV cache per sequence in the plan,
        steps that advance several sequences together (forge_eval_batch), one reset while the others go on
      - one model split by layers across the GPUs of a host (n_devices): each device's bytes in the
        plan (forge_plan.parts) against that device's own budget, one arena per device, the
        activations passed by peer copies; the CPU runs the same split on host arenas (tests)
      - the short path (forge_llm): from a path to a streamed reply in a few calls

   OPTIONS (define before including; the FORGE_GGUF_MAX_* and other limits are in the code below)
      FORGE_STATIC        every function gets static linkage (vendoring into one translation unit)
      FORGE_API           the linkage of every function (default extern; FORGE_STATIC makes it static)
      FORGE_NO_STDIO      no file loading (forge_gguf_parse, forge_model_from_memory, forge_llm_open_memory remain)
      FORGE_NO_MMAP       load files with read() into host memory instead of mapping them
      FORGE_NO_THREADS    the CPU backend runs on the calling thread only: no pthreads, no Win32 threads
      FORGE_HIP           the GPU backend (link forge_kernels.hip); without it the CPU serves everything
      FORGE_MALLOC/FORGE_FREE  default host allocator (when no forge_allocator is given)
      FORGE_MAX_THREADS   most threads a CPU pool starts (256)
      FORGE_POOL_SPINS    polls of an idle pool thread before it sleeps (4000)
      FORGE_MAX_LAYERS    most layers a configuration holds (512)
      FORGE_MAX_SEQ       most sequence slots of one context (4096)
      FORGE_MAX_DEVICES   most devices one context's layers are split across (8)
      FORGE_GGUF_MAX_KV, _TENSORS, _STRING_BYTES, _ARRAY_COUNT, _NAME_BYTES, _ALIGNMENT
                          the reader's limits on what a file may claim
      FORGE_TOKENIZE_MAX_TEXT_BYTES, FORGE_TOKENIZER_MAX_VOCAB   the tokenizer's limits

   CONTENTS (search for the markers; the implementation's are >>impl-NAME)
      >>results     result codes, the error record, the allocator callbacks
      >>types       tensor type table and dequantization
      >>gguf        GGUF reader, files
      >>config      architectures and configuration derivation
      >>cpu         the CPU backend's thread count and thread policy
      >>tokenizer   text <-> token ids, the streaming detokenizer
      >>sampler     token sampling
      >>model       model object: file + index + configuration
      >>plan        memory arithmetic: KV cache bytes, host memory
      >>context     the memory plan, the budget, captures, a context that evaluates tokens, many
                    sequences on one model (n_seq, forge_eval_batch); forge_context_desc_apply_env
      >>generate    chat formats, the step-by-step generator, and the short path (forge_llm)
      >>impl        implementation: >>impl-results -types -gguf -file -config -cpu -tokenizer -sampler
                    -model -plan -context -gpu-backend -plan-compute -cpu-backend -gpu-context
                    -capture -generate -device-scope -env -llm -end

   WHAT A HOST PROGRAM MAY RELY ON
      - Errors: every fallible function returns forge_result (FORGE_OK == 0) and, when given a
        forge_error, fills it with the code and a one-line message that names the key or tensor and
        the numbers. The library never exits, aborts or prints (logging goes to desc.log if given).
      - Environment: the library reads no environment variable unless the program calls
        forge_context_desc_apply_env, which applies FORGE_MEM_FRACTION, FORGE_NO_GRAPH, FORGE_NO_Q8,
        FORGE_NORM_FUSION, FORGE_NO_PDL, FORGE_NO_STAGE, FORGE_NO_WGMMA and FORGE_CPU_NO_Q8 to a descriptor (the CLI
        calls it).
      - Memory: host memory through the descriptor's forge_allocator (both callbacks or neither: one
        without the other is refused with FORGE_ERR_ARGUMENT at creation); a context allocates all it
        needs at create and nothing per token; any failed create frees what it took.
      - Threads: a CPU context starts desc.n_threads - 1 worker threads at create (the caller is the
        last participant) and joins them at destroy; n_threads 0 means forge_cpu_default_threads(),
        half the processors the process may use, so a game keeps the other half. Nothing else starts
        a thread. Objects serve one thread at a time; separate objects are independent, except that
        a tokenizer (read-only after create) may serve several threads at once.
      - GPU device: every call that touches a context's device makes desc.device current for the
        calling thread and puts back the device the thread had before returning (the queries too);
        a split context makes each of its devices current in turn and puts back the same way.
      - Process-wide state in forge_kernels.hip (nothing else in forge is global):
          per-device answers cached once (atomics): whether overlapped launches (PDL) run, the
            multiprocessor count, whether a staged kernel may take its shared memory;
          the launch switches of the context being served, thread-local (set around each call);
          test hooks: the count of device allocations, injected allocation failures, staging forced
            on or off (forge_hip_set_staging) (atomics);
          the runtime's own per-thread current device, which forge leaves as it found it;
          peer access between two devices of a split: a context that finds it off turns it on, and
          off again at destroy (where it was on already, forge leaves it alone).
        All of it is safe when contexts are created on several threads at once.

   LIFETIMES
      forge_model          open .. close; it must outlive its contexts (they read its mapping)
      forge_tokenizer      create .. destroy; copies what it needs, the model may close first
      forge_context        create .. destroy; the model must outlive it
      forge_sampler        create .. destroy; independent of the rest
      forge_generator      create .. destroy; its context and tokenizer must outlive it
      forge_llm            open .. close; owns the four above
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
    X(ERR_UNSUPPORTED, "feature not supported")                                                   \
    X(ERR_BUDGET, "the plan does not fit the memory budget")

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
    float rope_freq_scale_swa;    /* frequency scale on sliding-window layers (gemma3: 1, unscaled) */
    int has_rope_freqs;           /* rope_freqs.weight present: per-dimension factors (llama3 style) */
    float rms_eps;
    uint32_t n_expert;            /* 0 for dense models */
    uint32_t n_expert_used;
    uint32_t n_ff_exp;            /* width of one routed expert */
    uint32_t n_ff_shexp;          /* width of the shared expert, 0 when none */
    uint32_t n_swa;               /* sliding window size, 0 when every layer attends to the whole context */
    uint32_t swa_pattern;         /* every swa_pattern-th layer is global; 0 when n_swa is 0, or (with a
                                     window) when every layer is local; layer_is_swa says per layer */
    float attn_scale;             /* attention scores are q.k * attn_scale: 1/sqrt(head_dim), or the family's rule */
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

/* >>cpu ---------------------------------------------------------------------------------------- */

/* CPU backend. Its kernels and thread pool are internal; the forward pass runs on them. Define
   FORGE_NO_THREADS to run everything on the calling thread (no pthreads, no Win32 threads). */
#ifndef FORGE_MAX_THREADS
#define FORGE_MAX_THREADS 256 /* a CPU thread pool never starts more threads than this */
#endif

/* Logical processors this process may use (at least 1). On Linux it honours the affinity mask
   (taskset, containers) when the includer defines _GNU_SOURCE. */
FORGE_API uint32_t forge_cpu_count(void);
/* The CPU backend's thread count when forge_context_desc.n_threads is 0: half of forge_cpu_count(),
   rounded up (1 on one or two processors, 4 on eight). Why half: a program that embeds forge (a game,
   an editor) has its own threads to run; a token's work is mostly reading every weight once, so it is
   bound by memory bandwidth, which half the processors (on SMT parts, about one a core) come close to
   using up; and a pool with more threads than free processors is slower, not faster, since each
   product waits for its last thread. A program that owns the machine (the CLI) asks for
   forge_cpu_count(). The threads are started by forge_context_create and joined by destroy. */
FORGE_API uint32_t forge_cpu_default_threads(void);

/* end of >>cpu */

/* >>tokenizer ---------------------------------------------------------------------------------- */

/* Text <-> token ids, built from a file's tokenizer.ggml.* metadata. Two models are supported:
      SPM  (tokenizer.ggml.model "llama")  SentencePiece-style: spaces become U+2581, a space is put
           in front of the text (tokenizer.ggml.add_space_prefix, default true), pieces merge by score
           (highest first), characters without a token fall back to <0xXX> byte tokens, then to the
           unknown token
      BPE  ("gpt2")  byte-level BPE: the text is split by the pre-tokenizer that tokenizer.ggml.pre
           names, each piece's bytes are mapped to GPT-2's printable characters, and pieces merge by
           the rank of tokenizer.ggml.merges (lowest first)
   Pre-tokenizers (tokenizer.ggml.pre): default (also when the key is absent), gpt-2 phi-2 mpt olmo jais
   exaone4, llama3 llama-v3 llama-bpe falcon3 pixtral dbrx smaug-bpe, qwen2 deepseek-r1-qwen stablelm2,
   starcoder refact command-r smollm codeshell exaone minerva-7b, deepseek-llm, deepseek-coder, falcon.
   Any other name, and any other tokenizer.ggml.model, is FORGE_ERR_UNSUPPORTED with the name in the
   message. They follow llama.cpp's splitting rules (its test vectors are the tests).

   Special tokens: the text of control (3) and unknown (2) tokens is recognized only with
   parse_special; user-defined (4) tokens are always recognized (they are part of the vocabulary
   the way Hugging Face's "added tokens" are). Longer ones win, then the leftmost.
   Duplicate token texts: the highest id wins (as in llama.cpp); duplicate merges: the first wins.
   Invalid UTF-8 in the text is kept byte for byte (each bad byte is a character of its own, neither
   letter nor space). A byte the vocabulary cannot spell becomes the unknown token; without one, BPE
   drops it (as llama.cpp does) and SPM fails with FORGE_ERR_UNSUPPORTED naming the byte. So
   detokenize(tokenize(text)) == text whenever every byte of the text has a token.

   The tokenizer copies what it needs from the file at create (the file may be closed afterwards) and
   never changes after: one tokenizer can serve several threads. Each forge_tokenize call makes one
   allocation of about 80 bytes per byte of text through the tokenizer's allocator, freed before it
   returns. */

typedef enum forge_token_type {
    FORGE_TOKEN_UNDEFINED = 0,
    FORGE_TOKEN_NORMAL = 1,
    FORGE_TOKEN_UNKNOWN = 2,
    FORGE_TOKEN_CONTROL = 3,
    FORGE_TOKEN_USER_DEFINED = 4,
    FORGE_TOKEN_UNUSED = 5,
    FORGE_TOKEN_BYTE = 6
} forge_token_type;

/* longest text forge_tokenize accepts */
#ifndef FORGE_TOKENIZE_MAX_TEXT_BYTES
#define FORGE_TOKENIZE_MAX_TEXT_BYTES (1u << 30)
#endif
#ifndef FORGE_TOKENIZER_MAX_VOCAB
#define FORGE_TOKENIZER_MAX_VOCAB (1u << 24)
#endif

typedef struct forge_tokenizer forge_tokenizer;

/* allocator may be NULL (FORGE_MALLOC). FORGE_ERR_MISSING_KEY without tokenizer.ggml.tokens or .model,
   FORGE_ERR_KEY_TYPE / FORGE_ERR_CONFIG for malformed arrays or ids outside the vocabulary,
   FORGE_ERR_UNSUPPORTED for another tokenizer model or an unknown pre-tokenizer name. */
FORGE_API forge_result forge_tokenizer_create(const forge_gguf *gguf, const forge_allocator *allocator,
                                              forge_tokenizer **out, forge_error *error);
FORGE_API void forge_tokenizer_destroy(forge_tokenizer *tok);

FORGE_API uint32_t forge_tokenizer_n_vocab(const forge_tokenizer *tok);
FORGE_API forge_vocab_type forge_tokenizer_type(const forge_tokenizer *tok); /* SPM or BPE */
FORGE_API const char *forge_tokenizer_pre_name(const forge_tokenizer *tok);  /* "smollm", "default", "spm" */
FORGE_API int32_t forge_tokenizer_bos(const forge_tokenizer *tok); /* -1 when the file names none */
FORGE_API int32_t forge_tokenizer_eos(const forge_tokenizer *tok);
/* tokenizer.ggml.eot_token_id, else a control token spelled <|eot_id|>, <|im_end|>, <|end|>,
   <end_of_turn> or <|endoftext|> (the first found in that order), else -1 */
FORGE_API int32_t forge_tokenizer_eot(const forge_tokenizer *tok);
FORGE_API int32_t forge_tokenizer_unk(const forge_tokenizer *tok);
/* tokenizer.ggml.add_bos_token, or 1 for SPM and 0 for BPE when absent (and 0 without a BOS id) */
FORGE_API int forge_tokenizer_add_bos(const forge_tokenizer *tok);
/* 1 for end-of-generation tokens: the EOS and EOT ids */
FORGE_API int forge_tokenizer_is_eog(const forge_tokenizer *tok, int32_t id);
/* FORGE_TOKEN_UNDEFINED for ids outside the vocabulary */
FORGE_API forge_token_type forge_tokenizer_token_type(const forge_tokenizer *tok, int32_t id);
/* the token's text as stored in the file (not NUL-terminated; "" with *len 0 for bad ids) */
FORGE_API const char *forge_tokenizer_token_text(const forge_tokenizer *tok, int32_t id, size_t *len);
/* bytes of the longest piece forge_token_to_piece can return */
FORGE_API size_t forge_tokenizer_max_piece_bytes(const forge_tokenizer *tok);

/* Tokenizes text[0 .. text_len) (any bytes; NUL is a character like any other). add_bos puts the BOS id
   first (FORGE_ERR_ARGUMENT when the file has none). Writes at most capacity ids; *n_ids always
   receives the number the whole text needs (ids may be NULL with capacity 0 to ask). When capacity
   is too small the first capacity ids are written and the result is FORGE_ERR_LIMIT with both
   numbers in the message. FORGE_ERR_HOST_MEMORY when the work area cannot be allocated. */
FORGE_API forge_result forge_tokenize(const forge_tokenizer *tok, const char *text, size_t text_len, int add_bos,
                                      int parse_special, int32_t *ids, size_t capacity, size_t *n_ids,
                                      forge_error *error);

/* The bytes a token stands for, as a view into the tokenizer (valid until destroy; not
   NUL-terminated; may end inside a UTF-8 character). SPM: U+2581 -> space, <0xXX> -> that byte.
   BPE: GPT-2 characters mapped back to bytes. Control and unknown tokens give their text when special
   is 1 and nothing otherwise; unused tokens give nothing. FORGE_ERR_ARGUMENT for ids outside the
   vocabulary. */
FORGE_API forge_result forge_token_to_piece(const forge_tokenizer *tok, int32_t id, int special, const char **piece,
                                            size_t *piece_len, forge_error *error);

/* Concatenated pieces of ids. When the tokenizer adds a space prefix (SPM), the one space it added in
   front of the first piece that has any bytes is removed, so that detokenize(tokenize(text)) == text.
   Same capacity rule as forge_tokenize (bytes instead of ids; no NUL is written). */
FORGE_API forge_result forge_detokenize(const forge_tokenizer *tok, const int32_t *ids, size_t n_ids, int special,
                                        char *out, size_t capacity, size_t *n_bytes, forge_error *error);

/* Streaming detokenizer: push one token at a time, get bytes that never end inside a UTF-8 character.
   An incomplete sequence at the end of what has arrived is held back (at most 3 bytes) until the next
   push completes it; a sequence that can no longer become valid is passed through as it is. Lives on
   the caller's stack: no allocation. Removes the SPM space prefix like forge_detokenize. */
typedef struct forge_detokenizer {
    const forge_tokenizer *tok;
    int special;              /* control/unknown tokens as text */
    int strip_space;          /* 1 until the first piece with bytes has passed */
    uint32_t n_held;          /* bytes held back */
    unsigned char held[4];
} forge_detokenizer;

FORGE_API void forge_detokenizer_init(forge_detokenizer *d, const forge_tokenizer *tok, int special);
/* Writes the bytes that are ready into out. out must hold forge_tokenizer_max_piece_bytes(tok) + 3 bytes
   to never fail; with less, FORGE_ERR_LIMIT when this push needs more, and nothing changes. */
FORGE_API forge_result forge_detokenizer_push(forge_detokenizer *d, int32_t id, char *out, size_t capacity,
                                              size_t *n_out, forge_error *error);
/* End of stream: writes the held bytes (an incomplete character, as it is) and resets; out needs 3 bytes. */
FORGE_API forge_result forge_detokenizer_flush(forge_detokenizer *d, char *out, size_t capacity, size_t *n_out,
                                               forge_error *error);

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
/* Cache rows (positions held) of one layer: n_ctx, except on a sliding-window layer, which keeps only
   what its window can still see while a batch of n_batch tokens is evaluated: at most
   n_swa + n_batch - 1 rows, reused in a ring. n_batch 0 means no bound (every layer keeps n_ctx). */
FORGE_API uint32_t forge_kv_layer_cells(const forge_config *config, uint32_t layer, uint32_t n_ctx, uint32_t n_batch);
/* Exact bytes of the KV cache for n_ctx positions evaluated in batches of up to n_batch tokens: over
   every layer, cells x n_head_kv x (head_dim + head_dim_v) elements of the type, in whole blocks
   (cells from forge_kv_layer_cells). Llama-3-8B at 8192 positions of f16 is exactly 1 GiB;
   Qwen2.5-0.5B at 2048 is 24 MiB. */
FORGE_API forge_result forge_kv_cache_bytes(const forge_config *config, uint32_t n_ctx, uint32_t n_batch, forge_kv_type type,
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

/* >>context ------------------------------------------------------------------------------------ */

/* What happens when a plan does not fit the budget. */
typedef enum forge_budget_policy {
    FORGE_BUDGET_REFUSE = 0, /* default: allocate nothing, return FORGE_ERR_BUDGET */
    FORGE_BUDGET_WARN        /* allocate anyway and log a warning */
} forge_budget_policy;

typedef enum forge_log_level { FORGE_LOG_INFO = 0, FORGE_LOG_WARN = 1 } forge_log_level;

/* Memory as the budget sees it. Filled by forge_memory_query for the backend in use; a caller
   (or a test) may supply its own reading through forge_context_desc.memory. */
typedef struct forge_memory_reading {
    char device[64];          /* "CPU (host memory)", a GPU name, ... */
    char arch[32];            /* GPU architecture ("sm_90", "gfx90a"); "" on the CPU */
    uint64_t total_bytes;
    uint64_t free_bytes;
    int adjusted;             /* 1 when a reading made no sense and was clamped */
    int wave_size;            /* GPU: lanes per wave (32 or 64); 0 on the CPU */
    int fp16, bf16;           /* GPU: half and bfloat16 arithmetic */
} forge_memory_reading;

/* Where a context runs. AUTO picks the GPU when forge was built with FORGE_HIP and a device answers. */
typedef enum forge_backend { FORGE_BACKEND_AUTO = 0, FORGE_BACKEND_CPU, FORGE_BACKEND_GPU } forge_backend;

/* Hidden-state capture: activations of chosen layers at chosen points of the forward pass, copied
   out after every batch (a "chunk") a context evaluates. Names follow the usual hook style. */
typedef enum forge_capture_point {
    FORGE_CAPTURE_RESID_PRE = 0, /* blocks.L.hook_resid_pre: the residual stream entering layer L */
    FORGE_CAPTURE_ATTN_OUT,      /* blocks.L.hook_attn_out: what attention adds to the stream (after the output
                                    projection, and after the post-attention norm in families that have one) */
    FORGE_CAPTURE_MLP_OUT,       /* blocks.L.hook_mlp_out: what the FFN (or the experts) adds to the stream */
    FORGE_CAPTURE_RESID_POST,    /* blocks.L.hook_resid_post: the stream leaving layer L (resid_pre + attn_out + mlp_out) */
    FORGE_CAPTURE_FINAL,         /* ln_final.hook_normalized: the final norm's output, the head's input (no layer) */
    FORGE_CAPTURE_ATTN_PATTERN,  /* blocks.L.attn.hook_pattern: attention weights (softmax probabilities) of chosen
                                    query heads against a window of key positions; each row is [head][key] of
                                    forge_context_desc.pattern_* (see there), 0 for keys the query cannot see */
    FORGE_CAPTURE_POINT_COUNT
} forge_capture_point;

/* Element type of captured rows. BF16 and F16 are rounded to nearest even from f32 by forge itself,
   so every device and the CPU produce them. */
typedef enum forge_capture_dtype { FORGE_CAPTURE_F32 = 0, FORGE_CAPTURE_F16, FORGE_CAPTURE_BF16 } forge_capture_dtype;

#define FORGE_MAX_CAPTURES 256
#ifndef FORGE_MAX_SEQ
#define FORGE_MAX_SEQ 4096 /* most sequence slots of one context */
#endif
#ifndef FORGE_MAX_DEVICES
#define FORGE_MAX_DEVICES 8 /* most devices one context's layers are split across */
#endif

typedef struct forge_capture {
    uint32_t layer;            /* 0 .. n_layer - 1; ignored (0) for FORGE_CAPTURE_FINAL */
    forge_capture_point point;
} forge_capture;

/* One chunk of captured rows: tokens pos .. pos + n_tokens - 1. data[i] holds n_tokens rows of
   width[i] values of dtype for captures[i]. The memory belongs to the context: it is valid during
   the callback and until the next forge_eval; copy what must be kept. */
typedef struct forge_capture_chunk {
    uint32_t pos, n_tokens;
    uint32_t n_captures;
    const forge_capture *captures;
    const void *const *data;
    const uint32_t *width;
    forge_capture_dtype dtype;
    /* a step of forge_eval_batch: row t belongs to sequence seq[t] at position positions[t] (pos is
       then 0); NULL for forge_eval, whose rows are sequence 0's positions pos .. pos + n_tokens - 1 */
    const uint32_t *seq, *positions;
} forge_capture_chunk;

typedef void (*forge_capture_fn)(void *user_data, const forge_capture_chunk *chunk);

/* Fills out[0 .. *n_out) from a layer list crossed with a point list, or from hook names.
   layers: "0,12,-1" (negative counts from the end), ranges "4-7", "all"; NULL or "" when points
   holds only hook names. points: "resid_pre,attn_out,mlp_out,resid_post,final,pattern", or hook names
   ("blocks.5.hook_resid_post", "blocks.-1.hook_mlp_out", "blocks.3.attn.hook_pattern",
   "ln_final.hook_normalized"), mixed freely.
   Repeats are dropped; the order is layer by layer, then the hook names as given. */
FORGE_API forge_result forge_capture_parse(const forge_config *config, const char *layers, const char *points,
                                           forge_capture *out, uint32_t capacity, uint32_t *n_out, forge_error *error);
/* "blocks.5.hook_resid_post", "blocks.5.attn.hook_pattern", "ln_final.hook_normalized"; returns out. */
FORGE_API const char *forge_capture_name(const forge_capture *capture, char *out, size_t out_bytes);
FORGE_API const char *forge_capture_dtype_name(forge_capture_dtype dtype); /* "f32", "f16", "bf16" */
FORGE_API uint32_t forge_capture_dtype_bytes(forge_capture_dtype dtype);   /* bytes of one value: 4, 2, 2 */
FORGE_API forge_result forge_capture_dtype_parse(const char *text, forge_capture_dtype *out, forge_error *error);

/* Zero means default everywhere. */
typedef struct forge_context_desc {
    forge_backend backend;        /* 0 = AUTO */
    int device;                   /* GPU index */
    uint32_t n_ctx;               /* positions in the KV cache; 0 = min(trained context, 4096) */
    uint32_t n_batch;             /* most tokens evaluated in one step; 0 = min(512, n_ctx) */
    forge_kv_type kv_type;        /* 0 = f16 */
    int all_logits;               /* 1: keep the logits of every token of a step, not only the last */
    uint32_t n_threads;           /* CPU threads, the calling thread included; 0 = forge_cpu_default_threads() */
    uint32_t n_seq;               /* sequence slots sharing the weights, each with its own KV cache of n_ctx
                                     positions (see forge_eval_batch); 0 = 1 */
    double mem_fraction;          /* share of free memory the plan may take; 0 = 0.70 */
    uint64_t mem_headroom_bytes;  /* kept free on top of the fraction */
    forge_budget_policy policy;
    const forge_memory_reading *memory; /* NULL = query the backend */
    forge_allocator allocator;    /* host allocations of the context */
    void (*log)(void *user_data, forge_log_level level, const char *message);
    void *log_user_data;
    /* GPU decode switches, 0 = forge's choice (forge_eval says what each path does). forge never reads
       the environment for them: forge_context_desc_apply_env fills them from FORGE_* variables. */
    int gpu_no_graph;             /* 1: plain launches instead of recorded graphs (FORGE_NO_GRAPH=1) */
    int gpu_no_q8;                /* 1: decode and steps of up to 8 rows on f32 activations, not 8-bit (FORGE_NO_Q8=1) */
    int gpu_norm_fusion;          /* 0: where faster; 1: wherever the shapes allow; -1: never (FORGE_NORM_FUSION=1/0) */
    int gpu_no_pdl;               /* 1: no programmatic dependent launch on NVIDIA sm_90+ (FORGE_NO_PDL=1) */
    int gpu_no_stage;             /* 1: decode products never stage rows in shared memory (FORGE_NO_STAGE=1) */
    int cpu_no_q8;                /* 1: CPU products on f32 activations, not 8-bit (FORGE_CPU_NO_Q8=1) */
    /* 1: the CPU backend copies the matrices its products read (not the token embeddings unless they
       are the output head, not the norms and biases) into one host allocation at forge_context_create,
       once, and reads them there; the mapped file stays read-only. On Linux the copy is advised into
       2 MiB pages (madvise MADV_HUGEPAGE, where <sys/mman.h> declares it: the includer defines
       _DEFAULT_SOURCE or _GNU_SOURCE, or compiles in GNU mode), which the file's 4 KiB pages are not:
       a decode step that reads every weight then walks 512 times fewer pages (Qwen2.5-Coder-1.5B
       Q4_K_M's decode 8-13% faster on 2 cores: tests/PERF.md). Bytes: each matrix at a 64-byte
       boundary plus 2 MiB to align the start, taken from desc.allocator, outside the arena: at most
       the plan's weights_bytes plus 2 MiB and 64 bytes a matrix (the plan counts every tensor as
       stored against the budget; the embeddings, norms and biases left out are more than the padding
       in the usual files). The copied tensors' pages of forge's own mapping of the file are let go
       from the process as they are copied (madvise MADV_DONTNEED: the kernel keeps them as page
       cache), so the process holds them once. A copy takes about a second for 1 GB on a fresh
       process (the kernel clears the pages as they are first written). 0 (the default): the
       products read the mapped file. The GPU backend ignores it. */
    int cpu_copy_weights;
    /* hidden-state capture (see forge_capture_parse); the staging is part of the plan */
    const forge_capture *captures;
    uint32_t n_captures;              /* at most FORGE_MAX_CAPTURES */
    forge_capture_dtype capture_dtype;
    forge_capture_fn on_capture;      /* called after every chunk; NULL: read forge_context_captures */
    void *capture_user_data;
    /* weight upload progress, called during forge_context_create: on the GPU after every staging
       chunk (32 MiB) and once at the end with done_bytes == total_bytes (the plan's weights_bytes);
       on the CPU, where the weights stay in the mapped file (or are copied: cpu_copy_weights), once. The GPU upload streams through
       two 32 MiB buffers of pinned host memory (fewer for smaller models), taken for the upload and
       freed before the call returns: host memory, not part of the device plan. */
    void (*on_progress)(void *user_data, uint64_t done_bytes, uint64_t total_bytes);
    void *progress_user_data;
    /* attention patterns (FORGE_CAPTURE_ATTN_PATTERN captures): each chunk's query rows against the key
       positions [pattern_key_first, pattern_key_first + pattern_n_keys), for the query heads
       [pattern_head_first, pattern_head_first + pattern_n_heads) of each pattern layer. A row of a
       capture is pattern_n_heads x pattern_n_keys probabilities, head-major; a key after the query (or
       outside a sliding window) is 0, so a row sums to 1 where the window holds every key the query
       sees. pattern_n_keys 0: every position from pattern_key_first to n_ctx - 1 (the full square
       when pattern_key_first is 0); pattern_n_heads 0: every head from pattern_head_first. The
       staging (n_batch rows of each) is part of the plan (forge_plan.pattern_bytes) and of a refusal. */
    uint32_t pattern_head_first, pattern_n_heads;
    uint32_t pattern_key_first, pattern_n_keys;
    /* One model split by layers across several devices (pipeline order). Each device holds a
       contiguous range of layers (weights and KV cache), its own scratch and one arena; the first
       also the token embeddings, the last the output head and the logits; the activations pass
       between devices by peer copies at the range boundaries. Every device's bytes are planned
       (forge_plan.parts) and checked against that device's own budget before anything is allocated
       on any of them. On the CPU backend the parts are separate host arenas standing in for
       devices (the same split, plans and refusals, testable without a GPU). */
    uint32_t n_devices;              /* 0 or 1: one device (`device`); 2 .. FORGE_MAX_DEVICES: split across devices[] */
    int devices[FORGE_MAX_DEVICES];  /* GPU indices in layer order; one index may repeat (two parts on one card) */
    double split[FORGE_MAX_DEVICES]; /* each device's share of the layers' bytes (any scale); all 0: in proportion
                                        to what each device's budget leaves after its fixed terms */
    const forge_memory_reading *device_memory; /* NULL: each device queried (`memory` stands for every one when
                                        set; the CPU's parts share one host reading); else n_devices readings */
    uint32_t split_layers[FORGE_MAX_DEVICES]; /* layers of each device, summing to the model's (each >= 1);
                                        all 0: by `split` */
    /* 1: prompt products (more than 64 tokens) keep the mma.sync kernel where the kernels hold sm_90a
       code for the warpgroup instructions (FORGE_NO_WGMMA=1; GPU switches above) */
    int gpu_no_wgmma;
} forge_context_desc;

/* One device's share of a plan: its layers and its terms, as in forge_plan. */
typedef struct forge_plan_part {
    int device;                        /* GPU index (CPU: the label of the host arena) */
    uint32_t layer_first, n_layers;    /* layers [layer_first, layer_first + n_layers) */
    uint64_t weights_bytes, kv_bytes, scratch_bytes, logits_bytes, capture_bytes, reserve_bytes;
    uint64_t total_bytes;              /* what this device's arena holds (on the CPU, weights stay in the file) */
} forge_plan_part;

/* The whole bill, in bytes. What the plan says is what the context allocates. */
typedef struct forge_plan {
    forge_backend backend;             /* CPU or GPU: where the bytes are */
    uint32_t n_ctx, n_batch, n_logits; /* n_ctx: positions of each sequence; n_logits: rows of logits kept per step */
    uint32_t n_seq;                    /* sequence slots; kv_bytes is n_seq times one sequence's cache */
    forge_kv_type kv_type;
    uint64_t weights_bytes;  /* tensors as stored (quantized stays quantized); on the GPU, norms and biases
                                in f32 and every tensor at a 256-byte boundary */
    uint64_t kv_bytes;       /* n_seq x forge_kv_cache_bytes (one sequence's cache) */
    uint64_t scratch_bytes;  /* activations of the op schedule, lifetimes packed, for n_batch tokens */
    uint64_t logits_bytes;   /* n_logits x n_vocab floats */
    uint64_t capture_bytes;  /* hidden-state capture staging: n_batch rows of every capture */
    uint64_t pattern_bytes;  /* the part of capture_bytes that holds attention patterns */
    uint32_t pattern_key_first, pattern_n_keys; /* the key window of the patterns, resolved (0, 0 without any) */
    uint32_t pattern_n_heads;                   /* query heads of each pattern row (the widest layer's) */
    uint64_t reserve_bytes;  /* the backend's own working memory (CPU: per-thread matmul rows) */
    uint64_t total_bytes;    /* the sum */
    /* the terms by device: one part unless the desc splits the layers (the fields above are then
       the sums over the parts; a tensor two parts read, a tied output say, is counted on each) */
    uint32_t n_parts;
    forge_plan_part parts[FORGE_MAX_DEVICES];
} forge_plan;

/* One device of a verdict: the parts it holds against its own budget. */
typedef struct forge_device_verdict {
    int device;
    forge_memory_reading memory;
    uint64_t plan_bytes;     /* the parts on this device */
    uint64_t budget_bytes;   /* free x fraction - headroom */
    int fits;
} forge_device_verdict;

/* The plan checked against a memory reading. */
typedef struct forge_verdict {
    int fits;
    forge_plan plan;
    forge_memory_reading memory;
    double mem_fraction;
    uint64_t mem_headroom_bytes;
    uint64_t budget_bytes;       /* free x fraction - headroom */
    uint32_t max_ctx_that_fits;  /* largest multiple of 256 at the requested KV type; 0 if none */
    forge_kv_type kv_type_that_fits; /* the most precise KV type below the requested one that fits the
                                        requested context; FORGE_KV_DEFAULT when none does */
    uint32_t max_seq_that_fits;  /* most sequences (up to FORGE_MAX_SEQ) at the requested context and KV type; 0 if none */
    uint64_t seq_bytes;          /* what one more sequence costs: its KV cache (and, past the first, its logits row) */
    char message[FORGE_ERROR_MESSAGE_BYTES]; /* the breakdown and, when it does not fit, what would */
    /* by device (one entry unless the layers are split; `memory` and `budget_bytes` above are then
       the first device's); fits is 1 when every device fits */
    uint32_t n_devices;
    forge_device_verdict devices[FORGE_MAX_DEVICES];
    double split_that_fits[FORGE_MAX_DEVICES]; /* a split given by the caller that does not fit: the shares
                                                  forge's own split would take where it fits, else all 0 */
} forge_verdict;

/* Plans without allocating device or context memory (the schedule is built in a temporary host
   allocation). Fails for impossible descriptors (n_ctx above 2^30, unknown KV type, ...). */
FORGE_API forge_result forge_plan_compute(const forge_model *model, const forge_context_desc *desc, forge_plan *out,
                                          forge_error *error);
/* Reads memory (desc->memory or the CPU backend's query), plans, and decides; fills what would fit. */
FORGE_API forge_result forge_plan_check(const forge_model *model, const forge_context_desc *desc, forge_verdict *out,
                                        forge_error *error);
/* Host memory as a forge_memory_reading (the CPU backend's device). */
FORGE_API forge_result forge_memory_query_cpu(forge_memory_reading *out, forge_error *error);
/* A GPU's name, architecture, total and free memory (FORGE_ERR_UNSUPPORTED without FORGE_HIP). */
FORGE_API forge_result forge_memory_query_gpu(int device, forge_memory_reading *out, forge_error *error);
FORGE_API int forge_gpu_available(void); /* 1 when built with FORGE_HIP and device 0 answers */
/* Device allocations forge has made in this process (a test hook: a context makes exactly one). */
FORGE_API unsigned long forge_gpu_allocation_count(void);

/* Memory monitor: poll it (once a frame, once a step) and it calls warn when the share of memory
   in use crosses the threshold upwards; it fires again only after usage has dropped below it. */
typedef struct forge_monitor {
    double threshold; /* share of total memory in use that warns; 0 = 0.85 */
    void (*warn)(void *user_data, const forge_memory_reading *reading, double used_fraction);
    void *user_data;
    int above;        /* state: 1 while usage is above the threshold */
} forge_monitor;

/* reading NULL = query the CPU backend's memory. *used_fraction (optional) receives the share in use. */
FORGE_API forge_result forge_monitor_poll(forge_monitor *monitor, const forge_memory_reading *reading,
                                          double *used_fraction, forge_error *error);

typedef struct forge_context forge_context;

/* Plans, checks the budget and only then allocates: one host arena for KV cache, scratch and
   logits, plus the thread pool. Any failure returns everything taken. The model must outlive it. */
FORGE_API forge_result forge_context_create(const forge_model *model, const forge_context_desc *desc,
                                            forge_context **out, forge_error *error);
FORGE_API void forge_context_destroy(forge_context *ctx);
FORGE_API const forge_plan *forge_context_plan(const forge_context *ctx);
/* Bytes the context really allocated for its arena: the plan's total less the weights on the CPU
   (they stay in the mapped file, or desc.cpu_copy_weights copies the products' matrices into an
   allocation of their own), the plan's total on the GPU (weights are uploaded into it). */
FORGE_API uint64_t forge_context_arena_bytes(const forge_context *ctx);
/* Appends tokens to the sequence (at positions pos .. pos+n-1), n_batch at a time. On the GPU a
   one-token step (decode) replays a recorded graph and returns once its work is queued; the calls
   that read its results (logits, argmax, the next eval) wait for it. The context records one graph
   for each band of positions (below 128, below 8192, up to n_ctx: the decode attention gives a block
   fewer query heads while the context is short) and each step replays its position's. A context
   of several sequences also records forge_eval_batch's step of rows that each keep their logits (a
   decode step of that many sequences) at 2 to 8, 12, 16, 24, 32, 48 and 64 rows and at the largest
   such step it takes (n_seq or n_batch rows, at most 64), one graph per row count and band (one
   band up to 8192 positions); such a step of another count (one row too) runs padded to the next
   (the extra rows repeat the first row's token, position and sequence, store nothing in its cache,
   and their logits are dropped), recorded or not, so that a replay and plain launches give the
   same bits. The driver's device memory for those graphs (about 1.6 MB each on an H100) is outside
   the plan. desc.gpu_no_graph gives plain launches instead of the graphs (sized by the same bands). On NVIDIA
   compute capability 9.0 and newer (kernels built for it), the decode kernels (and the kernels of a
   step of several sequences) are launched so that each may be placed on the device while the one
   before it finishes (programmatic dependent
   launch; each waits for the previous kernel's results before it reads any of them, a product
   loading its first weights, which no kernel writes, before it waits); desc.gpu_no_pdl turns that
   off. Where a product's lanes would walk its rows in more than one round of loads and its blocks'
   rows fit the multiprocessors' shared memory (Qwen2.5-1.5B's gate/up and down projections, not
   Llama-3-8B's), each block copies its rows into shared memory before it waits, so they stream
   while the kernel before finishes (on-chip memory, not device memory: the plan is unchanged);
   desc.gpu_no_stage turns that off.
   CPU precision: products whose weights are Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K or Q6_K round
   their input to 8 bits per element in groups of 32 (the GPU's rule below) and multiply on integer
   byte products, at every token count, each row of a step with the sums it gets alone; the fixtures'
   logits then stand 1.4% to 2.4% (relative L2) from a float64 computation, within their tolerances,
   and greedy paths part from llama.cpp's or the f32 products' only at near-ties. The products run in
   AVX2 / AVX-512 VNNI where the x86 CPU has them, in NEON (vdotq_s32 where the compiler targets the
   dot-product extension) where it targets AArch64, else in portable C. desc.cpu_no_q8
   keeps f32 activations (2 to 4 times slower on two cores: README, Performance).
   GPU decode precision: one-token products whose weights are Q4_0, Q8_0, Q4_K or Q6_K round their
   input vector to 8 bits per element in groups of 32 (one scale per group, as the reference engine
   does in its quantized products) and multiply on integer dot products; the logits then stand about
   2% (relative L2) from a float64 computation on the fixtures, within their tolerances, against
   0.03% with f32 activations, and a greedy path can part from the CPU backend's where two logits
   nearly tie. A step of several sequences (forge_eval_batch) of a few rows rounds its rows the
   same way and reads each weight once for all of them (the output head too): up to 16 rows of Q4_0
   and Q8_0, 12 of Q6_K (8 where the matrix units take it), 7 of Q4_K; Q4_K products of 8 to 64
   rows (to 32 where the matrix has fewer than 4096 rows) and Q6_K products of 9 to 32 rows (rows of
   a multiple of 2048 columns) read each weight once on f16 activations instead, on the matrix units
   (Q4_K's weights exact, Q6_K's rounded once past 2048: about 2e-4 from f32); the products of one
   input that the same kernel takes (q, k and v; gate and up) run as one launch, the norm before them
   writes their f16 input, and a step's rope, cache store, residual adds and norms are fused launches
   (the same bits as the separate ones). Larger steps and prompt batches keep f32 activations (f16
   operands on the matrix units; past 64 rows on NVIDIA sm_90 with kernels built as sm_90a code, on
   its warpgroup instructions, which desc.gpu_no_wgmma turns off). desc.gpu_no_q8 keeps
   decode and those steps on f32 activations (slower: see README, Performance). A
   product that adds into the residual stream also prepares the RMS norm after it where that is
   faster (the residual times the norm weight rounded as above, the norm's factor applied to the
   readers' sums: the same values up to float rounding); desc.gpu_norm_fusion -1 never does, 1 does
   wherever the shapes allow. */
FORGE_API forge_result forge_eval(forge_context *ctx, const int32_t *tokens, uint32_t n_tokens, forge_error *error);
/* Logits of the last forge_eval: n_rows rows of n_vocab floats (the last token's, or every token's
   of the final step when all_logits is set). Valid until the next eval. On the GPU the rows stay on
   the device until the first call after an eval copies them here (NULL, 0 rows, if the device
   fails); a decode step that needs only forge_context_argmax never copies the vocabulary. */
FORGE_API const float *forge_context_logits(const forge_context *ctx, uint32_t *n_rows);
/* Greedy choice from the last logits row of the last forge_eval: the index of the largest logit,
   the lowest index among equal values; NaN never wins. On the GPU it runs on the device and copies
   back 4 bytes. FORGE_ERR_ARGUMENT before any eval; FORGE_ERR_IO when the device fails (a fault
   of the eval itself may surface here: a GPU decode step returns once its work is queued). */
FORGE_API forge_result forge_context_argmax(forge_context *ctx, int32_t *out_token, forge_error *error);
/* The token `sampler` draws from the last logits row of the last forge_eval: the same token, the
   same draw from its generator, as forge_sampler_sample on forge_context_logits' last row (it
   does not record the token either: call forge_sampler_accept). On the GPU the vocabulary stays
   on the device when it can: for a greedy sampler, or one with 0 < top_k < 256, the device applies
   the repetition penalty (to a copy of the row; up to 1024 remembered tokens) and picks the
   top_k + 1 best logits (1 for greedy), sorted as the sampler sorts them; only those come back and
   the host finishes temperature, top-p, min-p and the draw on them. Other settings (no top_k, or a
   larger one), NaN or +inf logits, or logits already copied to the host take the host path. The
   sampler must have been created for the model's vocabulary. */
FORGE_API forge_result forge_context_sample(forge_context *ctx, forge_sampler *sampler, int32_t *out_token, forge_error *error);
FORGE_API uint32_t forge_context_pos(const forge_context *ctx);
FORGE_API void forge_context_reset(forge_context *ctx); /* forget the sequence */
/* The captures of the last chunk evaluated (n_tokens 0 before any); returns 0 when the context
   captures nothing. */
FORGE_API int forge_context_captures(const forge_context *ctx, forge_capture_chunk *out);

/* The one place forge reads the environment, and only when a program calls it (the CLI does):
   fills the fields of desc still at zero from these variables, so that values the program set win.
      FORGE_MEM_FRACTION=F   mem_fraction, F in (0, 1]
      FORGE_NO_GRAPH=1       gpu_no_graph        FORGE_NO_Q8=1     gpu_no_q8
      FORGE_NORM_FUSION=0|1  gpu_norm_fusion -1 or 1
      FORGE_NO_PDL=1         gpu_no_pdl          FORGE_NO_STAGE=1  gpu_no_stage
      FORGE_NO_WGMMA=1       gpu_no_wgmma
      FORGE_CPU_NO_Q8=1      cpu_no_q8
   A switch is on when its variable is set to anything but "" or "0". FORGE_ERR_ARGUMENT names a
   variable whose value cannot be read (FORGE_MEM_FRACTION=abc, =1.5); desc is then unchanged. */
FORGE_API forge_result forge_context_desc_apply_env(forge_context_desc *desc, forge_error *error);

/* Many sequences on one model. A context made with n_seq = S holds the weights once and S sequence
   slots, each with its own KV cache of n_ctx positions and its own position; the plan counts the
   cache S times (forge_plan.kv_bytes) and the solver says how many sequences fit
   (forge_verdict.max_seq_that_fits). forge_eval, forge_context_pos, forge_context_logits/argmax/sample
   work on sequence 0 as in a one-sequence context; forge_context_reset empties every sequence.

   One step of several sequences: the rows of a batch each name their sequence, any order, any mix
   (a new prompt's chunk beside one token of every other sequence: "continuous batching"). Each
   sequence's rows are appended at its next positions in the order given. Every weight is read once
   for the whole step. Afterwards each sequence that had rows in the step has one row of logits, its
   last token's (every row's with all_logits): forge_seq_logits, forge_seq_argmax, forge_seq_sample.
   The logits of a sequence equal those it gets evaluated alone (the CPU within float rounding; the
   GPU runs the batch through its prompt kernels, so a one-token step can differ from forge_eval's
   decode path within the fixtures' tolerance). */
typedef struct forge_batch {
    const int32_t *tokens;  /* n_tokens ids */
    const uint32_t *seq;    /* n_tokens sequence ids, each below n_seq; NULL: every row is sequence 0 */
    uint32_t n_tokens;      /* 1 .. n_batch */
} forge_batch;

/* Evaluates one step. Refused as a whole, nothing evaluated, with a message that names the numbers:
   no rows, more rows than n_batch, a sequence id at or above n_seq, a token outside the vocabulary,
   a sequence whose rows would pass n_ctx (that sequence is full: reset it; the others are untouched). */
FORGE_API forge_result forge_eval_batch(forge_context *ctx, const forge_batch *batch, forge_error *error);
FORGE_API uint32_t forge_context_n_seq(const forge_context *ctx);
/* Positions sequence seq holds (0 for an unknown id). */
FORGE_API uint32_t forge_seq_pos(const forge_context *ctx, uint32_t seq);
/* Empties one sequence (its position back to 0) while the others go on; nothing is freed or allocated.
   FORGE_ERR_ARGUMENT for an unknown id. */
FORGE_API forge_result forge_seq_reset(forge_context *ctx, uint32_t seq, forge_error *error);
/* The logits row of seq's last token in the last step (n_vocab floats, valid until the next eval), or
   NULL when seq had no row in it or the device fails. */
FORGE_API const float *forge_seq_logits(const forge_context *ctx, uint32_t seq);
/* forge_context_argmax and forge_context_sample on seq's row of the last step; FORGE_ERR_ARGUMENT
   when seq had no row in it. */
FORGE_API forge_result forge_seq_argmax(forge_context *ctx, uint32_t seq, int32_t *out_token, forge_error *error);
FORGE_API forge_result forge_seq_sample(forge_context *ctx, uint32_t seq, forge_sampler *sampler, int32_t *out_token,
                                        forge_error *error);

/* >>generate ----------------------------------------------------------------------------------- */

/* Chat formats built into forge. The format is recognized from tokenizer.chat_template by the
   markers it uses; the template text itself is never executed. */
typedef enum forge_chat_format {
    FORGE_CHAT_NONE = 0, /* no recognized template: prompts are used as they are */
    FORGE_CHAT_CHATML,   /* <|im_start|>role\n...<|im_end|>\n  (Qwen, SmolLM, many others) */
    FORGE_CHAT_LLAMA3,   /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
    FORGE_CHAT_GEMMA     /* <start_of_turn>user\n...<end_of_turn>\n, the system text joined to the first user turn */
} forge_chat_format;

typedef struct forge_chat_message {
    const char *role;    /* "system", "user" or "assistant" */
    const char *content; /* NUL-terminated */
} forge_chat_message;

FORGE_API forge_chat_format forge_chat_detect(const forge_gguf *gguf);
FORGE_API const char *forge_chat_format_name(forge_chat_format format); /* "chatml", "llama3", "gemma", "none" */
/* Renders messages, then the assistant's opening when add_assistant is 1. The BOS token is not
   written: the tokenizer adds it. Capacity rule of forge_tokenize: *len always receives the bytes
   needed, FORGE_ERR_LIMIT when out is too small. */
FORGE_API forge_result forge_chat_render(forge_chat_format format, const forge_chat_message *messages, size_t n_messages,
                                         int add_assistant, char *out, size_t capacity, size_t *len, forge_error *error);

/* The incremental step API: a generator owns the sampling and streaming state on top of a context
   and a tokenizer (both the caller's). Queue text with forge_generator_prompt, then call
   forge_generator_step once per frame: each call does a bounded amount of work (at most one batch of
   the queued prompt, or one new token), so an application stays responsive while the model talks. */
typedef struct forge_generator forge_generator;

typedef struct forge_step {
    int32_t token;        /* the token generated by this step, -1 when the step read prompt tokens */
    const char *text;     /* bytes ready to show (complete UTF-8 characters), valid until the next call */
    size_t text_len;
    uint32_t prompt_left; /* queued prompt tokens not yet read */
    int done;             /* 1 when an end-of-generation token came or the context is full */
} forge_step;

FORGE_API forge_result forge_generator_create(forge_context *ctx, const forge_tokenizer *tok,
                                              const forge_sampler_desc *sampler, forge_generator **out,
                                              forge_error *error);
FORGE_API void forge_generator_destroy(forge_generator *gen);
/* Tokenizes text (special tokens recognized when parse_special; BOS added when the context is empty
   and the tokenizer wants one) and queues it. Allocates the queue here, never in a step. */
FORGE_API forge_result forge_generator_prompt(forge_generator *gen, const char *text, size_t len, int parse_special,
                                              forge_error *error);
FORGE_API forge_result forge_generator_step(forge_generator *gen, forge_step *step, forge_error *error);
/* Evaluates a token that ended a turn (EOS/EOT) so the cache holds it before the next prompt. */
FORGE_API forge_result forge_generator_commit(forge_generator *gen, int32_t token, forge_error *error);
FORGE_API void forge_generator_reset(forge_generator *gen); /* empties the context, the queue and the sampler's history */

/* ---- the short path: a model, its tokenizer, a context and a generator behind one object ----

   forge_llm opens a GGUF file, checks the memory plan against the budget (nothing is allocated when
   it does not fit: FORGE_ERR_BUDGET says what would), and keeps one conversation in its context.
   Each call streams the reply's text to a callback, piece by piece, as the tokens come:

      static void show(void *user_data, const char *text, size_t len) {
          (void)user_data;
          fwrite(text, 1, len, stdout);
          fflush(stdout);
      }
      ...
      forge_llm *llm;
      forge_error error;
      if (forge_llm_open("model.gguf", NULL, &llm, &error) != FORGE_OK ||
          forge_llm_chat(llm, "Why is the sky blue?", show, NULL, &error) != FORGE_OK)
          fprintf(stderr, "%s\n", error.message);
      forge_llm_close(llm);

   Everything it uses stays reachable (forge_llm_model, _tokenizer, _context, _generator), so a
   program can start here and step down to the layers where it needs to. One forge_llm serves one
   thread at a time; two of them are independent. */
typedef struct forge_llm forge_llm;

/* Receives each piece of a reply as it is generated: len bytes of complete UTF-8 characters, not
   NUL-terminated, valid during the call. */
typedef void (*forge_text_fn)(void *user_data, const char *text, size_t len);

/* Zero means default everywhere; a NULL desc is all defaults. Clear it with memset (or `= {}` in
   C++): `= {0}` is C only, C++ compilers warn about the members it leaves out. */
typedef struct forge_llm_desc {
    const char *system_prompt;     /* chat: the system turn that opens each conversation; NULL: none (copied) */
    uint32_t max_tokens;           /* most tokens one reply generates; 0: until the model ends its turn or
                                      the context is full */
    const volatile int *cancel;    /* when it points at a non-zero int, a reply stops before its next step
                                      (a prompt batch or a token); the program sets it, forge only reads it */
    forge_sampler_desc sampler;    /* temperature 0 (the default): greedy, the most likely token each step;
                                      temperature > 0: sampled (top_k, top_p, min_p, repeat_penalty, seed) */
    forge_context_desc context;    /* backend, n_ctx, kv_type, budget, threads, allocator, ... (>>context) */
} forge_llm_desc;

/* Why a reply ended. */
typedef enum forge_stop_reason {
    FORGE_STOP_NONE = 0,        /* no reply yet, or the last one failed */
    FORGE_STOP_END_OF_TURN,     /* the model produced an end-of-generation token */
    FORGE_STOP_MAX_TOKENS,      /* desc.max_tokens were generated */
    FORGE_STOP_CONTEXT_FULL,    /* the context has no position left: forge_llm_reset starts over */
    FORGE_STOP_CANCELLED        /* *desc.cancel was non-zero */
} forge_stop_reason;

typedef struct forge_reply {
    uint32_t prompt_tokens;     /* tokens of the prompt read by this call */
    uint32_t reply_tokens;      /* tokens generated */
    forge_stop_reason stop;
} forge_reply;

/* Opens the model (read-only mapping), builds its tokenizer, plans and checks the budget, then
   allocates the context. Any failure frees everything taken and leaves *out NULL: FORGE_ERR_ARGUMENT
   for a NULL path or out, FORGE_ERR_IO for a file that cannot be read, FORGE_ERR_BUDGET when the
   plan does not fit (the message names every term and what would fit), the reader's codes for a
   malformed file. */
#ifndef FORGE_NO_STDIO
FORGE_API forge_result forge_llm_open(const char *path, const forge_llm_desc *desc, forge_llm **out, forge_error *error);
#endif
/* The same over a GGUF image in memory (which must outlive the forge_llm). */
FORGE_API forge_result forge_llm_open_memory(const void *bytes, size_t size, const forge_llm_desc *desc, forge_llm **out,
                                             forge_error *error);
FORGE_API void forge_llm_close(forge_llm *llm);
/* One turn of the conversation: the message as the user's turn in the model's chat format (the
   system prompt first on a conversation's first turn; special-token text in it is read as those
   tokens, as in forge_generator_prompt with parse_special), then the assistant's reply, streamed to
   on_text (may be NULL). The next call continues the conversation; a reply that stopped before the
   end of its turn is closed with the end-of-turn token first. A model with no chat format forge
   knows gets the text as it is. FORGE_ERR_LIMIT when the turn does not fit the context's positions
   left (forge_llm_reset starts over). */
FORGE_API forge_result forge_llm_chat(forge_llm *llm, const char *message, forge_text_fn on_text, void *user_data,
                                      forge_error *error);
/* Plain continuation, no chat format: the text is appended to the sequence as it is (an empty text
   continues a reply that stopped at max_tokens or was cancelled), then tokens are generated. */
FORGE_API forge_result forge_llm_generate(forge_llm *llm, const char *text, forge_text_fn on_text, void *user_data,
                                          forge_error *error);
/* What the last forge_llm_chat or forge_llm_generate did (counts and why it stopped). */
FORGE_API const forge_reply *forge_llm_last_reply(const forge_llm *llm);
FORGE_API void forge_llm_reset(forge_llm *llm); /* forgets the conversation: the next chat turn is a first one */
FORGE_API forge_model *forge_llm_model(const forge_llm *llm);
FORGE_API forge_tokenizer *forge_llm_tokenizer(const forge_llm *llm);
FORGE_API forge_context *forge_llm_context(const forge_llm *llm);
FORGE_API forge_generator *forge_llm_generator(const forge_llm *llm);
FORGE_API forge_chat_format forge_llm_chat_format(const forge_llm *llm);

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

/* An allocator is both callbacks or neither: memory from one must go back to the other. */
static forge_result forge__allocator_check(const forge_allocator *a, const char *what, forge_error *error) {
    if (a && (a->alloc == NULL) != (a->free == NULL))
        return forge__fail(error, FORGE_ERR_ARGUMENT, "%s has %s but no %s: give both callbacks or neither", what,
                           a->alloc ? "alloc" : "free", a->alloc ? "free" : "alloc");
    return FORGE_OK;
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

static float forge__half_bits(uint16_t h); /* >>impl-cpu: forge_f16_to_f32 without branches */

/* Branch-free: f16 KV cache rows go through here in attention (gemma-3-270m pp64 on one thread: about 4% less time). */
static void forge__dq_f16(const void *src, float *dst, uint64_t n) {
    const uint8_t *p = (const uint8_t *)src;
    uint64_t i;
    for (i = 0; i < n; i++) dst[i] = forge__half_bits(forge__le16(p + 2 * i));
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
        /* as llama.cpp, no empty key; and no NUL inside one, which C-string lookups and printing would cut */
        if (key.len == 0) return forge__fail(e, FORGE_ERR_LIMIT, "metadata key %llu is empty", (forge__ull)i);
        if (memchr(key.ptr, 0, (size_t)key.len))
            return forge__fail(e, FORGE_ERR_LIMIT, "metadata key %llu ('%s...') contains a NUL byte", (forge__ull)i, key.ptr);
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
        if (memchr(name.ptr, 0, (size_t)name.len))
            return forge__fail(e, FORGE_ERR_LIMIT, "tensor %llu's name ('%s...') contains a NUL byte", (forge__ull)i, name.ptr);
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
    if ((r = forge__allocator_check(allocator, "forge_gguf_parse: the allocator", error))) return r;
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
    if (forge__allocator_check(allocator, "forge_file_open: the allocator", error)) return FORGE_ERR_ARGUMENT;
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
    /* every activation row must stay below FORGE__MAX_DIM elements, so sizes derived from it fit easily */
    for (il = 0; il < c->n_layer; il++) {
        uint64_t q = (uint64_t)c->layer_n_head[il] * FORGE__MAX(c->head_dim, c->head_dim_v);
        if (q > FORGE__MAX_DIM)
            return forge__fail(error, FORGE_ERR_CONFIG, "layer %u: %u heads of %u dimensions make rows of %llu, above %u", il,
                               c->layer_n_head[il], FORGE__MAX(c->head_dim, c->head_dim_v), (forge__ull)q, FORGE__MAX_DIM);
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

    /* sliding windows: gemma2 alternates (even layers local), gemma3 has one global layer per pattern,
       a llama file that declares a window (Mistral style) applies it on every layer */
    c->rope_freq_base_swa = c->rope_freq_base;
    c->rope_freq_scale_swa = c->rope_freq_scale;
    c->embd_scale = 1.0f;
    if (c->arch == FORGE_ARCH_LLAMA) {
        if ((r = forge__arch_u32(&k, "attention.sliding_window", 0, 0, FORGE__MAX_CTX, &c->n_swa))) return r;
        c->swa_pattern = c->n_swa > 0 ? 1 : 0;
        for (il = 0; il < c->n_layer; il++) c->layer_is_swa[il] = (uint8_t)(c->n_swa > 0);
    }
    if (c->arch == FORGE_ARCH_GEMMA2) n_swa_default = 4096;
    if (c->arch == FORGE_ARCH_GEMMA3) n_swa_default = 4096;
    if (c->arch == FORGE_ARCH_GEMMA2 || c->arch == FORGE_ARCH_GEMMA3) {
        if ((r = forge__arch_u32(&k, "attention.sliding_window", 0, n_swa_default, FORGE__MAX_CTX, &c->n_swa))) return r;
        c->swa_pattern = 2;
        if (c->arch == FORGE_ARCH_GEMMA3) {
            if ((r = forge__arch_u32(&k, "attention.sliding_window_pattern", 0, 6, FORGE_MAX_LAYERS, &c->swa_pattern)))
                return r;
            if ((r = forge__arch_f32(&k, "rope.freq_base_swa", 0, 10000.0f, &c->rope_freq_base_swa))) return r;
            c->rope_freq_scale_swa = 1.0f; /* local layers are never rope-scaled */
        }
        if (c->n_swa == 0) c->swa_pattern = 0;
        /* a pattern of 0 with a window means every layer is local (llama.cpp's rule), not none */
        for (il = 0; il < c->n_layer; il++)
            c->layer_is_swa[il] = (uint8_t)(c->n_swa > 0 && (c->swa_pattern == 0 || il % c->swa_pattern < c->swa_pattern - 1));
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
    if (!(c->rope_freq_base_swa > 0.0f))
        return forge__fail(error, FORGE_ERR_CONFIG, "%s.rope.freq_base_swa is %g; it must be positive", k.arch,
                           (double)c->rope_freq_base_swa);
    /* the 27B Gemma 2 (46 layers) and Gemma 3 (62 layers) scale queries by n_embd / n_head instead of the
       head size (query_pre_attn_scalar in their configurations) */
    c->attn_scale = (float)(1.0 / sqrt((double)c->head_dim));
    if ((c->arch == FORGE_ARCH_GEMMA2 && c->n_layer == 46) || (c->arch == FORGE_ARCH_GEMMA3 && c->n_layer == 62))
        c->attn_scale = (float)(1.0 / sqrt((double)c->n_embd / c->layer_n_head[0]));

    if ((r = forge__derive_vocab(&k, c))) return r;
    if ((r = forge__derive_tensors(&k, rules, c))) return r;
    forge__ok(error);
    return FORGE_OK;
}

/* >>impl-cpu */

/* CPU backend: matrix products straight from quantized blocks, and a fixed pool of worker threads.
   Activations are f32, rounded to 8 bits per 32 only inside the products of the types that have
   integer dot products (below: products on 8-bit activations). Every output is summed in one fixed
   order whatever the thread count and whichever task computes it, so results are bitwise identical
   for 1 or N threads. */

#if defined(__cplusplus) || defined(_MSC_VER)
#define FORGE__RESTRICT __restrict
#else
#define FORGE__RESTRICT restrict
#endif

#if defined(__GNUC__) || defined(__clang__)
#define FORGE__MAYBE_UNUSED __attribute__((unused)) /* backend entry points, called by the forward pass */
#else
#define FORGE__MAYBE_UNUSED
#endif

#if defined(_WIN32)
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>
#elif defined(__unix__) || defined(__APPLE__)
#include <unistd.h>
#if defined(__linux__) && defined(_GNU_SOURCE)
#include <sched.h> /* sched_getaffinity is only declared when the includer asked for _GNU_SOURCE */
#endif
#endif

/* Threads need a platform thread API and atomics (GNU builtins or MSVC interlocked functions). */
#if !defined(FORGE_NO_THREADS) && (defined(__GNUC__) || defined(__clang__) || defined(_MSC_VER))
#if defined(_WIN32)
#define FORGE__THREADS_WIN32 1
#elif defined(__unix__) || defined(__APPLE__)
#define FORGE__THREADS_POSIX 1
#include <pthread.h>
#endif
#endif

FORGE_API uint32_t forge_cpu_count(void) {
#if defined(_WIN32)
    SYSTEM_INFO info;
    GetSystemInfo(&info);
    return info.dwNumberOfProcessors > 0 ? (uint32_t)info.dwNumberOfProcessors : 1u;
#elif defined(__unix__) || defined(__APPLE__)
    long online;
#if defined(__linux__) && defined(_GNU_SOURCE) && defined(CPU_COUNT)
    cpu_set_t allowed; /* a container or taskset may allow fewer cores than are online */
    if (sched_getaffinity(0, sizeof allowed, &allowed) == 0 && CPU_COUNT(&allowed) > 0)
        return (uint32_t)CPU_COUNT(&allowed);
#endif
    online = sysconf(_SC_NPROCESSORS_ONLN);
    return online > 0 ? (uint32_t)FORGE__MIN(online, 1L << 20) : 1u;
#else
    return 1u;
#endif
}

FORGE_API uint32_t forge_cpu_default_threads(void) { return (forge_cpu_count() + 1) / 2; }

/* ---- thread pool ---- */

#if defined(FORGE__THREADS_WIN32) || defined(FORGE__THREADS_POSIX)
#define FORGE__THREADS 1

#if defined(__GNUC__) || defined(__clang__)
typedef uint32_t forge__atomic;
static uint32_t forge__atomic_load(forge__atomic *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static void forge__atomic_store(forge__atomic *p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
static uint32_t forge__atomic_add(forge__atomic *p, uint32_t v) { return __atomic_fetch_add(p, v, __ATOMIC_ACQ_REL); }
#if defined(__x86_64__) || defined(__i386__)
#define FORGE__CPU_RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__) || defined(__arm__)
#define FORGE__CPU_RELAX() __asm__ __volatile__("yield")
#else
#define FORGE__CPU_RELAX() ((void)0)
#endif
#else /* MSVC */
typedef volatile LONG forge__atomic;
static uint32_t forge__atomic_load(forge__atomic *p) { return (uint32_t)InterlockedCompareExchange(p, 0, 0); }
static void forge__atomic_store(forge__atomic *p, uint32_t v) { InterlockedExchange(p, (LONG)v); }
static uint32_t forge__atomic_add(forge__atomic *p, uint32_t v) { return (uint32_t)InterlockedExchangeAdd(p, (LONG)v); }
#define FORGE__CPU_RELAX() YieldProcessor()
#endif

#ifdef FORGE__THREADS_WIN32
typedef CRITICAL_SECTION forge__mutex;
typedef CONDITION_VARIABLE forge__cond;
typedef HANDLE forge__thread;
static int forge__mutex_init(forge__mutex *m) { InitializeCriticalSection(m); return 1; }
static void forge__mutex_destroy(forge__mutex *m) { DeleteCriticalSection(m); }
static void forge__mutex_lock(forge__mutex *m) { EnterCriticalSection(m); }
static void forge__mutex_unlock(forge__mutex *m) { LeaveCriticalSection(m); }
static int forge__cond_init(forge__cond *c) { InitializeConditionVariable(c); return 1; }
static void forge__cond_destroy(forge__cond *c) { (void)c; }
static void forge__cond_wait(forge__cond *c, forge__mutex *m) { SleepConditionVariableCS(c, m, INFINITE); }
static void forge__cond_signal(forge__cond *c) { WakeConditionVariable(c); }
static void forge__cond_broadcast(forge__cond *c) { WakeAllConditionVariable(c); }
#else
typedef pthread_mutex_t forge__mutex;
typedef pthread_cond_t forge__cond;
typedef pthread_t forge__thread;
static int forge__mutex_init(forge__mutex *m) { return pthread_mutex_init(m, NULL) == 0; }
static void forge__mutex_destroy(forge__mutex *m) { pthread_mutex_destroy(m); }
static void forge__mutex_lock(forge__mutex *m) { pthread_mutex_lock(m); }
static void forge__mutex_unlock(forge__mutex *m) { pthread_mutex_unlock(m); }
static int forge__cond_init(forge__cond *c) { return pthread_cond_init(c, NULL) == 0; }
static void forge__cond_destroy(forge__cond *c) { pthread_cond_destroy(c); }
static void forge__cond_wait(forge__cond *c, forge__mutex *m) { pthread_cond_wait(c, m); }
static void forge__cond_signal(forge__cond *c) { pthread_cond_signal(c); }
static void forge__cond_broadcast(forge__cond *c) { pthread_cond_broadcast(c); }
#endif

/* How many times an idle participant polls (with a pause) before it sleeps on a condition variable:
   enough to bridge the gap between two matrix products of one forward pass (tens of microseconds),
   too few to burn a core while the program waits for input. A pool with more threads than cores
   never polls: a spinning thread there only takes time from one with work. */
#ifndef FORGE_POOL_SPINS
#define FORGE_POOL_SPINS 4000
#endif
#endif /* FORGE__THREADS_WIN32 || FORGE__THREADS_POSIX */

typedef struct forge__pool forge__pool;
typedef void (*forge__pool_fn)(void *ctx, uint32_t task, uint32_t n_tasks, uint32_t thread);

#ifdef FORGE__THREADS
typedef struct forge__pool_worker {
    forge__pool *pool;
    uint32_t index; /* 1 .. n_threads-1; the caller of forge__pool_run is 0 */
    forge__thread thread;
} forge__pool_worker;
#endif

struct forge__pool {
    forge_allocator allocator;
    uint32_t n_threads; /* participants, the calling thread included */
    int q8_level;       /* forge__q8_simd_level(2), asked once: CPUID may trap to a hypervisor at every product */
#ifdef FORGE__THREADS
    uint32_t spins; /* FORGE_POOL_SPINS, or 0 when there are more threads than cores */
    forge__pool_worker *workers; /* n_threads - 1 */
    forge__mutex mutex;
    forge__cond wake; /* a new generation (a job or the stop order) is out */
    forge__cond done; /* the last worker finished its share */
    uint32_t sleepers; /* workers waiting on wake; under mutex */
    forge__atomic generation, next_task, pending, stop;
    forge__pool_fn fn; /* the job; written before generation is bumped, read after it is seen */
    void *ctx;
    uint32_t n_tasks;
#endif
};

#ifdef FORGE__THREADS
static void forge__pool_share(forge__pool *p, uint32_t thread) {
    uint32_t task, n_tasks = p->n_tasks;
    while ((task = forge__atomic_add(&p->next_task, 1)) < n_tasks) p->fn(p->ctx, task, n_tasks, thread);
}

static void forge__pool_worker_loop(forge__pool_worker *self) {
    forge__pool *p = self->pool;
    uint32_t seen = 0, generation = 0;
    for (;;) {
        uint32_t spins;
        for (spins = 0; spins < p->spins; spins++) {
            if ((generation = forge__atomic_load(&p->generation)) != seen) break;
            FORGE__CPU_RELAX();
        }
        if (generation == seen) {
            forge__mutex_lock(&p->mutex);
            p->sleepers++;
            while ((generation = forge__atomic_load(&p->generation)) == seen) forge__cond_wait(&p->wake, &p->mutex);
            p->sleepers--;
            forge__mutex_unlock(&p->mutex);
        }
        seen = generation;
        if (forge__atomic_load(&p->stop)) return;
        forge__pool_share(p, self->index);
        if (forge__atomic_add(&p->pending, (uint32_t)-1) == 1) { /* the last one tells the caller */
            forge__mutex_lock(&p->mutex);
            forge__cond_signal(&p->done);
            forge__mutex_unlock(&p->mutex);
        }
    }
}

#ifdef FORGE__THREADS_WIN32
static DWORD WINAPI forge__pool_thread_main(LPVOID arg) {
    forge__pool_worker_loop((forge__pool_worker *)arg);
    return 0;
}
#else
static void *forge__pool_thread_main(void *arg) {
    forge__pool_worker_loop((forge__pool_worker *)arg);
    return NULL;
}
#endif

/* Stops and joins the first n_started workers. */
static void forge__pool_stop(forge__pool *p, uint32_t n_started) {
    uint32_t i;
    forge__mutex_lock(&p->mutex);
    forge__atomic_store(&p->stop, 1);
    forge__atomic_store(&p->generation, forge__atomic_load(&p->generation) + 1);
    forge__cond_broadcast(&p->wake);
    forge__mutex_unlock(&p->mutex);
    for (i = 0; i < n_started; i++) {
#ifdef FORGE__THREADS_WIN32
        WaitForSingleObject(p->workers[i].thread, INFINITE);
        CloseHandle(p->workers[i].thread);
#else
        pthread_join(p->workers[i].thread, NULL);
#endif
    }
}
#endif /* FORGE__THREADS */

/* n_threads 0 = forge_cpu_default_threads(); 1 = run on the caller, no threads created.
   With FORGE_NO_THREADS, or without a thread API, every pool has one participant. */
static int forge__q8_simd_level(int simd);

static FORGE__MAYBE_UNUSED forge_result forge__pool_create(uint32_t n_threads, const forge_allocator *a,
                                                           forge__pool **out, forge_error *e) {
    forge__pool *p;
    size_t bytes = sizeof *p;
    if (!out) return forge__fail(e, FORGE_ERR_ARGUMENT, "forge__pool_create: out is NULL");
    *out = NULL;
    if (n_threads == 0) n_threads = forge_cpu_default_threads();
    if (n_threads > FORGE_MAX_THREADS) n_threads = FORGE_MAX_THREADS;
#ifdef FORGE__THREADS
    bytes += (size_t)(n_threads - 1) * sizeof(forge__pool_worker);
#else
    n_threads = 1;
#endif
    p = (forge__pool *)forge__alloc(a, bytes);
    if (!p) return forge__fail(e, FORGE_ERR_HOST_MEMORY, "cannot allocate a thread pool of %u threads (%llu bytes)",
                               n_threads, (forge__ull)bytes);
    memset(p, 0, bytes);
    if (a) p->allocator = *a;
    p->n_threads = n_threads;
    p->q8_level = forge__q8_simd_level(2);
#ifdef FORGE__THREADS
    if (n_threads > 1) {
        uint32_t i;
        p->workers = (forge__pool_worker *)(p + 1);
        p->spins = n_threads <= forge_cpu_count() ? FORGE_POOL_SPINS : 0;
        if (!forge__mutex_init(&p->mutex)) {
            forge__free(a, p);
            return forge__fail(e, FORGE_ERR_HOST_MEMORY, "cannot create the thread pool's mutex");
        }
        if (!forge__cond_init(&p->wake)) {
            forge__mutex_destroy(&p->mutex);
            forge__free(a, p);
            return forge__fail(e, FORGE_ERR_HOST_MEMORY, "cannot create the thread pool's condition variable");
        }
        if (!forge__cond_init(&p->done)) {
            forge__cond_destroy(&p->wake);
            forge__mutex_destroy(&p->mutex);
            forge__free(a, p);
            return forge__fail(e, FORGE_ERR_HOST_MEMORY, "cannot create the thread pool's condition variable");
        }
        for (i = 0; i + 1 < n_threads; i++) {
            forge__pool_worker *w = &p->workers[i];
            int code;
            w->pool = p;
            w->index = i + 1;
#ifdef FORGE__THREADS_WIN32
            w->thread = CreateThread(NULL, 0, forge__pool_thread_main, w, 0, NULL);
            code = w->thread ? 0 : (int)GetLastError();
#else
            code = pthread_create(&w->thread, NULL, forge__pool_thread_main, w);
#endif
            if (code != 0) { /* roll back: the ones started are joined, nothing is left behind */
                forge__pool_stop(p, i);
                forge__cond_destroy(&p->done);
                forge__cond_destroy(&p->wake);
                forge__mutex_destroy(&p->mutex);
                forge__free(a, p);
                return forge__fail(e, FORGE_ERR_HOST_MEMORY, "cannot start worker thread %u of %u (error %d)", i + 1,
                                   n_threads - 1, code);
            }
        }
    }
#endif
    *out = p;
    forge__ok(e);
    return FORGE_OK;
}

static FORGE__MAYBE_UNUSED void forge__pool_destroy(forge__pool *p) {
    forge_allocator a;
    if (!p) return;
#ifdef FORGE__THREADS
    if (p->n_threads > 1) {
        forge__pool_stop(p, p->n_threads - 1);
        forge__cond_destroy(&p->done);
        forge__cond_destroy(&p->wake);
        forge__mutex_destroy(&p->mutex);
    }
#endif
    a = p->allocator;
    forge__free(&a, p);
}

static FORGE__MAYBE_UNUSED uint32_t forge__pool_size(const forge__pool *p) { return p ? p->n_threads : 1u; }

/* Runs fn(ctx, task, n_tasks, thread) for every task in [0, n_tasks) on the pool's workers and the
   caller (thread 0); tasks are handed out in order, one at a time, to whoever is free. Returns when
   all are done. A NULL pool runs everything on the caller. Not reentrant: one run at a time. */
static FORGE__MAYBE_UNUSED void forge__pool_run(forge__pool *p, forge__pool_fn fn, void *ctx, uint32_t n_tasks) {
    uint32_t task;
    if (n_tasks == 0 || !fn) return;
#ifdef FORGE__THREADS
    if (p && p->n_threads > 1 && n_tasks > 1) {
        uint32_t spins;
        forge__mutex_lock(&p->mutex);
        p->fn = fn;
        p->ctx = ctx;
        p->n_tasks = n_tasks;
        forge__atomic_store(&p->next_task, 0);
        forge__atomic_store(&p->pending, p->n_threads - 1);
        forge__atomic_store(&p->generation, forge__atomic_load(&p->generation) + 1);
        if (p->sleepers) forge__cond_broadcast(&p->wake);
        forge__mutex_unlock(&p->mutex);
        forge__pool_share(p, 0);
        /* every worker acknowledges the generation, so none can still be reading this job when the next starts */
        for (spins = 0; spins < p->spins && forge__atomic_load(&p->pending) != 0; spins++) FORGE__CPU_RELAX();
        if (forge__atomic_load(&p->pending) != 0) {
            forge__mutex_lock(&p->mutex);
            while (forge__atomic_load(&p->pending) != 0) forge__cond_wait(&p->done, &p->mutex);
            forge__mutex_unlock(&p->mutex);
        }
        return;
    }
#endif
    (void)p;
    for (task = 0; task < n_tasks; task++) fn(ctx, task, n_tasks, 0);
}

/* ---- kernels ---- */

#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__)
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define FORGE__HOST_LE 1
#endif
#elif defined(_WIN32) || defined(__x86_64__) || defined(__i386__) || defined(_M_X64) || defined(_M_IX86) || \
    defined(_M_ARM64)
#define FORGE__HOST_LE 1
#endif

/* Loads that the vectorizer sees as plain loads on little-endian hosts. */
#ifdef FORGE__HOST_LE
static uint16_t forge__ld16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}
static float forge__ldf32(const uint8_t *p) {
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}
#else
#define forge__ld16 forge__le16
#define forge__ldf32 forge__lef32
#endif

/* forge_f16_to_f32 without branches or loops, so loops over halves vectorize; equal for every input
   (subnormals are scaled exactly: mantissa * 2^-24). */
static float forge__half_bits(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
    float subnormal = (float)(int32_t)mantissa * 5.9604644775390625e-08f, f; /* signed: SSE2 has no unsigned convert */
    uint32_t sub_bits, bits;
    memcpy(&sub_bits, &subnormal, sizeof sub_bits);
    bits = exponent == 31 ? 0x7f800000u | (mantissa << 13) : ((exponent + 112u) << 23) | (mantissa << 13);
    bits = sign | (exponent == 0 ? sub_bits : bits);
    memcpy(&f, &bits, sizeof f);
    return f;
}
static float forge__half_at(const uint8_t *p) { return forge__half_bits(forge__ld16(p)); }

static float forge__bf16_bits(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Where it was measured to pay, a fixed-count lane loop is unrolled completely so that its
   accumulators live in vector registers instead of being stored and reloaded on every step. */
#if !defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 8 /* clang keeps them in registers unasked */
#define FORGE__UNROLL _Pragma("GCC unroll 32")
#else
#define FORGE__UNROLL
#endif

/* Lane accumulators: each kernel keeps FORGE__LANES (or 2x) independent partial sums and adds them
   up in one fixed order at the end; that is what lets the compiler vectorize without reassociating. */
#define FORGE__LANES 16

static float forge__sum_lanes(const float *acc, uint32_t n) { /* n a power of two; pairwise, fixed order */
    float tmp[2 * FORGE__LANES];
    uint32_t i, half;
    for (i = 0; i < n; i++) tmp[i] = acc[i];
    for (half = n / 2; half > 0; half /= 2)
        for (i = 0; i < half; i++) tmp[i] += tmp[i + half];
    return tmp[0];
}

/* Dot products of one row of n_cols elements (a whole number of blocks) with x. */
typedef float (*forge__vdot_fn)(const uint8_t *FORGE__RESTRICT w, const float *FORGE__RESTRICT x, uint32_t n_cols);

static float forge__vdot_f32(const uint8_t *FORGE__RESTRICT w, const float *FORGE__RESTRICT x, uint32_t n_cols) {
    float acc[FORGE__LANES] = {0}, tail = 0;
    uint32_t c = 0, j;
    for (; c + FORGE__LANES <= n_cols; c += FORGE__LANES)
        for (j = 0; j < FORGE__LANES; j++) acc[j] += forge__ldf32(w + 4 * (c + j)) * x[c + j];
    for (; c < n_cols; c++) tail += forge__ldf32(w + 4 * c) * x[c];
    return forge__sum_lanes(acc, FORGE__LANES) + tail;
}

static float forge__vdot_f16(const uint8_t *FORGE__RESTRICT w, const float *FORGE__RESTRICT x, uint32_t n_cols) {
    float acc[FORGE__LANES] = {0}, tail = 0;
    uint32_t c = 0, j;
    for (; c + FORGE__LANES <= n_cols; c += FORGE__LANES) {
        uint16_t h[FORGE__LANES]; /* a block copy, then plain loads the vectorizer understands */
#ifdef FORGE__HOST_LE
        memcpy(h, w + 2 * c, sizeof h);
#else
        for (j = 0; j < FORGE__LANES; j++) h[j] = forge__le16(w + 2 * (c + j));
#endif
        for (j = 0; j < FORGE__LANES; j++) acc[j] += forge__half_bits(h[j]) * x[c + j];
    }
    for (; c < n_cols; c++) tail += forge__half_at(w + 2 * c) * x[c];
    return forge__sum_lanes(acc, FORGE__LANES) + tail;
}

static float forge__vdot_bf16(const uint8_t *FORGE__RESTRICT w, const float *FORGE__RESTRICT x, uint32_t n_cols) {
    float acc[FORGE__LANES] = {0}, tail = 0;
    uint32_t c = 0, j;
    for (; c + FORGE__LANES <= n_cols; c += FORGE__LANES)
        for (j = 0; j < FORGE__LANES; j++) acc[j] += forge__bf16_bits(forge__ld16(w + 2 * (c + j))) * x[c + j];
    for (; c < n_cols; c++) tail += forge__bf16_bits(forge__ld16(w + 2 * c)) * x[c];
    return forge__sum_lanes(acc, FORGE__LANES) + tail;
}

/* The 32-element block types: each weight is dequantized in registers exactly as forge__dq_* does
   (same operations, same rounding), multiplied by x and added to lane j (low nibbles) or 16 + j. */
static float forge__vdot_q4_0(const uint8_t *FORGE__RESTRICT w, const float *FORGE__RESTRICT x, uint32_t n_cols) {
    float acc[32] = {0};
    uint32_t b, j;
    for (b = 0; b < n_cols / 32; b++, w += 18, x += 32) {
        const float d = forge__half_at(w);
        const uint8_t *q = w + 2;
        for (j = 0; j < 16; j++) {
            acc[j] += (float)((q[j] & 0xf) - 8) * d * x[j];
            acc[j + 16] += (float)((q[j] >> 4) - 8) * d * x[j + 16];
        }
    }
    return forge__sum_lanes(acc, 32);
}

static float forge__vdot_q4_1(const uint8_t *FORGE__RESTRICT w, const float *FORGE__RESTRICT x, uint32_t n_cols) {
    float acc[32] = {0};
    uint32_t b, j;
    for (b = 0; b < n_cols / 32; b++, w += 20, x += 32) {
        const float d = forge__half_at(w), m = forge__half_at(w + 2);
        const uint8_t *q = w + 4;
        for (j = 0; j < 16; j++) {
            acc[j] += ((float)(q[j] & 0xf) * d + m) * x[j];
            acc[j + 16] += ((float)(q[j] >> 4) * d + m) * x[j + 16];
        }
    }
    return forge__sum_lanes(acc, 32);
}

static float forge__vdot_q5_0(const uint8_t *FORGE__RESTRICT w, const float *FORGE__RESTRICT x, uint32_t n_cols) {
    float acc[32] = {0};
    uint32_t b, j;
    for (b = 0; b < n_cols / 32; b++, w += 22, x += 32) {
        const float d = forge__half_at(w);
        const uint32_t high = forge__le32(w + 2);
        const uint8_t *q = w + 6;
        for (j = 0; j < 16; j++) {
            int lo = (q[j] & 0xf) | (int)(((high >> j) & 1u) << 4);
            int hi = (q[j] >> 4) | (int)(((high >> (j + 16)) & 1u) << 4);
            acc[j] += (float)(lo - 16) * d * x[j];
            acc[j + 16] += (float)(hi - 16) * d * x[j + 16];
        }
    }
    return forge__sum_lanes(acc, 32);
}

static float forge__vdot_q5_1(const uint8_t *FORGE__RESTRICT w, const float *FORGE__RESTRICT x, uint32_t n_cols) {
    float acc[32] = {0};
    uint32_t b, j;
    for (b = 0; b < n_cols / 32; b++, w += 24, x += 32) {
        const float d = forge__half_at(w), m = forge__half_at(w + 2);
        const uint32_t high = forge__le32(w + 4);
        const uint8_t *q = w + 8;
        for (j = 0; j < 16; j++) {
            int lo = (q[j] & 0xf) | (int)(((high >> j) & 1u) << 4);
            int hi = (q[j] >> 4) | (int)(((high >> (j + 16)) & 1u) << 4);
            acc[j] += ((float)lo * d + m) * x[j];
            acc[j + 16] += ((float)hi * d + m) * x[j + 16];
        }
    }
    return forge__sum_lanes(acc, 32);
}

static float forge__vdot_q8_0(const uint8_t *FORGE__RESTRICT w, const float *FORGE__RESTRICT x, uint32_t n_cols) {
    float acc[32] = {0};
    uint32_t b, j;
    for (b = 0; b < n_cols / 32; b++, w += 34, x += 32) {
        const float d = forge__half_at(w);
        const int8_t *q = (const int8_t *)(w + 2);
        FORGE__UNROLL
        for (j = 0; j < 32; j++) acc[j] += (float)q[j] * d * x[j];
    }
    return forge__sum_lanes(acc, 32);
}

/* K-quants: 256-element super-blocks; lanes follow the 32 bytes of qs that each step reads. */
static float forge__vdot_q4_k(const uint8_t *FORGE__RESTRICT w, const float *FORGE__RESTRICT x, uint32_t n_cols) {
    float acc[32] = {0};
    uint32_t b, l;
    for (b = 0; b < n_cols / 256; b++, w += 144) {
        const float d = forge__half_at(w), dmin = forge__half_at(w + 2);
        const uint8_t *packed = w + 4, *qs = w + 16;
        int chunk;
        for (chunk = 0; chunk < 4; chunk++, qs += 32, x += 64) {
            int sc, mn;
            float d1, m1, d2, m2;
            forge__k4_scale_min(2 * chunk, packed, &sc, &mn);
            d1 = d * (float)sc;
            m1 = dmin * (float)mn;
            forge__k4_scale_min(2 * chunk + 1, packed, &sc, &mn);
            d2 = d * (float)sc;
            m2 = dmin * (float)mn;
            for (l = 0; l < 32; l++) acc[l] += (d1 * (float)(qs[l] & 0xf) - m1) * x[l];
            for (l = 0; l < 32; l++) acc[l] += (d2 * (float)(qs[l] >> 4) - m2) * x[32 + l];
        }
    }
    return forge__sum_lanes(acc, 32);
}

static float forge__vdot_q5_k(const uint8_t *FORGE__RESTRICT w, const float *FORGE__RESTRICT x, uint32_t n_cols) {
    float acc[32] = {0};
    uint32_t b, l;
    for (b = 0; b < n_cols / 256; b++, w += 176) {
        const float d = forge__half_at(w), dmin = forge__half_at(w + 2);
        const uint8_t *packed = w + 4, *qh = w + 16, *qs = w + 48;
        int chunk;
        for (chunk = 0; chunk < 4; chunk++, qs += 32, x += 64) {
            int sc, mn;
            const uint32_t shift_lo = 2u * (uint32_t)chunk, shift_hi = shift_lo + 1;
            float d1, m1, d2, m2;
            forge__k4_scale_min(2 * chunk, packed, &sc, &mn);
            d1 = d * (float)sc;
            m1 = dmin * (float)mn;
            forge__k4_scale_min(2 * chunk + 1, packed, &sc, &mn);
            d2 = d * (float)sc;
            m2 = dmin * (float)mn;
            for (l = 0; l < 32; l++)
                acc[l] += (d1 * (float)((qs[l] & 0xf) + (((uint32_t)qh[l] >> shift_lo & 1u) << 4)) - m1) * x[l];
            for (l = 0; l < 32; l++)
                acc[l] += (d2 * (float)((qs[l] >> 4) + (((uint32_t)qh[l] >> shift_hi & 1u) << 4)) - m2) * x[32 + l];
        }
    }
    return forge__sum_lanes(acc, 32);
}

static float forge__vdot_q6_k(const uint8_t *FORGE__RESTRICT w, const float *FORGE__RESTRICT x, uint32_t n_cols) {
    float acc[32] = {0};
    uint32_t b, l;
    for (b = 0; b < n_cols / 256; b++, w += 210) {
        const uint8_t *ql = w, *qh = w + 128;
        const int8_t *scales = (const int8_t *)(w + 192);
        const float d = forge__half_at(w + 208);
        int half;
        for (half = 0; half < 2; half++, ql += 64, qh += 32, scales += 8, x += 128) {
            uint32_t s;
            for (s = 0; s < 2; s++) { /* scale s covers l in [16s, 16s + 16) */
                const float s1 = d * (float)scales[s], s2 = d * (float)scales[s + 2];
                const float s3 = d * (float)scales[s + 4], s4 = d * (float)scales[s + 6];
                for (l = 16 * s; l < 16 * s + 16; l++) {
                    int q1 = ((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32;
                    int q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
                    int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                    int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                    acc[l] += s1 * (float)q1 * x[l];
                    acc[l] += s2 * (float)q2 * x[l + 32];
                    acc[l] += s3 * (float)q3 * x[l + 64];
                    acc[l] += s4 * (float)q4 * x[l + 96];
                }
            }
        }
    }
    return forge__sum_lanes(acc, 32);
}

/* Any other supported type: dequantize one block at a time onto the stack, then dot. */
static float forge__vdot_blockwise(const forge_type_traits *t, const uint8_t *FORGE__RESTRICT w,
                                   const float *FORGE__RESTRICT x, uint32_t n_cols) {
    float acc[FORGE__LANES] = {0}, block[256];
    uint32_t b, c, j, per = t->block_elems; /* at most 256 and a multiple of FORGE__LANES for every block type */
    for (b = 0; b < n_cols / per; b++, w += t->block_bytes, x += per) {
        t->dequantize(w, block, 1);
        for (c = 0; c < per; c += FORGE__LANES)
            for (j = 0; j < FORGE__LANES; j++) acc[j] += block[c + j] * x[c + j];
    }
    return forge__sum_lanes(acc, FORGE__LANES);
}

static forge__vdot_fn forge__vdot_for(uint32_t type) {
    switch (type) {
    case FORGE_TYPE_F32: return forge__vdot_f32;
    case FORGE_TYPE_F16: return forge__vdot_f16;
    case FORGE_TYPE_BF16: return forge__vdot_bf16;
    case FORGE_TYPE_Q4_0: return forge__vdot_q4_0;
    case FORGE_TYPE_Q4_1: return forge__vdot_q4_1;
    case FORGE_TYPE_Q5_0: return forge__vdot_q5_0;
    case FORGE_TYPE_Q5_1: return forge__vdot_q5_1;
    case FORGE_TYPE_Q8_0: return forge__vdot_q8_0;
    case FORGE_TYPE_Q4_K: return forge__vdot_q4_k;
    case FORGE_TYPE_Q5_K: return forge__vdot_q5_k;
    case FORGE_TYPE_Q6_K: return forge__vdot_q6_k;
    default: return NULL; /* forge__vdot_blockwise */
    }
}

/* A product of up to FORGE__VDOT_TOKENS tokens (a decode step, a step of a few sequences) runs each
   token through the one-token dot products on the quantized blocks, row by row, so a row is read from
   memory once for all of them and each token's sums are those it gets alone. Past that count,
   dequantizing a group of rows once costs less than the tokens' fused dot products (SmolLM2-135M on
   two cores, a step: one token 18.6 ms; 2 and 4 tokens 62.8 and 84.1 ms dequantized, 35.7 and 73.1 fused). */
#define FORGE__VDOT_TOKENS 4

/* Prefill: FORGE__ROW_GROUP dequantized rows against one token at a time, so each token's
   activations are read once per group. Rows of a partial group repeat the last row; every output
   goes through the same arithmetic whichever slot of a group it sits in. */
#define FORGE__ROW_GROUP 4
#define FORGE__DOT_LANES 8

static void forge__dot_rows4(const float *FORGE__RESTRICT r0, const float *FORGE__RESTRICT r1,
                             const float *FORGE__RESTRICT r2, const float *FORGE__RESTRICT r3,
                             const float *FORGE__RESTRICT x, uint32_t n, float out[FORGE__ROW_GROUP]) {
    float a0[FORGE__DOT_LANES] = {0}, a1[FORGE__DOT_LANES] = {0}, a2[FORGE__DOT_LANES] = {0},
          a3[FORGE__DOT_LANES] = {0};
    float t0 = 0, t1 = 0, t2 = 0, t3 = 0;
    uint32_t c = 0, j;
    for (; c + FORGE__DOT_LANES <= n; c += FORGE__DOT_LANES) {
        FORGE__UNROLL
        for (j = 0; j < FORGE__DOT_LANES; j++) {
            const float xv = x[c + j];
            a0[j] += r0[c + j] * xv;
            a1[j] += r1[c + j] * xv;
            a2[j] += r2[c + j] * xv;
            a3[j] += r3[c + j] * xv;
        }
    }
    for (; c < n; c++) {
        t0 += r0[c] * x[c];
        t1 += r1[c] * x[c];
        t2 += r2[c] * x[c];
        t3 += r3[c] * x[c];
    }
    out[0] = forge__sum_lanes(a0, FORGE__DOT_LANES) + t0;
    out[1] = forge__sum_lanes(a1, FORGE__DOT_LANES) + t1;
    out[2] = forge__sum_lanes(a2, FORGE__DOT_LANES) + t2;
    out[3] = forge__sum_lanes(a3, FORGE__DOT_LANES) + t3;
}

typedef struct forge__matmul_job {
    const forge_type_traits *traits;
    forge__vdot_fn vdot;
    const uint8_t *w;
    uint64_t row_bytes;
    uint32_t n_rows, n_cols, n_tokens, rows_per_task;
    const float *x;
    float *y;
    uint8_t *work; /* aligned; slot_bytes per thread */
    size_t slot_bytes;
    int per_token; /* every token through vdot, row by row */
} forge__matmul_job;

static void forge__matmul_task(void *ctx, uint32_t task, uint32_t n_tasks, uint32_t thread) {
    const forge__matmul_job *job = (const forge__matmul_job *)ctx;
    const uint32_t first = task * job->rows_per_task, n_cols = job->n_cols, n_rows = job->n_rows;
    const uint32_t end = (uint32_t)FORGE__MIN((uint64_t)first + job->rows_per_task, (uint64_t)n_rows);
    uint32_t r;
    (void)n_tasks;
    if (job->per_token) { /* each row read once, from cache for the tokens after the first */
        for (r = first; r < end; r++) {
            const uint8_t *row = job->w + (size_t)r * (size_t)job->row_bytes;
            uint32_t t;
            for (t = 0; t < job->n_tokens; t++) {
                const float *x = job->x + (size_t)t * n_cols;
                job->y[(size_t)t * n_rows + r] = job->vdot ? job->vdot(row, x, n_cols) : forge__vdot_blockwise(job->traits, row, x, n_cols);
            }
        }
    } else {
        float *rows = (float *)(void *)(job->work + (size_t)thread * job->slot_bytes);
        const uint64_t n_blocks = n_cols / job->traits->block_elems;
        for (r = first; r < end; r += FORGE__ROW_GROUP) {
            const uint32_t in_group = FORGE__MIN((uint32_t)FORGE__ROW_GROUP, end - r);
            const float *slot[FORGE__ROW_GROUP];
            uint32_t i, t;
            for (i = 0; i < FORGE__ROW_GROUP; i++) {
                slot[i] = rows + (size_t)FORGE__MIN(i, in_group - 1) * n_cols;
                if (i < in_group)
                    job->traits->dequantize(job->w + (size_t)(r + i) * (size_t)job->row_bytes, rows + (size_t)i * n_cols,
                                            n_blocks);
            }
            for (t = 0; t < job->n_tokens; t++) {
                float out[FORGE__ROW_GROUP];
                forge__dot_rows4(slot[0], slot[1], slot[2], slot[3], job->x + (size_t)t * n_cols, n_cols, out);
                for (i = 0; i < in_group; i++) job->y[(size_t)t * n_rows + r + i] = out[i];
            }
        }
    }
}

#define FORGE__WORK_ALIGN 64

/* Bytes of one thread's slot of the prefill work area. */
static size_t forge__matmul_slot_bytes(uint32_t n_cols) {
    size_t bytes = (size_t)FORGE__ROW_GROUP * n_cols * sizeof(float);
    return (bytes + FORGE__WORK_ALIGN - 1) / FORGE__WORK_ALIGN * FORGE__WORK_ALIGN;
}

/* Scratch that forge__matmul needs for rows of n_cols elements on this pool (prefill only; any
   pointer will do, it is aligned inside). */
static FORGE__MAYBE_UNUSED size_t forge__matmul_work_bytes(const forge__pool *p, uint32_t n_cols) {
    return (size_t)forge__pool_size(p) * forge__matmul_slot_bytes(n_cols) + FORGE__WORK_ALIGN;
}

/* Whether forge__matmul handles rows of n_cols elements of this type (checked once at load time). */
static FORGE__MAYBE_UNUSED int forge__matmul_supported(uint32_t type, uint32_t n_cols) {
    const forge_type_traits *t = forge_type_info(type);
    return t != NULL && n_cols % t->block_elems == 0;
}

/* y[t*n_rows + r] = sum_c W[r][c] * x[t*n_cols + c]; W is n_rows rows of n_cols elements of `type`,
   row r at w + r*row_bytes; x f32 [n_tokens][n_cols]; y f32 [n_tokens][n_rows]. One token
   (decode) dequantizes inside the dot product, block by block; more tokens (prefill) dequantize each
   row once into `work` (forge__matmul_work_bytes) and reuse it for every token. Rows are split into
   tasks of a multiple of 16 rows. An unsupported type (see forge__matmul_supported) yields zeros. */
static FORGE__MAYBE_UNUSED void forge__matmul(forge__pool *p, uint32_t type, const uint8_t *w, uint64_t row_bytes,
                                              uint32_t n_rows, uint32_t n_cols, const float *x, float *y,
                                              uint32_t n_tokens, void *work) {
    forge__matmul_job job;
    const uint32_t n_threads = forge__pool_size(p);
    uint32_t n_tasks, target_tasks;
    uint64_t macs = (uint64_t)n_rows * n_cols * n_tokens;
    if (n_rows == 0 || n_tokens == 0) return;
    if (!forge__matmul_supported(type, n_cols) || (n_tokens > FORGE__VDOT_TOKENS && type != FORGE_TYPE_F32 && !work)) {
        memset(y, 0, (size_t)n_rows * n_tokens * sizeof(float));
        return;
    }
    job.traits = forge_type_info(type);
    job.vdot = forge__vdot_for(type);
    /* f32 rows have nothing to dequantize: every token takes the one-token sums, so a token's result
       does not depend on its step (a router's logits before an 8-bit product, which would magnify any
       difference to a step of its rounding) */
    job.per_token = n_tokens <= FORGE__VDOT_TOKENS || type == FORGE_TYPE_F32;
    job.w = w;
    job.row_bytes = row_bytes;
    job.n_rows = n_rows;
    job.n_cols = n_cols;
    job.n_tokens = n_tokens;
    job.x = x;
    job.y = y;
    job.slot_bytes = forge__matmul_slot_bytes(n_cols);
    job.work = work ? (uint8_t *)work + ((FORGE__WORK_ALIGN - (size_t)((uintptr_t)work % FORGE__WORK_ALIGN)) %
                                         FORGE__WORK_ALIGN)
                    : NULL;
    /* a few tasks per thread balance uneven cores; tiny products are not worth waking anyone */
    target_tasks = macs < 65536 ? 1u : n_threads * 4u;
    {
        uint64_t per_task = ((uint64_t)n_rows + target_tasks - 1) / target_tasks;
        per_task = (per_task + 15u) / 16u * 16u;
        job.rows_per_task = (uint32_t)FORGE__MIN(per_task, (uint64_t)UINT32_MAX - 15u);
        n_tasks = (uint32_t)(((uint64_t)n_rows + job.rows_per_task - 1) / job.rows_per_task);
    }
    forge__pool_run(p, forge__matmul_task, &job, n_tasks);
}

/* ---- products on 8-bit activations ----
   The input of a quantized product is rounded once per token to 8 bits in blocks of 32 (d = max|x| / 127,
   q = x / d rounded to the nearest, ties to even: the rule of the GPU decode path), and each weight block
   then meets it in integer multiply-adds: sum_j w_j x_j = d_w d_x sum_j q_w,j q_x,j, a weight type's
   minimum applied through the block's sum of q_x. The cost is the rounding of the activations, about
   0.4% of a block's largest value per element, the trade the reference engine makes in its CPU products
   too; desc.cpu_no_q8 keeps the f32 products above. */
typedef struct forge__q8_block {
    float d;  /* max|x| / 127 over the block */
    float ds; /* d times the sum of q: what a weight block's minimum multiplies */
    int8_t q[32];
} forge__q8_block;

/* Rounds n_blocks blocks of 32 floats. A NaN or infinite input gives its block a NaN scale, so that
   the products it meets are NaN as they would be in f32 (a broken model is reported, not hidden),
   and never an out-of-range byte. */
static void forge__q8_quantize(const float *FORGE__RESTRICT x, forge__q8_block *FORGE__RESTRICT out, uint32_t n_blocks) {
    uint32_t b, j;
    for (b = 0; b < n_blocks; b++, x += 32, out++) {
        float amax = 0.0f, inv, finite = 0.0f;
        int sum = 0;
        for (j = 0; j < 32; j++) {
            const float a = fabsf(x[j]);
            amax = a > amax ? a : amax;
            finite += x[j] * 0.0f; /* NaN once any element is NaN or infinite */
        }
        out->d = amax / 127.0f + finite;
        inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        for (j = 0; j < 32; j++) {
            const float v = x[j] * inv;
            const long q = v >= -127.5f && v <= 127.5f ? lrintf(v) : 0; /* lrintf: to nearest, ties to even */
            out->q[j] = (int8_t)q;
            sum += (int)q;
        }
        out->ds = out->d * (float)sum;
    }
}

/* Dot product of one row (n_blocks blocks of 32 of its elements) with a quantized vector. */
typedef float (*forge__qdot_fn)(const uint8_t *FORGE__RESTRICT w, const forge__q8_block *FORGE__RESTRICT x, uint32_t n_blocks);

/* A row's blocks of 32 unpacked: signed bytes, the scale of each 16 and the coefficient of the block's
   activation sum, so that block b of the row times block b of x is
   d_x * (scale[0] * sum_0..15 q w + scale[1] * sum_16..31 q w + offset * sum q_x). Every type comes to
   this one form: a one-token product unpacks each block as it reads it, a step of more tokens unpacks
   each row once into memory and runs it against four tokens at a time, and both add the blocks up in
   the same order with the same operations, so a token's sums do not depend on the step it is in. */
typedef struct forge__q8_row_block {
    float scale[2]; /* of elements 0..15 and 16..31 */
    float offset;
    float pad;
    int8_t q[32];
} forge__q8_row_block;

static void forge__q8_row_set(forge__q8_row_block *o, float scale0, float scale1, float offset) {
    o->scale[0] = scale0;
    o->scale[1] = scale1;
    o->offset = offset;
    o->pad = 0.0f;
}

/* The bytes of one unit of unpacking: a block of 32, or a K-quant super-block of 8 of them. */
static uint32_t forge__q8_unit_bytes(uint32_t type) {
    switch (type) {
    case FORGE_TYPE_Q4_0: return 18;
    case FORGE_TYPE_Q4_1: return 20;
    case FORGE_TYPE_Q5_0: return 22;
    case FORGE_TYPE_Q5_1: return 24;
    case FORGE_TYPE_Q8_0: return 34;
    case FORGE_TYPE_Q4_K: return 144;
    case FORGE_TYPE_Q5_K: return 176;
    case FORGE_TYPE_Q6_K: return 210;
    default: return 0;
    }
}

/* n_blocks blocks of 32 of a row of `type` (one forge__q8_unit_bytes accepts) into out. */
static void forge__q8_row_unpack(uint32_t type, const uint8_t *w, forge__q8_row_block *out, uint32_t n_blocks) {
    uint32_t b, j;
    switch (type) {
    case FORGE_TYPE_Q4_0: case FORGE_TYPE_Q4_1: { /* Q4_1's offset is its minimum; Q4_0's -8 is in the bytes */
        const int one = type == FORGE_TYPE_Q4_1, bytes = one ? 20 : 18;
        for (b = 0; b < n_blocks; b++, w += bytes, out++) {
            const float d = forge__half_at(w);
            forge__q8_row_set(out, d, d, one ? forge__half_at(w + 2) : 0.0f);
            for (j = 0; j < 16; j++) {
                out->q[j] = (int8_t)((w[2 + 2 * one + j] & 0xf) - (one ? 0 : 8));
                out->q[j + 16] = (int8_t)((w[2 + 2 * one + j] >> 4) - (one ? 0 : 8));
            }
        }
        break;
    }
    case FORGE_TYPE_Q5_0: case FORGE_TYPE_Q5_1: { /* the fifth bits of the 32 in one little-endian word */
        const int one = type == FORGE_TYPE_Q5_1, bytes = one ? 24 : 22;
        for (b = 0; b < n_blocks; b++, w += bytes, out++) {
            const float d = forge__half_at(w);
            const uint32_t high = forge__le32(w + 2 + 2 * one);
            const uint8_t *q = w + 6 + 2 * one;
            forge__q8_row_set(out, d, d, one ? forge__half_at(w + 2) : 0.0f);
            for (j = 0; j < 16; j++) {
                out->q[j] = (int8_t)((int)((q[j] & 0xfu) | ((high >> j & 1u) << 4)) - (one ? 0 : 16));
                out->q[j + 16] = (int8_t)((int)((q[j] >> 4) | ((high >> (j + 16) & 1u) << 4)) - (one ? 0 : 16));
            }
        }
        break;
    }
    case FORGE_TYPE_Q8_0:
        for (b = 0; b < n_blocks; b++, w += 34, out++) {
            const float d = forge__half_at(w);
            forge__q8_row_set(out, d, d, 0.0f);
            memcpy(out->q, w + 2, 32);
        }
        break;
    case FORGE_TYPE_Q4_K: case FORGE_TYPE_Q5_K: { /* each 32 of a super-block: a 6-bit scale and minimum */
        const int five = type == FORGE_TYPE_Q5_K;
        for (b = 0; b < n_blocks / 8; b++, w += five ? 176 : 144) {
            const float d = forge__half_at(w), dmin = forge__half_at(w + 2);
            const uint8_t *qh = w + 16, *qs = w + (five ? 48 : 16);
            int sub;
            for (sub = 0; sub < 8; sub++, out++) {
                const uint8_t *q = qs + 32 * (sub / 2);
                const int shift = 4 * (sub & 1);
                int sc, mn;
                forge__k4_scale_min(sub, w + 4, &sc, &mn);
                forge__q8_row_set(out, d * (float)sc, d * (float)sc, -dmin * (float)mn);
                for (j = 0; j < 32; j++) out->q[j] = (int8_t)((q[j] >> shift & 0xf) | (five ? (qh[j] >> sub & 1) << 4 : 0));
            }
        }
        break;
    }
    case FORGE_TYPE_Q6_K: /* [ql 128][qh 64][scales 16][d]: half h's 32k + l from ql, qh bits 2k..2k+1, a scale per 16 */
        for (b = 0; b < n_blocks / 8; b++, w += 210) {
            const float d = forge__half_at(w + 208);
            int half, k;
            for (half = 0; half < 2; half++) {
                const uint8_t *ql = w + 64 * half, *qh = w + 128 + 32 * half;
                const int8_t *scales = (const int8_t *)(w + 192) + 8 * half;
                for (k = 0; k < 4; k++, out++) {
                    const uint8_t *lo = ql + 32 * (k & 1);
                    const int shift = 4 * (k >> 1);
                    forge__q8_row_set(out, d * (float)scales[2 * k], d * (float)scales[2 * k + 1], 0.0f);
                    for (j = 0; j < 32; j++) out->q[j] = (int8_t)(((lo[j] >> shift & 0xf) | ((qh[j] >> (2 * k) & 3) << 4)) - 32);
                }
            }
        }
        break;
    default: break;
    }
}

/* ---- the portable forms: the reference for the vector ones, and what other machines run ---- */

/* A block's float from its integer sums of 0..15 and 16..31: the one expression every form that keeps
   the portable order (the ARM ones too) goes through, so that they round alike. */
static float forge__q8_block_sums(int32_t lo, int32_t hi, float scale0, float scale1, float offset, const forge__q8_block *x) {
    return x->d * (scale0 * (float)lo + scale1 * (float)hi) + offset * x->ds;
}

static float forge__q8_block_dot(const forge__q8_row_block *w, const forge__q8_block *x) {
    int32_t lo = 0, hi = 0;
    uint32_t j;
    for (j = 0; j < 16; j++) lo += w->q[j] * x->q[j], hi += w->q[j + 16] * x->q[j + 16];
    return forge__q8_block_sums(lo, hi, w->scale[0], w->scale[1], w->offset, x);
}

/* One row of `type` against one token: each unit unpacked on the stack as it is read. */
static float forge__qdot_portable(uint32_t type, const uint8_t *FORGE__RESTRICT w, const forge__q8_block *FORGE__RESTRICT x,
                                  uint32_t n_blocks) {
    const uint32_t unit = type == FORGE_TYPE_Q4_K || type == FORGE_TYPE_Q5_K || type == FORGE_TYPE_Q6_K ? 8u : 1u;
    const uint32_t unit_bytes = forge__q8_unit_bytes(type);
    forge__q8_row_block tmp[8];
    float total = 0.0f;
    uint32_t b, i;
    for (b = 0; b < n_blocks; b += unit, w += unit_bytes) {
        forge__q8_row_unpack(type, w, tmp, unit);
        for (i = 0; i < unit; i++) total += forge__q8_block_dot(&tmp[i], &x[b + i]);
    }
    return total;
}

#define FORGE__QDOT_PORTABLE(name, type)                                                                                     \
    static float name(const uint8_t *FORGE__RESTRICT w, const forge__q8_block *FORGE__RESTRICT x, uint32_t n_blocks) {    \
        return forge__qdot_portable(type, w, x, n_blocks);                                                                   \
    }
FORGE__QDOT_PORTABLE(forge__qdot_q4_0, FORGE_TYPE_Q4_0)
FORGE__QDOT_PORTABLE(forge__qdot_q4_1, FORGE_TYPE_Q4_1)
FORGE__QDOT_PORTABLE(forge__qdot_q5_0, FORGE_TYPE_Q5_0)
FORGE__QDOT_PORTABLE(forge__qdot_q5_1, FORGE_TYPE_Q5_1)
FORGE__QDOT_PORTABLE(forge__qdot_q8_0, FORGE_TYPE_Q8_0)
FORGE__QDOT_PORTABLE(forge__qdot_q4_k, FORGE_TYPE_Q4_K)
FORGE__QDOT_PORTABLE(forge__qdot_q5_k, FORGE_TYPE_Q5_K)
FORGE__QDOT_PORTABLE(forge__qdot_q6_k, FORGE_TYPE_Q6_K)

/* out[t] = an unpacked row times token t's activations (at x + t * x_stride), t < n_tokens <= 4. */
typedef void (*forge__q8_rowdot_fn)(const forge__q8_row_block *FORGE__RESTRICT w, const forge__q8_block *FORGE__RESTRICT x,
                                    size_t x_stride, uint32_t n_tokens, uint32_t n_blocks, float *out);

static void forge__q8_rowdot(const forge__q8_row_block *FORGE__RESTRICT w, const forge__q8_block *FORGE__RESTRICT x,
                             size_t x_stride, uint32_t n_tokens, uint32_t n_blocks, float *out) {
    uint32_t t, b;
    for (t = 0; t < n_tokens; t++) {
        float total = 0.0f;
        for (b = 0; b < n_blocks; b++) total += forge__q8_block_dot(&w[b], &x[t * x_stride + b]);
        out[t] = total;
    }
}

/* x86 vector forms (AVX2, FMA, F16C): a compiler given -mavx2 -mfma -mf16c (or -march=...) builds them plain;
   GCC and Clang on x86 otherwise build them as target functions and forge picks them when the CPU
   says it has both, so a plain `make` runs them where they run. Other compilers and FORGE_NO_SIMD
   keep the portable forms. */
#if !defined(FORGE_NO_SIMD) && (defined(__x86_64__) || defined(_M_X64) || defined(__i386__))
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define FORGE__AVX2 1
#define FORGE__AVX2_FN
#define FORGE__AVX2_PRESENT() 1
#elif (defined(__GNUC__) && __GNUC__ >= 6) || (defined(__clang__) && __clang_major__ >= 5)
#define FORGE__AVX2 1
#define FORGE__AVX2_FN __attribute__((target("avx2,fma,f16c")))
#define FORGE__AVX2_PRESENT() forge__avx2_present()
#include <cpuid.h>
/* AVX2 and FMA as the compiler's runtime knows them (the OS saving the registers included), F16C
   from CPUID leaf 1 (ECX bit 29), which some compilers' __builtin_cpu_supports does not name. */
static int forge__avx2_present(void) {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx >> 29 & 1u);
}
#endif
#endif

#ifdef FORGE__AVX2
#include <immintrin.h>

static FORGE__AVX2_FN float forge__avx2_sum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

static FORGE__AVX2_FN __m256i forge__avx2_load(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

static FORGE__AVX2_FN float forge__avx2_half(const uint8_t *p) { return _cvtsh_ss(forge__ld16(p)); }

/* The CPU attention's double-precision sums, 4 lanes at a time (n a multiple of 8): sum of q[i] k[i],
   and acc[i] = acc[i] * shrink + w v[i]. */
static FORGE__AVX2_FN double forge__avx2_dot_fd(const float *q, const float *k, uint32_t n) {
    __m256d a = _mm256_setzero_pd(), b = _mm256_setzero_pd();
    __m128d h;
    uint32_t i;
    for (i = 0; i < n; i += 8) {
        a = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm_loadu_ps(q + i)), _mm256_cvtps_pd(_mm_loadu_ps(k + i)), a);
        b = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm_loadu_ps(q + i + 4)), _mm256_cvtps_pd(_mm_loadu_ps(k + i + 4)), b);
    }
    a = _mm256_add_pd(a, b);
    h = _mm_add_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
    return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}
static FORGE__AVX2_FN void forge__avx2_axpy_fd(double *acc, double shrink, double w, const float *v, uint32_t n) {
    const __m256d s = _mm256_set1_pd(shrink), x = _mm256_set1_pd(w);
    uint32_t i;
    for (i = 0; i < n; i += 4)
        _mm256_storeu_pd(acc + i, _mm256_fmadd_pd(x, _mm256_cvtps_pd(_mm_loadu_ps(v + i)), _mm256_mul_pd(_mm256_loadu_pd(acc + i), s)));
}

/* e^x in f32, 8 lanes: x clamped to [-87.33, 88.37] (the normal results; a NaN stays NaN), x = n ln2 + r
   with |r| <= ln2/2, e^r from a degree-7 polynomial (Cephes' expf coefficients), 2^n into the exponent.
   Within 2 ulp of expf over the range. */
static FORGE__AVX2_FN __m256 forge__avx2_exp(__m256 x) {
    __m256 n, r, p;
    __m256i bits;
    x = _mm256_max_ps(_mm256_set1_ps(-87.336544f), _mm256_min_ps(_mm256_set1_ps(88.376259f), x)); /* NaN: the second operand */
    n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x); /* ln2 in two parts: n * the first is exact */
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    p = _mm256_fmadd_ps(_mm256_set1_ps(1.9875691500e-4f), r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23); /* n in [-126, 127] */
    return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

/* The gated activations of the feed-forward, 8 lanes: out[i] = act(g[i]) * u[i] for i < n (out may be g),
   act GELU's tanh form as x / (1 + e^(-2 sqrt(2/pi) (x + 0.044715 x^3))) (the same function as
   forge__gelu's 0.5 x (1 + tanh), without its cancellation for negative x), or SiLU x / (1 + e^-x).
   A last part of fewer than 8 goes through the same lanes, so every element gets the same function. */
static FORGE__AVX2_FN __m256 forge__avx2_glu8(__m256 x, int gelu) {
    __m256 m = _mm256_sub_ps(_mm256_setzero_ps(), x), y;
    if (gelu) {
        const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
        m = _mm256_mul_ps(_mm256_set1_ps(-1.5957691216057308f), _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), x3, x));
    }
    y = _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), forge__avx2_exp(m)));
    /* past e^88 the value is below 1e-35 |x|: x * 0, which is also the scalar forms' -0 for very negative x
       (where their exponential overflows) and NaN for -inf (-inf * 0, -inf / inf) */
    return _mm256_blendv_ps(y, _mm256_mul_ps(x, _mm256_setzero_ps()), _mm256_cmp_ps(m, _mm256_set1_ps(88.0f), _CMP_GT_OQ));
}
static FORGE__AVX2_FN void forge__avx2_glu(const float *g, const float *u, float *out, uint64_t n, int gelu) {
    float a[8], b[8];
    uint64_t i, j;
    for (i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_mul_ps(forge__avx2_glu8(_mm256_loadu_ps(g + i), gelu), _mm256_loadu_ps(u + i)));
    if (i == n) return;
    for (j = 0; j < 8; j++) a[j] = i + j < n ? g[i + j] : 0.0f, b[j] = i + j < n ? u[i + j] : 0.0f;
    _mm256_storeu_ps(a, _mm256_mul_ps(forge__avx2_glu8(_mm256_loadu_ps(a), gelu), _mm256_loadu_ps(b)));
    for (j = 0; i + j < n; j++) out[i + j] = a[j];
}

/* n halves (a multiple of 8) to floats, 8 at a time: the same values as forge_f16_to_f32 (the
   conversion is exact). */
static FORGE__AVX2_FN void forge__avx2_halves(const uint8_t *src, float *dst, uint32_t n) {
    uint32_t i;
    for (i = 0; i < n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(src + 2 * i))));
}

/* Byte products of one block added in fours: unsigned q by signed x (each pair within int16:
   q <= 128, |x| <= 127); signed q goes in as |q| times x with q's sign, the same integers. */
static FORGE__AVX2_FN __m256i forge__avx2_dot_unsigned(__m256i q, const forge__q8_block *x) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(q, forge__avx2_load(x->q)), _mm256_set1_epi16(1));
}
static FORGE__AVX2_FN __m256i forge__avx2_dot_signed(__m256i q, const forge__q8_block *x) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(q), _mm256_sign_epi8(forge__avx2_load(x->q), q)),
                             _mm256_set1_epi16(1));
}

/* A block's integer sums into a token's lanes, times scale (the weights' scale of each 16) times x's d.
   A product whose blocks have one scale passes it broadcast: the same floats. */
static FORGE__AVX2_FN void forge__avx2_block(__m256i dot, __m256 scale, const forge__q8_block *x, __m256 *acc) {
    *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(scale, _mm256_set1_ps(x->d)), *acc);
}

/* A block's minimum: offset (the weights') times x's d times the sum of x's bytes. Types without one
   skip it: adding their zeros would change no sum. */
static FORGE__AVX2_FN void forge__avx2_offset(float offset, const forge__q8_block *x, float *offsets) {
    *offsets += offset * x->ds;
}

/* The 16 bytes at q as 32 nibbles: low ones in bytes 0..15, high ones in 16..31. */
static FORGE__AVX2_FN __m256i forge__avx2_nibbles(const uint8_t *q) {
    const __m128i raw = _mm_loadu_si128((const __m128i *)q), mask = _mm_set1_epi8(0xf);
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(raw, mask)),
                                   _mm_and_si128(_mm_srli_epi16(raw, 4), mask), 1);
}

/* Byte j = 16 where bit j of `high` is set, else 0. */
static FORGE__AVX2_FN __m256i forge__avx2_fifth_bits(uint32_t high) {
    const __m256i spread = _mm256_set_epi64x(0x0303030303030303ll, 0x0202020202020202ll, 0x0101010101010101ll, 0);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)high), spread);
    v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
    return _mm256_and_si256(v, _mm256_set1_epi8(16));
}

/* forge__q8_quantize in vectors, with the same bytes and floats (a NaN scale's payload aside):
   _mm256_cvtps_epi32 rounds as lrintf does, in the current rounding mode. */
static FORGE__AVX2_FN void forge__q8_quantize_avx2(const float *FORGE__RESTRICT x, forge__q8_block *FORGE__RESTRICT out,
                                                   uint32_t n_blocks) {
    const __m256 sign = _mm256_set1_ps(-0.0f), zero = _mm256_setzero_ps();
    const __m256 low = _mm256_set1_ps(-127.5f), high = _mm256_set1_ps(127.5f);
    uint32_t b;
    int i;
    for (b = 0; b < n_blocks; b++, x += 32, out++) {
        __m256 v[4], big = zero, finite = zero, inv;
        __m256i q[4], sum;
        __m128 m;
        float amax;
        for (i = 0; i < 4; i++) {
            v[i] = _mm256_loadu_ps(x + 8 * i);
            big = _mm256_max_ps(_mm256_andnot_ps(sign, v[i]), big); /* a NaN lane keeps big, as a > amax does */
            finite = _mm256_add_ps(finite, _mm256_mul_ps(v[i], zero));
        }
        m = _mm_max_ps(_mm256_castps256_ps128(big), _mm256_extractf128_ps(big, 1));
        m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
        amax = _mm_cvtss_f32(m);
        out->d = amax / 127.0f + forge__avx2_sum(finite);
        inv = _mm256_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
        for (i = 0; i < 4; i++) {
            const __m256 s = _mm256_mul_ps(v[i], inv);
            const __m256 ok = _mm256_and_ps(_mm256_cmp_ps(s, low, _CMP_GE_OQ), _mm256_cmp_ps(s, high, _CMP_LE_OQ));
            q[i] = _mm256_and_si256(_mm256_cvtps_epi32(s), _mm256_castps_si256(ok));
        }
        sum = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        { /* 32 words to 32 bytes in order: the packs work within 128-bit halves, the permute restores it */
            const __m256i words = _mm256_packs_epi32(q[0], q[1]), words2 = _mm256_packs_epi32(q[2], q[3]);
            const __m256i bytes = _mm256_packs_epi16(words, words2);
            _mm256_storeu_si256((__m256i *)out->q, _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
        }
        {
            __m128i s = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
            s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
            s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
            out->ds = out->d * (float)_mm_cvtsi128_si32(s);
        }
    }
}

/* The one-token forms unpack in registers what forge__q8_row_unpack writes, and add the same floats
   in the same order as forge__q8_rowdot_avx2. */
static FORGE__AVX2_FN float forge__qdot_q4_0_avx2(const uint8_t *FORGE__RESTRICT w, const forge__q8_block *FORGE__RESTRICT x,
                                                 uint32_t n_blocks) {
    const __m256i eight = _mm256_set1_epi8(8);
    __m256 acc = _mm256_setzero_ps();
    uint32_t b;
    for (b = 0; b < n_blocks; b++, w += 18, x++)
        forge__avx2_block(forge__avx2_dot_signed(_mm256_sub_epi8(forge__avx2_nibbles(w + 2), eight), x),
                          _mm256_set1_ps(forge__avx2_half(w)), x, &acc);
    return forge__avx2_sum(acc) + 0.0f;
}

static FORGE__AVX2_FN float forge__qdot_q4_1_avx2(const uint8_t *FORGE__RESTRICT w, const forge__q8_block *FORGE__RESTRICT x,
                                                 uint32_t n_blocks) {
    __m256 acc = _mm256_setzero_ps();
    float offsets = 0.0f;
    uint32_t b;
    for (b = 0; b < n_blocks; b++, w += 20, x++) {
        forge__avx2_block(forge__avx2_dot_unsigned(forge__avx2_nibbles(w + 4), x), _mm256_set1_ps(forge__avx2_half(w)), x, &acc);
        forge__avx2_offset(forge__avx2_half(w + 2), x, &offsets);
    }
    return forge__avx2_sum(acc) + offsets;
}

static FORGE__AVX2_FN float forge__qdot_q5_0_avx2(const uint8_t *FORGE__RESTRICT w, const forge__q8_block *FORGE__RESTRICT x,
                                                 uint32_t n_blocks) {
    const __m256i sixteen = _mm256_set1_epi8(16);
    __m256 acc = _mm256_setzero_ps();
    uint32_t b;
    for (b = 0; b < n_blocks; b++, w += 22, x++) {
        const __m256i q = _mm256_or_si256(forge__avx2_nibbles(w + 6), forge__avx2_fifth_bits(forge__le32(w + 2)));
        forge__avx2_block(forge__avx2_dot_signed(_mm256_sub_epi8(q, sixteen), x), _mm256_set1_ps(forge__avx2_half(w)), x, &acc);
    }
    return forge__avx2_sum(acc) + 0.0f;
}

static FORGE__AVX2_FN float forge__qdot_q5_1_avx2(const uint8_t *FORGE__RESTRICT w, const forge__q8_block *FORGE__RESTRICT x,
                                                 uint32_t n_blocks) {
    __m256 acc = _mm256_setzero_ps();
    float offsets = 0.0f;
    uint32_t b;
    for (b = 0; b < n_blocks; b++, w += 24, x++) {
        const __m256i q = _mm256_or_si256(forge__avx2_nibbles(w + 8), forge__avx2_fifth_bits(forge__le32(w + 4)));
        forge__avx2_block(forge__avx2_dot_unsigned(q, x), _mm256_set1_ps(forge__avx2_half(w)), x, &acc);
        forge__avx2_offset(forge__avx2_half(w + 2), x, &offsets);
    }
    return forge__avx2_sum(acc) + offsets;
}

static FORGE__AVX2_FN float forge__qdot_q8_0_avx2(const uint8_t *FORGE__RESTRICT w, const forge__q8_block *FORGE__RESTRICT x,
                                                 uint32_t n_blocks) {
    __m256 acc = _mm256_setzero_ps();
    uint32_t b;
    for (b = 0; b < n_blocks; b++, w += 34, x++)
        forge__avx2_block(forge__avx2_dot_signed(forge__avx2_load(w + 2), x), _mm256_set1_ps(forge__avx2_half(w)), x, &acc);
    return forge__avx2_sum(acc) + 0.0f;
}

static FORGE__AVX2_FN float forge__qdot_k_avx2(const uint8_t *FORGE__RESTRICT w, const forge__q8_block *FORGE__RESTRICT x,
                                              uint32_t n_blocks, int five) {
    const __m256i mask = _mm256_set1_epi8(0xf), one = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    float offsets = 0.0f;
    uint32_t b;
    for (b = 0; b < n_blocks / 8; b++, w += five ? 176 : 144) {
        const float d = forge__avx2_half(w), dmin = forge__avx2_half(w + 2);
        const uint8_t *packed = w + 4;
        const __m256i qh = forge__avx2_load(w + 16);
        int sc[8], mn[8], j, chunk;
        for (j = 0; j < 4; j++) { /* forge__k4_scale_min's table, straight through */
            sc[j] = packed[j] & 63;
            mn[j] = packed[j + 4] & 63;
            sc[j + 4] = (packed[j + 8] & 0xf) | ((packed[j] >> 6) << 4);
            mn[j + 4] = (packed[j + 8] >> 4) | ((packed[j + 4] >> 6) << 4);
        }
        for (chunk = 0; chunk < 4; chunk++, x += 2) {
            const __m256i raw = forge__avx2_load(w + (five ? 48 : 16) + 32 * chunk);
            __m256i q0 = _mm256_and_si256(raw, mask), q1 = _mm256_and_si256(_mm256_srli_epi16(raw, 4), mask);
            if (five) {
                q0 = _mm256_or_si256(q0, _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * chunk)), one), 4));
                q1 = _mm256_or_si256(q1, _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * chunk + 1)), one), 4));
            }
            forge__avx2_block(forge__avx2_dot_unsigned(q0, &x[0]), _mm256_set1_ps(d * (float)sc[2 * chunk]), &x[0], &acc);
            forge__avx2_offset(-dmin * (float)mn[2 * chunk], &x[0], &offsets);
            forge__avx2_block(forge__avx2_dot_unsigned(q1, &x[1]), _mm256_set1_ps(d * (float)sc[2 * chunk + 1]), &x[1], &acc);
            forge__avx2_offset(-dmin * (float)mn[2 * chunk + 1], &x[1], &offsets);
        }
    }
    return forge__avx2_sum(acc) + offsets;
}

static FORGE__AVX2_FN float forge__qdot_q4_k_avx2(const uint8_t *FORGE__RESTRICT w, const forge__q8_block *FORGE__RESTRICT x,
                                                 uint32_t n_blocks) {
    return forge__qdot_k_avx2(w, x, n_blocks, 0);
}

static FORGE__AVX2_FN float forge__qdot_q5_k_avx2(const uint8_t *FORGE__RESTRICT w, const forge__q8_block *FORGE__RESTRICT x,
                                                 uint32_t n_blocks) {
    return forge__qdot_k_avx2(w, x, n_blocks, 1);
}

static FORGE__AVX2_FN float forge__qdot_q6_k_avx2(const uint8_t *FORGE__RESTRICT w, const forge__q8_block *FORGE__RESTRICT x,
                                                 uint32_t n_blocks) {
    const __m256i mask = _mm256_set1_epi8(0xf), three = _mm256_set1_epi8(3), bias = _mm256_set1_epi8(32);
    __m256 acc = _mm256_setzero_ps();
    uint32_t b;
    for (b = 0; b < n_blocks / 8; b++, w += 210) {
        const float d = forge__avx2_half(w + 208);
        int half;
        for (half = 0; half < 2; half++) {
            const __m256i ql0 = forge__avx2_load(w + 64 * half), ql1 = forge__avx2_load(w + 64 * half + 32);
            const __m256i qh = forge__avx2_load(w + 128 + 32 * half);
            const int8_t *scales = (const int8_t *)(w + 192) + 8 * half;
            __m256i q[4];
            int k;
            q[0] = _mm256_or_si256(_mm256_and_si256(ql0, mask), _mm256_slli_epi16(_mm256_and_si256(qh, three), 4));
            q[1] = _mm256_or_si256(_mm256_and_si256(ql1, mask),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), three), 4));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), mask),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), three), 4));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), mask),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), three), 4));
            for (k = 0; k < 4; k++, x++) {
                const __m256 scale = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_set1_ps(d * (float)scales[2 * k])),
                                                          _mm_set1_ps(d * (float)scales[2 * k + 1]), 1);
                forge__avx2_block(forge__avx2_dot_signed(_mm256_sub_epi8(q[k], bias), x), scale, x, &acc);
            }
        }
    }
    return forge__avx2_sum(acc) + 0.0f;
}

static FORGE__AVX2_FN void forge__q8_rowdot_avx2_with(const forge__q8_row_block *FORGE__RESTRICT w,
                                                      const forge__q8_block *FORGE__RESTRICT x, size_t x_stride,
                                                      uint32_t n_tokens, uint32_t n_blocks, float *out, int with_offsets) {
    __m256 acc[4];
    float offsets[4] = {0, 0, 0, 0};
    uint32_t b, t;
    for (t = 0; t < 4; t++) acc[t] = _mm256_setzero_ps();
    for (b = 0; b < n_blocks; b++, w++, x++) {
        const __m256i q = forge__avx2_load(w->q);
        const __m256 scale = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_set1_ps(w->scale[0])), _mm_set1_ps(w->scale[1]), 1);
        FORGE__UNROLL
        for (t = 0; t < 4; t++) { /* the lanes of missing tokens repeat the last one's work and are dropped */
            const forge__q8_block *xt = x + (t < n_tokens ? t : n_tokens - 1) * x_stride;
            forge__avx2_block(forge__avx2_dot_signed(q, xt), scale, xt, &acc[t]);
            if (with_offsets) forge__avx2_offset(w->offset, xt, &offsets[t]);
        }
    }
    for (t = 0; t < n_tokens; t++) out[t] = forge__avx2_sum(acc[t]) + offsets[t];
}

static FORGE__AVX2_FN void forge__q8_rowdot_avx2(const forge__q8_row_block *FORGE__RESTRICT w, const forge__q8_block *FORGE__RESTRICT x,
                                                 size_t x_stride, uint32_t n_tokens, uint32_t n_blocks, float *out) {
    forge__q8_rowdot_avx2_with(w, x, x_stride, n_tokens, n_blocks, out, 1);
}

#if defined(__AVX512VNNI__) && defined(__AVX512VL__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define FORGE__VNNI 1
#define FORGE__VNNI_FN
#define FORGE__VNNI_PRESENT() 1
#elif (defined(__clang__) && __clang_major__ >= 7) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 8)
#define FORGE__VNNI 1
#define FORGE__VNNI_FN __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512vnni")))
#define FORGE__VNNI_PRESENT() (__builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni"))
#endif

#ifdef FORGE__VNNI

/* ---- products on AVX-512 VNNI with 8 blocks side by side ----
   A row's group of 8 blocks of 32 (a K-quant super-block, or 8 blocks of a 32-element type) meets a
   token as 8 integer sums, one per block, in the 8 lanes of one vector, which then meet the blocks'
   scales and the token's d in one multiply and one fused add for all 8 (instead of one of each per
   block): lane l of a (row, token)'s accumulator holds the sum over groups of block l's terms, and the
   lanes are added in a fixed order at the end. One token takes block l's sums straight from the file's
   bytes (vpdpbusd per block, then the 8 blocks' lanes folded together); a step of more tokens unpacks
   each row once with its blocks' bytes transposed (vector k holding bytes 4k..4k+3 of every block),
   against the tokens transposed the same way, so that vpdpbusd leaves each block's sum in its own lane,
   and runs 4 rows against 4 tokens at a time. The integers are exact either way and the floats are the
   same operations in the same order, so a token's sums do not depend on its step. Weights go in
   unsigned (Q4_0's nibbles, Q5_0's 5 bits, Q8_0's bytes + 128, Q6_K's 6 bits); the bias comes back
   through the token's sums of each 16. A row's last group may have fewer than 8 blocks: its missing
   lanes are zeros in both forms. */
typedef struct forge__q8_tile_x {
    int8_t q[8][32];   /* q[k][4l + j]: byte 4k + j of block l */
    float d[8], ds[8]; /* block l's d and d times the sum of its bytes */
    int32_t sum[2][8]; /* the sums of block l's bytes 0..15 and 16..31 */
} forge__q8_tile_x;

typedef struct forge__k_tile_w {
    uint8_t q[8][32];          /* as forge__q8_tile_x's q, unsigned */
    float scale[8], offset[8]; /* block l's scale and minimum (Q4_K: d times its scale, -dmin times its minimum) */
    int32_t sc[2][8];          /* Q6_K: block l's scales of bytes 0..15 and 16..31 (the float scale is d) */
} forge__k_tile_w;

/* Helpers small enough to inline into the kernels that call them with a constant type. */
#define FORGE__INLINE_VNNI inline FORGE__VNNI_FN
/* The kernels proper, inlined into each type's entry so that its branches on the type fold away. */
#define FORGE__KERNEL_VNNI inline __attribute__((always_inline)) FORGE__VNNI_FN

/* v[l] lanes 4k..4k+3 -> out[k] lanes l: an 8 x 8 transpose of 32-bit words. */
static FORGE__INLINE_VNNI void forge__vnni_transpose(const __m256i v[8], __m256i out[8]) {
    __m256i t[8], u[8];
    int i;
    FORGE__UNROLL
    for (i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
    }
    FORGE__UNROLL
    for (i = 0; i < 2; i++) {
        u[4 * i] = _mm256_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm256_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm256_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm256_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    FORGE__UNROLL
    for (i = 0; i < 4; i++) {
        out[i] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x20);
        out[i + 4] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x31);
    }
}

/* The sums of lanes 0..3 (bytes 0..15) and of lanes 4..7 (bytes 16..31) of v[l], into lane l
   (unpacks and adds: cheaper here than hadd). */
static FORGE__INLINE_VNNI void forge__vnni_fold(const __m256i v[8], __m256i *half0, __m256i *half1) {
    __m256i a[4], b0, b1;
    int i;
    FORGE__UNROLL
    for (i = 0; i < 4; i++)
        a[i] = _mm256_add_epi32(_mm256_unpacklo_epi32(v[2 * i], v[2 * i + 1]), _mm256_unpackhi_epi32(v[2 * i], v[2 * i + 1]));
    b0 = _mm256_add_epi32(_mm256_unpacklo_epi64(a[0], a[1]), _mm256_unpackhi_epi64(a[0], a[1]));
    b1 = _mm256_add_epi32(_mm256_unpacklo_epi64(a[2], a[3]), _mm256_unpackhi_epi64(a[2], a[3]));
    *half0 = _mm256_permute2x128_si256(b0, b1, 0x20);
    *half1 = _mm256_permute2x128_si256(b0, b1, 0x31);
}

/* The bytes of a group of 8 blocks of `type`, and how far the unsigned weights stand above the signed
   ones (a power of two: its log, -1 for none). */
static FORGE__INLINE_VNNI uint32_t forge__vnni_group_bytes(uint32_t type) {
    return type == FORGE_TYPE_Q4_K || type == FORGE_TYPE_Q5_K || type == FORGE_TYPE_Q6_K ? forge__q8_unit_bytes(type)
                                                                                          : 8u * forge__q8_unit_bytes(type);
}
static FORGE__INLINE_VNNI int forge__vnni_bias_log(uint32_t type) {
    return type == FORGE_TYPE_Q4_0 ? 3 : type == FORGE_TYPE_Q5_0 ? 4 : type == FORGE_TYPE_Q8_0 ? 7 : -1;
}

/* The halves at the start of 8 blocks (the first n, the rest 0), stride bytes apart, as floats: the
   first of each in *d, the second in *m (one gather of 4 bytes a block, none past the n-th). */
static FORGE__INLINE_VNNI void forge__vnni_halves(const uint8_t *w, uint32_t stride, uint32_t n, __m256 *d, __m256 *m) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i words;
    if (n == 8) {
        words = _mm256_i32gather_epi32((const int *)(const void *)w, _mm256_mullo_epi32(lane, _mm256_set1_epi32((int)stride)), 1);
    } else { /* blocks past the n-th read the n-th again (no byte past the row) and become zeros */
        const __m256i last = _mm256_min_epi32(lane, _mm256_set1_epi32((int)n - 1));
        words = _mm256_i32gather_epi32((const int *)(const void *)w, _mm256_mullo_epi32(last, _mm256_set1_epi32((int)stride)), 1);
        words = _mm256_and_si256(words, _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), lane));
    }
    { /* the low (high) 16 bits of each word into the low 8 bytes of each 128-bit half, then the halves together */
        const __m256i low = _mm256_shuffle_epi8(words, _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15, 0, 1, 4, 5,
                                                                         8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15));
        const __m256i both = _mm256_permute4x64_epi64(low, 0xd8); /* qwords 0, 2 (the firsts), 1, 3 (the seconds) */
        *d = _mm256_cvtph_ps(_mm256_castsi256_si128(both));
        *m = _mm256_cvtph_ps(_mm256_extracti128_si256(both, 1));
    }
}

/* The 16 bytes at q as 32 nibbles (low ones in bytes 0..15, high ones in 16..31), from one broadcast load. */
static FORGE__INLINE_VNNI __m256i forge__vnni_nibbles(const uint8_t *q) {
    const __m256i raw = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)q));
    return _mm256_and_si256(_mm256_srlv_epi64(raw, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(0xf));
}

/* A Q4_K/Q5_K super-block's 8 scales (d times each) and minimums (-dmin times each), block l in lane l:
   forge__k4_scale_min's table in one vector (bytes 0..7 the scales, 8..15 the minimums; 6 bits each,
   blocks 4..7 from a low or high nibble of bytes 8..11 with 2 high bits from the top of bytes 0..7). */
static FORGE__INLINE_VNNI void forge__vnni_k4_scales(const uint8_t *w, __m256 *scale, __m256 *offset) {
    const __m128i raw = _mm_loadu_si128((const __m128i *)(const void *)w); /* d, dmin, 12 bytes of scales */
    const __m128i a = _mm_shuffle_epi8(raw, _mm_setr_epi8(4, 5, 6, 7, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15));
    const __m128i b = _mm_shuffle_epi8(raw, _mm_setr_epi8(-1, -1, -1, -1, 4, 5, 6, 7, -1, -1, -1, -1, 8, 9, 10, 11));
    const __m128i low = _mm_and_si128(a, _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0));
    const __m128i high = _mm_and_si128(_mm_srli_epi16(a, 4), _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15));
    const __m128i top = _mm_and_si128(_mm_srli_epi16(b, 2), _mm_set1_epi8(0x30));
    const __m128i table = _mm_or_si128(_mm_or_si128(low, high), top);
    const __m128 dm = _mm_cvtph_ps(raw); /* d, dmin */
    *scale = _mm256_mul_ps(_mm256_broadcastss_ps(dm), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(table)));
    *offset = _mm256_mul_ps(_mm256_broadcastss_ps(_mm_xor_ps(_mm_movehdup_ps(dm), _mm_set1_ps(-0.0f))),
                            _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(table, 8))));
}

/* A Q6_K super-block's d, and the scales of block l's bytes 0..15 (sc0) and 16..31 (sc1) in lane l. */
static FORGE__INLINE_VNNI void forge__vnni_q6_scales(const uint8_t *w, __m256 *scale, __m256i *sc0, __m256i *sc1) {
    const __m128i s = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(w + 192)),
                                       _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
    *sc0 = _mm256_cvtepi8_epi32(s);
    *sc1 = _mm256_cvtepi8_epi32(_mm_srli_si128(s, 8));
    *scale = _mm256_set1_ps(forge__avx2_half(w + 208));
}

/* A group of n blocks of `type` at w (n = 8 but in a 32-element type's last group): block l's unsigned
   bytes in v[l] as the file lays them out (zeros past n), the scales and minimums of block l in lane l
   (Q6_K: d, its scales in sc0/sc1). */
static FORGE__INLINE_VNNI void forge__vnni_group(uint32_t type, const uint8_t *w, uint32_t n, __m256i v[8], __m256 *scale,
                                                 __m256 *offset, __m256i *sc0, __m256i *sc1) {
    const __m256i mask = _mm256_set1_epi8(0xf), three = _mm256_set1_epi8(3);
    const uint32_t bytes = forge__q8_unit_bytes(type);
    int i;
    *offset = _mm256_setzero_ps();
    *sc0 = *sc1 = _mm256_setzero_si256();
    if (type == FORGE_TYPE_Q4_K || type == FORGE_TYPE_Q5_K) {
        FORGE__UNROLL
        for (i = 0; i < 4; i++) {
            const __m256i raw = forge__avx2_load(w + (type == FORGE_TYPE_Q5_K ? 48 : 16) + 32 * i);
            v[2 * i] = _mm256_and_si256(raw, mask);
            v[2 * i + 1] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), mask);
            if (type == FORGE_TYPE_Q5_K) { /* block s's fifth bits: bit s of each of the 32 bytes at w + 16 */
                const __m256i qh = forge__avx2_load(w + 16), one = _mm256_set1_epi8(1);
                v[2 * i] = _mm256_or_si256(v[2 * i], _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * i)), one), 4));
                v[2 * i + 1] = _mm256_or_si256(v[2 * i + 1], _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * i + 1)), one), 4));
            }
        }
        forge__vnni_k4_scales(w, scale, offset);
        return;
    }
    if (type == FORGE_TYPE_Q6_K) {
        FORGE__UNROLL
        for (i = 0; i < 2; i++) { /* forge__qdot_q6_k_avx2's unpacking, without the -32 */
            const __m256i ql0 = forge__avx2_load(w + 64 * i), ql1 = forge__avx2_load(w + 64 * i + 32);
            const __m256i qh = forge__avx2_load(w + 128 + 32 * i);
            v[4 * i] = _mm256_or_si256(_mm256_and_si256(ql0, mask), _mm256_slli_epi16(_mm256_and_si256(qh, three), 4));
            v[4 * i + 1] = _mm256_or_si256(_mm256_and_si256(ql1, mask),
                                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), three), 4));
            v[4 * i + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), mask),
                                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), three), 4));
            v[4 * i + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), mask),
                                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), three), 4));
        }
        forge__vnni_q6_scales(w, scale, sc0, sc1);
        return;
    }
    FORGE__UNROLL
    for (i = 0; i < 8; i++) {
        const uint8_t *b = w + (uint32_t)i * bytes;
        if ((uint32_t)i >= n) v[i] = _mm256_setzero_si256();
        else if (type == FORGE_TYPE_Q4_0) v[i] = forge__vnni_nibbles(b + 2);
        else if (type == FORGE_TYPE_Q4_1) v[i] = forge__vnni_nibbles(b + 4);
        else if (type == FORGE_TYPE_Q5_0) v[i] = _mm256_or_si256(forge__vnni_nibbles(b + 6), forge__avx2_fifth_bits(forge__le32(b + 2)));
        else if (type == FORGE_TYPE_Q5_1) v[i] = _mm256_or_si256(forge__vnni_nibbles(b + 8), forge__avx2_fifth_bits(forge__le32(b + 4)));
        else v[i] = _mm256_xor_si256(forge__avx2_load(b + 2), _mm256_set1_epi8((char)0x80)); /* Q8_0 */
    }
    {
        __m256 minimum;
        forge__vnni_halves(w, bytes, n, scale, &minimum);
        if (type == FORGE_TYPE_Q4_1 || type == FORGE_TYPE_Q5_1) *offset = minimum;
    }
}

/* A group's 8 block sums of a (row, token): the half sums with the bias taken out (Q6_K: with its
   scales), into the token's lanes. */
static FORGE__INLINE_VNNI __m256i forge__vnni_sums(uint32_t type, __m256i half0, __m256i half1, __m256i sc0, __m256i sc1,
                                                   const forge__q8_tile_x *x) {
    const int bias_log = forge__vnni_bias_log(type);
    if (type == FORGE_TYPE_Q6_K) {
        const __m256i s0 = _mm256_slli_epi32(_mm256_loadu_si256((const __m256i *)x->sum[0]), 5);
        const __m256i s1 = _mm256_slli_epi32(_mm256_loadu_si256((const __m256i *)x->sum[1]), 5);
        return _mm256_add_epi32(_mm256_mullo_epi32(_mm256_sub_epi32(half0, s0), sc0), _mm256_mullo_epi32(_mm256_sub_epi32(half1, s1), sc1));
    }
    if (bias_log >= 0) {
        const __m256i s = _mm256_add_epi32(_mm256_loadu_si256((const __m256i *)x->sum[0]), _mm256_loadu_si256((const __m256i *)x->sum[1]));
        return _mm256_sub_epi32(_mm256_add_epi32(half0, half1), _mm256_sll_epi32(s, _mm_cvtsi32_si128(bias_log)));
    }
    return _mm256_add_epi32(half0, half1);
}

static FORGE__INLINE_VNNI int forge__vnni_has_offsets(uint32_t type) {
    return type == FORGE_TYPE_Q4_K || type == FORGE_TYPE_Q5_K || type == FORGE_TYPE_Q4_1 || type == FORGE_TYPE_Q5_1;
}

/* A group's sums into a (row, token)'s lanes. */
static FORGE__INLINE_VNNI void forge__vnni_step(uint32_t type, __m256i sums, __m256 scale, __m256 offset, const forge__q8_tile_x *x,
                                                __m256 *acc, __m256 *offsets) {
    *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_mul_ps(scale, _mm256_loadu_ps(x->d)), *acc);
    if (forge__vnni_has_offsets(type)) *offsets = _mm256_fmadd_ps(offset, _mm256_loadu_ps(x->ds), *offsets);
}

static FORGE__INLINE_VNNI float forge__vnni_total(uint32_t type, __m256 acc, __m256 offsets) {
    return forge__vnni_has_offsets(type) ? forge__avx2_sum(acc) + forge__avx2_sum(offsets) : forge__avx2_sum(acc) + 0.0f;
}

/* One group of n blocks of a row against one token (x its blocks, tx the same transposed). */
static FORGE__INLINE_VNNI void forge__vnni_dot_group(uint32_t type, const uint8_t *w, uint32_t n, const forge__q8_block *x,
                                                     const forge__q8_tile_x *tx, __m256 *acc, __m256 *offsets) {
    __m256i v[8], half0, half1, sc0, sc1;
    __m256 scale, offset;
    int l;
    forge__vnni_group(type, w, n, v, &scale, &offset, &sc0, &sc1);
    FORGE__UNROLL
    for (l = 0; l < 8; l++)
        if ((uint32_t)l < n) v[l] = _mm256_dpbusd_epi32(_mm256_setzero_si256(), v[l], forge__avx2_load(x[l].q));
    forge__vnni_fold(v, &half0, &half1);
    forge__vnni_step(type, forge__vnni_sums(type, half0, half1, sc0, sc1, tx), scale, offset, tx, acc, offsets);
}

/* A Q4_K or Q6_K super-block's weights straight into the transposed form of forge__k_tile_w's q:
   cols[p] holds columns k = 2p (lanes 0..7) and 2p + 1 (lanes 8..15), lane l of column k being bytes
   4k..4k+3 of block l, each from one two-source permute of the super-block's dwords and a shift per
   lane to its nibble (Q6_K: its two high bits the same way), in place of unpacking the 8 blocks and
   transposing them. */
static FORGE__INLINE_VNNI void forge__vnni_k_columns(uint32_t type, const uint8_t *w, __m512i cols[4]) {
    const __mmask16 all = 0xffff; /* zero-masked forms: g++ 12 warns on the plain ones' undefined pass-through */
    int pair;
    if (type == FORGE_TYPE_Q4_K) { /* 4 chunks of 32 bytes at w + 16: chunk i's low nibbles block 2i, high ones 2i + 1 */
        const __m512i lo = _mm512_loadu_si512((const void *)(w + 16)), hi = _mm512_loadu_si512((const void *)(w + 80));
        const __m512i idx = _mm512_setr_epi32(0, 0, 8, 8, 16, 16, 24, 24, 1, 1, 9, 9, 17, 17, 25, 25);
        const __m512i shift = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4), mask = _mm512_set1_epi8(0x0f);
        FORGE__UNROLL
        for (pair = 0; pair < 4; pair++) {
            const __m512i q = _mm512_permutex2var_epi32(lo, _mm512_add_epi32(idx, _mm512_set1_epi32(2 * pair)), hi);
            cols[pair] = _mm512_and_si512(_mm512_maskz_srlv_epi32(all, q, shift), mask);
        }
    } else { /* Q6_K: block 4i + m takes the low (m < 2) or high nibbles of ql[64i + 32 (m & 1)..], bits 2m of qh[32i..] */
        const __m512i ql0 = _mm512_loadu_si512((const void *)w), ql1 = _mm512_loadu_si512((const void *)(w + 64));
        const __m512i qh = _mm512_loadu_si512((const void *)(w + 128));
        const __m512i idx_l = _mm512_setr_epi32(0, 8, 0, 8, 16, 24, 16, 24, 1, 9, 1, 9, 17, 25, 17, 25);
        const __m512i idx_h = _mm512_setr_epi32(0, 0, 0, 0, 8, 8, 8, 8, 1, 1, 1, 1, 9, 9, 9, 9);
        const __m512i shift_l = _mm512_setr_epi32(0, 0, 4, 4, 0, 0, 4, 4, 0, 0, 4, 4, 0, 0, 4, 4);
        const __m512i shift_h = _mm512_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6);
        const __m512i low = _mm512_set1_epi8(0x0f), high = _mm512_set1_epi8(0x30);
        FORGE__UNROLL
        for (pair = 0; pair < 4; pair++) {
            const __m512i step = _mm512_set1_epi32(2 * pair);
            const __m512i l = _mm512_maskz_srlv_epi32(all, _mm512_permutex2var_epi32(ql0, _mm512_add_epi32(idx_l, step), ql1), shift_l);
            const __m512i h = _mm512_maskz_slli_epi32(all, _mm512_maskz_srlv_epi32(all, _mm512_maskz_permutexvar_epi32(all, _mm512_add_epi32(idx_h, step), qh), shift_h), 4);
            cols[pair] = _mm512_ternarylogic_epi32(_mm512_and_si512(l, low), h, high, 0xf8); /* a | (b & c) */
        }
    }
}

/* A Q4_K super-block against one token in the transposed form: forge__vnni_k_columns against tx's
   columns, so that vpdpbusd leaves block l's sum in lane l with no fold afterwards (the integers of
   forge__vnni_dot_group, in about two thirds of its instructions). */
static FORGE__INLINE_VNNI __m256i forge__vnni_q4_k_sums(const uint8_t *w, const forge__q8_tile_x *tx) {
    __m512i cols[4], s0, s1;
    forge__vnni_k_columns(FORGE_TYPE_Q4_K, w, cols);
    s0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), cols[0], _mm512_loadu_si512((const void *)tx->q[0]));
    s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), cols[1], _mm512_loadu_si512((const void *)tx->q[2]));
    s0 = _mm512_dpbusd_epi32(s0, cols[2], _mm512_loadu_si512((const void *)tx->q[4])); /* two chains */
    s1 = _mm512_dpbusd_epi32(s1, cols[3], _mm512_loadu_si512((const void *)tx->q[6]));
    s0 = _mm512_add_epi32(s0, s1);
    /* the halves through the zero-masked extracts: g++ 12 warns on the plain ones' undefined pass-through */
    return _mm256_add_epi32(_mm512_maskz_extracti64x4_epi64(0xf, s0, 0), _mm512_maskz_extracti64x4_epi64(0xf, s0, 1));
}

/* One row (n_blocks blocks) against one token. */
static FORGE__KERNEL_VNNI float forge__vnni_dot(uint32_t type, const uint8_t *FORGE__RESTRICT w, const forge__q8_block *FORGE__RESTRICT x,
                                                const forge__q8_tile_x *FORGE__RESTRICT tx, uint32_t n_blocks) {
    const uint32_t group_bytes = forge__vnni_group_bytes(type);
    __m256 acc = _mm256_setzero_ps(), offsets = _mm256_setzero_ps();
    uint32_t b;
    if (type == FORGE_TYPE_Q4_K) { /* whole super-blocks (Q6_K measured no faster this way: 8.5 against 8.0 ns a super-block) */
        for (b = 0; b < n_blocks; b += 8, w += group_bytes, tx++) {
            __m256 scale, offset;
            forge__vnni_k4_scales(w, &scale, &offset);
            forge__vnni_step(type, forge__vnni_q4_k_sums(w, tx), scale, offset, tx, &acc, &offsets);
        }
        return forge__vnni_total(type, acc, offsets);
    }
    for (b = 0; b + 8 <= n_blocks; b += 8, w += group_bytes, x += 8, tx++) forge__vnni_dot_group(type, w, 8, x, tx, &acc, &offsets);
    if (b < n_blocks) forge__vnni_dot_group(type, w, n_blocks - b, x, tx, &acc, &offsets);
    return forge__vnni_total(type, acc, offsets);
}

/* A row of n_blocks blocks into its transposed form. */
static FORGE__KERNEL_VNNI void forge__vnni_unpack(uint32_t type, const uint8_t *FORGE__RESTRICT w, forge__k_tile_w *FORGE__RESTRICT out,
                                                  uint32_t n_blocks) {
    const uint32_t group_bytes = forge__vnni_group_bytes(type);
    uint32_t b;
    if (type == FORGE_TYPE_Q4_K || type == FORGE_TYPE_Q6_K) { /* whole super-blocks, no transpose */
        for (b = 0; b < n_blocks; b += 8, w += group_bytes, out++) {
            __m512i cols[4];
            __m256i sc0 = _mm256_setzero_si256(), sc1 = _mm256_setzero_si256();
            __m256 scale, offset = _mm256_setzero_ps();
            int pair;
            forge__vnni_k_columns(type, w, cols);
            FORGE__UNROLL
            for (pair = 0; pair < 4; pair++) _mm512_storeu_si512((void *)out->q[2 * pair], cols[pair]);
            if (type == FORGE_TYPE_Q4_K) forge__vnni_k4_scales(w, &scale, &offset);
            else forge__vnni_q6_scales(w, &scale, &sc0, &sc1);
            _mm256_storeu_si256((__m256i *)out->sc[0], sc0);
            _mm256_storeu_si256((__m256i *)out->sc[1], sc1);
            _mm256_storeu_ps(out->scale, scale);
            _mm256_storeu_ps(out->offset, offset);
        }
        return;
    }
    for (b = 0; b < n_blocks; b += 8, w += group_bytes, out++) {
        __m256i v[8], t[8], sc0, sc1;
        __m256 scale, offset;
        int k;
        forge__vnni_group(type, w, FORGE__MIN(8u, n_blocks - b), v, &scale, &offset, &sc0, &sc1);
        forge__vnni_transpose(v, t);
        FORGE__UNROLL
        for (k = 0; k < 8; k++) _mm256_storeu_si256((__m256i *)out->q[k], t[k]);
        _mm256_storeu_si256((__m256i *)out->sc[0], sc0);
        _mm256_storeu_si256((__m256i *)out->sc[1], sc1);
        _mm256_storeu_ps(out->scale, scale);
        _mm256_storeu_ps(out->offset, offset);
    }
}

/* A token's n_blocks blocks into their transposed form (a last group of fewer than 8: zeros after). */
static FORGE__VNNI_FN void forge__vnni_x_transpose(const forge__q8_block *FORGE__RESTRICT x, forge__q8_tile_x *FORGE__RESTRICT out,
                                                   uint32_t n_blocks) {
    const __m256i ones = _mm256_set1_epi8(1);
    uint32_t b;
    for (b = 0; b < n_blocks; b += 8, x += 8, out++) {
        const uint32_t n = FORGE__MIN(8u, n_blocks - b);
        __m256i v[8], t[8], half0, half1;
        uint32_t l;
        for (l = 0; l < 8; l++) {
            v[l] = l < n ? forge__avx2_load(x[l].q) : _mm256_setzero_si256();
            out->d[l] = l < n ? x[l].d : 0.0f;
            out->ds[l] = l < n ? x[l].ds : 0.0f;
        }
        forge__vnni_transpose(v, t);
        for (l = 0; l < 8; l++) {
            _mm256_storeu_si256((__m256i *)out->q[l], t[l]);
            v[l] = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ones, v[l]);
        }
        forge__vnni_fold(v, &half0, &half1);
        _mm256_storeu_si256((__m256i *)out->sum[0], half0);
        _mm256_storeu_si256((__m256i *)out->sum[1], half1);
    }
}

/* The tile of a step: FORGE__KTILE_ROWS transposed rows (w + r * w_stride) against up to
   FORGE__KTILE_TOKENS tokens (x + t * x_stride), out[r * FORGE__KTILE_TOKENS + t], over n_groups groups.
   The lanes of missing tokens repeat the last one's work and are dropped. */
#ifndef FORGE__KTILE_ROWS
#define FORGE__KTILE_ROWS 4
#endif
#ifndef FORGE__KTILE_TOKENS
#define FORGE__KTILE_TOKENS 4
#endif
static FORGE__KERNEL_VNNI void forge__vnni_tile(uint32_t type, const forge__k_tile_w *FORGE__RESTRICT w, size_t w_stride,
                                                const forge__q8_tile_x *FORGE__RESTRICT x, size_t x_stride, uint32_t n_tokens,
                                                uint32_t n_groups, float *out) {
    enum { R = FORGE__KTILE_ROWS, T = FORGE__KTILE_TOKENS };
    const int six = type == FORGE_TYPE_Q6_K;
    __m256 acc[R][T], offsets[R][T];
    uint32_t s, r, t, k;
    for (r = 0; r < R; r++)
        for (t = 0; t < T; t++) acc[r][t] = offsets[r][t] = _mm256_setzero_ps();
    for (s = 0; s < n_groups; s++) {
        const forge__k_tile_w *wr[R];
        const forge__q8_tile_x *xt[T];
        __m256i half0[R][T], half1[R][T];
        FORGE__UNROLL
        for (r = 0; r < R; r++) wr[r] = w + r * w_stride + s;
        FORGE__UNROLL
        for (t = 0; t < T; t++) xt[t] = x + (t < n_tokens ? t : n_tokens - 1) * x_stride + s;
        FORGE__UNROLL
        for (r = 0; r < R; r++) {
            FORGE__UNROLL
            for (t = 0; t < T; t++) half0[r][t] = half1[r][t] = _mm256_setzero_si256();
        }
        FORGE__UNROLL
        for (k = 0; k < 8; k++) {
            __m256i wv[R];
            FORGE__UNROLL
            for (r = 0; r < R; r++) wv[r] = _mm256_loadu_si256((const __m256i *)wr[r]->q[k]);
            FORGE__UNROLL
            for (t = 0; t < T; t++) {
                const __m256i xv = _mm256_loadu_si256((const __m256i *)xt[t]->q[k]);
                FORGE__UNROLL
                for (r = 0; r < R; r++) {
                    if (six && k >= 4) half1[r][t] = _mm256_dpbusd_epi32(half1[r][t], wv[r], xv);
                    else half0[r][t] = _mm256_dpbusd_epi32(half0[r][t], wv[r], xv);
                }
            }
        }
        FORGE__UNROLL
        for (r = 0; r < R; r++) {
            const __m256 scale = _mm256_loadu_ps(wr[r]->scale), offset = _mm256_loadu_ps(wr[r]->offset);
            const __m256i sc0 = _mm256_loadu_si256((const __m256i *)wr[r]->sc[0]);
            const __m256i sc1 = _mm256_loadu_si256((const __m256i *)wr[r]->sc[1]);
            FORGE__UNROLL
            for (t = 0; t < T; t++) /* the whole block's sum is in half0 but for Q6_K: its half1 is 0 */
                forge__vnni_step(type, forge__vnni_sums(type, half0[r][t], half1[r][t], sc0, sc1, xt[t]), scale, offset, xt[t],
                                 &acc[r][t], &offsets[r][t]);
        }
    }
    for (r = 0; r < R; r++)
        for (t = 0; t < n_tokens; t++) out[r * T + t] = forge__vnni_total(type, acc[r][t], offsets[r][t]);
}

/* Each type's entries: the one-token dot product, the unpacking of a row, the tile. */
typedef float (*forge__vnni_dot_fn)(const uint8_t *FORGE__RESTRICT w, const forge__q8_block *FORGE__RESTRICT x,
                                    const forge__q8_tile_x *FORGE__RESTRICT tx, uint32_t n_blocks);
typedef void (*forge__vnni_unpack_fn)(const uint8_t *FORGE__RESTRICT w, forge__k_tile_w *FORGE__RESTRICT out, uint32_t n_blocks);
typedef void (*forge__vnni_tile_fn)(const forge__k_tile_w *FORGE__RESTRICT w, size_t w_stride, const forge__q8_tile_x *FORGE__RESTRICT x,
                                    size_t x_stride, uint32_t n_tokens, uint32_t n_groups, float *out);
typedef void (*forge__vnni_rows_fn)(const uint8_t *FORGE__RESTRICT w, uint64_t row_bytes, uint32_t n_rows, const forge__q8_block *FORGE__RESTRICT x,
                                    const forge__q8_tile_x *FORGE__RESTRICT tx, uint32_t n_blocks, float *FORGE__RESTRICT y);
#define FORGE__VNNI_ENTRIES(name, type)                                                                                          \
    static FORGE__VNNI_FN float forge__vnni_dot_##name(const uint8_t *FORGE__RESTRICT w, const forge__q8_block *FORGE__RESTRICT x, \
                                                       const forge__q8_tile_x *FORGE__RESTRICT tx, uint32_t n_blocks) {           \
        return forge__vnni_dot(type, w, x, tx, n_blocks);                                                                        \
    }                                                                                                                            \
    static FORGE__VNNI_FN void forge__vnni_unpack_##name(const uint8_t *FORGE__RESTRICT w, forge__k_tile_w *FORGE__RESTRICT out, \
                                                         uint32_t n_blocks) {                                                    \
        forge__vnni_unpack(type, w, out, n_blocks);                                                                              \
    }                                                                                                                            \
    static FORGE__VNNI_FN void forge__vnni_tile_##name(const forge__k_tile_w *FORGE__RESTRICT w, size_t w_stride,                 \
                                                       const forge__q8_tile_x *FORGE__RESTRICT x, size_t x_stride,               \
                                                       uint32_t n_tokens, uint32_t n_groups, float *out) {                       \
        forge__vnni_tile(type, w, w_stride, x, x_stride, n_tokens, n_groups, out);                                               \
    }                                                                                                                            \
    static FORGE__VNNI_FN void forge__vnni_rows_##name(const uint8_t *FORGE__RESTRICT w, uint64_t row_bytes, uint32_t n_rows,     \
                                                       const forge__q8_block *FORGE__RESTRICT x,                                 \
                                                       const forge__q8_tile_x *FORGE__RESTRICT tx, uint32_t n_blocks,            \
                                                       float *FORGE__RESTRICT y) {                                               \
        uint32_t r;                                                                                                              \
        for (r = 0; r < n_rows; r++) y[r] = forge__vnni_dot(type, w + (size_t)r * (size_t)row_bytes, x, tx, n_blocks);            \
    }
FORGE__VNNI_ENTRIES(q4_0, FORGE_TYPE_Q4_0)
FORGE__VNNI_ENTRIES(q4_1, FORGE_TYPE_Q4_1)
FORGE__VNNI_ENTRIES(q5_0, FORGE_TYPE_Q5_0)
FORGE__VNNI_ENTRIES(q5_1, FORGE_TYPE_Q5_1)
FORGE__VNNI_ENTRIES(q8_0, FORGE_TYPE_Q8_0)
FORGE__VNNI_ENTRIES(q4_k, FORGE_TYPE_Q4_K)
FORGE__VNNI_ENTRIES(q5_k, FORGE_TYPE_Q5_K)
FORGE__VNNI_ENTRIES(q6_k, FORGE_TYPE_Q6_K)

/* The entries of a type that has them (0 where it has not): its one-token dot product, one token
   against consecutive rows (the dot inlined, so a row costs no call), the unpacking, the tile. */
typedef struct forge__vnni_forms {
    forge__vnni_dot_fn dot;
    forge__vnni_rows_fn rows;
    forge__vnni_unpack_fn unpack;
    forge__vnni_tile_fn tile;
} forge__vnni_forms;
static int forge__vnni_entries(uint32_t type, forge__vnni_forms *f) {
    switch (type) {
#define FORGE__VNNI_CASE(name, t)                                                                                                \
    case t:                                                                                                                      \
        f->dot = forge__vnni_dot_##name, f->rows = forge__vnni_rows_##name, f->unpack = forge__vnni_unpack_##name;              \
        f->tile = forge__vnni_tile_##name;                                                                                       \
        return 1;
        FORGE__VNNI_CASE(q4_0, FORGE_TYPE_Q4_0)
        FORGE__VNNI_CASE(q4_1, FORGE_TYPE_Q4_1)
        FORGE__VNNI_CASE(q5_0, FORGE_TYPE_Q5_0)
        FORGE__VNNI_CASE(q5_1, FORGE_TYPE_Q5_1)
        FORGE__VNNI_CASE(q8_0, FORGE_TYPE_Q8_0)
        FORGE__VNNI_CASE(q4_k, FORGE_TYPE_Q4_K)
        FORGE__VNNI_CASE(q5_k, FORGE_TYPE_Q5_K)
        FORGE__VNNI_CASE(q6_k, FORGE_TYPE_Q6_K)
#undef FORGE__VNNI_CASE
    default: return 0;
    }
}
#endif /* FORGE__VNNI */

static FORGE__AVX2_FN void forge__q8_rowdot_avx2_plain(const forge__q8_row_block *FORGE__RESTRICT w,
                                                       const forge__q8_block *FORGE__RESTRICT x, size_t x_stride,
                                                       uint32_t n_tokens, uint32_t n_blocks, float *out) {
    forge__q8_rowdot_avx2_with(w, x, x_stride, n_tokens, n_blocks, out, 0);
}
#endif /* FORGE__AVX2 */

/* ARM vector forms (AArch64 NEON): chosen at compile time by the compiler's own macros, vdotq_s32 where it
   targets the dot-product extension (__ARM_FEATURE_DOTPROD, e.g. -march=armv8.2-a+dotprod), widening
   multiplies (vmull_s8, vpadalq_s16) where it does not. They unpack in registers what
   forge__q8_row_unpack writes, take each block's two integer sums in vectors (exact in either way) and add
   the floats through forge__q8_block_sums in the portable order: the same floats as the portable forms,
   bit for bit, in one-token products and in steps of more tokens alike. */
#if defined(__ARM_NEON) && defined(__aarch64__)
#define FORGE__NEON 1
#include <arm_neon.h>

/* The sum of the products of 16 signed bytes, in 4 lanes. */
static int32x4_t forge__neon_dot16(int8x16_t a, int8x16_t b) {
#ifdef __ARM_FEATURE_DOTPROD
    return vdotq_s32(vdupq_n_s32(0), a, b);
#else /* each product fits 16 bits (|w| <= 128, |x| <= 127), two of them do not: widened pairwise */
    return vpadalq_s16(vpaddlq_s16(vmull_s8(vget_low_s8(a), vget_low_s8(b))), vmull_s8(vget_high_s8(a), vget_high_s8(b)));
#endif
}

/* The block's float from its 32 unpacked bytes (lo: 0..15, hi: 16..31) and x's. */
static float forge__neon_block(int8x16_t lo, int8x16_t hi, float scale0, float scale1, float offset, const forge__q8_block *x) {
    return forge__q8_block_sums(vaddvq_s32(forge__neon_dot16(lo, vld1q_s8(x->q))), vaddvq_s32(forge__neon_dot16(hi, vld1q_s8(x->q + 16))),
                                scale0, scale1, offset, x);
}

/* Byte j = 16 where bit j of `bits` (16 of them) is set, else 0. */
static uint8x16_t forge__neon_fifth_bits(uint32_t bits) {
    static const uint8_t bit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t v = vcombine_u8(vdup_n_u8((uint8_t)(bits & 0xffu)), vdup_n_u8((uint8_t)(bits >> 8 & 0xffu)));
    return vandq_u8(vtstq_u8(v, vld1q_u8(bit)), vdupq_n_u8(16));
}

/* Q4_0, Q4_1 (one: unsigned nibbles and a minimum), Q5_0, Q5_1 (five: a fifth bit from a word) */
static float forge__qdot_small_neon(const uint8_t *FORGE__RESTRICT w, const forge__q8_block *FORGE__RESTRICT x, uint32_t n_blocks,
                                    int one, int five) {
    const uint32_t bytes = 18u + 2u * (uint32_t)one + 4u * (uint32_t)five;
    const uint8x16_t mask = vdupq_n_u8(0xf);
    const int8x16_t bias = vdupq_n_s8((int8_t)(one ? 0 : five ? 16 : 8));
    float total = 0.0f;
    uint32_t b;
    for (b = 0; b < n_blocks; b++, w += bytes, x++) {
        const uint8x16_t raw = vld1q_u8(w + 2 + 2 * one + 4 * five);
        uint8x16_t q0 = vandq_u8(raw, mask), q1 = vshrq_n_u8(raw, 4);
        if (five) {
            const uint32_t high = forge__le32(w + 2 + 2 * one);
            q0 = vorrq_u8(q0, forge__neon_fifth_bits(high & 0xffffu));
            q1 = vorrq_u8(q1, forge__neon_fifth_bits(high >> 16));
        }
        total += forge__neon_block(vsubq_s8(vreinterpretq_s8_u8(q0), bias), vsubq_s8(vreinterpretq_s8_u8(q1), bias),
                                   forge__half_at(w), forge__half_at(w), one ? forge__half_at(w + 2) : 0.0f, x);
    }
    return total;
}

static float forge__qdot_q4_0_neon(const uint8_t *FORGE__RESTRICT w, const forge__q8_block *FORGE__RESTRICT x, uint32_t n_blocks) {
    return forge__qdot_small_neon(w, x, n_blocks, 0, 0);
}
static float forge__qdot_q4_1_neon(const uint8_t *FORGE__RESTRICT w, const forge__q8_block *FORGE__RESTRICT x, uint32_t n_blocks) {
    return forge__qdot_small_neon(w, x, n_blocks, 1, 0);
}
static float forge__qdot_q5_0_neon(const uint8_t *FORGE__RESTRICT w, const forge__q8_block *FORGE__RESTRICT x, uint32_t n_blocks) {
    return forge__qdot_small_neon(w, x, n_blocks, 0, 1);
}
static float forge__qdot_q5_1_neon(const uint8_t *FORGE__RESTRICT w, const forge__q8_block *FORGE__RESTRICT x, uint32_t n_blocks) {
    return forge__qdot_small_neon(w, x, n_blocks, 1, 1);
}

static float forge__qdot_q8_0_neon(const uint8_t *FORGE__RESTRICT w, const forge__q8_block *FORGE__RESTRICT x, uint32_t n_blocks) {
    float total = 0.0f;
    uint32_t b;
    for (b = 0; b < n_blocks; b++, w += 34, x++) {
        const float d = forge__half_at(w);
        total += forge__neon_block(vld1q_s8((const int8_t *)(w + 2)), vld1q_s8((const int8_t *)(w + 18)), d, d, 0.0f, x);
    }
    return total;
}

/* Q4_K and Q5_K (five): sub-block `sub` of a super-block is nibble (sub & 1) of bytes 32 * (sub / 2)..,
   Q5_K's fifth bit bit `sub` of qh; a 6-bit scale and minimum each. */
static float forge__qdot_k_neon(const uint8_t *FORGE__RESTRICT w, const forge__q8_block *FORGE__RESTRICT x, uint32_t n_blocks,
                                int five) {
    const uint8x16_t mask = vdupq_n_u8(0xf), sixteen = vdupq_n_u8(16);
    float total = 0.0f;
    uint32_t b;
    for (b = 0; b < n_blocks / 8; b++, w += five ? 176 : 144) {
        const float d = forge__half_at(w), dmin = forge__half_at(w + 2);
        const uint8_t *qs = w + (five ? 48 : 16);
        const uint8x16_t qh0 = vld1q_u8(w + 16), qh1 = vld1q_u8(w + 32);
        int sub;
        for (sub = 0; sub < 8; sub++, x++) {
            const uint8x16_t raw0 = vld1q_u8(qs + 32 * (sub / 2)), raw1 = vld1q_u8(qs + 32 * (sub / 2) + 16);
            uint8x16_t q0 = sub & 1 ? vshrq_n_u8(raw0, 4) : vandq_u8(raw0, mask);
            uint8x16_t q1 = sub & 1 ? vshrq_n_u8(raw1, 4) : vandq_u8(raw1, mask);
            int sc, mn;
            if (five) {
                const uint8x16_t bit = vdupq_n_u8((uint8_t)(1u << sub));
                q0 = vorrq_u8(q0, vandq_u8(vtstq_u8(qh0, bit), sixteen));
                q1 = vorrq_u8(q1, vandq_u8(vtstq_u8(qh1, bit), sixteen));
            }
            forge__k4_scale_min(sub, w + 4, &sc, &mn);
            total += forge__neon_block(vreinterpretq_s8_u8(q0), vreinterpretq_s8_u8(q1), d * (float)sc, d * (float)sc,
                                       -dmin * (float)mn, x);
        }
    }
    return total;
}

static float forge__qdot_q4_k_neon(const uint8_t *FORGE__RESTRICT w, const forge__q8_block *FORGE__RESTRICT x, uint32_t n_blocks) {
    return forge__qdot_k_neon(w, x, n_blocks, 0);
}
static float forge__qdot_q5_k_neon(const uint8_t *FORGE__RESTRICT w, const forge__q8_block *FORGE__RESTRICT x, uint32_t n_blocks) {
    return forge__qdot_k_neon(w, x, n_blocks, 1);
}

/* Q6_K: half h's sub-block k is nibble k >> 1 of ql bytes 64 h + 32 (k & 1).., bits 2k..2k+1 of qh, less 32. */
static float forge__qdot_q6_k_neon(const uint8_t *FORGE__RESTRICT w, const forge__q8_block *FORGE__RESTRICT x, uint32_t n_blocks) {
    const uint8x16_t mask = vdupq_n_u8(0xf), three = vdupq_n_u8(3);
    const int8x16_t bias = vdupq_n_s8(32);
    float total = 0.0f;
    uint32_t b;
    for (b = 0; b < n_blocks / 8; b++, w += 210) {
        const float d = forge__half_at(w + 208);
        int half, k;
        for (half = 0; half < 2; half++) {
            const uint8_t *ql = w + 64 * half, *qhp = w + 128 + 32 * half;
            const int8_t *scales = (const int8_t *)(w + 192) + 8 * half;
            const uint8x16_t qh0 = vld1q_u8(qhp), qh1 = vld1q_u8(qhp + 16);
            for (k = 0; k < 4; k++, x++) {
                const uint8_t *lo = ql + 32 * (k & 1);
                const uint8x16_t raw0 = vld1q_u8(lo), raw1 = vld1q_u8(lo + 16);
                const int8x16_t down = vdupq_n_s8((int8_t)(-2 * k));
                const uint8x16_t h0 = vshlq_n_u8(vandq_u8(vshlq_u8(qh0, down), three), 4);
                const uint8x16_t h1 = vshlq_n_u8(vandq_u8(vshlq_u8(qh1, down), three), 4);
                const uint8x16_t q0 = vorrq_u8(k >> 1 ? vshrq_n_u8(raw0, 4) : vandq_u8(raw0, mask), h0);
                const uint8x16_t q1 = vorrq_u8(k >> 1 ? vshrq_n_u8(raw1, 4) : vandq_u8(raw1, mask), h1);
                total += forge__neon_block(vsubq_s8(vreinterpretq_s8_u8(q0), bias), vsubq_s8(vreinterpretq_s8_u8(q1), bias),
                                           d * (float)scales[2 * k], d * (float)scales[2 * k + 1], 0.0f, x);
            }
        }
    }
    return total;
}

/* forge__q8_rowdot with the integer sums in vectors: the same floats. */
static void forge__q8_rowdot_neon(const forge__q8_row_block *FORGE__RESTRICT w, const forge__q8_block *FORGE__RESTRICT x,
                                  size_t x_stride, uint32_t n_tokens, uint32_t n_blocks, float *out) {
    uint32_t t, b;
    for (t = 0; t < n_tokens; t++) {
        float total = 0.0f;
        for (b = 0; b < n_blocks; b++)
            total += forge__neon_block(vld1q_s8(w[b].q), vld1q_s8(w[b].q + 16), w[b].scale[0], w[b].scale[1], w[b].offset,
                                       &x[t * x_stride + b]);
        out[t] = total;
    }
}
#endif /* FORGE__NEON */

/* The vector level of the products on 8-bit activations for a request of `simd` (0 the portable forms,
   1 AVX2 or NEON, 2 also AVX-512 VNNI): the highest this machine has, up to it. */
static int forge__q8_simd_level(int simd) {
    int level = 0;
#ifdef FORGE__NEON
    if (simd > 0) level = 1; /* the compiler targets it: every machine that runs the program has it */
#endif
#ifdef FORGE__AVX2
    if (simd > 0 && FORGE__AVX2_PRESENT()) level = 1;
#ifdef FORGE__VNNI
    if (simd > 1 && level && FORGE__VNNI_PRESENT()) level = 2;
#endif
#endif
    (void)simd;
    return level;
}

/* The dot product for rows of `type` on 8-bit activations, NULL where the type has none (the f32
   products take it); the vector forms of a level forge__q8_simd_level gave. */
static forge__qdot_fn forge__qdot_for(uint32_t type, int level) {
#ifdef FORGE__AVX2
    if (level) switch (type) {
        case FORGE_TYPE_Q4_0: return forge__qdot_q4_0_avx2;
        case FORGE_TYPE_Q4_1: return forge__qdot_q4_1_avx2;
        case FORGE_TYPE_Q5_0: return forge__qdot_q5_0_avx2;
        case FORGE_TYPE_Q5_1: return forge__qdot_q5_1_avx2;
        case FORGE_TYPE_Q8_0: return forge__qdot_q8_0_avx2;
        case FORGE_TYPE_Q4_K: return forge__qdot_q4_k_avx2;
        case FORGE_TYPE_Q5_K: return forge__qdot_q5_k_avx2;
        case FORGE_TYPE_Q6_K: return forge__qdot_q6_k_avx2;
        default: break;
        }
#endif
#ifdef FORGE__NEON
    if (level) switch (type) {
        case FORGE_TYPE_Q4_0: return forge__qdot_q4_0_neon;
        case FORGE_TYPE_Q4_1: return forge__qdot_q4_1_neon;
        case FORGE_TYPE_Q5_0: return forge__qdot_q5_0_neon;
        case FORGE_TYPE_Q5_1: return forge__qdot_q5_1_neon;
        case FORGE_TYPE_Q8_0: return forge__qdot_q8_0_neon;
        case FORGE_TYPE_Q4_K: return forge__qdot_q4_k_neon;
        case FORGE_TYPE_Q5_K: return forge__qdot_q5_k_neon;
        case FORGE_TYPE_Q6_K: return forge__qdot_q6_k_neon;
        default: break;
        }
#endif
    (void)level;
    switch (type) {
    case FORGE_TYPE_Q4_0: return forge__qdot_q4_0;
    case FORGE_TYPE_Q4_1: return forge__qdot_q4_1;
    case FORGE_TYPE_Q5_0: return forge__qdot_q5_0;
    case FORGE_TYPE_Q5_1: return forge__qdot_q5_1;
    case FORGE_TYPE_Q8_0: return forge__qdot_q8_0;
    case FORGE_TYPE_Q4_K: return forge__qdot_q4_k;
    case FORGE_TYPE_Q5_K: return forge__qdot_q5_k;
    case FORGE_TYPE_Q6_K: return forge__qdot_q6_k;
    default: return NULL;
    }
}

/* A type whose blocks have a minimum (Q4_1, Q5_1, Q4_K, Q5_K) needs the offsets' sums. */
static forge__q8_rowdot_fn forge__q8_rowdot_for(uint32_t type, int level) {
#ifdef FORGE__AVX2
    const int with_offsets = type == FORGE_TYPE_Q4_1 || type == FORGE_TYPE_Q5_1 || type == FORGE_TYPE_Q4_K || type == FORGE_TYPE_Q5_K;
    if (level) return /* level 2 has its own forms (forge__vnni_entries) for every type */ with_offsets ? forge__q8_rowdot_avx2 : forge__q8_rowdot_avx2_plain;
#endif
#ifdef FORGE__NEON
    if (level) return forge__q8_rowdot_neon;
#endif
    (void)type;
    (void)level;
    return forge__q8_rowdot;
}

typedef struct forge__qmatmul_job {
    forge__qdot_fn qdot;            /* up to FORGE__VDOT_TOKENS tokens */
    forge__q8_rowdot_fn rowdot;     /* more: each row unpacked once into the thread's slot */
    uint32_t type;
    const uint8_t *w;
    uint64_t row_bytes;
    uint32_t n_rows, n_blocks, n_tokens, rows_per_task;
    const forge__q8_block *x;
    float *y;
    uint8_t *slots; /* slot_bytes per thread */
    size_t slot_bytes;
#ifdef FORGE__VNNI
    /* on AVX-512 VNNI, 8 blocks side by side: one token from the file's bytes, more on rows unpacked 4 at a time */
    int vnni;
    forge__vnni_forms forms;
    const forge__q8_tile_x *tx; /* the tokens transposed, n_groups each */
#endif
} forge__qmatmul_job;

#ifdef FORGE__VNNI
static void forge__qmatmul_task_vnni(const forge__qmatmul_job *job, uint32_t first, uint32_t end, uint32_t thread) {
    const uint32_t n_rows = job->n_rows, n_groups = (job->n_blocks + 7) / 8;
    uint32_t r, t, i;
    if (job->n_tokens == 1) {
        job->forms.rows(job->w + (size_t)first * (size_t)job->row_bytes, job->row_bytes, end - first, job->x, job->tx, job->n_blocks,
                        job->y + first);
        return;
    }
    if (job->n_tokens <= FORGE__VDOT_TOKENS) {
        for (r = first; r < end; r++) {
            const uint8_t *row = job->w + (size_t)r * (size_t)job->row_bytes;
            for (t = 0; t < job->n_tokens; t++)
                job->y[(size_t)t * n_rows + r] =
                    job->forms.dot(row, job->x + (size_t)t * job->n_blocks, job->tx + (size_t)t * n_groups, job->n_blocks);
        }
        return;
    }
    for (r = first; r < end; r += FORGE__KTILE_ROWS) {
        const uint32_t group = FORGE__MIN((uint32_t)FORGE__KTILE_ROWS, end - r);
        forge__k_tile_w *rows = (forge__k_tile_w *)(void *)(job->slots + (size_t)thread * job->slot_bytes);
        uint32_t j;
        for (i = 0; i < FORGE__KTILE_ROWS; i++) /* past the last row, the last row again */
            job->forms.unpack(job->w + (size_t)(r + FORGE__MIN(i, group - 1)) * (size_t)job->row_bytes, rows + (size_t)i * n_groups, job->n_blocks);
        for (t = 0; t < job->n_tokens; t += FORGE__KTILE_TOKENS) {
            const uint32_t n = FORGE__MIN((uint32_t)FORGE__KTILE_TOKENS, job->n_tokens - t);
            float out[FORGE__KTILE_ROWS * FORGE__KTILE_TOKENS];
            job->forms.tile(rows, n_groups, job->tx + (size_t)t * n_groups, n_groups, n, n_groups, out);
            for (j = 0; j < group; j++)
                for (i = 0; i < n; i++) job->y[(size_t)(t + i) * n_rows + r + j] = out[j * FORGE__KTILE_TOKENS + i];
        }
    }
}
#endif

static void forge__qmatmul_task(void *ctx, uint32_t task, uint32_t n_tasks, uint32_t thread) {
    const forge__qmatmul_job *job = (const forge__qmatmul_job *)ctx;
    const uint32_t first = task * job->rows_per_task, n_rows = job->n_rows, n_blocks = job->n_blocks;
    const uint32_t end = (uint32_t)FORGE__MIN((uint64_t)first + job->rows_per_task, (uint64_t)n_rows);
    uint32_t r, t, i;
    (void)n_tasks;
#ifdef FORGE__VNNI
    if (job->vnni) {
        forge__qmatmul_task_vnni(job, first, end, thread);
        return;
    }
#endif
    if (job->n_tokens <= FORGE__VDOT_TOKENS) { /* each row read once, from cache for the tokens after the first */
        for (r = first; r < end; r++) {
            const uint8_t *row = job->w + (size_t)r * (size_t)job->row_bytes;
            for (t = 0; t < job->n_tokens; t++)
                job->y[(size_t)t * n_rows + r] = job->qdot(row, job->x + (size_t)t * n_blocks, n_blocks);
        }
        return;
    }
    for (r = first; r < end; r++) {
        forge__q8_row_block *row = (forge__q8_row_block *)(void *)(job->slots + (size_t)thread * job->slot_bytes);
        forge__q8_row_unpack(job->type, job->w + (size_t)r * (size_t)job->row_bytes, row, n_blocks);
        for (t = 0; t < job->n_tokens; t += 4) {
            const uint32_t n = FORGE__MIN(4u, job->n_tokens - t);
            float out[4];
            job->rowdot(row, job->x + (size_t)t * n_blocks, n_blocks, n, n_blocks, out);
            for (i = 0; i < n; i++) job->y[(size_t)(t + i) * n_rows + r] = out[i];
        }
    }
}

typedef void (*forge__q8_quantize_fn)(const float *FORGE__RESTRICT x, forge__q8_block *FORGE__RESTRICT out, uint32_t n_blocks);

/* The tokens of a step rounded to 8 bits (and transposed for the AVX-512 VNNI forms), a task per
   group of tokens: the same bytes whichever thread rounds them. */
typedef struct forge__q8_prepare_job {
    forge__q8_quantize_fn quantize;
    const float *x;
    forge__q8_block *q;      /* the rounded tokens, n_blocks each */
    void *tx;                /* or, where not NULL, their transposed forms, n_blocks / 8 each */
    uint8_t *scratch;        /* with tx: a rounded token per thread, scratch_bytes apart */
    size_t scratch_bytes;
    uint32_t n_cols, n_tokens, tokens_per_task;
} forge__q8_prepare_job;

static void forge__q8_prepare_task(void *ctx, uint32_t task, uint32_t n_tasks, uint32_t thread) {
    const forge__q8_prepare_job *job = (const forge__q8_prepare_job *)ctx;
    const uint32_t n_blocks = job->n_cols / 32, first = task * job->tokens_per_task;
    const uint32_t end = FORGE__MIN(first + job->tokens_per_task, job->n_tokens);
    uint32_t t;
    (void)n_tasks;
    for (t = first; t < end; t++) {
#ifdef FORGE__VNNI
        if (job->tx) {
            forge__q8_block *tmp = (forge__q8_block *)(void *)(job->scratch + (size_t)thread * job->scratch_bytes);
            job->quantize(job->x + (size_t)t * job->n_cols, tmp, n_blocks);
            forge__vnni_x_transpose(tmp, (forge__q8_tile_x *)job->tx + (size_t)t * ((n_blocks + 7) / 8), n_blocks);
            continue;
        }
#endif
        (void)thread;
        job->quantize(job->x + (size_t)t * job->n_cols, job->q + (size_t)t * n_blocks, n_blocks);
    }
}

static size_t forge__q8_round_up(size_t bytes) { return (bytes + FORGE__WORK_ALIGN - 1) / FORGE__WORK_ALIGN * FORGE__WORK_ALIGN; }

/* The bytes of forge__matmul_q8's `work` per block of 32 of a token: its rounded form (40), or its
   transposed form for the products on AVX-512 VNNI (48; a row's blocks counted up to a multiple of 8). */
#define FORGE__Q8_X_BLOCK_BYTES 48
/* The bytes of a thread's slot per block of 32 of a row: one row unpacked as forge__q8_row_block (48), or
   FORGE__KTILE_ROWS rows of forge__k_tile_w (48 a block each). */
#define FORGE__Q8_SLOT_BLOCK_BYTES 192
#if defined(FORGE__VNNI) && FORGE__KTILE_ROWS * 48 > FORGE__Q8_SLOT_BLOCK_BYTES
#error "FORGE__KTILE_ROWS rows do not fit a thread's slot"
#endif

/* Bytes of forge__matmul_q8's `work` for n_tokens rows of n_cols on n_threads threads: the quantized
   activations, the rounded form of up to 4 tokens (for the transposed products), then one slot per thread. */
static FORGE__MAYBE_UNUSED size_t forge__matmul_q8_work_bytes(uint32_t n_threads, uint32_t n_cols, uint32_t n_tokens) {
    const size_t groups = (size_t)(n_cols / 32 + 7) / 8;
    return forge__q8_round_up((size_t)n_tokens * groups * 8 * FORGE__Q8_X_BLOCK_BYTES) +
           forge__q8_round_up((size_t)FORGE__VDOT_TOKENS * (n_cols / 32) * sizeof(forge__q8_block)) +
           (size_t)n_threads * forge__q8_round_up(groups * 8 * FORGE__Q8_SLOT_BLOCK_BYTES) + FORGE__WORK_ALIGN;
}

/* Whether forge__matmul_q8 handles rows of n_cols elements of this type. */
static FORGE__MAYBE_UNUSED int forge__matmul_q8_supported(uint32_t type, uint32_t n_cols) {
    return forge__qdot_for(type, 0) != NULL && forge__matmul_supported(type, n_cols);
}

/* One weight matrix of a forge__matmul_q8_parts call: rows of `type`, each row_bytes apart, into
   y[t * n_rows + r]. */
typedef struct forge__q8_part {
    uint32_t type;
    const uint8_t *w;
    uint64_t row_bytes;
    uint32_t n_rows;
    float *y;
} forge__q8_part;

#define FORGE__Q8_MAX_PARTS 4

/* The products of several matrices on the same activations, their tasks in one run of the pool. */
typedef struct forge__qmatmul_parts_job {
    forge__qmatmul_job part[FORGE__Q8_MAX_PARTS];
    uint32_t first_task[FORGE__Q8_MAX_PARTS + 1];
    uint32_t n_parts;
} forge__qmatmul_parts_job;

static void forge__qmatmul_parts_task(void *ctx, uint32_t task, uint32_t n_tasks, uint32_t thread) {
    forge__qmatmul_parts_job *job = (forge__qmatmul_parts_job *)ctx;
    uint32_t i = 0;
    while (i + 1 < job->n_parts && task >= job->first_task[i + 1]) i++;
    forge__qmatmul_task(&job->part[i], task - job->first_task[i], n_tasks, thread);
}

/* Whether forge__matmul_q8_parts takes these matrices in one call: each type supported on rows of
   n_cols, and (on AVX-512 VNNI) all with the grouped forms or none, since the activations are
   prepared for one or the other. */
static FORGE__MAYBE_UNUSED int forge__matmul_q8_parts_supported(const forge__q8_part *parts, uint32_t n_parts, uint32_t n_cols) {
    uint32_t i;
    if (n_parts == 0 || n_parts > FORGE__Q8_MAX_PARTS) return 0;
    for (i = 0; i < n_parts; i++) {
        if (!forge__matmul_q8_supported(parts[i].type, n_cols)) return 0;
#ifdef FORGE__VNNI
        {
            forge__vnni_forms forms;
            if (forge__vnni_entries(parts[i].type, &forms) != forge__vnni_entries(parts[0].type, &forms)) return 0;
        }
#endif
    }
    return 1;
}

/* forge__matmul on 8-bit activations for n_parts matrices (forge__matmul_q8_parts_supported) on the
   same n_tokens rows x of n_cols: x is rounded once into `work` (forge__matmul_q8_work_bytes(pool
   size, n_cols, n_tokens)), then every row of every matrix meets every token, all in one run of the
   pool (one wait instead of one per matrix). Each matrix gets the tasks and the sums it would get
   alone. Matrices not supported yield zeros. simd 0 runs the portable dot products (the tests'
   reference), 1 adds AVX2 where the CPU has it (NEON where the compiler targets AArch64: the portable
   sums, bit for bit), 2 AVX-512 VNNI's grouped forms where it has that. */
static FORGE__MAYBE_UNUSED void forge__matmul_q8_parts(forge__pool *p, const forge__q8_part *parts, uint32_t n_parts, uint32_t n_cols,
                                                       const float *x, uint32_t n_tokens, void *work, int simd) {
    /* the pool asked the CPU once; a call without one asks now */
    const int level = simd <= 0 ? 0 : p ? (simd < p->q8_level ? simd : p->q8_level) : forge__q8_simd_level(simd);
    const size_t groups = (size_t)(n_cols / 32 + 7) / 8;
    forge__qmatmul_parts_job all;
    forge__qmatmul_job base;
    forge__q8_prepare_job prep;
    forge__q8_block *q, *rounded;
    uint32_t i, t;
    if (n_tokens == 0) return;
    if (!forge__matmul_q8_parts_supported(parts, n_parts, n_cols) || !work) {
        for (i = 0; i < n_parts && i < FORGE__Q8_MAX_PARTS; i++) memset(parts[i].y, 0, (size_t)parts[i].n_rows * n_tokens * sizeof(float));
        return;
    }
    q = (forge__q8_block *)(void *)((uint8_t *)work + (FORGE__WORK_ALIGN - (size_t)((uintptr_t)work % FORGE__WORK_ALIGN)) %
                                                          FORGE__WORK_ALIGN);
    rounded = (forge__q8_block *)(void *)((uint8_t *)q + forge__q8_round_up((size_t)n_tokens * groups * 8 * FORGE__Q8_X_BLOCK_BYTES));
    memset(&base, 0, sizeof base);
    base.slots = (uint8_t *)rounded + forge__q8_round_up((size_t)FORGE__VDOT_TOKENS * (n_cols / 32) * sizeof(forge__q8_block));
    base.slot_bytes = forge__q8_round_up(groups * 8 * FORGE__Q8_SLOT_BLOCK_BYTES);
    prep.quantize = forge__q8_quantize;
#ifdef FORGE__AVX2
    if (level) prep.quantize = forge__q8_quantize_avx2;
#endif
    prep.x = x;
    prep.q = q;
    prep.tx = NULL;
    prep.scratch = base.slots; /* the threads' slots are free until the products start */
    prep.scratch_bytes = base.slot_bytes;
    prep.n_cols = n_cols;
    prep.n_tokens = n_tokens;
    prep.tokens_per_task = 1;
#ifdef FORGE__VNNI
    base.tx = (const forge__q8_tile_x *)(const void *)q;
    if (level > 1 && forge__vnni_entries(parts[0].type, &base.forms)) { /* the same for every part */
        base.vnni = 1;
        prep.tx = q;
        q = rounded;
    }
#endif
    if (n_tokens <= FORGE__VDOT_TOKENS) { /* a step too small to share: here, keeping the rounded tokens for the dot products */
        for (t = 0; t < n_tokens; t++) {
            prep.quantize(x + (size_t)t * n_cols, q + (size_t)t * (n_cols / 32), n_cols / 32);
#ifdef FORGE__VNNI
            if (prep.tx)
                forge__vnni_x_transpose(q + (size_t)t * (n_cols / 32), (forge__q8_tile_x *)prep.tx + (size_t)t * ((n_cols / 32 + 7) / 8),
                                        n_cols / 32);
#endif
        }
    } else {
        prep.tokens_per_task = (n_tokens + forge__pool_size(p) * 4u - 1) / (forge__pool_size(p) * 4u);
        forge__pool_run(p, forge__q8_prepare_task, &prep, (n_tokens + prep.tokens_per_task - 1) / prep.tokens_per_task);
    }
    base.n_blocks = n_cols / 32;
    base.n_tokens = n_tokens;
    base.x = q;
    all.n_parts = n_parts;
    all.first_task[0] = 0;
    for (i = 0; i < n_parts; i++) {
        forge__qmatmul_job *job = &all.part[i];
        const uint64_t macs = (uint64_t)parts[i].n_rows * n_cols * n_tokens;
        uint32_t target_tasks = macs < 65536 ? 1u : forge__pool_size(p) * 4u;
        uint64_t per_task = ((uint64_t)parts[i].n_rows + target_tasks - 1) / target_tasks;
        *job = base;
        job->qdot = forge__qdot_for(parts[i].type, level);
        job->rowdot = forge__q8_rowdot_for(parts[i].type, level);
        job->type = parts[i].type;
#ifdef FORGE__VNNI
        if (base.vnni) forge__vnni_entries(parts[i].type, &job->forms);
#endif
        job->w = parts[i].w;
        job->row_bytes = parts[i].row_bytes;
        job->n_rows = parts[i].n_rows;
        job->y = parts[i].y;
        per_task = (FORGE__MAX(per_task, 1u) + 15u) / 16u * 16u;
        job->rows_per_task = (uint32_t)FORGE__MIN(per_task, (uint64_t)UINT32_MAX - 15u);
        all.first_task[i + 1] = all.first_task[i] + (uint32_t)(((uint64_t)parts[i].n_rows + job->rows_per_task - 1) / job->rows_per_task);
    }
    forge__pool_run(p, forge__qmatmul_parts_task, &all, all.first_task[n_parts]);
}

/* forge__matmul_q8_parts for one matrix (types forge__matmul_q8_supported rejects yield zeros). */
static FORGE__MAYBE_UNUSED void forge__matmul_q8(forge__pool *p, uint32_t type, const uint8_t *w, uint64_t row_bytes,
                                                 uint32_t n_rows, uint32_t n_cols, const float *x, float *y,
                                                 uint32_t n_tokens, void *work, int simd) {
    forge__q8_part part;
    part.type = type, part.w = w, part.row_bytes = row_bytes, part.n_rows = n_rows, part.y = y;
    if (n_rows == 0 || n_tokens == 0) return;
    forge__matmul_q8_parts(p, &part, 1, n_cols, x, n_tokens, work, simd);
}

/* end of >>impl-cpu */

/* >>impl-tokenizer */

/* ---- Unicode: category flags by code point (tables generated by tools/gen_unicode.py) */
#define FORGE__CP_LETTER 1u
#define FORGE__CP_NUMBER 2u
#define FORGE__CP_PUNCT 4u
#define FORGE__CP_SYMBOL 8u
#define FORGE__CP_MARK 16u
#define FORGE__CP_SPACE 32u
#define FORGE__CP_INVALID 0xFFFFFFFFu /* a byte that does not start a valid UTF-8 sequence */

/* generated by tools/gen_unicode.py from Python 3.11.7's unicodedata (Unicode 14.0.0); do not edit */
#define FORGE__UCD_RUNS 2217
static const uint32_t forge__ucd_starts[2217] = {
    0x0, 0x9, 0xE, 0x20, 0x21, 0x24, 0x25, 0x2B, 0x2C, 0x30,
    0x3A, 0x3C, 0x3F, 0x41, 0x5B, 0x5E, 0x5F, 0x60, 0x61, 0x7B,
    0x7C, 0x7D, 0x7E, 0x7F, 0x85, 0x86, 0xA0, 0xA1, 0xA2, 0xA7,
    0xA8, 0xAA, 0xAB, 0xAC, 0xAD, 0xAE, 0xB2, 0xB4, 0xB5, 0xB6,
    0xB8, 0xB9, 0xBA, 0xBB, 0xBC, 0xBF, 0xC0, 0xD7, 0xD8, 0xF7,
    0xF8, 0x2C2, 0x2C6, 0x2D2, 0x2E0, 0x2E5, 0x2EC, 0x2ED, 0x2EE, 0x2EF,
    0x300, 0x370, 0x375, 0x376, 0x378, 0x37A, 0x37E, 0x37F, 0x380, 0x384,
    0x386, 0x387, 0x388, 0x38B, 0x38C, 0x38D, 0x38E, 0x3A2, 0x3A3, 0x3F6,
    0x3F7, 0x482, 0x483, 0x48A, 0x530, 0x531, 0x557, 0x559, 0x55A, 0x560,
    0x589, 0x58B, 0x58D, 0x590, 0x591, 0x5BE, 0x5BF, 0x5C0, 0x5C1, 0x5C3,
    0x5C4, 0x5C6, 0x5C7, 0x5C8, 0x5D0, 0x5EB, 0x5EF, 0x5F3, 0x5F5, 0x606,
    0x609, 0x60B, 0x60C, 0x60E, 0x610, 0x61B, 0x61C, 0x61D, 0x620, 0x64B,
    0x660, 0x66A, 0x66E, 0x670, 0x671, 0x6D4, 0x6D5, 0x6D6, 0x6DD, 0x6DE,
    0x6DF, 0x6E5, 0x6E7, 0x6E9, 0x6EA, 0x6EE, 0x6F0, 0x6FA, 0x6FD, 0x6FF,
    0x700, 0x70E, 0x710, 0x711, 0x712, 0x730, 0x74B, 0x74D, 0x7A6, 0x7B1,
    0x7B2, 0x7C0, 0x7CA, 0x7EB, 0x7F4, 0x7F6, 0x7F7, 0x7FA, 0x7FB, 0x7FD,
    0x7FE, 0x800, 0x816, 0x81A, 0x81B, 0x824, 0x825, 0x828, 0x829, 0x82E,
    0x830, 0x83F, 0x840, 0x859, 0x85C, 0x85E, 0x85F, 0x860, 0x86B, 0x870,
    0x888, 0x889, 0x88F, 0x898, 0x8A0, 0x8CA, 0x8E2, 0x8E3, 0x904, 0x93A,
    0x93D, 0x93E, 0x950, 0x951, 0x958, 0x962, 0x964, 0x966, 0x970, 0x971,
    0x981, 0x984, 0x985, 0x98D, 0x98F, 0x991, 0x993, 0x9A9, 0x9AA, 0x9B1,
    0x9B2, 0x9B3, 0x9B6, 0x9BA, 0x9BC, 0x9BD, 0x9BE, 0x9C5, 0x9C7, 0x9C9,
    0x9CB, 0x9CE, 0x9CF, 0x9D7, 0x9D8, 0x9DC, 0x9DE, 0x9DF, 0x9E2, 0x9E4,
    0x9E6, 0x9F0, 0x9F2, 0x9F4, 0x9FA, 0x9FC, 0x9FD, 0x9FE, 0x9FF, 0xA01,
    0xA04, 0xA05, 0xA0B, 0xA0F, 0xA11, 0xA13, 0xA29, 0xA2A, 0xA31, 0xA32,
    0xA34, 0xA35, 0xA37, 0xA38, 0xA3A, 0xA3C, 0xA3D, 0xA3E, 0xA43, 0xA47,
    0xA49, 0xA4B, 0xA4E, 0xA51, 0xA52, 0xA59, 0xA5D, 0xA5E, 0xA5F, 0xA66,
    0xA70, 0xA72, 0xA75, 0xA76, 0xA77, 0xA81, 0xA84, 0xA85, 0xA8E, 0xA8F,
    0xA92, 0xA93, 0xAA9, 0xAAA, 0xAB1, 0xAB2, 0xAB4, 0xAB5, 0xABA, 0xABC,
    0xABD, 0xABE, 0xAC6, 0xAC7, 0xACA, 0xACB, 0xACE, 0xAD0, 0xAD1, 0xAE0,
    0xAE2, 0xAE4, 0xAE6, 0xAF0, 0xAF1, 0xAF2, 0xAF9, 0xAFA, 0xB00, 0xB01,
    0xB04, 0xB05, 0xB0D, 0xB0F, 0xB11, 0xB13, 0xB29, 0xB2A, 0xB31, 0xB32,
    0xB34, 0xB35, 0xB3A, 0xB3C, 0xB3D, 0xB3E, 0xB45, 0xB47, 0xB49, 0xB4B,
    0xB4E, 0xB55, 0xB58, 0xB5C, 0xB5E, 0xB5F, 0xB62, 0xB64, 0xB66, 0xB70,
    0xB71, 0xB72, 0xB78, 0xB82, 0xB83, 0xB84, 0xB85, 0xB8B, 0xB8E, 0xB91,
    0xB92, 0xB96, 0xB99, 0xB9B, 0xB9C, 0xB9D, 0xB9E, 0xBA0, 0xBA3, 0xBA5,
    0xBA8, 0xBAB, 0xBAE, 0xBBA, 0xBBE, 0xBC3, 0xBC6, 0xBC9, 0xBCA, 0xBCE,
    0xBD0, 0xBD1, 0xBD7, 0xBD8, 0xBE6, 0xBF3, 0xBFB, 0xC00, 0xC05, 0xC0D,
    0xC0E, 0xC11, 0xC12, 0xC29, 0xC2A, 0xC3A, 0xC3C, 0xC3D, 0xC3E, 0xC45,
    0xC46, 0xC49, 0xC4A, 0xC4E, 0xC55, 0xC57, 0xC58, 0xC5B, 0xC5D, 0xC5E,
    0xC60, 0xC62, 0xC64, 0xC66, 0xC70, 0xC77, 0xC78, 0xC7F, 0xC80, 0xC81,
    0xC84, 0xC85, 0xC8D, 0xC8E, 0xC91, 0xC92, 0xCA9, 0xCAA, 0xCB4, 0xCB5,
    0xCBA, 0xCBC, 0xCBD, 0xCBE, 0xCC5, 0xCC6, 0xCC9, 0xCCA, 0xCCE, 0xCD5,
    0xCD7, 0xCDD, 0xCDF, 0xCE0, 0xCE2, 0xCE4, 0xCE6, 0xCF0, 0xCF1, 0xCF3,
    0xD00, 0xD04, 0xD0D, 0xD0E, 0xD11, 0xD12, 0xD3B, 0xD3D, 0xD3E, 0xD45,
    0xD46, 0xD49, 0xD4A, 0xD4E, 0xD4F, 0xD50, 0xD54, 0xD57, 0xD58, 0xD5F,
    0xD62, 0xD64, 0xD66, 0xD79, 0xD7A, 0xD80, 0xD81, 0xD84, 0xD85, 0xD97,
    0xD9A, 0xDB2, 0xDB3, 0xDBC, 0xDBD, 0xDBE, 0xDC0, 0xDC7, 0xDCA, 0xDCB,
    0xDCF, 0xDD5, 0xDD6, 0xDD7, 0xDD8, 0xDE0, 0xDE6, 0xDF0, 0xDF2, 0xDF4,
    0xDF5, 0xE01, 0xE31, 0xE32, 0xE34, 0xE3B, 0xE3F, 0xE40, 0xE47, 0xE4F,
    0xE50, 0xE5A, 0xE5C, 0xE81, 0xE83, 0xE84, 0xE85, 0xE86, 0xE8B, 0xE8C,
    0xEA4, 0xEA5, 0xEA6, 0xEA7, 0xEB1, 0xEB2, 0xEB4, 0xEBD, 0xEBE, 0xEC0,
    0xEC5, 0xEC6, 0xEC7, 0xEC8, 0xECE, 0xED0, 0xEDA, 0xEDC, 0xEE0, 0xF00,
    0xF01, 0xF04, 0xF13, 0xF14, 0xF15, 0xF18, 0xF1A, 0xF20, 0xF34, 0xF35,
    0xF36, 0xF37, 0xF38, 0xF39, 0xF3A, 0xF3E, 0xF40, 0xF48, 0xF49, 0xF6D,
    0xF71, 0xF85, 0xF86, 0xF88, 0xF8D, 0xF98, 0xF99, 0xFBD, 0xFBE, 0xFC6,
    0xFC7, 0xFCD, 0xFCE, 0xFD0, 0xFD5, 0xFD9, 0xFDB, 0x1000, 0x102B, 0x103F,
    0x1040, 0x104A, 0x1050, 0x1056, 0x105A, 0x105E, 0x1061, 0x1062, 0x1065, 0x1067,
    0x106E, 0x1071, 0x1075, 0x1082, 0x108E, 0x108F, 0x1090, 0x109A, 0x109E, 0x10A0,
    0x10C6, 0x10C7, 0x10C8, 0x10CD, 0x10CE, 0x10D0, 0x10FB, 0x10FC, 0x1249, 0x124A,
    0x124E, 0x1250, 0x1257, 0x1258, 0x1259, 0x125A, 0x125E, 0x1260, 0x1289, 0x128A,
    0x128E, 0x1290, 0x12B1, 0x12B2, 0x12B6, 0x12B8, 0x12BF, 0x12C0, 0x12C1, 0x12C2,
    0x12C6, 0x12C8, 0x12D7, 0x12D8, 0x1311, 0x1312, 0x1316, 0x1318, 0x135B, 0x135D,
    0x1360, 0x1369, 0x137D, 0x1380, 0x1390, 0x139A, 0x13A0, 0x13F6, 0x13F8, 0x13FE,
    0x1400, 0x1401, 0x166D, 0x166E, 0x166F, 0x1680, 0x1681, 0x169B, 0x169D, 0x16A0,
    0x16EB, 0x16EE, 0x16F1, 0x16F9, 0x1700, 0x1712, 0x1716, 0x171F, 0x1732, 0x1735,
    0x1737, 0x1740, 0x1752, 0x1754, 0x1760, 0x176D, 0x176E, 0x1771, 0x1772, 0x1774,
    0x1780, 0x17B4, 0x17D4, 0x17D7, 0x17D8, 0x17DB, 0x17DC, 0x17DD, 0x17DE, 0x17E0,
    0x17EA, 0x17F0, 0x17FA, 0x1800, 0x180B, 0x180E, 0x180F, 0x1810, 0x181A, 0x1820,
    0x1879, 0x1880, 0x1885, 0x1887, 0x18A9, 0x18AA, 0x18AB, 0x18B0, 0x18F6, 0x1900,
    0x191F, 0x1920, 0x192C, 0x1930, 0x193C, 0x1940, 0x1941, 0x1944, 0x1946, 0x1950,
    0x196E, 0x1970, 0x1975, 0x1980, 0x19AC, 0x19B0, 0x19CA, 0x19D0, 0x19DB, 0x19DE,
    0x1A00, 0x1A17, 0x1A1C, 0x1A1E, 0x1A20, 0x1A55, 0x1A5F, 0x1A60, 0x1A7D, 0x1A7F,
    0x1A80, 0x1A8A, 0x1A90, 0x1A9A, 0x1AA0, 0x1AA7, 0x1AA8, 0x1AAE, 0x1AB0, 0x1ACF,
    0x1B00, 0x1B05, 0x1B34, 0x1B45, 0x1B4D, 0x1B50, 0x1B5A, 0x1B61, 0x1B6B, 0x1B74,
    0x1B7D, 0x1B7F, 0x1B80, 0x1B83, 0x1BA1, 0x1BAE, 0x1BB0, 0x1BBA, 0x1BE6, 0x1BF4,
    0x1BFC, 0x1C00, 0x1C24, 0x1C38, 0x1C3B, 0x1C40, 0x1C4A, 0x1C4D, 0x1C50, 0x1C5A,
    0x1C7E, 0x1C80, 0x1C89, 0x1C90, 0x1CBB, 0x1CBD, 0x1CC0, 0x1CC8, 0x1CD0, 0x1CD3,
    0x1CD4, 0x1CE9, 0x1CED, 0x1CEE, 0x1CF4, 0x1CF5, 0x1CF7, 0x1CFA, 0x1CFB, 0x1D00,
    0x1DC0, 0x1E00, 0x1F16, 0x1F18, 0x1F1E, 0x1F20, 0x1F46, 0x1F48, 0x1F4E, 0x1F50,
    0x1F58, 0x1F59, 0x1F5A, 0x1F5B, 0x1F5C, 0x1F5D, 0x1F5E, 0x1F5F, 0x1F7E, 0x1F80,
    0x1FB5, 0x1FB6, 0x1FBD, 0x1FBE, 0x1FBF, 0x1FC2, 0x1FC5, 0x1FC6, 0x1FCD, 0x1FD0,
    0x1FD4, 0x1FD6, 0x1FDC, 0x1FDD, 0x1FE0, 0x1FED, 0x1FF0, 0x1FF2, 0x1FF5, 0x1FF6,
    0x1FFD, 0x1FFF, 0x2000, 0x200B, 0x2010, 0x2028, 0x202A, 0x202F, 0x2030, 0x2044,
    0x2045, 0x2052, 0x2053, 0x205F, 0x2060, 0x2070, 0x2071, 0x2072, 0x2074, 0x207A,
    0x207D, 0x207F, 0x2080, 0x208A, 0x208D, 0x208F, 0x2090, 0x209D, 0x20A0, 0x20C1,
    0x20D0, 0x20F1, 0x2100, 0x2102, 0x2103, 0x2107, 0x2108, 0x210A, 0x2114, 0x2115,
    0x2116, 0x2119, 0x211E, 0x2124, 0x2125, 0x2126, 0x2127, 0x2128, 0x2129, 0x212A,
    0x212E, 0x212F, 0x213A, 0x213C, 0x2140, 0x2145, 0x214A, 0x214E, 0x214F, 0x2150,
    0x2183, 0x2185, 0x218A, 0x218C, 0x2190, 0x2308, 0x230C, 0x2329, 0x232B, 0x2427,
    0x2440, 0x244B, 0x2460, 0x249C, 0x24EA, 0x2500, 0x2768, 0x2776, 0x2794, 0x27C5,
    0x27C7, 0x27E6, 0x27F0, 0x2983, 0x2999, 0x29D8, 0x29DC, 0x29FC, 0x29FE, 0x2B74,
    0x2B76, 0x2B96, 0x2B97, 0x2C00, 0x2CE5, 0x2CEB, 0x2CEF, 0x2CF2, 0x2CF4, 0x2CF9,
    0x2CFD, 0x2CFE, 0x2D00, 0x2D26, 0x2D27, 0x2D28, 0x2D2D, 0x2D2E, 0x2D30, 0x2D68,
    0x2D6F, 0x2D70, 0x2D71, 0x2D7F, 0x2D80, 0x2D97, 0x2DA0, 0x2DA7, 0x2DA8, 0x2DAF,
    0x2DB0, 0x2DB7, 0x2DB8, 0x2DBF, 0x2DC0, 0x2DC7, 0x2DC8, 0x2DCF, 0x2DD0, 0x2DD7,
    0x2DD8, 0x2DDF, 0x2DE0, 0x2E00, 0x2E2F, 0x2E30, 0x2E50, 0x2E52, 0x2E5E, 0x2E80,
    0x2E9A, 0x2E9B, 0x2EF4, 0x2F00, 0x2FD6, 0x2FF0, 0x2FFC, 0x3000, 0x3001, 0x3004,
    0x3005, 0x3007, 0x3008, 0x3012, 0x3014, 0x3020, 0x3021, 0x302A, 0x3030, 0x3031,
    0x3036, 0x3038, 0x303B, 0x303D, 0x303E, 0x3040, 0x3041, 0x3097, 0x3099, 0x309B,
    0x309D, 0x30A0, 0x30A1, 0x30FB, 0x30FC, 0x3100, 0x3105, 0x3130, 0x3131, 0x318F,
    0x3190, 0x3192, 0x3196, 0x31A0, 0x31C0, 0x31E4, 0x31F0, 0x3200, 0x321F, 0x3220,
    0x322A, 0x3248, 0x3250, 0x3251, 0x3260, 0x3280, 0x328A, 0x32B1, 0x32C0, 0x3400,
    0x4DC0, 0x4E00, 0xA48D, 0xA490, 0xA4C7, 0xA4D0, 0xA4FE, 0xA500, 0xA60D, 0xA610,
    0xA620, 0xA62A, 0xA62C, 0xA640, 0xA66F, 0xA673, 0xA674, 0xA67E, 0xA67F, 0xA69E,
    0xA6A0, 0xA6E6, 0xA6F0, 0xA6F2, 0xA6F8, 0xA700, 0xA717, 0xA720, 0xA722, 0xA789,
    0xA78B, 0xA7CB, 0xA7D0, 0xA7D2, 0xA7D3, 0xA7D4, 0xA7D5, 0xA7DA, 0xA7F2, 0xA802,
    0xA803, 0xA806, 0xA807, 0xA80B, 0xA80C, 0xA823, 0xA828, 0xA82C, 0xA82D, 0xA830,
    0xA836, 0xA83A, 0xA840, 0xA874, 0xA878, 0xA880, 0xA882, 0xA8B4, 0xA8C6, 0xA8CE,
    0xA8D0, 0xA8DA, 0xA8E0, 0xA8F2, 0xA8F8, 0xA8FB, 0xA8FC, 0xA8FD, 0xA8FF, 0xA900,
    0xA90A, 0xA926, 0xA92E, 0xA930, 0xA947, 0xA954, 0xA95F, 0xA960, 0xA97D, 0xA980,
    0xA984, 0xA9B3, 0xA9C1, 0xA9CE, 0xA9CF, 0xA9D0, 0xA9DA, 0xA9DE, 0xA9E0, 0xA9E5,
    0xA9E6, 0xA9F0, 0xA9FA, 0xA9FF, 0xAA00, 0xAA29, 0xAA37, 0xAA40, 0xAA43, 0xAA44,
    0xAA4C, 0xAA4E, 0xAA50, 0xAA5A, 0xAA5C, 0xAA60, 0xAA77, 0xAA7A, 0xAA7B, 0xAA7E,
    0xAAB0, 0xAAB1, 0xAAB2, 0xAAB5, 0xAAB7, 0xAAB9, 0xAABE, 0xAAC0, 0xAAC1, 0xAAC2,
    0xAAC3, 0xAADB, 0xAADE, 0xAAE0, 0xAAEB, 0xAAF0, 0xAAF2, 0xAAF5, 0xAAF7, 0xAB01,
    0xAB07, 0xAB09, 0xAB0F, 0xAB11, 0xAB17, 0xAB20, 0xAB27, 0xAB28, 0xAB2F, 0xAB30,
    0xAB5B, 0xAB5C, 0xAB6A, 0xAB6C, 0xAB70, 0xABE3, 0xABEB, 0xABEC, 0xABEE, 0xABF0,
    0xABFA, 0xAC00, 0xD7A4, 0xD7B0, 0xD7C7, 0xD7CB, 0xD7FC, 0xF900, 0xFA6E, 0xFA70,
    0xFADA, 0xFB00, 0xFB07, 0xFB13, 0xFB18, 0xFB1D, 0xFB1E, 0xFB1F, 0xFB29, 0xFB2A,
    0xFB37, 0xFB38, 0xFB3D, 0xFB3E, 0xFB3F, 0xFB40, 0xFB42, 0xFB43, 0xFB45, 0xFB46,
    0xFBB2, 0xFBC3, 0xFBD3, 0xFD3E, 0xFD40, 0xFD50, 0xFD90, 0xFD92, 0xFDC8, 0xFDCF,
    0xFDD0, 0xFDF0, 0xFDFC, 0xFE00, 0xFE10, 0xFE1A, 0xFE20, 0xFE30, 0xFE53, 0xFE54,
    0xFE62, 0xFE63, 0xFE64, 0xFE67, 0xFE68, 0xFE69, 0xFE6A, 0xFE6C, 0xFE70, 0xFE75,
    0xFE76, 0xFEFD, 0xFF01, 0xFF04, 0xFF05, 0xFF0B, 0xFF0C, 0xFF10, 0xFF1A, 0xFF1C,
    0xFF1F, 0xFF21, 0xFF3B, 0xFF3E, 0xFF3F, 0xFF40, 0xFF41, 0xFF5B, 0xFF5C, 0xFF5D,
    0xFF5E, 0xFF5F, 0xFF66, 0xFFBF, 0xFFC2, 0xFFC8, 0xFFCA, 0xFFD0, 0xFFD2, 0xFFD8,
    0xFFDA, 0xFFDD, 0xFFE0, 0xFFE7, 0xFFE8, 0xFFEF, 0xFFFC, 0xFFFE, 0x10000, 0x1000C,
    0x1000D, 0x10027, 0x10028, 0x1003B, 0x1003C, 0x1003E, 0x1003F, 0x1004E, 0x10050, 0x1005E,
    0x10080, 0x100FB, 0x10100, 0x10103, 0x10107, 0x10134, 0x10137, 0x10140, 0x10179, 0x1018A,
    0x1018C, 0x1018F, 0x10190, 0x1019D, 0x101A0, 0x101A1, 0x101D0, 0x101FD, 0x101FE, 0x10280,
    0x1029D, 0x102A0, 0x102D1, 0x102E0, 0x102E1, 0x102FC, 0x10300, 0x10320, 0x10324, 0x1032D,
    0x10341, 0x10342, 0x1034A, 0x1034B, 0x10350, 0x10376, 0x1037B, 0x10380, 0x1039E, 0x1039F,
    0x103A0, 0x103C4, 0x103C8, 0x103D0, 0x103D1, 0x103D6, 0x10400, 0x1049E, 0x104A0, 0x104AA,
    0x104B0, 0x104D4, 0x104D8, 0x104FC, 0x10500, 0x10528, 0x10530, 0x10564, 0x1056F, 0x10570,
    0x1057B, 0x1057C, 0x1058B, 0x1058C, 0x10593, 0x10594, 0x10596, 0x10597, 0x105A2, 0x105A3,
    0x105B2, 0x105B3, 0x105BA, 0x105BB, 0x105BD, 0x10600, 0x10737, 0x10740, 0x10756, 0x10760,
    0x10768, 0x10780, 0x10786, 0x10787, 0x107B1, 0x107B2, 0x107BB, 0x10800, 0x10806, 0x10808,
    0x10809, 0x1080A, 0x10836, 0x10837, 0x10839, 0x1083C, 0x1083D, 0x1083F, 0x10856, 0x10857,
    0x10858, 0x10860, 0x10877, 0x10879, 0x10880, 0x1089F, 0x108A7, 0x108B0, 0x108E0, 0x108F3,
    0x108F4, 0x108F6, 0x108FB, 0x10900, 0x10916, 0x1091C, 0x1091F, 0x10920, 0x1093A, 0x1093F,
    0x10940, 0x10980, 0x109B8, 0x109BC, 0x109BE, 0x109C0, 0x109D0, 0x109D2, 0x10A00, 0x10A01,
    0x10A04, 0x10A05, 0x10A07, 0x10A0C, 0x10A10, 0x10A14, 0x10A15, 0x10A18, 0x10A19, 0x10A36,
    0x10A38, 0x10A3B, 0x10A3F, 0x10A40, 0x10A49, 0x10A50, 0x10A59, 0x10A60, 0x10A7D, 0x10A7F,
    0x10A80, 0x10A9D, 0x10AA0, 0x10AC0, 0x10AC8, 0x10AC9, 0x10AE5, 0x10AE7, 0x10AEB, 0x10AF0,
    0x10AF7, 0x10B00, 0x10B36, 0x10B39, 0x10B40, 0x10B56, 0x10B58, 0x10B60, 0x10B73, 0x10B78,
    0x10B80, 0x10B92, 0x10B99, 0x10B9D, 0x10BA9, 0x10BB0, 0x10C00, 0x10C49, 0x10C80, 0x10CB3,
    0x10CC0, 0x10CF3, 0x10CFA, 0x10D00, 0x10D24, 0x10D28, 0x10D30, 0x10D3A, 0x10E60, 0x10E7F,
    0x10E80, 0x10EAA, 0x10EAB, 0x10EAD, 0x10EAE, 0x10EB0, 0x10EB2, 0x10F00, 0x10F1D, 0x10F27,
    0x10F28, 0x10F30, 0x10F46, 0x10F51, 0x10F55, 0x10F5A, 0x10F70, 0x10F82, 0x10F86, 0x10F8A,
    0x10FB0, 0x10FC5, 0x10FCC, 0x10FE0, 0x10FF7, 0x11000, 0x11003, 0x11038, 0x11047, 0x1104E,
    0x11052, 0x11070, 0x11071, 0x11073, 0x11075, 0x11076, 0x1107F, 0x11083, 0x110B0, 0x110BB,
    0x110BD, 0x110BE, 0x110C2, 0x110C3, 0x110D0, 0x110E9, 0x110F0, 0x110FA, 0x11100, 0x11103,
    0x11127, 0x11135, 0x11136, 0x11140, 0x11144, 0x11145, 0x11147, 0x11148, 0x11150, 0x11173,
    0x11174, 0x11176, 0x11177, 0x11180, 0x11183, 0x111B3, 0x111C1, 0x111C5, 0x111C9, 0x111CD,
    0x111CE, 0x111D0, 0x111DA, 0x111DB, 0x111DC, 0x111DD, 0x111E0, 0x111E1, 0x111F5, 0x11200,
    0x11212, 0x11213, 0x1122C, 0x11238, 0x1123E, 0x1123F, 0x11280, 0x11287, 0x11288, 0x11289,
    0x1128A, 0x1128E, 0x1128F, 0x1129E, 0x1129F, 0x112A9, 0x112AA, 0x112B0, 0x112DF, 0x112EB,
    0x112F0, 0x112FA, 0x11300, 0x11304, 0x11305, 0x1130D, 0x1130F, 0x11311, 0x11313, 0x11329,
    0x1132A, 0x11331, 0x11332, 0x11334, 0x11335, 0x1133A, 0x1133B, 0x1133D, 0x1133E, 0x11345,
    0x11347, 0x11349, 0x1134B, 0x1134E, 0x11350, 0x11351, 0x11357, 0x11358, 0x1135D, 0x11362,
    0x11364, 0x11366, 0x1136D, 0x11370, 0x11375, 0x11400, 0x11435, 0x11447, 0x1144B, 0x11450,
    0x1145A, 0x1145C, 0x1145D, 0x1145E, 0x1145F, 0x11462, 0x11480, 0x114B0, 0x114C4, 0x114C6,
    0x114C7, 0x114C8, 0x114D0, 0x114DA, 0x11580, 0x115AF, 0x115B6, 0x115B8, 0x115C1, 0x115D8,
    0x115DC, 0x115DE, 0x11600, 0x11630, 0x11641, 0x11644, 0x11645, 0x11650, 0x1165A, 0x11660,
    0x1166D, 0x11680, 0x116AB, 0x116B8, 0x116B9, 0x116BA, 0x116C0, 0x116CA, 0x11700, 0x1171B,
    0x1171D, 0x1172C, 0x11730, 0x1173C, 0x1173F, 0x11740, 0x11747, 0x11800, 0x1182C, 0x1183B,
    0x1183C, 0x118A0, 0x118E0, 0x118F3, 0x118FF, 0x11907, 0x11909, 0x1190A, 0x1190C, 0x11914,
    0x11915, 0x11917, 0x11918, 0x11930, 0x11936, 0x11937, 0x11939, 0x1193B, 0x1193F, 0x11940,
    0x11941, 0x11942, 0x11944, 0x11947, 0x11950, 0x1195A, 0x119A0, 0x119A8, 0x119AA, 0x119D1,
    0x119D8, 0x119DA, 0x119E1, 0x119E2, 0x119E3, 0x119E4, 0x119E5, 0x11A00, 0x11A01, 0x11A0B,
    0x11A33, 0x11A3A, 0x11A3B, 0x11A3F, 0x11A47, 0x11A48, 0x11A50, 0x11A51, 0x11A5C, 0x11A8A,
    0x11A9A, 0x11A9D, 0x11A9E, 0x11AA3, 0x11AB0, 0x11AF9, 0x11C00, 0x11C09, 0x11C0A, 0x11C2F,
    0x11C37, 0x11C38, 0x11C40, 0x11C41, 0x11C46, 0x11C50, 0x11C6D, 0x11C70, 0x11C72, 0x11C90,
    0x11C92, 0x11CA8, 0x11CA9, 0x11CB7, 0x11D00, 0x11D07, 0x11D08, 0x11D0A, 0x11D0B, 0x11D31,
    0x11D37, 0x11D3A, 0x11D3B, 0x11D3C, 0x11D3E, 0x11D3F, 0x11D46, 0x11D47, 0x11D48, 0x11D50,
    0x11D5A, 0x11D60, 0x11D66, 0x11D67, 0x11D69, 0x11D6A, 0x11D8A, 0x11D8F, 0x11D90, 0x11D92,
    0x11D93, 0x11D98, 0x11D99, 0x11DA0, 0x11DAA, 0x11EE0, 0x11EF3, 0x11EF7, 0x11EF9, 0x11FB0,
    0x11FB1, 0x11FC0, 0x11FD5, 0x11FF2, 0x11FFF, 0x12000, 0x1239A, 0x12400, 0x1246F, 0x12470,
    0x12475, 0x12480, 0x12544, 0x12F90, 0x12FF1, 0x12FF3, 0x13000, 0x1342F, 0x14400, 0x14647,
    0x16800, 0x16A39, 0x16A40, 0x16A5F, 0x16A60, 0x16A6A, 0x16A6E, 0x16A70, 0x16ABF, 0x16AC0,
    0x16ACA, 0x16AD0, 0x16AEE, 0x16AF0, 0x16AF5, 0x16AF6, 0x16B00, 0x16B30, 0x16B37, 0x16B3C,
    0x16B40, 0x16B44, 0x16B45, 0x16B46, 0x16B50, 0x16B5A, 0x16B5B, 0x16B62, 0x16B63, 0x16B78,
    0x16B7D, 0x16B90, 0x16E40, 0x16E80, 0x16E97, 0x16E9B, 0x16F00, 0x16F4B, 0x16F4F, 0x16F50,
    0x16F51, 0x16F88, 0x16F8F, 0x16F93, 0x16FA0, 0x16FE0, 0x16FE2, 0x16FE3, 0x16FE4, 0x16FE5,
    0x16FF0, 0x16FF2, 0x17000, 0x187F8, 0x18800, 0x18CD6, 0x18D00, 0x18D09, 0x1AFF0, 0x1AFF4,
    0x1AFF5, 0x1AFFC, 0x1AFFD, 0x1AFFF, 0x1B000, 0x1B123, 0x1B150, 0x1B153, 0x1B164, 0x1B168,
    0x1B170, 0x1B2FC, 0x1BC00, 0x1BC6B, 0x1BC70, 0x1BC7D, 0x1BC80, 0x1BC89, 0x1BC90, 0x1BC9A,
    0x1BC9C, 0x1BC9D, 0x1BC9F, 0x1BCA0, 0x1CF00, 0x1CF2E, 0x1CF30, 0x1CF47, 0x1CF50, 0x1CFC4,
    0x1D000, 0x1D0F6, 0x1D100, 0x1D127, 0x1D129, 0x1D165, 0x1D16A, 0x1D16D, 0x1D173, 0x1D17B,
    0x1D183, 0x1D185, 0x1D18C, 0x1D1AA, 0x1D1AE, 0x1D1EB, 0x1D200, 0x1D242, 0x1D245, 0x1D246,
    0x1D2E0, 0x1D2F4, 0x1D300, 0x1D357, 0x1D360, 0x1D379, 0x1D400, 0x1D455, 0x1D456, 0x1D49D,
    0x1D49E, 0x1D4A0, 0x1D4A2, 0x1D4A3, 0x1D4A5, 0x1D4A7, 0x1D4A9, 0x1D4AD, 0x1D4AE, 0x1D4BA,
    0x1D4BB, 0x1D4BC, 0x1D4BD, 0x1D4C4, 0x1D4C5, 0x1D506, 0x1D507, 0x1D50B, 0x1D50D, 0x1D515,
    0x1D516, 0x1D51D, 0x1D51E, 0x1D53A, 0x1D53B, 0x1D53F, 0x1D540, 0x1D545, 0x1D546, 0x1D547,
    0x1D54A, 0x1D551, 0x1D552, 0x1D6A6, 0x1D6A8, 0x1D6C1, 0x1D6C2, 0x1D6DB, 0x1D6DC, 0x1D6FB,
    0x1D6FC, 0x1D715, 0x1D716, 0x1D735, 0x1D736, 0x1D74F, 0x1D750, 0x1D76F, 0x1D770, 0x1D789,
    0x1D78A, 0x1D7A9, 0x1D7AA, 0x1D7C3, 0x1D7C4, 0x1D7CC, 0x1D7CE, 0x1D800, 0x1DA00, 0x1DA37,
    0x1DA3B, 0x1DA6D, 0x1DA75, 0x1DA76, 0x1DA84, 0x1DA85, 0x1DA87, 0x1DA8C, 0x1DA9B, 0x1DAA0,
    0x1DAA1, 0x1DAB0, 0x1DF00, 0x1DF1F, 0x1E000, 0x1E007, 0x1E008, 0x1E019, 0x1E01B, 0x1E022,
    0x1E023, 0x1E025, 0x1E026, 0x1E02B, 0x1E100, 0x1E12D, 0x1E130, 0x1E137, 0x1E13E, 0x1E140,
    0x1E14A, 0x1E14E, 0x1E14F, 0x1E150, 0x1E290, 0x1E2AE, 0x1E2AF, 0x1E2C0, 0x1E2EC, 0x1E2F0,
    0x1E2FA, 0x1E2FF, 0x1E300, 0x1E7E0, 0x1E7E7, 0x1E7E8, 0x1E7EC, 0x1E7ED, 0x1E7EF, 0x1E7F0,
    0x1E7FF, 0x1E800, 0x1E8C5, 0x1E8C7, 0x1E8D0, 0x1E8D7, 0x1E900, 0x1E944, 0x1E94B, 0x1E94C,
    0x1E950, 0x1E95A, 0x1E95E, 0x1E960, 0x1EC71, 0x1ECAC, 0x1ECAD, 0x1ECB0, 0x1ECB1, 0x1ECB5,
    0x1ED01, 0x1ED2E, 0x1ED2F, 0x1ED3E, 0x1EE00, 0x1EE04, 0x1EE05, 0x1EE20, 0x1EE21, 0x1EE23,
    0x1EE24, 0x1EE25, 0x1EE27, 0x1EE28, 0x1EE29, 0x1EE33, 0x1EE34, 0x1EE38, 0x1EE39, 0x1EE3A,
    0x1EE3B, 0x1EE3C, 0x1EE42, 0x1EE43, 0x1EE47, 0x1EE48, 0x1EE49, 0x1EE4A, 0x1EE4B, 0x1EE4C,
    0x1EE4D, 0x1EE50, 0x1EE51, 0x1EE53, 0x1EE54, 0x1EE55, 0x1EE57, 0x1EE58, 0x1EE59, 0x1EE5A,
    0x1EE5B, 0x1EE5C, 0x1EE5D, 0x1EE5E, 0x1EE5F, 0x1EE60, 0x1EE61, 0x1EE63, 0x1EE64, 0x1EE65,
    0x1EE67, 0x1EE6B, 0x1EE6C, 0x1EE73, 0x1EE74, 0x1EE78, 0x1EE79, 0x1EE7D, 0x1EE7E, 0x1EE7F,
    0x1EE80, 0x1EE8A, 0x1EE8B, 0x1EE9C, 0x1EEA1, 0x1EEA4, 0x1EEA5, 0x1EEAA, 0x1EEAB, 0x1EEBC,
    0x1EEF0, 0x1EEF2, 0x1F000, 0x1F02C, 0x1F030, 0x1F094, 0x1F0A0, 0x1F0AF, 0x1F0B1, 0x1F0C0,
    0x1F0C1, 0x1F0D0, 0x1F0D1, 0x1F0F6, 0x1F100, 0x1F10D, 0x1F1AE, 0x1F1E6, 0x1F203, 0x1F210,
    0x1F23C, 0x1F240, 0x1F249, 0x1F250, 0x1F252, 0x1F260, 0x1F266, 0x1F300, 0x1F6D8, 0x1F6DD,
    0x1F6ED, 0x1F6F0, 0x1F6FD, 0x1F700, 0x1F774, 0x1F780, 0x1F7D9, 0x1F7E0, 0x1F7EC, 0x1F7F0,
    0x1F7F1, 0x1F800, 0x1F80C, 0x1F810, 0x1F848, 0x1F850, 0x1F85A, 0x1F860, 0x1F888, 0x1F890,
    0x1F8AE, 0x1F8B0, 0x1F8B2, 0x1F900, 0x1FA54, 0x1FA60, 0x1FA6E, 0x1FA70, 0x1FA75, 0x1FA78,
    0x1FA7D, 0x1FA80, 0x1FA87, 0x1FA90, 0x1FAAD, 0x1FAB0, 0x1FABB, 0x1FAC0, 0x1FAC6, 0x1FAD0,
    0x1FADA, 0x1FAE0, 0x1FAE8, 0x1FAF0, 0x1FAF7, 0x1FB00, 0x1FB93, 0x1FB94, 0x1FBCB, 0x1FBF0,
    0x1FBFA, 0x20000, 0x2A6E0, 0x2A700, 0x2B739, 0x2B740, 0x2B81E, 0x2B820, 0x2CEA2, 0x2CEB0,
    0x2EBE1, 0x2F800, 0x2FA1E, 0x30000, 0x3134B, 0xE0100, 0xE01F0,
};
static const uint8_t forge__ucd_flags[2217] = {
    0, 32, 0, 32, 4, 8, 4, 8, 4, 2, 4, 8, 4, 1, 4, 8, 4, 8, 1, 4, 8, 4, 8, 0,
    32, 0, 32, 4, 8, 4, 8, 1, 4, 8, 0, 8, 2, 8, 1, 4, 8, 2, 1, 4, 2, 4, 1, 8,
    1, 8, 1, 8, 1, 8, 1, 8, 1, 8, 1, 8, 16, 1, 8, 1, 0, 1, 4, 1, 0, 8, 1, 4,
    1, 0, 1, 0, 1, 0, 1, 8, 1, 8, 16, 1, 0, 1, 0, 1, 4, 1, 4, 0, 8, 0, 16, 4,
    16, 4, 16, 4, 16, 4, 16, 0, 1, 0, 1, 4, 0, 8, 4, 8, 4, 8, 16, 4, 0, 4, 1, 16,
    2, 4, 1, 16, 1, 4, 1, 16, 0, 8, 16, 1, 16, 8, 16, 1, 2, 1, 8, 1, 4, 0, 1, 16,
    1, 16, 0, 1, 16, 1, 0, 2, 1, 16, 1, 8, 4, 1, 0, 16, 8, 1, 16, 1, 16, 1, 16, 1,
    16, 0, 4, 0, 1, 16, 0, 4, 0, 1, 0, 1, 8, 1, 0, 16, 1, 16, 0, 16, 1, 16, 1, 16,
    1, 16, 1, 16, 4, 2, 4, 1, 16, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 16, 1,
    16, 0, 16, 0, 16, 1, 0, 16, 0, 1, 0, 1, 16, 0, 2, 1, 8, 2, 8, 1, 4, 16, 0, 16,
    0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 16, 0, 16, 0, 16, 0, 16, 0, 16,
    0, 1, 0, 1, 0, 2, 16, 1, 16, 4, 0, 16, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,
    0, 16, 1, 16, 0, 16, 0, 16, 0, 1, 0, 1, 16, 0, 2, 4, 8, 0, 1, 16, 0, 16, 0, 1,
    0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 16, 1, 16, 0, 16, 0, 16, 0, 16, 0, 1, 0, 1,
    16, 0, 2, 8, 1, 2, 0, 16, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0,
    1, 0, 1, 0, 16, 0, 16, 0, 16, 0, 1, 0, 16, 0, 2, 8, 0, 16, 1, 0, 1, 0, 1, 0,
    1, 0, 16, 1, 16, 0, 16, 0, 16, 0, 16, 0, 1, 0, 1, 0, 1, 16, 0, 2, 0, 4, 2, 8,
    1, 16, 4, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 16, 1, 16, 0, 16, 0, 16, 0, 16, 0, 1,
    0, 1, 16, 0, 2, 0, 1, 0, 16, 1, 0, 1, 0, 1, 16, 1, 16, 0, 16, 0, 16, 1, 8, 0,
    1, 16, 2, 1, 16, 0, 2, 8, 1, 0, 16, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 16, 0,
    16, 0, 16, 0, 16, 0, 2, 0, 16, 4, 0, 1, 16, 1, 16, 0, 8, 1, 16, 4, 2, 4, 0, 1,
    0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 16, 1, 16, 1, 0, 1, 0, 1, 0, 16, 0, 2, 0, 1,
    0, 1, 8, 4, 8, 4, 8, 16, 8, 2, 8, 16, 8, 16, 8, 16, 4, 16, 1, 0, 1, 0, 16, 4,
    16, 1, 16, 0, 16, 0, 8, 16, 8, 0, 8, 4, 8, 4, 0, 1, 16, 1, 2, 4, 1, 16, 1, 16,
    1, 16, 1, 16, 1, 16, 1, 16, 1, 16, 2, 16, 8, 1, 0, 1, 0, 1, 0, 1, 4, 1, 0, 1,
    0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,
    0, 1, 0, 1, 0, 16, 4, 2, 0, 1, 8, 0, 1, 0, 1, 0, 4, 1, 8, 4, 1, 32, 1, 4,
    0, 1, 4, 2, 1, 0, 1, 16, 0, 1, 16, 4, 0, 1, 16, 0, 1, 0, 1, 0, 16, 0, 1, 16,
    4, 1, 4, 8, 1, 16, 0, 2, 0, 2, 0, 4, 16, 0, 16, 2, 0, 1, 0, 1, 16, 1, 16, 1,
    0, 1, 0, 1, 0, 16, 0, 16, 0, 8, 0, 4, 2, 1, 0, 1, 0, 1, 0, 1, 0, 2, 0, 8,
    1, 16, 0, 4, 1, 16, 0, 16, 0, 16, 2, 0, 2, 0, 4, 1, 4, 0, 16, 0, 16, 1, 16, 1,
    0, 2, 4, 8, 16, 8, 4, 0, 16, 1, 16, 1, 2, 1, 16, 0, 4, 1, 16, 0, 4, 2, 0, 1,
    2, 1, 4, 1, 0, 1, 0, 1, 4, 0, 16, 4, 16, 1, 16, 1, 16, 1, 16, 1, 0, 1, 16, 1,
    0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 8, 1, 8, 1,
    0, 1, 8, 1, 0, 1, 0, 8, 1, 8, 0, 1, 0, 1, 8, 0, 32, 0, 4, 32, 0, 32, 4, 8,
    4, 8, 4, 32, 0, 2, 1, 0, 2, 8, 4, 1, 2, 8, 4, 0, 1, 0, 8, 0, 16, 0, 8, 1,
    8, 1, 8, 1, 8, 1, 8, 1, 8, 1, 8, 1, 8, 1, 8, 1, 8, 1, 8, 1, 8, 1, 8, 1,
    8, 2, 1, 2, 8, 0, 8, 4, 8, 4, 8, 0, 8, 0, 2, 8, 2, 8, 4, 2, 8, 4, 8, 4,
    8, 4, 8, 4, 8, 4, 8, 0, 8, 0, 8, 1, 8, 1, 16, 1, 0, 4, 2, 4, 1, 0, 1, 0,
    1, 0, 1, 0, 1, 4, 0, 16, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0,
    1, 0, 16, 4, 1, 4, 8, 4, 0, 8, 0, 8, 0, 8, 0, 8, 0, 32, 4, 8, 1, 2, 4, 8,
    4, 8, 2, 16, 4, 1, 8, 2, 1, 4, 8, 0, 1, 0, 16, 8, 1, 4, 1, 4, 1, 0, 1, 0,
    1, 0, 8, 2, 8, 1, 8, 0, 1, 8, 0, 2, 8, 2, 8, 2, 8, 2, 8, 2, 8, 1, 8, 1,
    0, 8, 0, 1, 4, 1, 4, 1, 2, 1, 0, 1, 16, 4, 16, 4, 1, 16, 1, 2, 16, 4, 0, 8,
    1, 8, 1, 8, 1, 0, 1, 0, 1, 0, 1, 0, 1, 16, 1, 16, 1, 16, 1, 16, 8, 16, 0, 2,
    8, 0, 1, 4, 0, 16, 1, 16, 0, 4, 2, 0, 16, 1, 4, 1, 4, 1, 16, 2, 1, 16, 4, 1,
    16, 0, 4, 1, 0, 16, 1, 16, 4, 0, 1, 2, 0, 4, 1, 16, 1, 2, 1, 0, 1, 16, 0, 1,
    16, 1, 16, 0, 2, 0, 4, 1, 8, 1, 16, 1, 16, 1, 16, 1, 16, 1, 16, 1, 16, 1, 0, 1,
    4, 1, 16, 4, 1, 16, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 8, 1, 8, 0, 1, 16,
    4, 16, 0, 2, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 16, 1, 8, 1,
    0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 8, 0, 1, 4, 8, 1, 0, 1, 0, 8, 0, 1, 8, 16,
    4, 0, 16, 4, 0, 4, 8, 4, 8, 0, 4, 8, 4, 0, 1, 0, 1, 0, 4, 8, 4, 8, 4, 2,
    4, 8, 4, 1, 4, 8, 4, 8, 1, 4, 8, 4, 8, 4, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0,
    8, 0, 8, 0, 8, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 4, 0, 2, 0,
    8, 2, 8, 2, 8, 0, 8, 0, 8, 0, 8, 16, 0, 1, 0, 1, 0, 16, 2, 0, 1, 2, 0, 1,
    2, 1, 2, 0, 1, 16, 0, 1, 0, 4, 1, 0, 1, 4, 2, 0, 1, 0, 2, 0, 1, 0, 1, 0,
    1, 0, 1, 0, 4, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,
    0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 4, 2, 1,
    8, 2, 1, 0, 2, 0, 1, 0, 1, 0, 2, 1, 2, 0, 4, 1, 0, 4, 0, 1, 0, 2, 1, 2,
    0, 2, 1, 16, 0, 16, 0, 16, 1, 0, 1, 0, 1, 0, 16, 0, 16, 2, 0, 4, 0, 1, 2, 4,
    1, 2, 0, 1, 8, 1, 16, 0, 2, 4, 0, 1, 0, 4, 1, 0, 2, 1, 0, 2, 1, 0, 4, 0,
    2, 0, 1, 0, 1, 0, 1, 0, 2, 1, 16, 0, 2, 0, 2, 0, 1, 0, 16, 4, 0, 1, 0, 1,
    2, 1, 0, 1, 16, 2, 4, 0, 1, 16, 4, 0, 1, 2, 0, 1, 0, 16, 1, 16, 4, 0, 2, 16,
    1, 16, 1, 0, 16, 1, 16, 4, 0, 4, 16, 0, 1, 0, 2, 0, 16, 1, 16, 0, 2, 4, 1, 16,
    1, 0, 1, 16, 4, 1, 0, 16, 1, 16, 1, 4, 16, 4, 16, 2, 1, 4, 1, 4, 0, 2, 0, 1,
    0, 1, 16, 4, 16, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 4, 0, 1, 16, 0, 2, 0, 16, 0,
    1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 16, 1, 16, 0, 16, 0, 16, 0, 1, 0, 16, 0,
    1, 16, 0, 16, 0, 16, 0, 1, 16, 1, 4, 2, 4, 0, 4, 16, 1, 0, 1, 16, 1, 4, 1, 0,
    2, 0, 1, 16, 0, 16, 4, 1, 16, 0, 1, 16, 4, 1, 0, 2, 0, 4, 0, 1, 16, 1, 4, 0,
    2, 0, 1, 0, 16, 0, 2, 4, 8, 1, 0, 1, 16, 4, 0, 1, 2, 0, 1, 0, 1, 0, 1, 0,
    1, 0, 1, 16, 0, 16, 0, 16, 1, 16, 1, 16, 4, 0, 2, 0, 1, 0, 1, 16, 0, 16, 1, 4,
    1, 16, 0, 1, 16, 1, 16, 1, 16, 4, 16, 0, 1, 16, 1, 16, 4, 1, 4, 0, 1, 0, 1, 0,
    1, 16, 0, 16, 1, 4, 0, 2, 0, 4, 1, 0, 16, 0, 16, 0, 1, 0, 1, 0, 1, 16, 0, 16,
    0, 16, 0, 16, 1, 16, 0, 2, 0, 1, 0, 1, 0, 1, 16, 0, 16, 0, 16, 1, 0, 2, 0, 1,
    16, 4, 0, 1, 0, 2, 8, 0, 4, 1, 0, 2, 0, 4, 0, 1, 0, 1, 4, 0, 1, 0, 1, 0,
    1, 0, 1, 0, 2, 0, 4, 1, 0, 2, 0, 1, 0, 16, 4, 0, 1, 16, 4, 8, 1, 4, 8, 0,
    2, 0, 2, 0, 1, 0, 1, 0, 1, 2, 4, 0, 1, 0, 16, 1, 16, 0, 16, 1, 0, 1, 4, 1,
    16, 0, 16, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0,
    1, 0, 1, 0, 1, 0, 1, 0, 8, 16, 4, 0, 16, 0, 16, 0, 8, 0, 8, 0, 8, 0, 8, 16,
    8, 16, 0, 16, 8, 16, 8, 16, 8, 0, 8, 16, 8, 0, 2, 0, 8, 0, 2, 0, 1, 0, 1, 0,
    1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0,
    1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 8, 1, 8, 1, 8, 1, 8, 1, 8, 1, 8, 1, 8,
    1, 8, 1, 8, 1, 8, 1, 0, 2, 8, 16, 8, 16, 8, 16, 8, 16, 8, 4, 0, 16, 0, 16, 0,
    1, 0, 16, 0, 16, 0, 16, 0, 16, 0, 16, 0, 1, 0, 16, 1, 0, 2, 0, 1, 8, 0, 1, 16,
    0, 1, 16, 2, 0, 8, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 2, 16, 0, 1, 16, 1, 0,
    2, 0, 4, 0, 2, 8, 2, 8, 2, 0, 2, 8, 2, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0,
    1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0,
    1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0,
    1, 0, 1, 0, 1, 0, 1, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 2, 8,
    0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8,
    0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8,
    0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 2, 0, 1, 0, 1, 0, 1, 0, 1,
    0, 1, 0, 1, 0, 1, 0, 16, 0,
};
static const uint32_t forge__cls_deepseek_letters[174] = {
    0x41, 0x5A, 0x61, 0x7A, 0xB5, 0xB5, 0xC0, 0xD6,
    0xD8, 0xF6, 0xF8, 0x1BA, 0x1BC, 0x1BF, 0x1C4, 0x293,
    0x295, 0x2AF, 0x370, 0x373, 0x376, 0x376, 0x377, 0x377,
    0x37B, 0x37D, 0x37F, 0x37F, 0x386, 0x386, 0x388, 0x38A,
    0x38C, 0x38C, 0x38E, 0x3A1, 0x3A3, 0x3F5, 0x3F7, 0x481,
    0x48A, 0x52F, 0x531, 0x556, 0x10A0, 0x10C5, 0x13A0, 0x13F5,
    0x13F8, 0x13FD, 0x1C90, 0x1CBA, 0x1CBD, 0x1CBF, 0x1D00, 0x1D2B,
    0x1D6B, 0x1D77, 0x1D79, 0x1D9A, 0x1E00, 0x1F15, 0x1F18, 0x1F1D,
    0x1F20, 0x1F45, 0x1F48, 0x1F4D, 0x1F50, 0x1F57, 0x1F59, 0x1F59,
    0x1F5B, 0x1F5B, 0x1F5D, 0x1F5D, 0x1F5F, 0x1F7D, 0x1F80, 0x1FB4,
    0x1FB6, 0x1FBC, 0x1FBE, 0x1FBE, 0x1FC2, 0x1FC4, 0x1FC6, 0x1FCC,
    0x1FD0, 0x1FD3, 0x1FD6, 0x1FDB, 0x1FE0, 0x1FEC, 0x1FF2, 0x1FF4,
    0x1FF6, 0x1FFC, 0x2102, 0x2102, 0x2107, 0x2107, 0x210A, 0x2113,
    0x2115, 0x2115, 0x2119, 0x211D, 0x2124, 0x2124, 0x2126, 0x2126,
    0x2128, 0x2128, 0x212A, 0x212D, 0x212F, 0x2134, 0x2139, 0x2139,
    0x213C, 0x213F, 0x2145, 0x2149, 0x214E, 0x214E, 0x2183, 0x2183,
    0x2184, 0x2184, 0x2C00, 0x2C7B, 0x2C7E, 0x2CE4, 0x2CEB, 0x2CEE,
    0x2CF2, 0x2CF2, 0x2CF3, 0x2CF3, 0xA640, 0xA66D, 0xA680, 0xA69B,
    0xA722, 0xA76F, 0xA771, 0xA787, 0xA78B, 0xA78E, 0xAB70, 0xABBF,
    0xFB00, 0xFB06, 0xFB13, 0xFB17, 0xFF21, 0xFF3A, 0xFF41, 0xFF5A,
    0x10400, 0x1044F, 0x104B0, 0x104D3, 0x104D8, 0x104FB, 0x10C80, 0x10CB2,
    0x10CC0, 0x10CF2, 0x118A0, 0x118DF, 0x1E900, 0x1E943,
};
static const uint32_t forge__cls_deepseek_punct[12] = {
    0x21, 0x2F, 0x3A, 0x7E, 0xFF01, 0xFF0F, 0xFF1A, 0xFF5E,
    0x2018, 0x201F, 0x3000, 0x3002,
};
static const uint32_t forge__cls_deepseek_cjk[6] = {
    0x4E00, 0x9FA5, 0x800, 0x4E00, 0xAC00, 0xD7FF,
};

static unsigned forge__cp_flags(uint32_t cp) {
    size_t lo = 0, hi = FORGE__UCD_RUNS;
    if (cp >= 0x110000u) return 0;
    while (hi - lo > 1) { /* last run that starts at or before cp */
        size_t mid = lo + (hi - lo) / 2;
        if (forge__ucd_starts[mid] <= cp) lo = mid;
        else hi = mid;
    }
    return forge__ucd_flags[lo];
}

static int forge__cp_in(const uint32_t *pairs, size_t n_values, uint32_t cp) {
    size_t i;
    for (i = 0; i + 1 < n_values; i += 2)
        if (cp >= pairs[i] && cp <= pairs[i + 1]) return 1;
    return 0;
}

/* Decodes one UTF-8 character at s[0 .. n) (n >= 1); *len gets its bytes. Overlong forms, surrogates and
   truncated sequences give FORGE__CP_INVALID with *len 1. */
static uint32_t forge__utf8_decode(const unsigned char *s, size_t n, size_t *len) {
    uint32_t c = s[0], cp;
    size_t need, i;
    *len = 1;
    if (c < 0x80) return c;
    if (c >= 0xC2 && c <= 0xDF) need = 1, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) need = 2, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4) need = 3, cp = c & 0x07;
    else return FORGE__CP_INVALID;
    if (need >= n) return FORGE__CP_INVALID;
    for (i = 1; i <= need; i++) {
        if ((s[i] & 0xC0) != 0x80) return FORGE__CP_INVALID;
        cp = (cp << 6) | (s[i] & 0x3Fu);
    }
    if ((need == 2 && cp < 0x800) || (need == 3 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
        return FORGE__CP_INVALID;
    *len = need + 1;
    return cp;
}

static size_t forge__utf8_encode(uint32_t cp, unsigned char *out) {
    if (cp < 0x80) { out[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) {
        out[0] = (unsigned char)(0xC0 | (cp >> 6));
        out[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (unsigned char)(0xE0 | (cp >> 12));
        out[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (unsigned char)(0xF0 | (cp >> 18));
    out[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* bytes of a UTF-8 character judged by its first byte alone */
static size_t forge__utf8_lead_len(unsigned char c) {
    static const unsigned char lens[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lens[c >> 4];
}

/* ---- the tokenizer object */

typedef enum forge__pre {
    FORGE__PRE_NONE = 0, /* SPM: no pre-tokenizer */
    FORGE__PRE_DEFAULT,
    FORGE__PRE_GPT2,
    FORGE__PRE_LLAMA3,
    FORGE__PRE_QWEN2,
    FORGE__PRE_STARCODER,
    FORGE__PRE_DEEPSEEK_LLM,
    FORGE__PRE_DEEPSEEK_CODER,
    FORGE__PRE_FALCON
} forge__pre;

static const struct forge__pre_name {
    const char *name;
    forge__pre pre;
    int ignore_merges; /* a piece that is a token as a whole is taken without merging */
} forge__pre_names[] = {
    {"default", FORGE__PRE_DEFAULT, 0},      {"gpt-2", FORGE__PRE_GPT2, 0},
    {"phi-2", FORGE__PRE_GPT2, 0},           {"mpt", FORGE__PRE_GPT2, 0},
    {"olmo", FORGE__PRE_GPT2, 0},            {"jais", FORGE__PRE_GPT2, 0},
    {"exaone4", FORGE__PRE_GPT2, 0},         {"llama3", FORGE__PRE_LLAMA3, 1},
    {"llama-v3", FORGE__PRE_LLAMA3, 1},      {"llama-bpe", FORGE__PRE_LLAMA3, 1},
    {"falcon3", FORGE__PRE_LLAMA3, 1},       {"pixtral", FORGE__PRE_LLAMA3, 1},
    {"dbrx", FORGE__PRE_LLAMA3, 0},          {"smaug-bpe", FORGE__PRE_LLAMA3, 0},
    {"qwen2", FORGE__PRE_QWEN2, 0},          {"deepseek-r1-qwen", FORGE__PRE_QWEN2, 0},
    {"stablelm2", FORGE__PRE_QWEN2, 0},      {"starcoder", FORGE__PRE_STARCODER, 0},
    {"refact", FORGE__PRE_STARCODER, 0},     {"command-r", FORGE__PRE_STARCODER, 0},
    {"smollm", FORGE__PRE_STARCODER, 0},     {"codeshell", FORGE__PRE_STARCODER, 0},
    {"exaone", FORGE__PRE_STARCODER, 0},     {"minerva-7b", FORGE__PRE_STARCODER, 0},
    {"deepseek-llm", FORGE__PRE_DEEPSEEK_LLM, 0}, {"deepseek-coder", FORGE__PRE_DEEPSEEK_CODER, 0},
    {"falcon", FORGE__PRE_FALCON, 0},
};

struct forge_tokenizer {
    forge_allocator allocator;
    forge_vocab_type type;
    forge__pre pre;
    const char *pre_name;
    int ignore_merges, add_space_prefix, add_bos;
    int32_t bos_id, eos_id, eot_id, unk_id;
    uint32_t n_vocab;
    char *text_pool;      /* every token's text, back to back */
    size_t *text_off;     /* n_vocab + 1 offsets into text_pool */
    char *piece_pool;     /* decoded pieces of normal, byte and user-defined tokens */
    size_t *piece_off;    /* n_vocab + 1 */
    size_t max_piece;
    float *scores;        /* SPM merge priority, NULL for BPE */
    uint8_t *types;
    uint32_t *vocab_slots; /* open addressing: token text -> id + 1, 0 = empty */
    uint64_t vocab_mask;
    /* BPE merges: "left right" strings; rank = index */
    char *merge_pool;
    size_t *merge_off;    /* n_merges + 1 */
    uint32_t *merge_split; /* byte index of the separating space */
    uint32_t n_merges;
    uint32_t *merge_slots; /* merge string -> rank + 1 */
    uint64_t merge_mask;
    /* special tokens (control, unknown, user-defined), found by a rolling hash per length */
    uint32_t *special_slots; /* -> id + 1 */
    uint64_t special_mask;
    size_t *special_lens;    /* distinct lengths, longest first */
    size_t n_special_lens;
    int32_t byte_token[256]; /* SPM: <0xXX>; BPE: the one-byte token; -1 when none */
    uint16_t byte_cp[256];   /* GPT-2's byte -> printable code point */
    int16_t cp_byte[324];    /* and back; -1 for code points it does not use */
};

#define FORGE__ROLL_BASE 0x100000001B3ull

static uint64_t forge__roll_hash(const char *p, size_t n) {
    uint64_t h = 0;
    size_t i;
    for (i = 0; i < n; i++) h = h * FORGE__ROLL_BASE + (uint8_t)p[i];
    return h;
}

static uint64_t forge__mix64(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

static const char *forge__tok_text(const forge_tokenizer *t, uint32_t id, size_t *len) {
    *len = t->text_off[id + 1] - t->text_off[id];
    return t->text_pool + t->text_off[id];
}

static int32_t forge__vocab_find(const forge_tokenizer *t, const char *s, size_t n) {
    uint64_t i = forge__hash(s, n) & t->vocab_mask;
    for (;; i = (i + 1) & t->vocab_mask) {
        uint32_t v = t->vocab_slots[i];
        size_t len;
        const char *text;
        if (!v) return -1;
        text = forge__tok_text(t, v - 1, &len);
        if (len == n && (n == 0 || memcmp(text, s, n) == 0)) return (int32_t)(v - 1);
    }
}

/* rank of merging left and right, -1 when the pair is not a merge */
static int32_t forge__merge_rank(const forge_tokenizer *t, const char *left, size_t nl, const char *right, size_t nr) {
    uint64_t h = 1469598103934665603ull, i; /* FNV-1a of "left right", as forge__hash computes it */
    size_t k;
    if (!t->merge_slots) return -1;
    for (k = 0; k < nl; k++) h = (h ^ (uint8_t)left[k]) * 1099511628211ull;
    h = (h ^ (uint8_t)' ') * 1099511628211ull;
    for (k = 0; k < nr; k++) h = (h ^ (uint8_t)right[k]) * 1099511628211ull;
    for (i = h & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        uint32_t v = t->merge_slots[i], r;
        const char *m;
        if (!v) return -1;
        r = v - 1;
        m = t->merge_pool + t->merge_off[r];
        if (t->merge_off[r + 1] - t->merge_off[r] == nl + 1 + nr && t->merge_split[r] == nl &&
            memcmp(m, left, nl) == 0 && memcmp(m + nl + 1, right, nr) == 0)
            return (int32_t)r;
    }
}

static int32_t forge__special_find(const forge_tokenizer *t, uint64_t roll, const char *s, size_t n) {
    uint64_t i;
    if (!t->special_slots) return -1;
    for (i = forge__mix64(roll ^ n) & t->special_mask;; i = (i + 1) & t->special_mask) {
        uint32_t v = t->special_slots[i];
        size_t len;
        const char *text;
        if (!v) return -1;
        text = forge__tok_text(t, v - 1, &len);
        if (len == n && memcmp(text, s, n) == 0) return (int32_t)(v - 1);
    }
}

static int forge__is_special_type(uint8_t type) {
    return type == FORGE_TOKEN_CONTROL || type == FORGE_TOKEN_UNKNOWN || type == FORGE_TOKEN_USER_DEFINED;
}

FORGE_API void forge_tokenizer_destroy(forge_tokenizer *t) {
    forge_allocator a;
    if (!t) return;
    a = t->allocator;
    forge__free(&a, t->text_pool);
    forge__free(&a, t->text_off);
    forge__free(&a, t->piece_pool);
    forge__free(&a, t->piece_off);
    forge__free(&a, t->scores);
    forge__free(&a, t->types);
    forge__free(&a, t->vocab_slots);
    forge__free(&a, t->merge_pool);
    forge__free(&a, t->merge_off);
    forge__free(&a, t->merge_split);
    forge__free(&a, t->merge_slots);
    forge__free(&a, t->special_slots);
    forge__free(&a, t->special_lens);
    forge__free(&a, t);
}

/* slots for n entries at most half full; 0 on overflow */
static uint64_t forge__slot_count(uint64_t n) {
    uint64_t s = 16;
    while (s < 2 * n) {
        if (s > (UINT64_MAX >> 2)) return 0;
        s <<= 1;
    }
    return s;
}

static void *forge__tok_alloc_array(forge_tokenizer *t, uint64_t count, size_t elem, int zero) {
    uint64_t bytes;
    void *p;
    if (!forge__mul_u64(count, elem, &bytes) || bytes > (uint64_t)SIZE_MAX) return NULL;
    p = forge__alloc(&t->allocator, (size_t)bytes);
    if (p && zero) memset(p, 0, (size_t)bytes);
    return p;
}

static forge_result forge__tok_id_key(const forge_gguf *g, const char *key, uint32_t n_vocab, int32_t *out,
                                      forge_error *e) {
    const forge_gguf_kv *kv = forge_gguf_find_kv(g, key);
    int64_t v = 0;
    forge_result r;
    *out = -1;
    if (!kv) return FORGE_OK;
    if ((r = forge_gguf_kv_int(kv, &v, e))) return r;
    if (v < 0 || v >= (int64_t)n_vocab)
        return forge__fail(e, FORGE_ERR_CONFIG, "%s is %lld, outside the vocabulary of %u tokens", key, (long long)v,
                           n_vocab);
    *out = (int32_t)v;
    return FORGE_OK;
}

/* GPT-2's reversible byte -> printable character mapping: printable Latin-1 bytes stand for themselves,
   the other 68 bytes take the code points 256, 257, ... in byte order */
static void forge__tok_byte_map(forge_tokenizer *t) {
    uint32_t b, next = 256;
    for (b = 0; b < 324; b++) t->cp_byte[b] = -1;
    for (b = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        uint32_t cp = printable ? b : next++;
        t->byte_cp[b] = (uint16_t)cp;
        t->cp_byte[cp] = (int16_t)b;
    }
}

static int forge__hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* decoded piece of token id into out (room for the token's text); returns its length */
static size_t forge__tok_decode(const forge_tokenizer *t, uint32_t id, char *out) {
    size_t len, i = 0, n = 0;
    const char *s = forge__tok_text(t, id, &len);
    uint8_t type = t->types[id];
    if (type == FORGE_TOKEN_CONTROL || type == FORGE_TOKEN_UNKNOWN || type == FORGE_TOKEN_UNUSED) return 0;
    if (type == FORGE_TOKEN_USER_DEFINED) {
        memcpy(out, s, len);
        return len;
    }
    if (t->type == FORGE_VOCAB_SPM) {
        if (type == FORGE_TOKEN_BYTE && len == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x' && s[5] == '>' &&
            forge__hex_digit(s[3]) >= 0 && forge__hex_digit(s[4]) >= 0) {
            out[0] = (char)(forge__hex_digit(s[3]) * 16 + forge__hex_digit(s[4]));
            return 1;
        }
        while (i < len) {
            if (i + 3 <= len && (unsigned char)s[i] == 0xE2 && (unsigned char)s[i + 1] == 0x96 &&
                (unsigned char)s[i + 2] == 0x81) {
                out[n++] = ' ';
                i += 3;
            } else out[n++] = s[i++];
        }
        return n;
    }
    while (i < len) { /* BPE: printable characters back to bytes; anything else passes through */
        size_t cl;
        uint32_t cp = forge__utf8_decode((const unsigned char *)s + i, len - i, &cl);
        if (cp < 324 && t->cp_byte[cp] >= 0) out[n++] = (char)t->cp_byte[cp];
        else {
            memcpy(out + n, s + i, cl);
            n += cl;
        }
        i += cl;
    }
    return n;
}

static int forge__special_len_desc(const void *a, const void *b) {
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? 1 : (x > y ? -1 : 0);
}

FORGE_API forge_result forge_tokenizer_create(const forge_gguf *g, const forge_allocator *allocator,
                                              forge_tokenizer **out, forge_error *error) {
    static const char *const eot_texts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>"};
    const forge_gguf_kv *model_kv, *tokens, *scores, *types, *merges, *kv;
    forge_gguf_str model = {NULL, 0};
    forge_tokenizer *t;
    forge_result r = FORGE_OK;
    uint64_t total = 0, i, slots, n_special = 0;
    uint32_t n;

    if (out) *out = NULL;
    if (!g || !out) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_tokenizer_create: null argument");
    if ((r = forge__allocator_check(allocator, "forge_tokenizer_create: the allocator", error))) return r;
    model_kv = forge_gguf_find_kv(g, "tokenizer.ggml.model");
    tokens = forge_gguf_find_kv(g, "tokenizer.ggml.tokens");
    if (!model_kv) return forge__fail(error, FORGE_ERR_MISSING_KEY, "required key 'tokenizer.ggml.model' is missing");
    if ((r = forge_gguf_kv_str(model_kv, &model, error))) return r;
    if (!forge_gguf_str_eq(model, "llama") && !forge_gguf_str_eq(model, "gpt2"))
        return forge__fail(error, FORGE_ERR_UNSUPPORTED,
                           "tokenizer.ggml.model '%.*s' is not supported (only 'llama' and 'gpt2' are)",
                           FORGE__STR_ARGS(model));
    if (!tokens) return forge__fail(error, FORGE_ERR_MISSING_KEY, "required key 'tokenizer.ggml.tokens' is missing");
    if (tokens->type != FORGE_GGUF_ARRAY || tokens->elem_type != FORGE_GGUF_STRING)
        return forge__fail(error, FORGE_ERR_KEY_TYPE, "tokenizer.ggml.tokens is a %s of %s, not an array of strings",
                           forge_gguf_type_name(tokens->type), forge_gguf_type_name(tokens->elem_type));
    if (tokens->count == 0 || tokens->count > FORGE_TOKENIZER_MAX_VOCAB)
        return forge__fail(error, FORGE_ERR_CONFIG, "tokenizer.ggml.tokens has %llu entries; expected 1 to %u",
                           (forge__ull)tokens->count, (unsigned)FORGE_TOKENIZER_MAX_VOCAB);
    n = (uint32_t)tokens->count;
    scores = forge_gguf_find_kv(g, "tokenizer.ggml.scores");
    types = forge_gguf_find_kv(g, "tokenizer.ggml.token_type");
    merges = forge_gguf_find_kv(g, "tokenizer.ggml.merges");
    if (scores && (scores->type != FORGE_GGUF_ARRAY || scores->count != n))
        return forge__fail(error, FORGE_ERR_CONFIG, "tokenizer.ggml.scores has %llu entries for %u tokens",
                           (forge__ull)(scores->type == FORGE_GGUF_ARRAY ? scores->count : 1), n);
    if (types && (types->type != FORGE_GGUF_ARRAY || types->count != n))
        return forge__fail(error, FORGE_ERR_CONFIG, "tokenizer.ggml.token_type has %llu entries for %u tokens",
                           (forge__ull)(types->type == FORGE_GGUF_ARRAY ? types->count : 1), n);
    if (merges && (merges->type != FORGE_GGUF_ARRAY || merges->elem_type != FORGE_GGUF_STRING))
        return forge__fail(error, FORGE_ERR_KEY_TYPE, "tokenizer.ggml.merges is a %s of %s, not an array of strings",
                           forge_gguf_type_name(merges->type), forge_gguf_type_name(merges->elem_type));
    if (merges && merges->count > FORGE_TOKENIZER_MAX_VOCAB)
        return forge__fail(error, FORGE_ERR_CONFIG, "tokenizer.ggml.merges has %llu entries, above the limit of %u",
                           (forge__ull)merges->count, (unsigned)FORGE_TOKENIZER_MAX_VOCAB);

    t = (forge_tokenizer *)forge__alloc(allocator, sizeof *t);
    if (!t) return forge__fail(error, FORGE_ERR_HOST_MEMORY, "forge_tokenizer_create: %u bytes", (unsigned)sizeof *t);
    memset(t, 0, sizeof *t);
    if (allocator) t->allocator = *allocator;
    t->n_vocab = n;
    t->type = forge_gguf_str_eq(model, "llama") ? FORGE_VOCAB_SPM : FORGE_VOCAB_BPE;
    t->pre = FORGE__PRE_NONE;
    t->pre_name = "spm";
    forge__tok_byte_map(t);

    if (t->type == FORGE_VOCAB_BPE) {
        forge_gguf_str pre = {NULL, 0};
        size_t k;
        kv = forge_gguf_find_kv(g, "tokenizer.ggml.pre");
        if (kv && (r = forge_gguf_kv_str(kv, &pre, error))) goto fail;
        if (pre.len == 0) pre.ptr = "default", pre.len = 7;
        for (k = 0; k < sizeof forge__pre_names / sizeof forge__pre_names[0]; k++)
            if (forge_gguf_str_eq(pre, forge__pre_names[k].name)) {
                t->pre = forge__pre_names[k].pre;
                t->pre_name = forge__pre_names[k].name;
                t->ignore_merges = forge__pre_names[k].ignore_merges;
            }
        if (t->pre == FORGE__PRE_NONE) {
            r = forge__fail(error, FORGE_ERR_UNSUPPORTED,
                            "tokenizer.ggml.pre '%.*s' names a pre-tokenizer forge does not know (known: default, "
                            "gpt-2, llama3, llama-bpe, qwen2, smollm, starcoder, deepseek-llm, deepseek-coder, falcon "
                            "and their aliases)",
                            FORGE__STR_ARGS(pre));
            goto fail;
        }
    }

    /* token texts, copied */
    for (i = 0; i < n; i++)
        if (!forge__add_u64(total, tokens->strs[i].len, &total)) {
            r = forge__fail(error, FORGE_ERR_OVERFLOW, "tokenizer.ggml.tokens: total length overflows at token %llu",
                            (forge__ull)i);
            goto fail;
        }
    if (total > (uint64_t)SIZE_MAX / 4) {
        r = forge__fail(error, FORGE_ERR_LIMIT, "tokenizer.ggml.tokens: %llu bytes of text", (forge__ull)total);
        goto fail;
    }
    t->text_pool = (char *)forge__tok_alloc_array(t, total, 1, 0);
    t->text_off = (size_t *)forge__tok_alloc_array(t, (uint64_t)n + 1, sizeof(size_t), 0);
    t->types = (uint8_t *)forge__tok_alloc_array(t, n, 1, 0);
    slots = forge__slot_count(n);
    t->vocab_slots = (uint32_t *)forge__tok_alloc_array(t, slots, sizeof(uint32_t), 1);
    if (!t->text_pool || !t->text_off || !t->types || !t->vocab_slots) goto nomem;
    t->vocab_mask = slots - 1;
    t->text_off[0] = 0;
    for (i = 0; i < n; i++) {
        size_t len = (size_t)tokens->strs[i].len;
        if (len) memcpy(t->text_pool + t->text_off[i], tokens->strs[i].ptr, len);
        t->text_off[i + 1] = t->text_off[i] + len;
    }
    for (i = 0; i < n; i++) { /* insert; a later duplicate replaces an earlier one */
        size_t len;
        const char *s = forge__tok_text(t, (uint32_t)i, &len);
        uint64_t k = forge__hash(s, len) & t->vocab_mask;
        for (;; k = (k + 1) & t->vocab_mask) {
            uint32_t v = t->vocab_slots[k];
            size_t vl;
            const char *vs;
            if (!v) break;
            vs = forge__tok_text(t, v - 1, &vl);
            if (vl == len && (len == 0 || memcmp(vs, s, len) == 0)) break;
        }
        t->vocab_slots[k] = (uint32_t)i + 1;
    }
    for (i = 0; i < n; i++) {
        int64_t v = FORGE_TOKEN_NORMAL;
        if (types && (r = forge_gguf_kv_int_at(types, i, &v, error))) goto fail;
        t->types[i] = (uint8_t)((v >= 1 && v <= 6) ? v : (int64_t)FORGE_TOKEN_NORMAL);
    }
    if (t->type == FORGE_VOCAB_SPM) {
        t->scores = (float *)forge__tok_alloc_array(t, n, sizeof(float), 0);
        if (!t->scores) goto nomem;
        for (i = 0; i < n; i++) {
            double v = 0.0;
            if (scores && (r = forge_gguf_kv_float_at(scores, i, &v, error))) goto fail;
            if (!(v == v)) v = -3.0e38; /* NaN would break the ordering */
            if (v > 3.0e38) v = 3.0e38;
            if (v < -3.0e38) v = -3.0e38;
            t->scores[i] = (float)v;
        }
    }

    /* merges */
    if (t->type == FORGE_VOCAB_BPE && merges && merges->count) {
        uint64_t mtotal = 0;
        uint32_t m = (uint32_t)merges->count;
        for (i = 0; i < m; i++)
            if (!forge__add_u64(mtotal, merges->strs[i].len, &mtotal) || mtotal > (uint64_t)SIZE_MAX / 4) {
                r = forge__fail(error, FORGE_ERR_OVERFLOW, "tokenizer.ggml.merges: total length overflows at %llu",
                                (forge__ull)i);
                goto fail;
            }
        t->merge_pool = (char *)forge__tok_alloc_array(t, mtotal, 1, 0);
        t->merge_off = (size_t *)forge__tok_alloc_array(t, (uint64_t)m + 1, sizeof(size_t), 0);
        t->merge_split = (uint32_t *)forge__tok_alloc_array(t, m, sizeof(uint32_t), 0);
        slots = forge__slot_count(m);
        t->merge_slots = (uint32_t *)forge__tok_alloc_array(t, slots, sizeof(uint32_t), 1);
        if (!t->merge_pool || !t->merge_off || !t->merge_split || !t->merge_slots) goto nomem;
        t->merge_mask = slots - 1;
        t->n_merges = m;
        t->merge_off[0] = 0;
        for (i = 0; i < m; i++) {
            forge_gguf_str s = merges->strs[i];
            size_t split = 0, k;
            uint64_t h;
            if (s.len) memcpy(t->merge_pool + t->merge_off[i], s.ptr, (size_t)s.len);
            t->merge_off[i + 1] = t->merge_off[i] + (size_t)s.len;
            for (k = 1; k < s.len; k++) /* the separator: the first space after the first byte */
                if (s.ptr[k] == ' ') {
                    split = k;
                    break;
                }
            t->merge_split[i] = (uint32_t)FORGE__MIN(split, (size_t)UINT32_MAX);
            if (!split || split > UINT32_MAX) continue; /* not a pair: never matches */
            h = forge__hash(s.ptr, s.len);
            for (k = (size_t)(h & t->merge_mask);; k = (size_t)((k + 1) & t->merge_mask)) {
                uint32_t v = t->merge_slots[k];
                if (!v) {
                    t->merge_slots[k] = (uint32_t)i + 1;
                    break;
                }
                if (t->merge_off[v] - t->merge_off[v - 1] == s.len &&
                    memcmp(t->merge_pool + t->merge_off[v - 1], s.ptr, (size_t)s.len) == 0)
                    break; /* the first of duplicates keeps its rank */
            }
        }
    }

    /* special tokens */
    for (i = 0; i < n; i++)
        if (forge__is_special_type(t->types[i]) && t->text_off[i + 1] > t->text_off[i]) n_special++;
    if (n_special) {
        size_t n_lens = 0, k;
        slots = forge__slot_count(n_special);
        t->special_slots = (uint32_t *)forge__tok_alloc_array(t, slots, sizeof(uint32_t), 1);
        t->special_lens = (size_t *)forge__tok_alloc_array(t, n_special, sizeof(size_t), 0);
        if (!t->special_slots || !t->special_lens) goto nomem;
        t->special_mask = slots - 1;
        for (i = 0; i < n; i++) {
            size_t len;
            const char *s = forge__tok_text(t, (uint32_t)i, &len);
            if (!forge__is_special_type(t->types[i]) || len == 0) continue;
            if (forge__special_find(t, forge__roll_hash(s, len), s, len) >= 0) continue; /* lowest id wins */
            for (k = (size_t)(forge__mix64(forge__roll_hash(s, len) ^ len) & t->special_mask); t->special_slots[k];
                 k = (size_t)((k + 1) & t->special_mask)) {
            }
            t->special_slots[k] = (uint32_t)i + 1;
            for (k = 0; k < n_lens && t->special_lens[k] != len; k++) {
            }
            if (k == n_lens) t->special_lens[n_lens++] = len;
        }
        qsort(t->special_lens, n_lens, sizeof(size_t), forge__special_len_desc);
        t->n_special_lens = n_lens;
    }

    /* decoded pieces: never longer than the text (BPE characters become bytes, U+2581 a space) */
    {
        size_t k, len;
        t->piece_pool = (char *)forge__tok_alloc_array(t, total, 1, 0);
        t->piece_off = (size_t *)forge__tok_alloc_array(t, (uint64_t)n + 1, sizeof(size_t), 0);
        if (!t->piece_pool || !t->piece_off) goto nomem;
        t->piece_off[0] = 0;
        for (i = 0; i < n; i++) {
            len = forge__tok_decode(t, (uint32_t)i, t->piece_pool + t->piece_off[i]);
            t->piece_off[i + 1] = t->piece_off[i] + len;
            if (len > t->max_piece) t->max_piece = len;
            forge__tok_text(t, (uint32_t)i, &k);
            if (forge__is_special_type(t->types[i]) && k > t->max_piece) t->max_piece = k;
        }
    }

    /* byte fallback tokens */
    for (i = 0; i < 256; i++) {
        char one = (char)i;
        int32_t id = -1;
        if (t->type == FORGE_VOCAB_SPM) {
            static const char hex[] = "0123456789ABCDEF";
            char buf[6];
            buf[0] = '<', buf[1] = '0', buf[2] = 'x', buf[3] = hex[i >> 4], buf[4] = hex[i & 15], buf[5] = '>';
            id = forge__vocab_find(t, buf, 6);
        }
        if (id < 0) id = forge__vocab_find(t, &one, 1);
        t->byte_token[i] = id;
    }

    /* special ids and flags */
    if ((r = forge__tok_id_key(g, "tokenizer.ggml.bos_token_id", n, &t->bos_id, error)) ||
        (r = forge__tok_id_key(g, "tokenizer.ggml.eos_token_id", n, &t->eos_id, error)) ||
        (r = forge__tok_id_key(g, "tokenizer.ggml.eot_token_id", n, &t->eot_id, error)) ||
        (r = forge__tok_id_key(g, "tokenizer.ggml.unknown_token_id", n, &t->unk_id, error)))
        goto fail;
    if (t->eot_id < 0) {
        size_t k;
        for (k = 0; k < sizeof eot_texts / sizeof eot_texts[0] && t->eot_id < 0; k++) {
            int32_t id = forge__vocab_find(t, eot_texts[k], strlen(eot_texts[k]));
            if (id >= 0 && t->types[id] == FORGE_TOKEN_CONTROL) t->eot_id = id;
        }
    }
    t->add_bos = t->type == FORGE_VOCAB_SPM;
    kv = forge_gguf_find_kv(g, "tokenizer.ggml.add_bos_token");
    if (kv && (r = forge_gguf_kv_bool(kv, &t->add_bos, error))) goto fail;
    if (t->bos_id < 0) t->add_bos = 0;
    t->add_space_prefix = t->type == FORGE_VOCAB_SPM;
    kv = forge_gguf_find_kv(g, "tokenizer.ggml.add_space_prefix");
    if (kv && t->type == FORGE_VOCAB_SPM && (r = forge_gguf_kv_bool(kv, &t->add_space_prefix, error))) goto fail;

    *out = t;
    forge__ok(error);
    return FORGE_OK;
nomem:
    r = forge__fail(error, FORGE_ERR_HOST_MEMORY, "forge_tokenizer_create: out of host memory for %u tokens (%llu bytes of text)",
                    n, (forge__ull)total);
fail:
    forge_tokenizer_destroy(t);
    return r;
}

FORGE_API uint32_t forge_tokenizer_n_vocab(const forge_tokenizer *t) { return t ? t->n_vocab : 0; }
FORGE_API forge_vocab_type forge_tokenizer_type(const forge_tokenizer *t) { return t ? t->type : FORGE_VOCAB_NONE; }
FORGE_API const char *forge_tokenizer_pre_name(const forge_tokenizer *t) { return t ? t->pre_name : ""; }
FORGE_API int32_t forge_tokenizer_bos(const forge_tokenizer *t) { return t ? t->bos_id : -1; }
FORGE_API int32_t forge_tokenizer_eos(const forge_tokenizer *t) { return t ? t->eos_id : -1; }
FORGE_API int32_t forge_tokenizer_eot(const forge_tokenizer *t) { return t ? t->eot_id : -1; }
FORGE_API int32_t forge_tokenizer_unk(const forge_tokenizer *t) { return t ? t->unk_id : -1; }
FORGE_API int forge_tokenizer_add_bos(const forge_tokenizer *t) { return t ? t->add_bos : 0; }
FORGE_API size_t forge_tokenizer_max_piece_bytes(const forge_tokenizer *t) { return t ? t->max_piece : 0; }
FORGE_API int forge_tokenizer_is_eog(const forge_tokenizer *t, int32_t id) {
    return t && id >= 0 && (id == t->eos_id || id == t->eot_id);
}
FORGE_API forge_token_type forge_tokenizer_token_type(const forge_tokenizer *t, int32_t id) {
    if (!t || id < 0 || (uint32_t)id >= t->n_vocab) return FORGE_TOKEN_UNDEFINED;
    return (forge_token_type)t->types[id];
}
FORGE_API const char *forge_tokenizer_token_text(const forge_tokenizer *t, int32_t id, size_t *len) {
    size_t dummy;
    if (!len) len = &dummy;
    if (!t || id < 0 || (uint32_t)id >= t->n_vocab) {
        *len = 0;
        return "";
    }
    return forge__tok_text(t, (uint32_t)id, len);
}

/* ---- tokenizing */

typedef struct forge__tok_sym {
    int32_t prev, next;
    uint32_t start, n; /* bytes of the symbol in the word buffer; n == 0 once merged away */
} forge__tok_sym;

typedef struct forge__tok_pair {
    int32_t left, right;
    uint32_t size;
    float key; /* higher merges first: SPM score, or minus the BPE rank */
} forge__tok_pair;

typedef struct forge__tok_work {
    const forge_tokenizer *t;
    int32_t *ids;
    size_t capacity, count;
    int32_t *special_at; /* per text byte: id of a special token starting there, -1, or -2 inside one */
    uint32_t *cps;       /* code points of the current fragment */
    uint32_t *cp_off;    /* byte offset of each code point, plus one past the end */
    uint8_t *cut;        /* 1 where a pre-tokenizer piece starts */
    char *buf;           /* SPM's escaped text or BPE's mapped piece */
    forge__tok_sym *syms;
    forge__tok_pair *heap;
    size_t n_heap;
    forge_error *e;
} forge__tok_work;

static void forge__tok_emit(forge__tok_work *w, int32_t id) {
    if (w->count < w->capacity) w->ids[w->count] = id;
    w->count++;
}

static int forge__pair_before(const forge__tok_pair *a, const forge__tok_pair *b) {
    return a->key > b->key || (a->key == b->key && a->left < b->left);
}

static void forge__heap_push(forge__tok_work *w, forge__tok_pair p) {
    size_t i = w->n_heap++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!forge__pair_before(&p, &w->heap[parent])) break;
        w->heap[i] = w->heap[parent];
        i = parent;
    }
    w->heap[i] = p;
}

static forge__tok_pair forge__heap_pop(forge__tok_work *w) {
    forge__tok_pair top = w->heap[0], last = w->heap[--w->n_heap];
    size_t i = 0, n = w->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && forge__pair_before(&w->heap[c + 1], &w->heap[c])) c++;
        if (!forge__pair_before(&w->heap[c], &last)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n) w->heap[i] = last;
    return top;
}

static void forge__tok_try_pair(forge__tok_work *w, int32_t left, int32_t right) {
    const forge_tokenizer *t = w->t;
    const forge__tok_sym *l, *r;
    forge__tok_pair p;
    if (left < 0 || right < 0) return;
    l = &w->syms[left];
    r = &w->syms[right];
    if (t->type == FORGE_VOCAB_SPM) {
        int32_t id = forge__vocab_find(t, w->buf + l->start, (size_t)l->n + r->n); /* symbols are adjacent */
        if (id < 0) return;
        p.key = t->scores[id];
    } else {
        int32_t rank = forge__merge_rank(t, w->buf + l->start, l->n, w->buf + r->start, r->n);
        if (rank < 0) return;
        p.key = -(float)rank;
    }
    p.left = left;
    p.right = right;
    p.size = l->n + r->n;
    forge__heap_push(w, p);
}

/* Merges the symbols of buf[0 .. n) (one per character, as the lead byte says) pair by pair in the
   heap's order; leaves the survivors chained from symbol 0. Ranks above 2^24 lose float precision:
   real merge lists are far shorter. */
static void forge__tok_merge(forge__tok_work *w, size_t n) {
    size_t pos = 0, count = 0, i;
    while (pos < n) { /* llama.cpp trusts the lead byte; a bad byte standing alone keeps the text intact */
        size_t len;
        forge__tok_sym *s = &w->syms[count];
        forge__utf8_decode((const unsigned char *)w->buf + pos, n - pos, &len);
        s->start = (uint32_t)pos;
        s->n = (uint32_t)len;
        s->prev = (int32_t)count - 1;
        pos += len;
        s->next = pos == n ? -1 : (int32_t)count + 1;
        count++;
    }
    w->n_heap = 0;
    for (i = 1; i < count; i++) forge__tok_try_pair(w, (int32_t)i - 1, (int32_t)i);
    while (w->n_heap) {
        forge__tok_pair p = forge__heap_pop(w);
        forge__tok_sym *l = &w->syms[p.left], *r = &w->syms[p.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != p.size) continue; /* outdated */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) w->syms[r->next].prev = p.left;
        forge__tok_try_pair(w, l->prev, p.left);
        forge__tok_try_pair(w, p.left, l->next);
    }
}

static forge_result forge__tok_bytes(forge__tok_work *w, const char *s, size_t n) {
    size_t i;
    for (i = 0; i < n; i++) {
        int32_t id = w->t->byte_token[(uint8_t)s[i]];
        if (id < 0) id = w->t->unk_id;
        if (id < 0)
            return forge__fail(w->e, FORGE_ERR_UNSUPPORTED,
                               "byte 0x%02X has no token and the vocabulary has no unknown token", (unsigned)(uint8_t)s[i]);
        forge__tok_emit(w, id);
    }
    return FORGE_OK;
}

static forge_result forge__tok_emit_syms(forge__tok_work *w) {
    int32_t i;
    forge_result r;
    for (i = 0; i >= 0; i = w->syms[i].next) {
        const forge__tok_sym *s = &w->syms[i];
        int32_t id = forge__vocab_find(w->t, w->buf + s->start, s->n);
        size_t k, cl;
        if (id >= 0) forge__tok_emit(w, id);
        else if (w->t->type == FORGE_VOCAB_SPM) {
            if ((r = forge__tok_bytes(w, w->buf + s->start, s->n))) return r;
        } else
            for (k = 0; k < s->n; k += cl) { /* BPE: each byte's character alone, else unknown, else dropped */
                forge__utf8_decode((const unsigned char *)w->buf + s->start + k, s->n - k, &cl);
                id = forge__vocab_find(w->t, w->buf + s->start + k, cl);
                if (id < 0) id = w->t->unk_id;
                if (id >= 0) forge__tok_emit(w, id);
            }
    }
    return FORGE_OK;
}

/* SPM: one fragment of plain text */
static forge_result forge__tok_spm(forge__tok_work *w, const char *text, size_t len, int space_prefix) {
    size_t n = 0, i;
    if (space_prefix) {
        memcpy(w->buf, "\xE2\x96\x81", 3);
        n = 3;
    }
    for (i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(w->buf + n, "\xE2\x96\x81", 3);
            n += 3;
        } else w->buf[n++] = text[i];
    }
    if (n == 0) return FORGE_OK;
    forge__tok_merge(w, n);
    return forge__tok_emit_syms(w);
}

/* ---- BPE pre-tokenizers: each pass cuts every current piece further at the edges of its matches */

static unsigned forge__wf(const forge__tok_work *w, size_t i) {
    uint32_t cp = w->cps[i];
    return cp == FORGE__CP_INVALID ? 0u : forge__cp_flags(cp);
}
#define FORGE__IS_L(w, i) ((forge__wf(w, i) & FORGE__CP_LETTER) != 0)
#define FORGE__IS_N(w, i) ((forge__wf(w, i) & FORGE__CP_NUMBER) != 0)
#define FORGE__IS_S(w, i) ((forge__wf(w, i) & FORGE__CP_SPACE) != 0)
/* [^\s\p{L}\p{N}] */
#define FORGE__IS_OTHER(w, i) ((forge__wf(w, i) & (FORGE__CP_SPACE | FORGE__CP_LETTER | FORGE__CP_NUMBER)) == 0)

static uint32_t forge__ascii_lower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

/* 's 't 're 've 'm 'll 'd at p: end of the match, or p */
static size_t forge__pre_contraction(const forge__tok_work *w, size_t p, size_t end, int any_case) {
    uint32_t a, b;
    if (w->cps[p] != '\'' || p + 1 >= end) return p;
    a = any_case ? forge__ascii_lower(w->cps[p + 1]) : w->cps[p + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return p + 2;
    if (p + 2 >= end) return p;
    b = any_case ? forge__ascii_lower(w->cps[p + 2]) : w->cps[p + 2];
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return p + 3;
    return p;
}

static size_t forge__run(const forge__tok_work *w, size_t p, size_t end, unsigned flag) {
    while (p < end && (forge__wf(w, p) & flag)) p++;
    return p;
}

static size_t forge__run_other(const forge__tok_work *w, size_t p, size_t end) {
    while (p < end && FORGE__IS_OTHER(w, p)) p++;
    return p;
}

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S) at p; returns p for no match */
static size_t forge__pre_gpt2_at(const forge__tok_work *w, size_t p, size_t end) {
    size_t q = forge__pre_contraction(w, p, end, 0), body = p;
    if (q > p) return q;
    if (w->cps[p] == ' ' && p + 1 < end && !FORGE__IS_S(w, p + 1)) body = p + 1;
    if (FORGE__IS_L(w, body)) return forge__run(w, body, end, FORGE__CP_LETTER);
    if (FORGE__IS_N(w, body)) return forge__run(w, body, end, FORGE__CP_NUMBER);
    if (FORGE__IS_OTHER(w, body)) return forge__run_other(w, body, end);
    q = forge__run(w, p, end, FORGE__CP_SPACE);
    if (q == end) return q;
    if (q - p >= 2) return q - 1; /* leave the last space to the word that follows */
    return p;
}

/* the llama3 / qwen2 split:
   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}| ?[^\s\p{L}\p{N}]+[\r\n]*|
   \s*[\r\n]+|\s+(?!\S)|\s+ */
static size_t forge__pre_llama3_at(const forge__tok_work *w, size_t p, size_t end, size_t max_digits) {
    uint32_t c = w->cps[p];
    size_t q = forge__pre_contraction(w, p, end, 1), k, last_nl;
    if (q > p) return q;
    if (FORGE__IS_L(w, p)) return forge__run(w, p, end, FORGE__CP_LETTER);
    if (c != '\r' && c != '\n' && !FORGE__IS_N(w, p) && p + 1 < end && FORGE__IS_L(w, p + 1))
        return forge__run(w, p + 1, end, FORGE__CP_LETTER);
    if (FORGE__IS_N(w, p)) {
        for (q = p; q < end && q - p < max_digits && FORGE__IS_N(w, q); q++) {
        }
        return q;
    }
    q = (c == ' ' && p + 1 < end && FORGE__IS_OTHER(w, p + 1)) ? p + 1 : p;
    if (FORGE__IS_OTHER(w, q)) {
        q = forge__run_other(w, q, end);
        while (q < end && (w->cps[q] == '\r' || w->cps[q] == '\n')) q++;
        return q;
    }
    /* whitespace from here on */
    q = forge__run(w, p, end, FORGE__CP_SPACE);
    last_nl = end;
    for (k = p; k < q; k++)
        if (w->cps[k] == '\r' || w->cps[k] == '\n') last_nl = k;
    if (last_nl != end) return last_nl + 1;
    if (q < end && q - p >= 2) return q - 1;
    return q;
}

typedef enum forge__cls {
    FORGE__CLS_NUMBER,        /* \p{N} */
    FORGE__CLS_DIGIT,         /* [0-9] */
    FORGE__CLS_NEWLINE,       /* [\r\n] */
    FORGE__CLS_LETTER,        /* \p{L} */
    FORGE__CLS_PUNCT,         /* \p{P} */
    FORGE__CLS_PUNCT_ASCII,   /* [\p{P}\$\+<=>\^~\|] (default) */
    FORGE__CLS_PUNCT_FALCON,  /* [\p{P}\$\+<=>\^~\|`] */
    FORGE__CLS_DS_LETTER,     /* deepseek-llm's letter class */
    FORGE__CLS_DS_PUNCT,      /* deepseek-llm's punctuation class */
    FORGE__CLS_CJK            /* [一-龥ࠀ-一가-퟿] */
} forge__cls;

static int forge__in_cls(const forge__tok_work *w, size_t i, forge__cls cls) {
    uint32_t c = w->cps[i];
    switch (cls) {
    case FORGE__CLS_NUMBER: return FORGE__IS_N(w, i);
    case FORGE__CLS_DIGIT: return c >= '0' && c <= '9';
    case FORGE__CLS_NEWLINE: return c == '\r' || c == '\n';
    case FORGE__CLS_LETTER: return FORGE__IS_L(w, i);
    case FORGE__CLS_PUNCT: return (forge__wf(w, i) & FORGE__CP_PUNCT) != 0;
    case FORGE__CLS_PUNCT_ASCII:
    case FORGE__CLS_PUNCT_FALCON:
        if (c == '$' || c == '+' || c == '<' || c == '=' || c == '>' || c == '^' || c == '~' || c == '|') return 1;
        if (c == '`') return cls == FORGE__CLS_PUNCT_FALCON;
        return (forge__wf(w, i) & FORGE__CP_PUNCT) != 0;
    case FORGE__CLS_DS_LETTER:
        return forge__cp_in(forge__cls_deepseek_letters, sizeof forge__cls_deepseek_letters / sizeof(uint32_t), c);
    case FORGE__CLS_DS_PUNCT:
        return forge__cp_in(forge__cls_deepseek_punct, sizeof forge__cls_deepseek_punct / sizeof(uint32_t), c);
    case FORGE__CLS_CJK: return forge__cp_in(forge__cls_deepseek_cjk, sizeof forge__cls_deepseek_cjk / sizeof(uint32_t), c);
    }
    return 0;
}

typedef enum forge__pass_kind {
    FORGE__PASS_GPT2,
    FORGE__PASS_LLAMA3,      /* arg: most digits in one piece */
    FORGE__PASS_RUN,         /* cls{min,max}; arg packs min | max << 8, max 0 = unbounded */
    FORGE__PASS_SPACE_RUN,   /* \s?cls+ */
    FORGE__PASS_TRAILING_WS  /* \s+$ */
} forge__pass_kind;

typedef struct forge__pass {
    forge__pass_kind kind;
    forge__cls cls;
    unsigned arg;
} forge__pass;

/* end of the match of one pass at p inside [p, end), or p when nothing matches there */
static size_t forge__pass_at(const forge__tok_work *w, const forge__pass *pass, size_t p, size_t end) {
    size_t q;
    switch (pass->kind) {
    case FORGE__PASS_GPT2: return forge__pre_gpt2_at(w, p, end);
    case FORGE__PASS_LLAMA3: return forge__pre_llama3_at(w, p, end, pass->arg);
    case FORGE__PASS_RUN: {
        size_t min = pass->arg & 0xFF, max = pass->arg >> 8;
        for (q = p; q < end && (max == 0 || q - p < max) && forge__in_cls(w, q, pass->cls); q++) {
        }
        return q - p >= min ? q : p;
    }
    case FORGE__PASS_SPACE_RUN:
        q = p;
        if (FORGE__IS_S(w, p) && p + 1 < end && forge__in_cls(w, p + 1, pass->cls)) q = p + 1;
        if (!forge__in_cls(w, q, pass->cls)) return p;
        while (q < end && forge__in_cls(w, q, pass->cls)) q++;
        return q;
    case FORGE__PASS_TRAILING_WS: return p; /* handled per piece */
    }
    return p;
}

static void forge__pre_pass(forge__tok_work *w, size_t n, const forge__pass *pass) {
    size_t a = 0;
    while (a < n) {
        size_t b = a + 1, p;
        while (b < n && !w->cut[b]) b++;
        if (pass->kind == FORGE__PASS_TRAILING_WS) {
            p = b;
            while (p > a && FORGE__IS_S(w, p - 1)) p--;
            if (p < b) w->cut[p] = 1;
        } else {
            for (p = a; p < b;) {
                size_t q = forge__pass_at(w, pass, p, b);
                if (q > p) {
                    w->cut[p] = 1;
                    w->cut[q] = 1;
                    p = q;
                } else p++;
            }
        }
        a = b;
    }
}

#define FORGE__RUN_ARG(min, max) ((unsigned)(min) | ((unsigned)(max) << 8))

/* BPE: one fragment of plain text */
static forge_result forge__tok_bpe(forge__tok_work *w, const char *text, size_t len) {
    static const forge__pass p_gpt2[] = {{FORGE__PASS_GPT2, FORGE__CLS_NUMBER, 0}};
    static const forge__pass p_default[] = {{FORGE__PASS_RUN, FORGE__CLS_PUNCT_ASCII, FORGE__RUN_ARG(1, 0)},
                                            {FORGE__PASS_GPT2, FORGE__CLS_NUMBER, 0},
                                            {FORGE__PASS_RUN, FORGE__CLS_NUMBER, FORGE__RUN_ARG(1, 0)},
                                            {FORGE__PASS_RUN, FORGE__CLS_DIGIT, FORGE__RUN_ARG(3, 3)}};
    static const forge__pass p_llama3[] = {{FORGE__PASS_LLAMA3, FORGE__CLS_NUMBER, 3}};
    static const forge__pass p_qwen2[] = {{FORGE__PASS_LLAMA3, FORGE__CLS_NUMBER, 1}};
    static const forge__pass p_starcoder[] = {{FORGE__PASS_RUN, FORGE__CLS_NUMBER, FORGE__RUN_ARG(1, 1)},
                                              {FORGE__PASS_GPT2, FORGE__CLS_NUMBER, 0}};
    static const forge__pass p_ds_llm[] = {{FORGE__PASS_RUN, FORGE__CLS_NEWLINE, FORGE__RUN_ARG(1, 1)},
                                           {FORGE__PASS_SPACE_RUN, FORGE__CLS_DS_LETTER, 0},
                                           {FORGE__PASS_SPACE_RUN, FORGE__CLS_DS_PUNCT, 0},
                                           {FORGE__PASS_TRAILING_WS, FORGE__CLS_NUMBER, 0},
                                           {FORGE__PASS_RUN, FORGE__CLS_CJK, FORGE__RUN_ARG(1, 0)},
                                           {FORGE__PASS_RUN, FORGE__CLS_NUMBER, FORGE__RUN_ARG(1, 0)}};
    static const forge__pass p_ds_coder[] = {{FORGE__PASS_RUN, FORGE__CLS_NEWLINE, FORGE__RUN_ARG(1, 1)},
                                             {FORGE__PASS_SPACE_RUN, FORGE__CLS_LETTER, 0},
                                             {FORGE__PASS_SPACE_RUN, FORGE__CLS_PUNCT, 0},
                                             {FORGE__PASS_RUN, FORGE__CLS_CJK, FORGE__RUN_ARG(1, 0)},
                                             {FORGE__PASS_RUN, FORGE__CLS_NUMBER, FORGE__RUN_ARG(1, 1)}};
    static const forge__pass p_falcon[] = {{FORGE__PASS_RUN, FORGE__CLS_PUNCT_FALCON, FORGE__RUN_ARG(1, 0)},
                                           {FORGE__PASS_GPT2, FORGE__CLS_NUMBER, 0},
                                           {FORGE__PASS_RUN, FORGE__CLS_DIGIT, FORGE__RUN_ARG(3, 3)}};
    const forge_tokenizer *t = w->t;
    const forge__pass *passes;
    size_t n_passes, n = 0, pos = 0, i, a;
    forge_result r;

    switch (t->pre) {
    case FORGE__PRE_GPT2: passes = p_gpt2, n_passes = 1; break;
    case FORGE__PRE_LLAMA3: passes = p_llama3, n_passes = 1; break;
    case FORGE__PRE_QWEN2: passes = p_qwen2, n_passes = 1; break;
    case FORGE__PRE_STARCODER: passes = p_starcoder, n_passes = 2; break;
    case FORGE__PRE_DEEPSEEK_LLM: passes = p_ds_llm, n_passes = 6; break;
    case FORGE__PRE_DEEPSEEK_CODER: passes = p_ds_coder, n_passes = 5; break;
    case FORGE__PRE_FALCON: passes = p_falcon, n_passes = 3; break;
    default: passes = p_default, n_passes = 4; break;
    }
    while (pos < len) {
        size_t cl;
        w->cps[n] = forge__utf8_decode((const unsigned char *)text + pos, len - pos, &cl);
        w->cp_off[n] = (uint32_t)pos;
        w->cut[n] = 0;
        n++;
        pos += cl;
    }
    w->cp_off[n] = (uint32_t)len;
    w->cut[n] = 1;
    if (n == 0) return FORGE_OK;
    w->cut[0] = 1;
    for (i = 0; i < n_passes; i++) forge__pre_pass(w, n, &passes[i]);

    for (a = 0; a < n;) { /* each piece: bytes -> GPT-2 characters -> merges */
        size_t b = a + 1, k, m = 0;
        const char *piece;
        size_t piece_len;
        while (b < n && !w->cut[b]) b++;
        piece = text + w->cp_off[a];
        piece_len = w->cp_off[b] - w->cp_off[a];
        for (k = 0; k < piece_len; k++)
            m += forge__utf8_encode(t->byte_cp[(uint8_t)piece[k]], (unsigned char *)w->buf + m);
        a = b;
        if (t->ignore_merges) {
            int32_t id = forge__vocab_find(t, w->buf, m);
            if (id >= 0) {
                forge__tok_emit(w, id);
                continue;
            }
        }
        forge__tok_merge(w, m);
        if ((r = forge__tok_emit_syms(w))) return r;
    }
    return FORGE_OK;
}

/* marks where special tokens start (longest first, then leftmost) in special_at */
static void forge__tok_find_specials(forge__tok_work *w, const char *text, size_t len, int parse_special) {
    const forge_tokenizer *t = w->t;
    size_t li, i;
    for (i = 0; i < len; i++) w->special_at[i] = -1;
    for (li = 0; li < t->n_special_lens; li++) {
        size_t L = t->special_lens[li], p;
        uint64_t h = 0, top = 1; /* top = BASE^(L-1) */
        if (L > len) continue;
        for (i = 1; i < L; i++) top *= FORGE__ROLL_BASE;
        for (i = 0; i < L; i++) h = h * FORGE__ROLL_BASE + (uint8_t)text[i];
        for (p = 0;;) {
            int32_t id = forge__special_find(t, h, text + p, L);
            size_t step = 1;
            if (id >= 0 && (parse_special || t->types[id] == FORGE_TOKEN_USER_DEFINED)) {
                size_t k;
                for (k = p; k < p + L && w->special_at[k] == -1; k++) {
                }
                if (k == p + L) { /* nothing claimed yet: take it, then go on after it */
                    w->special_at[p] = id;
                    for (k = p + 1; k < p + L; k++) w->special_at[k] = -2;
                    step = L;
                }
            }
            while (step--) {
                if (p + L >= len) goto next_len;
                h = (h - (uint8_t)text[p] * top) * FORGE__ROLL_BASE + (uint8_t)text[p + L];
                p++;
            }
        }
    next_len:;
    }
}

FORGE_API forge_result forge_tokenize(const forge_tokenizer *t, const char *text, size_t len, int add_bos,
                                      int parse_special, int32_t *ids, size_t capacity, size_t *n_ids,
                                      forge_error *error) {
    forge__tok_work w;
    uint64_t n = len, bytes = 0, part;
    char *block;
    size_t a, offs[8];
    int k, prev_special = 1;
    forge_result r = FORGE_OK;

    if (n_ids) *n_ids = 0;
    if (!t || (!text && len) || (!ids && capacity))
        return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_tokenize: null argument");
    if (len > FORGE_TOKENIZE_MAX_TEXT_BYTES)
        return forge__fail(error, FORGE_ERR_LIMIT, "forge_tokenize: %llu bytes of text, above the limit of %llu",
                           (forge__ull)len, (forge__ull)FORGE_TOKENIZE_MAX_TEXT_BYTES);
    if (add_bos && t->bos_id < 0)
        return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_tokenize: add_bos asked but the vocabulary has no BOS token");
    memset(&w, 0, sizeof w);
    w.t = t;
    w.ids = ids;
    w.capacity = capacity;
    w.e = error;
    /* one block: special_at, cps, cp_off (4 bytes per byte each), syms, heap (3 pairs per symbol),
       buf (3 bytes per byte + prefix), cut; every part rounded to 16 bytes */
    {
        const uint64_t sizes[6] = {4 * (n + 1), 4 * (n + 1), 4 * (n + 2), sizeof(forge__tok_sym) * (n + 2),
                                   sizeof(forge__tok_pair) * 3 * (n + 2), 3 * n + 8 + (n + 2)};
        for (k = 0; k < 6; k++) {
            offs[k] = (size_t)bytes;
            part = (sizes[k] + 15) & ~(uint64_t)15;
            bytes += part;
        }
        if (bytes > (uint64_t)SIZE_MAX)
            return forge__fail(error, FORGE_ERR_LIMIT, "forge_tokenize: work area of %llu bytes", (forge__ull)bytes);
    }
    block = (char *)forge__alloc(&t->allocator, (size_t)bytes);
    if (!block)
        return forge__fail(error, FORGE_ERR_HOST_MEMORY, "forge_tokenize: work area of %llu bytes for %llu bytes of text",
                           (forge__ull)bytes, (forge__ull)n);
    w.special_at = (int32_t *)(void *)(block + offs[0]);
    w.cps = (uint32_t *)(void *)(block + offs[1]);
    w.cp_off = (uint32_t *)(void *)(block + offs[2]);
    w.syms = (forge__tok_sym *)(void *)(block + offs[3]);
    w.heap = (forge__tok_pair *)(void *)(block + offs[4]);
    w.buf = block + offs[5];
    w.cut = (uint8_t *)(block + offs[5] + 3 * n + 8);

    if (add_bos) forge__tok_emit(&w, t->bos_id);
    forge__tok_find_specials(&w, text, len, parse_special);
    for (a = 0; a < len && !r;) {
        size_t b = a;
        if (w.special_at[a] >= 0) {
            forge__tok_emit(&w, w.special_at[a]);
            prev_special = 1;
            for (a++; a < len && w.special_at[a] == -2; a++) {
            }
            continue;
        }
        while (b < len && w.special_at[b] == -1) b++;
        if (t->type == FORGE_VOCAB_SPM) r = forge__tok_spm(&w, text + a, b - a, t->add_space_prefix && prev_special);
        else r = forge__tok_bpe(&w, text + a, b - a);
        prev_special = 0;
        a = b;
    }
    forge__free(&t->allocator, block);
    if (r) return r;
    if (n_ids) *n_ids = w.count;
    if (w.count > capacity)
        return forge__fail(error, FORGE_ERR_LIMIT, "forge_tokenize: the text needs %llu ids; capacity is %llu",
                           (forge__ull)w.count, (forge__ull)capacity);
    forge__ok(error);
    return FORGE_OK;
}

/* ---- detokenizing */

FORGE_API forge_result forge_token_to_piece(const forge_tokenizer *t, int32_t id, int special, const char **piece,
                                            size_t *piece_len, forge_error *error) {
    uint8_t type;
    if (piece) *piece = "";
    if (piece_len) *piece_len = 0;
    if (!t || !piece || !piece_len) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_token_to_piece: null argument");
    if (id < 0 || (uint32_t)id >= t->n_vocab)
        return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_token_to_piece: token %ld is outside the vocabulary of %u",
                           (long)id, t->n_vocab);
    type = t->types[id];
    if (type == FORGE_TOKEN_CONTROL || type == FORGE_TOKEN_UNKNOWN) {
        if (special) *piece = forge__tok_text(t, (uint32_t)id, piece_len);
    } else {
        *piece = t->piece_pool + t->piece_off[id];
        *piece_len = t->piece_off[id + 1] - t->piece_off[id];
    }
    forge__ok(error);
    return FORGE_OK;
}

FORGE_API forge_result forge_detokenize(const forge_tokenizer *t, const int32_t *ids, size_t n_ids, int special,
                                        char *out, size_t capacity, size_t *n_bytes, forge_error *error) {
    size_t i, total = 0;
    int strip;
    if (n_bytes) *n_bytes = 0;
    if (!t || (!ids && n_ids) || (!out && capacity))
        return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_detokenize: null argument");
    strip = t->add_space_prefix;
    for (i = 0; i < n_ids; i++) {
        const char *p;
        size_t len;
        forge_result r = forge_token_to_piece(t, ids[i], special, &p, &len, error);
        if (r) return r;
        if (len && strip) {
            strip = 0;
            if (p[0] == ' ') p++, len--;
        }
        if (total < capacity) memcpy(out + total, p, FORGE__MIN(len, capacity - total));
        total += len;
    }
    if (n_bytes) *n_bytes = total;
    if (total > capacity)
        return forge__fail(error, FORGE_ERR_LIMIT, "forge_detokenize: the text needs %llu bytes; capacity is %llu",
                           (forge__ull)total, (forge__ull)capacity);
    forge__ok(error);
    return FORGE_OK;
}

FORGE_API void forge_detokenizer_init(forge_detokenizer *d, const forge_tokenizer *t, int special) {
    if (!d) return;
    memset(d, 0, sizeof *d);
    d->tok = t;
    d->special = special;
    d->strip_space = t ? t->add_space_prefix : 0;
}

/* bytes at the end of s[0 .. n) that start a UTF-8 character still missing continuation bytes */
static size_t forge__utf8_incomplete_tail(const unsigned char *s, size_t n) {
    size_t k;
    for (k = 1; k <= 3 && k <= n; k++) {
        unsigned char c = s[n - k];
        if ((c & 0xC0) == 0x80) continue; /* continuation: look further back */
        if (c >= 0xC2 && c <= 0xF4) return forge__utf8_lead_len(c) > k ? k : 0;
        return 0;
    }
    return 0;
}

FORGE_API forge_result forge_detokenizer_push(forge_detokenizer *d, int32_t id, char *out, size_t capacity,
                                              size_t *n_out, forge_error *error) {
    const char *p;
    size_t len, total, hold;
    int stripped = 0;
    forge_result r;
    if (n_out) *n_out = 0;
    if (!d || !d->tok || !n_out || (!out && capacity))
        return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_detokenizer_push: null argument");
    if ((r = forge_token_to_piece(d->tok, id, d->special, &p, &len, error))) return r;
    if (len && d->strip_space && p[0] == ' ') p++, len--, stripped = 1;
    total = d->n_held + len;
    if (total > capacity + 3) /* up to 3 bytes may stay held */
        return forge__fail(error, FORGE_ERR_LIMIT, "forge_detokenizer_push: token %ld needs up to %llu bytes; capacity is %llu",
                           (long)id, (forge__ull)total, (forge__ull)capacity);
    {
        unsigned char tail[8];
        size_t tn = 0, k;
        /* the last few bytes of held + piece decide what to hold back */
        for (k = total > 7 ? total - 7 : 0; k < total; k++)
            tail[tn++] = (unsigned char)(k < d->n_held ? d->held[k] : (unsigned char)p[k - d->n_held]);
        hold = forge__utf8_incomplete_tail(tail, tn);
    }
    if (total - hold > capacity)
        return forge__fail(error, FORGE_ERR_LIMIT, "forge_detokenizer_push: token %ld needs %llu bytes; capacity is %llu",
                           (long)id, (forge__ull)(total - hold), (forge__ull)capacity);
    if (len || stripped) d->strip_space = 0;
    {
        unsigned char all_tail[4];
        size_t k, emit = total - hold;
        for (k = 0; k < hold; k++) {
            size_t at = emit + k;
            all_tail[k] = (unsigned char)(at < d->n_held ? d->held[at] : (unsigned char)p[at - d->n_held]);
        }
        for (k = 0; k < emit; k++) out[k] = (char)(k < d->n_held ? d->held[k] : (unsigned char)p[k - d->n_held]);
        memcpy(d->held, all_tail, hold);
        d->n_held = (uint32_t)hold;
        *n_out = emit;
    }
    forge__ok(error);
    return FORGE_OK;
}

FORGE_API forge_result forge_detokenizer_flush(forge_detokenizer *d, char *out, size_t capacity, size_t *n_out,
                                               forge_error *error) {
    if (n_out) *n_out = 0;
    if (!d || !n_out || (!out && capacity))
        return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_detokenizer_flush: null argument");
    if (d->n_held > capacity)
        return forge__fail(error, FORGE_ERR_LIMIT, "forge_detokenizer_flush: %u bytes held; capacity is %llu",
                           (unsigned)d->n_held, (forge__ull)capacity);
    if (d->n_held) memcpy(out, d->held, d->n_held);
    *n_out = d->n_held;
    d->n_held = 0;
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
    if (forge__allocator_check(&d.allocator, "forge_sampler_desc.allocator", error)) return FORGE_ERR_ARGUMENT;
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

static forge_result forge__sampler_finish(forge_sampler *s, size_t n, int sorted, int32_t *out_token, forge_error *error);

FORGE_API forge_result forge_sampler_sample(forge_sampler *s, const float *logits, int32_t *out_token,
                                            forge_error *error) {
    forge__candidate *c;
    const forge_sampler_desc *d;
    size_t n = 0, k;
    uint32_t v, h;
    int sorted = 0;
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
    return forge__sampler_finish(s, n, sorted, out_token, error);
}

/* Steps 4 to 8 over the candidates s->candidates[0..n): sorted best first when `sorted`, else in
   ascending id order. */
static forge_result forge__sampler_finish(forge_sampler *s, size_t n, int sorted, int32_t *out_token, forge_error *error) {
    forge__candidate *c = s->candidates;
    const forge_sampler_desc *d = &s->desc;
    size_t i, k;
    double max_logit, total, u, cumulative;

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

static forge_result forge__check_tensors_read(const forge_model *m, forge_error *e);

static forge_result forge__model_init(const void *bytes, size_t size, const forge_model_desc *desc, forge_model **out,
                                      forge_file *file, forge_error *error) {
    const forge_allocator *a = desc ? &desc->allocator : NULL;
    forge_model *m = (forge_model *)forge__alloc(a, sizeof *m);
    forge_result r;
    if (!m) return forge__fail(error, FORGE_ERR_HOST_MEMORY, "cannot allocate the model object (%u bytes)", (unsigned)sizeof *m);
    memset(m, 0, sizeof *m);
    if (a) m->allocator = *a;
    if ((r = forge_gguf_parse(bytes, size, a, &m->gguf, error)) || (r = forge_config_derive(m->gguf, &m->config, error)) ||
        (r = forge__check_tensors_read(m, error))) {
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
    if (desc && forge__allocator_check(&desc->allocator, "forge_model_desc.allocator", error)) return FORGE_ERR_ARGUMENT;
    return forge__model_init(bytes, size, desc, out, NULL, error);
}

#ifndef FORGE_NO_STDIO
FORGE_API forge_result forge_model_open(const char *path, const forge_model_desc *desc, forge_model **out,
                                        forge_error *error) {
    forge_file file;
    forge_result r;
    if (out) *out = NULL;
    if (!out || !path) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_model_open: null argument");
    if (desc && (r = forge__allocator_check(&desc->allocator, "forge_model_desc.allocator", error))) return r;
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

FORGE_API uint32_t forge_kv_layer_cells(const forge_config *c, uint32_t layer, uint32_t n_ctx, uint32_t n_batch) {
    uint64_t ring;
    if (!c || layer >= c->n_layer || !c->layer_is_swa[layer] || c->n_swa == 0 || n_batch == 0) return n_ctx;
    ring = (uint64_t)c->n_swa + n_batch - 1;
    return ring < n_ctx ? (uint32_t)ring : n_ctx;
}

FORGE_API forge_result forge_kv_cache_bytes(const forge_config *c, uint32_t n_ctx, uint32_t n_batch, forge_kv_type type,
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
        uint64_t layer_bytes;
        if (!forge__mul_u64((uint64_t)forge_kv_layer_cells(c, il, n_ctx, n_batch) * c->layer_n_head_kv[il], row_k + row_v,
                            &layer_bytes) ||
            !forge__add_u64(total, layer_bytes, &total))
            return forge__fail(error, FORGE_ERR_OVERFLOW, "a KV cache of %u positions overflows 64 bits", n_ctx);
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

/* >>impl-context */

/* The op schedule: one flat list of ops over activation values, built once per architecture and
   configuration. The planner sizes the values from it and packs their lifetimes; the CPU backend
   executes it; both read the same list, so the scratch the plan counts is the scratch used. */

#define FORGE__MAX_EXPERTS 256

typedef enum forge__op_kind {
    FORGE__OP_EMBED,     /* dst[t] = token_embd[tokens[t]] * embd_scale */
    FORGE__OP_RMSNORM,   /* dst = rmsnorm(src) * w, rows of width n */
    FORGE__OP_MATMUL,    /* dst = w src (+ bias) */
    FORGE__OP_HEADNORM,  /* dst (in place): rmsnorm of each head of head_dim, times w */
    FORGE__OP_ROPE,      /* dst (in place): rotary embedding of n heads at the batch positions */
    FORGE__OP_KV_STORE,  /* keys src, values src2 -> the layer's cache at the batch positions */
    FORGE__OP_ATTENTION, /* dst = causal attention of queries src over the layer's cache */
    FORGE__OP_ADD,       /* dst += src */
    FORGE__OP_SWIGLU,    /* dst = silu(dst) * src */
    FORGE__OP_LOGITS,    /* logits = w src, on the last n_logits rows of src (soft-capped when the model says) */
    FORGE__OP_GEGLU,     /* dst = gelu(dst) * src (tanh form) */
    FORGE__OP_GLU_SPLIT, /* dst[t][i] = act(src[t][i]) * src[t][n + i]: a fused gate/up row; aux: 0 silu, 1 gelu */
    FORGE__OP_COPY_COLS, /* dst[t][i] = src[t][aux + i], i < n: one part of a fused QKV row */
    FORGE__OP_ROUTE,     /* dst = the chosen experts of router logits src (n experts): k ids, then k weights;
                            aux: 1 to renormalize the chosen weights */
    FORGE__OP_MATMUL_ID, /* dst[t][j] = w[expert j of route src2] src (aux 0) or src[t][j] (aux 1), n rows each */
    FORGE__OP_MOE_SUM,   /* dst[t] = sum over j of weight j * src[t][j] (route src2), width n */
    FORGE__OP_SIGMOID_SCALE, /* dst[t] *= sigmoid(src[t][0]), width n */
    FORGE__OP_CAPTURE,   /* capture aux <- src (width n), converted to the capture type */
    FORGE__OP_PATTERN    /* capture aux <- the attention probabilities of queries src (n heads) over the layer's cache,
                            for the pattern's heads and key window (before the layer's attention op) */
} forge__op_kind;

typedef struct forge__op {
    forge__op_kind kind;
    uint32_t layer;
    int32_t dst, src, src2;           /* value ids, -1 when unused */
    const forge_gguf_tensor *w, *bias;
    uint32_t n;                       /* width or head count, per op */
    uint32_t aux;                     /* per kind, see above; 0 otherwise */
} forge__op;

typedef struct forge__value {
    uint32_t width;       /* floats per token */
    uint32_t first, last; /* op indices of first and last use */
    uint64_t offset;      /* in the scratch region, assigned by the packer */
} forge__value;

typedef struct forge__schedule {
    forge__op *ops;
    forge__value *values;
    uint32_t n_ops, n_values, cap_ops, cap_values;
    int32_t residual;     /* the residual stream value */
    uint32_t max_cols;    /* widest matmul input (sizes the CPU matmul rows) */
    uint32_t max_vec;     /* widest norm weight or bias (sizes the vector region) */
    const forge_capture *captures; /* what the context captures, the capture ops' aux indexing it */
    uint32_t n_captures;
    uint32_t capture_width[FORGE_MAX_CAPTURES];
    uint32_t capture_heads[FORGE_MAX_CAPTURES]; /* query heads of a pattern capture (forge__pattern_setup), else 0 */
    int failed;
} forge__schedule;

static int32_t forge__sched_value(forge__schedule *s, uint32_t width) {
    if (s->n_values >= s->cap_values) {
        s->failed = 1;
        return -1;
    }
    s->values[s->n_values].width = width;
    s->values[s->n_values].first = UINT32_MAX;
    s->values[s->n_values].last = 0;
    s->values[s->n_values].offset = 0;
    return (int32_t)s->n_values++;
}

static void forge__sched_touch(forge__schedule *s, int32_t v, uint32_t op_index) {
    if (v < 0) return;
    if (s->values[v].first == UINT32_MAX) s->values[v].first = op_index;
    s->values[v].last = op_index;
}

static void forge__sched_op(forge__schedule *s, forge__op_kind kind, uint32_t layer, int32_t dst, int32_t src,
                            int32_t src2, const forge_gguf_tensor *w, const forge_gguf_tensor *bias, uint32_t n) {
    forge__op *op;
    if (s->n_ops >= s->cap_ops) {
        s->failed = 1;
        return;
    }
    op = &s->ops[s->n_ops];
    op->kind = kind;
    op->layer = layer;
    op->dst = dst;
    op->src = src;
    op->src2 = src2;
    op->w = w;
    op->bias = bias;
    op->n = n;
    op->aux = 0;
    forge__sched_touch(s, dst, s->n_ops);
    forge__sched_touch(s, src, s->n_ops);
    forge__sched_touch(s, src2, s->n_ops);
    if (kind == FORGE__OP_MATMUL || kind == FORGE__OP_LOGITS || kind == FORGE__OP_MATMUL_ID)
        s->max_cols = FORGE__MAX(s->max_cols, (uint32_t)w->ne[0]);
    if (kind == FORGE__OP_RMSNORM) s->max_vec = FORGE__MAX(s->max_vec, n);
    if (bias) s->max_vec = FORGE__MAX(s->max_vec, (uint32_t)bias->ne[0]);
    s->n_ops++;
}

/* dst = w src (+ bias): a new value as wide as the weight's rows */
static int32_t forge__sched_matmul(forge__schedule *s, uint32_t layer, int32_t src, const forge_gguf_tensor *w,
                                   const forge_gguf_tensor *bias) {
    int32_t dst = forge__sched_value(s, (uint32_t)w->ne[1]);
    forge__sched_op(s, FORGE__OP_MATMUL, layer, dst, src, -1, w, bias, (uint32_t)w->ne[1]);
    return dst;
}

/* Whether product o reads what product op reads, after it in a row of such products (q, k, v; gate,
   up): the same source and width, o not writing that source. */
static int forge__op_same_input(const forge__op *op, const forge__op *o) {
    return o->kind == FORGE__OP_MATMUL && o->src == op->src && o->w->ne[0] == op->w->ne[0] && o->dst != op->src;
}

static const forge_gguf_tensor *forge__layer_tensor(const forge_gguf *g, uint32_t layer, const char *name) {
    char full[96];
    snprintf(full, sizeof full, "blk.%u.%s", layer, name);
    return forge_gguf_find_tensor(g, full);
}

/* A capture op for every requested capture of this layer and point. */
static void forge__sched_capture(forge__schedule *s, uint32_t layer, forge_capture_point point, int32_t v, uint32_t width) {
    uint32_t i;
    for (i = 0; i < s->n_captures; i++)
        if (s->captures[i].point == point && (point == FORGE_CAPTURE_FINAL || s->captures[i].layer == layer)) {
            forge__sched_op(s, FORGE__OP_CAPTURE, layer, -1, v, -1, NULL, NULL, width);
            if (s->n_ops > 0 && !s->failed) s->ops[s->n_ops - 1].aux = i;
            s->capture_width[i] = width;
        }
}

/* The last op added gets its kind-specific parameter. */
static void forge__sched_aux(forge__schedule *s, uint32_t aux) {
    if (s->n_ops > 0 && !s->failed) s->ops[s->n_ops - 1].aux = aux;
}

/* A pattern op for every attention-pattern capture of this layer: it reads the rotated queries q and
   the cache the layer's keys were just stored in. Its width (heads x keys) is set by forge__pattern_setup. */
static void forge__sched_patterns(forge__schedule *s, uint32_t layer, int32_t q, uint32_t n_head) {
    uint32_t i;
    for (i = 0; i < s->n_captures; i++)
        if (s->captures[i].point == FORGE_CAPTURE_ATTN_PATTERN && s->captures[i].layer == layer) {
            forge__sched_op(s, FORGE__OP_PATTERN, layer, -1, q, -1, NULL, NULL, n_head);
            forge__sched_aux(s, i);
        }
}

/* dst = rmsnorm(src) * w: a new value */
static int32_t forge__sched_norm(forge__schedule *s, uint32_t layer, int32_t src, const forge_gguf_tensor *w, uint32_t n) {
    int32_t dst = forge__sched_value(s, n);
    forge__sched_op(s, FORGE__OP_RMSNORM, layer, dst, src, -1, w, NULL, n);
    return dst;
}

/* columns [offset, offset + n) of every row of src, as a new value */
static int32_t forge__sched_cols(forge__schedule *s, uint32_t layer, int32_t src, uint32_t offset, uint32_t n) {
    int32_t dst = forge__sched_value(s, n);
    forge__sched_op(s, FORGE__OP_COPY_COLS, layer, dst, src, -1, NULL, NULL, n);
    forge__sched_aux(s, offset);
    return dst;
}

/* The routed experts of one layer (Mixtral, Qwen MoE): router, top-k, k expert FFNs, weighted sum;
   plus the shared expert where the file has one. Returns the FFN output. */
static int32_t forge__build_moe(forge__schedule *s, const forge_gguf *g, const forge_config *c, uint32_t il, int32_t xn) {
    const uint32_t k = c->n_expert_used, fe = c->n_ff_exp;
    int32_t logits, route, gate, up, down, out;
    logits = forge__sched_matmul(s, il, xn, forge__layer_tensor(g, il, "ffn_gate_inp.weight"), NULL);
    route = forge__sched_value(s, 2 * k);
    forge__sched_op(s, FORGE__OP_ROUTE, il, route, logits, -1, NULL, NULL, c->n_expert);
    /* Mixtral and Qwen3-MoE renormalize the chosen weights; Qwen2-MoE uses them as the softmax gave them */
    forge__sched_aux(s, c->arch != FORGE_ARCH_QWEN2MOE);
    gate = forge__sched_value(s, k * fe);
    forge__sched_op(s, FORGE__OP_MATMUL_ID, il, gate, xn, route, forge__layer_tensor(g, il, "ffn_gate_exps.weight"), NULL, fe);
    up = forge__sched_value(s, k * fe);
    forge__sched_op(s, FORGE__OP_MATMUL_ID, il, up, xn, route, forge__layer_tensor(g, il, "ffn_up_exps.weight"), NULL, fe);
    forge__sched_op(s, FORGE__OP_SWIGLU, il, gate, up, -1, NULL, NULL, k * fe);
    down = forge__sched_value(s, k * c->n_embd);
    forge__sched_op(s, FORGE__OP_MATMUL_ID, il, down, gate, route, forge__layer_tensor(g, il, "ffn_down_exps.weight"), NULL,
                    c->n_embd);
    forge__sched_aux(s, 1);
    out = forge__sched_value(s, c->n_embd);
    forge__sched_op(s, FORGE__OP_MOE_SUM, il, out, down, route, NULL, NULL, c->n_embd);
    if (c->n_ff_shexp > 0) {
        const forge_gguf_tensor *gate_inp = forge__layer_tensor(g, il, "ffn_gate_inp_shexp.weight");
        int32_t sg = forge__sched_matmul(s, il, xn, forge__layer_tensor(g, il, "ffn_gate_shexp.weight"), NULL);
        int32_t su = forge__sched_matmul(s, il, xn, forge__layer_tensor(g, il, "ffn_up_shexp.weight"), NULL);
        int32_t sd;
        forge__sched_op(s, FORGE__OP_SWIGLU, il, sg, su, -1, NULL, NULL, c->n_ff_shexp);
        sd = forge__sched_matmul(s, il, sg, forge__layer_tensor(g, il, "ffn_down_shexp.weight"), NULL);
        if (gate_inp) { /* the shared expert's output is scaled by a sigmoid gate of the input */
            int32_t gs = forge__sched_matmul(s, il, xn, gate_inp, NULL);
            forge__sched_op(s, FORGE__OP_SIGMOID_SCALE, il, sd, gs, -1, NULL, NULL, c->n_embd);
        }
        forge__sched_op(s, FORGE__OP_ADD, il, out, sd, -1, NULL, NULL, c->n_embd);
    }
    return out;
}

/* Every family forge runs is a pre-norm decoder; the configuration says where they differ:
   fused QKV (phi3) or separate projections with optional biases (qwen2, glm4), per-head Q/K norms
   (qwen3, gemma3), norms after attention and after the FFN (gemma2, gemma3, glm4), the FFN as
   SwiGLU, GELU-gated (gemma family), fused gate/up (phi3, glm4) or routed experts (MoE). Rope bases,
   sliding windows, soft-caps and the attention scale are per-layer parameters the backends read
   from the configuration. */
static void forge__build_decoder(forge__schedule *s, const forge_gguf *g, const forge_config *c) {
    uint32_t il;
    int32_t x = forge__sched_value(s, c->n_embd), xn;
    const forge_gguf_tensor *out = forge_gguf_find_tensor(g, c->tied_output ? "token_embd.weight" : "output.weight");
    const int gelu = c->arch == FORGE_ARCH_GEMMA || c->arch == FORGE_ARCH_GEMMA2 || c->arch == FORGE_ARCH_GEMMA3;
    s->residual = x;
    forge__sched_op(s, FORGE__OP_EMBED, 0, x, -1, -1, forge_gguf_find_tensor(g, "token_embd.weight"), NULL, c->n_embd);
    for (il = 0; il < c->n_layer; il++) {
        const uint32_t nq = c->layer_n_head[il] * c->head_dim, nk = c->layer_n_head_kv[il] * c->head_dim;
        const uint32_t nv = c->layer_n_head_kv[il] * c->head_dim_v;
        int32_t q, k, v, att, o, ffn;
        forge__sched_capture(s, il, FORGE_CAPTURE_RESID_PRE, x, c->n_embd);
        xn = forge__sched_norm(s, il, x, forge__layer_tensor(g, il, "attn_norm.weight"), c->n_embd);
        if (c->fused_qkv) {
            int32_t qkv = forge__sched_matmul(s, il, xn, forge__layer_tensor(g, il, "attn_qkv.weight"),
                                              forge__layer_tensor(g, il, "attn_qkv.bias"));
            q = forge__sched_cols(s, il, qkv, 0, nq);
            k = forge__sched_cols(s, il, qkv, nq, nk);
            v = forge__sched_cols(s, il, qkv, nq + nk, nv);
        } else {
            q = forge__sched_matmul(s, il, xn, forge__layer_tensor(g, il, "attn_q.weight"), forge__layer_tensor(g, il, "attn_q.bias"));
            k = forge__sched_matmul(s, il, xn, forge__layer_tensor(g, il, "attn_k.weight"), forge__layer_tensor(g, il, "attn_k.bias"));
            v = forge__sched_matmul(s, il, xn, forge__layer_tensor(g, il, "attn_v.weight"), forge__layer_tensor(g, il, "attn_v.bias"));
        }
        if (c->has_qk_norm) {
            forge__sched_op(s, FORGE__OP_HEADNORM, il, q, -1, -1, forge__layer_tensor(g, il, "attn_q_norm.weight"), NULL, c->layer_n_head[il]);
            forge__sched_op(s, FORGE__OP_HEADNORM, il, k, -1, -1, forge__layer_tensor(g, il, "attn_k_norm.weight"), NULL, c->layer_n_head_kv[il]);
        }
        forge__sched_op(s, FORGE__OP_ROPE, il, q, -1, -1, NULL, NULL, c->layer_n_head[il]);
        forge__sched_op(s, FORGE__OP_ROPE, il, k, -1, -1, NULL, NULL, c->layer_n_head_kv[il]);
        forge__sched_op(s, FORGE__OP_KV_STORE, il, -1, k, v, NULL, NULL, c->layer_n_head_kv[il]);
        forge__sched_patterns(s, il, q, c->layer_n_head[il]);
        att = forge__sched_value(s, c->layer_n_head[il] * c->head_dim_v);
        forge__sched_op(s, FORGE__OP_ATTENTION, il, att, q, -1, NULL, NULL, c->layer_n_head[il]);
        o = forge__sched_matmul(s, il, att, forge__layer_tensor(g, il, "attn_output.weight"), NULL);
        if (c->has_post_norms) o = forge__sched_norm(s, il, o, forge__layer_tensor(g, il, "post_attention_norm.weight"), c->n_embd);
        forge__sched_capture(s, il, FORGE_CAPTURE_ATTN_OUT, o, c->n_embd);
        forge__sched_op(s, FORGE__OP_ADD, il, x, o, -1, NULL, NULL, c->n_embd);
        xn = forge__sched_norm(s, il, x, forge__layer_tensor(g, il, "ffn_norm.weight"), c->n_embd);
        if (c->n_expert > 0) {
            ffn = forge__build_moe(s, g, c, il, xn);
        } else if (c->fused_gate_up) {
            int32_t gate_up = forge__sched_matmul(s, il, xn, forge__layer_tensor(g, il, "ffn_up.weight"), NULL);
            int32_t h = forge__sched_value(s, c->layer_n_ff[il]);
            forge__sched_op(s, FORGE__OP_GLU_SPLIT, il, h, gate_up, -1, NULL, NULL, c->layer_n_ff[il]);
            forge__sched_aux(s, (uint32_t)gelu);
            ffn = forge__sched_matmul(s, il, h, forge__layer_tensor(g, il, "ffn_down.weight"), NULL);
        } else {
            int32_t gate = forge__sched_matmul(s, il, xn, forge__layer_tensor(g, il, "ffn_gate.weight"), NULL);
            int32_t up = forge__sched_matmul(s, il, xn, forge__layer_tensor(g, il, "ffn_up.weight"), NULL);
            forge__sched_op(s, gelu ? FORGE__OP_GEGLU : FORGE__OP_SWIGLU, il, gate, up, -1, NULL, NULL, c->layer_n_ff[il]);
            ffn = forge__sched_matmul(s, il, gate, forge__layer_tensor(g, il, "ffn_down.weight"), NULL);
        }
        if (c->has_post_norms) ffn = forge__sched_norm(s, il, ffn, forge__layer_tensor(g, il, "post_ffw_norm.weight"), c->n_embd);
        forge__sched_capture(s, il, FORGE_CAPTURE_MLP_OUT, ffn, c->n_embd);
        forge__sched_op(s, FORGE__OP_ADD, il, x, ffn, -1, NULL, NULL, c->n_embd);
        forge__sched_capture(s, il, FORGE_CAPTURE_RESID_POST, x, c->n_embd);
    }
    xn = forge__sched_norm(s, c->n_layer, x, forge_gguf_find_tensor(g, "output_norm.weight"), c->n_embd);
    forge__sched_capture(s, c->n_layer, FORGE_CAPTURE_FINAL, xn, c->n_embd);
    forge__sched_op(s, FORGE__OP_LOGITS, c->n_layer, -1, xn, -1, out, NULL, c->n_vocab);
    /* the residual stream is read until the final norm; nothing outlives the schedule */
}

static size_t forge__align64(uint64_t n) { return (size_t)((n + 63) & ~(uint64_t)63); }

/* Builds the schedule for a configuration into memory from the allocator. */
static forge_result forge__schedule_build(const forge_model *m, const forge_allocator *a, forge__schedule *s,
                                          const forge_capture *captures, uint32_t n_captures, forge_error *e) {
    const forge_config *c = &m->config;
    size_t ops_bytes, values_bytes;
    uint32_t i;
    memset(s, 0, sizeof *s);
    if (n_captures > FORGE_MAX_CAPTURES)
        return forge__fail(e, FORGE_ERR_ARGUMENT, "%u captures; forge takes at most %d", n_captures, FORGE_MAX_CAPTURES);
    if (n_captures && !captures) return forge__fail(e, FORGE_ERR_ARGUMENT, "%u captures but no capture list", n_captures);
    for (i = 0; i < n_captures; i++) {
        if ((unsigned)captures[i].point >= FORGE_CAPTURE_POINT_COUNT)
            return forge__fail(e, FORGE_ERR_ARGUMENT, "capture %u: point %d is not a forge_capture_point", i, (int)captures[i].point);
        if (captures[i].point != FORGE_CAPTURE_FINAL && captures[i].layer >= c->n_layer)
            return forge__fail(e, FORGE_ERR_ARGUMENT, "capture %u: layer %u, but the model has %u layers (0 .. %u)", i,
                               captures[i].layer, c->n_layer, c->n_layer - 1);
    }
    s->captures = captures;
    s->n_captures = n_captures;
    if (c->n_expert > FORGE__MAX_EXPERTS)
        return forge__fail(e, FORGE_ERR_UNSUPPORTED, "%u experts; forge routes among at most %d", c->n_expert, FORGE__MAX_EXPERTS);
    s->cap_ops = 40 * c->n_layer + 8 + n_captures;
    s->cap_values = 32 * c->n_layer + 8;
    ops_bytes = forge__align64((uint64_t)s->cap_ops * sizeof(forge__op));
    values_bytes = (size_t)s->cap_values * sizeof(forge__value);
    s->ops = (forge__op *)forge__alloc(a, ops_bytes + values_bytes);
    if (!s->ops)
        return forge__fail(e, FORGE_ERR_HOST_MEMORY, "cannot allocate the op schedule (%llu bytes)",
                           (forge__ull)(ops_bytes + values_bytes));
    s->values = (forge__value *)(void *)((char *)s->ops + ops_bytes);
    forge__build_decoder(s, m->gguf, c);
    if (s->failed) {
        forge__free(a, s->ops);
        s->ops = NULL;
        return forge__fail(e, FORGE_ERR_CONFIG, "the op schedule outgrew its %u ops / %u values", s->cap_ops, s->cap_values);
    }
    return FORGE_OK;
}

static void forge__schedule_free(forge__schedule *s, const forge_allocator *a) {
    forge__free(a, s->ops);
    s->ops = NULL;
}

/* Packs value lifetimes into one scratch region for n_batch tokens: largest first, each at the
   lowest offset that overlaps no value alive at the same time. Returns the region's size. */
static uint64_t forge__schedule_pack(forge__schedule *s, uint32_t n_batch) {
    uint32_t placed = 0, i, j;
    uint64_t total = 0;
    /* selection by size keeps this allocation-free; the value count is a few per layer */
    for (i = 0; i < s->n_values; i++) s->values[i].offset = UINT64_MAX;
    while (placed < s->n_values) {
        uint32_t best = UINT32_MAX;
        uint64_t bytes, offset = 0;
        int moved = 1;
        for (i = 0; i < s->n_values; i++)
            if (s->values[i].offset == UINT64_MAX &&
                (best == UINT32_MAX || s->values[i].width > s->values[best].width)) best = i;
        bytes = forge__align64((uint64_t)s->values[best].width * n_batch * sizeof(float));
        while (moved) { /* first fit: slide past every conflicting placed value until none overlaps */
            moved = 0;
            for (j = 0; j < s->n_values; j++) {
                const forge__value *o = &s->values[j];
                uint64_t o_bytes;
                if (o->offset == UINT64_MAX || o->last < s->values[best].first || o->first > s->values[best].last) continue;
                o_bytes = forge__align64((uint64_t)o->width * n_batch * sizeof(float));
                if (offset < o->offset + o_bytes && o->offset < offset + bytes) {
                    offset = o->offset + o_bytes;
                    moved = 1;
                }
            }
        }
        s->values[best].offset = offset;
        if (offset + bytes > total) total = offset + bytes;
        placed++;
    }
    return total;
}

/* >>impl-gpu-backend */

#ifdef FORGE_HIP
/* The launchers of forge_kernels.hip (compiled separately, linked in). Each returns 0, or -1 with the
   runtime's message in the caller's buffer. */
typedef struct forge_hip_device_info {
    char name[256];
    char arch[64];
    int wave_size;
    size_t total_bytes;
    size_t free_bytes;
    int fp16;
    int bf16;
} forge_hip_device_info;

typedef struct forge_hip_attention_args {
    const float *q;
    float *out;
    const void *cache_k;
    const void *cache_v;
    uint32_t kv_type;
    uint32_t n_tokens;
    uint32_t n_head, n_head_kv;
    uint32_t head_dim, head_dim_v;
    uint32_t pos0;
    float scale;
    uint32_t window;  /* 0: full causal; else position P sees only p with P - p < window */
    uint32_t n_cells; /* cache rows, a ring: position p in row p % n_cells; 0: no wrap */
    float softcap;    /* 0: none; else scores s become softcap * tanh(s / softcap) */
    uint32_t *counters; /* attention_at: NULL or n_head * n_tokens zeroed uint32 (one-launch split merge) */
    const uint32_t *row_pos; /* NULL, or a batch's device row positions (pos0 the largest): several sequences */
    const uint32_t *row_seq; /* with row_pos: each row's sequence, its cache seq_stride bytes after the one before */
    size_t seq_stride;
} forge_hip_attention_args;

typedef struct forge_hip_rope_args {
    uint32_t n_rot;
    int mode;                  /* 0: adjacent pairs; 2: halves (NEOX) */
    float freq_base, freq_scale;
    const float *freq_factors; /* NULL or n_rot / 2 device floats */
    const double *freq;        /* n_rot / 2 device doubles from forge_hip_rope_freqs */
    float *angles;             /* NULL, or n_rot device floats: the token's cosines then sines (forge_hip_rope_attention_q8) */
    int angles_ready;          /* 0: the launch computes and writes them; 1: an earlier launch of the step did, it reads them */
} forge_hip_rope_args;

#ifdef __cplusplus
extern "C" {
#endif
int forge_hip_device_query(int device, forge_hip_device_info *info, char *message, size_t message_bytes);
typedef struct forge_hip_scope {
    int device;
    int switched;
    unsigned switches;
} forge_hip_scope;
#define FORGE_HIP_NO_PDL 1u
#define FORGE_HIP_NO_STAGE 2u
#define FORGE_HIP_NO_WGMMA 4u
int forge_hip_enter(int device, unsigned switches, forge_hip_scope *saved, char *message, size_t message_bytes);
void forge_hip_leave(const forge_hip_scope *saved);
int forge_hip_arena_alloc(size_t bytes, void **out, char *message, size_t message_bytes);
void forge_hip_arena_free(void *arena);
int forge_hip_copy_to_device(void *dst, const void *src, size_t bytes, void *stream, char *message, size_t message_bytes);
int forge_hip_copy_from_device(void *dst, const void *src, size_t bytes, void *stream, char *message, size_t message_bytes);
int forge_hip_stream_sync(void *stream, char *message, size_t message_bytes);
int forge_hip_stream_create(void **out, char *message, size_t message_bytes);
void forge_hip_stream_destroy(void *stream);
int forge_hip_matmul(uint32_t type, const void *w, uint32_t n_rows, uint32_t n_cols, const float *x, float *y,
                     uint32_t n_tokens, const float *bias, void *stream, char *message, size_t message_bytes);
int forge_hip_embed(uint32_t type, const void *table, uint32_t n_vocab, uint32_t n, const int32_t *tokens,
                    uint32_t n_tokens, float scale, float *dst, void *stream, char *message, size_t message_bytes);
int forge_hip_rmsnorm(const float *x, const float *w, float *y, uint32_t n_rows, uint32_t n, float eps, void *stream,
                      char *message, size_t message_bytes);
int forge_hip_headnorm(float *x, const float *w, uint32_t n_tokens, uint32_t n_heads, uint32_t head_dim, float eps,
                       void *stream, char *message, size_t message_bytes);
int forge_hip_rope(float *x, uint32_t n_tokens, uint32_t n_heads, uint32_t head_dim, uint32_t n_rot, int mode,
                   uint32_t pos0, float freq_base, float freq_scale, const float *freq_factors, void *stream,
                   char *message, size_t message_bytes);
int forge_hip_kv_store(uint32_t kv_type, const float *k, const float *v, void *cache_k, void *cache_v, uint32_t n_tokens,
                       uint32_t n_head_kv, uint32_t head_dim, uint32_t head_dim_v, uint32_t pos0, uint32_t n_cells,
                       void *stream, char *message, size_t message_bytes);
size_t forge_hip_attention_scratch_bytes(uint32_t n_ctx, uint32_t n_tokens, uint32_t n_head, uint32_t head_dim_v);
size_t forge_hip_attention_rows_scratch_bytes(uint32_t head_dim_v);
int forge_hip_attention(const forge_hip_attention_args *args, void *scratch, size_t scratch_bytes, void *stream,
                        char *message, size_t message_bytes);
int forge_hip_matvec(uint32_t type, const void *w, uint32_t n_rows, uint32_t n_cols, const float *x, float *y,
                     const float *bias, void *stream, char *message, size_t message_bytes);
size_t forge_hip_argmax_scratch_bytes(void);
size_t forge_hip_top_k_scratch_bytes(uint32_t n);
uint32_t forge_hip_top_k_max(void);
uint32_t forge_hip_top_k_history_max(void);
int forge_hip_top_k(const float *logits, uint32_t n, uint32_t k, const int32_t *history, uint32_t n_history, float penalty, void *scratch,
                    void *stream, char *message, size_t message_bytes);
int forge_hip_argmax(const float *x, uint32_t n, void *scratch, int32_t *out_index, void *stream, char *message, size_t message_bytes);
size_t forge_hip_q8_bytes(uint32_t n);
size_t forge_hip_rows_bytes(uint32_t n);
int forge_hip_q8_type(uint32_t type);
int forge_hip_q8_quantize(const float *x, uint32_t n, void *q8, void *stream, char *message, size_t message_bytes);
int forge_hip_rmsnorm_q8(const float *x, const float *w, float *y, uint32_t n, float eps, void *q8, void *stream, char *message,
                         size_t message_bytes);
int forge_hip_matvec_q8(uint32_t type, const void *w, uint32_t n_rows, uint32_t n_cols, const void *q8, float *y, const float *bias,
                        int accumulate, float norm_eps, void *stream, char *message, size_t message_bytes);
int forge_hip_matvec_norm_q8_ok(uint32_t type, uint32_t n_rows, uint32_t n_cols);
int forge_hip_matvec_norm_q8(uint32_t type, const void *w, uint32_t n_rows, uint32_t n_cols, const void *q8, float *y, const float *bias,
                             const float *norm_w, void *q8_out, void *stream, char *message, size_t message_bytes);
int forge_hip_glu_q8(uint32_t type, const void *w_gate, const void *w_up, uint32_t n_rows, uint32_t n_cols, const void *q8, float *h,
                     void *q8_out, int act, float norm_eps, void *stream, char *message, size_t message_bytes);
int forge_hip_attention_at_q8(const forge_hip_attention_args *args, const uint32_t *dev_pos, void *q8, void *scratch,
                              size_t scratch_bytes, void *stream, char *message, size_t message_bytes);
int forge_hip_matvec3_q8_ok(uint32_t type_a, uint32_t type_b);
int forge_hip_matvec3_q8(uint32_t type_a, uint32_t type_b, const void *const w[3], const uint32_t n_rows[3], uint32_t n_cols,
                         const void *q8, float *const y[3], const float *const bias[3], float norm_eps, void *stream, char *message,
                         size_t message_bytes);
int forge_hip_rope_store(uint32_t kv_type, float *q, float *k, const float *v, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim,
                         uint32_t head_dim_v, uint32_t n_rot, int mode, uint32_t pos0, const uint32_t *dev_pos, float freq_base,
                         float freq_scale, const float *freq_factors, void *cache_k, void *cache_v, uint32_t n_cells, void *stream,
                         char *message, size_t message_bytes);
int forge_hip_rope_freqs(double *dst, uint32_t n_rot, float freq_base, void *stream, char *message, size_t message_bytes);
int forge_hip_rope_attention_q8(const forge_hip_attention_args *args, const forge_hip_rope_args *rope, float *k, const float *v,
                                const uint32_t *dev_pos, void *q8, void *scratch, size_t scratch_bytes, void *stream, char *message,
                                size_t message_bytes);
int forge_hip_copy_device(void *dst, const void *src, size_t bytes, void *stream, char *message, size_t message_bytes);
int forge_hip_memset(void *dst, int byte, size_t bytes, void *stream, char *message, size_t message_bytes);
int forge_hip_add(float *dst, const float *src, size_t n, void *stream, char *message, size_t message_bytes);
int forge_hip_swiglu(float *gate, const float *up, size_t n, void *stream, char *message, size_t message_bytes);
int forge_hip_geglu(float *gate, const float *up, size_t n, void *stream, char *message, size_t message_bytes);
int forge_hip_glu_split(float *dst, const float *src, uint32_t n_tokens, uint32_t n, int act, void *stream, char *message,
                        size_t message_bytes);
int forge_hip_copy_cols(float *dst, const float *src, uint32_t n_tokens, uint32_t src_width, uint32_t offset, uint32_t n,
                        void *stream, char *message, size_t message_bytes);
int forge_hip_softcap(float *x, size_t n, float cap, void *stream, char *message, size_t message_bytes);
int forge_hip_sigmoid_scale(float *x, const float *s, uint32_t n_tokens, uint32_t n, void *stream, char *message,
                            size_t message_bytes);
int forge_hip_moe_route(const float *logits, uint32_t n_tokens, uint32_t n_expert, uint32_t k, int renorm, float *route,
                        void *stream, char *message, size_t message_bytes);
int forge_hip_matmul_id(uint32_t type, const void *w, size_t expert_bytes, uint32_t n_rows, uint32_t n_cols, const float *x,
                        int x_per_slot, const float *route, uint32_t k, uint32_t n_tokens, float *y, void *stream, char *message,
                        size_t message_bytes);
int forge_hip_moe_sum(const float *src, const float *route, uint32_t n_tokens, uint32_t k, uint32_t n, float *dst, void *stream,
                      char *message, size_t message_bytes);
unsigned long forge_hip_allocation_count(void);
/* decode graphs: the position read from device memory (a uint32 at dev_pos) when the kernels run */
size_t forge_hip_matmul_split_bytes(uint32_t max_rows, uint32_t max_tokens);
size_t forge_hip_prompt_bytes(uint32_t max_tokens, uint32_t max_cols);
int forge_hip_matmul_split(uint32_t type, const void *w, uint32_t n_rows, uint32_t n_cols, const float *x, float *y,
                           uint32_t n_tokens, const float *bias, void *workspace, size_t workspace_bytes, void *stream,
                           char *message, size_t message_bytes);
int forge_hip_matmul_prompt(uint32_t type, const void *w, uint32_t n_rows, uint32_t n_cols, const float *x, float *y, uint32_t n_tokens,
                            const float *bias, void *workspace, size_t workspace_bytes, int *form, void *stream, char *message,
                            size_t message_bytes);
int forge_hip_prompt_form_ok(uint32_t n_tokens, uint32_t n_cols, size_t workspace_bytes);
int forge_hip_prompt_staged(uint32_t type, uint32_t n_rows, uint32_t n_cols, uint32_t n_tokens, size_t workspace_bytes);
int forge_hip_prompt_wgmma(uint32_t n_cols);
int forge_hip_swiglu_f16(float *gate, const float *up, size_t n, void *h16, int keep, void *stream, char *message, size_t message_bytes);
int forge_hip_matmul_rows_q8(uint32_t type, const void *w, uint32_t n_rows, uint32_t n_cols, const float *x, float *y,
                             uint32_t n_tokens, const float *bias, void *workspace, size_t workspace_bytes, void *stream,
                             char *message, size_t message_bytes);
int forge_hip_matmul_rows_q8_form(uint32_t type, const void *w, uint32_t n_rows, uint32_t n_cols, const float *x, float *y,
                                  uint32_t n_tokens, const float *bias, void *workspace, size_t workspace_bytes, int *form, void *stream,
                                  char *message, size_t message_bytes);
/* the forms of a product's input in its workspace (forge_hip_matmul_rows_q8_form's *form) */
#define FORGE_HIP_FORM_Q8 1
#define FORGE_HIP_FORM_F16 2      /* the f16 form of the staged kernels */
#define FORGE_HIP_FORM_F16_ROWS 3 /* the f16 form in the order of the rows kernel (quads reordered in each 256 columns) */
#define FORGE_HIP_FORM_F16_PROMPT 4 /* a prompt's rows in f16 alone (forge_hip_matmul_prompt's *form) */
/* one product of forge_hip_matmul_rows_q8_group: y = w x (+ bias), n_rows rows of GGUF type `type` */
typedef struct forge_hip_product {
    uint32_t type;
    const void *w;
    uint32_t n_rows;
    float *y;
    const float *bias;
} forge_hip_product;
int forge_hip_matmul_prompt_group(uint32_t n, const forge_hip_product *p, uint32_t n_cols, const float *x, uint32_t n_tokens,
                                  void *workspace, size_t workspace_bytes, int *form, void *stream, char *message, size_t message_bytes);
int forge_hip_matmul_rows_q8_group(uint32_t n, const forge_hip_product *p, uint32_t n_cols, const float *x, uint32_t n_tokens,
                                   void *workspace, size_t workspace_bytes, int *form, void *stream, char *message, size_t message_bytes);
int forge_hip_matmul_rows_q8_path(int path, uint32_t type, const void *w, uint32_t n_rows, uint32_t n_cols, const float *x, float *y,
                                  uint32_t n_tokens, const float *bias, void *workspace, size_t workspace_bytes, void *stream,
                                  char *message, size_t message_bytes);
int forge_hip_rope_rows(float *x, uint32_t n_tokens, uint32_t n_heads, uint32_t head_dim, uint32_t n_rot, int mode,
                        const uint32_t *row_pos, float freq_base, float freq_scale, const float *freq_factors, void *stream,
                        char *message, size_t message_bytes);
/* a bit of a row's sequence id in the rows launches: the row reads its sequence's cache and stores
   nothing into it (the rows that pad a decode step up to a recorded row count) */
#define FORGE_HIP_ROW_NO_STORE 0x80000000u
int forge_hip_kv_store_rows(uint32_t kv_type, const float *k, const float *v, void *cache_k, void *cache_v, uint32_t n_tokens,
                            uint32_t n_head_kv, uint32_t head_dim, uint32_t head_dim_v, const uint32_t *row_pos, const uint32_t *row_seq,
                            size_t seq_stride, uint32_t n_cells, void *stream, char *message, size_t message_bytes);
int forge_hip_add_rmsnorm(float *x, const float *r, const float *w, float *y, uint32_t n_rows, uint32_t n, float eps, void *form,
                          int form_type, void *stream, char *message, size_t message_bytes);
int forge_hip_matmul_rows_q8_group_form(uint32_t n, const forge_hip_product *p, uint32_t n_cols, uint32_t n_tokens, size_t workspace_bytes);
int forge_hip_rope_store_rows(uint32_t kv_type, float *q, float *k, const float *v, uint32_t n_tokens, uint32_t n_head, uint32_t n_head_kv,
                              uint32_t head_dim, uint32_t head_dim_v, uint32_t n_rot, int mode, const uint32_t *row_pos,
                              const uint32_t *row_seq, size_t seq_stride, float freq_base, float freq_scale, const float *freq_factors,
                              void *cache_k, void *cache_v, uint32_t n_cells, void *stream, char *message, size_t message_bytes);
int forge_hip_rope_at(float *x, uint32_t n_tokens, uint32_t n_heads, uint32_t head_dim, uint32_t n_rot, int mode,
                      const uint32_t *dev_pos, float freq_base, float freq_scale, const float *freq_factors, void *stream,
                      char *message, size_t message_bytes);
int forge_hip_kv_store_at(uint32_t kv_type, const float *k, const float *v, void *cache_k, void *cache_v, uint32_t n_tokens,
                          uint32_t n_head_kv, uint32_t head_dim, uint32_t head_dim_v, const uint32_t *dev_pos, uint32_t n_cells,
                          void *stream, char *message, size_t message_bytes);
/* args->pos0: the largest position a replay reads; the grid is sized for it */
int forge_hip_attention_at(const forge_hip_attention_args *args, const uint32_t *dev_pos, void *scratch, size_t scratch_bytes,
                           void *stream, char *message, size_t message_bytes);
/* the spans at which the decode attention launch cuts its blocks differently (ascending): one graph a band */
uint32_t forge_hip_attention_span_limits(uint32_t *limits, uint32_t max);
int forge_hip_set_device(int device, char *message, size_t message_bytes);
int forge_hip_copy_peer(void *dst, int dst_device, const void *src, int src_device, size_t bytes, void *stream, char *message,
                        size_t message_bytes);
int forge_hip_stream_wait(void *stream, void *event, char *message, size_t message_bytes);
int forge_hip_peer_enable(int device, int peer, int *enabled, char *message, size_t message_bytes);
void forge_hip_peer_disable(int device, int peer);
int forge_hip_graph_begin(void *stream, char *message, size_t message_bytes);
int forge_hip_graph_end(void *stream, int keep, void **out, char *message, size_t message_bytes);
int forge_hip_graph_launch(void *graph, void *stream, char *message, size_t message_bytes);
void forge_hip_graph_destroy(void *graph);
/* pinned host memory (upload staging, the decode step's slots) and events */
int forge_hip_host_alloc(size_t bytes, void **out, char *message, size_t message_bytes);
void forge_hip_host_free(void *host);
int forge_hip_event_create(void **out, char *message, size_t message_bytes);
int forge_hip_event_record(void *event, void *stream, char *message, size_t message_bytes);
int forge_hip_event_sync(void *event, char *message, size_t message_bytes);
void forge_hip_event_destroy(void *event);
#ifdef __cplusplus
}
#endif
#endif /* FORGE_HIP */

FORGE_API int forge_gpu_available(void) {
#ifdef FORGE_HIP
    forge_hip_device_info info;
    char message[256];
    return forge_hip_device_query(0, &info, message, sizeof message) == 0;
#else
    return 0;
#endif
}

FORGE_API unsigned long forge_gpu_allocation_count(void) {
#ifdef FORGE_HIP
    return forge_hip_allocation_count();
#else
    return 0;
#endif
}

FORGE_API forge_result forge_memory_query_gpu(int device, forge_memory_reading *out, forge_error *error) {
#ifdef FORGE_HIP
    forge_hip_device_info info;
    char message[256];
    if (!out) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_memory_query_gpu: null argument");
    memset(out, 0, sizeof *out);
    if (forge_hip_device_query(device, &info, message, sizeof message) != 0)
        return forge__fail(error, FORGE_ERR_IO, "GPU %d: %s", device, message);
    snprintf(out->device, sizeof out->device, "%.40s (%.16s)", info.name, info.arch);
    snprintf(out->arch, sizeof out->arch, "%.31s", info.arch);
    out->wave_size = info.wave_size;
    out->fp16 = info.fp16;
    out->bf16 = info.bf16;
    out->total_bytes = info.total_bytes;
    out->free_bytes = info.free_bytes;
    if (out->total_bytes == 0 || out->free_bytes > out->total_bytes) { /* distrust: keep the smaller */
        out->adjusted = 1;
        out->free_bytes = FORGE__MIN(out->free_bytes, out->total_bytes);
    }
    return FORGE_OK;
#else
    (void)device;
    if (out) memset(out, 0, sizeof *out);
    return forge__fail(error, FORGE_ERR_UNSUPPORTED, "this build of forge has no GPU backend (compile with FORGE_HIP)");
#endif
}

/* How a context reads a tensor: not at all, as a matrix (kept in its stored type), or as a vector
   (a norm weight, a bias, the rope factors: f32 on the device whatever its stored type). The one
   answer the plans and the GPU upload share. */
typedef enum forge__use { FORGE__UNUSED = 0, FORGE__MATRIX, FORGE__VECTOR } forge__use;

static forge__use forge__tensor_use(const forge__schedule *s, const forge_model *m, const forge_gguf_tensor *t) {
    uint32_t k;
    forge__use use = FORGE__UNUSED;
    if (m->config.has_rope_freqs && t == forge_gguf_find_tensor(m->gguf, "rope_freqs.weight")) return FORGE__VECTOR;
    for (k = 0; k < s->n_ops; k++) {
        const forge__op *op = &s->ops[k];
        if (op->bias == t) return FORGE__VECTOR;
        if (op->w == t) {
            if (op->kind == FORGE__OP_RMSNORM || op->kind == FORGE__OP_HEADNORM) return FORGE__VECTOR;
            use = FORGE__MATRIX;
        }
    }
    return use;
}

/* A tensor the schedule would not read is something forge does not implement (long-rope factors, an
   attention variant, a vision tower): the model is refused when it opens, naming the tensor, rather
   than computed without it. */
static forge_result forge__check_tensors_read(const forge_model *m, forge_error *e) {
    forge__schedule s;
    forge_result r;
    uint64_t i;
    if ((r = forge__schedule_build(m, &m->allocator, &s, NULL, 0, e))) return r;
    for (i = 0; i < forge_gguf_tensor_count(m->gguf); i++) {
        const forge_gguf_tensor *t = forge_gguf_tensor_at(m->gguf, i);
        if (forge__tensor_use(&s, m, t) == FORGE__UNUSED) {
            r = forge__fail(e, FORGE_ERR_UNSUPPORTED, "tensor '%.*s' (%s) is not something forge's %s models use; the file "
                            "needs a feature forge does not implement", FORGE__STR_ARGS(t->name),
                            forge_type_info(t->type) ? forge_type_info(t->type)->name : "?", m->config.arch_name);
            break;
        }
    }
    forge__schedule_free(&s, &m->allocator);
    return r;
}

#define FORGE__GPU_ALIGN 256u

static uint64_t forge__align_gpu(uint64_t n) { return (n + FORGE__GPU_ALIGN - 1) / FORGE__GPU_ALIGN * FORGE__GPU_ALIGN; }


#ifdef FORGE_HIP
static uint32_t forge__schedule_max_heads(const forge__schedule *s) {
    uint32_t k, heads = 1;
    for (k = 0; k < s->n_ops; k++)
        if (s->ops[k].kind == FORGE__OP_ATTENTION) heads = FORGE__MAX(heads, s->ops[k].n);
    return heads;
}
#endif

/* The decode step's device slots, read by the recorded graph: [0] the token, [1] its position,
   [2] forge_context_argmax's answer. */
#define FORGE__GPU_STEP_WORDS 4u
/* The decode graphs a context records at most: one for each band of positions between the spans
   at which the attention launch changes (forge_hip_attention_span_limits), the last up to n_ctx. */
#define FORGE__GPU_GRAPHS 4u
/* steps of several sequences are recorded too, at up to FORGE__GPU_ROWS_GRAPHS row counts of at most
   FORGE__GPU_ROWS_PAD_MAX rows (forge__gpu_row_counts): their ~700 launches cost more than their
   kernels' work (tests/PERF.md, "Steps of several sequences") */
#define FORGE__GPU_ROWS_GRAPHS 14u
#define FORGE__GPU_ROWS_PAD_MAX 64u
/* The rotary pair frequencies of the decode step's fused attention: two tables (the base and the
   sliding-window layers' base) of up to FORGE__GPU_ROPE_PAIRS doubles. Where n_rot / 2 is at most
   half that, the second half of each table holds the step's rotation angles (n_rot floats), written
   by the step's first fused attention of that kind and read by the others. */
#define FORGE__GPU_ROPE_PAIRS 512u
#define FORGE__GPU_ROPE_BYTES (2u * FORGE__GPU_ROPE_PAIRS * 8u)

/* The GPU backend's own working memory: attention's split-KV scratch and the decode step's merge
   counters, the batch's token ids, the decode step's slots, the rotary frequency tables, the prompt
   products' f16 activations (up to 512 tokens of the widest product's columns, where the batch takes
   more than 64), and nothing that grows with the sequence. */
static uint64_t forge__gpu_reserve_bytes(const forge__schedule *s, const forge_model *m, uint32_t n_ctx, uint32_t n_batch) {
#ifdef FORGE_HIP
    return forge__align_gpu(forge_hip_attention_scratch_bytes(n_ctx, n_batch, forge__schedule_max_heads(s), m->config.head_dim_v)) +
           forge__align_gpu((uint64_t)forge__schedule_max_heads(s) * sizeof(uint32_t)) + 2 * forge__align_gpu(forge_hip_q8_bytes(s->max_cols)) +
           forge__align_gpu(forge_hip_argmax_scratch_bytes()) +
           forge__align_gpu(forge_hip_top_k_scratch_bytes(m->config.n_vocab)) +
           forge__align_gpu((uint64_t)n_batch * sizeof(int32_t)) + forge__align_gpu(FORGE__GPU_STEP_WORDS * sizeof(uint32_t)) +
           forge__align_gpu(FORGE__GPU_ROPE_BYTES) + forge__align_gpu(forge_hip_prompt_bytes(n_batch, s->max_cols));
#else
    (void)s, (void)m, (void)n_ctx;
    return forge__align_gpu((uint64_t)n_batch * sizeof(int32_t)) + forge__align_gpu(FORGE__GPU_STEP_WORDS * sizeof(uint32_t));
#endif
}

/* >>impl-plan-compute */

static double forge__resolve_fraction(double requested) { return requested > 0.0 ? requested : 0.70; }

typedef struct forge__resolved {
    uint32_t n_ctx, n_batch, n_logits, n_threads, n_seq;
    int all_logits;
    forge_kv_type kv_type;
    forge_backend backend; /* CPU or GPU, never AUTO */
    int device;
    forge_capture_dtype capture_dtype;
    uint32_t pattern_head_first, pattern_n_heads, pattern_key_first, pattern_n_keys; /* as the desc gives them */
    /* the parts of a split (n_parts 1: the whole model on `device`): each part's device, the shares
       asked for (all 0: forge's choice), and the first layer of each part (part_layer[n_parts] =
       n_layer), chosen by forge__split_choose before a plan is made */
    uint32_t n_parts;
    int part_device[FORGE_MAX_DEVICES];
    double split[FORGE_MAX_DEVICES];
    uint32_t split_layers[FORGE_MAX_DEVICES]; /* the caller's layer counts, all 0 when not given */
    uint32_t part_layer[FORGE_MAX_DEVICES + 1];
} forge__resolved;

/* Rows of logits a step keeps: every row's with all_logits, else one for each sequence in the step. */
static uint32_t forge__logit_rows(int all_logits, uint32_t n_batch, uint32_t n_seq) {
    return all_logits ? n_batch : FORGE__MIN(n_seq, n_batch);
}

static forge_result forge__resolve_desc(const forge_model *m, const forge_context_desc *d, forge__resolved *r,
                                        forge_error *e) {
    const forge_config *c = &m->config;
    r->n_ctx = d->n_ctx ? d->n_ctx : FORGE__MIN(c->n_ctx_train, 4096u);
    if (r->n_ctx > FORGE__MAX_CTX)
        return forge__fail(e, FORGE_ERR_ARGUMENT, "a context of %u positions is above forge's limit of %u", r->n_ctx,
                           FORGE__MAX_CTX);
    r->n_batch = d->n_batch ? d->n_batch : 512;
    if (r->n_batch > r->n_ctx) r->n_batch = r->n_ctx;
    if (r->n_batch > 65536)
        return forge__fail(e, FORGE_ERR_ARGUMENT, "a batch of %u tokens is above forge's limit of 65536", r->n_batch);
    r->kv_type = d->kv_type == FORGE_KV_DEFAULT ? FORGE_KV_F16 : d->kv_type;
    if ((unsigned)r->kv_type >= FORGE_KV_TYPE_COUNT)
        return forge__fail(e, FORGE_ERR_ARGUMENT, "KV cache type %d is not a forge_kv_type", (int)d->kv_type);
    if (d->mem_fraction < 0.0 || d->mem_fraction > 1.0 || d->mem_fraction != d->mem_fraction)
        return forge__fail(e, FORGE_ERR_ARGUMENT, "memory fraction %g is outside (0, 1]", d->mem_fraction);
    r->n_seq = d->n_seq ? d->n_seq : 1;
    if (r->n_seq > FORGE_MAX_SEQ)
        return forge__fail(e, FORGE_ERR_ARGUMENT, "%u sequences is above forge's limit of %u (FORGE_MAX_SEQ)", r->n_seq,
                           (unsigned)FORGE_MAX_SEQ);
    r->all_logits = d->all_logits != 0;
    r->n_logits = forge__logit_rows(r->all_logits, r->n_batch, r->n_seq);
    r->capture_dtype = d->capture_dtype;
    r->pattern_head_first = d->pattern_head_first;
    r->pattern_n_heads = d->pattern_n_heads;
    r->pattern_key_first = d->pattern_key_first;
    r->pattern_n_keys = d->pattern_n_keys;
    if ((unsigned)d->capture_dtype > FORGE_CAPTURE_BF16)
        return forge__fail(e, FORGE_ERR_ARGUMENT, "capture type %d is not a forge_capture_dtype", (int)d->capture_dtype);
    r->n_threads = d->n_threads;
    if (r->n_threads > FORGE_MAX_THREADS) /* a pool never starts more: the plan would count threads that never run */
        return forge__fail(e, FORGE_ERR_ARGUMENT, "%u threads is above forge's limit of %d (FORGE_MAX_THREADS)", r->n_threads,
                           FORGE_MAX_THREADS);
    r->device = d->device;
    if (d->device < 0) return forge__fail(e, FORGE_ERR_ARGUMENT, "GPU index %d is negative", d->device);
    r->n_parts = d->n_devices ? d->n_devices : 1;
    memset(r->split, 0, sizeof r->split);
    memset(r->split_layers, 0, sizeof r->split_layers);
    memset(r->part_layer, 0, sizeof r->part_layer);
    r->part_device[0] = d->device;
    if (r->n_parts > FORGE_MAX_DEVICES)
        return forge__fail(e, FORGE_ERR_ARGUMENT, "%u devices is above forge's limit of %d (FORGE_MAX_DEVICES)", r->n_parts,
                           FORGE_MAX_DEVICES);
    if (r->n_parts > 1) {
        uint32_t i, shares = 0;
        if (r->n_parts > c->n_layer)
            return forge__fail(e, FORGE_ERR_ARGUMENT, "%u devices for a model of %u layers: each device holds at least one layer",
                               r->n_parts, c->n_layer);
        for (i = 0; i < r->n_parts; i++) {
            const double share = d->split[i];
            if (d->devices[i] < 0) return forge__fail(e, FORGE_ERR_ARGUMENT, "device %u: GPU index %d is negative", i, d->devices[i]);
            if (!(share >= 0.0) || share > 1e300)
                return forge__fail(e, FORGE_ERR_ARGUMENT, "device %u: split share %g is not a finite number >= 0", i, share);
            r->part_device[i] = d->devices[i];
            r->split[i] = share;
            shares += share > 0.0;
        }
        if (shares && shares != r->n_parts)
            return forge__fail(e, FORGE_ERR_ARGUMENT, "a split gives %u of %u devices a share: give each a share above 0, or none",
                               shares, r->n_parts);
        for (i = 0, shares = 0; i < r->n_parts; i++) {
            r->split_layers[i] = d->split_layers[i];
            shares += d->split_layers[i] > 0;
        }
        if (shares) {
            uint64_t sum = 0;
            for (i = 0; i < r->n_parts; i++) sum += d->split_layers[i];
            if (shares != r->n_parts || sum != c->n_layer)
                return forge__fail(e, FORGE_ERR_ARGUMENT, "layers by device: %u of %u devices given layers, %llu in all; the model has %u "
                                   "(give each device at least one, summing to %u)", shares, r->n_parts, (forge__ull)sum, c->n_layer, c->n_layer);
        }
        r->device = r->part_device[r->n_parts - 1]; /* the logits' device: where a step ends */
    }
    r->part_layer[r->n_parts] = c->n_layer;
    switch (d->backend) {
    case FORGE_BACKEND_AUTO: r->backend = forge_gpu_available() ? FORGE_BACKEND_GPU : FORGE_BACKEND_CPU; break;
    case FORGE_BACKEND_CPU: r->backend = FORGE_BACKEND_CPU; break;
    case FORGE_BACKEND_GPU:
#ifndef FORGE_HIP
        return forge__fail(e, FORGE_ERR_UNSUPPORTED, "the GPU backend was asked for, but this build has none (compile with FORGE_HIP)");
#else
        r->backend = FORGE_BACKEND_GPU;
        break;
#endif
    default: return forge__fail(e, FORGE_ERR_ARGUMENT, "backend %d is not a forge_backend", (int)d->backend);
    }
    return FORGE_OK;
}

/* The most tokens of a product whose columns a GPU context of several sequences may split among
   blocks (forge_hip_matmul_split): its steps of a few rows, one of each sequence. */
#define FORGE__GPU_SPLIT_TOKENS 64u

/* Rows of the widest product of the schedule but the output head (which has blocks enough). */
static FORGE__MAYBE_UNUSED uint32_t forge__schedule_max_product_rows(const forge__schedule *s) {
    uint32_t k, rows = 0;
    for (k = 0; k < s->n_ops; k++)
        if (s->ops[k].kind == FORGE__OP_MATMUL) rows = FORGE__MAX(rows, s->ops[k].n);
    return rows;
}

/* The parts of a batch step's split products (a step of a few rows leaves most of the device idle
   unless a product's columns are split among blocks). */
static uint64_t forge__gpu_split_bytes(const forge__resolved *r, const forge__schedule *s) {
#ifdef FORGE_HIP
    const uint64_t split = forge_hip_matmul_split_bytes(forge__schedule_max_product_rows(s), FORGE__MIN(r->n_batch, FORGE__GPU_SPLIT_TOKENS));
    const uint64_t rows = forge_hip_rows_bytes(FORGE__MIN(r->n_batch, FORGE__GPU_SPLIT_TOKENS) * s->max_cols); /* the activations' forms */
    return forge__align_gpu(FORGE__MAX(split, rows));
#else
    (void)r, (void)s;
    return 0;
#endif
}

/* The records of a batch step's split attention. */
static uint64_t forge__gpu_rows_attn_bytes(const forge_model *m) {
#ifdef FORGE_HIP
    return forge__align_gpu(forge_hip_attention_rows_scratch_bytes(m->config.head_dim_v));
#else
    (void)m;
    return 0;
#endif
}

/* A GPU context of several sequences keeps a step's row positions and row sequences on the device
   (n_batch of each), read by the rope, cache store and attention launches of a batch, then the
   records of its split attention and the parts of its split products. */
static uint64_t forge__gpu_rows_bytes(const forge__resolved *r, const forge__schedule *s, const forge_model *m) {
    if (r->n_seq <= 1) return 0;
    return 2 * forge__align_gpu((uint64_t)r->n_batch * sizeof(uint32_t)) + forge__gpu_rows_attn_bytes(m) + forge__gpu_split_bytes(r, s);
}


/* What forge__matmul_work_bytes gives for a pool of n_threads, without the pool. */
static uint64_t forge__cpu_work_bytes(uint32_t n_threads, uint32_t max_cols) {
    return forge__align64((uint64_t)n_threads * forge__matmul_slot_bytes(max_cols) + FORGE__WORK_ALIGN);
}

/* The f32 products' rows (forge__cpu_work_bytes), then a step's product input in 8 bits. */
static uint64_t forge__cpu_reserve_bytes(uint32_t n_threads, uint32_t max_cols, uint32_t n_batch) {
    return forge__cpu_work_bytes(n_threads, max_cols) + forge__align64(forge__matmul_q8_work_bytes(n_threads, max_cols, n_batch));
}

/* Bytes of one element of a capture type. */
FORGE_API uint32_t forge_capture_dtype_bytes(forge_capture_dtype dtype) { return dtype == FORGE_CAPTURE_F32 ? 4u : 2u; }

/* Key positions of a pattern row at this resolution: the window's width, 0 when it leaves the context. */
static uint32_t forge__pattern_keys(const forge__resolved *r) {
    if (r->pattern_key_first >= r->n_ctx) return 0;
    if (!r->pattern_n_keys) return r->n_ctx - r->pattern_key_first;
    return r->pattern_n_keys <= r->n_ctx - r->pattern_key_first ? r->pattern_n_keys : 0;
}

/* Values per row of capture i at this resolution (a pattern's width follows the context's key window). */
static uint64_t forge__capture_row_values(const forge__schedule *s, const forge__resolved *r, uint32_t i) {
    if (s->captures[i].point == FORGE_CAPTURE_ATTN_PATTERN) return (uint64_t)s->capture_heads[i] * forge__pattern_keys(r);
    return s->capture_width[i];
}

/* The capture staging: n_batch rows of each capture, each region aligned for the backend. offsets
   (optional) receives where each capture's region starts; patterns (optional) the bytes of the
   attention patterns among them. */
static uint64_t forge__capture_bytes_of(const forge__schedule *s, const forge__resolved *r, uint64_t *offsets, uint64_t *patterns) {
    uint64_t total = 0, align = r->backend == FORGE_BACKEND_GPU ? 256 : 64;
    uint32_t i;
    if (patterns) *patterns = 0;
    for (i = 0; i < s->n_captures; i++) {
        uint64_t bytes = (uint64_t)r->n_batch * forge__capture_row_values(s, r, i) * forge_capture_dtype_bytes(r->capture_dtype);
        bytes = (bytes + align - 1) / align * align;
        if (offsets) offsets[i] = total;
        if (patterns && s->captures[i].point == FORGE_CAPTURE_ATTN_PATTERN) *patterns += bytes;
        total += bytes;
    }
    return total;
}

static uint64_t forge__capture_bytes(const forge__schedule *s, const forge__resolved *r, uint64_t *offsets) {
    return forge__capture_bytes_of(s, r, offsets, NULL);
}

/* The heads and key window of every attention-pattern capture, checked against the model and the
   context: each capture's heads, and its row width (heads x keys) for this context. */
static forge_result forge__pattern_setup(forge__schedule *s, const forge_config *c, const forge__resolved *r, forge_error *e) {
    uint32_t i, keys = forge__pattern_keys(r);
    for (i = 0; i < s->n_captures; i++) {
        uint32_t layer = s->captures[i].layer, n_head, heads;
        if (s->captures[i].point != FORGE_CAPTURE_ATTN_PATTERN) continue;
        n_head = c->layer_n_head[layer];
        heads = r->pattern_n_heads ? r->pattern_n_heads : n_head > r->pattern_head_first ? n_head - r->pattern_head_first : 0;
        if (r->pattern_head_first >= n_head || heads == 0 || heads > n_head - r->pattern_head_first)
            return forge__fail(e, FORGE_ERR_ARGUMENT, "attention pattern of layer %u: heads %u .. %u, but the layer has %u (0 .. %u)",
                               layer, r->pattern_head_first, r->pattern_head_first + (heads ? heads : 1) - 1, n_head, n_head - 1);
        if (keys == 0)
            return forge__fail(e, FORGE_ERR_ARGUMENT, "attention pattern: key positions %u .. %llu are outside the context of %u",
                               r->pattern_key_first,
                               (forge__ull)r->pattern_key_first + (r->pattern_n_keys ? r->pattern_n_keys : 1) - 1, r->n_ctx);
        if ((uint64_t)heads * keys > 0x7fffffffu)
            return forge__fail(e, FORGE_ERR_LIMIT, "attention pattern of layer %u: %u heads x %u keys is above 2^31 values a row",
                               layer, heads, keys);
        if (r->backend == FORGE_BACKEND_GPU && (uint64_t)heads * r->n_batch > 0x7fffffffu)
            return forge__fail(e, FORGE_ERR_LIMIT, "attention pattern of layer %u: %u heads x %u rows is above a GPU launch's blocks",
                               layer, heads, r->n_batch);
        s->capture_heads[i] = heads;
        s->capture_width[i] = heads * keys;
    }
    return FORGE_OK;
}

/* The part that runs op: the last whose first layer is at or below the op's (the embedding, layer 0,
   runs on the first; the final norm and the head, layer n_layer, on the last). */
static uint32_t forge__op_part(const forge__resolved *r, const forge__op *op) {
    uint32_t p = r->n_parts - 1;
    while (p > 0 && op->layer < r->part_layer[p]) p--;
    return p;
}

/* The parts that read tensor t (a bit each): those of the ops that read it; the rope factors every
   part (each part's rope reads them). */
static unsigned forge__tensor_parts(const forge__schedule *s, const forge_model *m, const forge__resolved *r,
                                    const forge_gguf_tensor *t) {
    unsigned mask = 0;
    uint32_t k;
    if (m->config.has_rope_freqs && t == forge_gguf_find_tensor(m->gguf, "rope_freqs.weight")) return (1u << r->n_parts) - 1;
    for (k = 0; k < s->n_ops; k++)
        if (s->ops[k].w == t || s->ops[k].bias == t) mask |= 1u << forge__op_part(r, &s->ops[k]);
    return mask;
}

/* Bytes of tensor t as the backend holds it: on the GPU at a 256-byte boundary, vectors in f32. */
static uint64_t forge__held_bytes(const forge__resolved *r, forge__use use, const forge_gguf_tensor *t) {
    if (r->backend != FORGE_BACKEND_GPU) return t->n_bytes;
    return forge__align_gpu(use == FORGE__VECTOR ? t->n_elements * sizeof(float) : t->n_bytes);
}

/* One sequence's cache of layer il (forge_kv_cache_bytes counts the sum of these). */
static uint64_t forge__kv_layer_bytes(const forge_config *c, uint32_t il, uint32_t n_ctx, uint32_t n_batch, forge_kv_type type) {
    const forge_type_traits *t = forge_type_info(forge__kv_storage_type(type));
    const uint64_t row = (uint64_t)c->head_dim / t->block_elems * t->block_bytes + (uint64_t)c->head_dim_v / t->block_elems * t->block_bytes;
    return (uint64_t)forge_kv_layer_cells(c, il, n_ctx, n_batch) * c->layer_n_head_kv[il] * row;
}

static forge_result forge__plan_with(const forge_model *m, const forge__resolved *r, const forge__schedule *s,
                                     uint64_t scratch_bytes, uint32_t n_threads, forge_plan *p, forge_error *e) {
    forge_result res;
    uint64_t kv_one, capture_one, pattern_one, reserve_one, i;
    uint32_t part, k, n_capture_parts = 0;
    unsigned capture_parts = 0;
    memset(p, 0, sizeof *p);
    p->n_ctx = r->n_ctx;
    p->n_batch = r->n_batch;
    p->n_logits = r->n_logits;
    p->n_seq = r->n_seq;
    p->kv_type = r->kv_type;
    if ((res = forge_kv_cache_bytes(&m->config, r->n_ctx, r->n_batch, r->kv_type, &kv_one, e))) return res;
    if (kv_one > (1ull << 61) / r->n_seq)
        return forge__fail(e, FORGE_ERR_OVERFLOW, "%u KV caches of %llu bytes are beyond any machine", r->n_seq, (forge__ull)kv_one);
    p->backend = r->backend;
    capture_one = forge__capture_bytes_of(s, r, NULL, &pattern_one);
    {
        uint32_t j;
        for (j = 0; j < s->n_captures; j++)
            if (s->captures[j].point == FORGE_CAPTURE_ATTN_PATTERN) {
                if (!forge__pattern_keys(r))
                    return forge__fail(e, FORGE_ERR_ARGUMENT, "attention pattern: key position %u is outside the context of %u",
                                       r->pattern_key_first, r->n_ctx);
                p->pattern_key_first = r->pattern_key_first;
                p->pattern_n_keys = forge__pattern_keys(r);
                p->pattern_n_heads = FORGE__MAX(p->pattern_n_heads, s->capture_heads[j]);
            }
    }
    for (k = 0; k < s->n_ops; k++) /* each part that captures keeps the whole staging */
        if (s->ops[k].kind == FORGE__OP_CAPTURE || s->ops[k].kind == FORGE__OP_PATTERN) capture_parts |= 1u << forge__op_part(r, &s->ops[k]);
    if (r->backend == FORGE_BACKEND_GPU) /* each device: one arena of 256-byte aligned regions, KV cache last */
        reserve_one = forge__gpu_reserve_bytes(s, m, r->n_ctx, r->n_batch) + forge__gpu_rows_bytes(r, s, m);
    else /* the CPU backend's working memory (with the first part): the matmul rows of every thread, a step's
            product input in 8 bits, and one vector (a norm's weights or a bias) in f32 */
        reserve_one = forge__cpu_reserve_bytes(n_threads, s->max_cols, r->n_batch) + forge__align64((uint64_t)s->max_vec * sizeof(float));
    p->n_parts = r->n_parts;
    for (part = 0; part < r->n_parts; part++) {
        forge_plan_part *q = &p->parts[part];
        uint32_t il;
        q->device = r->part_device[part];
        q->layer_first = r->part_layer[part];
        q->n_layers = r->part_layer[part + 1] - r->part_layer[part];
        for (il = q->layer_first; il < q->layer_first + q->n_layers; il++)
            q->kv_bytes += forge__kv_layer_bytes(&m->config, il, r->n_ctx, r->n_batch, r->kv_type);
        q->kv_bytes *= r->n_seq; /* one cache per sequence, each exactly one sequence's */
        q->scratch_bytes = r->backend == FORGE_BACKEND_GPU ? forge__align_gpu(scratch_bytes) : scratch_bytes;
        if (part + 1 == r->n_parts)
            q->logits_bytes = r->backend == FORGE_BACKEND_GPU ? forge__align_gpu((uint64_t)r->n_logits * m->config.n_vocab * sizeof(float))
                                                              : forge__align64((uint64_t)r->n_logits * m->config.n_vocab * sizeof(float));
        if (capture_parts >> part & 1u) {
            q->capture_bytes = capture_one;
            n_capture_parts++;
        }
        q->reserve_bytes = r->backend == FORGE_BACKEND_GPU || part == 0 ? reserve_one : 0;
    }
    for (i = 0; i < forge_gguf_tensor_count(m->gguf); i++) {
        const forge_gguf_tensor *t = forge_gguf_tensor_at(m->gguf, i);
        const forge__use use = forge__tensor_use(s, m, t);
        unsigned mask;
        if (use == FORGE__UNUSED) continue;
        mask = r->n_parts == 1 ? 1u : forge__tensor_parts(s, m, r, t);
        for (part = 0; part < r->n_parts; part++)
            if (mask >> part & 1u) p->parts[part].weights_bytes += forge__held_bytes(r, use, t);
    }
    for (part = 0; part < r->n_parts; part++) {
        forge_plan_part *q = &p->parts[part];
        q->total_bytes = q->weights_bytes + q->kv_bytes + q->scratch_bytes + q->logits_bytes + q->capture_bytes + q->reserve_bytes;
        p->weights_bytes += q->weights_bytes;
        p->kv_bytes += q->kv_bytes;
        p->scratch_bytes += q->scratch_bytes;
        p->logits_bytes += q->logits_bytes;
        p->capture_bytes += q->capture_bytes;
        p->reserve_bytes += q->reserve_bytes;
        p->total_bytes += q->total_bytes;
    }
    p->pattern_bytes = pattern_one * n_capture_parts;
    if (p->kv_bytes != kv_one * r->n_seq) /* the layers' caches add up to the whole, or the split lost a layer */
        return forge__fail(e, FORGE_ERR_CONFIG, "the parts' KV caches (%llu bytes) differ from the whole (%llu)", (forge__ull)p->kv_bytes,
                           (forge__ull)(kv_one * r->n_seq));
    /* every term is below 2^62 (the KV cache is checked, the others are bounded by the configuration's
       limits and the file size), so the sum cannot wrap; the KV cache alone is the one to watch */
    if (p->kv_bytes > (1ull << 61))
        return forge__fail(e, FORGE_ERR_OVERFLOW, "a KV cache of %llu bytes is beyond any machine", (forge__ull)p->kv_bytes);
    return FORGE_OK;
}

/* Chooses the layers of each part (r->part_layer) for a split: contiguous ranges, at least one layer
   each, that make the largest fill (a part's bytes over its weight) as small as it can be. weight:
   each part's capacity (its budget, or the caller's share), NULL for equal. With the caller's shares
   only the layers' own bytes (weights, KV cache) are divided; otherwise each part's fixed terms
   (scratch, reserve, the embedding on the first, the head and logits on the last) count too. A
   greedy fill at a given fill ratio is optimal for contiguous ranges, so a bisection on the ratio
   finds the best. */
static void forge__split_choose(const forge_model *m, forge__resolved *r, const forge__schedule *s, uint64_t scratch_bytes,
                                uint32_t n_threads, const double *weight) {
    const forge_config *c = &m->config;
    const uint32_t n = r->n_parts, L = c->n_layer;
    const int fixed = !(r->split[0] > 0.0);
    uint64_t cost[FORGE_MAX_LAYERS], fixed_cost[FORGE_MAX_DEVICES], i;
    double w[FORGE_MAX_DEVICES], lo = 0.0, hi = 0.0, total = 0.0;
    uint32_t part, il, k, iter, best[FORGE_MAX_DEVICES + 1];
    forge_plan base;
    if (n <= 1) return;
    if (r->split_layers[0]) { /* the caller's layer counts */
        for (part = 0; part < n; part++) r->part_layer[part + 1] = r->part_layer[part] + r->split_layers[part];
        return;
    }
    for (part = 0; part < n; part++) {
        /* a device with no room (a budget of 0) still takes its one layer, and is refused by the check */
        w[part] = r->split[0] > 0.0 ? r->split[part] : weight ? FORGE__MAX(weight[part], 1.0) : 1.0;
        fixed_cost[part] = 0;
    }
    /* the fixed terms of every part (scratch, reserve, captures) from the one-part plan; the logits with the last */
    {
        forge__resolved t = *r;
        t.n_parts = 1;
        t.part_layer[0] = 0, t.part_layer[1] = L;
        if (forge__plan_with(m, &t, s, scratch_bytes, n_threads, &base, NULL) != FORGE_OK) memset(&base, 0, sizeof base);
    }
    if (fixed) {
        for (part = 0; part < n; part++)
            fixed_cost[part] = base.scratch_bytes + base.capture_bytes + (r->backend == FORGE_BACKEND_GPU || part == 0 ? base.reserve_bytes : 0);
        fixed_cost[n - 1] += base.logits_bytes;
    }
    /* each layer's bytes: its cache, and the tensors only its ops read; the head's tensors with the last */
    for (il = 0; il < L; il++) cost[il] = forge__kv_layer_bytes(c, il, r->n_ctx, r->n_batch, r->kv_type) * r->n_seq;
    for (i = 0; i < forge_gguf_tensor_count(m->gguf); i++) {
        const forge_gguf_tensor *t = forge_gguf_tensor_at(m->gguf, i);
        const forge__use use = forge__tensor_use(s, m, t);
        uint32_t first = UINT32_MAX, last = 0;
        if (use == FORGE__UNUSED) continue;
        if (c->has_rope_freqs && t == forge_gguf_find_tensor(m->gguf, "rope_freqs.weight")) {
            if (fixed)
                for (part = 0; part < n; part++) fixed_cost[part] += forge__held_bytes(r, use, t);
            continue;
        }
        for (k = 0; k < s->n_ops; k++) {
            if (s->ops[k].w != t && s->ops[k].bias != t) continue;
            if (s->ops[k].kind == FORGE__OP_EMBED) {
                if (fixed) fixed_cost[0] += forge__held_bytes(r, use, t);
                continue;
            }
            first = FORGE__MIN(first, s->ops[k].layer);
            last = FORGE__MAX(last, s->ops[k].layer);
        }
        if (first == UINT32_MAX) continue; /* the embedding's alone */
        if (first == last && first < L) cost[first] += forge__held_bytes(r, use, t);
        else if (fixed) fixed_cost[n - 1] += forge__held_bytes(r, use, t);
    }
    for (il = 0; il < L; il++) total += (double)cost[il];
    for (part = 0; part < n; part++) hi = FORGE__MAX(hi, (total + (double)fixed_cost[part]) / w[part]);
    hi = hi * 2.0 + 1.0;
    for (part = 0; part < n; part++) best[part] = part; /* one layer each, the rest with the last: feasible at hi */
    best[n] = L;
    for (iter = 0; iter < 100; iter++) {
        const double lambda = iter == 0 ? hi : (lo + hi) / 2.0;
        uint32_t at[FORGE_MAX_DEVICES + 1];
        int ok = 1;
        il = 0;
        for (part = 0; part < n && ok; part++) {
            const double cap = lambda * w[part];
            double used = (double)fixed_cost[part];
            at[part] = il;
            if (part + 1 == n) {
                for (; il < L; il++) used += (double)cost[il];
                ok = used <= cap;
                break;
            }
            used += (double)cost[il++]; /* at least one layer */
            ok = used <= cap;
            while (ok && il < L - (n - 1 - part) && used + (double)cost[il] <= cap) used += (double)cost[il++];
        }
        at[n] = L;
        if (ok) {
            memcpy(best, at, sizeof at);
            hi = lambda;
        } else if (iter == 0) {
            break; /* cannot happen (hi holds everything); keep one layer each */
        } else {
            lo = lambda;
        }
    }
    memcpy(r->part_layer, best, (n + 1) * sizeof best[0]);
}

FORGE_API forge_result forge_plan_compute(const forge_model *m, const forge_context_desc *desc, forge_plan *out,
                                          forge_error *error) {
    forge_context_desc zero;
    forge__resolved r;
    forge__schedule s;
    forge_result res;
    uint64_t scratch;
    if (!m || !out) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_plan_compute: null argument");
    if (!desc) {
        memset(&zero, 0, sizeof zero);
        desc = &zero;
    }
    if ((res = forge__allocator_check(&desc->allocator, "forge_context_desc.allocator", error))) return res;
    if ((res = forge__resolve_desc(m, desc, &r, error))) return res;
    if ((res = forge__schedule_build(m, &desc->allocator, &s, desc->captures, desc->n_captures, error))) return res;
    if ((res = forge__pattern_setup(&s, &m->config, &r, error))) {
        forge__schedule_free(&s, &desc->allocator);
        return res;
    }
    scratch = forge__schedule_pack(&s, r.n_batch);
    forge__split_choose(m, &r, &s, scratch, r.n_threads ? r.n_threads : forge_cpu_default_threads(), NULL);
    res = forge__plan_with(m, &r, &s, scratch, r.n_threads ? r.n_threads : forge_cpu_default_threads(), out, error);
    forge__schedule_free(&s, &desc->allocator);
    if (res == FORGE_OK) forge__ok(error);
    return res;
}

FORGE_API forge_result forge_memory_query_cpu(forge_memory_reading *out, forge_error *error) {
#ifndef FORGE_NO_STDIO
    forge_host_memory host;
    forge_result r;
    if (!out) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_memory_query_cpu: null argument");
    memset(out, 0, sizeof *out);
    if ((r = forge_host_memory_query(&host, error))) return r;
    snprintf(out->device, sizeof out->device, "%s", host.cgroup_limited ? "CPU (container memory)" : "CPU (host memory)");
    out->total_bytes = host.total_bytes;
    out->free_bytes = host.available_bytes;
    out->adjusted = host.adjusted;
    return FORGE_OK;
#else
    if (out) memset(out, 0, sizeof *out);
    return forge__fail(error, FORGE_ERR_UNSUPPORTED, "host memory cannot be read without stdio (FORGE_NO_STDIO)");
#endif
}

FORGE_API forge_result forge_monitor_poll(forge_monitor *m, const forge_memory_reading *reading, double *used_fraction,
                                          forge_error *error) {
    forge_memory_reading now;
    double threshold, used;
    forge_result r;
    if (!m) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_monitor_poll: null monitor");
    if (reading) now = *reading;
    else if ((r = forge_memory_query_cpu(&now, error))) return r;
    threshold = m->threshold > 0.0 ? m->threshold : 0.85;
    if (threshold > 1.0) return forge__fail(error, FORGE_ERR_ARGUMENT, "monitor threshold %g is above 1", threshold);
    /* no total or more free than total: nothing sensible to report, count it as fully used */
    used = now.total_bytes == 0 || now.free_bytes > now.total_bytes
               ? 1.0
               : 1.0 - (double)now.free_bytes / (double)now.total_bytes;
    if (used_fraction) *used_fraction = used;
    if (used >= threshold && !m->above) {
        m->above = 1;
        if (m->warn) m->warn(m->user_data, &now, used);
    } else if (used < threshold) {
        m->above = 0;
    }
    forge__ok(error);
    return FORGE_OK;
}

/* A byte count in the unit that suits `scale` (GiB, MiB or KiB), so the terms of one breakdown
   share the unit of their total. */
static const char *forge__unit(uint64_t scale, double *divisor) {
    if (scale >= (1ull << 30)) return *divisor = (double)(1ull << 30), "GiB";
    if (scale >= (1ull << 20)) return *divisor = (double)(1ull << 20), "MiB";
    return *divisor = 1024.0, "KiB";
}

static void forge__in_unit(char *buf, size_t size, uint64_t bytes, double divisor) {
    snprintf(buf, size, "%.1f", (double)bytes / divisor);
}

static uint64_t forge__budget_of(uint64_t free_bytes, double fraction, uint64_t headroom) {
    double b = (double)free_bytes * fraction;
    uint64_t budget = b >= 18446744073709549568.0 ? UINT64_MAX : (uint64_t)b;
    return budget > headroom ? budget - headroom : 0;
}

/* The devices of a verdict: the budgets, and which device each part is on (parts on one device share
   its budget; the CPU's parts share the host's unless the desc gives each its reading). */
typedef struct forge__groups {
    uint32_t n, of_part[FORGE_MAX_DEVICES];
    uint64_t budget[FORGE_MAX_DEVICES];
} forge__groups;

/* 1 when every device holds its parts of p within its budget. */
static int forge__plan_fits(const forge_plan *p, const forge__groups *g) {
    uint64_t need[FORGE_MAX_DEVICES] = {0};
    uint32_t i;
    for (i = 0; i < p->n_parts; i++) need[g->of_part[i]] += p->parts[i].total_bytes;
    for (i = 0; i < g->n; i++)
        if (need[i] > g->budget[i]) return 0;
    return 1;
}

/* The split (chosen for the budgets, or the caller's shares) and its plan. */
static forge_result forge__plan_split(const forge_model *m, forge__resolved *r, const forge__schedule *s, uint64_t scratch, uint32_t threads,
                                      const double *weight, forge_plan *p, forge_error *e) {
    forge__split_choose(m, r, s, scratch, threads, weight);
    return forge__plan_with(m, r, s, scratch, threads, p, e);
}

FORGE_API forge_result forge_plan_check(const forge_model *m, const forge_context_desc *desc, forge_verdict *v,
                                        forge_error *error) {
    forge_context_desc zero;
    forge__resolved r;
    forge__schedule s;
    forge_result res;
    forge__groups g;
    double weight[FORGE_MAX_DEVICES];
    uint32_t threads, i;
    char need[16], weights[16], kv[16], scratch[16], reserve[16], budget[16], free_text[16], captures[160], seqs[32];
    int kvt;

    if (!m || !v) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_plan_check: null argument");
    if (!desc) {
        memset(&zero, 0, sizeof zero);
        desc = &zero;
    }
    if ((res = forge__allocator_check(&desc->allocator, "forge_context_desc.allocator", error))) return res;
    memset(v, 0, sizeof *v);
    if ((res = forge__resolve_desc(m, desc, &r, error))) return res;
    v->mem_fraction = forge__resolve_fraction(desc->mem_fraction);
    v->mem_headroom_bytes = desc->mem_headroom_bytes;
    memset(&g, 0, sizeof g);
    for (i = 0; i < r.n_parts; i++) { /* each device's reading, once */
        const int shared_host = r.backend != FORGE_BACKEND_GPU && !desc->device_memory;
        uint32_t j;
        forge_device_verdict *d;
        for (j = 0; j < g.n && !shared_host && v->devices[j].device != r.part_device[i]; j++) {}
        if (shared_host) j = 0;
        g.of_part[i] = j;
        if (j < g.n) continue;
        d = &v->devices[g.n++];
        d->device = r.part_device[i];
        if (r.n_parts > 1 && desc->device_memory) d->memory = desc->device_memory[i];
        else if (desc->memory) d->memory = *desc->memory;
        else if (r.backend == FORGE_BACKEND_GPU) {
            if ((res = forge_memory_query_gpu(d->device, &d->memory, error))) return res;
        } else if ((res = forge_memory_query_cpu(&d->memory, error))) return res;
        if (d->memory.free_bytes > d->memory.total_bytes) { /* a reading that makes no sense: trust the smaller */
            d->memory.free_bytes = d->memory.total_bytes;
            d->memory.adjusted = 1;
        }
        d->budget_bytes = forge__budget_of(d->memory.free_bytes, v->mem_fraction, v->mem_headroom_bytes);
        g.budget[j] = d->budget_bytes;
    }
    v->n_devices = g.n;
    v->memory = v->devices[0].memory;
    v->budget_bytes = v->devices[0].budget_bytes;
    for (i = 0; i < r.n_parts; i++) { /* a device's budget shared by the parts on it */
        uint32_t j, on = 0;
        for (j = 0; j < r.n_parts; j++) on += g.of_part[j] == g.of_part[i];
        weight[i] = (double)g.budget[g.of_part[i]] / on;
    }
    threads = r.n_threads ? r.n_threads : forge_cpu_default_threads();

    if ((res = forge__schedule_build(m, &desc->allocator, &s, desc->captures, desc->n_captures, error))) return res;
    if ((res = forge__pattern_setup(&s, &m->config, &r, error)) == FORGE_OK)
        res = forge__plan_split(m, &r, &s, forge__schedule_pack(&s, r.n_batch), threads, weight, &v->plan, error);
    if (res) {
        forge__schedule_free(&s, &desc->allocator);
        return res;
    }
    v->fits = forge__plan_fits(&v->plan, &g);
    for (i = 0; i < g.n; i++) v->devices[i].plan_bytes = 0;
    for (i = 0; i < v->plan.n_parts; i++) v->devices[g.of_part[i]].plan_bytes += v->plan.parts[i].total_bytes;
    for (i = 0; i < g.n; i++) v->devices[i].fits = v->devices[i].plan_bytes <= v->devices[i].budget_bytes;
    v->kv_type_that_fits = FORGE_KV_DEFAULT;
    if (!v->fits) {
        /* largest context (a multiple of 256, up to the requested one and, past the trained context,
           up to that) at the requested KV type; the plan grows with the context: bisection */
        uint32_t lo = 0, hi = (r.n_ctx > m->config.n_ctx_train && m->config.n_ctx_train >= 256 ? m->config.n_ctx_train : r.n_ctx) / 256;
        forge__resolved t = r;
        forge_plan p;
        while (lo < hi) {
            uint32_t mid = lo + (hi - lo + 1) / 2;
            t.n_ctx = mid * 256;
            t.n_batch = FORGE__MIN(r.n_batch, t.n_ctx);
            t.n_logits = FORGE__MIN(r.n_logits, t.n_batch);
            if (forge__plan_split(m, &t, &s, forge__schedule_pack(&s, t.n_batch), threads, weight, &p, NULL) == FORGE_OK &&
                forge__plan_fits(&p, &g))
                lo = mid;
            else
                hi = mid - 1;
        }
        v->max_ctx_that_fits = lo * 256;
        /* the most precise smaller KV type that holds the requested context */
        for (kvt = FORGE_KV_F32; kvt < FORGE_KV_TYPE_COUNT; kvt++) {
            uint64_t a = 0, b = 0;
            t = r;
            t.kv_type = (forge_kv_type)kvt;
            if (forge_kv_cache_bytes(&m->config, 256, 0, t.kv_type, &a, NULL) != FORGE_OK ||
                forge_kv_cache_bytes(&m->config, 256, 0, r.kv_type, &b, NULL) != FORGE_OK || a >= b)
                continue;
            if (forge__plan_split(m, &t, &s, forge__schedule_pack(&s, t.n_batch), threads, weight, &p, NULL) == FORGE_OK &&
                forge__plan_fits(&p, &g)) {
                v->kv_type_that_fits = t.kv_type;
                break;
            }
        }
        if (r.n_parts > 1 && (r.split[0] > 0.0 || r.split_layers[0])) { /* the caller's split: would forge's own fit? */
            uint64_t layer_bytes = 0;
            t = r;
            memset(t.split, 0, sizeof t.split);
            memset(t.split_layers, 0, sizeof t.split_layers);
            if (forge__plan_split(m, &t, &s, forge__schedule_pack(&s, t.n_batch), threads, weight, &p, NULL) == FORGE_OK &&
                forge__plan_fits(&p, &g)) {
                for (i = 0; i < p.n_parts; i++) layer_bytes += p.parts[i].weights_bytes + p.parts[i].kv_bytes;
                for (i = 0; i < p.n_parts; i++)
                    v->split_that_fits[i] = layer_bytes ? (double)(p.parts[i].weights_bytes + p.parts[i].kv_bytes) / (double)layer_bytes : 0.0;
            }
        }
    }
    { /* the most sequences at the requested context and KV type (the plan grows with them), and the
         price of one more: its cache, and its logits row while rows are kept per sequence */
        uint32_t lo = 0, hi = FORGE_MAX_SEQ;
        forge__resolved t = r;
        forge_plan p;
        while (lo < hi) {
            uint32_t mid = lo + (hi - lo + 1) / 2;
            t.n_seq = mid;
            t.n_logits = forge__logit_rows(desc->all_logits, r.n_batch, mid);
            if (forge__plan_split(m, &t, &s, v->plan.scratch_bytes / v->plan.n_parts, threads, weight, &p, NULL) == FORGE_OK &&
                forge__plan_fits(&p, &g))
                lo = mid;
            else
                hi = mid - 1;
        }
        v->max_seq_that_fits = lo;
        t = r; /* one more on the same layers: the price on top of this plan */
        t.n_seq = r.n_seq + 1;
        t.n_logits = forge__logit_rows(desc->all_logits, r.n_batch, t.n_seq);
        if (r.n_seq < FORGE_MAX_SEQ &&
            forge__plan_with(m, &t, &s, v->plan.scratch_bytes / v->plan.n_parts, threads, &p, NULL) == FORGE_OK)
            v->seq_bytes = p.total_bytes - v->plan.total_bytes;
    }
    forge__schedule_free(&s, &desc->allocator);

    if (r.n_parts > 1) { /* a split: the whole bill, then each device against its own budget */
        double div;
        const char *unit = forge__unit(v->plan.total_bytes, &div);
        int used;
        size_t len;
        forge__in_unit(need, sizeof need, v->plan.total_bytes, div);
        forge__in_unit(weights, sizeof weights, v->plan.weights_bytes, div);
        forge__in_unit(kv, sizeof kv, v->plan.kv_bytes, div);
        forge__in_unit(scratch, sizeof scratch, v->plan.scratch_bytes + v->plan.logits_bytes + v->plan.capture_bytes, div);
        forge__in_unit(reserve, sizeof reserve, v->plan.reserve_bytes, div);
        used = snprintf(v->message, sizeof v->message, "model needs %s %s on %u devices (weights %s, KV cache %s at %u tokens %s, scratch %s, reserve %s)",
                        need, unit, r.n_parts, weights, kv, r.n_ctx, forge_kv_type_name(r.kv_type), scratch, reserve);
        for (i = 0; i < g.n && used > 0 && (size_t)used < sizeof v->message; i++) {
            const forge_device_verdict *d = &v->devices[i];
            uint32_t j, first = UINT32_MAX, last = 0;
            for (j = 0; j < v->plan.n_parts; j++)
                if (g.of_part[j] == i) {
                    first = FORGE__MIN(first, v->plan.parts[j].layer_first);
                    last = FORGE__MAX(last, v->plan.parts[j].layer_first + v->plan.parts[j].n_layers - 1);
                }
            char short_by[32] = "";
            forge__in_unit(need, sizeof need, d->plan_bytes, div);
            forge__in_unit(budget, sizeof budget, d->budget_bytes, div);
            forge__in_unit(free_text, sizeof free_text, d->memory.free_bytes, div);
            if (!d->fits) {
                char amount[16];
                forge__in_unit(amount, sizeof amount, d->plan_bytes - d->budget_bytes, div);
                snprintf(short_by, sizeof short_by, ", short by %s", amount);
            }
            used += snprintf(v->message + used, sizeof v->message - (size_t)used, "; device %d (layers %u-%u): %s of %s %s budget (%.3g%% of %s free)%s",
                             d->device, first, last, need, budget, unit, v->mem_fraction * 100.0, free_text, short_by);
        }
        len = strlen(v->message);
        if (!v->fits) {
            uint64_t short_by = 0, per_part = v->plan.parts[0].scratch_bytes + v->plan.parts[0].capture_bytes +
                                               (r.backend == FORGE_BACKEND_GPU ? v->plan.parts[0].reserve_bytes : 0);
            char more[16];
            for (i = 0; i < g.n; i++)
                if (!v->devices[i].fits) short_by += v->devices[i].plan_bytes - v->devices[i].budget_bytes;
            forge__in_unit(more, sizeof more, short_by + per_part, div);
            if (v->max_ctx_that_fits)
                len += (size_t)snprintf(v->message + len, sizeof v->message > len ? sizeof v->message - len : 0, "; fits: --ctx %u", v->max_ctx_that_fits);
            if (v->kv_type_that_fits != FORGE_KV_DEFAULT && len < sizeof v->message)
                len += (size_t)snprintf(v->message + len, sizeof v->message - len, "%s--kv %s", v->max_ctx_that_fits ? ", or " : "; fits: ",
                                        forge_kv_type_name(v->kv_type_that_fits));
            if (v->split_that_fits[0] > 0.0 && len < sizeof v->message) {
                len += (size_t)snprintf(v->message + len, sizeof v->message - len, "%s--split ",
                                        v->max_ctx_that_fits || v->kv_type_that_fits != FORGE_KV_DEFAULT ? ", or " : "; fits: ");
                for (i = 0; i < v->plan.n_parts && len < sizeof v->message; i++)
                    len += (size_t)snprintf(v->message + len, sizeof v->message - len, "%s%.3f", i ? "," : "", v->split_that_fits[i]);
            }
            if (len < sizeof v->message)
                snprintf(v->message + len, sizeof v->message - len, "; or a device more with a budget of at least %s %s", more, unit);
        }
        forge__ok(error);
        return FORGE_OK;
    }
    {
        double plan_div, budget_div, free_div;
        const char *plan_unit = forge__unit(v->plan.total_bytes, &plan_div);
        const char *budget_unit = forge__unit(v->budget_bytes, &budget_div);
        const char *free_unit = forge__unit(v->memory.free_bytes, &free_div);
        int used;
        forge__in_unit(need, sizeof need, v->plan.total_bytes, plan_div);
        forge__in_unit(weights, sizeof weights, v->plan.weights_bytes, plan_div);
        forge__in_unit(kv, sizeof kv, v->plan.kv_bytes, plan_div);
        forge__in_unit(scratch, sizeof scratch, v->plan.scratch_bytes + v->plan.logits_bytes, plan_div);
        forge__in_unit(reserve, sizeof reserve, v->plan.reserve_bytes, plan_div);
        captures[0] = '\0';
        if (v->plan.capture_bytes) {
            char amount[32];
            forge__in_unit(amount, sizeof amount, v->plan.capture_bytes, plan_div);
            if (v->plan.pattern_bytes) {
                char pattern[32];
                forge__in_unit(pattern, sizeof pattern, v->plan.pattern_bytes, plan_div);
                snprintf(captures, sizeof captures, ", captures %s with attention patterns %s (%u heads x keys %u .. %u)", amount,
                         pattern, v->plan.pattern_n_heads, v->plan.pattern_key_first,
                         v->plan.pattern_key_first + v->plan.pattern_n_keys - 1);
            } else {
                snprintf(captures, sizeof captures, ", captures %s", amount);
            }
        }
        forge__in_unit(budget, sizeof budget, v->budget_bytes, budget_div);
        forge__in_unit(free_text, sizeof free_text, v->memory.free_bytes, free_div);
        seqs[0] = '\0';
        if (r.n_seq > 1) snprintf(seqs, sizeof seqs, " x %u sequences", r.n_seq);
        used = snprintf(v->message, sizeof v->message,
                        "model needs %s %s (weights %s, KV cache %s at %u tokens %s%s, scratch %s%s, reserve %s) %s "
                        "%s %s (%.3g%% of %s %s free on %s%s%s)",
                        need, plan_unit, weights, kv, r.n_ctx, forge_kv_type_name(r.kv_type), seqs, scratch, captures, reserve,
                        v->fits ? "within the budget of" : "but the budget is", budget, budget_unit, v->mem_fraction * 100.0, free_text,
                        free_unit, v->memory.device, v->mem_headroom_bytes ? ", less headroom" : "",
                        v->memory.adjusted ? ", reading adjusted" : "");
        if (!v->fits && used > 0 && (size_t)used < sizeof v->message) {
            if (v->max_ctx_that_fits == 0 && v->kv_type_that_fits == FORGE_KV_DEFAULT)
                snprintf(v->message + used, sizeof v->message - (size_t)used,
                         "; nothing fits: even 256 tokens need more than the budget");
            else if (v->kv_type_that_fits == FORGE_KV_DEFAULT)
                snprintf(v->message + used, sizeof v->message - (size_t)used, "; fits: --ctx %u", v->max_ctx_that_fits);
            else if (v->max_ctx_that_fits == 0)
                snprintf(v->message + used, sizeof v->message - (size_t)used, "; fits: --kv %s at %u",
                         forge_kv_type_name(v->kv_type_that_fits), r.n_ctx);
            else
                snprintf(v->message + used, sizeof v->message - (size_t)used, "; fits: --ctx %u, or --kv %s at %u",
                         v->max_ctx_that_fits, forge_kv_type_name(v->kv_type_that_fits), r.n_ctx);
        }
        if (r.n_seq > 1 && used > 0 && (size_t)used < sizeof v->message) { /* the sequences' side of the bill */
            char each[16];
            double each_div;
            const char *each_unit = forge__unit(v->seq_bytes, &each_div);
            size_t len = strlen(v->message);
            forge__in_unit(each, sizeof each, v->seq_bytes, each_div);
            if (v->fits)
                snprintf(v->message + len, sizeof v->message - len, "; a sequence more costs %s %s", each, each_unit);
            else
                snprintf(v->message + len, sizeof v->message - len, "; each sequence costs %s %s, %u fit at %u tokens", each,
                         each_unit, v->max_seq_that_fits, r.n_ctx);
        }
    }
    forge__ok(error);
    return FORGE_OK;
}


/* >>impl-cpu-backend */

#define FORGE__MAX_HEAD_DIM 1024

/* One device's share of a context (a part of the layers, see forge_context_desc.n_devices): its
   arena and where its regions are. The context works on one part at a time: forge__part_load copies
   the part's regions into the context's own fields (scratch, kv, dev, dev_scratch, ...), which the
   backends read; a context of one part loads it once. */
typedef struct forge__part {
    int device;
    uint32_t op_first, op_end;   /* the schedule's ops this part runs */
    uint8_t *arena;              /* CPU: the host arena; GPU: the device arena */
    uint64_t arena_bytes, kv_seq_bytes;
    float *scratch;              /* CPU */
    uint8_t *kv, *capture;       /* CPU */
    void *stream, *done;         /* GPU: its stream, and the event its boundary copy records */
    uint64_t *dev_weight;
    uint64_t dev_scratch, dev_logits, dev_attn, dev_attn_bytes, dev_tokens, dev_kv, dev_capture, dev_step, dev_q8[2], dev_argmax,
        dev_att_count, dev_rope_freq, dev_sample, dev_rows, dev_split, dev_split_bytes, dev_rows_attn, dev_rows_attn_bytes,
        dev_prompt, dev_prompt_bytes;
    const float *dev_rope_factors;
    int rope_freq_ok;
    void *graph[FORGE__GPU_GRAPHS]; /* GPU, a split: the part's decode step recorded, one graph per band */
} forge__part;

struct forge_context {
    const forge_model *model;
    const forge_config *c;
    forge_allocator allocator;
    forge__resolved r;
    forge_plan plan;
    forge__schedule sched;
    forge__pool *pool;
    uint8_t *arena;         /* scratch | logits | matmul rows | vector | KV cache: the plan's non-weight bytes */
    uint64_t arena_bytes;
    uint8_t *kv;
    uint64_t kv_layer_offset[FORGE_MAX_LAYERS]; /* start of each layer's keys; values follow the keys */
    uint32_t kv_cells[FORGE_MAX_LAYERS];        /* rows per layer: position p lives in row p % kv_cells */
    uint64_t row_k_bytes, row_v_bytes;
    float *scratch, *logits;
    void *work;
    void *q8_work;          /* a step's product input rounded to 8 bits (forge__matmul_q8) */
    int cpu_q8;             /* products of the types that have them on 8-bit activations (desc.cpu_no_q8 turns them off) */
    uint8_t *w_copy;        /* desc.cpu_copy_weights: the allocation the product matrices were copied into */
    const uint8_t **w_data; /* by tensor index: where its copy starts, NULL where it was not copied */
    float *vec;             /* one norm weight or bias in f32 */
    float rope_factors[FORGE__MAX_HEAD_DIM / 2];
    uint32_t pos, n_logit_rows; /* pos: sequence 0's position, where a forge_eval step starts */
    /* the step being evaluated */
    const int32_t *tokens;
    uint32_t n_tokens;
    /* sequences: one host block taken at creation (bookkeeping, not part of the plan) holds
       seq_pos[n_seq], seq_row[n_seq] (the logits row of each sequence's last token in the last step,
       UINT32_MAX when it had none), seq_count[n_seq] (a step's rows per sequence), and for a step of
       forge_eval_batch row_pos[n_batch], row_seq[n_batch], logit_src[n_batch] (the rows whose logits
       are kept, in order) and row_tok[n_batch] (the GPU's tokens of a padded step). rows is 1 while
       such a step runs: positions and sequences come from the row tables instead of pos + t and 0. Sequence s's cache is the one-sequence layout at
       kv + s * kv_seq_bytes (on the GPU, dev_kv + s * kv_seq_bytes). */
    uint32_t *seq_pos, *seq_row, *seq_count, *row_pos, *row_seq, *logit_src;
    int32_t *row_tok;
    uint64_t kv_seq_bytes;
    uint32_t row_pos_max;   /* the largest of a batch step's row positions */
    int rows;
    uint64_t dev_rows;      /* GPU, n_seq > 1: row_pos then row_seq of a batch step, n_batch each, then the split parts */
    uint64_t dev_split, dev_split_bytes; /* GPU, n_seq > 1: the parts of split products (forge_hip_matmul_split) */
    uint64_t dev_prompt, dev_prompt_bytes; /* GPU: the prompt products' f16 activations (forge_hip_prompt_bytes) */
    uint64_t dev_rows_attn, dev_rows_attn_bytes; /* GPU, n_seq > 1: the records of a batch step's split attention */
    /* GPU backend: one device arena (weights | scratch | logits | attention scratch | token ids | KV cache) */
    uint8_t *dev;
    uint64_t *dev_weight; /* device offset of each tensor of the file, UINT64_MAX when not uploaded */
    void *stream;
    uint64_t dev_scratch, dev_logits, dev_attn, dev_attn_bytes, dev_tokens, dev_kv, dev_capture;
    const float *dev_rope_factors;
    uint64_t dev_step;      /* the decode step's slots (FORGE__GPU_STEP_WORDS) */
    uint64_t dev_q8[2];     /* decode: two quantized activation vectors (the input of a product, and the next) */
    uint64_t dev_argmax;    /* forge_context_argmax's partial results */
    uint64_t dev_att_count; /* the decode attention's merge counters (zero between launches) */
    uint64_t dev_rope_freq; /* FORGE__GPU_ROPE_BYTES: the rotary pair frequencies (forge_hip_rope_freqs) */
    int rope_freq_ok;       /* the tables hold this model's frequencies: the fused decode attention may run */
    uint64_t dev_sample;    /* forge_context_sample's candidate selection */
    uint8_t *sample_host;   /* pinned: the selection's flag and keys, copied back */
    uint32_t n_device_samples; /* draws forge_context_sample finished from device candidates */
    int use_q8;             /* decode products on 8-bit activations (desc.gpu_no_q8 turns them off) */
    unsigned hip_switches;  /* FORGE_HIP_NO_PDL, FORGE_HIP_NO_STAGE, FORGE_HIP_NO_WGMMA from the desc, set around each call (forge_hip_enter) */
    int fuse_norm;          /* a residual product prepares the RMS norm after it: 0 never, 1 where faster, 2 wherever it can */
    uint32_t norms_prepared; /* how many norms the last decode step's products prepared */
    uint32_t *step_host;    /* their pinned host mirror */
    /* the recorded decode step, one graph for each band of positions (forge__gpu_record_decode):
       graph[i] serves the positions below graph_span[i]; n_graphs 0: plain launches */
    void *graph[FORGE__GPU_GRAPHS];
    uint32_t graph_span[FORGE__GPU_GRAPHS];
    uint32_t n_graphs;
    uint32_t n_bands;       /* the bands of graph_span (>= 1 once the GPU context is made) */
    /* the step of row_counts[i] rows that each keep their logits (a decode step of that many
       sequences; one of fewer is padded up to it), recorded per band as rows_graph[i][band] for i <
       n_rows_graphs (forge__gpu_record_rows: all n_row_counts or none) */
    void *rows_graph[FORGE__GPU_ROWS_GRAPHS][FORGE__GPU_GRAPHS];
    uint32_t row_counts[FORGE__GPU_ROWS_GRAPHS];
    uint32_t n_row_counts, n_rows_graphs;
    uint32_t att_span;      /* the span a decode step's attention launch is sized for (<= n_ctx) */
    int dev_pending;        /* a decode step queued and not yet waited for */
    int logits_on_host;     /* the host copy of the logits is the last eval's */
    /* captures: each one's region in the staging (the CPU arena's, or the device's, mirrored on the
       host), and the chunk last delivered */
    uint8_t *capture;         /* CPU: in the arena; GPU: a host mirror of the device staging */
    forge_capture captures[FORGE_MAX_CAPTURES]; /* the caller's list, copied */
    uint64_t capture_offset[FORGE_MAX_CAPTURES];
    const void *capture_data[FORGE_MAX_CAPTURES];
    uint32_t capture_pos, capture_tokens;
    int capture_rows;         /* the chunk came from forge_eval_batch: its rows carry sequence and position */
    forge_capture_fn on_capture;
    void *capture_user_data;
    /* the parts of the layers (one unless the desc splits them), the one loaded, and its ops */
    forge__part part[FORGE_MAX_DEVICES];
    uint32_t n_parts, cur_part, op_first, op_end;
    uint8_t capture_part[FORGE_MAX_CAPTURES]; /* the part that writes each capture */
    unsigned peers;         /* GPU: bit i when this context turned on part i's device's access to part i + 1's */
};

/* The GPU fields a part keeps for the context (its regions' offsets in its arena, and what its
   upload found), listed once for forge__part_load and forge__part_save. */
#define FORGE__PART_REGIONS(X)                                                                           \
    X(dev_scratch) X(dev_logits) X(dev_attn) X(dev_attn_bytes) X(dev_tokens) X(dev_kv) X(dev_capture)     \
    X(dev_step) X(dev_q8[0]) X(dev_q8[1]) X(dev_argmax) X(dev_att_count) X(dev_rope_freq) X(dev_sample)  \
    X(dev_rows) X(dev_split) X(dev_split_bytes) X(dev_rows_attn) X(dev_rows_attn_bytes)                  \
    X(dev_prompt) X(dev_prompt_bytes)                                                                    \
    X(dev_rope_factors) X(rope_freq_ok)

/* Makes part p the one the backends work on (on the GPU, its device current for the calling thread). */
static void forge__part_load(forge_context *ctx, uint32_t p) {
    const forge__part *q = &ctx->part[p];
    ctx->cur_part = p;
    ctx->op_first = q->op_first;
    ctx->op_end = q->op_end;
    ctx->kv_seq_bytes = q->kv_seq_bytes;
    if (ctx->r.backend != FORGE_BACKEND_GPU) {
        ctx->scratch = q->scratch;
        ctx->kv = q->kv;
        ctx->capture = q->capture;
        return;
    }
    ctx->dev = q->arena;
    ctx->stream = q->stream;
    ctx->dev_weight = q->dev_weight;
#define FORGE__PART_LOAD(field) ctx->field = q->field;
    FORGE__PART_REGIONS(FORGE__PART_LOAD)
#undef FORGE__PART_LOAD
}

/* The context's GPU fields back into part p, once its regions are laid out. */
static FORGE__MAYBE_UNUSED void forge__part_save(forge_context *ctx, uint32_t p) {
    forge__part *q = &ctx->part[p];
    q->kv_seq_bytes = ctx->kv_seq_bytes;
#define FORGE__PART_SAVE(field) q->field = ctx->field;
    FORGE__PART_REGIONS(FORGE__PART_SAVE)
#undef FORGE__PART_SAVE
}

/* The parts' ops (from the split's layers) and which part writes each capture; the parts' devices. */
static void forge__parts_bind(forge_context *ctx) {
    uint32_t k, p;
    ctx->n_parts = ctx->r.n_parts;
    for (p = 0; p < ctx->n_parts; p++) {
        ctx->part[p].device = ctx->r.part_device[p];
        ctx->part[p].op_first = UINT32_MAX;
        ctx->part[p].op_end = 0;
    }
    for (k = 0; k < ctx->sched.n_ops; k++) {
        const forge__op *op = &ctx->sched.ops[k];
        p = forge__op_part(&ctx->r, op);
        if (ctx->part[p].op_first == UINT32_MAX) ctx->part[p].op_first = k;
        ctx->part[p].op_end = k + 1;
        if (op->kind == FORGE__OP_CAPTURE || op->kind == FORGE__OP_PATTERN) ctx->capture_part[op->aux] = (uint8_t)p;
    }
}

/* 1 when the ops are in layer order, so that each part's are one range (checked before a split). */
static int forge__ops_in_layer_order(const forge__schedule *s) {
    uint32_t k;
    for (k = 1; k < s->n_ops; k++)
        if (s->ops[k].layer < s->ops[k - 1].layer) return 0;
    return 1;
}

/* The values a part boundary carries: those written before op b and read at or after it. */
static int forge__crosses(const forge__value *v, uint32_t b) { return v->first != UINT32_MAX && v->first < b && v->last >= b; }

/* Lays out the capture regions in the staging (the plan's own layout) and points the chunk's data
   at them in the host staging; ctx->capture must be set. */
static void forge__capture_bind(forge_context *ctx) {
    uint32_t i;
    forge__capture_bytes(&ctx->sched, &ctx->r, ctx->capture_offset);
    for (i = 0; i < ctx->sched.n_captures; i++) ctx->capture_data[i] = ctx->capture ? ctx->capture + ctx->capture_offset[i] : NULL;
}

/* The host tables of the sequences (see struct forge_context), taken once at creation. */
static forge_result forge__seq_tables(forge_context *ctx, forge_error *error) {
    const uint64_t words = 3ull * ctx->r.n_seq + 4ull * ctx->r.n_batch;
    uint32_t s;
    ctx->seq_pos = (uint32_t *)forge__alloc(&ctx->allocator, (size_t)words * sizeof(uint32_t));
    if (!ctx->seq_pos)
        return forge__fail(error, FORGE_ERR_HOST_MEMORY, "cannot allocate the tables of %u sequences (%llu bytes)", ctx->r.n_seq,
                           (forge__ull)(words * sizeof(uint32_t)));
    memset(ctx->seq_pos, 0, (size_t)words * sizeof(uint32_t));
    ctx->seq_row = ctx->seq_pos + ctx->r.n_seq;
    ctx->seq_count = ctx->seq_row + ctx->r.n_seq;
    ctx->row_pos = ctx->seq_count + ctx->r.n_seq;
    ctx->row_seq = ctx->row_pos + ctx->r.n_batch;
    ctx->logit_src = ctx->row_seq + ctx->r.n_batch;
    ctx->row_tok = (int32_t *)(void *)(ctx->logit_src + ctx->r.n_batch);
    for (s = 0; s < ctx->r.n_seq; s++) ctx->seq_row[s] = UINT32_MAX;
    return FORGE_OK;
}


/* >>impl-gpu-context */

#ifdef FORGE_HIP
/* n floats of src into dst as the capture type (0 f32, 1 f16, 2 bf16), rounded as forge__capture_store. */
int forge_hip_capture_store(void *dst, const float *src, size_t n, int dtype, void *stream, char *message, size_t message_bytes);
/* attention probabilities of chosen heads against a key window (FORGE_CAPTURE_ATTN_PATTERN), as dtype */
int forge_hip_attn_pattern(const forge_hip_attention_args *args, const uint32_t *dev_pos, void *dst, int dtype, uint32_t head_first,
                           uint32_t n_heads, uint32_t key_first, uint32_t n_keys, void *stream, char *message, size_t message_bytes);
#define FORGE__HIP(call)                                                                                              \
    do {                                                                                                              \
        char hip_message_[256];                                                                                       \
        if ((call) != 0) {                                                                                            \
            return forge__fail(error, FORGE_ERR_IO, "GPU: %s", hip_message_);                                         \
        }                                                                                                             \
    } while (0)
#define FORGE__MSG hip_message_, sizeof hip_message_

static const float *forge__dev_f32(forge_context *ctx, const forge_gguf_tensor *t) {
    if (!t) return NULL;
    return (const float *)(const void *)(ctx->dev + ctx->dev_weight[t - forge_gguf_tensor_at(ctx->model->gguf, 0)]);
}
static const void *forge__dev_w(forge_context *ctx, const forge_gguf_tensor *t) {
    return ctx->dev + ctx->dev_weight[t - forge_gguf_tensor_at(ctx->model->gguf, 0)];
}
static float *forge__dev_val(forge_context *ctx, int32_t v) {
    return (float *)(void *)(ctx->dev + ctx->dev_scratch + ctx->sched.values[v].offset);
}
/* A batch step's row positions (which 0) or row sequences (which 1) on the device. */
static const uint32_t *forge__dev_rows(forge_context *ctx, int which) {
    return (const uint32_t *)(const void *)(ctx->dev + ctx->dev_rows + (which ? forge__align_gpu((uint64_t)ctx->r.n_batch * sizeof(uint32_t)) : 0));
}
#endif

/* Q6_K matrices on the GPU: each row of nb super-blocks keeps its 210 nb bytes and its place, as four
   arrays (forge_kernels.hip >>weights): ql (128 nb; in super-block j, piece p's 16 bytes at 128 j + 16 p,
   the file's bytes 64 (p / 4) + 8 (p % 4) .. + 7 and 32 further on), qh (64 nb), the int8 scales (16 nb)
   and d (2 nb), each in file order. With nb even every array of every row is 4-aligned (16-aligned when
   nb is a multiple of 8); with nb odd the rows of odd index (2 bytes past a 4-byte boundary, the matrix
   being 4-aligned) keep d first and the other three after it, 4-aligned again. A piece of 32 elements
   is then a few aligned loads where the file's 2-aligned block scatters it over a dozen 4-byte words
   and byte permutes. The same bytes in the same amount: the plan does not change. n_rows rows from src
   to dst (not overlapping), the first of them row first_row of its matrix. */
static FORGE__MAYBE_UNUSED void forge__gpu_pack_q6_k(const uint8_t *src, uint8_t *dst, uint64_t first_row, uint64_t n_rows, uint64_t nb) {
    uint64_t r, j;
    uint32_t p;
    for (r = 0; r < n_rows; r++, src += 210 * nb, dst += 210 * nb) {
        const uint64_t o = nb % 2 && (first_row + r) % 2 ? 2 * nb : 0, d = o ? 0 : 208 * nb; /* d first in odd rows of odd nb */
        for (j = 0; j < nb; j++) {
            const uint8_t *b = src + 210 * j;
            for (p = 0; p < 8; p++) {
                memcpy(dst + o + 128 * j + 16 * p, b + 64 * (p / 4) + 8 * (p % 4), 8);
                memcpy(dst + o + 128 * j + 16 * p + 8, b + 64 * (p / 4) + 32 + 8 * (p % 4), 8);
            }
            memcpy(dst + o + 128 * nb + 64 * j, b + 128, 64);
            memcpy(dst + o + 192 * nb + 16 * j, b + 192, 16);
            memcpy(dst + d + 2 * j, b + 208, 2);
        }
    }
}

/* Q4_0 and Q8_0 matrices on the GPU whose rows are a multiple of 256 elements (nb blocks, nb a multiple
   of 8): each row keeps its bytes and its place as two arrays, the blocks' f16 scales (2 nb bytes) and
   then their quants (16 or 32 nb), each in file order. Every row then starts 16-aligned and so do
   its quants: a block's 16 or 32 quant bytes are one or two 16-byte loads where the file's 2-aligned
   18- or 34-byte blocks take five or nine 4-byte loads and byte permutes. quant_bytes: 16 (Q4_0) or
   32 (Q8_0); n_rows rows from src to dst (not overlapping). */
static FORGE__MAYBE_UNUSED void forge__gpu_pack_q0(const uint8_t *src, uint8_t *dst, uint64_t n_rows, uint64_t nb, uint32_t quant_bytes) {
    const uint64_t block = 2 + quant_bytes;
    uint64_t r, j;
    for (r = 0; r < n_rows; r++, src += block * nb, dst += block * nb)
        for (j = 0; j < nb; j++) {
            memcpy(dst + 2 * j, src + block * j, 2);
            memcpy(dst + 2 * nb + quant_bytes * j, src + block * j + 2, quant_bytes);
        }
}

/* Bytes of one row of a matrix the upload packs (whole rows at a time), else 0: every Q6_K matrix
   (forge_kernels.hip's forge__q6_k_layout reads them all in the device layout), and Q4_0 / Q8_0
   matrices of rows a multiple of 256 elements (forge__q0_packed there). */
static FORGE__MAYBE_UNUSED uint64_t forge__gpu_packed_row_bytes(const forge_gguf_tensor *t, forge__use use) {
    if (use != FORGE__MATRIX || t->ne[0] % 256 != 0 || t->ne[0] > UINT32_MAX) return 0;
    switch (t->type) {
    case FORGE_TYPE_Q6_K: return t->ne[0] / 256 * 210;
    case FORGE_TYPE_Q4_0: return t->ne[0] / 32 * 18;
    case FORGE_TYPE_Q8_0: return t->ne[0] / 32 * 34;
    default: return 0;
    }
}

/* n_rows rows of `row` bytes of a matrix of type `type` the upload packs (forge__gpu_packed_row_bytes),
   into the device layout; the first of them row first_row of its matrix. */
static FORGE__MAYBE_UNUSED void forge__gpu_pack(uint32_t type, const uint8_t *src, uint8_t *dst, uint64_t first_row, uint64_t n_rows,
                                                uint64_t row) {
    if (type == FORGE_TYPE_Q6_K) forge__gpu_pack_q6_k(src, dst, first_row, n_rows, row / 210);
    else if (type == FORGE_TYPE_Q4_0) forge__gpu_pack_q0(src, dst, n_rows, row / 18, 16);
    else forge__gpu_pack_q0(src, dst, n_rows, row / 34, 32);
}

#ifdef FORGE_HIP
/* One staging buffer of the weight upload; two of them, pinned, let the host fill one while the
   copy engine empties the other. Smaller models take less (a multiple of 64 KiB). */
#define FORGE__UPLOAD_CHUNK_BYTES (32ull << 20)

typedef struct forge__upload {
    forge_context *ctx;
    const forge_context_desc *desc;
    uint8_t *staging;     /* 2 x chunk bytes of pinned host memory */
    void *emptied[2];     /* events: the copies out of each buffer have run */
    uint64_t chunk, used; /* bytes per buffer; bytes taken in the current one */
    int current;
    uint64_t done, total; /* device bytes placed so far, of the plan's weights_bytes */
} forge__upload;

/* Makes room for `bytes` in the current buffer, else moves to the other one once the copies out of
   it have run; reports progress at each move, so at least once per chunk. */
static forge_result forge__upload_room(forge__upload *u, uint64_t bytes, forge_error *error) {
    char message[256];
    u->used = FORGE__MIN((u->used + 63) / 64 * 64, u->chunk); /* f32 pieces stay aligned */
    if (u->used + bytes <= u->chunk) return FORGE_OK;
    if (forge_hip_event_record(u->emptied[u->current], u->ctx->stream, message, sizeof message) != 0 ||
        forge_hip_event_sync(u->emptied[u->current ^ 1], message, sizeof message) != 0)
        return forge__fail(error, FORGE_ERR_IO, "GPU: uploading the weights failed: %s", message);
    u->current ^= 1;
    u->used = 0;
    if (u->desc->on_progress) u->desc->on_progress(u->desc->progress_user_data, u->done, u->total);
    return FORGE_OK;
}

/* One tensor to device offset `offset`, in pieces that fit the staging: a matrix as stored (Q6_K
   rows, and Q4_0 / Q8_0 rows of 256k elements, packed into the device layout, whole rows at a time),
   a vector dequantized to f32 a whole number of blocks at a time. */
static forge_result forge__upload_tensor(forge__upload *u, const forge_gguf_tensor *t, forge__use use, uint64_t offset,
                                         forge_error *error) {
    const forge_type_traits *tt = forge_type_info(t->type);
    const uint64_t row = forge__gpu_packed_row_bytes(t, use);
    const uint64_t piece = use == FORGE__VECTOR ? (uint64_t)tt->block_elems * sizeof(float) : row ? row : 1; /* smallest piece, bytes */
    uint64_t left = use == FORGE__VECTOR ? t->n_elements * sizeof(float) : t->n_bytes, placed = 0;
    char message[256];
    forge_result r;
    while (left) {
        uint8_t *buffer;
        uint64_t n;
        if ((r = forge__upload_room(u, piece, error))) return r;
        buffer = u->staging + (uint64_t)u->current * u->chunk + u->used;
        n = FORGE__MIN(left, (u->chunk - u->used) / piece * piece);
        if (use == FORGE__VECTOR) {
            if (forge_dequantize(t->type, t->data + placed / piece * tt->block_bytes, (float *)(void *)buffer, n / sizeof(float)))
                return forge__fail(error, FORGE_ERR_UNSUPPORTED, "cannot convert tensor '%.*s' to f32", FORGE__STR_ARGS(t->name));
        } else if (row) {
            forge__gpu_pack(t->type, t->data + placed, buffer, placed / row, n / row, row);
        } else {
            memcpy(buffer, t->data + placed, (size_t)n);
        }
        if (forge_hip_copy_to_device(u->ctx->dev + offset + placed, buffer, (size_t)n, u->ctx->stream, message, sizeof message) != 0)
            return forge__fail(error, FORGE_ERR_IO, "GPU: uploading tensor '%.*s' failed: %s", FORGE__STR_ARGS(t->name), message);
        u->used += n;
        u->done += n;
        placed += n;
        left -= n;
    }
    return FORGE_OK;
}

/* The weights the schedule reads, in file order, each at a 256-byte boundary (the layout the plan
   counted), through the pinned staging; *out_bytes receives the bytes placed. The staging and its
   events are released before returning, on failure too. */
static forge_result forge__gpu_upload(forge_context *ctx, const forge_context_desc *desc, uint64_t *out_bytes, forge_error *error) {
    const forge_gguf *g = ctx->model->gguf;
    uint64_t n_tensors = forge_gguf_tensor_count(g), i, offset = 0;
    forge__upload u;
    forge_result r = FORGE_OK;
    char message[256];
    memset(&u, 0, sizeof u);
    u.ctx = ctx;
    u.desc = desc;
    u.total = ctx->plan.parts[ctx->cur_part].weights_bytes; /* the part's tensors (all of them with one part) */
    u.chunk = FORGE__MIN(FORGE__UPLOAD_CHUNK_BYTES, FORGE__MAX((u.total + 65535) / 65536 * 65536, 65536));
    for (i = 0; i < n_tensors; i++) { /* a packed row goes whole into one buffer */
        const forge_gguf_tensor *t = forge_gguf_tensor_at(g, i);
        const uint64_t row = forge__gpu_packed_row_bytes(t, forge__tensor_use(&ctx->sched, ctx->model, t));
        if (row > u.chunk) u.chunk = (row + 65535) / 65536 * 65536;
    }
    if (forge_hip_host_alloc((size_t)(2 * u.chunk), (void **)&u.staging, message, sizeof message) != 0)
        return forge__fail(error, FORGE_ERR_HOST_MEMORY, "cannot stage the weight upload: %s", message);
    if (forge_hip_event_create(&u.emptied[0], message, sizeof message) != 0 ||
        forge_hip_event_create(&u.emptied[1], message, sizeof message) != 0)
        r = forge__fail(error, FORGE_ERR_IO, "GPU: %s", message);
    for (i = 0; i < n_tensors && r == FORGE_OK; i++) {
        const forge_gguf_tensor *t = forge_gguf_tensor_at(g, i);
        forge__use use = forge__tensor_use(&ctx->sched, ctx->model, t);
        ctx->dev_weight[i] = UINT64_MAX;
        if (use == FORGE__UNUSED || (ctx->n_parts > 1 && !(forge__tensor_parts(&ctx->sched, ctx->model, &ctx->r, t) >> ctx->cur_part & 1u)))
            continue;
        ctx->dev_weight[i] = offset;
        r = forge__upload_tensor(&u, t, use, offset, error);
        offset += forge__align_gpu(use == FORGE__VECTOR ? t->n_elements * sizeof(float) : t->n_bytes);
        u.done = offset; /* the padding counts as placed */
    }
    /* no copy may still read the staging when it is freed */
    if (forge_hip_stream_sync(ctx->stream, message, sizeof message) != 0 && r == FORGE_OK)
        r = forge__fail(error, FORGE_ERR_IO, "GPU: uploading the weights failed: %s", message);
    forge_hip_event_destroy(u.emptied[0]);
    forge_hip_event_destroy(u.emptied[1]);
    forge_hip_host_free(u.staging);
    if (r == FORGE_OK && offset != u.total)
        r = forge__fail(error, FORGE_ERR_CONFIG, "uploaded %llu bytes of weights, the plan counted %llu", (forge__ull)offset,
                        (forge__ull)u.total);
    if (r == FORGE_OK && desc->on_progress) desc->on_progress(desc->progress_user_data, u.total, u.total);
    *out_bytes = offset;
    return r;
}

/* The band a step of several sequences falls in: that of its last row position, but never the first
   of several (a step's rows fill the device with blocks already, where a short decode step needs its
   own launch shape), so that a context of up to 8192 positions records one band of such steps. Its
   attention is sized for the band's span, recorded or not, so that a replay and the plain launches
   are the same. */
static uint32_t forge__gpu_rows_first_band(const forge_context *ctx) { return ctx->n_bands > 1 ? 1u : 0u; }
static uint32_t forge__gpu_rows_band(const forge_context *ctx) {
    uint32_t b = forge__gpu_rows_first_band(ctx);
    while (b + 1 < ctx->n_bands && ctx->graph_span[b] < ctx->row_pos_max + 1) b++;
    return b;
}

/* The attention launch's arguments for op over n tokens; at_dev_pos: a graph's, sized for the
   largest position it will see. */
static void forge__gpu_attention_args(forge_context *ctx, const forge__op *op, uint32_t n, int at_dev_pos, forge_hip_attention_args *args) {
    const forge_config *c = ctx->c;
    uint8_t *layer = ctx->dev + ctx->dev_kv + ctx->kv_layer_offset[op->layer];
    args->q = forge__dev_val(ctx, op->src);
    args->out = forge__dev_val(ctx, op->dst);
    args->cache_k = layer;
    args->cache_v = layer + (uint64_t)ctx->kv_cells[op->layer] * c->layer_n_head_kv[op->layer] * ctx->row_k_bytes;
    args->kv_type = forge__kv_storage_type(ctx->r.kv_type);
    args->n_tokens = n;
    args->n_head = op->n;
    args->n_head_kv = c->layer_n_head_kv[op->layer];
    args->head_dim = c->head_dim;
    args->head_dim_v = c->head_dim_v;
    args->pos0 = at_dev_pos ? ctx->att_span - n : ctx->pos;
    args->scale = c->attn_scale;
    args->window = c->layer_is_swa[op->layer] ? c->n_swa : 0;
    args->n_cells = ctx->kv_cells[op->layer];
    args->softcap = c->attn_softcap;
    args->counters = at_dev_pos && n == 1 ? (uint32_t *)(ctx->dev + ctx->dev_att_count) : NULL;
    args->row_pos = NULL;
    args->row_seq = NULL;
    args->seq_stride = 0;
    if (ctx->rows) { /* a step of several sequences: every row its own position and cache; the launch
                        sized for the band of the last position (forge__gpu_rows_band) */
        args->pos0 = ctx->n_bands ? ctx->graph_span[forge__gpu_rows_band(ctx)] - 1 : ctx->row_pos_max;
        args->row_pos = forge__dev_rows(ctx, 0);
        args->row_seq = forge__dev_rows(ctx, 1);
        args->seq_stride = (size_t)ctx->kv_seq_bytes;
    }
}

/* Decode (one token) on 8-bit activations: products whose weight type has an integer path read
   their input as a quantized vector (forge_hip_q8_quantize) from one of two device slots. The slot
   in use holds the quantized form of value d->value, valid until an op writes that value; a norm
   feeding a product writes it directly, gate and up products share it and write the gated result's
   quantized form into the other slot (one launch for both matrices and the gate), and a product
   whose only reader is the residual add that follows adds into the residual itself; when the RMS
   norm of that residual is read only by products, the same launch prepares the norm's input for
   them (forge_hip_matvec_norm_q8) and the norm's own launch and output go. Returns how many ops were
   launched here (0: none, the op takes the ordinary path). */
typedef struct forge__q8_state {
    int32_t value; /* the value whose quantized form is in slot `slot`, or -1 */
    int slot;
    int norm;      /* the slot holds the input of RMS norm `value` (forge_hip_matvec_norm_q8's form) */
    uint32_t prepared; /* norms prepared so far by the products before them */
    int angles[2];     /* the step's rotation angles are written (global layers, sliding-window layers) */
} forge__q8_state;

static int forge__q8_matmul_ok(forge_context *ctx, const forge__op *op) {
    return op->kind == FORGE__OP_MATMUL && forge_hip_q8_type(op->w->type) && op->w->ne[0] % 32 == 0 &&
           ctx->sched.values[op->src].width == (uint32_t)op->w->ne[0];
}

/* a product or the output head on 8-bit activations */
static int forge__q8_product_ok(forge_context *ctx, const forge__op *op) {
    return forge__q8_matmul_ok(ctx, op) || (op->kind == FORGE__OP_LOGITS && forge_hip_q8_type(op->w->type) && op->w->ne[0] % 32 == 0 &&
                                             ctx->sched.values[op->src].width == (uint32_t)op->w->ne[0]);
}

/* The ops right after op kn up to the last reader of its output are all products on 8-bit
   activations reading it as their input: they take it from the quantized slot, and its float
   form is never read. */
static int forge__q8_read_only_by_products(forge_context *ctx, uint32_t kn) {
    const forge__schedule *s = &ctx->sched;
    const int32_t v = s->ops[kn].dst;
    uint32_t j;
    if (v < 0 || s->values[v].last <= kn || s->values[v].last >= ctx->op_end) return 0;
    for (j = kn + 1; j <= s->values[v].last; j++) {
        const forge__op *o = &s->ops[j];
        if (!(o->src == v && o->src2 != v && o->dst != v && forge__q8_product_ok(ctx, o))) return 0;
    }
    return 1;
}

static forge_result forge__gpu_decode_fused(forge_context *ctx, uint32_t k, const uint32_t *dev_pos, forge__q8_state *d,
                                            uint32_t *consumed, forge_error *error) {
    const forge__schedule *s = &ctx->sched;
    /* what follows within the loaded part: a fusion never reaches across a device boundary */
    const forge__op *op = &s->ops[k], *next = k + 1 < ctx->op_end ? &s->ops[k + 1] : NULL;
    const forge__op *third = k + 2 < ctx->op_end ? &s->ops[k + 2] : NULL;
    const forge__op *fourth = k + 3 < ctx->op_end ? &s->ops[k + 3] : NULL, *fifth = k + 4 < ctx->op_end ? &s->ops[k + 4] : NULL;
    uint8_t *slot;
    float eps; /* the products' norm_eps: the slot's RMS norm, or none */
    *consumed = 0;
    /* in a recorded step: rope of the queries and keys, the keys and values into the cache, attention
       with its output quantized for the product that reads it, in one launch; the queries and keys
       stay unrotated in their buffers, so nothing after the attention may read them */
    if (op->kind == FORGE__OP_ROPE && dev_pos && ctx->rope_freq_ok && fifth && next->kind == FORGE__OP_ROPE && third->kind == FORGE__OP_KV_STORE &&
        fourth->kind == FORGE__OP_ATTENTION && next->layer == op->layer && third->layer == op->layer && fourth->layer == op->layer &&
        third->src == next->dst && op->dst != next->dst && fourth->src == op->dst && s->values[op->dst].last == k + 3 &&
        s->values[next->dst].last == k + 2 && forge__q8_product_ok(ctx, fifth) && fifth->src == fourth->dst &&
        ctx->c->head_dim_v % 32 == 0) {
        const forge_config *c = ctx->c;
        const uint32_t il = op->layer;
        const int swa = c->layer_is_swa[il] ? 1 : 0; /* which rotary table, and which of the step's angles */
        forge_hip_attention_args args;
        forge_hip_rope_args rope;
        forge__gpu_attention_args(ctx, fourth, 1, 1, &args);
        rope.n_rot = c->n_rot, rope.mode = (int)c->rope_type, rope.freq_factors = ctx->dev_rope_factors;
        rope.freq_base = swa ? c->rope_freq_base_swa : c->rope_freq_base;
        rope.freq_scale = swa ? c->rope_freq_scale_swa : c->rope_freq_scale;
        rope.freq = (const double *)(const void *)(ctx->dev + ctx->dev_rope_freq) + (swa ? FORGE__GPU_ROPE_PAIRS : 0);
        /* the rotation's angles for the step's position, in the unused half of the frequency table:
           computed by the first such launch of the step, read by the others */
        rope.angles = c->n_rot / 2 <= FORGE__GPU_ROPE_PAIRS / 2 ? (float *)(void *)((double *)(void *)rope.freq + FORGE__GPU_ROPE_PAIRS / 2) : NULL;
        rope.angles_ready = d->angles[swa];
        d->angles[swa] = rope.angles != NULL;
        d->slot ^= 1;
        FORGE__HIP(forge_hip_rope_attention_q8(&args, &rope, forge__dev_val(ctx, next->dst), forge__dev_val(ctx, third->src2), dev_pos,
                                               ctx->dev + ctx->dev_q8[d->slot], ctx->dev + ctx->dev_attn, (size_t)ctx->dev_attn_bytes,
                                               ctx->stream, FORGE__MSG));
        d->value = fourth->dst, d->norm = 0;
        *consumed = 4;
        return FORGE_OK;
    }
    /* rope of the queries and keys, then the keys and values into the cache: one launch */
    if (op->kind == FORGE__OP_ROPE && next && third && next->kind == FORGE__OP_ROPE && third->kind == FORGE__OP_KV_STORE &&
        next->layer == op->layer && third->layer == op->layer && third->src == next->dst && op->dst != next->dst) {
        const forge_config *c = ctx->c;
        const uint32_t il = op->layer;
        uint8_t *layer = ctx->dev + ctx->dev_kv + ctx->kv_layer_offset[il];
        uint8_t *values = layer + (uint64_t)ctx->kv_cells[il] * c->layer_n_head_kv[il] * ctx->row_k_bytes;
        FORGE__HIP(forge_hip_rope_store(forge__kv_storage_type(ctx->r.kv_type), forge__dev_val(ctx, op->dst), forge__dev_val(ctx, next->dst),
                                        forge__dev_val(ctx, third->src2), op->n, next->n, c->head_dim, c->head_dim_v, c->n_rot,
                                        (int)c->rope_type, dev_pos ? 0 : ctx->pos, dev_pos,
                                        c->layer_is_swa[il] ? c->rope_freq_base_swa : c->rope_freq_base,
                                        c->layer_is_swa[il] ? c->rope_freq_scale_swa : c->rope_freq_scale, ctx->dev_rope_factors, layer,
                                        values, ctx->kv_cells[il], ctx->stream, FORGE__MSG));
        if (d->value == op->dst || d->value == next->dst) d->value = -1;
        *consumed = 3;
        return FORGE_OK;
    }
    /* attention (in a recorded step) writing its output quantized for the product that reads it */
    if (op->kind == FORGE__OP_ATTENTION && dev_pos && next && forge__q8_product_ok(ctx, next) && next->src == op->dst &&
        ctx->c->head_dim_v % 32 == 0) {
        forge_hip_attention_args args;
        forge__gpu_attention_args(ctx, op, 1, 1, &args);
        d->slot ^= 1;
        FORGE__HIP(forge_hip_attention_at_q8(&args, dev_pos, ctx->dev + ctx->dev_q8[d->slot], ctx->dev + ctx->dev_attn,
                                             (size_t)ctx->dev_attn_bytes, ctx->stream, FORGE__MSG));
        d->value = op->dst, d->norm = 0;
        *consumed = 1;
        return FORGE_OK;
    }
    if (op->kind == FORGE__OP_RMSNORM && next && forge__q8_product_ok(ctx, next) && next->src == op->dst && op->n % 32 == 0) {
        d->slot ^= 1;
        FORGE__HIP(forge_hip_rmsnorm_q8(forge__dev_val(ctx, op->src), forge__dev_f32(ctx, op->w), forge__dev_val(ctx, op->dst), op->n,
                                        ctx->c->rms_eps, ctx->dev + ctx->dev_q8[d->slot], ctx->stream, FORGE__MSG));
        d->value = op->dst, d->norm = 0;
        *consumed = 1;
        return FORGE_OK;
    }
    if (!forge__q8_product_ok(ctx, op)) return FORGE_OK;
    if (d->value != op->src) {
        d->slot ^= 1;
        FORGE__HIP(forge_hip_q8_quantize(forge__dev_val(ctx, op->src), (uint32_t)op->w->ne[0], ctx->dev + ctx->dev_q8[d->slot], ctx->stream,
                                         FORGE__MSG));
        d->value = op->src, d->norm = 0;
    }
    slot = ctx->dev + ctx->dev_q8[d->slot];
    eps = d->norm ? ctx->c->rms_eps : -1.0f;
    if (op->kind == FORGE__OP_LOGITS) {
        float *dev_logits = (float *)(void *)(ctx->dev + ctx->dev_logits);
        FORGE__HIP(forge_hip_matvec_q8(op->w->type, forge__dev_w(ctx, op->w), op->n, (uint32_t)op->w->ne[0], slot, dev_logits, NULL, 0,
                                       eps, ctx->stream, FORGE__MSG));
        if (ctx->c->final_softcap > 0.0f)
            FORGE__HIP(forge_hip_softcap(dev_logits, op->n, ctx->c->final_softcap, ctx->stream, FORGE__MSG));
        ctx->n_logit_rows = 1;
        *consumed = 1;
        return FORGE_OK;
    }
    /* the query, key and value products of one input: one launch */
    if (next && third && forge__q8_matmul_ok(ctx, next) && forge__q8_matmul_ok(ctx, third) && next->src == op->src &&
        third->src == op->src && next->w->type == op->w->type && next->w->ne[0] == op->w->ne[0] && third->w->ne[0] == op->w->ne[0] &&
        forge_hip_matvec3_q8_ok(op->w->type, third->w->type) && op->dst != op->src && next->dst != op->src && third->dst != op->src) {
        const void *w[3];
        uint32_t rows[3];
        float *y[3];
        const float *bias[3];
        int i;
        for (i = 0; i < 3; i++) {
            const forge__op *o = &s->ops[k + (uint32_t)i];
            w[i] = forge__dev_w(ctx, o->w), rows[i] = o->n, y[i] = forge__dev_val(ctx, o->dst), bias[i] = forge__dev_f32(ctx, o->bias);
        }
        FORGE__HIP(forge_hip_matvec3_q8(op->w->type, third->w->type, w, rows, (uint32_t)op->w->ne[0], slot, y, bias, eps, ctx->stream,
                                        FORGE__MSG));
        *consumed = 3;
        return FORGE_OK;
    }
    /* gate, up, then gate = act(gate) * up, the up product read by the gate alone */
    if (next && third && forge__q8_matmul_ok(ctx, next) && next->src == op->src && next->w->type == op->w->type &&
        next->w->ne[0] == op->w->ne[0] && next->n == op->n && !op->bias && !next->bias && op->n % 32 == 0 &&
        (third->kind == FORGE__OP_SWIGLU || third->kind == FORGE__OP_GEGLU) && third->dst == op->dst && third->src == next->dst &&
        third->n == op->n && s->values[next->dst].last == k + 2 && op->n <= s->max_cols) {
        FORGE__HIP(forge_hip_glu_q8(op->w->type, forge__dev_w(ctx, op->w), forge__dev_w(ctx, next->w), op->n, (uint32_t)op->w->ne[0], slot,
                                    forge__dev_val(ctx, op->dst), ctx->dev + ctx->dev_q8[d->slot ^ 1],
                                    third->kind == FORGE__OP_GEGLU, eps, ctx->stream, FORGE__MSG));
        d->slot ^= 1;
        d->value = op->dst, d->norm = 0;
        *consumed = 3;
        return FORGE_OK;
    }
    /* a product read only by the residual add after it: added into the residual directly */
    if (next && next->kind == FORGE__OP_ADD && next->src == op->dst && next->dst != op->src && s->values[op->dst].last == k + 1 &&
        next->n == op->n) {
        /* and the RMS norm of the residual after it, read only by products: their input prepared here */
        if (!d->norm && third && third->kind == FORGE__OP_RMSNORM && third->src == next->dst && third->n == op->n && op->n % 32 == 0 &&
            third->w && ctx->fuse_norm &&
            (ctx->fuse_norm == 2 || forge_hip_matvec_norm_q8_ok(op->w->type, op->n, (uint32_t)op->w->ne[0])) &&
            forge__q8_read_only_by_products(ctx, k + 2)) {
            FORGE__HIP(forge_hip_matvec_norm_q8(op->w->type, forge__dev_w(ctx, op->w), op->n, (uint32_t)op->w->ne[0], slot,
                                                forge__dev_val(ctx, next->dst), forge__dev_f32(ctx, op->bias), forge__dev_f32(ctx, third->w),
                                                ctx->dev + ctx->dev_q8[d->slot ^ 1], ctx->stream, FORGE__MSG));
            d->slot ^= 1;
            d->value = third->dst, d->norm = 1;
            d->prepared++;
            *consumed = 3;
            return FORGE_OK;
        }
        FORGE__HIP(forge_hip_matvec_q8(op->w->type, forge__dev_w(ctx, op->w), op->n, (uint32_t)op->w->ne[0], slot,
                                       forge__dev_val(ctx, next->dst), forge__dev_f32(ctx, op->bias), 1, eps, ctx->stream, FORGE__MSG));
        if (d->value == next->dst) d->value = -1;
        *consumed = 2;
        return FORGE_OK;
    }
    FORGE__HIP(forge_hip_matvec_q8(op->w->type, forge__dev_w(ctx, op->w), op->n, (uint32_t)op->w->ne[0], slot, forge__dev_val(ctx, op->dst),
                                   forge__dev_f32(ctx, op->bias), 0, eps, ctx->stream, FORGE__MSG));
    if (d->value == op->dst) d->value = -1;
    *consumed = 1;
    return FORGE_OK;
}

/* The products from op k on that read op k's input, at most three in a row (q, k, v; gate, up), as
   forge_hip_matmul_rows_q8_group takes them; how many. */
static uint32_t forge__gpu_rows_group(forge_context *ctx, uint32_t k, forge_hip_product group[3]) {
    const forge__op *op = &ctx->sched.ops[k];
    uint32_t g = 0;
    while (g < 3 && k + g < ctx->op_end) {
        const forge__op *o = &ctx->sched.ops[k + g];
        if (!forge__op_same_input(op, o)) break;
        group[g].type = o->w->type, group[g].w = forge__dev_w(ctx, o->w), group[g].n_rows = o->n;
        group[g].y = forge__dev_val(ctx, o->dst), group[g].bias = forge__dev_f32(ctx, o->bias);
        g++;
    }
    return g;
}

/* The f16 form (FORGE_HIP_FORM_F16 or FORGE_HIP_FORM_F16_ROWS) that the products of value v at op k
   would make of v first, after a norm of n rows into v (the norm then writes it: forge_hip_add_rmsnorm);
   0 none. */
static int forge__gpu_rows_norm_form(forge_context *ctx, uint32_t k, int32_t v, uint32_t n) {
    forge_hip_product group[3];
    uint32_t g;
    if (k >= ctx->op_end || ctx->sched.ops[k].kind != FORGE__OP_MATMUL || ctx->sched.ops[k].src != v) return 0;
    g = forge__gpu_rows_group(ctx, k, group);
    return forge_hip_matmul_rows_q8_group_form(g, group, (uint32_t)ctx->sched.ops[k].w->ne[0], n, (size_t)ctx->dev_split_bytes);
}

/* Whether n tokens of one context are a prompt that the staged products run on, through the prompt
   workspace (past 64 tokens, a workspace planned) */
static int forge__gpu_prompt_ws(const forge_context *ctx, uint32_t n) {
    return !ctx->rows && n > FORGE__GPU_SPLIT_TOKENS && ctx->dev_prompt_bytes;
}

/* A prompt of n tokens (one context, past 64 tokens): whether the norm writing value v (from src) should
   also write its f16 rows into the prompt workspace, op k being the product that reads them next (the
   staged products take them there in one piece, forge_hip_prompt_form_ok). */
static int forge__gpu_prompt_form(forge_context *ctx, uint32_t k, int32_t v, int32_t src, uint32_t n) {
    const forge__op *op;
    if (!forge__gpu_prompt_ws(ctx, n) || v == src || k >= ctx->op_end) return 0;
    op = &ctx->sched.ops[k];
    return op->kind == FORGE__OP_MATMUL && op->src == v && forge_hip_prompt_form_ok(n, (uint32_t)op->w->ne[0], (size_t)ctx->dev_prompt_bytes);
}

/* A prompt of n tokens (one context, past 64 tokens): whether the SwiGLU at k writes h as the f16 rows
   the down projection right after it reads (forge_hip_swiglu_f16), that product running on the staged
   kernel in one piece (forge_hip_prompt_staged): the rows are not made again from h. */
static int forge__gpu_prompt_swiglu(forge_context *ctx, uint32_t k, uint32_t n) {
    const forge__op *a = &ctx->sched.ops[k], *d = a + 1;
    if (!forge__gpu_prompt_ws(ctx, n) || k + 1 >= ctx->op_end || ((size_t)n * a->n) % 4 != 0) return 0;
    if (d->kind != FORGE__OP_MATMUL || d->src != a->dst || d->w->ne[0] != a->n) return 0;
    if ((((uintptr_t)forge__dev_val(ctx, a->dst) | (uintptr_t)forge__dev_val(ctx, a->src) | (uintptr_t)(ctx->dev + ctx->dev_prompt)) & 15) != 0)
        return 0;
    return forge_hip_prompt_staged(d->w->type, d->n, a->n, n, (size_t)ctx->dev_prompt_bytes);
}

/* Launches the schedule's ops for n tokens whose ids are at dev_tokens (device memory). dev_pos
   NULL: the positions start at ctx->pos, passed as arguments; else they start at the uint32 at
   dev_pos, read when the kernels run: the form a graph records once and replays at any position. */
static forge_result forge__gpu_launch_ops(forge_context *ctx, uint32_t n, const int32_t *dev_tokens, const uint32_t *dev_pos,
                                          forge_error *error) {
    const forge_config *c = ctx->c;
    uint32_t k, consumed;
    forge__q8_state q8;
    forge_result r;
    int32_t rows_src = -1; /* a step of several rows: the value whose form the split workspace holds, */
    int rows_form = 0;     /* and which form (forge_hip_matmul_rows_q8_form) */
    int form;
    q8.value = -1;
    q8.slot = 0;
    q8.norm = 0;
    q8.prepared = 0;
    q8.angles[0] = q8.angles[1] = 0;
    for (k = ctx->op_first; k < ctx->op_end; k++) { /* the loaded part's ops (all of them with one part) */
        const forge__op *op = &ctx->sched.ops[k];
        if (op->kind != FORGE__OP_MATMUL) rows_src = -1, rows_form = 0; /* any other op may write the input or the workspace */
        if (n == 1 && ctx->use_q8 && !ctx->rows) {
            if ((r = forge__gpu_decode_fused(ctx, k, dev_pos, &q8, &consumed, error))) return r;
            if (consumed) {
                k += consumed - 1;
                continue;
            }
            if (op->dst == q8.value) q8.value = -1; /* written: the quantized form is stale */
        }
        switch (op->kind) {
        case FORGE__OP_EMBED:
            FORGE__HIP(forge_hip_embed(op->w->type, forge__dev_w(ctx, op->w), (uint32_t)op->w->ne[1], op->n, dev_tokens, n,
                                       c->embd_scale, forge__dev_val(ctx, op->dst), ctx->stream, FORGE__MSG));
            break;
        case FORGE__OP_RMSNORM:
            if (ctx->rows && ctx->use_q8 && op->dst != op->src && (form = forge__gpu_rows_norm_form(ctx, k + 1, op->dst, n))) {
                /* a step of several sequences: the norm also writes the f16 form the products after it read */
                FORGE__HIP(forge_hip_add_rmsnorm(forge__dev_val(ctx, op->src), NULL, forge__dev_f32(ctx, op->w), forge__dev_val(ctx, op->dst), n,
                                                 op->n, c->rms_eps, ctx->dev + ctx->dev_split, form, ctx->stream, FORGE__MSG));
                rows_src = op->dst, rows_form = form;
                break;
            }
            if (forge__gpu_prompt_form(ctx, k + 1, op->dst, op->src, n)) {
                /* a prompt: the norm also writes the f16 rows the staged products after it read */
                FORGE__HIP(forge_hip_add_rmsnorm(forge__dev_val(ctx, op->src), NULL, forge__dev_f32(ctx, op->w), forge__dev_val(ctx, op->dst), n,
                                                 op->n, c->rms_eps, ctx->dev + ctx->dev_prompt, FORGE_HIP_FORM_F16_PROMPT, ctx->stream,
                                                 FORGE__MSG));
                rows_src = op->dst, rows_form = FORGE_HIP_FORM_F16_PROMPT;
                break;
            }
            FORGE__HIP(forge_hip_rmsnorm(forge__dev_val(ctx, op->src), forge__dev_f32(ctx, op->w), forge__dev_val(ctx, op->dst),
                                         n, op->n, c->rms_eps, ctx->stream, FORGE__MSG));
            break;
        case FORGE__OP_MATMUL:
            if (ctx->rows && ctx->use_q8) { /* a few rows of several sequences: each weight read once for all of them;
                                               the products after it that read the same input take the form it left,
                                               and up to three in a row of one input (q, k, v; gate, up) go together */
                forge_hip_product group[3];
                const uint32_t g = forge__gpu_rows_group(ctx, k, group);
                if (rows_src != op->src) rows_form = 0;
                FORGE__HIP(forge_hip_matmul_rows_q8_group(g, group, (uint32_t)op->w->ne[0], forge__dev_val(ctx, op->src), n,
                                                          ctx->dev + ctx->dev_split, (size_t)ctx->dev_split_bytes, &rows_form, ctx->stream,
                                                          FORGE__MSG));
                rows_src = rows_form ? op->src : -1;
                k += g - 1;
            } else if (ctx->rows) /* the columns split where the device would idle */
                FORGE__HIP(forge_hip_matmul_split(op->w->type, forge__dev_w(ctx, op->w), op->n, (uint32_t)op->w->ne[0],
                                                  forge__dev_val(ctx, op->src), forge__dev_val(ctx, op->dst), n,
                                                  forge__dev_f32(ctx, op->bias), ctx->dev + ctx->dev_split, (size_t)ctx->dev_split_bytes,
                                                  ctx->stream, FORGE__MSG));
            else { /* a prompt: past 64 tokens with the prompt workspace (its activations staged as f16 for the
                      types the staged kernel takes; up to three products of one input in a row, q, k and v or gate
                      and up, one launch where their type is one, on the f16 rows the norm before them left), fewer
                      without it, as before */
                forge_hip_product group[3];
                const uint32_t g = forge__gpu_rows_group(ctx, k, group);
                uint8_t *ws = forge__gpu_prompt_ws(ctx, n) ? ctx->dev + ctx->dev_prompt : NULL;
                if (rows_src != op->src) rows_form = 0;
                FORGE__HIP(forge_hip_matmul_prompt_group(g, group, (uint32_t)op->w->ne[0], forge__dev_val(ctx, op->src), n, ws,
                                                         ws ? (size_t)ctx->dev_prompt_bytes : 0, &rows_form, ctx->stream, FORGE__MSG));
                rows_src = rows_form ? op->src : -1;
                k += g - 1;
            }
            break;
        case FORGE__OP_HEADNORM:
            FORGE__HIP(forge_hip_headnorm(forge__dev_val(ctx, op->dst), forge__dev_f32(ctx, op->w), n, op->n, c->head_dim,
                                          c->rms_eps, ctx->stream, FORGE__MSG));
            break;
        case FORGE__OP_ROPE: {
            const float base = c->layer_is_swa[op->layer] ? c->rope_freq_base_swa : c->rope_freq_base;
            const float scale = c->layer_is_swa[op->layer] ? c->rope_freq_scale_swa : c->rope_freq_scale;
            const forge__op *next = k + 2 < ctx->op_end ? op + 1 : NULL, *third = next ? op + 2 : NULL;
            if (ctx->rows && next && next->kind == FORGE__OP_ROPE && third->kind == FORGE__OP_KV_STORE && next->layer == op->layer &&
                third->layer == op->layer && third->src == next->dst && op->dst != next->dst) {
                /* a step of several sequences: rope of the queries and keys, then the keys and values into
                   each row's sequence's cache, in one launch */
                uint8_t *layer = ctx->dev + ctx->dev_kv + ctx->kv_layer_offset[op->layer];
                uint8_t *values = layer + (uint64_t)ctx->kv_cells[op->layer] * c->layer_n_head_kv[op->layer] * ctx->row_k_bytes;
                FORGE__HIP(forge_hip_rope_store_rows(forge__kv_storage_type(ctx->r.kv_type), forge__dev_val(ctx, op->dst),
                                                     forge__dev_val(ctx, next->dst), forge__dev_val(ctx, third->src2), n, op->n, next->n,
                                                     c->head_dim, c->head_dim_v, c->n_rot, (int)c->rope_type, forge__dev_rows(ctx, 0),
                                                     forge__dev_rows(ctx, 1), (size_t)ctx->kv_seq_bytes, base, scale, ctx->dev_rope_factors,
                                                     layer, values, ctx->kv_cells[op->layer], ctx->stream, FORGE__MSG));
                k += 2;
            } else if (ctx->rows)
                FORGE__HIP(forge_hip_rope_rows(forge__dev_val(ctx, op->dst), n, op->n, c->head_dim, c->n_rot, (int)c->rope_type,
                                               forge__dev_rows(ctx, 0), base, scale, ctx->dev_rope_factors, ctx->stream, FORGE__MSG));
            else if (dev_pos)
                FORGE__HIP(forge_hip_rope_at(forge__dev_val(ctx, op->dst), n, op->n, c->head_dim, c->n_rot, (int)c->rope_type, dev_pos,
                                             base, scale, ctx->dev_rope_factors, ctx->stream, FORGE__MSG));
            else
                FORGE__HIP(forge_hip_rope(forge__dev_val(ctx, op->dst), n, op->n, c->head_dim, c->n_rot, (int)c->rope_type, ctx->pos,
                                          base, scale, ctx->dev_rope_factors, ctx->stream, FORGE__MSG));
            break;
        }
        case FORGE__OP_KV_STORE: {
            uint8_t *layer = ctx->dev + ctx->dev_kv + ctx->kv_layer_offset[op->layer];
            uint8_t *values = layer + (uint64_t)ctx->kv_cells[op->layer] * c->layer_n_head_kv[op->layer] * ctx->row_k_bytes;
            if (ctx->rows)
                FORGE__HIP(forge_hip_kv_store_rows(forge__kv_storage_type(ctx->r.kv_type), forge__dev_val(ctx, op->src),
                                                   forge__dev_val(ctx, op->src2), layer, values, n, op->n, c->head_dim, c->head_dim_v,
                                                   forge__dev_rows(ctx, 0), forge__dev_rows(ctx, 1), (size_t)ctx->kv_seq_bytes,
                                                   ctx->kv_cells[op->layer], ctx->stream, FORGE__MSG));
            else if (dev_pos)
                FORGE__HIP(forge_hip_kv_store_at(forge__kv_storage_type(ctx->r.kv_type), forge__dev_val(ctx, op->src),
                                                 forge__dev_val(ctx, op->src2), layer, values, n, op->n, c->head_dim, c->head_dim_v,
                                                 dev_pos, ctx->kv_cells[op->layer], ctx->stream, FORGE__MSG));
            else
                FORGE__HIP(forge_hip_kv_store(forge__kv_storage_type(ctx->r.kv_type), forge__dev_val(ctx, op->src),
                                              forge__dev_val(ctx, op->src2), layer, values, n, op->n, c->head_dim, c->head_dim_v,
                                              ctx->pos, ctx->kv_cells[op->layer], ctx->stream, FORGE__MSG));
            break;
        }
        case FORGE__OP_ATTENTION: {
            forge_hip_attention_args args;
            forge__gpu_attention_args(ctx, op, n, dev_pos != NULL, &args);
            if (dev_pos)
                FORGE__HIP(forge_hip_attention_at(&args, dev_pos, ctx->dev + ctx->dev_attn, (size_t)ctx->dev_attn_bytes, ctx->stream,
                                                  FORGE__MSG));
            else if (ctx->rows)
                FORGE__HIP(forge_hip_attention(&args, ctx->dev + ctx->dev_rows_attn, (size_t)ctx->dev_rows_attn_bytes, ctx->stream, FORGE__MSG));
            else
                FORGE__HIP(forge_hip_attention(&args, ctx->dev + ctx->dev_attn, (size_t)ctx->dev_attn_bytes, ctx->stream, FORGE__MSG));
            break;
        }
        case FORGE__OP_ADD:
            if ((ctx->rows || n > FORGE__GPU_SPLIT_TOKENS) && k + 1 < ctx->op_end && op[1].kind == FORGE__OP_RMSNORM && op[1].src == op->dst &&
                op[1].n == op->n) {
                /* a step of several sequences, or a prompt: the residual add and the norm that reads it, one
                   launch, with the f16 form of the norm's rows where the products after it take that */
                uint8_t *at = ctx->dev + ctx->dev_split;
                form = 0;
                if (ctx->rows && ctx->use_q8 && op[1].dst != op->dst) form = forge__gpu_rows_norm_form(ctx, k + 2, op[1].dst, n);
                else if (forge__gpu_prompt_form(ctx, k + 2, op[1].dst, op->dst, n))
                    form = FORGE_HIP_FORM_F16_PROMPT, at = ctx->dev + ctx->dev_prompt;
                FORGE__HIP(forge_hip_add_rmsnorm(forge__dev_val(ctx, op->dst), forge__dev_val(ctx, op->src), forge__dev_f32(ctx, op[1].w),
                                                 forge__dev_val(ctx, op[1].dst), n, op->n, c->rms_eps, form ? at : NULL, form, ctx->stream,
                                                 FORGE__MSG));
                if (form) rows_src = op[1].dst, rows_form = form;
                k++;
                break;
            }
            FORGE__HIP(forge_hip_add(forge__dev_val(ctx, op->dst), forge__dev_val(ctx, op->src), (size_t)n * op->n, ctx->stream,
                                     FORGE__MSG));
            break;
        case FORGE__OP_SWIGLU:
            if (forge__gpu_prompt_swiglu(ctx, k, n)) { /* a prompt: h as the f16 rows its down projection reads, and as
                                                          floats only where something after the down reads them */
                FORGE__HIP(forge_hip_swiglu_f16(forge__dev_val(ctx, op->dst), forge__dev_val(ctx, op->src), (size_t)n * op->n,
                                                ctx->dev + ctx->dev_prompt, ctx->sched.values[op->dst].last != k + 1, ctx->stream, FORGE__MSG));
                rows_src = op->dst, rows_form = FORGE_HIP_FORM_F16_PROMPT;
                break;
            }
            FORGE__HIP(forge_hip_swiglu(forge__dev_val(ctx, op->dst), forge__dev_val(ctx, op->src), (size_t)n * op->n,
                                        ctx->stream, FORGE__MSG));
            break;
        case FORGE__OP_LOGITS: { /* they stay on the device: forge_context_logits copies them on demand */
            uint32_t rows = ctx->r.all_logits ? FORGE__MIN(ctx->r.n_logits, n) : 1;
            float *dev_logits = (float *)(void *)(ctx->dev + ctx->dev_logits), *x = forge__dev_val(ctx, op->src) + (uint64_t)(n - rows) * c->n_embd;
            if (ctx->rows) { /* the kept rows moved to the front, in order, one copy each that moves (none in a decode step) */
                uint32_t i;
                x = forge__dev_val(ctx, op->src);
                rows = ctx->n_logit_rows;
                for (i = 0; i < rows; i++)
                    if (ctx->logit_src[i] != i)
                        FORGE__HIP(forge_hip_copy_device(x + (uint64_t)i * c->n_embd, x + (uint64_t)ctx->logit_src[i] * c->n_embd,
                                                         c->n_embd * sizeof(float), ctx->stream, FORGE__MSG));
            }
            if (ctx->rows && ctx->use_q8) /* a few rows: the head read once for all of them, on 8-bit activations */
                FORGE__HIP(forge_hip_matmul_rows_q8(op->w->type, forge__dev_w(ctx, op->w), op->n, (uint32_t)op->w->ne[0], x, dev_logits, rows,
                                                    NULL, ctx->dev + ctx->dev_split, (size_t)ctx->dev_split_bytes, ctx->stream, FORGE__MSG));
            else
                FORGE__HIP(forge_hip_matmul(op->w->type, forge__dev_w(ctx, op->w), op->n, (uint32_t)op->w->ne[0], x, dev_logits, rows, NULL,
                                            ctx->stream, FORGE__MSG));
            if (c->final_softcap > 0.0f)
                FORGE__HIP(forge_hip_softcap(dev_logits, (size_t)rows * op->n, c->final_softcap, ctx->stream, FORGE__MSG));
            ctx->n_logit_rows = rows;
            break;
        }
        case FORGE__OP_GEGLU:
            FORGE__HIP(forge_hip_geglu(forge__dev_val(ctx, op->dst), forge__dev_val(ctx, op->src), (size_t)n * op->n,
                                       ctx->stream, FORGE__MSG));
            break;
        case FORGE__OP_GLU_SPLIT:
            FORGE__HIP(forge_hip_glu_split(forge__dev_val(ctx, op->dst), forge__dev_val(ctx, op->src), n, op->n, (int)op->aux,
                                           ctx->stream, FORGE__MSG));
            break;
        case FORGE__OP_COPY_COLS:
            FORGE__HIP(forge_hip_copy_cols(forge__dev_val(ctx, op->dst), forge__dev_val(ctx, op->src), n,
                                           ctx->sched.values[op->src].width, op->aux, op->n, ctx->stream, FORGE__MSG));
            break;
        case FORGE__OP_ROUTE:
            FORGE__HIP(forge_hip_moe_route(forge__dev_val(ctx, op->src), n, op->n, ctx->sched.values[op->dst].width / 2,
                                           (int)op->aux, forge__dev_val(ctx, op->dst), ctx->stream, FORGE__MSG));
            break;
        case FORGE__OP_MATMUL_ID:
            FORGE__HIP(forge_hip_matmul_id(op->w->type, forge__dev_w(ctx, op->w), (size_t)(op->w->n_bytes / op->w->ne[2]), op->n,
                                           (uint32_t)op->w->ne[0], forge__dev_val(ctx, op->src), (int)op->aux,
                                           forge__dev_val(ctx, op->src2), ctx->sched.values[op->src2].width / 2, n,
                                           forge__dev_val(ctx, op->dst), ctx->stream, FORGE__MSG));
            break;
        case FORGE__OP_MOE_SUM:
            FORGE__HIP(forge_hip_moe_sum(forge__dev_val(ctx, op->src), forge__dev_val(ctx, op->src2), n,
                                         ctx->sched.values[op->src2].width / 2, op->n, forge__dev_val(ctx, op->dst), ctx->stream,
                                         FORGE__MSG));
            break;
        case FORGE__OP_PATTERN: { /* the attention's own arguments (the op has no output value: its queries stand in) */
            forge_hip_attention_args args;
            forge__op as_attention = *op;
            const uint32_t heads = ctx->sched.capture_heads[op->aux];
            as_attention.dst = op->src;
            forge__gpu_attention_args(ctx, &as_attention, n, 0, &args);
            FORGE__HIP(forge_hip_attn_pattern(&args, dev_pos, ctx->dev + ctx->dev_capture + ctx->capture_offset[op->aux],
                                              (int)ctx->r.capture_dtype, ctx->r.pattern_head_first, heads, ctx->r.pattern_key_first,
                                              ctx->sched.capture_width[op->aux] / heads, ctx->stream, FORGE__MSG));
            break;
        }
        case FORGE__OP_CAPTURE:
            FORGE__HIP(forge_hip_capture_store(ctx->dev + ctx->dev_capture + ctx->capture_offset[op->aux], forge__dev_val(ctx, op->src),
                                               (size_t)n * op->n, (int)ctx->r.capture_dtype, ctx->stream, FORGE__MSG));
            break;
        case FORGE__OP_SIGMOID_SCALE:
            if (ctx->sched.values[op->src].width != 1)
                return forge__fail(error, FORGE_ERR_CONFIG, "GPU: a sigmoid gate must be one value per token");
            FORGE__HIP(forge_hip_sigmoid_scale(forge__dev_val(ctx, op->dst), forge__dev_val(ctx, op->src), n, op->n,
                                               ctx->stream, FORGE__MSG));
            break;
        }
    }
    if (n == 1) ctx->norms_prepared = (ctx->op_first ? ctx->norms_prepared : 0) + q8.prepared;
    return FORGE_OK;
}

/* Waits for the decode step still queued, if any: its pinned slots are about to be reused, and a
   fault inside it is reported here. */
static forge_result forge__gpu_wait(forge_context *ctx, forge_error *error) {
    if (!ctx->dev_pending) return FORGE_OK;
    ctx->dev_pending = 0;
    FORGE__HIP(forge_hip_stream_sync(ctx->stream, FORGE__MSG));
    return FORGE_OK;
}

/* Records the decode step (one token; its id and position read from the step slots) as graphs,
   once, at context creation: every step then costs one 8-byte copy and one launch, and the graphs
   hold after forge_context_reset, since nothing in them depends on the position but the band it is
   in. The attention launch sizes its blocks by the span it may read (forge_hip_attention_span_limits:
   short spans take smaller parts of a GQA group), so there is one graph for each band of positions
   between those spans, the last up to n_ctx; forge__gpu_decode_band picks the step's. Where
   recording fails, or FORGE_NO_GRAPH is set, the plain launches stay (sized by the same bands). */
/* Every recorded graph destroyed (the context's, or each part's of a split). */
/* The recorded steps of several sequences destroyed (forge__gpu_record_rows). */
static void forge__gpu_drop_rows_graphs(forge_context *ctx) {
    uint32_t n, b;
    for (n = 0; n < FORGE__GPU_ROWS_GRAPHS; n++)
        for (b = 0; b < FORGE__GPU_GRAPHS; b++) {
            if (ctx->rows_graph[n][b]) forge_hip_graph_destroy(ctx->rows_graph[n][b]);
            ctx->rows_graph[n][b] = NULL;
        }
    ctx->n_rows_graphs = 0;
}

static void forge__gpu_drop_graphs(forge_context *ctx) {
    uint32_t i, p;
    forge__gpu_drop_rows_graphs(ctx);
    for (i = 0; i < FORGE__GPU_GRAPHS; i++) {
        if (ctx->graph[i]) forge_hip_graph_destroy(ctx->graph[i]);
        ctx->graph[i] = NULL;
        for (p = 0; p < ctx->n_parts; p++) {
            if (ctx->part[p].graph[i]) forge_hip_graph_destroy(ctx->part[p].graph[i]);
            ctx->part[p].graph[i] = NULL;
        }
    }
    ctx->n_graphs = 0;
}

static void forge__gpu_record_decode(forge_context *ctx, const forge_context_desc *desc) {
    const int off = desc->gpu_no_graph;
    const uint32_t home = ctx->cur_part;
    uint32_t limits[FORGE__GPU_GRAPHS], n_limits, i, p, n = 0;
    char message[256], line[400];
    forge_error e;
    forge_result r = FORGE_OK;
    n_limits = forge_hip_attention_span_limits(limits, FORGE__GPU_GRAPHS - 1);
    for (i = 0; i < n_limits; i++) /* the bands below n_ctx, then n_ctx */
        if (limits[i] < ctx->r.n_ctx && (n == 0 || limits[i] > ctx->graph_span[n - 1])) ctx->graph_span[n++] = limits[i];
    ctx->graph_span[n++] = ctx->r.n_ctx;
    ctx->n_bands = n;
    ctx->n_graphs = 0;
    if (off) {
        if (desc->log) desc->log(desc->log_user_data, FORGE_LOG_INFO, "decode graph: off (gpu_no_graph), plain launches");
        return;
    }
    /* a split records each part's ops on its own device; the step joins them with its copies and events */
    for (i = 0; i < n && r == FORGE_OK; i++) {
        for (p = 0; p < ctx->n_parts && r == FORGE_OK; p++) {
            uint32_t *slots;
            void **graph = ctx->n_parts > 1 ? &ctx->part[p].graph[i] : &ctx->graph[i];
            forge__part_load(ctx, p);
            slots = (uint32_t *)(void *)(ctx->dev + ctx->dev_step);
            if (forge_hip_set_device(ctx->part[p].device, message, sizeof message) != 0 ||
                forge_hip_graph_begin(ctx->stream, message, sizeof message) != 0) {
                snprintf(line, sizeof line, "decode graph: not available (%.300s), plain launches", message);
                if (desc->log) desc->log(desc->log_user_data, FORGE_LOG_INFO, line);
                r = FORGE_ERR_IO;
                break;
            }
            ctx->att_span = ctx->graph_span[i];
            r = forge__gpu_launch_ops(ctx, 1, (const int32_t *)slots, slots + 1, &e);
            if (forge_hip_graph_end(ctx->stream, r == FORGE_OK, graph, message, sizeof message) != 0 || r != FORGE_OK) {
                snprintf(line, sizeof line, "decode graph: recording failed (%.300s), plain launches", r != FORGE_OK ? e.message : message);
                if (desc->log) desc->log(desc->log_user_data, FORGE_LOG_WARN, line);
                *graph = NULL;
                r = FORGE_ERR_IO;
            }
        }
        if (r == FORGE_OK) ctx->n_graphs = i + 1;
    }
    forge__part_load(ctx, home);
    (void)forge_hip_set_device(ctx->part[home].device, message, sizeof message);
    if (ctx->n_graphs < n) { /* all or none */
        forge__gpu_drop_graphs(ctx);
    } else if (desc->log) {
        snprintf(line, sizeof line,
                 "decode graph: %u ops recorded once in %u graphs (positions below %u%s), replayed at every position (%u norms prepared by a product)",
                 ctx->sched.n_ops, n, ctx->graph_span[0], n > 1 ? " and the bands after" : "", ctx->norms_prepared);
        desc->log(desc->log_user_data, FORGE_LOG_INFO, line);
    }
    ctx->n_logit_rows = 0; /* recording ran no kernel */
}

/* The band of positions the decode step at ctx->pos falls in: the first whose span holds pos + 1. */
static uint32_t forge__gpu_decode_band(const forge_context *ctx) {
    uint32_t b = 0;
    while (b + 1 < ctx->n_bands && ctx->graph_span[b] < ctx->pos + 1) b++;
    return b;
}

/* The row counts of the steps of several sequences that are recorded (forge__gpu_record_rows) and
   that a decode step of fewer rows is padded up to (forge__gpu_run_schedule): 2 to 8, then 12, 16,
   24, 32, 48 and 64 (each at most a third more rows than a step it takes), and the most rows such a
   step can have (n_seq or n_batch, at most FORGE__GPU_ROWS_PAD_MAX) where that falls between two.
   Not with several GPUs or captures (their staging is sized by the step): none there. */
static void forge__gpu_row_counts(forge_context *ctx) {
    static const uint32_t counts[] = {2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 64};
    const uint32_t most = FORGE__MIN(FORGE__MIN(ctx->r.n_seq, ctx->r.n_batch), FORGE__GPU_ROWS_PAD_MAX);
    uint32_t i, k = 0;
    ctx->n_row_counts = 0;
    if (ctx->n_parts > 1 || ctx->sched.n_captures) return;
    for (i = 0; i < sizeof counts / sizeof counts[0] && counts[i] <= most; i++) ctx->row_counts[k++] = counts[i];
    if (most >= 2 && (k == 0 || ctx->row_counts[k - 1] < most)) ctx->row_counts[k++] = most;
    ctx->n_row_counts = k;
}

/* Records, at context creation, the step of each of ctx->row_counts rows that each keep their logits
   (one graph per band forge__gpu_rows_band takes) for a context of several sequences on one GPU:
   every row's token, position and sequence are read from the device tables the step uploads first,
   so one recording serves any mix of sequences and positions in the band; a step with prompt rows
   (some rows' logits not kept) or of more rows launches plainly. The driver's device memory for
   the graphs is outside the plan (about 1.6 MB a graph on an H100, tests/PERF.md). Not where the
   decode graphs were not recorded. All or none. */
static void forge__gpu_record_rows(forge_context *ctx, const forge_context_desc *desc) {
    int32_t *dev_tokens = (int32_t *)(void *)(ctx->dev + ctx->dev_tokens);
    uint32_t n, b, i, k;
    char message[512], line[700];
    forge_error e;
    forge_result r = FORGE_OK;
    ctx->n_rows_graphs = 0;
    forge__gpu_row_counts(ctx);
    if (ctx->n_graphs == 0 || ctx->n_row_counts == 0) return;
    ctx->rows = 1;
    for (k = 0; k < ctx->n_row_counts && r == FORGE_OK; k++) {
        n = ctx->row_counts[k];
        ctx->n_tokens = ctx->n_logit_rows = n;
        for (i = 0; i < n; i++) ctx->logit_src[i] = i;
        for (b = forge__gpu_rows_first_band(ctx); b < ctx->n_bands && r == FORGE_OK; b++) {
            void **graph = &ctx->rows_graph[k][b];
            ctx->row_pos_max = ctx->graph_span[b] - 1;
            if (forge_hip_graph_begin(ctx->stream, message, sizeof message) != 0) {
                r = FORGE_ERR_IO;
                break;
            }
            r = forge__gpu_launch_ops(ctx, n, dev_tokens, NULL, &e);
            if (forge_hip_graph_end(ctx->stream, r == FORGE_OK, graph, message, sizeof message) != 0 || r != FORGE_OK) {
                if (r != FORGE_OK) snprintf(message, sizeof message, "%.400s", e.message);
                *graph = NULL;
                r = FORGE_ERR_IO;
            }
        }
    }
    ctx->rows = 0;
    ctx->n_tokens = ctx->n_logit_rows = 0;
    if (r != FORGE_OK) { /* all or none: the decode graphs stay */
        forge__gpu_drop_rows_graphs(ctx);
        snprintf(line, sizeof line, "steps of several sequences: recording failed (%.300s), plain launches", message);
        if (desc->log) desc->log(desc->log_user_data, FORGE_LOG_WARN, line);
        return;
    }
    ctx->n_rows_graphs = ctx->n_row_counts;
    if (desc->log) {
        snprintf(line, sizeof line, "steps of several sequences: %u row counts from 2 to %u recorded in %u graphs", ctx->n_row_counts,
                 ctx->row_counts[ctx->n_row_counts - 1], ctx->n_row_counts * (ctx->n_bands - forge__gpu_rows_first_band(ctx)));
        desc->log(desc->log_user_data, FORGE_LOG_INFO, line);
    }
}
#endif

/* Allocates the one device arena of the plan, uploads the weights the schedule reads (norms and
   biases converted to f32 on the way) and records the decode step. Everything taken is released
   by forge_context_destroy. */
static FORGE__MAYBE_UNUSED forge_result forge__gpu_part_init(forge_context *ctx, const forge_context_desc *desc, uint32_t part, forge_error *error);

static forge_result forge__gpu_context_init(forge_context *ctx, const forge_context_desc *desc, forge_error *error) {
#ifdef FORGE_HIP
    const forge_gguf *g = ctx->model->gguf;
    uint64_t n_tensors = forge_gguf_tensor_count(g);
    forge_result r;
    uint32_t part;
    char message[256];
    ctx->logits = (float *)forge__alloc(&ctx->allocator, (size_t)ctx->plan.logits_bytes); /* the host copy */
    if (!ctx->logits) return forge__fail(error, FORGE_ERR_HOST_MEMORY, "cannot allocate the GPU context's host tables");
    ctx->arena = (uint8_t *)ctx->logits;
    ctx->arena_bytes = ctx->plan.total_bytes;
    if (forge_hip_host_alloc(FORGE__GPU_STEP_WORDS * sizeof(uint32_t), (void **)&ctx->step_host, message, sizeof message) != 0)
        return forge__fail(error, FORGE_ERR_HOST_MEMORY, "cannot allocate the decode step's slots: %s", message);
    if (forge_hip_host_alloc(16 + 8 * (size_t)forge_hip_top_k_max() + 4 * (size_t)forge_hip_top_k_history_max(), (void **)&ctx->sample_host,
                             message, sizeof message) != 0)
        return forge__fail(error, FORGE_ERR_HOST_MEMORY, "cannot allocate the sampler's candidate buffer: %s", message);
    if (ctx->plan.capture_bytes) { /* the host side of the staging, where the chunks are delivered (one layout, whichever part writes) */
        const uint64_t bytes = forge__capture_bytes(&ctx->sched, &ctx->r, NULL);
        ctx->capture = (uint8_t *)forge__alloc(&ctx->allocator, (size_t)bytes);
        if (!ctx->capture)
            return forge__fail(error, FORGE_ERR_HOST_MEMORY, "cannot allocate %llu bytes of host capture staging", (forge__ull)bytes);
    }
    forge__capture_bind(ctx);
    ctx->use_q8 = !desc->gpu_no_q8;
    ctx->fuse_norm = desc->gpu_norm_fusion == 0 ? 1 : desc->gpu_norm_fusion < 0 ? 0 : 2; /* 1: where faster; 0: never; 2: wherever the shapes allow */
    {
        uint32_t storage = forge__kv_storage_type(ctx->r.kv_type);
        const forge_type_traits *kvt = forge_type_info(storage);
        ctx->row_k_bytes = (uint64_t)ctx->c->head_dim / kvt->block_elems * kvt->block_bytes;
        ctx->row_v_bytes = (uint64_t)ctx->c->head_dim_v / kvt->block_elems * kvt->block_bytes;
    }
    for (part = 0; part < ctx->n_parts; part++) { /* each device: its stream, its arena, its weights and regions */
        forge__part *q = &ctx->part[part];
        q->dev_weight = (uint64_t *)forge__alloc(&ctx->allocator, (size_t)(n_tensors ? n_tensors : 1) * sizeof(uint64_t));
        if (!q->dev_weight) return forge__fail(error, FORGE_ERR_HOST_MEMORY, "cannot allocate the GPU context's host tables");
        if (forge_hip_set_device(q->device, message, sizeof message) != 0)
            return forge__fail(error, FORGE_ERR_IO, "GPU %d: %s", q->device, message);
        FORGE__HIP(forge_hip_stream_create(&q->stream, FORGE__MSG));
        if (ctx->n_parts > 1) FORGE__HIP(forge_hip_event_create(&q->done, FORGE__MSG));
        if (forge_hip_arena_alloc((size_t)ctx->plan.parts[part].total_bytes, (void **)&q->arena, message, sizeof message) != 0)
            return forge__fail(error, FORGE_ERR_IO, ctx->n_parts > 1 ? "GPU %d (layers %u-%u): %s" : "GPU%.0d%.0u%.0u: %s", q->device,
                               ctx->plan.parts[part].layer_first, ctx->plan.parts[part].layer_first + ctx->plan.parts[part].n_layers - 1, message);
        forge__part_load(ctx, part);
        if ((r = forge__gpu_part_init(ctx, desc, part, error))) return r;
        forge__part_save(ctx, part);
    }
    for (part = 0; part + 1 < ctx->n_parts; part++) { /* each boundary's copy goes direct where the devices allow */
        int enabled = 0;
        if (forge_hip_peer_enable(ctx->part[part].device, ctx->part[part + 1].device, &enabled, message, sizeof message) != 0)
            return forge__fail(error, FORGE_ERR_IO, "GPU %d to GPU %d: %s", ctx->part[part].device, ctx->part[part + 1].device, message);
        if (enabled) ctx->peers |= 1u << part;
    }
    forge__part_load(ctx, ctx->n_parts - 1); /* a step ends on the last part: the logits are there */
    if (forge_hip_set_device(ctx->part[ctx->n_parts - 1].device, message, sizeof message) != 0)
        return forge__fail(error, FORGE_ERR_IO, "GPU %d: %s", ctx->part[ctx->n_parts - 1].device, message);
    forge__gpu_record_decode(ctx, desc);
    forge__gpu_record_rows(ctx, desc);
    return FORGE_OK;
#else
    (void)ctx, (void)desc;
    return forge__fail(error, FORGE_ERR_UNSUPPORTED, "this build of forge has no GPU backend (compile with FORGE_HIP)");
#endif
}

/* One part's arena (loaded, its device current): the weights its ops read, uploaded (norms and
   biases converted to f32 on the way), then its regions as the plan counted them. */
static FORGE__MAYBE_UNUSED forge_result forge__gpu_part_init(forge_context *ctx, const forge_context_desc *desc, uint32_t part, forge_error *error) {
#ifdef FORGE_HIP
    const forge_gguf *g = ctx->model->gguf;
    const forge_gguf_tensor *rope = forge_gguf_find_tensor(g, "rope_freqs.weight");
    const forge_plan_part *pp = &ctx->plan.parts[part];
    const forge_config *c = ctx->c;
    uint64_t offset = 0;
    forge_result r;
    uint32_t il;

    /* the arena: weights | scratch | logits | attention scratch | token ids | step slots | rope tables | q8 | prompt f16 | rows | capture | KV cache */
    if ((r = forge__gpu_upload(ctx, desc, &offset, error))) return r;
    ctx->dev_scratch = offset;
    offset += pp->scratch_bytes;
    ctx->dev_logits = offset;
    offset += pp->logits_bytes;
    ctx->dev_attn = offset;
    ctx->dev_attn_bytes = forge__align_gpu(forge_hip_attention_scratch_bytes(ctx->r.n_ctx, ctx->r.n_batch,
                                                                             forge__schedule_max_heads(&ctx->sched), c->head_dim_v));
    offset += ctx->dev_attn_bytes;
    ctx->dev_att_count = offset;
    offset += forge__align_gpu((uint64_t)forge__schedule_max_heads(&ctx->sched) * sizeof(uint32_t));
    ctx->dev_tokens = offset;
    offset += forge__align_gpu((uint64_t)ctx->r.n_batch * sizeof(int32_t));
    ctx->dev_step = offset;
    offset += forge__align_gpu(FORGE__GPU_STEP_WORDS * sizeof(uint32_t));
    ctx->dev_rope_freq = offset;
    offset += forge__align_gpu(FORGE__GPU_ROPE_BYTES);
    ctx->dev_q8[0] = offset;
    offset += forge__align_gpu(forge_hip_q8_bytes(ctx->sched.max_cols));
    ctx->dev_q8[1] = offset;
    offset += forge__align_gpu(forge_hip_q8_bytes(ctx->sched.max_cols));
    ctx->dev_argmax = offset;
    offset += forge__align_gpu(forge_hip_argmax_scratch_bytes());
    ctx->dev_sample = offset;
    offset += forge__align_gpu(forge_hip_top_k_scratch_bytes(c->n_vocab));
    ctx->dev_prompt = offset;
    ctx->dev_prompt_bytes = forge_hip_prompt_bytes(ctx->r.n_batch, ctx->sched.max_cols);
    offset += forge__align_gpu(ctx->dev_prompt_bytes);
    ctx->dev_rows = offset;
    if (ctx->r.n_seq > 1) { /* the rows' region: positions, sequences, attention records, product parts */
        ctx->dev_rows_attn = offset + 2 * forge__align_gpu((uint64_t)ctx->r.n_batch * sizeof(uint32_t));
        ctx->dev_rows_attn_bytes = forge__gpu_rows_attn_bytes(ctx->model);
        ctx->dev_split = ctx->dev_rows_attn + ctx->dev_rows_attn_bytes;
        ctx->dev_split_bytes = forge__gpu_split_bytes(&ctx->r, &ctx->sched);
    }
    offset += forge__gpu_rows_bytes(&ctx->r, &ctx->sched, ctx->model);
    ctx->dev_capture = offset;
    offset += pp->capture_bytes;
    ctx->dev_kv = offset;
    if (offset + pp->kv_bytes != pp->total_bytes)
        return forge__fail(error, FORGE_ERR_CONFIG, "the GPU arena layout (%llu bytes) differs from the plan (%llu)",
                           (forge__ull)(offset + pp->kv_bytes), (forge__ull)pp->total_bytes);
    ctx->dev_rope_factors = c->has_rope_freqs ? forge__dev_f32(ctx, rope) : NULL;
    FORGE__HIP(forge_hip_memset(ctx->dev + ctx->dev_att_count, 0, (size_t)forge__schedule_max_heads(&ctx->sched) * sizeof(uint32_t),
                                ctx->stream, FORGE__MSG));
    { /* the rotary tables, where the kernels take the rotation (else the decode step rotates in its own launch) */
        double *freq = (double *)(void *)(ctx->dev + ctx->dev_rope_freq);
        char message[256];
        ctx->rope_freq_ok = c->n_rot / 2 <= FORGE__GPU_ROPE_PAIRS &&
                            forge_hip_rope_freqs(freq, c->n_rot, c->rope_freq_base, ctx->stream, message, sizeof message) == 0 &&
                            forge_hip_rope_freqs(freq + FORGE__GPU_ROPE_PAIRS, c->n_rot, c->rope_freq_base_swa, ctx->stream, message,
                                                 sizeof message) == 0;
    }
    for (offset = 0, il = pp->layer_first; il < pp->layer_first + pp->n_layers; il++) {
        ctx->kv_layer_offset[il] = offset;
        ctx->kv_cells[il] = forge_kv_layer_cells(c, il, ctx->r.n_ctx, ctx->r.n_batch);
        offset += (uint64_t)ctx->kv_cells[il] * c->layer_n_head_kv[il] * (ctx->row_k_bytes + ctx->row_v_bytes);
    }
    if (offset * ctx->r.n_seq != pp->kv_bytes)
        return forge__fail(error, FORGE_ERR_CONFIG, "the KV cache layout (%u x %llu bytes) differs from the plan (%llu)", ctx->r.n_seq,
                           (forge__ull)offset, (forge__ull)pp->kv_bytes);
    ctx->kv_seq_bytes = offset;
    FORGE__HIP(forge_hip_stream_sync(ctx->stream, FORGE__MSG));
    return FORGE_OK;
#else
    (void)ctx, (void)desc, (void)part;
    return forge__fail(error, FORGE_ERR_UNSUPPORTED, "this build of forge has no GPU backend (compile with FORGE_HIP)");
#endif
}

/* The schedule on the device: the same ops, the same value offsets, the launchers of forge_kernels.hip.
   A one-token step (decode) reads its token and position from the step slots, through the recorded
   graph where there is one, else through the same launches made one by one, and returns with its
   work queued (forge__gpu_wait, forge_context_logits and forge_context_argmax wait for it); a prompt
   batch passes the position as arguments and waits for its work. */
#ifdef FORGE_HIP
/* A step of a split model: each part in turn on its device, its stream waiting for the boundary copy
   of the part before; the step's inputs (tokens, positions, row tables) copied to each part that
   reads them; after each part but the last, the values the boundary carries copied into the next
   part's scratch (the same offsets) and an event recorded. It ends with the last part loaded. A step
   starts only once the last one has finished (forge__gpu_wait), so no part's scratch is written while
   another step reads it. */
static forge_result forge__gpu_run_parts(forge_context *ctx, forge_error *error) {
    const uint32_t n = ctx->n_tokens, half = (uint32_t)forge__align_gpu((uint64_t)ctx->r.n_batch * sizeof(uint32_t));
    uint32_t p, v;
    forge_result r;
    if (n == 1 && !ctx->rows) {
        ctx->step_host[0] = (uint32_t)ctx->tokens[0];
        ctx->step_host[1] = ctx->pos;
        ctx->att_span = ctx->n_bands ? ctx->graph_span[forge__gpu_decode_band(ctx)] : ctx->r.n_ctx;
    }
    for (p = 0; p < ctx->n_parts; p++) {
        int32_t *dev_tokens;
        const uint32_t *dev_pos = NULL;
        forge__part_load(ctx, p);
        FORGE__HIP(forge_hip_set_device(ctx->part[p].device, FORGE__MSG));
        if (p > 0) FORGE__HIP(forge_hip_stream_wait(ctx->stream, ctx->part[p - 1].done, FORGE__MSG));
        dev_tokens = (int32_t *)(void *)(ctx->dev + ctx->dev_tokens);
        if (ctx->rows) {
            if (p == 0) FORGE__HIP(forge_hip_copy_to_device(dev_tokens, ctx->tokens, n * sizeof(int32_t), ctx->stream, FORGE__MSG));
            FORGE__HIP(forge_hip_copy_to_device(ctx->dev + ctx->dev_rows, ctx->row_pos, n * sizeof(uint32_t), ctx->stream, FORGE__MSG));
            FORGE__HIP(forge_hip_copy_to_device(ctx->dev + ctx->dev_rows + half, ctx->row_seq, n * sizeof(uint32_t), ctx->stream, FORGE__MSG));
        } else if (n == 1) {
            uint32_t *slots = (uint32_t *)(void *)(ctx->dev + ctx->dev_step);
            FORGE__HIP(forge_hip_copy_to_device(slots, ctx->step_host, 2 * sizeof(uint32_t), ctx->stream, FORGE__MSG));
            dev_tokens = (int32_t *)slots;
            dev_pos = slots + 1;
        } else if (p == 0) {
            FORGE__HIP(forge_hip_copy_to_device(dev_tokens, ctx->tokens, n * sizeof(int32_t), ctx->stream, FORGE__MSG));
        }
        if (dev_pos && ctx->n_graphs)
            FORGE__HIP(forge_hip_graph_launch(ctx->part[p].graph[forge__gpu_decode_band(ctx)], ctx->stream, FORGE__MSG));
        else if ((r = forge__gpu_launch_ops(ctx, n, dev_tokens, dev_pos, error)))
            return r;
        if (p + 1 == ctx->n_parts) break;
        for (v = 0; v < ctx->sched.n_values; v++)
            if (forge__crosses(&ctx->sched.values[v], ctx->part[p + 1].op_first)) {
                const uint64_t at = ctx->sched.values[v].offset;
                FORGE__HIP(forge_hip_copy_peer(ctx->part[p + 1].arena + ctx->part[p + 1].dev_scratch + at, ctx->part[p + 1].device,
                                               ctx->dev + ctx->dev_scratch + at, ctx->part[p].device,
                                               (size_t)ctx->sched.values[v].width * n * sizeof(float), ctx->stream, FORGE__MSG));
            }
        FORGE__HIP(forge_hip_event_record(ctx->part[p].done, ctx->stream, FORGE__MSG));
    }
    if (n == 1 && !ctx->rows) ctx->n_logit_rows = 1;
    if (ctx->sched.n_captures) { /* each capture's rows from the device of the part that wrote them */
        uint32_t k;
        for (k = 0; k < ctx->sched.n_captures; k++) {
            forge__part_load(ctx, ctx->capture_part[k]);
            FORGE__HIP(forge_hip_set_device(ctx->part[ctx->capture_part[k]].device, FORGE__MSG));
            FORGE__HIP(forge_hip_copy_from_device(ctx->capture + ctx->capture_offset[k], ctx->dev + ctx->dev_capture + ctx->capture_offset[k],
                                                  (size_t)n * ctx->sched.capture_width[k] * forge_capture_dtype_bytes(ctx->r.capture_dtype),
                                                  ctx->stream, FORGE__MSG));
        }
        for (p = 0; p < ctx->n_parts; p++) {
            FORGE__HIP(forge_hip_set_device(ctx->part[p].device, FORGE__MSG));
            FORGE__HIP(forge_hip_stream_sync(ctx->part[p].stream, FORGE__MSG));
        }
        forge__part_load(ctx, ctx->n_parts - 1);
        FORGE__HIP(forge_hip_set_device(ctx->part[ctx->n_parts - 1].device, FORGE__MSG));
    } else if (n > 1 || ctx->rows) { /* the host's row tables are read by the copies above */
        FORGE__HIP(forge_hip_stream_sync(ctx->stream, FORGE__MSG));
    } else {
        ctx->dev_pending = 1;
    }
    return FORGE_OK;
}
#endif

static forge_result forge__gpu_run_schedule(forge_context *ctx, forge_error *error) {
#ifdef FORGE_HIP
    uint32_t k, n = ctx->n_tokens;
    int32_t *dev_tokens = (int32_t *)(void *)(ctx->dev + ctx->dev_tokens);
    forge_result r;
    if ((r = forge__gpu_wait(ctx, error))) return r;
    ctx->logits_on_host = 0;
    if (ctx->n_parts > 1) return forge__gpu_run_parts(ctx, error);
    if (ctx->rows) { /* several sequences: the tokens, each row's position and sequence, then the batch's launches */
        const uint64_t half = forge__align_gpu((uint64_t)ctx->r.n_batch * sizeof(uint32_t));
        const uint32_t kept = ctx->n_logit_rows;
        const int32_t *tokens = ctx->tokens;
        uint32_t slot = 0, i;
        /* a decode step of n sequences runs as one of the recorded row counts, the next at or above
           n (forge__gpu_row_counts): the rows added repeat row 0's token and position and read its
           sequence's cache, store nothing (FORGE_HIP_ROW_NO_STORE), and their logits are not kept */
        if (kept == n)
            while (slot < ctx->n_row_counts && ctx->row_counts[slot] < n) slot++;
        if (kept != n || slot == ctx->n_row_counts) slot = FORGE__GPU_ROWS_GRAPHS;
        else if (ctx->row_counts[slot] > n) {
            memcpy(ctx->row_tok, ctx->tokens, n * sizeof(int32_t));
            for (i = n; i < ctx->row_counts[slot]; i++) {
                ctx->row_tok[i] = ctx->tokens[0], ctx->row_pos[i] = ctx->row_pos[0];
                ctx->row_seq[i] = ctx->row_seq[0] | FORGE_HIP_ROW_NO_STORE, ctx->logit_src[i] = i;
            }
            tokens = ctx->row_tok;
            n = ctx->n_logit_rows = ctx->row_counts[slot];
        }
        FORGE__HIP(forge_hip_copy_to_device(dev_tokens, tokens, n * sizeof(int32_t), ctx->stream, FORGE__MSG));
        FORGE__HIP(forge_hip_copy_to_device(ctx->dev + ctx->dev_rows, ctx->row_pos, n * sizeof(uint32_t), ctx->stream, FORGE__MSG));
        FORGE__HIP(forge_hip_copy_to_device(ctx->dev + ctx->dev_rows + half, ctx->row_seq, n * sizeof(uint32_t), ctx->stream, FORGE__MSG));
        if (slot < ctx->n_rows_graphs) { /* recorded */
            FORGE__HIP(forge_hip_graph_launch(ctx->rows_graph[slot][forge__gpu_rows_band(ctx)], ctx->stream, FORGE__MSG));
        } else if ((r = forge__gpu_launch_ops(ctx, n, dev_tokens, NULL, error))) {
            ctx->n_logit_rows = kept;
            return r;
        }
        ctx->n_logit_rows = kept;
    } else if (n == 1) { /* decode: token and position through the step slots, the graph's launches or the same ones plain */
        uint32_t *slots = (uint32_t *)(void *)(ctx->dev + ctx->dev_step);
        ctx->step_host[0] = (uint32_t)ctx->tokens[0];
        ctx->step_host[1] = ctx->pos;
        FORGE__HIP(forge_hip_copy_to_device(slots, ctx->step_host, 2 * sizeof(uint32_t), ctx->stream, FORGE__MSG));
        const uint32_t band = forge__gpu_decode_band(ctx);
        ctx->att_span = ctx->n_bands ? ctx->graph_span[band] : ctx->r.n_ctx;
        if (ctx->n_graphs) {
            FORGE__HIP(forge_hip_graph_launch(ctx->graph[band], ctx->stream, FORGE__MSG));
            ctx->n_logit_rows = 1;
        } else if ((r = forge__gpu_launch_ops(ctx, 1, (const int32_t *)slots, slots + 1, error))) {
            return r;
        }
    } else {
        FORGE__HIP(forge_hip_copy_to_device(dev_tokens, ctx->tokens, n * sizeof(int32_t), ctx->stream, FORGE__MSG));
        if ((r = forge__gpu_launch_ops(ctx, n, dev_tokens, NULL, error))) return r;
    }
    if (ctx->sched.n_captures) { /* this chunk's rows of every capture, to the host */
        for (k = 0; k < ctx->sched.n_captures; k++)
            FORGE__HIP(forge_hip_copy_from_device(ctx->capture + ctx->capture_offset[k], ctx->dev + ctx->dev_capture + ctx->capture_offset[k],
                                                  (size_t)n * ctx->sched.capture_width[k] * forge_capture_dtype_bytes(ctx->r.capture_dtype),
                                                  ctx->stream, FORGE__MSG));
        FORGE__HIP(forge_hip_stream_sync(ctx->stream, FORGE__MSG));
    } else if (n > 1 || ctx->rows) { /* the host's row tables are read by the copies above */
        FORGE__HIP(forge_hip_stream_sync(ctx->stream, FORGE__MSG));
    } else {
        ctx->dev_pending = 1;
    }
    return FORGE_OK;
#else
    (void)ctx;
    return forge__fail(error, FORGE_ERR_UNSUPPORTED, "this build of forge has no GPU backend");
#endif
}

static forge_result forge__gpu_scoped_init(forge_context *ctx, const forge_context_desc *desc, forge_error *error);

/* One tensor's copy, a task of the pool: the kernel clears each huge page as the copy first touches
   it, so two threads halve the time (Qwen2.5-Coder-1.5B's 980 MB on a fresh process). The whole
   pages of the tensor in forge's own read-only mapping of the file are then let go from this
   process (the kernel keeps them as page cache; a later read maps them again), so the process
   holds the copy, not the weights twice; a caller's buffer (forge_model_from_memory) is left alone. */
static void forge__copy_weight_task(void *job, uint32_t task, uint32_t n_tasks, uint32_t thread) {
    const forge_context *ctx = (const forge_context *)job;
    const forge_gguf_tensor *t = forge_gguf_tensor_at(ctx->model->gguf, task);
    (void)n_tasks, (void)thread;
    if (!ctx->w_data[task]) return;
    memcpy((void *)(uintptr_t)ctx->w_data[task], t->data, (size_t)t->n_bytes);
#if defined(FORGE__MAP_POSIX) && defined(MADV_DONTNEED)
    if (ctx->model->file.bytes && ctx->model->file.mapped) {
        const long page = sysconf(_SC_PAGESIZE);
        const uintptr_t first = page > 0 ? ((uintptr_t)t->data + (uintptr_t)page - 1) / (uintptr_t)page * (uintptr_t)page : 0;
        const uintptr_t end = page > 0 ? ((uintptr_t)t->data + (uintptr_t)t->n_bytes) / (uintptr_t)page * (uintptr_t)page : 0;
        if (end > first) (void)madvise((void *)first, (size_t)(end - first), MADV_DONTNEED);
    }
#endif
}

/* desc.cpu_copy_weights: the product matrices copied into one allocation whose start is aligned to
   2 MiB, each matrix at a 64-byte boundary, the range advised into huge pages before the first write
   (the pages are taken as the copy touches them). ctx->w_data[i] is where tensor i's copy starts. */
static forge_result forge__cpu_copy_weights(forge_context *ctx, forge_error *e) {
    const forge_gguf *g = ctx->model->gguf;
    const uint64_t n = forge_gguf_tensor_count(g), huge = (uint64_t)2 << 20;
    uint64_t i, bytes = 0, at = 0;
    uint32_t k;
    uint8_t *base;
    ctx->w_data = (const uint8_t **)forge__alloc(&ctx->allocator, (size_t)n * sizeof *ctx->w_data);
    if (!ctx->w_data) return forge__fail(e, FORGE_ERR_HOST_MEMORY, "cannot allocate the copy of the weights (its table of %llu tensors)", (forge__ull)n);
    memset((void *)ctx->w_data, 0, (size_t)n * sizeof *ctx->w_data);
    /* the tensors a product reads (a layer's matrix, the output head, an expert table), marked by their
       bytes in the file (what forge__cpu_w reads until the copy is placed) */
    for (k = 0; k < ctx->sched.n_ops; k++) {
        const forge__op *op = &ctx->sched.ops[k];
        if (op->w && (op->kind == FORGE__OP_MATMUL || op->kind == FORGE__OP_LOGITS || op->kind == FORGE__OP_MATMUL_ID))
            ctx->w_data[op->w - g->tensors] = op->w->data;
    }
    for (i = 0; i < n; i++)
        if (ctx->w_data[i]) bytes += forge__align64(forge_gguf_tensor_at(g, i)->n_bytes);
    if (!bytes) return FORGE_OK;
    if (bytes > (uint64_t)SIZE_MAX / 2 - huge)
        return forge__fail(e, FORGE_ERR_HOST_MEMORY, "a copy of %llu bytes of weights does not fit this address space", (forge__ull)bytes);
    ctx->w_copy = (uint8_t *)forge__alloc(&ctx->allocator, (size_t)(bytes + huge));
    if (!ctx->w_copy)
        return forge__fail(e, FORGE_ERR_HOST_MEMORY, "cannot allocate the copy of the weights (%llu bytes)", (forge__ull)(bytes + huge));
    base = ctx->w_copy + (size_t)((huge - (uint64_t)((uintptr_t)ctx->w_copy % huge)) % huge);
#if defined(FORGE__MAP_POSIX) && defined(MADV_HUGEPAGE)
    if (bytes >= huge) (void)madvise(base, (size_t)(bytes / huge * huge), MADV_HUGEPAGE); /* only advice: 4 KiB pages if refused */
#endif
    for (i = 0; i < n; i++)
        if (ctx->w_data[i]) {
            ctx->w_data[i] = base + at;
            at += forge__align64(forge_gguf_tensor_at(g, i)->n_bytes);
        }
    forge__pool_run(ctx->pool, forge__copy_weight_task, ctx, (uint32_t)n); /* n <= FORGE_GGUF_MAX_TENSORS */
    return FORGE_OK;
}

/* Where the CPU reads tensor t's bytes: its copy (desc.cpu_copy_weights) or the file. */
static const uint8_t *forge__cpu_w(const forge_context *ctx, const forge_gguf_tensor *t) {
    const uint8_t *w = ctx->w_data ? ctx->w_data[t - ctx->model->gguf->tensors] : NULL;
    return w ? w : t->data;
}

FORGE_API forge_result forge_context_create(const forge_model *m, const forge_context_desc *desc, forge_context **out,
                                            forge_error *error) {
    forge_context_desc zero;
    forge_verdict verdict;
    forge_context *ctx;
    forge_result res;
    uint64_t offset;
    uint32_t il, storage, part;
    const forge_type_traits *kvt;
    const forge_allocator *a;

    if (out) *out = NULL;
    if (!m || !out) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_context_create: null argument");
    if (!desc) {
        memset(&zero, 0, sizeof zero);
        desc = &zero;
    }
    a = &desc->allocator;
    /* the whole bill first: nothing is allocated before the plan is known to fit */
    if ((res = forge_plan_check(m, desc, &verdict, error))) return res;
    if (!verdict.fits) {
        if (desc->policy != FORGE_BUDGET_WARN) return forge__fail(error, FORGE_ERR_BUDGET, "%s", verdict.message);
        if (desc->log) desc->log(desc->log_user_data, FORGE_LOG_WARN, verdict.message);
    } else if (desc->log) {
        desc->log(desc->log_user_data, FORGE_LOG_INFO, verdict.message);
    }
    if (m->config.head_dim > FORGE__MAX_HEAD_DIM || m->config.head_dim_v > FORGE__MAX_HEAD_DIM)
        return forge__fail(error, FORGE_ERR_UNSUPPORTED, "head size %u is above the CPU backend's limit of %d",
                           FORGE__MAX(m->config.head_dim, m->config.head_dim_v), FORGE__MAX_HEAD_DIM);

    ctx = (forge_context *)forge__alloc(a, sizeof *ctx);
    if (!ctx) return forge__fail(error, FORGE_ERR_HOST_MEMORY, "cannot allocate the context (%u bytes)", (unsigned)sizeof *ctx);
    memset(ctx, 0, sizeof *ctx);
    ctx->model = m;
    ctx->c = &m->config;
    ctx->allocator = *a;
    ctx->on_capture = desc->on_capture;
    ctx->capture_user_data = desc->capture_user_data;
    if ((res = forge__resolve_desc(m, desc, &ctx->r, error))) goto fail;
    if ((res = forge__seq_tables(ctx, error))) goto fail;
    if (desc->captures && desc->n_captures <= FORGE_MAX_CAPTURES)
        memcpy(ctx->captures, desc->captures, desc->n_captures * sizeof *desc->captures);
    if ((res = forge__schedule_build(m, a, &ctx->sched, desc->captures ? ctx->captures : NULL, desc->n_captures, error)))
        goto fail;
    if ((res = forge__pattern_setup(&ctx->sched, &m->config, &ctx->r, error))) goto fail;
    for (part = 0; part < verdict.plan.n_parts; part++) ctx->r.part_layer[part] = verdict.plan.parts[part].layer_first; /* the split checked */
    if (ctx->r.n_parts > 1 && !forge__ops_in_layer_order(&ctx->sched)) {
        res = forge__fail(error, FORGE_ERR_UNSUPPORTED, "this architecture's schedule is not in layer order: its layers cannot be split");
        goto fail;
    }
    forge__parts_bind(ctx);
    if (ctx->r.backend == FORGE_BACKEND_GPU) {
        /* the values' offsets in the scratch region come from packing, as the plan counted them */
        if ((res = forge__plan_with(m, &ctx->r, &ctx->sched, forge__schedule_pack(&ctx->sched, ctx->r.n_batch), 1,
                                    &ctx->plan, error)))
            goto fail;
        if ((res = forge__gpu_scoped_init(ctx, desc, error))) goto fail;
        *out = ctx;
        forge__ok(error);
        return FORGE_OK;
    }
    if ((res = forge__pool_create(ctx->r.n_threads, a, &ctx->pool, error))) goto fail;
    ctx->plan = verdict.plan;
    /* the plan was made for the thread count the pool really has */
    if ((res = forge__plan_with(m, &ctx->r, &ctx->sched, forge__schedule_pack(&ctx->sched, ctx->r.n_batch),
                                forge__pool_size(ctx->pool), &ctx->plan, error)))
        goto fail;
    storage = forge__kv_storage_type(ctx->r.kv_type);
    kvt = forge_type_info(storage);
    ctx->row_k_bytes = (uint64_t)ctx->c->head_dim / kvt->block_elems * kvt->block_bytes;
    ctx->row_v_bytes = (uint64_t)ctx->c->head_dim_v / kvt->block_elems * kvt->block_bytes;
    ctx->cpu_q8 = !desc->cpu_no_q8;
    ctx->arena_bytes = ctx->plan.total_bytes - ctx->plan.weights_bytes; /* weights stay in the mapped file */
    forge__capture_bind(ctx);
    for (part = 0; part < ctx->n_parts; part++) { /* each part's arena; a context of one part has one */
        const forge_plan_part *q = &ctx->plan.parts[part];
        forge__part *h = &ctx->part[part];
        uint64_t kv_one = 0;
        h->arena_bytes = q->total_bytes - q->weights_bytes;
        if (h->arena_bytes > (uint64_t)SIZE_MAX / 2) {
            res = forge__fail(error, FORGE_ERR_HOST_MEMORY, "an arena of %llu bytes does not fit this address space",
                              (forge__ull)h->arena_bytes);
            goto fail;
        }
        h->arena = (uint8_t *)forge__alloc(a, (size_t)(h->arena_bytes ? h->arena_bytes : 1));
        if (!h->arena) {
            res = forge__fail(error, FORGE_ERR_HOST_MEMORY, ctx->n_parts > 1 ? "cannot allocate the arena of part %u (%llu bytes)"
                                                                             : "cannot allocate the context arena%.0u of %llu bytes",
                              part, (forge__ull)h->arena_bytes);
            goto fail;
        }
        /* regions of the arena: the 64-byte multiples first, the KV cache (any size) last */
        h->scratch = (float *)(void *)h->arena;
        offset = q->scratch_bytes;
        if (q->logits_bytes) ctx->logits = (float *)(void *)(h->arena + offset);
        offset += q->logits_bytes;
        if (q->reserve_bytes) {
            ctx->work = h->arena + offset;
            ctx->q8_work = h->arena + offset + forge__cpu_work_bytes(forge__pool_size(ctx->pool), ctx->sched.max_cols);
            offset += forge__cpu_reserve_bytes(forge__pool_size(ctx->pool), ctx->sched.max_cols, ctx->r.n_batch);
            ctx->vec = (float *)(void *)(h->arena + offset);
            offset += forge__align64((uint64_t)ctx->sched.max_vec * sizeof(float));
        }
        h->capture = h->arena + offset;
        offset += q->capture_bytes;
        h->kv = h->arena + offset;
        for (il = q->layer_first; il < q->layer_first + q->n_layers; il++) {
            ctx->kv_layer_offset[il] = kv_one;
            ctx->kv_cells[il] = forge_kv_layer_cells(ctx->c, il, ctx->r.n_ctx, ctx->r.n_batch);
            kv_one += (uint64_t)ctx->kv_cells[il] * ctx->c->layer_n_head_kv[il] * (ctx->row_k_bytes + ctx->row_v_bytes);
        }
        h->kv_seq_bytes = kv_one;
        /* the last region carved (every sequence's KV cache) ends where the arena ends: a term the plan
           lacks is refused here, before anything is written, not found later as an overrun */
        if (kv_one * ctx->r.n_seq != q->kv_bytes || offset + q->kv_bytes != h->arena_bytes) {
            res = forge__fail(error, FORGE_ERR_CONFIG, "the CPU arena layout of part %u (%llu bytes, KV %u x %llu) differs from the plan (%llu, KV %llu)",
                              part, (forge__ull)(offset + kv_one * ctx->r.n_seq), ctx->r.n_seq, (forge__ull)kv_one,
                              (forge__ull)h->arena_bytes, (forge__ull)q->kv_bytes);
            goto fail;
        }
    }
    for (il = 0; il < ctx->sched.n_captures; il++) /* each capture's rows where its part writes them */
        ctx->capture_data[il] = ctx->part[ctx->capture_part[il]].capture + ctx->capture_offset[il];
    ctx->arena = ctx->part[0].arena;
    forge__part_load(ctx, 0);
    for (il = 0; il < FORGE__MAX_HEAD_DIM / 2; il++) ctx->rope_factors[il] = 1.0f;
    if (ctx->c->has_rope_freqs) {
        const forge_gguf_tensor *t = forge_gguf_find_tensor(m->gguf, "rope_freqs.weight");
        forge_dequantize(t->type, t->data, ctx->rope_factors, t->n_elements);
    }
    /* the weights stay in the mapped file (desc.cpu_copy_weights: the products' matrices copied once) */
    if (desc->cpu_copy_weights && (res = forge__cpu_copy_weights(ctx, error))) goto fail;
    if (desc->on_progress) desc->on_progress(desc->progress_user_data, ctx->plan.weights_bytes, ctx->plan.weights_bytes);
    *out = ctx;
    forge__ok(error);
    return FORGE_OK;
fail:
    forge_context_destroy(ctx);
    return res;
}

static void forge__context_destroy(forge_context *ctx) {
    forge_allocator a;
    if (!ctx) return;
    a = ctx->allocator;
#ifdef FORGE_HIP
    if (ctx->r.backend == FORGE_BACKEND_GPU) {
        uint32_t i;
        char message[256];
        for (i = 0; i < ctx->n_parts; i++) /* a queued step still reads the arenas */
            if (ctx->part[i].stream && forge_hip_set_device(ctx->part[i].device, message, sizeof message) == 0)
                (void)forge_hip_stream_sync(ctx->part[i].stream, message, sizeof message);
        forge__gpu_drop_graphs(ctx);
        forge_hip_host_free(ctx->step_host);
        forge_hip_host_free(ctx->sample_host);
        for (i = 0; i < ctx->n_parts; i++) {
            (void)forge_hip_set_device(ctx->part[i].device, message, sizeof message);
            forge_hip_event_destroy(ctx->part[i].done);
            if (ctx->part[i].stream) forge_hip_stream_destroy(ctx->part[i].stream);
            forge_hip_arena_free(ctx->part[i].arena);
            forge__free(&a, ctx->part[i].dev_weight);
        }
        for (i = 0; i + 1 < ctx->n_parts; i++) /* the peer access this context turned on, off again */
            if (ctx->peers >> i & 1u) forge_hip_peer_disable(ctx->part[i].device, ctx->part[i + 1].device);
    }
#endif
    if (ctx->r.backend == FORGE_BACKEND_GPU) {
        forge__free(&a, ctx->capture); /* the host mirror (on the CPU the staging is in the arenas) */
        forge__free(&a, ctx->arena);   /* the host copy of the logits */
    } else {
        uint32_t i;
        for (i = 0; i < ctx->n_parts; i++) forge__free(&a, ctx->part[i].arena);
    }
    forge__free(&a, ctx->w_copy);
    forge__free(&a, (void *)ctx->w_data);
    forge__pool_destroy(ctx->pool);
    forge__free(&a, ctx->seq_pos);
    forge__schedule_free(&ctx->sched, &a);
    forge__free(&a, ctx);
}

FORGE_API const forge_plan *forge_context_plan(const forge_context *ctx) { return ctx ? &ctx->plan : NULL; }
FORGE_API uint64_t forge_context_arena_bytes(const forge_context *ctx) { return ctx ? ctx->arena_bytes : 0; }
FORGE_API uint32_t forge_context_pos(const forge_context *ctx) { return ctx ? ctx->pos : 0; }
FORGE_API void forge_context_reset(forge_context *ctx) {
    uint32_t s;
    if (!ctx) return;
    ctx->pos = 0;
    ctx->n_logit_rows = 0;
    ctx->capture_pos = ctx->capture_tokens = 0;
    for (s = 0; s < ctx->r.n_seq; s++) ctx->seq_pos[s] = 0, ctx->seq_row[s] = UINT32_MAX;
}

static const float *forge__context_logits(const forge_context *ctx, uint32_t *n_rows) {
    if (n_rows) *n_rows = 0;
    if (!ctx || !ctx->n_logit_rows) return NULL;
#ifdef FORGE_HIP
    if (ctx->r.backend == FORGE_BACKEND_GPU && !ctx->logits_on_host) { /* the host copy is made on demand */
        forge_context *c = (forge_context *)(uintptr_t)ctx;
        char message[256];
        c->dev_pending = 0;
        if (forge_hip_copy_from_device(c->logits, c->dev + c->dev_logits, (size_t)c->n_logit_rows * c->c->n_vocab * sizeof(float),
                                       c->stream, message, sizeof message) != 0 ||
            forge_hip_stream_sync(c->stream, message, sizeof message) != 0)
            return NULL;
        c->logits_on_host = 1;
    }
#endif
    if (n_rows) *n_rows = ctx->n_logit_rows;
    return ctx->logits;
}

static forge_result forge__argmax_row(forge_context *ctx, uint32_t index, int32_t *out_token, forge_error *error);
static forge_result forge__sample_row(forge_context *ctx, forge_sampler *sampler, uint32_t index, int32_t *out_token,
                                      forge_error *error);

static forge_result forge__context_argmax(forge_context *ctx, int32_t *out_token, forge_error *error) {
    if (out_token) *out_token = -1;
    if (!ctx || !out_token) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_context_argmax: null argument");
    if (!ctx->n_logit_rows) return forge__fail(error, FORGE_ERR_ARGUMENT, "no logits: evaluate tokens first");
    return forge__argmax_row(ctx, ctx->n_logit_rows - 1, out_token, error);
}

/* Greedy choice from logits row `index` of the last step. */
static forge_result forge__argmax_row(forge_context *ctx, uint32_t index, int32_t *out_token, forge_error *error) {
    const float *row;
    uint32_t v, n_vocab, best = UINT32_MAX;
    n_vocab = ctx->c->n_vocab;
#ifdef FORGE_HIP
    if (ctx->r.backend == FORGE_BACKEND_GPU && !ctx->logits_on_host) { /* on the device: 4 bytes come back */
        int32_t *slot = (int32_t *)(void *)(ctx->dev + ctx->dev_step) + 2;
        ctx->dev_pending = 0;
        FORGE__HIP(forge_hip_argmax((const float *)(void *)(ctx->dev + ctx->dev_logits) + (uint64_t)index * n_vocab,
                                    n_vocab, ctx->dev + ctx->dev_argmax, slot, ctx->stream, FORGE__MSG));
        FORGE__HIP(forge_hip_copy_from_device(ctx->step_host + 2, slot, sizeof(int32_t), ctx->stream, FORGE__MSG));
        FORGE__HIP(forge_hip_stream_sync(ctx->stream, FORGE__MSG));
        *out_token = (int32_t)ctx->step_host[2];
        forge__ok(error);
        return FORGE_OK;
    }
#endif
    /* the first largest value, as the device's reduction and the greedy sampler choose */
    row = ctx->logits + (uint64_t)index * n_vocab;
    for (v = 0; v < n_vocab; v++)
        if (row[v] == row[v] && (best == UINT32_MAX || row[v] > row[best])) best = v;
    *out_token = best == UINT32_MAX ? 0 : (int32_t)best;
    forge__ok(error);
    return FORGE_OK;
}

static forge_result forge__context_sample(forge_context *ctx, forge_sampler *sampler, int32_t *out_token, forge_error *error) {
    if (out_token) *out_token = -1;
    if (!ctx || !sampler || !out_token) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_context_sample: null argument");
    if (!ctx->n_logit_rows) return forge__fail(error, FORGE_ERR_ARGUMENT, "no logits: evaluate tokens first");
    return forge__sample_row(ctx, sampler, ctx->n_logit_rows - 1, out_token, error);
}

/* The sampler's draw from logits row `index` of the last step (see forge_context_sample). */
static forge_result forge__sample_row(forge_context *ctx, forge_sampler *sampler, uint32_t index, int32_t *out_token,
                                      forge_error *error) {
    const float *logits;
    uint32_t rows = 0;
    if (sampler->n_vocab != ctx->c->n_vocab)
        return forge__fail(error, FORGE_ERR_ARGUMENT, "the sampler was made for %lu tokens, the model has %lu",
                           (unsigned long)sampler->n_vocab, (unsigned long)ctx->c->n_vocab);
#ifdef FORGE_HIP
    if (ctx->r.backend == FORGE_BACKEND_GPU && !ctx->logits_on_host &&
        (sampler->desc.repeat_penalty == 0.0f || sampler->history_count <= forge_hip_top_k_history_max())) {
        const forge_sampler_desc *d = &sampler->desc;
        const uint32_t n_vocab = ctx->c->n_vocab;
        uint32_t want = 0;
        if (d->temperature == 0.0f) want = 1; /* greedy: the best key */
        else if (d->top_k > 0 && (uint32_t)d->top_k < forge_hip_top_k_max() && (uint32_t)d->top_k < n_vocab)
            want = (uint32_t)d->top_k + 1; /* one more than top_k: tells whether the sampler's top-k applies */
        if (want) {
            uint8_t *scratch = ctx->dev + ctx->dev_sample;
            int32_t *history = (int32_t *)(void *)(ctx->sample_host + 16 + 8 * (size_t)forge_hip_top_k_max());
            const uint32_t n_history = d->repeat_penalty > 0.0f ? sampler->history_count : 0;
            uint32_t flag, i, n = 0;
            forge__candidate *c = sampler->candidates;
            ctx->dev_pending = 0;
            if (n_history) memcpy(history, sampler->history, (size_t)n_history * sizeof(int32_t));
            FORGE__HIP(forge_hip_top_k((const float *)(void *)(ctx->dev + ctx->dev_logits) + (uint64_t)index * n_vocab,
                                       n_vocab, want, history, n_history, d->repeat_penalty, scratch, ctx->stream, FORGE__MSG));
            FORGE__HIP(forge_hip_copy_from_device(ctx->sample_host, scratch, 16 + 8 * (size_t)want, ctx->stream, FORGE__MSG));
            FORGE__HIP(forge_hip_stream_sync(ctx->stream, FORGE__MSG));
            memcpy(&flag, ctx->sample_host, sizeof flag);
            for (i = 0; i < want && !flag; i++) { /* keys best first; padding (0) and -inf end the list */
                uint64_t key;
                uint32_t mono, bits;
                float x;
                memcpy(&key, ctx->sample_host + 16 + 8 * (size_t)i, sizeof key);
                mono = (uint32_t)(key >> 32);
                bits = (mono & 0x80000000u) ? mono & 0x7fffffffu : ~mono;
                memcpy(&x, &bits, sizeof x);
                if (key == 0 || !(x >= -FLT_MAX)) break;
                c[n].logit = x;
                c[n].id = (int32_t)~(uint32_t)key;
                n++;
            }
            if (!flag && n > 0) { /* NaN, +inf or nothing but -inf: the host path says which */
                ctx->n_device_samples++;
                if (d->temperature == 0.0f) {
                    *out_token = c[0].id;
                    forge__ok(error);
                    return FORGE_OK;
                }
                if (n == want) return forge__sampler_finish(sampler, (size_t)d->top_k, 1, out_token, error);
                for (i = 1; i < n; i++) { /* every finite logit is here: the sampler keeps them in id order */
                    forge__candidate t = c[i];
                    uint32_t j = i;
                    while (j > 0 && c[j - 1].id > t.id) c[j] = c[j - 1], j--;
                    c[j] = t;
                }
                return forge__sampler_finish(sampler, n, 0, out_token, error);
            }
        }
    }
#endif
    logits = forge_context_logits(ctx, &rows);
    if (!logits || index >= rows) return forge__fail(error, FORGE_ERR_IO, "the logits of the last step could not be read");
    return forge_sampler_sample(sampler, logits + (size_t)index * ctx->c->n_vocab, out_token, error);
}

static float *forge__val(forge_context *ctx, int32_t v) {
    return (float *)(void *)((uint8_t *)ctx->scratch + ctx->sched.values[v].offset);
}

/* Row t of the step being evaluated: its position and its sequence. */
static uint32_t forge__row_pos(const forge_context *ctx, uint32_t t) { return ctx->rows ? ctx->row_pos[t] : ctx->pos + t; }
static uint32_t forge__row_seq(const forge_context *ctx, uint32_t t) { return ctx->rows ? ctx->row_seq[t] : 0; }

/* KV cache rows of sequence seq: keys of layer l, position p, KV head h; values follow all keys of
   the layer. A sliding-window layer holds fewer rows than positions: position p lives in row
   p % kv_cells. */
static uint8_t *forge__k_row(forge_context *ctx, uint32_t seq, uint32_t l, uint32_t p, uint32_t h) {
    return ctx->kv + seq * ctx->kv_seq_bytes + ctx->kv_layer_offset[l] +
           ((uint64_t)(p % ctx->kv_cells[l]) * ctx->c->layer_n_head_kv[l] + h) * ctx->row_k_bytes;
}
static uint8_t *forge__v_row(forge_context *ctx, uint32_t seq, uint32_t l, uint32_t p, uint32_t h) {
    return ctx->kv + seq * ctx->kv_seq_bytes + ctx->kv_layer_offset[l] +
           (uint64_t)ctx->kv_cells[l] * ctx->c->layer_n_head_kv[l] * ctx->row_k_bytes +
           ((uint64_t)(p % ctx->kv_cells[l]) * ctx->c->layer_n_head_kv[l] + h) * ctx->row_v_bytes;
}

/* A quantized KV block of 32 values that holds a NaN or an infinity has no scale that represents it:
   it is stored as a NaN scale over the codes of zero, so every value reads back as NaN (the damage
   shows in the logits instead of as a plausible wrong number) and no out-of-range float is ever
   converted to an integer. The GPU store (forge__kv_put) writes the same bytes. */
#define FORGE__KV_NAN_SCALE 0x7e00u

static int forge__block_finite(const float *x, uint32_t n) {
    uint32_t j;
    for (j = 0; j < n; j++)
        if (!(fabsf(x[j]) <= FLT_MAX)) return 0;
    return 1;
}

/* 1/d, or 0 where that is not a finite number: d = 0, or d so small (below float's normal range)
   that 1/d overflows; such a d is 0 in f16 anyway, so the codes do not matter, but they stay defined */
static float forge__kv_inverse_scale(float d) {
    float inv = d != 0.0f ? 1.0f / d : 0.0f;
    return fabsf(inv) <= FLT_MAX ? inv : 0.0f;
}

/* f32 -> the KV cache's storage type (round to nearest; blocks of 32 for the quantized types).
   Defined for every float input: NaN, infinities and denormals included (see FORGE__KV_NAN_SCALE). */
static void forge__kv_encode(forge_kv_type type, const float *x, uint32_t n, uint8_t *dst) {
    uint32_t i, j;
    if (type == FORGE_KV_F32) {
        memcpy(dst, x, n * sizeof(float));
    } else if (type == FORGE_KV_F16) {
        for (i = 0; i < n; i++) {
            uint16_t h = forge_f32_to_f16(x[i]);
            dst[2 * i] = (uint8_t)(h & 0xff);
            dst[2 * i + 1] = (uint8_t)(h >> 8);
        }
    } else if (type == FORGE_KV_Q8_0) {
        for (i = 0; i < n; i += 32, dst += 34) {
            float amax = 0.0f, d, inv;
            uint16_t h;
            if (!forge__block_finite(x + i, 32)) {
                dst[0] = (uint8_t)(FORGE__KV_NAN_SCALE & 0xff), dst[1] = (uint8_t)(FORGE__KV_NAN_SCALE >> 8);
                memset(dst + 2, 0, 32);
                continue;
            }
            for (j = 0; j < 32; j++) amax = FORGE__MAX(amax, (float)fabs(x[i + j]));
            d = amax / 127.0f;
            inv = forge__kv_inverse_scale(d);
            h = forge_f32_to_f16(d);
            dst[0] = (uint8_t)(h & 0xff);
            dst[1] = (uint8_t)(h >> 8);
            for (j = 0; j < 32; j++) dst[2 + j] = (uint8_t)(int8_t)lrintf(x[i + j] * inv); /* |x * inv| <= 127 */
        }
    } else { /* Q4_0: the value of largest magnitude maps to -8 */
        for (i = 0; i < n; i += 32, dst += 18) {
            float max = 0.0f, amax = 0.0f, d, inv;
            uint16_t h;
            if (!forge__block_finite(x + i, 32)) {
                dst[0] = (uint8_t)(FORGE__KV_NAN_SCALE & 0xff), dst[1] = (uint8_t)(FORGE__KV_NAN_SCALE >> 8);
                memset(dst + 2, 0x88, 16);
                continue;
            }
            for (j = 0; j < 32; j++)
                if (fabs(x[i + j]) > amax) amax = (float)fabs(x[i + j]), max = x[i + j];
            d = max / -8.0f;
            inv = forge__kv_inverse_scale(d);
            h = forge_f32_to_f16(d);
            dst[0] = (uint8_t)(h & 0xff);
            dst[1] = (uint8_t)(h >> 8);
            for (j = 0; j < 16; j++) { /* x * inv is about [-8, 8]: the sums stay near [0.5, 16.5] */
                int lo = (int)(x[i + j] * inv + 8.5f), hi = (int)(x[i + 16 + j] * inv + 8.5f);
                lo = lo < 0 ? 0 : lo > 15 ? 15 : lo;
                hi = hi < 0 ? 0 : hi > 15 ? 15 : hi;
                dst[2 + j] = (uint8_t)(lo | (hi << 4));
            }
        }
    }
}

static void forge__rmsnorm_row(const float *x, const float *w, float *y, uint32_t n, float eps) {
    double sum = 0.0;
    float scale;
    uint32_t i;
    for (i = 0; i < n; i++) sum += (double)x[i] * x[i];
    scale = (float)(1.0 / sqrt(sum / n + (double)eps));
    for (i = 0; i < n; i++) y[i] = x[i] * scale * w[i];
}

/* The first position a query at pos attends to: a sliding-window layer sees the last n_swa
   positions, this one included; every other layer all of them. */
static uint32_t forge__attn_first(const forge_config *c, uint32_t layer, uint32_t pos) {
    return c->layer_is_swa[layer] && pos >= c->n_swa ? pos - c->n_swa + 1 : 0;
}

typedef struct forge__attn_job {
    forge_context *ctx;
    const forge__op *op;
    const float *q;
    float *out;
} forge__attn_job;

/* One (token, head) pair per task: online softmax over positions 0..p, values accumulated as they
   come, so no buffer grows with the context. */
/* One KV cache row in f32: an f16 row 8 halves at a time where the pool found the instructions (the
   same values), any other through forge_dequantize. */
static void forge__kv_row_f32(const forge_context *ctx, uint32_t kv_type, const uint8_t *src, float *dst, uint32_t n) {
#ifdef FORGE__AVX2
    if (kv_type == FORGE_TYPE_F16 && n % 8 == 0 && ctx->pool && ctx->pool->q8_level >= 1) {
        forge__avx2_halves(src, dst, n);
        return;
    }
#else
    (void)ctx;
#endif
    forge_dequantize(kv_type, src, dst, n);
}

/* q . k in double, 4 lanes at a time where the pool found AVX2 and the rows are whole groups of 8
   (the attention and its patterns share it, so a pattern's scores are the attention's). */
static double forge__attn_dot(const forge_context *ctx, const float *q, const float *k, uint32_t n) {
    double s = 0.0;
    uint32_t i;
#ifdef FORGE__AVX2
    if (n % 8 == 0 && ctx->pool && ctx->pool->q8_level >= 1) return forge__avx2_dot_fd(q, k, n);
#else
    (void)ctx;
#endif
    for (i = 0; i < n; i++) s += (double)q[i] * k[i];
    return s;
}

static void forge__attn_task(void *user, uint32_t task, uint32_t n_tasks, uint32_t thread) {
    forge__attn_job *job = (forge__attn_job *)user;
    forge_context *ctx = job->ctx;
    const forge_config *c = ctx->c;
    uint32_t layer = job->op->layer, n_head = job->op->n, n_kv = c->layer_n_head_kv[layer];
    uint32_t t = task / n_head, h = task % n_head, kv_head = h / (n_head / n_kv), p, i;
    uint32_t pos = forge__row_pos(ctx, t), seq = forge__row_seq(ctx, t), hd = c->head_dim, hdv = c->head_dim_v;
    uint32_t first = forge__attn_first(c, layer, pos);
    const double cap = (double)c->attn_softcap;
    uint32_t kv_type = forge__kv_storage_type(ctx->r.kv_type);
    const float *q = job->q + (uint64_t)t * n_head * hd + (uint64_t)h * hd;
    float *out = job->out + (uint64_t)t * n_head * hdv + (uint64_t)h * hdv;
    float krow[FORGE__MAX_HEAD_DIM], vrow[FORGE__MAX_HEAD_DIM];
    double acc[FORGE__MAX_HEAD_DIM], max = -INFINITY, sum = 0.0;
    const double scale = (double)c->attn_scale;
#ifdef FORGE__AVX2
    const int vec = ctx->pool && ctx->pool->q8_level >= 1 && hd % 8 == 0 && hdv % 8 == 0; /* the sums 4 lanes at a time */
#endif
    (void)n_tasks;
    (void)thread;
    for (i = 0; i < hdv; i++) acc[i] = 0.0;
    for (p = first; p <= pos; p++) {
        double s = 0.0, w, shrink = 1.0;
        forge__kv_row_f32(ctx, kv_type, forge__k_row(ctx, seq, layer, p, kv_head), krow, hd);
        s = forge__attn_dot(ctx, q, krow, hd);
        s *= scale;
        if (cap > 0.0) s = cap * tanh(s / cap);
        if (s > max) { /* rescale what was accumulated under the old maximum */
            shrink = exp(max - s);
            sum *= shrink;
            max = s;
        }
        w = exp(s - max);
        sum += w;
        forge__kv_row_f32(ctx, kv_type, forge__v_row(ctx, seq, layer, p, kv_head), vrow, hdv);
#ifdef FORGE__AVX2
        if (vec) {
            forge__avx2_axpy_fd(acc, shrink, w, vrow, hdv);
            continue;
        }
#endif
        if (shrink != 1.0)
            for (i = 0; i < hdv; i++) acc[i] *= shrink;
        for (i = 0; i < hdv; i++) acc[i] += w * vrow[i];
    }
    for (i = 0; i < hdv; i++) out[i] = (float)(acc[i] / sum);
}

/* Attention patterns: for one (token, chosen head) per task, the probabilities the attention of that
   head gives the keys of the window. The scores are the attention task's own (the same key reads, the
   same double arithmetic, scale and soft-cap); a first pass finds their maximum and the softmax's sum
   over every key the query sees, a second recomputes the window's scores and writes exp(s - max) / sum,
   0 for keys the query cannot see. Nothing is buffered: the work is twice the window's dot products. */
typedef struct forge__pattern_job {
    forge_context *ctx;
    const forge__op *op;
    const float *q;
    uint8_t *dst;
    uint32_t heads, keys;
} forge__pattern_job;

/* One attention score: q . k of position p, scaled and soft-capped as forge__attn_task does. */
static double forge__attn_score(forge_context *ctx, const float *q, uint32_t seq, uint32_t layer, uint32_t p, uint32_t kv_head,
                                float *krow) {
    const forge_config *c = ctx->c;
    double s;
    forge__kv_row_f32(ctx, forge__kv_storage_type(ctx->r.kv_type), forge__k_row(ctx, seq, layer, p, kv_head), krow, c->head_dim);
    s = forge__attn_dot(ctx, q, krow, c->head_dim);
    s *= (double)c->attn_scale;
    if (c->attn_softcap > 0.0f) s = (double)c->attn_softcap * tanh(s / (double)c->attn_softcap);
    return s;
}

static uint16_t forge__f32_to_bf16(float f);

/* value i of a capture region of type t */
static void forge__capture_put(forge_capture_dtype t, float x, uint8_t *dst, uint64_t i) {
    if (t == FORGE_CAPTURE_F32) {
        memcpy(dst + 4 * i, &x, 4);
    } else {
        uint16_t h = t == FORGE_CAPTURE_F16 ? forge_f32_to_f16(x) : forge__f32_to_bf16(x);
        dst[2 * i] = (uint8_t)(h & 0xff);
        dst[2 * i + 1] = (uint8_t)(h >> 8);
    }
}

static void forge__pattern_task(void *user, uint32_t task, uint32_t n_tasks, uint32_t thread) {
    forge__pattern_job *job = (forge__pattern_job *)user;
    forge_context *ctx = job->ctx;
    const forge_config *c = ctx->c;
    uint32_t layer = job->op->layer, n_head = job->op->n, n_kv = c->layer_n_head_kv[layer];
    uint32_t t = task / job->heads, hh = task % job->heads, h = ctx->r.pattern_head_first + hh, kv_head = h / (n_head / n_kv);
    uint32_t pos = forge__row_pos(ctx, t), seq = forge__row_seq(ctx, t), p, j;
    uint32_t first = forge__attn_first(c, layer, pos);
    const float *q = job->q + (uint64_t)t * n_head * c->head_dim + (uint64_t)h * c->head_dim;
    uint64_t row = ((uint64_t)t * job->heads + hh) * job->keys;
    float krow[FORGE__MAX_HEAD_DIM];
    double max = -INFINITY, sum = 0.0;
    (void)n_tasks;
    (void)thread;
    for (p = first; p <= pos; p++) {
        double s = forge__attn_score(ctx, q, seq, layer, p, kv_head, krow);
        if (s > max) {
            sum *= exp(max - s);
            max = s;
        }
        sum += exp(s - max);
    }
    for (j = 0; j < job->keys; j++) {
        uint32_t key = ctx->r.pattern_key_first + j;
        double w = key >= first && key <= pos ? exp(forge__attn_score(ctx, q, seq, layer, key, kv_head, krow) - max) / sum : 0.0;
        forge__capture_put(ctx->r.capture_dtype, (float)w, job->dst, row + j);
    }
}

/* Rotary embedding of n_heads heads of tokens first..end-1; sliding-window layers may use their own
   base and scale (gemma3). Each frequency's power is taken once per call (the same double as inline). */
static void forge__rope(forge_context *ctx, float *x, uint32_t n_heads, uint32_t layer, uint32_t first, uint32_t end) {
    const forge_config *c = ctx->c;
    uint32_t t, h, i, half = c->n_rot / 2;
    const double base = (double)(c->layer_is_swa[layer] ? c->rope_freq_base_swa : c->rope_freq_base);
    const double freq_scale = (double)(c->layer_is_swa[layer] ? c->rope_freq_scale_swa : c->rope_freq_scale);
    double power[FORGE__MAX_HEAD_DIM / 2];
    for (i = 0; i < half; i++) power[i] = pow(base, -2.0 * i / c->n_rot);
    for (t = first; t < end; t++) {
        double pos = (double)forge__row_pos(ctx, t);
        for (i = 0; i < half; i++) {
            double theta = pos * freq_scale * power[i] / (double)ctx->rope_factors[i];
            float cs = (float)cos(theta), sn = (float)sin(theta);
            for (h = 0; h < n_heads; h++) {
                float *v = x + ((uint64_t)t * n_heads + h) * c->head_dim;
                uint32_t a = c->rope_type == FORGE_ROPE_NEOX ? i : 2 * i;
                uint32_t b = c->rope_type == FORGE_ROPE_NEOX ? i + half : 2 * i + 1;
                float x0 = v[a], x1 = v[b];
                v[a] = x0 * cs - x1 * sn;
                v[b] = x0 * sn + x1 * cs;
            }
        }
    }
}

/* f32 -> bf16 bits, rounded to nearest even; NaN stays NaN */
static uint16_t forge__f32_to_bf16(float f) {
    uint32_t bits;
    memcpy(&bits, &f, 4);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40u);
    return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

/* n floats into a capture region as the capture type (little-endian halves) */
static void forge__capture_store(forge_capture_dtype t, const float *x, uint64_t n, uint8_t *dst) {
    uint64_t i;
    if (t == FORGE_CAPTURE_F32) {
        memcpy(dst, x, (size_t)n * sizeof(float));
        return;
    }
    for (i = 0; i < n; i++) {
        uint16_t h = t == FORGE_CAPTURE_F16 ? forge_f32_to_f16(x[i]) : forge__f32_to_bf16(x[i]);
        dst[2 * i] = (uint8_t)(h & 0xff);
        dst[2 * i + 1] = (uint8_t)(h >> 8);
    }
}

/* GELU in its tanh form, as the Gemma models were trained with */
static float forge__gelu(float x) {
    const double u = 0.7978845608028654 * ((double)x + 0.044715 * (double)x * x * x);
    return (float)(0.5 * x * (1.0 + tanh(u)));
}

/* out[i] = act(g[i]) * u[i] for n elements (out may be g): GELU (tanh form) or SiLU; 8 lanes at a time
   where the pool found AVX2 (forge__avx2_glu: within a few ulp of these), else the portable forms. */
static void forge__glu(const forge_context *ctx, const float *g, const float *u, float *out, uint64_t n, int gelu) {
    uint64_t j;
#ifdef FORGE__AVX2
    if (ctx->pool && ctx->pool->q8_level >= 1) {
        forge__avx2_glu(g, u, out, n, gelu);
        return;
    }
#else
    (void)ctx;
#endif
    if (gelu)
        for (j = 0; j < n; j++) out[j] = forge__gelu(g[j]) * u[j];
    else
        for (j = 0; j < n; j++) out[j] = g[j] / (1.0f + expf(-g[j])) * u[j];
}

/* The k experts of largest router probability (softmax of the logits; ties go to the lower index),
   in descending order: route[0..k) the ids (as floats), route[k..2k) their probabilities, divided
   by their sum when renorm is set. */
static void forge__route(const float *logits, uint32_t n_expert, uint32_t k, uint32_t renorm, float *route) {
    double p[FORGE__MAX_EXPERTS], max = -INFINITY, sum = 0.0, chosen = 0.0;
    uint8_t taken[FORGE__MAX_EXPERTS];
    uint32_t e, j;
    for (e = 0; e < n_expert; e++) max = logits[e] > max ? logits[e] : max;
    for (e = 0; e < n_expert; e++) sum += p[e] = exp((double)logits[e] - max);
    for (e = 0; e < n_expert; e++) p[e] /= sum, taken[e] = 0;
    for (j = 0; j < k; j++) {
        uint32_t best = UINT32_MAX;
        for (e = 0; e < n_expert; e++)
            if (!taken[e] && (best == UINT32_MAX || p[e] > p[best])) best = e;
        taken[best] = 1;
        route[j] = (float)best;
        route[k + j] = (float)p[best];
        chosen += p[best];
    }
    if (renorm)
        for (j = 0; j < k; j++) route[k + j] = (float)(p[(uint32_t)route[j]] / chosen);
}

static void forge__load_vector(const forge_gguf_tensor *t, float *out) {
    forge_dequantize(t->type, t->data, out, t->n_elements);
}

/* y = W x for n_tokens rows of x: on 8-bit activations where the type has integer dot products and
   the context allows them, else on f32. */
static void forge__cpu_product(forge_context *ctx, uint32_t type, const uint8_t *w, uint64_t row_bytes, uint32_t n_rows,
                               uint32_t n_cols, const float *x, float *y, uint32_t n_tokens) {
    if (ctx->cpu_q8 && forge__matmul_q8_supported(type, n_cols))
        forge__matmul_q8(ctx->pool, type, w, row_bytes, n_rows, n_cols, x, y, n_tokens, ctx->q8_work, 2);
    else
        forge__matmul(ctx->pool, type, w, row_bytes, n_rows, n_cols, x, y, n_tokens, ctx->work);
}

/* How many products from op k on read the same activations and run as one forge__matmul_q8_parts
   call (q, k and v; gate and up): consecutive matmuls of the same source and width, on 8-bit
   activations, within one part of a split schedule, none writing what the next reads. 1 where op k
   runs alone. */
static uint32_t forge__cpu_products_fused(const forge_context *ctx, uint32_t k) {
    const forge__op *op = &ctx->sched.ops[k];
    forge__q8_part parts[FORGE__Q8_MAX_PARTS];
    uint32_t n = 0;
    if (!ctx->cpu_q8) return 1;
    while (n < FORGE__Q8_MAX_PARTS && k + n < ctx->sched.n_ops && (n == 0 || k + n != ctx->op_end)) {
        const forge__op *o = &ctx->sched.ops[k + n];
        if (!forge__op_same_input(op, o)) break;
        parts[n].type = o->w->type, parts[n].w = NULL, parts[n].row_bytes = 0, parts[n].n_rows = o->n, parts[n].y = NULL;
        if (!forge__matmul_q8_parts_supported(parts, n + 1, (uint32_t)op->w->ne[0])) break;
        n++;
    }
    return n > 1 ? n : 1;
}

/* The n_mats products of ops op[0..n_mats) (forge__cpu_products_fused) in one call. */
static void forge__cpu_products(forge_context *ctx, const forge__op *op, uint32_t n_mats) {
    forge__q8_part parts[FORGE__Q8_MAX_PARTS];
    uint32_t j;
    for (j = 0; j < n_mats; j++) {
        parts[j].type = op[j].w->type;
        parts[j].w = forge__cpu_w(ctx, op[j].w);
        parts[j].row_bytes = op[j].w->n_bytes / op[j].w->ne[1];
        parts[j].n_rows = op[j].n;
        parts[j].y = forge__val(ctx, op[j].dst);
    }
    forge__matmul_q8_parts(ctx->pool, parts, n_mats, (uint32_t)op->w->ne[0], forge__val(ctx, op->src), ctx->n_tokens, ctx->q8_work, 2);
}

/* Runs the schedule on ctx->tokens[0..n_tokens) at positions pos.. */
/* At the boundary before op b: the values it carries into the next part's scratch (the same offsets
   in every part), and the next part loaded. */
static void forge__cpu_cross(forge_context *ctx, uint32_t b) {
    const forge__part *from = &ctx->part[ctx->cur_part], *to = &ctx->part[ctx->cur_part + 1];
    uint32_t v;
    for (v = 0; v < ctx->sched.n_values; v++)
        if (forge__crosses(&ctx->sched.values[v], b))
            memcpy((uint8_t *)to->scratch + ctx->sched.values[v].offset, (const uint8_t *)from->scratch + ctx->sched.values[v].offset,
                   (size_t)ctx->sched.values[v].width * ctx->n_tokens * sizeof(float));
    forge__part_load(ctx, ctx->cur_part + 1);
}

/* The ops that work token by token (norms, rotary embedding, the cache store, the gated activations):
   tokens first..end-1 of op; w the op's weights in f32 where it has them. */
static void forge__cpu_rows(forge_context *ctx, const forge__op *op, const float *w, uint32_t first, uint32_t end) {
    const forge_config *c = ctx->c;
    uint32_t t, h;
    switch (op->kind) {
    case FORGE__OP_RMSNORM: {
        const float *x = forge__val(ctx, op->src);
        float *y = forge__val(ctx, op->dst);
        for (t = first; t < end; t++) forge__rmsnorm_row(x + (uint64_t)t * op->n, w, y + (uint64_t)t * op->n, op->n, c->rms_eps);
        break;
    }
    case FORGE__OP_HEADNORM: {
        float *x = forge__val(ctx, op->dst);
        for (t = first; t < end; t++)
            for (h = 0; h < op->n; h++) {
                float *row = x + ((uint64_t)t * op->n + h) * c->head_dim;
                forge__rmsnorm_row(row, w, row, c->head_dim, c->rms_eps);
            }
        break;
    }
    case FORGE__OP_ROPE: forge__rope(ctx, forge__val(ctx, op->dst), op->n, op->layer, first, end); break;
    case FORGE__OP_KV_STORE: {
        const float *kx = forge__val(ctx, op->src), *vx = forge__val(ctx, op->src2);
        for (t = first; t < end; t++)
            for (h = 0; h < op->n; h++) {
                forge__kv_encode(ctx->r.kv_type, kx + ((uint64_t)t * op->n + h) * c->head_dim, c->head_dim,
                                 forge__k_row(ctx, forge__row_seq(ctx, t), op->layer, forge__row_pos(ctx, t), h));
                forge__kv_encode(ctx->r.kv_type, vx + ((uint64_t)t * op->n + h) * c->head_dim_v, c->head_dim_v,
                                 forge__v_row(ctx, forge__row_seq(ctx, t), op->layer, forge__row_pos(ctx, t), h));
            }
        break;
    }
    case FORGE__OP_SWIGLU:
    case FORGE__OP_GEGLU: {
        float *g = forge__val(ctx, op->dst);
        const float *u = forge__val(ctx, op->src);
        const uint64_t at = (uint64_t)first * op->n;
        forge__glu(ctx, g + at, u + at, g + at, (uint64_t)(end - first) * op->n, op->kind == FORGE__OP_GEGLU);
        break;
    }
    default: break;
    }
}

typedef struct forge__rows_job {
    forge_context *ctx;
    const forge__op *op;
    const float *w;
    uint32_t tokens_per_task;
} forge__rows_job;

static void forge__rows_task(void *user, uint32_t task, uint32_t n_tasks, uint32_t thread) {
    const forge__rows_job *job = (const forge__rows_job *)user;
    const uint32_t first = task * job->tokens_per_task;
    (void)n_tasks;
    (void)thread;
    forge__cpu_rows(job->ctx, job->op, job->w, first, FORGE__MIN(first + job->tokens_per_task, job->ctx->n_tokens));
}

/* forge__cpu_rows for every token of the step: shared among the pool's threads (a few tokens a task;
   each token's values are the same whoever computes them), on the caller alone for one token. */
static void forge__cpu_rows_all(forge_context *ctx, const forge__op *op, const float *w) {
    const uint32_t n = ctx->n_tokens, threads = forge__pool_size(ctx->pool);
    forge__rows_job job;
    if (n < 2 || threads < 2) {
        forge__cpu_rows(ctx, op, w, 0, n);
        return;
    }
    job.ctx = ctx;
    job.op = op;
    job.w = w;
    job.tokens_per_task = (n + threads * 4 - 1) / (threads * 4);
    forge__pool_run(ctx->pool, forge__rows_task, &job, (n + job.tokens_per_task - 1) / job.tokens_per_task);
}

static void forge__run_schedule(forge_context *ctx) {
    const forge_config *c = ctx->c;
    uint32_t k, t, i, n = ctx->n_tokens;
    float vec[2 * FORGE__MAX_HEAD_DIM]; /* norm weights of one head */
    if (ctx->n_parts > 1) forge__part_load(ctx, 0);
    for (k = 0; k < ctx->sched.n_ops; k++) {
        const forge__op *op = &ctx->sched.ops[k];
        if (k == ctx->op_end && ctx->cur_part + 1 < ctx->n_parts) forge__cpu_cross(ctx, k);
        switch (op->kind) {
        case FORGE__OP_EMBED: {
            float *x = forge__val(ctx, op->dst);
            uint64_t row_bytes = op->w->n_bytes / op->w->ne[1];
            for (t = 0; t < n; t++) {
                float *row = x + (uint64_t)t * op->n;
                forge_dequantize(op->w->type, forge__cpu_w(ctx, op->w) + (uint64_t)ctx->tokens[t] * row_bytes, row, op->n);
                if (c->embd_scale != 1.0f)
                    for (i = 0; i < op->n; i++) row[i] *= c->embd_scale;
            }
            break;
        }
        case FORGE__OP_RMSNORM:
            forge__load_vector(op->w, ctx->vec);
            forge__cpu_rows_all(ctx, op, ctx->vec);
            break;
        case FORGE__OP_MATMUL: {
            uint32_t cols = (uint32_t)op->w->ne[0], n_mats = forge__cpu_products_fused(ctx, k), j;
            if (n_mats > 1)
                forge__cpu_products(ctx, op, n_mats);
            else
                forge__cpu_product(ctx, op->w->type, forge__cpu_w(ctx, op->w), op->w->n_bytes / op->w->ne[1], op->n, cols,
                                   forge__val(ctx, op->src), forge__val(ctx, op->dst), n);
            for (j = 0; j < n_mats; j++) {
                float *y = forge__val(ctx, op[j].dst);
                if (op[j].bias) {
                    float *b = ctx->vec;
                    forge__load_vector(op[j].bias, b);
                    for (t = 0; t < n; t++)
                        for (i = 0; i < op[j].n; i++) y[(uint64_t)t * op[j].n + i] += b[i];
                }
            }
            k += n_mats - 1;
            break;
        }
        case FORGE__OP_HEADNORM:
            forge__load_vector(op->w, vec);
            forge__cpu_rows_all(ctx, op, vec);
            break;
        case FORGE__OP_ROPE:
        case FORGE__OP_KV_STORE: forge__cpu_rows_all(ctx, op, NULL); break;
        case FORGE__OP_ATTENTION: {
            forge__attn_job job;
            job.ctx = ctx;
            job.op = op;
            job.q = forge__val(ctx, op->src);
            job.out = forge__val(ctx, op->dst);
            forge__pool_run(ctx->pool, forge__attn_task, &job, n * op->n);
            break;
        }
        case FORGE__OP_ADD: {
            float *x = forge__val(ctx, op->dst);
            const float *y = forge__val(ctx, op->src);
            uint64_t total = (uint64_t)n * op->n, j;
            for (j = 0; j < total; j++) x[j] += y[j];
            break;
        }
        case FORGE__OP_SWIGLU:
        case FORGE__OP_GEGLU: forge__cpu_rows_all(ctx, op, NULL); break;
        case FORGE__OP_LOGITS: { /* the last row, or every row's with all_logits */
            uint32_t rows = ctx->r.all_logits ? FORGE__MIN(ctx->r.n_logits, n) : 1;
            const float *x = forge__val(ctx, op->src) + (uint64_t)(n - rows) * c->n_embd;
            if (ctx->rows) { /* the kept rows moved to the front, in order (the final norm is read by nothing after) */
                float *xs = forge__val(ctx, op->src);
                rows = ctx->n_logit_rows;
                for (i = 0; i < rows; i++)
                    if (ctx->logit_src[i] != i)
                        memcpy(xs + (uint64_t)i * c->n_embd, xs + (uint64_t)ctx->logit_src[i] * c->n_embd, c->n_embd * sizeof(float));
                x = xs;
            }
            forge__cpu_product(ctx, op->w->type, forge__cpu_w(ctx, op->w), op->w->n_bytes / op->w->ne[1], op->n,
                               (uint32_t)op->w->ne[0], x, ctx->logits, rows);
            if (c->final_softcap > 0.0f) {
                uint64_t total = (uint64_t)rows * op->n, j;
                for (j = 0; j < total; j++) ctx->logits[j] = c->final_softcap * tanhf(ctx->logits[j] / c->final_softcap);
            }
            ctx->n_logit_rows = rows;
            break;
        }
        case FORGE__OP_GLU_SPLIT: {
            float *y = forge__val(ctx, op->dst);
            const float *x = forge__val(ctx, op->src);
            for (t = 0; t < n; t++) {
                const float *a = x + (uint64_t)t * 2 * op->n;
                forge__glu(ctx, a, a + op->n, y + (uint64_t)t * op->n, op->n, op->aux != 0);
            }
            break;
        }
        case FORGE__OP_COPY_COLS: {
            float *y = forge__val(ctx, op->dst);
            const float *x = forge__val(ctx, op->src);
            uint32_t width = ctx->sched.values[op->src].width;
            for (t = 0; t < n; t++) memcpy(y + (uint64_t)t * op->n, x + (uint64_t)t * width + op->aux, op->n * sizeof(float));
            break;
        }
        case FORGE__OP_ROUTE: {
            uint32_t k = ctx->sched.values[op->dst].width / 2;
            for (t = 0; t < n; t++)
                forge__route(forge__val(ctx, op->src) + (uint64_t)t * op->n, op->n, k, op->aux,
                             forge__val(ctx, op->dst) + (uint64_t)t * 2 * k);
            break;
        }
        case FORGE__OP_MATMUL_ID: {
            const float *route = forge__val(ctx, op->src2), *x = forge__val(ctx, op->src);
            float *y = forge__val(ctx, op->dst);
            uint32_t k = ctx->sched.values[op->src2].width / 2, j, cols = (uint32_t)op->w->ne[0];
            uint64_t expert_bytes = op->w->n_bytes / op->w->ne[2], row_bytes = expert_bytes / op->w->ne[1];
            for (t = 0; t < n; t++)
                for (j = 0; j < k; j++) {
                    uint32_t e = (uint32_t)route[(uint64_t)t * 2 * k + j];
                    if (e >= op->w->ne[2]) e = 0; /* cannot happen: forge__route writes the ids */
                    const float *in = x + (op->aux ? ((uint64_t)t * k + j) * cols : (uint64_t)t * cols);
                    forge__cpu_product(ctx, op->w->type, forge__cpu_w(ctx, op->w) + e * expert_bytes, row_bytes, op->n, cols, in,
                                       y + ((uint64_t)t * k + j) * op->n, 1);
                }
            break;
        }
        case FORGE__OP_MOE_SUM: {
            const float *route = forge__val(ctx, op->src2), *x = forge__val(ctx, op->src);
            float *y = forge__val(ctx, op->dst);
            uint32_t k = ctx->sched.values[op->src2].width / 2, j;
            for (t = 0; t < n; t++) {
                float *row = y + (uint64_t)t * op->n;
                for (i = 0; i < op->n; i++) row[i] = 0.0f;
                for (j = 0; j < k; j++) {
                    const float w = route[(uint64_t)t * 2 * k + k + j], *part = x + ((uint64_t)t * k + j) * op->n;
                    for (i = 0; i < op->n; i++) row[i] += w * part[i];
                }
            }
            break;
        }
        case FORGE__OP_SIGMOID_SCALE: {
            float *y = forge__val(ctx, op->dst);
            const float *gs = forge__val(ctx, op->src);
            uint32_t width = ctx->sched.values[op->src].width;
            for (t = 0; t < n; t++) {
                const float gate = 1.0f / (1.0f + expf(-gs[(uint64_t)t * width]));
                for (i = 0; i < op->n; i++) y[(uint64_t)t * op->n + i] *= gate;
            }
            break;
        }
        case FORGE__OP_CAPTURE:
            forge__capture_store(ctx->r.capture_dtype, forge__val(ctx, op->src), (uint64_t)n * op->n,
                                 ctx->capture + ctx->capture_offset[op->aux]);
            break;
        case FORGE__OP_PATTERN: {
            forge__pattern_job job;
            job.ctx = ctx;
            job.op = op;
            job.q = forge__val(ctx, op->src);
            job.dst = ctx->capture + ctx->capture_offset[op->aux];
            job.heads = ctx->sched.capture_heads[op->aux];
            job.keys = ctx->sched.capture_width[op->aux] / job.heads;
            forge__pool_run(ctx->pool, forge__pattern_task, &job, n * job.heads);
            break;
        }
        }
    }
}

/* The chunk just evaluated goes to the capture callback; first_pos: where a forge_eval chunk starts
   (a batch step's rows carry their own positions). */
static void forge__deliver_captures(forge_context *ctx, uint32_t first_pos) {
    forge_capture_chunk chunk;
    if (!ctx->sched.n_captures) return;
    ctx->capture_pos = first_pos;
    ctx->capture_tokens = ctx->n_tokens;
    ctx->capture_rows = ctx->rows;
    if (ctx->on_capture && forge_context_captures(ctx, &chunk)) ctx->on_capture(ctx->capture_user_data, &chunk);
}

/* After a forge_eval: its logits rows are sequence 0's; no other sequence had a row. */
static void forge__seq_rows_single(forge_context *ctx) {
    uint32_t s;
    for (s = 1; s < ctx->r.n_seq; s++) ctx->seq_row[s] = UINT32_MAX;
    ctx->seq_row[0] = ctx->n_logit_rows ? ctx->n_logit_rows - 1 : UINT32_MAX;
}

static forge_result forge__eval(forge_context *ctx, const int32_t *tokens, uint32_t n_tokens, forge_error *error) {
    uint32_t done = 0, i;
    if (!ctx || (!tokens && n_tokens)) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_eval: null argument");
    if (n_tokens == 0) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_eval: no tokens");
    if ((uint64_t)ctx->pos + n_tokens > ctx->r.n_ctx)
        return forge__fail(error, FORGE_ERR_ARGUMENT,
                           "the context holds %u positions; %u are used and %u more do not fit", ctx->r.n_ctx, ctx->pos,
                           n_tokens);
    for (i = 0; i < n_tokens; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= ctx->c->n_vocab)
            return forge__fail(error, FORGE_ERR_ARGUMENT, "token %d at index %u is outside the vocabulary of %u",
                               (int)tokens[i], i, ctx->c->n_vocab);
    while (done < n_tokens) {
        ctx->tokens = tokens + done;
        ctx->n_tokens = FORGE__MIN(ctx->r.n_batch, n_tokens - done);
        if (ctx->r.backend == FORGE_BACKEND_GPU) {
            forge_result r = forge__gpu_run_schedule(ctx, error);
            if (r) return r;
        } else {
            forge__run_schedule(ctx);
        }
        forge__deliver_captures(ctx, ctx->pos);
        ctx->pos += ctx->n_tokens;
        ctx->seq_pos[0] = ctx->pos;
        done += ctx->n_tokens;
    }
    forge__seq_rows_single(ctx);
    forge__ok(error);
    return FORGE_OK;
}

static forge_result forge__eval_batch(forge_context *ctx, const forge_batch *b, forge_error *error) {
    uint32_t i, n, rows = 0;
    forge_result r = FORGE_OK;
    if (!ctx || !b || (!b->tokens && b->n_tokens)) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_eval_batch: null argument");
    n = b->n_tokens;
    if (n == 0) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_eval_batch: a step with no rows (no sequence to advance)");
    if (n > ctx->r.n_batch)
        return forge__fail(error, FORGE_ERR_ARGUMENT, "a step of %u rows is above the context's batch of %u", n, ctx->r.n_batch);
    for (i = 0; i < n; i++) {
        const uint32_t s = b->seq ? b->seq[i] : 0;
        if (s >= ctx->r.n_seq)
            return forge__fail(error, FORGE_ERR_ARGUMENT, "row %u names sequence %u; the context has %u (0 .. %u)", i, s, ctx->r.n_seq,
                               ctx->r.n_seq - 1);
        if (b->tokens[i] < 0 || (uint32_t)b->tokens[i] >= ctx->c->n_vocab)
            return forge__fail(error, FORGE_ERR_ARGUMENT, "token %d at row %u is outside the vocabulary of %u", (int)b->tokens[i], i,
                               ctx->c->n_vocab);
    }
    for (i = 0; i < n && (!b->seq || b->seq[i] == 0); i++) {}
    if (i == n) return forge_eval(ctx, b->tokens, n, error); /* sequence 0 alone: the one-sequence path (its decode graph) */
    for (i = 0; i < n; i++) ctx->seq_count[b->seq ? b->seq[i] : 0] = 0;
    for (i = 0; i < n; i++) { /* each row's position, the next of its sequence */
        const uint32_t s = b->seq ? b->seq[i] : 0;
        ctx->row_seq[i] = s;
        ctx->row_pos[i] = ctx->seq_pos[s] + ctx->seq_count[s]++;
        ctx->row_pos_max = i ? FORGE__MAX(ctx->row_pos_max, ctx->row_pos[i]) : ctx->row_pos[i];
    }
    for (i = 0; i < n; i++) {
        const uint32_t s = ctx->row_seq[i];
        if ((uint64_t)ctx->seq_pos[s] + ctx->seq_count[s] > ctx->r.n_ctx)
            return forge__fail(error, FORGE_ERR_ARGUMENT,
                               "sequence %u holds %u of its %u positions; %u more do not fit (reset it to go on)", s,
                               ctx->seq_pos[s], ctx->r.n_ctx, ctx->seq_count[s]);
    }
    for (i = 0; i < n; i++) { /* the kept logits: every row's, or each sequence's last row's */
        const uint32_t s = ctx->row_seq[i];
        if (ctx->r.all_logits || ctx->row_pos[i] + 1 == ctx->seq_pos[s] + ctx->seq_count[s]) ctx->logit_src[rows++] = i;
    }
    ctx->tokens = b->tokens;
    ctx->n_tokens = n;
    ctx->n_logit_rows = rows;
    ctx->rows = 1;
    if (ctx->r.backend == FORGE_BACKEND_GPU) r = forge__gpu_run_schedule(ctx, error);
    else forge__run_schedule(ctx);
    if (r == FORGE_OK) forge__deliver_captures(ctx, 0);
    ctx->rows = 0;
    for (i = 0; i < ctx->r.n_seq; i++) ctx->seq_row[i] = UINT32_MAX;
    if (r) {
        ctx->n_logit_rows = 0;
        return r;
    }
    for (i = 0; i < rows; i++) ctx->seq_row[ctx->row_seq[ctx->logit_src[i]]] = i; /* a sequence's last kept row is its last token's */
    for (i = 0; i < n; i++) ctx->seq_pos[ctx->row_seq[i]] = ctx->row_pos[i] + 1;
    ctx->pos = ctx->seq_pos[0];
    forge__ok(error);
    return FORGE_OK;
}

FORGE_API uint32_t forge_context_n_seq(const forge_context *ctx) { return ctx ? ctx->r.n_seq : 0; }
FORGE_API uint32_t forge_seq_pos(const forge_context *ctx, uint32_t seq) { return ctx && seq < ctx->r.n_seq ? ctx->seq_pos[seq] : 0; }

/* FORGE_OK when ctx has a sequence seq, else a failure naming the ids it has. */
static forge_result forge__seq_known(const forge_context *ctx, uint32_t seq, forge_error *error) {
    if (!ctx) return forge__fail(error, FORGE_ERR_ARGUMENT, "null context");
    if (seq >= ctx->r.n_seq)
        return forge__fail(error, FORGE_ERR_ARGUMENT, "sequence %u is unknown; the context has %u (0 .. %u)", seq, ctx->r.n_seq,
                           ctx->r.n_seq - 1);
    return FORGE_OK;
}

FORGE_API forge_result forge_seq_reset(forge_context *ctx, uint32_t seq, forge_error *error) {
    forge_result r;
    if ((r = forge__seq_known(ctx, seq, error))) return r;
    ctx->seq_pos[seq] = 0;
    ctx->seq_row[seq] = UINT32_MAX;
    if (seq == 0) ctx->pos = 0;
    forge__ok(error);
    return FORGE_OK;
}

/* seq's logits row of the last step, or a failure naming why there is none. */
static forge_result forge__seq_row(const forge_context *ctx, uint32_t seq, uint32_t *row, forge_error *error) {
    forge_result r;
    if ((r = forge__seq_known(ctx, seq, error))) return r;
    if (ctx->seq_row[seq] == UINT32_MAX || ctx->seq_row[seq] >= ctx->n_logit_rows)
        return forge__fail(error, FORGE_ERR_ARGUMENT, "sequence %u had no row in the last step: no logits", seq);
    *row = ctx->seq_row[seq];
    return FORGE_OK;
}

FORGE_API const float *forge_seq_logits(const forge_context *ctx, uint32_t seq) {
    uint32_t row = 0, rows = 0;
    const float *all;
    if (forge__seq_row(ctx, seq, &row, NULL)) return NULL;
    all = forge_context_logits(ctx, &rows);
    return all && row < rows ? all + (uint64_t)row * ctx->c->n_vocab : NULL;
}

static forge_result forge__seq_argmax(forge_context *ctx, uint32_t seq, int32_t *out_token, forge_error *error) {
    uint32_t row = 0;
    forge_result r;
    if (out_token) *out_token = -1;
    if (!out_token) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_seq_argmax: null argument");
    if ((r = forge__seq_row(ctx, seq, &row, error))) return r;
    return forge__argmax_row(ctx, row, out_token, error);
}

static forge_result forge__seq_sample(forge_context *ctx, uint32_t seq, forge_sampler *sampler, int32_t *out_token,
                                      forge_error *error) {
    uint32_t row = 0;
    forge_result r;
    if (out_token) *out_token = -1;
    if (!sampler || !out_token) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_seq_sample: null argument");
    if ((r = forge__seq_row(ctx, seq, &row, error))) return r;
    return forge__sample_row(ctx, sampler, row, out_token, error);
}

FORGE_API int forge_context_captures(const forge_context *ctx, forge_capture_chunk *out) {
    if (!ctx || !out || ctx->sched.n_captures == 0) return 0;
    out->pos = ctx->capture_pos;
    out->n_tokens = ctx->capture_tokens;
    out->n_captures = ctx->sched.n_captures;
    out->captures = ctx->sched.captures;
    out->data = ctx->capture_data;
    out->width = ctx->sched.capture_width;
    out->dtype = ctx->r.capture_dtype;
    out->seq = ctx->capture_rows ? ctx->row_seq : NULL;
    out->positions = ctx->capture_rows ? ctx->row_pos : NULL;
    return 1;
}

/* >>impl-capture */

static const char *const forge__capture_points[FORGE_CAPTURE_POINT_COUNT] = {"resid_pre", "attn_out", "mlp_out",
                                                                             "resid_post", "final", "pattern"};

FORGE_API const char *forge_capture_name(const forge_capture *capture, char *out, size_t out_bytes) {
    if (!out || out_bytes == 0) return out;
    if (!capture || (unsigned)capture->point >= FORGE_CAPTURE_POINT_COUNT) snprintf(out, out_bytes, "?");
    else if (capture->point == FORGE_CAPTURE_FINAL) snprintf(out, out_bytes, "ln_final.hook_normalized");
    else if (capture->point == FORGE_CAPTURE_ATTN_PATTERN) snprintf(out, out_bytes, "blocks.%u.attn.hook_pattern", capture->layer);
    else snprintf(out, out_bytes, "blocks.%u.hook_%s", capture->layer, forge__capture_points[capture->point]);
    return out;
}

FORGE_API const char *forge_capture_dtype_name(forge_capture_dtype dtype) {
    return dtype == FORGE_CAPTURE_F16 ? "f16" : dtype == FORGE_CAPTURE_BF16 ? "bf16" : "f32";
}

FORGE_API forge_result forge_capture_dtype_parse(const char *text, forge_capture_dtype *out, forge_error *error) {
    if (!text || !out) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_capture_dtype_parse: null argument");
    if (forge__ieq(text, "f32")) *out = FORGE_CAPTURE_F32;
    else if (forge__ieq(text, "f16")) *out = FORGE_CAPTURE_F16;
    else if (forge__ieq(text, "bf16")) *out = FORGE_CAPTURE_BF16;
    else return forge__fail(error, FORGE_ERR_ARGUMENT, "capture type '%.40s' is not one of f32, f16, bf16", text);
    return FORGE_OK;
}

/* A signed decimal integer filling [p, end) exactly. */
static int forge__parse_int(const char *p, const char *end, long *out) {
    long v = 0;
    int neg = 0;
    if (p < end && (*p == '-' || *p == '+')) neg = *p++ == '-';
    if (p == end) return 0;
    for (; p < end; p++) {
        if (*p < '0' || *p > '9' || v > 100000000L) return 0;
        v = v * 10 + (*p - '0');
    }
    *out = neg ? -v : v;
    return 1;
}

/* A layer index, negative ones counting from the end. */
static forge_result forge__capture_layer(const forge_config *c, long v, const char *item, int len, uint32_t *out,
                                         forge_error *e) {
    long layer = v < 0 ? (long)c->n_layer + v : v;
    if (layer < 0 || layer >= (long)c->n_layer)
        return forge__fail(e, FORGE_ERR_ARGUMENT, "layer '%.*s' is outside the model's %u layers (0 .. %u, or -1 .. -%u)", len,
                           item, c->n_layer, c->n_layer - 1, c->n_layer);
    *out = (uint32_t)layer;
    return FORGE_OK;
}

static forge_result forge__capture_add(forge_capture *out, uint32_t capacity, uint32_t *n, uint32_t layer,
                                       forge_capture_point point, forge_error *e) {
    uint32_t i;
    if (point == FORGE_CAPTURE_FINAL) layer = 0;
    for (i = 0; i < *n; i++)
        if (out[i].layer == layer && out[i].point == point) return FORGE_OK;
    if (*n >= capacity || *n >= FORGE_MAX_CAPTURES)
        return forge__fail(e, FORGE_ERR_LIMIT, "more than %u captures requested", FORGE__MIN(capacity, (uint32_t)FORGE_MAX_CAPTURES));
    out[*n].layer = layer;
    out[*n].point = point;
    (*n)++;
    return FORGE_OK;
}

/* Point name ("resid_post") to its id, -1 when unknown. */
static int forge__capture_point_of(const char *p, size_t len) {
    int i;
    for (i = 0; i < FORGE_CAPTURE_POINT_COUNT; i++)
        if (strlen(forge__capture_points[i]) == len && memcmp(p, forge__capture_points[i], len) == 0) return i;
    return -1;
}

FORGE_API forge_result forge_capture_parse(const forge_config *c, const char *layers, const char *points,
                                           forge_capture *out, uint32_t capacity, uint32_t *n_out, forge_error *error) {
    uint32_t layer_list[FORGE_MAX_LAYERS], n_layers = 0, n = 0, li = 0;
    const char *p, *end;
    forge_result r;
    int pass;
    if (!c || !points || !out || !n_out) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_capture_parse: null argument");
    *n_out = 0;
    /* the layers, in the order given */
    for (p = layers ? layers : ""; *p;) {
        const char *dash;
        long a, b;
        for (end = p; *end && *end != ','; end++) {}
        dash = NULL;
        if (end - p == 3 && memcmp(p, "all", 3) == 0) {
            for (li = 0; li < c->n_layer && n_layers < FORGE_MAX_LAYERS; li++) layer_list[n_layers++] = li;
        } else {
            const char *q;
            for (q = p + 1; q < end; q++) /* a range: "A-B", the dash after the first character */
                if (*q == '-' && q[-1] >= '0' && q[-1] <= '9') dash = q;
            if (dash ? !forge__parse_int(p, dash, &a) || !forge__parse_int(dash + 1, end, &b) : !forge__parse_int(p, end, &a))
                return forge__fail(error, FORGE_ERR_ARGUMENT, "'%.*s' is not a layer, a range A-B or 'all'", (int)(end - p), p);
            if (!dash) b = a;
            if ((r = forge__capture_layer(c, a, p, (int)(end - p), &li, error))) return r;
            {
                uint32_t last = 0;
                if ((r = forge__capture_layer(c, b, p, (int)(end - p), &last, error))) return r;
                if (last < li)
                    return forge__fail(error, FORGE_ERR_ARGUMENT, "layer range '%.*s' runs backwards", (int)(end - p), p);
                for (; li <= last && n_layers < FORGE_MAX_LAYERS; li++) layer_list[n_layers++] = li;
            }
        }
        p = *end ? end + 1 : end;
    }
    /* pass 0: plain point names, crossed with the layers; pass 1: hook names */
    for (pass = 0; pass < 2; pass++) {
        if (pass == 0) {
            for (li = 0; li < n_layers; li++)
                for (p = points; *p;) {
                    int point;
                    for (end = p; *end && *end != ','; end++) {}
                    point = forge__capture_point_of(p, (size_t)(end - p));
                    if (point >= 0 && point != FORGE_CAPTURE_FINAL && (r = forge__capture_add(out, capacity, &n, layer_list[li], (forge_capture_point)point, error)))
                        return r;
                    p = *end ? end + 1 : end;
                }
            for (p = points; *p;) { /* "final" needs no layer */
                for (end = p; *end && *end != ','; end++) {}
                if (forge__capture_point_of(p, (size_t)(end - p)) == FORGE_CAPTURE_FINAL &&
                    (r = forge__capture_add(out, capacity, &n, 0, FORGE_CAPTURE_FINAL, error)))
                    return r;
                p = *end ? end + 1 : end;
            }
            continue;
        }
        for (p = points; *p;) {
            size_t len;
            int point;
            for (end = p; *end && *end != ','; end++) {}
            len = (size_t)(end - p);
            point = forge__capture_point_of(p, len);
            if (point >= 0) {
                if (point != FORGE_CAPTURE_FINAL && n_layers == 0)
                    return forge__fail(error, FORGE_ERR_ARGUMENT, "point '%.*s' needs layers (e.g. 0,12,-1 or all)", (int)len, p);
            } else if ((len == 24 && memcmp(p, "ln_final.hook_normalized", 24) == 0)) {
                if ((r = forge__capture_add(out, capacity, &n, 0, FORGE_CAPTURE_FINAL, error))) return r;
            } else if (len > 7 && memcmp(p, "blocks.", 7) == 0) {
                const char *dot = p + 7;
                long v;
                uint32_t layer = 0;
                while (dot < end && *dot != '.') dot++;
                if (dot < end && (size_t)(end - dot) == 18 && memcmp(dot, ".attn.hook_pattern", 18) == 0)
                    point = FORGE_CAPTURE_ATTN_PATTERN; /* the one hook under blocks.L.attn */
                else if (dot == end || (size_t)(end - dot) < 6 || memcmp(dot, ".hook_", 6) != 0 ||
                         (point = forge__capture_point_of(dot + 6, (size_t)(end - dot - 6))) < 0 || point == FORGE_CAPTURE_FINAL ||
                         point == FORGE_CAPTURE_ATTN_PATTERN)
                    point = -1;
                if (point < 0 || !forge__parse_int(p + 7, dot, &v))
                    return forge__fail(error, FORGE_ERR_ARGUMENT,
                                       "'%.*s' is not a hook name (blocks.L.hook_resid_pre, _attn_out, _mlp_out, _resid_post, "
                                       "blocks.L.attn.hook_pattern)",
                                       (int)len, p);
                if ((r = forge__capture_layer(c, v, p, (int)len, &layer, error)) ||
                    (r = forge__capture_add(out, capacity, &n, layer, (forge_capture_point)point, error)))
                    return r;
            } else {
                return forge__fail(error, FORGE_ERR_ARGUMENT,
                                   "'%.*s' is not a capture point (resid_pre, attn_out, mlp_out, resid_post, final, pattern) or hook name",
                                   (int)len, p);
            }
            p = *end ? end + 1 : end;
        }
    }
    if (n == 0) return forge__fail(error, FORGE_ERR_ARGUMENT, "nothing to capture (layers '%s', points '%s')", layers ? layers : "", points);
    *n_out = n;
    forge__ok(error);
    return FORGE_OK;
}

/* >>impl-generate */

static int forge__str_contains(forge_gguf_str s, const char *needle) {
    size_t n = strlen(needle);
    uint64_t i;
    if (n == 0 || s.len < n) return 0;
    for (i = 0; i + n <= s.len; i++)
        if (s.ptr[i] == needle[0] && memcmp(s.ptr + i, needle, n) == 0) return 1;
    return 0;
}

FORGE_API forge_chat_format forge_chat_detect(const forge_gguf *g) {
    const forge_gguf_kv *kv = forge_gguf_find_kv(g, "tokenizer.chat_template");
    forge_gguf_str t = {NULL, 0};
    if (!kv || forge_gguf_kv_str(kv, &t, NULL) != FORGE_OK) return FORGE_CHAT_NONE;
    if (forge__str_contains(t, "<|start_header_id|>")) return FORGE_CHAT_LLAMA3;
    if (forge__str_contains(t, "<|im_start|>")) return FORGE_CHAT_CHATML;
    if (forge__str_contains(t, "<start_of_turn>")) return FORGE_CHAT_GEMMA;
    return FORGE_CHAT_NONE;
}

FORGE_API const char *forge_chat_format_name(forge_chat_format f) {
    switch (f) {
    case FORGE_CHAT_CHATML: return "chatml";
    case FORGE_CHAT_LLAMA3: return "llama3";
    case FORGE_CHAT_GEMMA: return "gemma";
    default: return "none";
    }
}

typedef struct forge__text {
    char *out;
    size_t capacity, len;
} forge__text;

static void forge__put(forge__text *t, const char *s) {
    size_t n = strlen(s);
    if (t->len < t->capacity) memcpy(t->out + t->len, s, FORGE__MIN(n, t->capacity - t->len));
    t->len += n;
}

FORGE_API forge_result forge_chat_render(forge_chat_format f, const forge_chat_message *m, size_t n, int add_assistant,
                                         char *out, size_t capacity, size_t *len, forge_error *error) {
    forge__text t;
    size_t i;
    const char *system = NULL;
    if ((!m && n) || !len || (!out && capacity)) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_chat_render: null argument");
    t.out = out;
    t.capacity = capacity;
    t.len = 0;
    for (i = 0; i < n; i++) {
        const char *role = m[i].role, *content = m[i].content;
        if (!role || !content || (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant")))
            return forge__fail(error, FORGE_ERR_ARGUMENT, "message %u: role must be system, user or assistant", (unsigned)i);
        switch (f) {
        case FORGE_CHAT_CHATML:
            forge__put(&t, "<|im_start|>"), forge__put(&t, role), forge__put(&t, "\n");
            forge__put(&t, content), forge__put(&t, "<|im_end|>\n");
            break;
        case FORGE_CHAT_LLAMA3:
            forge__put(&t, "<|start_header_id|>"), forge__put(&t, role), forge__put(&t, "<|end_header_id|>\n\n");
            forge__put(&t, content), forge__put(&t, "<|eot_id|>");
            break;
        case FORGE_CHAT_GEMMA: /* no system turn: its text opens the first user turn */
            if (!strcmp(role, "system")) {
                system = content;
                break;
            }
            forge__put(&t, "<start_of_turn>"), forge__put(&t, strcmp(role, "assistant") ? role : "model"), forge__put(&t, "\n");
            if (system && !strcmp(role, "user")) forge__put(&t, system), forge__put(&t, "\n\n"), system = NULL;
            forge__put(&t, content), forge__put(&t, "<end_of_turn>\n");
            break;
        default: /* no format: the texts one after another */
            forge__put(&t, content);
            break;
        }
    }
    if (add_assistant) {
        if (f == FORGE_CHAT_CHATML) forge__put(&t, "<|im_start|>assistant\n");
        else if (f == FORGE_CHAT_LLAMA3) forge__put(&t, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        else if (f == FORGE_CHAT_GEMMA) forge__put(&t, "<start_of_turn>model\n");
    }
    *len = t.len;
    if (t.len > capacity)
        return forge__fail(error, FORGE_ERR_LIMIT, "the chat needs %llu bytes; the buffer holds %llu", (forge__ull)t.len,
                           (forge__ull)capacity);
    forge__ok(error);
    return FORGE_OK;
}

struct forge_generator {
    forge_context *ctx;
    const forge_tokenizer *tok;
    forge_sampler *sampler;
    forge_allocator allocator;
    int32_t *queue;
    size_t queue_len, queue_pos;
    forge_detokenizer detok;
    char *text;          /* one step's bytes: a piece plus held bytes */
    size_t text_capacity;
    int have_logits;     /* the context's logits follow the last token evaluated */
};

FORGE_API forge_result forge_generator_create(forge_context *ctx, const forge_tokenizer *tok,
                                              const forge_sampler_desc *sampler, forge_generator **out,
                                              forge_error *error) {
    forge_generator *g;
    forge_result r;
    forge_sampler_desc greedy;
    if (out) *out = NULL;
    if (!ctx || !tok || !out) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_generator_create: null argument");
    if (forge_tokenizer_n_vocab(tok) != ctx->c->n_vocab)
        return forge__fail(error, FORGE_ERR_ARGUMENT, "the tokenizer has %u tokens but the model's output has %u",
                           forge_tokenizer_n_vocab(tok), ctx->c->n_vocab);
    if (!sampler) {
        memset(&greedy, 0, sizeof greedy);
        sampler = &greedy;
    }
    g = (forge_generator *)forge__alloc(&ctx->allocator, sizeof *g);
    if (!g) return forge__fail(error, FORGE_ERR_HOST_MEMORY, "cannot allocate the generator");
    memset(g, 0, sizeof *g);
    g->ctx = ctx;
    g->tok = tok;
    g->allocator = ctx->allocator;
    g->text_capacity = forge_tokenizer_max_piece_bytes(tok) + 8;
    g->text = (char *)forge__alloc(&g->allocator, g->text_capacity);
    if (!g->text) {
        forge__free(&g->allocator, g);
        return forge__fail(error, FORGE_ERR_HOST_MEMORY, "cannot allocate the generator's text buffer");
    }
    if ((r = forge_sampler_create(sampler, ctx->c->n_vocab, &g->sampler, error))) {
        forge__free(&g->allocator, g->text);
        forge__free(&g->allocator, g);
        return r;
    }
    forge_detokenizer_init(&g->detok, tok, 0);
    *out = g;
    forge__ok(error);
    return FORGE_OK;
}

FORGE_API void forge_generator_destroy(forge_generator *g) {
    forge_allocator a;
    if (!g) return;
    a = g->allocator;
    forge_sampler_destroy(g->sampler);
    forge__free(&a, g->queue);
    forge__free(&a, g->text);
    forge__free(&a, g);
}

FORGE_API void forge_generator_reset(forge_generator *g) {
    if (!g) return;
    forge_context_reset(g->ctx);
    forge_sampler_reset(g->sampler);
    forge_detokenizer_init(&g->detok, g->tok, 0);
    g->queue_len = g->queue_pos = 0;
    g->have_logits = 0;
}

FORGE_API forge_result forge_generator_prompt(forge_generator *g, const char *text, size_t len, int parse_special,
                                              forge_error *error) {
    size_t needed = 0, left;
    int32_t *queue;
    forge_result r;
    int add_bos;
    if (!g || (!text && len)) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_generator_prompt: null argument");
    add_bos = forge_context_pos(g->ctx) == 0 && g->queue_len == g->queue_pos && forge_tokenizer_add_bos(g->tok);
    r = forge_tokenize(g->tok, text, len, add_bos, parse_special, NULL, 0, &needed, error);
    if (r != FORGE_OK && r != FORGE_ERR_LIMIT) return r;
    left = g->queue_len - g->queue_pos;
    if (needed + left == 0) {
        forge__ok(error);
        return FORGE_OK;
    }
    if (forge_context_pos(g->ctx) + left + needed > g->ctx->r.n_ctx)
        return forge__fail(error, FORGE_ERR_LIMIT, "the prompt needs %llu positions; the context has %u of %u left",
                           (forge__ull)(left + needed), g->ctx->r.n_ctx - forge_context_pos(g->ctx), g->ctx->r.n_ctx);
    queue = (int32_t *)forge__alloc(&g->allocator, (left + needed) * sizeof *queue);
    if (!queue) return forge__fail(error, FORGE_ERR_HOST_MEMORY, "cannot queue %llu tokens", (forge__ull)(left + needed));
    if (left) memcpy(queue, g->queue + g->queue_pos, left * sizeof *queue);
    if ((r = forge_tokenize(g->tok, text, len, add_bos, parse_special, queue + left, needed, &needed, error))) {
        forge__free(&g->allocator, queue);
        return r;
    }
    forge__free(&g->allocator, g->queue);
    g->queue = queue;
    g->queue_len = left + needed;
    g->queue_pos = 0;
    forge__ok(error);
    return FORGE_OK;
}

static forge_result forge__generator_eval(forge_generator *g, const int32_t *tokens, uint32_t n, forge_error *error) {
    uint32_t i;
    forge_result r = forge_eval(g->ctx, tokens, n, error);
    if (r) return r;
    for (i = 0; i < n; i++) forge_sampler_accept(g->sampler, tokens[i]);
    g->have_logits = 1;
    return FORGE_OK;
}

FORGE_API forge_result forge_generator_step(forge_generator *g, forge_step *s, forge_error *error) {
    forge_result r;
    uint32_t n_ctx;
    int32_t token;
    size_t n_text = 0, more = 0;
    if (!g || !s) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_generator_step: null argument");
    memset(s, 0, sizeof *s);
    s->token = -1;
    s->text = g->text;
    n_ctx = g->ctx->r.n_ctx;
    if (g->queue_pos < g->queue_len) { /* read one batch of the prompt */
        uint32_t n = (uint32_t)FORGE__MIN((size_t)g->ctx->r.n_batch, g->queue_len - g->queue_pos);
        if ((r = forge__generator_eval(g, g->queue + g->queue_pos, n, error))) return r;
        g->queue_pos += n;
        s->prompt_left = (uint32_t)(g->queue_len - g->queue_pos);
        {
        forge__ok(error);
        return FORGE_OK;
    }
    }
    if (!g->have_logits)
        return forge__fail(error, FORGE_ERR_ARGUMENT, "nothing to continue: queue a prompt first");
    if (g->ctx->r.backend == FORGE_BACKEND_GPU && g->sampler->desc.temperature == 0.0f && g->sampler->desc.repeat_penalty == 0.0f) {
        /* greedy with nothing to adjust the logits: the device picks, and the vocabulary stays there */
        if ((r = forge_context_argmax(g->ctx, &token, error))) return r;
    } else if ((r = forge_context_sample(g->ctx, g->sampler, &token, error))) { /* candidates from the device where it can */
        return r;
    }
    forge_sampler_accept(g->sampler, token);
    s->token = token;
    g->have_logits = 0;
    if ((r = forge_detokenizer_push(&g->detok, token, g->text, g->text_capacity, &n_text, error))) return r;
    if (forge_tokenizer_is_eog(g->tok, token) || forge_context_pos(g->ctx) >= n_ctx) {
        s->done = 1;
        if ((r = forge_detokenizer_flush(&g->detok, g->text + n_text, g->text_capacity - n_text, &more, error))) return r;
    } else if ((r = forge_eval(g->ctx, &token, 1, error))) {
        return r;
    } else {
        g->have_logits = 1;
    }
    s->text_len = n_text + more;
    forge__ok(error);
    return FORGE_OK;
}

FORGE_API forge_result forge_generator_commit(forge_generator *g, int32_t token, forge_error *error) {
    forge_result r;
    if (!g) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_generator_commit: null argument");
    if ((r = forge_eval(g->ctx, &token, 1, error))) return r;
    g->have_logits = 1;
    forge_detokenizer_init(&g->detok, g->tok, 0);
    {
        forge__ok(error);
        return FORGE_OK;
    }
}

/* >>impl-device-scope */

/* The public calls that touch a context's device run inside forge_hip_enter/leave: the context's
   device is current for the call (and its launch switches set), and the calling thread gets back the
   device it had. A device that cannot be made current is FORGE_ERR_IO. */
static forge_result forge__gpu_scoped_init(forge_context *ctx, const forge_context_desc *desc, forge_error *error) {
#ifdef FORGE_HIP
    forge_hip_scope scope;
    char message[256];
    forge_result r;
    ctx->hip_switches = (desc->gpu_no_pdl ? FORGE_HIP_NO_PDL : 0u) | (desc->gpu_no_stage ? FORGE_HIP_NO_STAGE : 0u) |
                       (desc->gpu_no_wgmma ? FORGE_HIP_NO_WGMMA : 0u);
    if (forge_hip_enter(ctx->r.device, ctx->hip_switches, &scope, message, sizeof message) != 0)
        return forge__fail(error, FORGE_ERR_IO, "GPU %d: %s", ctx->r.device, message);
    r = forge__gpu_context_init(ctx, desc, error);
    forge_hip_leave(&scope);
    return r;
#else
    return forge__gpu_context_init(ctx, desc, error);
#endif
}

#ifdef FORGE_HIP
/* Runs `call` (which sets `result`) with the context's device current when it is a GPU context. */
#define FORGE__DEVICE_CALL(ctx, result, fail_result, call)                                               \
    do {                                                                                                 \
        forge_hip_scope scope_;                                                                          \
        char message_[256];                                                                              \
        if ((ctx) && (ctx)->r.backend == FORGE_BACKEND_GPU) {                                            \
            if (forge_hip_enter((ctx)->r.device, (ctx)->hip_switches, &scope_, message_, sizeof message_) != 0) { \
                result = fail_result;                                                                    \
            } else {                                                                                     \
                result = call;                                                                           \
                forge_hip_leave(&scope_);                                                                \
            }                                                                                            \
        } else {                                                                                         \
            result = call;                                                                               \
        }                                                                                                \
    } while (0)
#else
#define FORGE__DEVICE_CALL(ctx, result, fail_result, call) (result = call)
#endif

#define FORGE__DEVICE_FAIL(error, ctx) forge__fail(error, FORGE_ERR_IO, "GPU %d cannot be made current: %s", (ctx)->r.device, message_)

FORGE_API void forge_context_destroy(forge_context *ctx) {
#ifdef FORGE_HIP
    if (ctx && ctx->r.backend == FORGE_BACKEND_GPU) {
        forge_hip_scope scope;
        char message[256];
        int entered = forge_hip_enter(ctx->r.device, ctx->hip_switches, &scope, message, sizeof message) == 0;
        forge__context_destroy(ctx); /* host memory is freed even when the device is gone */
        if (entered) forge_hip_leave(&scope);
        return;
    }
#endif
    forge__context_destroy(ctx);
}

FORGE_API const float *forge_context_logits(const forge_context *ctx, uint32_t *n_rows) {
    const float *rows;
    FORGE__DEVICE_CALL(ctx, rows, (n_rows ? (void)(*n_rows = 0) : (void)0, (const float *)NULL), forge__context_logits(ctx, n_rows));
    return rows;
}

FORGE_API forge_result forge_context_argmax(forge_context *ctx, int32_t *out_token, forge_error *error) {
    forge_result r;
    FORGE__DEVICE_CALL(ctx, r, FORGE__DEVICE_FAIL(error, ctx), forge__context_argmax(ctx, out_token, error));
    return r;
}

FORGE_API forge_result forge_context_sample(forge_context *ctx, forge_sampler *sampler, int32_t *out_token, forge_error *error) {
    forge_result r;
    FORGE__DEVICE_CALL(ctx, r, FORGE__DEVICE_FAIL(error, ctx), forge__context_sample(ctx, sampler, out_token, error));
    return r;
}

FORGE_API forge_result forge_eval(forge_context *ctx, const int32_t *tokens, uint32_t n_tokens, forge_error *error) {
    forge_result r;
    FORGE__DEVICE_CALL(ctx, r, FORGE__DEVICE_FAIL(error, ctx), forge__eval(ctx, tokens, n_tokens, error));
    return r;
}

FORGE_API forge_result forge_eval_batch(forge_context *ctx, const forge_batch *batch, forge_error *error) {
    forge_result r;
    FORGE__DEVICE_CALL(ctx, r, FORGE__DEVICE_FAIL(error, ctx), forge__eval_batch(ctx, batch, error));
    return r;
}

FORGE_API forge_result forge_seq_argmax(forge_context *ctx, uint32_t seq, int32_t *out_token, forge_error *error) {
    forge_result r;
    FORGE__DEVICE_CALL(ctx, r, FORGE__DEVICE_FAIL(error, ctx), forge__seq_argmax(ctx, seq, out_token, error));
    return r;
}

FORGE_API forge_result forge_seq_sample(forge_context *ctx, uint32_t seq, forge_sampler *sampler, int32_t *out_token,
                                        forge_error *error) {
    forge_result r;
    FORGE__DEVICE_CALL(ctx, r, FORGE__DEVICE_FAIL(error, ctx), forge__seq_sample(ctx, seq, sampler, out_token, error));
    return r;
}

/* >>impl-env */

static int forge__env_on(const char *name) {
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

FORGE_API forge_result forge_context_desc_apply_env(forge_context_desc *desc, forge_error *error) {
    forge_context_desc d;
    const char *v;
    if (!desc) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_context_desc_apply_env: null argument");
    d = *desc;
    v = getenv("FORGE_MEM_FRACTION");
    if (v && *v && d.mem_fraction == 0.0) {
        char *end = NULL;
        double f = strtod(v, &end);
        if (!end || end == v || *end || !(f > 0.0 && f <= 1.0))
            return forge__fail(error, FORGE_ERR_ARGUMENT, "FORGE_MEM_FRACTION='%.40s': expected a fraction in (0, 1]", v);
        d.mem_fraction = f;
    }
    v = getenv("FORGE_NORM_FUSION");
    if (v && *v && d.gpu_norm_fusion == 0) {
        if (strcmp(v, "0") && strcmp(v, "1"))
            return forge__fail(error, FORGE_ERR_ARGUMENT, "FORGE_NORM_FUSION='%.40s': expected 0 (never) or 1 (wherever the shapes allow)", v);
        d.gpu_norm_fusion = v[0] == '1' ? 1 : -1;
    }
    if (!d.gpu_no_graph) d.gpu_no_graph = forge__env_on("FORGE_NO_GRAPH");
    if (!d.gpu_no_q8) d.gpu_no_q8 = forge__env_on("FORGE_NO_Q8");
    if (!d.gpu_no_pdl) d.gpu_no_pdl = forge__env_on("FORGE_NO_PDL");
    if (!d.gpu_no_stage) d.gpu_no_stage = forge__env_on("FORGE_NO_STAGE");
    if (!d.gpu_no_wgmma) d.gpu_no_wgmma = forge__env_on("FORGE_NO_WGMMA");
    if (!d.cpu_no_q8) d.cpu_no_q8 = forge__env_on("FORGE_CPU_NO_Q8");
    *desc = d;
    forge__ok(error);
    return FORGE_OK;
}

/* >>impl-llm */

struct forge_llm {
    forge_model *model;
    forge_tokenizer *tok;
    forge_context *ctx;
    forge_generator *gen;
    forge_chat_format format;
    forge_allocator allocator;
    char *system_prompt;        /* the desc's, copied; NULL when none */
    uint32_t max_tokens;
    const volatile int *cancel;
    int32_t close_turn;         /* the token that ends the last reply's turn before the next chat turn; -1: none */
    forge_reply last;
};

FORGE_API void forge_llm_close(forge_llm *llm) {
    forge_allocator a;
    if (!llm) return;
    a = llm->allocator;
    forge_generator_destroy(llm->gen);
    forge_context_destroy(llm->ctx);
    forge_tokenizer_destroy(llm->tok);
    forge_model_close(llm->model);
    forge__free(&a, llm->system_prompt);
    forge__free(&a, llm);
}

/* Everything after the model: tokenizer, context (the budget check), generator. */
static forge_result forge__llm_finish(forge_llm *llm, const forge_llm_desc *d, forge_llm **out, forge_error *error) {
    forge_sampler_desc sampler = d->sampler;
    forge_result r;
    if (!sampler.allocator.alloc && !sampler.allocator.free) sampler.allocator = d->context.allocator;
    if ((r = forge_tokenizer_create(forge_model_gguf(llm->model), &llm->allocator, &llm->tok, error)) ||
        (r = forge_context_create(llm->model, &d->context, &llm->ctx, error)) ||
        (r = forge_generator_create(llm->ctx, llm->tok, &sampler, &llm->gen, error))) {
        forge_llm_close(llm);
        return r;
    }
    llm->format = forge_chat_detect(forge_model_gguf(llm->model));
    *out = llm;
    forge__ok(error);
    return FORGE_OK;
}

/* The forge_llm itself and the desc's scalars; the model is opened by the caller. */
static forge_result forge__llm_start(const forge_llm_desc *d, forge_llm **llm, forge_error *error) {
    forge_result r;
    if ((r = forge__allocator_check(&d->context.allocator, "forge_llm_desc.context.allocator", error)) ||
        (r = forge__allocator_check(&d->sampler.allocator, "forge_llm_desc.sampler.allocator", error)))
        return r;
    *llm = (forge_llm *)forge__alloc(&d->context.allocator, sizeof **llm);
    if (!*llm) return forge__fail(error, FORGE_ERR_HOST_MEMORY, "cannot allocate the forge_llm");
    memset(*llm, 0, sizeof **llm);
    (*llm)->allocator = d->context.allocator;
    (*llm)->max_tokens = d->max_tokens;
    (*llm)->cancel = d->cancel;
    (*llm)->close_turn = -1;
    if (d->system_prompt) {
        size_t n = strlen(d->system_prompt);
        (*llm)->system_prompt = (char *)forge__alloc(&d->context.allocator, n + 1);
        if (!(*llm)->system_prompt) {
            forge_llm_close(*llm);
            return forge__fail(error, FORGE_ERR_HOST_MEMORY, "cannot copy the system prompt (%llu bytes)", (forge__ull)n);
        }
        memcpy((*llm)->system_prompt, d->system_prompt, n + 1);
    }
    return FORGE_OK;
}

#ifndef FORGE_NO_STDIO
FORGE_API forge_result forge_llm_open(const char *path, const forge_llm_desc *desc, forge_llm **out, forge_error *error) {
    forge_llm_desc zero;
    forge_model_desc md;
    forge_llm *llm = NULL;
    forge_result r;
    if (out) *out = NULL;
    if (!out) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_llm_open: out is NULL");
    if (!path) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_llm_open: no model path (path is NULL)");
    if (!desc) {
        memset(&zero, 0, sizeof zero);
        desc = &zero;
    }
    if ((r = forge__llm_start(desc, &llm, error))) return r;
    memset(&md, 0, sizeof md);
    md.allocator = desc->context.allocator;
    if ((r = forge_model_open(path, &md, &llm->model, error))) {
        forge_llm_close(llm);
        return r;
    }
    return forge__llm_finish(llm, desc, out, error);
}
#endif

FORGE_API forge_result forge_llm_open_memory(const void *bytes, size_t size, const forge_llm_desc *desc, forge_llm **out,
                                             forge_error *error) {
    forge_llm_desc zero;
    forge_model_desc md;
    forge_llm *llm = NULL;
    forge_result r;
    if (out) *out = NULL;
    if (!out || !bytes) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_llm_open_memory: null argument");
    if (!desc) {
        memset(&zero, 0, sizeof zero);
        desc = &zero;
    }
    if ((r = forge__llm_start(desc, &llm, error))) return r;
    memset(&md, 0, sizeof md);
    md.allocator = desc->context.allocator;
    if ((r = forge_model_from_memory(bytes, size, &md, &llm->model, error))) {
        forge_llm_close(llm);
        return r;
    }
    return forge__llm_finish(llm, desc, out, error);
}

/* Steps the generator until the turn ends, max_tokens, a full context or the cancel flag; each
   step's text goes to on_text. */
static forge_result forge__llm_reply(forge_llm *llm, forge_text_fn on_text, void *user_data, forge_error *error) {
    forge_generator *g = llm->gen;
    forge_result r;
    forge_step step;
    for (;;) {
        uint32_t before = forge_context_pos(llm->ctx);
        if (llm->cancel && *llm->cancel) {
            g->queue_pos = g->queue_len; /* a prompt not yet read is dropped where it stood */
            llm->last.stop = FORGE_STOP_CANCELLED;
            break;
        }
        if (llm->max_tokens && llm->last.reply_tokens >= llm->max_tokens) {
            llm->last.stop = FORGE_STOP_MAX_TOKENS;
            break;
        }
        if ((r = forge_generator_step(g, &step, error))) return r;
        if (step.token < 0) {
            llm->last.prompt_tokens += forge_context_pos(llm->ctx) - before;
            continue;
        }
        llm->last.reply_tokens++;
        if (step.text_len && on_text) on_text(user_data, step.text, step.text_len);
        if (step.done) {
            int eog = forge_tokenizer_is_eog(llm->tok, step.token);
            llm->last.stop = eog ? FORGE_STOP_END_OF_TURN : FORGE_STOP_CONTEXT_FULL;
            if (eog) llm->close_turn = step.token; /* generated, not yet in the cache */
            break;
        }
    }
    forge__ok(error);
    return FORGE_OK;
}

FORGE_API forge_result forge_llm_chat(forge_llm *llm, const char *message, forge_text_fn on_text, void *user_data,
                                      forge_error *error) {
    forge_chat_message m[2];
    size_t n = 0, needed = 0, len = 0, offset;
    char *text;
    forge_result r;
    int first;
    if (!llm || !message) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_llm_chat: null argument");
    memset(&llm->last, 0, sizeof llm->last);
    first = forge_context_pos(llm->ctx) == 0 && llm->gen->queue_pos == llm->gen->queue_len;
    if (!first && llm->close_turn < 0 && llm->format != FORGE_CHAT_NONE) { /* the last reply stopped mid-turn */
        int32_t end = forge_tokenizer_eot(llm->tok);
        llm->close_turn = end >= 0 ? end : forge_tokenizer_eos(llm->tok);
    }
    if (llm->close_turn >= 0) {
        int32_t token = llm->close_turn;
        llm->close_turn = -1;
        if ((r = forge_generator_commit(llm->gen, token, error))) return r;
    }
    if (first && llm->system_prompt) m[n].role = "system", m[n].content = llm->system_prompt, n++;
    m[n].role = "user", m[n].content = message, n++;
    /* a later turn follows the end-of-turn token, which these formats follow with a newline */
    offset = !first && (llm->format == FORGE_CHAT_CHATML || llm->format == FORGE_CHAT_GEMMA) ? 1 : 0;
    if ((r = forge_chat_render(llm->format, m, n, 1, NULL, 0, &needed, error)) && r != FORGE_ERR_LIMIT) return r;
    text = (char *)forge__alloc(&llm->allocator, needed + offset + 1);
    if (!text) return forge__fail(error, FORGE_ERR_HOST_MEMORY, "cannot render a chat turn of %llu bytes", (forge__ull)needed);
    text[0] = '\n';
    if (!(r = forge_chat_render(llm->format, m, n, 1, text + offset, needed, &len, error)))
        r = forge_generator_prompt(llm->gen, text, len + offset, llm->format != FORGE_CHAT_NONE, error);
    forge__free(&llm->allocator, text);
    if (r) return r;
    return forge__llm_reply(llm, on_text, user_data, error);
}

FORGE_API forge_result forge_llm_generate(forge_llm *llm, const char *text, forge_text_fn on_text, void *user_data,
                                          forge_error *error) {
    forge_result r;
    if (!llm || !text) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_llm_generate: null argument");
    memset(&llm->last, 0, sizeof llm->last);
    if (llm->close_turn >= 0) { /* the last reply's end token comes before the new text */
        int32_t token = llm->close_turn;
        llm->close_turn = -1;
        if ((r = forge_generator_commit(llm->gen, token, error))) return r;
    }
    if ((r = forge_generator_prompt(llm->gen, text, strlen(text), 0, error))) return r;
    return forge__llm_reply(llm, on_text, user_data, error);
}

FORGE_API const forge_reply *forge_llm_last_reply(const forge_llm *llm) { return llm ? &llm->last : NULL; }
FORGE_API void forge_llm_reset(forge_llm *llm) {
    if (!llm) return;
    forge_generator_reset(llm->gen);
    llm->close_turn = -1;
    memset(&llm->last, 0, sizeof llm->last);
}
FORGE_API forge_model *forge_llm_model(const forge_llm *llm) { return llm ? llm->model : NULL; }
FORGE_API forge_tokenizer *forge_llm_tokenizer(const forge_llm *llm) { return llm ? llm->tok : NULL; }
FORGE_API forge_context *forge_llm_context(const forge_llm *llm) { return llm ? llm->ctx : NULL; }
FORGE_API forge_generator *forge_llm_generator(const forge_llm *llm) { return llm ? llm->gen : NULL; }
FORGE_API forge_chat_format forge_llm_chat_format(const forge_llm *llm) { return llm ? llm->format : FORGE_CHAT_NONE; }

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

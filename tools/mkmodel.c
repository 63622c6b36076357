/* ---- forge mkmodel: synthetic GGUF files with the shapes of real models --------------------------

   forge mkmodel --shape NAME --type MIX -o FILE [--seed S] [--vocab N] [--layers N] [--dry-run]

   Writes a GGUF file whose metadata, tensor names, shapes and types are those of a real model
   quantized by llama.cpp, filled with random but valid blocks: every scale is a small finite f16,
   every quant is random, so dequantized weights are finite and of the size trained weights have
   (|w| below about 0.15), norms are about 1 and biases small. Speed does not depend on the values,
   so forge and llama.cpp can be timed on the same bytes without downloading the model (BENCH.md).

   The file is streamed: the header (mostly the vocabulary) is built in memory, then each tensor is
   generated in chunks of a few MiB and written, so memory stays constant for any size. The same
   seed gives the same bytes. This file is #included by tools/forge.c. */

/* Shapes. Every number comes from the model's published config.json (Hugging Face):
   num_hidden_layers, hidden_size, num_attention_heads, num_key_value_heads, intermediate_size,
   vocab_size, max_position_embeddings, rope_theta, rms_norm_eps, tie_word_embeddings; Qwen2 has
   biases on q/k/v (attention_bias in its modeling code), Llama none ("attention_bias": false). */
typedef struct mk_shape {
    const char *name;
    const char *arch;   /* general.architecture */
    const char *pre;    /* tokenizer.ggml.pre: what llama.cpp's converter writes for the model */
    uint32_t n_layer, n_embd, n_head, n_head_kv, n_ff, n_vocab, n_ctx;
    float rope_base, rms_eps;
    int tied, qkv_bias;
    uint32_t special_first; /* id of the first special token in the real vocabulary */
    int qwen_vocab;         /* special tokens of Qwen2.5 (else Llama 3's) */
    const char *source;
    uint32_t n_expert, n_expert_used; /* a mixture of experts: experts per layer and per token (0: dense) */
} mk_shape;

static const mk_shape mk_shapes[] = {
    {"llama3-70b", "llama", "llama-bpe", 80, 8192, 64, 8, 28672, 128256, 8192, 500000.0f, 1e-5f, 0, 0, 128000, 0,
     "meta-llama/Meta-Llama-3-70B config.json: 80 layers, hidden 8192, 64 heads, 8 kv heads, intermediate 28672, "
     "vocab 128256, max_position 8192, rope_theta 500000, rms_norm_eps 1e-5, tie_word_embeddings false", 0, 0},
    {"llama3-8b", "llama", "llama-bpe", 32, 4096, 32, 8, 14336, 128256, 8192, 500000.0f, 1e-5f, 0, 0, 128000, 0,
     "meta-llama/Meta-Llama-3-8B config.json (as mirrored at huggingface.co/pandyamarut/Meta-Llama-3-8B): "
     "32 layers, hidden 4096, 32 heads, 8 kv heads, intermediate 14336, vocab 128256, max_position 8192, "
     "rope_theta 500000, rms_norm_eps 1e-5, tie_word_embeddings false, rope_scaling null", 0, 0},
    {"qwen2.5-0.5b", "qwen2", "qwen2", 24, 896, 14, 2, 4864, 151936, 32768, 1000000.0f, 1e-6f, 1, 1, 151643, 1,
     "Qwen/Qwen2.5-0.5B config.json (as mirrored at huggingface.co/osllmai-community/Qwen2.5-0.5B): "
     "24 layers, hidden 896, 14 heads, 2 kv heads, intermediate 4864, vocab 151936, max_position 32768, "
     "rope_theta 1e6, rms_norm_eps 1e-6, tie_word_embeddings true", 0, 0},
    {"qwen2.5-1.5b", "qwen2", "qwen2", 28, 1536, 12, 2, 8960, 151936, 32768, 1000000.0f, 1e-6f, 1, 1, 151643, 1,
     "Qwen/Qwen2.5-1.5B-Instruct config.json (as mirrored at huggingface.co/onnx-community/Qwen2.5-1.5B-Instruct): "
     "28 layers, hidden 1536, 12 heads, 2 kv heads, intermediate 8960, vocab 151936, max_position 32768, "
     "rope_theta 1e6, rms_norm_eps 1e-6, tie_word_embeddings true", 0, 0},
    {"qwen2.5-7b", "qwen2", "qwen2", 28, 3584, 28, 4, 18944, 152064, 32768, 1000000.0f, 1e-6f, 0, 1, 151643, 1,
     "Qwen/Qwen2.5-7B-Instruct config.json (as mirrored at huggingface.co/osllmai-community/Qwen2.5-7B-Instruct): "
     "28 layers, hidden 3584, 28 heads, 4 kv heads, intermediate 18944, vocab 152064, max_position 32768 "
     "(the base model says 131072), rope_theta 1e6, rms_norm_eps 1e-6, tie_word_embeddings false", 0, 0},
    {"mixtral-8x7b", "llama", "llama-bpe", 32, 4096, 32, 8, 14336, 32000, 32768, 1000000.0f, 1e-5f, 0, 0, 31744, 0,
     "mistralai/Mixtral-8x7B-v0.1 config.json: 32 layers, hidden 4096, 32 heads, 8 kv heads, intermediate 14336 per "
     "expert, 8 local experts, 2 per token, vocab 32000, max_position 32768, rope_theta 1e6, rms_norm_eps 1e-5, "
     "tie_word_embeddings false (the vocabulary here is byte-level BPE of that size, the real one SentencePiece)",
     8, 2},
};

/* Type mixes and the general.file_type llama.cpp gives them. */
typedef enum { MK_MIX_Q4_0, MK_MIX_Q8_0, MK_MIX_F16, MK_MIX_Q4_K_M } mk_mix;
static const struct {
    const char *name;
    uint32_t file_type;
    uint32_t base_type;
} mk_mixes[] = {
    {"q4_0", 2, FORGE_TYPE_Q4_0},
    {"q8_0", 7, FORGE_TYPE_Q8_0},
    {"f16", 1, FORGE_TYPE_F16},
    {"q4_k_m", 15, FORGE_TYPE_Q4_K},
};

typedef enum {
    MK_EMBD, MK_OUTPUT, MK_ATTN_Q, MK_ATTN_K, MK_ATTN_V, MK_ATTN_OUT, MK_FFN_GATE, MK_FFN_UP, MK_FFN_DOWN,
    MK_NORM, MK_BIAS, MK_ROUTER
} mk_role;

typedef struct mk_tensor {
    char name[48];
    mk_role role;
    uint32_t n_dims;
    uint64_t ne[3];
    uint32_t type;
    uint64_t n_bytes, offset; /* offset from the start of the data section */
} mk_tensor;

/* llama.cpp's "use_more_bits" (llama_tensor_get_type in src/llama-quant.cpp): Q4_K_M gives Q6_K to
   attn_v and ffn_down of the first eighth of the layers, the last eighth, and every third layer in
   between: i < n/8, or i >= 7n/8, or (i - n/8) % 3 == 2 (integer division). For 32 layers that is
   0-3, 6, 9, ..., 27 and 28-31: 16 of 32. Written from that description, not copied. */
static int mk_more_bits(uint32_t layer, uint32_t n_layer) {
    uint32_t eighth = n_layer / 8;
    if (layer < eighth || layer >= 7 * n_layer / 8) return 1;
    return (layer - eighth) % 3 == 2;
}

/* The type llama.cpp's quantizer would give a weight under a mix:
   - F16: every matrix F16 (llama-quantize applies no per-tensor rule to unquantized targets);
   - the output head (output.weight, or token_embd when tied): Q8_0 when its rows are not a whole
     number of blocks of the mix's type, else Q6_K unless the mix is Q8_0;
   - Q4_K_M: Q6_K for attn_v and ffn_down where mk_more_bits says so;
   - a k-quant on rows that are not a multiple of 256 falls back: Q4_K -> Q5_0, Q6_K -> Q8_0 (then F16
     if even that does not divide), as llama.cpp does for Qwen2.5-0.5B's 896-wide rows. */
static uint32_t mk_weight_type(mk_mix mix, mk_role role, uint32_t layer, uint32_t n_layer, uint64_t ne0, int tied) {
    uint32_t t = mk_mixes[mix].base_type;
    if (mix == MK_MIX_F16) return FORGE_TYPE_F16;
    if (role == MK_OUTPUT || (role == MK_EMBD && tied)) {
        if (ne0 % forge_type_info(t)->block_elems != 0) t = FORGE_TYPE_Q8_0;
        else if (t != FORGE_TYPE_Q8_0) t = FORGE_TYPE_Q6_K;
    } else if (mix == MK_MIX_Q4_K_M && (role == MK_ATTN_V || role == MK_FFN_DOWN) && mk_more_bits(layer, n_layer)) {
        t = FORGE_TYPE_Q6_K;
    }
    if (ne0 % forge_type_info(t)->block_elems != 0) {
        if (t == FORGE_TYPE_Q4_K) t = FORGE_TYPE_Q5_0;
        else if (t == FORGE_TYPE_Q6_K) t = FORGE_TYPE_Q8_0;
        if (ne0 % forge_type_info(t)->block_elems != 0) t = FORGE_TYPE_F16;
    }
    return t;
}

/* ---- random numbers: splitmix64 to seed, xoshiro256** to generate -------------------------------- */

typedef struct mk_rng {
    uint64_t s[4];
} mk_rng;

static uint64_t mk_splitmix(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void mk_rng_seed(mk_rng *r, uint64_t seed, uint64_t stream) {
    uint64_t st = seed ^ (stream * 0xd1342543de82ef95ull);
    int i;
    for (i = 0; i < 4; i++) r->s[i] = mk_splitmix(&st);
}

static uint64_t mk_rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t mk_next(mk_rng *r) {
    uint64_t *s = r->s;
    const uint64_t result = mk_rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = mk_rotl(s[3], 45);
    return result;
}

static float mk_uniform(mk_rng *r) { return (float)(mk_next(r) >> 40) * (1.0f / 16777216.0f); } /* [0, 1) */

static void mk_le16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* unrolled so that compilers merge it into one store on little-endian hosts */
static void mk_le64(uint8_t *p, uint64_t v) {
    p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16), p[3] = (uint8_t)(v >> 24);
    p[4] = (uint8_t)(v >> 32), p[5] = (uint8_t)(v >> 40), p[6] = (uint8_t)(v >> 48), p[7] = (uint8_t)(v >> 56);
}

static void mk_random_bytes(mk_rng *r, uint8_t *p, size_t n) { /* n a multiple of 8 */
    size_t i;
    for (i = 0; i < n; i += 8) mk_le64(p + i, mk_next(r));
}

/* ---- block generators ------------------------------------------------------------------------------ */

/* Sixteen scales per type, d_min .. 2 * d_min, picked by 4 random bits per block. */
typedef struct mk_scales {
    uint16_t q4_0[16], q5_0[16], q8_0[16], q4_k[16], q4_k_min[16], q6_k[16];
} mk_scales;

static void mk_scales_init(mk_scales *s) {
    int i;
    for (i = 0; i < 16; i++) {
        float f = 1.0f + (float)i / 16.0f;
        s->q4_0[i] = forge_f32_to_f16(0.004f * f);   /* d * (q - 8), q 4 bits: |w| < 0.064 */
        s->q5_0[i] = forge_f32_to_f16(0.002f * f);   /* d * (q - 16), q 5 bits: |w| < 0.064 */
        s->q8_0[i] = forge_f32_to_f16(0.00025f * f); /* d * q, q int8: |w| < 0.064 */
        s->q4_k[i] = forge_f32_to_f16(0.0001f * f);  /* d * sc * q - dmin * m, sc = m in 32..63 */
        /* dmin = 7.5 d centres every sub-block: w = d * sc * (q - 7.5), |w| < 0.095 */
        s->q4_k_min[i] = forge_f32_to_f16(7.5f * forge_f16_to_f32(s->q4_k[i]));
        s->q6_k[i] = forge_f32_to_f16(0.00004f * f); /* d * sc * (q - 32), |sc| in 16..47: |w| < 0.12 */
    }
}

/* Writes n_blocks blocks of a type at p. Buffers hold whole blocks; the stream of random numbers
   continues across calls, so the bytes do not depend on the chunk size. */
static void mk_fill(uint32_t type, mk_rng *r, const mk_scales *sc, uint8_t *p, uint64_t n_blocks) {
    uint64_t b;
    switch (type) {
    case FORGE_TYPE_F16:
        /* four halves per draw: random sign and mantissa, exponent 7..10 (|w| in [2^-8, 2^-4)) */
        for (b = 0; b + 4 <= n_blocks; b += 4) {
            uint64_t x = mk_next(r);
            uint64_t h = (x & 0x83ff83ff83ff83ffull) | ((((x >> 10) & 0x0003000300030003ull) + 0x0007000700070007ull) << 10);
            mk_le64(p + 2 * b, h);
        }
        for (; b < n_blocks; b++) {
            uint64_t x = mk_next(r);
            mk_le16(p + 2 * b, (uint16_t)((x & 0x83ff) | ((((x >> 10) & 3) + 7) << 10)));
        }
        break;
    case FORGE_TYPE_Q4_0: /* d, qs[16] */
        for (b = 0; b < n_blocks; b++, p += 18) {
            uint64_t x = mk_next(r);
            mk_le16(p, sc->q4_0[x & 15]);
            mk_le64(p + 2, mk_next(r));
            mk_le64(p + 10, mk_next(r));
        }
        break;
    case FORGE_TYPE_Q5_0: /* d, qh[4], qs[16] */
        for (b = 0; b < n_blocks; b++, p += 22) {
            uint64_t x = mk_next(r);
            mk_le16(p, sc->q5_0[x & 15]);
            p[2] = (uint8_t)(x >> 8), p[3] = (uint8_t)(x >> 16), p[4] = (uint8_t)(x >> 24), p[5] = (uint8_t)(x >> 32);
            mk_le64(p + 6, mk_next(r));
            mk_le64(p + 14, mk_next(r));
        }
        break;
    case FORGE_TYPE_Q8_0: /* d, qs[32] */
        for (b = 0; b < n_blocks; b++, p += 34) {
            mk_le16(p, sc->q8_0[mk_next(r) & 15]);
            mk_random_bytes(r, p + 2, 32);
        }
        break;
    case FORGE_TYPE_Q4_K: /* d, dmin, scales[12] (eight 6-bit scales and mins), qs[128] */
        for (b = 0; b < n_blocks; b++, p += 144) {
            uint64_t x = mk_next(r);
            uint8_t s6[8];
            int j;
            mk_le16(p, sc->q4_k[x & 15]);
            mk_le16(p + 2, sc->q4_k_min[x & 15]);
            for (j = 0; j < 8; j++) s6[j] = (uint8_t)(32 + ((x >> (4 + 5 * j)) & 31));
            /* packing: sub-blocks 0-3 in the low 6 bits of bytes 0-3 (scales) and 4-7 (mins); sub-blocks
               4-7 split into a low nibble in bytes 8-11 and two high bits on top of bytes 0-7 */
            for (j = 0; j < 4; j++) {
                p[4 + j] = (uint8_t)((s6[j] & 63) | ((s6[j + 4] >> 4) << 6));     /* scale j, high bits of scale j+4 */
                p[8 + j] = (uint8_t)((s6[j] & 63) | ((s6[j + 4] >> 4) << 6));     /* min j (= scale j), high bits of min j+4 */
                p[12 + j] = (uint8_t)((s6[j + 4] & 15) | ((s6[j + 4] & 15) << 4)); /* low nibbles of scale and min j+4 */
            }
            mk_random_bytes(r, p + 16, 128);
        }
        break;
    case FORGE_TYPE_Q6_K: /* ql[128], qh[64], scales[16] (int8), d */
        for (b = 0; b < n_blocks; b++, p += 210) {
            uint64_t x = mk_next(r), y = mk_next(r);
            int j;
            mk_random_bytes(r, p, 192);
            for (j = 0; j < 16; j++) {
                uint32_t v = (uint32_t)((j < 8 ? x >> (8 * j) : y >> (8 * (j - 8))) & 0xff);
                int mag = 16 + (int)(v & 31);
                p[192 + j] = (uint8_t)(int8_t)((v & 0x80) ? -mag : mag);
            }
            mk_le16(p + 208, sc->q6_k[(y >> 60) & 15]);
        }
        break;
    default: break; /* F32 tensors are written by mk_fill_f32 */
    }
}

static void mk_fill_f32(mk_role role, mk_rng *r, uint8_t *p, uint64_t n) {
    uint64_t i;
    for (i = 0; i < n; i++) {
        float v = role == MK_NORM ? 1.0f + 0.1f * (mk_uniform(r) - 0.5f) : 0.02f * (mk_uniform(r) - 0.5f);
        uint32_t bits;
        memcpy(&bits, &v, 4);
        p[4 * i] = (uint8_t)bits, p[4 * i + 1] = (uint8_t)(bits >> 8), p[4 * i + 2] = (uint8_t)(bits >> 16),
        p[4 * i + 3] = (uint8_t)(bits >> 24);
    }
}

/* ---- the header ----------------------------------------------------------------------------------- */

typedef struct mk_buf {
    uint8_t *p;
    size_t n, cap;
    uint64_t n_kv; /* key-value pairs written so far */
    int failed;
} mk_buf;

static void mk_put(mk_buf *b, const void *data, size_t n) {
    if (b->failed) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 1u << 20;
        uint8_t *q;
        while (cap < b->n + n) cap *= 2;
        q = (uint8_t *)realloc(b->p, cap);
        if (!q) {
            b->failed = 1;
            return;
        }
        b->p = q, b->cap = cap;
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void mk_u32(mk_buf *b, uint32_t v) {
    uint8_t x[4];
    x[0] = (uint8_t)v, x[1] = (uint8_t)(v >> 8), x[2] = (uint8_t)(v >> 16), x[3] = (uint8_t)(v >> 24);
    mk_put(b, x, 4);
}

static void mk_u64(mk_buf *b, uint64_t v) {
    uint8_t x[8];
    mk_le64(x, v);
    mk_put(b, x, 8);
}

static void mk_str(mk_buf *b, const char *s, size_t len) {
    mk_u64(b, len);
    mk_put(b, s, len);
}

static void mk_key(mk_buf *b, const char *key, forge_gguf_type type) {
    b->n_kv++;
    mk_str(b, key, strlen(key));
    mk_u32(b, (uint32_t)type);
}

static void mk_kv_str(mk_buf *b, const char *key, const char *v) {
    mk_key(b, key, FORGE_GGUF_STRING);
    mk_str(b, v, strlen(v));
}

static void mk_kv_u32(mk_buf *b, const char *key, uint32_t v) {
    mk_key(b, key, FORGE_GGUF_UINT32);
    mk_u32(b, v);
}

static void mk_kv_f32(mk_buf *b, const char *key, float v) {
    uint32_t bits;
    memcpy(&bits, &v, 4);
    mk_key(b, key, FORGE_GGUF_FLOAT32);
    mk_u32(b, bits);
}

static void mk_kv_bool(mk_buf *b, const char *key, int v) {
    uint8_t x = (uint8_t)(v != 0);
    mk_key(b, key, FORGE_GGUF_BOOL);
    mk_put(b, &x, 1);
}

static void mk_kv_array(mk_buf *b, const char *key, forge_gguf_type elem, uint64_t count) {
    mk_key(b, key, FORGE_GGUF_ARRAY);
    mk_u32(b, (uint32_t)elem);
    mk_u64(b, count);
}

/* The vocabulary: a byte-level BPE that llama.cpp and forge both load. Ids 0-255 are the 256 byte
   symbols under GPT-2's byte-to-character mapping, then the results of a few merges, then filler
   tokens "<tok_N>", then the model's special tokens at their real ids (when the vocabulary is smaller
   than the real one, right after the merges). */
static const char *const mk_merges[][2] = {
    {"\xc4\xa0", "t"}, {"\xc4\xa0", "a"}, {"h", "e"}, {"i", "n"}, {"r", "e"}, {"o", "n"}, {"\xc4\xa0t", "he"},
    {"e", "r"}, {"\xc4\xa0", "s"}, {"a", "t"}, {"\xc4\xa0", "w"}, {"\xc4\xa0", "o"}, {"e", "n"}, {"o", "r"},
    {"l", "l"}, {"l", "d"}, {"\xc4\xa0w", "or"}, {"\xc4\xa0wor", "ld"}, {"he", "ll"}, {"hell", "o"}, {"a", "n"},
    {"\xc4\xa0" "a", "n"}, {"\xc4\xa0" "an", "d"}, {"i", "s"}, {"i", "t"}, {"e", "s"}, {"e", "d"}, {"n", "g"},
    {"in", "g"}, {"\xc4\xa0o", "f"}, {"\xc4\xa0", "in"}, {"\xc4\xa0t", "o"},
};
#define MK_N_MERGES (sizeof mk_merges / sizeof mk_merges[0])

static const char *const mk_qwen_specials[] = {
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
    "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
    "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>",
    "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
};
#define MK_N_QWEN_SPECIALS 22u
#define MK_N_LLAMA_NAMED 10u /* 128000 .. 128009: begin/end of text, header ids, eot among reserved ones */

typedef struct mk_vocab {
    uint32_t n_vocab, first_special, n_special;
    int qwen;
    uint16_t byte_char[256]; /* GPT-2: the printable character each byte is written as */
} mk_vocab;

static void mk_vocab_init(mk_vocab *v, const mk_shape *shape, uint32_t n_vocab) {
    uint32_t b, next = 256, tail = shape->n_vocab - shape->special_first;
    for (b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        v->byte_char[b] = (uint16_t)(printable ? b : next++);
    }
    v->n_vocab = n_vocab;
    v->qwen = shape->qwen_vocab;
    v->first_special = n_vocab >= 256 + MK_N_MERGES + tail ? n_vocab - tail : 256 + (uint32_t)MK_N_MERGES;
    v->n_special = n_vocab - v->first_special;
    if (v->n_special > tail) v->n_special = tail;
}

/* The text and type of token id; returns the text length (buf holds at least 64 bytes). */
static size_t mk_token(const mk_vocab *v, uint32_t id, char *buf, int32_t *type) {
    *type = FORGE_TOKEN_NORMAL;
    if (id < 256) {
        uint32_t c = v->byte_char[id];
        if (c < 0x80) {
            buf[0] = (char)c;
            return 1;
        }
        buf[0] = (char)(0xc0 | (c >> 6));
        buf[1] = (char)(0x80 | (c & 63));
        return 2;
    }
    if (id < 256 + MK_N_MERGES) {
        const char *const *m = mk_merges[id - 256];
        return (size_t)sprintf(buf, "%s%s", m[0], m[1]);
    }
    if (id >= v->first_special && id - v->first_special < v->n_special) {
        uint32_t j = id - v->first_special;
        *type = FORGE_TOKEN_CONTROL;
        if (v->qwen) {
            if (j >= MK_N_QWEN_SPECIALS) { /* ids the embedding has but the tokenizer lacks: llama.cpp's converter pads */
                *type = FORGE_TOKEN_UNUSED;
                return (size_t)sprintf(buf, "[PAD%u]", id);
            }
            if (j >= 14) *type = FORGE_TOKEN_USER_DEFINED; /* tool-call and FIM markers are not "special" */
            return (size_t)sprintf(buf, "%s", mk_qwen_specials[j]);
        }
        switch (j) {
        case 0: return (size_t)sprintf(buf, "<|begin_of_text|>");
        case 1: return (size_t)sprintf(buf, "<|end_of_text|>");
        case 6: return (size_t)sprintf(buf, "<|start_header_id|>");
        case 7: return (size_t)sprintf(buf, "<|end_header_id|>");
        case 8: return (size_t)sprintf(buf, "<|reserved_special_token_4|>");
        case 9: return (size_t)sprintf(buf, "<|eot_id|>");
        default: return (size_t)sprintf(buf, "<|reserved_special_token_%u|>", j < 6 ? j - 2 : j - 5);
        }
    }
    return (size_t)sprintf(buf, "<tok_%u>", id);
}

typedef struct mk_model {
    const mk_shape *shape;
    mk_mix mix;
    uint32_t n_layer, n_vocab;
    uint64_t seed;
    mk_tensor *tensors;
    uint32_t n_tensors;
    mk_buf header;       /* everything before the data section, without the padding */
    uint64_t data_offset; /* header rounded up to the alignment */
    uint64_t file_bytes;
} mk_model;

#define MK_ALIGN 32u

static uint64_t mk_align(uint64_t x) { return (x + MK_ALIGN - 1) / MK_ALIGN * MK_ALIGN; }

/* A tensor of ne0 x ne1 (ne1 0: a vector) x ne2 (0: two dimensions; the experts of a layer). */
static void mk_add3(mk_model *m, mk_role role, uint32_t layer, uint64_t ne0, uint64_t ne1, uint64_t ne2, const char *fmt) {
    mk_tensor *t = &m->tensors[m->n_tensors++];
    snprintf(t->name, sizeof t->name, fmt, layer);
    t->role = role;
    t->n_dims = ne2 > 0 ? 3 : ne1 > 0 ? 2 : 1;
    t->ne[0] = ne0;
    t->ne[1] = ne1 > 0 ? ne1 : 1;
    t->ne[2] = ne2 > 0 ? ne2 : 1;
    /* norms, biases and the router stay f32 (llama.cpp's quantizer leaves ffn_gate_inp alone) */
    if (role == MK_NORM || role == MK_BIAS || role == MK_ROUTER) t->type = FORGE_TYPE_F32;
    else t->type = mk_weight_type(m->mix, role, layer, m->n_layer, ne0, m->shape->tied);
}

static void mk_add(mk_model *m, mk_role role, uint32_t layer, uint64_t ne0, uint64_t ne1, const char *fmt) {
    mk_add3(m, role, layer, ne0, ne1, 0, fmt);
}

/* Tensor table (llama.cpp's names and order), sizes and offsets, then the header bytes. */
static int mk_build(mk_model *m) {
    const mk_shape *s = m->shape;
    const uint64_t embd = s->n_embd, head_dim = s->n_embd / s->n_head;
    const uint64_t q = s->n_head * head_dim, kv = s->n_head_kv * head_dim;
    uint32_t il, i;
    uint64_t offset = 0;
    mk_buf *b = &m->header;
    mk_vocab vocab;
    char key[96], text[64];

    m->tensors = (mk_tensor *)calloc(3 + 12 * (size_t)m->n_layer, sizeof *m->tensors);
    if (!m->tensors) return 0;
    mk_add(m, MK_EMBD, 0, embd, m->n_vocab, "token_embd.weight");
    for (il = 0; il < m->n_layer; il++) {
        mk_add(m, MK_NORM, il, embd, 0, "blk.%u.attn_norm.weight");
        mk_add(m, MK_ATTN_Q, il, embd, q, "blk.%u.attn_q.weight");
        if (s->qkv_bias) mk_add(m, MK_BIAS, il, q, 0, "blk.%u.attn_q.bias");
        mk_add(m, MK_ATTN_K, il, embd, kv, "blk.%u.attn_k.weight");
        if (s->qkv_bias) mk_add(m, MK_BIAS, il, kv, 0, "blk.%u.attn_k.bias");
        mk_add(m, MK_ATTN_V, il, embd, kv, "blk.%u.attn_v.weight");
        if (s->qkv_bias) mk_add(m, MK_BIAS, il, kv, 0, "blk.%u.attn_v.bias");
        mk_add(m, MK_ATTN_OUT, il, q, embd, "blk.%u.attn_output.weight");
        mk_add(m, MK_NORM, il, embd, 0, "blk.%u.ffn_norm.weight");
        if (s->n_expert) { /* the router, then each projection's experts in one tensor */
            mk_add(m, MK_ROUTER, il, embd, s->n_expert, "blk.%u.ffn_gate_inp.weight");
            mk_add3(m, MK_FFN_GATE, il, embd, s->n_ff, s->n_expert, "blk.%u.ffn_gate_exps.weight");
            mk_add3(m, MK_FFN_DOWN, il, s->n_ff, embd, s->n_expert, "blk.%u.ffn_down_exps.weight");
            mk_add3(m, MK_FFN_UP, il, embd, s->n_ff, s->n_expert, "blk.%u.ffn_up_exps.weight");
            continue;
        }
        mk_add(m, MK_FFN_GATE, il, embd, s->n_ff, "blk.%u.ffn_gate.weight");
        mk_add(m, MK_FFN_UP, il, embd, s->n_ff, "blk.%u.ffn_up.weight");
        mk_add(m, MK_FFN_DOWN, il, s->n_ff, embd, "blk.%u.ffn_down.weight");
    }
    mk_add(m, MK_NORM, 0, embd, 0, "output_norm.weight");
    if (!s->tied) mk_add(m, MK_OUTPUT, 0, embd, m->n_vocab, "output.weight");
    for (i = 0; i < m->n_tensors; i++) {
        mk_tensor *t = &m->tensors[i];
        if (forge_type_bytes(t->type, t->ne[0] * t->ne[1] * t->ne[2], &t->n_bytes) != FORGE_OK) return 0;
        t->offset = offset;
        offset += mk_align(t->n_bytes);
    }

    /* header: magic, version 3, counts, key-value pairs, tensor infos */
    mk_put(b, "GGUF", 4);
    mk_u32(b, 3);
    mk_u64(b, m->n_tensors);
    mk_u64(b, 0); /* the number of key-value pairs, patched below */
#define MK_ARCH_KEY(suffix) (snprintf(key, sizeof key, "%s.%s", s->arch, suffix), key)
    mk_kv_str(b, "general.architecture", s->arch);
    snprintf(text, sizeof text, "forge synthetic %s %s", s->name, mk_mixes[m->mix].name);
    mk_kv_str(b, "general.name", text);
    mk_kv_u32(b, "general.file_type", mk_mixes[m->mix].file_type);
    mk_kv_u32(b, "general.quantization_version", 2);
    mk_kv_u32(b, MK_ARCH_KEY("block_count"), m->n_layer);
    mk_kv_u32(b, MK_ARCH_KEY("context_length"), s->n_ctx);
    mk_kv_u32(b, MK_ARCH_KEY("embedding_length"), s->n_embd);
    mk_kv_u32(b, MK_ARCH_KEY("feed_forward_length"), s->n_ff);
    mk_kv_u32(b, MK_ARCH_KEY("attention.head_count"), s->n_head);
    mk_kv_u32(b, MK_ARCH_KEY("attention.head_count_kv"), s->n_head_kv);
    mk_kv_f32(b, MK_ARCH_KEY("rope.freq_base"), s->rope_base);
    mk_kv_f32(b, MK_ARCH_KEY("attention.layer_norm_rms_epsilon"), s->rms_eps);
    mk_kv_u32(b, MK_ARCH_KEY("rope.dimension_count"), (uint32_t)head_dim);
    if (s->n_expert) {
        mk_kv_u32(b, MK_ARCH_KEY("expert_count"), s->n_expert);
        mk_kv_u32(b, MK_ARCH_KEY("expert_used_count"), s->n_expert_used);
    }
    if (s->arch[0] == 'l') mk_kv_u32(b, MK_ARCH_KEY("vocab_size"), m->n_vocab); /* llama.cpp's converter writes it for llama */
#undef MK_ARCH_KEY
    mk_kv_str(b, "tokenizer.ggml.model", "gpt2");
    mk_kv_str(b, "tokenizer.ggml.pre", s->pre);
    mk_vocab_init(&vocab, s, m->n_vocab);
    mk_kv_array(b, "tokenizer.ggml.tokens", FORGE_GGUF_STRING, m->n_vocab);
    for (i = 0; i < m->n_vocab; i++) {
        int32_t type;
        size_t len = mk_token(&vocab, i, text, &type);
        mk_str(b, text, len);
    }
    mk_kv_array(b, "tokenizer.ggml.token_type", FORGE_GGUF_INT32, m->n_vocab);
    for (i = 0; i < m->n_vocab; i++) {
        int32_t type;
        mk_token(&vocab, i, text, &type);
        mk_u32(b, (uint32_t)type);
    }
    mk_kv_array(b, "tokenizer.ggml.merges", FORGE_GGUF_STRING, MK_N_MERGES);
    for (i = 0; i < MK_N_MERGES; i++) {
        size_t len = (size_t)sprintf(text, "%s %s", mk_merges[i][0], mk_merges[i][1]);
        mk_str(b, text, len);
    }
    /* Llama 3: bos <|begin_of_text|>, eos <|end_of_text|> (the base model), a BOS in front; Qwen2.5:
       bos = pad = <|endoftext|>, eos <|im_end|> (the instruct models), no BOS */
    mk_kv_u32(b, "tokenizer.ggml.bos_token_id", vocab.first_special);
    mk_kv_u32(b, "tokenizer.ggml.eos_token_id", vocab.first_special + (vocab.qwen ? 2 : 1));
    if (vocab.qwen) mk_kv_u32(b, "tokenizer.ggml.padding_token_id", vocab.first_special);
    mk_kv_bool(b, "tokenizer.ggml.add_bos_token", !vocab.qwen);
    if (!b->failed) mk_le64(b->p + 16, b->n_kv);

    for (i = 0; i < m->n_tensors; i++) {
        const mk_tensor *t = &m->tensors[i];
        uint32_t d;
        mk_str(b, t->name, strlen(t->name));
        mk_u32(b, t->n_dims);
        for (d = 0; d < t->n_dims; d++) mk_u64(b, t->ne[d]);
        mk_u32(b, t->type);
        mk_u64(b, t->offset);
    }
    if (b->failed) return 0;
    m->data_offset = mk_align(b->n);
    m->file_bytes = m->data_offset + offset;
    return 1;
}

/* The vocabulary must hold the bytes, the merges and the named special tokens. */
static uint32_t mk_min_vocab(const mk_shape *s) {
    return 256 + (uint32_t)MK_N_MERGES + (s->qwen_vocab ? MK_N_QWEN_SPECIALS : MK_N_LLAMA_NAMED);
}

static int mk_parse_u64(const char *text, const char *what, uint64_t *out) {
    char *end = NULL;
    unsigned long long v;
    if (!text || text[0] == '-' || text[0] == 0) {
        fprintf(stderr, "forge mkmodel: %s needs a non-negative integer\n", what);
        return 0;
    }
    errno = 0;
    v = strtoull(text, &end, 0);
    if (!end || *end || errno || text[0] < '0' || text[0] > '9') {
        fprintf(stderr, "forge mkmodel: %s '%s' is not an integer in [0, 18446744073709551615]\n", what, text);
        return 0;
    }
    *out = (uint64_t)v;
    return 1;
}

static double mk_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void mk_usage(FILE *out) {
    size_t i;
    fprintf(out, "usage: forge mkmodel --shape NAME --type MIX -o FILE [--seed S] [--vocab N] [--layers N] [--dry-run]\n"
                 "  shapes:");
    for (i = 0; i < sizeof mk_shapes / sizeof mk_shapes[0]; i++) fprintf(out, " %s", mk_shapes[i].name);
    fprintf(out, "\n  mixes:");
    for (i = 0; i < sizeof mk_mixes / sizeof mk_mixes[0]; i++) fprintf(out, " %s", mk_mixes[i].name);
    fprintf(out, "\n  --dry-run prints the file size and the tensor table without writing\n");
}

/* Streams every tensor into out; returns 1 on success. */
static int mk_write(const mk_model *m, FILE *out, const char *path) {
    const size_t chunk_bytes = 4u << 20;
    uint8_t *buf = (uint8_t *)malloc(chunk_bytes + MK_ALIGN);
    uint8_t zeros[MK_ALIGN];
    mk_scales scales;
    uint32_t i;
    int ok = 0;

    memset(zeros, 0, sizeof zeros);
    mk_scales_init(&scales);
    if (!buf) {
        fprintf(stderr, "forge mkmodel: out of memory\n");
        return 0;
    }
    if (fwrite(m->header.p, 1, m->header.n, out) != m->header.n ||
        fwrite(zeros, 1, (size_t)(m->data_offset - m->header.n), out) != m->data_offset - m->header.n)
        goto io_error;
    for (i = 0; i < m->n_tensors; i++) {
        const mk_tensor *t = &m->tensors[i];
        const forge_type_traits *tt = forge_type_info(t->type);
        /* F32 and F16: one "block" per element; the F16 generator draws four at a time */
        const uint64_t block_bytes = tt->block_bytes, n_blocks = t->n_bytes / block_bytes;
        const uint64_t per_chunk = (chunk_bytes / block_bytes) & ~(uint64_t)3;
        uint64_t done = 0;
        mk_rng rng;
        mk_rng_seed(&rng, m->seed, i + 1);
        while (done < n_blocks) {
            uint64_t n = n_blocks - done < per_chunk ? n_blocks - done : per_chunk;
            if (t->type == FORGE_TYPE_F32) mk_fill_f32(t->role, &rng, buf, n);
            else mk_fill(t->type, &rng, &scales, buf, n);
            if (fwrite(buf, 1, (size_t)(n * block_bytes), out) != n * block_bytes) goto io_error;
            done += n;
        }
        if (fwrite(zeros, 1, (size_t)(mk_align(t->n_bytes) - t->n_bytes), out) != mk_align(t->n_bytes) - t->n_bytes)
            goto io_error;
    }
    ok = 1;
    goto done;
io_error:
    fprintf(stderr, "forge mkmodel: could not write '%s'\n", path);
done:
    free(buf);
    return ok;
}

static int cmd_mkmodel(int argc, char **argv) {
    const char *shape_name = NULL, *mix_name = NULL, *path = NULL;
    uint64_t seed = 1, layers = 0, vocab = 0;
    int dry_run = 0, bad = 0, mix_found = 0, i, status = 1;
    size_t k;
    mk_model m;
    FILE *out = NULL;

    memset(&m, 0, sizeof m);
    for (i = 0; i < argc; i++) {
        const char *opt = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(opt, "--dry-run")) dry_run = 1;
        else if (!strcmp(opt, "-h") || !strcmp(opt, "--help")) {
            mk_usage(stdout);
            return 0;
        } else if (!value) {
            fprintf(stderr, "forge mkmodel: unexpected '%s'\n", opt);
            bad = 1;
        } else if (!strcmp(opt, "--shape")) shape_name = value, i++;
        else if (!strcmp(opt, "--type")) mix_name = value, i++;
        else if (!strcmp(opt, "-o") || !strcmp(opt, "--output")) path = value, i++;
        else if (!strcmp(opt, "--seed")) bad |= !mk_parse_u64(value, "--seed", &seed), i++;
        else if (!strcmp(opt, "--layers")) bad |= !mk_parse_u64(value, "--layers", &layers), i++;
        else if (!strcmp(opt, "--vocab")) bad |= !mk_parse_u64(value, "--vocab", &vocab), i++;
        else {
            fprintf(stderr, "forge mkmodel: unexpected '%s'\n", opt);
            bad = 1;
        }
    }
    if (bad || !shape_name || !mix_name || (!path && !dry_run)) {
        mk_usage(stderr);
        return 1;
    }
    for (k = 0; k < sizeof mk_shapes / sizeof mk_shapes[0]; k++)
        if (!strcmp(shape_name, mk_shapes[k].name)) m.shape = &mk_shapes[k];
    for (k = 0; k < sizeof mk_mixes / sizeof mk_mixes[0]; k++)
        if (!strcmp(mix_name, mk_mixes[k].name)) m.mix = (mk_mix)k, mix_found = 1;
    if (!m.shape || !mix_found) {
        fprintf(stderr, "forge mkmodel: unknown %s '%s'\n", m.shape ? "type mix" : "shape", m.shape ? mix_name : shape_name);
        mk_usage(stderr);
        return 1;
    }
    m.seed = seed;
    m.n_layer = layers ? (uint32_t)layers : m.shape->n_layer;
    m.n_vocab = vocab ? (uint32_t)vocab : m.shape->n_vocab;
    if (layers > FORGE_MAX_LAYERS) {
        fprintf(stderr, "forge mkmodel: --layers %llu is above forge's limit of %d\n", (unsigned long long)layers, FORGE_MAX_LAYERS);
        return 1;
    }
    if (vocab && (vocab < mk_min_vocab(m.shape) || vocab > FORGE_TOKENIZER_MAX_VOCAB)) {
        fprintf(stderr, "forge mkmodel: --vocab %llu must be between %u and %u for %s\n", (unsigned long long)vocab,
                mk_min_vocab(m.shape), (unsigned)FORGE_TOKENIZER_MAX_VOCAB, m.shape->name);
        return 1;
    }
    if (!mk_build(&m)) {
        fprintf(stderr, "forge mkmodel: out of memory building the header\n");
        goto done;
    }

    if (dry_run) {
        uint32_t t;
        printf("shape %s\ntype %s\nfile_type %u\nn_layer %u\nn_vocab %u\nheader_bytes %llu\ndata_offset %llu\n"
               "file_bytes %llu\nn_tensors %u\n",
               m.shape->name, mk_mixes[m.mix].name, mk_mixes[m.mix].file_type, m.n_layer, m.n_vocab,
               (unsigned long long)m.header.n, (unsigned long long)m.data_offset, (unsigned long long)m.file_bytes,
               m.n_tensors);
        for (t = 0; t < m.n_tensors; t++) {
            const mk_tensor *x = &m.tensors[t];
            if (x->n_dims == 3)
                printf("tensor %s %s %llu,%llu,%llu %llu %llu\n", x->name, forge_type_info(x->type)->name, (unsigned long long)x->ne[0],
                       (unsigned long long)x->ne[1], (unsigned long long)x->ne[2], (unsigned long long)x->n_bytes,
                       (unsigned long long)x->offset);
            else
                printf("tensor %s %s %llu,%llu %llu %llu\n", x->name, forge_type_info(x->type)->name,
                       (unsigned long long)x->ne[0], (unsigned long long)(x->n_dims > 1 ? x->ne[1] : 0),
                       (unsigned long long)x->n_bytes, (unsigned long long)x->offset);
        }
        status = fflush(stdout) == 0 ? 0 : 1;
        goto done;
    }

    out = fopen(path, "wb");
    if (!out) {
        fprintf(stderr, "forge mkmodel: cannot create '%s'\n", path);
        goto done;
    }
    {
        double t0 = mk_seconds(), dt;
        int ok = mk_write(&m, out, path);
        if (fclose(out) != 0 && ok) {
            fprintf(stderr, "forge mkmodel: could not write '%s'\n", path);
            ok = 0;
        }
        out = NULL;
        if (!ok) {
            remove(path);
            goto done;
        }
        dt = mk_seconds() - t0;
        fprintf(stderr, "forge mkmodel: wrote %s: %s %s, %u layers, vocab %u, %u tensors, %llu bytes (%.2f GiB) in %.2f s (%.0f MB/s)\n",
                path, m.shape->name, mk_mixes[m.mix].name, m.n_layer, m.n_vocab, m.n_tensors,
                (unsigned long long)m.file_bytes, (double)m.file_bytes / 1073741824.0, dt,
                dt > 0 ? (double)m.file_bytes / dt / 1e6 : 0.0);
    }
    status = 0;
done:
    if (out) fclose(out);
    free(m.tensors);
    free(m.header.p);
    return status;
}

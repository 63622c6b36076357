"""Writes small valid GGUF models as seeds for the fuzzer (`make fuzz`): several architectures and
every tensor type forge reads, so that mutations start from files that reach the configuration
and dequantization code, not only the header checks.  usage: make_seeds.py OUT_DIR"""
import os
import sys

import numpy as np
import gguf

T = gguf.GGMLQuantizationType
rng = np.random.default_rng(7)


def tensor(w, name, shape, qtype):
    """shape is GGUF order (innermost first); quantized tensors get random bytes of the right size,
    with every 16-bit scale field harmless because dequantization only multiplies them."""
    if qtype == T.F32:
        w.add_tensor(name, rng.standard_normal(shape[::-1]).astype(np.float32))
    elif qtype == T.F16:
        w.add_tensor(name, rng.standard_normal(shape[::-1]).astype(np.float16))
    else:
        block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
        rows = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        row_bytes = shape[0] // block_elems * block_bytes
        data = rng.integers(0, 256, size=(rows, row_bytes), dtype=np.uint8)
        w.add_tensor(name, data.reshape(tuple(shape[1:][::-1]) + (row_bytes,)), raw_dtype=qtype)


def model(path, arch, qtype, n_embd=256, n_layer=2, n_head=4, n_head_kv=2, n_ff=256, n_vocab=64,
          key_length=None, rope_dims=True, biases=False, qk_norm=False, tied=False, poison=None):
    """poison: a value (NaN, inf) written into layer 0's attention norm, so every activation after it
    and the KV cache see non-finite numbers"""
    w = gguf.GGUFWriter(path, arch)
    head_dim = key_length or n_embd // n_head
    w.add_uint32(f"{arch}.block_count", n_layer)
    w.add_uint32(f"{arch}.context_length", 512)
    w.add_uint32(f"{arch}.embedding_length", n_embd)
    w.add_uint32(f"{arch}.feed_forward_length", n_ff)
    w.add_uint32(f"{arch}.attention.head_count", n_head)
    w.add_uint32(f"{arch}.attention.head_count_kv", n_head_kv)
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_float32(f"{arch}.rope.freq_base", 10000.0)
    if key_length:
        w.add_uint32(f"{arch}.attention.key_length", key_length)
        w.add_uint32(f"{arch}.attention.value_length", key_length)
    if rope_dims:
        w.add_uint32(f"{arch}.rope.dimension_count", head_dim)
    w.add_string("tokenizer.ggml.model", "llama")
    w.add_array("tokenizer.ggml.tokens", [f"t{i}" for i in range(n_vocab)])
    w.add_array("tokenizer.ggml.scores", [float(-i) for i in range(n_vocab)])
    w.add_array("tokenizer.ggml.token_type", [1] * n_vocab)
    w.add_uint32("tokenizer.ggml.bos_token_id", 1)
    w.add_uint32("tokenizer.ggml.eos_token_id", 2)
    q, kv = n_head * head_dim, n_head_kv * head_dim
    tensor(w, "token_embd.weight", [n_embd, n_vocab], qtype)
    tensor(w, "output_norm.weight", [n_embd], T.F32)
    if not tied:
        tensor(w, "output.weight", [n_embd, n_vocab], qtype)
    for i in range(n_layer):
        if poison is not None and i == 0:
            norm = rng.standard_normal(n_embd).astype(np.float32)
            norm[0] = poison
            w.add_tensor(f"blk.{i}.attn_norm.weight", norm)
        else:
            tensor(w, f"blk.{i}.attn_norm.weight", [n_embd], T.F32)
        tensor(w, f"blk.{i}.attn_q.weight", [n_embd, q], qtype)
        tensor(w, f"blk.{i}.attn_k.weight", [n_embd, kv], qtype)
        tensor(w, f"blk.{i}.attn_v.weight", [n_embd, kv], qtype)
        if biases:
            tensor(w, f"blk.{i}.attn_q.bias", [q], T.F32)
            tensor(w, f"blk.{i}.attn_k.bias", [kv], T.F32)
            tensor(w, f"blk.{i}.attn_v.bias", [kv], T.F32)
        if qk_norm:
            tensor(w, f"blk.{i}.attn_q_norm.weight", [head_dim], T.F32)
            tensor(w, f"blk.{i}.attn_k_norm.weight", [head_dim], T.F32)
        tensor(w, f"blk.{i}.attn_output.weight", [q, n_embd], qtype)
        tensor(w, f"blk.{i}.ffn_norm.weight", [n_embd], T.F32)
        tensor(w, f"blk.{i}.ffn_gate.weight", [n_embd, n_ff], qtype)
        tensor(w, f"blk.{i}.ffn_up.weight", [n_embd, n_ff], qtype)
        tensor(w, f"blk.{i}.ffn_down.weight", [n_ff, n_embd], qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def vocab_bpe(path, pre):
    """A vocabulary-only byte-level BPE file: the 256 byte characters, a few merges, two specials."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, extra = [], 0
    for b in range(256):
        chars.append(chr(b) if b in printable else chr(256 + extra))
        extra += b not in printable
    merges = ["\u0120 t", "\u0120 a", "h e", "i n", "\u0120t he", "e r", "o n", "| >", "< |"]
    tokens = chars + [m.replace(" ", "") for m in merges] + ["<|im_start|>", "<|im_end|>"]
    w = gguf.GGUFWriter(path, "llama")
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", pre)
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.token_type", [1] * (len(tokens) - 2) + [3, 3])
    w.add_array("tokenizer.ggml.merges", merges)
    w.add_uint32("tokenizer.ggml.bos_token_id", len(tokens) - 2)
    w.add_uint32("tokenizer.ggml.eos_token_id", len(tokens) - 1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    model(os.path.join(out, "llama-f32.gguf"), "llama", T.F32, n_embd=32, n_ff=64, n_vocab=32)
    model(os.path.join(out, "qwen2-f16.gguf"), "qwen2", T.F16, n_embd=32, n_ff=64, n_vocab=32,
          rope_dims=False, biases=True, tied=True)
    model(os.path.join(out, "qwen3-f16.gguf"), "qwen3", T.F16, n_embd=32, n_head=4, n_ff=64,
          n_vocab=32, key_length=16, qk_norm=True)
    for qtype in (T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.IQ4_NL):
        model(os.path.join(out, f"llama-{qtype.name.lower()}.gguf"), "llama", qtype, n_embd=32,
              n_ff=64, n_vocab=32, n_layer=1)
    # head size 32, so the q8_0 and q4_0 caches can be made; and the same with NaN and inf activations
    model(os.path.join(out, "llama-hd32-f32.gguf"), "llama", T.F32, n_embd=64, n_head=2, n_head_kv=1, n_ff=64, n_vocab=32,
          n_layer=1)
    model(os.path.join(out, "llama-hd32-nan.gguf"), "llama", T.F32, n_embd=64, n_head=2, n_head_kv=1, n_ff=64, n_vocab=32,
          n_layer=1, poison=np.nan)
    model(os.path.join(out, "llama-hd32-inf.gguf"), "llama", T.F32, n_embd=64, n_head=2, n_head_kv=1, n_ff=64, n_vocab=32,
          n_layer=1, poison=np.inf)
    for pre in ("deepseek-llm", "llama3", "default"):
        vocab_bpe(os.path.join(out, f"vocab-bpe-{pre}.gguf"), pre)
    # 256-element blocks make whole models large; a few bare tensors keep these seeds small
    w = gguf.GGUFWriter(os.path.join(out, "tensors-k.gguf"), "llama")
    for qtype in (T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.IQ4_XS, T.BF16):
        tensor(w, f"{qtype.name.lower()}.weight", [256, 2], qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()

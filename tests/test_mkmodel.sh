#!/bin/sh
# forge mkmodel: every shape with every type mix, made small (--layers, --vocab), must load in forge
# with the configuration of the real model, evaluate to finite logits, and have exactly the size its
# dry run announces; the full-size llama3-8b q4_k_m table and header are recomputed independently in
# Python (without writing the 4.6 GiB file). Last line: "N passed, N failed".
cd "$(dirname "$0")/.." || exit 1
B=${BUILD:-build}
PY=${PYTHON:-python3}
FORGE=$B/forge
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_mkmodel.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0

# check NAME COMMAND...: one test; the output of a failure is shown
check() {
  name=$1; shift
  if "$@" >"$tmp/log" 2>&1; then
    echo "ok $name"; passed=$((passed + 1))
  else
    echo "FAIL $name"; sed 's/^/    /' "$tmp/log" | tail -n 25; failed=$((failed + 1))
  fi
}

cat >"$tmp/check.py" <<'EOF'
"""Checks of one generated file against its dry run and the real model's configuration."""
import json, os, subprocess, sys

def dry_run(text):
    info, tensors = {}, []
    for line in text.splitlines():
        p = line.split()
        if p[0] == "tensor":
            ne0, ne1 = (int(x) for x in p[3].split(","))
            tensors.append({"name": p[1], "type": p[2], "shape": [ne0] + ([ne1] if ne1 else []),
                            "bytes": int(p[4]), "offset": int(p[5])})
        else:
            info[p[0]] = p[1]
    return info, tensors

# name: (arch, n_layer, n_embd, n_head, n_head_kv, n_ff, tied, qkv bias, rope base, eps, context)
SHAPES = {
    "llama3-8b": ("llama", 32, 4096, 32, 8, 14336, False, False, 500000.0, 1e-5, 8192),
    "qwen2.5-0.5b": ("qwen2", 24, 896, 14, 2, 4864, True, True, 1e6, 1e-6, 32768),
    "qwen2.5-1.5b": ("qwen2", 28, 1536, 12, 2, 8960, True, True, 1e6, 1e-6, 32768),
    "qwen2.5-7b": ("qwen2", 28, 3584, 28, 4, 18944, False, True, 1e6, 1e-6, 32768),
}
FILE_TYPES = {"q4_0": 2, "q8_0": 7, "f16": 1, "q4_k_m": 15}

def main():
    forge, path, shape, mix, layers, vocab, dry_path = sys.argv[1:8]
    layers, vocab = int(layers), int(vocab)
    info, table = dry_run(open(dry_path).read())
    size = os.path.getsize(path)
    assert size == int(info["file_bytes"]), f"file is {size} bytes, the dry run said {info['file_bytes']}"
    out = subprocess.run([forge, "info", path, "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    j = json.loads(out.stdout)
    c = j["config"]
    arch, _, embd, head, head_kv, ff, tied, bias, base, eps, ctx = SHAPES[shape]
    want = {"arch": arch, "n_layer": layers, "n_embd": embd, "n_head": head, "n_head_kv": head_kv, "n_ff": ff,
            "n_vocab": vocab, "tied_output": tied, "has_qkv_bias": bias, "file_type": FILE_TYPES[mix],
            "n_ctx_train": ctx, "head_dim": embd // head, "vocab_type": "BPE"}
    for k, v in want.items():
        assert c[k] == v, f"config {k} is {c[k]!r}, expected {v!r}"
    assert abs(c["rope_freq_base"] - base) <= 1e-6 * base and abs(c["rms_eps"] - eps) <= 1e-3 * eps, c
    assert j["gguf"]["data_offset"] == int(info["data_offset"]), (j["gguf"], info)
    assert j["gguf"]["data_offset"] % 32 == 0
    assert len(j["tensors"]) == len(table), (len(j["tensors"]), len(table))
    for a, b in zip(j["tensors"], table):
        assert (a["name"], a["type"], a["shape"], a["bytes"], a["offset"]) == \
               (b["name"], b["type"], b["shape"], b["bytes"], b["offset"]), (a, b)
        assert a["offset"] % 32 == 0, a
    print("ok", path)

main()
EOF

cat >"$tmp/logits.py" <<'EOF'
import sys, numpy as np
a = np.fromfile(sys.argv[1], dtype="<f4")
n, vocab = int(sys.argv[2]), int(sys.argv[3])
assert a.size == n * vocab, (a.size, n, vocab)
assert np.isfinite(a).all(), "logits are not all finite"
assert a.std() > 0, "logits are constant"
print("logits finite, std %.3f, max |x| %.3f" % (a.std(), np.abs(a).max()))
EOF

cat >"$tmp/weights.py" <<'EOF'
"""Dequantizes every tensor with the gguf package (not forge's reader) and checks the values."""
import sys, numpy as np, gguf
from gguf.quants import dequantize
r = gguf.GGUFReader(sys.argv[1])
types = set()
for t in r.tensors:
    w = dequantize(t.data, t.tensor_type).astype(np.float64).ravel()
    types.add(t.tensor_type.name)
    assert np.isfinite(w).all(), t.name
    if t.name.endswith("norm.weight"):
        assert abs(w.mean() - 1) < 0.05 and np.abs(w - 1).max() <= 0.06, (t.name, w.mean())
    else:
        assert np.abs(w).max() < 0.15 and 0.005 < w.std() < 0.05 and abs(w.mean()) < 0.005, \
            (t.name, w.mean(), w.std(), np.abs(w).max())
print("values sane in", sorted(types))
EOF

# The full-size Llama-3-8B Q4_K_M: tensor table, types and sizes by llama.cpp's rules, and the header
# bytes, recomputed here from the model's numbers; compared with mkmodel's dry run.
cat >"$tmp/full.py" <<'EOF'
import sys
info, rows = {}, []
for line in open(sys.argv[1]):
    p = line.split()
    if p[0] == "tensor": rows.append((p[1], p[2], p[3], int(p[4]), int(p[5])))
    else: info[p[0]] = p[1]

L, E, H, HKV, FF, V = 32, 4096, 32, 8, 14336, 128256
hd = E // H
BLOCK = {"F32": (1, 4), "Q4_K": (256, 144), "Q6_K": (256, 210)}
more_bits = lambda i: i < L // 8 or i >= 7 * L // 8 or (i - L // 8) % 3 == 2
want = [("token_embd.weight", "Q4_K", (E, V))]
for i in range(L):
    b = f"blk.{i}."
    want += [(b + "attn_norm.weight", "F32", (E,)), (b + "attn_q.weight", "Q4_K", (E, H * hd)),
             (b + "attn_k.weight", "Q4_K", (E, HKV * hd)),
             (b + "attn_v.weight", "Q6_K" if more_bits(i) else "Q4_K", (E, HKV * hd)),
             (b + "attn_output.weight", "Q4_K", (H * hd, E)), (b + "ffn_norm.weight", "F32", (E,)),
             (b + "ffn_gate.weight", "Q4_K", (E, FF)), (b + "ffn_up.weight", "Q4_K", (E, FF)),
             (b + "ffn_down.weight", "Q6_K" if more_bits(i) else "Q4_K", (FF, E))]
want += [("output_norm.weight", "F32", (E,)), ("output.weight", "Q6_K", (E, V))]
assert len(rows) == len(want), (len(rows), len(want))
align = lambda x: (x + 31) // 32 * 32
offset = 0
for (name, typ, shape), (rn, rt, rs, rb, ro) in zip(want, rows):
    n = shape[0] * (shape[1] if len(shape) > 1 else 1)
    be, bb = BLOCK[typ]
    nbytes = n // be * bb
    assert (rn, rt, rb, ro) == (name, typ, nbytes, offset), ((rn, rt, rb, ro), (name, typ, nbytes, offset))
    assert rs == "%d,%d" % (shape[0], shape[1] if len(shape) > 1 else 0), (rn, rs)
    offset += align(nbytes)

# header: GGUF v3 key-value pairs and tensor infos, serialized by hand
def s(x): return 8 + len(x.encode())
def kv(key, value_bytes): return s(key) + 4 + value_bytes
def byte_symbol(b):
    printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    return chr(b) if b in printable else chr(256 + [c for c in range(256) if c not in printable].index(b))
merges = ["Ġ t", "Ġ a", "h e", "i n", "r e", "o n", "Ġt he", "e r", "Ġ s", "a t", "Ġ w", "Ġ o", "e n", "o r", "l l",
          "l d", "Ġw or", "Ġwor ld", "he ll", "hell o", "a n", "Ġa n", "Ġan d", "i s", "i t", "e s", "e d", "n g",
          "in g", "Ġo f", "Ġ in", "Ġt o"]
tokens = [byte_symbol(b) for b in range(256)] + [m.replace(" ", "") for m in merges]
tokens += ["<tok_%d>" % i for i in range(len(tokens), 128000)]
named = {0: "<|begin_of_text|>", 1: "<|end_of_text|>", 6: "<|start_header_id|>", 7: "<|end_header_id|>",
         8: "<|reserved_special_token_4|>", 9: "<|eot_id|>"}
tokens += [named.get(j, "<|reserved_special_token_%d|>" % (j - 2 if j < 6 else j - 5)) for j in range(256)]
assert len(tokens) == V and len(set(tokens)) == V
header = 4 + 4 + 8 + 8
header += kv("general.architecture", s("llama")) + kv("general.name", s("forge synthetic llama3-8b q4_k_m"))
header += kv("general.file_type", 4) + kv("general.quantization_version", 4)
for k in ["block_count", "context_length", "embedding_length", "feed_forward_length", "attention.head_count",
          "attention.head_count_kv", "rope.freq_base", "attention.layer_norm_rms_epsilon", "rope.dimension_count",
          "vocab_size"]:
    header += kv("llama." + k, 4)
header += kv("tokenizer.ggml.model", s("gpt2")) + kv("tokenizer.ggml.pre", s("llama-bpe"))
header += kv("tokenizer.ggml.tokens", 4 + 8 + sum(s(t) for t in tokens))
header += kv("tokenizer.ggml.token_type", 4 + 8 + 4 * V)
header += kv("tokenizer.ggml.merges", 4 + 8 + sum(s(m) for m in merges))
header += kv("tokenizer.ggml.bos_token_id", 4) + kv("tokenizer.ggml.eos_token_id", 4)
header += kv("tokenizer.ggml.add_bos_token", 1)
header += sum(s(name) + 4 + 8 * len(shape) + 4 + 8 for name, _, shape in want)
assert int(info["header_bytes"]) == header, (info["header_bytes"], header)
total = align(header) + offset
assert int(info["file_bytes"]) == total, (info["file_bytes"], total)
print("llama3-8b q4_k_m: %d tensors, header %d bytes, file %d bytes (%.3f GiB)" % (len(want), header, total, total / 2**30))
EOF

for shape in llama3-8b qwen2.5-0.5b qwen2.5-1.5b qwen2.5-7b; do
  case $shape in
    llama3-8b|qwen2.5-7b) layers=1 ;;  # one layer of these is already a few hundred MB in f16
    *) layers=2 ;;
  esac
  vocab=2048
  for mix in q4_0 q8_0 f16 q4_k_m; do
    f=$tmp/$shape-$mix.gguf
    args="--shape $shape --type $mix --layers $layers --vocab $vocab"
    check "mkmodel $shape $mix writes" $FORGE mkmodel $args -o "$f"
    $FORGE mkmodel $args --dry-run >"$tmp/dry.txt" 2>&1
    check "mkmodel $shape $mix: size, config, tensor table" $PY "$tmp/check.py" $FORGE "$f" $shape $mix $layers $vocab "$tmp/dry.txt"
    check "mkmodel $shape $mix: eval gives finite logits" sh -c \
      "$FORGE eval -m '$f' --tokens 1,275,273,2000 --logits '$tmp/logits.f32' --ctx 64 && $PY '$tmp/logits.py' '$tmp/logits.f32' 4 $vocab"
    if [ $shape = qwen2.5-0.5b ]; then
      check "mkmodel $shape $mix: weights dequantize (gguf package) to sane values" $PY "$tmp/weights.py" "$f"
    fi
    [ $shape = qwen2.5-0.5b ] && [ $mix = q4_k_m ] || rm -f "$f"
  done
done

f=$tmp/qwen2.5-0.5b-q4_k_m.gguf
check "mkmodel: forge tokenize 'hello world' uses the merges" sh -c \
  "test \"\$($FORGE tokenize -m '$f' 'hello world')\" = '275 273'"
check "mkmodel: forge plan prints a plan" sh -c "$FORGE plan '$f' --ctx 512 | grep -q '^  total'"
check "mkmodel: the same seed gives the same bytes" sh -c \
  "$FORGE mkmodel --shape qwen2.5-0.5b --type q4_k_m --layers 2 --vocab 2048 -o '$tmp/again.gguf' && cmp '$f' '$tmp/again.gguf'"
check "mkmodel: another seed gives other bytes" sh -c \
  "$FORGE mkmodel --shape qwen2.5-0.5b --type q4_k_m --layers 2 --vocab 2048 --seed 7 -o '$tmp/other.gguf' && ! cmp -s '$f' '$tmp/other.gguf'"
check "mkmodel: full vocabulary tokenizes" sh -c \
  "$FORGE mkmodel --shape qwen2.5-0.5b --type q4_0 --layers 1 -o '$tmp/fullvocab.gguf' && test \"\$($FORGE tokenize -m '$tmp/fullvocab.gguf' 'hello world')\" = '275 273' && $FORGE info '$tmp/fullvocab.gguf' | grep -q \"bos 151643 '<|endoftext|>', eos 151645 '<|im_end|>'\""
rm -f "$tmp"/*.gguf
check "mkmodel: full-size llama3-8b q4_k_m dry run matches an independent computation" sh -c \
  "$FORGE mkmodel --shape llama3-8b --type q4_k_m --dry-run >'$tmp/full.txt' && $PY '$tmp/full.py' '$tmp/full.txt'"
# the mixture of experts (Mixtral-8x7B's shape): the router and each projection's experts in one
# tensor as llama.cpp writes them, read back by the gguf package, evaluated by forge
check "mkmodel mixtral-8x7b q4_0 writes" $FORGE mkmodel --shape mixtral-8x7b --type q4_0 --layers 1 --vocab 2048 -o "$tmp/mx.gguf"
check "mkmodel mixtral-8x7b: 8 experts, 2 a token, the experts' tensors" $PY -c "
import sys, gguf
r = gguf.GGUFReader(sys.argv[1])
f = lambda k: int(r.fields[k].parts[-1][0])
assert f('llama.expert_count') == 8 and f('llama.expert_used_count') == 2, 'expert counts'
t = {x.name: ([int(v) for v in x.shape], x.tensor_type.name) for x in r.tensors}
assert t['blk.0.ffn_gate_exps.weight'] == ([4096, 14336, 8], 'Q4_0'), t['blk.0.ffn_gate_exps.weight']
assert t['blk.0.ffn_down_exps.weight'][0] == [14336, 4096, 8] and t['blk.0.ffn_up_exps.weight'][0] == [4096, 14336, 8]
assert t['blk.0.ffn_gate_inp.weight'] == ([4096, 8], 'F32'), t['blk.0.ffn_gate_inp.weight']
assert 'blk.0.ffn_gate.weight' not in t
" "$tmp/mx.gguf"
check "mkmodel mixtral-8x7b: eval gives finite logits" sh -c \
  "$FORGE eval -m '$tmp/mx.gguf' --tokens 1,275,273,2000 --logits '$tmp/logits.f32' --ctx 64 && $PY '$tmp/logits.py' '$tmp/logits.f32' 4 2048"
rm -f "$tmp/mx.gguf"
check "mkmodel: llama3-70b is 80 layers, 723 tensors" sh -c \
  "$FORGE mkmodel --shape llama3-70b --type q4_k_m --dry-run | grep -q '^n_tensors 723\$' && $FORGE mkmodel --shape llama3-70b --type q4_k_m --dry-run | grep -q '^n_layer 80\$'"
check "mkmodel: unknown shape is refused" sh -c "! $FORGE mkmodel --shape llama9 --type q4_0 -o '$tmp/x.gguf' && test ! -e '$tmp/x.gguf'"
check "mkmodel: unknown mix is refused" sh -c "! $FORGE mkmodel --shape llama3-8b --type q3_k -o '$tmp/x.gguf'"
check "mkmodel: a vocabulary too small is refused" sh -c "! $FORGE mkmodel --shape llama3-8b --type q4_0 --vocab 100 -o '$tmp/x.gguf'"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

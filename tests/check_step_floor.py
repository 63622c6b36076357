#!/usr/bin/env python3
"""Checks tools/step_floor.py (the launches of a decode step and their bytes, for tools/step_floor.cu)
against the gguf package's own reading of fixture files: every layer's products carry exactly the
bytes of that layer's tensors, the head those of the output matrix (or the tied embeddings) and the
final norm, the attention the K and V rows of its span (the window on sliding-window layers); a
mixture of experts and a negative span are refused.
usage: check_step_floor.py --forge FORGE --fixtures DIR. Ends with "N passed, N failed"."""
import argparse
import os
import subprocess
import sys
import tempfile

import gguf

from checks import check, summary

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.join(HERE, "..", "tools", "step_floor.py")


def field(reader, key):
    f = reader.fields.get(key)
    return None if f is None else f.parts[f.data[0]]


def launches(info, *extra):
    p = subprocess.run([sys.executable, TOOL, info] + list(extra), capture_output=True, text=True)
    rows = []
    for line in p.stdout.splitlines():
        if line and not line.startswith("#"):
            b, name = line.split()
            rows.append((int(b), name))
    return p.returncode, rows, p.stderr


def one(forge, path, tmp, span):
    name = os.path.basename(path)
    info = os.path.join(tmp, name + ".json")
    with open(info, "w") as f:
        subprocess.run([forge, "info", "--json", path], stdout=f, check=True)
    r = gguf.GGUFReader(path)
    arch = bytes(field(r, "general.architecture")).decode()
    num = lambda key: None if field(r, key) is None else int(field(r, key)[0])
    n_layer = num(arch + ".block_count")
    n_head = num(arch + ".attention.head_count")
    n_kv = num(arch + ".attention.head_count_kv")
    embd = num(arch + ".embedding_length")
    kl = num(arch + ".attention.key_length")
    vl = num(arch + ".attention.value_length")
    kl = kl if kl is not None else embd // n_head
    vl = vl if vl is not None else embd // n_head
    window = num(arch + ".attention.sliding_window")
    sizes = {t.name: int(t.n_bytes) for t in r.tensors}
    per_layer = [sum(b for n, b in sizes.items() if n.startswith("blk.%d." % i)) for i in range(n_layer)]
    head = sizes.get("output.weight", sizes.get("token_embd.weight")) + sizes["output_norm.weight"]

    rc, rows, err = launches(info, "--span", str(span))
    check(rc == 0 and len(rows) == 5 * n_layer + 1, "%s: %d launches, five a layer and the head (rc %d %s)" % (name, len(rows), rc, err.strip()))
    if rc or len(rows) != 5 * n_layer + 1:
        return
    got = [sum(b for b, n in rows[5 * i:5 * i + 5] if not n.endswith(".attention")) for i in range(n_layer)]
    check(got == per_layer, "%s: each layer's products read that layer's tensors (%s)" % (name, got[:2]))
    if arch == "llama":  # each launch's own tensors, as forge's step groups them
        t = lambda *parts: sum(sizes["blk.0.%s.weight" % x] for x in parts)
        want = [t("attn_norm", "attn_q", "attn_k", "attn_v"), t("attn_output"), t("ffn_norm", "ffn_gate", "ffn_up"), t("ffn_down")]
        got0 = [rows[0][0], rows[2][0], rows[3][0], rows[4][0]]
        check(got0 == want, "%s: q/k/v with the attention norm, o, gate/up with the FFN norm, down (%s, %s)" % (name, got0, want))
    check(rows[-1] == (head, "head"), "%s: the head reads %d bytes (%d)" % (name, head, rows[-1][0]))
    row = n_kv * (kl + vl) * 2
    att = [b for b, n in rows if n.endswith(".attention")]
    if window is None:
        check(att == [row * span] * n_layer, "%s: attention reads %d positions' K and V rows, f16 (%s)" % (name, span, att[:2]))
    else:
        # the file names a window; forge's configuration says which layers slide (Phi-3's none)
        want = {row * span, row * min(span, window)}
        check(set(att) <= want and (span <= window or name.startswith("tiny-gemma2") and set(att) == want),
              "%s: attention reads %d positions, at most %d on sliding layers (%s)" % (name, span, window, sorted(set(att))))
    rc, q8, err = launches(info, "--span", str(span), "--kv", "q8_0")
    check(rc == 0 and [b for b, n in q8 if n.endswith(".attention")] == [b * 17 // 32 for b in att],
          "%s: a q8_0 cache row is 34 bytes a 32 values" % name)
    rc, norms, err = launches(info, "--span", str(span), "--norms")
    check(rc == 0 and len(norms) == 7 * n_layer + 1 and sum(b for b, n in norms) == sum(b for b, n in rows),
          "%s: --norms adds two launches a layer reading nothing" % name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--forge", required=True)
    ap.add_argument("--fixtures", required=True)
    a = ap.parse_args()
    models = os.path.join(a.fixtures, "models")
    with tempfile.TemporaryDirectory() as tmp:
        for name, span in (("tiny-llama-q4_0", 64), ("tiny-qwen2-q4_k_m", 100), ("tiny-gemma-q4_k_m", 64),
                           ("tiny-gemma2-q4_k_m", 9000), ("tiny-phi3-q4_k_m", 64), ("tiny-qwen3-q8_0", 64)):
            one(a.forge, os.path.join(models, name + ".gguf"), tmp, span)
        moe = os.path.join(tmp, "moe.json")
        with open(moe, "w") as f:
            subprocess.run([a.forge, "info", "--json", os.path.join(models, "tiny-qwen3moe-q4_k_m.gguf")], stdout=f, check=True)
        rc, rows, err = launches(moe)
        check(rc != 0 and not rows and "_exps" in err, "a mixture of experts is refused (%s)" % err.strip())
        rc, rows, err = launches(moe.replace("moe.json", "tiny-llama-q4_0.gguf.json"), "--span", "-1")
        check(rc != 0 and not rows and "--span" in err, "a negative span is refused (%s)" % err.strip())
    return summary()


if __name__ == "__main__":
    sys.exit(main())

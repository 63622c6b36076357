#!/usr/bin/env python3
"""A decode step's launches and the bytes each must read, for tools/step_floor.cu.

usage: python3 tools/step_floor.py INFO_JSON [--span N] [--kv f16|q8_0|q4_0|f32] [--norms]

INFO_JSON is `forge info --json MODEL`'s output. The step is forge's fewest dependent launches for a
dense transformer layer: the q/k/v products (with the layer's attention norm), the attention over
--span cached positions (at most the window on sliding-window layers; the K and V rows of every KV
head at the cache type's size), the output projection, gate and up (with the FFN norm), down; then
the head (the output matrix, or the token embeddings where the file ties them, with the final norm).
--norms adds a launch that reads nothing after each residual product, for models whose step launches
its norms separately. Dense layers only: a mixture of experts is refused (its step reads only the
routed experts).
"""
import argparse
import json
import re
import sys

KV_BYTES = {"f32": 4.0, "f16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("info")
    ap.add_argument("--span", type=int, default=64, help="cached positions each layer's attention reads (default 64)")
    ap.add_argument("--kv", default="f16", choices=sorted(KV_BYTES))
    ap.add_argument("--norms", action="store_true")
    a = ap.parse_args()
    if a.span < 0:
        sys.exit("step_floor.py: --span must be 0 or more")
    with open(a.info) as f:
        info = json.load(f)
    cfg = info.get("config")
    if not cfg:
        sys.exit("step_floor.py: %s has no model configuration (%s)" % (a.info, info.get("config_error")))
    layers = [dict(qkv=0, o=0, gate_up=0, down=0) for _ in range(cfg["n_layer"])]
    head = 0
    embd = 0
    for t in info["tensors"]:
        name, b = t["name"], t["bytes"]
        m = re.match(r"blk\.(\d+)\.(\w+)\.", name)
        if m:
            layer, part = layers[int(m.group(1))], m.group(2)
            if part in ("attn_q", "attn_k", "attn_v", "attn_qkv", "attn_norm", "attn_q_norm", "attn_k_norm"):
                layer["qkv"] += b
            elif part in ("attn_output", "post_attention_norm"):
                layer["o"] += b
            elif part in ("ffn_gate", "ffn_up", "ffn_gate_up", "ffn_norm"):
                layer["gate_up"] += b
            elif part in ("ffn_down", "post_ffw_norm"):
                layer["down"] += b
            else:  # experts, for one: a step reads only the routed ones
                sys.exit("step_floor.py: %s: not a tensor of the dense layer this step knows" % name)
        elif name in ("output.weight", "output_norm.weight"):
            head += b
        elif name == "token_embd.weight":
            embd = b
    if cfg.get("tied_output"):
        head += embd
    swa = cfg.get("layer_is_swa") or []
    row = cfg["n_head_kv"] * (cfg["head_dim"] + cfg["head_dim_v"]) * KV_BYTES[a.kv]
    print("# %s: %d layers, attention over %d positions, %s cache" % (info["file"], len(layers), a.span, a.kv))
    for i, layer in enumerate(layers):
        print("%d blk.%d.qkv" % (layer["qkv"], i))
        span = min(a.span, cfg["n_swa"]) if i < len(swa) and swa[i] and cfg.get("n_swa") else a.span
        print("%d blk.%d.attention" % (row * span, i))
        print("%d blk.%d.o" % (layer["o"], i))
        if a.norms:
            print("0 blk.%d.norm" % i)
        print("%d blk.%d.gate_up" % (layer["gate_up"], i))
        print("%d blk.%d.down" % (layer["down"], i))
        if a.norms:
            print("0 blk.%d.norm2" % i)
    print("%d head" % head)


if __name__ == "__main__":
    main()

"""forge extract end to end: the .npy files load with numpy alone and have the documented names,
shapes and dtypes; chunked extraction equals an unchunked one; the residual stream adds up; bf16
widens back to the f32 values; and the head applied to the final capture gives the float64
reference logits of the fixture (outside truth, computed without forge).
usage: check_extract.py --forge build/forge --fixtures ../shared/fixtures"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import gguf

passed = failed = 0


def check(good, text):
    global passed, failed
    if good:
        passed += 1
        print("ok   " + text, flush=True)
    else:
        failed += 1
        print("FAIL " + text, flush=True)


def extract(forge, model, tokens, out, chunk, dtype, points="resid_pre,attn_out,mlp_out,resid_post,final", layers="all"):
    cmd = [forge, "extract", "-m", model, "--tokens", ",".join(map(str, tokens)), "--layers", layers, "--points", points,
           "--chunk", str(chunk), "--dtype", dtype, "-o", out, "--cpu"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    check(proc.returncode == 0, "extract chunk %d %s: exit %d %s" % (chunk, dtype, proc.returncode, proc.stderr.strip()[:200]))
    if proc.returncode != 0:
        return None
    with open(os.path.join(out, "index.json")) as f:
        index = json.load(f)
    arrays = {}
    for c in index["captures"]:
        arrays[c["name"]] = np.load(os.path.join(out, c["file"]))
    return index, arrays


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--forge", required=True)
    ap.add_argument("--fixtures", required=True)
    args = ap.parse_args()
    models = os.path.join(args.fixtures, "models")
    with open(os.path.join(models, "index.json")) as f:
        fixtures = json.load(f)
    tokens = fixtures["tokens"]
    name = "tiny-llama-f16.gguf"
    model = os.path.join(models, name)
    reader = gguf.GGUFReader(model)
    n_layer = int(reader.fields["llama.block_count"].parts[-1][0])
    n_embd = int(reader.fields["llama.embedding_length"].parts[-1][0])
    with tempfile.TemporaryDirectory() as tmp:
        runs = {}
        for chunk, dtype in ((512, "f32"), (7, "f32"), (1, "f32"), (512, "bf16")):
            got = extract(args.forge, model, tokens, os.path.join(tmp, "c%d%s" % (chunk, dtype)), chunk, dtype)
            if got is None:
                continue
            runs[(chunk, dtype)] = got
            index, arrays = got
            want_names = ["blocks.%d.hook_%s" % (l, p) for l in range(n_layer)
                          for p in ("resid_pre", "attn_out", "mlp_out", "resid_post")] + ["ln_final.hook_normalized"]
            check([c["name"] for c in index["captures"]] == want_names, "chunk %d %s: the captures named and ordered" % (chunk, dtype))
            np_dtype = np.float32 if dtype == "f32" else np.uint16
            check(all(a.shape == (len(tokens), n_embd) and a.dtype == np_dtype for a in arrays.values()) and
                  all(c["shape"] == [len(tokens), n_embd] and c["dtype"] == dtype for c in index["captures"]),
                  "chunk %d %s: shapes [%d, %d], dtype %s" % (chunk, dtype, len(tokens), n_embd, np_dtype.__name__))
            ids = np.load(os.path.join(tmp, "c%d%s" % (chunk, dtype), "tokens.npy"))
            check(ids.dtype == np.int32 and ids.tolist() == tokens, "chunk %d %s: tokens.npy holds the ids" % (chunk, dtype))
            check(index["n_tokens"] == len(tokens) and index["chunk"] == min(chunk, len(tokens)),
                  "chunk %d %s: index.json n_tokens and chunk" % (chunk, dtype))
        if (512, "f32") not in runs:
            return
        ref = runs[(512, "f32")][1]
        for l in range(n_layer):
            pre, att, mlp, post = (ref["blocks.%d.hook_%s" % (l, p)] for p in ("resid_pre", "attn_out", "mlp_out", "resid_post"))
            check(np.array_equal((pre + att) + mlp, post), "layer %d: resid_post == resid_pre + attn_out + mlp_out" % l)
        for chunk in (7, 1):
            if (chunk, "f32") in runs:
                arrays = runs[(chunk, "f32")][1]
                worst = max(float(np.abs(arrays[k] - ref[k]).max() / max(np.abs(ref[k]).max(), 1e-30)) for k in ref)
                check(worst <= 1e-4, "chunks of %d equal one batch: largest relative difference %.2e" % (chunk, worst))
        if (512, "bf16") in runs:
            bf = runs[(512, "bf16")][1]
            worst = 0.0
            for k in ref:
                wide = (bf[k].astype(np.uint32) << 16).view(np.float32)
                worst = max(worst, float(np.abs(wide - ref[k]).max() / np.abs(ref[k]).max()))
            check(worst <= 2.0 ** -8, "bf16 widens back to f32 within its precision (%.2e)" % worst)
        # the head on the final capture against the fixture's float64 reference logits
        head = next(t for t in reader.tensors if t.name == "output.weight")
        w = gguf.dequantize(head.data, head.tensor_type).reshape(-1, n_embd).astype(np.float64)
        logits = ref["ln_final.hook_normalized"].astype(np.float64) @ w.T
        ref64 = np.fromfile(os.path.join(models, fixtures["files"][name]["reference_logits"]), dtype="<f4")
        ref64 = ref64.astype(np.float64).reshape(len(tokens), -1)
        rel = float(np.linalg.norm(logits - ref64) / np.linalg.norm(ref64))
        tol = fixtures["files"][name]["tolerance_rel_l2_vs_reference"]
        check(rel <= tol, "head(final capture) vs the float64 reference logits: rel L2 %.2e (tolerance %.2e)" % (rel, tol))
        # a request the model cannot satisfy fails clearly
        proc = subprocess.run([args.forge, "extract", "-m", model, "--tokens", "1,2,3", "--layers", "%d" % n_layer,
                               "-o", os.path.join(tmp, "bad"), "--cpu"], capture_output=True, text=True, timeout=60)
        check(proc.returncode == 1 and "layer" in proc.stderr and not os.path.exists(os.path.join(tmp, "bad")),
              "layer %d of %d is refused before anything is written: %s" % (n_layer, n_layer, proc.stderr.strip()[:120]))
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

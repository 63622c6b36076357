#!/usr/bin/env python3
"""Check forge against outside truth kept in the shared fixtures.

Usage:
    python3 tests/check_fixtures.py --forge build/forge --dump build/dump_tensors [--fixtures DIR]

Checks:
  (a) config:    `forge info --json` on every model listed in models/index.json derives the same
                 hyper-parameters as llama.cpp's loader did (index.json's peer_hparams).
  (b) dequant:   build/dump_tensors' f32 values for every tensor of every model equal the gguf
                 Python package's dequantization (gguf.quants.dequantize).
  (c) tokenizer: `forge info --json` reads the vocabulary-only files of tokenizer/ (model name and
                 token count as gguf.GGUFReader reads them; no configuration derived).
  (d) logits:    `forge eval --cpu` on tokens.txt against the float64 reference: within the index's
                 tolerance (the outer bound) and within a few times forge's own measured distance
                 (the inner bound), over all positions and at the worst one, for each KV cache type.
  (e) plan:      `forge plan` and `forge bench` verdicts.
  (f) long:      1,536-token sequences of long/ against their float64 reference in the same way.

Prints one "ok ..." / "FAIL ..." line per check and, as the last line, "N passed, N failed".
Exits non-zero when anything failed. Missing fixtures or binaries are failures, never skips:
a test that silently checks nothing is worse than one that fails.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np
import gguf

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Every tensor type forge claims to read; check (b) must see each one at least once, otherwise the
# fixtures no longer cover what forge promises and the test would be quietly weaker.
ALL_TYPES = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0",
             "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS"]

# A forge process that takes longer than this on a fixture of a few MB is hung, not slow.
SUBPROCESS_TIMEOUT_S = 120

# Dequantized values may differ from the reference only by float rounding (the two compute the same
# products in possibly different orders), so relative to the tensor's largest value.
DEQUANT_REL_TOL = 1e-6

# llama.cpp prints f_norm_rms_eps with two significant digits ("1.0e-05"); the fixtures use round
# values, so a small relative tolerance is enough and still catches a wrong key or default.
RMS_EPS_REL_TOL = 1e-4
# Rope bases are printed with one decimal ("10000.0"); they are integers in every fixture.
FREQ_REL_TOL = 1e-6


class Tally:
    """Counts and prints check results."""

    def __init__(self):
        self.passed = 0
        self.failed = 0

    def ok(self, text):
        self.passed += 1
        print("ok   " + text, flush=True)

    def fail(self, text):
        self.failed += 1
        print("FAIL " + text, flush=True)

    def check(self, good, text):
        if good:
            self.ok(text)
        else:
            self.fail(text)


def reject_constant(name):
    # Python's json accepts NaN/Infinity, which are not JSON; the CLI must not print them.
    raise ValueError("non-standard JSON constant " + name)


def forge_info(forge, path):
    """Runs `forge info --json path`. Returns (document, None) or (None, reason)."""
    try:
        proc = subprocess.run([forge, "info", "--json", path], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=SUBPROCESS_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None, "forge info timed out after %d s" % SUBPROCESS_TIMEOUT_S
    except OSError as e:
        return None, "cannot run %s: %s" % (forge, e)
    stderr = proc.stderr.decode("utf-8", "replace").strip()
    if proc.returncode != 0:
        return None, "forge info exited %d: %s" % (proc.returncode, stderr)
    try:
        text = proc.stdout.decode("utf-8")  # JSON text must be UTF-8 (RFC 8259)
    except UnicodeDecodeError as e:
        return None, "forge info output is not UTF-8: %s" % e
    try:
        doc = json.loads(text, parse_constant=reject_constant)
    except ValueError as e:
        return None, "forge info output is not valid JSON: %s" % e
    if not isinstance(doc, dict):
        return None, "forge info output is not a JSON object"
    return doc, None


def read_gguf_string(reader, key):
    """A scalar string field as gguf.GGUFReader reads it, or None when absent or not a string."""
    field = reader.fields.get(key)
    if field is None or field.types != [gguf.GGUFValueType.STRING]:
        return None
    return bytes(field.parts[field.data[0]]).decode("utf-8", "replace")


def read_gguf_array_count(reader, key):
    """Element count of an array field as gguf.GGUFReader reads it, or None when absent."""
    field = reader.fields.get(key)
    if field is None or not field.types or field.types[0] != gguf.GGUFValueType.ARRAY:
        return None
    return len(field.data)


# ---------------------------------------------------------------------------------------------
# (a) configuration vs llama.cpp

# (peer_hparams key, forge config key). Integers; "rope type" is printed as a number too.
INT_FIELDS = [
    ("n_ctx_train", "n_ctx_train"),
    ("n_embd", "n_embd"),
    ("n_layer", "n_layer"),
    ("n_head", "n_head"),
    ("n_head_kv", "n_head_kv"),
    ("n_rot", "n_rot"),
    ("n_swa", "n_swa"),
    ("n_embd_head_k", "head_dim"),
    ("n_embd_head_v", "head_dim_v"),
    ("n_ff", "n_ff"),
    ("n_expert", "n_expert"),
    ("n_expert_used", "n_expert_used"),
    ("rope type", "rope_type"),
    ("n_vocab", "n_vocab"),
]
# llama.cpp prints these only for models that have them.
OPTIONAL_INT_FIELDS = [
    ("n_ff_exp", "n_ff_exp"),
    ("n_ff_shexp", "n_ff_shexp"),
]
# (peer key, forge key, relative tolerance, required)
FLOAT_FIELDS = [
    ("f_norm_rms_eps", "rms_eps", RMS_EPS_REL_TOL, True),
    ("freq_base_train", "rope_freq_base", FREQ_REL_TOL, True),
    ("freq_base_swa", "rope_freq_base_swa", FREQ_REL_TOL, False),  # printed for SWA models only
    ("freq_scale_swa", "rope_freq_scale_swa", FREQ_REL_TOL, False),
]
# llama.cpp prints f_attn_scale with two digits, and 0 where it uses the default 1/sqrt(head size)
ATTN_SCALE_REL_TOL = 1e-2
STRING_FIELDS = [
    ("arch", "arch"),
    ("vocab type", "vocab_type"),
    ("file type", "file_type_name"),
]
# "BOS token" = "1 '<s>'": id and text in one line.
TOKEN_FIELDS = [
    ("BOS token", "bos_id", "bos_text"),
    ("EOS token", "eos_id", "eos_text"),
]


def peer_int(text):
    """llama.cpp prints a per-layer value as one number when all layers agree, else as a list
    "[4, 4, 2]". forge's config keeps the largest over layers, so compare with the maximum."""
    text = text.strip()
    if text.startswith("["):
        return max(int(v) for v in text.strip("[]").split(",") if v.strip())
    return int(text)


def is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def compare_config(peer, config):
    """Returns a list of "field: forge X != llama.cpp Y" lines (empty when everything matches)."""
    bad = []

    def missing(peer_key, key):
        if key not in config:
            bad.append("%s: forge config has no '%s' (llama.cpp: %s)" % (key, key, peer.get(peer_key)))
            return True
        return False

    for required, fields in ((True, INT_FIELDS), (False, OPTIONAL_INT_FIELDS)):
        for peer_key, key in fields:
            if peer_key not in peer:
                if required:
                    bad.append("%s: index.json peer_hparams lacks '%s'" % (key, peer_key))
                continue
            if missing(peer_key, key):
                continue
            want = peer_int(peer[peer_key])
            got = config[key]
            if not is_int(got) or got != want:
                bad.append("%s: forge %r != llama.cpp %r" % (key, got, want))

    for peer_key, key, rel_tol, required in FLOAT_FIELDS:
        if peer_key not in peer:
            if required:
                bad.append("%s: index.json peer_hparams lacks '%s'" % (key, peer_key))
            continue
        if missing(peer_key, key):
            continue
        want = float(peer[peer_key])
        got = config[key]
        if not is_number(got) or abs(got - want) > rel_tol * abs(want):
            bad.append("%s: forge %r != llama.cpp %s" % (key, got, peer[peer_key]))

    if float(peer.get("f_attn_scale", "0")) != 0.0 and not missing("f_attn_scale", "attn_scale"):
        want, got = float(peer["f_attn_scale"]), config["attn_scale"]
        if not is_number(got) or abs(got - want) > ATTN_SCALE_REL_TOL * abs(want):
            bad.append("attn_scale: forge %r != llama.cpp %s" % (got, peer["f_attn_scale"]))

    for peer_key, key in STRING_FIELDS:
        if peer_key not in peer:
            bad.append("%s: index.json peer_hparams lacks '%s'" % (key, peer_key))
            continue
        if missing(peer_key, key):
            continue
        if config[key] != peer[peer_key]:
            bad.append("%s: forge %r != llama.cpp %r" % (key, config[key], peer[peer_key]))

    for peer_key, id_key, text_key in TOKEN_FIELDS:
        if peer_key not in peer:
            bad.append("%s: index.json peer_hparams lacks '%s'" % (id_key, peer_key))
            continue
        m = re.match(r"^(-?\d+) '(.*)'$", peer[peer_key], re.DOTALL)
        if not m:
            bad.append("%s: cannot parse llama.cpp's %r" % (id_key, peer[peer_key]))
            continue
        want_id, want_text = int(m.group(1)), m.group(2)
        if not missing(peer_key, id_key):
            got = config[id_key]
            if not is_int(got) or got != want_id:
                bad.append("%s: forge %r != llama.cpp %r" % (id_key, got, want_id))
        if not missing(peer_key, text_key):
            got = config[text_key]
            if got != want_text:
                bad.append("%s: forge %r != llama.cpp %r" % (text_key, got, want_text))
    return bad


def check_configs(tally, forge, models_dir, index):
    files = index.get("files", {})
    for name in sorted(files):
        path = os.path.join(models_dir, name)
        peer = files[name].get("peer_hparams")
        label = "config %s" % name
        if not os.path.isfile(path):
            tally.fail("%s: listed in index.json but missing" % label)
            continue
        if not isinstance(peer, dict):
            tally.fail("%s: index.json has no peer_hparams" % label)
            continue
        doc, err = forge_info(forge, path)
        if err:
            tally.fail("%s: %s" % (label, err))
            continue
        config = doc.get("config")
        if not isinstance(config, dict):
            tally.fail("%s: config is %r, config_error %r" % (label, config, doc.get("config_error")))
            continue
        bad = compare_config(peer, config)
        if bad:
            tally.fail("%s: %d mismatch(es): %s" % (label, len(bad), "; ".join(bad)))
        else:
            tally.ok("%s (%s, %s)" % (label, config.get("arch"), config.get("file_type_name")))


# ---------------------------------------------------------------------------------------------
# (b) dequantization vs the gguf Python package

def compare_tensor(got, ref):
    """Returns (max abs difference, max |reference|, passed) for two flat arrays of equal size."""
    got = got.astype(np.float64)
    ref = ref.astype(np.float64)
    finite = np.abs(ref[np.isfinite(ref)])
    scale = float(np.max(finite)) if finite.size else 0.0
    with np.errstate(invalid="ignore"):  # inf - inf is NaN, handled just below
        diff = np.abs(got - ref)
    # Identical values (infinities included) and NaN on both sides differ by 0; a NaN on one
    # side only is a failure.
    diff[got == ref] = 0.0
    diff[np.isnan(diff)] = np.inf
    diff[np.isnan(got) & np.isnan(ref)] = 0.0
    max_diff = float(np.max(diff)) if diff.size else 0.0
    if scale == 0.0:
        return max_diff, scale, max_diff == 0.0  # all-zero tensors must come out exactly zero
    return max_diff, scale, max_diff <= DEQUANT_REL_TOL * scale


def check_dequant_file(tally, dump_tool, path, type_counts, tmp_dir):
    name = os.path.basename(path)
    label = "dequant %s" % name
    reader = gguf.GGUFReader(path, "r")
    tensors = list(reader.tensors)
    expected_elems = sum(int(t.n_elements) for t in tensors)

    out_path = os.path.join(tmp_dir, name + ".f32")
    try:
        proc = subprocess.run([dump_tool, path, out_path], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=SUBPROCESS_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        tally.fail("%s: dump_tensors timed out after %d s" % (label, SUBPROCESS_TIMEOUT_S))
        return
    except OSError as e:
        tally.fail("%s: cannot run %s: %s" % (label, dump_tool, e))
        return
    try:
        if proc.returncode != 0:
            tally.fail("%s: dump_tensors exited %d: %s" % (label, proc.returncode,
                                                           proc.stderr.decode("utf-8", "replace").strip()))
            return
        size = os.path.getsize(out_path)
        if size != 4 * expected_elems:
            tally.fail("%s: dump has %d bytes, expected %d (= 4 x %d elements in %d tensors)"
                       % (label, size, 4 * expected_elems, expected_elems, len(tensors)))
            return
        # np.memmap refuses empty files; a file without tensors has nothing to compare.
        dump = np.memmap(out_path, dtype="<f4", mode="r") if size else np.zeros(0, dtype="<f4")

        worst = None  # (ratio, tensor name, type, max diff)
        n_bad = 0
        offset = 0
        for t in tensors:
            n = int(t.n_elements)
            ref = gguf.quants.dequantize(t.data, t.tensor_type).reshape(-1)
            got = dump[offset:offset + n]
            offset += n
            type_name = t.tensor_type.name
            if ref.size != n:
                n_bad += 1
                worst = (np.inf, t.name, type_name, "reference has %d values, not %d" % (ref.size, n))
                continue
            max_diff, scale, good = compare_tensor(got, ref)
            type_counts[type_name] = type_counts.get(type_name, 0) + 1
            if not good:
                n_bad += 1
            ratio = max_diff / scale if scale else (0.0 if max_diff == 0.0 else np.inf)
            if worst is None or ratio > worst[0]:
                worst = (ratio, t.name, type_name, max_diff)
        del dump  # release the mapping before the file is removed

        if worst is None:
            summary = "no tensors"
        elif worst[0] == 0.0:
            summary = "all values equal"
        elif isinstance(worst[3], str):
            summary = "worst %s (%s): %s" % (worst[1], worst[2], worst[3])
        else:
            summary = "worst %s (%s): max diff %.3g, ratio %.3g of max|ref|" % (
                worst[1], worst[2], worst[3], worst[0])
        if n_bad:
            tally.fail("%s: %d of %d tensors differ beyond %g x max|ref|; %s"
                       % (label, n_bad, len(tensors), DEQUANT_REL_TOL, summary))
        else:
            tally.ok("%s: %d tensors, %d values; %s" % (label, len(tensors), expected_elems, summary))
    finally:
        if os.path.exists(out_path):
            os.remove(out_path)


def check_dequant(tally, dump_tool, model_paths):
    type_counts = {}
    with tempfile.TemporaryDirectory(prefix="forge-dump-") as tmp_dir:
        for path in model_paths:
            check_dequant_file(tally, dump_tool, path, type_counts, tmp_dir)
    listed = " ".join("%s=%d" % (t, type_counts.get(t, 0)) for t in ALL_TYPES)
    others = sorted(set(type_counts) - set(ALL_TYPES))
    if others:
        listed += " (also: %s)" % " ".join("%s=%d" % (t, type_counts[t]) for t in others)
    print("tensors checked per type: " + listed, flush=True)
    never = [t for t in ALL_TYPES if not type_counts.get(t)]
    if never:
        tally.fail("dequant type coverage: never checked: %s" % " ".join(never))
    else:
        tally.ok("dequant type coverage: all %d types checked" % len(ALL_TYPES))


# ---------------------------------------------------------------------------------------------
# (c) vocabulary-only files

def check_tokenizer_file(tally, forge, path):
    label = "tokenizer %s" % os.path.basename(path)
    reader = gguf.GGUFReader(path, "r")
    want_model = read_gguf_string(reader, "tokenizer.ggml.model")
    want_count = read_gguf_array_count(reader, "tokenizer.ggml.tokens")
    if want_model is None or want_count is None or len(reader.tensors) != 0:
        tally.fail("%s: fixture is not what this check expects (model %r, tokens %r, %d tensors)"
                   % (label, want_model, want_count, len(reader.tensors)))
        return

    doc, err = forge_info(forge, path)
    if err:
        tally.fail("%s: %s" % (label, err))
        return
    bad = []
    metadata = doc.get("metadata")
    if not isinstance(metadata, dict):
        bad.append("metadata is %r" % type(metadata).__name__)
        metadata = {}
    got_model = metadata.get("tokenizer.ggml.model")
    if got_model != want_model:
        bad.append("tokenizer.ggml.model: forge %r != gguf %r" % (got_model, want_model))
    tokens = metadata.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, dict):
        bad.append("tokenizer.ggml.tokens: forge %r, expected an array summary" % (tokens,))
    else:
        if tokens.get("type") != "array" or tokens.get("elem_type") != "string":
            bad.append("tokenizer.ggml.tokens: type %r elem_type %r, expected 'array' of 'string'"
                       % (tokens.get("type"), tokens.get("elem_type")))
        if tokens.get("count") != want_count:
            bad.append("tokenizer.ggml.tokens count: forge %r != gguf %d" % (tokens.get("count"), want_count))
    if doc.get("config", "absent") is not None:
        bad.append("config: %r, expected null" % (doc.get("config", "absent"),))
    if doc.get("vocab_only") is not True:
        bad.append("vocab_only: %r, expected true" % (doc.get("vocab_only"),))
    if bad:
        tally.fail("%s: %s" % (label, "; ".join(bad)))
    else:
        tally.ok("%s: model %r, %d tokens" % (label, want_model, want_count))


# ---------------------------------------------------------------------------------------------

# forge's own distance to the float64 reference on the CPU (f32 activations), measured at commit
# c045dd3 with `forge eval --cpu` (tokens.txt; long/'s sequences in batches of 512): per fixture and
# KV cache type, (relative L2 over all positions, the worst position's relative L2), rounded up to
# two digits. The inner bound is INNER_FACTOR times these: near forge's error, so that a regression
# the index's tolerance (the outer bound, made for llama.cpp's 8-bit activations) lets through is
# caught. An f32 cache leaves only float32 rounding (about 4e-7); f16 and the quantized caches add
# the rounding of keys and values, which is deterministic, so their factors are smaller.
INNER_FACTOR = {"f32": 4.0, "f16": 2.0, "q8_0": 1.5, "q4_0": 1.5}
MEASURED = {
    "ext-llama2-tiny-random.gguf": {"f32": (7.6e-08, 9.2e-08), "f16": (7.5e-06, 1.6e-05)},
    "tiny-gemma-f16.gguf": {"f32": (5.1e-07, 6.9e-07), "f16": (4.2e-04, 6.0e-04), "q8_0": (1.1e-02, 1.6e-02), "q4_0": (1.8e-01, 2.3e-01)},
    "tiny-gemma-q4_k_m.gguf": {"f32": (5.1e-07, 6.8e-07), "f16": (4.1e-04, 5.4e-04), "q8_0": (1.1e-02, 1.5e-02), "q4_0": (1.8e-01, 2.9e-01)},
    "tiny-gemma2-f16.gguf": {"f32": (4.6e-07, 5.5e-07), "f16": (3.5e-04, 4.2e-04), "q8_0": (8.9e-03, 1.1e-02), "q4_0": (1.4e-01, 1.9e-01)},
    "tiny-gemma2-q4_k_m.gguf": {"f32": (4.5e-07, 6.3e-07), "f16": (3.5e-04, 4.6e-04), "q8_0": (9.4e-03, 1.3e-02), "q4_0": (1.4e-01, 2.0e-01)},
    "tiny-gemma3-f16.gguf": {"f32": (5.1e-07, 6.5e-07), "f16": (4.0e-04, 5.0e-04), "q8_0": (1.1e-02, 1.4e-02), "q4_0": (1.8e-01, 2.4e-01)},
    "tiny-gemma3-q4_k_m.gguf": {"f32": (5.2e-07, 6.7e-07), "f16": (4.3e-04, 5.5e-04), "q8_0": (1.1e-02, 1.5e-02), "q4_0": (1.7e-01, 2.3e-01)},
    "tiny-glm4-f16.gguf": {"f32": (4.3e-07, 5.7e-07), "f16": (3.9e-04, 5.6e-04), "q8_0": (9.2e-03, 1.3e-02), "q4_0": (1.5e-01, 1.9e-01)},
    "tiny-glm4-q4_k_m.gguf": {"f32": (4.2e-07, 5.0e-07), "f16": (3.6e-04, 4.6e-04), "q8_0": (9.4e-03, 1.2e-02), "q4_0": (1.5e-01, 2.1e-01)},
    "tiny-llama-bf16.gguf": {"f32": (4.3e-07, 5.0e-07), "f16": (3.3e-04, 4.1e-04), "q8_0": (7.7e-03, 9.4e-03), "q4_0": (1.3e-01, 1.7e-01)},
    "tiny-llama-f16.gguf": {"f32": (4.2e-07, 5.3e-07), "f16": (3.2e-04, 4.1e-04), "q8_0": (8.0e-03, 1.1e-02), "q4_0": (1.3e-01, 1.6e-01)},
    "tiny-llama-iq4_nl.gguf": {"f32": (4.3e-07, 5.1e-07), "f16": (3.4e-04, 4.1e-04), "q8_0": (7.8e-03, 9.6e-03), "q4_0": (1.4e-01, 1.7e-01)},
    "tiny-llama-iq4_xs.gguf": {"f32": (4.3e-07, 5.0e-07), "f16": (3.2e-04, 4.1e-04), "q8_0": (7.9e-03, 1.1e-02), "q4_0": (1.4e-01, 1.9e-01)},
    "tiny-llama-moe-f16.gguf": {"f32": (3.3e-07, 4.6e-07), "f16": (2.8e-04, 3.8e-04), "q8_0": (6.5e-03, 8.3e-03), "q4_0": (1.6e-01, 3.4e-01)},
    "tiny-llama-moe-q4_k_m.gguf": {"f32": (3.1e-07, 3.9e-07), "f16": (2.9e-04, 3.7e-04), "q8_0": (6.4e-03, 8.0e-03), "q4_0": (1.4e-01, 4.1e-01)},
    "tiny-llama-q2_k.gguf": {"f32": (4.6e-07, 5.7e-07), "f16": (4.0e-04, 4.8e-04), "q8_0": (8.6e-03, 1.2e-02), "q4_0": (1.6e-01, 2.0e-01)},
    "tiny-llama-q3_k_s.gguf": {"f32": (4.2e-07, 4.9e-07), "f16": (3.5e-04, 4.2e-04), "q8_0": (8.1e-03, 1.1e-02), "q4_0": (1.4e-01, 1.8e-01)},
    "tiny-llama-q4_0.gguf": {"f32": (4.0e-07, 4.9e-07), "f16": (3.2e-04, 4.7e-04), "q8_0": (8.1e-03, 1.1e-02), "q4_0": (1.3e-01, 1.6e-01)},
    "tiny-llama-q4_1.gguf": {"f32": (4.2e-07, 5.2e-07), "f16": (3.5e-04, 4.7e-04), "q8_0": (7.9e-03, 9.7e-03), "q4_0": (1.3e-01, 1.6e-01)},
    "tiny-llama-q4_k_m.gguf": {"f32": (4.0e-07, 4.7e-07), "f16": (3.1e-04, 3.7e-04), "q8_0": (7.3e-03, 8.7e-03), "q4_0": (1.3e-01, 1.7e-01)},
    "tiny-llama-q4_k_s.gguf": {"f32": (4.0e-07, 4.8e-07), "f16": (3.1e-04, 3.6e-04), "q8_0": (7.5e-03, 8.9e-03), "q4_0": (1.3e-01, 1.7e-01)},
    "tiny-llama-q5_0.gguf": {"f32": (3.9e-07, 4.8e-07), "f16": (3.3e-04, 4.2e-04), "q8_0": (8.1e-03, 9.6e-03), "q4_0": (1.2e-01, 1.4e-01)},
    "tiny-llama-q5_1.gguf": {"f32": (4.3e-07, 5.8e-07), "f16": (3.3e-04, 4.0e-04), "q8_0": (8.1e-03, 1.1e-02), "q4_0": (1.3e-01, 1.6e-01)},
    "tiny-llama-q5_k_s.gguf": {"f32": (4.2e-07, 5.1e-07), "f16": (3.0e-04, 3.7e-04), "q8_0": (7.9e-03, 9.8e-03), "q4_0": (1.3e-01, 1.6e-01)},
    "tiny-llama-q6_k.gguf": {"f32": (4.3e-07, 5.6e-07), "f16": (3.4e-04, 4.2e-04), "q8_0": (8.1e-03, 1.0e-02), "q4_0": (1.4e-01, 1.8e-01)},
    "tiny-llama-q8_0.gguf": {"f32": (4.3e-07, 5.2e-07), "f16": (3.2e-04, 4.0e-04), "q8_0": (7.7e-03, 1.1e-02), "q4_0": (1.3e-01, 1.8e-01)},
    "tiny-phi3-f16.gguf": {"f32": (3.6e-07, 4.4e-07), "f16": (2.7e-04, 3.6e-04), "q8_0": (7.1e-03, 8.6e-03), "q4_0": (1.2e-01, 1.6e-01)},
    "tiny-phi3-q4_k_m.gguf": {"f32": (3.6e-07, 4.5e-07), "f16": (2.8e-04, 3.6e-04), "q8_0": (6.9e-03, 8.7e-03), "q4_0": (1.1e-01, 1.6e-01)},
    "tiny-qwen2-f16.gguf": {"f32": (4.2e-07, 5.2e-07), "f16": (3.3e-04, 4.6e-04), "q8_0": (8.8e-03, 1.3e-02), "q4_0": (1.3e-01, 1.6e-01)},
    "tiny-qwen2-f32.gguf": {"f32": (4.1e-07, 5.0e-07), "f16": (3.3e-04, 4.7e-04), "q8_0": (8.9e-03, 1.2e-02), "q4_0": (1.3e-01, 1.6e-01)},
    "tiny-qwen2-q4_k_m.gguf": {"f32": (4.3e-07, 5.2e-07), "f16": (3.3e-04, 4.6e-04), "q8_0": (8.2e-03, 1.1e-02), "q4_0": (1.4e-01, 1.7e-01)},
    "tiny-qwen2-q8_0.gguf": {"f32": (4.2e-07, 5.0e-07), "f16": (3.4e-04, 4.0e-04), "q8_0": (8.1e-03, 1.2e-02), "q4_0": (1.3e-01, 1.6e-01)},
    "tiny-qwen2moe-f16.gguf": {"f32": (3.3e-07, 4.7e-07), "f16": (2.7e-04, 3.8e-04), "q8_0": (6.8e-03, 9.2e-03), "q4_0": (1.3e-01, 2.9e-01)},
    "tiny-qwen2moe-q4_k_m.gguf": {"f32": (3.3e-07, 3.8e-07), "f16": (2.6e-04, 3.4e-04), "q8_0": (2.0e-02, 1.1e-01), "q4_0": (1.4e-01, 3.1e-01)},
    "tiny-qwen3-f16.gguf": {"f32": (4.3e-07, 5.0e-07), "f16": (3.5e-04, 4.6e-04), "q8_0": (8.7e-03, 1.2e-02), "q4_0": (1.4e-01, 1.8e-01)},
    "tiny-qwen3-q4_k_m.gguf": {"f32": (4.3e-07, 5.1e-07), "f16": (3.2e-04, 4.3e-04), "q8_0": (8.9e-03, 1.2e-02), "q4_0": (1.4e-01, 1.8e-01)},
    "tiny-qwen3-q8_0.gguf": {"f32": (4.5e-07, 5.3e-07), "f16": (3.3e-04, 4.0e-04), "q8_0": (8.4e-03, 1.1e-02), "q4_0": (1.4e-01, 1.9e-01)},
    "tiny-qwen3moe-f16.gguf": {"f32": (3.1e-07, 4.0e-07), "f16": (2.8e-04, 3.7e-04), "q8_0": (6.5e-03, 8.4e-03), "q4_0": (1.5e-01, 3.6e-01)},
    "tiny-qwen3moe-q4_k_m.gguf": {"f32": (3.1e-07, 3.6e-07), "f16": (2.8e-04, 3.7e-04), "q8_0": (2.1e-02, 1.2e-01), "q4_0": (1.4e-01, 3.1e-01)},
}
MEASURED_LONG = {
    "tiny-gemma2-f16.gguf": {"f32": (4.7e-07, 6.3e-07), "f16": (3.7e-04, 5.4e-04), "q8_0": (9.5e-03, 1.2e-02), "q4_0": (1.5e-01, 1.9e-01)},
    "tiny-gemma3-f16.gguf": {"f32": (5.0e-07, 6.8e-07), "f16": (4.0e-04, 5.2e-04), "q8_0": (1.1e-02, 1.5e-02), "q4_0": (1.7e-01, 3.0e-01)},
    "tiny-glm4-f16.gguf": {"f32": (3.2e-07, 3.9e-07), "f16": (1.7e-04, 3.1e-04), "q8_0": (4.3e-03, 6.4e-03), "q4_0": (6.6e-02, 1.3e-01)},
    "tiny-llama-f16.gguf": {"f32": (4.3e-07, 5.2e-07), "f16": (1.3e-04, 2.7e-04), "q8_0": (2.9e-03, 7.9e-03), "q4_0": (4.7e-02, 1.2e-01)},
    "tiny-llama-q4_k_m.gguf": {"f16": (1.3e-04, 3.2e-04), "q8_0": (3.0e-03, 8.0e-03), "q4_0": (4.8e-02, 1.3e-01)},
    "tiny-phi3-f16.gguf": {"f32": (3.2e-07, 4.1e-07), "f16": (8.5e-05, 2.6e-04), "q8_0": (2.0e-03, 6.1e-03), "q4_0": (3.3e-02, 1.1e-01)},
    "tiny-qwen2-f16.gguf": {"f32": (3.7e-07, 4.8e-07), "f16": (9.6e-05, 2.7e-04), "q8_0": (2.2e-03, 7.0e-03), "q4_0": (3.7e-02, 1.2e-01)},
    "tiny-qwen3moe-f16.gguf": {"f32": (2.4e-07, 3.3e-07), "f16": (8.5e-05, 2.2e-04), "q8_0": (3.3e-03, 8.9e-03), "q4_0": (5.9e-02, 2.8e-01)},
}

# forge's default CPU products round their activations to 8 bits (per 32, as llama.cpp's quantized
# products do) for the weight types with integer dot products (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K,
# Q6_K): on the files with such tensors its distance to the reference is that rounding's, still inside the
# index's tolerance (and below llama.cpp's own). Measured as above at d0a2ef2 (FORGE_MEASURE=1 prints
# them; AVX2 forms, the portable ones add the same roundings in another order), INNER_FACTOR_Q8 times
# these is their inner bound. MEASURED stays the bound of the f32 products (FORGE_CPU_NO_Q8=1), run on
# every file listed here with an f32 cache.
INNER_FACTOR_Q8 = 1.5
MEASURED_Q8 = {
    "tiny-gemma-q4_k_m.gguf": {"f32": (2.2e-02, 2.8e-02), "f16": (2.1e-02, 2.7e-02)},
    "tiny-gemma2-q4_k_m.gguf": {"f32": (1.9e-02, 2.4e-02), "f16": (1.9e-02, 2.2e-02)},
    "tiny-gemma3-q4_k_m.gguf": {"f32": (2.2e-02, 2.5e-02), "f16": (2.2e-02, 2.8e-02)},
    "tiny-glm4-q4_k_m.gguf": {"f32": (1.9e-02, 2.2e-02), "f16": (1.9e-02, 2.3e-02)},
    "tiny-llama-moe-q4_k_m.gguf": {"f32": (1.5e-02, 1.9e-02), "f16": (1.5e-02, 2.0e-02)},
    "tiny-llama-q4_0.gguf": {"f32": (1.9e-02, 2.3e-02), "f16": (1.8e-02, 2.4e-02)},
    "tiny-llama-q4_1.gguf": {"f32": (1.8e-02, 2.2e-02), "f16": (1.9e-02, 2.5e-02)},
    "tiny-llama-q4_k_m.gguf": {"f32": (1.8e-02, 2.6e-02), "f16": (1.8e-02, 2.4e-02)},
    "tiny-llama-q4_k_s.gguf": {"f32": (1.8e-02, 2.6e-02), "f16": (1.8e-02, 2.4e-02)},
    "tiny-llama-q5_0.gguf": {"f32": (1.9e-02, 2.4e-02), "f16": (1.9e-02, 2.2e-02)},
    "tiny-llama-q5_1.gguf": {"f32": (2.0e-02, 2.4e-02), "f16": (2.0e-02, 2.4e-02)},
    "tiny-llama-q5_k_s.gguf": {"f32": (1.9e-02, 2.2e-02), "f16": (1.9e-02, 2.4e-02)},
    "tiny-llama-q6_k.gguf": {"f32": (1.9e-02, 2.3e-02), "f16": (1.9e-02, 2.4e-02)},
    "tiny-llama-q8_0.gguf": {"f32": (1.8e-02, 2.2e-02), "f16": (1.9e-02, 2.2e-02)},
    "tiny-phi3-q4_k_m.gguf": {"f32": (1.6e-02, 2.0e-02), "f16": (1.6e-02, 2.0e-02)},
    "tiny-qwen2-q4_k_m.gguf": {"f32": (1.9e-02, 2.5e-02), "f16": (1.9e-02, 2.7e-02)},
    "tiny-qwen2-q8_0.gguf": {"f32": (1.9e-02, 2.3e-02), "f16": (1.9e-02, 2.4e-02)},
    "tiny-qwen2moe-q4_k_m.gguf": {"f32": (1.5e-02, 1.9e-02), "f16": (1.5e-02, 1.8e-02)},
    "tiny-qwen3-q4_k_m.gguf": {"f32": (1.9e-02, 2.2e-02), "f16": (1.9e-02, 2.3e-02)},
    "tiny-qwen3-q8_0.gguf": {"f32": (1.9e-02, 2.6e-02), "f16": (1.9e-02, 2.3e-02)},
    "tiny-qwen3moe-q4_k_m.gguf": {"f32": (1.4e-02, 1.8e-02), "f16": (2.4e-02, 1.1e-01)},
}
MEASURED_LONG_Q8 = {"tiny-llama-q4_k_m.gguf": {"f16": (2.0e-02, 2.4e-02)}}

# The quantized caches on one file of each family (every file in f32 and f16).
QUANT_KV_FILES = ["tiny-gemma-f16.gguf", "tiny-gemma2-f16.gguf", "tiny-gemma3-f16.gguf", "tiny-glm4-f16.gguf",
                  "tiny-llama-f16.gguf", "tiny-llama-moe-f16.gguf", "tiny-phi3-f16.gguf", "tiny-qwen2-f16.gguf",
                  "tiny-qwen2moe-f16.gguf", "tiny-qwen3-f16.gguf", "tiny-qwen3moe-f16.gguf"]
# long/ in `make test`: every sequence with an f16 cache, and a q8_0 cache on the sliding-window model
# (2 to 5 s each on the 2-core machine); FORGE_LONG_ALL=1 runs every pair measured above.
LONG_RUNS = [("tiny-llama-f16.gguf", "f16"), ("tiny-qwen2-f16.gguf", "f16"), ("tiny-gemma2-f16.gguf", "f16"),
             ("tiny-gemma3-f16.gguf", "f16"), ("tiny-phi3-f16.gguf", "f16"), ("tiny-glm4-f16.gguf", "f16"),
             ("tiny-qwen3moe-f16.gguf", "f16"), ("tiny-llama-q4_k_m.gguf", "f16"), ("tiny-gemma3-f16.gguf", "q8_0")]


def distances(got, ref):
    """(relative L2 over all rows, the worst row's relative L2) of two [rows][n_vocab] float64 arrays."""
    rel = np.linalg.norm(got - ref) / np.linalg.norm(ref)
    per_row = np.linalg.norm(got - ref, axis=1) / np.linalg.norm(ref, axis=1)
    return float(rel), float(per_row.max())


def inner_bound(measured, name, kv, measured_q8=None):
    """(global, per-position) inner bound for a fixture and KV type, or None when none was measured: of
    the 8-bit products where measured_q8 lists the file, else of the f32 ones."""
    if measured_q8 is not None and name in measured_q8:
        m = measured_q8[name].get(kv)
        return None if m is None else (INNER_FACTOR_Q8 * m[0], INNER_FACTOR_Q8 * m[1])
    m = measured.get(name, {}).get(kv)
    return None if m is None else (INNER_FACTOR[kv] * m[0], INNER_FACTOR[kv] * m[1])


def report_measured(label, rel, worst):
    """FORGE_MEASURE=1: prints a distance for the tables above (rounded up to two digits)."""
    if os.environ.get("FORGE_MEASURE") == "1":
        up = lambda v: float("%.1e" % (v * 1.05))
        print("measured %s: (%.1e, %.1e)" % (label, up(rel), up(worst)))


# Architectures the CPU backend runs; any other must be refused clearly, not mis-computed.
RUNNABLE = {"llama", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "phi3", "qwen2moe", "qwen3moe", "glm4"}


def run_eval(forge, path, tokens, out, extra, f32_products=False):
    """Runs forge eval on the CPU (f32_products: FORGE_CPU_NO_Q8=1). Returns (completed process, None) or
    (None, reason)."""
    cmd = [forge, "eval", "-m", path, "--tokens", ",".join(str(t) for t in tokens), "--logits", out, "--cpu"] + list(extra)
    env = dict(os.environ, FORGE_CPU_NO_Q8="1" if f32_products else "0")
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env), None
    except subprocess.TimeoutExpired:
        return None, "forge eval timed out"


def check_logits_file(tally, forge, models_dir, name, entry, tokens, tmp_dir, kv="f16", extra=(), f32_products=False):
    """(d) forge's logits for tokens.txt against the float64 reference: with an f16 cache within the
    fixture's tolerance (the outer bound), and with every cache within INNER_FACTOR times forge's own
    measured distance, over all positions and at the worst one. The distance to llama.cpp's logits is
    printed beside it. `extra`: more options for forge eval (small batches, which make sliding-window
    layers reuse their cache rows)."""
    path = os.path.join(models_dir, name)
    hp = entry["peer_hparams"]
    out = os.path.join(tmp_dir, name + ".logits.f32")
    label = "%s kv %s%s%s" % (name, kv, " [%s]" % " ".join(extra) if extra else "", " [f32 products]" if f32_products else "")
    proc, err = run_eval(forge, path, tokens, out, ["--kv", kv] + list(extra), f32_products)
    if err:
        tally.fail("logits %s: %s" % (label, err))
        return
    runnable = hp["arch"] in RUNNABLE
    if not runnable:
        # until the family lands, the refusal must say so
        tally.check(proc.returncode != 0 and "cannot run" in proc.stderr,
                    "logits %s: %s is refused clearly (%s)" % (label, hp["arch"], proc.stderr.strip()[:120]))
        return
    if proc.returncode != 0:
        tally.fail("logits %s: forge eval failed: %s" % (label, proc.stderr.strip()[:300]))
        return
    n_vocab = int(hp["n_vocab"])
    got = np.fromfile(out, dtype="<f4")
    os.remove(out)
    ref = np.fromfile(os.path.join(models_dir, entry["reference_logits"]), dtype="<f4")
    peer = np.fromfile(os.path.join(models_dir, entry["peer_logits"]), dtype="<f4")
    if got.size != ref.size or got.size != len(tokens) * n_vocab:
        tally.fail("logits %s: %d values, expected %d" % (label, got.size, len(tokens) * n_vocab))
        return
    got64, ref64, peer64 = (a.astype(np.float64).reshape(len(tokens), n_vocab) for a in (got, ref, peer))
    rel, worst = distances(got64, ref64)
    rel_peer = np.linalg.norm(got64 - peer64) / np.linalg.norm(peer64)
    agree = int((got64.argmax(axis=1) == ref64.argmax(axis=1)).sum())
    if kv in ("f16", "f32"):
        tol = entry["tolerance_rel_l2_vs_reference"]
        need = entry["min_argmax_agree_vs_reference"]
        tally.check(rel <= tol and agree >= need,
                    "logits %s: rel L2 vs reference %.2e (tolerance %.2e, llama.cpp's own %.2e), argmax %d/%d (need %d), "
                    "rel L2 vs llama.cpp %.2e" % (label, rel, tol, entry["peer_vs_reference_rel_l2"], agree, len(tokens),
                                                   need, rel_peer))
    report_measured("logits " + label, rel, worst)
    bound = inner_bound(MEASURED, name, kv, None if f32_products else MEASURED_Q8)
    if bound is None:
        tally.fail("logits %s: no measured distance for this file and cache type" % label)
        return
    tally.check(rel <= bound[0] and worst <= bound[1],
                "logits %s: inner bound: rel L2 %.2e (bound %.2e), worst position %.2e (bound %.2e)"
                % (label, rel, bound[0], worst, bound[1]))


def check_logits(tally, forge, models_dir, index):
    tokens = index["tokens"]
    with tempfile.TemporaryDirectory() as tmp_dir:
        for name in sorted(index["files"]):
            for kv in ("f16", "f32"):
                check_logits_file(tally, forge, models_dir, name, index["files"][name], tokens, tmp_dir, kv)
        for name in QUANT_KV_FILES:
            for kv in ("q8_0", "q4_0"):
                check_logits_file(tally, forge, models_dir, name, index["files"][name], tokens, tmp_dir, kv)
        for name in sorted(MEASURED_Q8):  # the f32 products on every file the 8-bit ones change
            check_logits_file(tally, forge, models_dir, name, index["files"][name], tokens, tmp_dir, "f32", f32_products=True)
        # windows of 8 over 32 tokens: in batches of 1 and 3 a local layer keeps 8 and 10 rows and
        # overwrites them in a ring; the logits must not change
        for name in ("tiny-gemma2-f16.gguf", "tiny-gemma3-f16.gguf", "tiny-gemma3-q4_k_m.gguf"):
            for batch in ("1", "3"):
                check_logits_file(tally, forge, models_dir, name, index["files"][name], tokens, tmp_dir, "f16",
                                  ("--batch", batch, "--ctx", "64"))


def check_long(tally, forge, fixtures):
    """(f) long/: one 1,536-token sequence per model, evaluated in batches of 512, against the float64
    reference at the listed positions: the index's tolerance and argmax agreement with an f16 cache
    (the outer bound), and INNER_FACTOR times forge's measured distance for every cache run."""
    long_dir = os.path.join(fixtures, "long")
    index_path = os.path.join(long_dir, "index.json")
    if not os.path.isfile(index_path):
        tally.fail("long: no %s" % index_path)
        return
    with open(index_path, encoding="utf-8") as f:
        index = json.load(f)
    positions = index["positions"]
    runs = LONG_RUNS
    if os.environ.get("FORGE_LONG_ALL") == "1":
        runs = [(name, kv) for name in sorted(MEASURED_LONG) for kv in MEASURED_LONG[name]]
    missing = sorted(set(index["files"]) - set(MEASURED_LONG))
    if missing:
        tally.fail("long: no measured distance for %s" % " ".join(missing))
    with tempfile.TemporaryDirectory() as tmp_dir:
        for name, kv in runs:
            entry = index["files"].get(name)
            label = "long %s kv %s" % (name, kv)
            if entry is None:
                tally.fail("%s: not in long/index.json" % label)
                continue
            tokens = entry["tokens"]
            out = os.path.join(tmp_dir, name + ".f32")
            start = time.time()
            proc, err = run_eval(forge, os.path.normpath(os.path.join(long_dir, entry["model"])), tokens, out,
                                 ["--kv", kv, "--ctx", str(len(tokens)), "--batch", "512"])
            if err or proc.returncode != 0:
                tally.fail("%s: %s" % (label, err or proc.stderr.strip()[:300]))
                continue
            ref = np.fromfile(os.path.join(long_dir, entry["reference_logits"]), dtype="<f4").astype(np.float64)
            got = np.fromfile(out, dtype="<f4").astype(np.float64)
            os.remove(out)
            n_vocab = ref.size // len(positions)
            if ref.size != len(positions) * n_vocab or got.size != len(tokens) * n_vocab:
                tally.fail("%s: %d values for %d tokens, reference %d for %d positions"
                           % (label, got.size, len(tokens), ref.size, len(positions)))
                continue
            got = got.reshape(len(tokens), n_vocab)[positions]
            ref = ref.reshape(len(positions), n_vocab)
            rel, worst = distances(got, ref)
            agree = int((got.argmax(axis=1) == ref.argmax(axis=1)).sum())
            if kv == "f16":
                tol, need = entry["tolerance_rel_l2_vs_reference"], entry["min_argmax_agree_vs_reference"]
                tally.check(rel <= tol and agree >= need,
                            "%s: rel L2 vs reference %.2e (tolerance %.2e, llama.cpp's own %.2e), argmax %d/%d (need %d), "
                            "%.1f s" % (label, rel, tol, entry["peer_vs_reference_rel_l2"], agree, len(positions), need,
                                        time.time() - start))
            report_measured(label, rel, worst)
            bound = inner_bound(MEASURED_LONG, name, kv, MEASURED_LONG_Q8)
            if bound is None:
                tally.fail("%s: no measured distance for this file and cache type" % label)
                continue
            tally.check(rel <= bound[0] and worst <= bound[1],
                        "%s: inner bound: rel L2 %.2e (bound %.2e), worst position %.2e (bound %.2e)"
                        % (label, rel, bound[0], worst, bound[1]))


def check_plan_cli(tally, forge, models_dir):
    """(e) `forge plan`: exit 0 and a parseable JSON verdict when the model fits, exit 1 with the
    reason on stderr and what would fit when it does not."""
    path = os.path.join(models_dir, "tiny-llama-q4_0.gguf")
    proc = subprocess.run([forge, "plan", path, "--ctx", "4096", "--json"], capture_output=True, text=True, timeout=60)
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        tally.fail("plan: output is not JSON: %r" % proc.stdout[:200])
        return
    plan = doc.get("plan", {})
    terms = ("weights_bytes", "kv_bytes", "scratch_bytes", "logits_bytes", "capture_bytes", "reserve_bytes")
    tally.check(proc.returncode == 0 and doc.get("fits") is True and
                plan.get("total_bytes") == sum(plan.get(t, -1) for t in terms) and
                plan.get("kv_bytes") == 4 * 4096 * 2 * 64 * 2 and
                doc["system"]["memory_total_bytes"] > 0 and doc["device"]["free_bytes"] <= doc["device"]["total_bytes"] and
                doc.get("budget_bytes", 0) > 0,
                "plan: fits at 4096 (exit %d, total %s bytes, budget %s)" % (proc.returncode, plan.get("total_bytes"),
                                                                          doc.get("budget_bytes")))
    # a budget of a few bytes: nothing fits, and the verdict says so
    env = dict(os.environ, FORGE_MEM_FRACTION="0.0000000001")
    proc = subprocess.run([forge, "plan", path, "--json"], capture_output=True, text=True, timeout=60, env=env)
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        tally.fail("plan: output is not JSON: %r" % proc.stdout[:200])
        return
    tally.check(proc.returncode == 1 and doc.get("fits") is False and "but the budget is" in proc.stderr and
                doc.get("max_ctx_that_fits") == 0 and doc.get("kv_type_that_fits") is None,
                "plan: FORGE_MEM_FRACTION=1e-10 refuses (exit %d: %s)" % (proc.returncode, proc.stderr.strip()[:160]))
    # a budget between the q8_0 and the f16 plan at 4096 positions: the solver names both ways out
    sizes = {}
    for kv in ("f16", "q8_0"):
        out = subprocess.run([forge, "plan", path, "--ctx", "4096", "--kv", kv, "--json", "--mem-fraction", "1"],
                             capture_output=True, text=True, timeout=60)
        sizes[kv] = json.loads(out.stdout)["plan"]["total_bytes"]
        free = json.loads(out.stdout)["device"]["free_bytes"]
    fraction = (sizes["f16"] + sizes["q8_0"]) / 2 / free
    proc = subprocess.run([forge, "plan", path, "--ctx", "4096", "--mem-fraction", "%.17g" % fraction, "--json"],
                          capture_output=True, text=True, timeout=60)
    doc = json.loads(proc.stdout)
    tally.check(proc.returncode == 1 and doc["fits"] is False and doc["kv_type_that_fits"] == "q8_0" and
                0 < doc["max_ctx_that_fits"] < 4096 and doc["max_ctx_that_fits"] % 256 == 0 and
                "--kv q8_0 at 4096" in doc["message"],
                "plan: between the q8_0 and f16 plans the answer is --ctx %s or --kv %s (%s)" %
                (doc.get("max_ctx_that_fits"), doc.get("kv_type_that_fits"), doc.get("message", "")[-60:]))
    # forge bench: every (test, depth) row, and the bytes it reports planned are the plan's
    proc = subprocess.run([forge, "bench", "-m", path, "--cpu", "-p", "16", "-n", "4", "-r", "2", "-d", "0,32",
                           "-o", "json", "-ctk", "q8_0"], capture_output=True, text=True, timeout=120)
    plan = subprocess.run([forge, "plan", path, "--ctx", "48", "--batch", "2048", "--kv", "q8_0", "--json"],
                          capture_output=True, text=True, timeout=60)
    try:
        rows = json.loads(proc.stdout)
        planned = json.loads(plan.stdout)["plan"]["total_bytes"]
    except ValueError:
        tally.fail("bench: output is not JSON: %r" % proc.stdout[:200])
        rows, planned = [], None
    tests = sorted((r.get("test"), r.get("depth")) for r in rows)
    tally.check(proc.returncode == 0 and tests == [("pp16", 0), ("pp16", 32), ("tg4", 0), ("tg4", 32)] and
                all(r["t_s"] > 0 and r["min"] <= r["t_s"] <= r["max"] and r["kv_type"] == "q8_0" and
                    r["planned_bytes"] == planned and r["peak_bytes"] > 0 for r in rows),
                "bench: json rows %s, planned bytes %s = plan %s" % (tests, rows[0]["planned_bytes"] if rows else None, planned))
    bad = subprocess.run([forge, "plan", path, "--kv", "q5_1"], capture_output=True, text=True, timeout=60)
    tally.check(bad.returncode == 1 and "q5_1" in bad.stderr, "plan: unknown KV type refused (%s)" % bad.stderr.strip()[:80])


def main():
    default_fixtures = os.environ.get("FORGE_FIXTURES") or os.path.join(REPO_ROOT, "..", "shared", "fixtures")
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--forge", default=os.path.join(REPO_ROOT, "build", "forge"), help="forge CLI")
    parser.add_argument("--dump", default=os.path.join(REPO_ROOT, "build", "dump_tensors"),
                        help="tests/dump_tensors.c built")
    parser.add_argument("--fixtures", default=default_fixtures,
                        help="fixtures folder (default: $FORGE_FIXTURES or ../shared/fixtures)")
    parser.add_argument("--only", default="abcdef",
                        help="the checks to run, by letter (default: all; tests/mutate.py runs a share)")
    args = parser.parse_args()

    start = time.time()
    tally = Tally()
    fixtures = os.path.normpath(args.fixtures)
    models_dir = os.path.join(fixtures, "models")
    tokenizer_dir = os.path.join(fixtures, "tokenizer")
    index_path = os.path.join(models_dir, "index.json")

    # Preconditions: anything missing here would make every later check meaningless.
    problems = []
    if not os.path.isfile(index_path):
        problems.append("fixtures missing: no %s" % index_path)
    for what, exe in (("forge CLI", args.forge), ("dump tool", args.dump)):
        if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
            problems.append("%s not found or not executable: %s" % (what, exe))
    if problems:
        for p in problems:
            tally.fail(p)
        print("%d passed, %d failed" % (tally.passed, tally.failed))
        return 1

    with open(index_path, encoding="utf-8") as f:
        index = json.load(f)
    model_paths = sorted(glob.glob(os.path.join(models_dir, "*.gguf")))
    tokenizer_paths = sorted(glob.glob(os.path.join(tokenizer_dir, "*.gguf")))
    if not model_paths:
        tally.fail("no models/*.gguf in %s" % fixtures)
    if not tokenizer_paths:
        tally.fail("no tokenizer/*.gguf in %s" % fixtures)
    unlisted = [os.path.basename(p) for p in model_paths if os.path.basename(p) not in index.get("files", {})]
    if unlisted:
        # The README promises index.json lists every file; one it lacks would escape check (a).
        tally.fail("models not listed in index.json: %s" % " ".join(unlisted))

    if "a" in args.only:
        print("== (a) configuration vs llama.cpp (%s)" % models_dir, flush=True)
        check_configs(tally, args.forge, models_dir, index)
    if "b" in args.only:
        print("== (b) dequantization vs the gguf Python package", flush=True)
        check_dequant(tally, args.dump, model_paths)
    if "c" in args.only:
        print("== (c) vocabulary-only files (%s)" % tokenizer_dir, flush=True)
        for path in tokenizer_paths:
            check_tokenizer_file(tally, args.forge, path)
    if "d" in args.only:
        print("== (d) logits vs the float64 reference (forge eval)", flush=True)
        check_logits(tally, args.forge, models_dir, index)
    if "e" in args.only:
        print("== (e) forge plan", flush=True)
        check_plan_cli(tally, args.forge, models_dir)
    if "f" in args.only:
        print("== (f) long sequences vs the float64 reference (forge eval)", flush=True)
        check_long(tally, args.forge, fixtures)

    print("elapsed %.1f s" % (time.time() - start))
    print("%d passed, %d failed" % (tally.passed, tally.failed))
    return 1 if tally.failed else 0


if __name__ == "__main__":
    sys.exit(main())

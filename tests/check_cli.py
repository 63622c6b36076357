"""The forge CLI at its edges: every verb's --help, numeric flags refused with their range named,
hostile numbers that once overflowed or converted out of range, non-finite logits reported as a
failure by every verb that evaluates, generation edge cases, info on files other verbs refuse,
bench options and progress, the memory policy and monitor flags. Uses the tiny fixture models
only; runs in about two seconds.
usage: check_cli.py --forge build/forge --fixtures ../shared/fixtures"""
import argparse
import json
import os
import pty
import shutil
import struct
import subprocess
import sys
import tempfile

passed = failed = 0


def check(good, text):
    global passed, failed
    if good:
        passed += 1
        print("ok   " + text, flush=True)
    else:
        failed += 1
        print("FAIL " + text, flush=True)


def forge_run(forge, args, stdin=None, env=None, timeout=120):
    full_env = dict(os.environ)
    full_env.pop("FORGE_MEM_FRACTION", None)
    if env:
        full_env.update(env)
    return subprocess.run([forge] + args, capture_output=True, encoding="utf-8", errors="replace", input=stdin, env=full_env,
                          timeout=timeout)


def short(text, n=160):
    text = text.strip().replace("\n", " | ")
    return text if len(text) <= n else text[:n] + "..."


def with_nan(forge, src, dst, tensor):
    """A copy of src with the first value of the f32 tensor `tensor` set to NaN."""
    info = json.loads(forge_run(forge, ["info", "--json", src]).stdout)
    t = [t for t in info["tensors"] if t["name"] == tensor][0]
    assert t["type"] == "F32"
    shutil.copyfile(src, dst)
    with open(dst, "r+b") as f:
        f.seek(info["gguf"]["data_offset"] + t["offset"])
        f.write(struct.pack("<f", float("nan")))


def stderr_on_terminal(forge, args):
    """Runs forge with stderr on a pseudo-terminal (stdout a pipe); returns (exit code, stdout, stderr)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([forge] + args, stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    err = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the other side closed
            break
        if not chunk:
            break
        err += chunk
    out = proc.stdout.read()
    proc.wait(timeout=120)
    os.close(master)
    return proc.returncode, out.decode(), err.decode(errors="replace")


def test_help(forge):
    # every verb answers --help on stdout with exit 0 and names every flag it accepts
    context = ["--ctx", "--kv", "--batch", "--threads", "--mem-fraction", "--headroom", "--on-budget", "--gpu", "--cpu", "--device",
               "--no-copy-weights", "--seqs", "--devices", "--split", "--split-layers"]
    sampler = ["--temp", "--top-k", "--top-p", "--min-p", "--repeat-penalty", "--repeat-last-n", "--seed"]
    verbs = {
        "info": ["--json"],
        "plan": ["--json"] + context,
        "run": ["-m", "-p", "-n", "--chat", "--system", "--monitor", "--quiet"] + sampler + context,
        "chat": ["-m", "-n", "--system", "--monitor", "--quiet"] + sampler + context,
        "eval": ["-m", "--tokens", "--logits", "--quiet"] + context,
        "extract": ["-m", "-f", "-p", "--tokens", "-o", "--layers", "--points", "--chunk", "--dtype", "--bos", "--no-bos", "--monitor", "--quiet"] + context,
        "bench": ["-m", "-p", "-n", "-d", "-r", "-ctk", "-ctv", "-o", "--quiet"] + context,
        "tokenize": ["-m", "--special", "--bos", "--no-bos", "--pieces"],
        "mkmodel": ["--shape", "--type", "-o", "--seed", "--vocab", "--layers", "--dry-run"],
    }
    for verb, flags in verbs.items():
        for spelling in ("--help", "-h"):
            proc = forge_run(forge, [verb, spelling])
            missing = [f for f in flags if f not in proc.stdout]
            check(proc.returncode == 0 and proc.stdout.startswith("usage: forge " + verb) and not missing,
                  "%s %s: exit %d, flags missing from the text: %s" % (verb, spelling, proc.returncode, missing))
    top = forge_run(forge, ["--help"])
    check(top.returncode == 0 and "--help" in top.stdout, "forge --help mentions per-command help")


def test_numbers(forge, model):
    # each refusal names the flag, the text and the range; nothing is converted out of range
    cases = [
        (["bench", "--cpu", "-m", model, "-p", "4294967295", "-n", "1", "-d", "1"], "-p '4294967295' must be an integer in [0, 1073741824]"),
        (["bench", "--cpu", "-m", model, "-p", "1073741824", "-n", "1", "-d", "1"], "above forge's largest context"),
        (["bench", "--cpu", "-m", model, "-d", "1,99999999999"], "-d '99999999999' must be an integer in [0, 1073741824]"),
        (["bench", "--cpu", "-m", model, "-r", "0"], "-r '0' must be an integer in [1, 64]"),
        (["bench", "--cpu", "-m", model, "-p", "0", "-n", "0"], "nothing to measure"),
        (["run", "-m", model, "-p", "hi", "--seed", "nan"], "--seed 'nan' must be an integer in [0, 18446744073709551615]"),
        (["run", "-m", model, "-p", "hi", "--seed", "18446744073709551616"], "must be an integer in [0, 18446744073709551615]"),
        (["run", "-m", model, "-p", "hi", "--seed", "-2"], "--seed -1 picks a random seed"),
        (["run", "-m", model, "-p", "hi", "--top-k", "1e20"], "--top-k '1e20' must be an integer in [0, 2147483647]"),
        (["run", "-m", model, "-p", "hi", "--top-k", "-1"], "--top-k '-1' must be an integer in [0, 2147483647]"),
        (["run", "-m", model, "-p", "hi", "--repeat-last-n", "1e10"], "--repeat-last-n '1e10' must be an integer in [0, 1048576]"),
        (["run", "-m", model, "-p", "hi", "--temp", "nan"], "--temp 'nan' must be a number in [0, 100]"),
        (["run", "-m", model, "-p", "hi", "--temp", "inf"], "--temp 'inf' must be a number in [0, 100]"),
        (["run", "-m", model, "-p", "hi", "--top-p", "1.5"], "--top-p '1.5' must be a number in [0, 1]"),
        (["run", "-m", model, "-p", "hi", "--min-p", "-0.1"], "--min-p '-0.1' must be a number in [0, 1]"),
        (["run", "-m", model, "-p", "hi", "--repeat-penalty", "1e300"], "--repeat-penalty '1e300' must be a number in [0, 100]"),
        (["run", "-m", model, "-p", "hi", "-n", "-1"], "-n '-1' must be an integer in [0, 1073741824]"),
        (["run", "-m", model, "-p", "hi", "--threads", "1000"], "--threads '1000' must be an integer in [0, 256]"),
        (["chat", "-m", model, "-n", "x"], "-n 'x' must be an integer in [0, 1073741824]"),
        (["plan", model, "--ctx", "5000000000"], "--ctx '5000000000' must be an integer in [0, 1073741824]"),
        (["plan", model, "--batch", "65537"], "--batch '65537' must be an integer in [0, 65536]"),
        (["plan", model, "--device", "-1"], "--device '-1' must be an integer in [0, 255]"),
        (["plan", model, "--mem-fraction", "nan"], "--mem-fraction 'nan' must be a number in (0, 1]"),
        (["plan", model, "--mem-fraction", "0"], "--mem-fraction '0' must be a number in (0, 1]"),
        (["plan", model, "--headroom", "-5"], "--headroom '-5' must be a size"),
        (["plan", model, "--headroom", "2X"], "--headroom '2X' must be a size"),
        (["plan", model, "--on-budget", "maybe"], "--on-budget 'maybe' must be refuse or warn"),
        (["plan", model, "--seqs", "0"], "--seqs '0' must be an integer in [1, 4096]"),
        (["plan", model, "--devices", "0"], "a split takes two devices or more"),
        (["plan", model, "--devices", "0,1", "--split", "1,2,3"], "lists 3 devices, another option 2"),
        (["plan", model, "--split", "0.5,nan"], "--split 'nan' must be a number in (0, 1e+09]"),
        (["plan", model, "--split", "0.5,0"], "--split '0' must be a number in (0, 1e+09]"),
        (["plan", model, "--devices", "0,256"], "--devices '256' must be an integer in [0, 255]"),
        (["plan", "--cpu", model, "--split-layers", "1,1"], "layers by device: 2 of 2 devices given layers, 2 in all; the model has 4"),
        (["plan", "--cpu", model, "--split-layers", "1,1,1,1,1"], "5 devices for a model of 4 layers"),
        (["bench", "--cpu", "-m", model, "--seqs", "1,99999"], "--seqs '99999' must be an integer in [1, 4096]"),
        (["bench", "--cpu", "-m", model, "--seqs", "1,2", "-p", "0"], "-p and -n must be above 0"),
        (["eval", "-m", model, "--tokens", "1,2", "--logits", "/dev/null", "--threads", "1e3"], "--threads '1e3' must be an integer in [0, 256]"),
        (["extract", "-m", model, "-p", "hi", "-o", "/tmp/never", "--chunk", "0"], "--chunk '0' must be an integer in [1, 65536]"),
        (["mkmodel", "--shape", "qwen2.5-0.5b", "--type", "q4_0", "--dry-run", "--seed", "18446744073709551616"],
         "--seed '18446744073709551616' is not an integer in [0, 18446744073709551615]"),
    ]
    for args, expected in cases:
        proc = forge_run(forge, args)
        check(proc.returncode == 1 and expected in proc.stderr and "Traceback" not in proc.stderr,
              "%s: exit %d, stderr names the range: %s" % (" ".join(args[:1] + args[3:]), proc.returncode, short(proc.stderr)))
    proc = forge_run(forge, ["run", "-m", model, "-p", "hi", "-n", "2", "--seed", "-1", "--temp", "0.8"])
    check(proc.returncode == 0 and "forge run: seed " in proc.stderr, "--seed -1 picks a random seed and says which (%s)" % short(proc.stderr))
    proc = forge_run(forge, ["run", "-m", model, "-p", "hi", "-n", "2", "--seed", "18446744073709551615", "--temp", "0.8", "--top-k", "2147483647"])
    check(proc.returncode == 0, "the largest seed and top-k are accepted (%s)" % short(proc.stderr))
    proc = forge_run(forge, ["plan", model], env={"FORGE_MEM_FRACTION": "5"})
    check(proc.returncode == 1 and "FORGE_MEM_FRACTION='5'" in proc.stderr and "(0, 1]" in proc.stderr,
          "FORGE_MEM_FRACTION=5 is refused, not ignored (%s)" % short(proc.stderr))
    proc = forge_run(forge, ["run", "-m", model, "-p", "hi", "-n", "1"], env={"FORGE_MEM_FRACTION": "abc"})
    check(proc.returncode == 1 and "FORGE_MEM_FRACTION='abc'" in proc.stderr, "FORGE_MEM_FRACTION=abc is refused by run")
    proc = forge_run(forge, ["plan", model, "--json"], env={"FORGE_MEM_FRACTION": "0.5"})
    check(proc.returncode == 0 and json.loads(proc.stdout)["mem_fraction"] == 0.5, "FORGE_MEM_FRACTION=0.5 is used")


def test_non_finite(forge, model, tmp):
    # a NaN weight in layer 0's attention norm: NaN activations reach the q8_0/q4_0 cache and the logits
    bad = os.path.join(tmp, "nan.gguf")
    with_nan(forge, model, bad, "blk.0.attn_norm.weight")
    for kv in ("q4_0", "q8_0", "f16"):
        runs = {
            "eval": ["eval", "-m", bad, "--tokens", "1,300,301", "--logits", os.path.join(tmp, "l.f32"), "--kv", kv],
            "bench": ["bench", "--cpu", "-m", bad, "-p", "4", "-n", "2", "-r", "1", "-ctk", kv],
            "bench --seqs": ["bench", "--cpu", "-m", bad, "--seqs", "2", "-p", "4", "-n", "2", "-r", "1", "-ctk", kv],
            "extract": ["extract", "-m", bad, "--tokens", "1,300,301", "-o", os.path.join(tmp, "x"), "--layers", "0", "--kv", kv],
            "run": ["run", "-m", bad, "-p", "hello", "-n", "3", "--kv", kv],
            "chat": ["chat", "-m", bad, "-n", "3", "--kv", kv],
        }
        for verb, args in runs.items():
            proc = forge_run(forge, args, stdin="hello\n")
            check(proc.returncode == 1 and ("non-finite" in proc.stderr or "NaN" in proc.stderr),
                  "NaN weights, %s cache: %s exits 1 and says so (%s)" % (kv, verb, short(proc.stderr)))
    proc = forge_run(forge, ["eval", "-m", model, "--tokens", "1,300,301", "--logits", os.path.join(tmp, "l.f32"), "--kv", "q4_0"])
    check(proc.returncode == 0, "the same model without the NaN evaluates (%s)" % short(proc.stderr))


def test_generation(forge, model):
    proc = forge_run(forge, ["run", "-m", model, "-p", "hello", "-n", "0"])
    check(proc.returncode == 0 and proc.stdout == "" and "generation 0 tokens, 0.0 t/s" in proc.stderr,
          "run -n 0 reads the prompt and generates nothing (%r, %s)" % (proc.stdout, short(proc.stderr)))
    proc = forge_run(forge, ["run", "-m", model, "-p", "hello", "-n", "5"])
    check(proc.returncode == 0 and proc.stdout.endswith("\n") and proc.stdout.count("\n") == 1 + proc.stdout[:-1].count("\n"),
          "piped run output ends with a newline (%r)" % proc.stdout)
    proc = forge_run(forge, ["chat", "-m", model, "-n", "4"], stdin="hello\nand again\n")
    lines = proc.stdout.split("\n")
    check(proc.returncode == 0 and proc.stdout.endswith("\n") and len(lines) >= 3 and "generation 4 tokens" in proc.stderr,
          "piped chat: each reply ends its own line (%r)" % proc.stdout)
    proc = forge_run(forge, ["plan", model, "--ctx", "8192"])
    check("above the 4096 the model was trained on" in proc.stderr, "--ctx above the trained context warns (%s)" % short(proc.stderr))
    proc = forge_run(forge, ["run", "-m", model, "-p", "hi", "-n", "1", "--ctx", "4096"])
    check(proc.returncode == 0 and "trained on" not in proc.stderr, "--ctx at the trained context does not warn")
    # (the 'fits' suggestion stays within the trained context: test_context, with a fixed memory reading)


def test_tokenize(forge, fixtures):
    vocab = os.path.join(fixtures, "tokenizer", "ggml-vocab-gpt-2.gguf")
    with open(vocab + ".inp", encoding="utf-8") as f:
        first = f.read().split("\n__ggml_vocab_test__\n")[0]
    with open(vocab + ".out") as f:
        expected = f.readline().strip()
    proc = forge_run(forge, ["tokenize", "-m", vocab, first])
    check(proc.returncode == 0 and proc.stdout.strip() == expected,
          "tokenize on a vocabulary-only file: %r -> %r (llama.cpp: %r) %s" % (first, proc.stdout.strip(), expected, short(proc.stderr)))
    proc = forge_run(forge, ["tokenize", "-m", vocab, "a", "b"])
    check(proc.returncode == 1 and "one text at a time" in proc.stderr, "tokenize refuses a second text (%s)" % short(proc.stderr))


def test_split(forge, model):
    # a split on the CPU: forge plan shows each device's layers and terms, the parts add up, and run
    # gives the same text as the whole model
    proc = forge_run(forge, ["plan", model, "--cpu", "--split-layers", "1,3", "--ctx", "256", "--json"])
    plan = json.loads(proc.stdout) if proc.returncode == 0 else {}
    parts = plan.get("parts", [])
    check(proc.returncode == 0 and [(p["layer_first"], p["n_layers"]) for p in parts] == [(0, 1), (1, 3)] and
          sum(p["total_bytes"] for p in parts) == plan["plan"]["total_bytes"] and
          sum(p["kv_bytes"] for p in parts) == plan["plan"]["kv_bytes"] and len(plan.get("devices", [])) == 1,
          "plan --json --split-layers 1,3: parts %s, devices %s" % ([(p["layer_first"], p["n_layers"]) for p in parts], plan.get("devices")))
    proc = forge_run(forge, ["plan", model, "--cpu", "--split", "0.5,0.5", "--ctx", "256"])
    check(proc.returncode == 0 and "device 0" in proc.stdout and "(layers 0-1)" in proc.stdout and "(layers 2-3)" in proc.stdout and
          "on 2 devices" in proc.stdout, "plan --split 0.5,0.5 lists the devices (%s)" % short(proc.stdout, 400))
    whole = forge_run(forge, ["run", "--cpu", "-m", model, "-p", "hello", "-n", "8", "--temp", "0"])
    split = forge_run(forge, ["run", "--cpu", "-m", model, "-p", "hello", "-n", "8", "--temp", "0", "--devices", "0,1", "--split-layers", "3,1"])
    check(whole.returncode == 0 and split.returncode == 0 and whole.stdout == split.stdout and whole.stdout.strip(),
          "run split across two devices gives the whole model's text (%r vs %r)" % (short(whole.stdout), short(split.stdout)))


def test_bench(forge, model):
    proc = forge_run(forge, ["bench", "--cpu", "-m", model, "-p", "0", "-n", "2", "-r", "1", "-d", "0,8", "-o", "json"])
    rows = json.loads(proc.stdout) if proc.returncode == 0 else []
    check(proc.returncode == 0 and [(r["test"], r["depth"]) for r in rows] == [("tg2", 0), ("tg2", 8)],
          "bench -p 0 runs the tg test only (%s)" % short(proc.stderr or proc.stdout))
    proc = forge_run(forge, ["bench", "--cpu", "-m", model, "-p", "8", "-n", "0", "-r", "1", "-o", "csv"])
    check(proc.returncode == 0 and proc.stdout.count("\n") == 2 and ",pp8," in proc.stdout, "bench -n 0 runs the pp test only")
    # (a depth would fill the context in batches of 2048; a long context without one shows the same choice)
    proc = forge_run(forge, ["bench", "--cpu", "-m", model, "-p", "8", "-n", "1", "-r", "1", "--ctx", "4096", "-o", "json"])
    rows = json.loads(proc.stdout) if proc.returncode == 0 else []
    check(proc.returncode == 0 and rows and all(r.get("n_batch") == 2048 for r in rows),
          "bench's batch is 2048 whatever -p is (%s)" % [r.get("n_batch") for r in rows])
    proc = forge_run(forge, ["bench", "--cpu", "-m", model, "-p", "8", "-n", "1", "-r", "1", "--ctx", "4096", "-b", "64", "-o", "json"])
    rows = json.loads(proc.stdout) if proc.returncode == 0 else []
    check(proc.returncode == 0 and rows and all(r.get("n_batch") == 64 for r in rows), "-b sets it (%s)" % [r.get("n_batch") for r in rows])
    proc = forge_run(forge, ["bench", "--cpu", "-m", model, "-p", "8", "-n", "1", "-r", "1", "-o", "json"])
    rows = json.loads(proc.stdout) if proc.returncode == 0 else []
    check(proc.returncode == 0 and rows and all(r.get("n_batch") == 8 for r in rows), "the library caps it at the context (%s)" %
          [r.get("n_batch") for r in rows])
    args = ["bench", "--cpu", "-m", model, "-p", "8", "-n", "2", "-r", "1", "-d", "0,4"]
    code, out, err = stderr_on_terminal(forge, args)
    check(code == 0 and err.count("forge bench: ") == 4 and "pp8 @ d0" in err and "tg2 @ d4" in err and out.count("| tiny") == 4,
          "bench shows each row on a terminal's stderr as it finishes (%r)" % err[:200])
    code, out, err = stderr_on_terminal(forge, args + ["--quiet"])
    check(code == 0 and err == "" and out.count("| tiny") == 4, "--quiet: no progress (%r)" % err[:200])
    proc = forge_run(forge, args)
    check(proc.returncode == 0 and proc.stderr == "", "stderr not a terminal: no progress (%r)" % proc.stderr[:200])
    # on the CPU the weights stay in the mapped file: no upload line, even on a terminal
    code, out, err = stderr_on_terminal(forge, ["eval", "--cpu", "-m", model, "--tokens", "1,2", "--logits", "/dev/null"])
    check(code == 0 and "uploading" not in err and "2 tokens" in err, "eval on the CPU: no upload progress (%r)" % err[:200])


def patch_u32(src, dst, key, value):
    """A copy of src with the 32-bit integer metadata value of `key` replaced."""
    with open(src, "rb") as f:
        data = bytearray(f.read())
    name = key.encode()
    at = data.index(struct.pack("<Q", len(name)) + name) + 8 + len(name)
    assert struct.unpack_from("<I", data, at)[0] in (4, 5)  # GGUF UINT32 or INT32
    struct.pack_into("<I", data, at + 4, value)
    with open(dst, "wb") as f:
        f.write(data)


def gguf_str(text):
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def test_info(forge, fixtures, tmp):
    models = os.path.join(fixtures, "models")
    # block_count 3 of 4: layer 3's tensors are never read; every verb refuses the file, and so does info
    fewer = os.path.join(tmp, "block_count_3.gguf")
    patch_u32(os.path.join(models, "tiny-llama-q4_0.gguf"), fewer, "llama.block_count", 3)
    plan = forge_run(forge, ["plan", fewer])
    info = forge_run(forge, ["info", fewer])
    doc = json.loads(forge_run(forge, ["info", "--json", fewer]).stdout)
    check(plan.returncode == 1 and info.returncode == 1 and "blk.3" in info.stderr and "not usable as a model" in info.stdout and
          doc["usable"] is False and "blk.3" in doc["refusal"],
          "info exits 1 where plan does: block_count leaves tensors unread (%s)" % short(info.stderr))
    # zero tensors and no tokenizer: not a vocabulary either
    empty = os.path.join(tmp, "no_tensors.gguf")
    with open(empty, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + gguf_str("general.architecture") + struct.pack("<I", 8) + gguf_str("llama"))
    info = forge_run(forge, ["info", empty])
    check(info.returncode == 1 and "not a vocabulary" in info.stdout and "tokenizer" in info.stderr,
          "info: zero tensors and no vocabulary is refused (%s)" % short(info.stderr))
    info = forge_run(forge, ["info", os.path.join(fixtures, "tokenizer", "ggml-vocab-gpt-2.gguf")])
    check(info.returncode == 0 and "vocabulary-only file" in info.stdout, "info: a real vocabulary-only file is accepted")
    # Gemma 3 with sliding_window_pattern 0: llama.cpp makes every layer local
    gemma = os.path.join(tmp, "gemma3_pattern_0.gguf")
    patch_u32(os.path.join(models, "tiny-gemma3-f16.gguf"), gemma, "gemma3.attention.sliding_window_pattern", 0)
    info = forge_run(forge, ["info", gemma])
    doc = json.loads(forge_run(forge, ["info", "--json", gemma]).stdout)
    check(info.returncode == 0 and "sliding window 8 on 3 of 3 layers" in info.stdout and doc["config"]["layer_is_swa"] == [True] * 3,
          "gemma3 sliding_window_pattern 0: every layer local (%s)" % [l for l in info.stdout.splitlines() if "sliding" in l])
    info = forge_run(forge, ["info", os.path.join(models, "tiny-gemma3-f16.gguf")])
    check("sliding window 8 on 2 of 3 layers" in info.stdout, "gemma3 pattern 3: two local layers of three")
    proc = forge_run(forge, ["eval", "-m", gemma, "--tokens", ",".join(str(t) for t in range(1, 20)), "--logits", os.path.join(tmp, "g.f32")])
    check(proc.returncode == 0, "gemma3 with every layer local evaluates past its window (%s)" % short(proc.stderr))


def test_budget_flags(forge, model):
    tiny = ["--mem-fraction", "0.000001"]
    proc = forge_run(forge, ["run", "-m", model, "-p", "hi", "-n", "1"] + tiny)
    check(proc.returncode == 1 and "budget" in proc.stderr, "over the budget: refused by default (%s)" % short(proc.stderr))
    proc = forge_run(forge, ["run", "-m", model, "-p", "hi", "-n", "1", "--on-budget", "refuse"] + tiny)
    check(proc.returncode == 1, "--on-budget refuse refuses")
    proc = forge_run(forge, ["run", "-m", model, "-p", "hi", "-n", "1", "--on-budget", "warn"] + tiny)
    check(proc.returncode == 0 and "warning" in proc.stderr and "budget" in proc.stderr,
          "--on-budget warn runs and warns (%s)" % short(proc.stderr))
    # each plan's budget against the free memory of its own reading (a busy machine's free memory moves
    # between two runs by more than any fixed margin)
    proc = forge_run(forge, ["plan", model, "--json", "--headroom", "1.5G"])
    doc = json.loads(proc.stdout)
    plain = json.loads(forge_run(forge, ["plan", model, "--json"]).stdout)
    full = plain["mem_fraction"] * plain["device"]["free_bytes"]
    want = doc["mem_fraction"] * doc["device"]["free_bytes"] - 3 * 2**29
    check(abs(plain["budget_bytes"] - full) <= 1 and (abs(doc["budget_bytes"] - want) <= 1 or (want <= 0 and doc["budget_bytes"] == 0)),
          "--headroom 1.5G lowers the budget by 1.5 GiB (%d of %d free without it; %d of %d free with it)"
          % (plain["budget_bytes"], plain["device"]["free_bytes"], doc["budget_bytes"], doc["device"]["free_bytes"]))
    proc = forge_run(forge, ["plan", model, "--headroom", "1P"])
    check(proc.returncode == 1 and "less headroom" in proc.stderr, "--headroom 1P: nothing fits, and the message says why (%s)" % short(proc.stderr))


def test_monitor(forge, model, tmp):
    # every run crosses a threshold of one millionth once and stays above it: one warning, not one a step
    for verb, args in (("run", ["run", "-m", model, "-p", "hello", "-n", "40"]),
                       ("chat", ["chat", "-m", model, "-n", "20"]),
                       ("extract", ["extract", "-m", model, "-p", "hello there " * 8, "-o", os.path.join(tmp, "m"), "--layers", "0",
                                    "--chunk", "4"])):
        proc = forge_run(forge, args + ["--monitor", "0.000001"], stdin="hello\nagain\n")
        check(proc.returncode == 0 and proc.stderr.count("warning: ") == 1 and "above the --monitor threshold" in proc.stderr,
              "%s --monitor 0.000001: one warning (%s)" % (verb, short(proc.stderr, 300)))
        proc = forge_run(forge, args + ["--monitor", "0"], stdin="hello\nagain\n")
        check(proc.returncode == 0 and "warning" not in proc.stderr, "%s --monitor 0: off" % verb)
    proc = forge_run(forge, ["run", "-m", model, "-p", "hi", "--monitor", "1.5"])
    check(proc.returncode == 1 and "--monitor '1.5' must be a number in [0, 1]" in proc.stderr, "--monitor 1.5 refused")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--forge", required=True)
    ap.add_argument("--fixtures", required=True)
    args = ap.parse_args()
    model = os.path.join(args.fixtures, "models", "tiny-llama-q4_0.gguf")
    test_help(args.forge)
    test_numbers(args.forge, model)
    with tempfile.TemporaryDirectory() as tmp:
        test_non_finite(args.forge, model, tmp)
        test_info(args.forge, args.fixtures, tmp)
        test_monitor(args.forge, model, tmp)
    test_generation(args.forge, model)
    test_tokenize(args.forge, args.fixtures)
    test_bench(args.forge, model)
    test_split(args.forge, model)
    test_budget_flags(args.forge, model)
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

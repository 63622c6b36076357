"""The Python package against the CLI it binds the same library as: extraction bit for bit against
`forge extract`'s .npy files (a fixture and SmolLM2), chunked against unchunked, greedy generation
against `forge run`, a budget refusal against `forge plan --json`, hostile files, Ctrl-C during an
extraction, and resident memory over 200 open/close cycles.

Paths: FORGE_CLI (default build/forge), FORGE_FIXTURES (default ../shared/fixtures), FORGE_SMOLLM2
(default ~/.cache/forge/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf; when it is set, a missing file fails)."""

import json
import os
import signal
import struct
import subprocess
import threading
import time

import numpy as np
import pytest

import forge

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CLI = os.environ.get("FORGE_CLI", os.path.join(ROOT, "build", "forge"))
FIXTURES = os.path.abspath(os.environ.get("FORGE_FIXTURES", os.path.join(ROOT, "..", "shared", "fixtures")))
LLAMA = os.path.join(FIXTURES, "models", "tiny-llama-q8_0.gguf")
GEMMA2 = os.path.join(FIXTURES, "models", "tiny-gemma2-f16.gguf")
SMOLLM2 = os.environ.get("FORGE_SMOLLM2") or os.path.expanduser("~/.cache/forge/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
TEXT = ("The quick brown fox jumps over the lazy dog. Researchers read hidden states layer by layer, "
        "and attention patterns show which earlier tokens each position looks at.")
IDS = [1, 300, 301, 512, 777, 1000, 5, 42, 259, 260, 1023, 3, 999, 100, 200, 17, 18, 19, 400, 401, 402, 650, 651]


def smollm2():
    if not os.path.exists(SMOLLM2):
        if os.environ.get("FORGE_SMOLLM2"):
            pytest.fail(f"FORGE_SMOLLM2={SMOLLM2} does not exist")
        pytest.skip("SmolLM2 is not in ~/.cache/forge (make test fetches it)")
    return SMOLLM2


def cli(*args, check=True):
    run = subprocess.run([CLI, *args], capture_output=True, text=True)
    if check and run.returncode != 0:
        raise AssertionError(f"forge {' '.join(args)} exited {run.returncode}: {run.stderr}")
    return run


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def cli_extract(tmp_path, model, source, points, layers, chunk, dtype, extra=()):
    out = tmp_path / f"cli_{dtype}_{chunk}"
    cli("extract", "-m", model, *source, "--points", points, "--layers", layers, "--chunk", str(chunk), "--dtype", dtype,
        "-o", str(out), "--cpu", "--quiet", "-t", "2", *extra)
    index = json.loads((out / "index.json").read_text())
    return {c["name"]: np.load(out / c["file"]) for c in index["captures"]}, np.load(out / "tokens.npy")


@pytest.mark.parametrize("dtype", ["f32", "bf16", "f16"])
def test_extract_equals_cli_on_a_fixture(tmp_path, dtype):
    points = "resid_pre,attn_out,mlp_out,resid_post,final,pattern"
    want, tokens = cli_extract(tmp_path, LLAMA, ["--tokens", ",".join(map(str, IDS))], points, "0,-1", 7, dtype)
    with forge.Model(LLAMA, device="cpu", threads=2) as model:
        got = model.extract(IDS, layers=[0, -1], points=points, chunk=7, dtype=dtype)
    assert list(got) == list(want)
    assert list(tokens) == IDS
    for name in want:
        assert same_bits(got[name], want[name]), name
    assert got["blocks.0.attn.hook_pattern"].shape == (len(IDS), 8, len(IDS))


def test_extract_equals_cli_on_smollm2_text_with_a_pattern_window(tmp_path):
    path = smollm2()
    extra = ("--pattern-heads", "2-4", "--pattern-keys", "3-20")
    want, tokens = cli_extract(tmp_path, path, ["-p", TEXT], "resid_post,pattern", "0,14,-1", 16, "bf16", extra)
    with forge.Model(path, device="cpu", threads=2) as model:
        assert model.tokenize(TEXT) == list(tokens)
        got = model.extract(TEXT, layers=[0, 14, -1], points=["resid_post", "pattern"], chunk=16,
                            pattern_heads=range(2, 5), pattern_keys=range(3, 21))
    assert list(got) == list(want)
    for name in want:
        assert same_bits(got[name], want[name]), name
    assert got["blocks.14.attn.hook_pattern"].shape == (len(tokens), 3, 18)


def test_chunked_equals_unchunked_and_iter_extract_equals_extract():
    with forge.Model(LLAMA, device="cpu", threads=2) as model:
        whole = model.extract(IDS, layers="all", points="resid_post,attn_out,pattern", chunk=64, dtype="f32")
        for chunk in (1, 5):
            parts = model.extract(IDS, layers="all", points="resid_post,attn_out,pattern", chunk=chunk, dtype="f32")
            for name, a in whole.items():
                scale = float(np.abs(a).max())
                assert float(np.abs(parts[name] - a).max()) <= 1e-4 * scale, (name, chunk)
        chunks = list(model.iter_extract(IDS, layers=[1], points="resid_post", chunk=5, dtype="bf16"))
        assert [c.start for c in chunks] == [0, 5, 10, 15, 20]
        assert np.concatenate([c.tokens for c in chunks]).tolist() == IDS
        joined = np.concatenate([c.activations["blocks.1.hook_resid_post"] for c in chunks])
        assert same_bits(joined, model.extract(IDS, layers=[1], chunk=5)["blocks.1.hook_resid_post"])


def test_patterns_are_probabilities():
    with forge.Model(GEMMA2, device="cpu", threads=2) as model:
        window = model.config["n_swa"]
        pat = model.extract(IDS, layers=[0, 1], points="pattern", dtype="f32")
        for name, p in pat.items():
            assert p.shape == (len(IDS), model.config["n_head"], len(IDS))
            assert np.abs(p.sum(-1) - 1).max() <= 1e-5, name
            assert (np.triu(np.ones((len(IDS), len(IDS))), 1)[:, None, :] * p).max() == 0, name  # nothing from the future
        # one of the two layers has a sliding window: keys older than the window get nothing
        far = [float(p[-1, :, :len(IDS) - window].max()) for p in pat.values()]
        assert min(far) == 0.0 and max(far) > 0.0


def test_generate_greedy_equals_forge_run():
    path = smollm2()
    prompt = "The capital of France is"
    want = cli("run", "-m", path, "-p", prompt, "-n", "24", "--cpu", "-t", "2").stdout
    with forge.Model(path, device="cpu", threads=2) as model:
        pieces = list(model.generate(prompt, max_tokens=24))
    assert len(pieces) > 1
    assert "".join(pieces) == want.rstrip("\n")


def test_split_across_devices_plans_by_device_and_generates_the_same():
    # on the CPU the parts are host arenas standing in for devices: the same split, plans and text
    path = smollm2()
    want = cli("plan", LLAMA, "--json", "--cpu", "-t", "2", "--ctx", "256", "--split-layers", "1,3")
    with forge.Model(LLAMA, device="cpu", threads=2, ctx=256, split_layers=[1, 3]) as model:
        plan = model.plan()
    cli_plan = json.loads(want.stdout)
    assert [(q["layer_first"], q["n_layers"]) for q in plan["parts"]] == [(0, 1), (1, 3)]
    assert plan["parts"] == cli_plan["parts"] and plan["plan"] == cli_plan["plan"]
    assert sum(q["total_bytes"] for q in plan["parts"]) == plan["plan"]["total_bytes"]
    with forge.Model(path, device="cpu", threads=2, ctx=256) as whole, \
            forge.Model(path, device="cpu", threads=2, ctx=256, devices=[0, 1], split=[0.3, 0.7]) as split:
        assert len(split.plan()["parts"]) == 2
        assert list(split.generate("The capital of France is", max_tokens=12)) == \
            list(whole.generate("The capital of France is", max_tokens=12))
    with pytest.raises(ValueError):
        forge.Model(LLAMA, device="cpu", devices=[0, 1], split=[0.5, 0.3, 0.2])


def test_chat_follows_the_chat_format():
    path = smollm2()
    with forge.Model(path, device="cpu", threads=2, ctx=512) as model:
        assert model.chat_format == "chatml"
        reply = model.chat([{"role": "user", "content": "Say hello."}], max_tokens=8)
        want = cli("run", "-m", path, "--chat", "-p", "Say hello.", "-n", "8", "--cpu", "-t", "2", "-c", "512").stdout
    assert reply == want.rstrip("\n")


def test_budget_refusal_has_the_plan_numbers():
    plan = json.loads(cli("plan", LLAMA, "--json", "--cpu", "-t", "2", "--ctx", "4096", "--mem-fraction", "0.000001",
                          check=False).stdout)
    assert plan["fits"] is False
    with pytest.raises(forge.BudgetError) as refusal:
        forge.Model(LLAMA, device="cpu", threads=2, ctx=4096, mem_fraction=0.000001)
    e = refusal.value
    assert isinstance(e, forge.Error) and e.code == "FORGE_ERR_BUDGET"
    assert e.required_bytes == plan["plan"]["total_bytes"]
    assert e.memory_total_bytes == plan["device"]["total_bytes"]
    # the budget is a share of free memory, which moves between the two readings
    assert abs(e.budget_bytes - plan["budget_bytes"]) <= 0.05 * plan["budget_bytes"] + 4096
    assert e.fits_ctx == plan["max_ctx_that_fits"] and e.fits_kv == plan["kv_type_that_fits"]
    assert e.plan["plan"] == plan["plan"] and e.message.startswith("model needs") and "budget" in e.message
    with forge.Model(LLAMA, device="cpu", threads=2, ctx=4096) as model:
        mine = model.plan()
    assert set(mine) == set(plan) and mine["plan"] == plan["plan"]


def test_extraction_refusal_counts_the_pattern_window():
    with forge.Model(LLAMA, device="cpu", threads=2) as model:
        generation = model.plan()
        base = model.plan(n_tokens=4000, layers=[1], points="resid_post", chunk=512)
        square = model.plan(n_tokens=4000, layers=[1], points="pattern", chunk=512)
    assert square["plan"]["pattern_bytes"] == 512 * 8 * 4000 * 2 and base["plan"]["pattern_bytes"] == 0
    # a budget that holds generation and the extraction without patterns, not the square of 4000 keys
    need = max(generation["plan"]["total_bytes"], base["plan"]["total_bytes"]) * 1.3
    assert need < square["plan"]["total_bytes"]
    with forge.Model(LLAMA, device="cpu", threads=2, mem_fraction=need / base["device"]["free_bytes"]) as model:
        model.extract(IDS, layers=[1], points="resid_post")
        with pytest.raises(forge.BudgetError) as refusal:
            model.extract(list(range(1, 1001)) * 4, layers=[1], points="pattern", chunk=512)
        assert "attention patterns" in refusal.value.message and "keys 0 .. 3999" in refusal.value.message
        assert refusal.value.plan["plan"]["pattern_bytes"] == square["plan"]["pattern_bytes"]
        assert model._live_contexts == 0


def write_gguf_header(path, n_tensors, n_kv, body=b""):
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv) + body)


def test_hostile_files_raise_format_error(tmp_path):
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(open(LLAMA, "rb").read()[:300])
    huge = tmp_path / "huge.gguf"
    write_gguf_header(huge, 1 << 40, 0)
    magic = tmp_path / "magic.gguf"
    magic.write_bytes(b"GGML" + bytes(60))
    for path, code in ((truncated, "FORGE_ERR_TRUNCATED"), (huge, "FORGE_ERR_LIMIT"), (magic, "FORGE_ERR_MAGIC")):
        with pytest.raises(forge.FormatError) as bad:
            forge.Model(path, device="cpu")
        assert bad.value.code == code, (path.name, bad.value)
        assert bad.value.message and bad.value.message in cli("info", str(path), check=False).stderr
    with pytest.raises(forge.Error) as missing:
        forge.Model(tmp_path / "absent.gguf")
    assert missing.value.code == "FORGE_ERR_IO" and not isinstance(missing.value, forge.FormatError)


def test_ctrl_c_stops_at_the_next_chunk_and_frees_the_context():
    # a shell's background job starts with SIGINT ignored, and Python then raises no KeyboardInterrupt:
    # the test sets the usual handler for itself (and puts back what it found)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        ctrl_c_during_extraction()
    finally:
        signal.signal(signal.SIGINT, previous)


def ctrl_c_during_extraction():
    with forge.Model(LLAMA, device="cpu", threads=2) as model:
        seen, sent, once = [], [], threading.Lock()
        def interrupt():  # one SIGINT, whichever asks first
            with once:
                if not sent:
                    sent.append(1)
                    os.kill(os.getpid(), signal.SIGINT)
        # Ctrl-C from another thread a moment in (most likely while a chunk runs in C), or, where that
        # thread is late (a loaded machine) or the chunks quick, from the loop itself half-way
        timer = threading.Timer(0.05, interrupt)
        timer.start()
        started = time.time()
        with pytest.raises(KeyboardInterrupt):
            for chunk in model.iter_extract(list(range(1, 1001)) * 4, layers="all", points="resid_post", chunk=1):
                seen.append(chunk.start)
                if len(seen) == 2000:
                    interrupt()
        timer.cancel()
        timer.join()
        assert 0 < len(seen) < 4000 and time.time() - started < 30
        assert model._live_contexts == 0
        # and the model goes on
        assert model.extract(IDS, layers=[0], dtype="f32")["blocks.0.hook_resid_post"].shape == (len(IDS), 256)


def resident_kib():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_no_leak_over_200_open_close_cycles():
    def cycle():
        with forge.Model(LLAMA, device="cpu", threads=2, ctx=64) as model:
            model.extract(IDS[:8], layers=[0], points="resid_post,pattern", dtype="f32")
            "".join(model.generate("hello", max_tokens=2))
    for _ in range(20):  # allocator pools and caches settle first
        cycle()
    before = resident_kib()
    for _ in range(200):
        cycle()
    grown = resident_kib() - before
    # a context of this model takes ~1 MiB and the mapping 3 MiB: a leak of either per cycle shows as 200+ MiB
    assert grown < 4096, f"resident memory grew by {grown} KiB over 200 cycles"


def test_help_reads_well():
    doc = forge.Model.__doc__ + forge.Model.extract.__doc__ + forge.Model.plan.__doc__
    for word in ("BudgetError", "budget", "pattern_keys", "forge plan --json", "bf16"):
        assert word in doc
    with pytest.raises(ValueError):
        forge.Model(LLAMA, device="tpu")

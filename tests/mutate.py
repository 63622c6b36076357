#!/usr/bin/env python3
"""Plants plausible bugs in a copy of forge.h, one at a time, and reports which suite catches each.

Usage:
    python3 tests/mutate.py [--only NAME,...] [--suites SUITE,...] [--all] [--list] [--keep]

Each mutation replaces one exact piece of forge.h (it must occur exactly once; a mutation whose text
is no longer there is reported as "not applied", so the list is kept in step with the code). The
tree is copied to a temporary folder, the mutated forge.h built there, and the suites run in the
order given (cheapest first); the first that fails (or crashes, or hangs) catches the mutation and
the rest are skipped unless --all. (test_seqs runs its quick share, as its sanitizer build does.) A mutation no suite catches is a hole in the tests: the script
exits non-zero when there is one.

The suites here are the ones `make test` runs without a download (the three that need downloaded
models, and the sanitizer builds of the same sources, are left out); `fixtures` runs the dequant and
logits checks of tests/check_fixtures.py (--only bd), `long` its long sequences. On two cores a
mutation caught by a unit suite takes about 10 s, one that only the fixtures catch a minute or more.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.environ.get("FORGE_FIXTURES") or os.path.join(REPO_ROOT, "..", "shared", "fixtures")
PYTHON = os.environ.get("PYTHON", sys.executable)
SUITE_TIMEOUT_S = 600

# name: (what make builds, the command)
SUITES = {
    "types": (["build/test_types"], ["build/test_types"]),
    "plan": (["build/test_plan"], ["build/test_plan"]),
    "sampler": (["build/test_sampler"], ["build/test_sampler"]),
    "tokenizer": (["build/test_tokenizer"], ["build/test_tokenizer"]),
    "matmul": (["build/test_matmul"], ["build/test_matmul"]),
    "context": (["build/test_context"], ["build/test_context"]),
    "capture": (["build/test_capture"], ["build/test_capture"]),
    "arena": (["build/test_arena"], ["build/test_arena"]),
    "seqs": (["build/test_seqs"], ["env", "FORGE_TEST_QUICK=1", "build/test_seqs"]),
    "fixtures": (["build/forge", "build/dump_tensors"],
                 [PYTHON, "tests/check_fixtures.py", "--forge", "build/forge", "--dump", "build/dump_tensors",
                  "--fixtures", FIXTURES, "--only", "bd"]),
    "long": (["build/forge"], [PYTHON, "tests/check_fixtures.py", "--forge", "build/forge", "--dump", "build/dump_tensors",
                               "--fixtures", FIXTURES, "--only", "f"]),
}
DEFAULT_SUITES = ["types", "plan", "arena", "sampler", "tokenizer", "matmul", "context", "capture", "seqs", "fixtures"]

# (name, what the bug is, the exact text of forge.h, its replacement)
MUTATIONS = [
    ("plan-vector", "the plan forgets the context's f32 vector region",
     "p->reserve_bytes = forge__cpu_reserve_bytes(n_threads, s->max_cols, r->n_batch) +\n"
     "                           forge__align64((uint64_t)s->max_vec * sizeof(float));",
     "p->reserve_bytes = forge__cpu_reserve_bytes(n_threads, s->max_cols, r->n_batch);"),
    ("plan-logits", "the plan counts one row of logits when every row is kept",
     "p->logits_bytes = forge__align64((uint64_t)r->n_logits * m->config.n_vocab * sizeof(float));",
     "p->logits_bytes = forge__align64((uint64_t)m->config.n_vocab * sizeof(float));"),
    ("plan-ring", "a sliding-window layer keeps one row fewer than a batch needs",
     "ring = (uint64_t)c->n_swa + n_batch - 1;",
     "ring = (uint64_t)c->n_swa + n_batch - 2;"),
    ("alloc-eval", "forge_eval allocates with plain FORGE_MALLOC",
     'if (n_tokens == 0) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_eval: no tokens");',
     'if (n_tokens == 0) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_eval: no tokens");\n'
     '    { void *leak_ = FORGE_MALLOC(64); FORGE_FREE(leak_); }'),
    ("alloc-sample", "forge_sampler_sample allocates",
     'if (!s || !logits || !out_token) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_sampler_sample: null argument");',
     'if (!s || !logits || !out_token) return forge__fail(error, FORGE_ERR_ARGUMENT, "forge_sampler_sample: null argument");\n'
     '    { void *leak_ = FORGE_MALLOC(64); FORGE_FREE(leak_); }'),
    ("rope-last-pair", "the CPU rotation skips its last pair",
     "        for (i = 0; i < half; i++) {\n            double theta = pos",
     "        for (i = 0; i + 1 < half; i++) {\n            double theta = pos"),
    ("rope-dims", "rotary frequencies over the head size instead of the rotary dimensions (partial rotary)",
     "pow(base, -2.0 * i / c->n_rot)", "pow(base, -2.0 * i / c->head_dim)"),
    ("gelu-erf", "GELU in its erf form instead of tanh",
     "return (float)(0.5 * x * (1.0 + tanh(u)));",
     "(void)u;\n    return (float)(0.5 * x * (1.0 + erf((double)x * 0.7071067811865476)));"),
    ("rmsnorm-eps", "the norm's epsilon added outside the square root",
     "scale = (float)(1.0 / sqrt(sum / n + (double)eps));", "scale = (float)(1.0 / (sqrt(sum / n) + (double)eps));"),
    ("swa-window", "a sliding-window layer sees one position too many",
     "pos >= c->n_swa ? pos - c->n_swa + 1 : 0;", "pos >= c->n_swa ? pos - c->n_swa : 0;"),
    ("pattern-softcap", "attention patterns forget the soft-cap of the scores",
     "if (c->attn_softcap > 0.0f) s = (double)c->attn_softcap * tanh(s / (double)c->attn_softcap);", "(void)0;"),
    ("final-softcap", "the final soft-cap applied without dividing first",
     "ctx->logits[j] = c->final_softcap * tanhf(ctx->logits[j] / c->final_softcap);",
     "ctx->logits[j] = c->final_softcap * tanhf(ctx->logits[j]);"),
    ("embd-scale", "Gemma's embeddings not scaled by sqrt(n_embd)",
     "for (i = 0; i < op->n; i++) row[i] *= c->embd_scale;", "for (i = 0; i < op->n; i++) row[i] *= 1.0f;"),
    ("moe-renorm", "the chosen experts' weights are never renormalized",
     "    if (renorm)\n        for (j = 0; j < k; j++) route[k + j]", "    if (0 && renorm)\n        for (j = 0; j < k; j++) route[k + j]"),
    ("kv-q8-truncate", "the q8_0 cache truncates instead of rounding",
     "dst[2 + j] = (uint8_t)(int8_t)lrintf(x[i + j] * inv);", "dst[2 + j] = (uint8_t)(int8_t)(x[i + j] * inv);"),
    ("kv-q4-truncate", "the q4_0 cache truncates instead of rounding",
     "int lo = (int)(x[i + j] * inv + 8.5f), hi = (int)(x[i + 16 + j] * inv + 8.5f);",
     "int lo = (int)(x[i + j] * inv + 8.0f), hi = (int)(x[i + 16 + j] * inv + 8.0f);"),
    ("f16-truncate", "f32 -> f16 truncates instead of rounding to nearest even",
     "if (rest > 0x1000u || (rest == 0x1000u && (result & 1u))) result++;", "(void)rest;"),
    ("q6k-dequant-scale", "Q6_K dequantization takes the first sub-block's scale for the second quarter",
     "dst[l + 32] = d * (float)scales[s + 2] * (float)q2;", "dst[l + 32] = d * (float)scales[s] * (float)q2;"),
    ("q6k-vdot-scale", "the Q6_K decode product takes the first sub-block's scale for the second quarter",
     "const float s1 = d * (float)scales[s], s2 = d * (float)scales[s + 2];",
     "const float s1 = d * (float)scales[s], s2 = d * (float)scales[s];"),
    ("tokenizer-tie", "equal merges: the rightmost pair merges first",
     "(a->key == b->key && a->left < b->left)", "(a->key == b->key && a->left > b->left)"),
    ("repeat-penalty", "the repetition penalty multiplies positive logits and divides negative ones",
     "double v = logit > 0.0f ? (double)logit / penalty : (double)logit * penalty;",
     "double v = logit > 0.0f ? (double)logit * penalty : (double)logit / penalty;"),
]


def copy_tree(root, dst):
    for item in ("forge.h", "forge_kernels.hip", "Makefile", "tests", "tools", "examples"):
        src = os.path.join(root, item)
        if os.path.isdir(src):
            shutil.copytree(src, os.path.join(dst, item), ignore=shutil.ignore_patterns("__pycache__"))
        elif os.path.exists(src):
            shutil.copy2(src, os.path.join(dst, item))


def run_suite(tree, suite):
    """Returns (caught, how): the suite failed to build, failed, crashed or hung."""
    targets, command = SUITES[suite]
    if suite in ("fixtures", "long"):
        with open(os.path.join(tree, "tests", "check_fixtures.py"), encoding="utf-8") as f:
            if "--only" not in f.read():  # an older tree's checker runs whole
                command = command[:command.index("--only")]
    build = subprocess.run(["make", "-s", "BUILD=build"] + targets, cwd=tree, capture_output=True, text=True,
                           timeout=SUITE_TIMEOUT_S)
    if build.returncode != 0:
        return True, "build fails"
    env = dict(os.environ, FORGE_FIXTURES=FIXTURES)
    try:
        proc = subprocess.run(command, cwd=tree, capture_output=True, text=True, timeout=SUITE_TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        return True, "hangs"
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    if proc.returncode < 0:
        return True, "crashes (signal %d)" % -proc.returncode
    if proc.returncode != 0:
        return True, last if last.endswith("failed") else "exit %d" % proc.returncode
    return False, last


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", help="comma-separated mutation names (default: all)")
    parser.add_argument("--suites", help="comma-separated suites, in order (default: %s)" % ",".join(DEFAULT_SUITES))
    parser.add_argument("--all", action="store_true", help="run every suite on each mutation, not only until one catches it")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--tree", default=REPO_ROOT,
                        help="the checkout whose forge.h is mutated and whose suites run (default: this one; "
                             "another commit's checkout shows what its tests caught)")
    args = parser.parse_args()

    if args.list:
        for name, what, _, _ in MUTATIONS:
            print("%-18s %s" % (name, what))
        return 0
    names = args.only.split(",") if args.only else [m[0] for m in MUTATIONS]
    unknown = [n for n in names if n not in {m[0] for m in MUTATIONS}]
    suites = args.suites.split(",") if args.suites else DEFAULT_SUITES
    unknown += [s for s in suites if s not in SUITES]
    if unknown:
        print("unknown: %s" % " ".join(unknown))
        return 2
    with open(os.path.join(args.tree, "forge.h"), encoding="utf-8") as f:
        original = f.read()

    rows, holes = [], 0
    with tempfile.TemporaryDirectory(prefix="forge-mutate-") as tree:
        copy_tree(args.tree, tree)
        for name, what, old, new in MUTATIONS:
            if name not in names:
                continue
            start = time.time()
            if original.count(old) != 1:
                rows.append((name, "not applied: the text occurs %d times" % original.count(old), ""))
                holes += 1
                print("%-18s not applied (%d occurrences)" % (name, original.count(old)), flush=True)
                continue
            with open(os.path.join(tree, "forge.h"), "w", encoding="utf-8") as f:
                f.write(original.replace(old, new))
            caught_by = []
            for suite in suites:
                if not os.path.exists(os.path.join(tree, "tests", "test_%s.c" % suite)) and suite not in ("fixtures", "long"):
                    continue  # a suite this tree does not have
                caught, how = run_suite(tree, suite)
                if caught:
                    caught_by.append("%s (%s)" % (suite, how))
                    if not args.all:
                        break
            if not caught_by:
                holes += 1
            rows.append((name, "; ".join(caught_by) or "NOT CAUGHT", "%.0f s" % (time.time() - start)))
            print("%-18s %-60s %s" % rows[-1], flush=True)
        with open(os.path.join(tree, "forge.h"), "w", encoding="utf-8") as f:
            f.write(original)

    print("\n| mutation | what | caught by | time |\n| --- | --- | --- | --- |")
    what_of = {m[0]: m[1] for m in MUTATIONS}
    for name, caught, seconds in rows:
        print("| %s | %s | %s | %s |" % (name, what_of[name], caught, seconds))
    print("%d of %d mutations caught" % (len(rows) - holes, len(rows)))
    return 1 if holes else 0


if __name__ == "__main__":
    sys.exit(main())

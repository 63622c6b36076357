#!/bin/sh
# Runs every suite, streams each one's output with its time, and ends with the total "N passed, N failed".
# Called by `make test` after the binaries are built; FORGE_FIXTURES names the fixtures folder.
cd "$(dirname "$0")/.." || exit 1
B=${BUILD:-build}
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 # the Python suites stream too
total_passed=0; total_failed=0; broken=""
now() { date +%s; }
start_all=$(now)
# Each suite's output streams as it comes (its "ok" lines only to the log, at most 200 other lines on
# the screen), then its time.
run() {
  name=$1; shift
  echo "== $name"
  log=$B/$name.log
  t0=$(now)
  { "$@" 2>&1; echo $? >"$log.status"; } | tee "$log" |
    awk '/^ok / { next } { n++ } n <= 200 { print; fflush() } n == 201 { print "  ... (the rest in '"$log"')"; fflush() }'
  status=$(cat "$log.status" 2>/dev/null || echo 1); rm -f "$log.status"
  echo "   ($(( $(now) - t0 )) s)"
  last=$(tail -n 1 "$log")
  p=$(echo "$last" | sed -n 's/^\([0-9][0-9]*\) passed, \([0-9][0-9]*\) failed$/\1/p')
  f=$(echo "$last" | sed -n 's/^\([0-9][0-9]*\) passed, \([0-9][0-9]*\) failed$/\2/p')
  if [ -z "$p" ]; then
    echo "FAIL $name ended without a summary line (exit $status)"; total_failed=$((total_failed + 1)); broken="$broken $name"
    return
  fi
  total_passed=$((total_passed + p)); total_failed=$((total_failed + f))
  if [ "$status" -ne 0 ] && [ "$f" -eq 0 ]; then
    echo "FAIL $name exited $status"; total_failed=$((total_failed + 1)); broken="$broken $name"
  elif [ "$f" -ne 0 ]; then broken="$broken $name"; fi
}
run types       $B/test_types
run types_san   $B/test_types_san
run plan        $B/test_plan
run context     $B/test_context
run context_san $B/test_context_san
run arena       $B/test_arena
run arena_san   env FORGE_TEST_QUICK=1 $B/test_arena_san
run plan_san    $B/test_plan_san
run gguf        $B/test_gguf
run gguf_san    $B/test_gguf_san
run sampler     $B/test_sampler
run sampler_san $B/test_sampler_san
run tokenizer   $B/test_tokenizer
run tokenizer_san $B/test_tokenizer_san
run matmul      $B/test_matmul
run matmul_san  $B/test_matmul_san
run smollm2     $B/test_smollm2
run llm         $B/test_llm
run llm_san     $B/test_llm_san
run gemma3      $B/test_greedy "${FORGE_GEMMA3:-$HOME/.cache/forge/gemma3/gemma-3-270m-q4_k_m.gguf}" tests/data/gemma3_270m_greedy.txt 32
run qwen25coder $B/test_greedy "${FORGE_QWEN25CODER:-$HOME/.cache/forge/qwen25coder/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf}" tests/data/qwen25coder_1p5b_greedy.txt 32
run seqs        $B/test_seqs
run seqs_san    env FORGE_TEST_QUICK=1 $B/test_seqs_san
run split       $B/test_split
run split_san   $B/test_split_san
run capture     $B/test_capture
run capture_san $B/test_capture_san
run builds      sh tests/check_builds.sh
run readme      sh tests/check_readme.sh
run side_effects sh tests/check_side_effects.sh
run mkmodel     sh tests/test_mkmodel.sh
run fixtures    $PY tests/check_fixtures.py --forge $B/forge --dump $B/dump_tensors --fixtures "${FORGE_FIXTURES:-../shared/fixtures}"
run kernel_trace $PY tests/check_kernel_trace.py
run step_floor  $PY tests/check_step_floor.py --forge $B/forge --fixtures "${FORGE_FIXTURES:-../shared/fixtures}"
run cli         $PY tests/check_cli.py --forge $B/forge --fixtures "${FORGE_FIXTURES:-../shared/fixtures}"
# llama.cpp's source (its pre-tokenizer expressions and Unicode tables) is the reference when present
PEER=${FORGE_PEER:-../shared/peer/llama.cpp-d32676d.tar.gz}
[ -f "$PEER" ] && run pretokenizer $PY tests/check_pretokenizer.py --forge $B/forge --fixtures "${FORGE_FIXTURES:-../shared/fixtures}" --peer "$PEER"
# forge serve with the openai client and curl (needs a forge built with libmicrohttpd and cJSON)
run serve       $PY tests/check_serve.py --forge $B/forge --model "${FORGE_SMOLLM2:-$HOME/.cache/forge/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}" \
  --big "${FORGE_QWEN25CODER:-$HOME/.cache/forge/qwen25coder/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf}"
run extract     $PY tests/check_extract.py --forge $B/forge --fixtures "${FORGE_FIXTURES:-../shared/fixtures}"
run python      env BUILD=$B PYTHON=$PY FORGE_FIXTURES="${FORGE_FIXTURES:-../shared/fixtures}" sh tests/check_python.sh
[ -n "$broken" ] && echo "suites with failures:$broken"
echo "all suites: $(( $(now) - start_all )) s"
echo "$total_passed passed, $total_failed failed"
[ "$total_failed" -eq 0 ]

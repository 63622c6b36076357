#!/bin/sh
# forge.h must build warning-free as C99 (gcc, clang) and as C++ (g++, clang++), with and without
# FORGE_STATIC, and without stdio, mmap or threads. Prints "N passed, N failed" last.
cd "$(dirname "$0")/.." || exit 1
out=${BUILD:-build}/build_check
mkdir -p "$(dirname "$out")"
passed=0; failed=0
for compiler in "gcc -std=c99 -pedantic" "clang -std=c99 -pedantic" "g++ -x c++ -std=c++11" "clang++ -x c++ -std=c++11"; do
  cc=${compiler%% *}
  if ! command -v "$cc" >/dev/null 2>&1; then
    echo "FAIL $cc is not installed"; failed=$((failed + 1)); continue
  fi
  for options in "" "-DFORGE_STATIC" "-DFORGE_NO_MMAP" "-DFORGE_NO_STDIO" "-DFORGE_STATIC -DFORGE_NO_STDIO" "-DFORGE_NO_THREADS"; do
    for opt in -O0 -O2; do
      if $compiler -Wall -Wextra -Werror $opt $options tests/build_check.c -o "$out" -lm -pthread && "$out"; then
        passed=$((passed + 1))
      else
        echo "FAIL: $compiler $opt $options"; failed=$((failed + 1))
      fi
    done
  done
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

#!/bin/sh
# Every ```c block of README.md, compiled as C99 and as C++ with warnings as errors. Each block is a
# whole translation unit (it includes what it uses); the one that defines FORGE_IMPLEMENTATION is
# also linked and run without arguments (it prints its usage and exits 2).
cd "$(dirname "$0")/.." || exit 1
CC=${CC:-cc}
CXX=${CXX:-c++}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
awk -v dir="$dir" '
  /^```c$/ { n++; file = sprintf("%s/snippet%02d.c", dir, n); inside = 1; next }
  /^```/ && inside { inside = 0; close(file); next }
  inside { print > file }
' README.md
passed=0; failed=0
for f in "$dir"/snippet*.c; do
  [ -e "$f" ] || { echo "FAIL no C snippet found in README.md"; failed=$((failed + 1)); break; }
  name=$(basename "$f" .c)
  first=$(grep -m1 -v '^\s*$' "$f")
  if $CC -std=c99 -Wall -Wextra -Werror -pedantic -I. -c "$f" -o "$dir/$name.o" 2>"$dir/$name.c.log"; then
    echo "ok $name as C99 ($first)"; passed=$((passed + 1))
  else
    echo "FAIL $name as C99 ($first)"; cat "$dir/$name.c.log"; failed=$((failed + 1))
  fi
  cp "$f" "$dir/$name.cpp"
  if $CXX -Wall -Wextra -Werror -I. -c "$dir/$name.cpp" -o "$dir/$name.cpp.o" 2>"$dir/$name.cpp.log"; then
    echo "ok $name as C++"; passed=$((passed + 1))
  else
    echo "FAIL $name as C++"; cat "$dir/$name.cpp.log"; failed=$((failed + 1))
  fi
  if grep -q '^#define FORGE_IMPLEMENTATION' "$f"; then
    if $CC -std=c99 -O1 -I. "$f" -o "$dir/$name" -lm -pthread 2>"$dir/$name.link.log"; then
      "$dir/$name" >/dev/null 2>&1
      status=$?
      if [ "$status" -eq 2 ]; then echo "ok $name links and runs (usage, exit 2)"; passed=$((passed + 1))
      else echo "FAIL $name without arguments exited $status, 2 expected"; failed=$((failed + 1)); fi
    else
      echo "FAIL $name does not link"; cat "$dir/$name.link.log"; failed=$((failed + 1))
    fi
  fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

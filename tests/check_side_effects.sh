#!/bin/sh
# What a host program may rely on, checked in the source where no run can show it (the GPU glue is
# not run on a machine without a GPU): each call that reads the environment, changes the current
# device, ends the process or prints sits only where it is allowed. Prints "N passed, N failed" last.
cd "$(dirname "$0")/.." || exit 1
passed=0; failed=0
# prints "file:line function" for every line of FILE matching PATTERN outside comments, naming the
# function (the last line at column 0 that opens one) it sits in
where() {
  awk -v pat="$2" -v file="$1" '
    /^[A-Za-z].*[(]/ && !/;[ \t]*$/ { fn = $0; sub(/[(].*/, "", fn); n = split(fn, w, /[ *]+/); fn = w[n] }
    { line = $0; sub(/\/\/.*/, "", line); sub(/\/\*.*\*\//, "", line) }
    line ~ pat && line !~ /^[ \t]*\*/ && line !~ /^[ \t]*\/\*/ { print file ":" NR " " fn }
  ' "$1"
}
check() { # name, allowed function names (space separated), hits
  name=$1; allowed=$2; hits=$3; bad=""
  for fn in $(echo "$hits" | awk '{print $2}'); do
    case " $allowed " in *" $fn "*) ;; *) bad="$bad $fn";; esac
  done
  if [ -z "$bad" ]; then echo "ok $name (only in:$(echo "$hits" | awk '{print " " $2}' | sort -u | tr -d '\n'))"; passed=$((passed + 1))
  else echo "FAIL $name in:$bad"; echo "$hits"; failed=$((failed + 1)); fi
}
check "forge.h reads the environment only in forge_context_desc_apply_env" "forge__env_on forge_context_desc_apply_env" \
  "$(where forge.h 'getenv[ ]*[(]')"
check "forge_kernels.hip reads no environment variable" "" "$(where forge_kernels.hip 'getenv[ ]*[(]')"
# forge_hip_set_device moves a split context between its devices; forge.h calls it only inside a scope
# that forge_hip_enter opened (the public calls, create and destroy), whose leave puts the caller's back
check "forge_kernels.hip changes the current device only in forge_hip_enter, forge_hip_leave and forge_hip_set_device" \
  "forge_hip_enter forge_hip_leave forge_hip_set_device" \
  "$(where forge_kernels.hip '(hip|cuda)SetDevice[ ]*[(]')"
check "forge.h never exits, aborts or prints to a stream" "" \
  "$(sed -n '/^#ifdef FORGE_IMPLEMENTATION/,$p' forge.h > /tmp/forge_impl_$$.h; where /tmp/forge_impl_$$.h '(^|[^a-z_])(exit|abort|_Exit|quick_exit|printf|puts|fputs|perror)[ ]*[(]|fprintf[ ]*[(]|[^a-z_]assert[ ]*[(]'; rm -f /tmp/forge_impl_$$.h)"
check "forge_kernels.hip never exits, aborts or prints" "" \
  "$(where forge_kernels.hip '(^|[^a-z_])(exit|abort|printf|puts|perror)[ ]*[(]|fprintf[ ]*[(]')"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

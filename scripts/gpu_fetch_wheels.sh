#!/usr/bin/env bash
# Download the wheels of scripts/gpu_wheels.txt for the GPU machine (CPython 3.12, manylinux x86_64) into
# .gpu_wheels/ (git-ignored), split into two parts that each fit one command's carry limit (64 MiB):
#   .gpu_wheels/a  pyarrow and the small pure-Python wheels
#   .gpu_wheels/b  the other compiled wheels, plus data/: the smallest English ZIM archive of the shared data
#                  (the generation phase's local web) and DejaVu Sans (V-Fold's font, from matplotlib)
# Run it where PyPI is reachable:  bash scripts/gpu_fetch_wheels.sh   (docs/gpu.md: how to carry and install)
#   --check  also prove with pip's resolver that the list installs beside the image's torch 2.11, transformers
#            5.17, peft and accelerate (torch is an installed stand-in: its CUDA dependencies are the image's)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
LIMIT=$((64 * 1024 * 1024))
OUT=.gpu_wheels
rm -rf "$OUT"
mkdir -p "$OUT/all" "$OUT/a" "$OUT/b/data"
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_28_x86_64 -d "$OUT/all" -r scripts/gpu_wheels.txt
for w in "$OUT"/all/*.whl; do
  size=$(stat -c %s "$w")
  if [[ $(basename "$w") == pyarrow-* || $size -lt $((1024 * 1024)) ]]; then mv "$w" "$OUT/a/"; else mv "$w" "$OUT/b/"; fi
done
rmdir "$OUT/all"
# the local web: the ZIM archive the generation phase searches (MMSEARCH_KIT_DATA or ../shared/data)
DATA=$("$PY" -c "from kit.paths import shared_data_dir; d = shared_data_dir(); print(d or '')")
ZIM="$DATA/zim/wikipedia_en_ray_charles_2015-06.zim"
if [[ -n "$DATA" && -f "$ZIM" ]]; then cp "$ZIM" "$OUT/b/data/"; else echo "warning: $ZIM not found: pass --zim on the GPU machine" >&2; fi
FONT=$("$PY" -c "from kit.vfold.fonts import primary_font_path; print(primary_font_path())")
cp "$FONT" "$OUT/b/data/DejaVuSans.ttf"
n=$(grep -cvE '^\s*(#|$)' scripts/gpu_wheels.txt)
got=$(ls "$OUT"/a/*.whl "$OUT"/b/*.whl | wc -l)
[[ $got -eq $n ]] || { echo "expected $n wheels, got $got" >&2; exit 1; }
for part in a b; do
  bytes=$(du -sb "$OUT/$part" | cut -f1)
  printf '%s/%s: %s wheels, %.1f MiB\n' "$OUT" "$part" "$(ls "$OUT/$part"/*.whl | wc -l)" "$(echo "$bytes / 1048576" | bc -l)"
  (( bytes <= LIMIT )) || { echo "$OUT/$part is over the 64 MiB carry limit" >&2; exit 1; }
done
if [[ ${1:-} == --check ]]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  "$PY" - "$tmp" <<'PYEOF'
import sys, zipfile
d = "torch-2.11.0.dist-info/"
with zipfile.ZipFile(f"{sys.argv[1]}/torch-2.11.0-py3-none-any.whl", "w") as z:
    z.writestr(d + "METADATA", "Metadata-Version: 2.1\nName: torch\nVersion: 2.11.0\n")
    z.writestr(d + "WHEEL", "Wheel-Version: 1.0\nGenerator: gpu_fetch_wheels\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    z.writestr(d + "RECORD", "")
PYEOF
  grep -v '^dashscope' scripts/gpu_wheels.txt > "$tmp/list.txt"  # installed without dependencies
  "$PY" -m pip install -q --dry-run --ignore-installed --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_28_x86_64 --target "$tmp/t" --report "$tmp/report.json" -r "$tmp/list.txt" \
    "torch @ file://$tmp/torch-2.11.0-py3-none-any.whl" "transformers==5.17.*" peft accelerate
  "$PY" - "$tmp/report.json" scripts/gpu_wheels.txt <<'PYEOF'
import json, re, sys
got = {i["metadata"]["name"].lower().replace("_", "-"): i["metadata"]["version"] for i in json.load(open(sys.argv[1]))["install"]}
want = dict(re.match(r"([\w.-]+)==(\S+)", ln).groups() for ln in open(sys.argv[2]) if re.match(r"[\w.-]+==", ln))
bad = {k: (v, got.get(k.lower())) for k, v in want.items() if k != "dashscope" and got.get(k.lower()) != v}
assert not bad, f"resolved versions differ from the list: {bad}"
assert got["torch"] == "2.11.0" and got["transformers"].startswith("5.17."), got
print(f"resolver: {len(want) - 1} listed wheels resolve beside torch {got['torch']}, transformers {got['transformers']}, "
      f"peft {got['peft']}, accelerate {got['accelerate']} (cp312 manylinux)")
PYEOF
fi

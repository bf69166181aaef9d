#!/usr/bin/env bash
# Build the device parcels for real SGLang 0.5.17, which pins the same torch (2.11.0) as the H200 image: the
# recipe of ../shared/tools/sglang-h200/build_bundle.sh (0.5.16) with 0.5.17's own pins, read from its wheel's
# METADATA (the only changes: flashinfer_python 0.6.14 -> 0.6.15.post1, sgl-deep-gemm 0.1.4.post1 -> 0.1.5.post1,
# and the new xxhash). 0.5.18 and newer pin torch 2.13+ and cannot run on the image.
#   usage: scripts/build-sglang-0517-parcels.sh OUTDIR      (then as ../shared/tools/sglang-h200/README.md says)
# Not run here (no GPU; the lead builds and carries the parcels).
set -euo pipefail
OUT=$1
TOOLS=$(cd "$(dirname "$0")/../../shared/tools/sglang-h200" 2>/dev/null && pwd || echo /work/shared/tools/sglang-h200)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cp "$TOOLS"/build_bundle.sh "$TOOLS"/unpack.sh "$TOOLS"/serve.sh "$TOOLS"/make_tiny_models.py "$WORK/"
chmod u+w "$WORK"/build_bundle.sh
sed -i -e 's/sglang==0\.5\.16/sglang==0.5.17/' \
       -e 's/flashinfer-python==0\.6\.14/flashinfer-python==0.6.15.post1/' \
       -e 's/sgl-deep-gemm==0\.1\.4\.post1/sgl-deep-gemm==0.1.5.post1/' \
       -e 's/cachetools cffi pycparser/cachetools cffi pycparser xxhash/' "$WORK"/build_bundle.sh
grep -q "sglang==0.5.17" "$WORK"/build_bundle.sh && grep -q "0.6.15.post1" "$WORK"/build_bundle.sh \
  && grep -q "0.1.5.post1" "$WORK"/build_bundle.sh && grep -q xxhash "$WORK"/build_bundle.sh
bash "$WORK"/build_bundle.sh "$OUT"

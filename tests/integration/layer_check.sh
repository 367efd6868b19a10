#!/usr/bin/env bash
# The build's layer check (cmake/check_layers.cmake): the real tree passes; a copy of it with one
# include reaching up (memory → ops, and a private header of autograd from ops) fails and names the
# file, the header and both layers; a public header without its layer line is named too.
# Usage: layer_check.sh CMAKE SOURCE_DIR LAYERS
set -euo pipefail
cmake_bin=$1 src=$2 layers=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

check() { "$cmake_bin" -DSOURCE_DIR="$1" "-DLAYERS=$layers" -P "$src/cmake/check_layers.cmake" 2>&1; }

check "$src" >"$tmp/real.log" || { echo "FAIL: the real tree does not pass:"; cat "$tmp/real.log"; exit 1; }
echo "the real tree passes"

mkdir "$tmp/tree"
cp -r "$src/include" "$src/src" "$tmp/tree/"
printf '#include "loom/ops.h"\n' >>"$tmp/tree/src/memory/allocator.cpp"
printf '#include "autograd/autograd_meta.h"\n' >>"$tmp/tree/src/ops/copy.cpp"
printf '// no layer named here\n#pragma once\n' >"$tmp/tree/include/loom/unlabelled.h"
if check "$tmp/tree" >"$tmp/bad.log"; then
  echo "FAIL: the check passed a tree whose memory layer includes loom/ops.h"; exit 1
fi
grep -q 'src/memory/allocator.cpp: includes "loom/ops.h" (layer ops), which is above layer memory' "$tmp/bad.log" ||
  { echo "FAIL: memory → ops not named:"; cat "$tmp/bad.log"; exit 1; }
grep -q 'src/ops/copy.cpp: includes "autograd/autograd_meta.h" (layer autograd), which is above layer ops' "$tmp/bad.log" ||
  { echo "FAIL: ops → autograd's private header not named:"; cat "$tmp/bad.log"; exit 1; }
grep -q 'include/loom/unlabelled.h: its opening lines do not name its layer' "$tmp/bad.log" ||
  { echo "FAIL: a header without its layer line not named:"; cat "$tmp/bad.log"; exit 1; }
echo "a tree that reaches up fails, naming each file, header and layer"

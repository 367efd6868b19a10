#!/usr/bin/env bash
# README.md's settings table is the config registry's list: every LOOM_* setting `loom info` knows
# (declared by the layers when libloom loads) has a row in the Configuration section, and every row
# there is a declared setting. No code reads a LOOM_* variable around the registry (getenv). And the
# docs name the sgemm micro-kernel shape that `loom info` reports.
# usage: settings_docs.sh LOOM_BINARY SOURCE_DIR
set -uo pipefail
loom=$1
src=$2
registered=$("$loom" info --settings-markdown | grep -oE '^\| `LOOM_[A-Z0-9_]+`' | tr -d '|` ' | sort -u)
[[ -n $registered ]] || { echo "FAIL: loom info --settings-markdown listed no settings"; exit 1; }
documented=$(sed -n '/^## Configuration/,/^## /p' "$src/README.md" | grep -oE '^\| `LOOM_[A-Z0-9_]+`' \
             | tr -d '|` ' | sort -u)
bad=0
missing=$(comm -23 <(echo "$registered") <(echo "$documented"))
extra=$(comm -13 <(echo "$registered") <(echo "$documented"))
[[ -z $missing ]] || { echo "FAIL: settings missing from README.md's Configuration table:"; echo "$missing"; bad=1; }
[[ -z $extra ]] || { echo "FAIL: README.md documents settings loom does not declare:"; echo "$extra"; bad=1; }
# One exception: the anchor programs (bench/anchors/), which do not link libloom, read the sweep's
# test hook LOOM_BENCH_TEST_FAULT (Note [sweep test hook]) with getenv; loom's driver declares it.
bare=$(cd "$src" && grep -rnE 'getenv\("LOOM_' src tools bench include | grep -v '^bench/anchors/[a-z_]*\.cpp:.*"LOOM_BENCH_TEST_FAULT"')
[[ -z $bare ]] || { echo "FAIL: LOOM_* read with getenv instead of a config::Setting:"; echo "$bare"; bad=1; }
# The docs name the micro-kernel shape the code uses (`loom info` prints it from gemm_kernel.h's
# constants, on any CPU).
shape=$("$loom" info | grep 'f32 matrix products' | grep -oE '[0-9]+x[0-9]+' | head -1)
[[ -n $shape ]] || { echo "FAIL: loom info names no sgemm tile shape"; bad=1; }
while IFS= read -r hit; do
  doc_shape=$(grep -oE '[0-9]+ ?x ?[0-9]+ micro-kernel' <<< "$hit" | grep -oE '[0-9]+ ?x ?[0-9]+' | tr -d ' ')
  [[ $doc_shape == "$shape" ]] || { echo "FAIL: a doc names a $doc_shape micro-kernel, loom runs $shape: $hit"; bad=1; }
done < <(cd "$src" && grep -rnoE '[0-9]+ ?x ?[0-9]+ micro-kernel' README.md docs src/ops)
echo "$(echo "$registered" | wc -l) settings registered, $(echo "$documented" | wc -l) documented"
[[ $bad == 0 ]] && echo "README.md's settings table matches the registry"
exit $bad

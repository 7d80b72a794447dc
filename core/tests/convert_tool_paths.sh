#!/usr/bin/env bash
# nnp-convert's output is always a path, and only a regular file is ever replaced.
#   convert_tool_paths.sh NNP_CONVERT MODEL.nnpm SCRATCH_FOLDER
set -u
convert="$1" model="$2" work="$3"
rm -rf "$work" && mkdir -p "$work/elsewhere" && cd "$work" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
# A plain output name is ./name; verifying it never looks the name up (here another model of that
# name is on NNP_MODEL_PATH, and none is anywhere for the second name).
cp "$model" elsewhere/ani1x.nnpm && printf 'x' >> elsewhere/ani1x.nnpm
NNP_MODEL_PATH="$work/elsewhere" "$convert" "$model" ani1x > out.txt 2>&1 || { cat out.txt; fail "plain output name"; }
grep -q "wrote ./ani1x (verified" out.txt || { cat out.txt; fail "did not verify ./ani1x"; }
cmp -s ani1x "$model" || fail "./ani1x differs from the source"
"$convert" "$model" plainout > out.txt 2>&1 || { cat out.txt; fail "plain output name without a model of that name"; }
# Outputs that are not regular files are refused and left as they were.
ln -s /dev/null link
mkfifo fifo
mkdir folder
for target in link fifo folder; do
  if "$convert" "$model" "$target" > out.txt 2>&1; then fail "$target was replaced"; fi
  grep -q "is not a regular file" out.txt || { cat out.txt; fail "no clear message for $target"; }
done
[ -L link ] && [ -p fifo ] && [ -d folder ] || fail "a refused output was changed"
echo "convert_tool_paths: all checks passed"

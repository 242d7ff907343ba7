#!/bin/sh
# Every C++ and CUDA source of the tree is formatted as .clang-format says. Pinned to clang-format 14
# (Debian 12's, installed by ./run): another major version formats some constructs differently.
# usage: clang_format.sh CLANG_FORMAT SOURCE_ROOT
set -eu
cf=$1
cd "$2"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  files=$(git ls-files '*.cpp' '*.hpp' '*.h' '*.cu' '*.cuh')
else
  files=$(find lib kernels tools tests python examples \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' \
          -o -name '*.cu' -o -name '*.cuh' \) -print | sort)
fi
n=$(echo "$files" | wc -l)
# One call for all files; its diagnostics ("FILE:LINE:COL: error: code should be clang-formatted") name them.
rc=0
out=$("$cf" --dry-run --Werror $files 2>&1) || rc=$?
bad_files=$(printf '%s\n' "$out" | sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' | sort -u)
bad=0
for f in $bad_files; do
  echo "not formatted: $f (fix: $cf -i $f)"
  bad=$((bad + 1))
done
echo "clang-format: $n files checked, $bad not formatted"
if [ "$rc" -ne 0 ] && [ "$bad" -eq 0 ]; then
  printf '%s\n' "$out" | tail -5
  echo "clang-format failed (exit $rc) without naming an unformatted file"
  exit 1
fi
[ "$bad" -eq 0 ]

#!/usr/bin/env bash
# Builds the libFuzzer targets (one per parser: npy, npz, safetensors, the training checkpoint, the
# --scaler-state JSON, the `verify --against` recordings) with clang++
# -fsanitize=fuzzer,address,undefined into OUT_DIR, replays the committed corpus through each, then
# fuzzes each for a bounded time. Exit 0: no crash, no sanitizer report; 1: a finding (the reproducer
# is left in OUT_DIR/<target>-crash-*); 77: clang++ or its libFuzzer runtime is missing (meson: SKIP).
#   tests/fuzz/run_fuzz.sh OUT_DIR [SECONDS_PER_TARGET]   (default: $MPSIM_FUZZ_SECONDS or 20)
# With MPSIM_FUZZ_KEEP_CORPUS=1 (./run test-full) the inputs that found new coverage are merged (libFuzzer
# -set_cover_merge=1: a small set of inputs covering what the new ones reached) into the committed corpus tests/fuzz/corpus/<target>,
# to be committed: the next run starts where this one stopped.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${1:?usage: run_fuzz.sh OUT_DIR [SECONDS_PER_TARGET]}
SECONDS_PER_TARGET=${2:-${MPSIM_FUZZ_SECONDS:-20}}
CXX=${FUZZ_CXX:-$(command -v clang++ || command -v clang++-14 || true)}
if [ -z "$CXX" ]; then
  echo "run_fuzz.sh: SKIP: clang++ not found (Debian packages clang, libclang-rt-14-dev)"
  exit 77
fi
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
if ! echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' |
    "$CXX" -x c++ -fsanitize=fuzzer - -o "$OUT/probe" 2>/dev/null; then
  echo "run_fuzz.sh: SKIP: $CXX cannot link libFuzzer (Debian package libclang-rt-14-dev)"
  exit 77
fi

FLAGS=(-std=c++20 -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
       -I"$ROOT/lib" -I"$HERE")
# The io layer (the parsers) is instrumented; the format layer (decode_array) is plain code compiled
# by g++ like the main build (its bulk engine uses GCC-only cpu feature names). Under meson it is the
# main build's own library ($MPSIM_FORMAT_LIB, tests/fuzz/meson.build); run by hand, this script
# compiles it with the instruction-set flags meson gives the vector kernels (lib/mpsim/format/meson.build).
PLAIN_CXX=${FUZZ_PLAIN_CXX:-g++}
OBJ="$OUT/obj"
mkdir -p "$OBJ"
objs=()
pids=()
JOBS=$(nproc 2>/dev/null || echo 2)
compile() {  # compiler source [extra flags...]; runs in the background, at most $JOBS at once
  local cc=$1 src=$2; shift 2
  local o="$OBJ/$(echo "${src#$ROOT/}" | tr '/' '_').o"
  if [ ! -f "$o" ] || [ "$src" -nt "$o" ]; then
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do sleep 0.2; done
    "$cc" "$@" -c "$src" -o "$o" &
    pids+=($!)
  fi
  objs+=("$o")
}
for src in "$ROOT"/lib/mpsim/io/*.cpp "$ROOT"/lib/mpsim/train/checkpoint.cpp "$ROOT"/lib/mpsim/train/scaler.cpp \
           "$ROOT"/kernels/recording.cpp "$ROOT"/kernels/digest.cpp "$ROOT"/kernels/recompute.cpp; do
  compile "$CXX" "$src" "${FLAGS[@]}" -I"$ROOT/kernels" -fsanitize=fuzzer-no-link
done
# No -g here: a finding's stack trace needs it in the parsers, not in the format layer (and -g is about a
# third of the compile time).
PLAIN=(-std=c++20 -O2 -I"$ROOT/lib")
if [ -n "${MPSIM_FORMAT_LIB:-}" ]; then
  objs+=("$MPSIM_FORMAT_LIB")  # the format layer takes a minute to compile twice on two cores
else
  for src in "$ROOT"/lib/mpsim/format/*.cpp; do
    case "$src" in
      *avx512*) compile "$PLAIN_CXX" "$src" "${PLAIN[@]}" -mavx512f -mavx512bw -mavx512vl -mavx512dq -Wno-uninitialized ;;
      *avx2*) compile "$PLAIN_CXX" "$src" "${PLAIN[@]}" -mavx2 -mfma -mf16c ;;
      *) compile "$PLAIN_CXX" "$src" "${PLAIN[@]}" ;;
    esac
  done
fi

for pid in "${pids[@]}"; do
  wait "$pid" || { echo "run_fuzz.sh: a compile failed"; exit 1; }
done

status=0
for target in npy npz safetensors checkpoint scaler_state recording; do
  exe="$OUT/fuzz_$target"
  echo "== fuzz_$target: build"
  "$CXX" "${FLAGS[@]}" -I"$ROOT/kernels" -fsanitize=fuzzer "$HERE/fuzz_$target.cpp" "${objs[@]}" -lfmt -lz -pthread -o "$exe"
  seeds="$HERE/corpus/$target"
  work="$OUT/corpus_$target"
  mkdir -p "$work"
  echo "== fuzz_$target: replay $(ls "$seeds" | wc -l) committed inputs"
  if ! (cd "$OUT" && "$exe" -runs=0 -artifact_prefix="$OUT/$target-" "$seeds" >"$OUT/$target-replay.log" 2>&1); then
    tail -40 "$OUT/$target-replay.log"
    echo "== fuzz_$target: FAILED on the committed corpus"
    status=1
    continue
  fi
  echo "== fuzz_$target: fuzz for ${SECONDS_PER_TARGET}s"
  if ! (cd "$OUT" && "$exe" -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
          -print_final_stats=1 -artifact_prefix="$OUT/$target-" "$work" "$seeds" >"$OUT/$target-fuzz.log" 2>&1); then
    tail -60 "$OUT/$target-fuzz.log"
    echo "== fuzz_$target: FAILED (reproducer: $(ls "$OUT"/"$target"-crash-* "$OUT"/"$target"-leak-* "$OUT"/"$target"-timeout-* "$OUT"/"$target"-oom-* 2>/dev/null | head -1))"
    status=1
    continue
  fi
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$OUT/$target-fuzz.log" | sed "s/^/   fuzz_$target: /"
  if [ "${MPSIM_FUZZ_KEEP_CORPUS:-0}" = 1 ]; then
    before=$(ls "$seeds" | wc -l)
    (cd "$OUT" && "$exe" -set_cover_merge=1 -use_counters=0 -max_len=8192 "$seeds" "$work" >"$OUT/$target-merge.log" 2>&1) ||
      { tail -20 "$OUT/$target-merge.log"; status=1; }
    echo "   fuzz_$target: corpus $before -> $(ls "$seeds" | wc -l) inputs ($(du -sk "$seeds" | cut -f1) KiB) in $seeds"
  fi
  echo "== fuzz_$target: ok"
done
exit $status

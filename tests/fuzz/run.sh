#!/usr/bin/env bash
# Builds the libFuzzer harnesses (clang, -DKV_FUZZ=ON, ASan+UBSan) in build dir $1 and runs
# each for FUZZ_TIME seconds (default 25) from its committed corpus tests/fuzz/corpus/<name>/
# (read only: new inputs go to $1/fuzz-work/<name>/corpus). Any crash, sanitizer report, leak,
# timeout (-timeout=20 s per input) or RSS over 2 GiB stops that harness with a nonzero exit
# and fails the script; the reproducer is left in $1/fuzz-work/<name>/.
# Usage: tests/fuzz/run.sh <build dir> [harness...]   (FUZZ_TIME, JOBS from the environment)
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
build=${1:?usage: tests/fuzz/run.sh <build dir> [harness...]}
shift
FUZZ_TIME=${FUZZ_TIME:-25}
JOBS=${JOBS:-$(nproc)}
targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
  targets=(fuzz_grpc_frame fuzz_h2_server fuzz_request fuzz_lease fuzz_raft_msg fuzz_lmdb_pages fuzz_bbolt)
fi
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

echo "==== configure $build (clang, KV_FUZZ=ON, ASan+UBSan)"
CC=clang cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKV_FUZZ=ON \
  -DKV_SANITIZE=address,undefined >/dev/null
echo "==== build $build: ${targets[*]}"
cmake --build "$build" -j"$JOBS" --target "${targets[@]}"

# One harness: its output goes to its work dir's fuzz.log (printed when it ends).
fuzz_one() {
  local t=$1 work=$root/$build/fuzz-work/$1
  local args=(-max_total_time="$FUZZ_TIME" -rss_limit_mb=2048 -timeout=20 -max_len=8192
              -print_final_stats=1 -artifact_prefix="$work/")
  if [ -f "$root/tests/fuzz/$t.dict" ]; then
    args+=(-dict="$root/tests/fuzz/$t.dict")
  fi
  (cd "$work" && "$root/$build/tests/fuzz/$t" "${args[@]}" corpus "$root/tests/fuzz/corpus/$t") \
    >"$work/fuzz.log" 2>&1
}

# JOBS harnesses at a time (libFuzzer runs one thread each): the same FUZZ_TIME per harness
# in a fraction of the wall time.
failed=()
pids=()
names=()
wait_one() {
  local i=$1
  local log=$root/$build/fuzz-work/${names[$i]}/fuzz.log
  if wait "${pids[$i]}"; then
    echo "==== fuzz ${names[$i]} (${FUZZ_TIME}s): passed; the end of its log:"
    tail -n 20 "$log"
  else
    failed+=("${names[$i]}")
    echo "==== fuzz ${names[$i]} (${FUZZ_TIME}s): FAILED; its log:"
    cat "$log"
  fi
}
for t in "${targets[@]}"; do
  work=$root/$build/fuzz-work/$t
  rm -rf "$work"
  mkdir -p "$work/corpus"
  if [ "${#pids[@]}" -ge "$JOBS" ]; then
    wait_one 0
    pids=("${pids[@]:1}")
    names=("${names[@]:1}")
  fi
  fuzz_one "$t" &
  pids+=($!)
  names+=("$t")
done
for i in "${!pids[@]}"; do wait_one "$i"; done
if [ "${#failed[@]}" -ne 0 ]; then
  echo "==== fuzzing FAILED: ${failed[*]} (reproducers in $build/fuzz-work/<name>/)"
  exit 1
fi
echo "==== fuzzing passed"

#!/usr/bin/env bash
# `make fuzz` (scripts/fuzz.sh BUILD FUZZ_BUILD): the long fuzzing runs, on demand, not part
# of `make test`.
#  1. The parser targets (fuzz/targets/) under libFuzzer + ASan + UBSan, built with Debian's
#     clang 14 in their own build directory (fuzz/CMakeLists.txt), FUZZ_RUNS executions each
#     (default 1000000), one target at a time. Each starts from its seed corpus
#     (fuzz/corpus/<target>/, read only) and keeps what it learns in $FUZZ_BUILD/corpus/<target>;
#     a finding stops the run and leaves crash-*/timeout-*/oom-* in $FUZZ_BUILD/artifacts.
#  2. The differential fuzzer: `ampfuse fuzz` over FUZZ_GRAPHS random graphs (default
#     1000000) from seed FUZZ_SEED (default 2001, past CI's fixed seeds 1-2000), split into
#     FUZZ_JOBS jobs over consecutive seed ranges (default: one per core; a graph's
#     compile is single-threaded, so two processes on two cores run 1.6x as many graphs),
#     each a sequence of processes of at most FUZZ_GRAPHS_PER_PROCESS graphs (default
#     10000; see run_job).
#  3. The same for FUZZ_ROW_GRAPHS row graphs (default 100000; `ampfuse fuzz --rows`: each
#     exact graph with a row op appended, whose row kernel is checked; about a third of
#     the seeds give none and are skipped).
# FUZZ_TARGETS picks targets (default all four; empty skips step 1 and its build);
# FUZZ_GRAPHS=0 / FUZZ_ROW_GRAPHS=0 skip steps 2 / 3.
set -euo pipefail

# Arguments: the main build directory (with the ampfuse program) and the libFuzzer one.
BUILD=$1
FUZZ_BUILD=$2
FUZZ_RUNS=${FUZZ_RUNS:-1000000}
FUZZ_GRAPHS=${FUZZ_GRAPHS:-1000000}
FUZZ_ROW_GRAPHS=${FUZZ_ROW_GRAPHS:-100000}
FUZZ_SEED=${FUZZ_SEED:-2001}
FUZZ_JOBS=${FUZZ_JOBS:-$(nproc)}
FUZZ_GRAPHS_PER_PROCESS=${FUZZ_GRAPHS_PER_PROCESS:-10000}
if ! [[ "$FUZZ_GRAPHS_PER_PROCESS" =~ ^[1-9][0-9]*$ ]]; then
  echo "fuzz: FUZZ_GRAPHS_PER_PROCESS=$FUZZ_GRAPHS_PER_PROCESS: must be a whole number of at least 1" >&2
  exit 2
fi
FUZZ_TARGETS=${FUZZ_TARGETS-mxnet_json text_ir npy mxnet_params}

if [ -n "$FUZZ_TARGETS" ]; then
  # clang 14 and its libFuzzer runtime, installed here rather than by scripts/setup.sh: the
  # main build and `make test` use g++ and need neither.
  missing=()
  for p in clang-14 libclang-rt-14-dev; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "fuzz: installing ${missing[*]}"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi

  CXX=clang++-14 cmake -S fuzz -B "$FUZZ_BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$FUZZ_BUILD" -j "$(nproc)"

  mkdir -p "$FUZZ_BUILD/artifacts"
  for t in $FUZZ_TARGETS; do
    mkdir -p "$FUZZ_BUILD/corpus/$t"
    echo "fuzz: $t, $FUZZ_RUNS executions"
    # -max_len: room for the larger seeds (model JSON up to ~70 KB) without making every
    # mutation that big; -timeout: a parse taking over 10 s is a hang.
    log="$FUZZ_BUILD/$t.log"
    if ! "$FUZZ_BUILD/fuzz_$t" -runs="$FUZZ_RUNS" -max_len=80000 -timeout=10 -rss_limit_mb=4096 \
        -artifact_prefix="$FUZZ_BUILD/artifacts/$t-" -print_final_stats=1 \
        "$FUZZ_BUILD/corpus/$t" "fuzz/corpus/$t" >"$log" 2>&1; then
      tail -n 60 "$log"
      echo "fuzz: $t found something (input in $FUZZ_BUILD/artifacts/, log $log)"
      exit 1
    fi
    grep -E '^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' "$log"
  done
fi

# run_job FIRST COUNT LOG [FLAG]: `ampfuse fuzz [FLAG]` over COUNT seeds from FIRST, in
# processes of at most FUZZ_GRAPHS_PER_PROCESS graphs one after the other, appended to LOG;
# stops at the first that fails, so that a failure ends its job within minutes.
run_job() {
  local first=$1 count=$2 log=$3 flag=${4:-} n
  : >"$log"
  while [ "$count" -gt 0 ]; do
    n=$(( count < FUZZ_GRAPHS_PER_PROCESS ? count : FUZZ_GRAPHS_PER_PROCESS ))
    "./$BUILD/ampfuse" fuzz $flag --seed "$first" --count "$n" >>"$log" 2>&1 || return 1
    first=$(( first + n ))
    count=$(( count - n ))
  done
}

# run_graphs KIND COUNT [FLAG]: run_job over COUNT seeds from FUZZ_SEED. Job j takes the
# j-th of FUZZ_JOBS consecutive seed ranges, logged to its own file; fails if any job does,
# naming its log.
run_graphs() {
  local kind=$1 total=$2 flag=${3:-}
  [ "$total" -gt 0 ] || return 0
  echo "fuzz: $total $kind from seed $FUZZ_SEED in $FUZZ_JOBS jobs of processes of up to $FUZZ_GRAPHS_PER_PROCESS"
  mkdir -p "$FUZZ_BUILD"
  local share=$(( (total + FUZZ_JOBS - 1) / FUZZ_JOBS ))
  local pids=() logs=() failed=0 j first count i
  for (( j = 0; j < FUZZ_JOBS; j++ )); do
    first=$(( FUZZ_SEED + j * share ))
    count=$(( total - j * share < share ? total - j * share : share ))
    [ "$count" -gt 0 ] || break
    logs+=("$FUZZ_BUILD/${kind// /-}-$first.log")
    run_job "$first" "$count" "${logs[-1]}" $flag &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    if wait "${pids[$i]}"; then
      grep -E '^[0-9]+ (row )?graphs \(seeds' "${logs[$i]}"
    else
      tail -n 40 "${logs[$i]}"
      echo "fuzz: $kind failed (log ${logs[$i]})"
      failed=1
    fi
  done
  return "$failed"
}

failed=0
run_graphs "random graphs" "$FUZZ_GRAPHS" || failed=1
run_graphs "row graphs" "$FUZZ_ROW_GRAPHS" --rows || failed=1
exit "$failed"

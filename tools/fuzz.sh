#!/usr/bin/env bash
# Builds kiln's libFuzzer targets (build/fuzz: clang, ASan + UBSan + fuzzer instrumentation, CPU only)
# and runs each for a fixed time, starting from a scratch copy of its seed corpus in fuzz/corpus/.
#
#   tools/fuzz.sh [--seconds N] [--jobs N] [--update-corpus] [--no-build] [target...]
#
# Targets are the names in fuzz/CMakeLists.txt (safetensors, checkpoint, idx, ...); default: all.
# --seconds N      run time per target (default: $KILN_FUZZ_SECONDS, else 60); CI runs the default.
# --jobs N         targets run side by side, one core each (default: $KILN_FUZZ_JOBS, else nproc).
# --update-corpus  merge the inputs that add coverage back into fuzz/corpus/<target>/ (otherwise the
#                  repository's corpus is only read).
# --no-build       use build/fuzz as it is.
# Prints the executions reached per target. Exits nonzero when any target finds a crash, a sanitizer
# report, a leak, a timeout or an oversized allocation; the reproducer's path is printed (it lies in
# build/fuzz/fuzz-artifacts/<target>/; rerun it with `build/fuzz/bin/fuzz_<target> <file>`).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KILN_FUZZ_BUILD_DIR:-$root/build/fuzz}
seconds=${KILN_FUZZ_SECONDS:-60}
jobs=${KILN_FUZZ_JOBS:-$(nproc)}
update=0
do_build=1
wanted=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --seconds=*) seconds=${1#*=}; shift ;;
    --jobs) jobs=$2; shift 2 ;;
    --jobs=*) jobs=${1#*=}; shift ;;
    --update-corpus) update=1; shift ;;
    --no-build) do_build=0; shift ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz: unknown option $1" >&2; exit 2 ;;
    *) wanted+=("$1"); shift ;;
  esac
done
case "$seconds" in ''|*[!0-9]*) echo "fuzz: --seconds needs a whole number, got '$seconds'" >&2; exit 2 ;; esac
case "$jobs" in ''|0|*[!0-9]*) echo "fuzz: --jobs needs a whole number above 0, got '$jobs'" >&2; exit 2 ;; esac

# Fatal on the first report, with stacks; leaks are findings too. The same settings as tools/sanitize.sh.
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1:print_stacktrace=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

if [ "$do_build" = 1 ]; then
  bash "$root/tools/setup.sh"
  # One tree for the fuzzers and the sanitized test suite (tools/sanitize.sh): same configuration.
  CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_CUDA=OFF \
    -DKILN_SANITIZE=ON -DKILN_FUZZ=ON -DKILN_BENCH_TOOLS=OFF >/dev/null
fi
list=$build/fuzz/targets.txt
[ -f "$list" ] || { echo "fuzz: $list is missing; configure $build with -DKILN_FUZZ=ON" >&2; exit 2; }
declare -A exe_of=()
all=()
while read -r name exe; do
  [ -n "$name" ] || continue
  exe_of[$name]=$exe
  all+=("$name")
done <"$list"
[ ${#wanted[@]} -gt 0 ] || wanted=("${all[@]}")
for t in "${wanted[@]}"; do
  [ -n "${exe_of[$t]:-}" ] || { echo "fuzz: no target '$t' (have: ${all[*]})" >&2; exit 2; }
done
if [ "$do_build" = 1 ]; then
  ninja_targets=()
  for t in "${wanted[@]}"; do ninja_targets+=("fuzz_$t"); done
  cmake --build "$build" --target "${ninja_targets[@]}"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Runs one target for $seconds on a scratch copy of its seeds; its exit status goes to $work/<t>.rc.
fuzz_one() {
  local t=$1 exe=${exe_of[$1]} seeds=$root/fuzz/corpus/$1 corpus=$work/$1 artifacts=$build/fuzz-artifacts/$1
  mkdir -p "$corpus" "$artifacts"
  # New inputs go into the scratch copy only: the repository's corpus changes with --update-corpus alone.
  [ -d "$seeds" ] && cp -r "$seeds/." "$corpus/"
  local args=(-max_total_time="$seconds" -print_final_stats=1 -timeout=30 -rss_limit_mb=2048 -malloc_limit_mb=256
              -artifact_prefix="$artifacts/")
  [ -f "$root/fuzz/$t.dict" ] && args+=(-dict="$root/fuzz/$t.dict")
  echo "fuzz: $t for ${seconds} s ($(find "$corpus" -type f | wc -l) seeds)"
  local rc=0
  "$exe" "${args[@]}" "$corpus" >"$work/$t.log" 2>&1 || rc=$?
  echo "$rc" >"$work/$t.rc"
}

# Each fuzzer is one process on one core: $jobs of them run side by side, so every target still gets
# its full $seconds of a core while the stage takes about targets / jobs times $seconds.
running=0
for t in "${wanted[@]}"; do
  if [ "$running" -ge "$jobs" ]; then wait -n || true; running=$((running - 1)); fi
  fuzz_one "$t" &
  running=$((running + 1))
done
wait

failed=()
summary=()
for t in "${wanted[@]}"; do
  exe=${exe_of[$t]}
  seeds=$root/fuzz/corpus/$t
  corpus=$work/$t
  log=$work/$t.log
  rc=$(cat "$work/$t.rc" 2>/dev/null || echo "no status")
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  if [ "$rc" != 0 ]; then
    # libFuzzer names the reproducer in "Test unit written to <path>"; show the report that led to it.
    tail -n 60 "$log"
    crash=$(sed -n 's/.*Test unit written to //p' "$log" | tail -1)
    echo "fuzz: $t FAILED (exit $rc) after ${runs:-?} executions; reproducer: ${crash:-none written}"
    failed+=("$t")
    summary+=("$t: FAILED after ${runs:-?} executions, reproducer ${crash:-none}")
  else
    echo "fuzz: $t ok, ${runs:-?} executions, corpus $(find "$corpus" -type f | wc -l) inputs"
    summary+=("$t: ok, ${runs:-?} executions in ${seconds} s")
    if [ "$update" = 1 ]; then
      # Merge keeps only the inputs that add coverage to what the repository's corpus already has.
      mkdir -p "$seeds"
      "$exe" -merge=1 -rss_limit_mb=2048 -malloc_limit_mb=256 "$seeds" "$corpus" >"$work/$t.merge.log" 2>&1 ||
        { tail -n 20 "$work/$t.merge.log"; echo "fuzz: merging into $seeds failed" >&2; failed+=("$t"); }
      echo "fuzz: $seeds now holds $(find "$seeds" -type f | wc -l) inputs"
    fi
  fi
done
echo "fuzz: summary"
printf '  %s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: findings in: ${failed[*]}" >&2
  exit 1
fi

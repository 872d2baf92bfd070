#!/usr/bin/env bash
# The CPU test suite under AddressSanitizer + UndefinedBehaviorSanitizer, in the clang tree that
# tools/fuzz.sh builds its fuzzers in (build/fuzz; the fuzzers' corpus-replay tests run here too).
#
#   tools/sanitize.sh [--trainings] [--no-build] [extra ctest arguments...]
#   tools/sanitize.sh --thread
#
# --trainings also run the example tests that train for real (example_train_*, the SIGKILL resume
#             tests, the training-record check). They are left out by default: they run 5 to 10 times
#             slower under ASan (over 20 minutes on 2 cores, the longest hitting their 600 s
#             timeouts), and the plain test run (tools/test.sh) covers them. The other example
#             tests (flags, the bad-run sweep, fit_function) run: they exercise the programs'
#             error paths under the sanitizers in well under a minute.
# --no-build  use build/fuzz as it is.
# --thread    instead: ThreadSanitizer (KILN_TSAN, in build/tsan) over the tests of kiln's threads: the
#             DataLoader's workers (with transforms and datasets inside them) and the CPU thread pool.
#             Not part of CI (a third instrumented build of the libraries); run it after changing them.
# Of the benchmark programs the tree builds bench_train_step only (-DKILN_BENCH_TOOLS=OFF: its smoke run
# trains every model through every precision and memory mode; bench/CMakeLists.txt says why the others
# are left to the plain run). Debug information is line tables only, enough for the reports' frames,
# and most of the tests' own code compiles at -O0 (tests/CMakeLists.txt says which and why).
# Any sanitizer report fails its test: UB does not recover and ASan halts (leak checking: see below).
# The "package" test is left out: it builds a consumer of the installed libraries with plain flags,
# which cannot link against sanitized libraries. "cuda" is left out because this tree has no CUDA.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KILN_FUZZ_BUILD_DIR:-$root/build/fuzz}
exclude="cuda|package"
trainings="^example_(train_|sigkill_|record_training)"
# The CUDA emulator's sweeps (kernels/simt, docs/simt.md) repeat, on more shapes, kernel
# instantiations that its other tests also launch here: shared memory's bounds depend on the
# instantiation, and the plain run (tools/test.sh) runs the sweeps with guard bands around every
# output. (Test names that end in ", a sweep" are such sweeps.)
sweeps="emulated: (every tile|sharp scores|strided heads of a fused projection, and|three dtypes)|, a sweep\$"
# Likewise the reruns of attention's op-table rows on kiln's own GEMM (kiln_gemm_sdpa*, over a minute
# of this run, as kiln's GEMM is instrumented here): kiln_gemm_op_table takes the same GEMM code
# through matmul's batched, transposed and strided products here, and the plain run keeps them.
sweeps="$sweeps|^kiln_gemm_sdpa"
do_build=1
thread=0
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --trainings) trainings=""; shift ;;
    --no-build) do_build=0; shift ;;
    --thread) thread=1; shift ;;
    -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) extra+=("$1"); shift ;;
  esac
done

# allocator_may_return_null: kiln turns a failed allocation into a kiln::OutOfMemoryError, and tests
# check that with impossible sizes; ASan would otherwise abort on them before kiln sees the null.
# detect_leaks: a test that leaks fails (what Open MPI keeps is suppressed for the tests under mpiexec:
# KILN_MPI_TEST_ENV in CMakeLists.txt); KILN_SANITIZE_LEAKS=0 turns leak checking off.
leaks=${KILN_SANITIZE_LEAKS:-1}
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=$leaks:print_stacktrace=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

start=$(date +%s)
if [ "$thread" = 1 ]; then
  tsan=${KILN_TSAN_BUILD_DIR:-$root/build/tsan}
  bash "$root/tools/setup.sh"
  CC=clang CXX=clang++ cmake -S "$root" -B "$tsan" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_CUDA=OFF \
    -DKILN_TSAN=ON >/dev/null
  cmake --build "$tsan" --target kiln_data_tests kiln_core_tests
  export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
  "$tsan/bin/kiln_data_tests" "[loader],[dataset],[transforms],[image]"
  "$tsan/bin/kiln_core_tests" "[parallel]"
  echo "sanitize --thread: clean in $(( $(date +%s) - start )) s"
  exit 0
fi
if [ "$do_build" = 1 ]; then
  bash "$root/tools/setup.sh"
  # The same configuration as tools/fuzz.sh: one tree, built once, serves both.
  CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_CUDA=OFF \
    -DKILN_SANITIZE=ON -DKILN_FUZZ=ON -DKILN_BENCH_TOOLS=OFF >/dev/null
  cmake --build "$build"
fi
built=$(date +%s)
skip=(-LE "$exclude")
if [ -z "$trainings" ]; then skip+=(-E "$sweeps"); else skip+=(-E "($trainings)|($sweeps)"); fi
ctest --test-dir "$build" --output-on-failure --parallel "$(nproc)" "${skip[@]}" "${extra[@]}"
echo "sanitize: built in $(( built - start )) s, tests (skipping ${skip[*]}) in $(( $(date +%s) - built )) s"

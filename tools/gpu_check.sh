#!/usr/bin/env bash
# The GPU test loop in one script, so every GPU check runs the same way (docs/gpu-testing.md).
#   tools/gpu_check.sh stage   on the build machine: build for Hopper into build/gpu and stage the CUDA
#                              test and bench executables with the shared libraries the GPU host lacks
#                              into stage/ (git-ignored, at most 64 MiB; copy it to the GPU host with the working tree)
#   tools/gpu_check.sh run     on the GPU host, from the repository root, with $OUT set: tests, a
#                              train_gpt run with --cuda-graph against the same run eager, then
#                              compute-sanitizer memcheck, racecheck and (on the tile, attention and
#                              layer-norm tests) synccheck, then benchmarks and the
#                              PyTorch peer, then the training-step bench and its peer; logs in $OUT
#                              (8 files at most); non-zero exit on failure
#   tools/gpu_check.sh train-step
#                              on the GPU host, with $OUT set: the training-step bench and its PyTorch
#                              peer alone, with the whole call's time (run gives them what is left)
#   tools/gpu_check.sh speed   on the GPU host, with $OUT set: the training rows of the speed table
#                              (docs/cuda-graphs.md): each workload at its recipe, kiln eager and with
#                              --cuda-graph, PyTorch eager and torch.compile, two alternating rounds;
#                              $OUT/speed.jsonl and the table in $OUT/speed.md
#   tools/gpu_check.sh data    on the GPU host, with $OUT set: the data-pipeline bench (the fused
#                              augmentation kernel against torchvision's GPU transforms; a training
#                              step fed by the DataLoader against device-resident data), two rounds
#                              alternating with tools/gpu_data_peer.py; the table in $OUT/gpu_data.md
#   tools/gpu_check.sh interop on the GPU host: tools/check_torch_interop.py with the staged
#                              kiln_nn_tests (kiln's safetensors into PyTorch and back)
#   tools/gpu_check.sh exec PROGRAM [ARGS...]
#                              on the GPU host: runs a staged program (an example, a test, a bench)
#                              with the staged libraries; the data the examples read is staged under
#                              stage/data (fashion-mnist/, tinyshakespeare/input.txt). With $OUT set,
#                              an example's metrics.jsonl comes back as $OUT/PROGRAM.metrics.jsonl,
#                              for tools/record_training.py on the build machine
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
stage_dir=${KILN_STAGE_DIR:-$root/stage}  # another folder only for tests/tools/gpu_check_rehearsal.py
# The executables and libraries travel as one gzip'd tar (the GPU code compresses about 5:1, and
# the stage must fit 64 MiB with the data); each command on the GPU host unpacks it into bin_dir.
bin_dir=${TMPDIR:-/tmp}/kiln-stage-bin
# Files a run on the GPU host keeps outside $OUT (which hands back 8 files at most): each
# sanitizer's own log before it joins sanitizers.log, each training-step run's JSON lines.
scratch=${TMPDIR:-/tmp}/kiln-gpu-check

# What gets staged. Every CUDA test executable runs once; benches run after the sanitizers.
cuda_tests=(kiln_cuda_tests)
benches=(gpu_bench bench_train_step bench_gpu_data)
examples=(train_cnn train_gpt)
cpu_tests=(kiln_nn_tests)  # staged for the PyTorch interop check, which drives its [interop] test
fashion_mnist=${KILN_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
shakespeare=${KILN_SHAKESPEARE:-$root/data/tinyshakespeare/input.txt}
stage_limit=$((64 * 1024 * 1024))

die() {
  echo "gpu_check: $*" >&2
  exit 2
}

# --- stage -----------------------------------------------------------------------------------------

# Shared libraries the GPU host has: the C library family (the same glibc ran there) and
# CUDA's own (toolkit and driver are installed there). Everything else is copied.
provided_on_gpu_host() {
  local name=$1 path=$2
  case "$name" in
    linux-vdso.so* | ld-linux*.so* | libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | \
      libresolv.so* | libutil.so*) return 0 ;;
    libcuda.so* | libcudart.so* | libcublas*.so* | libcudnn*.so* | libnccl.so* | libnvrtc*.so* | \
      libnvJitLink.so* | libcufft*.so* | libcurand.so* | libcusparse*.so* | libcusolver*.so* | \
      libnvToolsExt.so* | libnvidia-*.so*) return 0 ;;
  esac
  case "$path" in
    /usr/local/cuda* | */cuda/lib64/* | */cuda/targets/*) return 0 ;;
  esac
  return 1
}

# A library, as a plain file under the name given (links do not travel); a failed copy ends the stage.
copy_lib() {
  cp -L "$1" "$2" || die "stage: cannot copy $1 to $2"
}

stage() {
  local build=$root/build/gpu
  local nvcc=/usr/local/cuda/bin/nvcc
  [ -x "$nvcc" ] || nvcc=$(command -v nvcc || true)
  [ -n "$nvcc" ] || die "stage: no nvcc found; the stage step runs on the build machine with the CUDA toolkit"

  echo "== configure and build into $build (Hopper, sm_90)"
  # -lineinfo: compute-sanitizer names the source line of a bad access; code generation is unchanged.
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_CUDA=ON \
    -DKILN_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_FLAGS=-lineinfo \
    -DKILN_BUILD_TESTS=ON -DKILN_BUILD_EXAMPLES=ON >/dev/null || die "stage: cmake configure failed"
  cmake --build "$build" --parallel "$(nproc)" --target "${cuda_tests[@]}" "${benches[@]}" "${examples[@]}" "${cpu_tests[@]}" ||
    die "stage: build failed"

  echo "== stage into $stage_dir"
  bin_dir=$build/stage-bin
  rm -rf "$stage_dir" "$bin_dir"
  mkdir -p "$stage_dir" "$bin_dir"
  local exe
  for exe in "${cuda_tests[@]}" "${benches[@]}" "${examples[@]}" "${cpu_tests[@]}"; do
    [ -x "$build/bin/$exe" ] || die "stage: $build/bin/$exe was not built"
    cp "$build/bin/$exe" "$bin_dir/" || die "stage: cannot copy $build/bin/$exe"
  done
  printf '%s\n' "${cuda_tests[@]}" >"$bin_dir/cuda_tests.txt"

  # The examples' data (neither is on the GPU host; docs/gpu-testing.md).
  mkdir -p "$stage_dir/data/fashion-mnist" "$stage_dir/data/tinyshakespeare"
  local gz
  for gz in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
    [ -f "$fashion_mnist/$gz" ] || die "stage: $fashion_mnist/$gz is missing (set KILN_FASHION_MNIST)"
    cp "$fashion_mnist/$gz" "$stage_dir/data/fashion-mnist/" || die "stage: cannot copy $fashion_mnist/$gz"
  done
  [ -f "$shakespeare" ] || die "stage: $shakespeare is missing (set KILN_SHAKESPEARE)"
  cp "$shakespeare" "$stage_dir/data/tinyshakespeare/input.txt" || die "stage: cannot copy $shakespeare"

  # kiln's own libraries, then every library any staged file needs that the GPU host lacks, until
  # nothing new turns up. Copied under the name the loader asks for (the soname) as a plain file:
  # links do not travel. libstdc++ and libgcc_s go to stage/cxxrt, used only if the host's are too
  # old for these binaries (a C++ program built here ran there with the host's).
  local changed=1 f line name path missing
  mkdir -p "$bin_dir/cxxrt"
  while [ $changed = 1 ]; do
    changed=0
    missing=""
    for f in "$bin_dir"/* "$bin_dir"/cxxrt/*; do
      [ -f "$f" ] || continue
      case "$f" in *.txt | */data/*) continue ;; esac
      while read -r line; do
        name=$(awk '{print $1}' <<<"$line")
        path=$(awk '$2 == "=>" {print $3}' <<<"$line")
        if [ -z "$name" ] || [ -z "$path" ]; then continue; fi  # the vdso and the loader have no "=>"
        case "$name" in
          libkiln_*)
            [ -e "$bin_dir/$name" ] || { copy_lib "$build/bin/$name" "$bin_dir/$name" && changed=1; }
            continue
            ;;
          libstdc++.so* | libgcc_s.so*)
            [ "$path" = not ] && { missing="$missing $name"; continue; }
            [ -e "$bin_dir/cxxrt/$name" ] || { copy_lib "$path" "$bin_dir/cxxrt/$name" && changed=1; }
            continue
            ;;
        esac
        if [ "$path" = not ]; then  # "=> not found"
          provided_on_gpu_host "$name" "" || missing="$missing $name"
          continue
        fi
        provided_on_gpu_host "$name" "$path" && continue
        [ -e "$bin_dir/$name" ] || { copy_lib "$path" "$bin_dir/$name" && changed=1; }
      done < <(LD_LIBRARY_PATH="$bin_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$f" 2>/dev/null)
    done
  done
  [ -z "$missing" ] || die "stage: ldd cannot resolve:$missing"

  {
    echo "kiln GPU stage"
    echo "commit: $(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
    echo "staged: $(date -u +%Y-%m-%dT%H:%M:%SZ) on ${HOSTNAME:-unknown}"
    echo "build: -DKILN_CUDA=ON -DKILN_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_FLAGS=-lineinfo (Release)"
    echo "data: data/fashion-mnist (from $fashion_mnist), data/tinyshakespeare/input.txt; the CUDA tests and benches make their own random inputs"
    echo "files:"
    (cd "$bin_dir" && find . -type f ! -name MANIFEST.txt ! -path './data/*' -printf '  %10s  %P\n' | sort -k2)
    (cd "$stage_dir" && find ./data -type f -printf '  %10s  %P\n' | sort -k2)
  } >"$stage_dir/MANIFEST.txt"
  tar -czf "$stage_dir/bin.tar.gz" -C "$bin_dir" . || die "stage: tar failed"

  local bytes
  bytes=$(du -sb "$stage_dir" | awk '{print $1}')
  cat "$stage_dir/MANIFEST.txt"
  echo "stage: $(du -sh "$stage_dir" | awk '{print $1}') ($bytes bytes) in $stage_dir"
  if [ "$bytes" -gt "$stage_limit" ]; then
    die "stage: $bytes bytes is over the 64 MiB that travels to the GPU host"
  fi
  # What else travels with a GPU call: tracked and untracked, not ignored, files.
  local tree
  tree=$(cd "$root" && git ls-files -z -co --exclude-standard 2>/dev/null | du -cb --files0-from=- 2>/dev/null |
    tail -n 1 | awk '{print $1}')
  if [ -n "$tree" ]; then
    echo "stage: the working tree adds $tree bytes; together $((tree + bytes)) of $stage_limit"
    [ $((tree + bytes)) -le "$stage_limit" ] || die "stage: working tree + stage exceed the 64 MiB that travels to the GPU host"
  fi
  echo "stage: done. On the GPU host, with stage/ copied along: OUT=\$OUT bash tools/gpu_check.sh run"
}

# --- run -----------------------------------------------------------------------------------------

start_s=$(date +%s)
failed=()
notes=()

elapsed() { echo $(($(date +%s) - start_s)); }

# Trims a log to 15 MiB (head and tail kept): $OUT hands back at most 16 MiB per file. A log that
# shares its file with another gets a smaller MAX.
cap() {  # cap FILE [MAX]
  local f=$1 max=${2:-$((15 * 1024 * 1024))}
  [ -f "$f" ] || return 0
  local size
  size=$(stat -c %s "$f")
  if [ "$size" -gt "$max" ]; then
    { head -c $((max / 2)) "$f"; printf '\n\n[... %d bytes cut by gpu_check.sh ...]\n\n' $((size - max)); tail -c $((max / 2)) "$f"; } >"$f.cut"
    mv "$f.cut" "$f"
  fi
}

# Seconds a step may take: its budget, cut so the whole run ends before the deadline (a GPU call
# is stopped at 10 minutes; the later, less important steps then lose their time first).
budget() {
  local want=$1 left
  left=$((deadline - $(elapsed) - 5 - ${2:-0}))
  [ "$left" -lt "$want" ] && want=$left
  echo "$want"
}

# The steps of `run` before the kernel benchmarks (tests, the graph check, the sanitizers) get their
# budget less this reserve, so that gpu_bench (90 s) and its PyTorch peer (120 s) still run when the
# sanitizers would take all the time there is. KILN_BENCH_RESERVE=0 gives it all to the checks.
bench_reserve=${KILN_BENCH_RESERVE:-210}
early_budget() {
  budget "$1" "$bench_reserve"
}

record() {  # record STATUS STEP DETAIL
  printf '%-10s %-22s %s\n' "$1" "$2" "$3" | tee -a "$summary"
}

fail() {  # fail STEP DETAIL LOG
  failed+=("$1")
  record FAILED "$1" "$2"
  if [ -n "${3:-}" ] && [ -f "$3" ]; then
    echo "---- last lines of $(basename "$3") ----"
    tail -n 40 "$3"
    echo "----"
  fi
}

# The environment of kiln's executables: the staged libraries (only kiln sees them: python must not
# load our libstdc++), threads and the golden files. Set by choose_library_path.
kiln_vars=()

# Runs a kiln executable in that environment.
kiln_env() {
  env "${kiln_vars[@]}" "$@"
}

# Runs the test executable EXE through tools/resume_tests.py: a test case that kills its process (a
# crash, or a CUDA context left unusable, which kiln_cuda_tests' guard turns into an exit) or runs
# longer than HANG seconds (a kernel that never ends) is recorded as such, and the test cases after
# it run in a new process, each once, within SECS. PREFIX (e.g. compute-sanitizer and its options)
# runs the executable. Every run's output goes to LOG, the verdicts to JSON; the runner's summary is
# printed (its first line, one sentence, for the summary).
resumed_tests() {  # resumed_tests EXE LOG JSON SECS HANG SPEC [PREFIX...]
  local exe=$1 log=$2 json=$3 secs=$4 hang=$5 spec=$6 spec_args=() env_args=() v
  shift 6
  [ -z "$spec" ] || spec_args=(--spec "$spec")
  for v in "${kiln_vars[@]}"; do env_args+=("--env=$v"); done
  python3 "$root/tools/resume_tests.py" --exe "$bin_dir/$exe" "${spec_args[@]}" "${env_args[@]}" \
    --deadline "$secs" --test-timeout "$hang" --log "$log" --json "$json" --work "${json%.json}.work" -- "$@"
}

# On the GPU host: the staged executables and libraries, unpacked into bin_dir.
unpack() {
  [ -f "$stage_dir/bin.tar.gz" ] || die "no $stage_dir/bin.tar.gz; run 'tools/gpu_check.sh stage' on the build machine and copy stage/ along"
  rm -rf "$bin_dir"
  mkdir -p "$bin_dir"
  tar -xzf "$stage_dir/bin.tar.gz" -C "$bin_dir" || die "cannot unpack $stage_dir/bin.tar.gz into $bin_dir"
}

# The folder an example writes its metrics to: the last "--out DIR" or "--out=DIR" of its
# arguments, else the examples' default, PROGRAM_out in the working directory.
out_folder() {
  local dir=${1}_out
  shift
  while [ $# -gt 0 ]; do
    case "$1" in
      --out) [ $# -lt 2 ] || dir=$2; shift ;;
      --out=*) dir=${1#--out=} ;;
    esac
    shift
  done
  echo "$dir"
}

exec_staged() {
  [ $# -ge 1 ] || die "usage: tools/gpu_check.sh exec PROGRAM [ARGS...]"
  unpack
  [ -x "$bin_dir/$1" ] || die "exec: $1 is not staged"
  choose_library_path
  local prog=$1
  shift
  local metrics rc started=$bin_dir/.exec-started
  metrics=$(out_folder "$prog" "$@")/metrics.jsonl
  touch "$started"
  kiln_env "$bin_dir/$prog" "$@"
  rc=$?
  # The run's own record of itself comes back with $OUT (checkpoints stay: they can be too big).
  # Only a file this run wrote: an older one in the same folder is not this run's. (Not older than
  # the mark, rather than newer: a program that ends within one tick of the file system's clock
  # leaves both with the same time.)
  if [ -n "${OUT:-}" ] && [ -f "$metrics" ] && [ ! "$metrics" -ot "$started" ]; then
    mkdir -p "$OUT"
    local dest=$OUT/$prog.metrics.jsonl n=2
    while [ -e "$dest" ]; do
      dest=$OUT/$prog-$n.metrics.jsonl
      n=$((n + 1))
    done
    cp "$metrics" "$dest" && echo "gpu_check: $metrics is in \$OUT as $(basename "$dest"); on the build machine:" \
      "python3 tools/record_training.py $(basename "$dest")"
  fi
  return $rc
}

# PyTorch's side runs in the host's python3, which must not see the staged libraries: only the
# kiln_nn_tests it starts gets them, through a wrapper.
interop() {
  unpack
  choose_library_path
  local wrapper=$bin_dir/kiln_nn_tests.sh
  printf '#!/bin/sh\nexec env LD_LIBRARY_PATH="%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "%s" "$@"\n' \
    "$lib_path" "$bin_dir/kiln_nn_tests" >"$wrapper"
  chmod +x "$wrapper"
  python3 "$root/tools/check_torch_interop.py" --tests "$wrapper" "$@"
}

# compute-sanitizer's verdict on a resumed_tests run (RC its status, RESULT its summary) from the
# tool's summary lines in LOG, one per process ("ERROR SUMMARY: N errors" for memcheck and synccheck,
# "RACECHECK SUMMARY: H hazards displayed (E errors, W warnings)" for racecheck): errors fail; no
# errors but a run that did not pass fails too (test cases failed, crashed or were left unchecked
# for lack of time under the tool); racecheck warnings are noted; no summary at all means the tool
# did not run (it has been refused on some H200 hosts), which is said, not hidden. SHOWN names the
# file in $OUT that the log comes back in (the three sanitizers share one).
sanitizer_step() {  # sanitizer_step STEP LOG RC SECS SHOWN RESULT
  local step=$1 log=$2 rc=$3 secs=$4 shown=$5 result=$6
  local lines line n processes=0 errors=0 warnings=0 first
  first=$(head -n 1 <<<"$result")
  lines=$(grep -E 'ERROR SUMMARY: [0-9]+ error|RACECHECK SUMMARY: [0-9]+ hazard' "$log")
  if [ -n "$lines" ]; then
    while read -r line; do
      processes=$((processes + 1))
      n=$(sed -nE 's/.*ERROR SUMMARY: ([0-9]+) error.*/\1/p; s/.*\(([0-9]+) errors?,.*/\1/p' <<<"$line" | head -n 1)
      errors=$((errors + ${n:-0}))
      n=$(sed -nE 's/.*, ([0-9]+) warnings?\).*/\1/p' <<<"$line" | head -n 1)
      warnings=$((warnings + ${n:-0}))
    done <<<"$lines"
  fi
  local counted="$errors errors, $warnings warnings in $processes process(es)"
  if [ "$rc" = 2 ] && [ -z "$first" ]; then
    fail "$step" "tools/resume_tests.py could not start the tests (exit 2; its error is in the output)" "$log"
  elif [ "$processes" = 0 ] && grep -qE 'timed out|not run' <<<"$first"; then
    fail "$step" "ran out of time before any process finished: incomplete, not a pass; $first (see $shown)" "$log"
  elif [ "$processes" = 0 ]; then
    notes+=("$step: compute-sanitizer printed no summary (exit $rc): it did not run here; see $shown")
    record "NOT RUN" "$step" "compute-sanitizer did not run (exit $rc); see $shown"
  elif [ "$errors" != 0 ]; then
    fail "$step" "$counted (see $shown); $first" "$log"
  elif [ "$rc" != 0 ]; then
    fail "$step" "$counted, but not every test case passed under the tool: $first" "$log"
  else
    [ "$warnings" = 0 ] || notes+=("$step: ${warnings} racecheck warnings (possible hazards); read $shown")
    record ok "$step" "$counted; $first (${secs}s)"
  fi
  [ "$rc" = 0 ] || tail -n +2 <<<"$result" | tee -a "$summary"
}

# The staged libstdc++/libgcc_s join the library path only when the host's are too old for kiln's
# binaries; otherwise the host's serve kiln and compute-sanitizer alike.
choose_library_path() {
  lib_path=$bin_dir
  local probe
  probe=$(LD_LIBRARY_PATH="$lib_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$bin_dir/${cuda_tests[0]}" \
    --list-test-names-only 2>&1 >/dev/null | grep -E "GLIBCXX|CXXABI|GCC_[0-9]|libstdc\+\+|libgcc_s" || true)
  if [ -n "$probe" ]; then
    lib_path=$bin_dir:$bin_dir/cxxrt
    notes+=("the host's C++ runtime is too old for kiln's binaries; using the staged one (stage/cxxrt): $probe")
  fi
  kiln_vars=(LD_LIBRARY_PATH="$lib_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" KILN_NUM_THREADS=8
    KILN_GOLDEN_DIR="$root/tests/golden" KILN_GOLDEN_VERBOSE=1)
}

# What run and train-step do first: the staged binaries unpacked, $OUT and its summary started.
begin_run() {  # begin_run COMMAND
  [ -n "${OUT:-}" ] || die "$1: set OUT to the folder for results (the GPU host sets it)"
  [ -f "$stage_dir/bin.tar.gz" ] || die "$1: no $stage_dir; run 'tools/gpu_check.sh stage' on the build machine and copy stage/ along"
  cd "$root" || die "$1: cannot cd to $root"
  unpack
  mkdir -p "$OUT"
  rm -rf "$scratch"
  mkdir -p "$scratch"
  deadline=${KILN_GPU_DEADLINE:-570}  # seconds from start; a GPU call is stopped at 600
  summary=$OUT/summary.txt
  : >"$summary"
  choose_library_path
  {
    echo "kiln gpu_check $1, $(date -u +%Y-%m-%dT%H:%M:%SZ) on ${HOSTNAME:-unknown}"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | sed 's/^/gpu: /'
    sed -n 's/^commit: /staged commit: /p; s/^staged: /staged at: /p' "$stage_dir/MANIFEST.txt"
    echo
  } | tee -a "$summary"
}

# The end of the summary: time, notes, and the failed steps (the caller's exit status says whether any).
end_run() {
  {
    echo
    echo "finished in $(elapsed)s"
    for n in "${notes[@]}"; do echo "note: $n"; done
    if [ ${#failed[@]} -gt 0 ]; then
      echo "FAILED steps (${#failed[@]}): ${failed[*]}"
    else
      echo "all steps passed"
    fi
  } | tee -a "$summary"
}

# The training-step bench (bench_train_step, every workload and mode at its GPU sizes) and its
# PyTorch peer, alternately: kiln, PyTorch, kiln, PyTorch, so that a drift of the GPU's clocks or
# temperature during the call falls on both. Each run writes its own file outside $OUT (which hands
# back 8 files at most) after every case, so a run stopped by its timeout keeps what it measured;
# the runs come back concatenated in run order as TRAIN_JSON, where tools/train_step_compare.py
# tells them apart by their header records and takes the median over the rounds. The comparison's
# markdown is left in $scratch/train_step.md.
train_step_rounds() {  # train_step_rounds LOG TRAIN_JSON
  local log=$1 train_json=$2 round who rc t0 secs want left runs_left=4 file cases errors
  local dir=$scratch/train-step kiln_files=() torch_files=()
  rm -rf "$dir" "$scratch/train_step.md"
  mkdir -p "$dir"
  for round in 1 2; do
    for who in kiln torch; do
      # An even share of what is left, at most 150 s, so a slow first run cannot starve the others;
      # at least 40 s while time is left, so that with little of it one round of both still runs.
      left=$((deadline - $(elapsed) - 15))
      want=$((left / runs_left))
      [ "$want" -le 150 ] || want=150
      [ "$want" -ge 40 ] || want=40
      runs_left=$((runs_left - 1))
      secs=$(budget "$want")
      t0=$(elapsed)
      file=$dir/$who-$round.jsonl
      # Out of time is said, not failed: in run these steps get what the others leave, and the
      # train-step command exists to give them a whole call.
      if [ "$secs" -lt 20 ]; then
        record "NOT RUN" "train_step: $who $round" "no time left; 'tools/gpu_check.sh train-step' gives it a whole call"
        continue
      fi
      if [ "$who" = kiln ]; then
        echo "==== bench_train_step, round $round" >>"$log"
        kiln_env timeout --kill-after=10 "$secs" "$bin_dir/bench_train_step" --device cuda --json "$file" >>"$log" 2>&1
      else
        echo "==== tools/train_step_peer.py, round $round" >>"$log"
        PYTHONUNBUFFERED=1 timeout --kill-after=10 "$secs" python3 "$root/tools/train_step_peer.py" --device cuda \
          --json "$file" >>"$log" 2>&1
      fi
      rc=$?
      cases=0
      errors=0
      if [ -s "$file" ]; then
        if [ "$who" = kiln ]; then kiln_files+=("$file"); else torch_files+=("$file"); fi
        cases=$(grep -c '"record": "case"' "$file")
        errors=$(grep -c '"error": ' "$file")
      fi
      if [ $rc = 0 ]; then
        record ok "train_step: $who $round" "$cases cases ($(($(elapsed) - t0))s)"
      elif [ $rc = 124 ] || [ $rc = 137 ]; then
        fail "train_step: $who $round" "timed out after ${secs}s with $cases cases done (they are kept)" "$log"
      else
        fail "train_step: $who $round" "exit $rc ($errors of the $cases cases it recorded carry an error)" "$log"
      fi
    done
  done
  # Interleaved again as they ran: kiln 1, torch 1, kiln 2, torch 2 (those that wrote anything).
  : >"$train_json"
  for round in 1 2; do
    for who in kiln torch; do
      [ ! -s "$dir/$who-$round.jsonl" ] || cat "$dir/$who-$round.jsonl" >>"$train_json"
    done
  done
  if [ ${#kiln_files[@]} -gt 0 ] && [ ${#torch_files[@]} -gt 0 ]; then
    if python3 "$root/tools/train_step_compare.py" "$train_json" --out "$scratch/train_step.md" >>"$log" 2>&1; then
      record ok "train_step: compare" "${#kiln_files[@]} kiln and ${#torch_files[@]} PyTorch runs"
    else
      fail "train_step: compare" "train_step_compare.py failed" "$log"
    fi
  else
    record "NOT RUN" "train_step: compare" "no kiln or no PyTorch records"
  fi
}

# On the GPU host: the training-step rounds alone (the whole call's time is theirs). What comes
# back: summary.txt, train_step.log, train_step.jsonl and train_step.md.
train_step_only() {
  begin_run train-step
  local log=$OUT/train_step.log
  : >"$log"
  train_step_rounds "$log" "$OUT/train_step.jsonl"
  cap "$log"
  [ ! -f "$scratch/train_step.md" ] || cp "$scratch/train_step.md" "$OUT/train_step.md"
  end_run
  [ -f "$OUT/train_step.md" ] && { echo; cat "$OUT/train_step.md"; }
  [ ${#failed[@]} -eq 0 ]
}

# The speed table's training rows: a workload and its recipe's flags, for both programs. GPT-2 small
# runs first, so a call that runs short loses the small, fast rows, not the one that matters most.
speed_cases=(
  "gpt2-124m --mode bf16"
  "gpt --mode bf16"
  "resnet18 --mode fp16-nhwc"
  "cnn --mode fp32 --batch 256"
)

# On the GPU host: for each case, kiln eager, kiln --cuda-graph, PyTorch eager and torch.compile,
# then the same again (two rounds, so a drift of clocks or temperature falls on all four). Each run
# gets at most 60 s (torch.compile 150 s: inductor compiles GPT-2's forward and backward, and
# Triton its kernels, on a host whose caches are empty) and keeps what it wrote; what does not fit
# the call is said, not failed.
speed_only() {
  begin_run speed
  local log=$OUT/speed.log json=$OUT/speed.jsonl dir=$scratch/speed round spec workload who secs rc file
  : >"$log"
  : >"$json"
  mkdir -p "$dir"
  for round in 1 2; do
    for spec in "${speed_cases[@]}"; do
      read -r workload flags <<<"$spec"
      for who in kiln kiln-graph torch torch-compile; do
        if [ "$who" = torch-compile ]; then secs=$(budget 150); else secs=$(budget 60); fi
        if [ "$secs" -lt 15 ]; then
          record "NOT RUN" "speed: $workload $who $round" "no time left"
          continue
        fi
        file=$dir/$workload-$who-$round.jsonl
        echo "==== $workload $who, round $round" >>"$log"
        # shellcheck disable=SC2086 # the case's flags are words
        case $who in
          kiln) kiln_env timeout --kill-after=10 "$secs" "$bin_dir/bench_train_step" --device cuda \
            --workload "$workload" $flags --json "$file" >>"$log" 2>&1 ;;
          kiln-graph) kiln_env timeout --kill-after=10 "$secs" "$bin_dir/bench_train_step" --device cuda \
            --workload "$workload" $flags --cuda-graph --json "$file" >>"$log" 2>&1 ;;
          torch) PYTHONUNBUFFERED=1 timeout --kill-after=10 "$secs" python3 "$root/tools/train_step_peer.py" \
            --device cuda --workload "$workload" $flags --json "$file" >>"$log" 2>&1 ;;
          torch-compile) PYTHONUNBUFFERED=1 timeout --kill-after=10 "$secs" python3 \
            "$root/tools/train_step_peer.py" --device cuda --workload "$workload" $flags --compile \
            --json "$file" >>"$log" 2>&1 ;;
        esac
        rc=$?
        [ ! -s "$file" ] || cat "$file" >>"$json"
        if [ $rc = 0 ]; then
          record ok "speed: $workload $who $round" ""
        else
          fail "speed: $workload $who $round" "exit $rc" "$log"
        fi
      done
    done
  done
  if [ -s "$json" ] && python3 "$root/tools/train_step_compare.py" "$json" --out "$OUT/speed.md" >>"$log" 2>&1; then
    record ok "speed: compare" "$OUT/speed.md"
  else
    fail "speed: compare" "train_step_compare.py failed or nothing was recorded" "$log"
  fi
  cap "$log"
  end_run
  [ -f "$OUT/speed.md" ] && { echo; cat "$OUT/speed.md"; }
  [ ${#failed[@]} -eq 0 ]
}

# --cuda-graph against eager (docs/cuda-graphs.md): the same short train_gpt run, dropout on so that
# the graph's random draws are checked too, must give the same evaluation losses and the same final
# model, byte for byte. Its output goes to LOG.
graph_check() {  # graph_check LOG
  local log=$1 dir=$scratch/graph-check mode secs rc
  local common=(--device cuda --data "$shakespeare" --max-iters 40 --warmup-iters 10 --eval-interval 20
    --eval-iters 4 --dropout 0.1 --sample-tokens 0 --seed 3)
  rm -rf "$dir"
  mkdir -p "$dir"
  for mode in eager graph; do
    secs=$(early_budget 60)
    if [ "$secs" -lt 15 ]; then
      record "NOT RUN" "graph: train_gpt" "no time left"
      return
    fi
    echo "==== train_gpt $mode" >>"$log"
    if [ $mode = graph ]; then
      kiln_env timeout --kill-after=10 "$secs" "$bin_dir/train_gpt" "${common[@]}" --cuda-graph --out "$dir/$mode" \
        >>"$log" 2>&1
    else
      kiln_env timeout --kill-after=10 "$secs" "$bin_dir/train_gpt" "${common[@]}" --out "$dir/$mode" >>"$log" 2>&1
    fi
    rc=$?
    if [ $rc != 0 ]; then
      fail "graph: train_gpt $mode" "exit $rc" "$log"
      return
    fi
  done
  # The eval records up to their timings (tokens/s and seconds differ by design).
  local evals=()
  for mode in eager graph; do
    evals+=("$(grep '"record": "eval"' "$dir/$mode/metrics.jsonl" | sed 's/, "tokens_per_s".*//')")
  done
  if [ -n "${evals[0]}" ] && [ "${evals[0]}" = "${evals[1]}" ] &&
    cmp -s "$dir/eager/model.safetensors" "$dir/graph/model.safetensors"; then
    record ok "graph: train_gpt" "--cuda-graph equals eager: $(grep -c . <<<"${evals[0]}") evaluations, same model bytes"
  else
    { echo "eager:"; echo "${evals[0]}"; echo "graph:"; echo "${evals[1]}"; } >>"$log"
    fail "graph: train_gpt" "--cuda-graph differs from eager (evaluations or model bytes)" "$log"
  fi
}

run() {
  begin_run run
  # $OUT hands back 8 files at most: summary.txt, tests.log, sanitizers.log (memcheck's log, then
  # racecheck's and synccheck's), bench.log (every bench's output), bench_kiln.jsonl, bench_torch.jsonl,
  # bench_compare.md (the kernel table, then the training-step table) and train_step.jsonl.
  local tests_log=$OUT/tests.log sanitize_log=$OUT/sanitizers.log
  local memcheck_log=$scratch/memcheck.log racecheck_log=$scratch/racecheck.log synccheck_log=$scratch/synccheck.log
  local bench_log=$OUT/bench.log kiln_json=$OUT/bench_kiln.jsonl torch_json=$OUT/bench_torch.jsonl
  local compare_md=$OUT/bench_compare.md train_json=$OUT/train_step.jsonl

  # 1. Parity and runtime tests: each CUDA test executable in one process (not one per test case),
  # and a new one for the rest when a test case kills it (resumed_tests).
  local exe rc t0 secs result
  : >"$tests_log"
  while read -r exe; do
    [ -n "$exe" ] || continue
    secs=$(early_budget 180)
    t0=$(elapsed)
    result=$(resumed_tests "$exe" "$tests_log" "$scratch/tests-$exe.json" "$secs" 60 "")
    rc=$?
    [ -n "$result" ] || result="tools/resume_tests.py could not run the tests (exit $rc; its error is above)"
    if [ $rc = 0 ]; then
      record ok "tests: $exe" "$(head -n 1 <<<"$result") ($(($(elapsed) - t0))s)"
    else
      fail "tests: $exe" "$(head -n 1 <<<"$result")" "$tests_log"
    fi
    tail -n +2 <<<"$result" | tee -a "$summary"
  done <"$bin_dir/cuda_tests.txt"
  # 1b. An example with --cuda-graph against the same run eager.
  graph_check "$tests_log"
  cap "$tests_log"

  # 2-3. compute-sanitizer: memcheck with the allocator bypassed (every allocation its own
  # cudaMalloc, so an access past a tensor's end is out of bounds, not inside a cached segment),
  # then racecheck on kiln's kernels only. API errors are not reported: kiln checks every status
  # itself, and the tests provoke some on purpose (the out-of-memory test).
  local cs
  cs=$(command -v compute-sanitizer || true)
  [ -n "$cs" ] || [ ! -x /usr/local/cuda/bin/compute-sanitizer ] || cs=/usr/local/cuda/bin/compute-sanitizer
  local main_test=${cuda_tests[0]}
  # KILN_SANITIZE_TESTS (a Catch2 test spec, e.g. "cuda parity: add*") narrows memcheck and racecheck
  # when the whole executable does not fit the time under instrumentation. Each sanitizer runs the
  # tests through resumed_tests: a fault the tool reports also leaves the context unusable, and the
  # test cases after it are checked in a new process.
  local spec=${KILN_SANITIZE_TESTS:-}
  local sanitize=(--error-exitcode 86 --report-api-errors no --print-limit 100)
  if [ -z "$cs" ]; then
    notes+=("compute-sanitizer is not on this host: memcheck, racecheck and synccheck did not run")
    record "NOT RUN" "memcheck" "compute-sanitizer not found"
    record "NOT RUN" "racecheck" "compute-sanitizer not found"
    record "NOT RUN" "synccheck" "compute-sanitizer not found"
  else
    "$cs" --version 2>&1 | tail -n 1 | sed 's/^/compute-sanitizer: /' | tee -a "$summary"
    secs=$(early_budget 200)
    t0=$(elapsed)
    if [ "$secs" -lt 10 ]; then
      fail memcheck "no time left" ""
    else
      : >"$memcheck_log"
      result=$(resumed_tests "$main_test" "$memcheck_log" "$scratch/memcheck.json" "$secs" 120 "$spec" \
        env KILN_CUDA_ALLOC=direct "$cs" --tool memcheck "${sanitize[@]}")
      rc=$?
      sanitizer_step memcheck "$memcheck_log" $rc "$(($(elapsed) - t0))" "$(basename "$sanitize_log")" "$result"
      # Each sanitizer's part of the file (6, 6 and 3 MiB: under the 16 MiB a file may bring back):
      # its summary, at the end, survives the trim.
      cap "$memcheck_log" $((6 * 1024 * 1024))
      { echo "==== memcheck"; cat "$memcheck_log"; } >>"$sanitize_log"
    fi

    # Filter to kiln's kernels: their mangled names all start with _ZN4kiln, and "kiln" matches the
    # demangled name too. Without a --kernel-name option, racecheck runs unfiltered and says so.
    local filter=()
    if "$cs" --help 2>&1 | grep -q -- '--kernel-name'; then
      filter=(--kernel-name kns=kiln)
    else
      notes+=("racecheck ran unfiltered: this compute-sanitizer has no --kernel-name")
    fi
    secs=$(early_budget 150)
    t0=$(elapsed)
    if [ "$secs" -lt 10 ]; then
      fail racecheck "no time left" ""
    else
      : >"$racecheck_log"
      result=$(resumed_tests "$main_test" "$racecheck_log" "$scratch/racecheck.json" "$secs" 120 "$spec" \
        "$cs" --tool racecheck "${filter[@]}" "${sanitize[@]}")
      rc=$?
      sanitizer_step racecheck "$racecheck_log" $rc "$(($(elapsed) - t0))" "$(basename "$sanitize_log")" "$result"
      cap "$racecheck_log" $((6 * 1024 * 1024))
      { echo "==== racecheck"; cat "$racecheck_log"; } >>"$sanitize_log"
    fi

    # synccheck (barriers and warp-synchronous primitives: __syncthreads in divergent code, the
    # shuffles and mma.sync of the tensor-core kernels) on the tests of the hand-written tile,
    # attention and row kernels only, which keeps it short (KILN_SYNCCHECK_TESTS: another spec).
    secs=$(early_budget 60)
    t0=$(elapsed)
    if [ "$secs" -lt 10 ]; then
      fail synccheck "no time left" ""
    else
      : >"$synccheck_log"
      result=$(resumed_tests "$main_test" "$synccheck_log" "$scratch/synccheck.json" "$secs" 120 \
        "${KILN_SYNCCHECK_TESTS:-[tile],[attention],[layer_norm]}" "$cs" --tool synccheck "${filter[@]}" \
        "${sanitize[@]}")
      rc=$?
      sanitizer_step synccheck "$synccheck_log" $rc "$(($(elapsed) - t0))" "$(basename "$sanitize_log")" "$result"
      cap "$synccheck_log" $((3 * 1024 * 1024))
      { echo "==== synccheck"; cat "$synccheck_log"; } >>"$sanitize_log"
    fi
  fi

  # 4-6. Benchmarks: gpu_bench's case list (built from the op table's rows; it travels outside $OUT,
  # which holds 8 files at most), gpu_bench on it, the PyTorch peer on exactly the same list, and
  # the comparison table.
  : >"$bench_log"
  local cases_json=${TMPDIR:-/tmp}/kiln-bench-cases.jsonl
  rm -f "$cases_json"
  echo "==== gpu_bench --list-cases" >>"$bench_log"
  if kiln_env timeout --kill-after=10 60 "$bin_dir/gpu_bench" --list-cases --json "$cases_json" >>"$bench_log" 2>&1; then
    record ok "bench: cases" "$(wc -l <"$cases_json") cases listed"
  else
    fail "bench: cases" "gpu_bench --list-cases failed" "$bench_log"
  fi
  secs=$(budget 90)
  t0=$(elapsed)
  echo "==== gpu_bench" >>"$bench_log"
  if [ "$secs" -lt 10 ]; then
    fail "bench: gpu_bench" "no time left" ""
  else
    kiln_env timeout --kill-after=10 "$secs" "$bin_dir/gpu_bench" --json "$kiln_json" >>"$bench_log" 2>&1
    rc=$?
    if [ $rc = 0 ]; then record ok "bench: gpu_bench" "$(wc -l <"$kiln_json") cases ($(($(elapsed) - t0))s)"
    else fail "bench: gpu_bench" "exit $rc" "$bench_log"; fi
  fi
  secs=$(budget 120)
  t0=$(elapsed)
  echo "==== tools/torch_peer.py" >>"$bench_log"
  if [ ! -s "$cases_json" ]; then
    record "NOT RUN" "bench: torch_peer" "no case list"
  elif [ "$secs" -lt 15 ]; then
    fail "bench: torch_peer" "no time left" ""
  else
    PYTHONUNBUFFERED=1 timeout --kill-after=10 "$secs" python3 "$root/tools/torch_peer.py" --cases "$cases_json" \
      --json "$torch_json" >>"$bench_log" 2>&1
    rc=$?
    if [ $rc = 0 ]; then record ok "bench: torch_peer" "$(wc -l <"$torch_json") cases ($(($(elapsed) - t0))s)"
    else fail "bench: torch_peer" "exit $rc" "$bench_log"; fi
  fi
  if [ -s "$kiln_json" ] && [ -s "$torch_json" ]; then
    if python3 "$root/tools/bench_compare.py" "$kiln_json" "$torch_json" --out "$compare_md" >>"$bench_log" 2>&1; then
      record ok "bench: compare" "$(basename "$compare_md")"
    else
      fail "bench: compare" "bench_compare.py failed" "$bench_log"
    fi
  else
    record "NOT RUN" "bench: compare" "a JSON file is missing or empty"
  fi

  # 7-9. The training-step bench and its peer, two rounds each, alternately; their table follows
  # the kernel table in bench_compare.md.
  train_step_rounds "$bench_log" "$train_json"
  [ ! -f "$scratch/train_step.md" ] || { echo; cat "$scratch/train_step.md"; } >>"$compare_md"
  cap "$bench_log"

  end_run
  [ -f "$compare_md" ] && { echo; cat "$compare_md"; }
  [ ${#failed[@]} -eq 0 ]
}

# The data-pipeline bench and its peer, alternately, two rounds, then their table.
data_only() {
  begin_run data
  local log=$OUT/gpu_data.log round who file rc secs files=()
  local dir=$scratch/gpu-data
  rm -rf "$dir"
  mkdir -p "$dir"
  : >"$log"
  for round in 1 2; do
    for who in kiln torch; do
      file=$dir/$who-$round.jsonl
      secs=$(budget 150)
      if [ "$secs" -lt 20 ]; then
        record "NOT RUN" "gpu_data: $who $round" "no time left"
        continue
      fi
      echo "==== $who, round $round" >>"$log"
      if [ "$who" = kiln ]; then
        kiln_env timeout --kill-after=10 "$secs" \
          "$bin_dir/bench_gpu_data" --device cuda --data-dir "$stage_dir/data/fashion-mnist" --json "$file" >>"$log" 2>&1
      else
        PYTHONUNBUFFERED=1 timeout --kill-after=10 "$secs" python3 "$root/tools/gpu_data_peer.py" --device cuda \
          --json "$file" >>"$log" 2>&1
      fi
      rc=$?
      if [ $rc = 0 ] && [ -s "$file" ]; then
        record ok "gpu_data: $who $round" "$(grep -c '"record": "case"' "$file") cases"
        files+=("$file")
      else
        fail "gpu_data: $who $round" "exit $rc" "$log"
      fi
    done
  done
  if [ ${#files[@]} -gt 0 ] && python3 "$root/tools/gpu_data_compare.py" "${files[@]}" --out "$OUT/gpu_data.md" >>"$log" 2>&1; then
    record ok "gpu_data: compare" "${#files[@]} runs"
    cat "${files[@]}" >"$OUT/gpu_data.jsonl"
  else
    fail "gpu_data: compare" "no records or gpu_data_compare.py failed" "$log"
  fi
  cap "$log"
  end_run
  [ -f "$OUT/gpu_data.md" ] && { echo; cat "$OUT/gpu_data.md"; }
  [ ${#failed[@]} -eq 0 ]
}

case "${1:-}" in
  stage) stage ;;
  run) run ;;
  train-step) train_step_only ;;
  speed) speed_only ;;
  data) data_only ;;
  exec)
    shift
    exec_staged "$@"
    ;;
  interop)
    shift
    interop "$@"
    ;;
  *) die "usage: tools/gpu_check.sh stage|run|train-step|speed|data|interop|exec PROGRAM [ARGS...]" \
       "(see docs/gpu-testing.md)" ;;
esac

#!/usr/bin/env python3
"""CTest rehearsal of tools/gpu_check.sh's GPU-host commands (run, train-step, speed, data, exec) on a
machine without a GPU, so that a mistake in the script shows here and not in the few minutes a GPU
host is lent for.

The stage it runs from is made here (KILN_STAGE_DIR): tests/tools/resume_probe.cpp stands in for the
CUDA test executable (every test case passes with KILN_PROBE_BEHAVE set; otherwise it fails, crashes,
loses the context and leaves an error unread), and small scripts stand in for the benches, the
examples, compute-sanitizer and nvidia-smi. The PyTorch peers are the real scripts: without a GPU
(or without torch) they fail, which the script must record like any failed step. Asserts, per
scenario, the steps recorded in summary.txt and their statuses, that the exit status is non-zero
exactly when a step failed, that $OUT holds at most the 8 files a GPU call brings back, and that
bash reported no error in the script (an unset variable, a bad test, a missing command). Exits 1
naming what differs.

  usage: gpu_check_rehearsal.py --script tools/gpu_check.sh --probe PATH --work DIR
"""
import argparse
import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import time

failures = []

# The stand-ins. Each writes what gpu_check.sh reads of the real program: a JSON file (its records
# are not parsed here beyond a count), an example's metrics.jsonl and model, a sanitizer's summary.
FAKES = {
    # bench_train_step, bench_gpu_data, gpu_bench: a record per case into --json FILE.
    "bench_train_step": r"""#!/bin/sh
json=""
while [ $# -gt 0 ]; do [ "$1" = --json ] && json=$2; shift; done
[ -n "$json" ] || exit 3
printf '{"record": "case", "name": "rehearsal a"}\n{"record": "case", "name": "rehearsal b"}\n' >"$json"
""",
    "gpu_bench": r"""#!/bin/sh
json=""
while [ $# -gt 0 ]; do [ "$1" = --json ] && json=$2; shift; done
[ -n "$json" ] || exit 3
printf '{"name": "rehearsal_a"}\n{"name": "rehearsal_b"}\n' >"$json"
""",
    # train_gpt and train_cnn: eval records and a model under --out DIR; with --cuda-graph and
    # REHEARSAL_GRAPH_DIFFERS set, a model whose bytes differ.
    "train_gpt": r"""#!/bin/sh
out=train_gpt_out graph=0
while [ $# -gt 0 ]; do
  case "$1" in --out) out=$2; shift ;; --cuda-graph) graph=1 ;; esac
  shift
done
mkdir -p "$out" || exit 3
printf '{"record": "eval", "step": 20, "val_loss": 2.5, "tokens_per_s": 1%s}\n' "$graph" >"$out/metrics.jsonl"
if [ "$graph" = 1 ] && [ -n "${REHEARSAL_GRAPH_DIFFERS:-}" ]; then echo other >"$out/model.safetensors"
else echo model >"$out/model.safetensors"; fi
""",
    # compute-sanitizer: runs the command after its options and prints the tool's summary, with
    # REHEARSAL_SANITIZER_ERRORS errors (default 0); exits as the tool does (--error-exitcode).
    "compute-sanitizer": r"""#!/bin/bash
case "${1:-}" in
  --version) echo "NVIDIA (R) Compute Sanitizer (rehearsal stand-in)"; exit 0 ;;
  --help) echo "  --kernel-name arg"; exit 0 ;;
esac
tool=memcheck code=1
while [ $# -gt 0 ]; do
  case "$1" in
    --tool) tool=$2; shift 2 ;;
    --error-exitcode) code=$2; shift 2 ;;
    --report-api-errors | --print-limit | --kernel-name) shift 2 ;;
    *) break ;;
  esac
done
"$@"
rc=$?
errors=${REHEARSAL_SANITIZER_ERRORS:-0}
if [ "$tool" = racecheck ]; then
  echo "========= RACECHECK SUMMARY: $errors hazards displayed ($errors errors, 0 warnings)"
else
  echo "========= ERROR SUMMARY: $errors errors"
fi
[ "$errors" = 0 ] || exit "$code"
exit $rc
""",
    "nvidia-smi": "#!/bin/sh\necho 'NVIDIA rehearsal stand-in, 0.0, 0 MiB'\n",
}
FAKES["bench_gpu_data"] = FAKES["bench_train_step"]
FAKES["train_cnn"] = FAKES["train_gpt"].replace("train_gpt_out", "train_cnn_out")
STAGED = ["bench_train_step", "bench_gpu_data", "gpu_bench", "train_gpt", "train_cnn"]
ON_PATH = ["compute-sanitizer", "nvidia-smi"]

# What bash says when the script itself goes wrong: "tools/gpu_check.sh: line 123: ...".
BASH_ERROR = re.compile(r"gpu_check\.sh: line \d+: .*")


def write_exe(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def make_stage(work, probe):
    stage, bins, fakebin = (os.path.join(work, d) for d in ("stage", "stage-bin", "fakebin"))
    for d in (stage, bins, fakebin):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    shutil.copy(probe, os.path.join(bins, "kiln_cuda_tests"))
    with open(os.path.join(bins, "cuda_tests.txt"), "w") as f:
        f.write("kiln_cuda_tests\n")
    for name in STAGED:
        write_exe(os.path.join(bins, name), FAKES[name])
    for name in ON_PATH:
        write_exe(os.path.join(fakebin, name), FAKES[name])
    with tarfile.open(os.path.join(stage, "bin.tar.gz"), "w:gz") as tar:
        for entry in sorted(os.listdir(bins)):
            tar.add(os.path.join(bins, entry), arcname="./" + entry)
    with open(os.path.join(stage, "MANIFEST.txt"), "w") as f:
        f.write("kiln GPU stage\ncommit: rehearsal\nstaged: rehearsal\n")
    os.makedirs(os.path.join(stage, "data", "fashion-mnist"))
    return stage, fakebin


def gpu_check(args, stage, fakebin, name, command, env_extra, with_summary=True):
    """Runs `gpu_check.sh COMMAND` from the rehearsal's stage and checks what every command must do;
    with_summary: the command writes summary.txt (all but exec)."""
    out = os.path.join(args.work, "out-" + name)
    tmp = os.path.join(args.work, "tmp-" + name)
    for d in (out, tmp):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    env = dict(os.environ)
    # synccheck's tests by their tags: the probe's.
    env.update({"OUT": out, "TMPDIR": tmp, "KILN_STAGE_DIR": stage, "PATH": fakebin + os.pathsep + env["PATH"],
                "KILN_SYNCCHECK_TESTS": "[probe]"})
    for key in ("KILN_PROBE_BEHAVE", "KILN_PROBE_SLEEP", "REHEARSAL_GRAPH_DIFFERS", "REHEARSAL_SANITIZER_ERRORS",
                "KILN_GPU_DEADLINE", "KILN_BENCH_RESERVE", "KILN_SANITIZE_TESTS"):
        env.pop(key, None)
    env.update(env_extra)
    t0 = time.monotonic()
    proc = subprocess.run(["bash", args.script] + command, env=env, capture_output=True, text=True, timeout=600)
    secs = time.monotonic() - t0
    summary_path = os.path.join(out, "summary.txt")
    summary = open(summary_path).read() if os.path.exists(summary_path) else ""
    if with_summary and not summary:
        failures.append(f"{name}: no summary.txt; the script said:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    for line in BASH_ERROR.findall(proc.stdout + proc.stderr):
        failures.append(f"{name}: bash: {line}")
    files = sorted(os.listdir(out))
    if len(files) > 8:
        failures.append(f"{name}: $OUT holds {len(files)} files, more than the 8 a GPU call brings back: {files}")
    for f in files:
        if os.path.getsize(os.path.join(out, f)) > 16 * 1024 * 1024:
            failures.append(f"{name}: $OUT/{f} is over 16 MiB")
    failed = re.findall(r"^FAILED\s", summary, re.M)
    if with_summary and (proc.returncode != 0) != bool(failed):
        failures.append(f"{name}: exit {proc.returncode} with {len(failed)} FAILED steps in the summary")
    if summary and not re.search(r"^finished in \d+s$", summary, re.M):
        failures.append(f"{name}: the summary has no 'finished in' line")
    return proc, summary, files, secs


def status_of(summary, step):
    """The status recorded for `step` ("ok", "FAILED", "NOT RUN"), or None, and the line's detail."""
    m = re.search(r"^(ok|FAILED|NOT RUN)\s+" + re.escape(step) + r"(?:\s+(.*))?$", summary, re.M)
    return (m.group(1), m.group(2) or "") if m else (None, "")


def expect_step(name, summary, step, want, detail=None):
    got, text = status_of(summary, step)
    ok = got is not None if want == "any" else got == want
    if not ok:
        failures.append(f"{name}: step '{step}': got {got!r}, want {want!r}")
    elif detail and detail not in text:
        failures.append(f"{name}: step '{step}': detail {text!r} lacks {detail!r}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--script", required=True)
    p.add_argument("--probe", required=True)
    p.add_argument("--work", required=True)
    args = p.parse_args()
    os.makedirs(args.work, exist_ok=True)
    stage, fakebin = make_stage(args.work, args.probe)
    peer_steps = ["bench: torch_peer", "bench: compare", "train_step: torch 1", "train_step: torch 2",
                  "train_step: compare"]

    # 1. Every step the GPU host can pass, passing: the probe behaves, the sanitizers find nothing.
    name = "run"
    _, summary, files, _ = gpu_check(args, stage, fakebin, name, ["run"], {"KILN_PROBE_BEHAVE": "1"})
    for step in ["tests: kiln_cuda_tests", "graph: train_gpt", "memcheck", "racecheck", "synccheck", "bench: cases",
                 "bench: gpu_bench", "train_step: kiln 1", "train_step: kiln 2"]:
        expect_step(name, summary, step, "ok")
    expect_step(name, summary, "graph: train_gpt", "ok", "same model bytes")
    for step in peer_steps:
        expect_step(name, summary, step, "any")
    for f in ["summary.txt", "tests.log", "sanitizers.log", "bench.log", "bench_kiln.jsonl", "train_step.jsonl"]:
        if f not in files:
            failures.append(f"{name}: $OUT lacks {f}: {files}")

    # 2. What goes wrong on a GPU, said as such: test cases that fail, crash and lose the context,
    # sanitizer errors, and --cuda-graph differing from eager.
    name = "run, failing"
    proc, summary, _, _ = gpu_check(args, stage, fakebin, name, ["run"],
                                    {"REHEARSAL_SANITIZER_ERRORS": "2", "REHEARSAL_GRAPH_DIFFERS": "1"})
    expect_step(name, summary, "tests: kiln_cuda_tests", "FAILED")
    expect_step(name, summary, "graph: train_gpt", "FAILED", "differs from eager")
    for step in ["memcheck", "racecheck", "synccheck"]:
        expect_step(name, summary, step, "FAILED", "errors")
    expect_step(name, summary, "bench: gpu_bench", "ok")
    if proc.returncode == 0 or not re.search(r"^FAILED steps \(\d+\): .*memcheck", summary, re.M):
        failures.append(f"{name}: exit {proc.returncode}; the summary does not end with the failed steps")
    for what in ["fails an assertion", "crashed", "lost the CUDA context"]:
        if what not in summary:
            failures.append(f"{name}: the summary does not say which test case {what!r}")

    # 3. A call that runs short (a test case sleeps 6 s, in every run of the tests): the steps that do
    # not fit are said, the sanitizers' as failures, and the script ends by its deadline. (How many
    # sanitizers still fit depends on the machine's speed.)
    name = "run, short"
    deadline = 30
    _, summary, _, secs = gpu_check(args, stage, fakebin, name, ["run"],
                                    {"KILN_PROBE_BEHAVE": "1", "KILN_PROBE_SLEEP": "6",
                                     "KILN_GPU_DEADLINE": str(deadline), "KILN_BENCH_RESERVE": "5"})
    expect_step(name, summary, "tests: kiln_cuda_tests", "ok")
    expect_step(name, summary, "synccheck", "FAILED", "no time left")
    expect_step(name, summary, "train_step: kiln 2", "NOT RUN", "no time left")
    if secs > deadline + 15:
        failures.append(f"{name}: took {secs:.0f} s with a deadline of {deadline} s")

    # 4. The other commands.
    name = "train-step"
    _, summary, _, _ = gpu_check(args, stage, fakebin, name, ["train-step"], {})
    for step in ["train_step: kiln 1", "train_step: kiln 2"]:
        expect_step(name, summary, step, "ok")
    for step in ["train_step: torch 1", "train_step: compare"]:
        expect_step(name, summary, step, "any")
    name = "speed"
    _, summary, _, _ = gpu_check(args, stage, fakebin, name, ["speed"], {})
    for workload in ["gpt2-124m", "gpt", "resnet18", "cnn"]:
        for who in ["kiln", "kiln-graph"]:
            expect_step(name, summary, f"speed: {workload} {who} 1", "ok")
        expect_step(name, summary, f"speed: {workload} torch-compile 2", "any")
    expect_step(name, summary, "speed: compare", "any")
    name = "data"
    _, summary, _, _ = gpu_check(args, stage, fakebin, name, ["data"], {})
    expect_step(name, summary, "gpu_data: kiln 1", "ok")
    expect_step(name, summary, "gpu_data: compare", "any")
    name = "exec"
    run_dir = os.path.join(args.work, "exec-run")
    shutil.rmtree(run_dir, ignore_errors=True)
    proc, _, files, _ = gpu_check(args, stage, fakebin, name, ["exec", "train_gpt", "--out", run_dir], {},
                                  with_summary=False)
    if proc.returncode != 0 or "train_gpt.metrics.jsonl" not in files:
        failures.append(f"{name}: exit {proc.returncode}, $OUT: {files}\n{proc.stdout}{proc.stderr}")

    if failures:
        for f in failures:
            print("gpu_check_rehearsal: " + f)
        return 1
    print("gpu_check_rehearsal: run (passing, failing, short), train-step, speed, data and exec behaved as expected")
    return 0


if __name__ == "__main__":
    sys.exit(main())

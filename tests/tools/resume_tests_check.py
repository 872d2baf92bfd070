#!/usr/bin/env python3
"""CTest check of tools/resume_tests.py on tests/tools/resume_probe.cpp, whose test cases crash, end
the run as a lost CUDA context would, leave an error unread or sleep past the deadline or the
per-test timeout. Asserts each
test case's verdict, that each one began exactly once over all runs, the runs' exits, the exit status
and the summary's first line. Exits 1 naming what differs.

  usage: resume_tests_check.py --runner tools/resume_tests.py --probe PATH --work DIR
"""
import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time

failures = []


def expect(what, got, want):
    if got != want:
        failures.append(f"{what}: got {got!r}, want {want!r}")


def run(args, name, extra, runner_args):
    work = os.path.join(args.work, name)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    out_json = os.path.join(work, "result.json")
    log = os.path.join(work, "tests.log")
    cmd = [sys.executable, args.runner, "--exe", args.probe, "--work", work, "--log", log, "--json", out_json]
    cmd += runner_args + extra
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    secs = time.monotonic() - t0
    result = None
    if os.path.exists(out_json):
        with open(out_json) as f:
            result = json.load(f)
    else:
        failures.append(f"{name}: no {out_json}; runner said: {proc.stdout}{proc.stderr}")
    begun = {}
    for entry in sorted(os.listdir(work)):
        if entry.startswith("progress-"):
            with open(os.path.join(work, entry)) as f:
                for line in f:
                    parts = line.rstrip("\n").split("\t")
                    if parts[0] == "start":
                        begun[parts[1]] = begun.get(parts[1], 0) + 1
    with open(log) as f:
        log_text = f.read()
    return proc, result, begun, log_text, secs


def verdicts(result):
    return {t["name"]: t["status"] for t in result["tests"]} if result else {}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runner", required=True)
    p.add_argument("--probe", required=True)
    p.add_argument("--work", required=True)
    args = p.parse_args()
    os.makedirs(args.work, exist_ok=True)
    # The probe's segfault must not leave core files behind.
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    dies = "probe: dies (a segfault)"
    between = "probe: passes between (a comma, [brackets])"
    # 1. Everything, with time to spare: three runs (a crash, a lost context, then the rest).
    proc, result, begun, log_text, _ = run(args, "all", [], [])
    expect("all: exit status", proc.returncode, 1)
    expect("all: verdicts", verdicts(result), {
        "probe: passes first": "passed",
        "probe: fails an assertion": "failed",
        dies: "crashed",
        between: "passed",
        "probe: loses the CUDA context": "lost",
        "probe: leaves an error unread": "failed",
        "probe: sleeps when asked": "passed",
        "probe: passes last": "passed",
    })
    expect("all: each test case began once", sorted(set(begun.values())), [1])
    expect("all: test cases begun", len(begun), 8)
    if result:
        # The crash's exit: -11 (SIGSEGV), or 1 in a build with AddressSanitizer, which takes the
        # signal after Catch2 has reported it. Either way not a clean one, and the verdict is the same.
        exits = [r["exit"] for r in result["runs"]]
        expect("all: runs' exits", (exits[0] in (-11, 1), exits[1:]), (True, [75, 0]))
        expect("all: runs complete", [r["complete"] for r in result["runs"]], [False, False, True])
        expect("all: summary", result["summary"],
               "8 test cases: 4 passed, 2 failed, 1 crashed, 1 lost the CUDA context; 3 runs")
        details = {t["name"]: t.get("detail", "") for t in result["tests"]}
        expect("all: the crash names its signal", "SIGSEGV" in details[dies], True)
        expect("all: the unread error is named", "cudaErrorInvalidConfiguration" in
               details["probe: leaves an error unread"], True)
        expect("all: the lost context's error is named", "cudaErrorIllegalAddress" in
               details["probe: loses the CUDA context"], True)
    expect("all: runs in the log", log_text.count("==== resume_tests: "), 3)
    expect("all: resumed runs name their test cases in a file", log_text.count(" -f "), 2)
    expect("all: the first line on stdout", proc.stdout.splitlines()[0] if proc.stdout else "",
           result["summary"] if result else None)

    # 2. The same through a wrapper (as compute-sanitizer wraps the tests), which turns the signal into
    # an exit status (139): the crash is still the probe's own "fatal" record, not a finished run.
    proc, result, begun, _, _ = run(args, "wrapped", ["--", "bash", "-c", '"$@"; exit $?', "wrap"], [])
    expect("wrapped: verdicts", verdicts(result).get(dies), "crashed")
    expect("wrapped: each test case began once", (sorted(set(begun.values())), len(begun)), ([1], 8))
    if result:
        exits = [r["exit"] for r in result["runs"]]
        expect("wrapped: runs' exits", (exits[0] in (139, 1), exits[1:]), (True, [75, 0]))

    # 3. A spec: only its test cases, one clean run, exit 0.
    proc, result, begun, _, _ = run(args, "spec", [], ["--spec", "probe: passes*"])
    expect("spec: exit status", proc.returncode, 0)
    expect("spec: verdicts", verdicts(result), {"probe: passes first": "passed", between: "passed",
                                                "probe: passes last": "passed"})
    if result:
        expect("spec: runs", len(result["runs"]), 1)

    # 4. A deadline: the sleeping test case is stopped, the one after it is not run, and the runner
    # does not wait for the sleep.
    proc, result, begun, _, secs = run(args, "deadline", [], ["--deadline", "4", "--env", "KILN_PROBE_SLEEP=60"])
    expect("deadline: exit status", proc.returncode, 1)
    got = verdicts(result)
    expect("deadline: the sleeper", got.get("probe: sleeps when asked"), "timed out")
    expect("deadline: after the sleeper", got.get("probe: passes last"), "not run")
    expect("deadline: stopped in time", secs < 30, True)
    if result:
        expect("deadline: last run's exit", result["runs"][-1]["exit"], None)

    # 5. A hang: the sleeping test case outlasts --test-timeout, its process is killed, and the rest
    # run in a new process.
    proc, result, begun, _, secs = run(args, "hung", [], ["--test-timeout", "1", "--env", "KILN_PROBE_SLEEP=60",
                                                          "--deadline", "60"])
    got = verdicts(result)
    expect("hung: the sleeper", got.get("probe: sleeps when asked"), "hung")
    expect("hung: after the sleeper", got.get("probe: passes last"), "passed")
    expect("hung: each test case began once", (sorted(set(begun.values())), len(begun)), ([1], 8))
    expect("hung: stopped in time", secs < 30, True)
    if result:
        expect("hung: runs", len(result["runs"]), 4)

    # 6. Bad usage: an executable that is not there.
    bad = subprocess.run([sys.executable, args.runner, "--exe", os.path.join(args.work, "missing")],
                         capture_output=True, text=True)
    expect("missing executable: exit status", bad.returncode, 2)

    if failures:
        print("resume_tests check FAILED:\n  " + "\n  ".join(failures))
        return 1
    print("resume_tests check: crash, lost context, unread error, deadline and spec all as expected")
    return 0


if __name__ == "__main__":
    sys.exit(main())

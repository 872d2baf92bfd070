#!/usr/bin/env python3
"""CTest check of --profile in train_cnn and train_gpt: the same short run with and without it must
give the same losses bit for bit (profiling only reads clocks); the profiled run must print a
"profile:" line and write "profile" records to its metrics.jsonl whose numbers are consistent: as
many steps as it trained, every time finite and not negative, forward and backward above zero, the
phases within the step (other_ms not below zero, up to rounding).

  usage: profile_check.py --example gpt|cnn --exe EXE [--data PATH] --work DIR
"""
import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys

PHASES = ("data", "h2d", "forward", "backward", "comm", "optimizer")

# Per example: the records whose losses are compared, their keys, the steps trained, and the flags.
EXAMPLES = {
    "gpt": ("eval", ("train_loss", "val_loss"), 20,
            ["--device", "cpu", "--max-iters", "20", "--eval-interval", "10", "--eval-iters", "2",
             "--batch-size", "8", "--sample-tokens", "0", "--seed", "3"]),
    "cnn": ("epoch", ("train_loss", "test_accuracy"), 2 * 8,
            ["--device", "cpu", "--model", "small-cnn", "--epochs", "2", "--train-limit", "512",
             "--test-limit", "200", "--batch-size", "64", "--seed", "3"]),
}


def fail(message):
    print(f"profile_check: {message}", file=sys.stderr)
    sys.exit(1)


def run(argv, env):
    proc = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        fail(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stdout}")
    return proc.stdout


def records(path, kind):
    with open(path) as f:
        return [r for r in (json.loads(line) for line in f) if r.get("record") == kind]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--example", choices=sorted(EXAMPLES), required=True)
    p.add_argument("--exe", required=True)
    p.add_argument("--data")
    p.add_argument("--work", required=True)
    a = p.parse_args()
    kind, keys, steps, flags = EXAMPLES[a.example]
    if a.data:
        flags = flags + ["--data", a.data]
    shutil.rmtree(a.work, ignore_errors=True)
    env = dict(os.environ, KILN_NUM_THREADS="2")
    plain_out, prof_out = os.path.join(a.work, "plain"), os.path.join(a.work, "profiled")
    run([a.exe] + flags + ["--out", plain_out], env)
    printed = run([a.exe] + flags + ["--out", prof_out, "--profile"], env)

    plain = records(os.path.join(plain_out, "metrics.jsonl"), kind)
    profiled = records(os.path.join(prof_out, "metrics.jsonl"), kind)
    if not plain or [[r[k] for k in keys] for r in plain] != [[r[k] for k in keys] for r in profiled]:
        fail(f"--profile changed the {kind} records:\n{plain}\n{profiled}")

    lines = [line for line in printed.splitlines() if re.search(r"profile: step [0-9.]+ ms: ", line)]
    if not lines:
        fail(f"no 'profile: step ... ms:' line in the output:\n{printed}")
    prof = records(os.path.join(prof_out, "metrics.jsonl"), "profile")
    if not prof:
        fail("no profile record in metrics.jsonl")
    if sum(r["steps"] for r in prof) != steps:
        fail(f"the profile records cover {sum(r['steps'] for r in prof)} steps, not {steps}: {prof}")
    for r in prof:
        times = [r["step_ms"], r["other_ms"]] + [r["phase_ms"][ph] for ph in PHASES]
        if set(r["phase_ms"]) != set(PHASES) or not all(math.isfinite(t) for t in times):
            fail(f"a profile record without every phase, or with a time that is not a number: {r}")
        if min(r["phase_ms"].values()) < 0 or r["step_ms"] <= 0 or r["other_ms"] < -1e-3:
            fail(f"a negative time, or phases longer than the step: {r}")
        if r["phase_ms"]["forward"] <= 0 or r["phase_ms"]["backward"] <= 0:
            fail(f"no forward or backward time: {r}")
    print(f"profile_check: {a.example}: {len(prof)} profile records over {steps} steps; losses unchanged")


if __name__ == "__main__":
    main()

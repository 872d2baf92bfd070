#!/usr/bin/env python3
"""CTest check of --profile, --doctor and --log-every in train_cnn and train_gpt.

The same short run with and without --profile --doctor --doctor-every 5 must give the same losses
bit for bit (profiling only reads clocks), and both runs (--log-every 3, train_gpt 5) the same
"train" records: one every 3 (5) steps with that step's loss and lr; train_gpt's "eval" records give
the lr of the step before them as the train record of that step does. The profiled run must print a "profile:" line and
write "profile" records whose numbers are consistent: as many steps as it trained, every time
finite and not negative, forward and backward above zero, the phases within the step (other_ms not
below zero, up to rounding). The doctor must write a report every 5 steps of those 5 steps and a
final one of the whole run, and kiln_doctor must read the final one back to the same findings.

  usage: profile_check.py --example gpt|cnn --exe EXE --doctor KILN_DOCTOR [--data PATH] --work DIR
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

# Per example: the records whose losses are compared, their keys, the steps trained, --log-every,
# and the flags.
EXAMPLES = {
    "gpt": ("eval", ("train_loss", "val_loss"), 20, 5,
            ["--device", "cpu", "--max-iters", "20", "--eval-interval", "10", "--eval-iters", "2",
             "--batch-size", "8", "--sample-tokens", "0", "--seed", "3"]),
    "cnn": ("epoch", ("train_loss", "test_accuracy"), 2 * 8, 3,
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
    p.add_argument("--doctor", required=True, help="the kiln_doctor program")
    p.add_argument("--data")
    p.add_argument("--work", required=True)
    a = p.parse_args()
    kind, keys, steps, log_every, flags = EXAMPLES[a.example]
    if a.data:
        flags = flags + ["--data", a.data]
    shutil.rmtree(a.work, ignore_errors=True)
    env = dict(os.environ, KILN_NUM_THREADS="2")
    plain_out, prof_out = os.path.join(a.work, "plain"), os.path.join(a.work, "profiled")
    run([a.exe] + flags + ["--out", plain_out, "--log-every", str(log_every)], env)
    printed = run([a.exe] + flags + ["--out", prof_out, "--log-every", str(log_every), "--profile", "--doctor",
                                     "--doctor-every", "5"], env)

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

    train_plain = records(os.path.join(plain_out, "metrics.jsonl"), "train")
    train_prof = records(os.path.join(prof_out, "metrics.jsonl"), "train")
    if [r["step"] for r in train_plain] != list(range(log_every, steps + 1, log_every)):
        fail(f"train records at steps {[r['step'] for r in train_plain]}, not every {log_every} of {steps}")
    pick = lambda rs: [(r["step"], r["loss"], r["lr"]) for r in rs]  # noqa: E731
    if pick(train_plain) != pick(train_prof):
        fail(f"--profile/--doctor changed the train records:\n{train_plain}\n{train_prof}")
    for r in train_plain:
        if not (math.isfinite(r["loss"]) and r["lr"] > 0 and set(r["memory_mb"]) == {"rss", "peak_rss"}
                and r["memory_mb"]["peak_rss"] >= r["memory_mb"]["rss"] > 0):
            fail(f"a train record without a finite loss, a learning rate or the process's memory: {r}")

    if a.example == "gpt":  # an evaluation after step s reports the lr step s ran with
        train_lr = {r["step"]: r["lr"] for r in train_plain}
        evals = [(r["step"], r["lr"]) for r in plain if r["step"] in train_lr]
        if len(evals) != 2 or any(lr != train_lr[step] for step, lr in evals):
            fail(f"eval records' lr {evals} differ from the train records' {train_lr}")

    doctor = records(os.path.join(prof_out, "metrics.jsonl"), "doctor")
    windows = [r for r in doctor if not r["final"]]
    if [r["step"] for r in windows] != list(range(5, steps + 1, 5)) or \
            any(r["measured"]["steps"] != 5 for r in windows):
        fail(f"doctor reports at steps {[(r['step'], r['measured']['steps']) for r in windows]}, not 5 steps each")
    final = [r for r in doctor if r["final"]]
    if len(final) != 1 or final[0]["step"] != steps or final[0]["measured"]["steps"] != steps:
        fail(f"not one final doctor report of all {steps} steps: {final}")
    if final[0]["measured"]["gpu"]["reason"] != "the run is on the CPU":
        fail(f"a CPU run's report does not say why it has no GPU samples: {final[0]}")
    if printed.count("doctor at step") != len(doctor):
        fail(f"{len(doctor)} doctor records but {printed.count('doctor at step')} printed reports")
    again = run([a.doctor, prof_out], env)
    messages = [f["message"] for f in final[0]["findings"]] or ["no rule applies"]
    if not again.startswith(f"doctor at step {steps}, {steps} steps measured:") or \
            not all(m in again for m in messages):
        fail(f"kiln_doctor does not reproduce the final report {messages}:\n{again}")
    print(f"profile_check: {a.example}: {len(prof)} profile records over {steps} steps, {len(train_plain)} train "
          f"records and {len(doctor)} doctor reports; losses unchanged")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""CTest check of --ddp in train_gpt and train_cnn: the same short run (dropout 0, so no random draw
differs between ranks and one process) in one process and data-parallel over N ranks of mpiexec must
give the same losses at every evaluation (train_gpt) or epoch (train_cnn, whose batch norm is
synchronized over the ranks), within float tolerance (the ranks average their shares' gradients,
which rounds differently from one process's mean over the whole batch); and every rank must have
computed the same values as rank 0, bit for bit (they hold the same weights).

  usage: ddp_check.py --example gpt|cnn --exe EXE --mpiexec MPIEXEC --ranks N [--data PATH] [--extra FLAGS]
                      [--ranks-extra FLAGS] --work DIR
With --extra --grad-accum,2 both runs accumulate two micro-batches a step; the ranks' first micro-batch
then stays local (DDP's no_sync) and the second's backward all-reduces their sum. --ranks-extra adds
flags to the run over the ranks only (--zero: ZeRO-1 in place of DDP, which must train the same model).
With --split-at N the run over the ranks stops after step N and one process resumes it from rank 0's
checkpoint: a checkpoint must not depend on the number of ranks (ZeRO-1's gathered optimizer state
loads into the plain optimizer; train_cnn's epoch loss continues from the ranks' mean).
--expect-setting KEY=VALUE requires rank 0's run record to hold that resolved setting (that a flag
reached the run at all).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

TOL = 1e-4


# Per example: the records compared, the keys and their tolerances, and the short run's flags.
EXAMPLES = {
    "gpt": ("eval", {"train_loss": TOL, "val_loss": TOL},
            ["--device", "cpu", "--dropout", "0", "--max-iters", "30", "--warmup-iters", "5", "--eval-interval",
             "10", "--eval-iters", "2", "--batch-size", "12", "--sample-tokens", "0", "--seed", "3"]),
    # Accuracy over 500 held-out images: one image is 0.002, and a logit that changes its sign within
    # float tolerance may flip one.
    "cnn": ("epoch", {"train_loss": TOL, "test_accuracy": 0.0021},
            ["--device", "cpu", "--model", "small-cnn", "--dropout", "0", "--epochs", "2", "--train-limit", "768",
             "--test-limit", "500", "--batch-size", "48", "--lr", "5e-4", "--seed", "3"]),
}


# The flag that stops a run after a step, leaving a checkpoint to resume from.
STOP = {"gpt": "--stop-at-iter", "cnn": "--stop-at-step"}


def records(path, kind):
    with open(path) as f:
        return [json.loads(line) for line in f if f'"record": "{kind}"' in line]


def main():
    p = argparse.ArgumentParser()
    for flag in ("--exe", "--mpiexec", "--work"):
        p.add_argument(flag, required=True)
    p.add_argument("--example", choices=sorted(EXAMPLES), default="gpt")
    p.add_argument("--data", help="the example's --data (default: its own)")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--extra", default="", help="more flags for both runs, comma-separated (e.g. --grad-accum,2)")
    p.add_argument("--ranks-extra", default="", help="more flags for the run over the ranks only (e.g. --zero)")
    p.add_argument("--split-at", type=int, default=0,
                   help="stop the run over the ranks after this step and resume it in one process")
    p.add_argument("--expect-setting", default="", help="KEY=VALUE: a setting rank 0's run record must hold")
    a = p.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    kind, keys, common = EXAMPLES[a.example]
    if a.data:
        common = common + ["--data", a.data]
    if a.extra:
        common = common + a.extra.split(",")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", KILN_NUM_THREADS="1")
    one, many = os.path.join(a.work, "one"), os.path.join(a.work, "ddp")
    subprocess.run([a.exe] + common + ["--out", one], check=True, env=env, stdout=subprocess.DEVNULL)
    ranks_extra = a.ranks_extra.split(",") if a.ranks_extra else []
    stop = [STOP[a.example], str(a.split_at)] if a.split_at else []
    subprocess.run([a.mpiexec, "-n", str(a.ranks), "--oversubscribe", a.exe, "--ddp"] + ranks_extra + common + stop +
                   ["--out", many], check=True, env=env, stdout=subprocess.DEVNULL)
    if a.split_at:
        subprocess.run([a.exe] + common + ["--resume", os.path.join(many, "checkpoint.safetensors"), "--out", many],
                       check=True, env=env, stdout=subprocess.DEVNULL)
    ref = records(os.path.join(one, "metrics.jsonl"), kind)
    got = records(os.path.join(many, "metrics.jsonl"), kind)
    failures = []
    if len(ref) != len(got) or not ref:
        failures.append(f"{len(ref)} {kind} records in one process, {len(got)} over the ranks")
    for r, g in zip(ref, got):
        for key, tol in keys.items():
            if abs(r[key] - g[key]) > tol:
                failures.append(f"step {r['step']} {key}: one process {r[key]}, over the ranks {g[key]}")
    if a.expect_setting:
        key, value = a.expect_setting.split("=", 1)
        settings = records(os.path.join(many, "metrics.jsonl"), "run")[0]["settings"]
        if str(settings.get(key)) != value:
            failures.append(f"setting {key}: {settings.get(key)!r} in the run over the ranks, expected {value!r}")
    for rank in range(1, 1 if a.split_at else a.ranks):  # split: the other ranks stopped early
        other = records(os.path.join(many, f"rank-{rank}", "metrics.jsonl"), kind)
        if [[x[k] for k in keys] for x in other] != [[x[k] for k in keys] for x in got]:
            failures.append(f"rank {rank}'s values differ from rank 0's")
    for f in failures:
        print("ddp_check: FAIL: " + f)
    if not failures:
        split = f", split at step {a.split_at} and resumed in one process" if a.split_at else ""
        print(f"ddp_check: {len(got)} {kind} records agree ({', '.join(f'{k} within {t}' for k, t in keys.items())}) "
              f"over {a.ranks} ranks{split}")
        for r, g in zip(ref, got):
            print("  step %d: %s" % (r["step"], ", ".join(f"{k} {r[k]} / {g[k]}" for k in keys)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

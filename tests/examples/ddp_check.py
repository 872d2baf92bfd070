#!/usr/bin/env python3
"""CTest check of train_gpt --ddp: the same short run (dropout 0, so no random draw differs between
ranks and one process) in one process and data-parallel over N ranks of mpiexec must give the same
loss estimates at every evaluation, within float tolerance (the ranks average their shares' gradients,
which rounds differently from one process's mean over the whole batch); and every rank must have
computed the same estimates as rank 0, bit for bit (they hold the same weights).

  usage: ddp_check.py --exe TRAIN_GPT --mpiexec MPIEXEC --ranks N --data FILE --work DIR
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

TOL = 1e-4


def evals(path):
    with open(path) as f:
        return [json.loads(line) for line in f if '"record": "eval"' in line]


def main():
    p = argparse.ArgumentParser()
    for flag in ("--exe", "--mpiexec", "--data", "--work"):
        p.add_argument(flag, required=True)
    p.add_argument("--ranks", type=int, default=2)
    a = p.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    common = ["--device", "cpu", "--data", a.data, "--dropout", "0", "--max-iters", "30", "--warmup-iters", "5",
              "--eval-interval", "10", "--eval-iters", "2", "--batch-size", "12", "--sample-tokens", "0", "--seed", "3"]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", KILN_NUM_THREADS="1")
    one, many = os.path.join(a.work, "one"), os.path.join(a.work, "ddp")
    subprocess.run([a.exe] + common + ["--out", one], check=True, env=env, stdout=subprocess.DEVNULL)
    subprocess.run([a.mpiexec, "-n", str(a.ranks), "--oversubscribe", a.exe, "--ddp"] + common + ["--out", many],
                   check=True, env=env, stdout=subprocess.DEVNULL)
    ref, got = evals(os.path.join(one, "metrics.jsonl")), evals(os.path.join(many, "metrics.jsonl"))
    failures = []
    if len(ref) != len(got) or not ref:
        failures.append(f"{len(ref)} evaluations in one process, {len(got)} with --ddp")
    for r, g in zip(ref, got):
        for key in ("train_loss", "val_loss"):
            if abs(r[key] - g[key]) > TOL:
                failures.append(f"step {r['step']} {key}: one process {r[key]}, --ddp {g[key]}")
    for rank in range(1, a.ranks):
        other = evals(os.path.join(many, f"rank-{rank}", "metrics.jsonl"))
        if [(x["train_loss"], x["val_loss"]) for x in other] != [(x["train_loss"], x["val_loss"]) for x in got]:
            failures.append(f"rank {rank}'s estimates differ from rank 0's")
    for f in failures:
        print("ddp_check: FAIL: " + f)
    if not failures:
        print(f"ddp_check: {len(got)} evaluations agree within {TOL} over {a.ranks} ranks")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

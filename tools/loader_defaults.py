#!/usr/bin/env python3
"""The measurement behind the examples' --workers defaults: train_cnn (with --augment, so the loader's
threads do real work per sample) and train_gpt run short trainings at each --workers count, in
--rounds rounds that cycle through the counts, and the median training throughput of each count
(images/s or tokens/s from the run's own metrics.jsonl summary, evaluation excluded) goes into a
markdown table headed by the date, the commit, the CPU and the commands. Numbers come from the
metrics files only.

  usage: python3 tools/loader_defaults.py --bin build/cpu/bin [--device cpu] [--workers 0,1,2]
             [--rounds 2] --out FILE.md
"""
import argparse
import datetime
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_compare import json_lines, write_atomic  # noqa: E402
from data_loader_bench import cpu_name  # noqa: E402

RUNS = {
    "train_cnn": (["--epochs", "1", "--train-limit", "12000", "--test-limit", "500", "--batch-size", "128",
                   "--augment"], "images_per_s", "images/s"),
    "train_gpt": (["--max-iters", "120", "--eval-interval", "1000", "--eval-iters", "1", "--sample-tokens", "0"],
                  "tokens_per_s", "tokens/s"),
}


def summary(metrics):
    recs = [r for _, r in json_lines(metrics, "loader_defaults")]
    return next(r for r in reversed(recs) if r.get("record") == "summary"), recs[0]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", required=True)
    p.add_argument("--device", default="cpu")
    p.add_argument("--workers", default="0,1,2")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    workers = [int(w) for w in a.workers.split(",")]
    got = {(prog, w): [] for prog in RUNS for w in workers}
    commands, commit = [], None
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for prog, (args, key, _) in RUNS.items():
                for w in workers:
                    out = os.path.join(tmp, f"{prog}-{w}-{r}")
                    cmd = [os.path.join(a.bin, prog), "--device", a.device, "--workers", str(w)] + args
                    print("+ " + " ".join(cmd), flush=True)
                    subprocess.run(cmd + ["--out", out], check=True, stdout=subprocess.DEVNULL)
                    s, first = summary(os.path.join(out, "metrics.jsonl"))
                    got[(prog, w)].append(s[key])
                    commit = commit or first.get("kiln_commit")
                    if r == 0:
                        commands.append(" ".join([os.path.relpath(cmd[0])] + cmd[1:]) + " --out DIR")
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    lines = [f"### Loader threads in the examples, {date}, {cpu_name()} ({os.cpu_count()} cores), {a.device}", "",
             f"- kiln commit `{commit}`; median training throughput (evaluation excluded) of {a.rounds} rounds "
             f"cycling through --workers {a.workers}",
             f"- command: `python3 tools/loader_defaults.py --bin {os.path.relpath(a.bin)} --device {a.device} "
             f"--workers {a.workers} --rounds {a.rounds} --out {os.path.relpath(a.out)}`"]
    lines += [f"- `{c}`" for c in commands]
    lines += ["", "| program | --workers | throughput | relative to --workers 0 |", "| --- | ---: | ---: | ---: |"]
    for prog, (_, _, unit) in RUNS.items():
        base = statistics.median(got[(prog, workers[0])])
        for w in workers:
            m = statistics.median(got[(prog, w)])
            lines.append(f"| {prog} | {w} | {m:,.0f} {unit} | {m / base:.3f} |")
    text = "\n".join(lines) + "\n"
    write_atomic(a.out, text)
    print(text)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Runs bench_data_loader (kiln) and tools/data_loader_peer.py (PyTorch) side by side, in --rounds
rounds that alternate the two (kiln, PyTorch, kiln, ...), with the same thread count, batch size,
batches and worker counts; then writes a markdown table: for each task and worker count, each
framework's median images per second over the rounds and their ratio (above 1, kiln is faster). The
table is headed by the date, the kiln commit, the CPU, the PyTorch version and every command; numbers
come from the records only. The raw records go to OUT.jsonl beside the table.

  usage: python3 tools/data_loader_bench.py --kiln build/cpu/bin/bench_data_loader --python PYTHON \\
             [--rounds 3] [--workers 0,1,2] [--batch 256] [--batches 200] [--threads 2] --out FILE.md
PYTHON is an interpreter with torch and torchvision installed (they are never kiln's dependencies).
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_compare import json_lines, write_atomic  # noqa: E402


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def run(cmd, env):
    print("+ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, env=env)


def load(path):
    return [r for _, r in json_lines(path, "data_loader_bench")]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kiln", required=True)
    p.add_argument("--python", required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--workers", default="0,1,2")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--batches", type=int, default=200)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", required=True)
    a = p.parse_args()

    here = os.path.dirname(os.path.abspath(__file__))
    common = ["--workers", a.workers, "--batch", str(a.batch), "--batches", str(a.batches)]
    env = dict(os.environ, KILN_NUM_THREADS=str(a.threads), OMP_NUM_THREADS=str(a.threads))
    records = []
    headers = {"kiln": [], "torch": []}
    # The per-run files sit beside --out while the runs last, so the commands the records quote
    # name paths relative to the repository, not a temporary folder elsewhere.
    out_dir = os.path.dirname(os.path.abspath(a.out))
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".runs-") as tmp_abs:
        tmp = os.path.relpath(tmp_abs)
        for r in range(a.rounds):
            for impl in ("kiln", "torch"):
                out = os.path.join(tmp, f"{impl}{r}.jsonl")
                if impl == "kiln":
                    cmd = [a.kiln] + common + ["--json", out]
                else:
                    cmd = [a.python, os.path.relpath(os.path.join(here, "data_loader_peer.py"))] + common + [
                        "--threads", str(a.threads), "--json", out]
                run(cmd, env)
                recs = load(out)
                headers[impl].append(next(x for x in recs if x["record"] == "header"))
                records += recs
    base = os.path.splitext(a.out)[0]
    write_atomic(base + ".jsonl", "".join(json.dumps(x) + "\n" for x in records))

    def median(impl, task, w):
        v = [x["images_per_s"] for x in records
             if x["record"] == "case" and x["impl"] == impl and x["task"] == task and x["workers"] == w]
        return statistics.median(v) if v else None

    kh, th = headers["kiln"][0], headers["torch"][0]
    lines = [f"### DataLoader, {kh['date'][:10]}, {cpu_name()} ({os.cpu_count()} cores)", "",
             f"- kiln commit `{kh['kiln_commit']}`; PyTorch {th['torch']} with torchvision; "
             f"{a.threads} threads in each main process, batch {a.batch}, {a.batches} timed batches after "
             f"{kh['warmup']} warm-up, prefetch factor {kh['prefetch']}, persistent workers; "
             f"median of {a.rounds} rounds, kiln and PyTorch alternating",
             f"- command: `python3 tools/data_loader_bench.py --kiln {os.path.relpath(a.kiln)} --python PYTHON "
             f"--rounds {a.rounds} --workers {a.workers} --batch {a.batch} --batches {a.batches} --threads {a.threads} "
             f"--out {os.path.relpath(a.out)}`",
             f"- kiln: `{kh['command']}`; PyTorch: `{th['command']}`", "",
             "| task | workers | kiln images/s | PyTorch images/s | kiln/PyTorch |", "| --- | ---: | ---: | ---: | ---: |"]
    tasks = {"augment": "pad-crop 2 + flip + normalize, per sample", "uint8": "uint8 batches, no transform"}
    for task, what in tasks.items():
        for w in [int(v) for v in a.workers.split(",")]:
            k, t = median("kiln", task, w), median("torch", task, w)
            ratio = f"{k / t:.2f}" if k and t else "n/a"
            lines.append(f"| {what} | {w} | {k:,.0f} | {t:,.0f} | {ratio} |")
    text = "\n".join(lines) + "\n"
    write_atomic(a.out, text)
    print(text)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""CTest check of tools/bench_compare.py: joins a hand-made gpu_bench file and a PyTorch peer file
(written here, into --work) and asserts the tables it prints: the kiln/PyTorch ratio of a memory-bound
and of a compute-bound case, "missing" for a case only one side ran, and the table of PyTorch's other
backends (attention's flash kernel) with kiln's ratio to the default and to each backend, a backend
that failed listed under "Not measured" with its error. Also checks write_atomic, which every tool
writes its files through: the text arrives whole (UTF-8), a new file gets the umask's mode (not the
temporary file's private 0600), an existing file keeps its own, and no temporary is left behind.
And tools/train_step_compare.py refuses records of two models of one workload in one table.
Exits 1 naming what differs.

  usage: bench_compare_check.py --compare tools/bench_compare.py --work DIR
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys

GPU = "NVIDIA H100 80GB HBM3"


def rec(impl, case, dtype, shape, **fields):
    r = {"impl": impl, "case": case, "dtype": dtype, "shape": shape, "gpu": GPU, "date": "2026-11-25T06:00:00Z",
         "command": f"{impl} command"}
    r.update(fields)
    return r


def write(path, records):
    with open(path, "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in records))


def check_write_atomic(compare, work):
    """What write_atomic got wrong, as lines (none when it is right)."""
    spec = importlib.util.spec_from_file_location("bench_compare", compare)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    folder = os.path.join(work, "write_atomic")
    os.makedirs(folder, exist_ok=True)
    for name in os.listdir(folder):
        os.unlink(os.path.join(folder, name))
    problems = []
    text = "| GEMM 512³ | µs |\n"
    fresh, kept = os.path.join(folder, "new.md"), os.path.join(folder, "kept.md")
    with open(kept, "w") as f:
        f.write("old\n")
    os.chmod(kept, 0o640)
    module.write_atomic(fresh, text)
    module.write_atomic(kept, text)
    for path, mode in ((fresh, 0o644), (kept, 0o640)):
        with open(path, encoding="utf-8") as f:
            if f.read() != text:
                problems.append(f"{os.path.basename(path)}: the text differs")
        got = os.stat(path).st_mode & 0o777
        if got != mode:
            problems.append(f"{os.path.basename(path)}: mode {got:o}, expected {mode:o}")
    left = sorted(set(os.listdir(folder)) - {"new.md", "kept.md"})
    if left:
        problems.append(f"left behind: {left}")
    return problems


def check_train_step_mix(compare):
    """tools/train_step_compare.py pooled the step times of two models of one workload (a tiny and a
    char-level GPT) into one median; it refuses such records now, and renders each alone."""
    tools = os.path.dirname(os.path.abspath(compare))
    script = os.path.join(tools, "train_step_compare.py")
    records = [os.path.join(tools, "..", "bench", "records", f"train_step_cpu_2026-11-24_{m}.jsonl")
               for m in ("tinygpt", "chargpt")]
    for r in records:
        alone = subprocess.run([sys.executable, script, r], capture_output=True, text=True)
        if alone.returncode != 0 or "| fp32 |" not in alone.stdout:
            return f"train_step_compare.py on {r} alone exited {alone.returncode}: {alone.stderr}"
    both = subprocess.run([sys.executable, script] + records, capture_output=True, text=True)
    if both.returncode == 0 or "give one model's records per call" not in both.stderr:
        return f"train_step_compare.py mixed two models (exit {both.returncode}):\n{both.stdout}{both.stderr}"
    return None


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--compare", required=True)
    p.add_argument("--work", required=True)
    args = p.parse_args()
    os.makedirs(args.work, exist_ok=True)
    os.umask(0o022)  # the modes check_write_atomic expects
    problems = check_write_atomic(args.compare, args.work)
    if problems:
        print("bench_compare_check: write_atomic:\n  " + "\n  ".join(problems))
        return 1
    shape = [4, 16, 4096, 128]
    kiln = [
        rec("kiln", "add", "float32", [1024], bytes=12288, gbps=3000.0, pct_of_copy=100.0),
        rec("kiln", "sdpa_causal", "bfloat16", shape, bytes=1, flops=1e12, tflops=300.0, pct_of_matmul=40.0,
            precision="bf16"),
        rec("kiln", "sdpa_causal_fwd_bwd", "bfloat16", shape, bytes=1, flops=3.5e12, tflops=200.0,
            pct_of_matmul=27.0, precision="bf16"),
        rec("kiln", "softmax", "float32", [8, 8], bytes=512, gbps=100.0, pct_of_copy=3.0),
    ]
    torch = [
        rec("torch", "add", "float32", [1024], bytes=12288, gbps=2000.0, pct_of_copy=67.0),
        rec("torch", "sdpa_causal", "bfloat16", shape, bytes=1, flops=1e12, tflops=500.0, pct_of_matmul=70.0,
            precision="bf16", variants={"flash": {"median_ms": 4.0, "tflops": 250.0}}),
        rec("torch", "sdpa_causal_fwd_bwd", "bfloat16", shape, bytes=1, flops=3.5e12, tflops=400.0,
            pct_of_matmul=57.0, precision="bf16",
            variants={"flash": {"error": "RuntimeError: No available kernel"}}),
    ]
    kiln_path, torch_path = os.path.join(args.work, "kiln.jsonl"), os.path.join(args.work, "torch.jsonl")
    out_path = os.path.join(args.work, "compare.md")
    write(kiln_path, kiln)
    write(torch_path, torch)
    run = subprocess.run([sys.executable, args.compare, kiln_path, torch_path, "--out", out_path],
                         capture_output=True, text=True)
    if run.returncode != 0:
        print(f"bench_compare_check: bench_compare.py exited {run.returncode}:\n{run.stderr}")
        return 1
    with open(out_path) as f:
        text = f.read()
    expected = [
        "| add | float32 | [1024] | 3000 | 100.0 | 2000 | 67.0 | 1.50 |",
        "| softmax | float32 | [8, 8] | 100 | 3.0 | missing | missing | n/a |",
        "| sdpa_causal | bfloat16 | [4, 16, 4096, 128] | 300.0 | 40.0 | 500.0 | 70.0 | 0.60 |",
        "PyTorch's other backends for the same cases",
        "| case | dtype | shape | kiln | PyTorch default | PyTorch flash | kiln/default | kiln/flash |",
        "| sdpa_causal | bfloat16 | [4, 16, 4096, 128] | 300.0 | 500.0 | 250.0 | 0.60 | 1.20 |",
        "| sdpa_causal_fwd_bwd | bfloat16 | [4, 16, 4096, 128] | 200.0 | 400.0 | n/a | 0.50 | n/a |",
        "- sdpa_causal_fwd_bwd bfloat16 (PyTorch flash): RuntimeError: No available kernel",
    ]
    missing = [line for line in expected if line not in text]
    if run.stdout != text:
        missing.append("(stdout differs from the --out file)")
    if text.count("| add | float32 |") != 1:
        missing.append("(add is listed more than once: a case without variants joined the backends' table)")
    if missing:
        print("bench_compare_check: not in bench_compare.py's output:\n  " + "\n  ".join(missing))
        print("--- output ---\n" + text)
        return 1
    mixed = check_train_step_mix(args.compare)
    if mixed:
        print("bench_compare_check: " + mixed)
        return 1
    print(f"bench_compare_check: {len(expected)} expected lines found; train_step_compare.py refuses mixed models")
    return 0


if __name__ == "__main__":
    sys.exit(main())

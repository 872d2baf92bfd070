#!/usr/bin/env python3
"""PyTorch and NumPy peer of bench/cpu_gemm.cpp (bench_cpu_gemm --sizes) and bench/op_overhead.cpp
(bench_op_overhead): the same cases timed the same way, written as the same JSON lines with impl
"torch" or "numpy", so tools/cpu_bench.py can put them beside kiln's.

  gemm         float32 square products x[n, n] @ w[n, n] of random normal inputs: torch.matmul, then
               numpy.matmul (NumPy's own OpenBLAS); tools/cpu_bench.py runs each in its own process
               (--impl), as PyTorch's idle OpenMP threads slow a NumPy product that follows them in the
               same process on a small machine. As bench_cpu_gemm: the input pairs rotate through
               ~64 MB (1 to 16 pairs) so the product reads them from memory, two untimed products
               first, then --reps timed ones (time.perf_counter around each), the median in GFLOP/s.
  op_overhead  torch only. add: y = a + b on float32 tensors of 1 and 4096 elements, no tensor
               requiring grad. add_backward: a, b leaves with requires_grad=True; y = a + b;
               y.backward(ones) with a fixed ones tensor made before the loop; a.grad = b.grad = None.
               One sample times --iters iterations of a Python loop and divides (the loop's own cost
               is part of what a PyTorch user pays per op); the median, min and max over --samples
               samples after --warmup untimed ones.

--threads sets torch.set_num_threads, and OMP_NUM_THREADS, MKL_NUM_THREADS and OPENBLAS_NUM_THREADS
before torch and NumPy load (NumPy's OpenBLAS reads its thread count only then), so every
implementation runs on the cores kiln's KILN_NUM_THREADS gives kiln.

  usage: python3 tools/cpu_bench_peer.py --bench gemm [--sizes 512,1024,2048] [--reps R] [--threads T]
                                         [--json FILE]
         python3 tools/cpu_bench_peer.py --bench op_overhead [--iters N] [--samples S] [--threads T]
                                         [--json FILE]
"""
import argparse
import importlib.metadata
import json
import os
import re
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_compare import write_atomic  # noqa: E402
from train_step_peer import cpu_name, tree_commit, utc_now  # noqa: E402

# As bench_op_overhead's cases, in its order: (case, elements, autograd).
OP_CASES = (("add", 1, False), ("add_backward", 1, True), ("add", 4096, False), ("add_backward", 4096, True))


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bench", required=True, choices=("gemm", "op_overhead"), help="which cases")
    p.add_argument("--impl", default="torch,numpy", help="gemm: torch, numpy or both (comma-separated)")
    p.add_argument("--sizes", default="512,1024,2048", help="gemm: square sizes, comma-separated")
    p.add_argument("--reps", type=int, default=11, help="gemm: timed products per size")
    p.add_argument("--iters", type=int, default=1000, help="op_overhead: iterations timed together as one sample")
    p.add_argument("--samples", type=int, default=30, help="op_overhead: timed samples per case")
    p.add_argument("--warmup", type=int, default=3, help="op_overhead: untimed samples per case first")
    p.add_argument("--threads", type=int, help="CPU threads (default: each library's own choice)")
    p.add_argument("--json", help="also write the JSON lines here (atomically, after every case)")
    args = p.parse_args(argv)
    # The same ranges as the kiln programs' flags (exit code 2, as argparse's own).
    for flag, value, lo, hi in (("--reps", args.reps, 1, 2**31 - 1), ("--iters", args.iters, 1, 100000000),
                                ("--samples", args.samples, 1, 100000), ("--warmup", args.warmup, 0, 100000),
                                ("--threads", args.threads, 1, 2**31 - 1)):
        if value is not None and not lo <= value <= hi:
            p.error(f"{flag} expects a whole number from {lo} to {hi}, got {value}")
    try:
        args.sizes = [int(s) for s in args.sizes.split(",") if s]
    except ValueError:
        p.error(f"--sizes expects whole numbers separated by commas, got {args.sizes!r}")
    if not args.sizes or any(not 1 <= n <= 65536 for n in args.sizes):
        p.error("--sizes expects sizes from 1 to 65536")
    args.impl = [i for i in args.impl.split(",") if i]
    for i in args.impl:
        if i not in ("torch", "numpy"):
            p.error(f"--impl: {i!r} is not torch or numpy")
    if args.bench == "op_overhead" and args.impl != ["torch"]:
        args.impl = ["torch"]  # NumPy has no autograd: the op-overhead cases are PyTorch's only
    if args.json:
        folder = os.path.dirname(os.path.abspath(args.json))
        if not os.path.isdir(folder):
            p.error(f"--json {args.json}: {folder} is not a folder")
    return args


def numpy_blas(np):
    """What NumPy's BLAS says of itself ("OpenBLAS 0.3.31 ..."), or its name."""
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        return blas.get("openblas configuration") or f"{blas.get('name')} {blas.get('version')}"
    except Exception:  # older NumPy: no dicts mode
        return "unknown"


def torch_blas(torch):
    """The BLAS PyTorch was built with, from its build configuration ("BLAS_INFO=mkl")."""
    found = re.search(r"BLAS_INFO=([^,\s]+)", torch.__config__.show())
    return found.group(1) if found else "unknown"


def torch_version(torch):
    """torch.__version__, read from the installed package where torch is not loaded (a NumPy-only run
    leaves it unloaded, so that no OpenMP pool of PyTorch's shares the cores with NumPy's OpenBLAS)."""
    if torch is not None:
        return torch.__version__
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def header(args, impl, torch, np):
    h = {"record": "header", "impl": impl, "bench": "cpu_gemm" if args.bench == "gemm" else "op_overhead",
         "date": utc_now(), "kiln_commit": tree_commit(), "command": " ".join(["python3"] + sys.argv),
         "device": "cpu", "device_name": cpu_name(),
         "threads": torch.get_num_threads() if impl == "torch" else args.threads,
         "torch": torch_version(torch), "numpy": np.__version__}
    if args.bench == "gemm":
        h.update(blas=numpy_blas(np) if impl == "numpy" else torch_blas(torch), reps=args.reps)
    else:
        h.update(iters=args.iters, samples=args.samples, warmup=args.warmup)
    h.update(timer="perf_counter", load_average=round(os.getloadavg()[0], 2))
    return h


def input_sets(n):
    # bench_cpu_gemm's rule: enough pairs to fill ~64 MB, 1 to 16.
    return int(min(max(64e6 / (4.0 * 2 * n * n), 1.0), 16.0))


def time_gemm(impl, n, reps, torch, np):
    """Seconds of each of `reps` products after two untimed ones, inputs rotating."""
    sets = input_sets(n)
    if impl == "torch":
        xs = [torch.randn(n, n) for _ in range(sets)]
        ws = [torch.randn(n, n) for _ in range(sets)]
        matmul = torch.matmul
    else:
        rng = np.random.default_rng(1234)
        xs = [rng.standard_normal((n, n), dtype=np.float32) for _ in range(sets)]
        ws = [rng.standard_normal((n, n), dtype=np.float32) for _ in range(sets)]
        matmul = np.matmul
    for _ in range(2):
        matmul(xs[0], ws[0])
    times = []
    for r in range(reps):
        x, w = xs[r % sets], ws[r % sets]
        t0 = time.perf_counter()
        y = matmul(x, w)
        times.append(time.perf_counter() - t0)
        del y
    return times, sets


def gemm_case(impl, n, times, sets):
    med = statistics.median(times)
    return {"record": "case", "impl": impl, "bench": "cpu_gemm", "case": f"square {n}", "dtype": "float32",
            "m": n, "n": n, "k": n, "ms_median": round(med * 1e3, 4), "ms_min": round(min(times) * 1e3, 4),
            "ms_max": round(max(times) * 1e3, 4), "gflops": round(2.0 * n * n * n / med * 1e-9, 2),
            "reps": len(times), "input_sets": sets}


def time_op(torch, name, numel, autograd, args):
    """Microseconds per iteration, one value a sample."""
    a, b = torch.randn(numel), torch.randn(numel)
    iters = range(args.iters)
    if not autograd:
        def sample():
            for _ in iters:
                y = a + b  # noqa: F841
    else:
        a.requires_grad_(True)
        b.requires_grad_(True)
        ones = torch.ones(numel)

        def sample():
            for _ in iters:
                y = a + b
                y.backward(ones)
                a.grad = None
                b.grad = None
    for _ in range(args.warmup):
        sample()
    us = []
    for _ in range(args.samples):
        t0 = time.perf_counter()
        sample()
        us.append(1e6 * (time.perf_counter() - t0) / args.iters)
    return us


def op_case(name, numel, autograd, us, args):
    return {"record": "case", "impl": "torch", "bench": "op_overhead", "case": name, "dtype": "float32",
            "numel": numel, "autograd": autograd, "us_median": round(statistics.median(us), 4),
            "us_min": round(min(us), 4), "us_max": round(max(us), 4), "iters": args.iters, "samples": args.samples}


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.threads:
        # Before the libraries load: NumPy's OpenBLAS and the OpenMP runtime read these only then.
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            os.environ[var] = str(args.threads)
    import numpy as np

    torch = None
    if "torch" in args.impl:
        import torch

        if args.threads:
            torch.set_num_threads(args.threads)
        torch.manual_seed(1234)
    lines = []
    table = sys.stdout if args.json else sys.stderr  # stdout carries the JSON lines without --json

    def emit(rec):
        lines.append(json.dumps(rec))
        if args.json:
            write_atomic(args.json, "".join(line + "\n" for line in lines))
        else:
            print(lines[-1], flush=True)

    if args.bench == "gemm":
        for impl in args.impl:
            h = header(args, impl, torch, np)
            emit(h)
            print(f"{'PyTorch ' + h['torch'] if impl == 'torch' else 'NumPy ' + np.__version__} CPU GEMM "
                  f"(float32, {impl}.matmul), {h['threads']} thread(s), median of {args.reps} runs", file=table)
            print(f"{'shape':<32} {'m':>6} {'n':>6} {'k':>6} {'ms':>10} {'GFLOP/s':>9}", file=table, flush=True)
            for n in args.sizes:
                times, sets = time_gemm(impl, n, args.reps, torch, np)
                rec = gemm_case(impl, n, times, sets)
                emit(rec)
                print(f"{rec['case']:<32} {n:>6} {n:>6} {n:>6} {rec['ms_median']:>10.3f} {rec['gflops']:>9.1f}",
                      file=table, flush=True)
    else:
        h = header(args, "torch", torch, np)
        emit(h)
        print(f"PyTorch {torch.__version__} op overhead (CPU, float32), {h['threads']} thread(s), median of "
              f"{args.samples} samples of {args.iters} iterations, commit {h['kiln_commit']}", file=table)
        print(f"{'case':<14} {'numel':>6} {'median us':>10} {'min us':>10} {'max us':>10}", file=table, flush=True)
        for name, numel, autograd in OP_CASES:
            us = time_op(torch, name, numel, autograd, args)
            rec = op_case(name, numel, autograd, us, args)
            emit(rec)
            print(f"{name:<14} {numel:>6} {rec['us_median']:>10.3f} {rec['us_min']:>10.3f} {rec['us_max']:>10.3f}",
                  file=table, flush=True)
    if args.json:
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

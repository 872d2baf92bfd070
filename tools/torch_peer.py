#!/usr/bin/env python3
"""PyTorch peer of bench/gpu_bench: the same cases, shapes and method (CUDA events around each run,
median of many after warm-up, inputs rotated over >= 4 sets that together exceed 4x L2, random
data), written as the same JSON lines with impl "torch", so tools/bench_compare.py can join them.

  usage: python3 tools/torch_peer.py [--json FILE] [--elements N] [--runs R] [--warmup W]
"""
import argparse
import datetime
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_compare import write_atomic  # noqa: E402


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def sets_for(input_bytes_per_set, l2_bytes):
    # As gpu_bench's Bench::sets_for: at least 4 sets, together at least 4x L2, at most 64.
    want = 4 * l2_bytes
    n = -(-want // max(input_bytes_per_set, 1))
    return min(max(n, 4), 64)


def random_on_gpu(shape, dtype):
    # Drawn in float32, then cast, as gpu_bench does.
    t = torch.randn(shape, dtype=torch.float32, device="cuda")
    return t if dtype == torch.float32 else t.to(dtype)


def make_cases(n):
    """(name, dtype, shape, bytes, input bytes per set, make(set) -> state, run(state))."""
    cases = []

    def copy_make(shape, dtype):
        return lambda: (random_on_gpu(shape, dtype), torch.empty(shape, dtype=dtype, device="cuda"))

    # The ceiling: a same-dtype contiguous device copy, which PyTorch does with cudaMemcpyAsync,
    # as gpu_bench's "copy" does. Bytes read + written.
    cases.append(("copy", torch.float32, [n], 2 * 4 * n, 4 * n, copy_make([n], torch.float32),
                  lambda s: s[1].copy_(s[0])))
    # gpu_bench's "copy_" is kiln's own copy kernel; PyTorch's copy_ is the same memcpy again.
    cases.append(("copy_", torch.float32, [n], 2 * 4 * n, 4 * n, copy_make([n], torch.float32),
                  lambda s: s[1].copy_(s[0])))
    for dtype in (torch.float32, torch.bfloat16):
        es = torch.tensor([], dtype=dtype).element_size()
        cases.append(("add", dtype, [n], 3 * es * n, 2 * es * n,
                      (lambda d: lambda: (random_on_gpu([n], d), random_on_gpu([n], d)))(dtype),
                      lambda s: torch.add(s[0], s[1])))
        cases.append(("gelu", dtype, [n], 2 * es * n, es * n,
                      (lambda d: lambda: (random_on_gpu([n], d),))(dtype),
                      lambda s: torch.nn.functional.gelu(s[0])))
        cases.append(("sum", dtype, [n], es * n + es, es * n,
                      (lambda d: lambda: (random_on_gpu([n], d),))(dtype),
                      lambda s: s[0].sum()))
        rows, cols = n // 1024, 1024
        cases.append(("sum_rows", dtype, [rows, cols], es * (rows * cols + rows), es * rows * cols,
                      (lambda d: lambda: (random_on_gpu([rows, cols], d),))(dtype),
                      lambda s: s[0].sum(dim=1)))
        # Row-wise ops of a transformer: rows of 1024, one read and one write per element (plus the
        # layer_norm parameters, read once).
        cases.append(("softmax", dtype, [rows, cols], 2 * es * rows * cols, es * rows * cols,
                      (lambda d: lambda: (random_on_gpu([rows, cols], d),))(dtype),
                      lambda s: torch.softmax(s[0], dim=-1)))
        cases.append(("layer_norm", dtype, [rows, cols], 2 * es * rows * cols + 2 * 4 * cols, es * rows * cols,
                      (lambda d: lambda: (random_on_gpu([rows, cols], d),
                                          torch.ones(cols, device="cuda"), torch.zeros(cols, device="cuda")))(dtype),
                      lambda s: torch.nn.functional.layer_norm(s[0], (s[0].shape[-1],),
                                                               s[1].to(s[0].dtype), s[2].to(s[0].dtype))))
    return cases


def use_precision(tf32):
    """As gpu_bench's use_precision: TF32 for matmul and cuDNN on or off, cuDNN benchmark mode on."""
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True


def make_compute_cases():
    """As gpu_bench's make_compute_cases: (name, dtype, shape, bytes, input bytes per set, make, run,
    flops, precision, is_ceiling). The 8192^3 matmul of each precision comes first and is its ceiling."""
    cases = []
    for precision, dtype, tf32 in (("bf16", torch.bfloat16, False), ("tf32", torch.float32, True)):
        es = torch.tensor([], dtype=dtype).element_size()
        for n in (8192, 4096):
            run = (lambda t: lambda s: (use_precision(t), torch.matmul(s[0], s[1])))(tf32)
            cases.append(("matmul_tf32" if tf32 else "matmul", dtype, [n, n, n], 3 * es * n * n, 2 * es * n * n,
                          (lambda d, m: lambda: (random_on_gpu([m, m], d), random_on_gpu([m, m], d)))(dtype, n),
                          run, 2.0 * n ** 3, precision, n == 8192))
    N, C, H, W, K, R = 64, 128, 56, 56, 128, 3
    for name, precision, dtype, tf32, channels_last in (("conv2d_nhwc", "bf16", torch.bfloat16, False, True),
                                                          ("conv2d_nchw", "bf16", torch.bfloat16, False, False),
                                                          ("conv2d_nchw", "tf32", torch.float32, True, False)):
        es = torch.tensor([], dtype=dtype).element_size()
        fmt = torch.channels_last if channels_last else torch.contiguous_format

        def make(d=dtype, f=fmt):
            return (random_on_gpu([N, C, H, W], d).contiguous(memory_format=f),
                    random_on_gpu([K, C, R, R], d).contiguous(memory_format=f))

        run = (lambda t: lambda s: (use_precision(t), torch.nn.functional.conv2d(s[0], s[1], None, 1, 1)))(tf32)
        out_elems = N * K * H * W
        cases.append((name, dtype, [N, C, H, W], es * (N * C * H * W + K * C * R * R + out_elems),
                      es * (N * C * H * W + K * C * R * R), make, run, 2.0 * out_elems * C * R * R, precision, False))
    return cases


def print_header(compute):
    if compute:
        print(f"\n{'case':<12} {'dtype':<9} {'shape':<18} {'sets':>5} {'median ms':>10} {'TFLOP/s':>9} "
              f"{'% of matmul':>12}")
    else:
        print(f"{'case':<10} {'dtype':<9} {'shape':<14} {'sets':>5} {'MB moved':>10} {'median ms':>10} {'GB/s':>9} "
              f"{'% of copy':>10}")


def time_case(case, args, l2_bytes, starts, ends):
    name, dtype, shape, nbytes, per_set, make, run = case[:7]
    sets = sets_for(per_set, l2_bytes)
    states = [make() for _ in range(sets)]
    for i in range(args.warmup):
        run(states[i % sets])
    torch.cuda.synchronize()
    for i in range(args.runs):
        starts[i].record()
        run(states[i % sets])
        ends[i].record()
    torch.cuda.synchronize()
    ms = statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))
    del states
    return sets, ms


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", help="write JSON lines here")
    p.add_argument("--elements", type=int, default=1 << 26)
    p.add_argument("--runs", type=int, default=100)
    p.add_argument("--warmup", type=int, default=10)
    args = p.parse_args()
    if args.elements < 1024 or args.elements % 1024:
        p.error("--elements must be a positive multiple of 1024")
    if not torch.cuda.is_available():
        print("torch_peer: torch.cuda.is_available() is false", file=sys.stderr)
        return 1

    props = torch.cuda.get_device_properties(0)
    gpu = props.name
    l2_bytes = int(getattr(props, "L2_cache_size", 50 << 20))
    command = " ".join(["python3"] + sys.argv)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(args.runs)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(args.runs)]

    print(f"PyTorch {torch.__version__} peer on {gpu} (L2 {l2_bytes / (1 << 20):.0f} MiB), {args.elements} elements, "
          f"median of {args.runs} runs after {args.warmup} warm-up, {utc_now()}")
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark)
    records, copy_gbps, matmul_tflops = [], 0.0, {}
    cases = make_cases(args.elements) + make_compute_cases()
    for i, case in enumerate(cases):
        name, dtype, shape, nbytes = case[0], case[1], case[2], case[3]
        # Memory-bound cases have no flops; compute-bound ones name their precision and ceiling.
        flops, precision, is_ceiling = case[7:10] if len(case) > 7 else (0, None, False)
        if i == 0 or (flops and len(cases[i - 1]) <= 7):
            print_header(bool(flops))
        dname = str(dtype).replace("torch.", "")
        rec = {"impl": "torch", "case": name, "dtype": dname, "shape": shape}
        try:
            sets, ms = time_case(case, args, l2_bytes, starts, ends)
            gbps = nbytes / (ms * 1e-3) / 1e9
            rec.update(bytes=nbytes, median_ms=round(ms, 6), gbps=round(gbps, 2), pct_of_copy=0.0)
            if flops:
                tflops = flops / (ms * 1e-3) / 1e12
                if is_ceiling:
                    matmul_tflops[precision] = tflops
                pct = 100.0 * tflops / matmul_tflops[precision] if matmul_tflops.get(precision) else 0.0
                rec.update(flops=flops, tflops=round(tflops, 2), pct_of_matmul=round(pct, 2), precision=precision)
                print(f"{name:<12} {dname:<9} {json.dumps(shape):<18} {sets:>5} {ms:>10.4f} {tflops:>9.1f} {pct:>11.1f}%")
            else:
                if name == "copy":
                    copy_gbps = gbps
                pct = 100.0 * gbps / copy_gbps if copy_gbps else 0.0
                rec.update(pct_of_copy=round(pct, 2))
                print(f"{name:<10} {dname:<9} {json.dumps(shape):<14} {sets:>5} {nbytes / 1e6:>10.1f} {ms:>10.4f} "
                      f"{gbps:>9.1f} {pct:>9.1f}%")
        except Exception as e:  # report and go on: one failing case must not hide the others
            sets = 0
            rec["error"] = f"{type(e).__name__}: {e}"
            width = (12, 18) if flops else (10, 14)
            print(f"{name:<{width[0]}} {dname:<9} {json.dumps(shape):<{width[1]}}  n/a: {rec['error']}")
        # A case may have set its own precision.
        (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark) = saved
        torch.cuda.empty_cache()
        rec.update(runs=args.runs, warmup=args.warmup, sets=sets, gpu=gpu, date=utc_now(), command=command,
                   torch=torch.__version__)
        records.append(rec)
        sys.stdout.flush()

    if args.json:
        write_atomic(args.json, "".join(json.dumps(rec) + "\n" for rec in records))
        print(f"wrote {args.json}")
    return 0 if records and "error" not in records[0] else 1


if __name__ == "__main__":
    sys.exit(main())

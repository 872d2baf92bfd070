#!/usr/bin/env python3
"""PyTorch peer of bench/gpu_bench: times exactly the cases of gpu_bench's case list (written by
`bench_cases --json FILE` or `gpu_bench --list-cases --json FILE` from the op table's rows) with the
same method (CUDA events around each run, median of many after warm-up, inputs rotated over >= 4
sets that together exceed 4x L2, random data) and writes the same JSON lines with impl "torch", so
tools/bench_compare.py can join them. Each case names a kiln op; OPS below maps it to a torch call,
and a case whose op has no mapping fails loudly. --check-cases checks that without PyTorch (CI).

  usage: python3 tools/torch_peer.py --cases FILE [--json OUT] [--runs R] [--warmup W]
         python3 tools/torch_peer.py --check-cases FILE
"""
import argparse
import datetime
import json
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_compare import write_atomic  # noqa: E402

torch = None  # imported by load_torch() when timing: checking a case list needs no PyTorch


def load_torch():
    global torch
    import torch as t
    torch = t


# --- the kiln op -> torch call mapping -------------------------------------------------------------


class Op:
    """A torch call for a kiln op: how many inputs it takes, which args it needs or accepts, and
    call(inputs, args) -> a function that runs it once (made once per rotation set, untimed).
    `variants` names other ways PyTorch runs the same call, each a function returning the context
    manager to time it under (attention's backends); each is timed too, beside the default."""

    def __init__(self, inputs, call, required=(), optional=(), variants=None):
        self.inputs, self.call, self.required, self.optional = inputs, call, set(required), set(optional)
        self.variants = variants or {}


def _copy(inputs, args):
    dst, src = inputs
    return lambda: dst.copy_(src)


def _sum(inputs, args):
    (x,) = inputs
    if "dim" in args:
        dim = tuple(args["dim"])
        return lambda: x.sum(dim=dim)
    return lambda: x.sum()


def _layer_norm(inputs, args):
    x, w = inputs
    # A zero bias, and the parameters cast to the input's dtype inside the timed call: what this
    # peer has always timed, so its results stay comparable with those in bench/RESULTS.md.
    b = torch.zeros_like(w)
    shape = tuple(args["normalized_shape"])
    return lambda: torch.nn.functional.layer_norm(x, shape, w.to(x.dtype), b.to(x.dtype))


def _sdpa_causal(inputs, args):
    q, k, v = inputs
    return lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def _sdpa_causal_fwd_bwd(inputs, args):
    # Fresh leaves once per rotation set; each timed call drops the last gradients (kiln's case makes
    # new leaves per call, so neither side accumulates).
    q, k, v = (t.detach().requires_grad_(True) for t in inputs[:3])
    grad = inputs[3]

    def run():
        q.grad = k.grad = v.grad = None
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).backward(grad)
    return run


def _sdpa_backend(name):
    # PyTorch picks a backend for scaled_dot_product_attention (cuDNN's on an H100 for these shapes);
    # its own flash-attention kernel is the first goal kiln's tensor-core kernels are measured against.
    def enter():
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel(getattr(SDPBackend, name))
    return enter


SDPA_VARIANTS = {"flash": _sdpa_backend("FLASH_ATTENTION")}


def _layer_norm_fwd_bwd(inputs, args):
    # Leaves in the input's dtype, made once per rotation set; each call drops the last gradients.
    x, w, b = (t.detach().to(inputs[0].dtype).requires_grad_(True) for t in inputs[:3])
    grad, shape = inputs[3], tuple(args["normalized_shape"])

    def run():
        x.grad = w.grad = b.grad = None
        torch.nn.functional.layer_norm(x, shape, w, b).backward(grad)
    return run


def _batch_norm_add_relu_fwd_bwd(inputs, args):
    # kiln's inputs: x, the residual z, weight, bias, the output's gradient. Eager PyTorch runs the
    # block's end as three ops (batch norm, add, ReLU), forward and backward; leaves made once per
    # rotation set, each call drops the last gradients.
    x, z, w, b = (t.detach().requires_grad_(True) for t in inputs[:4])
    grad = inputs[4]

    def run():
        x.grad = z.grad = w.grad = b.grad = None
        torch.relu(torch.nn.functional.batch_norm(x, None, None, w, b, training=True) + z).backward(grad)
    return run


def _cross_entropy_fwd_bwd(inputs, args):
    logits, target = inputs[0].detach().requires_grad_(True), inputs[1]

    def run():
        logits.grad = None
        torch.nn.functional.cross_entropy(logits, target).backward()
    return run


def _embedding_fwd_bwd(inputs, args):
    # kiln's inputs: the table, the output's gradient, the token ids.
    weight, grad, ids = inputs[0].detach().requires_grad_(True), inputs[1], inputs[2]

    def run():
        weight.grad = None
        torch.nn.functional.embedding(ids, weight).backward(grad)
    return run


def _gelu_tanh_chain(inputs, args):
    # The nine elementwise ops of kiln's case, in the same order: GELU's tanh form unfused.
    (x,) = inputs
    c = math.sqrt(2.0 / math.pi)
    return lambda: x * (torch.tanh((x + x * x * x * 0.044715) * c) + 1.0) * 0.5


def _adamw(inputs, args):
    # The fused AdamW kernel torch.optim.AdamW(fused=True) launches, on the same lists: lr 1, step 1
    # (the optimizer advances the step before the kernel), kiln's betas, eps and weight decay.
    p, g, m, v, _, step = inputs
    return lambda: torch._fused_adamw_([p], [g], [m], [v], [], [step], lr=1.0, beta1=0.9, beta2=0.95,
                                       weight_decay=0.1, eps=1e-8, amsgrad=False, maximize=False)


def _conv2d(inputs, args):
    x, w = inputs
    stride, padding = tuple(args.get("stride", (1, 1))), tuple(args.get("padding", (0, 0)))
    return lambda: torch.nn.functional.conv2d(x, w, None, stride, padding)


OPS = {
    # gpu_bench's ceiling: a same-dtype contiguous copy_, which PyTorch does with cudaMemcpyAsync.
    "memcpy": Op(2, _copy),
    # kiln's own copy kernel in gpu_bench; PyTorch's copy_ is the same memcpy again.
    "copy_": Op(2, _copy),
    "add": Op(2, lambda i, a: (lambda: torch.add(i[0], i[1]))),
    "gelu": Op(1, lambda i, a: (lambda: torch.nn.functional.gelu(i[0], approximate=a.get("approximate", "none"))),
               optional=("approximate",)),
    "sum": Op(1, _sum, optional=("dim",)),
    "softmax": Op(1, lambda i, a: (lambda: torch.softmax(i[0], dim=a["dim"])), required=("dim",)),
    "layer_norm": Op(2, _layer_norm, required=("normalized_shape",)),
    "layer_norm_fwd_bwd": Op(4, _layer_norm_fwd_bwd, required=("normalized_shape",)),
    "cross_entropy": Op(2, lambda i, a: (lambda: torch.nn.functional.cross_entropy(i[0], i[1]))),
    "cross_entropy_fwd_bwd": Op(2, _cross_entropy_fwd_bwd),
    "batch_norm_add_relu_fwd_bwd": Op(5, _batch_norm_add_relu_fwd_bwd),
    "embedding_fwd_bwd": Op(3, _embedding_fwd_bwd),
    "gelu_tanh_chain": Op(1, _gelu_tanh_chain),
    "adamw": Op(6, _adamw),
    "matmul": Op(2, lambda i, a: (lambda: torch.matmul(i[0], i[1]))),
    # PyTorch eager runs the GEMM, then the bias (in the GEMM's addmm), then GELU as its own kernel.
    "linear_gelu": Op(3, lambda i, a: (lambda: torch.nn.functional.gelu(torch.nn.functional.linear(i[0], i[1], i[2]),
                                                                          approximate="tanh"))),
    "conv2d": Op(2, _conv2d, optional=("stride", "padding")),
    "sdpa_causal": Op(3, _sdpa_causal, variants=SDPA_VARIANTS),
    "sdpa_causal_fwd_bwd": Op(4, _sdpa_causal_fwd_bwd, variants=SDPA_VARIANTS),
}

DTYPES = ("float32", "bfloat16", "float16", "float64", "int64")
FIELDS = ("case", "dtype", "shape", "bytes", "flops", "precision", "tf32", "ceiling", "op", "args", "inputs",
          "set_bytes")


def load_cases(path):
    cases = []
    with open(path) as f:
        for line_no, line in enumerate(f, 1):
            if line.strip():
                try:
                    cases.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise SystemExit(f"torch_peer: {path}:{line_no}: not JSON ({e})")
    return cases


def check_cases(cases):
    """Problems that would keep this peer from timing the listed cases as gpu_bench does."""
    problems, ceilings = [], set()
    if not cases:
        problems.append("the case list is empty")
    for n, c in enumerate(cases, 1):
        where = f"case {n} ({c.get('case')}, {c.get('dtype')}, {c.get('shape')})"
        missing = [k for k in FIELDS if k not in c]
        if missing:
            problems.append(f"{where}: no {', '.join(missing)}")
            continue
        op = OPS.get(c["op"])
        if op is None:
            problems.append(f"{where}: no torch mapping for kiln op \"{c['op']}\": add one to OPS in tools/torch_peer.py")
            continue
        if len(c["inputs"]) != op.inputs:
            problems.append(f"{where}: op {c['op']} takes {op.inputs} inputs, the case lists {len(c['inputs'])}")
        args = set(c["args"])
        if op.required - args or args - op.required - op.optional:
            problems.append(f"{where}: args {sorted(args)} for op {c['op']}, which needs {sorted(op.required)} "
                            f"and accepts {sorted(op.optional)}")
        for i in [c] + c["inputs"]:
            if i.get("dtype") not in DTYPES:
                problems.append(f"{where}: dtype {i.get('dtype')} has no torch dtype here")
        for i in c["inputs"]:
            if i.get("fill") not in ("normal", "ones", "empty", "tokens") or i.get("format") not in (
                    "contiguous", "channels_last"):
                problems.append(f"{where}: input {i} has an unknown fill or format")
            elif i["fill"] == "tokens" and (i["dtype"] != "int64" or not isinstance(i.get("upper"), int)
                                            or i["upper"] < 1):
                problems.append(f"{where}: token ids {i} need dtype int64 and a positive upper bound")
        if bool(c["flops"]) != (c["precision"] is not None) or c["precision"] not in (None, "bf16", "tf32"):
            problems.append(f"{where}: flops {c['flops']} and precision {c['precision']} do not go together")
        if c["ceiling"]:
            ceilings.add(c["precision"])
        elif c["precision"] is not None and c["precision"] not in ceilings:
            problems.append(f"{where}: no {c['precision']} ceiling before it")
    if cases and "op" in cases[0] and cases[0]["op"] != "memcpy":
        problems.append("the first case is not the memcpy ceiling")
    return problems


# --- timing ----------------------------------------------------------------------------------------


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


def make_input(spec):
    dtype = getattr(torch, spec["dtype"])
    if spec["fill"] == "normal":
        t = random_on_gpu(spec["shape"], dtype)
    elif spec["fill"] == "ones":
        t = torch.ones(spec["shape"], dtype=dtype, device="cuda")
    elif spec["fill"] == "tokens":
        t = torch.randint(0, spec["upper"], spec["shape"], dtype=dtype, device="cuda")
    else:
        t = torch.empty(spec["shape"], dtype=dtype, device="cuda")
    return t.contiguous(memory_format=torch.channels_last) if spec["format"] == "channels_last" else t


def use_precision(tf32):
    """As gpu_bench's use_precision: TF32 for matmul and cuDNN on or off, cuDNN benchmark mode on."""
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True


def make_run(case):
    """One input set of the case and the function that runs it once (under the case's math switches
    when it is compute-bound, set inside the timed run as gpu_bench does)."""
    call = OPS[case["op"]].call([make_input(i) for i in case["inputs"]], case["args"])
    if case["precision"] is None:
        return call
    tf32 = case["tf32"]
    return lambda: (use_precision(tf32), call())


def under(context, run):
    """run() inside the context manager `context()` (entered on each call, as the math switches are)."""
    def wrapped():
        with context():
            return run()
    return wrapped


def time_case(case, args, l2_bytes, starts, ends, context=None):
    sets = sets_for(case["set_bytes"], l2_bytes)
    runs = [make_run(case) for _ in range(sets)]
    if context is not None:
        runs = [under(context, r) for r in runs]
    for i in range(args.warmup):
        runs[i % sets]()
    torch.cuda.synchronize()
    for i in range(args.runs):
        starts[i].record()
        runs[i % sets]()
        ends[i].record()
    torch.cuda.synchronize()
    ms = statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))
    del runs
    return sets, ms


def print_header(compute):
    if compute:
        print(f"\n{'case':<12} {'dtype':<9} {'shape':<18} {'sets':>5} {'median ms':>10} {'TFLOP/s':>9} "
              f"{'% of matmul':>12}")
    else:
        print(f"{'case':<10} {'dtype':<9} {'shape':<14} {'sets':>5} {'MB moved':>10} {'median ms':>10} {'GB/s':>9} "
              f"{'% of copy':>10}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", help="time the cases of this case list (JSON lines)")
    p.add_argument("--check-cases", metavar="FILE", help="check that every case of this list has a torch mapping")
    p.add_argument("--json", help="write JSON lines here")
    p.add_argument("--runs", type=int, default=100)
    p.add_argument("--warmup", type=int, default=10)
    args = p.parse_args()
    if bool(args.cases) == bool(args.check_cases):
        p.error("give either --cases FILE or --check-cases FILE")
    if args.runs < 1 or args.warmup < 0:
        p.error("--runs must be >= 1 and --warmup >= 0")
    cases = load_cases(args.cases or args.check_cases)
    problems = check_cases(cases)
    for problem in problems:
        print(f"torch_peer: {problem}", file=sys.stderr)
    if problems:
        return 1
    if args.check_cases:
        print(f"torch_peer: {len(cases)} cases, each with a torch mapping ({', '.join(sorted({c['op'] for c in cases}))})")
        return 0

    load_torch()
    if not torch.cuda.is_available():
        print("torch_peer: torch.cuda.is_available() is false", file=sys.stderr)
        return 1
    props = torch.cuda.get_device_properties(0)
    gpu = props.name
    l2_bytes = int(getattr(props, "L2_cache_size", 50 << 20))
    command = " ".join(["python3"] + sys.argv)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(args.runs)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(args.runs)]

    print(f"PyTorch {torch.__version__} peer on {gpu} (L2 {l2_bytes / (1 << 20):.0f} MiB), {len(cases)} cases from "
          f"{args.cases}, median of {args.runs} runs after {args.warmup} warm-up, {utc_now()}")
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark)
    records, copy_gbps, matmul_tflops = [], 0.0, {}
    for i, case in enumerate(cases):
        name, dname, shape, nbytes = case["case"], case["dtype"], case["shape"], case["bytes"]
        # Memory-bound cases have no flops; compute-bound ones name their precision and ceiling.
        flops, precision, is_ceiling = float(case["flops"]), case["precision"], case["ceiling"]
        if i == 0 or (flops and not cases[i - 1]["flops"]):
            print_header(bool(flops))
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
                if case["op"] == "memcpy":
                    copy_gbps = gbps
                pct = 100.0 * gbps / copy_gbps if copy_gbps else 0.0
                rec.update(pct_of_copy=round(pct, 2))
                print(f"{name:<10} {dname:<9} {json.dumps(shape):<14} {sets:>5} {nbytes / 1e6:>10.1f} {ms:>10.4f} "
                      f"{gbps:>9.1f} {pct:>9.1f}%")
        except Exception as e:  # report and go on: one failing case must not hide the others
            sets = 0
            rec["error"] = f"{type(e).__name__}: {e}"
            if flops:  # so bench_compare.py still files it as compute-bound
                rec.update(flops=flops, precision=precision)
            width = (12, 18) if flops else (10, 14)
            print(f"{name:<{width[0]}} {dname:<9} {json.dumps(shape):<{width[1]}}  n/a: {rec['error']}")
        # The same case under each of PyTorch's other ways to run it: {"variants": {name: {...}}}.
        variants = {}
        for vname, context in OPS[case["op"]].variants.items():
            try:
                _, vms = time_case(case, args, l2_bytes, starts, ends, context)
                variants[vname] = {"median_ms": round(vms, 6)}
                if flops:
                    variants[vname]["tflops"] = round(flops / (vms * 1e-3) / 1e12, 2)
                print(f"  {vname}: {vms:.4f} ms" + (f", {variants[vname]['tflops']:.1f} TFLOP/s" if flops else ""))
            except Exception as e:
                variants[vname] = {"error": f"{type(e).__name__}: {e}"}
                print(f"  {vname}: n/a: {variants[vname]['error']}")
        if variants:
            rec["variants"] = variants
        # A case may have set its own precision.
        (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark) = saved
        torch.cuda.empty_cache()
        rec.update(runs=args.runs, warmup=args.warmup, sets=sets, gpu=gpu, date=utc_now(), command=command,
                   torch=torch.__version__)
        records.append(rec)
        # After every case, as gpu_bench does: a run stopped by its time limit keeps what it measured.
        if args.json:
            write_atomic(args.json, "".join(json.dumps(r) + "\n" for r in records))
        sys.stdout.flush()

    if args.json:
        print(f"wrote {args.json}")
    return 0 if records and "error" not in records[0] else 1


if __name__ == "__main__":
    sys.exit(main())

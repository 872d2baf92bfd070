#!/usr/bin/env python3
"""kiln's CPU training speed beside PyTorch's on the same cores, in one command (issue 17): runs
kiln's benchmarks and their PyTorch (and NumPy) peers in rounds, collects every JSON line they write
into OUT.jsonl and renders OUT.md, one table of every row and one of each round's values.

Rows, and the programs that time them (kiln's binaries from --build, the peers under --python):
  GEMM float32 512^3, 1024^3, 2048^3   bench_cpu_gemm --sizes            GFLOP/s; vs PyTorch and NumPy
                                       tools/cpu_bench_peer.py --bench gemm (torch, then numpy, each
                                       in its own process)
  tiny add, 1 and 4096 elements,       bench_op_overhead                 microseconds per op
  forward / forward + backward         tools/cpu_bench_peer.py --bench op_overhead
  tiny GPT step (2 layers, 64 wide,    bench_train_step --workload gpt   milliseconds per step
  4 heads, batch 16, block 64)         tools/train_step_peer.py
  char GPT step (6 layers, 384 wide,   the same, nanoGPT's Shakespeare-character shape
  6 heads, batch 8, block 256)
  small CNN step, batch 64 and 256     bench_train_step --workload cnn (train_cnn's SmallCNN, 1x28x28)
  char GPT: the AdamW update alone     bench_train_step --time optimizer  milliseconds per update
                                       tools/train_step_peer.py --time optimizer (the step's optimizer,
                                       PyTorch's default AdamW; on the gradients of one backward)

Every program runs in float32 (--mode fp32 for the steps) on --threads threads: KILN_NUM_THREADS for
kiln, --threads (torch.set_num_threads, OMP/MKL/OpenBLAS thread counts) for the peers. A round runs
each group's kiln program, then its peers, then the next group, so the implementations alternate
and a slow spell of the machine falls on both; each cell of the table is the median over the rounds
of each run's own median. "kiln vs PyTorch" is PyTorch's time / kiln's (GEMM: kiln's GFLOP/s /
PyTorch's): 1.00 or more means kiln is at least as fast. Numbers in the tables come only from the
records. The step counts below aim at 10-15 minutes for 3 rounds on a 2-core machine, most of it the
char GPT's steps (about a second each); a machine busy with other work takes longer, and its
numbers say less (the table gives the load average as the runs started).

Records must name a real commit: the command refuses a kiln tree with uncommitted changes, or
binaries built from another commit than the tree's, unless --allow-dirty (a trial run).

  usage: python3 tools/cpu_bench.py [--build build/cpu] [--python python3] [--threads T] [--rounds R]
                                    [--out bench/records/cpu_vs_pytorch_DATE] [--allow-dirty]
         python3 tools/cpu_bench.py --render-only FILE.jsonl [FILE...] [--out FILE.md]
         python3 tools/cpu_bench.py --self-test
--render-only renders records already written (this command's OUT.jsonl, or the JSON lines of the
programs above); --self-test renders a fixture it writes and checks the table (no PyTorch needed).
"""
import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_compare import json_lines, write_atomic  # noqa: E402
from train_step_peer import tree_commit, utc_now  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GEMM_SIZES = (512, 1024, 2048)
GEMM_REPS = 21
OP_ITERS, OP_SAMPLES, OP_WARMUP = 1000, 50, 5
# The training-step groups: (name, bench_train_step / train_step_peer.py flags, timed steps, warm-up).
# Steps: enough that a step's median is steady, few where a step is long (the char GPT's ~1 s).
TRAIN_GROUPS = (
    ("tiny GPT", ["--workload", "gpt", "--batch", "16", "--n-layer", "2", "--n-head", "4", "--n-embd", "64",
                  "--block-size", "64"], 300, 10),
    ("char GPT", ["--workload", "gpt", "--batch", "8", "--n-layer", "6", "--n-head", "6", "--n-embd", "384",
                  "--block-size", "256"], 30, 3),
    ("small CNN, batch 64", ["--workload", "cnn", "--batch", "64"], 100, 5),
    ("small CNN, batch 256", ["--workload", "cnn", "--batch", "256"], 50, 3),
    ("char GPT, AdamW alone", ["--workload", "gpt", "--batch", "8", "--n-layer", "6", "--n-head", "6", "--n-embd",
                               "384", "--block-size", "256", "--time", "optimizer"], 50, 2),
)
# Named GPT shapes, for the rows' labels: (n_layer, n_head, n_embd, block_size, batch) -> name.
GPT_NAMES = {(2, 4, 64, 64, 16): "tiny GPT", (6, 6, 384, 256, 8): "char GPT"}
IMPLS = (("kiln", "kiln"), ("torch", "PyTorch"), ("numpy", "NumPy"))
OP_ORDER = (("add", 1), ("add_backward", 1), ("add", 4096), ("add_backward", 4096))


def fail(message, code=2):
    print(f"cpu_bench: {message}", file=sys.stderr)
    return code


# --- records -----------------------------------------------------------------------------------


def load(paths):
    """(suite records, [(header, [case records])]) in file order; a case joins the run whose header
    came last, which must be of the same impl."""
    suites, runs = [], []
    for path in paths:
        for line_no, rec in json_lines(path, "cpu_bench"):
            kind = rec.get("record") if isinstance(rec, dict) else None
            if kind == "suite":
                suites.append(rec)
            elif kind == "header":
                # bench_train_step's and train_step_peer.py's headers name no bench.
                runs.append((dict(rec, bench=rec.get("bench") or "train_step"), []))
            elif kind == "case":
                if not runs or runs[-1][0].get("impl") != rec.get("impl"):
                    raise SystemExit(f"cpu_bench: {path}:{line_no}: a {rec.get('impl')} case without its "
                                     "program's header before it")
                runs[-1][1].append(rec)
            else:
                raise SystemExit(f"cpu_bench: {path}:{line_no}: not a suite, header or case record")
    return suites, runs


def canonical(value):
    """JSON-equal values as one key: 0 and 0.0 alike (kiln writes "%g", Python 0.0)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: canonical(v) for k, v in value.items()}
    return value


def row_of(bench, c):
    """(sort key, label, unit, value field, higher is better) of a case record."""
    if bench == "cpu_gemm":
        m, n, k = c["m"], c["n"], c["k"]
        shape = f"{n}³" if m == n == k else f"[{m},{k}]@[{k},{n}]"
        return (0, m * n * k, m, n, k), f"GEMM {c.get('dtype', 'float32')} {shape}", "GFLOP/s", "gflops", True
    if bench == "op_overhead":
        name, numel = c["case"], c["numel"]
        order = OP_ORDER.index((name, numel)) if (name, numel) in OP_ORDER else len(OP_ORDER)
        what = "forward + backward" if c.get("autograd") else "forward"
        elements = "1 element" if numel == 1 else f"{numel} elements"
        return (1, order, name, numel), f"tiny add, {elements}: {what}", "µs per op", "us_median", False
    shape = canonical(c.get("shape") or {})
    mode = "" if c.get("mode") == "fp32" else f" [{c.get('mode')}]"
    key = (c.get("workload"), json.dumps(shape, sort_keys=True), c.get("batch"), c.get("mode"))
    if c.get("workload") == "gpt":
        dims = (shape.get("n_layer"), shape.get("n_head"), shape.get("n_embd"), shape.get("block_size"))
        name = GPT_NAMES.get(dims + (c.get("batch"),), "GPT")
    else:
        name = "small CNN" if c.get("workload") == "cnn" else c.get("workload")
    if c.get("timed", "step") == "optimizer":  # bench_train_step --time optimizer: the update alone
        label = f"{name}: the AdamW update alone ({c.get('parameters', 0) / 1e6:.1f}M parameters){mode}"
        return (3,) + key, label, "ms per update", "step_ms_median", False
    if c.get("workload") == "gpt":
        layers = f"{dims[0]} layer" + ("" if dims[0] == 1 else "s")
        label = (f"{name} step ({layers}, {dims[2]} wide, {dims[1]} heads, batch {c.get('batch')}, "
                 f"block {dims[3]}){mode}")
    elif c.get("workload") == "cnn":
        side = shape.get("image_size")
        label = f"{name} step, batch {c.get('batch')} ({shape.get('in_channels')}x{side}x{side}){mode}"
    else:
        side = shape.get("image_size")
        label = (f"{name} step, batch {c.get('batch')} ({shape.get('in_channels')}x{side}x{side}, "
                 f"widths {shape.get('widths')}){mode}")
    return (2,) + key, label, "ms per step", "step_ms_median", False


def collect(runs):
    """{row key: {"label", "unit", "field", "higher", "values": {impl: [each run's value]},
    "errors": [...], "parameters": {impl: set}}}, in first-seen order."""
    rows = {}
    for header, cases in runs:
        impl = header.get("impl")
        for c in cases:
            key, label, unit, field, higher = row_of(header["bench"], c)
            r = rows.setdefault(key, {"label": label, "unit": unit, "field": field, "higher": higher,
                                      "values": {}, "errors": [], "parameters": {}})
            if "error" in c:
                r["errors"].append(f"{impl}: {c['error']}")
                continue
            r["values"].setdefault(impl, []).append(c[field])
            if "parameters" in c:
                r["parameters"].setdefault(impl, set()).add(c["parameters"])
    return rows


def median_of(values):
    return statistics.median(values) if values else None


def speed_ratio(row, other):
    """kiln's speed relative to `other`'s (>= 1: kiln at least as fast), or None."""
    k, o = median_of(row["values"].get("kiln", [])), median_of(row["values"].get(other, []))
    if k is None or o is None or k <= 0 or o <= 0:
        return None
    return k / o if row["higher"] else o / k


def number(v, unit):
    if v is None:
        return "n/a"
    if unit == "µs per op":
        return f"{v:.2f}"
    return f"{v:.1f}" if v >= 10 else f"{v:.2f}"


# --- the markdown ------------------------------------------------------------------------------


def distinct(values):
    out = []
    for v in values:
        if v not in (None, "") and v not in out:
            out.append(v)
    return out


def render(suites, runs):
    headers = [h for h, _ in runs]
    by_impl = {impl: [h for h in headers if h.get("impl") == impl] for impl, _ in IMPLS}
    suite = suites[-1] if suites else {}
    cpus = distinct(h.get("device_name") for h in headers)
    threads = distinct(h.get("threads") for h in headers)
    date = (suite.get("date") or (headers[0].get("date") if headers else None) or "?")[:10]
    thread_text = ", ".join(str(t) for t in threads) or "?"
    lines = [f"### kiln and PyTorch on the CPU, {date}, {', '.join(cpus) or '?'}, {thread_text} thread(s)", ""]
    if len(cpus) > 1:
        lines += [f"**Different CPUs in one table ({', '.join(cpus)}): the ratios below compare nothing.**", ""]
    if len(threads) > 1:
        lines += [f"**Different thread counts ({thread_text}): the ratios below compare unlike runs.**", ""]
    kiln_commits = distinct(h.get("kiln_commit") for h in by_impl["kiln"])
    tree_commits = distinct(h.get("kiln_commit") for h in by_impl["torch"] + by_impl["numpy"])
    # Dirty or unknown, binaries of several commits, or a tree that moved away from the binaries' commit.
    mixed = len(kiln_commits) > 1 or bool(set(tree_commits) - set(kiln_commits))
    if mixed or any(str(c).endswith("-dirty") or c == "unknown" for c in kiln_commits + tree_commits):
        tree = f"; the peers' tree {', '.join(tree_commits)}" if tree_commits else ""
        lines += ["**A trial run: the binaries or the tree were not one clean commit "
                  f"(kiln's build stamp {', '.join(kiln_commits) or '?'}{tree}), so these numbers name no commit.**",
                  ""]
    lines.append(f"- kiln commit `{', '.join(kiln_commits) or '?'}` (the binaries' build stamp)")
    gemm_h = [h for h in by_impl["kiln"] if h.get("bench") == "cpu_gemm"]
    if gemm_h:
        lines.append(f"- kiln's GEMM: {gemm_h[0].get('gemm_backend')} backend, {gemm_h[0].get('blas')}")
    for impl, name in IMPLS[1:]:
        hs = by_impl[impl]
        if hs:
            version = distinct(h.get(impl) for h in hs)
            blas = distinct(h.get("blas") for h in hs if h.get("bench") == "cpu_gemm")
            lines.append(f"- {name} {', '.join(version) or '?'}" + (f", BLAS: {', '.join(blas)}" if blas else ""))
    lines.append(f"- CPU: {', '.join(cpus) or '?'}; threads: {thread_text} for every implementation "
                 "(KILN_NUM_THREADS for kiln, --threads for the peers)")
    loads = [h["load_average"] for h in headers if isinstance(h.get("load_average"), (int, float))]
    if loads:
        lines.append(f"- host load average (1 min) as the runs started: {min(loads):.2f} to {max(loads):.2f} "
                     "(this command's own runs included)")
    if suite:
        lines.append(f"- {suite.get('rounds')} round(s), {suite.get('date')} to {suite.get('finished') or '?'}: "
                     f"`{suite.get('command')}`")
        for failure in suite.get("failed") or []:
            lines.append(f"- **failed:** {failure}")
    counts = {}
    for h in headers:
        counts[h.get("command")] = counts.get(h.get("command"), 0) + 1
    lines.append("- the programs, in the order each round ran them:")
    for command, n in counts.items():
        lines.append(f"  - `{command}`" + (f" ({n} runs)" if n > 1 else ""))
    lines += ["",
              "Each cell: the median over the rounds of each run's own median (GEMM: of its timed products; "
              "tiny add: of samples of many iterations; step: of its timed steps). kiln vs PyTorch: PyTorch's "
              "time / kiln's, or kiln's GFLOP/s / PyTorch's; 1.00 or more: kiln is at least as fast. NumPy only "
              "multiplies matrices.", ""]

    rows = collect(runs)
    # GEMM by size, then the tiny adds in bench_op_overhead's order, then the steps as they ran, then
    # the updates alone.
    keys = sorted(rows, key=lambda k: k[:2] if k[0] < 2 else (k[0],))
    lines += ["| row | unit | kiln | PyTorch | NumPy | kiln vs PyTorch | kiln vs NumPy |",
              "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    notes = []
    for key in keys:
        r = rows[key]
        cells = [number(median_of(r["values"].get(impl, [])), r["unit"]) for impl, _ in IMPLS]
        if key[0] != 0 and not r["values"].get("numpy"):
            cells[2] = "–"
        ratios = [speed_ratio(r, "torch"), speed_ratio(r, "numpy")]
        ratio_cells = ["n/a" if v is None else f"{v:.2f}" for v in ratios]
        if key[0] != 0 and not r["values"].get("numpy"):
            ratio_cells[1] = "–"
        lines.append(f"| {r['label']} | {r['unit']} | " + " | ".join(cells + ratio_cells) + " |")
        notes += [f"- {r['label']}: {e}" for e in r["errors"]]
        params = r["parameters"]
        if len(set().union(*params.values())) > 1:
            notes.append(f"- {r['label']}: **not the same model**, parameters "
                         + ", ".join(f"{impl} {sorted(p)}" for impl, p in params.items()))
    lines += ["", "Each round's value (the spread between rounds is the noise a ratio must beat):", "",
              "| row | unit | kiln, each round | PyTorch, each round | NumPy, each round |",
              "| --- | --- | ---: | ---: | ---: |"]
    for key in keys:
        r = rows[key]
        cells = []
        for impl, _ in IMPLS:
            values = r["values"].get(impl, [])
            cells.append(", ".join(number(v, r["unit"]) for v in values) if values else
                         ("–" if impl == "numpy" and key[0] != 0 else "none"))
        lines.append(f"| {r['label']} | {r['unit']} | " + " | ".join(cells) + " |")
    if notes:
        lines += ["", "Not measured, or not alike (in some or all rounds):"] + notes
    return "\n".join(lines) + "\n"


# --- running -----------------------------------------------------------------------------------


def relative(path):
    """A path inside the repository as the commands record it: relative to its root."""
    full = os.path.abspath(path)
    return os.path.relpath(full, REPO) if full == REPO or full.startswith(REPO + os.sep) else path


def plan(args, tmp):
    """[(group, impl, argv, extra environment)] for one round, in the order they run; every argv
    writes its records to a file in `tmp` named by group and impl (the same each round, so each
    round's commands read the same)."""
    t = str(args.threads)
    kiln_env = {"KILN_NUM_THREADS": t}
    peer_env = {"OMP_NUM_THREADS": t, "MKL_NUM_THREADS": t, "OPENBLAS_NUM_THREADS": t}
    b = os.path.join(args.build, "bin")
    sizes = ",".join(map(str, GEMM_SIZES))
    out = []

    def add(group, impl, argv, env):
        out.append((group, impl, argv + ["--json", os.path.join(tmp, f"{len(out):02d}_{impl}.jsonl")], env))

    add("GEMM", "kiln", [os.path.join(b, "bench_cpu_gemm"), "--sizes", sizes, "--reps", str(GEMM_REPS), "--threads", t],
        kiln_env)
    for impl in ("torch", "numpy"):
        add("GEMM", impl, [args.python, "tools/cpu_bench_peer.py", "--bench", "gemm", "--impl", impl, "--sizes", sizes,
                           "--reps", str(GEMM_REPS), "--threads", t], peer_env)
    op = ["--iters", str(OP_ITERS), "--samples", str(OP_SAMPLES), "--warmup", str(OP_WARMUP), "--threads", t]
    add("op overhead", "kiln", [os.path.join(b, "bench_op_overhead")] + op, kiln_env)
    add("op overhead", "torch", [args.python, "tools/cpu_bench_peer.py", "--bench", "op_overhead"] + op, peer_env)
    for name, flags, steps, warmup in TRAIN_GROUPS:
        common = ["--device", "cpu"] + flags + ["--mode", "fp32", "--steps", str(steps), "--warmup", str(warmup)]
        add(name, "kiln", [os.path.join(b, "bench_train_step")] + common, kiln_env)
        add(name, "torch", [args.python, "tools/train_step_peer.py"] + common + ["--threads", t], peer_env)
    return out


def run_one(argv, env):
    """(exit code, seconds, output) of one program, run from the repository's root."""
    t0 = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, env=dict(os.environ, **env), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    return proc.returncode, time.monotonic() - t0, proc.stdout


def read_lines(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [line.strip() for line in f if line.strip()]


def suite_record(args, started, tree, failed, finished=None):
    argv = ["python3", relative(sys.argv[0])] + [relative(a) if os.path.isabs(a) else a for a in sys.argv[1:]]
    return {"record": "suite", "program": "cpu_bench", "date": started, "finished": finished,
            "command": " ".join(argv), "kiln_commit": tree, "rounds": args.rounds, "threads": args.threads,
            "failed": failed}


def run_all(args):
    tree = tree_commit()
    dirty = tree.endswith("-dirty") or tree == "unknown"
    if dirty and not args.allow_dirty:
        return fail(f"the kiln tree is at {tree}: records must name a real commit, so commit (or set aside) the "
                    "changes first, or pass --allow-dirty for a trial run")
    args.build = relative(args.build)
    if os.sep in args.python and not os.path.isabs(args.python):
        args.python = os.path.abspath(args.python)  # the programs run from the repository's root
    for program in ("bench_cpu_gemm", "bench_op_overhead", "bench_train_step"):
        if not os.access(os.path.join(REPO, args.build, "bin", program), os.X_OK):
            return fail(f"no {args.build}/bin/{program}: build it first (cmake --build {args.build} --target "
                        "bench_cpu_gemm bench_op_overhead bench_train_step)")
    probe = subprocess.run([args.python, "-c", "import torch, numpy"], cwd=REPO, capture_output=True, text=True)
    if probe.returncode != 0:
        why = (probe.stderr.strip().splitlines() or ["no reason given"])[-1]
        return fail(f"--python {args.python} cannot import torch and numpy ({why})")
    out_dir = os.path.dirname(os.path.abspath(args.out)) or "."
    if not os.path.isdir(out_dir):
        return fail(f"--out {args.out}: {out_dir} is not a folder")
    jsonl, md = args.out + ".jsonl", args.out + ".md"

    tmp = tempfile.mkdtemp(prefix="cpu_bench-")
    try:
        steps = plan(args, tmp)
        # The binaries' build stamp, from a run too short to time anything: it must be the tree's commit.
        probe_json = os.path.join(tmp, "stamp.jsonl")
        code, _, output = run_one([os.path.join(args.build, "bin", "bench_op_overhead"), "--iters", "1", "--samples",
                                   "1", "--warmup", "0", "--json", probe_json], {"KILN_NUM_THREADS": "1"})
        if code != 0:
            return fail(f"bench_op_overhead does not run:\n{output}", 1)
        stamp = json.loads(read_lines(probe_json)[0]).get("kiln_commit")
        if stamp != tree and not args.allow_dirty:
            return fail(f"the binaries in {args.build} were built at {stamp}, the tree is at {tree}: rebuild them "
                        f"(cmake --build {args.build}) first, or pass --allow-dirty for a trial run")

        started, failed, lines = utc_now(), [], []
        total_t0 = time.monotonic()

        def save(finished=None):
            # The whole file after every run, the suite record (failures so far) first: a run cut short
            # keeps what it measured.
            suite = json.dumps(suite_record(args, started, tree, failed, finished))
            write_atomic(jsonl, "".join(line + "\n" for line in [suite] + lines))

        for rnd in range(1, args.rounds + 1):
            for group, impl, argv, env in steps:
                path = argv[-1]
                if os.path.exists(path):
                    os.remove(path)
                code, secs, output = run_one(argv, env)
                got = read_lines(path)
                lines += got
                status = "ok" if code == 0 else f"exit {code}"
                print(f"round {rnd}/{args.rounds}  {group:<22} {impl:<6} {secs:7.1f} s  {status}", flush=True)
                if code != 0:
                    failed.append(f"round {rnd}, {group}, {impl}: `{' '.join(argv)}` exited {code}")
                    print(output[-4000:], file=sys.stderr, flush=True)
                save()
        save(utc_now())
        suites, runs = load([jsonl])
        text = render(suites, runs)
        write_atomic(md, text)
        sys.stdout.write("\n" + text)
        print(f"wrote {jsonl} and {md} in {(time.monotonic() - total_t0) / 60:.1f} min")
        return 1 if failed else 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# --- the self-test -----------------------------------------------------------------------------


def fixture():
    """Records of two rounds of every row, with values whose medians and ratios are known."""
    def header(impl, bench, **extra):
        h = {"record": "header", "impl": impl, "date": "2026-01-02T03:04:05Z", "kiln_commit": "0123456789",
             "command": f"{impl} {bench}", "device": "cpu", "device_name": "Test CPU", "threads": 2,
             "load_average": 0.5}
        if bench != "train_step":
            h["bench"] = bench
        h.update(extra)
        return h

    out = [{"record": "suite", "program": "cpu_bench", "date": "2026-01-02T03:04:00Z",
            "finished": "2026-01-02T03:20:00Z", "command": "python3 tools/cpu_bench.py --rounds 2",
            "kiln_commit": "0123456789", "rounds": 2, "threads": 2, "failed": []}]
    # (kiln, torch, numpy) per round.
    gemm = {512: ((100, 120), (50, 60), (100, 120)), 1024: ((200, 200), (100, 100), (400, 400)),
            2048: ((90, 110), (100, 100), (100, 100))}
    ops = {("add", 1): ((0.5, 0.5), (1.0, 1.0)), ("add_backward", 1): ((3.0, 3.0), (12.0, 12.0)),
           ("add", 4096): ((1.0, 1.0), (1.0, 1.0)), ("add_backward", 4096): ((5.0, 5.0), (15.0, 15.0))}
    steps = [("gpt", 16, {"n_layer": 2, "n_head": 4, "n_embd": 64, "block_size": 64, "vocab_size": 65},
              (20.0, 22.0), (10.0, 11.0)),
             ("gpt", 8, {"n_layer": 6, "n_head": 6, "n_embd": 384, "block_size": 256, "vocab_size": 65},
              (1200.0, 1200.0), (800.0, 800.0)),
             ("cnn", 64, {"image_size": 28, "in_channels": 1, "num_classes": 10, "widths": "32,64", "hidden": 128,
                          "dropout": 0}, (40.0, 40.0), (20.0, 20.0))]
    for rnd in range(2):
        for impl, col in (("kiln", 0), ("torch", 1), ("numpy", 2)):
            out.append(header(impl, "cpu_gemm", gemm_backend="blas", blas="OpenBLAS test", torch="9.9", numpy="8.8"))
            for n, values in gemm.items():
                out.append({"record": "case", "impl": impl, "bench": "cpu_gemm", "case": f"square {n}",
                            "dtype": "float32", "m": n, "n": n, "k": n, "gflops": values[col][rnd]})
        for impl, col in (("kiln", 0), ("torch", 1)):
            out.append(header(impl, "op_overhead"))
            for (name, numel), values in ops.items():
                out.append({"record": "case", "impl": impl, "bench": "op_overhead", "case": name, "numel": numel,
                            "autograd": name == "add_backward", "us_median": values[col][rnd]})
        step_records = []
        for workload, batch, shape, kiln_ms, torch_ms in steps:
            for impl, values in (("kiln", kiln_ms), ("torch", torch_ms)):
                step_records.append(header(impl, "train_step"))
                step_records.append({"record": "case", "impl": impl, "workload": workload, "mode": "fp32",
                                     "batch": batch, "parameters": 1000, "step_ms_median": values[rnd],
                                     "shape": dict(shape, dropout=0.0) if impl == "torch" and workload == "cnn"
                                     else shape})
        # The char GPT's AdamW update alone (--time optimizer), whose records come first in round 0:
        # its row must still follow every step's.
        update_records = []
        for impl, values in (("kiln", (6.0, 6.4)), ("torch", (22.0, 22.0))):
            update_records.append(header(impl, "train_step", timed="optimizer"))
            update_records.append({"record": "case", "impl": impl, "workload": "gpt", "mode": "fp32", "batch": 8,
                                   "shape": steps[1][2], "parameters": 10770816, "timed": "optimizer",
                                   "step_ms_median": values[rnd]})
        out += update_records + step_records if rnd == 0 else step_records + update_records
    return out


def self_test():
    expected = [
        "| GEMM float32 512³ | GFLOP/s | 110.0 | 55.0 | 110.0 | 2.00 | 1.00 |",
        "| GEMM float32 1024³ | GFLOP/s | 200.0 | 100.0 | 400.0 | 2.00 | 0.50 |",
        "| GEMM float32 2048³ | GFLOP/s | 100.0 | 100.0 | 100.0 | 1.00 | 1.00 |",
        "| tiny add, 1 element: forward | µs per op | 0.50 | 1.00 | – | 2.00 | – |",
        "| tiny add, 1 element: forward + backward | µs per op | 3.00 | 12.00 | – | 4.00 | – |",
        "| tiny add, 4096 elements: forward + backward | µs per op | 5.00 | 15.00 | – | 3.00 | – |",
        "| tiny GPT step (2 layers, 64 wide, 4 heads, batch 16, block 64) | ms per step | 21.0 | 10.5 | – | 0.50 |",
        "| char GPT step (6 layers, 384 wide, 6 heads, batch 8, block 256) | ms per step | 1200.0 | 800.0 | – | 0.67",
        "| small CNN step, batch 64 (1x28x28) | ms per step | 40.0 | 20.0 | – | 0.50 | – |",
        "| char GPT: the AdamW update alone (10.8M parameters) | ms per update | 6.20 | 22.0 | – | 3.55 | – |",
        "| GEMM float32 512³ | GFLOP/s | 100.0, 120.0 | 50.0, 60.0 | 100.0, 120.0 |",
        "- kiln commit `0123456789`",
        "- 2 round(s), 2026-01-02T03:04:00Z to 2026-01-02T03:20:00Z: `python3 tools/cpu_bench.py --rounds 2`",
    ]
    with tempfile.TemporaryDirectory(prefix="cpu_bench_test-") as tmp:
        path, md = os.path.join(tmp, "fixture.jsonl"), os.path.join(tmp, "fixture.md")
        with open(path, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in fixture())
        code = main(["--render-only", path, "--out", md, "--quiet"])
        with open(md) as f:
            text = f.read()
    problems = [f"exit code {code}"] if code else []
    problems += [f"no line with: {e}" for e in expected if e not in text]
    first_table = [line for line in text.split("Each round's value")[0].splitlines() if line.startswith("| ")]
    update_rows = [i for i, line in enumerate(first_table) if "AdamW update alone" in line]
    step_rows = [i for i, line in enumerate(first_table) if "ms per step" in line]
    if len(update_rows) != 1 or not step_rows or update_rows[0] < max(step_rows):
        problems.append("the update's row is not once, after every step's, in the first table")
    for unexpected in ("A trial run", "not the same model", "Different"):
        if unexpected in text:
            problems.append(f"says {unexpected!r} of a clean fixture")
    for p in problems:
        print(f"cpu_bench --self-test: {p}", file=sys.stderr)
    if problems:
        sys.stderr.write(text)
        return 1
    print(f"cpu_bench --self-test: {len(expected)} expected lines rendered")
    return 0


# --- main --------------------------------------------------------------------------------------


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", default="build/cpu", help="kiln's build folder (its bin/ holds the benchmarks)")
    p.add_argument("--python", default="python3", help="a Python with PyTorch and NumPy, for the peers")
    p.add_argument("--threads", type=int, default=os.cpu_count(), help="CPU threads of every implementation")
    p.add_argument("--rounds", type=int, default=3, help="rounds; each cell is the median over them")
    p.add_argument("--out", help="OUT: writes OUT.jsonl and OUT.md (default bench/records/cpu_vs_pytorch_DATE); "
                                 "with --render-only, the markdown file")
    p.add_argument("--allow-dirty", action="store_true",
                   help="run from uncommitted changes or binaries of another commit (a trial; the table says so)")
    p.add_argument("--render-only", nargs="+", metavar="FILE", help="render these JSON lines; run nothing")
    p.add_argument("--self-test", action="store_true", help="render a fixture and check the table (no PyTorch)")
    p.add_argument("--quiet", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    if args.self_test:
        return self_test()
    if args.render_only:
        suites, runs = load(args.render_only)
        if not runs:
            return fail("no records in " + ", ".join(args.render_only), 1)
        text = render(suites, runs)
        if args.out:
            write_atomic(args.out, text)
        if not args.quiet:
            sys.stdout.write(text)
        return 0
    for flag, value, hi in (("--threads", args.threads, 4096), ("--rounds", args.rounds, 1000)):
        if value is None or not 1 <= value <= hi:
            p.error(f"{flag} expects a whole number from 1 to {hi}, got {value}")
    if not args.out:
        args.out = os.path.join(REPO, "bench", "records",
                                "cpu_vs_pytorch_" + datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"))
    for suffix in (".jsonl", ".md"):
        if args.out.endswith(suffix):
            args.out = args.out[: -len(suffix)]
    return run_all(args)


if __name__ == "__main__":
    sys.exit(main())

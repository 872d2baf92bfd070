#!/usr/bin/env python3
"""The tips' A/B measurements (docs/tips/README.md), in one command: runs kiln's bench_tips and its
PyTorch peer (tools/tips_peer.py) in rounds on the same cores, and tip 13's DDP A/B through
bench_ddp_step on two MPI ranks; writes every record into OUT.jsonl, renders OUT.md, and with
--pages pastes each tip's table into its page between the `<!-- tips:measured N begin/end -->`
markers. The pages' numbers come only from here.

A round runs bench_tips, then the peer: the implementations alternate, so a slow spell of the machine
falls on both. Each cell is the median round (the lower middle one of an even number) of each run's
own median. "B / A" is the speed-up of the tip's variant over the baseline: B's throughput over A's
where both have one, else A's time per unit over B's (above 1: the tip makes it faster). Peak
memory is kiln's CPU allocator's (live tensor bytes at their peak: the model, optimizer state, inputs
and activations); PyTorch has no such count for the CPU. Tips about the GPU (4, 8, 9, 10, 14, 17, 23)
run with --device cuda on a GPU: rounds of bench_tips --device cuda and tools/tips_peer.py --device cuda,
as on the CPU, both timing each unit to a device synchronization and both giving the CUDA caching
allocator's peak. A GPU tip the peer cannot measure there (tip 23 where PyTorch cannot read NVML, having
no pynvml) is an "unavailable" record, and its table gives the reason under kiln's rows. Until a GPU run
is pasted, the GPU tips' pages say that their GPU run is open.

Records must name a real commit: the command refuses a tree with uncommitted changes, or binaries
built from another commit, unless --allow-dirty (a trial run, not for the pages).

  usage: python3 tools/tips.py [--device cpu|cuda] [--build build/cpu] [--python python3] [--threads 2] [--rounds 3]
                               [--tips 1,2,...] [--out bench/records/tips_cpu_DATE_COMMIT] [--pages]
                               [--allow-dirty]
         python3 tools/tips.py --pages-from OUT.jsonl      render a recorded run's OUT.md again, and paste it
         python3 tools/tips.py --check                     every page has its markers; pasted tables
                                                           name a record that exists
         python3 tools/tips.py --quick-check [--bench EXE]  bench_tips --quick: every CPU tip's A and B
"""
import argparse
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_compare import json_lines, write_atomic  # noqa: E402
from train_step_peer import tree_commit, utc_now  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIPS_DIR = os.path.join(REPO, "docs", "tips")
CPU_TIPS = (1, 2, 3, 5, 6, 7, 11, 12, 15, 16, 18, 19, 20, 21, 22, 24, 25)
GPU_TIPS = (4, 8, 9, 10, 14, 17, 23)
DDP_TIP = 13
MARKER = re.compile(r"(<!-- tips:measured (\d+) begin -->\n)(.*?)(<!-- tips:measured \2 end -->)", re.S)


def fail(message, code=2):
    print(f"tips: {message}", file=sys.stderr)
    sys.exit(code)


def run(argv, env=None):
    proc = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        fail(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stderr}{proc.stdout[-2000:]}", 1)
    return proc.stdout


def records_of(text):
    import json
    return [json.loads(line) for line in text.splitlines() if line.strip().startswith("{")]


# --- measuring -----------------------------------------------------------------------------------------

def measure(a):
    bench = os.path.join(a.build, "bin", "bench_tips")
    ddp = os.path.join(a.build, "bin", "bench_ddp_step")
    for exe in (bench,):
        if not os.access(exe, os.X_OK):
            fail(f"no {exe}: build kiln first (tools/build.sh)")
    env = dict(os.environ, KILN_NUM_THREADS=str(a.threads))
    gpu = a.device == "cuda"
    common = ["--reps", str(a.reps), "--warmup", str(a.warmup)]
    mine = [t for t in a.tips or [] if t in (GPU_TIPS if gpu else CPU_TIPS)]
    if mine:
        common += ["--tips", ",".join(str(t) for t in mine)]
    rows = []
    # --tips that bench_tips does not run (13 alone, measured by bench_ddp_step below): no rounds of it.
    for rnd in range(a.rounds if not a.tips or mine else 0):
        for rec in records_of(run([bench, "--device", a.device] + common, env)):
            rows.append(dict(rec, round=rnd))
        for rec in records_of(run([a.python, os.path.join(REPO, "tools", "tips_peer.py"), "--device", a.device,
                                   "--threads", str(a.threads)] + common, env)):
            rows.append(dict(rec, round=rnd))
        print(f"tips: round {rnd + 1} of {a.rounds} done", file=sys.stderr)
    if not gpu and (not a.tips or DDP_TIP in a.tips) and shutil.which("mpiexec") and os.access(ddp, os.X_OK):
        rows += measure_ddp(a, ddp)
    return rows


def measure_ddp(a, exe):
    """Tip 13: bench_ddp_step on 2 ranks, one bucket size, overlap off (A) and on (B)."""
    env = dict(os.environ, KILN_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    flags = ["--layers", "4", "--width", "256", "--heads", "4", "--batch", "4", "--block", "64",
             "--bucket-mb", "4", "--steps", "20", "--warmup", "3"]
    rows = []
    for rnd in range(a.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "ddp.jsonl")
            run(["mpiexec", "-n", "2", "--oversubscribe", exe] + flags + ["--json", out], env)
            recs = [r for _, r in json_lines(out, "tips")]
        header = next(r for r in recs if r.get("record") == "header")
        workload = (f"GPT step on 2 MPI ranks ({header['layers']} layers, {header['width']} wide, batch "
                    f"{header['batch']} per rank, block {header['block']}), DDP with 4 MB buckets, 1 thread a rank")
        for r in recs:
            if r.get("record") != "case" or r.get("case") != "ddp":
                continue
            rows.append({"record": "tip", "tip": DDP_TIP, "slug": "ddp", "impl": "kiln", "device": "cpu",
                         "threads": 1, "workload": workload,
                         "variant": "all-reduces overlap backward" if r["overlap"] else "wait for each all-reduce",
                         "role": "B" if r["overlap"] else "A", "unit": "step", "ms": 1e3 * r["step_seconds"],
                         "rate": None, "rate_unit": "", "peak_mb": None, "round": rnd})
        # Paths as the repository names them: the binary relative to it, the temporary file as OUT.
        command = header["command"].replace(REPO + os.sep, "").replace(out, "OUT")
        rows.append(dict(header, record="header", impl="kiln-ddp", command=command, round=rnd))
    return rows


# --- tables --------------------------------------------------------------------------------------------

def num(v, fmt):
    return fmt.format(v) if isinstance(v, (int, float)) and math.isfinite(v) else "–"


def cells(rows):
    """(impl, tip, role, variant) -> the median round's row, whole: of an even number of rounds the
    lower middle one (an average of the two would pair a time with another round's rate and memory)."""
    groups = {}
    for r in rows:
        if r.get("record") == "tip":
            groups.setdefault((r["impl"], r["tip"], r["role"], r["variant"]), []).append(r)
    out = {}
    for key, rs in groups.items():
        rs = sorted(rs, key=lambda r: r["ms"])
        med = dict(rs[(len(rs) - 1) // 2])
        med["rounds"] = len(rs)
        out[key] = med
    return out


EXTRA = (("parameters", "parameters", "{:,.0f}"), ("cached_mb", "cached MB", "{:.1f}"),
         ("final_loss", "final loss", "{:.4f}"), ("test_accuracy", "test accuracy", "{:.4f}"),
         ("samples", "NVML samples", "{:,.0f}"))


def speedup(a, b):
    """B over A: the ratio of throughputs where both have one (variants whose units hold different
    amounts of work, as batch 32 and batch 256), else of times per unit (A's over B's)."""
    if a is None:
        return float("nan")
    if all(isinstance(r.get("rate"), (int, float)) and r["rate"] > 0 for r in (a, b)):
        return b["rate"] / a["rate"]
    return a["ms"] / b["ms"]


def tip_table(tip, table, record_name, meta):
    """Markdown for one tip: the workload, then one row per implementation and variant."""
    rows = [r for (impl, t, _, _), r in table.items() if t == tip]
    if not rows:
        return None
    rows.sort(key=lambda r: (r["impl"] != "kiln", r["role"]))
    extras = [e for e in EXTRA if any(e[0] in r for r in rows)]
    unit = rows[0]["unit"]
    rate_unit = next((r["rate_unit"] for r in rows if r.get("rate_unit")), "")
    head = ["implementation", "variant", f"ms per {unit}"] + ([rate_unit] if rate_unit else [])
    head += ["peak MB", "B / A"] + [e[1] for e in extras]
    lines = textwrap.wrap(f"Workload: {rows[0]['workload']}.", 100) + ["",
             "| " + " | ".join(head) + " |", "| " + " | ".join(["---"] * 2 + ["---:"] * (len(head) - 2)) + " |"]
    base = {r["impl"]: r for r in rows if r["role"] == "A"}
    for r in rows:
        speed = speedup(base.get(r["impl"]), r) if r["role"] == "B" else float("nan")
        cols = [{"kiln": "kiln", "pytorch": "PyTorch"}.get(r["impl"], r["impl"]), f"{r['role']}: {r['variant']}",
                num(r["ms"], "{:.3f}")]
        if rate_unit:
            cols.append(num(r.get("rate"), "{:,.0f}"))
        cols += [num(r.get("peak_mb"), "{:.1f}"), num(speed, "{:.2f}")]
        cols += [num(r.get(e[0]), e[2]) for e in extras]
        lines.append("| " + " | ".join(cols) + " |")
    impls = sorted({r["impl"] for r in rows})
    unavailable = meta.get("unavailable", {}).get(tip)
    peer = (f", PyTorch {meta['torch']}" if "pytorch" in impls
            else f", PyTorch's side not measured ({unavailable})" if unavailable else ", no PyTorch peer for this A/B")
    footer = (f"{meta['device_name']}, {meta['threads']} threads{' (1 a rank)' if tip == DDP_TIP else ''}, "
              f"{meta['date']}, kiln `{meta['kiln_commit']}`" + peer
              + f"; median of {rows[0]['rounds']} rounds. Record: `bench/records/{record_name}` "
              "(written by `tools/tips.py`).")
    lines += [""] + textwrap.wrap(footer, 100, break_on_hyphens=False)
    return "\n".join(lines)


def gpu_open(tip):
    return "\n".join(textwrap.wrap(
        "GPU run open: this tip is measured on the GPU, and no run on the test machine with an H100 is recorded "
        f"yet. (`tools/tips.py` writes this section; tip {tip}'s A/B is described above.)", 100))


def kiln_header(rows):
    """The header of kiln's bench_tips run or, when tip 13 ran alone, of its bench_ddp_step run (one
    thread a rank)."""
    for impl in ("kiln", "kiln-ddp"):
        header = next((r for r in rows if r.get("record") == "header" and r.get("impl") == impl), None)
        if header is not None:
            return header if impl == "kiln" else dict(header, threads=1)
    fail("the records have no kiln header (no tip was measured)")


def meta_of(rows):
    header = kiln_header(rows)
    torch = next((r.get("torch") for r in rows if r.get("record") == "run"), None)
    # The peer's tips it could not measure (tips_peer.py's "unavailable" records): tip -> why.
    unavailable = {r["tip"]: r["reason"] for r in rows if r.get("record") == "unavailable"}
    return {"device_name": header["device_name"], "threads": header["threads"], "date": header["date"][:10],
            "kiln_commit": header["kiln_commit"], "torch": torch or "?", "unavailable": unavailable}


def render(rows, record_name):
    table = cells(rows)
    meta = meta_of(rows)
    parts = [f"# The tips' A/B measurements, {meta['date']}", "",
             f"Written by `tools/tips.py` from `{record_name}.jsonl`; pages: docs/tips/.", ""]
    for tip in sorted({t for (_, t, _, _) in table}):
        parts += [f"## Tip {tip}", "", tip_table(tip, table, record_name + ".md", meta), ""]
    return "\n".join(parts)


# --- pages ---------------------------------------------------------------------------------------------

def page_path(tip):
    for name in sorted(os.listdir(TIPS_DIR)):
        if name.startswith(f"{tip:02d}-") and name.endswith(".md"):
            return os.path.join(TIPS_DIR, name)
    fail(f"no page for tip {tip} in docs/tips/")


def paste(rows, record_name):
    table = cells(rows)
    meta = meta_of(rows)
    for tip in range(1, 26):
        path = page_path(tip)
        with open(path) as f:
            text = f.read()
        body = tip_table(tip, table, record_name + ".md", meta)
        if body is None:
            if tip not in GPU_TIPS or re.search(r"Record:\s+`bench/records/", text):
                continue  # not measured in this run: the page keeps what it has
            body = gpu_open(tip)
        new, n = MARKER.subn(lambda m: m.group(1) + body + "\n" + m.group(4) if int(m.group(2)) == tip else m.group(0),
                             text)
        if n != 1:
            fail(f"{path}: expected one measured section for tip {tip}")
        write_atomic(path, new)


def check_pages():
    problems = []
    for tip in range(1, 26):
        path = page_path(tip)
        with open(path) as f:
            text = f.read()
        found = [m for m in MARKER.finditer(text)]
        if len(found) != 1 or int(found[0].group(2)) != tip:
            problems.append(f"{path}: not exactly one measured section for tip {tip}")
            continue
        for name in re.findall(r"Record:\s+`bench/records/([^`]+)`", found[0].group(3)):
            if not os.path.exists(os.path.join(REPO, "bench", "records", name)):
                problems.append(f"{path}: its table names bench/records/{name}, which does not exist")
        if not text.startswith(f"# Tip {tip}: "):
            problems.append(f"{path}: does not start with '# Tip {tip}: '")
        for section in ("## What it does", "## In kiln", "## Measured", "## When it does not help"):
            if section not in text:
                problems.append(f"{path}: no '{section}' section")
    index = open(os.path.join(TIPS_DIR, "README.md")).read()
    for tip in range(1, 26):
        if f"]({os.path.basename(page_path(tip))})" not in index:
            problems.append(f"docs/tips/README.md does not link tip {tip}'s page")
    if problems:
        fail("\n".join(problems), 1)
    print("tips: 25 pages, each with its measured section")


def quick_check(bench):
    out = run([bench, "--quick", "--reps", "1", "--warmup", "0"],
              dict(os.environ, KILN_NUM_THREADS="2"))
    rows = [r for r in records_of(out) if r.get("record") == "tip"]
    problems = []
    for tip in CPU_TIPS:
        mine = [r for r in rows if r["tip"] == tip]
        if [r["role"] for r in mine] != ["A", "B"]:
            problems.append(f"tip {tip}: roles {[r['role'] for r in mine]}, not A then B")
        for r in mine:
            if not (isinstance(r["ms"], (int, float)) and r["ms"] > 0 and r["peak_mb"] is not None
                    and r["peak_mb"] >= 0 and r["variant"] and r["workload"]):
                problems.append(f"tip {tip}: a row without a time, a peak or a name: {r}")
    # The table renders from these rows alone.
    rows.append({"record": "header", "impl": "kiln", "device_name": "CPU", "threads": 2, "date": utc_now(),
                 "kiln_commit": "check"})
    for tip in CPU_TIPS:
        text = tip_table(tip, cells([dict(r, round=0) for r in rows]), "check.md", meta_of(rows))
        if text is None or "| kiln | A: " not in text or "| kiln | B: " not in text:
            problems.append(f"tip {tip}: its table has no kiln A and B rows:\n{text}")
    # Two rounds of one cell: the lower middle round's row, whole (its time with its own rate).
    a = next(r for r in rows if r.get("record") == "tip")
    two = cells([dict(a, round=0, ms=2.0, rate=10.0), dict(a, round=1, ms=1.0, rate=20.0)])
    cell = two[(a["impl"], a["tip"], a["role"], a["variant"])]
    if (cell["ms"], cell["rate"], cell["rounds"]) != (1.0, 20.0, 2):
        problems.append(f"cells: of two rounds (2 ms at 10/s, 1 ms at 20/s) the cell is {cell}")
    if problems:
        fail("\n".join(problems), 1)
    print(f"tips: bench_tips --quick gave A and B for all {len(CPU_TIPS)} CPU tips")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", default=os.path.join(REPO, "build", "cpu"))
    p.add_argument("--python", default="python3", help="a Python with torch, for tools/tips_peer.py")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                   help="cpu: the CPU tips beside PyTorch, and tip 13; cuda: the GPU tips beside PyTorch's on the GPU")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--tips", type=lambda s: [int(t) for t in s.split(",")], default=None)
    p.add_argument("--out", help="OUT (OUT.jsonl and OUT.md); default bench/records/tips_cpu_DATE_COMMIT")
    p.add_argument("--pages", action="store_true", help="paste the tables into docs/tips/")
    p.add_argument("--allow-dirty", action="store_true")
    p.add_argument("--pages-from", metavar="JSONL")
    p.add_argument("--check", action="store_true")
    p.add_argument("--quick-check", action="store_true")
    p.add_argument("--bench", help="bench_tips for --quick-check (default: BUILD/bin/bench_tips)")
    a = p.parse_args()
    if a.tips:  # each tip measured on its own device: CPU_TIPS and 13 with --device cpu, GPU_TIPS with cuda
        here = GPU_TIPS if a.device == "cuda" else CPU_TIPS + (DDP_TIP,)
        other = [t for t in a.tips if t not in here]
        if other:
            fail(f"--tips {','.join(map(str, other))}: not tips of --device {a.device} "
                 f"(CPU: {', '.join(map(str, CPU_TIPS + (DDP_TIP,)))}; cuda: {', '.join(map(str, GPU_TIPS))})")
    if a.check:
        return check_pages()
    if a.quick_check:
        return quick_check(a.bench or os.path.join(a.build, "bin", "bench_tips"))
    if a.pages_from:  # a recorded run: its table rendered again, and pasted
        rows = [r for _, r in json_lines(a.pages_from, "tips")]
        name = os.path.basename(a.pages_from)[:-len(".jsonl")]
        write_atomic(a.pages_from[:-len(".jsonl")] + ".md", render(rows, name) + "\n")
        return paste(rows, name)
    commit = tree_commit()
    if commit.endswith("-dirty") and not a.allow_dirty:
        fail(f"the tree has uncommitted changes ({commit}): commit first, or --allow-dirty for a trial run")
    if a.pages and a.allow_dirty:
        fail("--pages needs a clean tree: the pages name the record's commit")
    # The peer's loader and image tips (2, 3, 5, 14, 24) use torchvision: a Python without it would
    # fail minutes into the first round, after kiln's side of it.
    probe = subprocess.run([a.python, "-c", "import torch, torchvision; print(torch.__version__)"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if probe.returncode != 0:
        fail(f"{a.python} cannot import torch and torchvision, which tools/tips_peer.py needs:\n"
             f"{probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else probe.returncode}")
    torch = probe.stdout.strip()
    # The peer's interpreter is this machine's business: the record says PYTHON, as the other tables do.
    command = " ".join("PYTHON" if arg == a.python else arg for arg in sys.argv)
    rows = [{"record": "run", "date": utc_now(), "command": command, "tree": commit, "torch": torch,
             "threads": a.threads, "rounds": a.rounds}]
    rows += measure(a)
    header = kiln_header(rows)
    if not a.allow_dirty and header["kiln_commit"] != commit[:len(header["kiln_commit"])]:
        fail(f"bench_tips was built from {header['kiln_commit']}, the tree is {commit}: rebuild first")
    out = a.out or os.path.join(REPO, "bench", "records", f"tips_{a.device}_{utc_now()[:10]}_{commit[:7]}")
    import json
    write_atomic(out + ".jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    write_atomic(out + ".md", render(rows, os.path.basename(out)) + "\n")
    print(f"tips: wrote {out}.jsonl and {out}.md")
    if a.pages:
        paste(rows, os.path.basename(out))
        print("tips: pasted the tables into docs/tips/")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Puts bench_train_step's JSON lines (kiln) beside tools/train_step_peer.py's (PyTorch): one markdown
table per workload with, for each mode, the step time of each framework, their ratio, the peak of
allocated GPU memory of each and its ratio, and each framework's speedup over its own fp32 step, so
that what a mode buys in kiln can be read against what it buys in PyTorch. Headed by the date, the
kiln commit, the GPU and every command. Numbers come from the files only.

A file may hold several runs (tools/gpu_check.sh concatenates its rounds: kiln, PyTorch, kiln,
PyTorch); each run starts with its "header" record, and its "case" records follow. A framework's
number for a case is the median over its runs of each run's median step time; its peak memory the
largest over its runs.

  usage: python3 tools/train_step_compare.py FILE [FILE...] [--out FILE.md]
         python3 tools/train_step_compare.py --check FILE [--expect-workloads W,...] [--expect-modes all|M,...]
--check validates one program's records (CI's smoke test): a header with date, commit and command;
every case without an error, with positive step times in order (min <= median <= max), a positive
throughput, and a peak memory that is a positive whole number on the GPU and null on the CPU.
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_compare import json_lines, write_atomic  # noqa: E402

MODES = ("fp32", "tf32", "bf16", "fp16", "bf16-recompute", "bf16-nhwc")
WORKLOADS = ("gpt", "resnet18", "cnn")
IMPLS = (("kiln", "kiln"), ("torch", "PyTorch"))


def mode_fits(workload, mode):
    # As bench_train_step's: channels-last needs 4-d activations (not gpt's), recompute blocks (not cnn's).
    return not (mode == "bf16-nhwc" and workload == "gpt") and not (mode == "bf16-recompute" and workload == "cnn")


def load_runs(paths):
    """[(header, [case records])] in file order; a case before any header is an error."""
    runs = []
    for path in paths:
        for line_no, rec in json_lines(path, "train_step_compare"):
            if not isinstance(rec, dict) or rec.get("record") not in ("header", "case"):
                raise SystemExit(f"train_step_compare: {path}:{line_no}: not a header or case record")
            if rec["record"] == "header":
                runs.append((rec, []))
            elif not runs or runs[-1][0].get("impl") != rec.get("impl"):
                raise SystemExit(f"train_step_compare: {path}:{line_no}: a {rec.get('impl')} case without "
                                 "its program's header before it")
            else:
                runs[-1][1].append(rec)
    return runs


# --- --check -------------------------------------------------------------------------------------


def positive(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0


def check(path, expect_workloads, expect_modes):
    problems = []
    runs = load_runs([path])
    if not runs:
        return [f"{path}: no header record"]
    seen = set()
    for header, cases in runs:
        for key in ("impl", "date", "kiln_commit", "command", "device", "device_name", "steps", "warmup"):
            if header.get(key) in (None, ""):
                problems.append(f"header: no {key}")
        on_gpu = str(header.get("device", "")).startswith("cuda")
        for c in cases:
            where = f"{c.get('workload')} {c.get('mode')}"
            if "error" in c:
                problems.append(f"{where}: {c['error']}")
                continue
            for key in ("workload", "mode", "device", "batch", "shape", "parameters", "step_ms_median",
                        "step_ms_min", "step_ms_max", "throughput", "throughput_unit", "peak_bytes"):
                if key not in c:
                    problems.append(f"{where}: no {key}")
            if any(key not in c for key in ("step_ms_median", "step_ms_min", "step_ms_max")):
                continue
            lo, med, hi = c["step_ms_min"], c["step_ms_median"], c["step_ms_max"]
            if not (positive(lo) and positive(med) and positive(hi) and lo <= med <= hi):
                problems.append(f"{where}: step times min {lo}, median {med}, max {hi} are not positive and in order")
            if not positive(c.get("throughput")):
                problems.append(f"{where}: throughput {c.get('throughput')} is not positive")
            peak = c.get("peak_bytes")
            if on_gpu and not (isinstance(peak, int) and peak > 0):
                problems.append(f"{where}: peak_bytes {peak} on the GPU is not a positive whole number")
            if not on_gpu and peak is not None:
                problems.append(f"{where}: peak_bytes {peak} on the CPU, where there is no allocator to ask")
            seen.add((c.get("workload"), c.get("mode")))
    for w in expect_workloads:
        for m in expect_modes:
            if mode_fits(w, m) and (w, m) not in seen:
                problems.append(f"no record of {w} {m}")
    return problems


# --- the tables ----------------------------------------------------------------------------------


def first(values, default="?"):
    for v in values:
        if v not in (None, ""):
            return v
    return default


def summarize(runs, impl):
    """{(workload, mode): {"ms": median over runs, "rounds": [ms per run], "peak": bytes or None,
    "batch", "shape", "parameters", "unit", "items", "errors": [...]}} for one framework."""
    out = {}
    for header, cases in runs:
        if header.get("impl") != impl:
            continue
        for c in cases:
            s = out.setdefault((c["workload"], c["mode"]), {"rounds": [], "peaks": [], "errors": [], "case": c})
            if "error" in c:
                s["errors"].append(c["error"])
                continue
            s["case"] = c
            s["rounds"].append(c["step_ms_median"])
            s["peaks"].append(c.get("peak_bytes"))
    for s in out.values():
        s["ms"] = statistics.median(s["rounds"]) if s["rounds"] else None
        peaks = [p for p in s["peaks"] if p is not None]
        s["peak"] = max(peaks) if peaks else None
    return out


def fmt(v, spec, missing="n/a"):
    return missing if v is None else format(v, spec)


def ratio(a, b):
    return a / b if a is not None and b else None


def render(runs):
    headers = {impl: [h for h, _ in runs if h.get("impl") == impl] for impl, _ in IMPLS}
    kiln_h, torch_h = headers["kiln"], headers["torch"]
    gpu = first([h.get("device_name") for h in kiln_h])
    torch_gpu = first([h.get("device_name") for h in torch_h])
    date = first([h.get("date") for h in kiln_h + torch_h])
    lines = [f"### Training step, {date[:10]}, {gpu}", ""]
    if torch_h and gpu != torch_gpu:
        lines += [f"**Different devices: kiln ran on {gpu}, PyTorch on {torch_gpu}; the ratios below compare "
                  "nothing.**", ""]
    lines.append(f"- kiln commit `{first([h.get('kiln_commit') for h in kiln_h])}` (the binary's build stamp); "
                 f"device {first([h.get('device') for h in kiln_h])}, {gpu}")
    for n, h in enumerate(kiln_h, 1):
        lines.append(f"- kiln run {n}: `{h.get('command')}` ({h.get('date')}; {h.get('steps')} timed steps after "
                     f"{h.get('warmup')} warm-up, {h.get('timer')})")
    for n, h in enumerate(torch_h, 1):
        lines.append(f"- PyTorch {h.get('torch')} run {n}: `{h.get('command')}` ({h.get('date')}; {h.get('steps')} "
                     f"timed steps after {h.get('warmup')} warm-up, {h.get('timer')})")
    lines += ["",
              "Step time: each run's median step, then the median over the runs. Peak: the most bytes allocated "
              "during the timed steps (largest over the runs), model, AdamW moments and batch included. "
              "kiln/PyTorch below 1: kiln takes less. \"vs fp32\": the framework's own fp32 step time divided by "
              "this mode's (above 1: the mode is faster).", ""]

    kiln, torch = summarize(runs, "kiln"), summarize(runs, "torch")
    notes = []
    for workload in WORKLOADS:
        modes = [m for m in MODES if (workload, m) in kiln or (workload, m) in torch]
        if not modes:
            continue
        k_any = next((kiln[(workload, m)]["case"] for m in modes if (workload, m) in kiln), {})
        t_any = next((torch[(workload, m)]["case"] for m in modes if (workload, m) in torch), {})
        unit = first([k_any.get("throughput_unit"), t_any.get("throughput_unit")], "")
        shape = k_any.get("shape") or t_any.get("shape") or {}
        desc = ", ".join(f"{k} {v}" for k, v in shape.items())
        lines.append(f"**{workload}**: batch {first([k_any.get('batch'), t_any.get('batch')])}; {desc}; "
                     f"{first([k_any.get('parameters'), t_any.get('parameters')])} parameters")
        for key in ("batch", "shape", "parameters"):
            if k_any and t_any and k_any.get(key) != t_any.get(key):
                lines.append(f"**Not the same model: kiln's {key} is {k_any.get(key)}, PyTorch's "
                             f"{t_any.get(key)}.**")
        lines += ["",
                  f"| mode | kiln ms | PyTorch ms | kiln/PyTorch | kiln peak MiB | PyTorch peak MiB | kiln/PyTorch | "
                  f"kiln vs fp32 | PyTorch vs fp32 | kiln {unit} | PyTorch {unit} |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        k_base = kiln.get((workload, "fp32"), {}).get("ms")
        t_base = torch.get((workload, "fp32"), {}).get("ms")
        rounds = []
        for m in modes:
            k, t = kiln.get((workload, m), {}), torch.get((workload, m), {})
            k_ms, t_ms = k.get("ms"), t.get("ms")
            k_peak = k["peak"] / (1 << 20) if k.get("peak") is not None else None
            t_peak = t["peak"] / (1 << 20) if t.get("peak") is not None else None
            k_tp, t_tp = throughput(k), throughput(t)
            lines.append(f"| {m} | {fmt(k_ms, '.2f')} | {fmt(t_ms, '.2f')} | {fmt(ratio(k_ms, t_ms), '.2f')} | "
                         f"{fmt(k_peak, '.0f')} | {fmt(t_peak, '.0f')} | {fmt(ratio(k_peak, t_peak), '.2f')} | "
                         f"{fmt(ratio(k_base, k_ms), '.2f')} | {fmt(ratio(t_base, t_ms), '.2f')} | "
                         f"{fmt(k_tp, ',.0f')} | {fmt(t_tp, ',.0f')} |")
            rounds.append(f"| {m} | {', '.join(f'{v:.2f}' for v in k.get('rounds', [])) or 'none'} | "
                          f"{', '.join(f'{v:.2f}' for v in t.get('rounds', [])) or 'none'} |")
            for who, s in (("kiln", k), ("PyTorch", t)):
                for e in s.get("errors", []):
                    notes.append(f"- {workload} {m} ({who}): {e}")
        # Each run's own median, so the spread between rounds (the noise a ratio must beat) is visible.
        lines += ["", "| mode | kiln ms, each run | PyTorch ms, each run |", "| --- | ---: | ---: |"] + rounds + [""]
    if notes:
        lines += ["Not measured (in some or all runs):"] + notes + [""]
    return "\n".join(lines)


def throughput(s):
    """Tokens or images per second at the median over the runs (items per step from any run)."""
    c = s.get("case", {})
    if s.get("ms") is None or not c.get("throughput") or not c.get("step_ms_median"):
        return None
    items = c["throughput"] * c["step_ms_median"] * 1e-3
    return items / (s["ms"] * 1e-3)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="*", help="JSON lines of bench_train_step and tools/train_step_peer.py")
    p.add_argument("--out", help="also write the markdown here")
    p.add_argument("--check", metavar="FILE", help="validate one program's records instead (CI)")
    p.add_argument("--expect-workloads", default="", help="with --check: workloads that must have records")
    p.add_argument("--expect-modes", default="", help="with --check: modes that must have records (or all)")
    args = p.parse_args()
    if bool(args.check) == bool(args.files):
        p.error("give either FILE... or --check FILE")
    if args.check:
        workloads = [w for w in args.expect_workloads.split(",") if w]
        modes = list(MODES) if args.expect_modes == "all" else [m for m in args.expect_modes.split(",") if m]
        for w in workloads:
            if w not in WORKLOADS:
                p.error(f"--expect-workloads: {w!r} is not one of {', '.join(WORKLOADS)}")
        for m in modes:
            if m not in MODES:
                p.error(f"--expect-modes: {m!r} is not one of {', '.join(MODES)}, all")
        problems = check(args.check, workloads, modes)
        for problem in problems:
            print(f"train_step_compare: {args.check}: {problem}", file=sys.stderr)
        if problems:
            return 1
        cases = sum(len(c) for _, c in load_runs([args.check]))
        print(f"train_step_compare: {args.check}: {cases} cases, every one with positive step times")
        return 0

    runs = load_runs(args.files)
    if not runs:
        print("train_step_compare: no records", file=sys.stderr)
        return 1
    text = render(runs) + "\n"
    sys.stdout.write(text)
    if args.out:
        write_atomic(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

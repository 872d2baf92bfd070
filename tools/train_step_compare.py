#!/usr/bin/env python3
"""Puts bench_train_step's JSON lines (kiln) beside tools/train_step_peer.py's (PyTorch eager, and
torch.compile where the peer ran with --compile): one markdown table per workload with, for each
mode, the step time of each implementation and kiln's ratio to each of the others (kiln/PyTorch,
kiln/torch.compile), the peak of allocated GPU memory of each and kiln's ratio to eager PyTorch's,
each one's speedup over its own fp32 step (so that what a mode buys in kiln can be read against what
it buys in PyTorch), each one's throughput and, where the records have it, each one's first-step
latency. Headed by the date, the kiln commit, the GPU and every command. Numbers come from the files
only.

A column group per implementation present in the files: kiln (impl "kiln"; the cases with
"cuda_graph": true, whose timed steps are replays of a captured CUDA graph, go in a group of their
own, "kiln (CUDA graph)"), PyTorch (impl "torch") and torch.compile (impl "torch-compile"; one group
per "compile" mode, labelled with it unless it is "default").

A file may hold several runs (tools/gpu_check.sh concatenates its rounds: kiln, PyTorch, kiln,
PyTorch); each run starts with its "header" record, and its "case" records follow. A group's number
for a case is the median over its runs of each run's median step time; its peak memory the largest
over its runs; its first step the median over its runs of "first_step_s" (seconds from building the
model to the end of the first warm-up step: compilation, cuDNN's searches and the allocator's first
segments included). The first-step columns are left out when no case in the files has the field.
Records of the optimizer's update alone ("timed": "optimizer", from --time optimizer) are not steps
and stay out of the tables (tools/cpu_bench.py has a row for them).

  usage: python3 tools/train_step_compare.py FILE [FILE...] [--out FILE.md]
         python3 tools/train_step_compare.py --check FILE [--expect-workloads W,...] [--expect-modes all|M,...]
--check validates one program's records (CI's smoke test): a header with date, commit and command;
every case without an error, with positive step times in order (min <= median <= max), a positive
throughput (null where "timed" is "optimizer": an update alone processes no tokens), a peak memory
that is a positive whole number on the GPU and null on the CPU, a "first_step_s" that is a positive
number (null only where the case or its header says warmup 0), and, where present, a boolean
"cuda_graph", a "compile" that is null or a mode's name, and a "timed" of "step" or "optimizer".
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_compare import json_lines, write_atomic  # noqa: E402

MODES = ("fp32", "tf32", "bf16", "fp16", "bf16-recompute", "bf16-nhwc", "fp16-nhwc")
WORKLOADS = ("gpt", "gpt2-124m", "resnet18", "cnn")
GPT_WORKLOADS = ("gpt", "gpt2-124m")
IMPLS = (("kiln", "kiln"), ("torch", "PyTorch"), ("torch-compile", "torch.compile"))


def mode_fits(workload, mode):
    # As bench_train_step's: channels-last needs 4-d activations (not the GPTs'), recompute blocks (not cnn's).
    return not (mode.endswith("-nhwc") and workload in GPT_WORKLOADS) and not (mode == "bf16-recompute" and
                                                                               workload == "cnn")


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
        if "cuda_graph" in header and not isinstance(header["cuda_graph"], bool):
            problems.append(f"header: cuda_graph {header['cuda_graph']!r} is not true or false")
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
            timed = c.get("timed", "step")
            if timed not in ("step", "optimizer"):
                problems.append(f"{where}: timed {timed!r} is neither \"step\" nor \"optimizer\"")
            elif timed == "optimizer" and c.get("throughput") is not None:
                problems.append(f"{where}: throughput {c.get('throughput')} of an optimizer update alone (null)")
            elif timed == "step" and not positive(c.get("throughput")):
                problems.append(f"{where}: throughput {c.get('throughput')} is not positive")
            peak = c.get("peak_bytes")
            if on_gpu and not (isinstance(peak, int) and peak > 0):
                problems.append(f"{where}: peak_bytes {peak} on the GPU is not a positive whole number")
            if not on_gpu and peak is not None:
                problems.append(f"{where}: peak_bytes {peak} on the CPU, where there is no allocator to ask")
            warmup = c.get("warmup", header.get("warmup"))
            first_step = c.get("first_step_s")
            if "first_step_s" not in c:
                problems.append(f"{where}: no first_step_s")
            elif first_step is None:
                if warmup != 0:
                    problems.append(f"{where}: first_step_s is null after {warmup} warm-up steps (null only "
                                    "with warmup 0)")
            elif not positive(first_step):
                problems.append(f"{where}: first_step_s {first_step} is not a positive number of seconds")
            if "cuda_graph" in c and not isinstance(c["cuda_graph"], bool):
                problems.append(f"{where}: cuda_graph {c['cuda_graph']!r} is not true or false")
            if "attention" in c:  # kiln's records since the field came (bench/train_step.cpp)
                is_gpt = str(c.get("workload", "")).startswith("gpt")
                gpt_kinds = ("scalar", "mma.sync", "mma.sync, fused backward", "wgmma", "wgmma, fused backward",
                             "mixed") if on_gpu else ("cpu",)
                allowed = gpt_kinds if is_gpt else ("none",)
                if c["attention"] not in allowed:
                    problems.append(f"{where}: attention {c['attention']!r} on {header.get('device')} is none of "
                                    f"{', '.join(allowed)}")
            if c.get("compile") is not None and not isinstance(c["compile"], str):
                problems.append(f"{where}: compile {c['compile']!r} is neither null nor a mode's name")
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


def group_of(header, case):
    """The column group of a case: (impl, variant). kiln's CUDA-graph cases (replays of a captured
    graph) are apart from its eager ones, and torch.compile's modes from each other."""
    impl = header.get("impl")
    if impl == "kiln":
        return impl, bool(case.get("cuda_graph", header.get("cuda_graph")))
    if impl == "torch-compile":
        return impl, case.get("compile") or header.get("compile") or "default"
    return impl, None


def label(group):
    impl, variant = group
    if impl == "kiln" and variant:
        return "kiln (CUDA graph)"
    if impl == "torch-compile" and variant != "default":
        return f"torch.compile ({variant})"
    return dict(IMPLS)[impl]


def summarize(runs):
    """{group: {(workload, mode): {"ms": median over runs, "rounds": [ms per run], "peak": bytes or None,
    "first": median first_step_s over runs or None, "case": a record, "errors": [...]}}}, the groups in
    IMPLS' order (kiln's eager before its CUDA-graph one); impls not in IMPLS are left out."""
    order = [impl for impl, _ in IMPLS]
    out = {}
    for header, cases in runs:
        if header.get("impl") not in order:
            continue
        for c in cases:
            if c.get("timed", "step") != "step":
                continue  # an optimizer update alone is not a step
            group = out.setdefault(group_of(header, c), {})
            s = group.setdefault((c["workload"], c["mode"]),
                                 {"rounds": [], "peaks": [], "firsts": [], "errors": [], "case": c})
            if "error" in c:
                s["errors"].append(c["error"])
                continue
            if s["rounds"]:  # a median over rounds means nothing across models
                for key in ("batch", "shape", "parameters"):
                    if c.get(key) != s["case"].get(key):
                        sys.exit(f"train_step_compare: {label(group_of(header, c))} ran {c['workload']} {c['mode']} "
                                 f"with {key} {s['case'].get(key)} in one record and {c.get(key)} in another; "
                                 "give one model's records per call")
            s["case"] = c
            s["rounds"].append(c["step_ms_median"])
            s["peaks"].append(c.get("peak_bytes"))
            if positive(c.get("first_step_s")):
                s["firsts"].append(c["first_step_s"])
    for group in out.values():
        for s in group.values():
            s["ms"] = statistics.median(s["rounds"]) if s["rounds"] else None
            peaks = [p for p in s["peaks"] if p is not None]
            s["peak"] = max(peaks) if peaks else None
            s["first"] = statistics.median(s["firsts"]) if s["firsts"] else None
    return {g: out[g] for g in sorted(out, key=lambda g: (order.index(g[0]), str(g[1])))}


def fmt(v, spec, missing="n/a"):
    return missing if v is None else format(v, spec)


def ratio(a, b):
    return a / b if a is not None and b else None


def row(cells):
    return "| " + " | ".join(cells) + " |"


def render(runs):
    headers = {impl: [h for h, _ in runs if h.get("impl") == impl] for impl, _ in IMPLS}
    kiln_h = headers["kiln"]
    peer_h = [h for impl, _ in IMPLS[1:] for h in headers[impl]]
    gpu = first([h.get("device_name") for h in kiln_h + peer_h])
    date = first([h.get("date") for h in kiln_h + peer_h])
    lines = [f"### Training step, {date[:10]}, {gpu}", ""]
    devices = [(name, first([h.get("device_name") for h in headers[impl]])) for impl, name in IMPLS if headers[impl]]
    if len({dev for _, dev in devices}) > 1:
        ran = ", ".join(f"{name} {'ran ' if n == 0 else ''}on {dev}" for n, (name, dev) in enumerate(devices))
        lines += [f"**Different devices: {ran}; the ratios below compare nothing.**", ""]
    if kiln_h:
        lines.append(f"- kiln commit `{first([h.get('kiln_commit') for h in kiln_h])}` (the binary's build stamp); "
                     f"device {first([h.get('device') for h in kiln_h])}, {gpu}")
    else:
        lines.append(f"- tree `{first([h.get('kiln_commit') for h in peer_h])}` (the peer's git describe); device "
                     f"{first([h.get('device') for h in peer_h])}, {gpu}")
    for n, h in enumerate(kiln_h, 1):
        lines.append(f"- kiln run {n}: `{h.get('command')}` ({h.get('date')}; {h.get('steps')} timed steps after "
                     f"{h.get('warmup')} warm-up, {h.get('timer')})")
    for n, h in enumerate(headers["torch"], 1):
        lines.append(f"- PyTorch {h.get('torch')} run {n}: `{h.get('command')}` ({h.get('date')}; {h.get('steps')} "
                     f"timed steps after {h.get('warmup')} warm-up, {h.get('timer')})")
    for n, h in enumerate(headers["torch-compile"], 1):
        lines.append(f"- torch.compile (PyTorch {h.get('torch')}, mode {h.get('compile') or 'default'}) run {n}: "
                     f"`{h.get('command')}` ({h.get('date')}; {h.get('steps')} timed steps after {h.get('warmup')} "
                     f"warm-up, {h.get('timer')})")

    summary = summarize(runs)
    groups = list(summary)
    kilns = [g for g in groups if g[0] == "kiln"]
    peers = [g for g in groups if g[0] != "kiln"]
    pairs = [(k, p) for k in kilns for p in peers]  # kiln's step time over each peer's
    peak_pairs = [(k, p) for k, p in pairs if p[0] == "torch"]  # and its peak over eager PyTorch's
    with_first = any("first_step_s" in c for _, cases in runs for c in cases)
    about = ("Step time: each run's median step, then the median over the runs. Peak: the most bytes allocated "
             "during the timed steps (largest over the runs), model, AdamW moments and batch included. "
             + ("kiln/PyTorch below 1: kiln takes less. " if kilns else "") +
             "\"vs fp32\": the framework's own fp32 step time divided by this mode's (above 1: the mode is faster).")
    if any(p[0] == "torch-compile" for p in peers) and kilns:
        about += " kiln/torch.compile likewise: below 1, kiln takes less than the compiled model."
    if any(k[1] for k in kilns):
        about += " kiln (CUDA graph): kiln's steps replayed from a captured CUDA graph."
    if with_first:
        about += (" First step: seconds from building the model to the end of its first warm-up step "
                  "(compilation and cuDNN's searches included), the median over the runs.")
    lines += ["", about, ""]

    notes = []
    for workload in WORKLOADS:
        modes = [m for m in MODES if any((workload, m) in summary[g] for g in groups)]
        if not modes:
            continue
        def model_case(g):
            # A case that failed may have failed before its model was built (an empty shape): the
            # model is described from one that ran, where there is one.
            found = [summary[g][(workload, m)]["case"] for m in modes if (workload, m) in summary[g]]
            return ([c for c in found if "error" not in c] or found)[0]

        anys = [(g, model_case(g)) for g in groups if any((workload, m) in summary[g] for m in modes)]
        cases = [c for _, c in anys]
        unit = first([c.get("throughput_unit") for c in cases], "")
        shape = first([c.get("shape") for c in cases], {})
        desc = ", ".join(f"{k} {v}" for k, v in shape.items())
        lines.append(f"**{workload}**: batch {first([c.get('batch') for c in cases])}; {desc}; "
                     f"{first([c.get('parameters') for c in cases])} parameters")
        # kiln's attention kernels in every run of the workload (bench_train_step's "attention"): more
        # than one kind means the rounds ran different kernels.
        kinds = sorted({c.get("attention") for h, hcases in runs if h.get("impl") == "kiln" for c in hcases
                        if c.get("workload") == workload and c.get("attention") not in (None, "none")})
        if kinds:
            lines.append(f"kiln's attention kernels: {', '.join(kinds)}")
        for key in ("batch", "shape", "parameters"):
            base_g, base = anys[0]
            for g, c in anys[1:]:
                if "error" not in c and "error" not in base and c.get(key) != base.get(key):
                    lines.append(f"**Not the same model: {label(base_g)}'s {key} is {base.get(key)}, "
                                 f"{label(g)}'s {c.get(key)}.**")
        names = [label(g) for g in groups]
        cols = ([f"{n} ms" for n in names] + [f"{label(k)}/{label(p)}" for k, p in pairs] +
                [f"{n} peak MiB" for n in names] + [f"{label(k)}/{label(p)}" for k, p in peak_pairs] +
                [f"{n} vs fp32" for n in names] + [f"{n} {unit}" for n in names] +
                ([f"{n} first step s" for n in names] if with_first else []))
        lines += ["", row(["mode"] + cols), row(["---"] + ["---:"] * len(cols))]
        base_ms = {g: summary[g].get((workload, "fp32"), {}).get("ms") for g in groups}
        rounds = []
        for m in modes:
            s = {g: summary[g].get((workload, m), {}) for g in groups}
            ms = {g: s[g].get("ms") for g in groups}
            peak = {g: s[g]["peak"] / (1 << 20) if s[g].get("peak") is not None else None for g in groups}
            cells = ([fmt(ms[g], ".2f") for g in groups] + [fmt(ratio(ms[k], ms[p]), ".2f") for k, p in pairs] +
                     [fmt(peak[g], ".0f") for g in groups] +
                     [fmt(ratio(peak[k], peak[p]), ".2f") for k, p in peak_pairs] +
                     [fmt(ratio(base_ms[g], ms[g]), ".2f") for g in groups] +
                     [fmt(throughput(s[g]), ",.0f") for g in groups] +
                     ([fmt(s[g].get("first"), ".3f") for g in groups] if with_first else []))
            lines.append(row([m] + cells))
            rounds.append(row([m] + [", ".join(f"{v:.2f}" for v in s[g].get("rounds", [])) or "none" for g in groups]))
            for g in groups:
                for e in s[g].get("errors", []):
                    notes.append(f"- {workload} {m} ({label(g)}): {e}")
        # Each run's own median, so the spread between rounds (the noise a ratio must beat) is visible.
        lines += ["", row(["mode"] + [f"{n} ms, each run" for n in names]), row(["---"] + ["---:"] * len(names))]
        lines += rounds + [""]
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

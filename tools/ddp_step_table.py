#!/usr/bin/env python3
"""Renders bench_ddp_step's JSON lines as a markdown table: the compute-only step, the whole
gradient all-reduced once (and in bfloat16, where the run has it), and each DDP (gradients as views
of its buckets or not), ZeRO-1 and ZeRO-2 case (bucket size, buckets, overlap on or off, and the
dtype its gradients are sent in when not their own) with its step time, the exposed communication
(the step minus the compute-only step) and the memory in live tensors: the most at once in forward
and backward and in the optimizer's step, and what stays between steps (records from before it was
measured show dashes). Headed by the run's date, commit, device and command. Numbers come from the
file only.

  usage: python3 tools/ddp_step_table.py FILE [--out FILE.md]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_compare import json_lines, write_atomic  # noqa: E402


MEMORY = ("peak_backward_bytes", "peak_step_bytes", "resident_bytes")


def memory_cells(r):
    return " | ".join(f"{r[k] / 2**20:.1f}" if k in r else "–" for k in MEMORY)


def memory_text(r):
    if MEMORY[0] not in r:
        return ""
    b, s, between = (r[k] / 2**20 for k in MEMORY)
    return f" (MiB in live tensors: {b:.1f} in backward, {s:.1f} in the step, {between:.1f} between steps)"


def render(path):
    recs = [r for _, r in json_lines(path, "ddp_step_table")]
    h = next(r for r in recs if r["record"] == "header")
    cases = [r for r in recs if r["record"] == "case"]
    compute_case = next(r for r in cases if r["case"] == "compute")
    compute = compute_case["step_seconds"]
    comm = next(r for r in cases if r["case"] == "all_reduce" and "comm_dtype" not in r)
    comm_bf16 = next((r for r in cases if r["case"] == "all_reduce" and r.get("comm_dtype") == "bfloat16"), None)
    in_bf16 = f" (in bfloat16: {comm_bf16['step_seconds'] * 1e3:.1f} ms)" if comm_bf16 else ""
    lines = [f"### DDP steps, {h['ranks']} ranks ({h['backend']}), {h['date'][:10]}, {h['device_name']}", "",
             f"- kiln commit `{h['kiln_commit']}`; `{h['command']}`",
             f"- GPT of {h['layers']} layers, {h['width']} wide, {h['batch']} x {h['block']} tokens per rank; "
             f"gradient {comm['grad_bytes']:,} bytes",
             f"- compute only (no DDP): {compute * 1e3:.1f} ms per step{memory_text(compute_case)}; the whole "
             f"gradient all-reduced once: {comm['step_seconds'] * 1e3:.1f} ms{in_bf16}", "",
             "| | bucket MB | buckets | overlap | step ms | exposed ms | backward MiB | step MiB | between MiB |",
             "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in cases:
        if r["case"] not in ("ddp", "zero"):
            continue
        if "bucket_mb" in r:
            setting = f"{r['bucket_mb']:g} | {r['buckets']} | {'on' if r['overlap'] else 'off'}"
        else:  # ZeRO-1 before it had buckets: one per group, reduced after backward
            setting = "| | off"
        if r["case"] == "ddp":
            name = "DDP, gradients as bucket views" if r.get("gradient_as_bucket_view") else "DDP"
        else:
            name = f"ZeRO-{r.get('stage', 1)}"
        if "comm_dtype" in r:
            name += f", gradients sent in {r['comm_dtype']}"
        lines.append(f"| {name} | {setting} | {r['step_seconds'] * 1e3:.1f} | "
                     f"{(r['step_seconds'] - compute) * 1e3:.1f} | {memory_cells(r)} |")
    zero = next((r for r in cases if r["case"] == "zero"), None)
    if zero:  # records from before ZeRO-1 was timed have none
        whole = next(r for r in cases if r["case"] == "compute")["optimizer_state_bytes"]
        lines += ["", f"AdamW's state per rank: {whole:,} bytes whole, {zero['optimizer_state_bytes']:,} with "
                  "ZeRO (the shard's moments)."]
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file")
    p.add_argument("--out", default="")
    a = p.parse_args()
    text = render(a.file)
    if a.out:
        write_atomic(a.out, text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())

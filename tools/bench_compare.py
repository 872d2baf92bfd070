#!/usr/bin/env python3
"""Joins gpu_bench's JSON lines with tools/torch_peer.py's (same cases and shapes) and prints
markdown tables for bench/RESULTS.md, headed by the date, GPU and both commands: memory-bound cases
with GB/s and % of each one's own copy ceiling; compute-bound cases (those with "flops") with
TFLOP/s and % of each one's own 8192^3 matmul of the same precision; and the ratio kiln/PyTorch of
throughput (above 1: kiln is faster). Cases the peer also timed under PyTorch's other backends
(attention's flash kernel) get a third table with kiln's ratio to each.

  usage: python3 tools/bench_compare.py KILN.jsonl TORCH.jsonl [--out FILE.md]
"""
import argparse
import json
import os
import sys
import tempfile


def file_mode(path):
    """The mode a file written over path should have: path's own where it exists, else a new
    file's (0666 less the umask)."""
    if os.path.exists(path):
        return os.stat(path).st_mode & 0o777
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def write_atomic(path, text):
    """Writes text (UTF-8) to path through a temporary file in the same folder, flushed to disk and
    renamed over path when complete: a reader never sees half a file, and the file has the mode of
    file_mode(path), not the temporary's private one. The tools write their results through it
    (tools/plot.py gives gnuplot's PNG the same mode before its rename)."""
    folder = os.path.dirname(os.path.abspath(path))
    mode = file_mode(path)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def json_lines(path, program):
    """(line number, record) for each non-blank line of a JSON-lines file; a line that is not JSON
    ends the program with its place."""
    with open(path) as f:
        for line_no, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                yield line_no, json.loads(line)
            except json.JSONDecodeError as e:
                raise SystemExit(f"{program}: {path}:{line_no}: not JSON ({e})")


def load(path):
    records = {}
    for _, rec in json_lines(path, "bench_compare"):
        key = (rec.get("case"), rec.get("dtype"), tuple(rec.get("shape") or []))
        records[key] = rec
    return records


def first(records, field):
    for rec in records.values():
        if rec.get(field):
            return rec[field]
    return "?"


def cell(rec, field, fmt):
    if rec is None:
        return "missing"
    if "error" in rec:
        return "n/a"
    return fmt.format(rec[field])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("kiln")
    p.add_argument("torch")
    p.add_argument("--out", help="also write the markdown here")
    args = p.parse_args()
    kiln, torch = load(args.kiln), load(args.torch)

    lines = [
        f"### {first(kiln, 'date')[:10]}, {first(kiln, 'gpu')}",
        "",
        f"- kiln: `{first(kiln, 'command')}` ({first(kiln, 'date')})",
        f"- PyTorch {first(torch, 'torch')}: `{first(torch, 'command')}` ({first(torch, 'date')})",
        "",
    ]
    if first(kiln, "gpu") != first(torch, "gpu"):
        lines.insert(2, f"**Different GPUs: kiln ran on {first(kiln, 'gpu')}, PyTorch on {first(torch, 'gpu')}; "
                        "the ratios below compare nothing.**\n")
    keys = list(kiln) + [k for k in torch if k not in kiln]

    def is_compute(key):
        # A case is compute-bound when either side gives its flops (errored records have them since
        # the case list came from the op table; the name test is for files written before).
        return any("flops" in rec for rec in (kiln.get(key), torch.get(key)) if rec) or key[0].startswith(
            ("matmul", "conv2d"))

    notes = []
    tables = (("Memory-bound: GB/s, and % of the same program's device-to-device copy", "GB/s", "gbps", "% of copy",
               "pct_of_copy", [k for k in keys if not is_compute(k)]),
              ("Compute-bound: TFLOP/s, and % of the same program's 8192^3 matmul in the same precision",
               "TFLOP/s", "tflops", "% of matmul", "pct_of_matmul", [k for k in keys if is_compute(k)]))
    for title, unit, field, pct_name, pct_field, rows in tables:
        if not rows:
            continue
        lines += [f"{title}:", "",
                  f"| case | dtype | shape | kiln {unit} | kiln {pct_name} | PyTorch {unit} | PyTorch {pct_name} | "
                  "kiln/PyTorch |",
                  "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
        fmt = "{:.0f}" if field == "gbps" else "{:.1f}"
        for key in rows:
            k, t = kiln.get(key), torch.get(key)
            case, dtype, shape = key
            ratio = "n/a"
            if k and t and "error" not in k and "error" not in t and t.get(field, 0) > 0:
                ratio = f"{k[field] / t[field]:.2f}"
            lines.append(f"| {case} | {dtype} | {list(shape)} | {cell(k, field, fmt)} | "
                         f"{cell(k, pct_field, '{:.1f}')} | {cell(t, field, fmt)} | "
                         f"{cell(t, pct_field, '{:.1f}')} | {ratio} |")
            for who, rec in (("kiln", k), ("PyTorch", t)):
                if rec and "error" in rec:
                    notes.append(f"- {case} {dtype} ({who}): {rec['error']}")
        lines.append("")
    # PyTorch's other ways to run a case (attention's backends, tools/torch_peer.py's variants):
    # kiln against each of them, beside PyTorch's default.
    varied = [key for key in keys if (torch.get(key) or {}).get("variants")]
    if varied:
        names = sorted({v for key in varied for v in torch[key]["variants"]})
        lines += ["PyTorch's other backends for the same cases: TFLOP/s (GB/s for memory-bound cases), and "
                  "kiln's ratio to each:", "",
                  "| case | dtype | shape | kiln | PyTorch default | " +
                  " | ".join(f"PyTorch {n}" for n in names) + " | kiln/default | " +
                  " | ".join(f"kiln/{n}" for n in names) + " |",
                  "| --- | --- | --- | ---: | ---: | " + " | ".join("---:" for _ in names) + " | ---: | " +
                  " | ".join("---:" for _ in names) + " |"]
        for key in varied:
            k, t = kiln.get(key), torch[key]
            case, dtype, shape = key
            field = "tflops" if is_compute(key) else "gbps"
            fmt = "{:.1f}" if field == "tflops" else "{:.0f}"

            def rate(rec):
                return rec.get(field) if rec and "error" not in rec and rec.get(field, 0) > 0 else None
            if field == "gbps":  # a variant records its time only: the case's bytes over it
                per = {n: (t["bytes"] / (v["median_ms"] * 1e-3) / 1e9 if "median_ms" in v and t.get("bytes")
                           else None) for n, v in t["variants"].items()}
            else:
                per = {n: v.get("tflops") for n, v in t["variants"].items()}
            kr = rate(k)
            cells = [cell(k, field, fmt), cell(t, field, fmt)]
            cells += [fmt.format(per[n]) if per.get(n) else "n/a" for n in names]
            ratios = [f"{kr / x:.2f}" if kr and x else "n/a" for x in [rate(t)] + [per.get(n) for n in names]]
            lines.append(f"| {case} | {dtype} | {list(shape)} | " + " | ".join(cells + ratios) + " |")
            for n, v in t["variants"].items():
                if "error" in v:
                    notes.append(f"- {case} {dtype} (PyTorch {n}): {v['error']}")
        lines.append("")
    if notes:
        lines += ["Not measured:"] + notes
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if args.out:
        write_atomic(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

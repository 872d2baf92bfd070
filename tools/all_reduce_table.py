#!/usr/bin/env python3
"""Renders bench_all_reduce's JSON lines (one or more runs, e.g. at 2 and 4 ranks) as a markdown
table: per rank count (and dtype and op, float32 sums where a record predates them) and message size, the native and the ring all-reduce's time, bus bandwidth
(algbw x 2(n-1)/n, as nccl-tests defines it) and the ring/native ratio of bus bandwidths. Headed by
each run's date, commit, device and command. Numbers come from the files only.

  usage: python3 tools/all_reduce_table.py FILE [FILE...] [--out FILE.md]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_compare import json_lines, write_atomic  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+")
    p.add_argument("--out", default="")
    a = p.parse_args()
    lines = []
    for path in a.files:
        recs = [r for _, r in json_lines(path, "all_reduce_table")]
        h = next(r for r in recs if r["record"] == "header")
        cases = {(r["algo"], r["bytes"]): r for r in recs if r["record"] == "case"}
        what = f"{h.get('dtype', 'float32')} {h.get('op', 'sum')}"
        lines += [f"### All-reduce ({what}), {h['ranks']} ranks ({h['backend']}), {h['date'][:10]}, {h['device_name']}",
                  "",
                  f"- kiln commit `{h['kiln_commit']}`; `{h['command']}`", "",
                  "| bytes | native us | native busbw GB/s | ring us | ring busbw GB/s | ring / native |",
                  "| ---: | ---: | ---: | ---: | ---: | ---: |"]
        for size in sorted({b for _, b in cases}):
            nat, ring = cases.get(("native", size)), cases.get(("ring", size))
            if not nat or not ring:
                continue
            ratio = ring["busbw_gbs"] / nat["busbw_gbs"] if nat["busbw_gbs"] > 0 else float("nan")
            lines.append(f"| {size:,} | {nat['seconds'] * 1e6:,.1f} | {nat['busbw_gbs']:.3f} | "
                         f"{ring['seconds'] * 1e6:,.1f} | {ring['busbw_gbs']:.3f} | {ratio:.2f} |")
        lines.append("")
    text = "\n".join(lines)
    if a.out:
        write_atomic(a.out, text)
    print(text)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Puts bench_gpu_data's JSON lines (kiln) beside tools/gpu_data_peer.py's (PyTorch with torchvision):
for each augmentation workload, kiln's fused kernel (a draw per image) against torchvision per image
and per batch (one draw for the batch), in images/s with the ratios; and kiln's training step fed by
the DataLoader and prefetcher against the same step fed from device-resident data. Headed by the date,
the kiln commit, the device and every command. A number is the median over the runs in the files;
numbers come from the files only.

  usage: python3 tools/gpu_data_compare.py FILE [FILE...] [--out FILE.md]
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_compare import json_lines, write_atomic  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+")
    p.add_argument("--out", default="")
    a = p.parse_args()
    recs = []
    for path in a.files:
        recs += [r for _, r in json_lines(path, "gpu_data_compare")]
    heads = [r for r in recs if r["record"] == "header"]
    cases = [r for r in recs if r["record"] == "case"]
    kh = [h for h in heads if h["impl"] == "kiln"]
    th = [h for h in heads if h["impl"] == "torch"]
    if not kh:
        raise SystemExit("gpu_data_compare: no kiln records")

    def med(impl, key, **match):
        v = [c[key] for c in cases if c["impl"] == impl and all(c.get(k) == x for k, x in match.items())]
        return statistics.median(v) if v else None

    def fmt(v, spec=",.0f"):
        return format(v, spec) if v is not None else "n/a"

    def ratio(x, y):
        return f"{x / y:.2f}" if x and y else "n/a"

    lines = [f"### Data pipeline on {kh[0]['device_name']}, {kh[0]['date'][:10]}", "",
             f"- kiln commit `{kh[0]['kiln_commit']}`, device {kh[0]['device']}; medians over "
             f"{len(kh)} kiln and {len(th)} PyTorch runs"]
    lines += [f"- kiln: `{h['command']}` ({h['date']})" for h in kh]
    lines += [f"- PyTorch {h['torch']}: `{h['command']}` ({h['date']})" for h in th]
    lines += ["", "| workload | batch | kiln fused, draw per image | torchvision per image | torchvision per batch "
              "(one draw) | kiln / per image | kiln / per batch |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for w in ("cifar32", "imagenet224"):
        k = med("kiln", "images_per_s", part="augment", workload=w)
        ti = med("torch", "images_per_s", part="augment", workload=w, mode="per_image")
        tb = med("torch", "images_per_s", part="augment", workload=w, mode="per_batch")
        b = next((c["batch"] for c in cases if c.get("workload") == w), "?")
        lines.append(f"| {w} | {b} | {fmt(k)} | {fmt(ti)} | {fmt(tb)} | {ratio(k, ti)} | {ratio(k, tb)} |")
    res = med("kiln", "ms_per_step", part="feed", feed="resident")
    ld = med("kiln", "ms_per_step", part="feed", feed="loader")
    if res is not None or ld is not None:
        lines += ["", "| SmallCNN step on Fashion-MNIST, fed | ms per step |", "| --- | ---: |",
                  f"| from device-resident images | {fmt(res, '.3f')} |",
                  f"| by the DataLoader + DevicePrefetcher | {fmt(ld, '.3f')} |",
                  f"| loader / resident | {ratio(ld, res)} |"]
    text = "\n".join(lines) + "\n"
    if a.out:
        write_atomic(a.out, text)
    print(text)


if __name__ == "__main__":
    main()

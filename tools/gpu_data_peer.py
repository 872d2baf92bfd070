#!/usr/bin/env python3
"""PyTorch peer of bench/gpu_data.cpp's augment part: torchvision's v2 transforms on uint8 images on
the device, for the same two workloads (cifar32: RandomCrop(32, padding=4), RandomHorizontalFlip,
ToDtype(float32, scale=True), Normalize; imagenet224: 256x256 in, RandomResizedCrop(224, antialias=False),
RandomHorizontalFlip, ColorJitter(0.4, 0.4, 0.4), ToDtype, Normalize), timed two ways:
  per_image  the transform applied to each image of the batch in a Python loop (a draw per image,
             what kiln's kernel does in one launch), then stacked
  per_batch  the transform applied once to the whole [B, C, H, W] batch: one draw for all images
Median of --iters calls between CUDA events (time.perf_counter on the CPU) after --warmup; writes the
same JSON lines as bench_gpu_data (impl "torch"). Reports speed; never asserts it.

  usage: python3 tools/gpu_data_peer.py [--device cuda] [--batch 512] [--iters 50] [--json FILE]
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_compare import write_atomic  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda")
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--per-image-iters", type=int, default=5, help="timed calls of the slow per-image loop")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--json", default="")
    a = p.parse_args()

    import torch
    from torchvision.transforms import v2

    dev = torch.device(a.device)
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    workloads = [
        ("cifar32", 32, v2.Compose([v2.RandomCrop(32, padding=4), v2.RandomHorizontalFlip(),
                                    v2.ToDtype(torch.float32, scale=True), v2.Normalize(mean, std)])),
        ("imagenet224", 256, v2.Compose([v2.RandomResizedCrop(224, antialias=False), v2.RandomHorizontalFlip(),
                                         v2.ColorJitter(0.4, 0.4, 0.4), v2.ToDtype(torch.float32, scale=True),
                                         v2.Normalize(mean, std)])),
    ]

    def timed(fn, n):
        ms = []
        for _ in range(n):
            if dev.type == "cuda":
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                fn()
                e.record()
                torch.cuda.synchronize()
                ms.append(s.elapsed_time(e))
            else:
                t0 = time.perf_counter()
                fn()
                ms.append((time.perf_counter() - t0) * 1e3)
        return sorted(ms)

    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    lines = [json.dumps({"record": "header", "impl": "torch", "torch": torch.__version__,
                         "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                         "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
                         "device": str(dev), "device_name": name,
                         "timer": "cuda events" if dev.type == "cuda" else "perf_counter"})]
    for wname, size, t in workloads:
        images = torch.randint(0, 256, (a.batch, 3, size, size), dtype=torch.uint8, device=dev)
        modes = (("per_image", lambda: torch.stack([t(img) for img in images]), a.per_image_iters),
                 ("per_batch", lambda: t(images), a.iters))
        for mode, fn, n in modes:
            for _ in range(min(a.warmup, n)):
                fn()
            ms = timed(fn, n)
            med = statistics.median(ms)
            ips = a.batch / (med / 1e3)
            print(f"torch augment {wname:12s} {mode:9s} batch {a.batch}: median {med:.3f} ms, {ips:.0f} images/s",
                  flush=True)
            lines.append(json.dumps({"record": "case", "impl": "torch", "part": "augment", "workload": wname,
                                     "mode": mode, "batch": a.batch, "median_ms": round(med, 5),
                                     "min_ms": round(ms[0], 5), "max_ms": round(ms[-1], 5),
                                     "images_per_s": round(ips, 1)}))
    if a.json:
        write_atomic(a.json, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""PyTorch peer of bench/data_loader.cpp: images per second that torch.utils.data.DataLoader delivers
for Fashion-MNIST's training set with torchvision's v2 transforms (RandomCrop 28 with padding 2,
RandomHorizontalFlip, ToDtype float32 scaled, Normalize) applied per sample, shuffled, in batches of
--batch, for each --workers count (persistent workers, prefetch factor --prefetch); and the same loader
without transforms (uint8 batches). Each case reads --warmup batches, then times the next --batches.
Writes the same JSON lines as bench_data_loader (impl "torch"). Reports speed; never asserts it.

  usage: python3 tools/data_loader_peer.py [--workers 0,1,2] [--batch 256] [--batches 100] [--json FILE]
"""
import argparse
import datetime
import gzip
import json
import os
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_compare import write_atomic  # noqa: E402


def read_idx(path):
    import numpy as np
    with gzip.open(path, "rb") as f:
        data = f.read()
    zero, dtype, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype != 0x08:
        raise SystemExit(f"{path}: not a uint8 idx file")
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", default="0,1,2")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--batches", type=int, default=100)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--prefetch", type=int, default=2)
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads in the main process")
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--json", default="")
    a = p.parse_args()

    import torch
    from torch.utils.data import DataLoader, Dataset
    from torchvision.transforms import v2

    if a.threads:
        torch.set_num_threads(a.threads)
    images = torch.from_numpy(read_idx(os.path.join(a.data_dir, "train-images-idx3-ubyte.gz")).copy())
    labels = torch.from_numpy(read_idx(os.path.join(a.data_dir, "train-labels-idx1-ubyte.gz")).astype("int64"))
    images = images.view(-1, 1, 28, 28)

    class Fashion(Dataset):
        def __init__(self, transform):
            self.transform = transform

        def __len__(self):
            return images.shape[0]

        def __getitem__(self, i):
            x = images[i]
            if self.transform is not None:
                x = self.transform(x)
            return x, labels[i]

    augment = v2.Compose([v2.RandomCrop(28, padding=2), v2.RandomHorizontalFlip(),
                          v2.ToDtype(torch.float32, scale=True), v2.Normalize([0.2860], [0.3530])])
    header = {"record": "header", "impl": "torch", "torch": torch.__version__,
              "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
              "command": " ".join([os.path.basename(sys.executable)] + sys.argv), "threads": torch.get_num_threads(),
              "batch": a.batch, "batches": a.batches, "warmup": a.warmup, "prefetch": a.prefetch}
    lines = [json.dumps(header)]
    for task, transform in (("augment", augment), ("uint8", None)):
        for w in [int(v) for v in a.workers.split(",")]:
            kw = {"num_workers": w}
            if w > 0:
                kw.update(persistent_workers=True, prefetch_factor=a.prefetch)
            loader = DataLoader(Fashion(transform), batch_size=a.batch, shuffle=True, **kw)
            it = iter(loader)

            def read(n):
                nonlocal it
                count = 0
                for _ in range(n):
                    try:
                        x, _ = next(it)
                    except StopIteration:
                        it = iter(loader)
                        x, _ = next(it)
                    count += x.shape[0]
                return count

            read(a.warmup)
            t0 = time.perf_counter()
            n = read(a.batches)
            s = time.perf_counter() - t0
            del it, loader
            print(f"torch {task:7s} workers {w}: {n} images in {s:.3f} s, {n / s:.0f} images/s", flush=True)
            lines.append(json.dumps({"record": "case", "impl": "torch", "task": task, "workers": w, "images": n,
                                     "seconds": round(s, 6), "images_per_s": round(n / s, 1)}))
    if a.json:
        write_atomic(a.json, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

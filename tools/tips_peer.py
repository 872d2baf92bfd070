#!/usr/bin/env python3
"""PyTorch peer of bench/tips.cpp (bench_tips): the tips' A/B workloads (docs/tips/README.md) run in
PyTorch, the CPU tips on the CPU and with --device cuda the GPU tips on the first GPU, the same sizes,
variants in the same order, timed the same way, and written as the same JSON lines with impl "pytorch",
so tools/tips.py can put them beside kiln's.

The workloads, as bench_tips's (the init need not match kiln's; the shapes and the work must):
  cnn step      SmallCNN (kiln's nn::SmallCNN, dropout 0): conv3x3 1->32 (no bias) + BN + ReLU +
                MaxPool2d(2), conv3x3 32->64 (no bias) + BN + ReLU + MaxPool2d(2), Flatten,
                Linear(64*7*7, 128), ReLU, Dropout(0), Linear(128, 10) on 1x28x28 random images;
                AdamW(lr 1e-3, PyTorch's defaults: betas 0.9/0.999, eps 1e-8, weight decay 1e-2, as
                kiln's); cross-entropy; optimizer.zero_grad(set_to_none=True) unless the tip says not
  conv-bn step  3x3 conv + BN + ReLU at 32, 64 (then MaxPool2d(2)), 64 wide, AdaptiveAvgPool2d(1),
                Flatten, Linear(64, 10) on 3x32x32 images; batch 64, AdamW
  loader loop   a map-style Dataset of random uint8 1x28x28 images (made once, seeded), each sample
                through torchvision.transforms.v2 RandomCrop(28, padding=2), RandomHorizontalFlip,
                ToDtype(float32, scale=True), Normalize(0.286, 0.353); torch.utils.data.DataLoader,
                batch 128, no shuffle, persistent workers where there are workers; a cnn step a batch
  attention     q, k, v [8, 4, 256, 64] float32, causal, forward and backward of the sum of the output
  gelu          x [4096, 1024] float32, forward and backward of the sum (tanh form)
  gpt step      nanoGPT's GPT as kiln's nn::GPT: token + position embeddings, pre-LayerNorm blocks of
                causal self-attention (one fused q/k/v Linear, F.scaled_dot_product_attention with
                is_causal) and an MLP (Linear 4C, GELU tanh form, Linear C), biases on, dropout 0,
                lm_head tied to the token embedding; 4 layers, 4 heads, 128 wide, block 128,
                vocabulary 512, batch 8, AdamW; recompute: torch.utils.checkpoint around each block
                (use_reentrant=False, no RNG state saved: as kiln's, nothing in a block draws one)
  validation    SmallCNN in eval mode with grad enabled, 16 batches of 256 (tip 19)
The tip functions below time bench_tips's units: a train_step, an epoch of a DataLoader, a pass.

The GPU tips (--device cuda, as bench_tips --device cuda; each GPU tip's function takes the device, so
tests/tools/tips_peer_gpu_check.py runs them on the CPU at --quick's sizes, the GPU's own switches left
alone there):
  4   a uint8 [256, 3, 224, 224] tensor copied to the GPU: from pageable memory, then from its
      pin_memory() copy with non_blocking=True; GB/s
  8   ResNet-18 for 32x32 images (train_step_peer.py's, as kiln's resnet18_cifar), float32 with TF32 in
      cuDNN (PyTorch's and kiln's default: torch.backends.cudnn.allow_tf32 True, matmul's False), batch
      128, AdamW; torch.backends.cudnn.benchmark False, then True
  9   a [4096, 4096] float32 tensor of normal draws: torch.randn on the CPU, then .to("cuda"), against
      torch.randn(..., device="cuda"); no rate, as bench_tips's
  10  gpt step on the GPU: the gpt step's GPT at nanoGPT's character size (6 layers, 6 heads, 384
      wide, block 256, vocabulary 65), batch 32, AdamW, float32; torch.backends.cuda.matmul.allow_tf32
      and torch.backends.cudnn.allow_tf32 both False, then both True
  14  SmallCNN steps on the GPU fed by a 2-worker DataLoader (pin_memory, persistent_workers) of the
      loader loop's images, batch 256, 16 batches an epoch: augmented per sample in the workers (the
      loader loop's transform), against uint8 batches augmented on the GPU by augment_batch (the same
      pad-crop 2, flip and normalize, a draw per image as kiln's kernel; a few PyTorch ops, where kiln
      has one kernel: torchvision's transforms draw once for a whole batch)
  17  tip 10's gpt step with matmul TF32 on: float32, then torch.autocast bfloat16, then torch.autocast
      float16 with torch.amp.GradScaler (disabled in the other two, as kiln's); roles A, B, B as kiln's
  23  SmallCNN steps on the GPU, batch 256, without and with a thread that reads the card every 100 ms
      (the first read at once; a late read goes at once, never in bursts) through torch.cuda's NVML
      reads: utilization, device_memory_used, power_draw and clock_rate (kiln's GpuSampler's four);
      the B row's "samples" counts the reads. They need pynvml (nvidia-ml-py): where they fail, tip 23
      is written as one "unavailable" record with the reason, and no numbers
On the GPU each unit ends with torch.cuda.synchronize() inside its timed span, as bench_tips's measure,
and "peak_mb" is torch.cuda.max_memory_allocated() over the timed units less the bytes allocated when
the tip began, as kiln's caching allocator's. --device cuda where torch.cuda.is_available() is false is
bad input (exit 2): the GPU tips never run on the CPU in a record.

Timing: --warmup untimed units, then --reps units with time.perf_counter around each; "ms" is the
median, "rate" the items per second at the median (null where bench_tips has none). Tip 25 times one
whole training run once, as bench_tips does. "peak_mb" is null on the CPU: PyTorch counts no CPU
allocator bytes. Where PyTorch differs from kiln by its nature: DataLoader workers are processes
(kiln's are threads), a DataLoader without workers takes no persistent_workers or prefetch_factor, and
the synthetic images are made once (kiln's SyntheticImages draws each on get(), a few Philox blocks).
Tip 20 (kiln's CPU allocator cache) has no PyTorch knob: --tips 20 is accepted and prints nothing.

--threads sets torch.set_num_threads (default 2: tools/tips.py runs bench_tips with KILN_NUM_THREADS=2)
and OMP_NUM_THREADS and MKL_NUM_THREADS before torch loads. --quick shrinks every size and count as
bench_tips --quick does, for CI: its numbers mean nothing. Bad input is one line on stderr, exit 2.

  usage: python3 tools/tips_peer.py [--device cpu|cuda] [--tips 1,2,...] [--reps N] [--warmup N] [--quick]
                                    [--threads N] [--json FILE] [--data DIR]
"""
import argparse
import contextlib
import gzip
import json
import math
import os
import shutil
import statistics
import struct
import sys
import tempfile
import threading
import time
from collections import namedtuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_compare import write_atomic  # noqa: E402
from train_step_peer import RESNET18_BLOCKS, RESNET18_WIDTHS, define_models  # noqa: E402

FASHION_MNIST_DEFAULT = "/usr/share/datasets/fashion-mnist"
FASHION_MNIST_FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                       "t10k-labels-idx1-ubyte.gz")
NO_PYTORCH_KNOB = (20,)  # bench_tips's tip 20 empties kiln's CPU allocator cache; PyTorch keeps none
NOT_HERE = "13 is tools/tips.py's (bench_ddp_step)"

# A tip's A/B: the workload, the unit timed, the rate's unit ("" where there is no rate), and the
# variants, A first, each (name, measured) with measured a dict: ms, rate, and any extras.
TipResult = namedtuple("TipResult", "workload unit rate_unit variants")
Models = namedtuple("Models", "GPT ResNet SmallCNN")
MODELS = None  # set by load_torch

# Set by main() once --threads is in the environment (see load_torch).
torch = nn = F = None
# The allocated bytes on the GPU when the running tip began (begin_tip): a variant's peak_mb counts from here.
tip_start_bytes = 0


class InputError(Exception):
    """Bad input (a flag, the data folder, --device cuda without a GPU): one line on stderr and exit code 2,
    no traceback."""


class Unavailable(Exception):
    """A tip that cannot be measured here (tip 23 without NVML's Python bindings): written as one
    "unavailable" record with the reason, never as numbers."""


class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise InputError(message)


def parse_args(argv):
    p = Parser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                   help="cpu: the CPU tips; cuda: the GPU tips (4, 8, 9, 10, 14, 17, 23), on the first GPU")
    p.add_argument("--tips", default="", help="the tips to run, comma-separated (default: every tip of --device)")
    p.add_argument("--reps", type=int, default=10, help="timed units per variant (median reported)")
    p.add_argument("--warmup", type=int, default=2, help="untimed units first")
    p.add_argument("--quick", action="store_true", help="bench_tips --quick's tiny sizes: the numbers mean nothing")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    p.add_argument("--json", help="also write the records here (atomically, after every tip)")
    p.add_argument("--data", default=FASHION_MNIST_DEFAULT, help="Fashion-MNIST's folder, the four .gz IDX files")
    args = p.parse_args(argv)
    for flag, value, lo in (("--reps", args.reps, 1), ("--warmup", args.warmup, 0), ("--threads", args.threads, 1)):
        if value < lo:
            raise InputError(f"{flag} expects a whole number >= {lo}, got {value}")
    cpu_tips = [number for number, _, _ in TIPS] + list(NO_PYTORCH_KNOB)
    gpu_tips = [number for number, _, _ in GPU_TIPS]
    try:
        args.tips = [int(t) for t in args.tips.split(",") if t.strip()]
    except ValueError:
        raise InputError(f"--tips expects tip numbers separated by commas, got {args.tips!r}") from None
    for t in args.tips:
        if t not in cpu_tips + gpu_tips:
            raise InputError(f"--tips: {t} is not a tip of tips_peer.py ({NOT_HERE})")
        if (t in gpu_tips) != (args.device == "cuda"):
            kind, device = ("GPU", "cuda") if t in gpu_tips else ("CPU", "cpu")
            raise InputError(f"--tips: tip {t} is a {kind} tip: run it with --device {device}")
    if args.device == "cpu" and (not args.tips or 25 in args.tips):
        missing = [f for f in FASHION_MNIST_FILES if not os.path.isfile(os.path.join(args.data, f))]
        if missing:
            raise InputError(f"--data {args.data}: no {', '.join(missing)} there (tip 25 trains on Fashion-MNIST)")
    if args.json:
        folder = os.path.dirname(os.path.abspath(args.json))
        if not os.path.isdir(folder):
            raise InputError(f"--json {args.json}: {folder} is not a folder")
    return args


def load_torch(threads):
    """Loads torch after setting the OpenMP and MKL thread counts (read at load), then set_num_threads."""
    global torch, nn, F, MODELS
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(threads)
    import torch as torch_module

    torch, nn, F = torch_module, torch_module.nn, torch_module.nn.functional
    torch.set_num_threads(threads)
    # The GPT and SmallCNN that tools/train_step_peer.py already builds as kiln's.
    MODELS = Models(*define_models(torch))


def size(args, full, quick):
    return quick if args.quick else full


def measure(args, unit, items_per_unit=None, device=None):
    """Runs `unit` --warmup times untimed, then --reps times timed: the median ms and the rate. On a GPU
    (`device` a CUDA device) each unit ends with torch.cuda.synchronize(), inside its timed span, so its
    time is the work's, not the launches' (bench_tips's measure), and peak_mb is the allocated bytes'
    peak over the timed units above tip_start_bytes."""
    gpu = device is not None and device.type == "cuda"

    def run():
        unit()
        if gpu:
            torch.cuda.synchronize(device)

    for _ in range(args.warmup):
        run()
    if gpu:
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    ms = 1e3 * statistics.median(times)
    m = {"ms": ms, "rate": items_per_unit / (ms / 1e3) if items_per_unit else None}
    if gpu:
        m["peak_mb"] = (torch.cuda.max_memory_allocated(device) - tip_start_bytes) / (1024.0 * 1024.0)
    return m


def begin_tip(device):
    """Where a tip's peak memory counts from on a GPU: the bytes allocated now (bench_tips's g_tip_start_bytes)."""
    global tip_start_bytes
    tip_start_bytes = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0


# --- models and data -----------------------------------------------------------------------------------


def small_cnn():
    """kiln's nn::SmallCNN for 1x28x28 images with dropout 0, in training mode, seeded as kiln's."""
    torch.manual_seed(0)
    return MODELS.SmallCNN(1, 10, 28, 128).train()


def conv_bn_net(bias):
    """bench_tips's conv_bn_net: [conv3x3 + BN + ReLU] at 32, 64, max-pool, 64, global pool, Linear(64, 10)."""
    torch.manual_seed(0)

    def block(cin, cout):
        return [nn.Conv2d(cin, cout, 3, padding=1, bias=bias), nn.BatchNorm2d(cout), nn.ReLU()]

    return nn.Sequential(*block(3, 32), *block(32, 64), nn.MaxPool2d(2), *block(64, 64), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(64, 10)).train()


def train_step(model, opt, x, y, set_to_none=True):
    """Forward, cross-entropy, backward, step, zero_grad: bench_tips's train_step."""
    F.cross_entropy(model(x), y).backward()
    opt.step()
    opt.zero_grad(set_to_none=set_to_none)


def images(batch, channels, side):
    return torch.randn(batch, channels, side, side)


def labels(batch):
    return torch.randint(0, 10, (batch,))


class AugmentedImages:
    """A map-style dataset (all a DataLoader needs: __len__ and __getitem__) of random uint8 1x28x28
    images, made once from a fixed seed, with labels; each sample goes through `transform`."""

    def __init__(self, n, transform):
        generator = torch.Generator().manual_seed(0)
        self.images = torch.randint(0, 256, (n, 1, 28, 28), dtype=torch.uint8, generator=generator)
        self.labels = torch.randint(0, 10, (n,), generator=generator)
        self.transform = transform  # None: the uint8 image as it is (tip 14 augments whole batches)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        image = self.images[i]
        return (image if self.transform is None else self.transform(image)), self.labels[i]


def augment():
    """bench_tips's augment(): pad-crop 2, horizontal flip, normalize, per sample (float32 out)."""
    from torchvision.transforms import v2

    return v2.Compose([v2.RandomCrop(28, padding=2), v2.RandomHorizontalFlip(), v2.ToDtype(torch.float32, scale=True),
                       v2.Normalize([0.286], [0.353])])


def data_loader(dataset, batch, workers, prefetch=None, persistent=False, pin_memory=False):
    """A DataLoader in bench_tips's terms. PyTorch refuses persistent_workers and prefetch_factor without
    workers: there they are left out."""
    if workers == 0:
        return torch.utils.data.DataLoader(dataset, batch_size=batch, pin_memory=pin_memory)
    return torch.utils.data.DataLoader(dataset, batch_size=batch, num_workers=workers, prefetch_factor=prefetch,
                                       persistent_workers=persistent, pin_memory=pin_memory)


def read_idx(path):
    """An IDX file (gzip) as a NumPy uint8 array of its dimensions."""
    import numpy as np

    try:
        with gzip.open(path, "rb") as f:
            data = f.read()
        zero, dtype, ndim = struct.unpack(">HBB", data[:4])
        if zero != 0 or dtype != 0x08:
            raise ValueError("not a uint8 IDX file")
        dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
        return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)
    except (OSError, EOFError, ValueError, struct.error) as e:
        raise InputError(f"{path}: {e}") from None


def fashion_mnist(folder, split, limit):
    """The first `limit` images of a split, normalized as bench_tips's ((x / 255 - 0.286) / 0.353), and labels."""
    x = read_idx(os.path.join(folder, f"{split}-images-idx3-ubyte.gz"))[:limit]
    y = read_idx(os.path.join(folder, f"{split}-labels-idx1-ubyte.gz"))[:limit]
    x = torch.from_numpy(x.copy()).view(-1, 1, 28, 28).float()
    return (x / 255.0 - 0.286) / 0.353, torch.from_numpy(y.astype("int64"))


def warmup_cosine_lr(step, base_lr, warmup_steps, total_steps, min_lr=0.0):
    """kiln's nn::optim::warmup_cosine_lr: linear warmup over [0, warmup_steps) from base_lr / (warmup + 1),
    then a cosine from base_lr to min_lr at total_steps, min_lr after."""
    step = max(step, 0)
    if step < warmup_steps:
        return base_lr * (step + 1) / (warmup_steps + 1)
    if step >= total_steps:
        return min_lr
    ratio = (step - warmup_steps) / (total_steps - warmup_steps)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (base_lr - min_lr)


# --- the tips ------------------------------------------------------------------------------------------


def loader_loop(args, variants):
    """Tips 2 and 3: an epoch of augmented synthetic images, a cnn step a batch. variants: (name, workers,
    prefetch factor)."""
    batch, batches = size(args, 128, 16), size(args, 16, 2)
    dataset = AugmentedImages(batch * batches, augment())
    r = TipResult(f"loader loop: SyntheticImages 1x28x28, pad-crop 2 + flip + normalize per sample, batch {batch}, "
                  f"{batches} batches an epoch, a cnn step each", "epoch", "images/s", [])

    def run(workers, prefetch):
        model = small_cnn()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        loader = data_loader(dataset, batch, workers, prefetch, persistent=True)

        def epoch():
            for x, y in loader:
                train_step(model, opt, x, y)

        return measure(args, epoch, batch * batches)

    for name, workers, prefetch in variants:
        r.variants.append((name, run(workers, prefetch)))
    return r


def tip_batch_size(args):
    r = TipResult("cnn step (SmallCNN, 1x28x28), AdamW", "step", "images/s", [])
    for batch in (size(args, 32, 4), size(args, 256, 16)):
        model = small_cnn()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x, y = images(batch, 1, 28), labels(batch)
        r.variants.append((f"batch {batch}", measure(args, lambda: train_step(model, opt, x, y), batch)))
    return r


def tip_workers(args):
    return loader_loop(args, (("0 workers", 0, None), ("2 workers", 2, 2)))


def tip_prefetch(args):
    return loader_loop(args, (("prefetch 1", 2, 1), ("prefetch 4", 2, 4)))


def tip_persistent(args):
    """A 2-worker DataLoader alone: an epoch is one pass over its batches, no model."""
    batch, batches = size(args, 64, 8), 4
    dataset = AugmentedImages(batch * batches, augment())
    r = TipResult(f"a 2-worker DataLoader alone: SyntheticImages with the loader loop's augmentation, batch {batch}, "
                  f"{batches} batches an epoch", "epoch", "images/s", [])

    def run(persistent):
        loader = data_loader(dataset, batch, 2, prefetch=2, persistent=persistent)

        def epoch():
            for _ in loader:
                pass

        return measure(args, epoch, batch * batches)

    for persistent in (False, True):
        r.variants.append(("persistent workers" if persistent else "workers started each epoch", run(persistent)))
    return r


def tip_zero_grad(args):
    batch = size(args, 64, 4)
    r = TipResult(f"cnn step, batch {batch}", "step", "images/s", [])
    for none in (False, True):
        model = small_cnn()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x, y = images(batch, 1, 28), labels(batch)
        r.variants.append((f"optimizer.zero_grad(set_to_none={none})",
                           measure(args, lambda: train_step(model, opt, x, y, set_to_none=none), batch)))
    return r


def tip_conv_bias(args):
    batch = size(args, 64, 4)
    r = TipResult(f"conv-bn step, batch {batch}", "step", "images/s", [])
    for bias in (True, False):
        net = conv_bn_net(bias)
        opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
        x, y = images(batch, 3, 32), labels(batch)
        m = measure(args, lambda: train_step(net, opt, x, y), batch)
        m["parameters"] = sum(p.numel() for p in net.parameters())
        r.variants.append(("conv bias before BN" if bias else "no conv bias", m))
    return r


def tip_no_grad(args):
    """One evaluation pass: forward and argmax, with the tape on, then under torch.no_grad()."""
    batch = size(args, 512, 8)
    r = TipResult(f"evaluation pass of SmallCNN (eval mode), batch {batch}", "pass", "images/s", [])
    model = small_cnn().eval()
    x = images(batch, 1, 28)
    for no_grad in (False, True):
        def unit():
            with torch.no_grad() if no_grad else contextlib.nullcontext():
                model(x).argmax(1)

        r.variants.append(("torch.no_grad()" if no_grad else "tape on", measure(args, unit, batch)))
    return r


def tip_attention(args):
    """Causal attention forward, out.sum().backward(), the grads set to None."""
    b, h, t, d = size(args, 8, 2), 4, size(args, 256, 32), 64
    r = TipResult(f"attention, q k v [{b}, 4, {t}, 64] float32, causal, forward + backward", "pass", "", [])
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, h, t, d).requires_grad_() for _ in range(3))
    mask = torch.ones(t, t, dtype=torch.bool).triu(diagonal=1)
    scale = 1.0 / math.sqrt(d)
    for fused in (False, True):
        def unit():
            if fused:
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                s = (q @ k.transpose(-2, -1)) * scale
                out = torch.softmax(s.masked_fill(mask, float("-inf")), -1) @ v
            out.sum().backward()
            q.grad = k.grad = v.grad = None

        r.variants.append(("F.scaled_dot_product_attention" if fused else "matmul, mask, softmax, matmul",
                           measure(args, unit)))
    return r


def tip_channels_last(args):
    batch = size(args, 64, 4)
    r = TipResult(f"conv-bn step (no bias), batch {batch}", "step", "images/s", [])
    for nhwc in (False, True):
        net = conv_bn_net(False)
        x = images(batch, 3, 32)
        if nhwc:
            net = net.to(memory_format=torch.channels_last)
            x = x.contiguous(memory_format=torch.channels_last)
        opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
        y = labels(batch)
        r.variants.append(("channels-last (NHWC)" if nhwc else "NCHW",
                           measure(args, lambda: train_step(net, opt, x, y), batch)))
    return r


def tip_anomaly(args):
    """cnn steps (warm-up included) inside torch.autograd.set_detect_anomaly(True), then (False)."""
    batch = size(args, 64, 4)
    r = TipResult(f"cnn step, batch {batch}", "step", "images/s", [])
    for anomaly in (True, False):
        model = small_cnn()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x, y = images(batch, 1, 28), labels(batch)
        with torch.autograd.set_detect_anomaly(anomaly):
            m = measure(args, lambda: train_step(model, opt, x, y), batch)
        r.variants.append(("anomaly mode on" if anomaly else "anomaly mode off", m))
    return r


def tip_fused_pointwise(args):
    """GELU's tanh form as a chain of ops, then F.gelu; y.sum().backward(), x.grad set to None."""
    rows = size(args, 4096, 64)
    r = TipResult(f"GELU (tanh form) of [{rows}, 1024] float32, forward + backward of the sum", "pass", "", [])
    torch.manual_seed(0)
    x = torch.randn(rows, 1024).requires_grad_()
    c = math.sqrt(2.0 / math.pi)
    for fused in (False, True):
        def unit():
            if fused:
                y = F.gelu(x, approximate="tanh")
            else:
                y = x * 0.5 * (torch.tanh((x + x * x * x * 0.044715) * c) + 1.0)
            y.sum().backward()
            x.grad = None

        r.variants.append(("F.gelu(approximate='tanh')" if fused else "a chain of pointwise ops", measure(args, unit)))
    return r


def tip_no_history(args):
    """A validation pass with grad enabled that logs its losses: summed as tensors (each keeps its graph
    until the sum dies), then as numbers (loss.item())."""
    batch, batches = size(args, 256, 8), size(args, 16, 3)
    r = TipResult(f"validation of SmallCNN with the tape on (no NoGradGuard), {batches} batches of {batch}, "
                  "the losses summed for the log", "pass", "images/s", [])
    model = small_cnn().eval()
    x, y = images(batch, 1, 28), labels(batch)
    for as_number in (False, True):
        def unit():
            logged, logged_number = torch.zeros(()), 0.0
            for _ in range(batches):
                loss = F.cross_entropy(model(x), y)
                if as_number:
                    logged_number += loss.item()
                else:
                    logged = logged + loss
            return logged.item() + logged_number

        r.variants.append(("loss.item() summed" if as_number else "loss tensors summed (graphs kept)",
                           measure(args, unit, batch * batches)))
    return r


def tip_grad_accum(args):
    """One step of the whole batch, then of 4 micro-batches (loss / 4 backward each) and one optimizer step."""
    batch, micro = size(args, 256, 16), 4
    r = TipResult(f"cnn step, batch {batch}", "step", "images/s", [])
    for k in (1, micro):
        model = small_cnn()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x, y = images(batch, 1, 28), labels(batch)
        rows = batch // k

        def unit():
            for i in range(k):
                part = slice(i * rows, (i + 1) * rows)
                (F.cross_entropy(model(x[part]), y[part]) / k).backward()
            opt.step()
            opt.zero_grad()

        r.variants.append((f"one pass of {batch}" if k == 1 else f"{k} micro-batches of {rows}",
                           measure(args, unit, batch)))
    return r


def tip_checkpointing(args):
    """A GPT training step, activations kept, then each block recomputed in backward."""
    vocab, block, layers, heads, width = 512, size(args, 128, 16), size(args, 4, 2), 4, size(args, 128, 32)
    batch = size(args, 8, 2)
    r = TipResult(f"gpt step: {layers} layers, {width} wide, block {block}, batch {batch}", "step", "tokens/s", [])
    for recompute in (False, True):
        torch.manual_seed(0)
        model = MODELS.GPT(vocab, block, layers, heads, width, recompute).train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        idx, targets = torch.randint(0, vocab, (batch, block)), torch.randint(0, vocab, (batch, block))

        def unit():
            model(idx, targets).backward()  # the GPT's forward returns the loss
            opt.step()
            opt.zero_grad()

        r.variants.append(("recompute each block" if recompute else "activations kept",
                           measure(args, unit, batch * block)))
    return r


def tip_preprocess_once(args):
    """An epoch of PNGs through torchvision's ImageFolder (decoded on every get), then of the same images
    decoded once into a TensorDataset; DataLoader batch 64, no workers."""
    import torchvision
    from PIL import Image
    from torchvision.transforms.functional import pil_to_tensor

    n, batch = size(args, 1024, 32), 64
    root = tempfile.mkdtemp(prefix="tips_peer_png_")
    try:
        torch.manual_seed(0)
        for i in range(n):
            folder = os.path.join(root, f"class{i % 10}")
            os.makedirs(folder, exist_ok=True)
            img = torch.randint(0, 256, (3, 32, 32), dtype=torch.uint8)
            Image.fromarray(img.permute(1, 2, 0).numpy()).save(os.path.join(folder, f"{i}.png"))
        r = TipResult(f"{n} PNG images 3x32x32 in class folders, an epoch of batch {batch} through a DataLoader "
                      "(no workers)", "epoch", "images/s", [])
        folder_dataset = torchvision.datasets.ImageFolder(root, transform=pil_to_tensor)
        decoded = [folder_dataset[i] for i in range(len(folder_dataset))]
        tensors = torch.utils.data.TensorDataset(torch.stack([img for img, _ in decoded]),
                                                 torch.tensor([target for _, target in decoded]))
        for once in (False, True):
            loader = data_loader(tensors if once else folder_dataset, batch, 0)

            def epoch():
                for _ in loader:
                    pass

            r.variants.append(("decoded once into a tensor" if once else "PNG decoded every epoch",
                               measure(args, epoch, n)))
        return r
    finally:
        shutil.rmtree(root, ignore_errors=True)


def tip_lr_scaling(args):
    """Trains SmallCNN on Fashion-MNIST with SGD momentum 0.9: batch 32's lr without warmup, then the lr
    scaled by batch / 32 with one epoch of linear warmup; cosine decay to 0 in both. One timed run each
    (--reps and --warmup do not apply); the final loss is the mean over the last epoch's steps."""
    n, small_batch, batch, epochs = size(args, 8192, 512), 32, size(args, 512, 128), size(args, 4, 1)
    base_lr = 0.01
    x, y = fashion_mnist(args.data, "train", n)
    x_test, y_test = fashion_mnist(args.data, "t10k", size(args, 2000, 200))
    steps_per_epoch = n // batch
    total = steps_per_epoch * epochs
    r = TipResult(f"SmallCNN on {n} Fashion-MNIST images, batch {batch}, {epochs} epoch{'' if epochs == 1 else 's'} "
                  f"of SGD momentum 0.9 (lr {base_lr} is tuned for batch 32), cosine decay", "run", "images/s", [])
    for scaled in (False, True):
        model = small_cnn()
        lr = base_lr * batch / small_batch if scaled else base_lr
        warmup = steps_per_epoch if scaled else 0
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
        schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: warmup_cosine_lr(s, 1.0, warmup, total))
        last_loss = 0.0
        t0 = time.perf_counter()
        for s in range(total):
            at = (s % steps_per_epoch) * batch
            loss = F.cross_entropy(model(x[at:at + batch]), y[at:at + batch])
            loss.backward()
            opt.step()
            opt.zero_grad()
            schedule.step()
            if s >= total - steps_per_epoch:
                last_loss += loss.item() / steps_per_epoch
        ms = 1e3 * (time.perf_counter() - t0)
        model.eval()
        with torch.no_grad():
            accuracy = (model(x_test).argmax(1) == y_test).double().mean().item()
        m = {"ms": ms, "rate": total * batch / (ms / 1e3), "final_loss": last_loss, "test_accuracy": accuracy,
             "lr": lr}
        r.variants.append((f"lr x{batch // small_batch} with one epoch of warmup" if scaled
                           else "batch 32's lr, no warmup", m))
    return r


# --- the GPU tips (--device cuda) ----------------------------------------------------------------------

# The GPU tips' variant names, A first, as bench_tips names them, but for tip 14's B: kiln augments a
# batch in one kernel, PyTorch here in a few ops (augment_batch). The tip functions name their variants
# from here; tests/tools/tips_peer_gpu_check.py checks that each tip gave exactly these, in this order.
GPU_VARIANTS = {
    4: ("pageable", "page-locked, non_blocking"),
    8: ("cuDNN's heuristic", "cuDNN benchmark mode"),
    9: ("made on the CPU, then copied", "made on the GPU"),
    10: ("TF32 off", "TF32 on"),
    14: ("augmented per sample on the CPU", "uint8 batches, augmented per batch on the GPU"),
    17: ("float32 with TF32", "bfloat16 autocast", "float16 autocast + GradScaler"),
    23: ("GPU monitor off", "GPU monitor on"),
}
SAMPLE_PERIOD_S = 0.1  # kiln's GpuSampler::kDefaultIntervalMs

GptStep = namedtuple("GptStep", "model opt idx targets tokens")


@contextlib.contextmanager
def cuda_switches(device, **switches):
    """PyTorch's CUDA math switches set for the block, and put back after it: matmul_tf32
    (torch.backends.cuda.matmul.allow_tf32), cudnn_tf32 (torch.backends.cudnn.allow_tf32), benchmark
    (torch.backends.cudnn.benchmark). On the CPU they mean nothing and are left alone."""
    where = {"matmul_tf32": (torch.backends.cuda.matmul, "allow_tf32"),
             "cudnn_tf32": (torch.backends.cudnn, "allow_tf32"), "benchmark": (torch.backends.cudnn, "benchmark")}
    if device.type != "cuda":
        yield
        return
    saved = {key: getattr(*where[key]) for key in switches}
    try:
        for key, value in switches.items():
            setattr(*where[key], value)
        yield
    finally:
        for key, value in saved.items():
            setattr(*where[key], value)


def gpt_step(args, device):
    """bench_tips's gpt_step: nanoGPT's character model on `device` (seeded), AdamW, one fixed batch."""
    vocab, block, layers, heads, width = 65, size(args, 256, 32), size(args, 6, 2), 6, size(args, 384, 48)
    batch = size(args, 32, 2)
    torch.manual_seed(0)
    model = MODELS.GPT(vocab, block, layers, heads, width, False).to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    idx = torch.randint(0, vocab, (batch, block), device=device)
    targets = torch.randint(0, vocab, (batch, block), device=device)
    return GptStep(model, opt, idx, targets, batch * block)


def gpt_workload(args):
    return (f"gpt step on the GPU: {size(args, 6, 2)} layers, 6 heads, {size(args, 384, 48)} wide, block "
            f"{size(args, 256, 32)}, vocabulary 65, batch {size(args, 32, 2)}, AdamW")


def augment_batch(images):
    """bench_tips's augment() on a uint8 batch [B, C, H, W] where it lies (the GPU): each image padded by 2
    with zeros and cropped back to H x W at a uniformly drawn offset, flipped left to right with
    probability 1/2, then scaled to [0, 1] and normalized (0.286, 0.353); float32 out. A draw per image,
    as kiln's kernel and as the per-sample transform (torchvision's transforms, given a batch, draw once
    for all of it)."""
    b, c, h, w = images.shape
    dev, pad = images.device, 2
    padded = F.pad(images, (pad, pad, pad, pad))
    top = torch.randint(0, 2 * pad + 1, (b, 1, 1, 1), device=dev)
    left = torch.randint(0, 2 * pad + 1, (b, 1, 1, 1), device=dev)
    flip = torch.rand(b, 1, 1, 1, device=dev) < 0.5
    rows = torch.arange(h, device=dev).view(1, 1, h, 1) + top
    cols = torch.arange(w, device=dev).view(1, 1, 1, w)
    cols = torch.where(flip, w - 1 - cols, cols) + left
    out = padded[torch.arange(b, device=dev).view(b, 1, 1, 1), torch.arange(c, device=dev).view(1, c, 1, 1), rows, cols]
    return (out.float() / 255.0 - 0.286) / 0.353


class Sampler:
    """kiln's GpuSampler in Python: `read()` on a thread of its own, at once and then every `period_s`
    (the next read is due a period after the last was due; a read later than that goes at once, never
    in bursts), until stop(). `samples` counts the reads. A read that raises ends the sampling, and
    stop() raises it again: a tip never reports a sampler that did not sample."""

    def __init__(self, read, period_s=SAMPLE_PERIOD_S):
        self.read, self.period_s, self.samples, self.error = read, period_s, 0, None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tips_peer sampler", daemon=True)
        self._thread.start()

    def _run(self):
        due = time.monotonic()
        while not self._stop.is_set():
            try:
                self.read()
            except Exception as e:  # raised again by stop(), on the main thread
                self.error = e
                return
            self.samples += 1
            due = max(due + self.period_s, time.monotonic())
            self._stop.wait(due - time.monotonic())

    def stop(self):
        self._stop.set()
        self._thread.join()
        if self.error is not None:
            raise RuntimeError(f"the GPU sampler's read failed: {type(self.error).__name__}: {self.error}")


def nvml_reader(device):
    """Tip 23's read: on a GPU the four NVML reads of kiln's GpuSampler (utilization, memory used, power,
    SM clock) through torch.cuda, which goes through pynvml; Unavailable, with the reason, where they
    fail. On the CPU (the smoke check) there is no card: the read reads nothing, and the sampler's
    thread and timer run as on a GPU."""
    if device.type != "cuda":
        return lambda: None

    def read():
        return (torch.cuda.utilization(device), torch.cuda.device_memory_used(device), torch.cuda.power_draw(device),
                torch.cuda.clock_rate(device))

    try:
        read()
    except Exception as e:  # no pynvml, no NVML library, a card NVML does not know
        raise Unavailable(f"torch.cuda's NVML reads fail here ({type(e).__name__}: {e})") from None
    return read


def tip_pinned(args, device):
    """A uint8 batch copied to the device from pageable memory, then from its page-locked copy with
    non_blocking=True. copy=True changes nothing on a GPU (.to a GPU always copies) and makes the
    smoke check's .to the CPU a copy too; page-locking needs CUDA, so on the CPU B copies pageable memory."""
    batch = size(args, 256, 8)
    r = TipResult(f"a batch of {batch} uint8 images 3x224x224 copied to the GPU", "copy", "GB/s", [])
    pageable = torch.randint(0, 256, (batch, 3, 224, 224), dtype=torch.uint8)
    pinned = pageable.pin_memory() if device.type == "cuda" else pageable
    gb = pageable.numel() / 1e9
    for pin in (False, True):
        src = pinned if pin else pageable
        r.variants.append((GPU_VARIANTS[4][pin],
                           measure(args, lambda: src.to(device, non_blocking=pin, copy=True), gb, device)))
    return r


def tip_cudnn_benchmark(args, device):
    """A ResNet-18 (32x32) training step, cuDNN's heuristic (benchmark False), then its timed search (True);
    TF32 as PyTorch's and kiln's defaults have it: on in cuDNN, off in matmuls."""
    batch = size(args, 128, 4)
    r = TipResult(f"ResNet-18 for 32x32 images on the GPU, float32 with TF32, batch {batch}, AdamW", "step",
                  "images/s", [])

    def run():
        torch.manual_seed(0)
        model = MODELS.ResNet(3, 10, RESNET18_WIDTHS, RESNET18_BLOCKS, False).to(device).train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x = torch.randn(batch, 3, 32, 32, device=device)
        y = torch.randint(0, 10, (batch,), device=device)
        return measure(args, lambda: train_step(model, opt, x, y), batch, device)

    for benchmark in (False, True):
        with cuda_switches(device, benchmark=benchmark, cudnn_tf32=True, matmul_tf32=False):
            r.variants.append((GPU_VARIANTS[8][benchmark], run()))
    return r


def tip_on_device(args, device):
    """torch.randn on the CPU then .to(device), against torch.randn(..., device=device)."""
    side = size(args, 4096, 64)
    r = TipResult(f"a [{side}, {side}] float32 tensor of normal draws for the GPU", "tensor", "", [])
    units = (lambda: torch.randn(side, side).to(device), lambda: torch.randn(side, side, device=device))
    for name, unit in zip(GPU_VARIANTS[9], units):
        r.variants.append((name, measure(args, unit, None, device)))
    return r


def tip_tf32(args, device):
    """The gpt step in float32 with both TF32 switches off, then both on."""
    r = TipResult(gpt_workload(args) + ", float32", "step", "tokens/s", [])

    def run():
        g = gpt_step(args, device)

        def unit():
            g.model(g.idx, g.targets).backward()  # the GPT's forward returns the loss
            g.opt.step()
            g.opt.zero_grad()

        return measure(args, unit, g.tokens, device)

    for tf32 in (False, True):
        with cuda_switches(device, matmul_tf32=tf32, cudnn_tf32=tf32):
            r.variants.append((GPU_VARIANTS[10][tf32], run()))
    return r


def tip_autocast(args, device):
    """The gpt step in float32 (matmul TF32 on, as nanoGPT runs it), under bfloat16 autocast, and under
    float16 autocast with the GradScaler (scaled backward, step, update); the scaler is disabled, a
    pass-through, in the other two, as kiln's."""
    r = TipResult(gpt_workload(args), "step", "tokens/s", [])

    def run(dtype):
        g = gpt_step(args, device)
        scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)

        def unit():
            with torch.autocast(device.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
                loss = g.model(g.idx, g.targets)
            scaler.scale(loss).backward()
            scaler.step(g.opt)
            scaler.update()
            g.opt.zero_grad()

        return measure(args, unit, g.tokens, device)

    with cuda_switches(device, matmul_tf32=True):
        for name, dtype in zip(GPU_VARIANTS[17], (None, torch.bfloat16, torch.float16)):
            r.variants.append((name, run(dtype)))
    return r


def tip_gpu_augment(args, device):
    """SmallCNN steps on the device fed by a 2-worker DataLoader (pin_memory on a GPU, persistent workers):
    the images augmented per sample in the workers, then collated raw (uint8) and augmented a batch at a
    time on the device (augment_batch) after the non_blocking copy."""
    batch, batches = size(args, 256, 16), size(args, 16, 2)
    r = TipResult("SmallCNN steps on the GPU fed by a 2-worker DataLoader: 1x28x28 images, pad-crop 2 + flip + "
                  f"normalize, batch {batch}, {batches} batches an epoch", "epoch", "images/s", [])

    def run(on_gpu):
        dataset = AugmentedImages(batch * batches, None if on_gpu else augment())
        model = small_cnn().to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        loader = data_loader(dataset, batch, 2, persistent=True, pin_memory=device.type == "cuda")

        def epoch():
            for x, y in loader:
                x = x.to(device, non_blocking=True)
                train_step(model, opt, augment_batch(x) if on_gpu else x, y.to(device))

        return measure(args, epoch, batch * batches, device)

    for on_gpu in (False, True):
        r.variants.append((GPU_VARIANTS[14][on_gpu], run(on_gpu)))
    return r


def tip_monitor(args, device):
    """SmallCNN steps on the device without, then with, a Sampler reading NVML every 100 ms from before the
    warm-up to the end of the timed steps; B's "samples" counts its reads."""
    batch = size(args, 256, 16)
    read = nvml_reader(device)  # Unavailable here, before anything runs, where NVML cannot be read
    r = TipResult(f"SmallCNN steps on the GPU, batch {batch}, while the NVML sampler reads every 100 ms", "step",
                  "images/s", [])

    def run(sample):
        model = small_cnn().to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x = torch.randn(batch, 1, 28, 28, device=device)
        y = torch.randint(0, 10, (batch,), device=device)
        sampler = Sampler(read) if sample else None
        try:
            m = measure(args, lambda: train_step(model, opt, x, y), batch, device)
            if sampler is not None:
                m["samples"] = sampler.samples
        finally:
            if sampler is not None:
                sampler.stop()
        return m

    for sample in (False, True):
        r.variants.append((GPU_VARIANTS[23][sample], run(sample)))
    return r


# bench_tips's registry, in its order, less tip 20 (NO_PYTORCH_KNOB).
TIPS = (
    (1, "batch-size", tip_batch_size),
    (2, "loader-workers", tip_workers),
    (3, "prefetch-factor", tip_prefetch),
    (5, "persistent-workers", tip_persistent),
    (6, "zero-grad-none", tip_zero_grad),
    (7, "no-conv-bias-before-bn", tip_conv_bias),
    (11, "no-grad-eval", tip_no_grad),
    (12, "fused-attention", tip_attention),
    (15, "channels-last", tip_channels_last),
    (16, "debug-apis-off", tip_anomaly),
    (18, "fused-pointwise", tip_fused_pointwise),
    (19, "no-history", tip_no_history),
    (21, "grad-accumulation", tip_grad_accum),
    (22, "checkpointing", tip_checkpointing),
    (24, "preprocess-once", tip_preprocess_once),
    (25, "lr-scaling-warmup", tip_lr_scaling),
)
# bench_tips's GPU tips (--device cuda), in its order: each a function of (args, device).
GPU_TIPS = (
    (4, "pinned-memory", tip_pinned),
    (8, "cudnn-benchmark", tip_cudnn_benchmark),
    (9, "create-on-device", tip_on_device),
    (10, "tf32", tip_tf32),
    (14, "gpu-augmentation", tip_gpu_augment),
    (17, "autocast", tip_autocast),
    (23, "monitor-utilization", tip_monitor),
)


# --- output --------------------------------------------------------------------------------------------


def rounded(value, digits):
    return None if value is None or not math.isfinite(value) else round(value, digits)


def variant_record(number, slug, r, i, device="cpu"):
    """One JSON line's fields, in bench_tips's order and precision; the extras sorted by name, as its.
    Roles as bench_tips's: A the first variant, B every other (tip 17 has two). peak_mb: null on the CPU
    (PyTorch counts no CPU allocator bytes), the CUDA allocator's on a GPU."""
    name, m = r.variants[i]
    rec = {"record": "tip", "tip": number, "slug": slug, "impl": "pytorch", "device": device,
           "threads": torch.get_num_threads(), "workload": r.workload, "variant": name, "role": "A" if i == 0 else "B",
           "unit": r.unit, "ms": rounded(m["ms"], 4), "rate": rounded(m["rate"], 1), "rate_unit": r.rate_unit,
           "peak_mb": rounded(m.get("peak_mb"), 2)}
    for key in sorted(k for k in m if k not in ("ms", "rate", "peak_mb")):
        value = m[key]
        rec[key] = value if isinstance(value, int) else float(f"{value:.6g}")
    return rec


def unavailable_record(number, slug, device, reason):
    """A tip the peer cannot measure here (see Unavailable): no numbers, the reason. tools/tips.py puts the
    reason under the tip's table, which then has kiln's rows alone."""
    return {"record": "unavailable", "tip": number, "slug": slug, "impl": "pytorch", "device": device,
            "reason": reason}


def cuda_device():
    """The first GPU; InputError where PyTorch sees none: the GPU tips never run on the CPU in a record."""
    if not torch.cuda.is_available():
        why = ("this PyTorch is built without CUDA" if torch.version.cuda is None
               else f"PyTorch {torch.__version__} is built for CUDA {torch.version.cuda}, but "
                    "torch.cuda.is_available() is false")
        raise InputError(f"--device cuda: no GPU ({why}); the GPU tips run only on a GPU")
    return torch.device("cuda", 0)


def main(argv=None):
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
        load_torch(args.threads)
        gpu = args.device == "cuda"
        device = cuda_device() if gpu else torch.device("cpu")
        lines = []
        for number, slug, run in GPU_TIPS if gpu else TIPS:
            if args.tips and number not in args.tips:
                continue
            begin_tip(device)
            try:
                r = run(args, device) if gpu else run(args)
                records = [variant_record(number, slug, r, i, args.device) for i in range(len(r.variants))]
            except Unavailable as e:
                print(f"tips_peer: tip {number} is not measured: {e}", file=sys.stderr)
                records = [unavailable_record(number, slug, args.device, str(e))]
            for rec in records:
                lines.append(json.dumps(rec))
                print(lines[-1], flush=True)
            if args.json:
                write_atomic(args.json, "".join(line + "\n" for line in lines))
    except InputError as e:
        print(f"tips_peer: {e}", file=sys.stderr)
        return 2
    if args.json and not lines:
        write_atomic(args.json, "")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""PyTorch peer of bench/train_step.cpp (bench_train_step): the same training step of the same models
in the same precision and memory modes, timed the same way, written as the same JSON lines with
impl "torch" (eager) or "torch-compile" (--compile), so tools/train_step_compare.py can put them side
by side.

Models, written here with kiln's shapes (the init need not match, the shapes and the work must):
  gpt        nanoGPT's GPT: token + position embeddings, pre-LayerNorm blocks of causal
             self-attention (one fused q/k/v Linear, scaled_dot_product_attention with is_causal) and
             an MLP (Linear 4C, GELU tanh approximation as kiln's, Linear C), biases on, dropout 0,
             lm_head tied to the token embedding; 6 layers, 384 wide, 6 heads, vocabulary 65, B64, T256
  gpt2-124m  the same GPT at GPT-2 small's size (a fixed preset: --n-layer/--n-head/--n-embd do not
             apply): 12 layers, 768 wide, 12 heads, vocabulary 50257, B16, T1024; the position
             embedding has T rows, so the 124,439,808 parameters (tied weights counted once) are at T1024
  resnet18   ResNet-18 for 32x32 images (kiln's ResNetConfig::resnet18_cifar()): 3x3 stem conv + BN +
             ReLU, no max-pool, four stages of 2 BasicBlocks (64, 128, 256, 512 wide, stride 2 at the
             start of stages 2-4, 1x1 conv + BN shortcuts), global average pool, Linear 10; B512
  cnn        train_cnn's SmallCNN for 1x28x28 images (kiln's nn::SmallCNN, dropout 0): conv3x3 1->32 (no
             bias) + BN + ReLU + MaxPool2d(2), conv3x3 32->64 (no bias) + BN + ReLU + MaxPool2d(2),
             Flatten, Linear(64*7*7, 128), ReLU, Linear(128, 10); B64; always 28x28, as kiln's
--workload all is gpt, resnet18 and cnn; gpt2-124m runs only when named. --block-size sets T of both
GPTs. Modes: fp32 (TF32 off), tf32, bf16 (torch.autocast bfloat16, TF32 on), fp16 (torch.autocast
float16 + torch.amp.GradScaler, TF32 on), bf16-recompute (bf16 + torch.utils.checkpoint around every
GPT block / BasicBlock, use_reentrant=False, no RNG state saved: nothing in them draws random numbers,
as in kiln; not cnn, which has no blocks to recompute), bf16-nhwc (bf16 + channels_last model and
input; resnet18 and cnn), fp16-nhwc (fp16 with its GradScaler + channels_last; resnet18 and cnn).

One step: forward under autocast, backward (scaled for fp16), AdamW (PyTorch's default
implementation: foreach on the GPU; weight decay on matrices only, betas 0.9/0.99, as kiln's bench),
GradScaler step and update for fp16 (PyTorch's step reads found-inf back to the host; kiln's does
not), zero_grad(set_to_none=True). Each case builds its model and optimizer afresh (cuDNN benchmark
mode on), runs --warmup steps, then times --steps steps on one fixed synthetic batch: one pair of
CUDA events around each step, read after the loop (time.perf_counter on the CPU); the median, min
and max, tokens/s or images/s at the median, and torch.cuda.max_memory_allocated() over the timed
steps (null on the CPU). --threads sets torch.set_num_threads (left out: PyTorch's default), so a CPU
run can use the cores kiln's KILN_NUM_THREADS gives it.

--time optimizer times opt.step() alone instead of the whole step, as bench_train_step's flag does:
after the warm-up, one forward and backward leave gradients, and each timed update applies them (no
GradScaler, no zero_grad); its records say "timed": "optimizer" and have no throughput.

--compile [MODE] runs every case through torch.compile(model, mode=MODE) (MODE: default, reduce-overhead,
max-autotune or max-autotune-no-cudagraphs; default when left out): the module whose forward the loss
calls is compiled (the GPT's forward computes the loss), the optimizer, GradScaler and backward call
stay eager; dynamo's caches are reset before each case. Its records say impl "torch-compile", and the
header and every case carry "compile": MODE ("compile": null in an eager run). A case that fails,
torch.compile's refusals included, is written with an "error" field and the run goes on (exit 1).

Each case also records "first_step_s": seconds (time.perf_counter, after torch.cuda.synchronize() on
the GPU) from just before its model is built, after seeding, to the end of its first warm-up step:
the latency before training starts, torch.compile's compilation and cuDNN's benchmark searches
included (inductor's on-disk caches may shorten a later run's). null when --warmup is 0.

  usage: python3 tools/train_step_peer.py [--workload gpt|gpt2-124m|resnet18|cnn|all] [--mode M]...
                                          [--time step|optimizer] [--compile [MODE]] [--threads N]
                                          [--json FILE]
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_compare import write_atomic  # noqa: E402

# The modes in the order the cases run and the tables list them (fp32 first: every speedup's base):
# name -> (autocast dtype name or None, TF32, GradScaler, recompute, channels-last).
MODES = {
    "fp32": (None, False, False, False, False),
    "tf32": (None, True, False, False, False),
    "bf16": ("bfloat16", True, False, False, False),
    "fp16": ("float16", True, True, False, False),
    "bf16-recompute": ("bfloat16", True, False, True, False),
    "bf16-nhwc": ("bfloat16", True, False, False, True),
    "fp16-nhwc": ("float16", True, True, False, True),
}
WORKLOADS = ("gpt", "gpt2-124m", "resnet18", "cnn")
ALL_WORKLOADS = ("gpt", "resnet18", "cnn")  # --workload all: gpt2-124m runs only when named
GPT_WORKLOADS = ("gpt", "gpt2-124m")
VOCAB = 65
# GPT-2 small (124M): a fixed preset; T (--block-size) defaults to its context of 1024.
GPT2_124M = {"vocab_size": 50257, "n_layer": 12, "n_head": 12, "n_embd": 768, "block_size": 1024}
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
CLASSES = 10
CNN_IMAGE = 28  # SmallCNN's 28x28 one-channel images, whatever --image-size says (as bench_train_step)
CNN_HIDDEN = 128
RESNET18_WIDTHS = (64, 128, 256, 512)
RESNET18_BLOCKS = (2, 2, 2, 2)


def mode_fits(workload, mode):
    # Channels-last needs 4-d activations (not the GPT's); recompute a model with blocks (not cnn's).
    amp, tf32, scaler, recompute, channels_last = MODES[mode]
    return not (channels_last and workload in GPT_WORKLOADS) and not (recompute and workload == "cnn")


def default_batch(workload):
    return {"resnet18": 512, "gpt2-124m": 16}.get(workload, 64)


def block_size(workload, args):
    """T of a GPT workload: --block-size, else 256 for gpt and 1024 for gpt2-124m."""
    if args.block_size is not None:
        return args.block_size
    return GPT2_124M["block_size"] if workload == "gpt2-124m" else 256


# --- the models ------------------------------------------------------------------------------------


def define_models(torch):
    nn, F = torch.nn, torch.nn.functional
    from torch.utils.checkpoint import checkpoint

    class CausalSelfAttention(nn.Module):
        def __init__(self, n_embd, n_head):
            super().__init__()
            self.n_head, self.n_embd = n_head, n_embd
            self.c_attn = nn.Linear(n_embd, 3 * n_embd)
            self.c_proj = nn.Linear(n_embd, n_embd)

        def forward(self, x):
            b, t, c = x.size()
            q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
            q, k, v = (p.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for p in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).reshape(b, t, c))

    class MLP(nn.Module):
        def __init__(self, n_embd):
            super().__init__()
            self.c_fc = nn.Linear(n_embd, 4 * n_embd)
            self.gelu = nn.GELU(approximate="tanh")  # kiln's GPT uses GPT-2's tanh form
            self.c_proj = nn.Linear(4 * n_embd, n_embd)

        def forward(self, x):
            return self.c_proj(self.gelu(self.c_fc(x)))

    class Block(nn.Module):
        def __init__(self, n_embd, n_head):
            super().__init__()
            self.ln_1 = nn.LayerNorm(n_embd)
            self.attn = CausalSelfAttention(n_embd, n_head)
            self.ln_2 = nn.LayerNorm(n_embd)
            self.mlp = MLP(n_embd)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self, vocab_size, block_size, n_layer, n_head, n_embd, recompute):
            super().__init__()
            self.vocab_size, self.recompute = vocab_size, recompute
            self.wte = nn.Embedding(vocab_size, n_embd)
            self.wpe = nn.Embedding(block_size, n_embd)
            self.h = nn.ModuleList([Block(n_embd, n_head) for _ in range(n_layer)])
            self.ln_f = nn.LayerNorm(n_embd)
            self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
            self.lm_head.weight = self.wte.weight  # tied, as kiln's and nanoGPT's
            for m in self.modules():  # nanoGPT's init
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, 0.0, 0.02)
                if isinstance(m, nn.Linear) and m.bias is not None:
                    nn.init.zeros_(m.bias)

        def forward(self, idx, targets):
            pos = torch.arange(idx.size(1), device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.h:
                x = checkpoint(block, x, use_reentrant=False, preserve_rng_state=False) if self.recompute else block(x)
            logits = self.lm_head(self.ln_f(x))
            return F.cross_entropy(logits.view(-1, self.vocab_size), targets.view(-1), ignore_index=-1)

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=False)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return self.relu(out + (self.downsample(x) if self.downsample is not None else x))

    class ResNet(nn.Module):
        def __init__(self, in_channels, num_classes, widths, blocks, recompute):
            super().__init__()
            self.recompute = recompute
            self.conv1 = nn.Conv2d(in_channels, widths[0], 3, 1, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(widths[0])
            self.relu = nn.ReLU(inplace=False)
            cin, stages = widths[0], []
            for s, (width, count) in enumerate(zip(widths, blocks)):
                stage = []
                for b in range(count):
                    stage.append(BasicBlock(cin, width, 2 if s > 0 and b == 0 else 1))
                    cin = width
                stages.append(nn.Sequential(*stage))
            self.layers = nn.ModuleList(stages)
            self.fc = nn.Linear(widths[-1], num_classes)
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

        def forward(self, x):
            y = self.relu(self.bn1(self.conv1(x)))
            for stage in self.layers:
                for block in stage:
                    y = (checkpoint(block, y, use_reentrant=False, preserve_rng_state=False) if self.recompute
                         else block(y))
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(y, 1), 1))

    class SmallCNN(nn.Module):
        def __init__(self, in_channels, num_classes, image_size, hidden):
            super().__init__()
            side = image_size // 4
            self.features = nn.Sequential(
                nn.Conv2d(in_channels, 32, 3, 1, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                nn.Conv2d(32, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2))
            self.classifier = nn.Sequential(nn.Flatten(1), nn.Linear(64 * side * side, hidden), nn.ReLU(),
                                            nn.Linear(hidden, num_classes))

        def forward(self, x):
            return self.classifier(self.features(x))

    return GPT, ResNet, SmallCNN


# --- one case --------------------------------------------------------------------------------------


def resnet_widths(base_width):
    if base_width is None:
        return RESNET18_WIDTHS
    # As bench_train_step's --base-width: every stage keeps its ratio to the first, rounded down.
    return tuple(max(1, w * base_width // RESNET18_WIDTHS[0]) for w in RESNET18_WIDTHS)


def sync(torch, device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def make_workload(torch, models, name, mode, args, device):
    """(model, loss function on a fixed synthetic batch, batch, items per step, unit, shape, t0): the
    loss calls torch.compile's wrapper of the model under --compile; t0 is time.perf_counter() just
    before the model was built (after seeding), where first_step_s starts."""
    GPT, ResNet, SmallCNN = models
    amp, tf32, scaler, recompute, channels_last = MODES[mode]
    torch.manual_seed(args.seed)
    sync(torch, device)
    t0 = time.perf_counter()

    def compiled(model):
        return torch.compile(model, mode=args.compile) if args.compile else model

    if name in GPT_WORKLOADS:
        batch = args.batch or default_batch(name)
        t = block_size(name, args)
        if name == "gpt":
            cfg = {"vocab_size": VOCAB, "n_layer": args.n_layer, "n_head": args.n_head, "n_embd": args.n_embd}
        else:
            cfg = {k: GPT2_124M[k] for k in ("vocab_size", "n_layer", "n_head", "n_embd")}
        model = GPT(cfg["vocab_size"], t, cfg["n_layer"], cfg["n_head"], cfg["n_embd"], recompute).to(device).train()
        fwd = compiled(model)
        idx = torch.randint(0, cfg["vocab_size"], (batch, t), device=device)
        targets = torch.randint(0, cfg["vocab_size"], (batch, t), device=device)
        shape = {"n_layer": cfg["n_layer"], "n_head": cfg["n_head"], "n_embd": cfg["n_embd"], "block_size": t,
                 "vocab_size": cfg["vocab_size"]}
        return model, (lambda: fwd(idx, targets)), batch, batch * t, "tokens/s", shape, t0
    if name == "cnn":
        batch = args.batch or default_batch(name)
        model = SmallCNN(1, CLASSES, CNN_IMAGE, CNN_HIDDEN).to(device).train()
        x = torch.randn(batch, 1, CNN_IMAGE, CNN_IMAGE, device=device)
        if channels_last:
            model = model.to(memory_format=torch.channels_last)
            x = x.contiguous(memory_format=torch.channels_last)
        fwd = compiled(model)
        y = torch.randint(0, CLASSES, (batch,), device=device)
        shape = {"image_size": CNN_IMAGE, "in_channels": 1, "num_classes": CLASSES, "widths": "32,64",
                 "hidden": CNN_HIDDEN, "dropout": 0}
        return model, (lambda: torch.nn.functional.cross_entropy(fwd(x), y)), batch, batch, "images/s", shape, t0
    batch = args.batch or default_batch(name)
    widths = resnet_widths(args.base_width)
    model = ResNet(3, CLASSES, widths, RESNET18_BLOCKS, recompute).to(device).train()
    x = torch.randn(batch, 3, args.image_size, args.image_size, device=device)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    fwd = compiled(model)
    y = torch.randint(0, CLASSES, (batch,), device=device)
    shape = {"image_size": args.image_size, "in_channels": 3, "num_classes": CLASSES,
             "widths": ",".join(map(str, widths)), "blocks": ",".join(map(str, RESNET18_BLOCKS))}
    return model, (lambda: torch.nn.functional.cross_entropy(fwd(x), y)), batch, batch, "images/s", shape, t0


def run_case(torch, model, loss_fn, mode, args, device, t0):
    """Step times in ms, (peak, start) allocated bytes on the GPU, the last step's loss, and the
    seconds from t0 to the end of the first warm-up step (None without warm-up)."""
    amp, tf32, use_scaler, recompute, channels_last = MODES[mode]
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.99))
    scaler = torch.amp.GradScaler(device.type) if use_scaler else None
    amp_dtype = getattr(torch, amp) if amp else None

    def step():
        with torch.autocast(device.type, dtype=amp_dtype or torch.bfloat16, enabled=amp_dtype is not None):
            loss = loss_fn()
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    first_step_s = None
    for i in range(args.warmup):
        step()
        if i == 0:
            sync(torch, device)
            first_step_s = time.perf_counter() - t0
    timed = step
    if args.time == "optimizer":
        # Gradients to apply, from one more forward and backward; every timed update applies them.
        with torch.autocast(device.type, dtype=amp_dtype or torch.bfloat16, enabled=amp_dtype is not None):
            loss = loss_fn()
        loss.backward()
        loss = loss.detach()

        def timed():
            opt.step()
            return loss
    ms, peak, start_bytes = [], None, None
    if device.type == "cuda":
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(args.steps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(args.steps)]
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start_bytes = torch.cuda.memory_allocated()
        for i in range(args.steps):
            starts[i].record()
            last = timed()
            ends[i].record()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
        ms = [s.elapsed_time(e) for s, e in zip(starts, ends)]
    else:
        for _ in range(args.steps):
            s0 = time.perf_counter()
            last = timed()
            ms.append(1e3 * (time.perf_counter() - s0))
    return ms, peak, start_bytes, float(last.float().item()), first_step_s


# --- records ---------------------------------------------------------------------------------------


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def cpu_name():
    # As kiln's examples::device_name for the CPU: /proc/cpuinfo's "model name".
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and ":" in line:
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "CPU"


def tree_commit():
    """`git describe --always --dirty` of the tree this script is in ("unknown" where the working tree
    travelled without its repository, as to the GPU host: kiln's own record then names the commit)."""
    try:
        out = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(__file__)), "describe", "--always",
                              "--dirty", "--abbrev=10"], capture_output=True, text=True, timeout=10)
        return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", default="all", choices=WORKLOADS + ("all",), help="which model")
    p.add_argument("--mode", action="append", metavar="M",
                   help="mode(s), repeatable or comma-separated: " + ", ".join(MODES) + ", or all (default)")
    p.add_argument("--steps", type=int, default=20, help="timed steps per case")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps per case first")
    p.add_argument("--device", choices=("cpu", "cuda"), help="default: cuda when available")
    p.add_argument("--batch", type=int,
                   help="batch size of every workload (default: 64 gpt and cnn, 16 gpt2-124m, 512 resnet18)")
    p.add_argument("--n-layer", type=int, default=6, help="gpt only (gpt2-124m: 12)")
    p.add_argument("--n-head", type=int, default=6, help="gpt only (gpt2-124m: 12)")
    p.add_argument("--n-embd", type=int, default=384, help="gpt only (gpt2-124m: 768)")
    p.add_argument("--block-size", type=int, help="T of gpt and gpt2-124m (default: 256 gpt, 1024 gpt2-124m)")
    p.add_argument("--image-size", type=int, default=32, help="resnet18 only (cnn: always 28)")
    p.add_argument("--base-width", type=int, help="resnet18: the first stage's width, the others scaled alike")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--threads", type=int, help="torch.set_num_threads (default: PyTorch's own choice)")
    p.add_argument("--compile", nargs="?", const="default", choices=COMPILE_MODES, metavar="MODE",
                   help="torch.compile every case's model with this mode (" + ", ".join(COMPILE_MODES) +
                   "; default when MODE is left out); records say impl torch-compile")
    p.add_argument("--time", default="step", choices=("step", "optimizer"),
                   help="what each timed repetition is: the whole training step, or opt.step() alone")
    p.add_argument("--json", help="write the JSON lines here (atomically, after every case) instead of stdout")
    args = p.parse_args(argv)
    # The same checks as bench_train_step's, each naming its flag (exit code 2, as argparse's own).
    for flag, value, lo, hi in (("--steps", args.steps, 1, 100000), ("--warmup", args.warmup, 0, 100000),
                                ("--batch", args.batch, 1, 1 << 20), ("--n-layer", args.n_layer, 1, 1024),
                                ("--n-head", args.n_head, 1, 1024), ("--n-embd", args.n_embd, 1, 65536),
                                ("--block-size", args.block_size, 1, 65536), ("--image-size", args.image_size, 4, 4096),
                                ("--base-width", args.base_width, 1, 4096), ("--seed", args.seed, 0, 2**63 - 1),
                                ("--threads", args.threads, 1, 4096)):
        if value is not None and not lo <= value <= hi:
            p.error(f"{flag} expects a whole number from {lo} to {hi}, got {value}")
    workloads = list(ALL_WORKLOADS) if args.workload == "all" else [args.workload]
    # As bench_train_step: a size flag that none of the chosen workloads reads is refused (the run
    # would time the default shape as if it were the one asked for).
    named = {a.split("=", 1)[0] for a in argv if a.startswith("--")}
    for flag, readers in (("--n-layer", ("gpt",)), ("--n-head", ("gpt",)), ("--n-embd", ("gpt",)),
                          ("--block-size", ("gpt", "gpt2-124m")), ("--image-size", ("resnet18",)),
                          ("--base-width", ("resnet18",))):
        if flag in named and not any(w in readers for w in workloads):
            p.error(f"{flag} applies to --workload {' or '.join(readers)} (or all), not {args.workload}")
    if "gpt" in workloads and args.n_embd % args.n_head:
        p.error(f"--n-embd {args.n_embd} is not a multiple of --n-head {args.n_head}")
    given = [m for arg in (args.mode or ["all"]) for m in arg.split(",")]
    for m in given:
        if m not in MODES and m != "all":
            p.error(f"--mode: {m!r} is not one of {', '.join(MODES)}, all")
    modes = []
    for m in MODES:
        if "all" not in given and m not in given:
            continue
        fits = any(mode_fits(w, m) for w in workloads)
        if not fits and "all" not in given:
            why = ("it needs 4-d activations" if MODES[m][4] else "SmallCNN has no recompute")
            p.error(f"--mode {m} does not fit --workload {args.workload} ({why})")
        if fits:
            modes.append(m)
    if args.json:
        folder = os.path.dirname(os.path.abspath(args.json))
        if not os.path.isdir(folder):
            p.error(f"--json {args.json}: {folder} is not a folder")
    return args, workloads, modes


def main(argv=None):
    args, workloads, modes = parse_args(sys.argv[1:] if argv is None else argv)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.compile:
        import torch._dynamo  # noqa: F401 (reset between cases)

    if args.device == "cuda" and not torch.cuda.is_available():
        print("train_step_peer: --device cuda: torch.cuda.is_available() is false", file=sys.stderr)
        return 2
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda":
        device = torch.device("cuda", 0)
    device_str = str(device)
    device_name = torch.cuda.get_device_name(0) if device.type == "cuda" else cpu_name()
    models = define_models(torch)
    table = sys.stdout if args.json else sys.stderr
    impl = "torch-compile" if args.compile else "torch"
    header = {"record": "header", "impl": impl, "compile": args.compile, "date": utc_now(),
              "kiln_commit": tree_commit(), "command": " ".join(["python3"] + sys.argv), "device": device_str,
              "device_name": device_name, "threads": torch.get_num_threads(), "steps": args.steps,
              "warmup": args.warmup, "timer": "cuda events" if device.type == "cuda" else "perf_counter",
              "timed": args.time,
              "torch": torch.__version__, "cuda": torch.version.cuda,
              "cudnn": torch.backends.cudnn.version() if device.type == "cuda" else None}
    lines = [json.dumps(header)]
    if not args.json:
        print(lines[0], flush=True)
    compiled = f", torch.compile mode {args.compile}" if args.compile else ""
    print(f"PyTorch {torch.__version__} training-step peer on {device_str} ({device_name}){compiled}, median of "
          f"{args.steps} {'steps' if args.time == 'step' else 'optimizer updates'} after {args.warmup} warm-up, "
          f"{header['date']}", file=table)
    print(f"{'workload':<9} {'mode':<15} {'batch':>6} {'median ms':>10} {'min ms':>10} {'max ms':>10} "
          f"{'throughput':>12} {'':<8} {'peak MiB':>9} {'last loss':>10} {'first step s':>12}",
          file=table, flush=True)

    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark)
    failed = 0
    for name in workloads:
        for mode in modes:
            if not mode_fits(name, mode):
                continue
            amp, tf32, use_scaler, recompute, channels_last = MODES[mode]
            torch.backends.cuda.matmul.allow_tf32 = tf32
            torch.backends.cudnn.allow_tf32 = tf32
            torch.backends.cudnn.benchmark = True
            rec = {"record": "case", "impl": impl, "compile": args.compile, "workload": name, "mode": mode,
                   "device": device_str, "device_name": device_name, "batch": args.batch or default_batch(name)}
            if args.compile:
                torch._dynamo.reset()  # each case compiles afresh, within dynamo's recompile limit
            try:
                model, loss_fn, batch, items, unit, shape, t0 = make_workload(torch, models, name, mode, args, device)
                # Parameters once each (the GPTs' tied lm_head and token embedding are one).
                rec.update(batch=batch, shape=shape, parameters=sum(p.numel() for p in model.parameters()))
                rec.update(amp=amp, tf32=device.type == "cuda" and tf32, loss_scaling=use_scaler, recompute=recompute,
                           channels_last=channels_last, steps=args.steps, warmup=args.warmup, timed=args.time)
                ms, peak, start_bytes, loss, first = run_case(torch, model, loss_fn, mode, args, device, t0)
                med = statistics.median(ms)
                per_step = args.time == "step"  # an update alone processes no tokens or images
                rec.update(step_ms_median=round(med, 4), step_ms_min=round(min(ms), 4), step_ms_max=round(max(ms), 4),
                           throughput=round(items / (med * 1e-3), 1) if per_step else None,
                           throughput_unit=unit if per_step else None, peak_bytes=peak,
                           start_bytes=start_bytes, final_loss=loss if loss == loss and abs(loss) != float("inf")
                           else None, first_step_s=round(first, 6) if first is not None else None)
                peak_mib = f"{peak / (1 << 20):.0f}" if peak is not None else "-"
                first_s = f"{first:.3f}" if first is not None else "-"
                rate = f"{items / (med * 1e-3):>12.0f} {unit:<8}" if per_step else f"{'-':>21}"
                print(f"{name:<9} {mode:<15} {batch:>6} {med:>10.3f} {min(ms):>10.3f} {max(ms):>10.3f} "
                      f"{rate} {peak_mib:>9} {loss:>10.4f} {first_s:>12}", file=table, flush=True)
            except Exception as e:  # report and go on: one failing mode must not hide the others
                failed += 1
                rec["error"] = f"{type(e).__name__}: {e}"
                print(f"{name:<9} {mode:<15} {rec['batch']:>6}  n/a: {rec['error']}", file=table, flush=True)
            model = loss_fn = None
            if args.compile:
                torch._dynamo.reset()  # drop the compiled graphs, which hold the case's model
            (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
             torch.backends.cudnn.benchmark) = saved
            if device.type == "cuda":
                torch.cuda.synchronize()
                torch.cuda.empty_cache()  # the next case starts from an empty cache, as kiln's does
            lines.append(json.dumps(rec))
            # Written after every case, so a run stopped by the GPU host's time limit keeps what it measured.
            if args.json:
                write_atomic(args.json, "".join(line + "\n" for line in lines))
            else:
                print(lines[-1], flush=True)
    if args.json:
        print(f"wrote {args.json}")
    if failed:
        print(f"train_step_peer: {failed} case(s) failed (their records carry the error)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

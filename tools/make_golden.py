#!/usr/bin/env python3
# Writes kiln's golden files: PyTorch on the CPU in float64, dropout off, runs three AdamW steps of
# a tiny GPT and a tiny SmallCNN (BatchNorm on batch statistics) from fixed weights and batches,
# and stores weights, batches, losses, gradients and final weights for tests/nn/test_golden.cpp.
# Needs python3 with torch, numpy and safetensors (the GPU host has them):
#   python3 tools/make_golden.py            # writes tests/golden/{gpt,small_cnn}.safetensors
import argparse
import json
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import save_file

# AdamW as in the golden run. lr is 2^-7 (close to 1e-2) because kiln keeps each group's lr in a
# float32 device scalar: a power of two is exact there, so both sides use the very same lr.
LR = 2.0**-7
BETAS = (0.9, 0.999)
EPS = 1e-8
WEIGHT_DECAY = 0.1
STEPS = 3

GPT_CONFIG = dict(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=8, dropout=0.0, bias=True)
# SmallCNN's layer order with narrow convs (kiln's SmallCNN has 32 and 64 channels, whose 18k
# conv weights would make a golden file of ~1 MB); test_golden.cpp checks that widths (32, 64)
# reproduce kiln's SmallCNN module by module.
CNN_CONFIG = dict(in_channels=2, num_classes=5, image_size=8, hidden=16, dropout=0.0, widths=[4, 8])


# --- the models, with kiln's (nanoGPT's and SmallCNN's) module trees and parameter names -------


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_head, self.n_embd = cfg["n_head"], cfg["n_embd"]
        self.dropout = cfg["dropout"]
        self.c_attn = nn.Linear(self.n_embd, 3 * self.n_embd, bias=cfg["bias"])
        self.c_proj = nn.Linear(self.n_embd, self.n_embd, bias=cfg["bias"])
        self.resid_dropout = nn.Dropout(cfg["dropout"])

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True)
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).reshape(b, t, c)))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        c = cfg["n_embd"]
        self.c_fc = nn.Linear(c, 4 * c, bias=cfg["bias"])
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * c, c, bias=cfg["bias"])
        self.dropout = nn.Dropout(cfg["dropout"])

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg["n_embd"], bias=cfg["bias"])
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg["n_embd"], bias=cfg["bias"])
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = dict(cfg)
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(cfg["vocab_size"], cfg["n_embd"]),
                wpe=nn.Embedding(cfg["block_size"], cfg["n_embd"]),
                drop=nn.Dropout(cfg["dropout"]),
                h=nn.ModuleList(Block(cfg) for _ in range(cfg["n_layer"])),
                ln_f=nn.LayerNorm(cfg["n_embd"], bias=cfg["bias"]),
            )
        )
        self.lm_head = nn.Linear(cfg["n_embd"], cfg["vocab_size"], bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied, as kiln's GPT

    def forward(self, idx):
        t = idx.shape[1]
        pos = torch.arange(t, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))

    def loss(self, idx, targets):
        logits = self.forward(idx)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-1)


class SmallCNN(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        w1, w2 = cfg.get("widths", [32, 64])
        side = cfg["image_size"] // 4
        self.features = nn.Sequential(
            nn.Conv2d(cfg["in_channels"], w1, 3, padding=1, bias=False),
            nn.BatchNorm2d(w1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(w1, w2, 3, padding=1, bias=False),
            nn.BatchNorm2d(w2),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(1),
            nn.Linear(w2 * side * side, cfg["hidden"]),
            nn.ReLU(),
            nn.Dropout(cfg["dropout"]),
            nn.Linear(cfg["hidden"], cfg["num_classes"]),
        )

    def forward(self, x):
        return self.classifier(self.features(x))

    def loss(self, x, y):
        return F.cross_entropy(self.forward(x), y)


def unique_state(model):
    """The state dict without tied duplicates (lm_head.weight is transformer.wte.weight), as
    safetensors' save_file requires."""
    return {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}


def randomize(model, gen):
    """Weights of order one everywhere (not the models' own small inits), so attention, GELU,
    LayerNorm and BatchNorm all work in their nonlinear ranges and every bias and norm
    parameter has a visible effect. BatchNorm's running statistics start off their defaults so
    the test also checks that they are loaded and updated."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=gen, dtype=p.dtype)
            if name.endswith("wte.weight") or name.endswith("wpe.weight"):
                p.copy_(0.5 * r)
            elif p.dim() >= 2:
                p.copy_(r / math.sqrt(p[0].numel()))  # std 1/sqrt(fan_in)
            elif name.endswith("weight"):
                p.copy_(1.0 + 0.1 * r)  # norm scales
            else:
                p.copy_(0.1 * r)  # biases and norm shifts
        for name, b in model.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(0.1 * torch.randn(b.shape, generator=gen, dtype=b.dtype))
            elif name.endswith("running_var"):
                b.copy_(0.5 + torch.rand(b.shape, generator=gen, dtype=b.dtype))


def decay_groups(model):
    """kiln's decay_groups rule: matrices (dim >= 2) decay, biases and norm parameters do not."""
    params = [p for _, p in model.named_parameters()]
    return [
        dict(params=[p for p in params if p.dim() >= 2], weight_decay=WEIGHT_DECAY),
        dict(params=[p for p in params if p.dim() < 2], weight_decay=0.0),
    ]


def gpt_batches(gen, cfg):
    """Token batches of 3 sequences. Step 1 is shorter than block_size (rows of wpe get no
    gradient that step), and each step ignores one target (-1, nanoGPT's ignore index)."""
    out = []
    for step, t in enumerate([cfg["block_size"], cfg["block_size"] - 3, cfg["block_size"]]):
        x = torch.randint(0, cfg["vocab_size"], (3, t), generator=gen)
        y = torch.randint(0, cfg["vocab_size"], (3, t), generator=gen)
        y[step % 3, (2 * step + 1) % t] = -1
        out.append((x, y))
    return out


def cnn_batches(gen, cfg):
    s = cfg["image_size"]
    return [
        (
            torch.randn((6, cfg["in_channels"], s, s), generator=gen, dtype=torch.float64),
            torch.randint(0, cfg["num_classes"], (6,), generator=gen),
        )
        for _ in range(STEPS)
    ]


def run(name, model, batches, config, out_dir):
    model.train()  # BatchNorm on batch statistics; dropout is 0 anyway
    tensors = {f"init.{k}": v.clone() for k, v in unique_state(model).items()}
    opt = torch.optim.AdamW(decay_groups(model), lr=LR, betas=BETAS, eps=EPS, foreach=False)
    losses = []
    for step, (x, y) in enumerate(batches):
        tensors[f"batch.{step}.x"] = x
        tensors[f"batch.{step}.y"] = y
        opt.zero_grad(set_to_none=True)
        loss = model.loss(x, y)
        loss.backward()
        tensors[f"loss.{step}"] = loss.detach().clone()
        losses.append(loss.item())
        for pname, p in model.named_parameters():
            tensors[f"grad.{step}.{pname}"] = p.grad.detach().clone()
        opt.step()
    tensors.update({f"final.{k}": v.clone() for k, v in unique_state(model).items()})
    # One metadata key: safetensors writes several in random order, and a regenerated file
    # should be byte for byte the same when nothing changed.
    golden = dict(
        model=name,
        config=config,
        optimizer=dict(name="AdamW", lr=LR, betas=list(BETAS), eps=EPS, weight_decay=WEIGHT_DECAY, decay_rule="dim>=2"),
        steps=STEPS,
        generator=f"tools/make_golden.py, torch {torch.__version__}, float64 on the CPU",
    )
    path = os.path.join(out_dir, f"{name}.safetensors")
    save_file({k: v.contiguous() for k, v in tensors.items()}, path, metadata={"golden": json.dumps(golden)})
    print(f"{path}: {len(tensors)} tensors, {os.path.getsize(path)} bytes, losses {losses}")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    default_out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden")
    ap.add_argument("--out", default=os.path.normpath(default_out), help="output directory")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.use_deterministic_algorithms(True)

    gen = torch.Generator().manual_seed(20240808)
    gpt = GPT(GPT_CONFIG).double()
    randomize(gpt, gen)
    run("gpt", gpt, gpt_batches(gen, GPT_CONFIG), GPT_CONFIG, args.out)

    gen = torch.Generator().manual_seed(20240809)
    cnn = SmallCNN(CNN_CONFIG).double()
    randomize(cnn, gen)
    run("small_cnn", cnn, cnn_batches(gen, CNN_CONFIG), CNN_CONFIG, args.out)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
# kiln <-> PyTorch through safetensors, both ways: kiln-saved GPT and SmallCNN (float32, float64)
# load into PyTorch twins with the same outputs, and PyTorch-saved state dicts load into kiln with
# the same outputs (kiln's half: the "[interop]" test, run twice with KILN_INTEROP_DIR set). Needs
# python3 with torch, numpy and safetensors (as on the GPU host) and a built kiln_nn_tests:
#   ninja -C build kiln_nn_tests && python3 tools/check_torch_interop.py --tests build/bin/kiln_nn_tests [--keep DIR]
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import GPT, SmallCNN, randomize, unique_state  # noqa: E402  (the same module trees)

TAGS = ["gpt_f32", "small_cnn_f32", "gpt_f64", "small_cnn_f64"]
# Largest allowed max|difference| / max|reference| of the outputs: float64 agrees to rounding, float32
# differs by float32 rounding in other summation orders (~1e-6 of the scale).
TOL = {torch.float32: 1e-4, torch.float64: 1e-10}


def run_kiln(tests, directory):
    env = dict(os.environ, KILN_INTEROP_DIR=directory)
    r = subprocess.run([tests, "[interop]"], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stdout.write(r.stdout + r.stderr)
        sys.exit(f"kiln_nn_tests [interop] failed (exit {r.returncode})")


def read_kiln_state(path):
    """A kiln safetensors file as a state dict: kiln stores tied tensors once and lists the other
    names in the metadata key __kiln_tied__ ({alias: stored name}); give each alias its tensor."""
    state = load_file(path)
    with safe_open(path, framework="pt") as f:
        meta = f.metadata() or {}
    for alias, stored in json.loads(meta.get("__kiln_tied__", "{}")).items():
        state[alias] = state[stored]
    return state, meta


def build(tag, meta):
    config = json.loads(meta["config"])
    dtype = {"float32": torch.float32, "float64": torch.float64}[meta["dtype"]]
    model = GPT(config) if tag.startswith("gpt") else SmallCNN(config)
    return model.to(dtype), dtype


def max_diff(got, want):
    d = (got - want).abs().max().item()
    return d, d / max(want.abs().max().item(), 1e-300)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tests", default="build/bin/kiln_nn_tests", help="path of the kiln_nn_tests executable")
    ap.add_argument("--keep", metavar="DIR", help="exchange files in DIR and keep them (default: a temporary directory)")
    args = ap.parse_args()
    tests = os.path.abspath(args.tests)
    if not os.path.exists(tests):
        sys.exit(f"{tests} not found: build kiln_nn_tests first (--tests names it)")
    torch.use_deterministic_algorithms(True)

    tmp = None
    if args.keep:
        directory = os.path.abspath(args.keep)
        os.makedirs(directory, exist_ok=True)
        for name in os.listdir(directory):  # a stale torch_* file would be read by the first kiln run
            if name.endswith(".safetensors"):
                os.remove(os.path.join(directory, name))
    else:
        tmp = tempfile.TemporaryDirectory(prefix="kiln_interop_")
        directory = tmp.name
    p = lambda name: os.path.join(directory, name)  # noqa: E731

    # (a) kiln -> PyTorch: kiln writes its models; each loads strictly into PyTorch's twin.
    run_kiln(tests, directory)
    results, failed = [], False
    torch_state = {}
    for i, tag in enumerate(TAGS):
        state, meta = read_kiln_state(p(f"kiln_{tag}.safetensors"))
        model, dtype = build(tag, meta)
        model.load_state_dict(state, strict=True)
        if isinstance(model, GPT):
            assert model.lm_head.weight is model.transformer.wte.weight, "loading untied lm_head"
        model.eval()
        io = load_file(p(f"kiln_{tag}_io.safetensors"))
        with torch.no_grad():
            out = model(io["x"])
        d, rel = max_diff(out, io["out"])
        failed |= rel > TOL[dtype]
        results.append((tag, "kiln -> torch", d, rel))

        # (b) PyTorch -> kiln: a PyTorch model of the same config, saved with save_file (the tied
        # head dropped, as save_file requires), plus its outputs on a batch of its own.
        gen = torch.Generator().manual_seed(100 + i)
        twin, _ = build(tag, meta)
        randomize(twin, gen)
        twin.eval()
        if isinstance(twin, GPT):
            x = torch.randint(0, twin.cfg["vocab_size"], (3, twin.cfg["block_size"]), generator=gen)
        else:
            x = torch.randn(io["x"].shape, generator=gen, dtype=dtype)
        with torch.no_grad():
            y = twin(x)
        torch_state[tag] = unique_state(twin)
        save_file({k: v.contiguous() for k, v in torch_state[tag].items()}, p(f"torch_{tag}.safetensors"))
        save_file({"x": x, "out": y}, p(f"torch_{tag}_io.safetensors"))

    # kiln loads PyTorch's files (checking its outputs itself) and writes what it loaded and computed.
    run_kiln(tests, directory)
    for tag in TAGS:
        state, _ = read_kiln_state(p(f"kiln_from_torch_{tag}.safetensors"))
        for k, v in torch_state[tag].items():
            if not torch.equal(state[k], v):
                print(f"{tag}: kiln's loaded {k} differs from PyTorch's")
                failed = True
        io_t = load_file(p(f"torch_{tag}_io.safetensors"))
        io_k = load_file(p(f"kiln_from_torch_{tag}_io.safetensors"))
        d, rel = max_diff(io_k["out"], io_t["out"])
        failed |= rel > TOL[io_t["out"].dtype]
        results.append((tag, "torch -> kiln", d, rel))

    print(f"{'model':<15}{'direction':<16}{'max |diff|':>12}{'of max |out|':>14}")
    for tag, direction, d, rel in results:
        print(f"{tag:<15}{direction:<16}{d:>12.3g}{rel:>14.3g}")
    if args.keep:
        print(f"files kept in {directory}")
    if failed:
        sys.exit("FAILED: outputs or weights differ beyond the tolerances")
    print("OK: kiln and PyTorch load each other's safetensors files with the same outputs")


if __name__ == "__main__":
    main()

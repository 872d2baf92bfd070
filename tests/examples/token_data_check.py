#!/usr/bin/env python3
"""train_gpt on token data (CTest example_train_gpt_tokens): a text's bytes written as nanoGPT token
files (train.bin and val.bin, uint16, no header; token = byte value, so a vocabulary of 256), then:

  1. a short CPU run on them learns (the validation loss falls below --max-val-loss from ln 256), and
     its records say so: a run record with data "tokens", the files' token counts and the vocabulary;
     a first_step record with positive seconds; the sample is printed as token ids;
  2. --vocab-size below the bytes the text holds fails, naming the token and the vocabulary;
  3. --data synthetic runs, and its loss stays near ln(vocabulary) (random tokens cannot be learned);
  4. --model gpt2-124m, shrunk by the shape flags, takes GPT-2's vocabulary, lr, beta2 and dropout.

--write-only writes the token files and stops (the resume test's fixture).

  usage: token_data_check.py --exe TRAIN_GPT --text FILE --work DIR [--write-only]
"""
import argparse
import json
import math
import os
import shutil
import struct
import subprocess
import sys

TEXT_BYTES = 200_000  # of the text: enough to learn from, quick to write


def fail(msg):
    sys.exit(f"token_data_check: {msg}")


def write_tokens(text_path, folder):
    with open(text_path, "rb") as f:
        data = f.read(TEXT_BYTES)
    n_train = len(data) * 9 // 10
    os.makedirs(folder, exist_ok=True)
    for name, part in (("train.bin", data[:n_train]), ("val.bin", data[n_train:])):
        with open(os.path.join(folder, name), "wb") as f:
            f.write(struct.pack(f"<{len(part)}H", *part))
    return n_train, len(data) - n_train


def run(exe, args, expect_ok=True):
    p = subprocess.run([exe, "--device", "cpu"] + args, capture_output=True, text=True)
    if expect_ok and p.returncode != 0:
        fail(f"{' '.join(args)} exited with {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}")
    return p


def records(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def one(recs, kind):
    found = [r for r in recs if r.get("record") == kind]
    if len(found) != 1:
        fail(f"expected one {kind} record, found {len(found)}")
    return found[0]


def final_val_loss(recs):
    return one(recs, "summary")["final_val_loss"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--exe", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--write-only", action="store_true")
    ap.add_argument("--max-val-loss", type=float, default=2.4)
    args = ap.parse_args()
    tokens = os.path.join(args.work, "tokens")
    n_train, n_val = write_tokens(args.text, tokens)
    if args.write_only:
        print(f"token_data_check: wrote {n_train} + {n_val} tokens to {tokens}")
        return
    train_bin = os.path.join(tokens, "train.bin")
    small = ["--n-layer", "1", "--n-head", "2", "--n-embd", "32", "--block-size", "32", "--batch-size", "8",
             "--eval-iters", "4"]

    # 1. Learns, and says what it trained on.
    out = os.path.join(args.work, "learn")
    shutil.rmtree(out, ignore_errors=True)
    # The CPU's default shape, as example_train_gpt on the text itself.
    p = run(args.exe, ["--data", train_bin, "--vocab-size", "256", "--max-iters", "600", "--eval-interval", "300",
                       "--eval-iters", "20", "--lr", "6e-3", "--sample-tokens", "5", "--out", out])
    recs = records(out)
    settings = one(recs, "run")["settings"]
    expect = {"data": "tokens", "train_tokens": n_train, "val_tokens": n_val, "vocab_size": 256, "model": "char"}
    for key, value in expect.items():
        if settings.get(key) != value:
            fail(f"run record's {key} is {settings.get(key)!r}, expected {value!r}")
    first = one(recs, "first_step")
    if first["step"] != 1 or not first["seconds"] > 0:
        fail(f"first_step record {first}")
    if "first step done" not in p.stdout:
        fail(f"no first-step line in the output:\n{p.stdout}")
    loss = final_val_loss(recs)
    if not loss < args.max_val_loss:
        fail(f"validation loss {loss} is not below {args.max_val_loss} (ln 256 = {math.log(256):.2f})")
    if "token ids (kiln has no tokenizer to decode them):" not in p.stdout:
        fail(f"the sample is not printed as token ids:\n{p.stdout}")

    # 2. A vocabulary the file does not fit.
    p = run(args.exe, ["--data", train_bin, "--vocab-size", "100", "--max-iters", "5", "--eval-interval", "5",
                       "--out", os.path.join(args.work, "small_vocab")] + small, expect_ok=False)
    if p.returncode == 0 or "outside the vocabulary [0, 100)" not in p.stderr + p.stdout:
        fail(f"--vocab-size 100 exited with {p.returncode}:\nstdout: {p.stdout}\nstderr: {p.stderr}")

    # 3. Synthetic tokens: nothing to learn, the loss stays near ln 64.
    out = os.path.join(args.work, "synthetic")
    shutil.rmtree(out, ignore_errors=True)
    run(args.exe, ["--data", "synthetic", "--vocab-size", "64", "--max-iters", "20", "--eval-interval", "20",
                   "--out", out] + small)
    recs = records(out)
    if one(recs, "run")["settings"].get("data") != "synthetic":
        fail("the synthetic run's record does not say synthetic")
    loss = final_val_loss(recs)
    if abs(loss - math.log(64)) > 0.3:
        fail(f"synthetic validation loss {loss} is not near ln 64 = {math.log(64):.3f}")
    # The tokens come from --seed: resuming with another seed would train on other tokens (refused).
    p = run(args.exe, ["--data", "synthetic", "--vocab-size", "64", "--max-iters", "20", "--eval-interval", "20",
                       "--seed", "2", "--out", os.path.join(args.work, "synthetic_other_seed"),
                       "--resume", os.path.join(out, "checkpoint.safetensors")] + small, expect_ok=False)
    if p.returncode != 2 or 'synthetic_seed: checkpoint "1337", this run "2"' not in p.stderr:
        fail(f"a synthetic resume with another --seed exited with {p.returncode}:\nstdout: {p.stdout}\n"
             f"stderr: {p.stderr}")

    # 4. The GPT-2 preset's recipe, on a shape small enough for CI.
    out = os.path.join(args.work, "gpt2")
    shutil.rmtree(out, ignore_errors=True)
    run(args.exe, ["--model", "gpt2-124m", "--max-iters", "2", "--eval-interval", "2", "--out", out] + small)
    settings = one(records(out), "run")["settings"]
    expect = {"model": "gpt2-124m", "data": "synthetic", "vocab_size": 50257, "lr": 6e-4, "beta2": 0.95,
              "dropout": 0, "n_layer": 1, "batch_size": 8}
    for key, value in expect.items():
        if settings.get(key) != value:
            fail(f"gpt2-124m run record's {key} is {settings.get(key)!r}, expected {value!r}")
    print("token_data_check: token files, synthetic tokens and the gpt2-124m preset behave")


if __name__ == "__main__":
    main()

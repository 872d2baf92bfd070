#!/usr/bin/env python3
"""SIGKILL resume test: a training example killed at random moments, mid-save included,
and resumed each time from its last checkpoint must end exactly as an uninterrupted run.

Runs the example once uninterrupted (the reference), then the same configuration into a second
folder: --kills times it is started (with --resume OUT/checkpoint.safetensors when a checkpoint
exists, else from scratch) and killed with SIGKILL, then a last start must finish normally. About
half the kills wait for a temporary file of the atomic writer (nn/safetensors.cpp) to appear, so
they land inside a save; the others come after a uniformly random delay. After every kill:

  * the checkpoint at its final name, if any, is whole, and its step never goes back;
  * the next start resumes from exactly that step (its "resumed from" line) and, once started up
    (its banner), leaves no temporary file of an earlier process in the folder.

At the end no temporary file remains, every model file the reference wrote (checkpoint.safetensors
aside) is byte-identical to it, and metrics.jsonl holds the reference's evaluation records, timings
cut off, in the same order and without duplicates or torn lines.

The schedule of kills comes from --seed (printed; a fresh one when not given). The kill moments are
wall-clock ones, so a replay repeats the schedule but not necessarily the exact moments. Standard
library only. Exit 0 when every check holds, 1 when one fails, 2 for bad arguments.
"""
import argparse
import filecmp
import json
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import time

# nn/safetensors.cpp's atomic writer (core/atomic_file.h): TARGET.tmp.HOST.PID.COUNTER next to
# TARGET (TARGET.tmp.PID.COUNTER before), renamed over it once written and fsynced. The PID tells
# whose it is: only the running process may own one.
TEMP_RE = re.compile(r"^(?P<target>.+)\.tmp\.(?:[A-Za-z0-9-]+\.)?(?P<pid>[0-9]+)\.(?P<n>[0-9]+)$")

CHECKPOINT = "checkpoint.safetensors"


class Example:
    """How to run one example briefly and deterministically, and how to read what it prints."""

    def __init__(self, name, args, banner, resumed, record, timing):
        self.name = name
        self.args = args          # flags before --out / --resume
        self.banner = banner      # printed (and flushed) once start-up, resume included, is done
        self.resumed = resumed    # group 1: the step a resume restored
        self.record = record      # the metrics records to compare
        self.timing = timing      # the first timing field of those records: it and all after are cut


def gpt_example(exe, data):
    # gpt_resume.cmake's tiny configuration (dropout on, so its masks must continue too), longer and
    # with an evaluation, a best model and a checkpoint every 10 steps: many saves to land in.
    args = [exe, "--device", "cpu", "--data", data, "--n-layer", "1", "--n-head", "2", "--n-embd", "32",
            "--block-size", "32", "--batch-size", "8", "--dropout", "0.1", "--max-iters", "400",
            "--warmup-iters", "10", "--eval-interval", "10", "--eval-iters", "2", "--sample-tokens", "0",
            "--seed", "3"]
    return Example("train_gpt", args, re.compile(r"^GPT on ", re.M),
                   re.compile(r"^resumed from .* at iteration ([0-9]+)\s*$", re.M), "eval", "tokens_per_s")


def cnn_example(exe, data):
    # train_cnn checkpoints at every epoch's end; 200 images in batches of 50 make an epoch of 4
    # steps, so it checkpoints every few tenths of a second.
    args = [exe, "--device", "cpu", "--model", "small-cnn", "--epochs", "16", "--train-limit", "200",
            "--test-limit", "100", "--batch-size", "50", "--seed", "7"]
    if data:
        args += ["--data", data]
    return Example("train_cnn", args, re.compile(r" on Fashion-MNIST \("),
                   re.compile(r"^resumed from .* \(step ([0-9]+)\)\s*$", re.M), "epoch", "images_per_s")


class Failures:
    def __init__(self, seed):
        self.seed = seed
        self.items = []
        self.stale_reported = set()  # each stale temporary file is reported once, by the first start it outlives

    def add(self, what):
        self.items.append(what)
        print(f"FAIL: {what}", flush=True)


def temp_files(folder):
    """{name: pid} of the atomic writer's temporary files in folder."""
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return {}
    found = {}
    for name in names:
        m = TEMP_RE.match(name)
        if m:
            found[name] = int(m.group("pid"))
    return found


def checkpoint_step(path):
    """The step in a checkpoint's metadata; ValueError when the file is not a whole safetensors file
    (too short for its header, or not exactly as long as its header's tensors say)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{len(data)} bytes, shorter than the header length")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError(f"header of {n} bytes in a file of {len(data)}")
    try:
        header = json.loads(data[8:8 + n])
        end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
        step = int(header["__metadata__"]["kiln.step"])
    except (ValueError, KeyError, TypeError, IndexError) as e:
        raise ValueError(f"bad header: {e!r}")
    if 8 + n + end != len(data):
        raise ValueError(f"{len(data)} bytes, its header describes {8 + n + end}")
    return step


def saved_step(path):
    """The step of the checkpoint at `path`, or None when there is none (or none readable)."""
    try:
        return checkpoint_step(path) if os.path.exists(path) else None
    except (OSError, ValueError):
        return None


def read_text(path):
    with open(path, "r", errors="replace") as f:
        return f.read()


class Process:
    """One start of the example, its output in a log file, watched by polling (the banner in the
    log, the folder's temporary files) until it exits, is killed by plan, or overruns the guard."""

    def __init__(self, ex, out, log, resume, plan, poll, guard, failures):
        cmd = ex.args + ["--out", out] + (["--resume", resume] if resume else [])
        self.log = log
        with open(log, "w") as f:
            self.start = time.monotonic()
            self.proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.pid = self.proc.pid
        self.killed = False
        self.hung = False
        self.mid_save = []        # its own temporary files present once it was dead
        self.temps_seen = 0       # its own temporary files seen while it ran
        self.banner_at = None     # seconds from the start to the banner
        try:
            self._watch(ex, out, log, plan, poll, guard, failures)
        except BaseException:
            if self.proc.poll() is None:  # an interrupted test leaves no example running
                self.kill()
            raise
        self.seconds = time.monotonic() - self.start
        self.mid_save = sorted(name for name, pid in temp_files(out).items() if pid == self.pid)
        text = read_text(log)
        m = None
        for m in ex.resumed.finditer(text):
            pass
        self.resumed_step = int(m.group(1)) if m else None
        if self.banner_at is None and ex.banner.search(text):
            self.banner_at = self.seconds

    def _watch(self, ex, out, log, plan, poll, guard, failures):
        own_seen = set()
        while True:
            rc = self.proc.poll()
            now = time.monotonic() - self.start
            # The log before the folder: a listing taken after the banner shows the folder as the
            # finished start-up left it.
            banner_now = self.banner_at is None and ex.banner.search(read_text(log))
            temps = temp_files(out)
            if banner_now:
                self.banner_at = now
            if self.banner_at is not None:
                # Any temporary file not this process's is an earlier process's, left by its kill
                # (pids are handed out cyclically, so no restart here reuses one); start-up must
                # have removed it. Checked at every poll, as one that lingers later is as wrong.
                for name, pid in sorted(temps.items()):
                    if pid != self.pid and name not in failures.stale_reported:
                        failures.stale_reported.add(name)
                        failures.add(f"{out}/{name}: a temporary file of an earlier process (pid {pid}) "
                                     f"is still there after process {self.pid} started up")
            if rc is not None:
                self.returncode = rc
                return
            own = {name for name, pid in temps.items() if pid == self.pid}
            own_seen |= own
            self.temps_seen = len(own_seen)
            kind, value = plan if plan else (None, None)
            if (kind == "delay" and now >= value) or (kind == "save" and len(own_seen) >= value):
                self.kill()
                return
            if now > guard:
                self.kill()
                self.hung = True
                failures.add(f"process {self.pid} ran past the {guard} s guard; killed ({log})")
                return
            time.sleep(poll)

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.returncode = self.proc.wait()
        self.killed = True


def eval_records(path, ex, failures, tag):
    """The metrics file's records of ex.record, each cut before its timing field, as raw text
    (numbers compared as written); a line that is not JSON (a torn write) is a failure."""
    kept = []
    last = None
    with open(path, "r", errors="replace") as f:
        for i, line in enumerate(f, 1):
            line = line.rstrip("\n")
            try:
                rec = json.loads(line, parse_float=str, parse_int=str)
            except ValueError:
                failures.add(f"{tag}: {path} line {i} is not a JSON record (torn write?): {line[:200]!r}")
                continue
            last = rec
            if rec.get("record") != ex.record:
                continue
            cut = []
            for key, value in rec.items():
                if key == ex.timing:
                    break
                cut.append((key, value))
            kept.append(cut)
    if not last or last.get("record") != "summary" or last.get("finished") is not True:
        failures.add(f"{tag}: {path} does not end with a finished run's summary: {last}")
    return kept


def fmt(record):
    return "{" + ", ".join(f"{k}: {v}" for k, v in record) + "}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--example", choices=["gpt", "cnn"], required=True)
    ap.add_argument("--exe", required=True, help="the example's binary (train_gpt or train_cnn)")
    ap.add_argument("--data", default="", help="train_gpt's text file (required for gpt); train_cnn's "
                    "Fashion-MNIST folder (default: the example's own)")
    ap.add_argument("--work", required=True, help="scratch folder (emptied first)")
    ap.add_argument("--kills", type=int, default=12, help="SIGKILLs before the run is let finish (default 12)")
    ap.add_argument("--seed", type=int, default=None, help="seed of the kill schedule (default: a fresh one)")
    ap.add_argument("--save-share", type=float, default=0.5,
                    help="share of the kills that wait for a temporary file (default 0.5)")
    ap.add_argument("--poll", type=float, default=0.0005, help="polling interval in seconds (default 0.0005)")
    ap.add_argument("--guard", type=float, default=120,
                    help="hang guard: seconds one process may run before it is killed as hung (default 120)")
    a = ap.parse_args()
    if a.kills < 0 or not 0 <= a.save_share <= 1 or a.poll <= 0 or a.guard <= 0:
        ap.error("--kills >= 0, --save-share in [0, 1], --poll > 0 and --guard > 0")
    if a.example == "gpt" and not a.data:
        ap.error("--example gpt needs --data")
    seed = a.seed if a.seed is not None else int.from_bytes(os.urandom(4), "little")
    rng = random.Random(seed)
    ex = (gpt_example if a.example == "gpt" else cnn_example)(a.exe, a.data)
    replay = f"--example {a.example} --kills {a.kills} --seed {seed}"
    print(f"sigkill_resume: {ex.name}, {a.kills} kills, seed {seed} (replay: {replay})", flush=True)
    failures = Failures(seed)

    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    ref_out, out = os.path.join(a.work, "reference"), os.path.join(a.work, "killed")

    # --- the reference, uninterrupted; its timing scales the random kill delays ---------------
    ref = Process(ex, ref_out, os.path.join(a.work, "reference.log"), None, None, a.poll, a.guard, failures)
    if ref.hung or ref.returncode != 0:
        print(read_text(ref.log)[-3000:])
        failures.add(f"the reference run exited with {ref.returncode}")
        return finish(failures, replay)
    startup = ref.banner_at if ref.banner_at is not None else 0.0
    training = max(ref.seconds - startup, 0.0)
    try:
        total_steps = checkpoint_step(os.path.join(ref_out, CHECKPOINT))
    except (OSError, ValueError) as e:
        failures.add(f"the reference's final checkpoint: {e}")
        return finish(failures, replay)
    print(f"reference: {ref.seconds:.2f} s ({startup:.2f} s start-up), {total_steps} steps", flush=True)

    # --- the same run, killed --kills times, then let finish ------------------------------------
    ckpt = os.path.join(out, CHECKPOINT)
    last_step = None       # the checkpoint's step after the previous kill
    last_resumed = None    # the step the previous resume reported
    kills = mid_save_kills = 0
    n = 0
    while True:
        n += 1
        resume = None
        expected = None
        if os.path.exists(ckpt):
            try:
                expected = checkpoint_step(ckpt)
            except (OSError, ValueError) as e:
                failures.add(f"start {n}: {ckpt} at its final name is not a whole checkpoint: {e}")
            if expected is not None and last_step is not None and expected < last_step:
                failures.add(f"start {n}: the checkpoint went back from step {last_step} to {expected}")
            if expected is not None:
                last_step = expected
            resume = ckpt
        elif last_step is not None:
            failures.add(f"start {n}: {ckpt} (step {last_step} before) has disappeared")
        if kills < a.kills:
            # Random delays up to start-up plus twice an even share, among the kills left, of the
            # training left: the kills spread over start-up, the whole run and its end, and most
            # come before it finishes.
            left = 1 - (last_step or 0) / max(total_steps, 1)
            span = startup + 2 * training * left / (a.kills - kills)
            # The first start is killed inside its first save, when saves are asked for at all: every
            # run has a kill mid-save, not only half of them.
            save = rng.random() < a.save_share if n > 1 else a.save_share > 0
            plan = ("save", rng.randint(1, 3) if n > 1 else 1) if save else ("delay", rng.uniform(0, span))
        else:
            plan = None
        log = os.path.join(a.work, f"killed.{n:02d}.log")
        p = Process(ex, out, log, resume, plan, a.poll, a.guard, failures)
        what = {"save": "at temporary file #{}", "delay": "after {:.3f} s"}[plan[0]].format(plan[1]) if plan else "to the end"
        start_text = f"from step {expected}" if resume else "from scratch"
        verdict = f"killed after {p.seconds:.3f} s" if p.killed else f"exited with {p.returncode} after {p.seconds:.3f} s"
        print(f"start {n:2d} (pid {p.pid}) {start_text}, planned {what}: {verdict}"
              f"{'' if p.banner_at is not None else ', before its banner'}"
              f"{', mid-save: ' + ' '.join(p.mid_save) if p.mid_save else ''}", flush=True)

        # The resume must have restored exactly the checkpoint found at the final name.
        # (A start killed before its banner may not have got that far.)
        if resume and expected is not None:
            if p.resumed_step is not None and p.resumed_step != expected:
                failures.add(f"start {n}: resumed at step {p.resumed_step}, the checkpoint holds step {expected}")
            elif p.resumed_step is None and (p.banner_at is not None or not p.killed):
                failures.add(f"start {n}: no 'resumed from' line from --resume {resume} ({log})")
        if p.resumed_step is not None:
            if last_resumed is not None and p.resumed_step < last_resumed:
                failures.add(f"start {n}: resumed at step {p.resumed_step}, before the previous resume's "
                             f"{last_resumed}")
            last_resumed = p.resumed_step

        if plan and plan[0] == "save" and not p.killed and p.temps_seen == 0 and saved_step(ckpt) != expected:
            # It saved a checkpoint (a new step at the final name) and never had a temporary file:
            # the save wrote the final name in place, where a kill would leave half a file.
            failures.add(f"start {n} saved {ckpt} without a temporary file: the save is not atomic")
        if p.killed:
            if p.hung:  # already reported
                return finish(failures, replay)
            kills += 1
            mid_save_kills += bool(p.mid_save)
            continue
        if p.returncode != 0:
            print(read_text(log)[-3000:])
            failures.add(f"start {n} exited with {p.returncode} ({log})")
            return finish(failures, replay)
        break  # finished normally
    print(f"{kills} kills, {mid_save_kills} of them mid-save (a temporary file of the killed process left)",
          flush=True)
    if kills < a.kills:
        print(f"note: the run finished after {kills} of the {a.kills} planned kills", flush=True)
    if a.kills > 0 and a.save_share > 0 and mid_save_kills == 0:
        failures.add("no kill came while a save was under way (its temporary file left behind): the "
                     "atomic saves were not tested")

    # --- the end state ----------------------------------------------------------------------------
    left = sorted(temp_files(out))
    if left:
        failures.add(f"temporary files remain in {out}: {' '.join(left)}")
    # The model files the reference wrote. checkpoint.safetensors is left out: it may carry
    # per-run bookkeeping (such as metrics.jsonl's length, which holds each process's run record);
    # the models and the metrics below say whether the training itself matched.
    models = sorted(f for f in os.listdir(ref_out) if f.endswith(".safetensors") and f != CHECKPOINT)
    if not models:
        failures.add(f"the reference wrote no model file in {ref_out}")
    for f in models:
        mine = os.path.join(out, f)
        if not os.path.exists(mine):
            failures.add(f"{f}: the reference wrote it, the killed run did not")
        elif not filecmp.cmp(os.path.join(ref_out, f), mine, shallow=False):
            failures.add(f"{f} differs from the reference's")
    want = eval_records(os.path.join(ref_out, "metrics.jsonl"), ex, failures, "reference")
    got = eval_records(os.path.join(out, "metrics.jsonl"), ex, failures, "killed run")
    if not want:
        failures.add(f"the reference's metrics.jsonl has no {ex.record} records")
    if got != want:
        steps = [dict(r).get("step") for r in got]
        dups = sorted({s for s in steps if steps.count(s) > 1}, key=int)
        detail = ", ".join(f"{s} ({steps.count(s)} times)" for s in dups)
        detail = f" (steps recorded more than once: {detail})" if dups else ""
        failures.add(f"metrics.jsonl's {ex.record} records differ from the reference's{detail}: "
                     f"{len(got)} records against {len(want)}")
        for i in range(max(len(want), len(got))):
            w = fmt(want[i]) if i < len(want) else "(none)"
            g = fmt(got[i]) if i < len(got) else "(none)"
            if w != g:
                print(f"  first difference at record {i + 1}:\n    reference: {w}\n    killed:    {g}")
                break
    else:
        print(f"metrics: {len(got)} {ex.record} records equal to the reference's; models equal: {' '.join(models)}")
    return finish(failures, replay)


def finish(failures, replay):
    if failures.items:
        print(f"sigkill_resume: {len(failures.items)} check(s) failed; seed {failures.seed} (replay: {replay})")
        return 1
    print(f"sigkill_resume: every check holds (seed {failures.seed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Adds one training run to bench/TRAINING.md, from the metrics file the example wrote itself.

Every training number kiln's README states must come from an entry this script wrote: the entry is
derived only from the run's OUT/metrics.jsonl (its "run" records: command, device, threads, start
time, the commit the binary was built from; its progress records; its "summary"), never typed by
hand. Non-obvious decision: a run split across resumes is one entry, its processes' commands listed
and their training times summed, and an unfinished run is refused.

    python3 tools/record_training.py RUN [--training-md FILE]

RUN is an example's --out folder or a metrics.jsonl (for instance one copied back from the GPU host
by `tools/gpu_check.sh exec`). Standard library only. Exit 2 on bad input, with the reason.
"""

import argparse
import datetime
import decimal
import json
import os
import shlex
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_compare import write_atomic  # noqa: E402
from metrics_jsonl import BadInput, read_records as read_lines  # noqa: E402

MARKER = "<!-- entries below, newest first -->"
HEADER = f"""# Training records

Every training number kiln's README states comes from an entry on this page. Entries are written
only by `tools/record_training.py`, from the metrics file of the run itself (`metrics.jsonl` in the
example's `--out` folder, or a copy of it brought back from the GPU host), newest first:

```
python3 tools/record_training.py RUN_DIR_OR_METRICS_FILE
```

An entry gives the time the run started (UTC); the kiln commit its binary was built from (stamped
into the binary at build time from `git describe --always --dirty`: a `-dirty` suffix means tracked
files differed from that commit when it was built); the device (the GPU's name, or the CPU's model
and the thread count); the command (the program's name, then its arguments exactly as given); the
settings with every default resolved; and the results: final and best held-out accuracy or
validation loss, training throughput (evaluations left out), wall time (the training loop with its
evaluations; data loading and set-up left out), and how busy the host was (its load average when
the run started and ended, and the CPU time the run used). A run split across resumes is one entry
that lists each process's command.

{MARKER}
"""


def read_records(path):
    records = [record for _, record in read_lines(path)]
    if not records:
        raise BadInput(f"{path} is empty")
    if records[0]["record"] != "run":
        raise BadInput(f"{path}: the first record is \"{records[0]['record']}\", not \"run\"; "
                       "was it written by a kiln example?")
    return records


def segments(records):
    """One (run record, its other records) pair per process that wrote to the file."""
    out = []
    for r in records:
        if r["record"] == "run":
            out.append((r, []))
        else:
            out[-1][1].append(r)
    return out


def command(run):
    argv = run["argv"]
    return shlex.join([os.path.basename(argv[0])] + argv[1:])


def device_text(run):
    if run["device"].startswith("cuda"):
        return f"{run['device_name']} ({run['device']}; {run['threads']} host threads)"
    return f"CPU: {run['device_name']}, {run['threads']} threads"


def duration(seconds):
    total = int(round(seconds))
    if total >= 3600:
        return f"{seconds:.0f} s ({total // 3600}h{total // 60 % 60:02d}m)"
    if total >= 60:
        return f"{seconds:.0f} s ({total // 60}m{total % 60:02d}s)"
    return f"{seconds:.1f} s"


def host_text(segs):
    """How busy the machine was: the load average when the run started and ended, and the CPU time
    the run's processes used (on a shared machine, neighbours slow a run down)."""
    done = summaries(segs)
    start, end = segs[0][0].get("load_average"), done[-1].get("load_average")
    cpu = [s.get("cpu_seconds") for s in done]
    load = ("1-minute load average " + (f"{start:.2f}" if start is not None else "unknown") + " at the start, " +
            (f"{end:.2f}" if end is not None else "unknown") + " at the end")
    if None in cpu or not cpu:
        return load
    return f"{load}; the run used {duration(sum(cpu))} of CPU time"


def settings_text(settings):
    return "; ".join(f"{k} {json.dumps(v) if isinstance(v, bool) else v}" for k, v in settings.items())


def summaries(segs):
    return [s for _, rest in segs for s in rest if s["record"] == "summary"]


def speed(count, unit, segs, rate_key):
    """Training throughput and wall time; one process's own rate, else the processes' pooled rate."""
    done = summaries(segs)
    train_seconds = sum(s["train_seconds"] for s in done)
    wall = sum(s["wall_seconds"] for s in done)
    if len(done) == 1 and rate_key in done[0]:
        rate = done[0][rate_key]
    else:
        rate = count / train_seconds if train_seconds > 0 else 0
    if not rate:
        return f"wall time {duration(wall)}"
    # A summary keeps one decimal (12192.5 for the 12192.54 its log printed as 12193): half up
    # gives the log's whole number back.
    whole = decimal.Decimal(repr(rate)).quantize(decimal.Decimal(1), rounding=decimal.ROUND_HALF_UP)
    return f"{whole:,} {unit}/s while training; wall time {duration(wall)}"


def results_classifier(segs, records):
    """train_cnn and train_fashion_mnist: held-out accuracy after every epoch."""
    epochs = [r for r in records if r["record"] == "epoch"]
    if not epochs:
        raise BadInput("the run has no epoch records")
    final, last = epochs[-1], summaries(segs)[-1]
    best = max(epochs, key=lambda r: (r["test_accuracy"], -r["epoch"]))
    steps = f" ({last['steps']} steps)" if "steps" in last else ""
    return [
        f"held-out accuracy {final['test_accuracy']:.4f} after {final['epoch']} epochs{steps} on "
        f"{last['test_images']:,} test images; best {best['test_accuracy']:.4f} (epoch {best['epoch']})",
        speed(sum(s["images"] for s in summaries(segs)), "images", segs, "images_per_s"),
    ]


def results_gpt(segs, records):
    """train_gpt: validation loss at every evaluation."""
    evals = [r for r in records if r["record"] == "eval"]
    if not evals:
        raise BadInput("the run has no eval records")
    last = summaries(segs)[-1]
    best = min(evals, key=lambda r: (r["val_loss"], r["step"]))
    return [
        f"validation loss {last['final_val_loss']:.4f} after {last['iterations']} iterations; "
        f"best {best['val_loss']:.4f} (iteration {best['step']})",
        speed(sum(s["tokens"] for s in summaries(segs)), "tokens", segs, "tokens_per_s"),
    ]


def results_fit(segs, records):
    """fit_function: the final mean squared error."""
    last = summaries(segs)[-1]
    return [
        f"final mean squared error {last['final_mse']:.6g} after {last['steps']} steps",
        speed(last["steps"], "steps", segs, "steps_per_s"),
    ]


RESULTS = {
    "train_cnn": results_classifier,
    "train_fashion_mnist": results_classifier,
    "train_gpt": results_gpt,
    "fit_function": results_fit,
}


def entry(records, source):
    segs = segments(records)
    first = segs[0][0]
    program = first["program"]
    last = records[-1]
    if last["record"] != "summary" or not last.get("finished"):
        raise BadInput(f"{source}: the run did not finish (its last record is not the summary of a finished "
                       "run); resume it to the end, then record it")
    if any(run["program"] != program for run, _ in segs):
        raise BadInput(f"{source}: records of several programs in one file")
    if program not in RESULTS:
        raise BadInput(f"{source}: no recipe for the results of program \"{program}\"")
    key = f"{program} {first['start_utc']}"
    lines = RESULTS[program](segs, records)

    start = datetime.datetime.strptime(first["start_utc"], "%Y-%m-%dT%H:%M:%SZ")
    devices = sorted({device_text(run) for run, _ in segs})
    commits = []
    for run, _ in segs:
        if run["kiln_commit"] not in commits:
            commits.append(run["kiln_commit"])
    kind = "GPU" if first["device"].startswith("cuda") else "CPU"
    out = [f"<!-- record: {key} -->", f"### {program}, {start:%Y-%m-%d %H:%M} UTC, {kind}", ""]
    if len(segs) == 1:
        out.append(f"- command: `{command(first)}`")
    else:
        out.append(f"- commands ({len(segs)} processes, each resuming the one before):")
        out += [f"  - `{command(run)}`" for run, _ in segs]
    out.append("- kiln commit: " + ", ".join(f"`{c}`" for c in commits) + " (the binary's build stamp)")
    out.append("- device: " + "; ".join(devices))
    out.append(f"- settings: {settings_text(first.get('settings', {}))}")
    out.append(f"- result: {lines[0]}")
    out.append(f"- speed: {lines[1]}")
    out.append(f"- host: {host_text(segs)}")
    out.append("")
    return key, "\n".join(out) + "\n"


def insert(page, key, text):
    """The page with the entry placed among the others by the run's start time, newest first."""
    head, body = page.split(MARKER, 1)
    parts = body.split("<!-- record: ")
    entries = ["<!-- record: " + p for p in parts[1:]]
    start = key.split(" ", 1)[1]
    at = 0
    while at < len(entries) and entries[at][len("<!-- record: "):].split(" -->", 1)[0].split(" ", 1)[1] >= start:
        at += 1
    entries.insert(at, text)
    return head + MARKER + "\n\n" + "".join(e.rstrip("\n") + "\n\n" for e in entries).rstrip("\n") + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="an example's --out folder, or its metrics.jsonl")
    parser.add_argument("--training-md", default=os.path.join(ROOT, "bench", "TRAINING.md"),
                        help="the records page (default: bench/TRAINING.md; created when missing)")
    args = parser.parse_args()
    try:
        source = os.path.join(args.run, "metrics.jsonl") if os.path.isdir(args.run) else args.run
        if not os.path.isfile(source):
            raise BadInput(f"no metrics file at {source}")
        try:
            records = read_records(source)
            key, text = entry(records, source)
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
            raise BadInput(f"{source}: a record lacks what an entry needs ({type(e).__name__}: {e})") from None
        page = HEADER
        if os.path.exists(args.training_md):
            with open(args.training_md, encoding="utf-8") as f:
                page = f.read()
        if MARKER not in page:
            raise BadInput(f"{args.training_md} lacks the line {MARKER}")
        if f"<!-- record: {key} -->" in page:
            raise BadInput(f"{args.training_md} already holds the run {key}")
        write_atomic(args.training_md, insert(page, key, text))
    except BadInput as e:
        print(f"record_training: {e}", file=sys.stderr)
        return 2
    print(f"record_training: added {key} to {args.training_md}")
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Runs a kiln Catch2 test executable to the end even when a test case kills its process.

A kernel that faults leaves the CUDA context unusable, and a bug can crash the process outright:
either way, in one process the test cases after it either fail for a reason not their own or never
run. This runner starts the executable with KILN_TEST_PROGRESS (tests/progress.h), so the progress
file says which test case began and ended; when the process dies before the end of its run, the test
case it died in is recorded as crashed (or as having lost the CUDA context, when kiln_cuda_tests'
guard ended the run after it), and the test cases that never began run in a new process, until
every one has run once or the time is spent. Each test case runs at most once.

The first run is the plain command (EXE [SPEC] --durations yes, after the optional PREFIX, e.g.
compute-sanitizer and its options); a resumed run names its remaining test cases in a file (-f).
Every run's output is appended to --log, each headed by a "==== resume_tests: run N" line. The
result (a verdict per test case, each run's exit) goes to --json; a summary goes to stdout, its
first line one sentence that tools/gpu_check.sh records.

With --test-timeout, a test case that runs longer (a kernel that never finishes) has its process
killed and is recorded as hung; the rest run in a new process.

Exit status: 0 when every test case passed and every run ended cleanly, 1 otherwise (a failure, a
crash, a lost context, a hang, an error a test case left unread, a run that did not end cleanly, or
test cases left unrun when the time ran out), 2 for bad usage or an executable whose tests cannot
be listed.

  usage: resume_tests.py --exe EXE [--spec SPEC] [--env NAME=VALUE]... [--deadline SECONDS]
                         [--test-timeout SECONDS] [--log FILE] [--json FILE] [--work DIR] [-- PREFIX...]
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_compare import write_atomic  # noqa: E402

CONTEXT_LOST_EXIT = 75  # tests/progress.h: kContextLostExit


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--exe", required=True, help="the Catch2 test executable")
    p.add_argument("--spec", help="a Catch2 test spec selecting the test cases (default: all)")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="set for the test processes only (repeatable)")
    p.add_argument("--deadline", type=float, default=600.0, help="seconds for all runs together")
    p.add_argument("--test-timeout", type=float, default=0.0,
                   help="seconds one test case may run before its process is killed as hung and the rest "
                        "resumed (default: no limit but the deadline)")
    p.add_argument("--log", help="append every run's output here (default: this program's stdout)")
    p.add_argument("--json", help="write the verdicts and runs here")
    p.add_argument("--work", help="folder for the progress and list files (default: a temporary one)")
    p.add_argument("prefix", nargs="*", help="after --: a command that runs the executable (e.g. compute-sanitizer ...)")
    args = p.parse_args(argv)
    for pair in args.env:
        if "=" not in pair or pair.startswith("="):
            p.error(f"--env wants NAME=VALUE, got {pair!r}")
    if args.deadline <= 0:
        p.error(f"--deadline must be positive, got {args.deadline}")
    if args.test_timeout < 0:
        p.error(f"--test-timeout must not be negative, got {args.test_timeout}")
    return args


def child_env(args, progress=None):
    env = dict(os.environ)
    for pair in args.env:
        name, value = pair.split("=", 1)
        env[name] = value
    env.pop("KILN_TEST_PROGRESS", None)
    if progress:
        env["KILN_TEST_PROGRESS"] = progress
    return env


def list_tests(args):
    """The selected test cases' names, in the order a run takes them (Catch2 lists in run order)."""
    cmd = [args.exe] + ([args.spec] if args.spec else []) + ["--list-test-names-only"]
    try:
        out = subprocess.run(cmd, env=child_env(args), capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SystemExit(f"resume_tests: cannot list the tests of {args.exe}: {e}") from None
    names = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    # A name starting with '#' is listed in quotes (Catch2 would take it for a comment otherwise).
    names = [n[1:-1] if n.startswith('"#') and n.endswith('"') else n for n in names]
    if out.returncode < 0 or (out.returncode != 0 and not names):
        raise SystemExit(f"resume_tests: `{' '.join(cmd)}` failed (exit {out.returncode}): {out.stderr.strip()[:400]}")
    return names


def spec_line(name):
    """A line of a Catch2 -f file that selects exactly the test case `name`: quoted (a bare line that
    starts with '#' is a comment), with the characters the spec parser gives a meaning escaped (a
    comma separates names and brackets start a tag, inside quotes too)."""
    for c in '\\,[]"':
        name = name.replace(c, "\\" + c)
    return '"' + name + '"'


def read_progress(path):
    """The events of one run: (kind, name, detail) tuples in order."""
    events = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                kind = parts[0]
                name = parts[1] if len(parts) > 1 else ""
                detail = parts[2] if len(parts) > 2 else ""
                events.append((kind, name, detail))
    except FileNotFoundError:
        pass
    return events


def describe_exit(rc, stop=None):
    if stop == "hung":
        return "killed: a test case ran past --test-timeout"
    if rc is None:
        return "killed when the time ran out"
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    if rc == CONTEXT_LOST_EXIT:
        return "ended by the CUDA context guard (exit 75)"
    return f"exit {rc}"


def kill_group(proc):
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=10)
            return
        except subprocess.TimeoutExpired:
            continue


def run_once(cmd, env, log, timeout, progress, test_timeout):
    """Runs cmd in its own process group with output appended to log. Returns (status, stop):
    its exit status and None, or None and why it was stopped (the whole group killed): "deadline"
    when the time ran out, "hung" when one test case ran longer than test_timeout seconds (its
    "start" the last line of the progress file for that long)."""
    log.write(f"==== resume_tests: {' '.join(cmd)}\n")
    log.flush()
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    end = time.monotonic() + timeout
    size, changed = -1, time.monotonic()
    while True:
        try:
            return proc.wait(timeout=0.25), None
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic()
        if now >= end:
            kill_group(proc)
            return None, "deadline"
        if test_timeout:
            current = os.path.getsize(progress) if os.path.exists(progress) else 0
            if current != size:
                size, changed = current, now
            elif now - changed > test_timeout:
                events = read_progress(progress)
                if events and events[-1][0] == "start":
                    kill_group(proc)
                    return None, "hung"


def resume(args, names, work, log):
    verdicts = {}  # name -> {"status": passed|failed|crashed|lost|timed out|not run, "detail": ..., "run": n}
    runs = []
    remaining = list(names)
    why_unrun = "no time left"
    start = time.monotonic()
    selection = [args.spec] if args.spec else []
    while remaining:
        left = args.deadline - (time.monotonic() - start)
        if left < 2:
            break
        n = len(runs) + 1
        progress = os.path.join(work, f"progress-{n}.txt")
        if os.path.exists(progress):
            os.unlink(progress)
        cmd = list(args.prefix) + [args.exe] + selection + ["--durations", "yes"]
        rc, stop = run_once(cmd, child_env(args, progress), log, left, progress, args.test_timeout)
        events = read_progress(progress)
        started = [name for kind, name, _ in events if kind == "start"]
        fatal = [(name, detail) for kind, name, detail in events if kind == "fatal"]
        done = any(kind == "done" for kind, _, _ in events) and not fatal
        for kind, name, detail in events:
            if kind == "end":
                verdicts[name] = {"status": detail if detail in ("passed", "failed") else "failed", "run": n}
        for kind, name, detail in events:
            if kind == "stray":
                verdicts[name] = {"status": "failed", "run": n, "detail": f"left a CUDA error no check read ({detail})"}
        lost = [(name, detail) for kind, name, detail in events if kind == "lost"]
        run = {"run": n, "command": cmd, "exit": rc, "exit_text": describe_exit(rc, stop), "started": len(started),
               "complete": done and rc is not None and rc >= 0 and rc != CONTEXT_LOST_EXIT}
        if stop == "hung":
            # A kernel that never finishes (a barrier some threads skip) looks like this: the rest
            # run in a new process.
            verdicts[started[-1]] = {"status": "hung", "run": n,
                                     "detail": f"no end after {args.test_timeout:g} s; its process was killed"}
            run["ended_after"] = started[-1]
        elif rc is None:
            # Stopped at the deadline: the test case that was running (Catch2 reports the SIGTERM as a
            # fatal signal, which is not a crash here) is the one that ran out of time.
            if started and (fatal or started[-1] not in verdicts):
                verdicts[started[-1]] = {"status": "timed out", "run": n, "detail": "still running when the time ran out"}
            if started:
                run["ended_after"] = started[-1]
        elif fatal:
            name, detail = fatal[-1]
            verdicts[name] = {"status": "crashed", "run": n, "detail": f"the process died in it ({detail}; {describe_exit(rc)})"}
            run["ended_after"] = name
        elif lost:
            name, detail = lost[-1]
            verdicts[name] = {"status": "lost", "run": n, "detail": f"the CUDA context was unusable after it ({detail})"}
            run["ended_after"] = name
        elif not run["complete"] and started:
            last = started[-1]
            if rc < 0 or last not in verdicts:
                # A signal Catch2 did not report (it writes "fatal" for those it catches), or an
                # exit in the middle of a test case.
                verdicts[last] = {"status": "crashed", "run": n, "detail": f"the process died in it ({describe_exit(rc)})"}
            run["ended_after"] = last
        runs.append(run)
        if stop == "deadline":
            break
        begun = set(started)
        if not begun and not run["complete"]:
            run["note"] = "the process ended before its first test case"
            why_unrun = f"run {n} ended before its first test case ({describe_exit(rc)}; see its output)"
            break
        if run["complete"]:
            # Every selected test case ran; one that was listed but never began did not match.
            for name in remaining:
                if name not in begun and name not in verdicts:
                    verdicts[name] = {"status": "not run", "run": n, "detail": "listed, but the run did not take it"}
            remaining = []
            break
        remaining = [name for name in remaining if name not in begun]
        if not remaining:
            break
        listing = os.path.join(work, f"remaining-{n + 1}.txt")
        with open(listing, "w", encoding="utf-8") as f:
            f.write("".join(spec_line(name) + "\n" for name in remaining))
        selection = ["-f", listing]
    for name in remaining:
        verdicts.setdefault(name, {"status": "not run", "detail": why_unrun})
    # Every listed test case has a verdict by now; should one not, it is reported, not dropped.
    for name in names:
        verdicts.setdefault(name, {"status": "not run", "detail": "never began"})
    return verdicts, runs


def summarize(names, verdicts, runs):
    counts = {}
    for name in names:
        counts[verdicts[name]["status"]] = counts.get(verdicts[name]["status"], 0) + 1
    order = ["passed", "failed", "crashed", "lost", "hung", "timed out", "not run"]
    words = {"lost": "lost the CUDA context", "not run": "not run"}
    parts = [f"{counts[s]} {words.get(s, s)}" for s in order if counts.get(s)]
    plural = "s" if len(runs) != 1 else ""
    head = f"{len(names)} test cases: {', '.join(parts) or 'none'}; {len(runs)} run{plural}"
    lines = [head]
    for s in order[1:]:
        bad = [name for name in names if verdicts[name]["status"] == s]
        for name in bad[:40]:
            detail = verdicts[name].get("detail")
            lines.append(f"  {s}: {name}" + (f": {detail}" if detail else ""))
        if len(bad) > 40:
            lines.append(f"  ... and {len(bad) - 40} more {s}")
    for run in runs:
        line = f"  run {run['run']}: {run['started']} test cases begun, {run['exit_text']}"
        if "ended_after" in run:
            line += f", after \"{run['ended_after']}\""
        if "note" in run:
            line += f" ({run['note']})"
        lines.append(line)
    ok = all(verdicts[name]["status"] == "passed" for name in names) and all(
        r["complete"] and r["exit"] == 0 for r in runs)
    return lines, ok


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if not os.access(args.exe, os.X_OK):
        print(f"resume_tests: {args.exe} is not an executable", file=sys.stderr)
        return 2
    names = list_tests(args)
    if not names:
        print(f"resume_tests: {args.exe} lists no test case for {args.spec or 'the default spec'}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="resume_tests-") as tmp:
        work = args.work or tmp
        os.makedirs(work, exist_ok=True)
        log = open(args.log, "a", encoding="utf-8") if args.log else sys.stdout
        try:
            verdicts, runs = resume(args, names, work, log)
        finally:
            if args.log:
                log.close()
    lines, ok = summarize(names, verdicts, runs)
    if args.json:
        record = {"exe": args.exe, "spec": args.spec, "ok": ok, "summary": lines[0], "runs": runs,
                  "tests": [dict(name=name, **verdicts[name]) for name in names]}
        write_atomic(args.json, json.dumps(record, indent=1) + "\n")
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

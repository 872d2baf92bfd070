#!/usr/bin/env python3
"""What ptxas gives each CUDA kernel: registers per thread, spill stores and loads, stack frame,
named barriers and static shared memory, per kernel and per target architecture, from a compile of
kiln's own sources with the flags of a CMake build (its compile_commands.json) and -Xptxas=-v.

Registers decide how many blocks fit an SM (an H100 has 65536 a SM, at most 255 a thread), and
spills put a kernel's values in local memory; docs/attention-tensor-cores.md and
docs/attention-wgmma.md reason with both. This script is where those numbers come from: it writes
them as JSON lines (a header with the date, commit, nvcc version and command, then one record per
kernel and architecture) and as a markdown table, for bench/records. It needs nvcc and a configured
CUDA build, not a GPU. It measures nothing at run time and asserts nothing.

  usage: python3 tools/kernel_resources.py [--build build/gpu] [--arch 80,90]
             [--json FILE] [--md FILE] [SOURCE.cu ...]
  SOURCE defaults to the tensor-core attention kernels (attention_tc.cu, attention_tc_backward.cu,
  attention_wgmma.cu). Sources built for sm_90a (attention_wgmma.cu) keep their one target; the others
  are compiled for each --arch (sm_XX), whatever the build was configured for.
"""
import argparse
import datetime
import json
import os
import re
import shlex
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_compare import write_atomic  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_SOURCES = ["kernels/cuda/attention_tc.cu", "kernels/cuda/attention_tc_backward.cu",
                   "kernels/cuda/attention_wgmma.cu"]

ENTRY = re.compile(r"ptxas info\s*: Compiling entry function '(\w+)' for '(sm_\w+)'")
PROPS = re.compile(r"ptxas info\s*: Function properties for (\w+)")
FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
USED = re.compile(r"ptxas info\s*: Used (\d+) registers")
BARRIERS = re.compile(r"used (\d+) barriers")
SMEM = re.compile(r"(\d+) bytes smem")


def compile_command(build, source):
    """The build's nvcc command for SOURCE, as a list, and its working directory."""
    path = os.path.join(build, "compile_commands.json")
    try:
        with open(path) as f:
            entries = json.load(f)
    except OSError as e:
        sys.exit(f"kernel_resources: cannot read {path} ({e}); configure a CUDA build first "
                 "(KILN_CUDA=ON bash tools/build.sh build/gpu)")
    want = os.path.realpath(os.path.join(ROOT, source))
    for e in entries:
        if os.path.realpath(os.path.join(e["directory"], e["file"])) == want:
            args = e.get("arguments") or shlex.split(e["command"])
            return args, e["directory"]
    sys.exit(f"kernel_resources: {source} is not in {path} (is it a source of that build?)")


def ptxas_command(args, archs):
    """The compile with -Xptxas=-v, its object to /dev/null; generic targets replaced by ARCHS."""
    out = []
    skip = False
    arch_specific = any("compute_90a" in a for a in args)
    for a in args:
        if skip:
            skip = False
            continue
        if a == "-o":
            skip = True
            continue
        if not arch_specific and (a.startswith("--generate-code") or a.startswith("-gencode")):
            continue
        if a == "-lineinfo":  # no effect on code generation; keeps the output to ptxas' own
            continue
        out.append(a)
    if not arch_specific:
        out += [f"--generate-code=arch=compute_{n},code=sm_{n}" for n in archs]
    return out + ["-o", os.devnull, "-Xptxas=-v"]


def demangle(names):
    if not names:
        return {}
    try:
        got = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True)
        return dict(zip(names, got.stdout.splitlines()))
    except (OSError, subprocess.CalledProcessError):
        return {n: n for n in names}


def short_name(full):
    """void kiln::attention_tc::attention_forward_wgmma_kernel<__half, 64, false, (kiln::wgmma::Order)2>(...)
    -> attention_forward_wgmma_kernel<__half, 64, false, Order 2>: no return type, parameters or
    namespaces."""
    name = re.sub(r"^void ", "", full)
    depth = 0
    for i, c in enumerate(name):
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif c == "(" and depth == 0:
            name = name[:i]
            break
    name = re.sub(r"\b(?:\w+::)+(\w+)", r"\1", name)
    return re.sub(r"\((\w+)\)(\d+)", r"\1 \2", name)


def parse(log):
    """Records from ptxas' -v output: one per entry function and architecture."""
    kernels = []
    current = None
    props_for = None
    for line in log.splitlines():
        m = ENTRY.search(line)
        if m:
            current = {"mangled": m.group(1), "arch": m.group(2)}
            kernels.append(current)
            continue
        m = PROPS.search(line)
        if m:
            props_for = m.group(1)
            continue
        m = FRAME.search(line)
        if m and current is not None and props_for == current["mangled"]:
            current.update(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
            continue
        m = USED.search(line)
        if m and current is not None:
            barriers, smem = BARRIERS.search(line), SMEM.search(line)
            current.update(registers=int(m.group(1)), barriers=int(barriers.group(1)) if barriers else 0,
                           smem=int(smem.group(1)) if smem else 0)
    return [k for k in kernels if "registers" in k]


def git(*args):
    try:
        return subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sources", nargs="*", default=DEFAULT_SOURCES)
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "gpu"))
    ap.add_argument("--arch", default="80,90", help="real targets for sources not built for sm_90a")
    ap.add_argument("--json", help="JSON lines to write")
    ap.add_argument("--md", help="markdown table to write")
    opts = ap.parse_args()
    archs = [a.strip() for a in opts.arch.split(",") if a.strip()]

    nvcc_version = "unknown"
    records = []
    commands = []
    for source in opts.sources:
        args, cwd = compile_command(opts.build, source)
        cmd = ptxas_command(args, archs)
        if nvcc_version == "unknown":
            v = subprocess.run([cmd[0], "--version"], capture_output=True, text=True)
            release = [line for line in v.stdout.splitlines() if "release" in line]
            nvcc_version = release[0].strip() if release else "unknown"
        print(f"kernel_resources: compiling {source} ...", file=sys.stderr, flush=True)
        run = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"kernel_resources: the compile of {source} failed:\n{run.stderr[-4000:]}")
        found = parse(run.stdout + run.stderr)
        if not found:  # a .cu file of host code only (conv.cu calls cuDNN)
            print(f"kernel_resources: {source} has no kernels", file=sys.stderr)
            continue
        names = demangle([k["mangled"] for k in found])
        for k in found:
            k["kernel"] = short_name(names.get(k["mangled"], k["mangled"]))
            k["file"] = source
        records += found
        commands.append(" ".join(shlex.quote(c) for c in cmd))

    # Kernels in source order, instantiations by their arguments with numbers as numbers (64 before 128).
    def natural(k):
        return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", k["kernel"])]

    if not records:
        sys.exit("kernel_resources: ptxas reported no kernels in " + " ".join(opts.sources))
    records.sort(key=lambda k: (opts.sources.index(k["file"]), k["arch"], natural(k)))
    commit = git("rev-parse", "--short=10", "HEAD")
    if git("status", "--porcelain", "--untracked-files=no"):
        commit += " (with uncommitted changes)"
    header = {"record": "header", "tool": "kernel_resources", "date": datetime.date.today().isoformat(),
              "commit": commit, "nvcc": nvcc_version,
              "command": "python3 tools/kernel_resources.py " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
              "compiles": commands}

    lines = [json.dumps(header)] + [json.dumps({"record": "kernel", **k}) for k in records]
    md = [f"### Registers and spills per kernel (ptxas), {header['date']}", "",
          f"- kiln commit `{commit}`; {nvcc_version}",
          f"- `{header['command']}` (the compiles: the CMake build's flags, `-Xptxas=-v`)",
          "- registers: per thread; spills: bytes stored / loaded to local memory; stack: bytes;"
          " barriers: hardware barriers the kernel uses (__syncthreads' and the named ones); smem: static"
          " shared memory, bytes (the kernels' tiles are dynamic and not counted); T: float16 and"
          " bfloat16 alike", "",
          "| file | arch | kernel | registers | spills | stack | barriers | smem |",
          "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    # In the table the float16 and bfloat16 instantiations of a kernel share a row (T) where ptxas gave
    # them the same numbers, as it usually does.
    def numbers(k):
        return (k["registers"], k.get("spill_stores", 0), k.get("spill_loads", 0), k.get("stack", 0),
                k["barriers"], k["smem"])

    rows = {}
    for k in records:
        generic = re.sub(r"<(__half|__nv_bfloat16)\b", "<T", k["kernel"])
        rows.setdefault((k["file"], k["arch"], generic), []).append(k)
    for (file, arch, generic), ks in rows.items():
        same = len({numbers(k) for k in ks}) == 1
        for k in ks[:1] if same else ks:
            r, ss, sl, st, b, sm = numbers(k)
            name = generic if same and len(ks) > 1 else k["kernel"]
            md.append(f"| {os.path.basename(file)} | {arch} | `{name}` | {r} | {ss} / {sl} | {st} | {b} | {sm} |")
    if opts.json:
        write_atomic(opts.json, "\n".join(lines) + "\n")
    if opts.md:
        write_atomic(opts.md, "\n".join(md) + "\n")
    if not opts.json and not opts.md:
        print("\n".join(md))
    print(f"kernel_resources: {len(records)} kernels from {len(opts.sources)} sources", file=sys.stderr)


if __name__ == "__main__":
    main()

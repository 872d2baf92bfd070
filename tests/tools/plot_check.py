#!/usr/bin/env python3
"""CTest check of tools/plot.py: runs it on hand-written metrics files (tests/tools/fixtures/), on the real
bench/RESULTS.md and on a small results fixture, and asserts what it drew: each PNG has the PNG signature
and the width and height asked for (read from its IHDR chunk); the data files that --data-dir keeps hold
exactly the expected points (a null loss left out, a step repeated after a resume resolved to the later
record, epoch and eval records in their own series, roofline intensities from the documented formulas);
and bad input exits 2 with a message that names the file, never a traceback.

  usage: plot_check.py --plot tools/plot.py --results bench/RESULTS.md --work DIR
"""
import argparse
import json
import math
import os
import shlex
import shutil
import struct
import subprocess
import sys

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# tools/plot.py's default sizes, used when --size is not given.
LOSS_SIZE, ROOFLINE_SIZE = (1000, 650), (1600, 700)

# What tests/tools/fixtures/cnn_metrics.jsonl must give: step 30's loss is null; step 60 was logged
# twice, 0.902 before the resume and 0.897 after it, and the later wins.
CNN_TRAIN = [(10, 2.301), (20, 1.912), (40, 1.203), (50, 0.981), (60, 0.897), (70, 0.802), (80, 0.751),
             (90, 0.7), (100, 0.66)]
CNN_EPOCH_LOSS = [(50, 1.55), (100, 0.79)]
CNN_ACCURACY = [(50, 0.7012), (100, 0.823)]
# tests/tools/fixtures/gpt_metrics.jsonl: train records every 5 steps, eval records every 10.
GPT_TRAIN = [(5, 3.9123), (10, 3.5012), (15, 3.3801), (20, 3.3077)]
GPT_VAL = [(0, 4.177809), (10, 3.459545), (20, 3.333546)]
GPT_EVAL_TRAIN = [(0, 4.180547), (10, 3.426112), (20, 3.310742)]

BYTES_PER_ELEMENT = {"bfloat16": 2, "float32": 4}
KNOWN_COMPUTE_CASES = ("matmul", "matmul_tf32", "conv2d_nhwc", "conv2d_nchw")

failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
    return condition


def run_plot(plot, args):
    proc = subprocess.run([sys.executable, plot] + args, capture_output=True, text=True)
    check("Traceback" not in proc.stderr, f"plot.py {shlex.join(args)} printed a traceback:\n{proc.stderr}")
    return proc


def plot_ok(plot, args):
    """Runs plot.py and requires exit status 0; a gnuplot problem (exit 1) ends the check at once."""
    proc = run_plot(plot, args)
    if proc.returncode == 1 and "Traceback" not in proc.stderr:
        print(f"plot_check: plot.py {shlex.join(args)} exited 1 (gnuplot missing or failed; "
              f"tools/setup.sh installs it):\n{proc.stderr}", file=sys.stderr)
        sys.exit(1)
    check(proc.returncode == 0, f"plot.py {shlex.join(args)} exited {proc.returncode}:\n{proc.stderr}")
    return proc


def plot_bad(plot, args, *must_mention):
    """Runs plot.py on bad input: it must exit 2 with one line naming the problem."""
    proc = run_plot(plot, args)
    lines = proc.stderr.strip().splitlines()
    check(proc.returncode == 2, f"plot.py {shlex.join(args)} exited {proc.returncode}, not 2:\n{proc.stderr}")
    check(len(lines) == 1, f"plot.py {shlex.join(args)} printed {len(lines)} lines, not one:\n{proc.stderr}")
    for text in must_mention:
        check(text in proc.stderr, f"plot.py {shlex.join(args)}: the message does not mention {text!r}:\n"
                                   f"{proc.stderr}")


def check_png(path, size):
    """path is a PNG of size (width, height): the signature, then the IHDR chunk's width and height."""
    if not check(os.path.isfile(path), f"{path} was not written"):
        return
    with open(path, "rb") as f:
        head = f.read(24)
    if not check(head[:8] == PNG_SIGNATURE, f"{path} does not start with the PNG signature"):
        return
    check(head[12:16] == b"IHDR", f"{path}: the first chunk is {head[12:16]!r}, not IHDR")
    width, height = struct.unpack(">II", head[16:24])
    check((width, height) == size, f"{path} is {width}x{height}, not {size[0]}x{size[1]}")


def data_rows(path):
    """The rows of a gnuplot data file plot.py wrote, each a list of fields (comment lines skipped)."""
    if not check(os.path.isfile(path), f"{path} was not written"):
        return []
    with open(path, encoding="utf-8") as f:
        return [shlex.split(line) for line in f if line.strip() and not line.startswith("#")]


def check_points(path, expected):
    """The (step, value) points of a loss data file are exactly expected, in step order."""
    points = [(int(row[0]), float(row[1])) for row in data_rows(path)]
    check(points == expected, f"{path} holds {points}, expected {expected}")


def check_loss(plot, work):
    cnn = os.path.join(FIXTURES, "cnn_metrics.jsonl")
    gpt = os.path.join(FIXTURES, "gpt_metrics.jsonl")

    data = os.path.join(work, "cnn_data")
    png = os.path.join(work, "cnn.png")
    plot_ok(plot, ["loss", cnn, "--out", png, "--size", "800,500", "--data-dir", data])
    check_png(png, (800, 500))
    check_points(os.path.join(data, "run1_train.dat"), CNN_TRAIN)
    check_points(os.path.join(data, "run1_epoch_loss.dat"), CNN_EPOCH_LOSS)
    check_points(os.path.join(data, "run1_accuracy.dat"), CNN_ACCURACY)
    script = read(os.path.join(data, "plot.gp"))
    check("train_cnn on AMD EPYC 7B13" in script, "the cnn plot's title lacks the program and device")
    check("set logscale y" in script, "the cnn plot's loss axis is not logarithmic")
    check("axes x1y2" in script and "set y2range [0:1]" in script, "the test accuracy is not on y2, 0 to 1")
    check(not os.path.exists(os.path.join(data, "run1_val.dat")), "a val series from a file without eval records")

    data = os.path.join(work, "gpt_data")
    png = os.path.join(work, "gpt.png")
    plot_ok(plot, ["loss", gpt, "--out", png, "--data-dir", data, "--linear", "--title", "GPT fixture"])
    check_png(png, LOSS_SIZE)
    check_points(os.path.join(data, "run1_train.dat"), GPT_TRAIN)
    check_points(os.path.join(data, "run1_val.dat"), GPT_VAL)
    check_points(os.path.join(data, "run1_eval_train.dat"), GPT_EVAL_TRAIN)
    script = read(os.path.join(data, "plot.gp"))
    check("set title 'GPT fixture'" in script, "--title was not used")
    check("set logscale y" not in script, "--linear still drew a log axis")
    check("y2" not in script, "a y2 axis on a plot without epoch records")

    # Two runs on one plot, each its own series set under its label.
    data = os.path.join(work, "both_data")
    png = os.path.join(work, "both.png")
    plot_ok(plot, ["loss", cnn, gpt, "--label", "cnn", "gpt", "--out", png, "--data-dir", data])
    check_png(png, LOSS_SIZE)
    check_points(os.path.join(data, "run1_train.dat"), CNN_TRAIN)
    check_points(os.path.join(data, "run2_val.dat"), GPT_VAL)
    script = read(os.path.join(data, "plot.gp"))
    check("title 'cnn: train loss'" in script and "title 'gpt: val loss'" in script,
          "the two runs' series are not labelled by --label")

    # Default labels: a folder's name, or a metrics file's name without .jsonl.
    folder = os.path.join(work, "run_a")
    os.makedirs(folder)
    shutil.copy(cnn, os.path.join(folder, "metrics.jsonl"))
    data = os.path.join(work, "labels_data")
    plot_ok(plot, ["loss", folder, gpt, "--out", os.path.join(work, "labels.png"), "--data-dir", data])
    script = read(os.path.join(data, "plot.gp"))
    check("title 'run_a: train loss'" in script and "title 'gpt_metrics: val loss'" in script,
          f"the default labels are not run_a and gpt_metrics:\n{script}")


def markdown_rows(line):
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def results_tables(path, heading_text=None):
    """The test's own reading of a results page: the memory-bound and compute-bound rows (lists of cells)
    of the first run under "## Results" (or the first whose heading contains heading_text)."""
    memory, compute, table, in_results, in_run = [], [], None, False, False
    for line in read(path).splitlines():
        if line.startswith("## "):
            in_results = line == "## Results"
            in_run = False
        elif line.startswith("### ") and in_results:
            if in_run:
                break
            in_run = heading_text is None or heading_text in line
        elif in_run and line.startswith("|"):
            cells = markdown_rows(line)
            if "kiln GB/s" in cells:
                table = memory
            elif "kiln TFLOP/s" in cells:
                table = compute
            elif table is not None and not set("".join(cells)) <= set("-: "):
                table.append(cells)
    return memory, compute


def expected_intensity(case, dtype, shape):
    """FLOP / bytes by bench/RESULTS.md's method section, written out here independently of plot.py."""
    size = BYTES_PER_ELEMENT[dtype]
    if case.startswith("matmul"):
        m, k, n = shape
        return 2 * m * k * n / ((m * k + k * n + m * n) * size)
    n, c, h, w = shape  # conv2d: weight [128, c, 3, 3], padding 1, stride 1: out [n, 128, h, w]
    out = n * 128 * h * w
    return 2 * out * c * 9 / ((n * c * h * w + 128 * c * 9 + out) * size)


def all_points(data):
    """The points of every points_*.dat file plot.py kept: (case, dtype, shape, intensity, kiln, pytorch)."""
    rows = []
    if not check(os.path.isdir(data), f"{data} was not written"):
        return rows
    for name in sorted(os.listdir(data)):
        if name.startswith("points_") and name.endswith(".dat"):
            rows += [(r[0], r[1], json.loads(r[2]), float(r[5]), float(r[6]), float(r[7]))
                     for r in data_rows(os.path.join(data, name))]
    return rows


def roof(data, precision):
    """The corners of a roof data file: [(intensity, TFLOP/s)] (the slope's start, the ridge, the end)."""
    return [(float(r[0]), float(r[1])) for r in data_rows(os.path.join(data, f"roof_{precision}.dat"))]


def check_roofline_run(plot, results, work, name, run=None):
    """plot.py roofline on one run of a results page against the test's own reading of its tables."""
    data = os.path.join(work, f"{name}_data")
    png = os.path.join(work, f"{name}.png")
    proc = plot_ok(plot, ["roofline", "--results", results, "--out", png, "--data-dir", data]
                   + (["--run", run] if run else []))
    check_png(png, ROOFLINE_SIZE)
    memory, compute = results_tables(results, run)
    check(memory and compute, f"{results}: the test found no tables in the run (its own reading)")
    bars = data_rows(os.path.join(data, "memory.dat"))
    check(len(bars) == len(memory), f"{name}: {len(bars)} memory-bound bars for {len(memory)} rows")
    placeable = [r for r in compute if r[0] in KNOWN_COMPUTE_CASES]
    points = all_points(data)
    check(len(points) == len(placeable), f"{name}: {len(points)} roofline points for {len(placeable)} rows")
    table = {(r[0], r[1], r[2].replace(" ", "")): (float(r[3]), float(r[5])) for r in compute}
    for case, dtype, shape, intensity, kiln, pytorch in points:
        expected = expected_intensity(case, dtype, shape)
        check(math.isclose(intensity, expected, rel_tol=1e-9),
              f"{name}: {case} {dtype} {shape} at {intensity} FLOP/byte, expected {expected}")
        key = (case, dtype, json.dumps(shape, separators=(",", ":")))
        check(table.get(key) == (kiln, pytorch),
              f"{name}: {case} {dtype} {shape} drawn at {kiln} and {pytorch} TFLOP/s, the table says {table.get(key)}")
    for r in compute:
        if r[0] not in KNOWN_COMPUTE_CASES:
            check(f"skipped compute-bound row {r[0]} {r[1]}" in proc.stderr,
                  f"{name}: no warning for the row {r[0]} {r[1]} it cannot place:\n{proc.stderr}")
    copy = float(next((r for r in memory if r[0] == "copy"), [0, 0, 0, "nan"])[3])
    matmul = next((r for r in compute if r[0] == "matmul" and r[1] == "bfloat16" and r[2] == "[8192, 8192, 8192]"),
                  None)
    if matmul is not None:
        # The bfloat16 roof: flat at kiln's 8192³ matmul, its slope kiln's copy bandwidth (GB/s x FLOP/byte
        # = GFLOP/s), meeting at the ridge.
        peak = float(matmul[3])
        corners = roof(data, "bfloat16")
        if check(len(corners) == 3, f"{name}: the bfloat16 roof has {len(corners)} corners, not 3"):
            (x0, y0), (ridge, top), (_, end) = corners
            check(math.isclose(y0, copy * x0 / 1000, rel_tol=1e-9), f"{name}: the roof's slope is not {copy} GB/s")
            check(top == peak and end == peak, f"{name}: the bfloat16 roof is not flat at {peak} TFLOP/s")
            check(math.isclose(ridge, peak * 1000 / copy, rel_tol=1e-9), f"{name}: the ridge is at {ridge}")
    return points


def check_roofline(plot, results, work):
    # The real page: every row placed, and the 8192³ bfloat16 matmul at 2·8192³ / (3·8192²·2) FLOP/byte.
    points = check_roofline_run(plot, results, work, "roofline")
    matmul = [p for p in points if p[:3] == ("matmul", "bfloat16", [8192, 8192, 8192])]
    if check(len(matmul) == 1, f"{results}: the newest run has no single 8192³ bfloat16 matmul point"):
        expected = 2 * 8192**3 / (3 * 8192**2 * 2)
        check(abs(matmul[0][3] - expected) < 1e-6, f"the 8192³ bf16 matmul at {matmul[0][3]}, not {expected}")
        check(abs(expected - 8192 / 3) < 1e-9, "the formula's own check")
    plot_bad(plot, ["roofline", "--results", results, "--run", "no run has this heading",
                    "--out", os.path.join(work, "none.png")], results, "no run has this heading")

    # The fixture: the newest run (a non-square matmul, a row without a formula: warned and skipped) and
    # the older one, chosen by --run (tf32 and conv2d rows); headings outside "## Results" are not runs.
    fixture = os.path.join(FIXTURES, "results.md")
    points = check_roofline_run(plot, fixture, work, "fixture_newest")
    check(sorted(p[2] for p in points) == [[1024, 2048, 512], [8192, 8192, 8192]],
          f"the fixture's newest run gave the points {points}")
    check(not os.path.exists(os.path.join(work, "fixture_newest_data", "roof_tf32.dat")),
          "a tf32 roof for a run without float32 rows")
    points = check_roofline_run(plot, fixture, work, "fixture_older", run="Fixture GPU A")
    check(sorted(p[0] for p in points) == ["conv2d_nchw", "matmul", "matmul_tf32"],
          f"--run 'Fixture GPU A' gave the points {points}")
    corners = roof(os.path.join(work, "fixture_older_data"), "tf32")
    check(len(corners) == 3 and corners[1] == (100.0, 50.0) and corners[2][1] == 50.0,
          f"the older fixture run's tf32 roof is {corners}, not flat at 50 TFLOP/s from 50 / 500 GB/s = 100")
    for outside in ("Method notes", "DataLoader"):
        plot_bad(plot, ["roofline", "--results", fixture, "--run", outside, "--out", os.path.join(work, "x.png")],
                 fixture, f'no run heading in "## Results" contains "{outside}"')


def check_bad_input(plot, work):
    out = os.path.join(work, "bad.png")
    missing = os.path.join(work, "no-such-run")
    plot_bad(plot, ["loss", missing, "--out", out], missing)

    broken = os.path.join(work, "broken.jsonl")
    with open(os.path.join(FIXTURES, "gpt_metrics.jsonl"), encoding="utf-8") as f:
        lines = f.readlines()
    lines[3] = lines[3][: len(lines[3]) // 2] + "\n"  # line 4 cut in half
    write(broken, "".join(lines))
    plot_bad(plot, ["loss", broken, "--out", out], f"{broken}:4:")

    empty = os.path.join(work, "nothing.jsonl")
    write(empty, "".join(line for line in lines if '"record": "eval"' not in line and '"record": "train"' not in line))
    plot_bad(plot, ["loss", empty, "--out", out], empty)

    all_null = os.path.join(work, "all_null.jsonl")
    write(all_null, '{"record": "train", "step": 1, "loss": null}\n{"record": "train", "step": 2, "loss": null}\n')
    plot_bad(plot, ["loss", all_null, "--out", out], all_null)

    plot_bad(plot, ["loss", broken, empty, "--label", "only-one", "--out", out], "--label")
    check(not os.path.exists(out), f"{out} was written by a run that failed")


def read(path):
    """A text file's contents; "" (and a failure) when it is missing."""
    if not check(os.path.isfile(path), f"{path} was not written"):
        return ""
    with open(path, encoding="utf-8") as f:
        return f.read()


def write(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--plot", required=True, help="tools/plot.py")
    p.add_argument("--results", required=True, help="bench/RESULTS.md")
    p.add_argument("--work", required=True, help="a scratch folder (emptied first)")
    a = p.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    check_loss(a.plot, a.work)
    check_roofline(a.plot, a.results, a.work)
    check_bad_input(a.plot, a.work)
    leftovers = [name for name in os.listdir(a.work) if name.startswith(".plot-")]
    check(not leftovers, f"temporary PNGs left in {a.work}: {leftovers}")
    if failures:
        for message in failures:
            print(f"plot_check: FAIL: {message}", file=sys.stderr)
        return 1
    print("plot_check: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Draws PNG plots with gnuplot from files that kiln's programs wrote: the loss curves of training runs,
from their metrics.jsonl, and a roofline of one GPU benchmark run, from bench/RESULTS.md.

Nothing on a plot is typed in: every point is a record an example wrote ("train", "eval" and "epoch"
records; the others are ignored) or a table row that tools/bench_compare.py printed and that was pasted
into bench/RESULTS.md. Non-obvious decisions: when a step appears twice for the same record kind (a run
resumed from a checkpoint appends to the same file), the later record wins; a null loss (the example
writes null for a value that is not finite) is left out; the roofline's bandwidth and compute ceilings
are kiln's own copy and 8192^3 matmul rows of the same run, so its roofs are measured, not a datasheet's.

    python3 tools/plot.py loss RUN [RUN ...] --out FILE.png [--label NAME ...] [--title T] [--linear]
    python3 tools/plot.py roofline [--results bench/RESULTS.md] [--run SUBSTRING] --out FILE.png

RUN is an example's --out folder or its metrics.jsonl. Both take --size W,H (pixels) and --data-dir DIR,
which keeps the data files and the gnuplot script there (tests/tools/plot_check.py reads them); without
it they go to a temporary folder that is removed. The PNG is rendered into a temporary file beside FILE
and renamed over it, so FILE is never half written. Standard library and the gnuplot program
(tools/setup.sh installs gnuplot-nox). Exit 2 on bad input, naming the file and the problem; exit 1 when
gnuplot is missing or fails. See docs/plotting.md.
"""

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_compare import file_mode  # noqa: E402
from metrics_jsonl import BadInput, read_records  # noqa: E402

# One colour per run when several runs share a loss plot, and one per precision on the roofline.
COLORS = ["#0060ad", "#dd181f", "#00a000", "#9400d3", "#ff8c00", "#008b8b", "#a0522d", "#404040"]


class GnuplotError(Exception):
    """gnuplot is missing or failed: exit status 1."""


def warn(message):
    print(f"plot: warning: {message}", file=sys.stderr)


def gp_string(text):
    """text as a gnuplot single-quoted string (in which a quote is written twice)."""
    return "'" + str(text).replace("'", "''") + "'"


def data_string(text):
    """text as one column of a gnuplot data file (double quotes keep its spaces)."""
    return '"' + str(text).replace('"', "'") + '"'


def number_text(x):
    """A float for a data file: repr gives it back exactly; a missing value is NaN, which gnuplot skips."""
    return "NaN" if x is None or not math.isfinite(x) else repr(float(x))


def write_data(data_dir, name, header, rows):
    """Writes one gnuplot data file: a comment line naming the columns, then one line per row."""
    with open(os.path.join(data_dir, name), "w", encoding="utf-8") as f:
        f.write(f"# {header}\n")
        for row in rows:
            f.write(" ".join(row) + "\n")
    return name


# ---------------------------------------------------------------------------------------------------
# gnuplot


def png_terminal(gnuplot, size):
    """The terminal line: pngcairo (anti-aliased, any font fontconfig knows) where this gnuplot has it,
    else the libgd png terminal. noenhanced: an underscore in train_cnn is not a subscript."""
    proc = subprocess.run([gnuplot, "-e", "print GPVAL_TERMINALS"], capture_output=True, text=True)
    terminals = (proc.stdout + proc.stderr).split()
    width, height = size
    if "pngcairo" in terminals:
        return f"set terminal pngcairo size {width},{height} noenhanced font ',11'"
    if "png" in terminals:
        return f"set terminal png size {width},{height} noenhanced"
    raise GnuplotError(f"{gnuplot} has neither the pngcairo nor the png terminal; run tools/setup.sh "
                       "(it installs gnuplot-nox, which has both)")


def render(commands, out, size, data_dir):
    """Saves commands as data_dir/plot.gp, runs gnuplot on it in data_dir (the data files are named
    relative to it) and moves the PNG it drew to out. The script holds no terminal or output line, so
    the kept copy can be rendered again into any file; its first line says how."""
    gnuplot = shutil.which("gnuplot")
    if gnuplot is None:
        raise GnuplotError("gnuplot is not installed; run tools/setup.sh (it installs gnuplot-nox)")
    terminal = png_terminal(gnuplot, size)
    script = os.path.join(data_dir, "plot.gp")
    with open(script, "w", encoding="utf-8") as f:
        f.write(f"# rendered with: gnuplot -e \"{terminal}; set output 'FILE.png'\" plot.gp\n")
        f.write("\n".join(commands) + "\n")
    out_dir = os.path.dirname(os.path.abspath(out))
    try:
        os.makedirs(out_dir, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=".plot-", suffix=".png")
    except OSError as e:
        raise BadInput(f"cannot write {out} ({e.strerror})") from None
    os.close(fd)
    try:
        proc = subprocess.run([gnuplot, "-e", f"{terminal}; set output {gp_string(tmp)}", "plot.gp"],
                              cwd=data_dir, capture_output=True, text=True)
        problems = [line for line in proc.stderr.splitlines() if line.strip()]
        if proc.returncode != 0 or os.path.getsize(tmp) == 0:
            detail = problems[-1].strip() if problems else "no message"
            raise GnuplotError(f"gnuplot failed on {script} (exit status {proc.returncode}: {detail}); "
                               "tools/setup.sh installs the gnuplot this script is tested with")
        for line in problems:
            warn(f"gnuplot: {line.strip()}")
        os.chmod(tmp, file_mode(out))  # mkstemp's file is private; the PNG gets a new file's mode
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


# ---------------------------------------------------------------------------------------------------
# loss: training runs' metrics.jsonl

# The series a loss plot can hold: name -> (record kind, field, legend text, gnuplot style, colour of the
# series when one run is plotted; with several runs, each run has its own colour).
SERIES = {
    "train": ("train", "loss", "train loss", "with lines lw 1.5", COLORS[0]),
    "eval_train": ("eval", "train_loss", "train loss (eval)", "with linespoints dt 2 lw 1.5 pt 6 ps 1", COLORS[2]),
    "val": ("eval", "val_loss", "val loss", "with linespoints lw 2 pt 7 ps 1", COLORS[1]),
    "epoch_loss": ("epoch", "train_loss", "epoch mean train loss", "with points pt 9 ps 2", COLORS[3]),
    "accuracy": ("epoch", "test_accuracy", "test accuracy (right axis)", "axes x1y2 with points pt 4 ps 2",
                 COLORS[4]),
}
LOSS_SERIES = ("train", "eval_train", "val", "epoch_loss")


def metrics_file(run):
    path = os.path.join(run, "metrics.jsonl") if os.path.isdir(run) else run
    if not os.path.isfile(path):
        raise BadInput(f"no metrics file at {path}")
    return path


def field_value(record, key, where):
    """record[key] as a float; None when it is null or not finite (a diverged loss)."""
    if key not in record:
        raise BadInput(f'{where}: the "{record["record"]}" record has no "{key}"')
    value = record[key]
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadInput(f'{where}: "{key}" is {json.dumps(value)}, not a number')
    return float(value) if math.isfinite(value) else None


def run_series(path):
    """The points of one metrics file, {series name: [(step, value), ...] in step order}, and its "run"
    records (one per process that wrote to the file)."""
    by_step = {name: {} for name in SERIES}
    runs = []
    epochs_without_step = 0
    for number, record in read_records(path):
        kind, where = record["record"], f"{path}:{number}"
        if kind == "run":
            runs.append(record)
        if kind not in ("train", "eval", "epoch"):
            continue
        if kind == "epoch" and "step" not in record:  # train_fashion_mnist counts epochs, not steps
            epochs_without_step += 1
            continue
        step = record.get("step")
        if isinstance(step, bool) or not isinstance(step, int):
            raise BadInput(f'{where}: the "{kind}" record\'s "step" is {json.dumps(step)}, not an integer')
        for name, (series_kind, key, *_) in SERIES.items():
            if series_kind == kind:
                by_step[name][step] = field_value(record, key, where)  # a repeated step: the later wins
    if epochs_without_step:
        warn(f"{path}: {epochs_without_step} epoch record(s) without a step are left out")
    series = {name: sorted((step, v) for step, v in points.items() if v is not None)
              for name, points in by_step.items()}
    if not any(series[name] for name in LOSS_SERIES):
        raise BadInput(f"{path}: no train, eval or epoch record with a finite loss to plot")
    return series, runs


def run_label(run):
    """A run's default legend label: its folder's name; for a metrics file not named metrics.jsonl (such
    as train_cnn.metrics.jsonl, copied back from the GPU host), the file's name without ".jsonl"."""
    path = os.path.normpath(os.path.abspath(run))
    if os.path.isfile(path) and os.path.basename(path) != "metrics.jsonl":
        return os.path.basename(path).removesuffix(".jsonl")
    return os.path.basename(path if os.path.isdir(path) else os.path.dirname(path))


def default_title(all_runs):
    """'PROGRAM on DEVICE' for each distinct program and device in the runs' "run" records."""
    seen = []
    for runs in all_runs:
        for r in runs:
            text = f"{r.get('program', '?')} on {r.get('device_name', r.get('device', '?'))}"
            if text not in seen:
                seen.append(text)
    return "; ".join(seen) if seen else "training loss"


def nice_step(x):
    """A round step near x: the smallest 1, 2 or 5 times a power of ten that is at least 0.75 x."""
    power = 10.0 ** math.floor(math.log10(x))
    return next(m for m in (1, 2, 5, 10) if m * power >= x * 0.75) * power


def log_axis_tics(low, high):
    """Tics for a log loss axis from low to high: 1, 2 and 5 times powers of ten when three fall in the
    range, else 1 to 9 times them, else (a range so narrow that the axis is nearly linear) round values
    evenly spaced. gnuplot's own log tics are whole decades, which leave a narrow range unlabelled."""
    decades = range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
    for mantissas in ((1, 2, 5), range(1, 10)):
        tics = [m * 10.0 ** e for e in decades for m in mantissas if low <= m * 10.0 ** e <= high]
        if len(tics) >= 3:
            return tics
    if high == low:
        return [low]
    step = nice_step((high - low) / 5)
    return [k * step for k in range(math.ceil(low / step), math.floor(high / step) + 1)]


def plot_loss(args, data_dir):
    if args.label and len(args.label) != len(args.runs):
        raise BadInput(f"{len(args.label)} --label for {len(args.runs)} runs; give one per run or none")
    labels = args.label or [run_label(run) for run in args.runs]
    loaded = [run_series(metrics_file(run)) for run in args.runs]
    losses = [v for series, _ in loaded for name in LOSS_SERIES for _, v in series[name]]
    has_accuracy = any(series["accuracy"] for series, _ in loaded)

    commands = ["set encoding utf8",
                f"set title {gp_string(args.title or default_title([runs for _, runs in loaded]))}",
                "set xlabel 'step'", "set ylabel 'loss'", "set grid", "set key below",
                "set offsets graph 0.02, graph 0.02, graph 0.05, graph 0.05"]
    # The axes span the data (a log axis is not widened to whole decades), the offsets above leaving a
    # margin so that points at the ends stay inside the frame; around a single value, a range of its own.
    steps = sorted({step for series, _ in loaded for points in series.values() for step, _ in points})
    if len(steps) > 1:
        commands.append("set autoscale xfix")
    else:
        commands.append(f"set xrange [{steps[0] - 1}:{steps[0] + 1}]")
    if len(set(losses)) > 1:
        commands.append("set autoscale yfix")
    else:
        half = (abs(losses[0]) or 1) / 2
        commands.append(f"set yrange [{losses[0] - half!r}:{losses[0] + half!r}]")
    if not args.linear and min(losses) > 0:
        tics = ", ".join(f"{v:.6g}" for v in log_axis_tics(min(losses), max(losses)))
        commands += ["set logscale y", f"set ytics ({tics})"]
    if has_accuracy:
        commands += ["set ytics nomirror", "set y2tics 0.1", "set y2range [0:1]", "set y2label 'test accuracy'"]
    plots = []
    for index, ((series, _), label) in enumerate(zip(loaded, labels), 1):
        for name, (_, _, legend, style, color) in SERIES.items():
            if not series[name]:
                continue
            file = write_data(data_dir, f"run{index}_{name}.dat", f"step {SERIES[name][1]}",
                              [(str(step), number_text(v)) for step, v in series[name]])
            if len(loaded) > 1:
                legend, color = f"{label}: {legend}", COLORS[(index - 1) % len(COLORS)]
            plots.append(f"{gp_string(file)} using 1:2 {style} lc rgb {gp_string(color)} title {gp_string(legend)}")
    commands.append("plot " + ", \\\n     ".join(plots))
    render(commands, args.out, args.size or (1000, 650), data_dir)


# ---------------------------------------------------------------------------------------------------
# roofline: one run of bench/RESULTS.md

BYTES_PER_ELEMENT = {"float32": 4, "bfloat16": 2, "float16": 2}
# The precision of a row's dtype, which picks its roof: float32 rows run with TF32 (RESULTS.md's method),
# so they sit under the TF32 matmul's roof.
PRECISION = {"bfloat16": "bfloat16", "float32": "tf32", "float16": "float16"}
# Each roof's peak: kiln's 8192³ row of this case and dtype in the same run.
CEILING_ROWS = {"bfloat16": ("matmul", "bfloat16"), "tf32": ("matmul_tf32", "float32")}
CEILING_SHAPE = [8192, 8192, 8192]
CONV_OUT_CHANNELS = 128  # the conv2d cases' weight is [128, C, 3, 3], padding 1, stride 1


def flop_and_bytes(case, dtype, shape):
    """A compute-bound case's FLOP (a multiply-add counts 2) and the fewest bytes it must move (every input
    read once, the output written once), by RESULTS.md's method section; None for a case without a formula
    here."""
    size = BYTES_PER_ELEMENT.get(dtype)
    if size is None:
        return None
    if case in ("matmul", "matmul_tf32") and len(shape) == 3:
        m, k, n = shape  # [m, k] x [k, n]
        return 2 * m * k * n, (m * k + k * n + m * n) * size
    if case in ("conv2d_nhwc", "conv2d_nchw") and len(shape) == 4:
        n, c, h, w = shape  # x; a 3x3 window with padding 1 and stride 1 keeps H and W
        weight = CONV_OUT_CHANNELS * c * 3 * 3
        out = n * CONV_OUT_CHANNELS * h * w
        return 2 * out * c * 3 * 3, (n * c * h * w + weight + out) * size
    return None


def table_cells(line):
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


SEPARATOR = re.compile(r"\|?(\s*:?-{3,}:?\s*\|)+\s*:?-*:?\s*")


def markdown_tables(lines, start, end):
    """Each table in lines[start:end]: (line number of its header, header cells, [(line number, cells)])."""
    tables = []
    i = start
    while i < end:
        if lines[i].startswith("|") and i + 1 < end and SEPARATOR.fullmatch(lines[i + 1].strip()):
            header, rows = table_cells(lines[i]), []
            header_line = i + 1
            i += 2
            while i < end and lines[i].startswith("|"):
                rows.append((i + 1, table_cells(lines[i])))
                i += 1
            tables.append((header_line, header, rows))
        else:
            i += 1
    return tables


def cell_number(text):
    """A table cell as a float; None for "n/a", "missing" and the like (a case one program could not run)."""
    try:
        value = float(text.replace(",", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def table_rows(path, header_line, header, rows, unit):
    """A bench table's rows as dicts: case, dtype, shape (a list, or None), kiln and pytorch (floats or
    None), line."""
    columns = {}
    for name in ("case", "dtype", "shape", f"kiln {unit}", f"PyTorch {unit}"):
        if name not in header:
            raise BadInput(f'{path}:{header_line}: the table has no "{name}" column')
        columns[name] = header.index(name)
    out = []
    for number, cells in rows:
        if len(cells) != len(header):
            raise BadInput(f"{path}:{number}: {len(cells)} cells in a table of {len(header)} columns")
        try:
            shape = json.loads(cells[columns["shape"]])
        except json.JSONDecodeError:
            shape = None
        if not (isinstance(shape, list) and all(isinstance(d, int) and not isinstance(d, bool) for d in shape)):
            shape = None
        out.append({"case": cells[columns["case"]], "dtype": cells[columns["dtype"]], "shape": shape,
                    "shape_text": cells[columns["shape"]], "kiln": cell_number(cells[columns[f"kiln {unit}"]]),
                    "pytorch": cell_number(cells[columns[f"PyTorch {unit}"]]), "line": number})
    return out


def read_bench_run(path, substring):
    """The chosen run of the "## Results" section: (heading, memory-bound rows, compute-bound rows). The
    newest run comes first; with substring, the first run whose heading contains it."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = [line.rstrip() for line in f.read().splitlines()]
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput(f"{path}: cannot read it ({getattr(e, 'strerror', None) or e})") from None
    if "## Results" not in lines:
        raise BadInput(f'{path}: no "## Results" section')
    start = lines.index("## Results") + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines))
    headings = [i for i in range(start, end) if lines[i].startswith("### ")]
    chosen = [i for i in headings if substring is None or substring in lines[i][4:]]
    if not chosen:
        if substring is None:
            raise BadInput(f'{path}: the "## Results" section has no run (no "### " heading)')
        raise BadInput(f'{path}: no run heading in "## Results" contains "{substring}"')
    first = chosen[0]
    last = next((i for i in headings if i > first), end)
    heading = lines[first][4:].strip()
    memory = compute = None
    for header_line, header, rows in markdown_tables(lines, first + 1, last):
        if "kiln GB/s" in header:
            memory = table_rows(path, header_line, header, rows, "GB/s")
        elif "kiln TFLOP/s" in header:
            compute = table_rows(path, header_line, header, rows, "TFLOP/s")
    for rows, what, column in ((memory, "memory-bound", "kiln GB/s"), (compute, "compute-bound", "kiln TFLOP/s")):
        if not rows:
            raise BadInput(f'{path}:{first + 1}: the run "{heading}" has no {what} table (one with a '
                           f'"{column}" column and rows)')
    return heading, memory, compute


def find_row(rows, case, dtype, shape=None):
    return next((r for r in rows if r["case"] == case and r["dtype"] == dtype
                 and (shape is None or r["shape"] == shape)), None)


def short_label(row):
    """The label beside a roofline point: the case, and a matmul's size (8192³ or m×k×n)."""
    if row["case"].startswith("matmul") and row["shape"]:
        m, k, n = row["shape"]
        return f"{row['case']} {m}³" if m == k == n else f"{row['case']} {m}×{k}×{n}"
    return row["case"]


def log_decade_below(x):
    return 10.0 ** math.floor(math.log10(x))


def log_decade_above(x):
    return 10.0 ** math.ceil(math.log10(x))


def memory_panel(memory, bandwidth, data_dir):
    """The left panel's commands: kiln's and PyTorch's GB/s, a pair of bars per memory-bound row, under a
    dashed line at kiln's copy."""
    bars = write_data(data_dir, "memory.dat",
                      f"index label kiln_GB/s pytorch_GB/s (ceiling: kiln copy {bandwidth!r} GB/s)",
                      [(str(i), data_string(f"{r['case']} {r['dtype']}"), number_text(r["kiln"]),
                        number_text(r["pytorch"])) for i, r in enumerate(memory)])
    top = max([v for r in memory for v in (r["kiln"], r["pytorch"]) if v is not None] + [bandwidth])
    ceiling = f"device copy (ceiling): kiln, {bandwidth:g} GB/s"
    return ["set title 'memory-bound'", "set style data histograms", "set style histogram clustered gap 1",
            "set style fill solid 0.85 border -1", "set boxwidth 0.9 relative",
            "set xtics rotate by 45 right nomirror", "set ylabel 'GB/s'",
            f"set yrange [0:{top * 1.3!r}]",  # room above the bars for the key
            "set grid ytics", "set key top left",
            f"plot {gp_string(bars)} using 3:xtic(2) lc rgb {gp_string(COLORS[0])} title 'kiln', \\\n"
            f"     '' using 4 lc rgb {gp_string(COLORS[4])} title 'PyTorch', \\\n"
            f"     {bandwidth!r} with lines dt 2 lw 2 lc rgb 'black' title {gp_string(ceiling)}"]


def compute_points(path, compute):
    """The compute-bound rows that can be placed on the roofline, each with its FLOP, bytes, intensity
    and precision; a row without a formula is left out with a warning."""
    points = []
    for r in compute:
        work = flop_and_bytes(r["case"], r["dtype"], r["shape"]) if r["shape"] else None
        if work is None:
            warn(f"{path}:{r['line']}: skipped compute-bound row {r['case']} {r['dtype']} {r['shape_text']}: "
                 "no FLOP and bytes formula for it")
            continue
        flop, nbytes = work
        points.append(dict(r, flop=flop, bytes=nbytes, intensity=flop / nbytes, precision=PRECISION[r["dtype"]]))
    return points


def label_commands(points, colors):
    """A label beside each point (at kiln's value, else PyTorch's): on its right, unless another point sits
    just to the right at about the same height, where the text would run into it; then on its left. The
    windows (0.45 of a decade across, 0.06 up or down) fit 9-point labels on the default panel."""
    placed = [(p["intensity"], p["kiln"] if p["kiln"] is not None else p["pytorch"], p) for p in points]
    placed = [(x, y, p) for x, y, p in placed if y is not None]
    commands = []
    for x, y, p in placed:
        crowded = any(0 < math.log10(x2 / x) < 0.45 and abs(math.log10(y2 / y)) < 0.06 for x2, y2, _ in placed)
        side = "right offset -1,0" if crowded else "left offset 1,0"
        commands.append(f"set label {gp_string(short_label(p))} at {x!r},{y!r} {side} front boxed font ',9' "
                        f"tc rgb {colors[p['precision']]}")
    return commands


def roofline_panel(path, heading, compute, bandwidth, data_dir):
    """The right panel's commands: log-log, intensity across, TFLOP/s up; per precision, the roof
    min(peak, bandwidth x intensity) from kiln's 8192³ matmul and copy, and kiln's and PyTorch's points."""
    points = compute_points(path, compute)
    if not points:
        raise BadInput(f'{path}: the run "{heading}" has no compute-bound row this script can place')
    precisions = sorted({p["precision"] for p in points})
    colors = {precision: gp_string(COLORS[(i * 2 + 1) % len(COLORS)]) for i, precision in enumerate(precisions)}
    roofs = {}  # precision -> peak TFLOP/s
    for precision in precisions:
        case, dtype = CEILING_ROWS.get(precision, ("matmul", precision))
        row = find_row(compute, case, dtype, CEILING_SHAPE)
        if row is None or row["kiln"] is None:
            warn(f'{path}: the run "{heading}" has no kiln {case} {dtype} 8192³ row: no {precision} roof')
        else:
            roofs[precision] = row["kiln"]

    # Axes: whole decades around the points and the ridges (where a roof's slope meets its flat top).
    ridges = [peak * 1000 / bandwidth for peak in roofs.values()]  # GB/s x FLOP/byte = GFLOP/s
    across = [p["intensity"] for p in points] + ridges
    up = [v for p in points for v in (p["kiln"], p["pytorch"]) if v is not None] + list(roofs.values())
    x_low, x_high = log_decade_below(min(across) / 10), log_decade_above(max(across) * 1.5)
    y_low, y_high = log_decade_below(min(up) / 1.5), log_decade_above(max(up) * 1.3)
    commands = [f"set title 'compute-bound roofline (roofs: kiln matmul 8192³ and copy, {bandwidth:g} GB/s)'",
                "set logscale xy", "set style textbox opaque noborder", f"set xrange [{x_low!r}:{x_high!r}]",
                f"set yrange [{y_low!r}:{y_high!r}]", "set xlabel 'arithmetic intensity (FLOP/byte)'",
                "set ylabel 'TFLOP/s'", "set format x '%g'", "set format y '%g'",
                "set grid xtics ytics mxtics mytics lc rgb '#dddddd'", "set key below horizontal maxrows 2 samplen 2"]
    commands += label_commands(points, colors)
    plots = []
    for precision in precisions:
        color = colors[precision]
        if precision in roofs:
            peak = roofs[precision]
            corners = ((x_low, bandwidth * x_low / 1000), (peak * 1000 / bandwidth, peak), (x_high, peak))
            roof = write_data(data_dir, f"roof_{precision}.dat",
                              f"FLOP/byte TFLOP/s (peak {peak!r} TFLOP/s, bandwidth {bandwidth!r} GB/s)",
                              [(number_text(x), number_text(y)) for x, y in corners])
            plots.append(f"{gp_string(roof)} using 1:2 with lines lw 2 lc rgb {color} "
                         f"title {gp_string(f'{precision} roof, {peak:g} TFLOP/s')}")
        file = write_data(data_dir, f"points_{precision}.dat",
                          "case dtype shape FLOP bytes FLOP/byte kiln_TFLOP/s pytorch_TFLOP/s",
                          [(p["case"], p["dtype"], data_string(json.dumps(p["shape"], separators=(",", ":"))),
                            str(p["flop"]), str(p["bytes"]), number_text(p["intensity"]), number_text(p["kiln"]),
                            number_text(p["pytorch"])) for p in points if p["precision"] == precision])
        plots += [f"{gp_string(file)} using 6:7 with points pt 7 ps 1.6 lc rgb {color} "
                  f"title {gp_string(f'kiln, {precision}')}",
                  f"'' using 6:8 with points pt 6 ps 1.6 lw 2 lc rgb {color} "
                  f"title {gp_string(f'PyTorch, {precision}')}"]
    return commands + ["plot " + ", \\\n     ".join(plots)]


def plot_roofline(args, data_dir):
    path = args.results
    heading, memory, compute = read_bench_run(path, args.run)
    copy = find_row(memory, "copy", "float32")
    if copy is None or copy["kiln"] is None or copy["kiln"] <= 0:
        raise BadInput(f'{path}: the run "{heading}" has no float32 "copy" row with kiln\'s GB/s (the '
                       "bandwidth ceiling)")
    commands = ["set encoding utf8", f"set multiplot layout 1,2 title {gp_string(heading)} font ',13'"]
    commands += memory_panel(memory, copy["kiln"], data_dir)
    commands += ["reset"]  # the panels share no setting; reset keeps the multiplot layout
    commands += roofline_panel(path, heading, compute, copy["kiln"], data_dir)
    commands += ["unset multiplot"]
    render(commands, args.out, args.size or (1600, 700), data_dir)


# ---------------------------------------------------------------------------------------------------


def size_argument(text):
    match = re.fullmatch(r"(\d+)[,x](\d+)", text)
    if not match or not 100 <= int(match[1]) <= 10000 or not 100 <= int(match[2]) <= 10000:
        raise argparse.ArgumentTypeError(f"{text!r} is not WIDTH,HEIGHT in pixels (100 to 10000)")
    return int(match[1]), int(match[2])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--out", required=True, help="the PNG to write")
    common.add_argument("--size", type=size_argument, help="WIDTH,HEIGHT in pixels")
    common.add_argument("--data-dir", help="keep the data files and gnuplot script here")
    loss = commands.add_parser("loss", parents=[common], help="loss curves of training runs")
    loss.add_argument("runs", nargs="+", metavar="RUN", help="an example's --out folder, or its metrics.jsonl")
    loss.add_argument("--label", nargs="+", help="one legend label per RUN (default: the RUN's folder name)")
    loss.add_argument("--title", help="the plot's title (default: the runs' programs and devices)")
    loss.add_argument("--linear", action="store_true", help="a linear loss axis (default: log when all > 0)")
    roofline = commands.add_parser("roofline", parents=[common], help="one GPU benchmark run as a roofline")
    roofline.add_argument("--results", default=os.path.join(ROOT, "bench", "RESULTS.md"),
                          help="the results page (default: bench/RESULTS.md)")
    roofline.add_argument("--run", help="plot the first run whose heading contains this (default: the newest)")
    args = parser.parse_args()
    plot = plot_loss if args.command == "loss" else plot_roofline
    try:
        if args.data_dir:
            os.makedirs(args.data_dir, exist_ok=True)
            plot(args, args.data_dir)
        else:
            with tempfile.TemporaryDirectory(prefix="kiln-plot-") as data_dir:
                plot(args, data_dir)
    except BadInput as e:
        print(f"plot: {e}", file=sys.stderr)
        return 2
    except (GnuplotError, OSError) as e:
        print(f"plot: {e}", file=sys.stderr)
        return 1
    print(f"plot: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

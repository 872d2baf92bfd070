#!/usr/bin/env python3
"""CTest check of tools/tips_peer.py's GPU tips (4, 8, 9, 10, 14, 17, 23) without a GPU. Each GPU tip's
function takes the device; this runs each on the CPU at bench_tips --quick's sizes (the GPU's own switches
left alone there: page-locking, the cuDNN and TF32 switches, the loader's pin_memory, NVML's reads) and
asserts, for every tip:
  - it gave a row for each of its variants in tips_peer.GPU_VARIANTS, in that order (two; three for tip
    17), roles A then B (B, B for tip 17, as bench_tips's records), the names distinct;
  - every row has a positive finite ms, a positive finite rate where the tip has a rate unit (tip 9 has
    none, as bench_tips's: its rate is null), one workload, unit and rate unit, and the JSON fields that
    tools/tips.py reads (impl "pytorch");
  - tip 23's B row counts its sampler's reads ("samples" >= 1) and its A row has none;
  - tools/tips.py renders the rows into the tip's table with PyTorch's A and B rows, and names the reason
    of an "unavailable" record under the table.
And that `tips_peer.py --device cuda` without a GPU exits 2 with a message (skipped where there is a
GPU), and that --tips with a GPU tip under --device cpu is refused. Sizes mean nothing: it checks that
the code runs and what it writes, not speed. Needs torch and torchvision (tests/CMakeLists.txt registers
it only where they import).

  usage: tips_peer_gpu_check.py [--peer tools/tips_peer.py] [--threads 2]
"""
import argparse
import contextlib
import io
import json
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
FIELDS = ("record", "tip", "slug", "impl", "device", "threads", "workload", "variant", "role", "unit", "ms", "rate",
          "rate_unit", "peak_mb")

failures = []


def check(ok, message):
    if not ok:
        failures.append(message)
    return ok


def positive(value):
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def run_main(peer, argv):
    """tips_peer.main(argv): its exit code and what it wrote on stderr."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = peer.main(argv)
    return code, err.getvalue()


def check_rows(number, rows, names):
    where = f"tip {number}"
    check([r["variant"] for r in rows] == list(names), f"{where}: variants {[r['variant'] for r in rows]}, "
          f"not tips_peer.GPU_VARIANTS's {list(names)}")
    check(len(names) >= 2 and len(set(names)) == len(names) and all(names), f"{where}: names {names}")
    check([r["role"] for r in rows] == ["A"] + ["B"] * (len(names) - 1), f"{where}: roles {[r['role'] for r in rows]}")
    for key in ("workload", "unit", "rate_unit"):
        check(len({r[key] for r in rows}) == 1, f"{where}: the rows' {key} differ")
    check(rows[0]["workload"] and rows[0]["unit"], f"{where}: no workload or unit: {rows[0]}")
    for r in rows:
        check(all(f in r for f in FIELDS), f"{where}: a row without {[f for f in FIELDS if f not in r]}")
        check(r["record"] == "tip" and r["impl"] == "pytorch" and r["tip"] == number, f"{where}: {r}")
        check(positive(r["ms"]), f"{where} {r['variant']!r}: ms {r['ms']}")
        if r["rate_unit"]:
            check(positive(r["rate"]), f"{where} {r['variant']!r}: rate {r['rate']} {r['rate_unit']}")
        else:
            check(r["rate"] is None, f"{where} {r['variant']!r}: a rate {r['rate']} without a rate unit")


def check_table(tips, number, rows):
    """tools/tips.py's table of these rows (a stand-in kiln header, as its --quick-check makes)."""
    header = {"record": "header", "impl": "kiln", "device_name": "CPU", "threads": 2, "date": "2000-01-01",
              "kiln_commit": "check"}
    recs = [dict(r, round=0) for r in rows] + [header]
    text = tips.tip_table(number, tips.cells(recs), "check.md", tips.meta_of(recs)) or ""
    b_rows = len(rows) - 1
    check("| PyTorch | A: " in text and text.count("| PyTorch | B: ") == b_rows,
          f"tip {number}: tools/tips.py's table lacks PyTorch's A and {b_rows} B rows:\n{text}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--peer", default=os.path.join(HERE, "..", "..", "tools", "tips_peer.py"))
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    tools = os.path.dirname(os.path.abspath(a.peer))
    sys.path.insert(0, tools)
    import tips  # noqa: E402 (tools/tips.py: the tables)
    import tips_peer as peer  # noqa: E402

    peer.load_torch(a.threads)
    torch = peer.torch
    cpu = torch.device("cpu")

    # The flags: a GPU tip on the CPU is refused, and --device cuda without a GPU is an error, not CPU numbers.
    code, err = run_main(peer, ["--device", "cpu", "--tips", "4"])
    check(code == 2 and "GPU tip" in err, f"--device cpu --tips 4: exit {code}, {err!r}")
    if torch.cuda.is_available():
        print("tips_peer_gpu_check: a GPU is here, so --device cuda's refusal is not checked")
    else:
        code, err = run_main(peer, ["--device", "cuda", "--quick", "--tips", "9"])
        check(code == 2 and "no GPU" in err, f"--device cuda without a GPU: exit {code}, {err!r}")

    args = argparse.Namespace(quick=True, reps=2, warmup=1, device="cpu")
    check([n for n, _, _ in peer.GPU_TIPS] == list(tips.GPU_TIPS),
          f"tips_peer.GPU_TIPS {[n for n, _, _ in peer.GPU_TIPS]} against tools/tips.py's {tips.GPU_TIPS}")
    for number, slug, run in peer.GPU_TIPS:
        t0 = time.perf_counter()
        peer.begin_tip(cpu)
        r = run(args, cpu)
        # Through JSON, as tools/tips.py reads the peer's lines.
        rows = [json.loads(json.dumps(peer.variant_record(number, slug, r, i, "cpu"))) for i in range(len(r.variants))]
        check_rows(number, rows, peer.GPU_VARIANTS[number])
        if number == 23 and len(rows) == 2:
            check("samples" not in rows[0], f"tip 23: the monitor-off row has samples: {rows[0]}")
            check(isinstance(rows[1].get("samples"), int) and rows[1]["samples"] >= 1,
                  f"tip 23: the monitor-on row's samples: {rows[1].get('samples')}")
        check_table(tips, number, rows)
        print(f"tip {number:2d} {slug}: " + ", ".join(f"{r['role']} {r['variant']!r} {r['ms']:.2f} ms" for r in rows)
              + f" ({time.perf_counter() - t0:.1f} s)", flush=True)

    # A tip the peer cannot measure: one record with the reason, and tools/tips.py's footer gives it.
    rec = json.loads(json.dumps(peer.unavailable_record(23, "monitor-utilization", "cuda", "no NVML here")))
    header = {"record": "header", "impl": "kiln", "device_name": "GPU", "threads": 2, "date": "2000-01-01",
              "kiln_commit": "check"}
    kiln_row = {"record": "tip", "tip": 23, "impl": "kiln", "role": "A", "variant": "GPU monitor off", "unit": "step",
                "ms": 1.0, "rate": 1.0, "rate_unit": "images/s", "workload": "w", "peak_mb": 0.0, "round": 0}
    recs = [header, dict(rec, round=0), kiln_row]
    text = tips.tip_table(23, tips.cells(recs), "check.md", tips.meta_of(recs)) or ""
    check("no NVML here" in " ".join(text.split()), f"tools/tips.py's footer does not give the reason:\n{text}")

    if failures:
        print("\n".join(f"FAIL: {f}" for f in failures), file=sys.stderr)
        return 1
    print(f"tips_peer_gpu_check: all {len(peer.GPU_TIPS)} GPU tips ran on the CPU and gave their rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())

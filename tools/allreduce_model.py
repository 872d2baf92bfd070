#!/usr/bin/env python3
"""The time of one all-reduce of N bytes over n ranks, on paper: the alpha-beta (latency-bandwidth)
cost model of the ring, the double binary tree, recursive halving-doubling and a two-level
hierarchical ring, with the GPT-2-124M gradient (124,439,808 parameters) on 8, 64 and 512 GPUs.
Prints markdown tables (docs/distributed.md pastes them): (A) each scheme's time; (B) the ring's
and the hierarchical scheme's algorithm bandwidth and bus bandwidth; (C) the schemes across message
sizes, and the sizes where they cross, to show where latency or bandwidth decides; (D) what the
bucket size of a data-parallel step does to the latency it pays and to the communication that can
hide behind backward.

Every step of a scheme costs alpha + bytes/beta (Hockney's latency-bandwidth model), plus gamma per
byte reduced when --gamma asks for it (off by default: a ring that adds while it copies, as NCCL's
kernels do, hides it behind the transfer). The hardware numbers are the named constants below:
assumptions from vendors' peak figures, not kiln measurements. --fit fits alpha and beta of the ring
formula to measured all-reduce times (bench/all_reduce's JSON lines), so the model can be checked
against kiln's own numbers.

  usage: python3 tools/allreduce_model.py [--out FILE.md] [--alpha-us A --beta-gbs B]
                                          [--gamma] [--backward-ms MS] [--fit FILE.jsonl]
         python3 tools/allreduce_model.py --check [--doc docs/distributed.md]
--alpha-us and --beta-gbs (both or neither) replace every link by one flat network of that
latency per step and that bandwidth per direction per rank. --check runs the model's
self-consistency checks (CTest); with --doc it also checks that every table row the model prints
with the default constants is a line of that page.
"""
import argparse
import json
import math
import os
import sys
import textwrap

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_compare import write_atomic  # noqa: E402

# --- Hardware: assumptions, not kiln measurements -----------------------------------------------
# One node: 8 H100 SXM GPUs behind NVSwitch. NVLink 4 gives a GPU 18 links of 25 GB/s per
# direction: 900 GB/s both ways together, 450 GB/s each way. A ring's copies do not reach the peak;
# the model assumes 80% of it.
GPUS_PER_NODE = 8
NVLINK_PEAK_GBS = 450.0   # per direction, per GPU (vendor peak)
NVLINK_BETA_GBS = 360.0   # per direction, per GPU, what the model uses: 80% of the peak (assumed)
NVLINK_ALPHA_US = 2.0     # one step inside a node: a handshake through GPU memory (assumed)
# Between nodes: one InfiniBand NDR NIC per GPU, 400 Gb/s = 50 GB/s per direction; the model
# assumes 90% of the line rate, and a step latency of a few microseconds more than NVLink's.
IB_PEAK_GBS = 50.0        # per direction, per GPU (line rate)
IB_BETA_GBS = 45.0        # per direction, per GPU, what the model uses: 90% of the line rate (assumed)
IB_ALPHA_US = 6.0         # one step between nodes: NIC, switch and the proxy's work (assumed)
# The reduction, when --gamma counts it: an add reads two operands and writes one, at the H100 SXM's
# HBM3 bandwidth (vendor peak).
HBM_GBS = 3350.0
REDUCE_TRAFFIC = 3        # bytes of HBM traffic per byte reduced
# --- The workload -------------------------------------------------------------------------------
GPT2_PARAMS = 124_439_808  # GPT-2 124M: 12 layers, d=768, vocabulary 50257, context 1024, tied head
GPT2_WTE = 50257 * 768     # its token embedding, which the head shares
BACKWARD_MS = 100.0        # assumed backward time of one GPT-2-124M step on one GPU: a round number,
                           # not a measurement (--backward-ms changes it)
RANKS = (8, 64, 512)
DTYPES = (("fp32", 4), ("bf16", 2))
BUCKETS_MIB = (1, 5, 25, 100)  # MiB, as DDP's bucket_cap_mb (25 by default) counts them
SIZES = (4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20)
MIB = 1 << 20


class Link:
    """alpha: seconds per step; beta: bytes per second per direction per rank; gamma: seconds per
    byte reduced."""

    def __init__(self, alpha, beta, gamma=0.0):
        self.alpha, self.beta, self.gamma = alpha, beta, gamma


class Net:
    """intra: the links inside a node; inter: a GPU's link to other nodes. A scheme over n ranks
    that spans nodes runs at the pace of its slowest hop, so a flat scheme over more than one node
    pays inter's alpha and beta on every step."""

    def __init__(self, intra, inter, per_node=GPUS_PER_NODE):
        self.intra, self.inter, self.per_node = intra, inter, per_node

    def flat(self, n):
        return self.intra if n <= self.per_node else self.inter


def default_net(gamma=False):
    g = REDUCE_TRAFFIC / (HBM_GBS * 1e9) if gamma else 0.0
    return Net(Link(NVLINK_ALPHA_US * 1e-6, NVLINK_BETA_GBS * 1e9, g), Link(IB_ALPHA_US * 1e-6, IB_BETA_GBS * 1e9, g))


def flat_net(alpha_us, beta_gbs, gamma=False):
    link = Link(alpha_us * 1e-6, beta_gbs * 1e9, REDUCE_TRAFFIC / (HBM_GBS * 1e9) if gamma else 0.0)
    return Net(link, link)


def is_pow2(n):
    return n >= 1 and n & (n - 1) == 0


# --- The schemes: seconds for one all-reduce of N bytes over n ranks -----------------------------


def ring(N, n, link):
    """Reduce-scatter then all-gather around a ring: 2(n-1) steps, each moving a chunk of N/n bytes
    to the next rank; the n-1 reduce-scatter steps each add a chunk. Each rank sends 2(n-1)/n N
    bytes, the least any all-reduce can (Patarasuk and Yuan, J. Parallel Distrib. Comput. 2009)."""
    if n <= 1:
        return 0.0
    return 2 * (n - 1) * link.alpha + 2 * (n - 1) / n * N / link.beta + (n - 1) / n * N * link.gamma


def tree(N, n, link):
    """Double binary tree (two trees, each reducing half the data to a root and broadcasting it
    back; a rank inner in one is a leaf in the other: Sanders, Speck and Traeff, "Two-tree
    algorithms for full bandwidth broadcast, reduction and scan", Parallel Computing 2009; NCCL's
    tree all-reduce is built on the idea), pipelined in small chunks:
    2*ceil(log2 n) steps of latency; each rank sends and receives N per direction in the reduction
    and N in the broadcast, so 2N/beta; an inner rank adds two children's halves, N bytes reduced.
    Pipeline fill (depth x one chunk) and the alpha of every chunk are left out: a lower bound."""
    if n <= 1:
        return 0.0
    return 2 * math.ceil(math.log2(n)) * link.alpha + 2 * N / link.beta + N * link.gamma


def halving_doubling(N, n, link):
    """Recursive halving-doubling (Rabenseifner, ICCS 2004; Thakur, Rabenseifner and Gropp, IJHPCA
    2005): a reduce-scatter by recursive halving (log2 n exchanges with the rank at distance n/2,
    n/4, ..., each of half the bytes of the one before) then an all-gather by recursive doubling:
    the ring's bytes in 2 log2(n) steps. Power-of-two n only (None otherwise)."""
    if n <= 1:
        return 0.0
    if not is_pow2(n):
        return None
    return 2 * math.log2(n) * link.alpha + 2 * (n - 1) / n * N / link.beta + (n - 1) / n * N * link.gamma


def hierarchical(N, n, net):
    """Reduce-scatter inside each node (ring over its g GPUs, NVLink), then g independent rings
    across the n/g nodes, each all-reducing its N/g-byte shard over its GPU's own NIC, then an
    all-gather inside each node. The two node phases together cost one ring all-reduce of N over g.
    n must be a multiple of g when it exceeds it (None otherwise); up to g it is the ring."""
    g = net.per_node
    if n <= g:
        return ring(N, n, net.intra)
    if n % g:
        return None
    return ring(N, g, net.intra) + ring(N / g, n // g, net.inter)


def schemes(net):
    """(name, f(N, n)) for every scheme on net."""
    return (("ring", lambda N, n: ring(N, n, net.flat(n))),
            ("tree", lambda N, n: tree(N, n, net.flat(n))),
            ("halving-doubling", lambda N, n: halving_doubling(N, n, net.flat(n))),
            ("hierarchical", lambda N, n: hierarchical(N, n, net)))


def crossover(f, g):
    """The message size above which f is faster than g, both a + bN; None when it never is."""
    fa, fb, ga, gb = f(0), f(1 << 30) - f(0), g(0), g(1 << 30) - g(0)
    if abs(fb - gb) <= 1e-9 * max(fb, gb):  # the same slope up to rounding: one is always faster
        return 0.0 if fa < ga else None
    if fb > gb:
        return None
    return max(0.0, (fa - ga) / (gb - fb) * (1 << 30))


def algbw(N, t):
    return N / t


def busbw(N, n, t):
    """nccl-tests' bus bandwidth of an all-reduce: algbw x 2(n-1)/n, the bytes each rank's link
    carries per second, comparable across rank counts (and, for the ring, equal to beta when
    alpha = 0)."""
    return algbw(N, t) * 2 * (n - 1) / n


def bucket_overlap(N, bucket, backward, cost):
    """Buckets of `bucket` bytes (the last one what is left), all-reduced one after the other on
    one stream, each as soon as it is full and the previous one is done. Gradients become ready at
    a constant rate over `backward` seconds, and communication does not slow backward down.
    Returns (buckets, seconds per full bucket, total seconds, latency seconds, exposed seconds):
    exposed is the communication left when backward ends, which the step waits for."""
    sizes = [bucket] * int(N // bucket)
    if N - bucket * len(sizes) > 0:
        sizes.append(N - bucket * len(sizes))
    done = ready_bytes = total = latency = 0.0
    for size in sizes:
        ready_bytes += size
        start = max(done, backward * ready_bytes / N)
        t = cost(size)
        done, total, latency = start + t, total + t, latency + cost(0)
    return len(sizes), cost(min(bucket, N)), total, latency, max(0.0, done - backward)


# --- Formatting ----------------------------------------------------------------------------------


def fmt_time(t):
    if t is None:
        return "n/a"
    if t < 1e-3:
        return f"{t * 1e6:.1f} us"
    if t < 1.0:
        return f"{t * 1e3:.2f} ms"
    return f"{t:.2f} s"


def fmt_bytes(b):
    if b >= 1e9:
        return f"{b / 1e9:.2f} GB"
    if b >= MIB:
        return f"{b / MIB:.4g} MiB"
    if b >= 1024:
        return f"{b / 1024:.4g} KiB"
    return f"{b:g} B"


def fmt_cross(x):
    return "never" if x is None else "always" if x == 0 else fmt_bytes(x)


def wrap(lines, width=100):
    """Prose lines wrapped at width (markdown joins them again); table rows as they are."""
    out = []
    for line in lines:
        out += [line] if line.startswith("|") or not line else textwrap.wrap(line, width, break_on_hyphens=False)
    return out


def where(n, net):
    if n <= net.per_node:
        return "1 node"
    return f"{n // net.per_node} nodes"


def report(net, flat, backward, gamma):
    out = []
    add = out.append
    if flat:
        link = net.inter
        add(f"Flat network (from the command line): alpha = {link.alpha * 1e6:g} us per step, beta = "
            f"{link.beta / 1e9:g} GB/s per direction per rank, for every hop.")
    else:
        add(f"Links (assumptions, not kiln measurements): inside a node of {net.per_node} GPUs, NVLink 4 "
            f"at {NVLINK_BETA_GBS:g} GB/s per direction per GPU ({NVLINK_BETA_GBS / NVLINK_PEAK_GBS:.0%} of "
            f"{NVLINK_PEAK_GBS:g}) and {NVLINK_ALPHA_US:g} us per step; between nodes, InfiniBand NDR at "
            f"{IB_BETA_GBS:g} GB/s per direction per GPU ({IB_BETA_GBS / IB_PEAK_GBS:.0%} of {IB_PEAK_GBS:g}) "
            f"and {IB_ALPHA_US:g} us per step. Ring, tree and halving-doubling over more than one node "
            "pay the InfiniBand numbers on every step.")
    add("Reduction compute: " + (f"counted, {REDUCE_TRAFFIC} bytes of HBM traffic per byte reduced at "
                                 f"{HBM_GBS:g} GB/s." if gamma else "not counted (assumed to overlap the copies)."))
    add("")
    grads = [(name, GPT2_PARAMS * size) for name, size in DTYPES]
    fs = schemes(net)

    add(f"Table A. One all-reduce of the GPT-2-124M gradient ({GPT2_PARAMS:,} parameters):")
    add("")
    add("| gradient | GPUs | placement | " + " | ".join(name for name, _ in fs) + " |")
    add("| --- | ---: | --- | " + " | ".join("---:" for _ in fs) + " |")
    for dname, N in grads:
        for n in RANKS:
            add(f"| {dname}, {N / 1e9:.2f} GB | {n} | {where(n, net)} | "
                + " | ".join(fmt_time(f(N, n)) for _, f in fs) + " |")
    add("")

    add("Table B. Bandwidth of the ring and of the hierarchical scheme on the same gradient, in GB/s;")
    add("algbw = bytes / time, busbw = algbw x 2(n-1)/n:")
    add("")
    add("| gradient | GPUs | ring | algbw | busbw | hierarchical | algbw | busbw |")
    add("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for dname, N in grads:
        for n in RANKS:
            tr, th = ring(N, n, net.flat(n)), hierarchical(N, n, net)
            add(f"| {dname} | {n} | {fmt_time(tr)} | {algbw(N, tr) / 1e9:.1f} | {busbw(N, n, tr) / 1e9:.1f} | "
                f"{fmt_time(th)} | {algbw(N, th) / 1e9:.1f} | {busbw(N, n, th) / 1e9:.1f} |")
    add("")

    add("Table C. Across message sizes (the fastest scheme in the last column):")
    add("")
    add("| bytes | GPUs | " + " | ".join(name for name, _ in fs) + " | fastest |")
    add("| ---: | ---: | " + " | ".join("---:" for _ in fs) + " | --- |")
    for n in RANKS:
        for N in SIZES:
            ts = [(f(N, n), name) for name, f in fs]
            best = min((t, name) for t, name in ts if t is not None)[1]
            add(f"| {fmt_bytes(N)} | {n} | " + " | ".join(fmt_time(t) for t, _ in ts) + f" | {best} |")
    add("")
    add("Every cost above is a + bN, so two schemes cross at one message size; above it, the first "
        "named is faster:")
    add("")
    add("| GPUs | ring over tree | hierarchical over halving-doubling |")
    add("| ---: | ---: | ---: |")
    for n in RANKS:
        rt = crossover(lambda N: ring(N, n, net.flat(n)), lambda N: tree(N, n, net.flat(n)))
        hh = crossover(lambda N: hierarchical(N, n, net), lambda N: halving_doubling(N, n, net.flat(n)))
        add(f"| {n} | {fmt_cross(rt)} | {fmt_cross(hh)} |")
    add("")
    N = grads[0][1]
    add(f"Table D. Buckets of the fp32 gradient ({N:,} bytes, {fmt_bytes(N)}) behind a backward pass of "
        f"{backward * 1e3:g} ms. Gradients become ready at a constant rate; each bucket is all-reduced when "
        "it is full and the one before it is done, on one stream. \"latency\": the share of the "
        "communication spent in alpha; \"exposed\": the communication still running when backward ends; "
        "\"hidden\": the share that ran during backward. GPT-2's tied token embedding "
        f"({GPT2_WTE:,} parameters, {GPT2_WTE / GPT2_PARAMS:.0%} of them) receives the last part of its gradient "
        "at the very end of backward, so for GPT-2 the constant rate is optimistic.")
    add("")
    add("| GPUs | scheme | bucket | buckets | per bucket | all buckets | latency | exposed | hidden |")
    add("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for n in RANKS:
        variants = [("ring", lambda b, n=n: ring(b, n, net.flat(n)))]
        if n > net.per_node:
            variants.append(("hierarchical", lambda b, n=n: hierarchical(b, n, net)))
        for name, cost in variants:
            for b in [m * MIB for m in BUCKETS_MIB] + [N]:
                k, per, total, lat, exposed = bucket_overlap(N, b, backward, cost)
                label = "whole" if b == N else fmt_bytes(b)
                add(f"| {n} | {name} | {label} | {k} | {fmt_time(per)} | {fmt_time(total)} | "
                    f"{lat / total:.0%} | {fmt_time(exposed)} | {max(0.0, total - exposed) / total:.0%} |")
    add("")
    return out


# --- --fit ---------------------------------------------------------------------------------------


def load_cases(path):
    try:
        f = open(path)
    except OSError as e:
        raise SystemExit(f"allreduce_model: --fit {path}: cannot read it ({e.strerror}); it is the JSON "
                         "lines that bench/all_reduce writes")
    cases = []
    with f:
        for line_no, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise SystemExit(f"allreduce_model: {path}:{line_no}: not JSON ({e})")
            if not isinstance(rec, dict) or rec.get("record") != "case" or "error" in rec:
                continue
            try:
                N, n, t = float(rec["bytes"]), int(rec["ranks"]), float(rec["seconds"])
            except (KeyError, TypeError, ValueError):
                raise SystemExit(f"allreduce_model: {path}:{line_no}: a case without numeric bytes, ranks "
                                 "and seconds")
            if n >= 2 and N > 0 and t > 0:
                who = str(rec.get("impl", "?")) + (f" ({rec['backend']})" if rec.get("backend") else "")
                cases.append((who, str(rec.get("algo", "?")), N, n, t))
    return cases


def fit_ring(points):
    """Least squares of t = alpha * 2(n-1) + (1/beta) * 2(n-1)/n * N over (N, n, t), each residual
    divided by t (relative errors: the sizes span decades, and plain residuals would let the largest
    message decide). Returns (alpha seconds, beta bytes/s or None when 1/beta <= 0, rms relative
    residual), or None when the points cannot separate alpha from beta."""
    s11 = s12 = s22 = r1 = r2 = 0.0
    for N, n, t in points:
        x1, x2 = 2 * (n - 1) / t, 2 * (n - 1) / n * N / t
        s11, s12, s22, r1, r2 = s11 + x1 * x1, s12 + x1 * x2, s22 + x2 * x2, r1 + x1, r2 + x2
    det = s11 * s22 - s12 * s12
    if len(points) < 2 or det <= 1e-12 * s11 * s22:
        return None
    a, inv_b = (r1 * s22 - r2 * s12) / det, (s11 * r2 - s12 * r1) / det
    rms = math.sqrt(sum(((a * 2 * (n - 1) + inv_b * 2 * (n - 1) / n * N) / t - 1) ** 2 for N, n, t in points)
                    / len(points))
    return a, (1 / inv_b if inv_b > 0 else None), rms


def fit_report(path):
    cases = load_cases(path)
    if not cases:
        raise SystemExit(f"allreduce_model: {path}: no case records with ranks >= 2, bytes > 0 and seconds > 0")
    out = [f"Fit of the ring formula to {path} (relative least squares; "
           "rerun with --alpha-us and --beta-gbs to put the fitted numbers into the tables):", "",
           "| impl (backend) | algo | cases | ranks | bytes | alpha | beta | rms error |",
           "| --- | --- | ---: | --- | --- | ---: | ---: | ---: |"]
    for impl, algo in sorted({(c[0], c[1]) for c in cases}):
        pts = [(N, n, t) for i, a, N, n, t in cases if (i, a) == (impl, algo)]
        ranks = ",".join(str(n) for n in sorted({n for _, n, _ in pts}))
        sizes = f"{fmt_bytes(min(p[0] for p in pts))} - {fmt_bytes(max(p[0] for p in pts))}"
        r = fit_ring(pts)
        if r is None:
            out.append(f"| {impl} | {algo} | {len(pts)} | {ranks} | {sizes} | cannot fit: needs two or more "
                       "message sizes | | |")
            continue
        a, beta, rms = r
        out.append(f"| {impl} | {algo} | {len(pts)} | {ranks} | {sizes} | {a * 1e6:.2f} us"
                   f"{' (negative)' if a < 0 else ''} | "
                   f"{f'{beta / 1e9:.1f} GB/s' if beta else 'not positive'} | {rms:.1%} |")
    out.append("")
    return out


# --- --check -------------------------------------------------------------------------------------


def check(doc):
    problems = []

    def expect(cond, what):
        if not cond:
            problems.append(what)

    nets = [("default", default_net()), ("default+gamma", default_net(True)), ("flat", flat_net(5, 25))]
    sizes = [0, 1, 1000, 1 << 20, 123456789, 1 << 30]
    for label, net in nets:
        for name, f in schemes(net):
            expect(f(1 << 20, 1) == 0.0, f"{label} {name}: n = 1 costs {f(1 << 20, 1)}, not 0")
            for n in (2, 3, 8, 12, 16, 64, 96, 512):
                ts = [f(N, n) for N in sizes]
                if ts[0] is None:
                    expect(name == "halving-doubling" and not is_pow2(n) or name == "hierarchical",
                           f"{label} {name}: no cost at n = {n}")
                    continue
                expect(all(a < b for a, b in zip(ts, ts[1:])), f"{label} {name}, n = {n}: not increasing in N")
    for n in (2, 3, 8, 64, 512):
        for N in (1000, 1 << 20, 1 << 30):
            link = Link(0.0, 45e9)
            bw = busbw(N, n, ring(N, n, link))
            expect(abs(bw - 45e9) < 1e-9 * 45e9, f"ring busbw at alpha = 0, n = {n}, N = {N}: {bw}, not beta")
            # halving-doubling moves the ring's bytes in fewer steps: the same at alpha = 0
            hd = halving_doubling(N, n, link)
            expect(hd is None or abs(hd - ring(N, n, link)) < 1e-12, f"halving-doubling != ring at alpha = 0, n = {n}")
    for n in (4, 8, 64, 512):  # ring and tree cross where n alpha beta (n - 1 - log2 n) bytes
        link = Link(3e-6, 50e9)
        x = crossover(lambda N: ring(N, n, link), lambda N: tree(N, n, link))
        want = n * 3e-6 * 50e9 * (n - 1 - math.log2(n))
        expect(x is not None and abs(x - want) < 1e-6 * want, f"ring/tree crossover at n = {n}: {x}, not {want}")
    net = default_net()
    for n in (2, 4, 8):
        expect(hierarchical(1 << 24, n, net) == ring(1 << 24, n, net.intra), f"hierarchical != ring in one node, n={n}")
    # one bucket: nothing can hide, the whole all-reduce is exposed
    k, per, total, lat, exposed = bucket_overlap(1e8, 1e8, 0.1, lambda b: ring(b, 8, net.intra))
    expect(k == 1 and abs(exposed - total) < 1e-15, "one bucket is not fully exposed")
    for b in (1e6, 5e6, 3e7):
        k, per, total, lat, exposed = bucket_overlap(1e8, b, 0.1, lambda s: ring(s, 64, net.inter))
        expect(k == math.ceil(1e8 / b) and 0 <= exposed <= total and 0 <= lat <= total,
               f"bucket model out of range at bucket {b}")
    # the fit finds the alpha and beta that made the points
    pts = [(N, n, ring(N, n, Link(7e-6, 40e9))) for n in (2, 8, 16) for N in (1e3, 1e5, 1e7, 1e9)]
    r = fit_ring(pts)
    expect(r is not None and abs(r[0] - 7e-6) < 1e-12 and abs(r[1] - 40e9) < 1e-3 * 40e9 and r[2] < 1e-9,
           f"fit of exact ring points gave {r}")
    expect(fit_ring([(1e6, 8, 1e-3), (1e6, 8, 1.1e-3)]) is None, "fit of one message size did not refuse")

    if doc:
        try:
            with open(doc) as f:
                lines = set(f.read().splitlines())
        except OSError as e:
            problems.append(f"{doc}: cannot read ({e.strerror})")
        else:
            missing = [row for row in report(default_net(), False, BACKWARD_MS * 1e-3, False)
                       if row.startswith("|") and row not in lines]
            for row in missing:
                problems.append(f"{doc}: the model's row is not on the page: {row}")

    for p in problems:
        print(f"allreduce_model --check: {p}", file=sys.stderr)
    print(f"allreduce_model --check: {'FAILED' if problems else 'ok'}")
    return 1 if problems else 0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="also write the markdown here (atomically)")
    p.add_argument("--alpha-us", type=float, help="flat network: seconds per step, in microseconds")
    p.add_argument("--beta-gbs", type=float, help="flat network: GB/s per direction per rank")
    p.add_argument("--gamma", action="store_true", help="count the reduction's HBM traffic")
    p.add_argument("--backward-ms", type=float, default=BACKWARD_MS,
                   help=f"backward time that buckets hide behind (default {BACKWARD_MS:g})")
    p.add_argument("--fit", metavar="FILE", help="fit alpha and beta of the ring to measured cases")
    p.add_argument("--check", action="store_true", help="self-consistency checks; exits 1 on failure")
    p.add_argument("--doc", help="with --check: a page that must hold every table row")
    args = p.parse_args()
    if args.check:
        return check(args.doc)
    if args.doc:
        p.error("--doc goes with --check")
    if (args.alpha_us is None) != (args.beta_gbs is None):
        p.error("--alpha-us and --beta-gbs go together")
    flat = args.alpha_us is not None
    if flat and (args.alpha_us < 0 or args.beta_gbs <= 0):
        p.error("--alpha-us must be >= 0 and --beta-gbs > 0")
    if args.backward_ms < 0:
        p.error("--backward-ms must be >= 0")
    net = flat_net(args.alpha_us, args.beta_gbs, args.gamma) if flat else default_net(args.gamma)
    lines = fit_report(args.fit) if args.fit else []
    lines += report(net, flat, args.backward_ms * 1e-3, args.gamma)
    text = "\n".join(wrap(lines))
    sys.stdout.write(text)
    if args.out:
        write_atomic(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

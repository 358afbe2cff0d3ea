"""Forward + backward time and peak memory of isoscore_star (zeta = 0.2, float32 Sigma_S) against
(a) the official IsoScore* (torch.cov, float64 svdvals of the shrunk matrix, its normalisation formula) and
(b) the bare lower bound ``(X^T X).sum()``.

    python benchmarks/isoscore_star.py [--runs 7] [--csv FILE]

Times are medians over ``--runs`` interleaved rounds after one warm-up round. Peak memory is measured in a
fresh process per variant (Linux): the peak resident set (VmHWM, reset once the inputs exist) above the
resident set with the inputs allocated, also in units of one point cloud (n * d float32), so copies of the
cloud show up as whole numbers. The point gradient itself is one cloud in every variant. ``--csv`` also writes the
table, a row per size.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import time

import torch
from csv_table import add_csv_option, write_csv

from istar_plugin.isotropy import isoscore_star

SIZES = ((384, 8 * 128 * 6), (768, 8 * 128 * 12), (768, 32 * 128 * 12))
ZETA = 0.2
TARGETS = "targets: ours <= 1.2 x bare at every size, and ours faster than official"


def official_isoscore_star(points, shrinkage_cov, zeta):
    """The official algorithm (IsoScore 2.0.1): the float64 Sigma_S promotes the shrunk matrix to float64."""
    d = points.shape[1]
    cov = (1 - zeta) * torch.cov(points.T) + zeta * shrinkage_cov
    pcs = torch.linalg.svdvals(cov)
    pcs_norm = pcs * math.sqrt(d) / torch.linalg.vector_norm(pcs)
    iso_defect = torch.linalg.vector_norm(pcs_norm - 1) / math.sqrt(2 * (d - math.sqrt(d)))
    return ((d - iso_defect**2 * (d - math.sqrt(d))) ** 2 - d) / (d * (d - 1))


def ours(points, sigma_s):
    isoscore_star(points, sigma_s, ZETA).backward()


def official(points, sigma_s):
    official_isoscore_star(points, sigma_s.double(), ZETA).backward()


def bare(points, sigma_s):
    (points.T @ points).sum().backward()


VARIANTS = {"ours": ours, "official": official, "bare": bare}


def make_inputs(d, n, seed=0):
    """An anisotropic float32 cloud (filled in place: no second copy) and a float32 Sigma_S."""
    generator = torch.Generator().manual_seed(seed)
    scales = torch.linspace(0.2, 3.0, d)
    points = torch.empty(n, d).normal_(generator=generator).mul_(scales).requires_grad_(True)
    sigma_s = torch.cov((torch.randn(4 * d, d, generator=generator) * scales).T)
    return points, sigma_s


def median_ms(d, n, runs):
    """Median forward + backward milliseconds per variant; variants interleaved so load drifts hit all alike."""
    points, sigma_s = make_inputs(d, n)
    times = {name: [] for name in VARIANTS}
    for round_ in range(runs + 1):
        for name, variant in VARIANTS.items():
            points.grad = None
            start = time.perf_counter()
            variant(points, sigma_s)
            if round_:  # round 0 warms up
                times[name].append(time.perf_counter() - start)
    return {name: 1e3 * statistics.median(values) for name, values in times.items()}


def peak_memory_mb(name, d, n):
    """Peak RSS growth (MB) of one forward + backward of ``name``, measured in a fresh process."""
    result = subprocess.run(
        [sys.executable, __file__, "--memory", name, str(d), str(n)], capture_output=True, text=True, check=True
    )
    return float(result.stdout)


def resident_kib(field):
    """VmRSS (current) or VmHWM (peak) of this process in KiB."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field + ":"))


def measure_memory(name, d, n):
    variant = VARIANTS[name]
    variant(*make_inputs(d, 64))  # library initialisation (BLAS / LAPACK buffers) outside the measurement
    points, sigma_s = make_inputs(d, n)
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")  # reset the peak (VmHWM) to the current resident set
    baseline = resident_kib("VmRSS")
    variant(points, sigma_s)
    print((resident_kib("VmHWM") - baseline) / 1024)


def check_agreement():
    points, sigma_s = make_inputs(64, 500)
    with torch.no_grad():
        ours_score = isoscore_star(points, sigma_s, ZETA).item()
        official_score = official_isoscore_star(points, sigma_s.double(), ZETA).item()
    assert abs(ours_score - official_score) < 1e-5, (ours_score, official_score)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="timed rounds per size (after one warm-up round)")
    add_csv_option(parser)
    parser.add_argument("--memory", nargs=3, metavar=("VARIANT", "D", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory:
        name, d, n = args.memory
        measure_memory(name, int(d), int(n))
        return
    check_agreement()
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(f"isoscore_star forward + backward, zeta = {ZETA}, float32 points, {torch.get_num_threads()} threads, "
          f"median of {args.runs} runs, load average {load} on {os.cpu_count()} CPUs")
    print(TARGETS)
    header = (f"{'d':>4} {'n':>6} | {'ours ms':>8} {'official ms':>11} {'bare ms':>8} | {'ours/bare':>9} "
              f"{'official/ours':>13} | {'peak MB (clouds): ours':>22} {'official':>15} {'bare':>15}")
    print(header)
    print("-" * len(header))
    verdicts, rows = [], []
    for d, n in SIZES:
        ms = median_ms(d, n, args.runs)
        cloud_mb = n * d * 4 / 2**20
        memory = {name: peak_memory_mb(name, d, n) for name in VARIANTS}
        cells = [f"{memory[name]:7.1f} ({memory[name] / cloud_mb:4.1f})" for name in VARIANTS]
        ratio, speedup = ms["ours"] / ms["bare"], ms["official"] / ms["ours"]
        verdicts.append(ratio <= 1.2 and speedup > 1)
        print(f"{d:>4} {n:>6} | {ms['ours']:8.1f} {ms['official']:11.1f} {ms['bare']:8.1f} | {ratio:9.2f} "
              f"{speedup:13.1f} | {cells[0]:>22} {cells[1]:>15} {cells[2]:>15}")
        rows.append([d, n, *(f"{ms[name]:.1f}" for name in VARIANTS), f"{ratio:.2f}", f"{speedup:.1f}",
                     *(f"{memory[name]:.1f}" for name in VARIANTS),
                     *(f"{memory[name] / cloud_mb:.1f}" for name in VARIANTS)])
    print(f"one point cloud = n * d * 4 bytes; targets met at every size: {all(verdicts)}")
    write_csv(args.csv, ["d", "n", *(f"{name} ms" for name in VARIANTS), "ours/bare", "official/ours",
                         *(f"{name} peak MB" for name in VARIANTS), *(f"{name} peak clouds" for name in VARIANTS)],
              rows)


if __name__ == "__main__":
    main()

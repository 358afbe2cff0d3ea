"""Seconds ``istar-run`` takes to answer its quick commands (``--help``, ``--list engines``, ``--cfg``, a refused
value), each the median of ``--repeats`` fresh processes, and the ratio to the 1.5 s target.

    python benchmarks/startup.py [--repeats 5] [--csv FILE]

Prints the CPU (from /proc/cpuinfo) and the load average first: others sharing the machine slow every figure.
``--csv`` also writes the medians with that CPU and load.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from csv_table import add_csv_option, write_csv

TARGET_SECONDS = 1.5
COMMANDS = (["--help"], ["--list", "engines"], ["recipe=movie_snippets", "--cfg"], ["batch_size=0"])


def cpu_name() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.is_file() else []
    names = [line.partition(":")[2].strip() for line in lines if line.startswith("model name")]
    return f"{names[0]} x {len(names)}" if names else "unknown CPU"


def seconds(arguments: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "istar_plugin.cli", *arguments], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    add_csv_option(parser)
    args = parser.parse_args()
    cpu, load = cpu_name(), " ".join(f"{load:.2f}" for load in os.getloadavg())
    print(f"CPU: {cpu}; load average {load}")
    rows = []
    for arguments in COMMANDS:
        median = statistics.median(seconds(arguments) for _ in range(args.repeats))
        ratio = median / TARGET_SECONDS
        print(f"istar-run {' '.join(arguments):<32} {median:6.2f} s  {ratio:5.2f} x the {TARGET_SECONDS} s target")
        rows.append([f"istar-run {' '.join(arguments)}", f"{median:.2f}", str(args.repeats), cpu, load])
    write_csv(args.csv, ["command", "median s", "repeats", "CPU", "load average"], rows)


if __name__ == "__main__":
    main()

"""The README's quick start, run as a newcomer runs it: what it learns and how long it takes, at each precision.

    python benchmarks/quick_start.py [--precision auto,fp32] [--overrides "" "criterion.lam=-1" ...] [--rounds 1]
        [--baseline-src DIR] [--csv FILE]

Each run is the quick start's command, ``istar-run recipe=movie_snippets criterion=istar`` (``precision=auto``: bf16
on a CPU that computes it natively, fp32 otherwise), with ``precision=P`` for each other ``--precision``, in a fresh
process and a fresh output folder; each of ``--overrides`` (space-separated ``key=value`` words; "" the command as it
is, the default) runs it once more with those added, e.g. the other settings the recipe's lambda was chosen against.
``--baseline-src DIR`` adds the same runs imported from another source tree
(e.g. ``git archive REV | tar -x -C DIR``) for before/after comparisons; ``--rounds`` repeats every run, alternating
their order, so machine noise hits each alike.

Prints the CPU, the cores the runs may use and the load average, then one row per run: the precision it computed
at, its steps, accuracy and eval IsoScore* before and after fine-tuning (as the run prints them), whether its
classifier collapsed (every evaluation prediction one class), its wall seconds from start to exit, and where those
went by the run's own time line (``time/*`` in metrics.jsonl; absent in a tree that does not log it; ``rest``: the
wall seconds no phase holds, the process's start-up and imports among them). ``--csv`` writes the table: the
README's expected result and docs/benchmarks.md's wall times are rendered from it.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from csv_table import add_csv_option, at_least_one, write_csv
from startup import cpu_name

from istar_plugin.storage.logs import read_records
from istar_plugin.storage.results import read_results

COMMAND = ["recipe=movie_snippets", "criterion=istar"]
PHASES = ("training", "evaluation", "hooks", "setup", "checkpoints", "model_folder")
PRECISIONS = ("auto", "fp32", "bf16")


def precisions(text: str) -> list[str]:
    """``--precision``'s comma-separated list, each one of :data:`PRECISIONS`."""
    chosen = [value.strip() for value in text.split(",") if value.strip()]
    unknown = [value for value in chosen if value not in PRECISIONS]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"{text!r}: choose from {', '.join(PRECISIONS)}, comma-separated")
    return chosen


def printed(value: float, digits: int = 4) -> str:
    """A score as the run prints it.

    >>> printed(0.74812)
    '0.7481'
    """
    return f"{value:.{digits}f}"


def run(precision: str, overrides: str, source: str | None, folder: Path) -> dict:
    """One quick start with ``overrides`` in ``folder`` (its output folder is ``folder/run``): the row of the table."""
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    if source:
        environment["PYTHONPATH"] = os.path.abspath(source)
    command = [sys.executable, "-m", "istar_plugin.cli", *COMMAND, *overrides.split(), f"output_dir={folder / 'run'}",
               *([f"precision={precision}"] if precision != "auto" else [])]
    started = time.perf_counter()
    # python -m imports the working folder's package before PYTHONPATH's: a baseline runs in its own tree
    done = subprocess.run(command, capture_output=True, text=True, env=environment, cwd=source)
    wall = time.perf_counter() - started
    if done.returncode:
        sys.exit(f"quick start ({precision} {overrides}, {source or 'this tree'}) failed, exit {done.returncode}:\n"
                 f"{done.stderr[-3000:]}")
    results = read_results(folder / "run", require_finished=True)
    if not results.initial:
        sys.exit(f"quick start ({precision} {overrides}, {source or 'this tree'}) has no step-0 evaluation")
    phases = {key[5:]: value for record in read_records(folder / "run" / "metrics.jsonl")
              for key, value in record.items() if key.startswith("time/")}
    main = results.main_metric
    return {"precision": results.extra.get("precision", ""), "steps": results.step,
            f"{main} before": printed(results.initial[main]),
            "eval IsoScore* before": printed(results.initial["eval_isoscore_star"]),
            f"{main} after": printed(results.metrics[main]),
            "eval IsoScore* after": printed(results.eval_isoscore_star),
            "collapsed": "yes" if results.collapsed else "no", "wall s": f"{wall:.1f}",
            **{f"{phase} s": f"{phases[phase]:.1f}" if phase in phases else "" for phase in PHASES},
            "rest s": f"{wall - sum(phases.values()):.1f}" if phases else ""}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--precision", type=precisions, default=["auto", "fp32"],
                        help=f"comma-separated, from {', '.join(PRECISIONS)} (default auto,fp32)")
    parser.add_argument("--overrides", nargs="+", default=[""], metavar="OVERRIDES",
                        help='each a run with these key=value words added ("": the command as it is, the default)')
    parser.add_argument("--rounds", type=at_least_one, default=1)
    parser.add_argument("--baseline-src", help="also run the quick start imported from this source tree")
    add_csv_option(parser)
    args = parser.parse_args()
    if args.baseline_src and not (Path(args.baseline_src) / "istar_plugin").is_dir():
        parser.error(f"--baseline-src {args.baseline_src!r} holds no istar_plugin package")
    cpu, load = cpu_name(), " ".join(f"{load:.2f}" for load in os.getloadavg())
    cores = len(os.sched_getaffinity(0))  # the runs inherit it: torch starts a thread per core it may use
    print(f"CPU: {cpu}, {cores} core(s) to run on; load average {load}; istar-run {' '.join(COMMAND)}", flush=True)
    trees = [("this tree", None), *([("baseline", args.baseline_src)] if args.baseline_src else [])]
    variants = [(tree, source, precision, overrides) for tree, source in trees
                for precision in args.precision for overrides in args.overrides]
    rows = []
    for round_index in range(args.rounds):
        for tree, source, precision, overrides in variants[:: 1 if round_index % 2 == 0 else -1]:
            with tempfile.TemporaryDirectory(prefix="istar-quick-start-") as folder:
                row = {"tree": tree, "overrides": overrides, "asked": precision, "round": round_index + 1,
                       **run(precision, overrides, source, Path(folder))}
            rows.append(row)
            print("  ".join(f"{key} {value}" for key, value in row.items() if value != ""), flush=True)
    header = [*rows[0], "CPU", "cores", "load average"]
    write_csv(args.csv, header, [[*row.values(), cpu, cores, load] for row in rows])


if __name__ == "__main__":
    main()

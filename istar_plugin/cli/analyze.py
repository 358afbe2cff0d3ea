"""``istar-analyze RUN_DIR [RUN_DIR ...]``: the I-STAR paper's representation analyses of finished runs.

Loads each run's final model with the run's own config, tokenizer and data, streams one split through it keeping
O(d^2) statistics per layer, and writes per run ``analysis.json`` (IsoScore*, TwoNN, EV_k and average cosine per
layer, mean activation per dimension, I1/I2 of the word embeddings), Figures 4, 5 and 6 of Rudman & Eickhoff (2024)
overlaying the runs, and ``summary.md`` (printed too). ``--base KEY=VALUE ...`` adds the pretrained model ``istar-run``
with those arguments starts from (``DIR/pretrained``); ``--checkpoints`` analyses every checkpoint each run kept
(``DIR/RUN/step_N``).

    istar-analyze RUN_DIR [RUN_DIR ...] [--split eval|train] [--out DIR] [--batch-size N]
    istar-analyze [RUN_DIR ...] --base recipe=sst2 model=smollm2 data.dir=DIR
    istar-analyze RUN_DIR --checkpoints
"""
from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

from ..data.task import SPLITS as TASK_SPLITS
from ..errors import RunDirError, RunError, one_line, run_command
from ..storage.user_paths import path_argument
from . import command_parser

if TYPE_CHECKING:
    from ..storage.ownership import OwnedOutput

SPLITS = tuple(sorted(TASK_SPLITS))

def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = command_parser("istar-analyze", __doc__)
    parser.add_argument("run_dirs", type=path_argument, nargs="*", metavar="RUN_DIR", help="finished run directories")
    parser.add_argument("--base", nargs="+", metavar="KEY=VALUE",
                        help="also analyse the pretrained model istar-run with these arguments starts from")
    parser.add_argument("--checkpoints", action="store_true",
                        help="analyse every checkpoint each run kept (DIR/RUN/step_N), not its final model alone")
    parser.add_argument("--split", choices=SPLITS, default="eval", help="which split to stream (default eval)")
    parser.add_argument("--out", type=path_argument, default=Path("analysis"),
                        help="output directory (default ./analysis)")
    parser.add_argument("--batch-size", type=int, help="examples per forward pass (default: the run's eval batch size)")
    args = parser.parse_args(argv)
    if args.batch_size is not None and args.batch_size < 1:
        parser.error(f"--batch-size must be at least 1, got {args.batch_size}")
    if not args.run_dirs and not args.base:
        parser.error("name a finished RUN_DIR, or --base KEY=VALUE ... for a pretrained model")
    return run_command("istar-analyze", lambda: analyze(args))


def analyze(args: argparse.Namespace) -> int:
    """Analyse the runs (and the pretrained model) into ``--out``; exit 2 when a run was left out."""
    from ..analysis.analyze import RunProblem, check_run
    from ..config import compose
    from ..reports.records.analyses import output_names
    from ..storage.checkpoints import Checkpoints
    from ..storage.ownership import ANALYSIS_MARKER, OwnedOutput

    if args.base:
        try:
            compose(args.base)
        except RunError as error:
            raise type(error)(f"--base: {one_line(error)}") from None
    problems, good = [], []
    for run_dir in args.run_dirs:
        try:
            check_run(run_dir)
            good.append(run_dir)
        except (RunProblem, RunDirError) as problem:
            problems.append(str(problem))
    folder = OwnedOutput(args.out, ANALYSIS_MARKER, "--out")
    try:
        folder.check()
    except RunDirError:
        sys.stderr.writelines(f"istar-analyze: error: {problem}\n" for problem in problems)
        raise
    if not good and not args.base:
        sys.stderr.writelines(f"istar-analyze: error: {problem}\n" for problem in problems)
        return 2
    names = output_names(good)
    jobs = [(run_dir, name if step is None else f"{name}/step_{step}", step)  # no checkpoint kept: the final model
            for run_dir, name in zip(good, names)
            for step in ((list(Checkpoints(run_dir).paths()) or [None]) if args.checkpoints else [None])]
    candidates = itertools.chain(["pretrained"], (f"pretrained_{number}" for number in itertools.count(2)))
    pretrained = next(name for name in candidates if name not in names)  # unless a run's output has the name
    jobs += [(None, pretrained, None)] if args.base else []
    try:
        with folder:  # locked: a second istar-analyze on this --out is refused while this one writes
            return _analyze_all(args, folder, jobs, problems)
    except KeyboardInterrupt:
        print(f"istar-analyze: interrupted; --out {args.out} holds only the analyses finished before it (its "
              f"{ANALYSIS_MARKER} lists them)", file=sys.stderr)
        return 130


def _analyze_all(args: argparse.Namespace, folder: OwnedOutput, jobs: list, problems: list[str]) -> int:
    """Analyse each job into ``--out``, then draw the figures."""
    from ..analysis.analyze import (CONSISTENCY_TOLERANCE, analyze_base, analyze_run, figure4, figure5, figure6,
                                    figure_massive, figure_outliers)
    from ..reports.outputs.analysis_table import distinct_labels, write_summary
    from ..storage.atomic import atomic_write_json

    figures = [(args.out / name, figure) for name, figure in (
        ("figure4.png", figure4), ("figure5.png", figure5), ("figure6.png", figure6), ("outliers.png", figure_outliers),
        ("massive.png", figure_massive))]
    summary = args.out / "summary.md"
    planned = [args.out / name / "analysis.json" for _, name, _ in jobs] + [path for path, _ in figures] + [summary]
    analyses, written, checkpoints_skipped = [], [], []
    for number, (run_dir, name, step) in enumerate(jobs, start=1):
        what = f"{run_dir}{'' if step is None else f' at step {step}'}" if run_dir else "base: " + " ".join(args.base)
        print(f"[{number}/{len(jobs)}] {what}", file=sys.stderr, flush=True)
        try:
            analysis = analyze_run(run_dir, args.split, args.batch_size, step) if run_dir else analyze_base(
                args.base, args.split, args.batch_size)
        except RunError as error:
            if step is None:
                problems.append(f"{run_dir or 'base'}: {one_line(error)}")
            else:  # one checkpoint of the run: its other steps are still analysed
                checkpoints_skipped.append((run_dir, step, one_line(error)))
            continue
        if not written:
            folder.replace(planned)
        (args.out / name).mkdir(parents=True, exist_ok=True)
        path = atomic_write_json(args.out / name / "analysis.json", analysis, allow_nan=False)
        written.append(path)
        scored = f"step {analysis['step']} of the finished run ({analysis['weights']})" if run_dir else "pretrained"
        print(f"  {analysis['label']}: IsoScore* per layer "
              f"{' '.join(f'{v:.3f}' for v in analysis['isoscore_star_per_layer'])}; TwoNN {_twonn_text(analysis)}; "
              f"{scored}; {analysis['seconds']['total']:.1f} s -> {path}", flush=True)
        if (difference := analysis.get("results_max_abs_difference") or 0) > CONSISTENCY_TOLERANCE:
            print(f"  warning: IsoScore* differs from results.json by up to {difference:.2g}", flush=True)
        analyses.append(analysis)
    problems += [_checkpoint_skipped(run_dir, step, why, analyses) for run_dir, step, why in checkpoints_skipped]
    for problem in problems:
        print(f"istar-analyze: skipped {problem}", file=sys.stderr)
    if not analyses:  # nothing was written either
        return 2
    distinct_labels(analyses)
    drawn = [figure(analyses, path) for path, figure in figures]
    table = write_summary(analyses, args.out)
    folder.finish(written + drawn + [table])
    print(table.read_text(encoding="utf-8"), end="")
    print("figures: " + ", ".join(str(path) for path in drawn) + f"; table: {table}")
    return 2 if problems else 0  # some runs were left out: a script should notice


def _checkpoint_skipped(run_dir: Path, step: int, why: str, analyses: list[dict]) -> str:
    """What was skipped of a run whose checkpoint of ``step`` could not be analysed: that checkpoint, and which of the
    run's steps were analysed."""
    steps = list(dict.fromkeys(str(a["step"]) for a in analyses if a.get("run_dir") == str(run_dir)))
    analysed = (f"its step{'s' if len(steps) > 1 else ''} {', '.join(steps)} {'were' if len(steps) > 1 else 'was'} "
                "analysed" if steps else "none of its steps was analysed")
    return f"the checkpoint of step {step} of {run_dir} ({analysed}): {why}"


def _twonn_text(analysis: dict) -> str:
    """Each layer's TwoNN dimension, or ``undefined (why)``."""
    why = analysis.get("twonn_per_layer_undefined", {})
    return " ".join(f"undefined ({why.get(str(layer), 'not computed')})" if value is None else f"{value:.1f}"
                    for layer, value in enumerate(analysis["twonn_per_layer"], start=1))


if __name__ == "__main__":
    sys.exit(main())

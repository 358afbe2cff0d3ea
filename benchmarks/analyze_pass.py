"""istar-analyze's pass over a split against the trainer's evaluation of the same run, time and memory.

    python benchmarks/analyze_pass.py RUN_DIR [--examples 256] [--repeats 2] [--csv FILE]

Loads the finished run once (as istar-analyze does), keeps the first ``--examples`` evaluation examples, then
alternates the trainer's evaluation (:class:`~istar_plugin.training.evaluation.Evaluator`: task metrics and
IsoScore* per layer) with istar-analyze's pass plus its measures (IsoScore*, TwoNN of [CLS], EV_k, cosine, mean
activation, I1/I2), ``--repeats`` times each, and prints the median seconds of each and their ratio, and the peak
resident memory of the process; ``--csv`` also writes them as a one-row table.
"""
from __future__ import annotations

import argparse
import resource
import statistics
import time
from pathlib import Path

from csv_table import add_csv_option, write_csv

from istar_plugin.analysis.analyze import measures, stream_features
from istar_plugin.analysis.loading import load_run
from istar_plugin.training.evaluation import Evaluator


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--examples", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=2)
    add_csv_option(parser)
    args = parser.parse_args()
    loaded = load_run(args.run_dir)
    if loaded.task.kind == "extractive_qa":
        parser.error("use a classification or regression run (one feature per example)")
    examples = loaded.task.load("eval")[: args.examples]
    features = loaded.task.encode(examples, loaded.tokenizer, train=False)
    evaluator = Evaluator(loaded.task, loaded.model, examples, features, collate=loaded.collate,
                          autocast=loaded.autocast, batch_size=loaded.eval_batch_size, rank=0, world_size=1,
                          device=loaded.device, sort_by_length=False, show_progress=False)
    embeddings = loaded.model.word_embeddings().detach()
    times: dict[str, list[float]] = {"evaluate": [], "analyze": []}
    for _ in range(args.repeats):
        started = time.perf_counter()
        evaluator.evaluate()
        times["evaluate"].append(time.perf_counter() - started)
        started = time.perf_counter()
        measures(*stream_features(loaded, features), embeddings)
        times["analyze"].append(time.perf_counter() - started)
    evaluate, analyze = (statistics.median(times[name]) for name in ("evaluate", "analyze"))
    print(f"{len(features)} examples, {args.repeats} repeats (medians): evaluation {evaluate:.1f} s, "
          f"istar-analyze pass + measures {analyze:.1f} s, ratio {analyze / evaluate:.2f}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak resident memory {peak:.0f} MiB")
    write_csv(args.csv, ["examples", "repeats", "evaluation s", "istar-analyze s", "ratio", "peak RSS MiB"],
              [[len(features), args.repeats, f"{evaluate:.1f}", f"{analyze:.1f}", f"{analyze / evaluate:.2f}",
                f"{peak:.0f}"]])


if __name__ == "__main__":
    main()

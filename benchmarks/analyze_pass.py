"""istar-analyze's pass over a split against the trainer's own evaluation of the same run, time and memory.

    python benchmarks/analyze_pass.py RUN_DIR [--examples 256] [--repeats 2]

Loads the finished run once (as istar-analyze does), keeps the first ``--examples`` evaluation examples, then
alternates the trainer's ``evaluate()`` (task metrics and IsoScore* per layer) with istar-analyze's pass plus
its measures (IsoScore*, TwoNN of [CLS], EV_k, cosine, mean activation, I1/I2), ``--repeats`` times each, and
prints the median seconds of each and their ratio, and the peak resident memory of the process.
"""
from __future__ import annotations

import argparse
import resource
import statistics
import time
from pathlib import Path

from istar_plugin.reports.analyze import load_trained, measures, stream_split


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--examples", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    trainer = load_trained(args.run_dir)
    if trainer.task.kind == "extractive_qa":
        parser.error("use a classification or regression run (one feature per example)")
    trainer.eval_examples = trainer.eval_examples[: args.examples]
    trainer.eval_features = trainer.eval_features[: args.examples]
    embeddings = trainer.model.word_embeddings().detach()
    times: dict[str, list[float]] = {"evaluate": [], "analyze": []}
    for _ in range(args.repeats):
        started = time.perf_counter()
        trainer.evaluate()
        times["evaluate"].append(time.perf_counter() - started)
        started = time.perf_counter()
        measures(stream_split(trainer, "eval"), embeddings)
        times["analyze"].append(time.perf_counter() - started)
    evaluate, analyze = (statistics.median(times[name]) for name in ("evaluate", "analyze"))
    print(f"{len(trainer.eval_features)} examples, {args.repeats} repeats (medians): "
          f"trainer.evaluate {evaluate:.1f} s, istar-analyze pass + measures {analyze:.1f} s, "
          f"ratio {analyze / evaluate:.2f}")
    print(f"peak resident memory {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()

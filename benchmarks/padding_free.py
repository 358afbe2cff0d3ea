"""Seconds per training step, padded against padding-free (``model.padding_free``), on real batches, and how close
to the machine's matrix-multiply throughput each runs.

    python benchmarks/padding_free.py [--tasks sst2 rte mrpc squad lm] [--data-root ../shared/data] [--repeats 5]
                                      [--model minilm] [--profile] [--csv FILE]

For each task, at its recipe's settings (``recipes/TASK.yaml``: ``data.max_length``, micro-batches of
``batch_size / optim.grad_accum`` sequences, its criterion: I-STAR for SST-2, RTE, MRPC and SQuAD, with SQuAD's
span loss; the next-token loss for ``lm``): the training split read from ``DATA_ROOT/TASK`` and tokenised as the
trainer does (SQuAD: windows of its only stored split, ``dev-v1.1.json``, made as training features; ``lm``: the SST-2
sentences, ``data.text_from=sst2``), seeded random micro-batches padded to their longest member (as the trainer
collates them), and one optimizer step as the trainer takes it (:class:`~istar_plugin.training.step.OptimizerStep`:
``optim.grad_accum`` micro-batches' forward, the criterion's loss and backward, gradient clipping, the trainer's
fused AdamW) of the same model and weights in fp32, once on the padded batches and once padding-free, on the same
batches. The GLUE tasks and SQuAD train
``--model`` (MiniLM) whole; ``lm`` trains SmolLM2 with LoRA (``recipes/model/smollm2.yaml``). Sigma_S is a fixed
random covariance (its value does not change the cost).

Each step's useful work is counted analytically from the model's shapes on its real tokens (:func:`step_flops`),
the same for both modes, and divided by each step's seconds: the useful GFLOP/s. After each step's two modes, the
bare GEMM reference runs the forward's weight matmuls alone (:func:`weight_matmuls`: ``torch.matmul`` of (tokens x in)
by (in x out), fp32, on the step's real-token count, in this process with its threads). Steps and reference run
interleaved, so machine noise hits them alike. The table gives each mode's median seconds per step, their ratio, the
share of the padded batches' positions that are padding, each mode's median useful GFLOP/s, the reference's median
GFLOP/s and each mode's share of it (the share of the machine's GEMM throughput a training step reaches).

``--profile`` adds, per task, where a step's time goes: the same steps of both modes once more under
``torch.profiler``, each operator's own (self) CPU time summed into the classes of :data:`OP_CLASSES` (matrix
products, attention's batched products, dropout's random numbers, copies and zero fills, ...), in milliseconds per
step and as shares of the profiled step. The profiler's own cost inflates every class a little, and alike.
``--csv FILE`` writes the table, and the profile's beside it (``FILE_profile.csv``).
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import os
import statistics
import time
from pathlib import Path
from typing import Any, Sequence

from csv_table import add_csv_option, write_csv
from startup import cpu_name
from istar_plugin.cli import set_environment

set_environment()  # before torch: the console scripts' CPU allocator setting

import torch  # noqa: E402

from istar_plugin import config as config_module  # noqa: E402
from istar_plugin.config import compose  # noqa: E402
from istar_plugin.models.preflight import hidden_size, num_layers  # noqa: E402
from istar_plugin.registry import CRITERIONS, MODELS, TASKS  # noqa: E402
from istar_plugin.runtime.batching import collate, epoch_order  # noqa: E402
from istar_plugin.training.divergence_guard import NonFiniteGuard  # noqa: E402
from istar_plugin.training.optim import build_optimizer  # noqa: E402
from istar_plugin.training.step import OptimizerStep  # noqa: E402

TASK_NAMES = ("sst2", "rte", "mrpc", "squad", "lm")
TASK_MODELS = {"lm": "smollm2"}  # the others train --model
TASK_DATA = {"lm": "sst2"}  # the folder of DATA_ROOT a task reads, when not its own name
TASK_SETTINGS = {
    "squad": ("data.train_file=dev-v1.1.json",),  # the stored SQuAD data holds its dev split only
    "lm": ("data.text_from=sst2",),
}


OP_CLASSES = (
    ("matrix products (linear layers, covariance)", ("aten::mm", "aten::addmm", "aten::addmm_", "aten::addmv",
                                                     "aten::dot", "aten::mv")),
    ("batched matrix products (attention)", ("aten::bmm", "aten::baddbmm", "aten::_scaled_dot_product")),
    ("softmax", ("aten::_softmax", "aten::_log_softmax", "aten::_softmax_backward_data",
                 "aten::_log_softmax_backward_data")),
    ("dropout's random numbers", ("aten::bernoulli", "aten::uniform_", "aten::normal_", "aten::native_dropout",
                                  "aten::random_")),
    ("activations", ("aten::gelu", "aten::silu", "aten::tanh", "aten::relu", "aten::threshold_backward")),
    ("layer norm", ("aten::native_layer_norm", "aten::_fused_rms_norm", "aten::rsqrt")),
    ("optimizer and clipping", ("aten::_fused_adamw", "aten::_foreach_", "aten::linalg_vector_norm", "aten::clamp")),
    ("gathers and scatters (packing, embeddings)", ("aten::index", "aten::gather", "aten::scatter",
                                                    "aten::embedding", "aten::masked_scatter")),
    ("copies and zero fills", ("aten::copy_", "aten::fill_", "aten::zero_", "aten::cat", "aten::_to_copy")),
    ("element-wise arithmetic", ("aten::add", "aten::mul", "aten::div", "aten::sub", "aten::rsub", "aten::where",
                                 "aten::masked_fill", "aten::neg", "aten::sqrt", "aten::pow", "aten::exp",
                                 "aten::log", "aten::eq", "aten::ne", "aten::lt", "aten::gt", "aten::ge", "aten::le",
                                 "aten::bitwise", "aten::logical", "aten::isneginf", "aten::isinf", "aten::isnan",
                                 "aten::nan_to_num", "aten::abs", "aten::sign")),
    ("reductions", ("aten::sum", "aten::mean", "aten::all", "aten::any", "aten::max", "aten::min", "aten::amax",
                    "aten::amin", "aten::argmax", "aten::cumsum", "aten::nll_loss", "aten::var", "aten::std")),
)
"""(class, operator name prefixes): where :func:`op_class` puts a profiled operator; the first match wins, and an
operator of none (views, allocation, autograd's bookkeeping, the criterion's small operators) is "everything else"."""
OTHER_OPS = "everything else (views, allocation, autograd)"


def op_class(name: str) -> str:
    """The class of :data:`OP_CLASSES` a profiled operator named ``name`` belongs to.

    >>> op_class("aten::addmm"), op_class("aten::bernoulli_"), op_class("aten::index_select"), op_class("aten::view")
    ('matrix products (linear layers, covariance)', "dropout's random numbers", \
'gathers and scatters (packing, embeddings)', 'everything else (views, allocation, autograd)')
    """
    for label, prefixes in OP_CLASSES:
        if any(name == prefix or name.startswith(prefix) for prefix in prefixes):
            return label
    return OTHER_OPS


def profile_classes(run_step, groups) -> dict[str, float]:
    """Seconds per step of each :data:`OP_CLASSES` class (self CPU time) over ``run_step(group)`` for ``groups``."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        for group in groups:
            run_step(group)
    seconds: dict[str, float] = {}
    for event in profiler.key_averages():
        label = op_class(event.key)
        seconds[label] = seconds.get(label, 0.0) + event.self_cpu_time_total / 1e6 / len(groups)
    return seconds


def profile_table(task_name: str, seconds: dict[bool, dict[str, float]]) -> list[str]:
    """The rows of ``--profile``'s table of one task: each class's milliseconds per step and share, in both modes."""
    totals = {mode: sum(classes.values()) for mode, classes in seconds.items()}
    labels = [label for label, _ in OP_CLASSES] + [OTHER_OPS]
    rows = []
    for label in sorted(labels, key=lambda name: -seconds[True].get(name, 0.0)):
        cells = [f"{1e3 * seconds[mode].get(label, 0.0):.1f} | {seconds[mode].get(label, 0.0) / totals[mode]:.1%}"
                 for mode in (False, True)]
        rows.append(f"| {task_name} | {label} | {cells[0]} | {cells[1]} |")
    rows.append(f"| {task_name} | profiled step | {1e3 * totals[False]:.1f} | 100% | {1e3 * totals[True]:.1f} | 100% |")
    return rows


def weight_matmuls(config: Any, gated_ffn: bool, lm_head: bool) -> list[tuple[int, int, int]]:
    """(in, out, count) of the weight matmuls every real token passes through in a forward: per layer the query, key,
    value and output projections and the FFN's two matmuls (three when ``gated_ffn``: Llama's gate, up and down),
    and the LM head once when ``lm_head``. Embeddings, norms, the task heads' few outputs and LoRA's rank-r matmuls
    (under 1% of the rest) are left out.

    >>> from types import SimpleNamespace
    >>> minilm = SimpleNamespace(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536)
    >>> weight_matmuls(minilm, gated_ffn=False, lm_head=False)
    [(384, 384, 6), (384, 384, 12), (384, 384, 6), (384, 1536, 6), (1536, 384, 6)]
    """
    hidden, layers, heads = hidden_size(config), num_layers(config), config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    key_value = (getattr(config, "num_key_value_heads", None) or heads) * head_dim  # grouped-query attention
    ffn = config.intermediate_size
    shapes = [(hidden, heads * head_dim, layers), (hidden, key_value, 2 * layers), (heads * head_dim, hidden, layers),
              (hidden, ffn, (2 if gated_ffn else 1) * layers), (ffn, hidden, layers)]
    return shapes + ([(hidden, config.vocab_size, 1)] if lm_head else [])


def step_flops(shapes: Sequence[tuple[int, int, int]], weights_train: bool, hidden: int, layers: int,
               lengths: Sequence[int]) -> int:
    """Model FLOPs of one training step on sequences of ``lengths`` real tokens. Forward: 2 * tokens * in * out per
    weight matmul (``shapes``, :func:`weight_matmuls`), and 2 * 2 * length^2 * hidden per sequence and layer for the
    attention's scores and values. The backward's input and weight gradients cost about 2x the forward: a step is
    3x the forward where the weights train, 2x for frozen weights (LoRA's base weights and the LM head: an input
    gradient, no weight gradient); the attention's matmuls, of activations alone, 3x.

    >>> shapes = [(4, 8, 1)]  # one layer, one 4 x 8 weight; sequences of 3 and 1 tokens
    >>> step_flops(shapes, True, hidden=4, layers=1, lengths=[3, 1]), step_flops(shapes, False, 4, 1, [3, 1])
    (1248, 992)
    """
    tokens = sum(lengths)
    weights = sum(2 * tokens * fan_in * fan_out * count for fan_in, fan_out, count in shapes)
    attention = layers * sum(2 * 2 * length**2 * hidden for length in lengths)
    return (3 if weights_train else 2) * weights + 3 * attention


def bare_gemm_rate(weights: Sequence[tuple[torch.Tensor, int]], token_counts: Sequence[int]) -> float:
    """FLOP/s of ``torch.matmul`` of random (tokens x in) inputs by ``weights`` ((in x out), each ``count`` times),
    once per micro-batch of ``token_counts`` tokens."""
    flops, seconds = 0, 0.0
    for tokens in token_counts:
        inputs = {weight.shape[0]: torch.randn(tokens, weight.shape[0]) for weight, _ in weights}
        started = time.perf_counter()
        for weight, count in weights:
            for _ in range(count):
                torch.matmul(inputs[weight.shape[0]], weight)
        seconds += time.perf_counter() - started
        flops += sum(2 * tokens * weight.shape[0] * weight.shape[1] * count for weight, count in weights)
    return flops / seconds


def task_batches(cfg, task, tokenizer, count: int) -> list[list[dict[str, torch.Tensor]]]:
    """``count`` optimizer steps' seeded random micro-batches (``optim.grad_accum`` each) of the task's training
    split, encoded and collated as the trainer does."""
    examples = task.load("train")
    check_tokens = getattr(task, "check_tokens", None)  # lm drops the texts that predict no token
    if check_tokens is not None:
        check_tokens({"train": examples}, lambda: tokenizer)
    features = task.encode(examples, tokenizer, train=True)
    size = cfg.batch_size // cfg.optim.grad_accum
    order = epoch_order(len(features), seed=0, epoch=0, rank=0, world_size=1)
    micro = [collate([features[i] for i in order[start : start + size]], tokenizer.pad_token_id or 0,
                     torch.device("cpu")) for start in range(0, size * count * cfg.optim.grad_accum, size)]
    return [micro[start : start + cfg.optim.grad_accum] for start in range(0, len(micro), cfg.optim.grad_accum)]


def optimizer_step(model: torch.nn.Module, criterion, cfg) -> OptimizerStep:
    """The trainer's optimizer step for ``model`` in fp32 on the CPU: its AdamW and schedule, clipping at
    ``optim.max_grad_norm``."""
    optimizer, scheduler = build_optimizer(model, cfg.optim, total_steps=1000)
    cpu = torch.device("cpu")
    return OptimizerStep(model, model, criterion, optimizer, scheduler, torch.amp.GradScaler("cpu", enabled=False),
                         NonFiniteGuard(cpu), contextlib.nullcontext, cpu, 1, cfg.optim.max_grad_norm)


def task_config(task_name: str, data_root: Path, preset: str, padding_free: bool):
    """The recipe's config of ``task_name`` on ``preset``, its data read from ``data_root``, in fp32."""
    return compose([f"recipe={task_name}", f"model={preset}", "data.source=files",
                    f"data.dir={data_root / TASK_DATA.get(task_name, task_name)}", *TASK_SETTINGS.get(task_name, ()),
                    "precision=fp32", f"model.padding_free={padding_free}"])


def time_task(task_name: str, data_root: Path, model_preset: str, repeats: int,
              profiled: bool = False) -> tuple[str, list[str]]:
    """The table row of one task: both modes' medians on the same ``repeats`` steps' batches, and the GEMM
    reference's; with ``profiled``, also the rows of :func:`profile_table` (else none)."""
    preset = TASK_MODELS.get(task_name, model_preset)
    cfg = task_config(task_name, data_root, preset, padding_free=False)
    task = TASKS.build(cfg.task, config_module.data_config(cfg))
    models = {}
    for padding_free in (False, True):
        torch.manual_seed(0)
        model_cfg = config_module.model_config(task_config(task_name, data_root, preset, padding_free))
        models[padding_free] = MODELS.get(cfg.model.adapter).cls(model_cfg, task.kind, max(task.num_labels, 1)).train()
    models[True].load_state_dict(models[False].state_dict())
    padded_model = models[False]
    batches = task_batches(cfg, task, padded_model.tokenizer, repeats + 1)
    criterion = CRITERIONS.get(cfg.criterion.name).cls(config_module.criterion_config(cfg), task.kind)
    width, layers, lora = padded_model.hidden_size, padded_model.num_layers, padded_model.lora.enabled
    if hasattr(criterion, "shrinkage_cov"):  # I-STAR's Sigma_S
        criterion.shrinkage_cov = torch.cov(torch.randn(4 * width, width).T)
    steps = {mode: optimizer_step(model, criterion, cfg) for mode, model in models.items()}
    shapes = weight_matmuls(padded_model.transformer.config, gated_ffn=padded_model.is_decoder,
                            lm_head=task.kind == "language_modeling")
    gemm_weights = [(torch.randn(fan_in, fan_out), count) for fan_in, fan_out, count in shapes]

    def step(padding_free: bool, group) -> float:
        started = time.perf_counter()
        steps[padding_free](group, step=1)
        return time.perf_counter() - started

    def lengths(group) -> list[int]:
        return [length for batch in group for length in batch["attention_mask"].sum(dim=1).tolist()]

    def token_counts(group) -> list[int]:
        return [int(batch["attention_mask"].sum()) for batch in group]

    for padding_free in (False, True):  # warm-up
        step(padding_free, batches[0])
    bare_gemm_rate(gemm_weights, token_counts(batches[0]))
    times: dict[bool, list[float]] = {False: [], True: []}
    rates: dict[bool, list[float]] = {False: [], True: []}
    gemm_rates = []
    for group in batches[1:]:
        flops = step_flops(shapes, not lora, width, layers, lengths(group))
        for padding_free in (False, True):
            times[padding_free].append(step(padding_free, group))
            rates[padding_free].append(flops / times[padding_free][-1])
        gemm_rates.append(bare_gemm_rate(gemm_weights, token_counts(group)))
    padded, packed = statistics.median(times[False]), statistics.median(times[True])
    useful = {mode: statistics.median(mode_rates) / 1e9 for mode, mode_rates in rates.items()}
    gemm = statistics.median(gemm_rates) / 1e9
    masks = [batch["attention_mask"] for group in batches[1:] for batch in group]
    share = 1 - sum(int(mask.sum()) for mask in masks) / sum(mask.numel() for mask in masks)
    micro_batch = cfg.batch_size // cfg.optim.grad_accum
    profile_rows = []
    if profiled:
        profile_rows = profile_table(task_name, {mode: profile_classes(functools.partial(step, mode), batches[1:])
                                                 for mode in (False, True)})
    return (f"| {task_name} | {preset}{' + LoRA' if lora else ''}, {cfg.criterion.name} | "
            f"{cfg.optim.grad_accum} x {micro_batch} x {cfg.data.max_length} | {share:.1%} | "
            f"{padded:.3f} | {packed:.3f} | {packed / padded:.2f} | {useful[False]:.1f} | {useful[True]:.1f} | "
            f"{gemm:.1f} | {useful[False] / gemm:.0%} | {useful[True] / gemm:.0%} |"), profile_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", choices=TASK_NAMES, default=list(TASK_NAMES))
    parser.add_argument("--data-root", type=Path, default=Path("../shared/data"))
    parser.add_argument("--model", default="minilm",
                        help="the GLUE tasks' and SQuAD's preset of recipes/model/ (lm trains smollm2 with LoRA)")
    parser.add_argument("--repeats", type=int, default=5, help="steps timed per task and mode (distinct batches)")
    parser.add_argument("--profile", action="store_true", help="also the table of where a step's time goes")
    add_csv_option(parser)
    args = parser.parse_args()
    print(f"CPU: {cpu_name()}; {torch.get_num_threads()} threads; load average "
          f"{' '.join(f'{load:.2f}' for load in os.getloadavg())}; torch {torch.__version__}; fp32; "
          f"{args.repeats} steps per task and mode and as many bare GEMM passes, interleaved")
    header = ["task", "model, criterion", "micro-batches x sequences x max_length", "padding share", "padded s/step",
              "padding-free s/step", "ratio", "useful GFLOP/s padded", "useful GFLOP/s padding-free",
              "bare GEMM GFLOP/s", "share padded", "share padding-free"]
    profile_header = ["task", "operator class", "padded ms/step", "padded share", "padding-free ms/step",
                      "padding-free share"]
    print(f"| {' | '.join(header)} |\n|{'---|' * len(header)}")
    rows, profiles = [], []
    for task_name in args.tasks:
        row, profile_rows = time_task(task_name, args.data_root, args.model, args.repeats, args.profile)
        print(row, flush=True)
        rows.append(row)
        profiles += profile_rows
    if profiles:
        print("\nWhere a step's time goes (self CPU time per operator class, under torch.profiler):")
        print(f"| {' | '.join(profile_header)} |\n|{'---|' * len(profile_header)}")
        print("\n".join(profiles))
    write_csv(args.csv, header, map(cells, rows))
    if profiles:
        write_csv(args.csv, profile_header, map(cells, profiles), part="profile")


def cells(row: str) -> list[str]:
    """A printed Markdown row's cells.

    >>> cells("| sst2 | 0.52 |")
    ['sst2', '0.52']
    """
    return [cell.strip() for cell in row.strip().strip("|").split("|")]


if __name__ == "__main__":
    main()

"""What a run config holds: :class:`RunConfig` and :class:`OptimConfig` declare each top-level and ``optim.*`` key
once, with the choices and defaults the composition needs besides; :data:`ADDED_KEYS` and
:func:`as_configured_today` read a run written before a key existed as a config written today would say it."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

from ..data.config import DataConfig
from ..models.config import ModelConfig
from ..settings import added_keys, setting

GROUPS = ("recipe", "criterion", "model")  # chosen by name on the command line (recipe=sst2), not by dotted key
DEFAULT_CRITERION = "cross_entropy"  # when neither the command line nor the recipe's defaults: chooses one
DEFAULT_MODEL = "minilm"  # likewise
DEFAULT_ADAPTER = "hf_auto"  # model.adapter of a model preset that names none
FILE_KEYS = ("data.dir", "data.train_file", "data.eval_file")  # read with data.source=files, which one of them implies
PATH_KEYS = ("output_dir", "init_from", "recipe", *FILE_KEYS, "data.cache_dir", "model.name_or_path")
"""Keys that may hold a path: composing expands a leading ``~`` or ``~user`` in them."""

PRECISIONS = ("fp32", "bf16", "fp16")
PRECISION_CHOICES = ("auto", *PRECISIONS)
DEVICE_PATTERN = re.compile(r"auto|cpu|cuda(:\d+)?|mps")
_SEED = dict(low=0, high=2 ** 32 - 1)  # what numpy, torch and random all take
_EXAMPLES = dict(low=1, high=2 ** 20)  # examples in a batch (or batches per step): a larger count is a slip
_STEPS = dict(low=1, high=10 ** 9)  # optimizer steps: no run takes a billion


@dataclass
class OptimConfig:
    """``optim.*``: AdamW and its learning-rate schedule."""

    lr: float = setting(2e-5, help="peak learning rate (AdamW)", low=0, low_open=True)
    weight_decay: float = setting(0.01, help="AdamW weight decay", low=0)
    warmup_ratio: float = setting(0.06, help="share of the optimizer steps warming the learning rate up", low=0, high=1)
    adam_eps: float = setting(1e-8, help="AdamW epsilon", low=0, low_open=True)
    epochs: int = setting(3, help="passes over the training set", low=1, high=10 ** 6)
    grad_accum: int = setting(2, help="batches accumulated per optimizer step (the paper: 2)", **_EXAMPLES)
    max_grad_norm: float = setting(1.0, help="gradient clipping norm; 0 disables clipping", low=0)
    schedule: str = setting("linear", help="after warmup: linear decay to 0, or constant",
                            choices=("linear", "constant"))
    overflow_patience: int = setting(25, help="fp16: consecutive steps the GradScaler may skip on overflow before the "
                                     "run fails", low=0)


@dataclass
class RunConfig:
    """The top-level keys; composing fills ``criterion`` and ``model`` with the chosen ones' settings."""

    engine: str = setting("istar", help="what trains the run: the toolkit's trainer (istar), or a registered engine "
                          "(sentence_transformers)", added=True)
    task: str = setting("movie_snippets", help="the registered task (istar-run --list tasks)")
    recipe: Optional[str] = setting(None, help="the recipe YAML the config starts from (or recipe=PATH.yaml): task, "
                                    "data, optimizer and the criterion settings tuned per model")
    criterion: Any = setting(None, help="the registered criterion (criterion.name) and its settings (criterion.*; "
                             "istar-run --help criterion.KEY)")
    model: Any = setting(None, help="a preset (recipes/model/NAME.yaml) or a registered adapter: sets model.name, "
                         "model.adapter and ModelConfig's settings (model.*)")
    data: DataConfig = setting(default_factory=DataConfig, help="where the task's examples come from (data.*)")
    optim: OptimConfig = setting(default_factory=OptimConfig, help="the optimizer and its schedule (optim.*)")
    batch_size: int = setting(32, help="training examples per batch", **_EXAMPLES)
    eval_batch_size: Optional[int] = setting(None, help="evaluation examples per batch; None: batch_size", **_EXAMPLES)
    seed: int = setting(42, help="seeds the model's head, dropout and the data order", **_SEED)
    max_steps: Optional[int] = setting(None, help="optimizer steps; caps the epochs", **_STEPS)
    eval_every: Optional[int] = setting(None, help="optimizer steps between evaluations; None: at each epoch end",
                                        **_STEPS)
    init_from: Optional[str] = setting(None, help="a finished run's directory, or a Hugging Face model folder "
                                       "(istar_plugin.runtime.init_from)")
    patience: Optional[int] = setting(None, help="early stopping: evaluations on data.validation_split without "
                                      "improvement")
    eval_before_training: bool = setting(True, help="the step-0 evaluation: metric and IsoScore* before fine-tuning")
    save_every: Optional[int] = setting(None, help="optimizer steps between checkpoints; always at each epoch end",
                                        **_STEPS)
    keep_checkpoints: Optional[int] = setting(None, help="None: the last 2 while running, none once finished (model/ "
                                              "stays); N: the last N", low=1,
                                              refused="{key} must be an integer >= 1 (or null: none once the run "
                                                      "finished), got {value}")
    log_every: int = setting(10, help="optimizer steps between log lines", **_STEPS)
    output_dir: str = setting("runs/${task}/${criterion.name}/seed${seed}", help="the run directory")
    resume: bool = setting(True, help="continue from output_dir's latest checkpoint; false: refuse a directory that "
                           "has one")
    device: str = setting("auto", help="auto | cpu | cuda | cuda:N | mps")
    precision: str = setting("auto", help="auto: bf16 where native, else fp16 on GPU, fp32 on CPU",
                             choices=PRECISION_CHOICES)
    progress: bool = setting(True, help="tqdm bars on a terminal, else a log line every log_every steps and per "
                             "evaluation")
    tensorboard: bool = setting(True, help="write TensorBoard logs in output_dir/tensorboard")


ADDED_KEYS: dict[str, Any] = {**added_keys(RunConfig), **added_keys(ModelConfig, "model.")}
"""Each key added since older runs were written, at the value that does what those runs did."""


def as_configured_today(flat: dict[str, Any], used_precision: Optional[str] = None) -> dict[str, Any]:
    """A run's flat config as written today: :data:`ADDED_KEYS` it lacks filled in, ``precision=auto`` as used."""
    today = {**ADDED_KEYS, **flat}
    if used_precision is not None and today.get("precision") == "auto":
        today["precision"] = used_precision
    return today

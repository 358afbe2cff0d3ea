"""The generic fine-tuning loop assembled from the registries: task, model adapter and criterion.

AdamW with linear warmup and decay, gradient accumulation and clipping, mixed precision where the device
has it, seeded batch order, evaluation with the task's metrics and the IsoScore* of the evaluation token
cloud, atomic checkpoints with every RNG state, and exact resume (mid-epoch included).

>>> from istar_plugin.config import compose
>>> cfg = compose(["recipe=movie_snippets", "max_steps=2", "output_dir=/tmp/doc_run"])  # doctest: +SKIP
>>> Trainer(cfg).fit()["step"]  # doctest: +SKIP
2
"""
from __future__ import annotations

import contextlib
import functools
import math
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from tqdm.auto import tqdm

from .. import config as config_module
from ..data.packaged import seeded_split
from ..errors import ConfigError, DivergedError, ModelError, RunDirError
from ..hooks import Hook
from ..isotropy import CovarianceAccumulator, isoscore_from_cov, partition_isotropy
from ..metrics import collapsed
from ..models.preflight import check_model_limits
from ..registry import CRITERIONS, MODELS, TASKS
from ..storage.atomic import (
    atomic_write_text,
    remove_stale_temporaries,
)
from ..storage.checkpoints import Checkpoints
from ..storage.lock import RunDirLock
from ..storage.logs import MetricsLog, TensorBoardLog
from ..storage.results import RESULTS, ResultsRecord, failed_record, read_results, write_results
from . import export
from .batching import epoch_order
from .distributed import barrier, gather_to_all, init_from_env
from .divergence_guard import NonFiniteGuard, likely_cause
from .early_stopping import EarlyStopping
from .head_isotropy import head_input_isotropy
from .init_from import resolve as resolve_init_from
from .progress import criterion_description, eval_line, train_line
from .rng import rng_state, seed_everything, set_rng_state
from .step_statistics import IntervalStatistics

TENSOR_FIELDS = ("input_ids", "attention_mask", "token_type_ids", "labels", "start_positions", "end_positions")


RESUMABLE_CHANGES = {"progress", "tensorboard", "log_every", "resume", "output_dir", "device", "eval_every", "save_every",
                     "max_steps", "keep_checkpoints", "optim.overflow_patience", "data.sort_eval_by_length"}


def config_changes(saved: dict, current: dict, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ, ignoring those a resumed run may change (logging, placement, max_steps).

    >>> config_changes({"seed": 1, "optim": {"lr": 0.1}, "progress": True}, {"seed": 1, "optim": {"lr": 0.2}, "progress": False})
    ['optim.lr']
    """
    changed = []
    for key in sorted(set(saved) | set(current)):
        name = f"{prefix}{key}"
        if name in RESUMABLE_CHANGES:
            continue
        old, new = saved.get(key), current.get(key)
        if isinstance(old, dict) and isinstance(new, dict):
            changed += config_changes(old, new, f"{name}.")
        elif old != new:
            changed.append(name)
    return changed


def _unlock_on_failure(init):
    """Release the run directory's lock when ``Trainer.__init__`` fails after taking it."""

    @functools.wraps(init)
    def wrapper(self, *args, **kwargs):
        try:
            init(self, *args, **kwargs)
        except BaseException:
            self.close()
            raise

    return wrapper


class Trainer:
    """Fine-tunes one model on one task with one criterion; ``fit()`` returns the final results.

    The main process holds the run directory's lock (:mod:`~istar_plugin.storage.lock`) from construction to the
    end of ``fit()`` (or ``close()``); data are read and checked before the model's weights are loaded.
    """

    run_lock: Optional[RunDirLock] = None

    @_unlock_on_failure
    def __init__(self, cfg: DictConfig, hooks: Sequence[Hook] = ()):
        self.cfg = cfg
        self.dist = init_from_env(cfg.device)
        self.rank, self.world_size, self.device = self.dist.rank, self.dist.world_size, self.dist.device
        self.output_dir = Path(cfg.output_dir)
        if self.dist.is_main:  # before anything heavy: a second run into this directory is refused at once
            self.run_lock = RunDirLock(self.output_dir).acquire()
            for directory in (self.output_dir, self.output_dir / "checkpoints"):
                remove_stale_temporaries(directory)  # left by a kill during an atomic write
        if cfg.batch_size % self.world_size:
            raise ConfigError(f"batch_size {cfg.batch_size} (global) must be divisible by the world size {self.world_size}")
        self.local_batch_size = cfg.batch_size // self.world_size
        self.eval_batch_size = cfg.eval_batch_size or cfg.batch_size
        self.show_progress = bool(cfg.progress) and self.dist.is_main and sys.stderr.isatty()  # tqdm bars
        self.progress_lines = bool(cfg.progress) and self.dist.is_main and not sys.stderr.isatty()  # log lines
        seed_everything(cfg.seed)

        self.task = TASKS.build(cfg.task, config_module.data_config(cfg))
        self.train_examples = self.task.load("train")  # a bad data file fails here, before the model loads
        self.eval_examples = self.task.load("eval")
        check_model_limits(cfg)  # from the model's config.json: max_length, criterion.layers
        model_cfg = config_module.model_config(cfg)
        init_source = None
        if cfg.init_from:  # checked from its files, before the model loads
            init_source = resolve_init_from(cfg.init_from, cfg.task, self.task.label_names, model_cfg.name_or_path)
            model_cfg = init_source.model_config(model_cfg)
        try:
            self.model = MODELS.get(cfg.model.adapter).cls(model_cfg, self.task.kind, max(self.task.num_labels, 1))
        except (OSError, ImportError) as error:
            raise ModelError(f"model {cfg.model.name_or_path!r} cannot be loaded: {' '.join(str(error).split())[:300]}") from None
        if init_source is not None:
            init_source.load_into(self.model)
        self.tokenizer = self.model.tokenizer
        self.criterion = CRITERIONS.get(cfg.criterion.name).cls(config_module.criterion_config(cfg), self.task.kind)
        adapt = getattr(self.criterion, "adapt", None)  # the criterion's changes to the model (criterions.Criterion)
        if adapt is not None:
            adapt(self.model)
        self.trainable_parameters = sum(p.numel() for p in self.model.parameters() if p.requires_grad)
        self.model.to(self.device)
        self.hooks: list[Hook] = [*self.criterion.hooks(), *hooks]
        self.wrapped = self._wrap(self.model)
        if self.world_size > 1:  # same initial weights (DDP broadcasts rank 0's), independent dropout per rank
            seed_everything(cfg.seed + 1_000_003 * self.rank)

        split = cfg.data.validation_split
        if split:  # the same held-out examples for every seed and stage (data.split_seed)
            self.train_examples, validation = seeded_split(self.train_examples, split, cfg.data.split_seed)
            features = self.task.encode(validation, self.tokenizer, train=False)
            self.hooks.append(EarlyStopping(validation, features, self.task.main_metric, cfg.patience))
        self.train_features = self.task.encode(self.train_examples, self.tokenizer, train=True)
        self.eval_features = self.task.encode(self.eval_examples, self.tokenizer, train=False)

        accumulation = cfg.optim.grad_accum
        self.batches_per_epoch = math.ceil(math.ceil(len(self.train_features) / self.world_size) / self.local_batch_size)
        self.steps_per_epoch = math.ceil(self.batches_per_epoch / accumulation)
        self.total_steps = self.steps_per_epoch * cfg.optim.epochs
        if cfg.max_steps is not None:
            self.total_steps = min(self.total_steps, cfg.max_steps)
        self.optimizer, self.scheduler = self._optimizer()
        self.precision = self._precision()
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.precision == "fp16")
        criterion_lam = cfg.criterion.get("lam")
        self.guard = NonFiniteGuard(
            self.device, patience=cfg.optim.overflow_patience if self.precision == "fp16" else 0,
            hint=lambda loss, norm: likely_cause(cfg.optim.lr, self.precision, criterion_lam),
        )

        self.step = 0
        self.epoch = 0
        self.batches_done = 0  # micro-batches of the current epoch already consumed
        self.history: list[dict[str, Any]] = []
        self.embedding_before: dict[str, float] = {}  # I1/I2 of the word embeddings before fine-tuning
        self.checkpoints = Checkpoints(self.output_dir, keep_last=cfg.keep_checkpoints or 2)
        is_main = self.dist.is_main
        self.metrics_log = MetricsLog(self.output_dir / "metrics.jsonl") if is_main else None
        self.tensorboard = TensorBoardLog(self.output_dir / "tensorboard", enabled=is_main and bool(cfg.tensorboard))

    # ----------------------------------------------------------------- setup
    def _wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        if self.world_size == 1:
            return model
        from torch.nn.parallel import DistributedDataParallel

        device_ids = [self.device.index] if self.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=device_ids)

    def _optimizer(self):
        cfg = self.cfg.optim
        no_decay = ("bias", "LayerNorm.weight", "layer_norm.weight", "norm.weight")
        decay, plain = [], []
        for name, parameter in self.model.named_parameters():
            if parameter.requires_grad:
                (plain if name.endswith(no_decay) else decay).append(parameter)
        optimizer = torch.optim.AdamW(  # fused: one kernel for all parameters, no host sync per parameter
            [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": plain, "weight_decay": 0.0}],
            lr=cfg.lr,
            eps=cfg.adam_eps,
            fused=True,
        )
        warmup = int(cfg.warmup_ratio * self.total_steps)

        def linear(step: int) -> float:
            if step < warmup:
                return (step + 1) / (warmup + 1)
            if cfg.schedule == "constant":
                return 1.0
            return max(0.0, (self.total_steps - step) / max(1, self.total_steps - warmup))

        return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, linear)

    def _precision(self) -> str:
        chosen = self.cfg.precision
        if chosen == "auto":
            if self.device.type != "cuda":
                return "fp32"
            return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        if chosen == "fp16" and self.device.type == "cpu":
            raise ConfigError("precision=fp16 needs a GPU; use fp32 or bf16 on CPU")
        return chosen

    def autocast(self):
        if self.precision == "fp32":
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if self.precision == "bf16" else torch.float16
        return torch.autocast(device_type=self.device.type, dtype=dtype)

    # ----------------------------------------------------------------- data
    def collate(self, features: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        """Pad a list of features to the longest one and move the tensors to the device.

        ``token_positions`` (flat indices of the real tokens) is computed here, on the host, so that
        selecting the padding-free token cloud needs no host-device sync. On a GPU the tensors are
        pinned and copied asynchronously (the copy overlaps the previous batch's compute).
        """
        lengths = [len(f["input_ids"]) for f in features]
        width = max(lengths)
        pad_id = self.tokenizer.pad_token_id or 0
        batch: dict[str, torch.Tensor] = {}
        for name in TENSOR_FIELDS:
            if name not in features[0] or features[0][name] is None:
                continue
            values = [f[name] for f in features]
            if name in ("input_ids", "attention_mask", "token_type_ids"):
                fill = pad_id if name == "input_ids" else 0
                values = [list(v) + [fill] * (width - len(v)) for v in values]
                batch[name] = torch.tensor(values, dtype=torch.long)
            else:
                dtype = torch.float32 if isinstance(values[0], float) else torch.long
                batch[name] = torch.tensor(values, dtype=dtype)
        batch["token_positions"] = torch.cat([torch.arange(length) + row * width for row, length in enumerate(lengths)])
        if self.device.type == "cuda":
            batch = {k: v.pin_memory() for k, v in batch.items()}
        return {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}

    def _train_batches(self, epoch: int) -> Iterator[dict[str, torch.Tensor]]:
        lengths = [len(f["input_ids"]) for f in self.train_features] if self.cfg.data.group_by_length else None
        order = epoch_order(len(self.train_features), self.cfg.seed, epoch, self.rank, self.world_size,
                            lengths, self.cfg.batch_size)
        size = self.local_batch_size
        for start in range(self.batches_done * size, len(order), size):
            yield self.collate([self.train_features[i] for i in order[start : start + size]])

    # ----------------------------------------------------------------- logging
    def log(self, values: dict[str, Any], step: int) -> None:
        if not self.dist.is_main:
            return
        self.metrics_log.append({"step": step, **values})
        self.tensorboard.scalars(values, step)

    def say(self, line: str) -> None:
        """A progress line on stderr, when progress is on and stderr is not a terminal (where bars show it)."""
        if self.progress_lines:
            print(line, file=sys.stderr, flush=True)

    def _log_interval(self, interval: IntervalStatistics) -> None:
        # the one host sync of the interval: the statistics travel with the divergence guard's state
        means = interval.means(self.world_size, read=lambda totals: self.guard.check(self.world_size, also=totals))
        seconds_per_step = (time.perf_counter() - interval.started) / interval.steps
        self.log({**{f"train/{k}": v for k, v in means.items()}, "train/seconds_per_step": seconds_per_step}, self.step)
        self.say(train_line(self.step, self.total_steps, means, seconds_per_step))

    # ----------------------------------------------------------------- checkpoints
    def state_dict(self, rng_states: Optional[list] = None) -> dict[str, Any]:
        """Everything a resumed run needs; ``rng_states`` holds every rank's RNG state (default: this rank's)."""
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "rng": rng_states or [rng_state()],
            "step": self.step,
            "epoch": self.epoch,
            "batches_done": self.batches_done,
            "history": self.history,
            "embedding_before": self.embedding_before,
            "hooks": [hook.state_dict() for hook in self.hooks],
            "config": OmegaConf.to_container(self.cfg, resolve=True),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        # the rate of this run's schedule at the restored step (the saved rate ends the saved run's schedule,
        # 0 when it finished; max_steps may have grown since); the same value when nothing changed
        for group, base_lr, rate in zip(self.optimizer.param_groups, self.scheduler.base_lrs, self.scheduler.lr_lambdas):
            group["lr"] = base_lr * rate(self.scheduler.last_epoch)
        self.scaler.load_state_dict(state["scaler"])
        saved_world_size = len(state["rng"])  # one RNG state per rank of the run that saved it
        if saved_world_size == self.world_size:
            set_rng_state(state["rng"][self.rank])
        elif 0 < state["batches_done"] < self.batches_per_epoch:
            raise RunDirError(
                f"{self.output_dir}: the latest checkpoint (step {state['step']}) was taken mid-epoch by "
                f"{saved_world_size} rank(s); resume it on {saved_world_size}, not {self.world_size} (each rank's "
                "share of the epoch depends on the number of ranks), or from an epoch-end checkpoint"
            )
        else:  # an epoch boundary: the next epoch's order is split afresh; only the random streams must be new
            warnings.warn(f"resuming a {saved_world_size}-rank checkpoint on {self.world_size} rank(s): random "
                          "streams reseeded from (seed, step, rank); not bitwise the run an unchanged world size gives")
            seed_everything(self.cfg.seed + 1_000_003 * self.rank + 7919 * state["step"])
        self.step, self.epoch, self.batches_done = state["step"], state["epoch"], state["batches_done"]
        self.history = state["history"]
        self.embedding_before = state.get("embedding_before", {})
        for hook, hook_state in zip(self.hooks, state["hooks"]):
            hook.load_state_dict(hook_state)

    def save_checkpoint(self) -> None:
        self.guard.check(self.world_size)  # never a checkpoint of a diverged model
        rng_states = gather_to_all(rng_state(), self.world_size)  # each rank resumes its own random streams
        if self.dist.is_main:
            self.checkpoints.save(self.state_dict(rng_states), self.step)
        barrier(self.world_size)

    def _restore(self) -> bool:
        latest = self.checkpoints.latest()
        if latest is None:
            return False
        if not self.cfg.resume:
            raise RunDirError(f"{self.output_dir} already holds a run (checkpoint {latest.name}) and resume=false; "
                             "resume=true continues it, or choose another output_dir")
        state = self.checkpoints.load_latest(map_location="cpu")
        changed = config_changes(state["config"], OmegaConf.to_container(self.cfg, resolve=True))
        if changed:
            raise RunDirError(
                f"{self.output_dir} holds a checkpoint of a different run (changed: {', '.join(changed)}); "
                "resume with the same settings or choose another output_dir"
            )
        self.load_state_dict(state)
        return True

    # ----------------------------------------------------------------- evaluation
    def evaluate(self, examples: Optional[Sequence[dict]] = None, features: Optional[Sequence[dict]] = None,
                 isotropy: bool = True) -> dict[str, Any]:
        """Task metrics and, with ``isotropy``, IsoScore* (zeta = 0, padding excluded) overall and per layer and
        the head input's IsoScore and EV_1..3; on the evaluation split unless ``examples``/``features`` are given."""
        examples, features = (self.eval_examples, self.eval_features) if features is None else (examples, features)
        outputs, per_layer = self.predict(features, isotropy)
        return self._finish_evaluation(outputs, per_layer if isotropy else None, examples, features)

    @torch.no_grad()
    def predict(self, features: Optional[Sequence[dict]] = None,
                isotropy: bool = True) -> tuple[dict[str, list], list[CovarianceAccumulator]]:
        """This rank's share of ``features`` (default: the evaluation split) through the model in eval mode: per
        feature (by index) its logits (or unpadded start/end logits) and head input, and per layer the statistics
        of the padding-free token cloud (with ``isotropy``).

        With ``data.sort_eval_by_length`` the batches hold features of similar lengths (longest first), so
        little padding is computed; results are keyed by feature index, so the order is restored later.
        Outputs stay on the device until the pass ends: no host sync per batch.
        """
        features = self.eval_features if features is None else features
        was_training = self.model.training
        self.model.eval()
        indices = list(range(self.rank, len(features), self.world_size))
        if self.cfg.data.sort_eval_by_length:
            indices.sort(key=lambda i: len(features[i]["input_ids"]), reverse=True)
        per_layer = [CovarianceAccumulator(self.model.hidden_size, device=self.device) for _ in range(self.model.num_layers)]
        on_device: dict[str, list] = {"logits": [], "start": [], "end": [], "head_input": []}
        bar = tqdm(total=len(indices), desc="eval", unit="ex", disable=not self.show_progress, leave=False)
        for start in range(0, len(indices), self.eval_batch_size):
            chunk = indices[start : start + self.eval_batch_size]
            batch = self.collate([features[i] for i in chunk])
            with self.autocast():
                output = self.model(batch)
            if isotropy:
                for accumulator, layer_points in zip(per_layer, self.model.token_cloud(output, None)):
                    accumulator.update(layer_points)
                if output.head_input is not None:
                    on_device["head_input"].append(output.head_input.float())
            if self.task.kind == "extractive_qa":
                on_device["start"].append(output.start_logits.float())
                on_device["end"].append(output.end_logits.float())
            else:
                on_device["logits"].append(output.logits.float())
            bar.update(len(chunk))
        bar.close()
        self.model.train(was_training)
        outputs: dict[str, list] = {"index": indices, "logits": [], "start": [], "end": [], "head_input": []}
        for name, parts in on_device.items():
            for part in parts:  # one device-to-host copy per batch, after the last batch was queued
                outputs[name].extend(part.cpu().numpy())
        if self.task.kind == "extractive_qa":  # each feature's logits without its padding
            lengths = [len(features[i]["input_ids"]) for i in indices]
            outputs["start"] = [row[:length] for row, length in zip(outputs["start"], lengths)]
            outputs["end"] = [row[:length] for row, length in zip(outputs["end"], lengths)]
        return outputs, per_layer

    def _finish_evaluation(self, outputs: dict[str, list], per_layer: Optional[list[CovarianceAccumulator]],
                           examples: Sequence[dict], features: Sequence[dict]) -> dict[str, Any]:
        if self.world_size > 1:
            for accumulator in per_layer or ():
                accumulator.all_reduce()
        gathered = gather_to_all(outputs, self.world_size)
        by_index: dict[int, tuple] = {}
        head_inputs: dict[int, np.ndarray] = {}
        for part in gathered:
            for position, index in enumerate(part["index"]):
                if self.task.kind == "extractive_qa":
                    by_index[index] = (part["start"][position], part["end"][position])
                else:
                    by_index[index] = part["logits"][position]
                if part["head_input"]:
                    head_inputs[index] = part["head_input"][position]
        ordered = [by_index[i] for i in range(len(features))]  # each feature exactly once
        if self.task.kind == "extractive_qa":
            width = max(len(s) for s, _ in ordered)
            start = np.full((len(ordered), width), -1e4, dtype=np.float32)
            end = np.full_like(start, -1e4)
            for row, (s, e) in enumerate(ordered):
                start[row, : len(s)], end[row, : len(e)] = s, e
            model_outputs: Any = (start, end)
        else:
            model_outputs = np.stack(ordered)
        predictions, references = self.task.postprocess(examples, features, model_outputs)
        metrics = self.task.compute_metrics(predictions, references)
        if per_layer is None:
            return metrics
        union = CovarianceAccumulator(self.model.hidden_size, device=self.device)
        for accumulator in per_layer:
            union.merge(accumulator)
        if head_inputs:  # one vector per example: classification and regression
            metrics.update(head_input_isotropy(torch.from_numpy(np.stack([head_inputs[i] for i in range(len(features))]))))
        result = {
            **metrics,
            "eval_isoscore_star": isoscore_from_cov(union.covariance()).item(),
            "eval_isoscore_star_per_layer": [isoscore_from_cov(a.covariance()).item() for a in per_layer],
            **self._embedding_isotropy(),
        }
        one_class = collapsed(self.task.kind, predictions)
        if one_class is not None:
            result["collapsed"] = one_class
        return result

    def _embedding_isotropy(self) -> dict[str, float]:
        """I1 and I2 (partition-function isotropy) of the word-embedding matrix, when the model has one."""
        word_embeddings = getattr(self.model, "word_embeddings", None)
        if word_embeddings is None:
            return {}
        i1, i2 = partition_isotropy(word_embeddings().detach())
        return {"embedding_i1": i1.item(), "embedding_i2": i2.item()}

    def _record_evaluation(self) -> dict[str, Any]:
        self.guard.check(self.world_size)  # a diverged model's accuracy would look like a result
        result = self.evaluate()
        record = {"step": self.step, "epoch": self.epoch, **result}
        self.history.append(record)
        self.say(eval_line(self.step, self.total_steps, result, self.task.main_metric))
        scalars = {f"eval/{k.removeprefix('eval_')}": v for k, v in result.items() if isinstance(v, (int, float))}
        scalars.update({f"eval/isoscore_star_layer{i + 1}": v for i, v in enumerate(result["eval_isoscore_star_per_layer"])})
        scalars.update({f"eval/cls_ev{k}": v for k, v in enumerate(result.get("cls_explained_variance") or (), start=1)})
        self.log(scalars, self.step)
        return record

    def _evaluate_unless_done(self) -> None:
        """Evaluate now unless this step already was (an ``eval_every`` step that ends an epoch or the run)."""
        if not self.history or self.history[-1]["step"] != self.step:
            self._record_evaluation()

    # ----------------------------------------------------------------- training
    def fit(self) -> dict[str, Any]:
        """Train (resuming from the latest checkpoint in the run directory, if any) and write ``results.json``.

        A run whose loss or gradient norm becomes non-finite raises :class:`~istar_plugin.errors.DivergedError`
        after writing ``results.json`` as ``{"status": "failed", "reason": ...}``.
        """
        try:
            return self._fit()
        except DivergedError as error:
            self._write_failure(str(error))
            raise
        finally:
            self.close()

    def close(self) -> None:
        """Release the run directory (also done by ``fit()``); a no-op on other ranks and when already closed."""
        if getattr(self, "metrics_log", None) is not None:
            self.metrics_log.close()
        if self.run_lock is not None:
            self.run_lock.release()
            self.run_lock = None

    def _fit(self) -> dict[str, Any]:
        cfg = self.cfg
        finished = self._finished_results()
        if finished is not None:
            self._say_complete(finished["step"])
            return finished
        resumed = self._restore()  # first: a refused resume must leave the directory's config.yaml as it was
        if resumed and self.step >= self.total_steps and self.history and self.history[-1]["step"] == self.step:
            self._say_complete(self.step)
            return self._write_results()
        if self.dist.is_main:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.output_dir / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
            self.tensorboard.config(OmegaConf.to_container(cfg, resolve=True), [f"eval/{self.task.main_metric}", "eval/isoscore_star"])
        if not resumed:
            self.embedding_before = self._embedding_isotropy()
            if self.embedding_before:
                self.log({f"embedding/{k.removeprefix('embedding_')}_before": v for k, v in self.embedding_before.items()}, self.step)
        for hook in self.hooks:
            hook.on_fit_start(self)
        if not resumed:
            self.log({"model/trainable_parameters": self.trainable_parameters}, self.step)
        if not resumed and cfg.eval_before_training:
            self._record_evaluation()
        self.wrapped.train()
        accumulation = cfg.optim.grad_accum
        bar = tqdm(total=self.total_steps, initial=self.step, desc="train", unit="step", disable=not self.show_progress)
        interval = IntervalStatistics()
        while self.step < self.total_steps and self.epoch < cfg.optim.epochs and not self._stop_requested():
            for hook in self.hooks:
                hook.on_epoch_start(self, self.epoch)
            batches = self._train_batches(self.epoch)
            while self.step < self.total_steps:
                group = [b for _, b in zip(range(accumulation), batches)]
                if not group:
                    break
                stats = self._optimizer_step(group)
                self.batches_done += len(group)
                self.step += 1
                bar.update(1)
                interval.add(stats)
                if self.step % cfg.log_every == 0 or self.step == self.total_steps:
                    self._log_interval(interval)
                    interval = IntervalStatistics()
                for hook in self.hooks:
                    hook.on_step_end(self, self.step, stats)
                if cfg.eval_every and self.step % cfg.eval_every == 0 and self.step < self.total_steps:
                    self._record_evaluation()
                if cfg.save_every and self.step % cfg.save_every == 0:
                    self.save_checkpoint()
            if self.batches_done >= self.batches_per_epoch:
                for hook in self.hooks:
                    hook.on_epoch_end(self, self.epoch)
                self.epoch, self.batches_done = self.epoch + 1, 0
                if self.step < self.total_steps:
                    self._evaluate_unless_done()
                    self.save_checkpoint()
        bar.close()
        self.guard.check(self.world_size)
        for hook in self.hooks:
            if hasattr(hook, "on_fit_end"):
                hook.on_fit_end(self)
        self._evaluate_unless_done()
        self.save_checkpoint()
        self._export_model()
        results = self._write_results()
        if self.dist.is_main and cfg.keep_checkpoints is None and self.exported:
            self.checkpoints.keep_newest(0)  # the run is complete: model/ and results.json are what remains
        return results

    def _export_model(self) -> None:
        """``output_dir/model`` in Hugging Face format; a model that cannot be saved so (an adapter without
        ``save_pretrained``, modules inserted before the head) keeps its last checkpoint instead."""
        self.exported = False
        if not self.dist.is_main:
            return
        try:
            export.export_model(self.model, self.task.kind, self.task.label_names, self.output_dir / export.MODEL_DIR)
            self.exported = True
        except (TypeError, ValueError) as error:  # no save_pretrained(), or the adapter refuses (inserted modules)
            warnings.warn(f"no {export.MODEL_DIR}/ written ({error}); the last checkpoint is kept")

    def _finished_results(self) -> Optional[dict[str, Any]]:
        """The saved results of a run that finished here and whose checkpoints were removed, else None."""
        results_path = self.output_dir / RESULTS
        if self.checkpoints.latest() is not None or not results_path.is_file():
            return None
        record = read_results(results_path)  # a malformed or too new file: one ResultsError line
        if not record.finished:  # a diverged run is trained again, not returned as a result
            return None
        if not self.cfg.resume:
            raise RunDirError(f"{self.output_dir} already holds a finished run (results.json) and resume=false; "
                              "choose another output_dir")
        saved_config = OmegaConf.to_container(OmegaConf.load(self.output_dir / "config.yaml"), resolve=True)
        changed = config_changes(saved_config, OmegaConf.to_container(self.cfg, resolve=True))
        if changed:
            raise RunDirError(f"{self.output_dir} holds the results of a different run (changed: {', '.join(changed)}); "
                              "choose another output_dir")
        if record.step is None or record.step < self.total_steps:
            raise RunDirError(f"{self.output_dir} holds a run finished at step {record.step} whose checkpoints were "
                              f"removed when it finished (keep_checkpoints); it cannot continue to step {self.total_steps}: "
                              "choose another output_dir")
        return record.to_json()

    def _say_complete(self, step: int) -> None:
        if self.dist.is_main:
            print(f"{self.output_dir}: already complete ({step}/{self.total_steps} steps, "
                  f"{criterion_description(OmegaConf.to_container(self.cfg.criterion))}); nothing to do", file=sys.stderr)

    def _stop_requested(self) -> bool:
        return any(getattr(hook, "stop_training", False) for hook in self.hooks)

    def _optimizer_step(self, group: list[dict[str, torch.Tensor]]) -> dict[str, Any]:
        """One optimizer step over the micro-batches of ``group``; its statistics stay on the device (no host sync)."""
        totals: dict[str, Any] = {}
        norm = None
        for index, batch in enumerate(group):
            sync = index == len(group) - 1 or self.world_size == 1
            context = contextlib.nullcontext() if sync else self.wrapped.no_sync()
            with context:
                with self.autocast():
                    output = self.wrapped(batch)
                result = self.criterion(self.model, output, batch)
                self.scaler.scale(result.loss / len(group)).backward()
            totals["loss"] = totals.get("loss", 0.0) + result.loss.detach() / len(group)
            for name, value in result.stats.items():
                totals[name] = totals.get(name, 0.0) + torch.as_tensor(value, device=self.device) / len(group)
        if self.cfg.optim.max_grad_norm > 0:
            self.scaler.unscale_(self.optimizer)
            norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.optim.max_grad_norm)
            totals["grad_norm"] = norm.detach()
        self.guard.observe(self.step + 1, totals["loss"], norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        totals["lr"] = self.optimizer.param_groups[0]["lr"]  # the rate this step used, before the schedule moves on
        self.scheduler.step()
        return totals

    def _write_failure(self, reason: str) -> None:
        """``results.json`` saying the run failed and why, with no metric a reader could take for a result."""
        if self.dist.is_main:
            write_results(self.output_dir / RESULTS, failed_record(
                reason, self.cfg.task, self.cfg.model.name, OmegaConf.to_container(self.cfg.criterion, resolve=True),
                self.cfg.seed))
        self.tensorboard.close()

    def _write_results(self) -> dict[str, Any]:
        final = self.history[-1]
        hooked: dict[str, Any] = {}
        for hook in self.hooks:
            hooked.update(hook.results() if hasattr(hook, "results") else {})
        record = ResultsRecord(
            status="finished",
            task=self.cfg.task,
            model=self.cfg.model.name,
            criterion=OmegaConf.to_container(self.cfg.criterion, resolve=True),
            seed=self.cfg.seed,
            step=self.step,
            epoch=self.epoch,
            metrics={k: v for k, v in final.items() if k not in ("step", "epoch")},
            main_metric=self.task.main_metric,
            label_names=tuple(self.task.label_names),
            init_from=self.cfg.init_from,
            trainable_parameters=self.trainable_parameters,
            initial=self.history[0] if self.history[0]["step"] == 0 else None,
            history=tuple(self.history),
            eval_isoscore_star=final["eval_isoscore_star"],
            eval_isoscore_star_per_layer=tuple(final["eval_isoscore_star_per_layer"]),
            **{k: final.get(k) for k in ("embedding_i1", "embedding_i2", "collapsed", "cls_isoscore")},
            cls_explained_variance=None if final.get("cls_explained_variance") is None else tuple(final["cls_explained_variance"]),
            **{f"{k}_before": v for k, v in self.embedding_before.items()},
            validation=hooked.pop("validation", None),
            top_level_metrics=tuple(k for k in final if k in self.task.metric_names),
            extra=hooked,
        )
        if self.dist.is_main:
            write_results(self.output_dir / RESULTS, record)
        self.tensorboard.close()
        return record.to_json()

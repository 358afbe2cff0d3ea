"""The fine-tuning loop (engine ``istar``): optimizer steps, evaluations and checkpoints for an exact resume, and the
read-only :class:`TrainerView` its hooks see."""
from __future__ import annotations

import itertools
import operator
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

import torch
from omegaconf import DictConfig, OmegaConf
from tqdm.auto import tqdm

from ..errors import DivergedError
from ..hooks import Hook, HookDispatcher, ReadOnlyView, TrainingControl
from ..models.frozen_backbone import CACHED_LINE, cache_if_frozen
from ..registry import ENGINES
from ..storage.checkpoints import Checkpoints
from ..storage.predictions import write_predictions
from ..storage.results import ResultsRecord
from . import export
from ..runtime.batching import collate, epoch_order
from ..runtime.builder import load_weights
from .distributed import barrier, gather_to_all, init_from_env, wrap_model
from .evaluation import Evaluator, embedding_isotropy
from ..runtime.precision import autocast, precision_line
from .progress import PhaseClock, complete_line, eval_line, train_line
from .resume import rates_at_restored_step, restore_random_streams, resumable_state
from ..runtime.rng import rng_state, seed_everything
from .run_directory import RunDirectory
from .setup_steps import batch_sizes, build_optimization, encode_features, load_data, load_model, schedule_length
from .signals import StopSignal, stopped
from .step import IntervalStatistics, OptimizerStep


@ENGINES.register("istar")
class Trainer:
    """Fine-tunes one model on one task with one criterion; ``fit()`` returns the final results."""

    stop_signal = StopSignal()  # no signal; fit() replaces it with one that listens while it trains

    def __init__(self, cfg: DictConfig, hooks: Sequence[Hook] = ()):
        self.clock = PhaseClock()  # this attempt's wall time by phase, said and logged at its end
        try:
            with self.clock("setup"):
                self._build(cfg, hooks)
        except BaseException:
            if getattr(self, "run_dir", None) is not None:
                self.close()
            raise

    def _build(self, cfg: DictConfig, hooks: Sequence[Hook]) -> None:
        self.cfg = cfg
        dist = init_from_env(cfg.device)
        self.rank, self.world_size, self.device, self.is_main = dist.rank, dist.world_size, dist.device, dist.is_main
        self.output_dir = Path(cfg.output_dir)
        self.run_dir = RunDirectory(self.output_dir, is_main=self.is_main, tensorboard=cfg.tensorboard).open()
        self.local_batch_size, self.eval_batch_size = batch_sizes(cfg, self.world_size)
        self.show_progress = bool(cfg.progress) and self.is_main and sys.stderr.isatty()  # tqdm bars
        self.progress_lines = bool(cfg.progress) and self.is_main and not sys.stderr.isatty()  # log lines
        self.checkpoints = Checkpoints(self.output_dir, keep_last=cfg.keep_checkpoints or 2)
        seed_everything(cfg.seed)
        data = load_data(cfg)
        self.task, self.eval_examples, self.data_fingerprint = data.task, data.eval, data.fingerprint
        self.model, self.criterion = load_model(cfg, self.task, self.output_dir, self.checkpoints)
        self._tell(getattr(self.model, "padding_free_line", None))
        self.tokenizer = self.model.tokenizer
        self.trainable_parameters = sum(p.numel() for p in self.model.parameters() if p.requires_grad)
        self.frozen_backbone_cached = cache_if_frozen(self.model, cfg.model.get("frozen_dropout", False),
                                                      self.output_dir)
        constant = getattr(self.criterion, "constant_penalty", lambda: None)()  # a penalty that cannot change the model
        self._tell(constant and f"warning: {constant}")
        self.model.to(self.device)
        self.wrapped = wrap_model(self.model, self.world_size, self.device)
        if self.world_size > 1:  # each rank's dropout differs
            seed_everything(cfg.seed + 1_000_003 * self.rank)
        (self.train_examples, self.train_features, self.eval_features, self.validation_examples,
         self.validation_features, feature_hooks, warning) = encode_features(cfg, self.task, data, self.tokenizer)
        self._tell(warning and f"warning: {warning}")
        self.hooks: list[Hook] = [*self.criterion.hooks(), *hooks, *feature_hooks]
        self.batches_per_epoch, self.steps_per_epoch, self.total_steps = schedule_length(
            cfg, len(self.train_features), self.world_size, self.local_batch_size)
        self.optimizer, self.scheduler, self.precision, self.scaler, self.guard = build_optimization(
            cfg, self.model, self.total_steps, self.device)
        self.optimizer_step = OptimizerStep(self.model, self.wrapped, self.criterion, self.optimizer, self.scheduler,
                                            self.scaler, self.guard, self.autocast, self.device, self.world_size,
                                            cfg.optim.max_grad_norm)
        self.step, self.epoch, self.batches_done = 0, 0, 0  # batches_done: micro-batches of the current epoch
        self.history: list[dict[str, Any]] = []
        self.evaluated_predictions: tuple[Optional[int], Any] = (None, None)  # (step, (predictions, references))
        self.embedding_before: dict[str, float] = {}
        self.evaluator = Evaluator(self.task, self.model, self.eval_examples, self.eval_features, collate=self.collate,
                                   autocast=self.autocast, batch_size=self.eval_batch_size, rank=self.rank,
                                   world_size=self.world_size, device=self.device,
                                   sort_by_length=cfg.data.sort_eval_by_length, show_progress=self.show_progress)
        self.control = TrainingControl()
        self.run_view = TrainerView(self)
        self.dispatch = HookDispatcher(self.hooks, self.run_view)

    def autocast(self):
        """The forward pass's mixed-precision context."""
        return autocast(self.precision, self.device)

    def collate(self, features: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        """Pad a list of features to the longest one and move the tensors to the device."""
        return collate(features, self.tokenizer.pad_token_id or 0, self.device)

    def _train_batches(self, epoch: int) -> Iterator[dict[str, torch.Tensor]]:
        lengths = [len(f["input_ids"]) for f in self.train_features] if self.cfg.data.group_by_length else None
        order = epoch_order(len(self.train_features), self.cfg.seed, epoch, self.rank, self.world_size,
                            lengths, self.cfg.batch_size)
        size = self.local_batch_size
        for start in range(self.batches_done * size, len(order), size):
            yield self.collate([self.train_features[i] for i in order[start : start + size]])

    def log(self, values: dict[str, Any], step: int) -> None:
        self.run_dir.log(values, step)

    def _tell(self, line: Optional[str]) -> None:
        """``line`` on stderr from the main process, whatever ``progress`` says (nothing for None)."""
        if line and self.is_main:
            print(line, file=sys.stderr, flush=True)

    def say(self, line: str, *, even_with_bars: bool = False) -> None:
        """A progress line on stderr when stderr is no terminal; ``even_with_bars``: also on a terminal."""
        if self.progress_lines or (even_with_bars and self.show_progress):
            print(line, file=sys.stderr, flush=True)

    def _log_interval(self, interval: IntervalStatistics) -> None:
        means = interval.means(self.world_size, read=lambda totals: self.guard.check(self.world_size, also=totals))
        seconds_per_step = (time.perf_counter() - interval.started) / interval.steps
        self.log({**{f"train/{k}": v for k, v in means.items()}, "train/seconds_per_step": seconds_per_step}, self.step)
        self.say(train_line(self.step, self.total_steps, means, seconds_per_step))

    def state_dict(self, rng_states: Optional[list] = None) -> dict[str, Any]:
        """Everything a resumed run needs; ``rng_states`` holds every rank's RNG state (default: this rank's)."""
        return {"model": getattr(self.model, "checkpoint_state", self.model.state_dict)(),  # LoRA: trainable alone
                "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                "scaler": self.scaler.state_dict(), "rng": rng_states or [rng_state()], "step": self.step,
                "epoch": self.epoch, "batches_done": self.batches_done, "history": self.history,
                "embedding_before": self.embedding_before, "hooks": self.dispatch.state_dicts(),
                "config": OmegaConf.to_container(self.cfg, resolve=True), "data": self.data_fingerprint,
                "metrics_bytes": self.run_dir.metrics_bytes()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        load_weights(self.model, state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        rates_at_restored_step(self.optimizer, self.scheduler)
        self.scaler.load_state_dict(state["scaler"])
        restore_random_streams(state, self.rank, self.world_size, self.batches_per_epoch, self.cfg.seed,
                               self.output_dir)
        self.step, self.epoch, self.batches_done = state["step"], state["epoch"], state["batches_done"]
        self.history = state["history"]
        self.embedding_before = state.get("embedding_before", {})
        self.dispatch.load_state_dicts(state["hooks"])
        self.run_dir.restart_logs(self.step, state.get("metrics_bytes"))

    def save_checkpoint(self) -> None:
        self.guard.check(self.world_size)  # never a checkpoint of a diverged model
        with self.clock("checkpoints"):
            rng_states = gather_to_all(rng_state(), self.world_size)
            if self.is_main:
                self.checkpoints.save(self.state_dict(rng_states), self.step)
            barrier(self.world_size)

    def _restore(self) -> Optional[str]:
        """The name of the checkpoint this run continues from (its state now loaded), None for a new run."""
        state = resumable_state(self.output_dir, self.checkpoints, OmegaConf.to_container(self.cfg, resolve=True),
                                self.data_fingerprint)
        if state is None:
            return None
        self.load_state_dict(state)
        return self.checkpoints.paths()[self.step].name

    def evaluate(self, examples: Optional[Sequence[dict]] = None, features: Optional[Sequence[dict]] = None,
                 isotropy: bool = True) -> dict[str, Any]:
        """Task metrics and isotropy on the evaluation split or on ``examples``/``features``."""
        return self.evaluator.evaluate(examples, features, isotropy)

    def predict(self, features: Optional[Sequence[dict]] = None, isotropy: bool = True):
        return self.evaluator.predict(features, isotropy)  # this rank's share: Evaluator.predict

    def _record_evaluation(self) -> dict[str, Any]:
        self.guard.check(self.world_size)  # a diverged model's accuracy would look like a result
        with self.clock("evaluation"):
            result = self.evaluate()
        self.evaluated_predictions = (self.step, self.evaluator.last_predictions)
        record = {"step": self.step, "epoch": self.epoch, **result}
        self.history.append(record)
        self.say(eval_line(self.step, self.total_steps, result, self.task.main_metric))
        scalars = {f"eval/{k.removeprefix('eval_')}": v for k, v in result.items() if isinstance(v, (int, float))}
        per_layer = enumerate(result["eval_isoscore_star_per_layer"], start=1)
        scalars.update({f"eval/isoscore_star_layer{k}": v for k, v in per_layer})
        scalars.update({f"eval/cls_ev{k}": v for k, v in enumerate(result.get("cls_explained_variance") or (), 1)})
        self.log(scalars, self.step)
        return record

    def _evaluate_unless_done(self) -> None:
        if not self.history or self.history[-1]["step"] != self.step:
            self._record_evaluation()

    def fit(self) -> dict[str, Any]:
        """Train (resuming from the latest checkpoint, if any) and write ``results.json`` (a diverged run's: failed)."""
        try:
            return self._fit()
        except DivergedError as error:
            self.run_dir.write_failure(str(error), self.cfg)
            raise
        finally:
            self.close()

    def close(self) -> None:
        """Release the run directory (also done by ``fit()``)."""
        self.run_dir.close()

    def _fit(self) -> dict[str, Any]:
        finished = self.run_dir.finished(self.cfg, self.total_steps, self.checkpoints)
        if finished is not None:
            self._tell(complete_line(self.output_dir, finished["step"], self.total_steps, self.cfg.criterion))
            return finished
        resumed = self._restore()  # first: a refused resume must leave the directory's config.yaml as it was
        if resumed and self.step >= self.total_steps and self.history and self.history[-1]["step"] == self.step:
            self._tell(complete_line(self.output_dir, self.step, self.total_steps, self.cfg.criterion))
            return self._write_results()
        with StopSignal(enabled=self.world_size == 1) as self.stop_signal:  # under torchrun its teardown rules
            self._start(resumed)  # its step-0 evaluation listens too
            if self.stop_signal.received is not None:
                self._stop_for_signal()
            with self.clock("training"):
                self._train()
        return self._finish()

    def _finish(self) -> dict[str, Any]:
        """The hooks' end, the final evaluation, the last checkpoint, ``model/`` and ``results.json``."""
        self.guard.check(self.world_size)
        if self.batches_done:  # max_steps ended training within an epoch: its held-out split is measured once more
            self._validate()
        with self.clock("hooks"):
            self.dispatch.fit_end()
        if (annotations := self.control.take_evaluation_request()) is not None:
            self._record_evaluation().update(annotations)  # e.g. early stopping restored the best weights
        self._evaluate_unless_done()
        self.save_checkpoint()
        with self.clock("model folder"):
            exported = self._export_model()
        self.log({f"time/{phase.replace(' ', '_')}": seconds for phase, seconds in self.clock.seconds.items()},
                 self.step)
        self.say(self.clock.line(), even_with_bars=True)
        results = self._write_results()
        lora = getattr(getattr(self.model, "lora", None), "enabled", False)  # keeps its small last checkpoint
        if self.is_main and self.cfg.keep_checkpoints is None and exported and not lora:
            self.checkpoints.keep_newest(0)  # the run is complete: model/ and results.json are what remains
        return results

    def _stop_for_signal(self) -> None:
        """Checkpoint this step (unless just done) and stop with :class:`Stopped`, saying where and how to resume."""
        if self.checkpoints.latest() is None or max(self.checkpoints.paths()) != self.step:
            self.save_checkpoint()
        raise stopped(self.stop_signal.received, self.step, self.total_steps, self.epoch,
                      self.checkpoints.paths()[self.step], self.output_dir)

    def _start(self, resumed: Optional[str]) -> None:
        """The run directory's marker and config, a new run's "before" measurements, the hooks' start."""
        if resumed:
            self.say(f"resuming {self.output_dir} from step {self.step} of {self.total_steps} (checkpoint {resumed})",
                     even_with_bars=True)
        else:  # an attempt killed before its first checkpoint logged steps this run logs again
            self.run_dir.restart_logs()
        self.run_dir.start(self.cfg, board_metrics=(f"eval/{self.task.main_metric}", "eval/isoscore_star"))
        if not resumed:
            self.embedding_before = embedding_isotropy(self.model)
            if self.embedding_before:
                names = {k: f"embedding/{k.removeprefix('embedding_')}_before" for k in self.embedding_before}
                self.log({names[k]: v for k, v in self.embedding_before.items()}, self.step)
        with self.clock("hooks"):
            self.dispatch.fit_start()
        self.say(precision_line(self.cfg.precision, self.precision, self.device), even_with_bars=True)
        if self.frozen_backbone_cached:
            self.say(CACHED_LINE, even_with_bars=True)
        if not resumed:
            self.log({"model/trainable_parameters": self.trainable_parameters}, self.step)
        if not resumed and self.cfg.eval_before_training:
            self._record_evaluation()

    def _train(self) -> None:
        """Epochs of optimizer steps until ``total_steps``, the last epoch, or a hook's stop request."""
        self.wrapped.train()
        bar = tqdm(total=self.total_steps, initial=self.step, desc="train", unit="step", disable=not self.show_progress)
        interval = IntervalStatistics()
        while self.step < self.total_steps and self.epoch < self.cfg.optim.epochs and not self.control.should_stop:
            with self.clock("hooks"):
                self.dispatch.epoch_start(self.epoch)
            if self.stop_signal.received is not None:  # e.g. during the Sigma_S pass, which then ends early
                self._stop_for_signal()
            rest = self._train_batches(self.epoch)  # the epoch's rest, optim.grad_accum micro-batches a step
            while self.step < self.total_steps and (group := list(itertools.islice(rest, self.cfg.optim.grad_accum))):
                stats = self.optimizer_step(group, self.step + 1)
                self.batches_done += len(group)
                self.step += 1
                bar.update(1)
                interval = self._after_step(stats, interval)
            if self.batches_done >= self.batches_per_epoch:
                self._end_epoch()
        bar.close()
        if self.control.should_stop and self.step < self.total_steps:
            self.say(f"training stopped after epoch {self.epoch}, step {self.step} of {self.total_steps}: "
                     f"{self.control.stop_reason}", even_with_bars=True)

    def _after_step(self, stats, interval: IntervalStatistics) -> IntervalStatistics:
        """The step's log line, hooks, evaluation, checkpoint and stop on a signal; returns the next interval."""
        interval.add(stats)
        if self.step % self.cfg.log_every == 0 or self.step == self.total_steps:
            self._log_interval(interval)
            interval = IntervalStatistics()
        with self.clock("hooks"):
            self.dispatch.step_end(self.step, stats)
        if self.cfg.eval_every and self.step % self.cfg.eval_every == 0 and self.step < self.total_steps:
            self._record_evaluation()
        if self.cfg.save_every and self.step % self.cfg.save_every == 0:
            self.save_checkpoint()
        if self.stop_signal.received is not None:
            self._stop_for_signal()
        return interval

    def _end_epoch(self) -> None:
        """The hooks' epoch end and validation, then (unless the run is over) an evaluation and a checkpoint."""
        with self.clock("hooks"):
            self.dispatch.epoch_end(self.epoch)
        self._validate()
        self.epoch, self.batches_done = self.epoch + 1, 0
        if self.step < self.total_steps:
            self._evaluate_unless_done()
            self.save_checkpoint()

    def _validate(self) -> None:
        """The held-out validation split's metrics to the hooks (``on_validation``), when there is one."""
        if self.validation_features:
            with self.clock("evaluation"):
                metrics = self.evaluate(self.validation_examples, self.validation_features, isotropy=False)
            self.dispatch.validation(self.epoch, metrics)

    def _export_model(self) -> bool:
        """Whether ``output_dir/model`` was written (else the last checkpoint is kept)."""
        if not self.is_main:
            return False
        try:
            export.export_model(self.model, self.task.kind, self.task.label_names, self.output_dir / export.MODEL_DIR,
                                what="model folder", run=str(self.output_dir.resolve()), step=self.step)
        except (TypeError, ValueError) as error:  # no save_pretrained(), or the adapter refuses (inserted modules)
            warnings.warn(f"no {export.MODEL_DIR}/ written ({error}); the last checkpoint is kept", stacklevel=2)
            return False
        return True

    def _write_results(self) -> dict[str, Any]:
        cfg, history, final = self.cfg, self.history, self.history[-1]
        hooked = self.dispatch.results()
        hooked["padding_free"] = bool(getattr(self.model, "padding_free", False))  # what model.padding_free computed
        if self.control.should_stop:  # a hook ended training early (early stopping, a search's pruner): said and kept
            hooked["stopped"] = {"reason": self.control.stop_reason, "step": self.step, "epoch": self.epoch}
        explained = final.get("cls_explained_variance")
        record = ResultsRecord(
            status="finished", task=cfg.task, model=cfg.model.name, seed=cfg.seed, step=self.step, epoch=self.epoch,
            criterion=OmegaConf.to_container(cfg.criterion, resolve=True), init_from=cfg.init_from,
            metrics={k: v for k, v in final.items() if k not in ("step", "epoch")}, main_metric=self.task.main_metric,
            label_names=tuple(self.task.label_names), trainable_parameters=self.trainable_parameters,
            initial=history[0] if history[0]["step"] == 0 else None, history=tuple(history),
            eval_isoscore_star=final["eval_isoscore_star"],
            eval_isoscore_star_per_layer=tuple(final["eval_isoscore_star_per_layer"]),
            **{k: final.get(k) for k in ("embedding_i1", "embedding_i2", "collapsed", "cls_isoscore")},
            cls_explained_variance=None if explained is None else tuple(explained),
            **{f"{k}_before": v for k, v in self.embedding_before.items()}, validation=hooked.pop("validation", None),
            top_level_metrics=tuple(k for k in final if k in self.task.metric_names),
            extra={**hooked, "data": self.data_fingerprint, "precision": self.precision})
        if self.is_main:
            step, scored = self.evaluated_predictions
            if step == record.step and scored is not None:  # not when a resume found the last evaluation done
                write_predictions(self.output_dir, self.cfg.task, step, *scored)
        return self.run_dir.write_results(record).to_json()


class TrainerView(ReadOnlyView):
    """What a hook may read of a Trainer (the members of RunView); anything else raises ``AttributeError``."""

    __slots__ = ("__trainer",)

    def __init__(self, trainer) -> None:
        object.__setattr__(self, "_TrainerView__trainer", trainer)

    seed = property(lambda self: self.__trainer.cfg.seed)
    mid_epoch = property(lambda self: self.__trainer.batches_done > 0)  # the epoch resumes part-way
    stop_requested = property(lambda self: self.__trainer.stop_signal.received is not None)

    def say(self, line: str) -> None:
        self.__trainer.say(line)


# the trainer's attributes and methods of the same name
for _name in ("model", "train_features", "eval_batch_size", "rank", "world_size", "device", "step", "total_steps",
              "show_progress", "output_dir", "control", "collate", "autocast", "evaluate", "log"):
    setattr(TrainerView, _name, property(operator.attrgetter(f"_TrainerView__trainer.{_name}")))

"""Engine ``sentence_transformers``: a bi-encoder fine-tuned by sentence-transformers' own trainer (STS-B pairs,
``CosineSimilarityLoss``, wrapped in :class:`~istar_plugin.integrations.st.IStarLoss` for ``criterion=istar``) as an
``istar-run`` run with its run directory.

>>> eval_transforms(384, 4000), eval_transforms(32, 4000), eval_transforms(384, 119)
(('center', 'whiten:256'), ('center', 'whiten:21'), ('center',))
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import torch
from omegaconf import DictConfig, OmegaConf
from transformers import TrainerCallback

from ..config import data_config
from ..data.fingerprint import split_fingerprint
from ..errors import ConfigError
from ..isotropy.streaming import LayerStatistics, stream
from ..metrics import collapsed, compute
from ..models.st_padding_free import transformer_module
from ..models.preflight import num_layers
from ..models.token_cloud import token_cloud
from ..registry import ENGINES, TASKS
from ..storage.predictions import write_predictions
from ..storage.results import ResultsRecord
from ..runtime.builder import build_model
from ..runtime.devices import pick_device
from ..runtime.precision import choose_precision, precision_line
from ..training.progress import complete_line
from ..training.run_directory import RunDirectory
from ..training.setup_steps import schedule_length
from ..training.signals import StopSignal, stopped
from .hf import completed_epochs
from .st_engine_setup import SentenceTransformersSetup

FIT_SENTENCES = 4000  # distinct training sentences the post-hoc transforms are fitted on (ten times MiniLM's width)


def eval_transforms(width: int, fit_sentences: int) -> tuple[str, ...]:
    """The post-hoc transforms every run is also evaluated after: centring, and whitening where enough sentences fit."""
    k = min(256, 2 * width // 3)
    return ("center", f"whiten:{k}") if fit_sentences >= 4 * k else ("center",)


@ENGINES.register("sentence_transformers")
class SentenceTransformersEngine(SentenceTransformersSetup):
    """``SentenceTransformersEngine(cfg).fit()``: train, evaluate and write the run directory."""

    def __init__(self, cfg: DictConfig, hooks: Sequence[Any] = ()):
        self.check_config(cfg)
        if hooks:
            raise ConfigError("engine=sentence_transformers runs no istar-run hooks")
        self.cfg, self.output_dir = cfg, Path(cfg.output_dir)
        self.is_main = int(os.environ.get("RANK", "0")) == 0
        self.device = pick_device(cfg.device, int(os.environ.get("LOCAL_RANK", "0")))
        self.precision = choose_precision(cfg.precision, self.device)  # fp16 on a CPU: refused, as by the trainer
        self.run_dir = RunDirectory(self.output_dir, is_main=self.is_main, tensorboard=cfg.tensorboard).open()
        try:
            self.task = task = TASKS.get(cfg.task).cls(data_config(cfg))
            self.train, self.eval = task.load("train"), task.load("eval")  # bad data fails here, before the model loads
        except BaseException:
            self.run_dir.close()
            raise
        self.data = {"train": split_fingerprint(self.train, task.source_of("train")),
                     "eval": split_fingerprint(self.eval, task.source_of("eval"))}
        # as transformers counts them: each rank's share of the pairs in batches of batch_size, grad_accum a step;
        # max_steps caps the epochs, as in istar-run's trainer (transformers' own max_steps would replace them)
        self.total_steps = schedule_length(cfg, len(self.train), int(os.environ.get("WORLD_SIZE", "1")),
                                           cfg.batch_size).total_steps

    def fit(self) -> dict[str, Any]:
        """Train and evaluate (or return this run's earlier results); ``results.json`` either way."""
        started = time.perf_counter()
        try:
            finished = self.run_dir.finished(self.cfg, self.total_steps)  # another config's results: refused
            if finished is not None:
                if self.is_main:
                    print(complete_line(self.output_dir, finished["step"], self.total_steps, self.cfg.criterion),
                          file=sys.stderr)
                return finished
            try:
                record = self._train_and_evaluate()
            except Exception as error:
                self.run_dir.write_failure(str(error) or type(error).__name__, self.cfg)
                raise
            results = self.run_dir.write_results(record).to_json()
            results["wall_seconds"] = time.perf_counter() - started
            return results
        finally:
            self.run_dir.close()

    def _train_and_evaluate(self) -> ResultsRecord:
        from datasets import Dataset
        from sentence_transformers import SentenceTransformerTrainer
        from sentence_transformers.sentence_transformer.losses import CosineSimilarityLoss
        from transformers import set_seed

        from .st import IsotropyEvaluator, IStarLoss

        cfg = self.cfg
        self.run_dir.restart_logs()  # an earlier attempt's steps are trained and logged again
        self.run_dir.start(cfg)
        set_seed(cfg.seed)
        model = build_model(cfg, self.task, device=self.device).model
        if model.padding_free_line and self.is_main:  # auto where it cannot: why
            print(model.padding_free_line, file=sys.stderr, flush=True)
        low, high = self.task.label_range
        scaled = [(example["label"] - low) / (high - low) for example in self.train]
        first, second = _columns(self.train)
        train = Dataset.from_dict({"sentence1": first, "sentence2": second, "score": scaled})
        stop_signal = StopSignal(enabled=int(os.environ.get("WORLD_SIZE", "1")) == 1)
        loss, callbacks = CosineSimilarityLoss(model), [_RunCallback(self.run_dir, stop_signal)]
        if cfg.criterion.name == "istar":
            c = cfg.criterion
            loss = IStarLoss(model, loss, lam=c.lam, zeta=c.zeta, layers=c.get("layers"),
                             shrinkage_sentences=first + second, shrinkage_points=c.shrinkage_points, seed=cfg.seed)
            callbacks.append(loss.callback())
        trainer = SentenceTransformerTrainer(model=model, args=self._arguments(), train_dataset=train, loss=loss,
                                             callbacks=callbacks)
        print(f"{cfg.task} with sentence-transformers: {len(self.train)} pairs, criterion {cfg.criterion.name}, "
              f"seed {cfg.seed}, device {self.device}, {precision_line(cfg.precision, self.precision, self.device)}",
              file=sys.stderr, flush=True)
        with stop_signal:
            trainer.train()
        if stop_signal.received is not None:
            state = trainer.state
            raise stopped(stop_signal.received, state.global_step, state.max_steps, completed_epochs(state), None,
                          self.output_dir)
        record = self._evaluate(model, trainer, IsotropyEvaluator)
        if self.is_main:
            model.save(str(self.output_dir / "model"))
            trainer_dir = self.output_dir / "trainer"  # the trainer's own folder, empty: no checkpoints are saved
            if trainer_dir.is_dir() and not any(trainer_dir.iterdir()):
                trainer_dir.rmdir()
        return record

    def _arguments(self):
        from sentence_transformers import SentenceTransformerTrainingArguments

        cfg, optim = self.cfg, self.cfg.optim
        constant = "constant_with_warmup" if optim.warmup_ratio else "constant"
        schedule = "linear" if optim.schedule == "linear" else constant
        return SentenceTransformerTrainingArguments(
            output_dir=str(self.output_dir / "trainer"), num_train_epochs=optim.epochs,
            max_steps=self.total_steps if cfg.max_steps else -1,
            per_device_train_batch_size=cfg.batch_size, gradient_accumulation_steps=optim.grad_accum,
            learning_rate=optim.lr, weight_decay=optim.weight_decay, lr_scheduler_type=schedule,
            warmup_steps=min(float(optim.warmup_ratio), 0.999999), adam_epsilon=optim.adam_eps,  # below 1: a share
            max_grad_norm=optim.max_grad_norm, seed=cfg.seed, data_seed=cfg.seed, logging_steps=cfg.log_every,
            eval_strategy="no", save_strategy="no", report_to=[],
            use_cpu=self.device.type == "cpu", bf16=self.precision == "bf16", fp16=self.precision == "fp16",
            disable_tqdm=not (cfg.progress and sys.stderr.isatty()))

    @torch.no_grad()
    def _evaluate(self, model, trainer, evaluator_class) -> ResultsRecord:
        cfg = self.cfg
        first, second = _columns(self.eval)
        references = [e["label"] for e in self.eval]
        fit = list(dict.fromkeys(sum(_columns(self.train), [])))
        if len(fit) > FIT_SENTENCES:  # a seeded sample, in their order
            keep = torch.randperm(len(fit), generator=torch.Generator().manual_seed(cfg.seed))[:FIT_SENTENCES]
            fit = [fit[i] for i in sorted(keep.tolist())]
        width = model.get_embedding_dimension()
        evaluator = evaluator_class(first, second, references, name="eval", batch_size=cfg.eval_batch_size or 64,
                                    transforms=eval_transforms(width, len(fit)), fit_sentences=fit)
        embeddings = evaluator.by_transform(model)
        vectors = model.encode(first + second, batch_size=cfg.eval_batch_size or 64, convert_to_tensor=True).cpu()
        cosine = torch.nn.functional.cosine_similarity(vectors[: len(first)], vectors[len(first):], dim=1).tolist()
        per_layer, pooled = token_isoscores(model, first + second, cfg.eval_batch_size or 64)
        step, epoch = trainer.state.global_step, completed_epochs(trainer.state)  # as istar-run's trainer counts
        final = {"step": step, "epoch": epoch, **compute(cfg.task, cosine, references), "eval_isoscore_star": pooled,
                 "eval_isoscore_star_per_layer": per_layer, "collapsed": collapsed("regression", cosine)}
        if self.is_main:
            write_predictions(self.output_dir, cfg.task, step, cosine, references)
        criterion = OmegaConf.to_container(cfg.criterion, resolve=True)
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        return ResultsRecord(
            status="finished", task=cfg.task, model=cfg.model.name, criterion=criterion, seed=cfg.seed, step=step,
            epoch=epoch, metrics={k: v for k, v in final.items() if k not in ("step", "epoch")},
            main_metric=self.task.main_metric, label_names=tuple(self.task.label_names),
            trainable_parameters=trainable, history=(final,), eval_isoscore_star=pooled,
            eval_isoscore_star_per_layer=tuple(per_layer), collapsed=final["collapsed"],
            top_level_metrics=tuple(self.task.metric_names),
            extra={"engine": "sentence_transformers", "sentence_embeddings": embeddings, "data": self.data,
                   "precision": self.precision, "padding_free": bool(model.padding_free)})  # as computed


@torch.no_grad()
def token_isoscores(model, sentences: list, batch_size: int) -> tuple[list, float]:
    """IsoScore* (zeta 0) of the sentences' real tokens in each transformer layer, and of all layers pooled."""
    from .st import device_features

    config = transformer_module(model).auto_model.config
    was, config.output_hidden_states = config.output_hidden_states, True
    statistics = LayerStatistics(num_layers=num_layers(config), device="cpu")
    model.eval()
    try:
        outputs = (model(device_features(model, sentences[start : start + batch_size]))
                   for start in range(0, len(sentences), batch_size))
        stream(statistics, outputs, lambda out: token_cloud(out["all_layer_embeddings"], out["attention_mask"]))
    finally:
        config.output_hidden_states = was
    return statistics.isoscore_star_per_layer(), statistics.isoscore_star()


def _columns(examples: list) -> tuple[list, list]:
    return [e["text"] for e in examples], [e["text_pair"] for e in examples]


class _RunCallback(TrainerCallback):
    """The trainer's logs, written as ``istar-run`` writes them; a SIGTERM or SIGINT ends training at the step's end."""

    def __init__(self, run_dir: RunDirectory, stop_signal: StopSignal):
        self.run_dir, self.stop_signal = run_dir, stop_signal

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and logs:
            values = {k: v for k, v in logs.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
            self.run_dir.log(values, state.global_step, board_prefix="train")

    def on_step_end(self, args, state, control, **kwargs):
        if self.stop_signal.received is not None:
            control.should_training_stop = True

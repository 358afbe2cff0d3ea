"""``istar-embed``'s work: STS-B sentence embeddings of each layer, raw and after post-hoc transforms fitted on a
fit set, measured by :mod:`istar_plugin.isotropy.embeddings`."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch
from omegaconf import OmegaConf
from transformers import AutoConfig

from ..config import find_yaml, load_yaml
from ..data.config import DataConfig
from ..data.task import get_task
from ..errors import ModelError, RunDirError, one_line
from ..isotropy.embeddings import embedding_measures
from ..models.paths import gguf_options, resolve_model_path
from ..models.sentence_encoder import SentenceEncoder
from ..models.preflight import hidden_size, num_layers
from ..posthoc import Transform
from ..storage.atomic import atomic_torch_save, atomic_write_json, atomic_write_text
from ..storage.exports import read_export_record
from ..storage.ownership import RUN_MARKER
from ..storage.reading import read_text
from ..reports.figures import panels, save_png, style
from ..reports.outputs.embedding_table import report_markdown, unfinished_note
from .analyze import Progress, RunProblem, check_run, final_weights
from .loading import load_run

SPLITS = {"train": "train", "dev": "validation"}


@dataclass(frozen=True)
class StsPairs:
    """Sentence pairs with gold similarity scores, and where they were read from."""

    first: list
    second: list
    scores: list
    source: str

    @property
    def sentences(self) -> list:
        return list(self.first) + list(self.second)

    def __len__(self) -> int:
        return len(self.scores)


def read_sts(sts_dir: str | Path, split: str) -> StsPairs:
    """STS-B pairs of ``split`` (``train`` or ``dev``) from a GLUE STS-B folder (``dev.tsv``, ``train.tsv``)."""
    if split not in SPLITS:
        raise ValueError(f"unknown STS split {split!r}; choices: {', '.join(SPLITS)}")
    task = get_task("stsb", DataConfig(source="files", dir=str(sts_dir), eval_split=SPLITS[split]))
    which = "train" if split == "train" else "eval"
    examples = task.load(which)
    return StsPairs([e["text"] for e in examples], [e["text_pair"] for e in examples],
                    [float(e["label"]) for e in examples], task.source_of(which))


def read_corpus(path: str | Path) -> list:
    """Sentences of a text file, one per line (blank lines skipped), for fitting transforms on a corpus."""
    sentences = [line.strip() for line in read_text(path, "fit corpus").splitlines() if line.strip()]
    if len(sentences) < 2:
        raise ValueError(f"{path}: a fit corpus needs at least 2 non-blank lines, got {len(sentences)}")
    return sentences


def _is_run_dir(path: Path) -> bool:
    return (path / RUN_MARKER).is_file() or (path / "config.yaml").is_file()


def scored_source(source: str) -> dict[str, Any]:
    """What ``istar-embed`` scores for ``source``, checked before any model loads: a run's final model, or a model
    (with the ``export.json`` of an ``istar-export`` folder under ``export``)."""
    path = Path(source)
    if path.is_dir() and _is_run_dir(path):
        try:
            results = check_run(path)
        except RunProblem as problem:
            raise RunDirError(f"MODEL_OR_RUN {problem}; istar-embed scores a finished run's final model only") from None
        return {"model": source, "run_dir": str(path), "step": results.get("step"), "weights": final_weights(path),
                "run_finished": True}
    if path.is_dir() and (path / "adapter_config.json").is_file() and not (path / "config.json").is_file():
        raise ModelError(f"MODEL_OR_RUN {source}: a LoRA adapter in peft's format (adapter_config.json, no "
                         "config.json), not a model by itself; give the run directory it came from, or its merged "
                         "model (a run with model.lora.save_merged=true writes RUN_DIR/model/merged)")
    export = read_export_record(path) if path.is_dir() else None  # istar-export's record of where it came from
    return {"model": source, "run_dir": None, **({"export": export, "run_finished": export["finished_result"]}
                                                 if export else {})}


def _trained_elsewhere(path: Path) -> bool:
    """A run another engine trained (sentence_transformers): its fine-tuned model is the folder ``model/``."""
    return OmegaConf.load(path / "config.yaml").get("engine", "istar") != "istar"


def _model_path(source: str) -> str:
    """The Hugging Face folder or hub name behind ``source``: a run's model, a folder, a preset's model, a hub name."""
    path = Path(source)
    if path.is_dir() and _is_run_dir(path):
        if _trained_elsewhere(path):
            return str(path / "model")
        return resolve_model_path(OmegaConf.load(path / "config.yaml").model.name_or_path)
    if path.is_dir():
        return str(path)
    preset = find_yaml(source, "model")
    return resolve_model_path(load_yaml(preset, "model preset").name_or_path if preset is not None else source)


def model_shape(source: str) -> tuple[int, int]:
    """``(hidden size, transformer layers)`` of the model behind ``source``, from its config alone."""
    try:
        folder, options = gguf_options(_model_path(source))
        config = AutoConfig.from_pretrained(folder, local_files_only=Path(folder).is_dir(), **options)
        return hidden_size(config), num_layers(config)
    except (OSError, ValueError) as error:  # no such folder or hub name, no config, no width or layer count in it
        raise ModelError(f"MODEL_OR_RUN {source}: not a model istar-embed can read ({one_line(error)[:300]})") from None


def open_encoder(source: str, max_length: int = 128) -> SentenceEncoder:
    """The sentence encoder behind ``source``: a run's final model, a folder, a model preset or a hub name."""
    path = Path(source)
    if path.is_dir() and _is_run_dir(path) and not _trained_elsewhere(path):
        model = load_run(path).model  # read only: no lock, nothing written
        return SentenceEncoder(model.model.base_model, model.tokenizer, max_length, source=str(path),
                               pack=model.pack if getattr(model, "padding_free", False) else None)
    model_path = _model_path(source)
    local = Path(gguf_options(model_path)[0]).is_dir()
    return SentenceEncoder.from_pretrained(model_path, max_length, local_files_only=local)


def evaluate_sts(encoder: SentenceEncoder, sts: StsPairs, fit_sentences: list, transforms: Sequence[Transform],
                 pooling: str = "mean", layers: Sequence[int] = (-1,), zeta: float = 0.2,
                 batch_size: int = 64) -> tuple[dict[int, dict[str, dict[str, float]]], dict[int, dict[str, Any]]]:
    """``(results, fitted)``: per hidden-state index and transform, the measures and the fitted tensors."""
    indices = [encoder.layer_index(layer) for layer in layers]
    evaluated = encoder.encode(sts.sentences, pooling, indices, batch_size,
                               progress=Progress(len(sts.sentences), "STS sentences").update)
    fit = encoder.encode(fit_sentences, pooling, indices, batch_size,
                         progress=Progress(len(fit_sentences), "fit sentences").update)
    results: dict[int, dict[str, dict[str, float]]] = {}
    fitted: dict[int, dict[str, Any]] = {}
    for index in indices:
        results[index], fitted[index] = {}, {}
        for transform in transforms:
            transform.fit(fit[index].double())
            moved = transform(evaluated[index].double())
            fit_cov = torch.cov(transform(fit[index].double()).T)
            results[index][transform.name] = embedding_measures(moved, sts.scores, fit_cov=fit_cov, zeta=zeta)
            fitted[index][transform.name] = {key: value.float() for key, value in transform.state_dict().items()}
    return results, fitted


def figure(results: dict[int, dict[str, dict[str, float]]], title: str):
    """Spearman and IsoScore per transform (one layer: bars) or per layer (several: one line per transform)."""
    fig, axes = panels(2, width=5.5, height=4)
    layers = list(results)
    names = list(results[layers[0]])
    for ax, measure, label in zip(axes, ("spearman", "isoscore"), ("STS-B Spearman x100", "IsoScore")):
        if len(layers) == 1:
            values = [results[layers[0]][name][measure] for name in names]
            ax.bar(range(len(names)), [math.nan if value is None else value for value in values], color="#4c72b0")
            ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
            for x, value in enumerate(values):  # an undefined measure: no bar, the word instead
                ax.annotate("undefined" if value is None else f"{value:.2f}" if measure == "spearman" else
                            f"{value:.3f}", (x, value or 0.0), ha="center", va="bottom", fontsize=7)
            style(ax, f"{label}, layer {layers[0]}", "transform", label)
        else:
            for name in names:
                values = [results[layer][name][measure] for layer in layers]  # an undefined one: a gap
                ax.plot(layers, [math.nan if value is None else value for value in values], marker="o", markersize=3,
                        label=name)
            style(ax, label + " per layer", "layer (0 = embeddings)", label)
            ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    return fig


def _fitted_tensors(out: Path, fitted: dict) -> dict[Path, dict]:
    return {out / "transforms" / f"layer{layer}" / (name.replace(":", "-") + ".pt"): state
            for layer, by_transform in fitted.items() for name, state in by_transform.items() if state}


def report_paths(out: Path, fitted: dict) -> list[Path]:
    """The files :func:`write_embedding_report` writes, in the order it writes them (``embeddings.json`` last)."""
    return [*_fitted_tensors(out, fitted), out / "embeddings.md", out / "embeddings.png", out / "embeddings.json"]


def write_embedding_report(out: Path, summary: dict[str, Any], results: dict, fitted: dict) -> list[Path]:
    """Write :func:`report_paths` and return them."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for path, tensors in _fitted_tensors(out, fitted).items():
        path.parent.mkdir(parents=True, exist_ok=True)
        written.append(atomic_torch_save(tensors, path))
    written.append(atomic_write_text(out / "embeddings.md", report_markdown(results, summary.get("scored"))))
    unfinished = " — NOT a finished result" if unfinished_note(summary.get("scored")) else ""
    title = f"{summary['model']} ({summary['pooling']} pooling) on STS-B {summary['split']}{unfinished}"
    written.append(save_png(figure(results, title), out / "embeddings.png"))
    per_layer = {str(layer): by_transform for layer, by_transform in results.items()}
    last = list(results)[-1]
    written.append(atomic_write_json(out / "embeddings.json", {**summary, "per_layer": per_layer,
                                                               "transforms": results[last],
                                                               "transform_order": list(results[last])},
                                     allow_nan=False))
    return written


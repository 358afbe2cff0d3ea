"""``istar-analyze``: the I-STAR paper's representation analyses of finished runs (``analysis.json``, its fields in
docs/replication.md) and Figures 4-6 of Rudman & Eickhoff (2024) overlaying the runs."""
from __future__ import annotations

import math
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any, Optional, Sequence

import torch
from tqdm.auto import tqdm

from ..config import compose
from ..isotropy import cosine_from_unit_sums, explained_variance_curve, partition_isotropy, twonn_dimension
from ..isotropy.streaming import LayerStatistics, TokenMoments
from ..models.sentence_encoder import pool
from ..models.token_cloud import stream_token_statistics
from ..reports.figures import save_png, single
from ..reports.records.settings import display_name
from ..errors import RunDirError
from ..storage.checkpoints import Checkpoints, problem
from ..storage.reading import reading
from ..storage.results import RESULTS, ResultsError, read_results
from ..runtime.init_from import MODEL_DIR
from .loading import LoadedModel, load_pretrained, load_run

SPLITS = ("eval", "train")
EV_COMPONENTS = 20
OUTLIER_FACTOR = 10.0  # an outlier dimension's mean |activation| over the layer's median one
CONSISTENCY_TOLERANCE = 1e-4


class RunProblem(ValueError):
    """A run directory that cannot be analysed; the message says why, in one line."""


def check_run(run_dir: Path) -> dict[str, Any]:
    """The ``results.json`` of a finished run whose latest checkpoint is its final model, else :class:`RunProblem`."""
    with reading(run_dir, "run directory", RunDirError):
        if not run_dir.is_dir():
            raise RunProblem(f"{run_dir}: not a directory")
        if not (run_dir / "config.yaml").is_file():
            raise RunProblem(f"{run_dir}: no config.yaml (not a run directory)")
        latest = Checkpoints(run_dir).latest()
        if latest is None and not (run_dir / MODEL_DIR).is_dir():
            raise RunProblem(f"{run_dir}: neither {MODEL_DIR}/ nor checkpoints/step_*.pt to load the model from")
    try:
        results = read_results(run_dir / RESULTS, require_finished=True)
    except ResultsError as error:
        raise RunProblem(str(error)) from None
    if latest is None:
        return results.to_json()  # a finished run keeps its final model in model/ (its checkpoints were removed)
    if results.step != Checkpoints.step_of(latest):
        raise RunProblem(f"{run_dir}: latest checkpoint {latest.name} is not the final model (results.json is of step "
                         f"{results.step})")
    if (damage := problem(latest)) is not None:  # an older checkpoint is not the final model: nothing is scored
        raise RunProblem(f"{run_dir}: its final checkpoint {latest.name} is damaged ({damage}); nothing was read "
                         "from it and the run was left as it was")
    return results.to_json()


def final_weights(run_dir: Path) -> str:
    """Where a finished run's final model is read from, relative to the run: its latest checkpoint or ``model/``."""
    latest = Checkpoints(run_dir).latest()
    return f"{MODEL_DIR}/" if latest is None else f"{latest.parent.name}/{latest.name}"


def outliers(layer: TokenMoments, factor: float = OUTLIER_FACTOR) -> tuple[list[int], float]:
    """A layer's outlier dimensions (mean |activation| > ``factor`` x the median) and its max |activation| / median."""
    means = layer.abs_sum / max(layer.count, 1)
    median = torch.quantile(means, 0.5).clamp_min(torch.finfo(torch.float64).tiny)
    return torch.nonzero(means > factor * median).flatten().tolist(), (layer.abs_max.max() / median).item()


class Progress:
    """Examples done out of ``total``: a tqdm bar on a terminal, otherwise a line every tenth (logs, SLURM)."""

    def __init__(self, total: int, description: str, stream=None):
        self.total, self.description, self.done, self.started = total, description, 0, time.perf_counter()
        self.stream = stream or sys.stderr
        self.every = self.next_report = max(1, math.ceil(total / 10))
        terminal = self.stream.isatty() and total > 0  # a bar closes when its total is reached
        self.bar = tqdm(total=total, desc=description, unit="ex", leave=False, file=self.stream) if terminal else None

    def update(self, count: int) -> None:
        self.done += count
        if self.bar is not None:
            self.bar.update(count)
            if self.done >= self.total:
                self.bar.close()
        elif self.done >= self.next_report or self.done == self.total:
            seconds = time.perf_counter() - self.started
            print(f"  {self.description}: {self.done}/{self.total} examples, {seconds:.0f} s", file=self.stream,
                  flush=True)
            self.next_report = self.done + self.every


def stream_split(loaded: LoadedModel, split: str,
                 batch_size: Optional[int] = None) -> tuple[LayerStatistics, list[list[torch.Tensor]]]:
    """:func:`stream_features` of the split's encoded features."""
    return stream_features(loaded, loaded.features(split), batch_size, split)


@torch.no_grad()
def stream_features(loaded: LoadedModel, features: Sequence[dict], batch_size: Optional[int] = None,
                    description: str = "eval") -> tuple[LayerStatistics, list[list[torch.Tensor]]]:
    """One eval-mode pass over encoded features: each layer's token statistics and one vector per example."""
    batch_size = batch_size or loaded.eval_batch_size
    model = loaded.model
    statistics = LayerStatistics(model.hidden_size, model.num_layers, moments=True, device=loaded.device)
    examples: list[list[torch.Tensor]] = [[] for _ in range(model.num_layers)]
    decoder = getattr(model, "is_decoder", False)
    progress = Progress(len(features), description).update

    def keep(batch, output) -> None:
        for vectors, hidden in zip(examples, output.hidden_states[1:]):
            vectors.append(example_vectors(hidden, output, decoder).float().cpu())
        progress(batch["input_ids"].shape[0])

    batches = (loaded.collate(features[start : start + batch_size]) for start in range(0, len(features), batch_size))
    stream_token_statistics(model, batches, statistics, autocast=loaded.autocast, on_output=keep)
    return statistics, examples


def example_vectors(hidden: torch.Tensor, output: Any, decoder: bool) -> torch.Tensor:
    """One layer's vector per example, (batch, d): an encoder's first token, a decoder's last real one."""
    if (packing := getattr(output, "packing", None)) is not None:
        return hidden.index_select(0, packing.last if decoder else packing.first)
    return pool(hidden, output.attention_mask, "last_token") if decoder else hidden[:, 0]


def _defined(measure, *arguments) -> tuple[Any, Optional[str]]:
    """``(value, None)``, or ``(None, why)`` where the data leave ``measure`` undefined."""
    try:
        value = measure(*arguments)
    except ValueError as error:
        return None, str(error)
    return (value.tolist() if isinstance(value, torch.Tensor) else value), None


def _with_reasons(key: str, pairs: Sequence[tuple[Any, Optional[str]]]) -> dict[str, Any]:
    """``{key: values}`` and, where any is None, ``{key_undefined: {layer: why}}`` (layers counted from 1)."""
    reasons = {str(layer): why for layer, (_, why) in enumerate(pairs, start=1) if why is not None}
    return {key: [value for value, _ in pairs], **({f"{key}_undefined": reasons} if reasons else {})}


def measures(statistics: LayerStatistics, examples: Sequence[Sequence[torch.Tensor]],
             word_embeddings: Optional[torch.Tensor]) -> dict[str, Any]:
    """The analysis numbers from the streamed statistics and each layer's example vectors."""
    layers = statistics.layers
    points = [torch.cat(vectors) for vectors in examples]
    k = min(EV_COMPONENTS, layers[0].dim)
    found = [outliers(layer) for layer in layers]
    single = points[-1].shape[0] < 2  # one example has no covariance
    cls_curve = ((None, f"needs at least 2 examples, got {points[-1].shape[0]}") if single
                 else _defined(explained_variance_curve, torch.cov(points[-1].double().T), k))
    result = {
        "isoscore_star": statistics.isoscore_star(),
        "isoscore_star_per_layer": statistics.isoscore_star_per_layer(),
        **_with_reasons("twonn_per_layer", [_defined(twonn_dimension, vectors) for vectors in points]),
        "mean_activation": layers[-1].mean.tolist(),
        **_with_reasons("explained_variance_per_layer",
                        [_defined(explained_variance_curve, layer.covariance(), k) for layer in layers]),
        "cls_explained_variance": cls_curve[0],
        **({"cls_explained_variance_undefined": cls_curve[1]} if cls_curve[1] else {}),
        **_with_reasons("average_cosine_per_layer", [
            _defined(cosine_from_unit_sums, layer.unit_sum, layer.unit_squares, layer.count) for layer in layers]),
        "word_embeddings": None,
        "outlier_factor": OUTLIER_FACTOR,
        "outlier_dimensions_per_layer": [dimensions for dimensions, _ in found],
        "max_activation_ratio_per_layer": [ratio for _, ratio in found],
    }
    if word_embeddings is not None:
        i1, i2 = partition_isotropy(word_embeddings)
        result["word_embeddings"] = {"shape": list(word_embeddings.shape), "I1": i1.item(), "I2": i2.item()}
    return result


def run_label(results: dict[str, Any]) -> str:
    """``Base``, ``CosReg λ=1``, ``I-STAR λ=-1 ζ=0.2``: the criterion's column title and its lambda (and zeta)."""
    criterion = results.get("criterion") or {}
    parts = [display_name(str(criterion.get("name", "?")))]
    parts += [f"{symbol}={criterion[key]:g}" for key, symbol in (("lam", "λ"), ("zeta", "ζ"))
              if isinstance(criterion.get(key), (int, float))]
    return " ".join(parts)


def analyze_run(run_dir: Path, split: str = "eval", batch_size: Optional[int] = None,
                step: Optional[int] = None) -> dict[str, Any]:
    """The analysis of a finished run's final model, or of its checkpoint of ``step``, with timings."""
    results = check_run(run_dir)
    started = time.perf_counter()
    final = step is None or step == results.get("step")
    loaded = load_run(run_dir, None if final else step)
    source = final_weights(run_dir) if final else f"checkpoints/step_{step:08d}.pt"
    print(f"  {run_dir.name}: {'final model' if final else 'model'} of the finished run loaded from {source} (step "
          f"{results.get('step') if final else step}) in {time.perf_counter() - started:.0f} s", file=sys.stderr,
          flush=True)
    main_metric = results.get("main_metric")
    evaluated = {entry.get("step"): entry for entry in loaded.history}  # the evaluations up to the loaded step
    analysis = _analysis(loaded, split, batch_size, started, {
        "run_dir": str(run_dir),
        "label": run_label(results) + ("" if step is None else f" step {step}"),
        "task": results.get("task"),
        "model": results.get("model"),
        "criterion": results.get("criterion"),
        "seed": results.get("seed"),
        "step": results.get("step") if final else step,  # the final model's step (model/ carries none of its own)
        "weights": source,
        "run_finished": True,  # check_run refuses a failed or unfinished run
        "main_metric": main_metric,
        "score": (results.get("metrics") or {}).get(main_metric) if final else evaluated.get(step, {}).get(main_metric),
    })
    if final and split == "eval" and results.get("eval_isoscore_star_per_layer"):
        reported = [results["eval_isoscore_star"], *results["eval_isoscore_star_per_layer"]]
        ours = [analysis["isoscore_star"], *analysis["isoscore_star_per_layer"]]
        analysis["results_max_abs_difference"] = max(abs(a - b) for a, b in zip(reported, ours))
    return analysis


def analyze_base(arguments: Sequence[str], split: str = "eval", batch_size: Optional[int] = None) -> dict[str, Any]:
    """The analysis of the pretrained model that ``istar-run`` with ``arguments`` would start from."""
    started = time.perf_counter()
    cfg = compose(list(arguments))  # read for the model, task and data; its output_dir is never touched
    loaded = load_pretrained(cfg)
    print(f"  {cfg.model.name}: pretrained model loaded in {time.perf_counter() - started:.0f} s", file=sys.stderr,
          flush=True)
    return _analysis(loaded, split, batch_size, started, {
        "run_dir": None, "label": f"{cfg.model.name} before training", "task": cfg.task, "model": cfg.model.name,
        "criterion": None, "seed": cfg.seed, "step": 0, "main_metric": None, "score": None,
    })


def _analysis(loaded: LoadedModel, split: str, batch_size: Optional[int], started: float,
              about: dict[str, Any]) -> dict[str, Any]:
    """``about`` and the measures of the split streamed through the loaded model, with timings."""
    started_stream = time.perf_counter()
    statistics, examples = stream_split(loaded, split, batch_size)
    streamed = time.perf_counter()
    word_embeddings = getattr(loaded.model, "word_embeddings", None)  # adapters without one get no I1/I2
    word_embeddings = word_embeddings().detach() if word_embeddings else None
    analysis = {**about, "split": split, "examples": sum(len(vectors) for vectors in examples[-1]),
                "tokens_per_layer": statistics.layers[-1].count, **measures(statistics, examples, word_embeddings)}
    finished = time.perf_counter()
    analysis["seconds"] = {"load": started_stream - started, "stream": streamed - started_stream,
                           "measures": finished - streamed, "total": finished - started}
    return analysis


def _context(analyses: Sequence[dict[str, Any]]) -> str:
    models, tasks = ("/".join(sorted({str(a[key]) for a in analyses})) for key in ("model", "task"))
    return f"{models} on {tasks}, {analyses[0]['split']} split"


def figure4(analyses: Sequence[dict[str, Any]], path: Path) -> Path:
    """Figure 4: the last layer's mean activation per dimension, one series per run."""
    fig, ax = single(f"Mean activation per dimension, last layer ({_context(analyses)})", "dimension",
                     "mean activation", width=9.0)
    for analysis in analyses:
        means = analysis["mean_activation"]
        ax.plot(range(len(means)), means, linewidth=0.7, alpha=0.75, label=analysis["label"])
    ax.axhline(0.0, color="black", linewidth=0.5)
    ax.legend(fontsize=8)
    return save_png(fig, path)


def _per_layer(analyses, path: Path, key: str, title: str, ylabel: str, log: bool = False) -> Path:
    title = title.format(factor=analyses[0].get("outlier_factor", OUTLIER_FACTOR))
    fig, ax = single(f"{title} ({_context(analyses)})", "layer", ylabel)
    if log:
        ax.set_yscale("log")
    for marker, analysis in zip("osD^vPX*" * len(analyses), analyses):
        values = analysis[key]
        values = [len(v) for v in values] if values and isinstance(values[0], list) else values
        layers = [i + 1 for i, v in enumerate(values) if v is not None]
        ax.plot(layers, [v for v in values if v is not None], marker=marker, markersize=4, label=analysis["label"])
    ax.set_xticks(range(1, len(analyses[0][key]) + 1))
    ax.legend(fontsize=8)
    return save_png(fig, path)


# Figure 5: TwoNN dimension of the [CLS] vectors; Figure 6: IsoScore* (zeta 0) of the token clouds; then how many
# outlier dimensions each layer has, and its largest activation over its median dimension's: one line per run each.
figure5 = partial(_per_layer, key="twonn_per_layer", ylabel="TwoNN dimension",
                  title="TwoNN dimension per layer ([CLS]; a decoder's last token)")
figure6 = partial(_per_layer, key="isoscore_star_per_layer", title="IsoScore* per layer, tokens, ζ = 0",
                  ylabel="IsoScore*")
figure_outliers = partial(_per_layer, key="outlier_dimensions_per_layer", ylabel="dimensions",
                          title="Outlier dimensions per layer (> {factor:g}x median)")
figure_massive = partial(_per_layer, key="max_activation_ratio_per_layer", ylabel="max |activation| / median",
                         title="Largest activation over the median, per layer", log=True)


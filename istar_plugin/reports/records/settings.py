"""A grid's records grouped into settings (:class:`Setting`), the methods' names and order, each method's best."""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from ...metrics import better_sign
from ...storage.seeds import SeedSummary, over_seeds, std_over_seeds
from .cells import Key, Record

METHOD_NAMES = {"cross_entropy": "Base", "cosreg": "CosReg", "istar": "I-STAR"}  # others keep their name, after


@dataclass(frozen=True)
class Setting:
    """One hyperparameter setting of a method on a model x task, over its seeds (sample std, None for one seed)."""

    model: str
    task: str
    method: str
    lam: Optional[float]
    zeta: Optional[float]
    metric: str
    seeds: tuple[int, ...]
    scores: tuple[float, ...]
    isoscores: tuple[float, ...]
    variant: str = ""
    collapsed: int = 0  # how many of its seeds collapsed to one predicted class
    others: tuple[tuple[str, tuple[float, ...]], ...] = ()  # other metrics every seed has: name -> per-seed scores
    validations: tuple[Optional[float], ...] = ()  # per seed: best score on the held-out validation split, if any
    records: tuple[Record, ...] = field(default=(), compare=False, repr=False)  # its runs, in seed order

    @property
    def validation_mean(self) -> Optional[float]:
        """Mean validation score over seeds; None unless every seed held a validation split out."""
        return statistics.fmean(self.validations) if self.validations and None not in self.validations else None

    @property
    def n(self) -> int:
        return len(self.scores)

    def metric_names(self) -> list[str]:
        """The table metric, then the others every seed has."""
        return [self.metric, *(name for name, _ in self.others)]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.scores)

    @property
    def std(self) -> Optional[float]:
        return std_over_seeds(self.scores)

    @property
    def isoscore_mean(self) -> float:
        return statistics.fmean(self.isoscores)

    @property
    def isoscore_std(self) -> Optional[float]:
        return std_over_seeds(self.isoscores)


def method_rank(method: str, known: Sequence[str] = tuple(METHOD_NAMES)) -> tuple[int, str]:
    """Where ``method`` stands: the ``known`` ones in their order, any other after them by name."""
    return (known.index(method) if method in known else len(known), method)


def display_name(method: str) -> str:
    return METHOD_NAMES.get(method, method)


def settings(records: Sequence[Record]) -> list[Setting]:
    """Records grouped by model, task, method, lam, zeta and variant (seeds in ascending order)."""
    groups: dict[tuple, list[Record]] = {}
    for record in sorted(records, key=lambda record: record.seed):
        groups.setdefault(setting_key(record), []).append(record)
    result = []
    for (model, task, method, lam, zeta, variant), group in groups.items():
        metrics = {record.metric for record in group}
        if len(metrics) > 1:
            raise ValueError(f"{model}/{task}/{method}: cells disagree on the main metric "
                             f"({', '.join(sorted(metrics))})")
        others = [dict(record.others) for record in group]
        common = [name for name in others[0] if all(name in other for other in others)]
        seeds, scores, isoscores, validations = zip(*((r.seed, r.score, r.isoscore_star, r.validation) for r in group))
        result.append(Setting(
            model, task, method, lam, zeta, metrics.pop(), seeds, scores, isoscores, variant, validations=validations,
            collapsed=sum(record.collapsed for record in group), records=tuple(group),
            others=tuple((name, tuple(other[name] for other in others)) for name in common)))
    return sorted(result, key=setting_order)


def setting_key(item: Record | Setting) -> tuple:
    """(model, task, method, lam, zeta, variant): the setting a record belongs to, or a setting's own."""
    return item.model, item.task, item.method, item.lam, item.zeta, item.variant


def setting_row(setting: Setting) -> dict[str, Any]:
    """The columns that name a setting in a table's rows: model, task, method (as shown), lam, zeta and variant."""
    return {"model": setting.model, "task": setting.task, "method": display_name(setting.method), "lam": setting.lam,
            "zeta": setting.zeta, "variant": setting.variant}


def setting_order(setting: Setting) -> tuple:
    none_first = lambda value: (value is not None, value or 0.0)  # noqa: E731
    return (setting.model, setting.task, method_rank(setting.method), none_first(setting.lam),
            none_first(setting.zeta), setting.variant)


SELECTIONS = {
    "eval": "each method's best setting by its mean over seeds on the evaluation split, as the paper selects, among "
            "its settings with the most seeds: the score is optimistic (chosen and reported on the same examples)",
    "validation": "each method's best setting by its mean over seeds on the validation split held out of the "
                  "training set (data.validation_split), among its settings with the most seeds; the evaluation "
                  "split is scored once, after the choice",
}


def ranking(setting: Setting, score: str = "mean") -> tuple[float, int]:
    """Where ``setting`` ranks by its ``score`` (``"mean"`` or ``"validation_mean"``), its seeds breaking a tie: the
    greater, the better, whether its metric is better higher or lower (:func:`~istar_plugin.metrics.better_sign`)."""
    return better_sign(setting.metric) * getattr(setting, score), setting.n


def best_settings(records: Sequence[Record], selection: str = "eval") -> dict[Key, tuple[Setting, int]]:
    """(model, task, method) -> (its best setting by mean ``selection`` score, settings compared), of the most seeds."""
    if selection not in SELECTIONS:
        raise ValueError(f"selection {selection!r} unknown; choose one of: {', '.join(SELECTIONS)}")
    candidates: dict[Key, list[Setting]] = {}
    for setting in settings(records):
        if selection == "eval" or setting.validation_mean is not None:
            candidates.setdefault((setting.model, setting.task, setting.method), []).append(setting)
    score = "mean" if selection == "eval" else "validation_mean"
    return {key: (best_of(group, score), len(fullest(group))) for key, group in candidates.items()}


def fullest(group: Sequence[Setting]) -> list[Setting]:
    """The settings of ``group`` with the most seeds: only they compete for its best (a mean over fewer seeds is
    noisier, and a seed that failed or has not finished would leave its setting a mean of the others)."""
    return [s for s in group if s.n == max(other.n for other in group)]


def best_of(group: Sequence[Setting], score: str = "mean") -> Setting:
    """The best setting of ``group`` by its ``score`` (:func:`ranking`) among its :func:`fullest`."""
    return max(fullest(group), key=lambda s: ranking(s, score))


def has_validation(records: Sequence[Record]) -> bool:
    """Whether some setting's every seed scored a held-out validation split (a held-out selection is possible)."""
    return any(setting.validation_mean is not None for setting in settings(records))


def collapsed_mark(setting: Setting) -> str:
    """`` (K collapsed)`` when K of ``setting``'s seeds predicted one class on the evaluation split, else ``""``: the
    mark every table puts beside a setting's score or difference."""
    return f" ({setting.collapsed} collapsed)" if setting.collapsed else ""


def seeds_mark(n: int, most_seeds: int) -> str:
    """``n=K`` when a score is over K seeds and K is one or fewer than the ``most_seeds`` of the scores shown beside
    it, else ``""``: the mark Table 1 puts among a score's marks and the figures beside its point."""
    return f"n={n}" if n == 1 or n < most_seeds else ""


def metric_summary(setting: Optional[Setting], metric: str) -> Optional[SeedSummary]:
    """``metric`` over the setting's seeds; None where it has no such metric."""
    if setting is None:
        return None
    scores = setting.scores if metric == setting.metric else dict(setting.others).get(metric)
    return over_seeds(scores) if scores else None

"""One swept setting against a reference value of it (``istar-report --reference KEY=VALUE``), paired by seed."""
from __future__ import annotations

import statistics
from typing import Any, Optional, Sequence

from ...errors import ConfigError
from ...storage.seeds import std_text
from ..records.cells import Record
from ..records.settings import collapsed_mark, setting_key, setting_row, settings
from ..tables import SETTING_HEADER, markdown_table, setting_cells
from .paired import LEVEL, signed
from .versus_base import Compare, compare

COLUMNS = ("model", "task", "method", "lam", "zeta", "variant", "reference", "metric", "seeds", "difference", "low",
           "high", "verdict", "per_seed", "reference_std", "score_within_spread", "isoscore_difference",
           "isoscore_per_seed", "isoscore_reference_std", "isoscore_within_spread", "resampled")


def parse_reference(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` as (key, value); a ConfigError naming the text otherwise."""
    key, equals, value = text.partition("=")
    if not equals or not key or not value or " " in text:
        raise ConfigError(f"--reference {text!r} is not KEY=VALUE (e.g. precision=fp32)")
    return key, value


def comparisons(records: Sequence[Record], reference: str, compare_settings: Optional[Compare] = None
                ) -> list[dict[str, Any]]:
    """One row per setting with ``KEY`` at another value and a reference setting sharing a seed with it.
    ``compare_settings``: a setting against its reference on its metric (default :func:`.versus_base.compare`)."""
    key, value = parse_reference(reference)
    all_settings = settings(records)
    rows = []
    for setting in all_settings:
        swept = _variant(setting.variant)
        if key not in swept or swept[key] == value:
            continue
        target = {**swept, key: value}
        match = next((s for s in all_settings
                      if _variant(s.variant) == target and setting_key(s)[:5] == setting_key(setting)[:5]), None)
        if match is None or (paired := (compare_settings or compare)(setting, match, setting.metric)) is None:
            continue
        ours, theirs = dict(zip(setting.seeds, setting.isoscores)), dict(zip(match.seeds, match.isoscores))
        differences = [ours[seed] - theirs[seed] for seed in paired.seeds]
        iso_mean = statistics.fmean(differences)
        rows.append({**setting_row(setting), "reference": reference, "metric": setting.metric, **paired.columns(),
                     "reference_std": match.std, "score_within_spread": _within(paired.mean, match.std),
                     "isoscore_difference": iso_mean, "isoscore_per_seed": " ".join(f"{d:+.4f}" for d in differences),
                     "isoscore_reference_std": match.isoscore_std,
                     "isoscore_within_spread": _within(iso_mean, match.isoscore_std), "setting": setting})
    return rows


def caption(reference: str) -> str:
    """The caption above the comparison with ``reference``."""
    return (f"Every setting against the same setting with {reference}, paired by seed: mean difference (points), "
            f"{LEVEL:.0%} bootstrap interval, verdict at this sample size; the reference's standard deviation over "
            "seeds, and whether the mean difference lies within it; the same for the eval IsoScore*.\n\n")


def why_not(reference: str) -> str:
    """Why there is no comparison with ``reference``: no setting has its key at another value."""
    key = reference.partition("=")[0]
    return f"versus_reference.md not written: no setting has {key} at another value than {reference}\n"


def markdown(rows: Sequence[dict[str, Any]]) -> str:
    """The comparison as a Markdown table, a collapsed setting's difference marked as Table 1 marks its score."""
    header = (*SETTING_HEADER[:5], "setting", "against", "metric", "seeds", "Δ", "95% interval", "verdict", "per seed",
              "reference sd", "within sd", "Δ eval IsoScore*", "per seed", "reference sd", "within sd")
    return markdown_table(header, ([
        *setting_cells(row), row["reference"], row["metric"], row["seeds"],
        signed(row["difference"]) + collapsed_mark(row["setting"]),
        f"[{signed(row['low'])}, {signed(row['high'])}]", row["verdict"], row["per_seed"],
        std_text(row["reference_std"], ".2f"), _yes(row["score_within_spread"]), f"{row['isoscore_difference']:+.4f}",
        row["isoscore_per_seed"], std_text(row["isoscore_reference_std"], ".4f"), _yes(row["isoscore_within_spread"])]
        for row in rows))


def _variant(text: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in text.split())


def _within(difference: float, spread: Optional[float]) -> Optional[bool]:
    return None if spread is None else abs(difference) <= spread


def _yes(flag: Optional[bool]) -> str:
    return "—" if flag is None else "yes" if flag else "no"

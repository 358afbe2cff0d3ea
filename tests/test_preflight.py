"""The preflight reads a model's config through transformers (a GGUF file's header: seconds for SmolLM2-135M) once
per process and per version of the file, and hands each caller its own copy."""
import os

import gguf
import numpy
import pytest
from transformers import AutoConfig

from istar_plugin.config import compose
from istar_plugin.models import preflight


def write_gguf(path, layers: int) -> None:
    """A header-only Llama GGUF file (one small tensor) with ``layers`` blocks and 128 positions."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny")
    writer.add_context_length(128)
    writer.add_block_count(layers)
    writer.add_embedding_length(32)
    writer.add_feed_forward_length(64)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_vocab_size(16)
    writer.add_tensor("token_embd.weight", numpy.zeros((16, 32), dtype="float32"))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.fixture
def reads(monkeypatch) -> list:
    """The folders AutoConfig.from_pretrained is asked to read, on a cache emptied before and after the test."""
    preflight._read_transformers_config.cache_clear()
    calls, read = [], AutoConfig.from_pretrained

    def counted(folder, **options):
        calls.append(folder)
        return read(folder, **options)

    monkeypatch.setattr(AutoConfig, "from_pretrained", counted)
    yield calls
    preflight._read_transformers_config.cache_clear()


def shape_after_compose(file) -> tuple:
    return preflight.model_shape(compose(["recipe=lm", f"model.name_or_path={file}"]), local_only=True)


def test_a_second_compose_does_not_read_the_gguf_file_again_and_callers_cannot_change_the_cached_config(
        tmp_path, reads):
    file = tmp_path / "tiny.gguf"
    write_gguf(file, layers=2)
    assert shape_after_compose(file) == (128, 2)
    assert len(reads) == 1  # compose and model_shape ask for the same file offline: one read
    cfg = compose(["recipe=lm", f"model.name_or_path={file}", "model.revision=v1"])
    preflight.check_model_limits(cfg, kind="language_modeling")  # as the trainer checks, hub allowed: the same file
    assert len(reads) == 1
    preflight._pretrained_config(compose(["recipe=lm", f"model.name_or_path={file}"]), True).num_hidden_layers = 9
    assert shape_after_compose(file) == (128, 2)
    assert reads == [str(tmp_path)]


def test_an_edited_gguf_file_is_read_again(tmp_path, reads):
    file = tmp_path / "tiny.gguf"
    write_gguf(file, layers=2)
    assert shape_after_compose(file) == (128, 2)
    before = file.stat()
    write_gguf(file, layers=3)  # same size; saved a second later, as an editor would
    os.utime(file, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
    assert file.stat().st_size == before.st_size
    assert shape_after_compose(file) == (128, 3)
    assert len(reads) == 2


def test_the_model_width_is_read_from_its_config():
    assert preflight.model_width(compose(["recipe=movie_snippets"])) == 384

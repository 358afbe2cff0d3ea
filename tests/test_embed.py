"""``istar-embed`` on real STS-B files: what embeddings.json holds is recomputed independently, the fitted
transforms are stored and reload, every source kind works, and bad settings are one line before a model loads."""
import json

import pytest
import torch
from scipy.stats import spearmanr
from transformers import AutoModel, AutoTokenizer

from istar_plugin.analysis import sts_embeddings
from istar_plugin.cli import embed as embed_cli
from istar_plugin.isotropy import isoscore
from istar_plugin.posthoc import Whiten
from istar_plugin.analysis.sts_embeddings import read_sts

from test_analyze import tiny_run


def independent_mean_pooling(folder, sentences, layer):
    tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()
    rows = []
    with torch.no_grad():
        for sentence in sentences:  # one at a time: no padding at all
            inputs = tokenizer(sentence, truncation=True, max_length=128, return_tensors="pt")
            rows.append(model(**inputs, output_hidden_states=True).hidden_states[layer][0].mean(dim=0))
    return torch.stack(rows).double()


@pytest.fixture(scope="module")
def embedded(tiny_bert, shared_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("embed") / "out"
    code = embed_cli.main([str(tiny_bert), "--sts", str(shared_data / "stsb"), "--layer", "all",
                           "--transforms", "none,center,whiten:16,abtt:2,center+whiten:8", "--out", str(out)])
    assert code == 0
    return out, json.loads((out / "embeddings.json").read_text())


def test_spearman_and_isoscore_match_an_independent_computation(embedded, tiny_bert, shared_data):
    out, result = embedded
    dev = read_sts(shared_data / "stsb", "dev")
    assert set(result["per_layer"]) == {"0", "1", "2"} and result["pairs"] == 1500
    assert result["transforms"] == result["per_layer"]["2"]
    first = independent_mean_pooling(tiny_bert, dev.first, 2)
    second = independent_mean_pooling(tiny_bert, dev.second, 2)
    cosine = torch.nn.functional.cosine_similarity(first, second).numpy()
    raw = result["per_layer"]["2"]["none"]
    assert raw["spearman"] == pytest.approx(100 * spearmanr(cosine, dev.scores).statistic, abs=1e-3)
    assert raw["isoscore"] == pytest.approx(isoscore(torch.cat([first, second])).item(), abs=1e-5)
    # whitening fitted on the training sentences: the stored transform reproduces the reported Spearman
    stored = torch.load(out / "transforms" / "layer2" / "whiten-16.pt")
    assert stored["matrix"].shape == (32, 16) and stored["mean"].shape == (32,)
    whiten = Whiten(16)
    whiten.mean, whiten.matrix = stored["mean"].double(), stored["matrix"].double()
    moved = whiten(torch.cat([first, second]))
    cosine = torch.nn.functional.cosine_similarity(moved[:1500], moved[1500:]).numpy()
    expected = 100 * spearmanr(cosine, dev.scores).statistic
    assert result["per_layer"]["2"]["whiten:16"]["spearman"] == pytest.approx(expected, abs=1e-2)


def test_the_fit_set_is_the_training_split_and_the_outputs_exist(embedded):
    out, result = embedded
    assert result["fit"]["on"] == "train" and result["fit"]["sentences"] > 10_000  # unique training sentences
    assert (out / ".istar-embed").is_file() and (out / "embeddings.png").read_bytes()[:4] == b"\x89PNG"
    table = (out / "embeddings.md").read_text()
    assert table.count("\n") == 2 + 3 * 5  # header, rule, 3 layers x 5 transforms
    for measures in result["per_layer"]["1"].values():
        assert set(measures) == {"spearman", "isoscore", "isoscore_star", "i1", "i2", "average_cosine", "ev_1", "ev_10",
                                 "rankme", "alignment", "uniformity"}
    # centring leaves cosine-based Spearman changed but IsoScore (covariance-based) unchanged
    layer = result["per_layer"]["2"]
    assert layer["center"]["isoscore"] == pytest.approx(layer["none"]["isoscore"], abs=1e-9)
    assert layer["whiten:16"]["isoscore"] > layer["none"]["isoscore"]


def test_a_run_directory_is_embedded_with_its_fine_tuned_encoder(tiny_bert, shared_data, tmp_path):
    run = tiny_run(tiny_bert, shared_data, tmp_path / "run", "criterion=cross_entropy")
    out = tmp_path / "out"
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    assert embed_cli.main([str(run), "--sts", str(shared_data / "stsb"), "--transforms", "none", "--fit", "dev",
                           "--out", str(out)]) == 0
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before  # nothing written into the run
    tuned = json.loads((out / "embeddings.json").read_text())["transforms"]["none"]["spearman"]
    base_out = tmp_path / "base"
    assert embed_cli.main([str(tiny_bert), "--sts", str(shared_data / "stsb"), "--transforms", "none", "--fit", "dev",
                           "--out", str(base_out)]) == 0
    base = json.loads((base_out / "embeddings.json").read_text())["transforms"]["none"]["spearman"]
    assert tuned != pytest.approx(base, abs=1e-6)  # the run's weights, not the pretrained ones


@pytest.mark.parametrize("arguments, message, code", [
    (["--transforms", "whiten:64"], "whiten:64 keeps more dimensions than the embeddings have (32)", 2),
    (["--transforms", "pca"], "unknown transform 'pca'; choices: none, center", 2),
    (["--layer", "5"], "--layer 5: the model has hidden states 0 (embeddings) to 2", 2),
    (["--layer", "top"], "expected an integer (0 = embeddings, -1 = last) or 'all'", 2),
    (["--split", "test"], "invalid choice: 'test'", 2),
    (["--fit", "missing.txt"], "missing.txt", 2),
])
def test_bad_settings_are_one_line_before_the_model_loads(arguments, message, code, tiny_bert, shared_data, tmp_path,
                                                          capsys, monkeypatch):
    loaded = []
    monkeypatch.setattr(sts_embeddings, "open_encoder", lambda *a, **k: loaded.append(a))
    try:
        result = embed_cli.main([str(tiny_bert), "--sts", str(shared_data / "stsb"), "--out", str(tmp_path / "o"),
                                 *arguments])
    except SystemExit as exit:
        result = exit.code
    err = capsys.readouterr().err
    assert result == code and message in err and not loaded
    assert err.strip().splitlines()[-1].startswith(("istar-embed: ", "usage:")) or "error:" in err


def test_missing_data_and_foreign_output_folders_are_refused(tiny_bert, shared_data, tmp_path, capsys):
    assert embed_cli.main([str(tiny_bert), "--sts", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o")]) == 3
    assert "nowhere" in capsys.readouterr().err
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    assert embed_cli.main([str(tiny_bert), "--sts", str(shared_data / "stsb"), "--out", str(mine)]) == 4
    assert "istar_plugin did not write (notes.txt)" in capsys.readouterr().err
    assert (mine / "notes.txt").read_text() == "keep" and len(list(mine.iterdir())) == 1


def test_poolings_read_the_right_positions_for_either_padding_side():
    from istar_plugin.models.sentence_encoder import pool

    states = torch.arange(2 * 4 * 2, dtype=torch.float32).reshape(2, 4, 2)  # 2 sentences, 4 positions, width 2
    first = states + 100
    right = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    left = torch.tensor([[0, 1, 1, 1], [0, 0, 1, 1]])
    assert pool(states, right, "last_token").tolist() == [states[0, 2].tolist(), states[1, 1].tolist()]
    assert pool(states, left, "last_token").tolist() == [states[0, 3].tolist(), states[1, 3].tolist()]
    assert pool(states, right, "mean").tolist() == [states[0, :3].mean(0).tolist(), states[1, :2].mean(0).tolist()]
    assert pool(states, right, "cls").tolist() == states[:, 0].tolist()
    expected = (states[0, :3].mean(0) + first[0, :3].mean(0)) / 2
    assert pool(states, right, "first_last_mean", first=first)[0].tolist() == expected.tolist()
    with pytest.raises(ValueError, match="unknown pooling 'max'; choices: mean, cls, first_last_mean, last_token"):
        pool(states, right, "max")


def test_a_package_file_is_found_without_importing_the_package(tmp_path):
    from istar_plugin.models.encoder import resolve_model_path

    assert resolve_model_path("package:istar_plugin/posthoc.py").endswith("istar_plugin/posthoc.py")
    with pytest.raises(FileNotFoundError, match="does not exist in the installed package 'istar_plugin'"):
        resolve_model_path("package:istar_plugin/model.gguf")
    with pytest.raises(ModuleNotFoundError, match="module 'no_such_package' is not installed"):
        resolve_model_path("package:no_such_package/model.gguf")


def test_fit_max_samples_the_fit_set(tiny_bert, shared_data, tmp_path):
    out = tmp_path / "out"
    assert embed_cli.main([str(tiny_bert), "--sts", str(shared_data / "stsb"), "--transforms", "none,whiten:8",
                           "--fit-max", "300", "--out", str(out)]) == 0
    fit = json.loads((out / "embeddings.json").read_text())["fit"]
    assert fit == {"on": "train", "sentences": 300, "sampled_to": 300}


def test_a_model_name_is_scored_as_it_is_and_the_report_paths_end_with_embeddings_json():
    assert sts_embeddings.scored_source("minilm") == {"model": "minilm", "run_dir": None}
    fitted = {2: {"none": {}, "center": {"mean": None}}}
    assert [str(path) for path in sts_embeddings.report_paths(sts_embeddings.Path("o"), fitted)] == [
        "o/transforms/layer2/center.pt", "o/embeddings.md", "o/embeddings.png", "o/embeddings.json"]

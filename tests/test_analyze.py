"""istar-analyze on two real (tiny) finished runs: numbers against results.json and an independent pass."""
import json
import shutil

from types import SimpleNamespace

import pytest
import torch

from istar_plugin.cli import analyze as analyze_cli
from istar_plugin.config import compose
from istar_plugin.isotropy import twonn_dimension
from istar_plugin.analysis import analyze
from istar_plugin.analysis.loading import load_run
from istar_plugin.isotropy.streaming import TokenMoments
from istar_plugin.reports import docs_tables
from istar_plugin.reports.records.analyses import output_names
from istar_plugin.training.trainer import Trainer
from helpers import tiny_run_arguments


def tiny_run(tiny_bert, shared_data, output_dir, *extra):
    """A finished run whose evaluation batches are the analysis's own (the evaluation set in its order, 16 at a
    time): the analysis then computes bit for bit what the run's evaluation did, on any CPU."""
    cfg = compose(tiny_run_arguments(
        tiny_bert, shared_data, "data.max_eval_samples=40", "eval_batch_size=16", "optim.epochs=1", "optim.lr=1e-3",
        "eval_before_training=false", "data.sort_eval_by_length=false", f"output_dir={output_dir}", *extra,
    ))
    Trainer(cfg).fit()
    return output_dir


@pytest.fixture(scope="module")
def runs(tiny_bert, shared_data, tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    return [tiny_run(tiny_bert, shared_data, root / "istar", "criterion=istar", "criterion.lam=-1",
                     "criterion.shrinkage_points=300", "keep_checkpoints=1"),  # analysed from its checkpoint
            tiny_run(tiny_bert, shared_data, root / "base", "criterion=cross_entropy")]  # model/: no checkpoint left


@pytest.fixture(scope="module")
def analysed(runs, tmp_path_factory):
    out = tmp_path_factory.mktemp("analysis")
    before = {run: sorted(p.relative_to(run) for p in run.rglob("*")) for run in runs}
    assert analyze_cli.main([*map(str, runs), "--out", str(out)]) == 0
    assert {run: sorted(p.relative_to(run) for p in run.rglob("*")) for run in runs} == before  # nothing written there
    return out, [json.loads((out / run.name / "analysis.json").read_text()) for run in runs]


def test_isoscore_per_layer_is_the_one_results_json_reports(runs, analysed):
    assert not list((runs[1] / "checkpoints").glob("*.pt")) and (runs[1] / "model").is_dir()  # read from model/
    for run, analysis in zip(runs, analysed[1]):
        results = json.loads((run / "results.json").read_text())
        # the same batches through the same weights: the same numbers, exactly
        assert analysis["isoscore_star_per_layer"] == results["eval_isoscore_star_per_layer"]
        assert analysis["isoscore_star"] == results["eval_isoscore_star"]
        assert analysis["results_max_abs_difference"] == 0
        assert (analysis["step"], analysis["examples"], analysis["split"]) == (results["step"], 40, "eval")
        embeddings = analysis["word_embeddings"]
        assert (embeddings["I1"], embeddings["I2"]) == pytest.approx((results["embedding_i1"], results["embedding_i2"]))


def test_measures_match_an_independent_unbatched_pass(runs, analysed):
    analysis = analysed[1][0]
    loaded = load_run(runs[0])
    with torch.no_grad():
        with loaded.autocast():  # the precision the analysis computes in (the run's)
            output = loaded.model(loaded.collate(loaded.features("eval")))  # one batch: other padding, same tokens
    packed = output.attention_mask is None  # the runs computed padding-free (the default): states of real tokens

    def real(hidden):  # the real tokens' states, (tokens, d)
        return hidden if packed else hidden[output.attention_mask.bool()]

    def first(hidden):  # each example's first token
        return hidden[output.packing.first] if packed else hidden[:, 0]

    last = real(output.hidden_states[-1]).double()
    assert analysis["mean_activation"] == pytest.approx(last.mean(dim=0).tolist(), abs=1e-4)
    assert analysis["tokens_per_layer"] == last.shape[0]
    twonn = [twonn_dimension(first(hidden)).item() for hidden in output.hidden_states[1:]]
    # TwoNN's ratios of neighbour distances carry the batches' rounding: bf16's (precision=auto where the CPU has it)
    # moves them by about its 2**-8, fp32's by far less
    assert analysis["twonn_per_layer"] == pytest.approx(twonn, rel=1e-2 if loaded.precision == "bf16" else 1e-3)
    units = torch.nn.functional.normalize(last, dim=1)
    n = units.shape[0]
    cosine = ((units @ units.T).sum() - n) / (n * (n - 1))
    assert analysis["average_cosine_per_layer"][-1] == pytest.approx(cosine.item(), abs=1e-5)
    curve = analysis["explained_variance_per_layer"][-1]
    eigenvalues = torch.linalg.eigvalsh(torch.cov(last.T)).flip(0)
    assert len(curve) == 20 and curve[0] == pytest.approx((eigenvalues[0] / eigenvalues.sum()).item(), abs=1e-5)
    embeddings = analysis["word_embeddings"]
    assert embeddings["shape"] == [loaded.tokenizer.vocab_size, 32]
    assert 0 < embeddings["I1"] <= 1 and embeddings["I2"] >= 0
    for layer, hidden in enumerate(output.hidden_states[1:]):  # outlier dimensions, from the unbatched tokens
        magnitudes = real(hidden).double().abs()
        median = magnitudes.mean(dim=0).quantile(0.5)
        assert analysis["outlier_dimensions_per_layer"][layer] == torch.nonzero(
            magnitudes.mean(dim=0) > analysis["outlier_factor"] * median).flatten().tolist()
        ratio = (magnitudes.max() / median).item()
        assert analysis["max_activation_ratio_per_layer"][layer] == pytest.approx(ratio, rel=1e-4)


def test_labels_and_figures(analysed):
    out, analyses = analysed
    assert [a["label"] for a in analyses] == ["I-STAR λ=-1 ζ=0.2", "Base"]
    assert analyze.run_label({"criterion": {"name": "cosreg", "lam": 1.0}}) == "CosReg λ=1"
    for number in (4, 5, 6):
        data = (out / f"figure{number}.png").read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 15_000


def test_the_summary_table_holds_each_runs_numbers_and_the_docs_render_it_from_the_folder(analysed, tmp_path):
    out, analyses = analysed
    summary = (out / "summary.md").read_text()
    header, _, score, isoscore, twonn, *_ = [line for line in summary.splitlines() if line.startswith("|")]
    assert header == "|  | Base | I-STAR λ=-1 ζ=0.2 |"  # Base first, whatever the order of the arguments
    istar, base = analyses
    for analysis, cell in zip((base, istar), isoscore.split(" | ")[1:]):
        shown = [float(value) for value in cell.strip(" |").split()]
        assert shown == pytest.approx(analysis["isoscore_star_per_layer"], rel=6e-3, abs=6e-4)
    assert f"{base['score']:.3f} ({base['examples']}, {base['step']})" in score
    copy = tmp_path / "evidence"  # the folder as kept in git: the docs marker renders what istar-analyze wrote
    shutil.copytree(out, copy)
    marker = "<!-- table: evidence summary.md -->\n"
    page = marker + "<!-- end table -->\n"
    assert docs_tables.render_page(page, tmp_path) == f"{marker}{summary}<!-- end table -->\n"
    changed = json.loads((copy / "base" / "analysis.json").read_text())
    changed["isoscore_star_per_layer"][0] = 0.987654
    (copy / "base" / "analysis.json").write_text(json.dumps(changed))
    assert "| 0.988 " in docs_tables.render_page(page, tmp_path)


def test_runs_of_one_setting_and_seed_have_distinct_labels_in_the_summary_and_every_figure(runs, tmp_path,
                                                                                         monkeypatch):
    copies = [tmp_path / "lr=1e-3" / "base", tmp_path / "lr=2e-3" / "base"]  # the same criterion and seed
    for copy in copies:
        shutil.copytree(runs[1], copy)
    legends, save_png = [], analyze.save_png

    def saved(fig, path):
        legends.append([text.get_text() for text in fig.axes[0].get_legend().get_texts()])
        return save_png(fig, path)

    monkeypatch.setattr(analyze, "save_png", saved)
    out = tmp_path / "out"
    assert analyze_cli.main([*map(str, copies), "--out", str(out)]) == 0
    seed = json.loads((runs[1] / "results.json").read_text())["seed"]
    labels = [f"Base seed {seed} (lr=1e-3_base)", f"Base seed {seed} (lr=2e-3_base)"]
    assert (out / "summary.md").read_text().count(f"|  | {labels[0]} | {labels[1]} |\n") == 1
    assert legends == [labels] * 5  # figures 4, 5 and 6, outliers and massive activations


def test_progress_is_shown_when_output_is_not_a_terminal(runs, tmp_path, capsys):
    assert analyze_cli.main([str(runs[1]), "--out", str(tmp_path), "--batch-size", "8"]) == 0
    captured = capsys.readouterr()
    assert "eval: 8/40 examples" in captured.err and "eval: 40/40 examples" in captured.err
    assert "Base: IsoScore* per layer" in captured.out and "figures: " in captured.out


def test_a_bad_run_is_skipped_in_one_line_and_the_others_are_analysed(runs, tmp_path, capsys, monkeypatch):
    unfinished = tmp_path / "unfinished"
    shutil.copytree(runs[0], unfinished)
    (unfinished / "results.json").unlink()
    assert analyze_cli.main([str(runs[1]), str(unfinished), "--out", str(tmp_path / "out")]) == 2  # partial: exit 2
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines()[-1] == (f"istar-analyze: skipped {unfinished}: no results.json "
                                                     "(the run has not finished)")
    assert (tmp_path / "out" / runs[1].name / "analysis.json").is_file()
    assert (tmp_path / "out" / "figure6.png").is_file()
    monkeypatch.setattr(analyze, "load_run", lambda run_dir, step=None: pytest.fail("a model was loaded"))
    assert analyze_cli.main([str(unfinished), "--out", str(tmp_path / "none")]) == 2  # no good run: nothing loads
    assert capsys.readouterr().err.strip() == (f"istar-analyze: error: {unfinished}: no results.json "
                                               "(the run has not finished)")
    assert analyze_cli.main([str(tmp_path / "absent")]) == 2
    assert "absent: not a directory" in capsys.readouterr().err
    assert not (tmp_path / "none").exists()


def test_an_out_folder_of_user_files_is_refused_and_left_as_it_was(runs, tmp_path, capsys, monkeypatch):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "figure6.PNG").write_bytes(b"my figure")
    monkeypatch.setattr(analyze, "load_run", lambda run_dir, step=None: pytest.fail("a model was loaded"))
    assert analyze_cli.main([str(runs[1]), "--out", str(mine)]) == 4  # RunDirError's code, in every command
    assert capsys.readouterr().err.strip().startswith(
        f"istar-analyze: error: --out {mine}: exists and holds files istar_plugin did not write")
    assert [p.name for p in mine.iterdir()] == ["figure6.PNG"] and (mine / "figure6.PNG").read_bytes() == b"my figure"


def test_the_train_split_streams_the_runs_training_features(runs):
    analysis = analyze.analyze_run(runs[1], split="train", batch_size=8)
    assert (analysis["split"], analysis["examples"]) == ("train", 32)  # data.max_train_samples=32
    assert "results_max_abs_difference" not in analysis and len(analysis["isoscore_star_per_layer"]) == 2


def test_a_planted_outlier_dimension_is_found_and_a_decoder_s_example_is_its_last_real_token():
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randn(500, 16, generator=generator)
    tokens[:, 5] *= 40  # a rogue dimension
    tokens[7, 11] = 900.0  # one massive activation
    layer = TokenMoments(16)
    layer.update(tokens[:250])
    layer.update(tokens[250:])
    dimensions, ratio = analyze.outliers(layer)
    assert dimensions == [5]  # dimension 11's mean |a| moves by under 2: no outlier, but its maximum is massive
    median = tokens.abs().mean(dim=0).quantile(0.5)
    assert ratio == pytest.approx(900.0 / median.item(), rel=1e-6) and ratio > 1000
    hidden = torch.arange(2 * 3 * 2, dtype=torch.float).reshape(2, 3, 2)
    left_and_right = torch.tensor([[0, 1, 1], [1, 1, 0]])  # left padding, right padding
    output = SimpleNamespace(packing=None, attention_mask=left_and_right)
    assert analyze.example_vectors(hidden, output, decoder=True).tolist() == [[4.0, 5.0], [8.0, 9.0]]



def test_base_analyses_the_pretrained_model_a_run_starts_from(runs, tiny_bert, shared_data, tmp_path, capsys,
                                                               monkeypatch):
    arguments = tiny_run_arguments(tiny_bert, shared_data, "data.max_eval_samples=40", "eval_batch_size=16",
                                   "batch_size=", "progress=")
    out = tmp_path / "out"
    monkeypatch.chdir(tmp_path)  # the arguments' output_dir is the default runs/..., relative to here
    assert analyze_cli.main([str(runs[1]), "--out", str(out), "--base", *arguments]) == 0
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out"]  # no run directory written
    base = json.loads((out / "pretrained" / "analysis.json").read_text())
    trained = json.loads((out / runs[1].name / "analysis.json").read_text())
    assert base["step"] == 0 and base["label"] == "minilm before training" and base["examples"] == 40
    assert base["isoscore_star_per_layer"] != trained["isoscore_star_per_layer"]  # training moved the profile
    assert len(base["outlier_dimensions_per_layer"]) == len(base["twonn_per_layer"]) == 2  # tiny BERT's layers
    assert all((out / name).is_file() for name in ("figure6.png", "outliers.png", "massive.png"))
    capsys.readouterr()
    assert analyze_cli.main(["--out", str(tmp_path / "bad"), "--base", "recipe=sst2", "model=nope"]) == 2
    assert capsys.readouterr().err.startswith("istar-analyze: error: --base: unknown model 'nope'; presets: ")
    assert not (tmp_path / "bad").exists()


def test_analysis_reads_a_run_whose_lock_another_process_holds(runs, tmp_path):
    from istar_plugin.storage.lock import RunDirLock

    before = sorted(p.relative_to(runs[1]) for p in runs[1].rglob("*"))
    with RunDirLock(runs[1]):  # e.g. istar-export or a report reading it: analysis neither waits nor takes the lock
        analysis = analyze.analyze_run(runs[1], batch_size=16)
    assert analysis["examples"] == 40
    assert sorted(p.relative_to(runs[1]) for p in runs[1].rglob("*")) == before


def test_a_run_with_a_module_inserted_before_its_head_is_read(runs, tiny_bert, shared_data, tmp_path):
    run = tiny_run(tiny_bert, shared_data, tmp_path / "isolayer", "criterion=isolayer", f"init_from={runs[1]}",
                   "data.validation_split=0.25")  # the trainer cannot export it: it keeps its last checkpoint
    analysis = analyze.analyze_run(run)
    results = json.loads((run / "results.json").read_text())
    assert analysis["isoscore_star_per_layer"] == results["eval_isoscore_star_per_layer"]  # the same batches
    train = analyze.analyze_run(run, split="train")
    assert train["examples"] == 24  # the training split without its validation quarter, as the run trained on it


def test_an_undefined_measure_is_none_with_its_reason_and_output_names_are_distinct():
    assert analyze._defined(analyze.explained_variance_curve, torch.zeros(2, 2), 1) == (
        None, "explained variance is undefined: all points are identical (zero variance)")
    names = output_names([analyze.Path(p) for p in ("a/seed1", "b/seed1", "b/seed2")])
    assert names == ["a_seed1", "b_seed1", "seed2"]
    names = output_names([analyze.Path(p) for p in ("x/runs/seed1", "y/runs/seed1", "x/runs/seed1", "z")])
    assert names == ["x_runs_seed1", "y_runs_seed1", "x_runs_seed1_2", "z"]  # a run named twice: numbered


def test_runs_whose_names_and_parents_names_repeat_each_keep_their_analysis(runs, tmp_path, capsys):
    copies = [tmp_path / "sst2" / "runs" / "seed1", tmp_path / "sst2-long" / "runs" / "seed1"]
    for run, copy in zip(runs, copies):
        shutil.copytree(run, copy)
    out = tmp_path / "out"
    assert analyze_cli.main([*map(str, copies), "--out", str(out)]) == 0
    assert f"-> {out / 'sst2_runs_seed1' / 'analysis.json'}" in capsys.readouterr().out
    labels = [json.loads((out / name / "analysis.json").read_text())["label"]
              for name in ("sst2_runs_seed1", "sst2-long_runs_seed1")]
    assert labels == ["I-STAR λ=-1 ζ=0.2", "Base"]  # each run's own, none written over by the other
    assert json.loads((out / ".istar-analysis").read_text())["files"] == [
        "figure4.png", "figure5.png", "figure6.png", "massive.png", "outliers.png",
        "sst2-long_runs_seed1/analysis.json", "sst2_runs_seed1/analysis.json", "summary.md"]

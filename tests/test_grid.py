"""Grid files and command-line sweeps expanded into named cells; planning, snapshots and the dry run."""
import json
import random

import pytest
from omegaconf import OmegaConf

from istar_plugin.cli import grid as grid_cli
from istar_plugin.cli import run as cli
from istar_plugin.config import available, compose
from istar_plugin.errors import ConfigError
from istar_plugin.launch import submit as launch
from istar_plugin.launch.cell import load_snapshot, write_snapshot
from istar_plugin.launch.grid import GridError, load, split_values, sweep
from istar_plugin.launch.options import LaunchError, available_profiles, load_profile, parse
from istar_plugin.launch.submit import plan

PAPER_TASKS = ["sst2", "qnli", "rte", "mrpc", "qqp", "cola", "stsb", "sst5", "squad"]


def test_sweep_crosses_comma_lists_in_order_and_fixes_single_values():
    grid = sweep(["recipe=sst2", "criterion=istar", "criterion.lam=-5,-1", "criterion.layers=[-1,-2]", "seed=1,2,3"])
    assert [cell.name for cell in grid.cells] == [f"lam={lam},seed={seed}" for lam in (-5, -1) for seed in (1, 2, 3)]
    assert grid.cells[1].arguments == ("recipe=sst2", "criterion=istar", "criterion.layers=[-1,-2]", "criterion.lam=-5",
                                       "seed=2")
    assert grid.cells[1].swept == (("criterion.lam", "-5"), ("seed", "2"))
    assert grid.name == "recipe=sst2,criterion=istar,layers=_-1_-2_"
    assert str(grid.default_dir()) == "runs/multirun/recipe=sst2,criterion=istar,layers=_-1_-2_"


def test_split_values_respects_brackets_and_quotes():
    assert split_values("[1,2],[3]") == ["[1,2]", "[3]"]
    assert split_values("'a,b',c") == ["'a,b'", "c"]
    with pytest.raises(GridError, match="empty value in sweep '1,,2'"):
        split_values("1,,2")


def test_names_are_sanitised_shortened_only_when_unambiguous_and_hashed_when_long():
    grid = sweep(["data.dir=/a b/c,/d", "model.max_length=8,16", "data.max_length=8,16", "optim.lr=1e-5"])
    assert grid.cells[1].name == "dir=_a_b_c,model.max_length=8,data.max_length=16"
    assert grid.name == "lr=1e-5"
    long = sweep([f"data.dir={'x' * 200},{'y' * 200}"])
    assert all(len(cell.name) == 150 for cell in long.cells) and long.cells[0].name != long.cells[1].name
    with pytest.raises(GridError, match="share the name 'dir=a_b'"):
        sweep(["data.dir=a/b,a:b"])


def test_paper_grid_is_the_papers_search_space():
    grid = load("paper")
    assert len(grid.cells) == 9 * 3 * 5 * (1 + 1 + 6 * 4) and len({c.name for c in grid.cells}) == len(grid.cells)
    swept = [dict(cell.swept) for cell in grid.cells]
    assert sorted({s["recipe"] for s in swept}) == sorted(PAPER_TASKS)
    assert ({s["model"] for s in swept} == {"bert", "albert", "distilbert"}
            and {s["seed"] for s in swept} == set("12345"))
    istar = [s for s in swept if s["criterion"] == "istar"]
    assert {float(s["criterion.lam"]) for s in istar} == {-5, -3, -1, 1, 3, 5}
    assert {float(s["criterion.zeta"]) for s in istar} == {0.2, 0.4, 0.6, 0.8}
    assert {s["criterion"] for s in swept} == {"cross_entropy", "cosreg", "istar"}
    assert grid.cells[0].name == "recipe=sst2,model=bert,seed=1,criterion=cross_entropy"
    assert grid.cells[-1].name == "recipe=squad,model=distilbert,seed=5,criterion=istar,lam=5,zeta=0.8"


def test_table1_grid_takes_the_tuned_values_from_the_recipes(tmp_path):
    grid = load("table1")
    assert len(grid.cells) == 9 * 3 * 5 * 3
    bert_sst2 = grid.select(["recipe=sst2,model=bert,seed=1,criterion=istar"])
    (cell,) = plan(bert_sst2, tmp_path)
    assert (cell.cfg.criterion.lam, cell.cfg.criterion.zeta) == (-5.0, 0.2)  # Table 2, from recipes/sst2.yaml
    (cell,) = plan(grid.select(["recipe=cola,model=distilbert,seed=1,criterion=istar"]), tmp_path)
    assert (cell.cfg.criterion.lam, cell.cfg.criterion.zeta) == (-3.0, 0.4)


def test_every_recipe_holds_the_papers_table2(shared_data):
    import csv

    from istar_plugin.config import compose
    from istar_plugin.reports.paper.istar import PAPER_MODELS

    path = shared_data.parent / "paper" / "table2.csv"
    if not path.is_file():
        pytest.skip(f"{path} not found")
    with open(path) as handle:
        table2 = {(row["model"], row["task"]): (float(row["lam"]), float(row["zeta"]))
                  for row in csv.DictReader(handle)}
    assert len(table2) == 27
    for preset, name in PAPER_MODELS.items():
        for task in PAPER_TASKS:
            cfg = compose([f"recipe={task}", f"model={preset}", "criterion=istar"])
            assert (cfg.criterion.lam, cfg.criterion.zeta) == table2[name, task], (preset, task)


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=pytest.mark.slow) if "smollm2" in name else name  # reads the 135M GGUF's header once
    for name in available("grids")])
def test_every_shipped_grid_composes(name, tmp_path):
    grid = load(name)
    sample = random.Random(0).sample(grid.cells, min(8, len(grid.cells)))
    planned = plan(grid.select([cell.name for cell in sample]), tmp_path)
    assert all(p.status == "pending" and p.cfg.output_dir == str(tmp_path / p.cell.name) for p in planned)


def test_grid_arguments_filter_swept_keys_and_override_the_rest():
    grid = load("paper", ["recipe=rte", "model=bert", "seed=1,2", "criterion.lam=-5", "optim.lr=1e-5", "max_steps=3,4"])
    assert len(grid.cells) == 2 * 4 * 2  # seeds x zetas x max_steps; only istar cells have lam
    assert all(("optim.lr=1e-5" in c.arguments and c.name.startswith("recipe=rte,model=bert,seed="))
               for c in grid.cells)
    assert grid.cells[0].name == "recipe=rte,model=bert,seed=1,criterion=istar,lam=-5,zeta=0.2,max_steps=3"
    assert len(load("paper", ["criterion=cross_entropy,cosreg"]).cells) == 9 * 3 * 5 * 2


@pytest.mark.parametrize("name, arguments, message", [
    ("nope", [], "unknown grid 'nope'; available: calibration, calibration_minilm, figure7, figure8, isolayer, "
                 "isolayer_minilm, length_grouping_minilm, lm_sst2_smollm2, lora_sst2_smollm2, "
                 "padding_free_sst2_minilm, padding_free_sst2_minilm_no_dropout, padding_include_sst2_minilm, paper, "
                 "replication_glue_minilm, replication_minilm, smoke, spectrum_lr_minilm, st_stsb_minilm, table1"),
    ("paper", ["recipe=imdb"], r"grid 'paper' has no cell with recipe in \['imdb'\]"),
    ("paper", ["seed"], "argument 'seed' is not of the form key=value"),
])
def test_grid_errors_name_the_value_and_the_choices(name, arguments, message):
    with pytest.raises(GridError, match=message):
        load(name, arguments)


def test_bad_grid_files_are_refused(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("sweeps: {seed: [1]}\n")
    with pytest.raises(GridError, match="unknown key.*sweeps; allowed: description, fixed, sweep, variants"):
        load(str(path))
    path.write_text("sweep: {seed: []}\n")
    with pytest.raises(GridError, match="'seed' has an empty list of values"):
        load(str(path))
    with pytest.raises(GridError, match="no cell of grid 'paper' matches 'recipe=imdb\\*'"):
        load("paper").select(["recipe=imdb*"])


def test_a_bad_cell_config_names_the_cell(tmp_path):
    with pytest.raises(GridError, match=r"cell zeta=1.5: criterion.zeta must lie in \[0, 1\], got 1.5"):
        plan(sweep(["criterion=istar", "criterion.zeta=0.5,1.5"]), tmp_path)


def test_snapshot_freezes_the_config_and_a_changed_config_is_refused(tmp_path):
    grid = sweep(["recipe=sst2", "criterion=istar", "seed=1,2"])
    (first, second) = plan(grid, tmp_path)
    write_snapshot(first.run_dir, first.cfg)
    assert load_snapshot(first.run_dir) == first.cfg and OmegaConf.is_readonly(load_snapshot(first.run_dir))
    changed = sweep(["recipe=sst2", "criterion=istar", "criterion.lam=-3", "seed=1,2"])
    with pytest.raises(GridError,
                       match=r"1 cell directories hold a different config.*seed=1 \(differs at criterion.lam\)"):
        plan(changed, tmp_path)


def test_finished_cell_is_skipped_only_when_its_results_match_its_config(tmp_path):
    (cell,) = plan(sweep(["recipe=sst2", "criterion=istar", "seed=1,2"]).select(["seed=1"]), tmp_path)
    write_snapshot(cell.run_dir, cell.cfg)
    (cell.run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cell.cfg))
    results = {"task": "sst2", "model": "bert", "seed": 1, "criterion": OmegaConf.to_container(cell.cfg.criterion)}
    (cell.run_dir / "results.json").write_text(json.dumps({**results, "seed": 2}))
    assert plan(sweep(["recipe=sst2", "criterion=istar", "seed=1,2"]), tmp_path)[0].status == "pending"
    (cell.run_dir / "results.json").write_text(json.dumps(results))
    assert [p.status for p in plan(sweep(["recipe=sst2", "criterion=istar", "seed=1,2"]), tmp_path)] == [
        "finished", "pending"]


def test_a_cell_written_before_a_key_was_added_or_with_precision_auto_still_counts_as_finished(tmp_path):
    """A cell whose config predates model.lora (its keys absent) and says precision=auto, run in fp32, is the same
    run as a new config with the added keys at their old-behaviour values and precision=fp32; other values are not."""
    arguments = ["recipe=sst2", "criterion=istar", "seed=1", "precision=fp32"]
    (cell,) = plan(sweep(arguments), tmp_path)
    old = OmegaConf.to_container(cell.cfg)
    del old["model"]["lora"]
    old["precision"] = "auto"
    old = OmegaConf.create(old)
    write_snapshot(cell.run_dir, old)
    (cell.run_dir / "config.yaml").write_text(OmegaConf.to_yaml(old))
    results = {"task": "sst2", "model": "bert", "seed": 1, "criterion": OmegaConf.to_container(cell.cfg.criterion),
               "precision": "fp32"}
    (cell.run_dir / "results.json").write_text(json.dumps(results))
    assert [p.status for p in plan(sweep(arguments), tmp_path)] == ["finished"]
    with pytest.raises(GridError, match=r"differs at model.lora.r\)"):  # LoRA on: not what the old run did
        plan(sweep([*arguments, "model.lora.r=4"]), tmp_path)
    (cell.run_dir / "results.json").write_text(json.dumps({**results, "precision": "bf16"}))
    with pytest.raises(GridError, match=r"differs at precision\)"):  # auto ran bf16 there: not an fp32 run
        plan(sweep(arguments), tmp_path)


def test_launch_options_and_profiles():
    assert available_profiles() == ["gpu_a100", "local"]
    a100 = load_profile("gpu_a100")
    assert (a100.tasks, a100.gpus_per_node, a100.setup[0]) == (4, 4, "module load cuda/12.1")
    options, rest = parse(["launcher=inline", "seed=1"])
    assert (options.launcher, options.slurm, rest) == ("inline", None, ["seed=1"])
    assert parse(["local.parallelism=3"])[0].local.parallelism == 3


@pytest.mark.parametrize("arguments, message", [
    (["launcher=cloud"], "launcher 'cloud' unknown; choose one of: inline, local, slurm"),
    (["slurm=nope"], "unknown SLURM profile 'nope'; available: gpu_a100, local"),
    (["slurm=local", "slurm.gpus=1"], "bad field 'gpus'.*fields: partition, account"),
    (["slurm=local", "slurm.time_min=0"], "slurm.time_min must be >= 1, got 0"),
    (["launcher=slurm"], "launcher=slurm needs slurm=PROFILE; profiles: gpu_a100, local"),
    (["launcher=local", "slurm=local"], "slurm= and slurm.\\* options need launcher=slurm, not launcher=local"),
    (["local.parallelism=0"], "local.parallelism must be >= 1, got 0"),
])
def test_bad_launch_options_name_the_value_and_the_choices(arguments, message):
    with pytest.raises(LaunchError, match=message):
        parse(arguments)


def test_dry_run_prints_cells_and_sbatch_script_and_writes_nothing(tmp_path, capsys):
    command = ["-m", "recipe=sst2", "criterion=istar", "criterion.lam=-5,-1", "seed=1,2", "slurm=gpu_a100",
               f"grid_dir={tmp_path / 'grid'}", "--dry-run"]
    assert cli.main(command) == 0
    out = capsys.readouterr().out
    assert f"grid recipe=sst2,criterion=istar: 4 cells in {tmp_path / 'grid'}; 4 to run, 0 finished" in out
    assert "  run              lam=-1,seed=2  <- recipe=sst2 criterion=istar criterion.lam=-1 seed=2" in out
    assert "sbatch script (1 job array, the first of 4 cells, profile gpu_a100):" in out
    assert "#SBATCH --array=0-3%4" in out and "#SBATCH --gpus-per-node=4" in out and "module load cuda/12.1" in out
    assert not (tmp_path / "grid").exists()


def test_grid_cli_errors_and_listing(capsys):
    assert grid_cli.main(["paper", "recipe=imdb", "--dry-run"]) == 2
    assert "istar-grid: error: grid 'paper' has no cell with recipe in ['imdb']" in capsys.readouterr().err
    assert grid_cli.main(["--list"]) == 0
    assert capsys.readouterr().out == (
        "grids: calibration, calibration_minilm, figure7, figure8, isolayer, isolayer_minilm, length_grouping_minilm, "
        "lm_sst2_smollm2, lora_sst2_smollm2, padding_free_sst2_minilm, padding_free_sst2_minilm_no_dropout, "
        "padding_include_sst2_minilm, paper, replication_glue_minilm, replication_minilm, smoke, spectrum_lr_minilm, "
        "st_stsb_minilm, table1\nslurm profiles: gpu_a100, local\n")
    assert cli.main(["-m", "seed=1,2", "launcher=cloud"]) == 2
    assert "istar-run: error: launcher 'cloud' unknown" in capsys.readouterr().err


def test_big_grids_are_composed_by_a_pool_of_processes_with_errors_kept(monkeypatch):
    monkeypatch.setattr(launch, "PARALLEL_PLAN_CELLS", 2)
    monkeypatch.setattr(launch.os, "cpu_count", lambda: 2)
    configs = launch.compose_all([["recipe=sst2", "seed=3"], ["criterion=istar", "criterion.zeta=2"], ["recipe=rte"]])
    assert configs[0].seed == 3 and configs[2].task == "rte"
    assert configs[1] == "criterion.zeta must lie in [0, 1], got 2.0"


def test_a_cell_keeps_its_name_when_the_grid_is_filtered(tmp_path):
    path = tmp_path / "orders.yaml"
    path.write_text("variants:\n  - {data.max_length: [8], model.max_length: [16]}\n"
                    "  - {model.max_length: [32], criterion: [istar]}\n")
    full = {cell.arguments: cell.name for cell in load(str(path)).cells}
    only_second = load(str(path), ["criterion=istar"]).cells
    assert [cell.name for cell in only_second] == [full[only_second[0].arguments]] == [
        "model.max_length=32,criterion=istar"]


def test_calibration_grid_has_the_papers_settings():
    grid = load("calibration")
    assert len(grid.cells) == 3 * 10 * 5 * 3 and len({c.name for c in grid.cells}) == len(grid.cells)
    swept = [dict(cell.swept) for cell in grid.cells]
    assert ({s["model"] for s in swept} == {"bert", "roberta", "distilbert"}
            and {s["seed"] for s in swept} == {"1", "2", "3"})
    assert {s["task"] for s in swept} == {"sst2", "mrpc", "cola", "rte", "wnli", "stsb", "qnli", "mnli",
                                          "mnli_mismatched", "qqp"}
    methods = {(s["criterion"], s.get("criterion.target"), s.get("criterion.decay")) for s in swept}
    assert methods == {("cross_entropy", None, None), ("cosreg", "embeddings", None), ("spectrum", None, "polynomial"),
                       ("spectrum", None, "exponential"), ("flow", None, None)}
    for s in swept:
        assert s["optim.epochs"] == ("5" if s["task"] in ("mrpc", "wnli") else "3")
        assert float(s["optim.lr"]) == (1e-5 if s["model"] == "roberta" else 2e-5)


def test_figure7_and_figure8_grids_are_the_papers_ablations(tmp_path):
    zetas = load("figure7")
    assert len(zetas.cells) == 3 * 5 * 6
    swept = [dict(cell.swept) for cell in zetas.cells]
    assert {float(s["criterion.zeta"]) for s in swept} == {0, 0.2, 0.4, 0.6, 0.8, 1}
    (cell,) = plan(zetas.select(["model=distilbert,seed=3,zeta=0"]), tmp_path)
    assert (cell.cfg.task, cell.cfg.criterion.name, cell.cfg.criterion.lam, cell.cfg.criterion.zeta) == (
        "rte", "istar", -1.0, 0.0)
    layers = load("figure8")
    assert len(layers.cells) == 5 * (3 + 3 + 2 * 12 + 6)
    (cell,) = plan(layers.select(["seed=1,model=bert,criterion=istar,layers=_12_"]), tmp_path)
    assert (cell.cfg.task, list(cell.cfg.criterion.layers), cell.cfg.criterion.lam, cell.cfg.criterion.zeta) == (
        "cola", [12], -1.0, 0.8)
    distilbert = {dict(c.swept).get("criterion.layers") for c in layers.cells if dict(c.swept)["model"] == "distilbert"}
    assert distilbert == {None, *(f"[{layer}]" for layer in range(1, 7))}  # DistilBERT has 6 layers


def test_planning_talks_while_it_composes_and_options_may_follow_arguments(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(launch, "PLAN_PROGRESS_S", 0.0)  # a progress line after every composed cell
    assert grid_cli.main(["smoke", f"grid_dir={tmp_path / 'grid'}", "--dry-run"]) == 0
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [f"planning 4 cells of grid smoke in {tmp_path / 'grid'}",
                                         *(f"  composed {k}/4 cell configs" for k in range(1, 5))]
    assert captured.out.startswith(f"grid smoke: 4 cells in {tmp_path / 'grid'}; 4 to run")


def test_replication_glue_grid_sets_table_2s_zeta_per_task_and_the_papers_schedule():
    grid = load("replication_glue_minilm", ["data.dir=/data/${task}"])
    assert len(grid.cells) == 42 and grid.cells[0].name == "recipe=rte,seed=1,criterion=cross_entropy"
    assert sum("seed=5" in cell.name for cell in grid.cells) == 6  # Base, CosReg, lambda -1 on each task
    configs = {cell.name: compose(list(cell.arguments))
               for cell in grid.cells if "lam=-1," in cell.name and "seed=1" in cell.name}
    rte, mrpc = (configs[f"recipe={task},seed=1,criterion=istar,lam=-1,padding=include"] for task in ("rte", "mrpc"))
    assert (rte.criterion.zeta, mrpc.criterion.zeta, rte.criterion.padding) == (0.8, 0.6, "include")
    assert (rte.data.dir, rte.optim.epochs, rte.batch_size * rte.optim.grad_accum, rte.optim.warmup_ratio) == (
        "/data/rte", 3, 32, 0.0)
    assert rte.optim.schedule == "constant" and rte.data.max_length == 128 and rte.data.validation_split == 0.1
    with pytest.raises(ConfigError, match=r"no value for task 'sst2'; it gives: rte, mrpc"):
        compose(["recipe=sst2", "criterion=istar", "criterion.zeta=${for_task:rte,0.8,mrpc,0.6}"])


def test_a_grid_whose_cells_need_the_unreachable_hub_is_refused_before_any_cell_runs(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert grid_cli.main(["smoke", "model=bert", "launcher=local", f"grid_dir={tmp_path / 'grid'}"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("istar-grid: error: cannot fetch model 'bert-base-cased' (model=bert) from the "
                           "Hugging Face hub (HF_HUB_OFFLINE is set); offline: model=minilm")
    assert not (tmp_path / "grid").exists()  # refused before a cell was written or started

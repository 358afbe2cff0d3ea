"""Grid files and command-line sweeps expanded into named cells (the order, names and filters of cells, refusals
naming the value and the choices), then planned against the grid directory (snapshots that freeze a cell's config,
finished cells skipped, cells composed by a pool of processes, progress while planning, the unreachable hub refused
before a cell runs) and the dry run; istar-grid's errors and listing. The shipped grids are in
tests/test_shipped_grids.py, the launch options in tests/test_launch_options.py."""
import json

import pytest
from omegaconf import OmegaConf

from istar_plugin.cli import grid as grid_cli
from istar_plugin.cli import run as cli
from istar_plugin.launch import submit as launch
from istar_plugin.launch.cell import load_snapshot, write_snapshot
from istar_plugin.launch.grid import GridError, load, split_values, sweep
from istar_plugin.launch.submit import plan
from istar_plugin.storage.ownership import GRID_MARKER, mark


def test_sweep_crosses_comma_lists_in_order_and_fixes_single_values():
    grid = sweep(["recipe=sst2", "criterion=istar", "criterion.lam=-5,-1", "criterion.layers=[-1,-2]", "seed=1,2,3"])
    assert [cell.name for cell in grid.cells] == [f"lam={lam},seed={seed}" for lam in (-5, -1) for seed in (1, 2, 3)]
    assert grid.cells[1].arguments == ("recipe=sst2", "criterion=istar", "criterion.layers=[-1,-2]", "criterion.lam=-5",
                                       "seed=2")
    assert grid.cells[1].swept == (("criterion.lam", "-5"), ("seed", "2"))
    assert grid.name == "recipe=sst2,criterion=istar,layers=_-1_-2_"
    assert str(grid.default_dir()) == "runs/multirun/recipe=sst2,criterion=istar,layers=_-1_-2_"


def test_a_key_given_twice_takes_its_last_value_as_in_a_run():
    grid = sweep(["recipe=sst2", "seed=1,2", "criterion.lam=-5,-1", "seed=3,4"])
    assert [(cell.name, cell.swept) for cell in grid.cells[:2]] == [
        ("seed=3,lam=-5", (("seed", "3"), ("criterion.lam", "-5"))),
        ("seed=3,lam=-1", (("seed", "3"), ("criterion.lam", "-1")))]
    assert sorted({cell.arguments for cell in grid.cells}) == sorted(cell.arguments for cell in grid.cells)  # 4 runs
    once = sweep(["recipe=sst2", "seed=1,2", "seed=3"])
    assert (once.name, [(cell.name, cell.arguments) for cell in once.cells]) == (
        "recipe=sst2,seed=3", [("default", ("recipe=sst2", "seed=3"))])
    fixed_last = load("smoke", ["max_steps=3,4", "max_steps=5"])
    assert len(fixed_last.cells) == 4 and all("max_steps=5" in cell.arguments and "max_steps" not in cell.name
                                              for cell in fixed_last.cells)


def test_split_values_respects_brackets_and_quotes():
    assert split_values("[1,2],[3]", "criterion.layers") == ["[1,2]", "[3]"]
    assert split_values("'a,b',c", "data.dir") == ["'a,b'", "c"]


@pytest.mark.parametrize("argument", ["criterion.lam=", "criterion.lam=1,,2", "criterion.lam=1,"])
def test_an_empty_value_is_refused_naming_the_key_and_the_argument(argument):
    expected = (f"argument '{argument}' gives criterion.lam an empty value; expected criterion.lam=VALUE or "
                "criterion.lam=A,B,... with no value empty (null for no value)")
    with pytest.raises(GridError) as refused:
        sweep(["recipe=sst2", "criterion=istar", argument, "seed=1,2"])
    assert str(refused.value) == expected
    with pytest.raises(GridError) as refused:
        load("smoke", [argument])
    assert str(refused.value) == expected


def test_names_are_sanitised_shortened_only_when_unambiguous_and_hashed_when_long():
    grid = sweep(["data.dir=/a b/c,/d", "model.max_length=8,16", "data.max_length=8,16", "optim.lr=1e-5"])
    assert grid.cells[1].name == "dir=_a_b_c,model.max_length=8,data.max_length=16"
    assert grid.name == "lr=1e-5"
    long = sweep([f"data.dir={'x' * 200},{'y' * 200}"])
    assert all(len(cell.name) == 150 for cell in long.cells) and long.cells[0].name != long.cells[1].name
    with pytest.raises(GridError, match="share the name 'dir=a_b'"):
        sweep(["data.dir=a/b,a:b"])


@pytest.mark.parametrize("values, first, second", [
    ("1,1.0", "1", "1.0"), ("-5,-5e0", "-5", "-5e0"), ("1e-3,0.001", "1e-3", "0.001")])
def test_values_the_config_reads_as_equal_are_one_run_refused_as_exact_duplicates_are(values, first, second, tmp_path):
    with pytest.raises(GridError) as refused:
        sweep(["recipe=sst2", "criterion=istar", f"criterion.lam={values}", "seed=1,2"])
    assert str(refused.value) == (
        "two cells of grid 'recipe=sst2,criterion=istar' are the same run (their values are equal as the config reads "
        f"them): [('criterion.lam', '{first}'), ('seed', '1')] and [('criterion.lam', '{second}'), ('seed', '1')]")
    path = tmp_path / "lams.yaml"
    path.write_text("fixed:\n  recipe: sst2\n  criterion: istar\nsweep:\n  criterion.lam: [-5, -5.0]\n")
    with pytest.raises(GridError, match=r"two cells of grid 'lams' are the same run .*: "
                                        r"\[\('criterion.lam', '-5'\)\] and \[\('criterion.lam', '-5.0'\)\]"):
        load(str(path))
    with pytest.raises(GridError, match="two cells of grid 'recipe=sst2' share the name 'lam=-1'"):
        sweep(["recipe=sst2", "criterion.lam=-1,-1"])
    with pytest.raises(GridError, match=r"are the same run .*: \[\('criterion.layers', '\[1,2\]'\)\] and "
                                        r"\[\('criterion.layers', '\[1, 2\]'\)\]"):
        sweep(["criterion.layers=[1,2],[1, 2]"])
    with pytest.raises(GridError, match="are the same run"):
        sweep(["progress=true,True"])
    assert [len(sweep([f"criterion.lam={v}"]).cells) for v in ("1,1.5", "0,false", "1,true", "null,0")] == [2] * 4


def test_grid_arguments_filter_swept_keys_and_override_the_rest():
    grid = load("paper", ["recipe=rte", "model=bert", "seed=1,2", "criterion.lam=-5", "optim.lr=1e-5", "max_steps=3,4"])
    assert len(grid.cells) == 2 * 4 * 2  # seeds x zetas x max_steps; only istar cells have lam
    assert all(("optim.lr=1e-5" in c.arguments and c.name.startswith("recipe=rte,model=bert,seed="))
               for c in grid.cells)
    assert grid.cells[0].name == "recipe=rte,model=bert,seed=1,criterion=istar,lam=-5,zeta=0.2,max_steps=3"
    assert len(load("paper", ["criterion=cross_entropy,cosreg"]).cells) == 9 * 3 * 5 * 2


@pytest.mark.parametrize("name, arguments, message", [
    ("nope", [], "unknown grid 'nope'; available: calibration, calibration_minilm, fast_dropout_sst2_minilm, figure7, "
                 "figure8, isolayer, isolayer_minilm, length_grouping_minilm, lm_sst2_smollm2, lora_sst2_smollm2, "
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
        plan(sweep(["recipe=movie_snippets", "criterion=istar", "criterion.zeta=0.5,1.5"]), tmp_path)


def test_a_bad_swept_value_is_refused_in_one_line_before_planning_and_nothing_is_written(tmp_path, capsys):
    grid_dir = tmp_path / "grid"
    assert cli.main(["-m", "recipe=sst2", "criterion=istar", "seed=1,true", f"grid_dir={grid_dir}"]) == 2
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", (
        "istar-run: error: cell seed=true: command line: bad value for 'seed': Value 'True' of type 'bool' could not "
        "be converted to Integer full_key: seed object_type=RunConfig\n"))
    assert grid_cli.main(["smoke", "optim.warmup_ratio=0.1,true", f"grid_dir={grid_dir}"]) == 2
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", (
        "istar-grid: error: cell criterion=cross_entropy,seed=1,warmup_ratio=true: command line: bad value for "
        "'optim.warmup_ratio': Value 'True' of type 'bool' could not be converted to Float full_key: "
        "optim.warmup_ratio reference_type=OptimConfig object_type=OptimConfig\n"))
    assert not grid_dir.exists()


def test_snapshot_freezes_the_config_and_a_changed_config_is_refused(tmp_path):
    grid = sweep(["recipe=sst2", "criterion=istar", "seed=1,2"])
    (first, second) = plan(grid, tmp_path)
    write_snapshot(first.run_dir, first.cfg)
    assert load_snapshot(first.run_dir) == first.cfg and OmegaConf.is_readonly(load_snapshot(first.run_dir))
    changed = sweep(["recipe=sst2", "criterion=istar", "criterion.lam=-3", "seed=1,2"])
    with pytest.raises(GridError,
                       match=r"1 cell directories hold a different config.*seed=1 \(differs at criterion.lam\)"):
        plan(changed, tmp_path)


def test_a_cell_directory_of_someone_elses_files_is_refused_in_one_line(tmp_path, capsys):
    grid_dir = tmp_path / "grid"
    mark(grid_dir, GRID_MARKER, grid="earlier")
    (grid_dir / "seed=2").mkdir()
    (grid_dir / "seed=2" / "notes.txt").write_text("mine")
    command = ["-m", "recipe=sst2", "seed=1,2", f"grid_dir={grid_dir}", "--dry-run"]
    assert cli.main(command) == 4
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"istar-run: error: cell directory {grid_dir / 'seed=2'}: exists and holds files istar_plugin did not write "
        "(notes.txt); choose a new or empty cell directory, nothing was changed")
    (grid_dir / "seed=2" / "notes.txt").unlink()
    (grid_dir / "seed=1").write_text("mine")  # a file where the cell's directory goes
    assert cli.main(command) == 4
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"istar-run: error: cell directory {grid_dir / 'seed=1'}: exists and is not a directory; choose another "
        "cell directory")
    assert (grid_dir / "seed=1").read_text() == "mine"


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
        "grids: calibration, calibration_minilm, fast_dropout_sst2_minilm, figure7, figure8, isolayer, "
        "isolayer_minilm, length_grouping_minilm, lm_sst2_smollm2, lora_sst2_smollm2, padding_free_sst2_minilm, "
        "padding_free_sst2_minilm_no_dropout, "
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


def test_planning_talks_while_it_composes_and_options_may_follow_arguments(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(launch, "PLAN_PROGRESS_S", 0.0)  # a progress line after every composed cell
    assert grid_cli.main(["smoke", f"grid_dir={tmp_path / 'grid'}", "--dry-run"]) == 0
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [f"planning 4 cells of grid smoke in {tmp_path / 'grid'}",
                                         *(f"  composed {k}/4 cell configs" for k in range(1, 5))]
    assert captured.out.startswith(f"grid smoke: 4 cells in {tmp_path / 'grid'}; 4 to run")


def test_a_grid_whose_cells_need_the_unreachable_hub_is_refused_before_any_cell_runs(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert grid_cli.main(["smoke", "model=bert", "launcher=local", f"grid_dir={tmp_path / 'grid'}"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("istar-grid: error: cannot fetch model 'bert-base-cased' (model=bert) from the "
                           "Hugging Face hub (HF_HUB_OFFLINE is set); offline: model=minilm")
    assert not (tmp_path / "grid").exists()  # refused before a cell was written or started

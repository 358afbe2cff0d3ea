"""The grids the package ships: each composes, and the paper's grids hold its settings (its search space, Table 1
with each recipe's tuned values from Table 2, the calibration study, the Figure 7 and 8 ablations, the GLUE
replication with Table 2's zeta per task and the paper's schedule)."""
import random

import pytest

from istar_plugin.config import available, compose
from istar_plugin.errors import ConfigError
from istar_plugin.launch.grid import load
from istar_plugin.launch.submit import plan

PAPER_TASKS = ["sst2", "qnli", "rte", "mrpc", "qqp", "cola", "stsb", "sst5", "squad"]


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


def test_replication_glue_grid_sets_table_2s_zeta_per_task_and_the_papers_schedule():
    grid = load("replication_glue_minilm", ["data.dir=/data/${task}"])
    assert len(grid.cells) == 50 and grid.cells[0].name == "recipe=rte,seed=1,criterion=cross_entropy"
    assert sum("seed=5" in cell.name for cell in grid.cells) == 10  # Base, CosReg, lambda -1, -3, -0.1 on each task
    configs = {cell.name: compose(list(cell.arguments))
               for cell in grid.cells if "lam=-1," in cell.name and "seed=1" in cell.name}
    rte, mrpc = (configs[f"recipe={task},seed=1,criterion=istar,lam=-1,padding=include"] for task in ("rte", "mrpc"))
    assert (rte.criterion.zeta, mrpc.criterion.zeta, rte.criterion.padding) == (0.8, 0.6, "include")
    assert (rte.data.dir, rte.optim.epochs, rte.batch_size * rte.optim.grad_accum, rte.optim.warmup_ratio) == (
        "/data/rte", 3, 32, 0.0)
    assert rte.optim.schedule == "constant" and rte.data.max_length == 128 and rte.data.validation_split == 0.1
    with pytest.raises(ConfigError, match=r"no value for task 'sst2'; it gives: rte, mrpc"):
        compose(["recipe=sst2", "criterion=istar", "criterion.zeta=${for_task:rte,0.8,mrpc,0.6}"])

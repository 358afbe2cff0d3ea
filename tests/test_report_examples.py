"""Worked examples of the run records' readers and writers and of what the reports compute for small grids, each run
as a doctest in its module's namespace (they are the modules' examples; kept here so that the modules' docstrings say
what a thing is)."""
import doctest
import importlib

import pytest

EXAMPLES = {
    "istar_plugin.reports.outputs.istar_tables": """
>>> import json, tempfile
>>> from pathlib import Path
>>> from istar_plugin.reports.records.cells import collect
>>> grid = Path(tempfile.mkdtemp())
>>> for seed, accuracy in [(1, 0.90), (2, 0.92)]:
...     cell = grid / "sst2" / f"seed{seed}"
...     cell.mkdir(parents=True)
...     _ = (cell / "config.yaml").write_text("task: sst2\\n")
...     _ = (cell / "results.json").write_text(json.dumps({"task": "sst2", "model": "bert", "seed": seed,
...         "criterion": {"name": "cross_entropy"}, "main_metric": "accuracy", "metrics": {"accuracy": accuracy},
...         "eval_isoscore_star": 0.1}))
>>> _ = (grid / "sst2" / "seed3").mkdir(); _ = (grid / "sst2" / "seed3" / "config.yaml").write_text("task: sst2\\n")
>>> records, problems = collect(grid)
>>> [(row["Base"].mean, round(row["Base"].std, 4), row["Base"].n) for row in table1(records)]
[(91.0, 1.4142, 2)]
>>> [(Path(path).name, reason) for path, reason in problems]
[('seed3', 'no results.json (the run has not finished)')]
>>> from istar_plugin.reports.records.cells import Record
>>> cell = lambda lam, seed, score: Record("sst2", "bert", "istar", lam, 0.2, seed, "accuracy", score / 100, score,
...                                        0.1, f"/g/{lam}{seed}")
>>> one_seed_at_lambda_5 = cell(-5.0, 1, 99.0)  # the best mean, but over fewer seeds: it does not compete
>>> print(table2_markdown(table2([cell(-1.0, 1, 92.0), cell(-1.0, 2, 93.0), cell(-3.0, 1, 93.0), cell(-3.0, 2, 94.0),
...                               one_seed_at_lambda_5])), end="")
| Model | Task | Method | λ | ζ | mean ± std | settings compared |
|---|---|---|---|---|---|---|
| bert | sst2 | I-STAR | -3 | 0.2 | 93.50 ± 0.71 | 2 |
>>> format_score(Setting("minilm", "sst2", "istar", -1.0, 0.2, "accuracy", (1,), (92.5,), (0.1,)), 1)
'92.50 ± — (λ -1, ζ 0.2, n=1)'
>>> format_score(Setting("bert", "mrpc", "spectrum", None, None, "f1", (1, 2), (81.2, 81.2), (0.1, 0.1),
...                      collapsed=2), 2)
'81.20 ± 0.00 (2 collapsed)'
>>> format_score(Setting("bert", "sst2", "istar", -5.0, 0.2, "accuracy", (1, 2), (92.5, 93.5), (0.1, 0.1)), 2)
'93.00 ± 0.71 (λ -5, ζ 0.2) · paper 92.65 ± 0.18 (+0.35)'
>>> format_score(Setting("minilm", "rte", "istar", -1.0, 0.8, "accuracy", (1, 2), (60.0, 62.0), (0.1, 0.1)), 2,
...              paper_model="bert")
'61.00 ± 1.41 (λ -1, ζ 0.8) · paper bert 62.53 ± 0.70 (-1.53)'
""",
    "istar_plugin.reports.comparisons.versus_base": """
>>> import json, tempfile
>>> from pathlib import Path
>>> from istar_plugin.reports.records.cells import collect
>>> from istar_plugin.storage.predictions import write_predictions
>>> grid, refs = Path(tempfile.mkdtemp()), [0, 1] * 50
>>> cells = [("cross_entropy", 1, 60), ("cross_entropy", 2, 62), ("istar", 1, 90), ("istar", 2, 88)]
>>> for method, seed, correct in cells:
...     cell = grid / f"{method}{seed}"; cell.mkdir()
...     _ = (cell / "config.yaml").write_text("task: rte\\n")
...     _ = (cell / "results.json").write_text(json.dumps({"task": "rte", "model": "minilm", "seed": seed,
...         "criterion": {"name": method, "lam": -1 if method == "istar" else None}, "main_metric": "accuracy",
...         "metrics": {"accuracy": correct / 100}, "eval_isoscore_star": 0.1}))
...     _ = write_predictions(cell, "rte", 10, refs[:correct] + [1 - r for r in refs[correct:]], refs)
>>> [row["text"] for row in comparisons(collect(grid)[0])]
['+28.00 [+21.00, +34.50] better']
>>> (grid / "istar2" / "predictions.json").unlink()
>>> [row["resampled"] for row in comparisons(collect(grid)[0])]
['seeds (predictions.json of istar2 is missing)']
>>> [line.removeprefix(str(grid)) for line in unpaired_predictions(collect(grid)[0])]
['/istar2/predictions.json is missing: compared with Base by its seed alone, not its examples']
>>> from istar_plugin.reports.records.cells import Record
>>> def run(name, references):
...     cell = Path(tempfile.mkdtemp()) / name; cell.mkdir()
...     _ = write_predictions(cell, "rte", 10, references, references)
...     _ = (cell / "results.json").write_text(json.dumps({"task": "rte", "model": "m", "criterion": {}, "seed": 1,
...         "step": 10, "data": {"eval": {"examples": 4}}}))
...     return Record("rte", "m", name, None, None, 1, "accuracy", 0.5, 50.0, 0.1, str(cell))
>>> pairing = pair_outcomes("rte", "accuracy", [run("istar", [0, 1, 0, 1])], [run("base", [1, 1, 0, 0])])
>>> pairing.reasons(), pairing.method
(['predictions.json of istar does not match the references of base'], {1: None})
""",
    "istar_plugin.reports.comparisons.versus_reference": """
>>> import json, tempfile
>>> from pathlib import Path
>>> from istar_plugin.reports.records.cells import collect
>>> grid = Path(tempfile.mkdtemp())
>>> for precision, seed, accuracy, iso in [("fp32", 1, .80, .20), ("fp32", 2, .84, .24), ("bf16", 1, .81, .21),
...                                        ("bf16", 2, .84, .23)]:
...     cell = grid / f"{precision}{seed}"; cell.mkdir()
...     _ = (cell / "config.yaml").write_text(f"task: sst2\\nprecision: {precision}\\n")
...     _ = (cell / "results.json").write_text(json.dumps({"task": "sst2", "model": "minilm", "seed": seed,
...         "criterion": {"name": "cross_entropy"}, "main_metric": "accuracy", "metrics": {"accuracy": accuracy},
...         "eval_isoscore_star": iso}))
>>> rows = comparisons(collect(grid)[0], "precision=fp32")
>>> [(row["variant"], row["per_seed"], row["score_within_spread"]) for row in rows]
[('precision=bf16', '+1.00 +0.00', True)]
""",
    "istar_plugin.reports.outputs.calibration_tables": """
>>> import json, tempfile
>>> from pathlib import Path
>>> grid = Path(tempfile.mkdtemp())
>>> for seed, f1 in [(1, 0.8122), (2, 0.85)]:
...     cell = grid / f"seed{seed}"; cell.mkdir()
...     _ = (cell / "results.json").write_text(json.dumps({"task": "mrpc", "model": "bert", "seed": seed,
...         "criterion": {"name": "spectrum", "decay": "polynomial"}, "metrics": {"f1": f1},
...         "collapsed": seed == 1, "embedding_i1": 0.99, "embedding_i2": 0.01, "eval_isoscore_star": 0.1}))
>>> rows = calibration_rows(read_runs([grid / "seed1", grid / "seed2"]))
>>> print(table1_markdown(rows).splitlines()[-1])
| bert | Spec-Pol | — | 83.11 ± 2.67 (1/2 collapsed) [81.22] | — | — | — | — | — | — | — | — |
""",
    "istar_plugin.reports.outputs.isolayer_table3": """
>>> import json, tempfile
>>> grid = Path(tempfile.mkdtemp())
>>> for seed in (1, 2):
...     for stage, name, value in ((1, "cross_entropy", 0.60 + seed / 100), (2, "isolayer", 0.63)):
...         cell = grid / f"seed={seed},criterion={name}"
...         cell.mkdir()
...         init = str(grid / f"seed={seed},criterion=cross_entropy") if stage == 2 else None
...         _ = (cell / "results.json").write_text(json.dumps({"task": "rte", "model": "bert", "seed": seed,
...             "criterion": {"name": name}, "main_metric": "accuracy", "metrics": {"accuracy": value},
...             "init_from": init, "cls_isoscore": 0.01 * stage, "cls_explained_variance": [0.6 / stage, 0.7, 0.8],
...             "trainable_parameters": 1000 if stage == 1 else 10}))
>>> (row,) = rows(sorted(grid.iterdir()))
>>> row["stage 1"], row["stage 2"], row["improved"], row["paper stage 2"]
('61.5 (0.71)', '63.0 (0.00)', '2/2', '70.40 (1.05) .27/.35/.38')
""",
    "istar_plugin.reports.outputs.eval_curves": """
>>> import json, tempfile
>>> from pathlib import Path
>>> from istar_plugin.reports.records.cells import Record
>>> grid, records = Path(tempfile.mkdtemp()), []
>>> for seed, accuracies in ((1, (0.5, 0.8)), (2, (0.5, 0.9))):
...     cell = grid / f"seed{seed}"; cell.mkdir()
...     log = [{"step": step, "eval/accuracy": value, "eval/isoscore_star": 0.2, "eval/embedding_i1": 0.84}
...            for step, value in zip((0, 100), accuracies)]
...     _ = (cell / "metrics.jsonl").write_text("".join(json.dumps(record) + "\\n" for record in log))
...     records.append(Record("sst2", "minilm", "spectrum", None, None, seed, "accuracy", accuracies[-1],
...                           100 * accuracies[-1], 0.2, str(cell)))
>>> [(row["step"], row["seeds"], row["score"], round(row["score_std"], 4)) for row in rows(records)]
[(0, 2, 50.0, 0.0), (100, 2, 85.0, 7.0711)]
>>> print(markdown(rows(records)).splitlines()[-1])
| minilm | sst2 | spectrum | — | — | — | accuracy | 100 | 2 | 85.00 ± 7.07 | 0.200 ± 0.000 | 0.840 ± 0.000 |
""",
    "istar_plugin.reports.outputs.penalised_layers": """
>>> import json, tempfile
>>> from pathlib import Path
>>> from istar_plugin.reports.records.cells import Record
>>> grid = Path(tempfile.mkdtemp())
>>> records = []
>>> cells = (("cross_entropy", None, None, [0.3, 1e-6, 2e-6]), ("istar", 1.0, (2, 3), [0.3, 0.01, 0.05]))
>>> for method, lam, layers, scores in cells:
...     cell = grid / method; cell.mkdir()
...     _ = (cell / "results.json").write_text(json.dumps({"task": "lm", "model": "smollm2", "criterion": {},
...                                                         "seed": 1, "eval_isoscore_star_per_layer": scores}))
...     records.append(Record("lm", "smollm2", method, lam, None, 1, "perplexity", 20.0, 20.0, 0.1, str(cell),
...                           layers=layers))
>>> [(row["method"], row["layers"], row["median"], row["high"]) for row in rows(records)]
[('Base', '2-3', '1.5e-06', '2e-06'), ('I-STAR', '2-3', '0.03', '0.05')]
""",
    "istar_plugin.reports.outputs.provenance_table": """
>>> from istar_plugin.reports.records.cells import Record
>>> from istar_plugin.reports.records.run_extras import Provenance
>>> cell = lambda task, seed: Record(task, "minilm", "istar", -1.0, 0.2, seed, "accuracy", 0.6, 60.0, 0.1, f"/g/{seed}")
>>> here = Provenance("n1", "AMD EPYC", ("avx512_bf16",), "2.13.0", "bf16", "a0ee4f82a1241382d65b+modified")
>>> rows = [row(cell("rte", 1), here), row(cell("rte", 2), here), row(cell("mrpc", 1), Provenance("n2"))]
>>> print(markdown(rows), end="")
| Host | CPU | bf16 features | torch | precision | commit | cells |
|---|---|---|---|---|---|---|
| n1 | AMD EPYC | avx512_bf16 | 2.13.0 | bf16 | a0ee4f82a124+modified | 2 (rte 2) |
| n2 | not recorded | not recorded | not recorded | not recorded | not recorded | 1 (mrpc 1) |
>>> from istar_plugin.reports.records.cells import Record
>>> cell = lambda method, seed, seconds: Record("rte", "minilm", method, None, None, seed, "accuracy", 0.6, 60.0, 0.1,
...                                            f"/g/{method}{seed}", seconds=seconds)
>>> (row,) = wall_times([cell("cross_entropy", 1, 400.0), cell("cross_entropy", 2, 440.0), cell("istar", 1, None)])
>>> row
{'model': 'minilm', 'task': 'rte', 'method': 'Base', 'variant': '', 'cells': 2, 'median s': 420.0, 'min s': 400.0, \
'max s': 440.0}
""",
    "istar_plugin.reports.outputs.analysis_table": """
>>> base = {"label": "Base", "criterion": {"name": "cross_entropy"}, "seed": 1, "step": 75, "split": "eval",
...         "examples": 872, "main_metric": "accuracy", "score": 0.7764, "isoscore_star_per_layer": [0.19, 0.00172],
...         "twonn_per_layer": [23.31, None], "explained_variance_per_layer": [[0.1], [0.354]],
...         "average_cosine_per_layer": [0.2, 0.174], "mean_activation": [0.1, -0.212],
...         "outlier_dimensions_per_layer": [[], [99]], "word_embeddings": {"I1": 0.84341, "I2": 0.005832}}
>>> penalised = {**base, "label": "I-STAR λ=-1 ζ=0.2", "criterion": {"name": "istar", "lam": -1.0}, "score": 0.5516}
>>> print(markdown([penalised, base]), end="")  # doctest: +NORMALIZE_WHITESPACE
| | Base | I-STAR λ=-1 ζ=0.2 |
|---|---|---|
| accuracy (eval, step) | 0.776 (872, 75) | 0.552 (872, 75) |
| IsoScore* per layer 1 → 2 | 0.190 0.0017 | 0.190 0.0017 |
| TwoNN of each example's vector per layer 1 → 2 | 23.3 — | 23.3 — |
| last layer: EV_1, average cosine, mean \\|mean activation\\| | 0.354, 0.174, 0.156 | 0.354, 0.174, 0.156 |
| outlier dimensions per layer 1 → 2 | 0 1 | 0 1 |
| word embeddings I1, I2 | 0.8434, 0.00583 | 0.8434, 0.00583 |
""",
    "istar_plugin.reports.records.archive": """
>>> import json, tempfile
>>> grid = Path(tempfile.mkdtemp())
>>> cell = grid / "seed=1"; cell.mkdir()
>>> _ = (cell / "config.yaml").write_text("seed: 1\\n")
>>> _ = (cell / "results.json").write_text(json.dumps({"task": "rte", "model": "m", "criterion": {}, "seed": 1}))
>>> (queued := grid / "seed=2").mkdir(); _ = (queued / "cell.yaml").write_text("seed: 2\\n")
>>> out = Path(tempfile.mkdtemp()) / "archive"
>>> [(o.name, o.state) for o in archive(grid, out)]
[('seed=1', 'archived'), ('seed=2', 'skipped')]
>>> sorted(path.name for path in (out / "seed=1").iterdir())
['archive.json', 'config.yaml', 'results.json']
>>> [o.state for o in archive(grid, out)]  # the same records again: nothing to do
['unchanged', 'skipped']
>>> lines = [json.dumps({"step": step, "train/loss": 1 / step}) for step in range(1, 1001)]
>>> lines.insert(500, json.dumps({"step": 500, "eval/accuracy": 0.9}))
>>> text, kept, total = summarised_log("\\n".join(lines) + "\\n", training_records=10)
>>> kept, total, [json.loads(line)["step"] for line in text.splitlines()]
(13, 1001, [1, 101, 201, 301, 401, 500, 500, 501, 601, 701, 801, 901, 1000])
""",
    "istar_plugin.reports.records.run_extras": """
>>> import json, tempfile
>>> cell = Path(tempfile.mkdtemp())
>>> _ = (cell / "attempts.jsonl").write_text(json.dumps({"event": "start", "time": 100.0, "host": "n1"}) + "\\n"
...                                          + json.dumps({"event": "finished", "time": 160.5}) + "\\n")
>>> _ = (cell / "job.err").write_text("loading\\rstep 10/20\\n\\n")
>>> wall_seconds(cell), attempt_host(cell), failure_hints(cell).endswith("job.err: step 10/20")
(60.5, 'n1', True)
>>> _ = (cell / "metrics.jsonl").write_text("".join(json.dumps(record) + "\\n" for record in (
...     {"step": 0, "eval/accuracy": 0.5}, {"step": 10, "train/loss": 0.7}, {"step": 20, "eval/accuracy": 0.8})))
>>> evaluations(cell)
{0: {'eval/accuracy': 0.5}, 20: {'eval/accuracy': 0.8}}
>>> _ = (cell / "results.json").write_text(json.dumps({"task": "rte", "model": "m", "criterion": {}, "seed": 1,
...     "eval_isoscore_star_per_layer": [0.3, 0.01, 0.05], "precision": "bf16", "provenance": {"host": "n2",
...     "cpu": "AMD EPYC", "cpu_flags": ["avx512_bf16"], "torch": "2.13.0", "commit": "a0ee4f8"}}))
>>> layer_isoscores(cell, [0, 2, 3]), sentence_embeddings(cell)
([0.01, 0.05], None)
>>> cell_provenance(cell)
Provenance(host='n2', cpu='AMD EPYC', cpu_flags=('avx512_bf16',), torch='2.13.0', precision='bf16', commit='a0ee4f8')
>>> cell_provenance(cell.parent / "no such cell")
Provenance(host=None, cpu=None, cpu_flags=None, torch=None, precision=None, commit=None)
""",
    "istar_plugin.storage.reading": """
>>> import tempfile
>>> from istar_plugin.errors import ConfigError
>>> folder = Path(tempfile.mkdtemp())
>>> def refused(path, **options):
...     try:
...         read_text(path, "recipe", ConfigError, **options)
...     except ConfigError as error:
...         return str(error).replace(str(folder), "DIR")
>>> refused(folder)
'cannot read recipe DIR: it is a folder, not a file (name a file)'
>>> _ = (folder / "r.yaml").write_bytes(b"task: caf\\xe9\\n")
>>> refused(folder / "r.yaml")
'cannot read recipe DIR/r.yaml: not UTF-8 text (byte 0xe9 at offset 9); save it as UTF-8'
>>> refused(folder / "r.yaml", max_bytes=4)
'cannot read recipe DIR/r.yaml: 11 bytes is too large for a recipe (at most 4); is it the right file?'
>>> cannot_read("/x/train.tsv", "data file", PermissionError(errno.EACCES, "Permission denied"))
'cannot read data file /x/train.tsv: permission denied (check its mode and owner)'
>>> cannot_read("/x/run", "run directory", PermissionError(errno.EACCES, "Permission denied", "/x/run/checkpoints"))
'cannot read run directory /x/run: permission denied on /x/run/checkpoints (check its mode and owner)'
>>> cannot_read("/x/d", "data folder", OSError(errno.EIO, "Input/output error"))
'cannot read data folder /x/d: input/output error'
>>> with reading("/no/such/folder", "data folder"):
...     _ = os.listdir("/no/such/folder")
Traceback (most recent call last):
FileNotFoundError: [Errno 2] No such file or directory: '/no/such/folder'
""",
    "istar_plugin.storage.results": """
>>> import tempfile
>>> run = Path(tempfile.mkdtemp())
>>> record = ResultsRecord("finished", "sst2", "bert", {"name": "istar", "lam": -1.0}, seed=1, step=10, epoch=1,
...                        metrics={"accuracy": 0.9}, main_metric="accuracy", top_level_metrics=("accuracy",))
>>> _ = write_results(run / "results.json", record)
>>> read_results(run / "results.json") == record
True
>>> _ = write_results(run / "results.json", failed_record("the loss became nan at step 2", "sst2", "bert",
...                                                        {"name": "istar"}, seed=1))
>>> read_results(run / "results.json", require_finished=True)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
istar_plugin.storage.results.ResultsError: ...: failed: the loss became nan at step 2 (results.json status: failed)
""",
    "istar_plugin.storage.logs": """
>>> import tempfile
>>> run = Path(tempfile.mkdtemp())
>>> with MetricsLog(run) as log:
...     _ = log.append({"step": 10, "loss": 0.5})
>>> [record["loss"] for record in log.records()]
[0.5]
>>> _ = (run / "damaged.jsonl").write_text('{"step": 1}\\n{"st\\n{"step": 3}\\n{"step": 4')
>>> read_records(run / "damaged.jsonl", strict=False)  # the damaged line and the cut-short last one left out
[{'step': 1}, {'step': 3}]
>>> read_records(run / "damaged.jsonl")  # doctest: +ELLIPSIS
Traceback (most recent call last):
ValueError: .../damaged.jsonl: line 2 is not valid JSON: ...
>>> import tempfile
>>> log = TensorBoardLog(tempfile.mkdtemp())
>>> log.scalars({"loss": 0.25, "note": "skipped"}, step=1, prefix="train"); log.close()
""",
    "istar_plugin.storage.predictions": """
>>> import tempfile
>>> run = Path(tempfile.mkdtemp())
>>> _ = write_predictions(run, "rte", 234, [1, 0, 1], [1, 1, 1])
>>> read_predictions(run)
Predictions(task='rte', step=234, predictions=(1, 0, 1), references=(1, 1, 1))
>>> read_predictions(Path(tempfile.mkdtemp())) is None  # a run from before predictions were written
True
""",
    "istar_plugin.reports.comparisons.paired": """
>>> refs = [1, 0] * 200
>>> base = {1: ([1] * 400, refs), 2: ([0] * 400, refs)}               # Base: 50% correct on both seeds
>>> better = {1: (refs, refs), 2: (refs[:300] + [1] * 100, refs)}       # 100% and 87.5%
>>> result = paired_difference("rte", "accuracy", better, base)
>>> result.differences, round(result.mean, 2), result.verdict, result.resampled
((50.0, 37.5), 43.75, 'better', 'seeds and examples')
>>> paired_difference("rte", "accuracy", base, base).verdict
'not distinguishable'
>>> paired_difference("stsb", "spearman", {1: None}, {1: None}, scores=({1: 88.0}, {1: 86.0})).verdict
'undefined (one seed)'
""",
    "istar_plugin.reports.records.settings": """
>>> from istar_plugin.reports.records.cells import Record
>>> cell = lambda seed, score: Record("sst2", "bert", "istar", -1.0, 0.2, seed, "accuracy", score / 100, score, 0.1,
...                                   f"/g/{seed}")
>>> (setting,) = settings([cell(2, 93.5), cell(1, 92.5)])
>>> setting.seeds, setting.mean, round(setting.std, 4), display_name(setting.method)
((1, 2), 93.0, 0.7071, 'I-STAR')
>>> settings([cell(1, 92.5)])[0].std is None  # one seed: no spread
True
""",
    "istar_plugin.reports.outputs.embedding_table": """
>>> measures = {"spearman": None, "spearman_undefined": "one pair", "isoscore": 0.25, "isoscore_star": 0.26,
...             "average_cosine": 0.02, "i1": 0.3, "ev_1": 0.04, "rankme": 299.9, "alignment": 0.27,
...             "uniformity": -3.84}
>>> print(markdown_table({6: {"none": measures}}), end="")  # doctest: +NORMALIZE_WHITESPACE
| layer | transform | Spearman x100 | IsoScore | IsoScore* | avg cos | I1 | EV_1 | RankMe | align | uniform |
|---|---|---|---|---|---|---|---|---|---|---|
| 6 | none | undefined (one pair) | 0.2500 | 0.2600 | 0.020 | 0.300 | 0.040 | 299.9 | 0.270 | -3.840 |
>>> row = {"method": "I-STAR", "lam": -1.0, "zeta": 0.2, "transform": "none", "seeds": 3, "spearman": "86.10 ± 0.20",
...        "vs_base_raw": "-0.30 [-0.50, -0.10] worse", "isoscore": "0.2100 ± 0.0100", "average_cosine": "0.020",
...        "token_isoscore_star": "0.1600 ± 0.0010"}
>>> grid_markdown([row]).splitlines()[2].split(" | ")
['| I-STAR', '-1', '0.2', 'none', '3', '86.10 ± 0.20', '-0.30 [-0.50, -0.10] worse', '0.2100 ± 0.0100', '0.020', \
'0.1600 ± 0.0010 |']
""",
    "istar_plugin.reports.outputs.istar_figures": """
>>> from istar_plugin.reports.records.cells import Record
>>> records = [Record("rte", "bert", "istar", -1.0, zeta, seed, "accuracy", 0.6, 60.0 + zeta + seed, 0.1, "")
...            for zeta in (0.0, 0.4, 0.8) for seed in (1, 2)]
>>> [(zeta, round(setting.mean, 2)) for zeta, setting in figure7_points(records)["rte"]["bert", -1.0]]
[(0.0, 61.5), (0.4, 61.9), (0.8, 62.3)]
>>> figure8_points(records)
{}
""",
    "istar_plugin.reports.records.analyses": """
>>> import json, tempfile
>>> from pathlib import Path
>>> out = Path(tempfile.mkdtemp())
>>> for name, seed in (("b", 2), ("a", 1)):
...     (out / name).mkdir()
...     _ = (out / name / ANALYSIS).write_text(json.dumps({"label": "Base", "seed": seed}))
>>> is_analysis(out), [analysis["seed"] for analysis in read_analyses(out)], is_analysis(out / "a")
(True, [1, 2], False)
>>> per_layer = {"10": {"center": {"spearman": 86.9}, "none": {"spearman": 86.7}}, "2": {"center": {}, "none": {}}}
>>> _ = (out / EMBEDDINGS).write_text(json.dumps({"per_layer": per_layer, "transform_order": ["none", "center"]}))
>>> is_embedding_report(out), read_embedding_results(out)
(True, {2: {'none': {}, 'center': {}}, 10: {'none': {'spearman': 86.7}, 'center': {'spearman': 86.9}}})
""",
    "istar_plugin.reports.tables": """
>>> import tempfile
>>> from pathlib import Path
>>> out = Path(tempfile.mkdtemp())
>>> scores = Table("scores", rows=lambda grid: grid, columns=("task", "mean"), caption="Scores.\\n\\n", shown="",
...                markdown=lambda grid, rows: "".join(f"| {row['task']} | {row['mean']:.1f} |\\n" for row in rows))
>>> print(write_table(scores, [{"task": "sst2", "mean": 90.40000000000002}], out), end="")
Scores.
<BLANKLINE>
| sst2 | 90.4 |
>>> print((out / "scores.csv").read_text(), end="")
task,mean
sst2,90.4
>>> write_table(scores, [], out) is None and sorted(path.name for path in out.iterdir())
['scores.csv', 'scores.md']
>>> print(markdown_table(["λ", "mean"], [[number_text(-1.0), "90.4"], [number_text(None), "a|b"]], escape=True))
| λ | mean |
|---|---|
| -1 | 90.4 |
| — | a\\|b |
<BLANKLINE>
""",
    "istar_plugin.reports.figures": """
>>> import tempfile
>>> fig, ax = single("IsoScore* per layer", "layer", "IsoScore*")
>>> _ = ax.plot([1, 2], [0.1, 0.2])
>>> path = save_png(fig, Path(tempfile.mkdtemp()) / "figure.png")
>>> path.read_bytes()[:8] == b"\\x89PNG\\r\\n\\x1a\\n"
True
""",
    "istar_plugin.training.resume": """
>>> config_changes({"seed": 1, "optim": {"lr": 0.1}, "progress": True},
...                {"seed": 1, "optim": {"lr": 0.2}, "progress": False})
['optim.lr']
>>> config_changes({"model": {}}, {"model": {"frozen_dropout": False}})  # a run written before the key: the same run
[]
""",
    "istar_plugin.reports.records.cells": """
>>> import tempfile
>>> cell = Path(tempfile.mkdtemp()); _ = (cell / "config.yaml").write_text("optim: {lr: 1.0e-05}\\nseed: 3\\n")
>>> read_config(cell)
{'optim.lr': 1e-05, 'seed': 3}
>>> record = Record("rte", "bert", "istar", -1.0, None, 99, "accuracy", 0.9, 90.0, 0.1, "/g/cell")
>>> check_against_config(record, {"task": "rte", "seed": 5})
Traceback (most recent call last):
...
istar_plugin.reports.records.cells.CellProblem: results.json says seed 99, its config.yaml seed 5 (one of them was \
edited, or copied from another run); left out
""",
    "istar_plugin.reports.docs_tables": """
>>> parse_marker("evidence/rte table1.md --paper-model bert")
Marker(path='evidence/rte', table='table1.md', options=(('paper_model', 'bert'),))
>>> parse_marker("results/x.csv")
Marker(path='results/x.csv', table=None, options=())
""",
    "istar_plugin.reports.paper.istar": """
>>> reported_metrics("mrpc", "combined_score"), reported_metrics("squad", "f1"), reported_metrics("snli", "accuracy")
(('accuracy',), ('f1', 'exact_match'), ('accuracy',))
>>> paper_result("bert", "istar", "sst2", "accuracy")
(92.65, 0.18)
>>> paper_result("minilm", "istar", "sst2", "accuracy") is None
True
""",
}


@pytest.mark.parametrize("module", EXAMPLES)
def test_the_worked_example_runs(module):
    test = doctest.DocTestParser().get_doctest(EXAMPLES[module], dict(vars(importlib.import_module(module))), module,
                                               module, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test)
    assert runner.failures == 0

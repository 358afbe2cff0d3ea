"""results.json through storage.results: round trips, one-line errors for every malformed file, version-1 files."""
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from istar_plugin.errors import RunError, exit_code
from istar_plugin.storage.results import (
    SCHEMA_VERSION,
    ResultsError,
    ResultsRecord,
    failed_record,
    read_results,
    write_results,
)

names = st.text(st.characters(whitelist_categories=("L", "N")), min_size=1, max_size=12)
numbers = st.floats(allow_nan=False, allow_infinity=False, width=32)


@st.composite
def finished_records(draw):
    metrics = draw(st.dictionaries(names, numbers, min_size=1, max_size=4))
    main = draw(st.sampled_from(sorted(metrics)))
    layers = draw(st.lists(numbers, min_size=1, max_size=3))
    metrics.update({"eval_isoscore_star": layers[0], "eval_isoscore_star_per_layer": layers})
    history = ({"step": 0, "epoch": 0, **metrics}, {"step": 10, "epoch": 1, **metrics})
    return ResultsRecord(
        "finished", draw(names), draw(names), {"name": draw(names), "lam": draw(numbers)}, draw(st.integers(0, 99)),
        step=10, epoch=1, metrics=metrics, main_metric=main, label_names=tuple(draw(st.lists(names, max_size=3))),
        init_from=draw(st.none() | names), trainable_parameters=draw(st.integers(1, 10**9)), initial=history[0],
        history=history, eval_isoscore_star=layers[0], eval_isoscore_star_per_layer=tuple(layers),
        collapsed=draw(st.none() | st.booleans()), validation=draw(st.none() | st.just({"metric": main, "best": 0.5})),
        top_level_metrics=(main,), extra=draw(st.dictionaries(st.just("plugin_hook_value"), st.integers(), max_size=1)))


@settings(max_examples=30, deadline=None)
@given(record=finished_records())
def test_a_finished_record_round_trips(tmp_path_factory, record):
    path = write_results(tmp_path_factory.mktemp("run") / "results.json", record)
    assert read_results(path, require_finished=True) == record
    assert json.loads(path.read_text())["schema_version"] == SCHEMA_VERSION


def test_a_metric_named_as_a_record_key_is_not_copied_over_the_key(tmp_path):
    record = ResultsRecord("finished", "sst2", "bert", {"name": "istar"}, 1, step=10, epoch=1, main_metric="step",
                           metrics={"step": 0.25, "accuracy": 0.5}, top_level_metrics=("step", "accuracy"))
    on_disk = json.loads(write_results(tmp_path / "results.json", record).read_text())
    assert on_disk["step"] == 10 and on_disk["accuracy"] == 0.5 and on_disk["metrics"]["step"] == 0.25
    assert read_results(tmp_path) == record and record.top_level_metrics == ("accuracy",)


def test_a_failed_record_round_trips_and_holds_only_what_the_trainer_wrote(tmp_path):
    record = failed_record("the loss became nan at step 2", "sst2", "bert", {"name": "istar"}, 3)
    path = write_results(tmp_path / "results.json", record)
    assert read_results(path) == record and not read_results(path).finished
    assert sorted(json.loads(path.read_text())) == ["criterion", "model", "reason", "schema_version", "seed", "status",
                                                    "task"]


def test_the_on_disk_keys_are_the_trainers_plus_schema_version(tmp_path):
    legacy = {"status": "finished", "task": "rte", "model": "bert", "criterion": {"name": "cross_entropy"}, "seed": 1,
              "step": 4, "epoch": 1, "metrics": {"accuracy": 0.5, "cls_isoscore": None, "eval_isoscore_star": 0.1,
                                                 "eval_isoscore_star_per_layer": [0.1]},
              "main_metric": "accuracy", "label_names": ["a", "b"], "init_from": None, "trainable_parameters": 5,
              "initial": None, "history": [], "eval_isoscore_star": 0.1, "eval_isoscore_star_per_layer": [0.1],
              "cls_isoscore": None, "accuracy": 0.5, "embedding_i1_before": 0.9, "from_a_plugin": [1, 2]}
    (tmp_path / "results.json").write_text(json.dumps(legacy))
    record = read_results(tmp_path)
    assert record.schema_version == 1 and record.top_level_metrics == ("accuracy",)
    assert record.extra == {"from_a_plugin": [1, 2]}
    write_results(tmp_path / "again.json", record)
    assert json.loads((tmp_path / "again.json").read_text()) == {**legacy, "schema_version": SCHEMA_VERSION}




def test_a_version_1_file_with_only_the_required_fields_reads_as_finished(tmp_path):
    (tmp_path / "results.json").write_text(json.dumps({"task": "sst2", "model": "bert", "seed": 1,
                                                       "criterion": {"name": "cross_entropy"}, "accuracy": 0.9}))
    record = read_results(tmp_path / "results.json", require_finished=True)
    assert (record.schema_version, record.status, record.step, record.metric("accuracy")) == (1, "finished", None, 0.9)


BASE = {"schema_version": 2, "status": "finished", "task": "sst2", "model": "bert", "criterion": {"name": "istar"},
        "seed": 1, "step": 3, "metrics": {"accuracy": 0.9}, "main_metric": "accuracy"}
MALFORMED = [
    (None, "no results.json (the run has not finished)"),
    ("{\"task\": \"sst2\", \"mod", "unreadable results.json: not JSON "
                                  "(Unterminated string starting at: line 1 column 18 (char 17))"),
    ("[1, 2]", "results.json holds a list, not an object"),
    (json.dumps({**BASE, "schema_version": 3}), "results.json has schema_version 3, newer than this istar_plugin reads "
                                                "(2): upgrade istar_plugin"),
    (json.dumps({**BASE, "schema_version": "2"}), "results.json: schema_version should be an int, is a str ('2')"),
    (json.dumps({**BASE, "status": "running"}), "results.json: status should be finished or failed, is 'running'"),
    (json.dumps({k: v for k, v in BASE.items() if k != "task"}), "results.json: task should be a str, is missing"),
    (json.dumps({**BASE, "seed": True}), "results.json: seed should be an int, is a bool (True)"),
    (json.dumps({**BASE, "criterion": "istar"}), "results.json: criterion should be a dict, is a str ('istar')"),
    (json.dumps({k: v for k, v in BASE.items() if k != "step"}), "results.json: step should be an int, is missing"),
    (json.dumps({**BASE, "metrics": [0.9]}), "results.json: metrics should be a dict, is a list ([0.9])"),
    (json.dumps({**BASE, "eval_isoscore_star": "high"}),
     "results.json: eval_isoscore_star should be a number, is a str ('high')"),
    (json.dumps({"schema_version": 2, "status": "failed", "task": "sst2", "model": "bert", "criterion": {}, "seed": 1,
                 "reason": "the loss became nan at step 2"}),
     "failed: the loss became nan at step 2 (results.json status: failed)"),
]


@pytest.mark.parametrize("text, problem", MALFORMED)
def test_every_malformed_file_gives_one_line_naming_the_run_and_the_problem(tmp_path, text, problem):
    if text is not None:
        (tmp_path / "results.json").write_text(text)
    with pytest.raises(ResultsError) as raised:
        read_results(tmp_path / "results.json", require_finished=True)
    assert str(raised.value) == f"{tmp_path}: {problem}" and "\n" not in str(raised.value)
    assert raised.value.problem == problem and isinstance(raised.value, RunError) and exit_code(raised.value) == 3


def test_a_failed_run_reads_when_a_finished_one_is_not_required(tmp_path):
    (tmp_path / "results.json").write_text(json.dumps({"status": "failed", "reason": "diverged", "task": "sst2",
                                                       "model": "bert", "criterion": {}, "seed": 1}))
    record = read_results(tmp_path / "results.json")
    assert (record.finished, record.reason, record.schema_version) == (False, "diverged", 1)
    with pytest.raises(ResultsError, match="failed: diverged"):
        record.require_finished()


def test_a_readers_own_checks_give_the_same_kind_of_line(tmp_path):
    (tmp_path / "results.json").write_text(json.dumps({**BASE, "metrics": {"accuracy": float("nan")}}))
    record = read_results(tmp_path / "results.json")
    with pytest.raises(ResultsError) as raised:
        record.finite_metric("accuracy")
    assert str(raised.value) == f"{tmp_path}: results.json: metric 'accuracy' is nan"
    with pytest.raises(ResultsError, match=r": results.json: metric 'f1' should be a number, is missing$"):
        record.finite_metric("f1")


def test_a_lenient_read_is_asked_for_and_gives_none_where_a_strict_one_raises(tmp_path):
    from istar_plugin.storage.results import recorded_precision
    assert read_results(tmp_path, strict=False) is None and recorded_precision(tmp_path) is None
    (tmp_path / "results.json").write_text("{not json")
    assert read_results(tmp_path, strict=False) is None and recorded_precision(tmp_path) is None
    with pytest.raises(ResultsError, match="not JSON"):
        read_results(tmp_path)
    write_results(tmp_path / "results.json", failed_record("nan", "rte", "m", {}, seed=1))
    assert read_results(tmp_path, require_finished=True, strict=False) is None
    assert read_results(tmp_path, strict=False).reason == "nan"


def test_every_reader_of_a_run_reads_results_json_through_read_results(tmp_path):
    """resume's holds_weights and the reports' per-layer IsoScore* read the record as read_results does: a file that
    is no valid record holds no result (before, each parsed the JSON itself and took any object)."""
    from istar_plugin.reports.records.run_extras import layer_isoscores
    from istar_plugin.storage.checkpoints import Checkpoints
    from istar_plugin.training.resume import holds_weights
    (tmp_path / "results.json").write_text(json.dumps({"eval_isoscore_star_per_layer": [0.3, 0.1]}))
    assert layer_isoscores(tmp_path, [1, 2]) is None and not holds_weights(tmp_path, Checkpoints(tmp_path / "c"))
    write_results(tmp_path / "results.json", ResultsRecord("finished", "rte", "m", {}, 1, step=3, metrics={"a": 1.0},
                                                           main_metric="a", eval_isoscore_star_per_layer=(0.3, 0.1)))
    assert layer_isoscores(tmp_path, [1, 2]) == [0.3, 0.1] and holds_weights(tmp_path, Checkpoints(tmp_path / "c"))


def test_one_json_lines_reader_skips_a_cut_short_last_line_for_the_trainer_and_the_reports(tmp_path):
    """The reports' wall time reads metrics.jsonl as the trainer does: a last line a crash cut short is left out
    (before, the reports' own reader dropped the whole log and the cell had no wall time)."""
    from istar_plugin.reports.records.run_extras import wall_seconds
    from istar_plugin.storage.logs import MetricsLog, read_records
    (tmp_path / "metrics.jsonl").write_text('{"time": 10.0}\n{"time": 25.5}\n{"time": 3')
    with pytest.warns(UserWarning, match="truncated last line"):
        assert [record["time"] for record in MetricsLog(tmp_path).records()] == [10.0, 25.5]
    assert wall_seconds(tmp_path) == 15.5
    (tmp_path / "metrics.jsonl").write_text('{"time": 10.0}\n{"ti\n{"time": 25.5}\n')
    with pytest.raises(ValueError, match="line 2 is not valid JSON"):
        read_records(tmp_path / "metrics.jsonl")
    assert read_records(tmp_path / "metrics.jsonl", strict=False) == [{"time": 10.0}, {"time": 25.5}]


@pytest.mark.parametrize("time", ['"1600"', "null", "true", "NaN"])
def test_a_start_or_finish_whose_time_is_no_number_is_a_damaged_attempts_log(tmp_path, time):
    from istar_plugin.reports.records.run_extras import wall_time
    (tmp_path / "attempts.jsonl").write_text(f'{{"event": "start", "time": 1000}}\n'
                                             f'{{"event": "finished", "time": {time}}}\n')
    (tmp_path / "metrics.jsonl").write_text('{"time": 1030}\n{"time": 1500}\n')
    damage = (f"its attempts.jsonl being damaged: {tmp_path / 'attempts.jsonl'}: a finished record's \"time\" is "
              f"{time}, not a number of seconds")
    assert wall_time(tmp_path) == (470, f"wall time from metrics.jsonl (first to last record), {damage}")
    (tmp_path / "metrics.jsonl").write_text(f'{{"time": 1030}}\n{{"time": {time}}}\n')
    assert wall_time(tmp_path) == (None, f"wall time not recorded, {damage}")
    (tmp_path / "attempts.jsonl").unlink()
    assert wall_time(tmp_path) == (None, "")  # metrics.jsonl alone: not recorded, with no attempts log to be damaged

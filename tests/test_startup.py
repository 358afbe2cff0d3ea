"""The quick commands compose and answer without importing the training stack (torch, transformers, ...), nor does a
grid's report, which reads records; the sweep commands (istar-grid, istar-tune) refuse bad input in one line with
errors.py's exit code, and importing the library leaves the caller's environment as it was."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("torch", "transformers", "datasets", "sentence_transformers", "peft")
COMMANDS = (["--help"], ["--list", "engines"], ["--list", "criterions"], ["--list", "models"], ["--list", "tasks"],
            ["recipe=movie_snippets", "--cfg"], ["batch_size=0"], ["--help", "optim.lr"], ["--help", "optim.lrr"],
            ["--help", "recipe", "criterion", "model", "criterion.name", "model.name", "model.adapter"])
SCRIPTS = ("run", "grid", "report", "export", "analyze", "embed", "tune")
PROBE_OF = """
import json, sys
from istar_plugin.cli.%s import main
try:
    code = main(sys.argv[1:])
except SystemExit as exit:
    code = exit.code
print(json.dumps({"code": code, "heavy": [name for name in %r if name in sys.modules]}), file=sys.stderr)
"""
PROBE = PROBE_OF % ("run", HEAVY)
SWEEP_CASES = [("tune", ["--help"], 0, None), ("tune", ["--list"], 0, None),
         ("tune", ["nonexistent"], 2, "istar-tune: error: unknown search 'nonexistent'"),
         ("tune", ["sst2_minilm", "workers=0"], 2, "istar-tune: error: workers must be a positive integer"),
         ("tune", ["sst2_minilm", "foo.bar=1"], 2, "istar-tune: error: a trial"),
         ("tune", ["sst2_minilm", "launcher=cloud"], 2, "istar-tune: error: launcher 'cloud' unknown"),
         ("grid", ["--help"], 0, None), ("grid", ["--list"], 0, None),
         ("grid", ["nonexistent"], 2, "istar-grid: error: unknown grid 'nonexistent'"),
         ("grid", ["smoke", "foo.bar=1"], 2, "istar-grid: error: cell "),
         ("grid", ["smoke", "launcher=cloud"], 2, "istar-grid: error: launcher 'cloud' unknown")]


def _probe(script: str, arguments: list) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE_OF % (script, HEAVY), *arguments], capture_output=True,
                          text=True, timeout=300)
    return json.loads(done.stderr.strip().splitlines()[-1])


@pytest.mark.parametrize("arguments", COMMANDS, ids=" ".join)
def test_a_quick_command_imports_no_training_framework(arguments):
    outcome = _probe("run", arguments)
    assert outcome["heavy"] == []
    assert outcome["code"] == (2 if arguments in (["batch_size=0"], ["--help", "optim.lrr"]) else 0)


@pytest.mark.parametrize("command, arguments, code, message", SWEEP_CASES, ids=lambda value: str(value))
def test_a_sweep_command_imports_no_training_framework_and_fails_in_one_line(command, arguments, code, message):
    done = subprocess.run([sys.executable, "-c", PROBE_OF % (command, HEAVY), *arguments], capture_output=True,
                          text=True, timeout=300)
    lines = done.stderr.strip().splitlines()
    outcome = json.loads(lines[-1])
    assert (outcome["heavy"], outcome["code"]) == ([], code)
    if message:
        assert lines[0].startswith(message) and len(lines) == 2


@pytest.mark.parametrize("arguments", (["--help"], ["--no-such-option"]), ids=" ".join)
@pytest.mark.parametrize("script", SCRIPTS)
def test_every_console_script_answers_help_and_refuses_a_bad_argument_without_torch(script, arguments):
    outcome = _probe(script, arguments)
    assert outcome == {"code": 0 if arguments == ["--help"] else 2, "heavy": []}


@pytest.mark.parametrize("grid", ["replication_glue_minilm", "st_stsb_minilm", "isolayer_minilm"])
def test_a_report_of_a_grid_reads_its_records_without_torch(grid, tmp_path):
    outcome = _probe("report", [str(Path(__file__).resolve().parents[1] / "docs" / "evidence" / grid),
                                "--out", str(tmp_path / "report")])
    assert outcome == {"code": 0, "heavy": []} and list((tmp_path / "report").glob("*.md"))


def test_importing_the_library_leaves_the_environment_unchanged():
    probe = ("import json, os; before = dict(os.environ); import istar_plugin, istar_plugin.cli, istar_plugin.config; "
             "print(json.dumps(dict(os.environ) == before))")
    environment = {key: value for key, value in os.environ.items() if key != "THP_MEM_ALLOC_ENABLE"}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=environment, timeout=300)
    assert done.stdout.strip() == "true", done.stderr


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_console_script_sets_its_environment_before_torch(script):
    probe = (f"import contextlib, io, os, sys\nfrom istar_plugin.cli.{script} import main\n"
             "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n    main(['--help'])\n"
             "print(os.environ.get('THP_MEM_ALLOC_ENABLE'), 'torch' in sys.modules)")
    environment = {key: value for key, value in os.environ.items() if key != "THP_MEM_ALLOC_ENABLE"}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=environment, timeout=300)
    assert done.stdout.splitlines()[-1] == "1 False", done.stderr


def test_the_choices_a_console_script_names_without_torch_are_the_librarys():
    from istar_plugin.analysis import analyze, sts_embeddings
    from istar_plugin.cli import analyze as analyze_cli
    from istar_plugin.cli import embed as embed_cli
    from istar_plugin.models.sentence_encoder import POOLINGS

    assert analyze_cli.SPLITS == analyze.SPLITS
    assert embed_cli.SPLITS == tuple(sts_embeddings.SPLITS) and embed_cli.POOLINGS == POOLINGS

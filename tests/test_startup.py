"""The quick commands compose and answer without importing the training stack (torch, transformers, ...)."""
import json
import subprocess
import sys

import pytest

HEAVY = ("torch", "transformers", "datasets", "sentence_transformers", "peft")
COMMANDS = (["--help"], ["--list", "engines"], ["--list", "criterions"], ["--list", "models"], ["--list", "tasks"],
            ["recipe=movie_snippets", "--cfg"], ["batch_size=0"], ["--help", "optim.lr"], ["--help", "optim.lrr"],
            ["--help", "recipe", "criterion", "model", "criterion.name", "model.name", "model.adapter"])
PROBE = """
import json, sys
from istar_plugin.cli.run import main
try:
    code = main(sys.argv[1:])
except SystemExit as exit:
    code = exit.code
print(json.dumps({"code": code, "heavy": [name for name in %r if name in sys.modules]}), file=sys.stderr)
""" % (HEAVY,)


@pytest.mark.parametrize("arguments", COMMANDS, ids=" ".join)
def test_a_quick_command_imports_no_training_framework(arguments):
    done = subprocess.run([sys.executable, "-c", PROBE, *arguments], capture_output=True, text=True, timeout=300)
    outcome = json.loads(done.stderr.strip().splitlines()[-1])
    assert outcome["heavy"] == []
    assert outcome["code"] == (2 if arguments in (["batch_size=0"], ["--help", "optim.lrr"]) else 0)

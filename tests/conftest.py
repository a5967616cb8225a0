"""Shared fixtures: where the test corpora are, and which external binaries the tests may use."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Public corpora copied into the repository with their licences (tests/data/corpora/*/LICENSE and SOURCE.md), so a
# fresh clone runs every test with nothing beside it.
CORPORA = REPO / "tests" / "data" / "corpora"
TAU_BENCH = CORPORA / "tau-bench-airline" / "gpt-4o-airline.json"


def require_binary(name: str) -> str:
    """The path of an external tool; in CI (RUBRIC_MONITOR_REQUIRE_TOOLS=1) a missing tool fails the test."""
    path = shutil.which(name)
    if path is None:
        if os.environ.get("RUBRIC_MONITOR_REQUIRE_TOOLS") == "1":
            pytest.fail(f"{name} is required in CI but not installed")
        pytest.skip(f"{name} is not installed (apt-get install prometheus)")
    return path


@pytest.fixture(autouse=True)
def _no_real_openai_key(monkeypatch: pytest.MonkeyPatch) -> None:
    # No test may reach a real provider: a key in the developer's environment must never leak into a request.
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("AZURE_OPENAI_API_KEY", raising=False)

"""Shared fixtures: where the test corpora are, and which external binaries the tests may use."""

from __future__ import annotations

import importlib
import os
import shutil
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import pytest
from hypothesis import settings as hypothesis_settings

REPO = Path(__file__).resolve().parents[1]

# Property tests in CI (CI=true, set by .ci/run) are derandomised: a run is reproducible, a failure is the same
# failure on a rerun, and its reproduction blob is printed. Locally they keep exploring new examples each run.
HYPOTHESIS_PROFILE = "ci" if os.environ.get("CI", "").lower() in ("1", "true") else "dev"
hypothesis_settings.register_profile("ci", derandomize=True, print_blob=True, deadline=None)
hypothesis_settings.register_profile("dev")
hypothesis_settings.load_profile(HYPOTHESIS_PROFILE)


def pytest_report_header(config: pytest.Config) -> str:
    current = hypothesis_settings.default
    seed = config.getoption("hypothesis_seed", None)
    return (f"hypothesis profile '{HYPOTHESIS_PROFILE}': derandomize={current.derandomize}, "
            f"seed={seed if seed is not None else ('fixed per test' if current.derandomize else 'random')}")
# Public corpora copied into the repository with their licences (tests/data/corpora/*/LICENSE and SOURCE.md), so a
# fresh clone runs every test with nothing beside it.
CORPORA = REPO / "tests" / "data" / "corpora"
TAU_BENCH = CORPORA / "tau-bench-airline" / "gpt-4o-airline.json"


def require_binary(name: str) -> str:
    """The path of an external tool; in CI (RUBRIC_MONITOR_REQUIRE_TOOLS=1) a missing tool fails the test."""
    path = shutil.which(name)
    if path is None:
        missing(name, "apt-get install prometheus")
    return path


def require_module(name: str, install: str) -> ModuleType:
    """The module ``name`` (at a test module's top too); in CI a missing one fails as a missing tool does, so a
    broken install is never a green run of skips."""
    try:
        return importlib.import_module(name)
    except ImportError:
        missing(name, install)


def missing(name: str, install: str) -> NoReturn:
    """Skip the test (``install`` says how to get ``name``), or fail it in CI (RUBRIC_MONITOR_REQUIRE_TOOLS=1)."""
    if os.environ.get("RUBRIC_MONITOR_REQUIRE_TOOLS") == "1":
        pytest.fail(f"{name} is required in CI but not installed")
    pytest.skip(f"{name} is not installed ({install})", allow_module_level=True)


@pytest.fixture(autouse=True)
def _no_real_openai_key(monkeypatch: pytest.MonkeyPatch) -> None:
    # No test may reach a real provider: a key in the developer's environment must never leak into a request.
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("AZURE_OPENAI_API_KEY", raising=False)

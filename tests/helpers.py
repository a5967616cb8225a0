"""Helpers shared by the end-to-end tests: scripted judge replies and running the CLI as a user would."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO
from tests.fakes.openai_server import Recorded, Reply, completion


def require_postgres() -> str:
    """The test PostgreSQL's URL (``RUBRIC_MONITOR_TEST_POSTGRES_URL``); without one the test is skipped, or fails
    in CI, which must provide it."""
    url = os.environ.get("RUBRIC_MONITOR_TEST_POSTGRES_URL")
    if not url:
        if os.environ.get("RUBRIC_MONITOR_REQUIRE_TOOLS") == "1":
            pytest.fail("CI must provide RUBRIC_MONITOR_TEST_POSTGRES_URL")
        pytest.skip("no PostgreSQL (set RUBRIC_MONITOR_TEST_POSTGRES_URL)")
    return url


def store_test_url(backend: str, tmp_path: Path) -> str:
    """A new, empty store for ``backend`` ("sqlite" or "postgres")."""
    return f"sqlite:///{tmp_path / 'results.db'}" if backend == "sqlite" else fresh_postgres(require_postgres())


def fresh_postgres(url: str) -> str:
    """Empty the test database's schema (tables of earlier runs or other test modules), then return its URL."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP SCHEMA public CASCADE; CREATE SCHEMA public;")
    engine.dispose()
    return url


SEED_PASS_SCORES = (5, 5, 5, 4, 5, 4)
SEED_FAIL_SCORES = (3, 1, 1, 2, 2, 1)


def requested_dimensions(request: Recorded) -> list[str]:
    """The dimension ids a verdict request asks for, read from its JSON schema (or, without one, the prompt)."""
    response_format = request.body.get("response_format") or {}
    schema = (response_format.get("json_schema") or {}).get("schema")
    if schema:
        return list(schema["properties"]["dimensions"]["required"])
    text = request.prompt_text
    rubric = text[text.index("<rubric>"):text.index("</rubric>")]
    return [re.split(r"[ :]", line[2:], maxsplit=1)[0] for line in rubric.splitlines() if line.startswith("- ")]


def verdict(request: Recorded, scores: Sequence[int | None], reason: str = "scripted") -> Reply:
    """A valid verdict giving ``scores`` to the requested dimensions in order (None = not applicable)."""
    ids = requested_dimensions(request)
    dims = {
        d: {"reason": f"{reason} {d}", "applicable": s is not None, "score": s}
        for d, s in zip(ids, list(scores) + [3] * (len(ids) - len(scores)), strict=False)
    }
    return completion(json.dumps({"dimensions": dims}))


def judge_config(base_url: str, **sections: Any) -> dict[str, Any]:
    """Settings for the CLI or daemon with the judge pointed at a scripted server."""
    config: dict[str, Any] = {
        "judge": {"kind": "openai", "base_url": base_url, "api_key": "test", "model": "judge-model",
                  "max_retries": 1, "timeout_seconds": 10},
    }
    for key, value in sections.items():
        config.setdefault(key, {}).update(value) if isinstance(value, dict) else config.__setitem__(key, value)
    return config


def write_config(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(json.dumps(config), encoding="utf-8")  # JSON is YAML
    return path


def run_cli(args: Sequence[str], cwd: Path, timeout: float = 120, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("RUBRIC_MONITOR_")}
    environment.pop("OPENAI_API_KEY", None)
    environment["PYTHONPATH"] = str(REPO)
    environment.update(env or {})
    return subprocess.run([sys.executable, "-m", "monitor", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=environment, check=False)

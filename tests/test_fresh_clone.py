"""A fresh clone runs its tests with nothing beside it: CI (.ci/run) tests a copy of the checkout in an empty
temporary directory, and the tests that read the corpora pass there."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

SIBLING = "/".join(("..", "shared"))
"""The folder beside the repository that a user's clone does not have (spelt in parts so this file is not a hit)."""


def test_no_code_reads_outside_the_repository() -> None:
    code = [p for folder in ("monitor", "tests", "tools", "benchmarks", "scripts", ".ci")
            for p in (REPO / folder).rglob("*") if p.suffix in (".py", ".sh", "") and p.is_file()]
    assert code
    offending = [str(p.relative_to(REPO)) for p in code
                 if p != Path(__file__) and SIBLING in p.read_text(encoding="utf-8", errors="replace")]
    assert offending == []


def test_ci_runs_the_readme_test_command_from_a_copy_with_nothing_beside_it() -> None:
    run = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert 'fresh="$(.ci/fresh-copy.sh)"' in run
    assert run.index('cd "$fresh"') < run.index("bash scripts/test.sh")
    assert "RUBRIC_MONITOR_REQUIRE_TOOLS=1" in run


def test_the_corpus_tests_pass_in_a_fresh_copy() -> None:
    copied = subprocess.run(["bash", str(REPO / ".ci" / "fresh-copy.sh")], capture_output=True, text=True,
                            check=True).stdout.strip()
    fresh = Path(copied)
    try:
        assert os.listdir(fresh.parent) == ["rubric-monitor"]  # nothing beside it
        assert not (fresh / ".venv").exists() and (fresh / "tests" / "data" / "corpora").is_dir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("RUBRIC_MONITOR_")}
        env["PYTHONPATH"] = str(fresh)
        ran = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_genai_conformance.py",
             "tests/test_assemble.py", "-k", "tau or conformance or corpus"],
            cwd=fresh, env=env, capture_output=True, text=True, timeout=600, check=False)
        assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-2000:]
        assert " passed" in ran.stdout and "skipped" not in ran.stdout, ran.stdout[-2000:]
    finally:
        shutil.rmtree(fresh.parent)

"""CI is honest: ``.ci/run`` stops when PostgreSQL does not start, ``.ci/fresh-copy.sh`` is a clone (tracked files
only, as a user's clone), and CI runs hypothesis derandomised with its seed printed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

STUB_TOOLS = ("promtool", "prometheus-alertmanager", "buildah", "debootstrap")


def ci_tree(tmp_path: Path, start_postgres: str) -> tuple[Path, dict[str, str]]:
    """A copy of ``.ci/run`` whose ``start-postgres.sh`` is ``start_postgres`` and whose test command only leaves a
    mark; the tools ``.ci/run`` would install are stubs on PATH."""
    root = tmp_path / "checkout"
    (root / ".ci").mkdir(parents=True)
    (root / "scripts").mkdir()
    shutil.copy(REPO / ".ci" / "run", root / ".ci" / "run")
    (root / ".ci" / "start-postgres.sh").write_text(f"#!/usr/bin/env bash\n{start_postgres}\n")
    (root / ".ci" / "fresh-copy.sh").write_text(f"#!/usr/bin/env bash\necho {root}\n")
    (root / "scripts" / "test.sh").write_text(f"touch {tmp_path}/tests-ran\n")
    (root / "scripts" / "test-lower-bounds.sh").write_text("exit 0\n")
    tools = tmp_path / "bin"
    tools.mkdir()
    # Without a PostgreSQL server here, .ci/run would apt-get one: the stub leaves start-postgres.sh to decide.
    stubs = STUB_TOOLS if list(Path("/usr/lib/postgresql").glob("*/bin/initdb")) else (*STUB_TOOLS, "apt-get")
    for name in stubs:
        (tools / name).write_text("#!/bin/sh\nexit 0\n")
        (tools / name).chmod(0o755)
    for script in (root / ".ci").iterdir():
        script.chmod(0o755)
    env = {**os.environ, "PATH": f"{tools}:{os.environ['PATH']}"}
    return root, env


def test_ci_stops_when_postgresql_does_not_start(tmp_path: Path) -> None:
    root, env = ci_tree(tmp_path, 'echo "no PostgreSQL server installed" >&2; exit 1')
    ran = subprocess.run(["bash", str(root / ".ci" / "run")], env=env, capture_output=True, text=True, timeout=120,
                         check=False)
    assert ran.returncode != 0
    assert "PostgreSQL" in ran.stderr
    assert not (tmp_path / "tests-ran").exists()


def test_ci_goes_on_when_postgresql_starts(tmp_path: Path) -> None:
    root, env = ci_tree(tmp_path, "echo export RUBRIC_MONITOR_TEST_POSTGRES_URL=postgresql://x\n"
                                  "echo export RUBRIC_MONITOR_TEST_POSTGRES_DATA=/nonexistent")
    ran = subprocess.run(["bash", str(root / ".ci" / "run")], env=env, capture_output=True, text=True, timeout=120,
                         check=False)
    assert ran.returncode == 0, ran.stderr
    assert (tmp_path / "tests-ran").exists()


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True,
                          env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
                               "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"}).stdout


def test_the_fresh_copy_is_a_clone_holding_only_tracked_files(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    (checkout / ".ci").mkdir(parents=True)
    shutil.copy(REPO / ".ci" / "fresh-copy.sh", checkout / ".ci" / "fresh-copy.sh")
    (checkout / "tracked.txt").write_text("committed\n")
    (checkout / ".gitignore").write_text("ignored.db\n")
    git(checkout, "init", "-q")
    git(checkout, "add", ".")
    git(checkout, "commit", "-q", "-m", "first")
    (checkout / "tracked.txt").write_text("edited, not committed\n")  # what the developer is testing
    (checkout / "untracked.txt").write_text("a stray file\n")
    (checkout / "ignored.db").write_text("a local database\n")
    fresh = Path(subprocess.run(["bash", str(checkout / ".ci" / "fresh-copy.sh")], capture_output=True, text=True,
                                check=True).stdout.strip())
    try:
        assert os.listdir(fresh.parent) == ["rubric-monitor"]
        assert sorted(p.name for p in fresh.iterdir()) == [".ci", ".git", ".gitignore", "tracked.txt"]
        assert (fresh / "tracked.txt").read_text() == "edited, not committed\n"
    finally:
        shutil.rmtree(fresh.parent)


def test_hypothesis_is_derandomised_in_ci_with_its_seed_printed(tmp_path: Path) -> None:
    (tmp_path / "test_prop.py").write_text(
        "from hypothesis import given, strategies as st\n"
        "@given(st.integers())\n"
        "def test_any(n):\n    assert isinstance(n, int)\n")
    env = {**os.environ, "CI": "true", "PYTHONPATH": str(REPO)}
    ran = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "tests.conftest",
                          str(tmp_path / "test_prop.py")], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120, check=False)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "hypothesis profile 'ci'" in ran.stdout and "derandomize=True" in ran.stdout

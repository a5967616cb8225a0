"""The generated SLO rules are valid (real promtool), behave as their promtool tests say on synthetic series (every
burn window, the minimum-evaluations guard, both suspensions), and are what ``rubric-monitor slo rules`` prints."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from tests.conftest import REPO, require_binary
from tools.generate_deploy import SLO_RULES, slo_rules

RULES = REPO / "deploy" / "prometheus"


def promtool(*args: str, cwd: Path = RULES) -> subprocess.CompletedProcess[str]:
    return subprocess.run([require_binary("promtool"), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, check=False)


def test_shipped_slo_rules_are_valid_and_current() -> None:
    checked = promtool("check", "rules", "slo-rules.yaml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 44 rules found" in checked.stdout
    assert yaml.safe_load(SLO_RULES.read_text(encoding="utf-8")) == slo_rules()


def test_slo_rules_pass_their_promtool_tests() -> None:
    tested = promtool("test", "rules", "slo-rules.test.yaml")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    text = (RULES / "slo-rules.test.yaml").read_text(encoding="utf-8")
    for scenario in ("14.4x over 1h and 5m", "6x over 6h and 30m", "3x over 1d and 2h", "1x over 3d and 6h",
                     "3 failures out of 4", "unscored storm", "cannot-judge"):
        assert scenario in text


def test_rules_of_a_dimension_slo_with_custom_windows_are_valid(tmp_path: Path) -> None:
    from monitor.slo.rules import rule_groups
    from monitor.slo.spec import SloSettings, resolve

    slo = SloSettings.model_validate({
        "name": "airline-accuracy", "rubric": "air.line", "agents": ["airline-*", "booking?"], "objective": 0.99,
        "window": "4w", "dimension": "accuracy", "min_score": 4,
        "alerting": {"min_evaluations": 10, "page": {"labels": {"team": 'a"b'}, "windows": [
            {"burn_rate": 10, "long": "90m", "short": "10m"}]}, "ticket": {"windows": []}}})
    rules = rule_groups(resolve([slo]), 0.2)
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rules), encoding="utf-8")
    checked = promtool("check", "rules", str(path), cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    text = path.read_text(encoding="utf-8")
    assert 'score=~\\"4|5\\"' in text or 'score=~"4|5"' in text
    assert "increase90m" in text and "increase4w" in text and "alerting: ticket" not in text
    assert 'rubric="air.line"' in text and 'agent=~"airline-.*|booking."' in text

"""The shipped Prometheus rules are valid and behave as their promtool tests say (real promtool)."""

from __future__ import annotations

import subprocess

from tests.conftest import REPO, require_binary

RULES = REPO / "deploy" / "prometheus"


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([require_binary("promtool"), *args], cwd=RULES, capture_output=True, text=True,
                          timeout=120, check=False)


def test_rules_are_valid() -> None:
    checked = promtool("check", "rules", "rules.yaml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 18 rules found" in checked.stdout


def test_rules_pass_their_promtool_tests() -> None:
    tested = promtool("test", "rules", "rules.test.yaml")
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_alert_name_of_the_contract_is_shipped() -> None:
    text = (RULES / "rules.yaml").read_text(encoding="utf-8")
    for name in ("RubricQualityRegression", "EvaluationStalled", "JudgeUnhealthy", "RubricMonitorDown",
                 "RubricMonitorStale", "JudgeAuthFailure", "JudgeBudgetExhausted", "JudgeDrift", "JudgeAgreementLow"):
        assert f"- alert: {name}\n" in text
        assert f"alertname: {name}\n" in (RULES / "rules.test.yaml").read_text(encoding="utf-8")

"""The docs stay true: every setting is in docs/settings.md, every metric in docs/metrics.md (both generated), and
the README stays a newcomer's page: two quick-start commands, links that resolve, the reference in docs/."""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry

from monitor.metrics import MonitorMetrics, catalog
from tests.conftest import REPO
from tools.update_metrics_doc import with_metrics_table
from tools.update_readme import with_config_table

README = (REPO / "README.md").read_text(encoding="utf-8")
SETTINGS_DOC = (REPO / "docs" / "settings.md").read_text(encoding="utf-8")


def test_the_configuration_table_matches_the_settings() -> None:
    assert with_config_table(SETTINGS_DOC) == SETTINGS_DOC, "run: python tools/update_readme.py"
    assert "|  |\n" not in SETTINGS_DOC  # every setting has a description


def test_the_readme_is_a_newcomers_page() -> None:
    quick_start = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = quick_start.split("```bash\n", 1)[1].split("```", 1)[0]
    assert [line.split()[:2] for line in block.splitlines()] == [["bash", "scripts/quickstart.sh"],
                                                                  ["bash", "scripts/test.sh"]]
    assert "config-table:start" not in README and "| `rubric_monitor_" not in README  # the reference is in docs/
    assert len(README) < 12_000
    # Commands after the quick start name the venv's executable, or say how to activate it.
    assert "source .venv/bin/activate" in README and ".venv/bin/rubric-monitor results" in README
    for link in re.findall(r"\]\((docs/[^)#]+)", README):
        assert (REPO / link).is_file(), link


def test_the_metrics_doc_matches_the_catalog() -> None:
    doc = (REPO / "docs" / "metrics.md").read_text(encoding="utf-8")
    assert with_metrics_table(doc) == doc, "run: python tools/update_metrics_doc.py"
    names = {spec.name for spec in catalog(MonitorMetrics(CollectorRegistry()))}
    assert {"rubric_monitor_evaluations_total", "rubric_monitor_dimension_scores_total",
            "rubric_monitor_pass_rate"} <= names

"""The docs stay true: every setting is in the README, every metric in docs/metrics.md (both generated)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from monitor.metrics import MonitorMetrics, catalog
from tests.conftest import REPO
from tools.update_metrics_doc import with_metrics_table
from tools.update_readme import with_config_table

README = (REPO / "README.md").read_text(encoding="utf-8")


def test_the_configuration_table_matches_the_settings() -> None:
    assert with_config_table(README) == README, "run: python tools/update_readme.py"
    assert "|  |\n" not in README  # every setting has a description


def test_the_metrics_doc_matches_the_catalog() -> None:
    doc = (REPO / "docs" / "metrics.md").read_text(encoding="utf-8")
    assert with_metrics_table(doc) == doc, "run: python tools/update_metrics_doc.py"
    names = {spec.name for spec in catalog(MonitorMetrics(CollectorRegistry()))}
    assert {"rubric_monitor_evaluations_total", "rubric_monitor_dimension_scores_total",
            "rubric_monitor_pass_rate"} <= names

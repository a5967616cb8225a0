"""The README stays true: every setting and every metric the daemon exposes is documented there."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from monitor.metrics import MonitorMetrics
from tests.conftest import REPO
from tools.update_readme import with_config_table

README = (REPO / "README.md").read_text(encoding="utf-8")


def test_the_configuration_table_matches_the_settings() -> None:
    assert with_config_table(README) == README, "run: python tools/update_readme.py"
    assert "|  |\n" not in README  # every setting has a description


def test_every_metric_is_in_the_catalog() -> None:
    registry = CollectorRegistry()
    MonitorMetrics(registry)
    names = {family.name for family in registry.collect()}
    names |= {"rubric_monitor_pass_rate", "rubric_monitor_scored_evaluations", "rubric_monitor_dimension_mean"}
    suffix = {"counter": "_total"}
    for family in registry.collect():
        documented = f"`{family.name}{suffix.get(family.type, '')}`"
        assert documented in README, f"{documented} is missing from the README's metrics table"
    assert names

"""The rubric registry: start-up load, hot reload, reporting of bad edits, metric series per version, CLI."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from monitor.cli import main
from monitor.errors import RubricError
from monitor.evaluators.versions import builtin_version
from monitor.metrics import MonitorMetrics
from monitor.rubrics.kinds import AdaptiveRubric
from monitor.rubrics.registry import RubricRegistry
from monitor.rubrics.schema import WeightedRubric

SEED = Path(__file__).parent / "data" / "foundry-restaurant-rubric.json"
SEED_WEIGHTS = [("intent_recognition", 9), ("tool_usage_accuracy", 6), ("policy_enforcement", 5),
                ("information_gathering", 4), ("communication_clarity", 2), ("general_quality", 5)]
INFO = "rubric_monitor_rubric_info"


def write(path: Path, document: Any) -> Path:
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


def weighted(name: str = "support", weight: int = 9, **fields: Any) -> dict[str, Any]:
    return {"name": name, "kind": "weighted", "agents": ["airline-*"], **fields, "dimensions": [
        {"id": "resolution", "description": "Resolves the request within policy.", "weight": weight},
        {"id": "tone", "description": "Polite and concise throughout the conversation.", "weight": 3},
    ]}


def info(metrics: MonitorMetrics, rubric: str, version: str, kind: str = "weighted") -> float | None:
    labels = {"rubric": rubric, "rubric_version": version, "kind": kind}
    return metrics.registry.get_sample_value(INFO, labels)


def load_errors(metrics: MonitorMetrics) -> float | None:
    return metrics.registry.get_sample_value("rubric_monitor_rubric_load_errors_total")


@pytest.fixture
def metrics() -> MonitorMetrics:
    return MonitorMetrics(CollectorRegistry())


def test_the_foundry_restaurant_rubric_from_the_seed_loads_verbatim(tmp_path: Path) -> None:
    shutil.copy(SEED, tmp_path / SEED.name)
    [rubric] = RubricRegistry(tmp_path, builtin_version).load()
    assert isinstance(rubric, WeightedRubric)
    assert rubric.name == "foundry-restaurant-rubric"  # a bare Foundry list takes the file's name
    assert [(d.id, d.weight) for d in rubric.dimensions] == SEED_WEIGHTS
    assert rubric.dimensions[-1].always_applicable is True
    assert rubric.pass_threshold == 0.5 and rubric.category == "quality"
    seed_dimensions = json.loads(SEED.read_text())
    assert [d.model_dump(exclude_defaults=True) for d in rubric.dimensions] == seed_dimensions


def test_a_foundry_evaluator_definition_loads_verbatim(tmp_path: Path) -> None:
    definition = {"type": "rubric", "dimensions": json.loads(SEED.read_text())[:5], "pass_threshold": 0.6,
                  "data_schema": {"type": "object"}}
    (tmp_path / "reservation-quality-manual.json").write_text(json.dumps(definition))
    [rubric] = RubricRegistry(tmp_path, builtin_version).load()
    assert isinstance(rubric, WeightedRubric)
    assert rubric.pass_threshold == 0.6
    assert [(d.id, d.weight) for d in rubric.dimensions] == SEED_WEIGHTS  # the residual dimension is attached


def test_start_up_fails_on_a_bad_file_naming_file_and_field(tmp_path: Path) -> None:
    write(tmp_path / "good.yaml", weighted("good"))
    bad = write(tmp_path / "bad.yaml", weighted("bad", weight=11))
    with pytest.raises(RubricError) as raised:
        RubricRegistry(tmp_path, builtin_version).load()
    assert raised.value.where == str(bad)
    assert raised.value.field == "dimensions.0.weight"


def test_start_up_fails_on_two_rubrics_with_one_name(tmp_path: Path) -> None:
    write(tmp_path / "a.yaml", weighted("same"))
    write(tmp_path / "b.yaml", weighted("same", weight=8))
    with pytest.raises(RubricError, match="also used by"):
        RubricRegistry(tmp_path, builtin_version).load()


def test_a_valid_edit_becomes_the_active_version_with_a_new_label_value(
    tmp_path: Path, metrics: MonitorMetrics
) -> None:
    path = write(tmp_path / "support.yaml", weighted())
    registry = RubricRegistry(tmp_path, builtin_version, metrics)
    [first] = registry.load()
    assert first.version and info(metrics, "support", first.version) == 1.0

    assert registry.refresh().changed is False  # nothing edited: nothing changes

    write(path, weighted(weight=8))
    changes = registry.refresh()
    [second] = registry.active()
    assert changes.updated == ("support",) and changes.rejected == ()
    assert second.version != first.version and second.version
    assert second.dimensions[0].weight == 8
    assert info(metrics, "support", second.version) == 1.0
    assert info(metrics, "support", first.version) is None  # the old version's series is gone
    assert registry.problems == {}


def test_a_same_size_edit_within_one_timestamp_tick_is_seen(tmp_path: Path) -> None:
    path = write(tmp_path / "support.yaml", weighted(weight=9))
    registry = RubricRegistry(tmp_path, builtin_version)
    registry.load()
    stamp = path.stat().st_mtime_ns
    write(path, weighted(weight=8))
    os.utime(path, ns=(stamp, stamp))  # a coarse file-system clock gives the edit the same modification time
    assert path.stat().st_size == len(yaml.safe_dump(weighted(weight=9), sort_keys=False))
    assert registry.refresh().updated == ("support",)
    assert registry.active()[0].dimensions[0].weight == 8


def test_an_explicit_version_is_the_label(tmp_path: Path, metrics: MonitorMetrics) -> None:
    # The built-in prompt's version is appended: a release that changes the prompt starts a new series.
    prompt = builtin_version("weighted")
    assert re.fullmatch(r"weighted_[0-9a-f]{8}", prompt)
    path = write(tmp_path / "support.yaml", weighted(version=1))
    registry = RubricRegistry(tmp_path, builtin_version, metrics)
    registry.load()
    assert info(metrics, "support", f"1+{prompt}") == 1.0
    write(path, weighted(version="2", weight=10))
    registry.refresh()
    assert [r.version for r in registry.active()] == [f"2+{prompt}"]
    assert (info(metrics, "support", f"1+{prompt}"), info(metrics, "support", f"2+{prompt}")) == (None, 1.0)


def test_an_invalid_edit_keeps_the_old_version_and_is_reported(
    tmp_path: Path, metrics: MonitorMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(tmp_path / "support.yaml", weighted())
    registry = RubricRegistry(tmp_path, builtin_version, metrics)
    [first] = registry.load()

    write(path, weighted(weight=0))
    with caplog.at_level(logging.WARNING, logger="monitor.rubrics.registry"):
        changes = registry.refresh()
    assert changes.rejected == (str(path),) and not changes.changed
    assert registry.active() == [first]
    assert info(metrics, "support", first.version or "") == 1.0
    assert str(path) in registry.problems and "dimensions.0.weight" in registry.problems[str(path)]
    assert load_errors(metrics) == 1.0
    [line] = [r.getMessage() for r in caplog.records]
    assert str(path) in line and "dimensions.0.weight" in line and f"keeping version {first.version}" in line

    registry.refresh()  # the same broken file is not a new error on every cycle
    assert load_errors(metrics) == 1.0

    path.write_text("name: support\nkind: weighted\ndimensions: [", encoding="utf-8")
    registry.refresh()  # a different problem is
    assert load_errors(metrics) == 2.0 and "not valid YAML" in registry.problems[str(path)]

    write(path, weighted(weight=7))
    changes = registry.refresh()
    assert changes.updated == ("support",) and registry.problems == {}
    assert registry.active()[0].dimensions[0].weight == 7


def test_a_new_file_with_a_taken_name_is_rejected_until_the_clash_ends(
    tmp_path: Path, metrics: MonitorMetrics
) -> None:
    original = write(tmp_path / "a.yaml", weighted("support"))
    registry = RubricRegistry(tmp_path, builtin_version, metrics)
    [first] = registry.load()
    clash = write(tmp_path / "b.yaml", weighted("support", weight=8))
    changes = registry.refresh()
    assert changes.rejected == (str(clash),)
    assert registry.active() == [first]
    assert "also used by" in registry.problems[str(clash)]

    original.unlink()  # the clash ends without b.yaml being edited
    registry.refresh()
    assert [r.dimensions[0].weight for r in registry.active()] == [8]
    assert registry.problems == {}


def test_new_and_deleted_files(tmp_path: Path, metrics: MonitorMetrics) -> None:
    registry = RubricRegistry(tmp_path, builtin_version, metrics)
    assert registry.load() == []
    path = write(tmp_path / "quality.yaml", {"kind": "adaptive", "metric": "instruction_following"})
    changes = registry.refresh()
    [rubric] = registry.active()
    assert changes.added == ("quality",) and isinstance(rubric, AdaptiveRubric)
    assert info(metrics, "quality", rubric.version or "", "adaptive") == 1.0
    path.unlink()
    assert registry.refresh().removed == ("quality",)
    assert registry.active() == []
    assert info(metrics, "quality", rubric.version or "", "adaptive") is None


def test_rubrics_apply_to_agents_by_name_or_id_with_globs(tmp_path: Path) -> None:
    write(tmp_path / "support.yaml", weighted())
    write(tmp_path / "all.yaml", {"name": "all", "kind": "grounding"})
    write(tmp_path / "byid.yaml", {"name": "byid", "kind": "safety", "agents": ["asst_42"]})
    registry = RubricRegistry(tmp_path, builtin_version)
    registry.load()
    assert [r.name for r in registry.for_agent("airline-support", None)] == ["all", "support"]
    assert [r.name for r in registry.for_agent("hotel", "asst_42")] == ["all", "byid"]
    assert [r.name for r in registry.for_agent(None, None)] == ["all"]


def test_cli_list_show_and_validate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(SEED, tmp_path / SEED.name)
    write(tmp_path / "support.yaml", weighted(sampling_rate=0.25, judge_model="gpt-4.1"))
    assert main(["rubrics", "list", "--dir", str(tmp_path)]) == 0
    listing = capsys.readouterr().out
    assert "foundry-restaurant-rubric" in listing and "support" in listing
    assert "0.25" in listing and "gpt-4.1" in listing

    assert main(["rubrics", "show", "foundry-restaurant-rubric", "--dir", str(tmp_path)]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert [d["id"] for d in shown["dimensions"]][-1] == "general_quality"

    assert main(["rubrics", "validate", "--dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.count("ok ") == 2

    bad = write(tmp_path / "bad.yaml", weighted("bad", weight=11))
    assert main(["rubrics", "validate", "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: dimensions.0.weight" in err
    assert main(["rubrics", "list", "--dir", str(tmp_path)]) == 2  # lists the valid ones, reports the bad one
    listed = capsys.readouterr()
    assert "support" in listed.out and f"{bad}: dimensions.0.weight" in listed.err
    assert main(["rubrics", "show", "missing", "--dir", str(tmp_path)]) == 2


def test_cli_reads_the_rubric_directory_from_the_settings(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    rubrics = tmp_path / "rubrics"
    rubrics.mkdir()
    write(rubrics / "support.yaml", weighted())
    config = write(tmp_path / "config.yaml", {"rubrics": {"directory": str(rubrics)}})
    assert main(["rubrics", "list", "--json", "--config", str(config)]) == 0
    [row] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert (row["name"], row["agents"]) == ("support", ["airline-*"])
    assert row["file"] == str(rubrics / "support.yaml")

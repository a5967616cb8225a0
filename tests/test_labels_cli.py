"""``rubric-monitor labels import|export``: a labelled set comes in, goes out unchanged (JSON lines and CSV), and
``calibrate`` reads what was exported as well as what is stored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from monitor.cli.calibrate import stored_labels
from monitor.cli.commands import run as run_cli
from monitor.review.store import ReviewStore
from monitor.settings import load_settings
from monitor.store.sql import SqlStore
from monitor.trust.agreement import read_labels
from tests.helpers import write_config
from tests.review_helpers import verdict

LABELS = [
    {"id": "conv-1", "passed": True, "score": 0.9, "dimensions": {"helpfulness": 5, "accuracy": 4}},
    {"id": "conv-2", "passed": False, "dimensions": {"helpfulness": 2}, "not_applicable": ["accuracy"],
     "note": "wrong refund, \"quoted\", with a comma"},
    {"id": "conv-3", "passed": "fail", "reviewer": "dana", "labelled_at": "2026-11-30T10:00:00+00:00"},
    {"id": "not-stored", "passed": 1, "rubric": "other"},
]


@pytest.fixture
def config(tmp_path: Path) -> Path:
    store = SqlStore(f"sqlite:///{tmp_path / 'results.db'}")
    for n in (1, 2, 3):
        store.record(verdict(f"conv-{n}"))
    store.close()
    return write_config(tmp_path / "settings.yaml", {"store": {"url": f"sqlite:///{tmp_path / 'results.db'}"}})


def run(*args: str) -> int:
    return run_cli(list(args))


def test_import_then_export_round_trips(config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "labels.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in LABELS), encoding="utf-8")
    assert run("labels", "import", str(source), "--rubric", "support", "--reviewer", "erin", "--config",
               str(config)) == 0
    assert "imported 4 labels (3 of them for verdicts in the store)" in capsys.readouterr().err
    exported = tmp_path / "out.jsonl"
    assert run("labels", "export", "--config", str(config), "--output", str(exported)) == 0
    records = [json.loads(line) for line in exported.read_text(encoding="utf-8").splitlines()]
    by_id = {r["id"]: r for r in records}
    assert by_id["conv-2"] == {"id": "conv-2", "rubric": "support", "reviewer": "erin", "passed": False,
                               "dimensions": {"helpfulness": 2}, "not_applicable": ["accuracy"],
                               "note": "wrong refund, \"quoted\", with a comma",
                               "labelled_at": by_id["conv-2"]["labelled_at"]}
    assert (by_id["conv-3"]["reviewer"], by_id["conv-3"]["labelled_at"]) == ("dana", "2026-11-30T10:00:00+00:00")
    assert (by_id["not-stored"]["rubric"], by_id["conv-1"]["score"]) == ("other", 0.9)

    # Importing the export again changes nothing; the export is what calibrate reads.
    assert run("labels", "import", str(exported), "--config", str(config)) == 0
    again = tmp_path / "again.jsonl"
    assert run("labels", "export", "--config", str(config), "--output", str(again)) == 0
    assert again.read_text(encoding="utf-8") == exported.read_text(encoding="utf-8")
    calibrate_view = read_labels(exported)
    assert calibrate_view["conv-1"].dimensions == {"helpfulness": 5, "accuracy": 4}
    assert calibrate_view["conv-3"].passed is False

    # CSV: out, in (into an empty store), out again: the same file.
    first_csv = tmp_path / "labels.csv"
    assert run("labels", "export", "--format", "csv", "--config", str(config), "--output", str(first_csv)) == 0
    assert read_labels(first_csv)["conv-2"].dimensions == {"helpfulness": 2}  # calibrate reads CSV too
    other = write_config(tmp_path / "other.yaml", {"store": {"url": f"sqlite:///{tmp_path / 'other.db'}"}})
    SqlStore(f"sqlite:///{tmp_path / 'other.db'}").close()
    assert run("labels", "import", str(first_csv), "--config", str(other)) == 0
    second_csv = tmp_path / "again.csv"
    assert run("labels", "export", "--format", "csv", "--config", str(other), "--output", str(second_csv)) == 0
    assert second_csv.read_text(encoding="utf-8") == first_csv.read_text(encoding="utf-8")


def test_calibrate_reads_stored_labels(config: Path, tmp_path: Path) -> None:
    source = tmp_path / "labels.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in LABELS[:3]), encoding="utf-8")
    assert run("labels", "import", str(source), "--rubric", "support", "--config", str(config)) == 0
    from_store = stored_labels(load_settings(config), "support")
    from_file = read_labels(source)
    assert from_store == from_file
    store = SqlStore(load_settings(config).store.url)
    assert {label.result_id for label in ReviewStore(store).labels()} == {1, 2, 3}
    store.close()


def test_a_bad_label_file_names_the_line_and_field(config: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "conv-1", "passed": true, "rubric": "support"}\n{"id": "conv-2", "passed": "maybe"}\n')
    assert run("labels", "import", str(bad), "--rubric", "support", "--config", str(config)) == 2
    assert f"{bad}:2" in capsys.readouterr().err
    no_rubric = tmp_path / "no-rubric.jsonl"
    no_rubric.write_text('{"id": "conv-1", "passed": true}\n')
    assert run("labels", "import", str(no_rubric), "--config", str(config)) == 2
    assert "rubric" in capsys.readouterr().err

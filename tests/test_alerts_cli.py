"""``rubric-monitor regressions`` and ``rubric-monitor notify test`` as a user runs them; the alert queries on
PostgreSQL too."""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path

from prometheus_client import CollectorRegistry

from monitor.settings import AlertSettings
from monitor.store.sql import SqlStore
from tests.fakes.receiver import Receiver
from tests.helpers import fresh_postgres, require_postgres, run_cli, write_config
from tests.test_alerts_service import NOW, degraded_db, seed, service  # noqa: F401 - degraded_db is a fixture


def config(tmp_path: Path, db: Path, notifiers: list[dict[str, object]]) -> Path:
    return write_config(tmp_path / "config.yaml", {
        "store": {"url": f"sqlite:///{db}"},
        "alerts": {"windows": ["1h"], "for_duration": "0s", "notifiers": notifiers},
    })


def test_regressions_lists_the_daemons_verdicts(tmp_path: Path, degraded_db: Path) -> None:  # noqa: F811
    db = tmp_path / "results.db"
    shutil.copyfile(degraded_db, db)
    path = config(tmp_path, db, [])
    listed = run_cli(["regressions", "--config", str(path), "--rubric", "helpfulness"], tmp_path)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split()[:5] == ["RUBRIC", "AGENT", "KIND", "DIMENSION", "VERDICT"]
    pass_rate = next(line.split() for line in lines if " pass_rate " in line)
    assert pass_rate[:7] == ["helpfulness", "support", "pass_rate", "-", "regression", "inactive", "1h"]
    assert pass_rate[8:10] == ["0.500", "0.900"] and pass_rate[13] == "120/400"
    accuracy = next(line.split() for line in lines if " accuracy " in line)
    assert accuracy[4] == "regression"
    tone = next(line.split() for line in lines if " tone " in line)
    assert tone[4] == "ok"
    assert run_cli(["regressions", "--config", str(path), "--agent", "nobody"], tmp_path).stdout.count("\n") == 1

    # After a daemon cycle, the state and the events are listed too.
    store = SqlStore(f"sqlite:///{db}")
    alerts = service(store, AlertSettings.model_validate({"windows": ["1h"], "for_duration": "0s"}))
    try:
        alerts.run_cycle(NOW)
    finally:
        alerts.close()
        store.close()
    listed = run_cli(["regressions", "--config", str(path), "--since", "1d"], tmp_path)
    assert " firing " in listed.stdout
    assert "firing: pass rate of helpfulness for agent support dropped to 50.0% from 90.0%" in listed.stdout
    bad = run_cli(["regressions", "--config", str(path), "--since", "yesterday"], tmp_path)
    assert bad.returncode == 2 and "--since" in bad.stderr


def test_notify_test_sends_through_one_notifier(tmp_path: Path) -> None:
    with Receiver() as receiver:
        path = config(tmp_path, tmp_path / "results.db", [
            {"name": "team-slack", "kind": "slack", "url": receiver.url + "/slack"},
            {"name": "down", "kind": "webhook", "url": "http://127.0.0.1:9/", "max_attempts": 2,
             "backoff_seconds": 0.01}])
        sent = run_cli(["notify", "test", "team-slack", "--config", str(path)], tmp_path)
        assert sent.returncode == 0, sent.stderr
        assert "test notification sent" in sent.stdout
        assert [r.json["text"] for r in receiver.on("/slack")] == [":wave: Test notification from rubric-monitor"]
        failed = run_cli(["notify", "test", "down", "--config", str(path)], tmp_path)
        assert failed.returncode == 1 and "failed after 2 attempt(s): cannot connect" in failed.stderr
        assert "127.0.0.1:9" not in failed.stderr + failed.stdout  # the URL is a secret
        unknown = run_cli(["notify", "test", "pager", "--config", str(path)], tmp_path)
        assert unknown.returncode == 2
        assert "alerts.notifiers: no notifier named 'pager' (team-slack, down)" in unknown.stderr
        assert len(receiver.received) == 1


def test_alert_counts_and_state_on_postgresql() -> None:
    store = SqlStore(fresh_postgres(require_postgres()))
    try:
        seed(store, NOW - timedelta(days=7), 60, 10, timedelta(days=6))
        seed(store, NOW - timedelta(minutes=40), 40, 2, timedelta(minutes=39))
        alerts = service(store, AlertSettings.model_validate({"windows": ["1h"], "for_duration": "0s"}),
                         CollectorRegistry())
        try:
            outcome = alerts.run_cycle(NOW)
        finally:
            alerts.close()
        by_key = outcome.detection.by_key()
        pass_rate = next(v for k, v in by_key.items() if k.kind == "pass_rate")
        assert (pass_rate.current_n, pass_rate.baseline_n, pass_rate.status) == (40, 60, "regression")
        accuracy = next(v for k, v in by_key.items() if k.dimension == "accuracy")
        assert (accuracy.current_n, accuracy.baseline_n) == (40, 60)
        assert {t.kind for t in outcome.transitions} == {"firing"}
        assert alerts.store.load_states()["helpfulness|support|pass_rate|"]["state"] == "firing"
    finally:
        store.close()


def test_check_names_a_bad_alert_setting(tmp_path: Path) -> None:
    path = write_config(tmp_path / "config.yaml", {"alerts": {"for_duration": "ten minutes"}})
    checked = run_cli(["check", "--config", str(path)], tmp_path)
    assert checked.returncode == 2
    assert "alerts.for_duration: 'ten minutes' is not a duration like 0s, 10m, 1h or 7d" in checked.stderr
    path = write_config(tmp_path / "config.yaml", {"alerts": {"notifiers": [
        {"name": "hook", "kind": "webhook", "url": "ftp://secret-token@hooks.example"}]}})
    checked = run_cli(["check", "--config", str(path)], tmp_path)
    assert checked.returncode == 2 and "alerts.notifiers.hook.url: must be an http(s) URL" in checked.stderr
    assert "secret-token" not in checked.stderr
    path = write_config(tmp_path / "config.yaml", {"alerts": {"notifiers": [{"name": "hook", "kind": "slack"}]}})
    checked = run_cli(["check", "--config", str(path)], tmp_path)
    assert checked.returncode == 2 and "notifier 'hook' needs url or url_file" in checked.stderr

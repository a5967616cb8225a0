"""``rubric-monitor results``: what a user sees of the verdicts the daemon stored, after a real cycle against the
scripted OpenAI-compatible judge."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.conftest import REPO
from tests.fakes.openai_server import Recorded, Reply, ScriptedOpenAIServer
from tests.helpers import SEED_FAIL_SCORES, SEED_PASS_SCORES, judge_config, run_cli, verdict, write_config


def judge(request: Recorded) -> Reply:
    # conv-party-too-big fails (the agent booked a party of 12); the others pass.
    failing = "party of 12" in request.prompt_text or "12 people" in request.prompt_text
    return verdict(request, SEED_FAIL_SCORES if failing else SEED_PASS_SCORES, reason="because")


def scored_store(tmp_path: Path, base_url: str) -> Path:
    shutil.copytree(REPO / "examples" / "traces", tmp_path / "traces")
    config = write_config(tmp_path / "config.yaml", judge_config(
        base_url,
        source={"kind": "otlp_file", "path": str(tmp_path / "traces")},
        rubrics={"directory": str(REPO / "examples" / "rubrics")},
        store={"url": f"sqlite:///{tmp_path / 'results.db'}"},
        metrics={"host": "127.0.0.1", "port": 0},
    ))
    ran = run_cli(["run", "--once", "--config", str(config)], tmp_path)
    assert ran.returncode == 0, ran.stderr
    return config


def test_results_lists_verdicts_with_their_weakest_dimensions_and_filters(tmp_path: Path) -> None:
    with ScriptedOpenAIServer(judge) as server:
        config = scored_store(tmp_path, server.base_url)
    listed = run_cli(["results", "--config", str(config)], tmp_path)
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.split() == ["conversation", "rubric", "score", "label", "weakest", "dimensions"]
    assert len(rows) == 3
    by_id = {row.split()[0]: row for row in rows}
    assert set(by_id) == {"conv-booking-ok", "conv-party-too-big", "conv-cancel"}
    failed = by_id["conv-party-too-big"]
    assert failed.split()[1:4] == ["restaurant-reservation", "0.35", "fail"]
    # The lowest scores first, heaviest dimension first among equals, with the judge's reason.
    assert "tool_usage_accuracy 1: because tool_usage_accuracy; policy_enforcement 1: because" in failed

    only_failed = run_cli(["results", "--failed", "--config", str(config)], tmp_path)
    assert [line.split()[0] for line in only_failed.stdout.splitlines()[1:]] == ["conv-party-too-big"]
    nobody = run_cli(["results", "--agent", "someone-else", "--config", str(config)], tmp_path)
    assert nobody.stdout == "no results match\n"
    future = run_cli(["results", "--since", "2999-01-01T00:00:00", "--config", str(config)], tmp_path)
    assert future.stdout == "no results match\n"
    recent = run_cli(["results", "--since", "1h", "--rubric", "restaurant-reservation", "--json",
                      "--config", str(config)], tmp_path)
    records = [json.loads(line) for line in recent.stdout.splitlines()]
    assert len(records) == 3
    assert {r["label"] for r in records} == {"pass", "fail"}
    assert all(r["agent"] == "reservation-assistant" and r["evaluated_at"] for r in records)


def test_results_show_prints_the_full_verdict_and_the_prompt_sent(tmp_path: Path) -> None:
    with ScriptedOpenAIServer(judge) as server:
        config = scored_store(tmp_path, server.base_url)
        prompt = server.requests[0].body["messages"]
    shown = run_cli(["results", "--config", str(config), "show", "conv-party-too-big"], tmp_path)
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert text.startswith("conversation conv-party-too-big, agent reservation-assistant\n")
    assert "verdict: fail, score 0.35 (pass threshold 0.5)" in text
    assert "  intent_recognition (weight 9): 3 - because intent_recognition" in text
    assert "--- system ---" in text and "--- user ---" in text and "--- judge reply ---" in text
    assert any(m["content"] in text for m in prompt if m["role"] == "system")

    as_json = run_cli(["results", "--config", str(config), "show", "conv-cancel", "--json"], tmp_path)
    [stored] = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert stored["conversation_id"] == "conv-cancel" and stored["prompt"][0]["role"] == "system"


def test_results_of_a_conversation_never_scored_or_a_store_never_written_say_so(tmp_path: Path) -> None:
    config = write_config(tmp_path / "config.yaml", {"store": {"url": f"sqlite:///{tmp_path / 'none.db'}"}})
    missing = run_cli(["results", "--config", str(config)], tmp_path)
    assert missing.returncode == 2
    assert "none.db does not exist: no results yet" in missing.stderr
    assert not (tmp_path / "none.db").exists()  # looking never creates an empty store
    with ScriptedOpenAIServer(judge) as server:
        config = scored_store(tmp_path, server.base_url)
    unknown = run_cli(["results", "--config", str(config), "show", "conv-nope"], tmp_path)
    assert unknown.returncode == 1
    assert "no stored verdict for conversation 'conv-nope'" in unknown.stderr
    bad_since = run_cli(["results", "--since", "yesterday", "--config", str(config)], tmp_path)
    assert bad_since.returncode == 2 and "--since: 'yesterday'" in bad_since.stderr

"""Whole cycles through the composition root, with the real openai client against a scripted server: what a user
sees in the store and the metrics when the judge misbehaves, turns arrive late, budgets run out or the daemon
restarts."""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from monitor.app import Monitor, build_monitor
from monitor.settings import Settings
from tests.conftest import REPO
from tests.fakes.openai_server import Recorded, Reply, ScriptedOpenAIServer, completion, error
from tests.helpers import SEED_PASS_SCORES, judge_config, verdict
from tests.vertex_judging import vertex_judge
from tools.chat_to_otlp import chat_record_to_spans

CHATS = [json.loads(line) for line in (REPO / "examples" / "conversations.jsonl").read_text().splitlines()]
MARKER = {"conv-booking-ok": "table for 4 this Friday", "conv-party-too-big": "dinner for 12 people",
          "conv-cancel": "Please cancel reservation"}
"""Text of each sample conversation's first user turn: how the scripted judge tells the prompts apart."""


@dataclass
class Setup:
    tmp: Path
    server: ScriptedOpenAIServer
    handler: list[Callable[[Recorded], Reply]]

    def monitor(self, **overrides: Any) -> Monitor:
        config = judge_config(
            self.server.base_url,
            source={"kind": "otlp_file", "path": str(self.tmp / "traces")},
            rubrics={"directory": str(self.tmp / "rubrics")},
            store={"url": f"sqlite:///{self.tmp / 'results.db'}"},
        )
        config["judge"].update({"max_retries": 0, "auth_reprobe_seconds": 0.01})
        for section, values in overrides.items():
            config.setdefault(section, {}).update(values)
        return build_monitor(Settings(**config))

    def calls_for(self, conversation: str) -> int:
        return sum(1 for r in self.server.requests if MARKER[conversation] in r.prompt_text)

    def rubric(self, **changes: Any) -> None:
        path = self.tmp / "rubrics" / "restaurant-reservation.yaml"
        data = yaml.safe_load((REPO / "examples" / "rubrics" / "restaurant-reservation.yaml").read_text())
        data.update(changes)
        path.write_text(yaml.safe_dump(data))


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    (tmp_path / "traces").mkdir()
    shutil.copy(REPO / "examples" / "traces" / "sample.jsonl", tmp_path / "traces" / "sample.jsonl")
    (tmp_path / "rubrics").mkdir()
    shutil.copy(REPO / "examples" / "rubrics" / "restaurant-reservation.yaml", tmp_path / "rubrics")
    handler: list[Callable[[Recorded], Reply]] = [lambda r: verdict(r, SEED_PASS_SCORES)]
    with ScriptedOpenAIServer(lambda r: handler[0](r)) as server:
        yield Setup(tmp_path, server, handler)


def evaluations(monitor: Monitor, outcome: str) -> float:
    return sum(monitor.registry.get_sample_value("rubric_monitor_evaluations_total", {
        "rubric": "restaurant-reservation", "rubric_version": v, "agent": "reservation-assistant",
        "outcome": outcome}) or 0 for v in {r.rubric_version for r in monitor.store.results()} or {""})


def skipped(monitor: Monitor, reason: str) -> float:
    return monitor.registry.get_sample_value("rubric_monitor_evaluations_skipped_total", {
        "rubric": "restaurant-reservation", "reason": reason}) or 0.0


def test_each_conversation_is_judged_once_across_cycles_and_restarts(setup: Setup) -> None:
    monitor = setup.monitor()
    first = monitor.run_cycle()
    assert first.ok and first.evaluations == {"pass": 3} and setup.server.count == 3
    assert monitor.run_cycle().judge_calls == 0
    monitor.close()
    restarted = setup.monitor()
    assert restarted.run_cycle().judge_calls == 0
    assert setup.server.count == 3 and len(restarted.store.results()) == 3
    # the rolling pass rate comes from the store, so the restarted daemon exports it before judging anything
    assert restarted.registry.get_sample_value("rubric_monitor_pass_rate", {
        "rubric": "restaurant-reservation", "rubric_version": restarted.store.results()[0].rubric_version,
        "agent": "reservation-assistant", "window": "1h"}) == 1.0
    restarted.close()


@pytest.mark.parametrize(
    ("bad_reply", "problem"),
    [
        (completion("{not json"), "not valid JSON"),
        (completion('{"dimensions": {"intent_recognition": {"reason": "x", "applicable": true, "score": 4}'),
         "not valid JSON"),
        (completion('{"dimensions": {}}'), "is missing"),
        (completion(json.dumps({"dimensions": {d: {"reason": "", "applicable": True, "score": 10} for d in (
            "intent_recognition", "tool_usage_accuracy", "policy_enforcement", "information_gathering",
            "communication_clarity", "general_quality")}})), "not an integer from 1 to 5"),
        (completion("", refusal="I can't help with that."), ""),
    ],
    ids=["malformed", "truncated", "dimension_missing", "score_10", "refusal"],
)
def test_a_bad_reply_is_retried_once_then_recorded_unscored(setup: Setup, bad_reply: Reply, problem: str) -> None:
    setup.handler[0] = lambda r: bad_reply if MARKER["conv-cancel"] in r.prompt_text else verdict(r, SEED_PASS_SCORES)
    monitor = setup.monitor()
    report = monitor.run_cycle()
    assert report.evaluations == {"pass": 2, "unscored": 1}
    [unscored] = [r for r in monitor.store.results() if r.outcome == "unscored"]
    assert unscored.conversation_id == "conv-cancel" and unscored.score is None
    assert problem in (unscored.unscored_reason or "")
    assert setup.calls_for("conv-cancel") in (1, 2)  # a refusal is final; anything else is asked twice
    assert evaluations(monitor, "unscored") == 1
    assert monitor.run_cycle().judge_calls == 0  # recorded once: not asked again
    monitor.close()


def test_server_errors_leave_evaluations_pending_then_unscored(setup: Setup) -> None:
    setup.handler[0] = lambda r: error(500, "boom", "server_error")
    monitor = setup.monitor()
    for cycle in (1, 2):
        report = monitor.run_cycle()
        assert not report.ok and report.evaluations == {} and monitor.store.results() == []
        assert skipped(monitor, "judge_unavailable") == 3 * cycle
    report = monitor.run_cycle()
    assert report.evaluations == {"unscored": 3}
    assert {r.unscored_reason.split(":")[0] for r in monitor.store.results() if r.unscored_reason} == {"judge_error"}
    assert monitor.run_cycle().evaluations == {} and len(monitor.store.results()) == 3
    monitor.close()


def test_without_content_storage_a_server_error_echoing_the_prompt_is_stored_by_its_kind_only(
        setup: Setup) -> None:
    """An endpoint's error message may quote the request (some proxies echo it): with ``store.store_content: false``
    the failure log and the unscored result keep only the kind of failure."""
    setup.handler[0] = lambda r: error(500, "upstream failed for: " + r.prompt_text[-400:], "server_error")
    monitor = setup.monitor(store={"store_content": False})
    for _ in range(3):
        monitor.run_cycle()
    results = monitor.store.results()
    assert len(results) == 3 and {r.outcome for r in results} == {"unscored"}
    stored = json.dumps([r.model_dump(mode="json") for r in results])
    assert "upstream failed" not in stored and "judge_error: server_error" in stored
    monitor.close()


def test_a_refused_credential_pauses_judging_and_degrades_health_until_it_works(setup: Setup) -> None:
    setup.handler[0] = lambda r: error(401, "Incorrect API key provided", "invalid_api_key")
    monitor = setup.monitor(judge={"auth_reprobe_seconds": 1.0, "concurrency": 1})
    report = monitor.run_cycle()
    assert report.evaluations == {} and not report.ok
    assert setup.server.count == 1  # one refusal stops the others: no retry storm
    assert any(p.startswith("judge:") for p in monitor.health.problems())
    for _ in range(3):
        monitor.run_cycle()
    assert setup.server.count == 1  # paused: no request until the re-probe interval
    assert monitor.store.results() == []  # never recorded as unscored: the conversations are not at fault
    setup.handler[0] = lambda r: verdict(r, SEED_PASS_SCORES)
    threading.Event().wait(1.1)  # past auth_reprobe_seconds
    assert monitor.run_cycle().evaluations == {"pass": 3}
    assert not [p for p in monitor.health.problems() if p.startswith("judge:")]
    monitor.close()


def append_late_turn(setup: Setup) -> None:
    record = dict(CHATS[0])
    record["messages"] = [*record["messages"], {"role": "user", "content": "Can you make it 8:00 pm instead?"},
                          {"role": "assistant", "content": "Sure, moved to 8:00 pm."}]
    from monitor.formats.otlp import spans_to_otlp_document

    spans = chat_record_to_spans(record, 0)
    with (setup.tmp / "traces" / "sample.jsonl").open("a") as out:
        out.write(json.dumps(spans_to_otlp_document(spans)) + "\n")


def test_late_turns_are_ignored_by_default(setup: Setup) -> None:
    monitor = setup.monitor()
    monitor.run_cycle()
    append_late_turn(setup)
    assert monitor.run_cycle().judge_calls == 0
    assert len(monitor.store.results()) == 3
    monitor.close()


def test_late_turns_rescore_as_a_new_revision_that_supersedes(setup: Setup) -> None:
    monitor = setup.monitor(conversation={"late_turns": "rescore"})
    monitor.run_cycle()
    append_late_turn(setup)
    setup.handler[0] = lambda r: verdict(r, (2, 2, 2, 2, 2, 2))
    report = monitor.run_cycle()
    assert report.evaluations == {"fail": 1}
    history = monitor.store.results("conv-booking-ok")
    assert [(r.revision, r.outcome) for r in history] == [(0, "pass"), (1, "fail")]
    [current] = monitor.store.results("conv-booking-ok", current_only=True)
    assert current.revision == 1
    assert "8:00 pm" in (current.prompt or [{}])[-1]["content"]
    version = current.rubric_version
    assert monitor.registry.get_sample_value("rubric_monitor_pass_rate", {
        "rubric": "restaurant-reservation", "rubric_version": version, "agent": "reservation-assistant",
        "window": "1h"}) == pytest.approx(2 / 3)
    monitor.close()


def test_sampling_rate_zero_judges_nothing_and_says_so(setup: Setup) -> None:
    setup.rubric(sampling_rate=0.0)
    monitor = setup.monitor()
    report = monitor.run_cycle()
    assert setup.server.count == 0 and report.skipped == {"sampled_out": 3}
    assert monitor.registry.get_sample_value("rubric_monitor_conversations_total", {"stage": "skipped"}) == 3
    monitor.close()


def test_the_cycle_cap_defers_the_rest_to_later_cycles(setup: Setup) -> None:
    monitor = setup.monitor(sampling={"max_per_cycle": 1})
    counts = [monitor.run_cycle().judge_calls for _ in range(4)]
    assert counts == [1, 1, 1, 0]
    assert len(monitor.store.results()) == 3
    monitor.close()


def test_a_spent_daily_budget_pauses_the_rubric(setup: Setup) -> None:
    setup.rubric(daily_budget_tokens=50)  # the first verdict costs more than this
    monitor = setup.monitor(judge={"concurrency": 1})
    report = monitor.run_cycle()
    assert report.evaluations == {"pass": 1}
    assert report.skipped["budget_exhausted"] == 2 and setup.server.count == 1  # counted, never silent
    assert skipped(monitor, "budget_exhausted") == 2
    assert monitor.registry.get_sample_value("rubric_monitor_budget_exhausted",
                                             {"rubric": "restaurant-reservation"}) == 1
    # One metric per unit: tokens for a token budget, no USD series for a rubric without a USD budget.
    assert monitor.registry.get_sample_value("rubric_monitor_budget_remaining_tokens",
                                             {"rubric": "restaurant-reservation"}) == 0
    assert monitor.registry.get_sample_value("rubric_monitor_budget_remaining_usd",
                                             {"rubric": "restaurant-reservation"}) is None
    monitor.close()


def test_turn_level_scores_each_assistant_turn(setup: Setup) -> None:
    setup.rubric(evaluation_level="turn")
    append_late_turn(setup)  # conv-booking-ok now has two assistant turns with text
    monitor = setup.monitor()
    report = monitor.run_cycle()
    turns = sorted(r.turn_index for r in monitor.store.results("conv-booking-ok"))
    assert len(turns) == 2 and report.evaluations["pass"] == 4
    monitor.close()


def test_stop_lets_no_new_evaluation_start(setup: Setup) -> None:
    monitor = setup.monitor()
    monitor.pipeline.stop.set()
    report = monitor.run_cycle()
    assert setup.server.count == 0 and report.stopped_early
    monitor.pipeline.stop.clear()
    assert monitor.run_cycle().evaluations == {"pass": 3}  # nothing was lost
    monitor.close()


def test_every_rubric_kind_runs_through_the_daemon(setup: Setup) -> None:
    for name, extra in {"quality.yaml": {"kind": "adaptive", "metric": "general_quality"},
                        "safety.yaml": {"kind": "safety"}}.items():
        (setup.tmp / "rubrics" / name).write_text(yaml.safe_dump(
            {"name": name.removesuffix(".yaml"), "agents": ["reservation-*"], **extra}))
    setup.handler[0] = vertex_judge
    monitor = setup.monitor()
    report = monitor.run_cycle()
    assert report.ok and report.evaluations == {"pass": 9}
    by_rubric: dict[str, int] = {}
    for result in monitor.store.results():
        by_rubric[result.rubric] = by_rubric.get(result.rubric, 0) + result.judge_calls
        assert result.score == pytest.approx(0.9419354839 if result.rubric_kind == "weighted" else 1.0)
    # weighted: 1 call per conversation; adaptive: generation + validation; safety: 1
    assert by_rubric == {"restaurant-reservation": 3, "quality": 6, "safety": 3}
    safety_version = next(r.rubric_version for r in monitor.store.results() if r.rubric == "safety")
    assert monitor.registry.get_sample_value("rubric_monitor_evaluations_total", {
        "rubric": "safety", "rubric_version": safety_version, "agent": "reservation-assistant",
        "outcome": "pass"}) == 3
    monitor.close()


def test_adaptive_items_survive_a_restart(setup: Setup) -> None:
    (setup.tmp / "rubrics" / "restaurant-reservation.yaml").unlink()
    (setup.tmp / "rubrics" / "quality.yaml").write_text(yaml.safe_dump(
        {"name": "quality", "kind": "adaptive", "metric": "general_quality"}))
    setup.handler[0] = vertex_judge
    monitor = setup.monitor()
    monitor.run_cycle()
    monitor.close()

    def calls(name: str) -> int:
        return sum(1 for r in setup.server.requests if r.body["response_format"]["json_schema"]["name"] == name)

    assert (calls("rubric_items"), calls("rubric_item_verdicts")) == (3, 3)
    from monitor.formats.otlp import spans_to_otlp_document

    repeat = {**CHATS[0], "id": "conv-booking-again"}  # another user asking exactly the same thing
    with (setup.tmp / "traces" / "sample.jsonl").open("a") as out:
        out.write(json.dumps(spans_to_otlp_document(chat_record_to_spans(repeat, 7))) + "\n")
    restarted = setup.monitor()
    assert restarted.run_cycle().evaluations == {"pass": 1}
    restarted.close()
    assert (calls("rubric_items"), calls("rubric_item_verdicts")) == (3, 4)  # items came from the store


def test_the_cycle_cap_never_drops_a_conversations_other_rubrics(setup: Setup) -> None:
    (setup.tmp / "rubrics" / "second.yaml").write_text(yaml.safe_dump({
        "name": "second", "agents": ["reservation-*"],
        "dimensions": [{"id": "tone", "description": "Polite tone.", "weight": 3}]}))
    monitor = setup.monitor(sampling={"max_per_cycle": 1})
    for _ in range(8):
        monitor.run_cycle()
    assert sorted((r.conversation_id, r.rubric) for r in monitor.store.results()) == sorted(
        (c, r) for c in MARKER for r in ("restaurant-reservation", "second"))
    monitor.close()


def test_an_absurdly_nested_reply_is_an_invalid_reply_not_a_crash(setup: Setup) -> None:
    setup.handler[0] = lambda r: completion("[" * 100_000)  # RecursionError in a naive parser
    monitor = setup.monitor()
    assert monitor.run_cycle().evaluations == {"unscored": 3}
    assert {r.unscored_reason for r in monitor.store.results()} == {
        "invalid_reply: reply is not usable JSON (RecursionError)"}
    assert monitor.run_cycle().judge_calls == 0
    monitor.close()


def test_spending_of_failed_evaluations_counts_against_the_budget(setup: Setup) -> None:
    setup.rubric(daily_budget_tokens=10_000)
    setup.handler[0] = lambda r: completion("not json at all", prompt_tokens=3000, completion_tokens=10)
    monitor = setup.monitor(judge={"concurrency": 1})
    report = monitor.run_cycle()
    # two asks of 3,010 tokens for the first conversation, two for the second: 12,040 > 10,000
    assert report.evaluations == {"unscored": 2} and report.skipped["budget_exhausted"] == 1
    monitor.close()


def test_a_store_that_fails_keeps_the_last_quality_state_served_and_says_so(setup: Setup) -> None:
    from prometheus_client import generate_latest

    monitor = setup.monitor()
    monitor.run_cycle()
    monitor.store.close()
    monitor.store._engine = __import__("sqlalchemy").create_engine("sqlite:////nonexistent/dir/x.db")
    report = monitor.run_cycle()
    assert any(f.startswith("metrics: StoreError") for f in report.failures)
    text = generate_latest(monitor.registry).decode()
    # The last prepared windows and the counters are still served with the daemon's health, never a gap.
    assert "rubric_monitor_cycles_total" in text and "rubric_monitor_pass_rate{" in text
    assert monitor.registry.get_sample_value("rubric_monitor_stage_failures_total", {"stage": "metrics"}) == 1


def test_a_spent_quota_fails_fast_waits_and_shows_in_health(setup: Setup) -> None:
    setup.handler[0] = lambda r: error(429, "You exceeded your current quota", "rate_limit_exceeded",
                                       headers={"retry-after": "3600"})
    monitor = setup.monitor(judge={"concurrency": 1, "max_retry_wait_seconds": 5})
    report = monitor.run_cycle()
    assert report.evaluations == {} and setup.server.count == 1  # the others fail fast, without a request
    assert any("quota is spent" in p for p in monitor.health.problems())
    monitor.run_cycle()
    assert setup.server.count == 1 and monitor.store.results() == []  # waiting, never unscored
    monitor.close()

"""Foundry's prompt, code and endpoint evaluators in whole daemon cycles (the composition root, the store, the
metrics): a grader that never returns, and an evaluator service that is down, harm nothing else."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from monitor.app import build_monitor
from monitor.pipeline.cycle import MAX_JUDGE_ATTEMPTS
from monitor.settings import Settings
from tests.conftest import REPO
from tests.fakes.openai_server import Recorded, Reply, ScriptedOpenAIServer, completion
from tests.helpers import judge_config

METRICS = {"score": {"type": "continuous", "min_value": 0, "max_value": 1, "threshold": 0.5}}


def write(directory: Path, name: str, document: dict[str, Any]) -> None:
    (directory / f"{name}.json").write_text(json.dumps({"name": name, **document}))


def test_new_kinds_run_in_cycles_and_their_failures_stay_their_own(tmp_path: Path) -> None:
    (tmp_path / "traces").mkdir()
    shutil.copy(REPO / "examples" / "traces" / "sample.jsonl", tmp_path / "traces" / "sample.jsonl")
    rubrics = tmp_path / "rubrics"
    rubrics.mkdir()

    def answer(request: Recorded) -> Reply:
        if request.path == "/score":
            return Reply(status=500, json_body={"error": "down"})
        return completion(json.dumps({"score": 0.9, "reason": "clear"}))

    with ScriptedOpenAIServer(answer) as server:
        write(rubrics, "prompted", {"kind": "prompt", "prompt_text": "Rate {{response}} from 0 to 1.",
                                    "metrics": METRICS})
        write(rubrics, "stuck", {"kind": "code", "code_text": "def grade(sample, item):\n    while True: pass\n",
                                 "timeout_seconds": 1, "metrics": METRICS})
        write(rubrics, "lengthy", {"kind": "code", "metrics": METRICS, "code_text":
                                   "def grade(sample, item):\n    return min(1.0, len(item['response']) / 100)\n"})
        write(rubrics, "remote", {"kind": "endpoint", "url": server.root_url + "/score", "retries": 0,
                                  "metrics": METRICS})
        config = judge_config(server.base_url, source={"kind": "otlp_file", "path": str(tmp_path / "traces")},
                              rubrics={"directory": str(rubrics)},
                              store={"url": f"sqlite:///{tmp_path / 'results.db'}"})
        monitor = build_monitor(Settings(**config))
        try:
            monitor.run_cycle()
            pending_after_first = not any(r.rubric == "remote" for r in monitor.store.results())
            for _ in range(MAX_JUDGE_ATTEMPTS - 1):
                monitor.run_cycle()
            results = {(r.rubric, r.conversation_id): r for r in monitor.store.results()}
            by_rubric: dict[str, set[str]] = {}
            for (rubric, _), result in results.items():
                by_rubric.setdefault(rubric, set()).add(result.outcome if result.outcome != "unscored"
                                                        else (result.unscored_reason or "").split(":")[0])
            version = next(r.rubric_version for r in results.values() if r.rubric == "prompted")
            exported = monitor.registry.get_sample_value("rubric_monitor_dimension_scores_total", {
                "rubric": "prompted", "rubric_version": version, "agent": "reservation-assistant",
                "dimension": "score", "score": "5"})
        finally:
            monitor.close()
    assert by_rubric["prompted"] == {"pass"} and exported == 3.0
    assert by_rubric["stuck"] == {"code_timeout"}  # each killed at its limit; the cycles went on
    assert by_rubric["lengthy"] <= {"pass", "fail"} and len([k for k in results if k[0] == "lengthy"]) == 3
    # The evaluator service was down every cycle: pending, tried again, then recorded with why.
    assert pending_after_first
    assert by_rubric["remote"] == {"evaluator_error"}
    remote = next(r for (rubric, _), r in results.items() if rubric == "remote")
    assert "HTTP 500 after 1 attempts" in (remote.unscored_reason or "")
    assert len(remote.details["attempts"]) == MAX_JUDGE_ATTEMPTS

"""A judge that stays unreachable: health stays degraded for as long as every call fails, and the evaluations
recorded unscored after the last attempt keep their audit trail. Real openai client, scripted server."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from monitor.app import build_monitor
from monitor.formats.otlp import spans_to_otlp_document
from monitor.settings import Settings
from tests.conftest import REPO
from tests.fakes.openai_server import Recorded, Reply, ScriptedOpenAIServer, error
from tests.helpers import SEED_PASS_SCORES, judge_config, verdict
from tools.chat_to_otlp import chat_record_to_spans


def test_health_stays_degraded_while_the_judge_is_down_and_judge_errors_keep_their_trail(tmp_path: Path) -> None:
    shutil.copytree(REPO / "examples" / "traces", tmp_path / "traces")
    shutil.copytree(REPO / "examples" / "rubrics", tmp_path / "rubrics")
    down = [True]

    def judge(request: Recorded) -> Reply:
        return error(503, "upstream overloaded", "server_error") if down[0] else verdict(request, SEED_PASS_SCORES)

    with ScriptedOpenAIServer(judge) as server:
        config = judge_config(server.base_url, source={"kind": "otlp_file", "path": str(tmp_path / "traces")},
                              rubrics={"directory": str(tmp_path / "rubrics")},
                              store={"url": f"sqlite:///{tmp_path / 'results.db'}"})
        config["judge"]["max_retries"] = 0
        monitor = build_monitor(Settings(**config))
        for cycle in range(1, 5):
            report = monitor.run_cycle()
            # the 4th cycle has nothing left to judge: no call succeeded since, so the judge is still down
            assert report.ok == (cycle == 4), f"cycle {cycle} counted ok while every judge call failed"
            assert monitor.health.problems(), f"/healthz ok after cycle {cycle} while the judge is down"
            assert monitor.registry.get_sample_value("rubric_monitor_health") == 0
        assert monitor.registry.get_sample_value("rubric_monitor_cycles_total", {"result": "failed"}) == 3
        results = monitor.store.results()
        assert len(results) == 3 and {r.outcome for r in results} == {"unscored"}
        for result in results:
            sent = [r for r in server.requests if any(
                m.get("content") == (result.prompt or [{}])[-1].get("content") for m in r.body["messages"])]
            assert result.prompt is not None and result.prompt[0]["role"] == "system"
            assert result.judge_calls == 3 and len(sent) == 3  # one call per cycle, all counted
            attempts = result.details["attempts"]
            assert len(attempts) == 3 and all("503" in a["error"] or "server_error" in a["error"]
                                              for a in attempts)
            assert all(a["judge_calls"] == 1 for a in attempts)

        down[0] = False
        record = json.loads((REPO / "examples" / "conversations.jsonl").read_text().splitlines()[0])
        spans = chat_record_to_spans({**record, "id": "conv-after-recovery"}, 9)
        (tmp_path / "traces" / "later.jsonl").write_text(json.dumps(spans_to_otlp_document(spans)) + "\n")
        recovered = monitor.run_cycle()
        assert recovered.ok and recovered.evaluations == {"pass": 1} and monitor.health.problems() == []
        assert monitor.registry.get_sample_value("rubric_monitor_health") == 1
        monitor.close()

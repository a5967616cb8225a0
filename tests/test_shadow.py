"""Shadow before promote: a candidate rubric version judges the labelled set and a live sample with the real
``openai`` client against a scripted judge; its figures stand beside the active one's, nothing it judged reaches
results, rollups or metrics, and it becomes active only by ``shadow promote``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from monitor.cli.commands import run as run_cli
from monitor.evaluators.prompts import PROMPT_VERSION
from monitor.evaluators.versions import builtin_version
from monitor.review.store import ReviewStore, StoredLabel
from monitor.rubrics.loader import load_rubric_file
from monitor.store.sql import SqlStore
from tests.fakes.openai_server import Recorded, Reply, ScriptedOpenAIServer
from tests.helpers import judge_config, write_config
from tests.helpers import verdict as scripted_verdict
from tests.review_helpers import add_conversation, chat, verdict

ACTIVE = ("name: support\npass_threshold: 0.5\ndimensions:\n"
          "  - id: helpfulness\n    description: Helps the user.\n    weight: 1\n    always_applicable: true\n")
CANDIDATE = ACTIVE.replace("Helps the user.", "Helps the user, and says when it cannot.")


def judge(request: Recorded) -> Reply:
    # The candidate finds conversation 0 unhelpful and every other one helpful.
    return scripted_verdict(request, [1] if "about order 0" in request.prompt_text else [5])


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    store = SqlStore(f"sqlite:///{tmp_path / 'results.db'}")
    for n in range(4):
        add_conversation(store, f"conv-{n}", chat(1, text=f"question about order {n}"), number=n)
        store.record(verdict(f"conv-{n}", outcome="pass", score=0.8, dimensions=(4, 4)))
    review = ReviewStore(store)
    for n, passed in ((0, False), (1, True), (2, False)):  # conv-3 is unlabelled: live traffic only
        review.save_label(StoredLabel(f"conv-{n}", "support", "ann", passed, {"helpfulness": 2 if n != 1 else 5},
                                      result_id=n + 1))
    store.close()
    (tmp_path / "rubrics").mkdir()
    (tmp_path / "rubrics" / "support.yaml").write_text(ACTIVE, encoding="utf-8")
    (tmp_path / "candidate.yaml").write_text(CANDIDATE, encoding="utf-8")
    return tmp_path


def test_a_candidate_runs_in_shadow_and_is_promoted_only_by_command(
        workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store_url = f"sqlite:///{workspace / 'results.db'}"
    before = SqlStore(store_url)
    results_before = [r.model_dump() for r in before.results()]
    rollups_before = before.rollup_sums(0, 2**40)
    before.close()
    with ScriptedOpenAIServer(judge) as server:
        config = write_config(workspace / "settings.json", judge_config(
            server.base_url, store={"url": store_url}, rubrics={"directory": str(workspace / "rubrics")}))
        assert run_cli(["shadow", "run", "--candidate", "clearer", "--rubric-file", str(workspace / "candidate.yaml"),
                        "--live", "4", "--config", str(config)]) == 0
        assert "judged 3 labelled and 1 live conversations" in capsys.readouterr().err
        assert len(server.requests) == 4
        # Again: each conversation is judged once per candidate.
        assert run_cli(["shadow", "run", "--candidate", "clearer", "--rubric-file",
                        str(workspace / "candidate.yaml"), "--config", str(config)]) == 0
        assert len(server.requests) == 4

    after = SqlStore(store_url)
    assert [r.model_dump() for r in after.results()] == results_before  # no shadow verdict among the results
    assert after.rollup_sums(0, 2**40) == rollups_before  # nor in the rollups the quality metrics come from
    after.close()

    assert run_cli(["shadow", "status", "--json", "--config", str(config)]) == 0
    [status] = json.loads(capsys.readouterr().out)
    candidate_version = load_rubric_file(workspace / "candidate.yaml", builtin_version).version
    assert status["configuration"] == {"rubric_version": candidate_version, "judge_model": "judge-model",
                                       "prompt_version": PROMPT_VERSION}  # an OpenAI judge: the full prompts
    assert (status["judged"], status["labelled"]) == (4, 3)
    # People: conv-0 fail, conv-1 pass, conv-2 fail. Candidate: fail, pass, pass (2 of 3); active: all pass (1 of 3).
    assert status["agreement"]["verdict.pass_fail"]["value"] == pytest.approx(2 / 3)
    assert status["active_agreement"]["verdict.pass_fail"]["value"] == pytest.approx(1 / 3)
    assert status["agreement"]["verdict.pass_fail"]["n"] == 3
    # Score shift: the candidate's stored scores against the active 0.8 of every conversation.
    reader = SqlStore(store_url)
    shadow_scores = [shadow.score or 0.0 for _, _, shadow, _ in ReviewStore(reader).shadow_verdicts("clearer")]
    reader.close()
    assert len(shadow_scores) == 4 and min(shadow_scores) < max(shadow_scores)
    assert status["score_shift"] == pytest.approx(sum(score - 0.8 for score in shadow_scores) / 4)
    assert status["flips"] == pytest.approx(1 / 4)
    assert run_cli(["shadow", "status", "--config", str(config)]) == 0
    text = capsys.readouterr().out
    assert "candidate: pass/fail agreement 0.667" in text and "active: pass/fail agreement 0.333" in text

    # Not active until promoted; a file other than the one that ran is refused.
    assert (workspace / "rubrics" / "support.yaml").read_text(encoding="utf-8") == ACTIVE
    assert run_cli(["shadow", "promote", "--candidate", "clearer", "--rubric-file",
                    str(workspace / "rubrics" / "support.yaml"), "--config", str(config)]) == 2
    assert "candidate 'clearer' ran" in capsys.readouterr().err
    assert run_cli(["shadow", "promote", "--candidate", "clearer", "--rubric-file", str(workspace / "candidate.yaml"),
                    "--config", str(config)]) == 0
    assert (workspace / "rubrics" / "support.yaml").read_text(encoding="utf-8") == CANDIDATE
    assert sorted(p.name for p in (workspace / "rubrics").iterdir()) == ["support.yaml"]

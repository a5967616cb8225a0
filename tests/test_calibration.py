"""``rubric-monitor calibrate`` on the tau-bench airline labels (task-success reward), with the real OpenAI client
against a scripted judge whose verdicts are known; every figure is recomputed here with independent formulas.

The scripted judge decides from what the transcript shows: the task succeeded when the agent called a tool that
changes a reservation (``WRITE_TOOLS``); a weighted ``task_completion`` dimension scores 1 + the number of tool
calls (at most 5). Both are computed here from the raw tau-bench records.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from monitor.cli import main
from monitor.errors import ConfigError
from monitor.models import EvaluationResult
from monitor.trust.agreement import agreement, best_threshold, cohen_kappa, confusion, read_labels, spearman
from tests.conftest import TAU_BENCH
from tests.fakes.openai_server import Recorded, Reply, ScriptedOpenAIServer, completion
from tests.helpers import judge_config, requested_dimensions, run_cli, write_config
from tests.vertex_judging import cited, item_ids, schema_name, user_prompt
from tools.tau_calibration_set import calibration_records, write_jsonl

WRITE_TOOLS = re.compile(r"book_reservation|cancel_reservation|update_reservation_\w+")
RENDERED_WRITE = re.compile(r'<tool_call id="[^"]*" name="(?:book_reservation|cancel_reservation|'
                            r'update_reservation_\w+)"')


def records() -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = json.loads(TAU_BENCH.read_text(encoding="utf-8"))
    return data


def calls(record: dict[str, Any]) -> list[str]:
    return [c["function"]["name"] for m in record["traj"] for c in (m.get("tool_calls") or [])]


def judge(request: Recorded) -> Reply:
    name = schema_name(request)
    prompt = user_prompt(request)
    if name == "rubric_items":
        return completion(json.dumps({"intents": ["the user's task"], "items": [
            {"question": q, "importance": "high", "checks": cited(request)} for q in
            ("Was the user's task completed?", "Was the outcome confirmed?", "Was policy respected?")]}))
    if name == "rubric_item_verdicts":
        succeeded = bool(RENDERED_WRITE.search(prompt))
        return completion(json.dumps({i: {"reasoning": "scripted", "verdict": "yes" if succeeded or n else "no"}
                                      for n, i in enumerate(item_ids(request))}))
    tool_calls = len(re.findall(r"<tool_call id=", prompt))
    scores = {"task_completion": min(5, 1 + tool_calls), "general_quality": 4}
    return completion(json.dumps({"dimensions": {
        d: {"reason": "scripted", "applicable": True, "score": scores[d]} for d in requested_dimensions(request)}}))


@pytest.fixture(scope="module")
def calibration_set(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tau")
    conversations, labels = calibration_records(records())
    write_jsonl(directory / "conversations.jsonl", conversations)
    write_jsonl(directory / "labels.jsonl", labels)
    (directory / "task-success.yaml").write_text(
        "name: airline-task-success\nkind: adaptive\nmetric: multi_turn_task_success\n", encoding="utf-8")
    (directory / "task-completion.yaml").write_text(
        "name: airline-task-completion\npass_threshold: 0.5\ndimensions:\n"
        "  - id: task_completion\n    description: The user's task is completed.\n    weight: 10\n"
        "    always_applicable: true\n", encoding="utf-8")
    return directory


def calibrate(directory: Path, rubric: str, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    with ScriptedOpenAIServer(judge) as server:
        config = write_config(directory / "config.json", judge_config(server.base_url))
        code = main(["calibrate", "--config", str(config), "--rubric", str(directory / rubric),
                     "--input", str(directory / "conversations.jsonl"), "--labels", str(directory / "labels.jsonl"),
                     *extra])
    return code, capsys.readouterr().out


# Independent formulas ------------------------------------------------------------------------------------------

def kappa(a: list[Any], b: list[Any]) -> float:
    n = len(a)
    observed = sum(x == y for x, y in zip(a, b, strict=True)) / n
    ca, cb = Counter(a), Counter(b)
    chance = sum(ca[k] * cb[k] for k in ca) / n ** 2
    return (observed - chance) / (1 - chance)


def quadratic_kappa(a: list[int], b: list[int]) -> float:
    # 1 - observed squared disagreement / squared disagreement expected between independent draws.
    observed = sum((x - y) ** 2 for x, y in zip(a, b, strict=True)) / len(a)
    expected = sum((x - y) ** 2 for x in a for y in b) / len(a) ** 2
    return 1 - observed / expected


def rho(a: list[float], b: list[float]) -> float:
    def ranks(values: list[float]) -> list[float]:
        ordered = sorted(values)
        return [ordered.index(v) + (ordered.count(v) + 1) / 2 for v in values]

    ra, rb = ranks(a), ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb, strict=True))
    return float(cov / (sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb)) ** 0.5)


# Hand-checked small cases --------------------------------------------------------------------------------------

def test_statistics_on_hand_checked_cases() -> None:
    # The textbook 2x2 example: p_o = 0.7, p_e = 0.5, kappa = 0.4.
    assert cohen_kappa([[20, 5], [10, 15]]) == pytest.approx(0.4)
    people, judged = [1, 2, 3, 1], [1, 2, 3, 2]
    matrix = confusion(list(zip(people, judged, strict=True)), (1, 2, 3, 4, 5))
    assert matrix[0][:3] == [1, 1, 0] and matrix[1][:3] == [0, 1, 0] and matrix[2][:3] == [0, 0, 1]
    assert cohen_kappa(matrix) == pytest.approx(7 / 11)  # p_o = 3/4, p_e = 5/16
    assert cohen_kappa(matrix, weighted=True) == pytest.approx(0.8)  # 1 - (1/4) / (20/16)
    assert spearman([1, 2, 3, 1], [1, 2, 3, 2]) == pytest.approx(3.75 / 4.5)  # average ranks for ties
    assert spearman([1, 1], [2, 3]) is None and cohen_kappa([[3, 0], [0, 0]]) is None
    best = best_threshold([0.2, 0.4, 0.6, 0.8], [False, True, False, True])
    assert best is not None  # 0.4 and 0.8 both give balanced accuracy 0.75: the lower one
    assert (best.threshold, best.balanced_accuracy, best.precision, best.recall) == (0.4, 0.75, 2 / 3, 1.0)
    assert best_threshold([0.5, 0.9], [True, True]) is None


def test_labels_errors_name_the_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "labels.jsonl"
    path.write_text('{"id": "a", "passed": true}\n{"id": "b", "passed": true, "dimensions": {"x": 7}}\n')
    with pytest.raises(ConfigError, match=r"labels.jsonl:2: dimensions.x: 7 is not an integer from 1 to 5"):
        read_labels(path)
    path.write_text('{"id": "a", "passed": "maybe"}\n')
    with pytest.raises(ConfigError, match=r"labels.jsonl:1: passed: 'maybe' is not"):
        read_labels(path)
    path.write_text('{"id": "a", "passed": 1}\n{"id": "a", "passed": 0}\n')
    with pytest.raises(ConfigError, match=r"labels.jsonl:2: id: conversation 'a' is labelled twice"):
        read_labels(path)


# tau-bench -------------------------------------------------------------------------------------------------------

def test_multi_turn_task_success_against_the_tau_bench_rewards(
        calibration_set: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = calibrate(calibration_set, "task-success.yaml", capsys, "--json")
    assert code == 0
    report = json.loads(out)
    people = [float(r["reward"]) == 1.0 for r in records()]
    judged = [any(WRITE_TOOLS.fullmatch(c) for c in calls(r)) for r in records()]
    # The judge passes a conversation when every item passes: exactly when a write tool was called.
    matrix = [[sum(p and j for p, j in zip(people, judged, strict=True)),
               sum(p and not j for p, j in zip(people, judged, strict=True))],
              [sum(j and not p for p, j in zip(people, judged, strict=True)),
               sum(not p and not j for p, j in zip(people, judged, strict=True))]]
    assert report["overall"]["confusion"]["matrix"] == matrix == [[26, 58], [85, 31]]
    assert report["judged"] == 200 and report["unscored"] == [] and report["not_found"] == []
    assert report["overall"]["accuracy"] == pytest.approx((26 + 31) / 200)
    assert report["overall"]["kappa"] == pytest.approx(kappa(people, judged), abs=1e-6)
    scores = [1.0 if j else 2 / 3 for j in judged]
    assert report["overall"]["spearman"] == pytest.approx(rho(scores, [float(p) for p in people]), abs=1e-6)
    # Two distinct scores (2/3 and 1): the best threshold is the one with the higher balanced accuracy.
    def balanced(t: float) -> float:
        tp = sum(s >= t and p for s, p in zip(scores, people, strict=True))
        tn = sum(s < t and not p for s, p in zip(scores, people, strict=True))
        return (tp / sum(people) + tn / (200 - sum(people))) / 2
    expected = max((2 / 3, 1.0), key=lambda t: (balanced(t), -t))
    assert report["best_threshold"]["threshold"] == pytest.approx(expected, abs=1e-6)
    assert report["best_threshold"]["balanced_accuracy"] == pytest.approx(balanced(expected), abs=1e-6)
    shift = sum(s - float(p) for s, p in zip(scores, people, strict=True)) / 200
    assert report["overall"]["mean_score_shift"] == pytest.approx(shift, abs=1e-6)


def test_a_task_completion_dimension_against_the_tau_bench_rewards(
        calibration_set: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = calibrate(calibration_set, "task-completion.yaml", capsys, "--json")
    assert code == 0
    report = json.loads(out)
    labelled = [5 if float(r["reward"]) == 1.0 else 1 for r in records()]
    judged = [min(5, 1 + len(calls(r))) for r in records()]
    stats = report["dimensions"]["task_completion"]
    assert stats["n"] == 200
    expected_matrix = [[sum(a == i and b == j for a, b in zip(labelled, judged, strict=True)) for j in range(1, 6)]
                       for i in range(1, 6)]
    assert stats["confusion"]["matrix"] == expected_matrix
    assert stats["confusion"]["matrix"][1:4] == [[0] * 5] * 3  # people used only 1 and 5
    assert stats["accuracy"] == pytest.approx(sum(a == b for a, b in zip(labelled, judged, strict=True)) / 200)
    assert stats["within_one"] == pytest.approx(
        sum(abs(a - b) <= 1 for a, b in zip(labelled, judged, strict=True)) / 200)
    assert stats["kappa"] == pytest.approx(kappa(labelled, judged), abs=1e-6)
    assert stats["weighted_kappa"] == pytest.approx(quadratic_kappa(labelled, judged), abs=1e-6)
    assert stats["spearman"] == pytest.approx(rho([float(x) for x in labelled], [float(x) for x in judged]),
                                              abs=1e-6)
    # Overall: weights 10 (task_completion) and 5 (the residual, scored 4); a 1 fails whatever the score.
    scores = [(10 * s + 5 * 4) / 75 for s in judged]
    people = [x == 5 for x in labelled]
    passed = [score >= 0.5 and s != 1 for score, s in zip(scores, judged, strict=True)]
    assert report["overall"]["kappa"] == pytest.approx(kappa(people, passed), abs=1e-6)
    candidates = sorted(set(scores))

    def balanced(t: float) -> float:
        tp = sum(s >= t and p for s, p in zip(scores, people, strict=True))
        tn = sum(s < t and not p for s, p in zip(scores, people, strict=True))
        return (tp / sum(people) + tn / (200 - sum(people))) / 2
    best = max(candidates, key=lambda t: (balanced(t), -t))
    tp = sum(s >= best and p for s, p in zip(scores, people, strict=True))
    chosen = report["best_threshold"]
    assert chosen["threshold"] == pytest.approx(best, abs=1e-6)
    assert chosen["precision"] == pytest.approx(tp / sum(s >= best for s in scores), abs=1e-6)
    assert chosen["recall"] == pytest.approx(tp / sum(people), abs=1e-6)


def test_the_text_report_shows_the_confusion_matrix_and_threshold(
        calibration_set: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = calibrate(calibration_set, "task-success.yaml", capsys)
    assert code == 0
    assert "conversations: 200 labelled, 200 judged, 0 unscored" in out
    assert re.search(r"labelled pass\s+26\s+58", out) and re.search(r"labelled fail\s+85\s+31", out)
    assert "best pass threshold:" in out and "Cohen's kappa" in out


def test_a_judge_that_fails_is_reported_in_one_line_with_exit_1(calibration_set: Path, tmp_path: Path) -> None:
    from tests.fakes.openai_server import error

    with ScriptedOpenAIServer(lambda r: error(401, "invalid api key", "invalid_request_error")) as server:
        config = write_config(tmp_path / "failing.json", judge_config(server.base_url))
        # A process of its own: its stderr is the command's only (the fake server writes to this one's).
        done = run_cli(["calibrate", "--config", str(config), "--rubric", str(calibration_set / "task-success.yaml"),
                        "--input", str(calibration_set / "conversations.jsonl"),
                        "--labels", str(calibration_set / "labels.jsonl")], tmp_path)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines()[-1].startswith("rubric-monitor: the judge failed:")
    assert "Traceback" not in done.stderr


def result(conversation_id: str, outcome: str, score: float | None) -> EvaluationResult:
    return EvaluationResult(conversation_id=conversation_id, agent="a", rubric="r", rubric_version="1",
                            rubric_kind="adaptive", judge_model="m", outcome=outcome, score=score)  # type: ignore[arg-type]


def test_agreement_leaves_out_unscored_and_missing_conversations_and_shifts_by_what_is_labelled() -> None:
    labels = read_labels_from([{"id": "a", "passed": True}, {"id": "b", "passed": False}, {"id": "c", "passed": True},
                               {"id": "d", "passed": True}])
    results = {"a": result("a", "pass", 0.9), "b": result("b", "pass", 0.6), "c": result("c", "unscored", None)}
    report = agreement(labels, results)
    assert (report["judged"], report["unscored"], report["not_found"]) == (2, ["c"], ["d"])
    assert report["overall"]["confusion"]["matrix"] == [[1, 0], [1, 0]]
    # Pass/fail labels only: the shift is the difference of the pass rates (1.0 - 0.5), not 0.9 - 1.0.
    assert report["overall"]["mean_score_shift"] == 0.5
    scored = read_labels_from([{"id": "a", "passed": True, "score": 0.8}, {"id": "b", "passed": False, "score": 0.2}])
    assert agreement(scored, results)["overall"]["mean_score_shift"] == pytest.approx(((0.9 - 0.8) + (0.6 - 0.2)) / 2)


def read_labels_from(rows: list[dict[str, Any]]) -> dict[str, Any]:
    from monitor.trust.agreement import parse_label

    return {row["id"]: parse_label(row, "labels") for row in rows}

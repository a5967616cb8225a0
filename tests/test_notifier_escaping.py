"""Notifications cannot be forged from trace data: conversation ids, trace ids and agent names come from traces,
so each notifier escapes them for its own markup, and ids put into a link are URL-encoded."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import unquote

from monitor.alerts.events import example_dicts, summary
from monitor.alerts.notifiers.alertmanager import AlertmanagerNotifier
from monitor.alerts.notifiers.slack import SlackNotifier
from monitor.alerts.notifiers.teams import TeamsNotifier
from monitor.alerts.notifiers.webhook import WebhookNotifier
from monitor.alerts.store import Example
from tests.fakes.receiver import Receiver

HOSTILE_ID = "<!channel> <https://evil.example/login|Open in Grafana> & [Open](https://evil.example) **x**"
HOSTILE_TRACE = "0af7/../../evil?x=1&y=<2>#frag"
HOSTILE_AGENT = "desk <!here> <@U123> @channel [click](https://evil.example/a)"
TEMPLATE = "https://grafana.example/explore?trace={trace_id}&conversation={conversation_id}"


def hostile_event() -> dict[str, Any]:
    labels = {"alertname": "RubricQualityRegression", "rubric": "quality", "agent": HOSTILE_AGENT,
              "kind": "mean", "dimension": "", "severity": "warning"}
    details = {"current_value": 2.1, "baseline_value": 4.2, "effect": -2.1, "window": "1h",
               "judge_model": "judge", "current_samples": 40, "baseline_samples": 400}
    examples = example_dicts([Example(HOSTILE_ID, (HOSTILE_TRACE,), datetime(2026, 1, 1, tzinfo=UTC), 0.2,
                                      "failed")], TEMPLATE)
    return {"kind": "firing", "id": "e1", "labels": labels, "summary": summary(labels, details, "firing"),
            "description": f"Agent {HOSTILE_AGENT} dropped.", "details": details, "examples": examples,
            "starts_at": "2026-01-01T00:00:00+00:00", "ends_at": None,
            "generator_url": "http://monitor.example:9464/"}


def test_ids_put_into_a_link_are_url_encoded() -> None:
    [example] = hostile_event()["examples"]
    link = example["link"]
    assert link.startswith("https://grafana.example/explore?trace=")
    query = link.split("?", 1)[1]
    assert query.count("&") == 1 and "#" not in link and "<" not in link and " " not in link
    trace, conversation = (value.split("=", 1)[1] for value in query.split("&"))
    assert unquote(trace) == HOSTILE_TRACE and unquote(conversation) == HOSTILE_ID


def slack_mrkdwn(payload: dict[str, Any]) -> list[str]:
    texts = [payload["text"]]
    for block in payload["blocks"]:
        if "text" in block:
            texts.append(block["text"]["text"])
        texts += [element["text"] for element in block.get("elements", [])]
    return texts


def test_slack_shows_hostile_ids_and_names_as_text_never_as_mentions_or_links() -> None:
    with Receiver() as receiver:
        SlackNotifier("slack", receiver.url + "/slack", 5.0, ("firing",)).send(hostile_event())
        [got] = receiver.on("/slack")
    texts = slack_mrkdwn(got.json)
    for text in texts:
        # Slack markup is <...>: a mention (<!channel>, <@U123>) or a link (<url|text>). The only ones left
        # are the links the notifier itself made.
        for markup in re.findall(r"<([^>]*)>", text):
            assert markup.startswith(("https://grafana.example/explore?", "http://monitor.example:9464/")), markup
        assert "@channel" not in text and "@here" not in text
    shown = "\n".join(texts)
    assert "&lt;!channel&gt;" in shown and "&lt;!here&gt;" in shown and "&amp;" in shown


def test_teams_shows_hostile_ids_and_names_as_text_never_as_markdown_links() -> None:
    with Receiver() as receiver:
        TeamsNotifier("teams", receiver.url + "/teams", 5.0, ("firing",)).send(hostile_event())
        [got] = receiver.on("/teams")
    card = got.json["attachments"][0]["content"]
    blocks = [b["text"] for b in card["body"] if b["type"] == "TextBlock"]
    for text in blocks:
        # Adaptive Cards' TextBlock reads markdown: [text](url) is a link, **x** bold. Escaped, neither is.
        assert not re.search(r"(?<!\\)\[[^\]]*(?<!\\)\]\(", text), text
        assert "**" not in text.replace("\\*", "")
    assert any("evil.example" in text for text in blocks)  # shown, as text
    assert card["actions"]  # the example's link and the monitor's, as buttons
    for action in card["actions"]:
        assert action["url"].startswith(("https://grafana.example/explore?", "http://monitor.example:9464/"))


def test_the_webhook_and_alertmanager_carry_hostile_ids_as_json_data_unchanged() -> None:
    with Receiver() as receiver:
        WebhookNotifier("hook", receiver.url + "/hook", None, 5.0, ("firing",)).send(hostile_event())
        AlertmanagerNotifier("am", receiver.url, 5.0, timedelta(minutes=5), ("firing",)).send(hostile_event())
        [hook] = receiver.on("/hook")
        sent_to_alertmanager = [r for r in receiver.received if r.path != "/hook"]
    assert hook.json["examples"][0]["conversation_id"] == HOSTILE_ID
    assert hook.json["labels"]["agent"] == HOSTILE_AGENT
    assert sent_to_alertmanager and HOSTILE_AGENT in json.dumps(sent_to_alertmanager[0].json, ensure_ascii=False)

"""The review page's HTML, rendered on the server with the standard library.

Trace content is untrusted: every string that reaches the page goes through ``esc`` (text and attribute values
alike, quotes included), nothing from a trace becomes a link, a tag, an attribute name or a style, and the page
carries no inline script or style (the Content-Security-Policy forbids both; ``static/review.js`` adds keyboard
shortcuts). A page holds at most ``Budget.limit`` characters of trace text; what is cut says how much.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from monitor.models import Conversation, EvaluationResult, Message, Part
from monitor.review.agreement import MEASURES, RubricAgreement
from monitor.review.queue import REASONS
from monitor.review.store import Filters, Page, Row, StoredLabel

PART_LIMIT = 20_000
"""Characters of one message part shown before it is cut."""


def esc(value: object) -> str:
    """Text for HTML content or a double-quoted attribute value."""
    return html.escape("" if value is None else str(value), quote=True)


class Budget:
    """How much trace text one page may still show."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.left = limit

    def text(self, value: str | None, per_item: int = PART_LIMIT) -> str:
        value = value or ""
        room = max(0, min(per_item, self.left))
        shown = value[:room]
        self.left -= len(shown)
        out = esc(shown)
        if len(value) > len(shown):
            out += f'<span class="cut">… {len(value) - len(shown):,} more characters not shown</span>'
        return out


def link(path: str, **query: object) -> str:
    """An internal link: the path as given (already quoted), the query encoded, empty values left out."""
    pairs = {k: str(v) for k, v in query.items() if v not in (None, "")}
    return path + ("?" + urlencode(pairs) if pairs else "")


def result_path(result_id: int) -> str:
    return f"/review/{int(result_id)}"


def conversation_path(conversation_id: str) -> str:
    return "/conversations/" + quote(conversation_id, safe="")


def layout(title: str, body: str, reviewer: str | None, csrf: str, page_class: str = "") -> str:
    nav = ""
    if reviewer is not None:
        nav = (f'<nav><a href="/queue" accesskey="q">Queue</a> <a href="/results">Results</a> '
               f'<a href="/agreement">Agreement</a> <span class="who">{esc(reviewer)}</span>'
               f'<form method="post" action="/signout" class="inline"><input type="hidden" name="csrf" '
               f'value="{esc(csrf)}"><button type="submit">Sign out</button></form></nav>')
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{esc(title)} · rubric-monitor review</title>"
            "<link rel=\"stylesheet\" href=\"/static/review.css\">"
            "<script src=\"/static/review.js\" defer></script></head>"
            f"<body class=\"{esc(page_class)}\"><header><h1>{esc(title)}</h1>{nav}</header><main>{body}</main>"
            "<footer>Keys: <kbd>?</kbd> help</footer></body></html>")


def signin_page(csrf: str, error: str | None, next_path: str) -> str:
    message = f'<p class="error">{esc(error)}</p>' if error else ""
    body = (f"{message}<form method=\"post\" action=\"/signin\" class=\"signin\">"
            f"<input type=\"hidden\" name=\"csrf\" value=\"{esc(csrf)}\">"
            f"<input type=\"hidden\" name=\"next\" value=\"{esc(next_path)}\">"
            "<label>Your name <input name=\"reviewer\" required maxlength=\"64\" autocomplete=\"username\"></label>"
            "<label>Token <input name=\"token\" type=\"password\" required autocomplete=\"current-password\">"
            "</label><button type=\"submit\">Sign in</button></form>")
    return layout("Sign in", body, None, csrf, "signin")


def _options(name: str, values: Iterable[str], chosen: str | None, blank: str) -> str:
    options = [f'<option value="">{esc(blank)}</option>']
    for value in values:
        selected = " selected" if value == chosen else ""
        options.append(f'<option value="{esc(value)}"{selected}>{esc(value)}</option>')
    return f'<select name="{esc(name)}">{"".join(options)}</select>'


def _day(value: Any) -> str:
    return "" if value is None else value.date().isoformat()


def filter_form(action: str, filters: Filters, rubrics: Sequence[str], agents: Sequence[str],
                with_reason: bool) -> str:
    agent_options = "".join('<option value="' + esc(a) + '">' for a in agents)
    parts = [f'<form method="get" action="{esc(action)}" class="filters">',
             f"<label>Rubric {_options('rubric', rubrics, filters.rubric, 'any')}</label>",
             f'<label>Agent <input name="agent" list="agents" value="{esc(filters.agent or "")}" maxlength="256">'
             f'<datalist id="agents">{agent_options}</datalist></label>',
             f"<label>Label {_options('label', ('unlabelled', 'labelled'), filters.label, 'any')}</label>"]
    if with_reason:
        parts.append(f"<label>Why {_options('reason', REASONS, filters.reason, 'any')}</label>")
    else:
        parts.append(f"<label>Judge {_options('outcome', ('pass', 'fail', 'unscored'), filters.outcome, 'any')}"
                     "</label>")
    parts.append(f'<label>From <input type="date" name="since" value="{esc(_day(filters.since))}"></label>'
                 f'<label>Before <input type="date" name="until" value="{esc(_day(filters.until))}"></label>'
                 '<button type="submit">Filter</button></form>')
    return "".join(parts)


def filter_query(filters: Filters) -> dict[str, object]:
    return {"rubric": filters.rubric, "agent": filters.agent, "label": filters.label, "reason": filters.reason,
            "outcome": filters.outcome, "since": _day(filters.since), "until": _day(filters.until)}


def _score(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def rows_table(page: Page, filters: Filters) -> str:
    if not page.rows:
        return '<p class="empty">Nothing here with these filters.</p>'
    head = ("<table class=\"rows\"><thead><tr><th>Evaluated (UTC)</th><th>Rubric</th><th>Agent</th><th>Judge</th>"
            "<th>Score</th><th>Why queued</th><th>Labels</th><th>Conversation</th></tr></thead><tbody>")
    back = filter_query(filters)
    return head + "".join(_row(row, back) for row in page.rows) + "</tbody></table>"


def _row(row: Row, back: dict[str, object]) -> str:
    href = link(result_path(row.result_id), **back)
    return (f'<tr class="outcome-{esc(row.outcome)}"><td>{esc(row.evaluated_at.strftime("%Y-%m-%d %H:%M:%S"))}</td>'
            f"<td>{esc(row.rubric)}</td><td>{esc(row.agent)}</td><td>{esc(row.outcome)}</td>"
            f"<td>{_score(row.score)}</td><td>{esc(row.reason or '')}</td><td>{row.labels}</td>"
            f'<td><a class="open" href="{esc(href)}">{esc(row.conversation_id[:80])}</a></td></tr>')


def list_page(title: str, action: str, page: Page, filters: Filters, rubrics: Sequence[str],
              agents: Sequence[str], with_reason: bool, reviewer: str, csrf: str, start: str | None) -> str:
    parts = [filter_form(action, filters, rubrics, agents, with_reason)]
    if start is not None:
        parts.append(f'<p><a id="start" class="button" href="{esc(start)}">Review the next unlabelled '
                     "(<kbd>Enter</kbd>)</a></p>")
    parts.append(rows_table(page, filters))
    if page.next_cursor:
        parts.append(f'<p><a id="more" href="{esc(link(action, **filter_query(filters), after=page.next_cursor))}">'
                     "Older →</a></p>")
    return layout(title, "".join(parts), reviewer, csrf, action.strip("/"))


# one conversation --------------------------------------------------------------------------------------------

def _json_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(value)


def _part(part: Part, budget: Budget) -> str:
    if part.type == "text":
        return f'<div class="text">{budget.text(part.content)}</div>'
    if part.type == "reasoning":
        return f'<div class="reasoning"><span class="tag">reasoning</span>{budget.text(part.content)}</div>'
    if part.type == "tool_call":
        return (f'<div class="tool-call"><span class="tag">tool call</span> <code>{budget.text(part.name, 500)}'
                f'</code> <span class="id">{budget.text(part.id, 200)}</span>'
                f"<pre>{budget.text(_json_text(part.arguments))}</pre></div>")
    if part.type == "tool_call_response":
        return (f'<div class="tool-result"><span class="tag">tool result</span> <span class="id">'
                f"{budget.text(part.id, 200)}</span><pre>{budget.text(_json_text(part.response))}</pre></div>")
    return (f'<div class="other"><span class="tag">{budget.text(part.type, 100)}</span>'
            f"<pre>{budget.text(_json_text(part.data or part.content))}</pre></div>")


def _message(index: int, message: Message, budget: Budget) -> str:
    parts = "".join(_part(p, budget) for p in message.parts) or '<div class="text empty">(no content)</div>'
    name = f' <span class="name">{budget.text(message.name, 200)}</span>' if message.name else ""
    return (f'<article class="turn role-{esc(message.role[:32])}" id="turn-{index}"><header>'
            f'<span class="role">{budget.text(message.role, 64)}</span>{name}</header>{parts}</article>')


def conversation_html(conversation: Conversation | None, result: EvaluationResult, budget: Budget) -> str:
    if conversation is None:
        fallback = ""
        if result.prompt:
            fallback = ('<p>The trace\'s spans were pruned; this is the conversation as sent to the judge:</p>'
                        + "".join(f'<article class="turn role-prompt"><header><span class="role">'
                                  f'{budget.text(m.get("role"), 64)}</span></header><pre>'
                                  f'{budget.text(m.get("content"))}</pre></article>' for m in result.prompt))
        return f'<section class="conversation"><h2>Conversation</h2><p class="note">Spans no longer stored.</p>' \
               f"{fallback}</section>"
    parts = ['<section class="conversation"><h2>Conversation</h2>',
             f'<p class="meta">agent {budget.text(conversation.agent, 256)}'
             f"{' · version ' + budget.text(conversation.agent_version, 128) if conversation.agent_version else ''}"
             f" · {len(conversation.messages)} messages"
             f"{' · <strong>truncated by the source</strong>' if conversation.truncated else ''}</p>"]
    if conversation.system_instructions:
        parts.append(f'<details class="system" open><summary>System instructions</summary><pre>'
                     f"{budget.text(conversation.system_instructions)}</pre></details>")
    if conversation.tool_definitions:
        tools = "".join(f"<li><code>{budget.text(t.name, 200)}</code> {budget.text(t.description, 2000)}</li>"
                        for t in conversation.tool_definitions)
        parts.append(f'<details class="tools"><summary>Tools ({len(conversation.tool_definitions)})</summary>'
                     f"<ul>{tools}</ul></details>")
    parts.extend(_message(i, m, budget) for i, m in enumerate(conversation.messages))
    parts.append("</section>")
    return "".join(parts)


def verdict_html(result_id: int, result: EvaluationResult, reason: str | None, budget: Budget) -> str:
    rows = "".join(
        f'<tr><th scope="row">{esc(d.id)}</th><td class="score">{"n/a" if not d.applicable else esc(d.score)}</td>'
        f"<td>{esc(d.weight)}</td><td>{budget.text(d.reason, 5000)}</td></tr>"
        for d in result.dimension_scores)
    table = (f'<table class="dimensions"><thead><tr><th>Dimension</th><th>Judge</th><th>Weight</th><th>Reason</th>'
             f"</tr></thead><tbody>{rows}</tbody></table>") if rows else ""
    why = f'<p class="why">Queued: <strong>{esc(reason)}</strong></p>' if reason else ""
    threshold = "" if result.threshold is None else f" (threshold {result.threshold:.2f})"
    return (f'<section class="verdict"><h2>Judge: <span class="outcome-{esc(result.outcome)}">'
            f"{esc(result.outcome)}</span> {_score(result.score)}{esc(threshold)}</h2>{why}"
            f'<p class="meta">{esc(result.rubric)} {esc(result.rubric_version)} · {esc(result.judge_model)}'
            f"{' · prompt ' + esc(result.prompt_version) if result.prompt_version else ''}"
            f" · {esc(result.evaluated_at.strftime('%Y-%m-%d %H:%M:%S'))} UTC</p>"
            f'<p class="reason">{budget.text(result.reason, 5000)}</p>'
            f"{budget.text(result.unscored_reason, 2000) if result.unscored_reason else ''}{table}"
            f'<p><a href="{esc(result_path(result_id))}/prompt" id="prompt-link">Exact prompt and raw reply</a></p>'
            "</section>")


def label_form(result_id: int, result: EvaluationResult, mine: StoredLabel | None, csrf: str,
               back: dict[str, object]) -> str:
    dimensions = [d.id for d in result.dimension_scores]
    fields = []
    for index, dimension in enumerate(dimensions):
        chosen = None if mine is None else mine.dimensions.get(dimension, "skip")
        choices = []
        for value in ("1", "2", "3", "4", "5", "na"):
            checked = " checked" if (chosen is None and value == "na" and mine is not None) or \
                (chosen not in (None, "skip") and str(chosen) == value) else ""
            shown = "n/a" if value == "na" else value
            choices.append(f'<label class="choice"><input type="radio" name="dim.{esc(dimension)}" '
                           f'value="{value}"{checked}>{shown}</label>')
        fields.append(f'<fieldset class="dimension" data-index="{index}"><legend>{esc(dimension)}</legend>'
                      f"{''.join(choices)}</fieldset>")
    passed = None if mine is None else mine.passed
    verdict = "".join(
        f'<label class="choice"><input type="radio" name="passed" value="{v}" required'
        f'{" checked" if passed is not None and passed == (v == "pass") else ""}>{v}</label>'
        for v in ("pass", "fail"))
    hidden = "".join(f'<input type="hidden" name="back.{esc(k)}" value="{esc(v)}">' for k, v in back.items() if v)
    return (f'<form method="post" action="{esc(result_path(result_id))}/label" class="label" id="label-form">'
            f'<h2>Your label</h2><input type="hidden" name="csrf" value="{esc(csrf)}">{hidden}'
            f"{''.join(fields)}<fieldset class=\"passfail\"><legend>Verdict</legend>{verdict}</fieldset>"
            f'<label class="note">Note <textarea name="note" maxlength="2000" rows="3">'
            f"{esc(mine.note if mine else '')}</textarea></label>"
            '<button type="submit" id="save">Save and next (<kbd>s</kbd>)</button></form>')


def review_page(result_id: int, result: EvaluationResult, reason: str | None, conversation: Conversation | None,
                others: Sequence[tuple[int, EvaluationResult]], labels: Sequence[StoredLabel], reviewer: str,
                csrf: str, back: dict[str, object], limit: int, saved: bool) -> str:
    budget = Budget(limit)
    mine = next((label for label in labels if label.reviewer == reviewer), None)
    tabs = "".join(
        f'<a href="{esc(link(result_path(i), **back))}" class="{"current" if i == result_id else ""}">'
        f"{esc(r.rubric)}{'' if r.turn_index is None else ' turn ' + esc(r.turn_index)}</a>" for i, r in others)
    notice = '<p class="saved" id="saved">Label saved.</p>' if saved else ""
    # A label is people's verdict on a whole conversation: turn-level verdicts are shown, not labelled.
    form = label_form(result_id, result, mine, csrf, back) if result.turn_index is None else (
        '<p class="note">Labels are given to whole-conversation verdicts; this one judges a single turn.</p>')
    others_labels = "".join(f"<li>{esc(lab.reviewer)}: {'pass' if lab.passed else 'fail'}"
                            f"{' – ' + esc(lab.note[:200]) if lab.note else ''}</li>"
                            for lab in labels if lab.reviewer != reviewer)
    body = (f'{notice}<p class="conversation-id">Conversation <code>{esc(result.conversation_id)}</code> '
            f'<a href="{esc(conversation_path(result.conversation_id))}">link</a></p>'
            f'<nav class="tabs">{tabs}</nav><div class="columns"><div class="left">'
            f"{conversation_html(conversation, result, budget)}</div><div class=\"right\">"
            f"{verdict_html(result_id, result, reason, budget)}"
            f"{form}"
            f"{'<h3>Other reviewers</h3><ul>' + others_labels + '</ul>' if others_labels else ''}"
            f'<p><a href="{esc(link("/queue", **back))}" id="back">Back to the queue</a></p></div></div>')
    return layout(f"Review: {result.rubric}", body, reviewer, csrf, "review")


def prompt_page(result_id: int, result: EvaluationResult, reviewer: str, csrf: str, limit: int) -> str:
    budget = Budget(limit)
    if result.prompt is None:
        prompt = "<p>Not stored (<code>store.store_content</code> is false).</p>"
    else:
        prompt = "".join(f'<article class="turn"><header><span class="role">{budget.text(m.get("role"), 64)}</span>'
                         f"</header><pre>{budget.text(m.get('content'))}</pre></article>" for m in result.prompt)
    raw = "<p>Not stored.</p>" if result.raw_reply is None else f"<pre>{budget.text(result.raw_reply)}</pre>"
    body = (f'<p><a href="{esc(result_path(result_id))}">← back to the conversation</a></p>'
            f"<h2>Prompt sent to the judge</h2>{prompt}<h2>Raw reply</h2>{raw}")
    return layout(f"Prompt: {result.rubric}", body, reviewer, csrf, "prompt")


def _measure(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def agreement_page(report: dict[str, RubricAgreement], reviewer: str, csrf: str) -> str:
    if not report:
        body = "<p class=\"empty\">No labels of the uniform share yet.</p>"
        return layout("Agreement", body, reviewer, csrf, "agreement")
    sections = []
    for rubric, found in report.items():
        rows = []
        order = sorted(found.measures.items(), key=lambda kv: (kv[0][0], MEASURES.index(kv[0][1])))
        for (dimension, measure), value in order:
            interval = "–" if value.lower is None else f"{value.lower:.3f} – {value.upper:.3f}"
            rows.append(f'<tr data-dimension="{esc(dimension)}" data-measure="{esc(measure)}">'
                        f"<td>{esc(dimension or '(verdict)')}</td><td>{esc(measure)}</td>"
                        f'<td class="value">{_measure(value.value)}</td><td>{esc(interval)}</td>'
                        f'<td class="n">{value.n}</td></tr>')
        sections.append(f'<section class="rubric"><h2>{esc(rubric)}</h2><table class="agreement"><thead><tr>'
                        "<th>Dimension</th><th>Measure</th><th>Value</th><th>95% interval</th><th>Labels</th></tr>"
                        f"</thead><tbody>{''.join(rows)}</tbody></table></section>")
    body = ("<p>From the labels of the uniform share only (an unbiased sample of every verdict).</p>"
            + "".join(sections))
    return layout("Agreement", body, reviewer, csrf, "agreement")


def error_page(status: int, message: str) -> str:
    return layout(f"{status}", f"<p>{esc(message)}</p>", None, "", "error")


@dataclass(frozen=True)
class ParsedLabel:
    passed: bool
    dimensions: dict[str, int | None]
    note: str


def parse_label_form(form: dict[str, str], dimensions: Sequence[str]) -> ParsedLabel:
    """The label form's fields; ``ValueError`` naming the field when one is missing or out of range."""
    passed = form.get("passed")
    if passed not in ("pass", "fail"):
        raise ValueError("choose pass or fail")
    chosen: dict[str, int | None] = {}
    for dimension in dimensions:
        value = form.get(f"dim.{dimension}")
        if value is None or value == "":
            continue
        if value == "na":
            chosen[dimension] = None
        elif value in ("1", "2", "3", "4", "5"):
            chosen[dimension] = int(value)
        else:
            raise ValueError(f"dimension {dimension}: {value[:20]!r} is not 1-5 or n/a")
    return ParsedLabel(passed == "pass", chosen, form.get("note", "")[:2000])

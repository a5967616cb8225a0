"""The Grafana dashboards: valid dashboard JSON, and every query answered by a real Prometheus.

The Prometheus test runs the daemon (real CLI, scripted OpenAI-compatible judge on 127.0.0.1) over conversations of
three agents scored by four rubrics (two weighted, one adaptive, one static), changes a rubric's version half-way,
lets the Debian ``prometheus`` binary scrape it every second, then runs every panel query, annotation and template
variable of the committed dashboards against it, with Grafana's variables and macros substituted.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import subprocess
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from monitor.formats.otlp import spans_to_otlp_document
from tests.conftest import CORPORA, REPO, require_binary
from tests.fakes.openai_server import Recorded, Reply, ScriptedOpenAIServer, completion
from tests.helpers import judge_config, write_config
from tests.test_daemon import Daemon, free_port, get, wait_for
from tools.chat_to_otlp import chat_record_to_spans
from tools.grafana_dashboards import DASHBOARDS

DASHBOARD_DIR = REPO / "grafana" / "dashboards"
SCHEMA = CORPORA / "grafana" / "dashboard.schema.json"
AGENTS = ("reservation-assistant", "reservation-web", "booking-bot")
DAEMON_DASHBOARDS = sorted(set(DASHBOARDS) - {"quality-slos.json"})
"""The dashboards this daemon run feeds; the SLO dashboard reads the SLO rules' records, which
tests/test_grafana_slo.py has a Prometheus evaluate."""

# Series that only exist once another piece of work has landed, or only on a fault this healthy run does not
# have: their queries must run without error; they may return nothing. (dashboard, panel title, refId) → why.
MAY_BE_EMPTY: dict[tuple[str, str, str], str] = {
    ("agent-quality.json", "Active regressions", "A"): "regressions: only while a regression is detected",
    ("agent-quality.json", "Active regressions", "B"): "regressions: only while a regression is detected",
    ("agent-quality.json", "Active regressions", "C"): "regressions: only while a regression is detected",
    ("agent-quality.json", "Cannot judge", "A"): "regression check (alerts work): only when it cannot judge",
    ("agent-quality.json", "Judge canary agreement", "A"): "canary conversations (judge work)",
    ("agent-quality.json", "Judge canary agreement", "B"): "judge drift (judge work)",
    ("agent-quality.json", "Judge–human agreement", "A"): "people's labels (review work): none in this run",
    ("agent-quality.json", "Judge–human agreement", "B"): "people's labels (review work): none in this run",
    ("agent-quality.json", "Labels behind the agreement", "A"): "people's labels (review work): none in this run",
    ("monitor-operations.json", "Source lag (watermark age) and backlog", "A"):
        "the watermark lag exists for App Insights only; this run reads OTLP files",
    ("monitor-operations.json", "Source errors by kind", "A"): "no source fails in this healthy run",
}


def dashboards() -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text(encoding="utf-8")) for p in sorted(DASHBOARD_DIR.glob("*.json"))}


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


# -- the dashboard model ---------------------------------------------------------------------------------------

def dashboard_schema() -> dict[str, Any]:
    """The schema generated from @grafana/schema, with one widening: it types an annotation's ``target`` as the
    built-in Grafana datasource's (``limit, matchAny, tags, type``; its own description says "TODO.. this should
    just be a normal query target"), which leaves no place for a Prometheus annotation's query. A Prometheus
    query target is accepted there too; everything else is validated as generated."""
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    builtin = schema["definitions"]["AnnotationTarget"]
    schema["definitions"]["AnnotationTarget"] = {"anyOf": [builtin, {
        "type": "object", "additionalProperties": False, "required": ["refId", "expr"],
        "properties": {"refId": {"type": "string"}, "expr": {"type": "string"}, "step": {"type": "string"},
                       "titleFormat": {"type": "string"}, "tagKeys": {"type": "string"},
                       "textFormat": {"type": "string"}, "useValueForTime": {"type": "boolean"}},
    }]}
    return schema


def test_committed_dashboards_are_the_generated_ones() -> None:
    assert sorted(DASHBOARDS) == sorted(dashboards())
    for name, build in DASHBOARDS.items():
        assert dashboards()[name] == json.loads(json.dumps(build())), f"{name}: run tools/generate_deploy.py"


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_dashboard_validates_against_the_grafana_schema(name: str) -> None:
    validator = jsonschema.Draft7Validator(dashboard_schema())
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(dashboards()[name])]
    assert errors == []


def test_schema_rejects_what_grafana_would_not_load() -> None:
    validator = jsonschema.Draft7Validator(dashboard_schema())
    broken = copy.deepcopy(dashboards()["agent-quality.json"])
    next(panels(broken))["gridPos"]["width"] = 12
    assert not validator.is_valid(broken)
    broken = copy.deepcopy(dashboards()["agent-quality.json"])
    broken["annotations"]["list"][1]["target"]["query"] = "x"
    assert not validator.is_valid(broken)


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_panels_fit_the_grid_and_use_only_defined_variables(name: str) -> None:
    dashboard = dashboards()[name]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    defined = {v["name"] for v in dashboard["templating"]["list"]}
    for panel in panels(dashboard):
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24, panel["title"]
        assert panel["targets"], panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        for target in panel["targets"]:
            used = set(re.findall(r"\$\{?([A-Za-z_]\w*)", target["expr"])) - {"__rate_interval", "__range"}
            assert used <= defined, f"{panel['title']}: {used - defined}"
        if "repeat" in panel:
            assert panel["repeat"] in defined


def test_quality_dashboard_has_what_the_issue_asks_for() -> None:
    dashboard = dashboards()["agent-quality.json"]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert {"rubric", "agent", "window"} <= set(variables)
    types = {p["title"]: p["type"] for p in panels(dashboard)}
    assert "heatmap" in types.values()
    annotations = [a["name"] for a in dashboard["annotations"]["list"] if "expr" in a.get("target", {})]
    assert annotations == ["Rubric version changes", "Judge changes"]
    linked = [p["title"] for p in panels(dashboard) if p["fieldConfig"]["defaults"]["links"]]
    assert "Pass rate by rubric and agent" in linked
    link = next(p for p in panels(dashboard) if p["title"] == "Pass rate by rubric and agent"
                )["fieldConfig"]["defaults"]["links"][0]["url"]
    # The link opens the failing evaluations of the clicked series, with exemplars (their trace ids).
    pane = json.loads(urllib.parse.unquote(link.split("panes=", 1)[1]))["failing"]
    assert 'outcome="fail"' in pane["queries"][0]["expr"] and pane["queries"][0]["exemplar"] is True
    assert "${__field.labels.rubric:percentencode}" in pane["queries"][0]["expr"]
    assert pane["range"] == {"from": "${__from}", "to": "${__to}"}


def test_provisioning_files_point_at_the_dashboards() -> None:
    provider = yaml.safe_load((REPO / "grafana" / "provisioning" / "dashboards" / "rubric-monitor.yaml").read_text())
    assert provider["providers"][0]["type"] == "file"
    datasource = yaml.safe_load((REPO / "grafana" / "provisioning" / "datasources" / "prometheus.yaml").read_text())
    (prometheus,) = datasource["datasources"]
    # The dashboards' datasource variable defaults to this uid.
    for dashboard in dashboards().values():
        variable = next(v for v in dashboard["templating"]["list"] if v["type"] == "datasource")
        assert variable["current"]["value"] == prometheus["uid"]
    assert prometheus["jsonData"]["exemplarTraceIdDestinations"][0]["name"] == "trace_id"


# -- a daemon run with data, scraped by a real Prometheus ---------------------------------------------------------

def schema_instance(schema: dict[str, Any], seed: bytes, path: str = "") -> Any:
    """A value valid under the strict JSON ``schema``, varied by ``seed``: what a model answering the
    request's response_format would send. Booleans named ``applicable`` are true (every dimension applies)."""
    digest = hashlib.sha256(seed + path.encode()).digest()
    kinds = schema.get("type", "object")
    kind = next(k for k in kinds if k != "null") if isinstance(kinds, list) else kinds
    if "enum" in schema:
        return schema["enum"][digest[0] % len(schema["enum"])]
    if kind == "object":
        return {k: schema_instance(v, seed, f"{path}.{k}") for k, v in schema.get("properties", {}).items()}
    if kind == "array":
        return [schema_instance(schema.get("items", {}), seed, f"{path}[{i}]") for i in range(2)]
    if kind == "integer":
        low, high = schema.get("minimum", 0), schema.get("maximum", 10)
        return low + digest[0] % (high - low + 1)
    if kind == "boolean":
        return path.endswith(".applicable") or digest[0] % 3 > 0
    if kind == "number":
        return digest[0] / 255
    return f"scripted {path} {digest[:4].hex()}"


def schema_judge(request: Recorded) -> Reply:
    response_format = request.body.get("response_format") or {}
    schema = (response_format.get("json_schema") or {}).get("schema")
    assert schema, "the daemon asks for strict JSON schema replies first"
    # The agent's name is in the rendered conversation: seed on the prompt, so each conversation gets its own
    # verdict and agents get different pass rates.
    return completion(json.dumps(schema_instance(schema, request.prompt_text.encode())), prompt_tokens=400,
                      completion_tokens=60)


def traces(path: Path, batch: int) -> None:
    """The example conversations, once per agent, as OTLP JSON lines, plus one malformed line (counted as a
    rejected span); ``batch`` makes conversation ids distinct."""
    records = [json.loads(line) for line in (REPO / "examples" / "conversations.jsonl").read_text().splitlines()]
    lines = []
    number = 0
    for agent in AGENTS:
        for record in records:
            number += 1
            copy_ = {**record, "id": f"{record['id']}-{agent}-{batch}", "agent": agent}
            lines.append(json.dumps(spans_to_otlp_document(chat_record_to_spans(copy_, number + 100 * batch))))
    lines.append('{"resourceSpans": [ not json')
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def weighted_rubric(name: str, version: str, agents: list[str], weight: int = 9) -> dict[str, Any]:
    return {"name": name, "kind": "weighted", "version": version, "agents": agents, "pass_threshold": 0.6,
            "dimensions": [
                {"id": "task_completion", "description": "Completes the user's request within policy.",
                 "weight": weight},
                {"id": "communication", "description": "Clear, polite and concise replies.", "weight": 3},
            ]}


@dataclass
class Scraped:
    prometheus: str
    start: float
    end: float
    new_version: str


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scraped]:
    prometheus_binary = require_binary("prometheus")
    tmp = tmp_path_factory.mktemp("grafana")
    (tmp / "traces").mkdir()
    (tmp / "rubrics").mkdir()
    traces(tmp / "traces" / "a.jsonl", 1)
    write_rubric = lambda name, doc: (tmp / "rubrics" / f"{name}.yaml").write_text(  # noqa: E731
        yaml.safe_dump(doc), encoding="utf-8")
    write_rubric("reservation", weighted_rubric("reservation-quality", "1", ["reservation-*"]))
    write_rubric("booking", weighted_rubric("booking-quality", "1", ["booking-*"]))
    write_rubric("task", {"name": "task-success", "kind": "adaptive", "metric": "multi_turn_task_success",
                          "agents": ["*"], "pass_threshold": 0.5})
    # A small daily budget, spent within the run: the budget panels and the budget_exhausted skip have data.
    write_rubric("safety", {"name": "safety", "kind": "safety", "agents": ["*"], "daily_budget_tokens": 1500,
                            "daily_budget_usd": 5.0, "sampling_rate": 0.5})
    daemon_port, prometheus_port = free_port(), free_port()
    with ScriptedOpenAIServer(schema_judge) as judge:
        config = write_config(tmp / "config.yaml", judge_config(
            judge.base_url,
            interval_seconds=1,
            source={"kind": "otlp_file", "path": str(tmp / "traces")},
            conversation={"idle_timeout_seconds": 0},
            rubrics={"directory": str(tmp / "rubrics")},
            store={"url": f"sqlite:///{tmp / 'results.db'}"},
            metrics={"host": "127.0.0.1", "port": daemon_port},
        ) | {"judge": {**judge_config(judge.base_url)["judge"],
                       "prices": {"judge-model": {"input_per_million": 2.0, "output_per_million": 8.0}}}})
        (tmp / "prometheus.yml").write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [{"job_name": "rubric-monitor",
                                "static_configs": [{"targets": [f"127.0.0.1:{daemon_port}"]}]}],
        }), encoding="utf-8")
        start = time.time()
        daemon = Daemon(config, tmp, daemon_port)
        prometheus = subprocess.Popen(
            [prometheus_binary, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{prometheus_port}", "--enable-feature=exemplar-storage"],
            stdout=(tmp / "prometheus.log").open("wb"), stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{prometheus_port}"
        try:
            def ready() -> bool:
                try:
                    return get(f"{base}/-/ready")[0] == 200
                except OSError:
                    return False

            def scored(version: str) -> bool:
                # The registry appends the built-in prompt's version to the version written in the file.
                result = query(base, f'sum(rubric_monitor_evaluations_total{{rubric="reservation-quality", '
                                     f'rubric_version=~"{version}(\\\\+.*)?"}})')
                return bool(result) and float(result[0]["value"][1]) >= 6

            wait_for(ready, 60, "Prometheus to start")

            wait_for(lambda: scored("1"), 240, f"Prometheus to scrape version 1 results ({daemon.log})")
            # A new rubric version and new conversations: the next cycles score them under version 2.
            write_rubric("reservation", weighted_rubric("reservation-quality", "2", ["reservation-*"], weight=7))
            traces(tmp / "traces" / "b.jsonl", 2)
            wait_for(lambda: scored("2"), 240, f"Prometheus to scrape version 2 results ({daemon.log})")
            time.sleep(5)  # a few more scrapes of the settled state
            yield Scraped(base, start, time.time(), "2")
        finally:
            prometheus.terminate()
            prometheus.wait(timeout=60)
            daemon.stop()


def query(base: str, expr: str, at: float | None = None) -> list[dict[str, Any]]:
    params = {"query": expr} | ({"time": f"{at:.3f}"} if at else {})
    status, body = get(f"{base}/api/v1/query?{urllib.parse.urlencode(params)}")
    document = json.loads(body)
    assert status == 200 and document["status"] == "success", f"{expr}: {body[:500]}"
    return list(document["data"]["result"])


def run(base: str, expr: str, instant: bool, start: float, end: float) -> list[dict[str, Any]]:
    if instant:
        return query(base, expr, end)
    params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": "2"}
    status, body = get(f"{base}/api/v1/query_range?{urllib.parse.urlencode(params)}")
    document = json.loads(body)
    assert status == 200 and document["status"] == "success", f"{expr}: {body[:500]}"
    return list(document["data"]["result"])


def label_values(base: str, query_text: str, start: float, end: float) -> list[str]:
    """Grafana's ``label_values(selector, label)`` variable query, as its Prometheus datasource runs it."""
    match = re.fullmatch(r"label_values\((.+), (\w+)\)", query_text)
    assert match, query_text
    params = {"match[]": match.group(1), "start": f"{start:.0f}", "end": f"{end:.0f}"}
    status, body = get(f"{base}/api/v1/label/{match.group(2)}/values?{urllib.parse.urlencode(params)}")
    assert status == 200, body
    return list(json.loads(body)["data"])


def substitute(expr: str, values: dict[str, str], range_seconds: float) -> str:
    """Grafana's interpolation: multi-value variables as a regex (``All`` → ``.*``), single values as they are,
    ``$__rate_interval`` (four scrape intervals at least) and ``$__range``. A ``$`` before a digit is not a variable
    (Grafana leaves ``label_replace``'s ``$1`` alone)."""
    expr = expr.replace("$__rate_interval", "10s").replace("$__range", f"{int(range_seconds)}s")
    return re.sub(r"\$\{?([A-Za-z_]\w*)\}?", lambda m: values[m.group(1)], expr)


def resolve_variables(base: str, dashboard: dict[str, Any], start: float, end: float) -> dict[str, str]:
    values: dict[str, str] = {}
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        resolved = label_values(base, substitute(variable["query"], values, end - start), start, end)
        assert resolved, f"variable {variable['name']} ({variable['query']}) resolves to nothing"
        values[variable["name"]] = ".*" if variable.get("multi") else sorted(resolved)[0]
    return values


@pytest.mark.slow
@pytest.mark.parametrize("name", DAEMON_DASHBOARDS)
def test_every_query_runs_against_prometheus_and_returns_data(name: str, scraped: Scraped) -> None:
    dashboard = dashboards()[name]
    values = resolve_variables(scraped.prometheus, dashboard, scraped.start, scraped.end)
    if name == "agent-quality.json":
        assert values["window"] in {"1h", "24h", "7d"}
    empty, ran = [], 0
    targets = [(p["title"], t) for p in panels(dashboard) for t in p["targets"]]
    targets += [(f"annotation: {a['name']}", a["target"]) for a in dashboard["annotations"]["list"]
                if "expr" in a.get("target", {})]
    for title, target in targets:
        expr = substitute(target["expr"], values, scraped.end - scraped.start)
        result = run(scraped.prometheus, expr, bool(target.get("instant")), scraped.start, scraped.end)
        ran += 1
        if not result and (name, title, target["refId"]) not in MAY_BE_EMPTY:
            empty.append(f"{title} [{target['refId']}]: {expr}")
    assert ran == len(targets)
    assert empty == [], "panels without data:\n" + "\n".join(empty)


@pytest.mark.slow
def test_quality_series_show_agents_rubric_kinds_and_the_version_change(scraped: Scraped) -> None:
    base, end = scraped.prometheus, scraped.end
    rates = query(base, 'rubric_monitor_pass_rate{window="1h"}', end)
    assert {r["metric"]["agent"] for r in rates} == set(AGENTS)
    kinds = {r["metric"]["kind"] for r in query(base, "rubric_monitor_rubric_info", end)}
    assert kinds == {"weighted", "adaptive", "safety"}
    versions = {r["metric"]["rubric_version"].split("+")[0] for r in query(
        base, 'rubric_monitor_evaluations_total{rubric="reservation-quality"}', end)}
    assert versions == {"1", scraped.new_version}
    annotation = next(a for a in dashboards()["agent-quality.json"]["annotations"]["list"]
                      if a["name"] == "Rubric version changes")
    expr = substitute(annotation["target"]["expr"], {"rubric": ".*"}, end - scraped.start)
    # Evaluated a little after the change: version 2 of reservation-quality is the new series.
    changed = run(base, expr, False, scraped.start, end)
    assert ("reservation-quality", scraped.new_version) in [
        (r["metric"]["rubric"], r["metric"]["rubric_version"].split("+")[0]) for r in changed]


@pytest.mark.slow
def test_grafana_heatmap_buckets_are_the_five_scores(scraped: Scraped) -> None:
    scores = {r["metric"]["score"] for r in query(
        scraped.prometheus, "sum by (score) (rubric_monitor_dimension_scores_total)", scraped.end)}
    assert scores <= {"1", "2", "3", "4", "5"} and len(scores) >= 3


def test_slo_dashboard_has_what_the_issue_asks_for() -> None:
    dashboard = dashboards()["quality-slos.json"]
    titles = {p["title"]: p for p in panels(dashboard)}
    assert {"Error budget burn-down", "Burn rate per window", "SLI per window", "Burn-rate alerts (Prometheus)",
            "Scored evaluations per window"} <= set(titles)
    burn_down = titles["Error budget burn-down"]["targets"][0]["expr"]
    assert "slo:rubric_monitor_slo_error_budget_remaining:ratio" in burn_down
    assert 'alertname="RubricSLOBurn"' in titles["Burn-rate alerts (Prometheus)"]["targets"][0]["expr"]
    assert [v["name"] for v in dashboard["templating"]["list"]] == ["datasource", "slo"]

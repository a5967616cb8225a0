"""Grafana dashboards as code: "Agent quality", "Monitor operations" and "Quality SLOs", plain JSON built here.

    python tools/generate_deploy.py          # writes grafana/dashboards/*.json (and the PrometheusRule)

The JSON follows Grafana's dashboard model (tests/test_grafana.py validates it against the schema generated from
``@grafana/schema``) and every query is executed against a real Prometheus that scraped a daemon run. Metric names
are the project's contract (TEAM.md / README "Metrics"). Panels use the ``${datasource}`` variable, so the files
import into any Grafana whose Prometheus scrapes rubric-monitor. The SLO dashboard reads the SLO recording rules
(``rubric-monitor slo rules``, docs/slo.md) and the alerts they fire: its queries are run in the tests against a
real Prometheus loaded with those rules (tests/test_grafana_slo.py).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
SCHEMA_VERSION = 39
QUALITY_UID = "rubric-monitor-quality"
OPERATIONS_UID = "rubric-monitor-operations"
SLO_UID = "rubric-monitor-slos"

# Selectors the quality panels share: the rubric and agent chosen at the top of the dashboard.
SEL = 'rubric=~"$rubric", agent=~"$agent"'
WIN = f'{SEL}, window="$window"'


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""
    instant: bool = False
    exemplar: bool = False
    heatmap: bool = False

    def target(self, ref: str) -> dict[str, Any]:
        target: dict[str, Any] = {
            "datasource": DATASOURCE, "refId": ref, "expr": self.expr, "legendFormat": self.legend or "__auto",
            "range": not self.instant, "instant": self.instant, "editorMode": "code",
        }
        if self.exemplar:
            target["exemplar"] = True
        if self.heatmap:
            target["format"] = "heatmap"
        elif self.instant:
            target["format"] = "table"
        return target


@dataclass
class Panel:
    title: str
    type: str
    queries: list[Query]
    description: str
    width: int = 12
    height: int = 8
    unit: str | None = None
    min: float | None = None
    max: float | None = None
    options: dict[str, Any] = field(default_factory=dict)
    custom: dict[str, Any] = field(default_factory=dict)
    links: list[dict[str, Any]] = field(default_factory=list)
    transformations: list[dict[str, Any]] = field(default_factory=list)
    repeat: str | None = None
    thresholds: list[tuple[float | None, str]] | None = None

    def to_json(self, panel_id: int, x: int, y: int) -> dict[str, Any]:
        defaults: dict[str, Any] = {"custom": self.custom, "links": self.links}
        for key in ("unit", "min", "max"):
            if getattr(self, key) is not None:
                defaults[key] = getattr(self, key)
        if self.thresholds is not None:
            defaults["thresholds"] = {"mode": "absolute", "steps": [
                {"value": value, "color": color} for value, color in self.thresholds]}
        panel: dict[str, Any] = {
            "id": panel_id, "type": self.type, "title": self.title, "description": self.description,
            "datasource": DATASOURCE, "gridPos": {"h": self.height, "w": self.width, "x": x, "y": y},
            "targets": [q.target(chr(ord("A") + i)) for i, q in enumerate(self.queries)],
            "fieldConfig": {"defaults": defaults, "overrides": []},
            "options": self.options,
        }
        if self.transformations:
            panel["transformations"] = self.transformations
        if self.repeat:
            panel["repeat"] = self.repeat
            panel["repeatDirection"] = "h"
            panel["maxPerRow"] = 3
        return panel


@dataclass
class Row:
    title: str
    panels: list[Panel]


def layout(rows: list[Row]) -> list[dict[str, Any]]:
    """Rows of panels on Grafana's 24-column grid, left to right, wrapping; ids in order."""
    out: list[dict[str, Any]] = []
    y, next_id = 0, 1
    for row in rows:
        out.append({"type": "row", "id": next_id, "title": row.title, "collapsed": False, "panels": [],
                    "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}})
        next_id += 1
        y += 1
        x, line_height = 0, 0
        for panel in row.panels:
            if x + panel.width > 24:
                x, y, line_height = 0, y + line_height, 0
            out.append(panel.to_json(next_id, x, y))
            next_id += 1
            x += panel.width
            line_height = max(line_height, panel.height)
        y += line_height
    return out


def query_variable(name: str, label: str, query: str, *, multi: bool = True, description: str) -> dict[str, Any]:
    variable: dict[str, Any] = {
        "name": name, "label": label, "type": "query", "datasource": DATASOURCE, "description": description,
        "query": query, "refresh": 2, "sort": 1, "multi": multi, "includeAll": multi, "options": [],
        "current": {"text": ["All"], "value": ["$__all"]} if multi else {"text": "", "value": ""},
    }
    if multi:
        variable["allValue"] = ".*"
    return variable


def datasource_variable() -> dict[str, Any]:
    return {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus",
            "current": {"text": "Prometheus", "value": "prometheus"}, "options": [], "refresh": 1,
            "description": "The Prometheus that scrapes rubric-monitor."}


def dashboard(uid: str, title: str, description: str, rows: list[Row], variables: list[dict[str, Any]],
              annotations: list[dict[str, Any]], links: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "uid": uid, "title": title, "description": description, "tags": ["rubric-monitor"],
        "schemaVersion": SCHEMA_VERSION, "version": 1, "editable": True, "graphTooltip": 1,
        "timezone": "utc", "refresh": "1m", "time": {"from": "now-24h", "to": "now"},
        "timepicker": {"refresh_intervals": ["30s", "1m", "5m", "15m", "1h"]},
        "templating": {"list": variables},
        "annotations": {"list": [{
            "name": "Annotations & Alerts", "builtIn": 1, "enable": True, "hide": True,
            "iconColor": "rgba(0, 211, 255, 1)", "type": "dashboard",
            "datasource": {"type": "grafana", "uid": "-- Grafana --"},
            "target": {"limit": 100, "matchAny": False, "tags": [], "type": "dashboard"},
        }, *annotations]},
        "links": links,
        "panels": layout(rows),
    }


def prometheus_annotation(name: str, expr: str, title: str, color: str) -> dict[str, Any]:
    """An annotation drawn where ``expr`` has a value. The query sits in ``target`` as Grafana's Prometheus
    datasource stores it (the dashboard schema still types ``target`` as the built-in datasource's)."""
    return {"name": name, "enable": True, "hide": False, "iconColor": color, "datasource": DATASOURCE,
            "target": {"refId": "Anno", "expr": expr, "step": "60s", "titleFormat": title, "tagKeys": "rubric",
                       "textFormat": "", "useValueForTime": False}}


def dashboard_link(title: str, uid: str) -> dict[str, Any]:
    return {"title": title, "type": "link", "url": f"/d/{uid}", "icon": "dashboard", "tooltip": title,
            "asDropdown": False, "includeVars": False, "keepTime": True, "tags": [], "targetBlank": False}


# -- Agent quality -------------------------------------------------------------------------------------------

def explore_url(expr: str) -> str:
    """A Grafana Explore link running ``expr`` with exemplars over the clicked panel's time range. ``expr`` may
    hold data-link placeholders (``${__field.labels.rubric:percentencode}``), kept unencoded for Grafana."""
    pane = {"datasource": "${datasource}", "range": {"from": "${__from}", "to": "${__to}"}, "queries": [
        {"refId": "A", "expr": expr, "exemplar": True, "range": True, "datasource": DATASOURCE}]}
    encoded = quote(json.dumps({"failing": pane}, separators=(",", ":")), safe="")
    for placeholder in set(re.findall(r"\$\{[^}]+\}", json.dumps(pane))):
        encoded = encoded.replace(quote(placeholder, safe=""), placeholder)
    return f"/explore?schemaVersion=1&orgId=1&panes={encoded}"


# From a dip to the conversations behind it: Explore shows the failed evaluations of the clicked series with
# their exemplars, one per failing conversation, each carrying its trace_id; the Prometheus datasource's exemplar
# link template (grafana/provisioning/datasources) opens that trace in App Insights, Tempo or Jaeger.
FAILING_LINK = {
    "title": "Failing conversations of ${__field.labels.rubric} / ${__field.labels.agent}",
    "url": explore_url('sum by (rubric, agent) (increase(rubric_monitor_evaluations_total{outcome="fail", '
                       'rubric="${__field.labels.rubric:percentencode}", '
                       'agent="${__field.labels.agent:percentencode}"}[$__rate_interval]))'),
    "targetBlank": True,
}

MEAN_SCORE = (f"sum by (rubric, agent) (increase(rubric_monitor_score_sum_total{{{SEL}}}[$window]))"
              f" / sum by (rubric, agent) (increase(rubric_monitor_evaluations_total{{{SEL}, outcome=~\"pass|fail\"}}"
              "[$window]))")
NON_WEIGHTED = ('max by (rubric, rubric_version, kind) (rubric_monitor_rubric_info{rubric=~"$rubric", '
                'kind!="weighted"})')


def quality_dashboard() -> dict[str, Any]:
    pass_rate = Panel(
        "Pass rate by rubric and agent", "timeseries",
        [Query(f"rubric_monitor_pass_rate{{{WIN}}}", "{{rubric}} v{{rubric_version}} · {{agent}}")],
        "Share of scored evaluations that passed over the rolling window ($window), per rubric version and "
        "agent. Click a dip to open its failing conversations.",
        unit="percentunit", min=0, max=1, links=[FAILING_LINK],
        custom={"drawStyle": "line", "lineWidth": 2, "spanNulls": True})
    sample_size = Panel(
        "Sample size (scored evaluations in window)", "timeseries",
        [Query(f"rubric_monitor_scored_evaluations{{{WIN}}}", "{{rubric}} v{{rubric_version}} · {{agent}}")],
        "How many scored evaluations the pass rate is computed from: a swing on a handful is noise.",
        unit="short", min=0, custom={"drawStyle": "bars", "fillOpacity": 40})
    table = Panel(
        "Pass rate with its sample size", "table",
        [Query(f"rubric_monitor_pass_rate{{{WIN}}}", instant=True),
         Query(f"rubric_monitor_scored_evaluations{{{WIN}}}", instant=True)],
        "Current pass rate and sample size per rubric version and agent in the chosen window.",
        width=24, height=7, links=[FAILING_LINK],
        transformations=[
            {"id": "joinByField", "options": {"byField": "agent", "mode": "outer"}},
            {"id": "organize", "options": {"excludeByName": {"Time": True, "__name__": True, "job": True,
                                                              "instance": True},
                                           "renameByName": {"Value #A": "pass rate", "Value #B": "scored"}}},
        ])
    outcomes = Panel(
        "Evaluations by outcome", "timeseries",
        [Query(f"sum by (outcome) (increase(rubric_monitor_evaluations_total{{{SEL}}}[$__rate_interval]))",
               "{{outcome}}")],
        "Evaluations recorded: pass, fail, unscored (the judge's reply was unusable or the conversation could not "
        "be judged; never counted as a low score).",
        unit="short", custom={"drawStyle": "bars", "stacking": {"mode": "normal"}, "fillOpacity": 60})
    failing = Panel(
        "Failing evaluations (exemplars link to the trace)", "timeseries",
        [Query(f'sum by (rubric, agent) (increase(rubric_monitor_evaluations_total{{{SEL}, outcome="fail"}}'
               '[$__rate_interval]))', "{{rubric}} · {{agent}}", exemplar=True)],
        "Failed evaluations over time. Each exemplar carries the conversation's trace_id / operation_id: the "
        "Prometheus datasource's exemplar link (grafana/provisioning) opens the trace.",
        unit="short", links=[FAILING_LINK], custom={"drawStyle": "bars", "fillOpacity": 60})
    mean_score = Panel(
        "Mean score (0–1) in window", "timeseries",
        [Query(MEAN_SCORE, "{{rubric}} · {{agent}}")],
        "Mean overall score of scored evaluations over $window, from the score counters.",
        unit="percentunit", min=0, max=1)
    dimension_mean = Panel(
        "Dimension means (1–5)", "timeseries",
        [Query(f'rubric_monitor_dimension_mean{{{WIN}, dimension=~"$dimension"}}',
               "{{rubric}} · {{agent}} · {{dimension}}")],
        "Mean score of each applicable dimension over $window (weighted rubrics).", min=1, max=5)
    dimension_bars = Panel(
        "Dimension means in window, from counters", "bargauge",
        [Query(f'sum by (rubric, dimension) (increase(rubric_monitor_dimension_score_sum_total{{{SEL}, '
               f'dimension=~"$dimension"}}[$window])) / sum by (rubric, dimension) (increase('
               f'rubric_monitor_dimension_scores_total{{{SEL}, dimension=~"$dimension"}}[$window]))',
               "{{rubric}} · {{dimension}}", instant=True)],
        "Per-dimension mean over $window, all selected agents together.", min=1, max=5,
        options={"orientation": "horizontal", "displayMode": "gradient", "showUnfilled": True},
        thresholds=[(None, "red"), (2.5, "orange"), (3.5, "green")])
    heatmap = Panel(
        "Score distribution (1–5): $dimension", "heatmap",
        [Query(f'sum by (score) (increase(rubric_monitor_dimension_scores_total{{{SEL}, dimension=~"$dimension"}}'
               '[$__rate_interval]))', "{{score}}", heatmap=True)],
        "How many times each score 1 to 5 was given to the dimension, over time.",
        width=8, repeat="dimension",
        options={"calculate": False, "yAxis": {"axisPlacement": "left"}, "cellGap": 1,
                 "color": {"mode": "scheme", "scheme": "Oranges", "steps": 64},
                 "rowsFrame": {"layout": "le"}, "tooltip": {"mode": "single", "yHistogram": True}})
    distribution = Panel(
        "Score distribution in window", "table",
        [Query(f'sum by (rubric, dimension, score) (increase(rubric_monitor_dimension_scores_total{{{SEL}, '
               f'dimension=~"$dimension"}}[$window]))', instant=True)],
        "Count of each score per dimension over $window.", width=24, height=7,
        transformations=[{"id": "groupingToMatrix", "options": {"columnField": "score", "rowField": "dimension",
                                                                 "valueField": "Value"}}])
    non_weighted_rate = Panel(
        "Adaptive and static metrics: pass rate", "timeseries",
        [Query(f"rubric_monitor_pass_rate{{{WIN}}} * on (rubric, rubric_version) group_left (kind) "
               f"{NON_WEIGHTED}", "{{rubric}} ({{kind}}) · {{agent}}")],
        "Pass rate of adaptive rubrics (share of passed items against the threshold) and static metrics "
        "(grounding, hallucination, safety: 1 = safe, final_response_match).",
        unit="percentunit", min=0, max=1, links=[FAILING_LINK])
    non_weighted_score = Panel(
        "Adaptive and static metrics: mean score", "bargauge",
        [Query(f"(sum by (rubric, rubric_version, agent) (increase(rubric_monitor_score_sum_total{{{SEL}}}"
               f"[$window])) / sum by (rubric, rubric_version, agent) (increase(rubric_monitor_evaluations_total"
               f"{{{SEL}, outcome=~\"pass|fail\"}}[$window]))) * on (rubric, rubric_version) group_left (kind) "
               f"{NON_WEIGHTED}", "{{rubric}} ({{kind}}) · {{agent}}", instant=True)],
        "Mean score over $window: adaptive = passed items / items; grounding and hallucination = supported "
        "sentences; safety 1 = safe.", unit="percentunit", min=0, max=1,
        options={"orientation": "horizontal", "displayMode": "gradient"},
        thresholds=[(None, "red"), (0.5, "orange"), (0.8, "green")])
    versions = Panel(
        "Active rubric versions", "state-timeline",
        [Query('max by (rubric, rubric_version, kind) (rubric_monitor_rubric_info{rubric=~"$rubric"})',
               "{{rubric}} v{{rubric_version}} ({{kind}})")],
        "Which version of each rubric was active when: a new version starts a new series.",
        width=24, height=6, options={"showValue": "never", "mergeValues": True})
    regressions = Panel(
        "Active regressions", "table",
        [Query(f"rubric_monitor_regression{{{SEL}}} == 1", instant=True),
         Query(f"rubric_monitor_regression_effect{{{SEL}}} and on (rubric, agent, kind, dimension, baseline) "
               f"(rubric_monitor_regression{{{SEL}}} == 1)", instant=True),
         Query(f"rubric_monitor_regression_p_value{{{SEL}}} and on (rubric, agent, kind, dimension, baseline) "
               f"(rubric_monitor_regression{{{SEL}}} == 1)", instant=True)],
        "Rubrics and agents whose pass rate or a dimension mean dropped significantly against the trailing "
        "window or the previous rubric version: effect (current − baseline) and p-value.",
        width=16, links=[FAILING_LINK],
        transformations=[{"id": "merge", "options": {}},
                         {"id": "organize", "options": {
                             "excludeByName": {"Time": True, "__name__": True, "job": True, "instance": True},
                             "renameByName": {"Value #A": "active", "Value #B": "effect",
                                              "Value #C": "p-value"}}}])
    cannot_judge = Panel(
        "Cannot judge", "table",
        [Query(f"rubric_monitor_cannot_judge{{{SEL}}} == 1", instant=True)],
        "Rubric and agent pairs the regression check cannot judge (too few samples, judge changed), by reason.",
        width=8)
    canary = Panel(
        "Judge canary agreement", "timeseries",
        [Query('rubric_monitor_canary_agreement{rubric=~"$rubric"}', "{{rubric}} · {{judge_model}}"),
         Query('rubric_monitor_judge_drift{rubric=~"$rubric"}', "drift {{rubric}}")],
        "Agreement of the judge with its canary conversations; drift = 1 when the judge's scores shifted.",
        width=24, height=6, unit="percentunit", min=0, max=1)
    agreement = Panel(
        "Judge–human agreement", "timeseries",
        [Query('rubric_monitor_judge_agreement{rubric=~"$rubric", measure=~"pass_fail|weighted_kappa"}',
               "{{rubric}} {{dimension}} {{measure}}"),
         Query('rubric_monitor_judge_agreement_bound{rubric=~"$rubric", measure="pass_fail", dimension=""}',
               "{{rubric}} pass_fail {{bound}}")],
        "How the judge agrees with people on the labelled uniform review share: pass/fail agreement (with its 95% "
        "interval) and each dimension's weighted kappa. JudgeAgreementLow fires below 0.8 / 0.4 with 30 labels.",
        width=16, height=7, min=0, max=1)
    agreement_labels = Panel(
        "Labels behind the agreement", "table",
        [Query('rubric_monitor_judge_agreement_labels{rubric=~"$rubric"}', instant=True)],
        "Labelled pairs per rubric and dimension (dimension empty: pass/fail); below 30 the alert stays silent.",
        width=8, height=7)
    rows = [
        Row("Pass rate", [pass_rate, sample_size, table, outcomes, failing, mean_score]),
        Row("Dimensions (weighted rubrics)", [dimension_mean, dimension_bars, heatmap, distribution]),
        Row("Adaptive rubrics and static metrics", [non_weighted_rate, non_weighted_score]),
        Row("Changes and regressions", [versions, regressions, cannot_judge, canary]),
        Row("People and the judge (review)", [agreement, agreement_labels]),
    ]
    variables = [
        datasource_variable(),
        query_variable("rubric", "Rubric", "label_values(rubric_monitor_rubric_info, rubric)",
                       description="Rubrics (active versions) to show."),
        query_variable("agent", "Agent", 'label_values(rubric_monitor_evaluations_total{rubric=~"$rubric"}, agent)',
                       description="Agents scored by the chosen rubrics."),
        query_variable("window", "Window", "label_values(rubric_monitor_pass_rate, window)", multi=False,
                       description="Rolling window of the pass-rate and mean gauges (setting metrics.windows), "
                                   "also the range of the counter-based panels."),
        query_variable("dimension", "Dimension",
                       'label_values(rubric_monitor_dimension_scores_total{rubric=~"$rubric"}, dimension)',
                       description="Dimensions of the weighted rubrics (one heatmap each)."),
    ]
    annotations = [
        prometheus_annotation(
            "Rubric version changes",
            'count by (rubric, rubric_version) (rubric_monitor_rubric_info{rubric=~"$rubric"}) unless count by '
            '(rubric, rubric_version) (rubric_monitor_rubric_info{rubric=~"$rubric"} offset 2m)',
            "{{rubric}}: version {{rubric_version}}", "blue"),
        prometheus_annotation(
            "Judge changes",
            "count by (kind, model, prompt_version) (rubric_monitor_judge_info) unless count by "
            "(kind, model, prompt_version) (rubric_monitor_judge_info offset 2m)",
            "judge {{kind}} {{model}} prompt {{prompt_version}}", "purple"),
    ]
    return dashboard(QUALITY_UID, "rubric-monitor: agent quality",
                     "Is each agent still good? Pass rates with their sample size, dimension scores, adaptive "
                     "and static metrics, regressions; rubric versions and judge changes as annotations.",
                     rows, variables, annotations, [dashboard_link("Monitor operations", OPERATIONS_UID)])


# -- Monitor operations --------------------------------------------------------------------------------------

def operations_dashboard() -> dict[str, Any]:
    funnel = Panel(
        "Funnel over the time range", "bargauge",
        [Query("sum(increase(rubric_monitor_spans_total[$__range]))", "spans read", instant=True),
         Query("sum by (stage) (increase(rubric_monitor_conversations_total[$__range]))", "conversations {{stage}}",
               instant=True),
         Query("sum by (outcome) (increase(rubric_monitor_evaluations_total[$__range]))", "evaluations {{outcome}}",
               instant=True),
         Query("sum by (reason) (increase(rubric_monitor_evaluations_skipped_total[$__range]))",
               "skipped: {{reason}}", instant=True)],
        "Spans read → conversations assembled → sampled → judged → scored (pass, fail) or unscored; evaluations "
        "not made by reason.", width=24, height=9, unit="short",
        options={"orientation": "horizontal", "displayMode": "basic", "showUnfilled": True,
                 "reduceOptions": {"calcs": ["lastNotNull"], "values": False}})
    funnel_rate = Panel(
        "Funnel rate", "timeseries",
        [Query("sum by (source) (rate(rubric_monitor_spans_total[$__rate_interval]))", "spans/s {{source}}"),
         Query("sum by (stage) (rate(rubric_monitor_conversations_total[$__rate_interval]))",
               "conversations/s {{stage}}"),
         Query("sum by (outcome) (rate(rubric_monitor_evaluations_total[$__rate_interval]))",
               "evaluations/s {{outcome}}")],
        "The same funnel as rates.", unit="ops")
    rejected = Panel(
        "Rejected spans by reason", "timeseries",
        [Query("sum by (source, reason) (increase(rubric_monitor_spans_rejected_total[$__rate_interval]))",
               "{{source}}: {{reason}}")],
        "Spans, rows or lines that could not be read (malformed JSON, GenAI schema violations...): counted and "
        "skipped, the rest is read.", unit="short", custom={"drawStyle": "bars", "fillOpacity": 60})
    lag = Panel(
        "Source lag (watermark age) and backlog", "timeseries",
        [Query("max by (source) (rubric_monitor_source_lag_seconds)", "watermark age {{source}}"),
         Query("max by (source) (rubric_monitor_backlog_oldest_age_seconds)", "oldest waiting {{source}}")],
        "How far the stored read position is behind now (App Insights), and the age of the oldest conversation "
        "waiting to be scored.", unit="s")
    backlog = Panel(
        "Conversations waiting", "timeseries",
        [Query("sum by (source) (rubric_monitor_backlog_conversations)", "{{source}}")],
        "Conversations read but not yet scored (idle timeout not reached, or capped by sampling.max_per_cycle).",
        unit="short")
    source_errors = Panel(
        "Source errors by kind", "timeseries",
        [Query("sum by (source, kind) (increase(rubric_monitor_source_errors_total[$__rate_interval]))",
               "{{source}}: {{kind}}")],
        "auth, query, throttled, server, timeout, partial, error.", unit="short",
        custom={"drawStyle": "bars", "fillOpacity": 60})
    requests = Panel(
        "Judge requests by outcome", "timeseries",
        [Query("sum by (model, outcome) (rate(rubric_monitor_judge_requests_total[$__rate_interval]))",
               "{{model}}: {{outcome}}"),
         Query("sum by (model, reason) (rate(rubric_monitor_judge_calls_refused_total[$__rate_interval]))",
               "{{model}}: refused locally ({{reason}})")],
        "Requests that reached the judge endpoint by outcome (ok, rate_limited, server_error, timeout, "
        "auth_error, refused, error), and calls short-circuited locally.", unit="reqps",
        custom={"stacking": {"mode": "normal"}, "fillOpacity": 30})
    latency = Panel(
        "Judge latency", "timeseries",
        [Query("histogram_quantile(0.5, sum by (le) (rate(rubric_monitor_judge_latency_seconds_bucket"
               "[$__rate_interval])))", "p50"),
         Query("histogram_quantile(0.95, sum by (le) (rate(rubric_monitor_judge_latency_seconds_bucket"
               "[$__rate_interval])))", "p95")],
        "Latency of one judge call, retries included.", unit="s")
    tokens = Panel(
        "Judge tokens", "timeseries",
        [Query("sum by (model, direction) (rate(rubric_monitor_judge_tokens_total[$__rate_interval]))",
               "{{model}} {{direction}}")],
        "Tokens per second by direction (input, output).", unit="short")
    cost = Panel(
        "Judge cost over the time range", "stat",
        [Query("sum by (model) (increase(rubric_monitor_judge_cost_usd_total[$__range]))", "{{model}}",
               instant=True)],
        "USD from the judge.prices table.", width=6, unit="currencyUSD",
        options={"reduceOptions": {"calcs": ["lastNotNull"], "values": False}, "colorMode": "none"})
    budget = Panel(
        "Daily budget left", "timeseries",
        [Query("rubric_monitor_budget_remaining_tokens", "{{rubric}} tokens"),
         Query("rubric_monitor_budget_remaining_usd", "{{rubric}} USD"),
         Query("rubric_monitor_budget_exhausted == 1", "{{rubric}} exhausted")],
        "What is left of each rubric's daily budget; when it is spent, its evaluations wait for the next UTC day.",
        width=18, unit="short")
    cycle_duration = Panel(
        "Cycle duration", "timeseries",
        [Query("histogram_quantile(0.5, sum by (le) (rate(rubric_monitor_cycle_duration_seconds_bucket"
               "[$__rate_interval])))", "p50"),
         Query("histogram_quantile(0.95, sum by (le) (rate(rubric_monitor_cycle_duration_seconds_bucket"
               "[$__rate_interval])))", "p95")],
        "Duration of one cycle (pull, assemble, sample, judge, store).", unit="s")
    cycles = Panel(
        "Cycles by result", "timeseries",
        [Query("sum by (result) (increase(rubric_monitor_cycles_total[$__rate_interval]))", "{{result}}")],
        "Cycles finished, ok or failed.", unit="short", custom={"drawStyle": "bars", "fillOpacity": 60})
    last_success = Panel(
        "Since the last successful cycle", "stat",
        [Query("time() - max(rubric_monitor_last_cycle_success_timestamp_seconds)", "last success")],
        "Seconds since a cycle last finished without failure (alert RubricMonitorStale).", width=6, unit="s",
        thresholds=[(None, "green"), (600, "orange"), (900, "red")],
        options={"reduceOptions": {"calcs": ["lastNotNull"], "values": False}, "colorMode": "background"})
    health = Panel(
        "Health", "stat",
        [Query("min(rubric_monitor_health)", "health"),
         Query("min by (model) (rubric_monitor_judge_up)", "judge up {{model}}")],
        "1 healthy, 0 degraded (reasons on /healthz); judge up 0 while the judge refuses our credential.",
        width=6, thresholds=[(None, "red"), (1, "green")],
        options={"reduceOptions": {"calcs": ["lastNotNull"], "values": False}, "colorMode": "background"})
    version = Panel(
        "Version", "table",
        [Query("rubric_monitor_build_info", instant=True)],
        "The daemon's version.", width=6,
        transformations=[{"id": "organize", "options": {"excludeByName": {"Time": True, "Value": True,
                                                                           "__name__": True}}}])
    rows = [
        Row("Funnel", [funnel, funnel_rate, rejected]),
        Row("Source", [lag, backlog, source_errors]),
        Row("Judge", [requests, latency, tokens, cost, budget]),
        Row("Cycles", [cycle_duration, cycles, last_success, health, version]),
    ]
    return dashboard(OPERATIONS_UID, "rubric-monitor: operations",
                     "Is the monitor itself working? Spans to scores, source lag, the judge's requests, "
                     "latency, tokens, cost and budget, cycles.",
                     rows, [datasource_variable()], [], [dashboard_link("Agent quality", QUALITY_UID)])


# -- Quality SLOs ----------------------------------------------------------------------------------------------

SLO_SEL = 'slo=~"$slo"'
BURN_WINDOWS = "5m|30m|1h|2h|6h|1d|3d"
"""The workbook's burn-rate windows (``monitor.slo.spec.STANDARD_WINDOWS``): recorded for every SLO."""


def per_window(kind: str, windows: str = ".+") -> str:
    """Every ``slo:rubric_monitor_slo_<kind>:ratio<w>`` record of the chosen SLOs, with ``w`` as a ``window`` label
    (the window is part of the record's name, as Prometheus recording rules are named)."""
    return (f'label_replace({{__name__=~"slo:rubric_monitor_slo_{kind}:ratio({windows})", {SLO_SEL}}}, '
            f'"window", "$1", "__name__", "slo:rubric_monitor_slo_{kind}:ratio(.+)")')


def slo_dashboard() -> dict[str, Any]:
    budget_left = Panel(
        "Error budget left", "stat",
        [Query(f"slo:rubric_monitor_slo_error_budget_remaining:ratio{{{SLO_SEL}}}", "{{slo}}", instant=True)],
        "Share of each SLO's error budget left over its window (1 − burn rate over the window); negative: "
        "overspent.", width=8, unit="percentunit",
        thresholds=[(None, "red"), (0, "orange"), (0.25, "green")],
        options={"reduceOptions": {"calcs": ["lastNotNull"], "values": False}, "colorMode": "background"})
    burn_down = Panel(
        "Error budget burn-down", "timeseries",
        [Query(f"slo:rubric_monitor_slo_error_budget_remaining:ratio{{{SLO_SEL}}}", "{{slo}}")],
        "The budget left over the SLO's rolling window, over time: a steady slope spends it exactly over the "
        "window, a cliff is a drop (the page), a long slide a leak (the ticket).", width=16, unit="percentunit",
        max=1, thresholds=[(None, "red"), (0, "transparent")],
        custom={"drawStyle": "line", "lineWidth": 2, "spanNulls": True, "thresholdsStyle": {"mode": "line"}})
    sli = Panel(
        "SLI over the SLO window and objective", "timeseries",
        # The SLO's window is in its record's name (28d, 4w...): its SLI follows from the budget left and the
        # objective, budget left = 1 - (1 - SLI) / (1 - objective).
        [Query(f"1 - (1 - slo:rubric_monitor_slo_error_budget_remaining:ratio{{{SLO_SEL}}}) * on (slo, rubric) "
               f"(1 - slo:rubric_monitor_slo_objective:ratio{{{SLO_SEL}}})", "{{slo}} SLI"),
         Query(f"slo:rubric_monitor_slo_objective:ratio{{{SLO_SEL}}}", "{{slo}} objective")],
        "Good / scored evaluations of the active rubric version over the SLO's window, against its objective.",
        unit="percentunit", max=1, custom={"drawStyle": "line", "lineWidth": 2, "spanNulls": True})
    sli_windows = Panel(
        "SLI per window", "timeseries",
        [Query(per_window("sli", BURN_WINDOWS), "{{slo}} {{window}}")],
        "The SLI over each burn-rate window (5m to 3d): a short window reacts first, a long one says whether it "
        "lasts.", unit="percentunit", max=1, custom={"drawStyle": "line", "spanNulls": True})
    burn = Panel(
        "Burn rate per window", "timeseries",
        [Query(per_window("burn_rate", BURN_WINDOWS), "{{slo}} {{window}}")],
        "How many times faster than allowed the budget burns over each window, (1 − SLI) / (1 − objective). "
        "Default conditions: page above 14.4 over 1h and 5m or 6 over 6h and 30m, ticket above 3 over 1d and 2h "
        "or 1 over 3d and 6h (lines).", width=16, min=0,
        thresholds=[(None, "green"), (1, "yellow"), (3, "orange"), (6, "red"), (14.4, "dark-red")],
        custom={"drawStyle": "line", "spanNulls": True, "thresholdsStyle": {"mode": "line"}})
    burn_now = Panel(
        "Burn rates now", "table",
        [Query(per_window("burn_rate", BURN_WINDOWS), instant=True)],
        "The current burn rate of each SLO over each window.", width=8,
        transformations=[
            {"id": "organize", "options": {"excludeByName": {"Time": True, "__name__": True, "rubric": True},
                                           "renameByName": {"Value": "burn rate"}}},
            {"id": "groupingToMatrix", "options": {"columnField": "window", "rowField": "slo",
                                                    "valueField": "burn rate"}}])
    evaluations = Panel(
        "Scored evaluations per window", "table",
        [Query(f'sum by (slo, window) (label_replace({{__name__=~"slo:rubric_monitor_slo_scored:increase('
               f'{BURN_WINDOWS})", {SLO_SEL}}}, "window", "$1", "__name__", '
               f'"slo:rubric_monitor_slo_scored:increase(.+)"))', instant=True)],
        "The evaluations behind each figure: a condition fires only when its long window holds at least "
        "alerting.min_evaluations (3 failures out of 4 at night page nobody).", width=24, height=6,
        transformations=[{"id": "groupingToMatrix", "options": {"columnField": "window", "rowField": "slo",
                                                                 "valueField": "Value"}}])
    alerts = Panel(
        "Burn-rate alerts (Prometheus)", "state-timeline",
        [Query(f'max by (slo, alerting) (ALERTS{{alertname="RubricSLOBurn", alertstate="firing", {SLO_SEL}}})',
               "{{slo}} {{alerting}}")],
        "When each SLO's page and ticket alerts (RubricSLOBurn) fired, as Prometheus evaluated them.",
        width=16, height=6, options={"showValue": "never", "mergeValues": True},
        thresholds=[(None, "green"), (1, "red")])
    firing = Panel(
        "Firing now", "table",
        [Query(f'ALERTS{{alertname="RubricSLOBurn", {SLO_SEL}}}', instant=True)],
        "SLO alerts pending or firing now, with their labels (alerting: page or ticket; severity and your "
        "routing labels).", width=8, height=6,
        transformations=[{"id": "organize", "options": {"excludeByName": {"Time": True, "Value": True,
                                                                           "__name__": True}}}])
    daemon = Panel(
        "The daemon's SLO state", "state-timeline",
        [Query(f"max by (slo, alerting) (rubric_monitor_slo_alert_firing{{{SLO_SEL}}})", "{{slo}} {{alerting}}"),
         Query(f"max by (slo) (rubric_monitor_slo_suspended{{{SLO_SEL}}})", "{{slo}} suspended")],
        "The daemon's own SLO alerts (its notifiers) and suspension: while an SLO cannot be judged (unscored "
        "storm, judge errors, source behind, judge drift) its alerts neither fire nor resolve.",
        width=24, height=6, options={"showValue": "never", "mergeValues": True},
        thresholds=[(None, "green"), (1, "red")])
    rows = [
        Row("Error budget", [budget_left, burn_down, sli]),
        Row("Burn rates", [sli_windows, burn, burn_now, evaluations]),
        Row("Alerts", [alerts, firing, daemon]),
    ]
    variables = [
        datasource_variable(),
        query_variable("slo", "SLO", "label_values(slo:rubric_monitor_slo_objective:ratio, slo)",
                       description="SLOs whose rules Prometheus evaluates (rubric-monitor slo rules)."),
    ]
    annotations = [prometheus_annotation(
        "SLO pages", f'max by (slo) (ALERTS{{alertname="RubricSLOBurn", alerting="page", alertstate="firing", '
                     f'{SLO_SEL}}})', "page: {{slo}}", "red")]
    return dashboard(SLO_UID, "rubric-monitor: quality SLOs",
                     "Is each agent within its quality objective? Error budget left and its burn-down, burn rates "
                     "per window, and the burn-rate alerts (docs/slo.md).",
                     rows, variables, annotations,
                     [dashboard_link("Agent quality", QUALITY_UID), dashboard_link("Monitor operations",
                                                                                   OPERATIONS_UID)])


DASHBOARDS = {"agent-quality.json": quality_dashboard, "monitor-operations.json": operations_dashboard,
              "quality-slos.json": slo_dashboard}

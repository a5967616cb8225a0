"""SLO definitions: the ``slos:`` settings and a rubric file's ``slo:`` block, resolved into ``SloDefinition``.

Pure data: ``monitor.rubrics`` imports this module, so it imports nothing but pydantic and the error tree.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from pydantic import Field, field_validator, model_validator

from monitor.errors import ConfigError
from monitor.formats.meaningful import MeaningfulModel

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"^([1-9][0-9]{0,5})([smhdw])$")
SLO_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
"""A Kubernetes object name (DNS label): what Sloth's and OpenSLO's specs and the PrometheusRule accept."""
LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
RESERVED_LABELS = frozenset({"alertname", "slo", "rubric", "alerting", "window"})
"""Labels the rules and the daemon set themselves: an ``alerting`` label cannot override them."""
STANDARD_WINDOWS = ("5m", "30m", "1h", "2h", "6h", "1d", "3d")
"""The SLI is recorded over these windows (the workbook's burn-rate windows) and over the SLO's own window."""


def duration_seconds(value: str) -> int:
    """``"28d"`` → 2419200; a Prometheus duration of one unit (s, m, h, d, w)."""
    match = _DURATION.match(value.strip())
    if match is None:
        raise ValueError(f"{value!r} is not a duration like 5m, 1h, 28d or 4w")
    return int(match.group(1)) * _UNITS[match.group(2)]


def _duration(value: str) -> str:
    duration_seconds(value)
    return value.strip()


class _Model(MeaningfulModel):
    """As settings sections: booleans for numbers and empty names are refused, naming the field."""


class BurnWindow(_Model):
    """One multi-window burn-rate condition: the budget burns faster than ``burn_rate`` over both windows."""

    burn_rate: float = Field(gt=0, le=1000)
    """How many times faster than allowed the budget burns (1: the whole budget exactly over the SLO window)."""
    long: str
    """The window that says the burn is significant (e.g. 1h); its evaluations must reach ``min_evaluations``."""
    short: str
    """The window that says it is still going on, so the alert resolves soon after the drop ends (e.g. 5m)."""

    @field_validator("long", "short")
    @classmethod
    def _check_duration(cls, value: str) -> str:
        return _duration(value)

    @model_validator(mode="after")
    def _short_within_long(self) -> BurnWindow:
        if duration_seconds(self.short) >= duration_seconds(self.long):
            raise ValueError(f"short window {self.short} must be shorter than the long window {self.long}")
        return self


PAGE_WINDOWS = (BurnWindow(burn_rate=14.4, long="1h", short="5m"), BurnWindow(burn_rate=6, long="6h", short="30m"))
"""The Google SRE workbook's page: 2 % of a 30-day budget in an hour, or 5 % in six hours."""
TICKET_WINDOWS = (BurnWindow(burn_rate=3, long="1d", short="2h"), BurnWindow(burn_rate=1, long="3d", short="6h"))
"""The workbook's ticket: 10 % of the budget in a day, or the whole budget's pace over three days."""


class AlertTier(_Model):
    """One severity of SLO alert: its labels (routed by Alertmanager) and its burn-rate conditions (any fires it)."""

    labels: dict[str, str] = Field(default_factory=dict)
    """Labels of the alert, e.g. ``{team: airline}``, over the tier's default ``severity`` (page: critical, ticket:
    warning), which they may override."""
    windows: tuple[BurnWindow, ...] = ()
    """Burn-rate conditions; omitted: the workbook's for this tier; an empty list turns this severity off."""

    @field_validator("labels")
    @classmethod
    def _check_labels(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if not LABEL_NAME.match(name) or name.startswith("__"):
                raise ValueError(f"label {name!r} is not a Prometheus label name")
            if name in RESERVED_LABELS:
                raise ValueError(f"label {name!r} is set by rubric-monitor itself")
            if len(text) > 256 or "\n" in text:
                raise ValueError(f"label {name}: one line of at most 256 characters")
        return value


_TIER_DEFAULTS = {"page": ({"severity": "critical"}, PAGE_WINDOWS), "ticket": ({"severity": "warning"}, TICKET_WINDOWS)}


class SloAlerting(_Model):
    @model_validator(mode="before")
    @classmethod
    def _tier_defaults(cls, data: object) -> object:
        """A tier written with its labels only keeps the workbook's conditions (``page: {labels: {team: x}}`` must
        not turn the page off), and its labels go over the default severity."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for tier, (labels, windows) in _TIER_DEFAULTS.items():
            given = data.get(tier)
            if isinstance(given, dict):
                given_labels = given.get("labels")
                merged = {**labels, **given_labels} if isinstance(given_labels, dict) else given_labels
                data[tier] = {"windows": windows, **given, "labels": merged if given_labels is not None else labels}
        return data

    page: AlertTier = AlertTier(labels={"severity": "critical"}, windows=PAGE_WINDOWS)
    """Fast burn: someone is paged (default: 14.4x over 1h and 5m, 6x over 6h and 30m; severity critical)."""
    ticket: AlertTier = AlertTier(labels={"severity": "warning"}, windows=TICKET_WINDOWS)
    """Slow leak: a ticket (default: 3x over 1d and 2h, 1x over 3d and 6h; severity warning)."""
    min_evaluations: int = Field(default=30, ge=1, le=100_000_000)
    """Scored evaluations needed in a condition's long window before it may fire: 3 failures out of 4 at night
    page nobody."""


class RubricSlo(_Model):
    """An SLO written in a rubric file (``slo:``); the rubric is the file's, the name and agents default to its."""

    name: str | None = None
    """Unique SLO name, a DNS label (``airline-policy``); default: the rubric's name, lower-cased, other
    characters as ``-``."""
    description: str = ""
    """What the SLO promises, in words (shown in alerts and exports)."""
    agents: tuple[str, ...] | None = None
    """Agents the SLO covers, glob patterns allowed; default: the rubric's ``agents``."""
    objective: float = Field(gt=0, lt=1)
    """Share of good evaluations promised, e.g. 0.95; the error budget is 1 - objective."""
    window: str = "28d"
    """The SLO's window (s, m, h, d, w): the budget is spent over this rolling period."""
    dimension: str | None = None
    """Judge one dimension instead of the pass/fail verdict: good when its score is at least ``min_score``."""
    min_score: int | None = Field(default=None, ge=1, le=5)
    """With ``dimension``: the lowest score (1 to 5) that counts as good."""
    alerting: SloAlerting = SloAlerting()
    """Page and ticket conditions, their labels and the minimum of evaluations."""

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str | None) -> str | None:
        if value is not None and not SLO_NAME.match(value):
            raise ValueError("must be a DNS label: lower-case letters, digits and '-', at most 63 characters")
        return value

    @field_validator("window")
    @classmethod
    def _check_window(cls, value: str) -> str:
        value = _duration(value)
        if duration_seconds(value) < 3600:
            raise ValueError("an SLO window is at least 1h")
        return value

    @field_validator("agents")
    @classmethod
    def _check_agents(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is not None and (not value or any(not p.strip() for p in value)):
            raise ValueError("give at least one agent name or pattern")
        return value

    @model_validator(mode="after")
    def _dimension_and_score(self) -> RubricSlo:
        if (self.dimension is None) != (self.min_score is None):
            raise ValueError("dimension and min_score go together (e.g. dimension: accuracy, min_score: 4)")
        return self


class SloSettings(RubricSlo):
    """One SLO of the settings (``slos:``)."""

    name: str
    """Unique SLO name, a DNS label (``airline-policy``)."""
    rubric: str = Field(min_length=1)
    """The rubric whose verdicts are counted."""
    agents: tuple[str, ...] = ("*",)
    """Agents the SLO covers: names or ids, glob patterns allowed (``airline-*``)."""


@dataclass(frozen=True)
class SloDefinition:
    """One SLO, wherever it was written, with its defaults filled in."""

    name: str
    rubric: str
    agents: tuple[str, ...]
    objective: float
    window: str
    dimension: str | None
    min_score: int | None
    alerting: SloAlerting
    description: str
    origin: str
    """Where it was defined: ``settings`` or the rubric file."""

    @property
    def window_seconds(self) -> int:
        return duration_seconds(self.window)

    @property
    def error_budget(self) -> float:
        return 1.0 - self.objective

    def covers(self, agent: str) -> bool:
        return any(fnmatch.fnmatchcase(agent, pattern) for pattern in self.agents)

    def tiers(self) -> list[tuple[str, AlertTier]]:
        """(``page`` | ``ticket``, tier) with at least one condition."""
        return [(name, tier) for name, tier in (("page", self.alerting.page), ("ticket", self.alerting.ticket))
                if tier.windows]

    def windows(self) -> list[str]:
        """Every window the SLI is computed over: the standard ones, the conditions' and the SLO's, shortest
        first."""
        found = {*STANDARD_WINDOWS, self.window}
        for _, tier in self.tiers():
            for condition in tier.windows:
                found.update((condition.long, condition.short))
        by_length: dict[int, str] = {}
        for window in found:
            by_length.setdefault(duration_seconds(window), window)  # 1d and 24h are one window
        return [by_length[s] for s in sorted(by_length)]

    def describe(self) -> str:
        what = (f"{self.dimension} >= {self.min_score}" if self.dimension is not None else "passes")
        return (f"{self.rubric} {what} for {', '.join(self.agents)}: {self.objective:.4g} over {self.window}")


class _RubricLike(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def agents(self) -> tuple[str, ...]: ...

    @property
    def slo(self) -> RubricSlo | None: ...


def default_name(rubric: str) -> str:
    """A rubric name as an SLO name: lower-case, other characters as ``-``."""
    name = re.sub(r"[^a-z0-9-]+", "-", rubric.lower()).strip("-")[:63].strip("-")
    return name or "slo"


def resolve(settings: Sequence[SloSettings], rubrics: Iterable[_RubricLike] = (),
            rubric_origin: dict[str, str] | None = None, known_rubrics: Iterable[str] | None = None
            ) -> list[SloDefinition]:
    """Every SLO, from the settings then the rubric files (``rubric_origin``: rubric name → file); a duplicate
    name, or a rubric the settings name that is not loaded (when ``known_rubrics`` is given), is a ``ConfigError``
    naming where."""
    out: list[SloDefinition] = []
    errors: list[ConfigError] = []
    seen: dict[str, str] = {}

    def add(definition: SloDefinition, where: str, field: str) -> None:
        if definition.name in seen:
            errors.append(ConfigError(where, field, f"SLO name {definition.name!r} is already defined in "
                                                    f"{seen[definition.name]}"))
            return
        seen[definition.name] = where
        out.append(definition)

    known = None if known_rubrics is None else set(known_rubrics)
    rubrics = list(rubrics)
    dimensions_of = {r.name: {d.id for d in getattr(r, "dimensions", ())} for r in rubrics}
    for index, slo in enumerate(settings):
        if known is not None and slo.rubric not in known:
            errors.append(ConfigError("settings", f"slos.{index}.rubric", f"no active rubric named {slo.rubric!r}"))
            continue
        dimensions = dimensions_of.get(slo.rubric)
        if slo.dimension is not None and dimensions and slo.dimension not in dimensions:
            errors.append(ConfigError("settings", f"slos.{index}.dimension",
                                      f"rubric {slo.rubric} has no dimension {slo.dimension!r}"))
            continue
        add(SloDefinition(slo.name, slo.rubric, slo.agents, slo.objective, slo.window, slo.dimension, slo.min_score,
                          slo.alerting, slo.description, "settings"), "settings", f"slos.{index}.name")
    for rubric in sorted(rubrics, key=lambda r: r.name):
        block = rubric.slo
        if block is None:
            continue
        where = (rubric_origin or {}).get(rubric.name, f"rubric {rubric.name}")
        dimensions = {d.id for d in getattr(rubric, "dimensions", ())}
        if block.dimension is not None and dimensions and block.dimension not in dimensions:
            errors.append(ConfigError(where, "slo.dimension", f"rubric {rubric.name} has no dimension "
                                                              f"{block.dimension!r}"))
            continue
        add(SloDefinition(block.name or default_name(rubric.name), rubric.name, block.agents or rubric.agents,
                          block.objective, block.window, block.dimension, block.min_score, block.alerting,
                          block.description, where), where, "slo.name")
    if errors:
        raise ConfigError.collect(errors)
    return out


def agents_regex(patterns: Sequence[str]) -> str:
    """Glob patterns as one RE2 alternation, for ``agent=~"..."`` (Prometheus anchors it at both ends)."""
    parts = []
    for pattern in patterns:
        out = []
        for char in pattern:
            if char == "*":
                out.append(".*")
            elif char == "?":
                out.append(".")
            else:
                out.append("\\" + char if char in _RE2_SPECIAL else char)
        parts.append("".join(out))
    return "|".join(parts)


_RE2_SPECIAL = frozenset("\\.+*?()|[]{}^$")

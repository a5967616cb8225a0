"""What ``/metrics`` serves: the daemon's own metrics rendered per scrape, plus the families prepared at the end of
the last cycle (the quality families, the regression detector's). A scrape costs the daemon's own series (some
hundreds) plus writing the prepared bytes as they are (never joined nor copied), and never reads the store.

The format follows the scraper's ``Accept`` header: OpenMetrics (with exemplars on the quality counters) when it
asks for ``application/openmetrics-text``, else the Prometheus text format. With ``Accept-Encoding: gzip`` the
body is gzip: the prepared part was compressed once, and gzip members may follow one another (RFC 1952), which
Prometheus' reader (Go's multistream default) and every gzip tool accept.
"""

from __future__ import annotations

import functools
import gzip
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition as openmetrics

from monitor.metrics.quality import GZIP_LEVEL, SCRAPE_IN_PROGRESS, Rendered

_EOF = b"# EOF\n"
_EOF_GZIP = gzip.compress(_EOF)


class Prepared(Protocol):
    """Families rendered once per cycle (``monitor.quality.QualityMetrics``, ``monitor.alerts.metrics``)."""

    @property
    def rendered(self) -> Rendered: ...

    @property
    def family_names(self) -> frozenset[str]:
        """Their names as the registry collects them (counters without ``_total``)."""
        ...


@dataclass(frozen=True)
class Scrape:
    parts: tuple[bytes, ...]
    """Written one after the other: the prepared part (megabytes) is never copied into a new body."""
    content_type: str
    content_encoding: str | None

    @property
    def body(self) -> bytes:
        return b"".join(self.parts)


class _Live:
    """The registry without the prepared families (they are served pre-rendered)."""

    def __init__(self, registry: CollectorRegistry, prepared: frozenset[str]) -> None:
        self._registry = registry
        self._prepared = prepared

    def collect(self) -> Iterable[Metric]:
        SCRAPE_IN_PROGRESS.active = True
        try:
            families = list(self._registry.collect())
        finally:
            SCRAPE_IN_PROGRESS.active = False
        return (family for family in families if family.name not in self._prepared)


class Exposition:
    def __init__(self, registry: CollectorRegistry, *prepared: Prepared) -> None:
        self._live = _Live(registry, frozenset(name for p in prepared for name in p.family_names))
        self._prepared = prepared

    def scrape(self, accept: str = "", accept_encoding: str = "") -> Scrape:
        encoder, content_type = choose_encoder(accept)
        live = names_unescaped(encoder)(self._live)  # anything with collect() is a registry to it
        rendered = [p.rendered for p in self._prepared]
        openmetrics = content_type.startswith("application/openmetrics-text")
        gzipped = "gzip" in accept_encoding.lower()
        parts: tuple[bytes, ...]
        if openmetrics:
            live = live.removesuffix(_EOF)
            if gzipped:
                parts = (gzip.compress(live, GZIP_LEVEL), *(r.openmetrics_gzip for r in rendered), _EOF_GZIP)
            else:
                parts = (live, *(r.openmetrics for r in rendered), _EOF)
        elif gzipped:
            parts = (gzip.compress(live, GZIP_LEVEL), *(r.text_gzip for r in rendered))
        else:
            parts = (live, *(r.text for r in rendered))
        return Scrape(parts, content_type, "gzip" if gzipped else None)


def names_unescaped(encoder: Callable[..., bytes]) -> Callable[..., bytes]:
    """The OpenMetrics encoder with the escaping scheme ``underscores`` (the default) swapped for ``allow-utf-8``.

    Both write a legal Prometheus name unchanged, and every name here is one (promtool checks them), so the bytes
    are the same; but ``underscores`` rebuilds every sample's name character by character, which was a third of
    the CPU of an OpenMetrics scrape (30 ms of 100 rubrics' daemon series, 19 ms now; BENCHMARKS.md)."""
    if (isinstance(encoder, functools.partial) and encoder.func is openmetrics.generate_latest
            and encoder.keywords.get("escaping") == openmetrics.UNDERSCORES):
        return functools.partial(encoder, escaping=openmetrics.ALLOWUTF8)
    return encoder

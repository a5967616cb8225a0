"""Registers the ``producers`` marker (tests that build the producer venvs and run real instrumentation)."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "producers: runs real GenAI instrumentation libraries in their own venvs "
                                       "(tests/producers); set RUBRIC_MONITOR_PRODUCERS=1 or select -m producers")

"""The real-producer harness: real GenAI instrumentation libraries, each in its own pinned venv, driving one
small agent scenario against a scripted OpenAI-compatible server and exporting over OTLP/HTTP to a receiver
that writes the OpenTelemetry Collector's file-exporter JSON lines. See ``docs/producers-harness.md``.

Kept free of imports beyond the standard library: the agent programs (run with a producer venv's python)
import ``tests.producers.scenario`` and ``tests.producers.agents._common`` from here."""

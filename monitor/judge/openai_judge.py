"""④ The production judge: OpenAI, Azure OpenAI, or any OpenAI-compatible endpoint (vLLM, llama.cpp, Ollama).

One ``AsyncOpenAI`` (or ``AsyncAzureOpenAI``) client with the SDK's own retries off (``max_retries=0``):
this module retries itself so that ``Retry-After`` and ``x-ratelimit-*`` headers are honoured, shared by every
caller through the limiter, and counted.

Decisions worth knowing:

- **Response mode.** ``auto`` tries strict ``json_schema``; an endpoint that refuses it (a 400/422 naming
  ``response_format``, a JSON schema or structured outputs) is asked again in ``json_object`` mode, then with
  the schema in the instructions (``prompt``). The mode that worked is remembered per model and recorded in
  every ``JudgeReply``. A 400 about anything else never changes the mode. Content is never validated here: a
  malformed, truncated or out-of-range reply is returned as it came, and the evaluator turns it unscored.
- **Other 400s.** ``max_tokens`` refused in favour of ``max_completion_tokens`` (or the reverse), or an
  unsupported ``temperature``, changes the request's shape for that model. A prompt longer than the model's
  context (OpenAI's ``context_length_exceeded``, vLLM's "maximum context length", llama.cpp's
  ``exceed_context_size``) or a content filter raises ``JudgeRefused``. Any other 400 ("max_tokens is too
  large", a temperature out of range, or a reply budget larger than the whole context) is the settings'
  fault: a plain ``JudgeError``.
- **Refusals.** A ``message.refusal`` or a ``content_filter`` finish raises ``JudgeModelRefused`` (a
  ``JudgeRefused``) carrying the reply, so the evaluation is unscored with the model's own words and without a
  pointless second ask, while its tokens and cost remain visible (``exc.reply``).
- **Throughput.** At most ``concurrency`` calls in flight, evenly spaced by the limiter at
  ``requests_per_minute`` / ``tokens_per_minute``. A limit the settings leave open is taken from the endpoint's
  ``x-ratelimit-limit-*`` headers, or, when it announces none, found from its 429s (AIMD). A 429 pauses every
  caller for its ``Retry-After`` (or the reset of a quota whose ``x-ratelimit-remaining-*`` is 0; a 429
  saying neither backs off with jitter); 5xx and timeouts back off with jitter; ``max_retries`` bounds both.
- **Spent quota.** A 429 asking to wait longer than ``max_retry_wait_seconds`` fails its call, pauses no one,
  and makes every later call fail at once with ``JudgeRateLimited``, without a request or a wait, until that
  time has passed; then calls flow again. The pipeline keeps those evaluations pending.
- **Final or not.** ``JudgeRefused`` means "about this conversation, asking again gets the same": the model
  refused, a content filter, a context too long. An endpoint that rejects every request (404, a 400 about the
  settings, an unsupported forced ``response_mode``, every response mode refused) raises a plain
  ``JudgeError`` (outcome ``error``), which the pipeline retries later.
- **Credentials.** A 401/403 (or an Entra ID credential that cannot produce a token) logs one line, sets
  ``rubric_monitor_judge_up`` to 0 and makes every later call fail fast with ``JudgeAuthError``, without a
  request, until ``auth_reprobe_seconds`` have passed; then a single call tries the credential again.
- **Metrics.** Every ``complete`` ends in exactly one count. A call that sent at least one request counts in
  ``rubric_monitor_judge_requests{outcome}``: ``ok`` or the ``outcome`` of the ``JudgeError`` it raised (the
  outcomes are exclusive; its retries are ``judge_retries``). A call short-circuited without any request (the
  credential refused and not yet re-probed, a spent quota) counts in ``rubric_monitor_judge_calls_refused{reason}``
  instead, so the requests counter matches what the endpoint saw. ``ok`` means the transport succeeded; replies
  the evaluator then rejects are counted apart (``record_invalid_reply``, ``judge_invalid_replies``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import random
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Literal

import httpx
import openai
from azure.identity.aio import DefaultAzureCredential, get_bearer_token_provider

from monitor.azure_auth import credential_failure
from monitor.errors import (
    ConfigError,
    JudgeAuthError,
    JudgeError,
    JudgeRateLimited,
    JudgeRefused,
    JudgeTimeout,
    JudgeUnavailable,
)
from monitor.judge.base import ChatMessage, JudgeReply, JudgeRequest, PromptStyle, ResponseMode
from monitor.judge.limiter import AdaptiveRequestRate, Permit, RateLimiter
from monitor.metrics import MonitorMetrics
from monitor.settings import JudgeSettings, read_secret

logger = logging.getLogger(__name__)

AZURE_OPENAI_SCOPE = "https://cognitiveservices.azure.com/.default"
AUTO_MODES: tuple[ResponseMode, ...] = ("json_schema", "json_object", "prompt")
_MAX_ADAPTATIONS = 4
"""Request-shape fallbacks (mode, token parameter, temperature) one call may make before it gives up."""
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_CONTEXT_EXCEEDED = (
    "context_length_exceeded", "maximum context length", "exceeds the available context size",
    "exceed_context_size", "string_above_max_length",
)
"""A 400 about this conversation's size: OpenAI and vLLM, llama.cpp, a message longer than OpenAI accepts."""
_CONTENT_FILTERED = ("content_filter", "content management policy")
_RESPONSE_FORMAT = ("response_format", "json_schema", "json_object", "structured output", "schema")
"""A 400 mentioning one of these is about the response mode, and another mode may be accepted."""
_CONTEXT_SIZE = re.compile(r"maximum context length is (\d+)")
_UNSUPPORTED = re.compile(
    r"unsupported|unrecognized|not supported|does not support|unknown|not permitted|not allowed"
)

TokenParameter = Literal["max_tokens", "max_completion_tokens"]
RetryReason = Literal["rate_limited", "server_error", "timeout"]


class JudgeModelRefused(JudgeRefused):
    """The model declined to judge (a refusal or a content filter); ``reply`` holds what the call cost."""

    def __init__(self, message: str, reply: JudgeReply) -> None:
        super().__init__(message)
        self.reply = reply


@dataclass
class _Tally:
    """Requests one ``complete`` sent, retries and shape adaptations included."""

    requests: int = 0


class _CredentialUnavailable(Exception):
    """The Entra ID credential produced no token (raised inside the SDK's request preparation)."""


class _Retryable(Exception):
    def __init__(self, reason: RetryReason, server_wait: float | None, final: JudgeError,
                 detail: str = "") -> None:
        super().__init__(str(final))
        self.reason = reason
        self.server_wait = server_wait
        self.final = final
        self.detail = detail


class _Adapted(Exception):
    """The endpoint refused the request's shape and the model's state now asks for another one."""


@dataclass
class _ModelState:
    """What this endpoint accepts for one model, learnt from its 400s and kept for later calls."""

    token_parameter: TokenParameter
    mode_index: int = 0
    send_temperature: bool = True


@dataclass(frozen=True)
class _Call:
    arguments: dict[str, Any]
    mode: ResponseMode
    prompt_tokens_estimate: int
    max_output_tokens: int


def parse_duration(value: str) -> float | None:
    """``x-ratelimit-reset-*`` values: ``"1s"``, ``"6m0s"``, ``"20ms"``, ``"1h2m3.5s"`` or plain seconds."""
    text = value.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    return sum(float(number) * scale[unit] for number, unit in parts)


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """How long a 429 (or 503) asks us to wait: ``retry-after-ms``, ``retry-after`` (seconds or HTTP date), or
    the reset of whichever ``x-ratelimit-remaining-*`` quota is spent (0 remaining). None when the reply says
    nothing: the reset of a quota that is not spent times its full refill (minutes for OpenAI's tokens), not
    how soon one more call fits, so it is no answer."""
    lowered = {k.lower(): v for k, v in headers.items()}
    if (ms := lowered.get("retry-after-ms")) is not None:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    if (after := lowered.get("retry-after")) is not None:
        seconds = _retry_after_value(after)
        if seconds is not None:
            return seconds
    resets = quota_resets(lowered, only_exhausted=True)
    return max(resets) if resets else None


def _retry_after_value(value: str) -> float | None:
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def quota_resets(headers: Mapping[str, str], *, only_exhausted: bool) -> list[float]:
    """Reset times of the request and token quotas (only those with nothing remaining, when asked)."""
    resets: list[float] = []
    for unit in ("requests", "tokens"):
        remaining = headers.get(f"x-ratelimit-remaining-{unit}")
        reset = headers.get(f"x-ratelimit-reset-{unit}")
        if reset is None or (only_exhausted and (remaining is None or remaining.strip() != "0")):
            continue
        seconds = parse_duration(reset)
        if seconds is not None:
            resets.append(seconds)
    return resets


def spent_quota_wait(headers: Mapping[str, str]) -> float | None:
    """After a successful reply whose ``x-ratelimit-remaining-*`` says 0 (lower-case ``headers``): how long to
    hold the next call. The reset header times a full refill; one request is back after 60 s / the limit."""
    waits: list[float] = []
    for unit in ("requests", "tokens"):
        if headers.get(f"x-ratelimit-remaining-{unit}", "").strip() != "0":
            continue
        reset = parse_duration(headers.get(f"x-ratelimit-reset-{unit}", ""))
        if reset is None:
            continue
        limit = headers.get(f"x-ratelimit-limit-{unit}", "")
        if unit == "requests" and limit.isdigit() and int(limit) > 0:
            reset = min(reset, 60.0 / int(limit))
        waits.append(reset)
    return max(waits) if waits else None


MEDIA_TOKENS = 800
"""What one image or video part is reckoned to cost in the rate limiter's estimate (a high-detail image tile set)."""


def _with_media(wire: dict[str, Any], message: ChatMessage) -> dict[str, Any]:
    """A message with images as OpenAI content parts: its text, then each ``image_url`` (a data URL) or, for a
    judge that takes video, a ``file`` part."""
    if not message.media:
        return wire
    parts: list[dict[str, Any]] = [{"type": "text", "text": wire["content"]}]
    for index, media in enumerate(message.media):
        if media.as_file:
            extension = media.mime_type.split("/")[-1]
            parts.append({"type": "file", "file": {"file_data": media.data_url(),
                                                   "filename": f"media_{index + 1}.{extension}"}})
        else:
            parts.append({"type": "image_url", "image_url": {"url": media.data_url()}})
    return {**wire, "content": parts}


def _with_schema_instructions(messages: list[dict[str, Any]], request: JudgeRequest) -> list[dict[str, Any]]:
    # json_object mode needs the word JSON in the prompt and says nothing about the shape; prompt mode has
    # nothing else to go on. Either way the schema travels in the instructions.
    instructions = (
        "Reply with a single JSON object and nothing else: no prose, no code fence. It must follow this JSON "
        f"schema:\n{json.dumps(request.schema, ensure_ascii=False, sort_keys=True)}"
    )
    for i, message in enumerate(messages):
        if message["role"] == "system":
            updated = dict(message, content=f"{message['content']}\n\n{instructions}")
            return [*messages[:i], updated, *messages[i + 1:]]
    return [{"role": "system", "content": instructions}, *messages]


class OpenAIJudge:
    """A ``Judge`` over the OpenAI chat-completions API; see the module docstring for its policies.

    ``settings.kind`` ``azure_openai`` talks to an Azure OpenAI resource (deployment in the URL,
    ``api-version``, ``api-key`` header or, with ``azure_ad``, an Entra ID bearer token); any other kind is
    OpenAI or an OpenAI-compatible ``base_url``. On Azure a request's ``model`` override names a deployment.
    """

    def __init__(
        self,
        settings: JudgeSettings,
        metrics: MonitorMetrics,
        *,
        http_client: httpx.AsyncClient | None = None,
        azure_credential: Any | None = None,
    ) -> None:
        self.model = settings.model
        self.prompt_style: PromptStyle = "full"
        self._settings = settings
        self._metrics = metrics
        self._owned_credential: DefaultAzureCredential | None = None
        self._client = self._make_client(settings, http_client, azure_credential)
        self._limiter = RateLimiter(settings.requests_per_minute, settings.tokens_per_minute)
        self._semaphore = asyncio.Semaphore(settings.concurrency)
        self._modes: tuple[ResponseMode, ...] = (
            AUTO_MODES if settings.response_mode == "auto" else (settings.response_mode,)
        )
        self._states: dict[str, _ModelState] = {}
        self._prompt_token_ratio = 1.0
        self._auth_failed_at: float | None = None
        self._auth_probe_running = False
        self._quota_blocked_until: float | None = None
        self._unpriced_models: set[str] = set()
        self._announced_limits: dict[str, int] = {}
        self._adaptive_rate = AdaptiveRequestRate()
        metrics.judge_up.labels(self.model).set(1)
        metrics.judge_limiter_wait.labels(self.model).set(0)

    # -- construction ----------------------------------------------------------------------------------------

    def _make_client(
        self, settings: JudgeSettings, http_client: httpx.AsyncClient | None, azure_credential: Any | None
    ) -> openai.AsyncOpenAI:
        # The SDK accepts both httpx and its own httpx2 clients; its annotation names only the latter.
        client: Any = http_client
        if settings.kind == "azure_openai":
            return self._azure_client(settings, client, azure_credential)
        key = read_secret(settings.api_key, settings.api_key_file, "judge.api_key_file")
        try:
            return openai.AsyncOpenAI(base_url=settings.base_url, api_key=key, http_client=client,
                                      max_retries=0, timeout=settings.timeout_seconds)
        except openai.OpenAIError as exc:
            if settings.base_url is None:
                message = "no API key: set judge.api_key, judge.api_key_file or OPENAI_API_KEY"
                raise ConfigError("settings", "judge.api_key", message) from exc
        # Local OpenAI-compatible servers need no key, but the SDK insists on one.
        return openai.AsyncOpenAI(base_url=settings.base_url, api_key="unused", http_client=client,
                                  max_retries=0, timeout=settings.timeout_seconds)

    def _azure_client(
        self, settings: JudgeSettings, client: Any, azure_credential: Any | None
    ) -> openai.AsyncOpenAI:
        if not settings.azure_endpoint:
            raise ConfigError("settings", "judge.azure_endpoint", "required for judge.kind azure_openai")
        if not settings.azure_deployment:
            raise ConfigError("settings", "judge.azure_deployment", "required for judge.kind azure_openai")
        # No azure_deployment on the client: the SDK then puts each call's model (a deployment) into the URL,
        # which lets a rubric's judge_model name another deployment.
        if settings.azure_ad:
            credential = azure_credential
            if credential is None:
                credential = self._owned_credential = DefaultAzureCredential()
            return openai.AsyncAzureOpenAI(
                azure_endpoint=settings.azure_endpoint, api_version=settings.api_version,
                azure_ad_token_provider=_guarded_token_provider(credential), http_client=client,
                max_retries=0, timeout=settings.timeout_seconds,
            )
        key = read_secret(settings.api_key, settings.api_key_file, "judge.api_key_file")
        try:
            return openai.AsyncAzureOpenAI(
                azure_endpoint=settings.azure_endpoint, api_version=settings.api_version, api_key=key,
                http_client=client, max_retries=0, timeout=settings.timeout_seconds,
            )
        except openai.OpenAIError as exc:
            message = ("no API key: set judge.api_key, judge.api_key_file, AZURE_OPENAI_API_KEY, or "
                       "judge.azure_ad for Entra ID")
            raise ConfigError("settings", "judge.api_key", message) from exc

    # -- public ----------------------------------------------------------------------------------------------

    @property
    def auth_failed(self) -> bool:
        """True from a 401/403 until a call succeeds with the credential again."""
        return self._auth_failed_at is not None

    @property
    def problem(self) -> str | None:
        """Why the judge takes no calls right now (for ``/healthz``), or None when it does."""
        if self.auth_failed:
            return "the judge refuses our credential (401/403); calls paused until it works again"
        if self._quota_blocked_until is not None:
            left = self._quota_blocked_until - time.monotonic()
            if left > 0:
                return f"the judge's quota is spent; calls resume in {left:.0f}s"
        return None

    @property
    def healthy(self) -> bool:
        return self.problem is None

    def response_mode(self, model: str | None = None) -> ResponseMode:
        """The response mode the next call for ``model`` will use (after any fallback learnt so far)."""
        return self._modes[self._state(model or self.model).mode_index]

    def record_invalid_reply(self, model: str | None = None) -> None:
        """Count a reply the evaluator rejected (``judge_invalid_replies``; its call was counted ``ok``)."""
        self._metrics.judge_invalid_replies.labels(model or self.model).inc()

    async def complete(self, request: JudgeRequest) -> JudgeReply:
        model = request.model or self.model
        self._enter_quota_gate(model)
        is_probe = self._enter_auth_gate(model)
        started = time.monotonic()
        tally = _Tally()
        try:
            reply = await self._complete_with_retries(request, model, tally)
        except JudgeError as exc:
            if tally.requests == 0 and isinstance(exc, JudgeRateLimited):
                # The quota was found spent while this call waited its turn: nothing reached the endpoint.
                self._metrics.judge_calls_refused.labels(model, "quota_spent").inc()
            else:
                self._count(model, exc.outcome, started)
            raise
        finally:
            if is_probe:
                self._auth_probe_running = False
        latency = self._count(model, "ok", started)
        return replace(reply, latency_seconds=latency)

    async def aclose(self) -> None:
        await self._client.close()
        if self._owned_credential is not None:
            await self._owned_credential.close()

    # -- retry loop ------------------------------------------------------------------------------------------

    async def _complete_with_retries(self, request: JudgeRequest, model: str, tally: _Tally) -> JudgeReply:
        retries = 0
        adaptations = 0
        while True:
            try:
                return await self._attempt(request, model, tally)
            except _Adapted as exc:
                adaptations += 1
                if adaptations > _MAX_ADAPTATIONS:
                    # The endpoint, not this conversation, is at fault: not a final answer (see below).
                    message = f"judge model {model}: endpoint refused every request shape: {exc}"
                    raise JudgeError(message) from exc
            except _Retryable as signal:
                wait = self._retry_wait(signal, retries)
                if signal.reason == "rate_limited":
                    if wait > self._settings.max_retry_wait_seconds:
                        raise self._close_quota_gate(model, wait, signal.detail) from signal
                    # Everyone waits, not only this call: the quota is shared.
                    self._limiter.pause_for(wait)
                if retries >= self._settings.max_retries or wait > self._settings.max_retry_wait_seconds:
                    raise signal.final from signal
                retries += 1
                self._metrics.judge_retries.labels(model, signal.reason).inc()
                if signal.reason != "rate_limited":
                    await asyncio.sleep(wait)

    def _retry_wait(self, signal: _Retryable, retries: int) -> float:
        if signal.server_wait is not None:
            return signal.server_wait
        ceiling = min(self._settings.backoff_max_seconds, self._settings.backoff_base_seconds * 2.0**retries)
        return ceiling / 2.0 + random.uniform(0.0, ceiling / 2.0)

    async def _attempt(self, request: JudgeRequest, model: str, tally: _Tally) -> JudgeReply:
        state = self._state(model)
        call = self._build_call(request, model, state)
        async with self._semaphore:
            permit = await self._limiter.acquire(call.prompt_tokens_estimate + call.max_output_tokens)
            self._metrics.judge_limiter_wait.labels(self.model).set(permit.waited_seconds)
            if (blocked := self._quota_gate_error(model)) is not None:
                # The quota was found spent while this call queued or backed off: no request either.
                self._limiter.settle(permit, 0)
                raise blocked
            tally.requests += 1
            try:
                async with asyncio.timeout(self._settings.timeout_seconds):
                    raw = await self._client.chat.completions.with_raw_response.create(**call.arguments)
            except (openai.APIError, TimeoutError, _CredentialUnavailable) as exc:
                spent = 0 if isinstance(exc, openai.APIStatusError) else permit.estimated_tokens
                self._limiter.settle(permit, spent)
                raise self._translate(exc, model, call, state) from exc
        self._auth_accepted()
        self._adopt_announced_limits(raw.headers)
        if self._adapts_request_rate() and (rpm := self._adaptive_rate.record_success()) is not None:
            self._limiter.set_request_limit(rpm)
        self._honour_quota_headers(raw.headers)
        return self._reply(raw, model, call, permit)

    # -- request ---------------------------------------------------------------------------------------------

    def _state(self, model: str) -> _ModelState:
        state = self._states.get(model)
        if state is None:
            official = self._settings.kind == "openai" and self._settings.base_url is None
            # api.openai.com's newer models reject max_tokens; compatible servers often ignore its successor.
            state = _ModelState(token_parameter="max_completion_tokens" if official else "max_tokens")
            self._states[model] = state
        return state

    def _wire_model(self, model: str) -> str:
        if self._settings.kind == "azure_openai" and model == self.model and self._settings.azure_deployment:
            return self._settings.azure_deployment
        return model

    def _build_call(self, request: JudgeRequest, model: str, state: _ModelState) -> _Call:
        mode = self._modes[state.mode_index]
        messages: list[dict[str, Any]] = [{"role": m.role, "content": m.content} for m in request.messages]
        if mode != "json_schema":
            messages = _with_schema_instructions(messages, request)
        estimate = self._estimate_prompt_tokens(messages) + sum(
            MEDIA_TOKENS for m in request.messages for _ in m.media)
        if any(m.media for m in request.messages):
            # The schema instructions only ever extend or add a system message: user messages keep their order.
            users = iter(m for m in request.messages if m.role != "system")
            messages = [wire if wire["role"] == "system" else _with_media(wire, next(users)) for wire in messages]
        max_output = request.max_output_tokens or self._settings.max_output_tokens
        arguments: dict[str, Any] = {
            "model": self._wire_model(model),
            "messages": messages,
            state.token_parameter: max_output,
        }
        if state.send_temperature:
            arguments["temperature"] = (
                self._settings.temperature if request.temperature is None else request.temperature
            )
        if mode == "json_schema":
            arguments["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": request.schema_name, "schema": request.schema, "strict": True},
            }
        elif mode == "json_object":
            arguments["response_format"] = {"type": "json_object"}
        return _Call(arguments, mode, estimate, max_output)

    def _estimate_prompt_tokens(self, messages: list[dict[str, Any]]) -> int:
        chars = sum(len(m["content"]) for m in messages)
        # ~4 characters per token, scaled by what the endpoint reported for earlier prompts; +4 per message
        # for the chat template's framing.
        return math.ceil(chars / 4.0 * self._prompt_token_ratio) + 4 * len(messages)

    # -- errors ----------------------------------------------------------------------------------------------

    def _translate(self, exc: Exception, model: str, call: _Call, state: _ModelState) -> Exception:
        """What ``_attempt`` raises for ``exc``: a final ``JudgeError``, ``_Retryable`` or ``_Adapted``."""
        if isinstance(exc, _CredentialUnavailable):
            return self._auth_refused(model, f"Entra ID credential produced no token: {exc}")
        if isinstance(exc, openai.APITimeoutError | TimeoutError):
            timeout = JudgeTimeout(f"judge model {model}: no reply within {self._settings.timeout_seconds}s")
            return _Retryable("timeout", None, timeout)
        if isinstance(exc, openai.APIStatusError):
            return self._translate_status(exc, model, call, state)
        final = JudgeUnavailable(f"judge model {model}: connection failed: {exc}")
        return _Retryable("server_error", None, final)

    def _translate_status(
        self, exc: openai.APIStatusError, model: str, call: _Call, state: _ModelState
    ) -> Exception:
        status = exc.status_code
        detail = f"HTTP {status}: {_error_message(exc)}"
        self._adopt_announced_limits(exc.response.headers)
        if status in (401, 403):
            return self._auth_refused(model, detail)
        if status == 429:
            if exc.code == "insufficient_quota":
                # Billing, not pacing: waiting does not help.
                return JudgeRateLimited(f"judge model {model}: quota exhausted ({detail})")
            if self._adapts_request_rate() and (rpm := self._adaptive_rate.record_rate_limited()) is not None:
                self._limiter.set_request_limit(rpm)
            limited = JudgeRateLimited(f"judge model {model}: rate limited past {self._settings.max_retries} "
                                       f"retries ({detail})")
            return _Retryable("rate_limited", retry_after_seconds(exc.response.headers), limited, detail)
        if status in (400, 422):
            return self._adapt_or_refuse(exc, model, call, state, detail)
        if status >= 500 or status in (408, 409):
            final = JudgeUnavailable(f"judge model {model}: endpoint failing past "
                                     f"{self._settings.max_retries} retries ({detail})")
            return _Retryable("server_error", retry_after_seconds(exc.response.headers), final)
        # A 404 or another 4xx says the judge is misconfigured: a plain JudgeError, so the pipeline keeps the
        # evaluation pending instead of recording a final "refused" for a conversation that did nothing wrong.
        return JudgeError(f"judge model {model} (sent as {call.arguments['model']!r}): {detail}; check "
                          "judge.model, judge.base_url or judge.azure_deployment")

    def _adapt_or_refuse(
        self, exc: openai.APIStatusError, model: str, call: _Call, state: _ModelState, detail: str
    ) -> Exception:
        """A 400/422. The request's shape is changed only when the endpoint refuses a part of it that has an
        alternative (token parameter, temperature, response mode); ``JudgeRefused`` (final) only when this
        conversation is at fault; anything else is the settings' fault: a plain ``JudgeError``, the evaluation
        stays pending and the model's state is left alone."""
        text = f"{exc.code or ''} {exc.param or ''} {_error_message(exc)}".lower()
        if any(marker in text for marker in _CONTEXT_EXCEEDED):
            return self._context_exceeded(exc, model, call, detail)
        if any(marker in text for marker in _CONTENT_FILTERED):
            return JudgeRefused(f"judge model {model}: {detail}")
        if state.token_parameter in text and _UNSUPPORTED.search(text):
            state.token_parameter = "max_tokens" if state.token_parameter == "max_completion_tokens" else (
                "max_completion_tokens")
            return _Adapted(detail)
        if state.send_temperature and "temperature" in text and _UNSUPPORTED.search(text):
            state.send_temperature = False
            return _Adapted(detail)
        if any(marker in text for marker in _RESPONSE_FORMAT):
            return self._next_mode(model, call, state, detail)
        # "max_tokens is too large", a temperature out of range: every conversation would get the same answer.
        return JudgeError(f"judge model {model}: endpoint rejects the request ({detail}); check judge.model, "
                          "judge.max_output_tokens and judge.temperature")

    def _context_exceeded(self, exc: openai.APIStatusError, model: str, call: _Call, detail: str) -> JudgeError:
        size = _context_size(exc)
        if size is not None and call.max_output_tokens >= size:
            # vLLM says "maximum context length" when the reply budget alone overflows it: no prompt would fit.
            return JudgeError(f"judge model {model}: a reply budget of {call.max_output_tokens} tokens leaves no "
                              f"room for a prompt in its context of {size} ({detail}); lower "
                              "judge.max_output_tokens")
        return JudgeRefused(f"judge model {model}: the conversation does not fit its context ({detail})")

    def _next_mode(self, model: str, call: _Call, state: _ModelState, detail: str) -> Exception:
        if self._modes[state.mode_index] != call.mode:
            return _Adapted(detail)  # a concurrent call already moved on; try its mode
        if state.mode_index + 1 < len(self._modes):
            state.mode_index += 1
            logger.warning("judge model %s: endpoint refused response mode %s (%s); using %s from now on",
                           model, call.mode, detail, self._modes[state.mode_index])
            return _Adapted(detail)
        if len(self._modes) == 1 and call.mode != "prompt":
            return JudgeError(f"judge model {model}: endpoint refuses judge.response_mode {call.mode} ({detail}); "
                              "set judge.response_mode: auto to fall back")
        return JudgeError(f"judge model {model}: endpoint refused the request in response mode {call.mode}, "
                          f"the last to try ({detail})")

    # -- spent quota -----------------------------------------------------------------------------------------

    def _quota_gate_error(self, model: str) -> JudgeRateLimited | None:
        """While a spent quota has not reset: the error every call fails with at once, without a request."""
        if self._quota_blocked_until is None:
            return None
        left = self._quota_blocked_until - time.monotonic()
        if left <= 0:
            self._quota_blocked_until = None
            logger.warning("judge model %s: rate limit reset; judge calls resume", self.model)
            return None
        return JudgeRateLimited(f"judge model {model}: rate limit spent; no judge calls until it resets in "
                                f"{left:.1f}s")

    def _enter_quota_gate(self, model: str) -> None:
        if (blocked := self._quota_gate_error(model)) is not None:
            self._metrics.judge_calls_refused.labels(model, "quota_spent").inc()
            raise blocked

    def _close_quota_gate(self, model: str, wait: float, detail: str) -> JudgeRateLimited:
        # Pausing every caller for up to max_retry_wait_seconds, only for the next to get another 429, made a
        # cycle with a spent quota last for hours; failing fast leaves the evaluations pending for a later one.
        now = time.monotonic()
        until = now + wait
        if self._quota_blocked_until is None or self._quota_blocked_until <= now:
            logger.warning("judge model %s: rate limit spent (%s); judge calls fail at once for %.1fs",
                           model, detail, wait)
        self._quota_blocked_until = max(until, self._quota_blocked_until or now)
        limit = self._settings.max_retry_wait_seconds
        return JudgeRateLimited(f"judge model {model}: rate limit asks to wait {wait:.1f}s, more than "
                                f"judge.max_retry_wait_seconds ({limit:g}s); no judge calls until then ({detail})")

    # -- credential state ------------------------------------------------------------------------------------

    def _enter_auth_gate(self, model: str) -> bool:
        """Fail fast while the credential is refused; True when this call is the one allowed to re-probe."""
        if self._auth_failed_at is None:
            return False
        elapsed = time.monotonic() - self._auth_failed_at
        if elapsed >= self._settings.auth_reprobe_seconds and not self._auth_probe_running:
            self._auth_probe_running = True
            return True
        self._metrics.judge_calls_refused.labels(model, "auth_open").inc()
        wait = max(0.0, self._settings.auth_reprobe_seconds - elapsed)
        raise JudgeAuthError(f"judge model {model}: credential refused {elapsed:.0f}s ago; no calls until "
                             f"it is tried again in {wait:.0f}s")

    def _auth_refused(self, model: str, detail: str) -> JudgeAuthError:
        if self._auth_failed_at is None:
            logger.error("judge model %s: credential refused (%s); judge calls stop and the credential is "
                         "tried again every %.0fs", model, detail, self._settings.auth_reprobe_seconds)
        self._auth_failed_at = time.monotonic()
        self._metrics.judge_up.labels(self.model).set(0)
        return JudgeAuthError(f"judge model {model}: credential refused ({detail})")

    def _auth_accepted(self) -> None:
        if self._auth_failed_at is not None:
            logger.warning("judge model %s: credential accepted again; judge calls resume", self.model)
            self._auth_failed_at = None
            self._metrics.judge_up.labels(self.model).set(1)

    # -- reply -----------------------------------------------------------------------------------------------

    def _adapts_request_rate(self) -> bool:
        """Neither the settings nor the endpoint give a request limit: it is found by AIMD on 429s."""
        return self._settings.requests_per_minute is None and "requests" not in self._announced_limits

    def _adopt_announced_limits(self, headers: Mapping[str, str]) -> None:
        """Limits the settings leave open are taken from ``x-ratelimit-limit-*``, so the judge runs at the
        endpoint's quota without being told it; limits set in the settings always win."""
        settings = self._settings
        configured = {"requests": settings.requests_per_minute, "tokens": settings.tokens_per_minute}
        for unit, setting in configured.items():
            value = str(headers.get(f"x-ratelimit-limit-{unit}", "")).strip()
            if setting is not None or not value.isdigit() or int(value) <= 0:
                continue
            limit = int(value)
            if self._announced_limits.get(unit) == limit:
                continue
            self._announced_limits[unit] = limit
            if unit == "requests":
                self._limiter.set_request_limit(limit)
            else:
                self._limiter.set_token_limit(limit)
            logger.info("judge model %s: endpoint announces %d %s per minute; pacing calls to match",
                        self.model, limit, unit)

    def _honour_quota_headers(self, headers: Mapping[str, str]) -> None:
        wait = spent_quota_wait({k.lower(): v for k, v in headers.items()})
        if wait is not None:
            self._limiter.pause_for(min(wait, self._settings.max_retry_wait_seconds))

    def _reply(self, raw: Any, model: str, call: _Call, permit: Permit) -> JudgeReply:
        try:
            completion = raw.parse()
            choices = list(completion.choices or [])
        except (ValueError, TypeError, AttributeError) as exc:
            self._limiter.settle(permit, permit.estimated_tokens)
            final = JudgeUnavailable(f"judge model {model}: response body is not a chat completion ({exc})")
            raise _Retryable("server_error", None, final) from exc
        message = choices[0].message if choices else None
        text = (message.content if message is not None else None) or ""
        input_tokens, output_tokens = self._usage(completion, call, text)
        self._limiter.settle(permit, input_tokens + output_tokens)
        cost = self._charge(model, completion, input_tokens, output_tokens)
        reply = JudgeReply(text=text, model=model, mode=call.mode, input_tokens=input_tokens,
                           output_tokens=output_tokens, cost_usd=cost)
        refusal = getattr(message, "refusal", None) if message is not None else None
        if refusal:
            raise JudgeModelRefused(f"judge model {model} refused: {refusal}", reply)
        if choices and choices[0].finish_reason == "content_filter":
            message = f"judge model {model}: reply withheld by the endpoint's content filter"
            raise JudgeModelRefused(message, reply)
        return reply

    def _usage(self, completion: Any, call: _Call, text: str) -> tuple[int, int]:
        usage = getattr(completion, "usage", None)
        prompt_tokens = getattr(usage, "prompt_tokens", None)
        completion_tokens = getattr(usage, "completion_tokens", None)
        if isinstance(prompt_tokens, int) and prompt_tokens > 0 and call.prompt_tokens_estimate > 0:
            observed = prompt_tokens / call.prompt_tokens_estimate * self._prompt_token_ratio
            # A slow average over calls, kept within reason so one odd reply cannot starve the limiter.
            self._prompt_token_ratio = min(4.0, max(0.25, 0.8 * self._prompt_token_ratio + 0.2 * observed))
        input_tokens = prompt_tokens if isinstance(prompt_tokens, int) else call.prompt_tokens_estimate
        output_tokens = completion_tokens if isinstance(completion_tokens, int) else len(text) // 4 + 1
        return input_tokens, output_tokens

    def _charge(self, model: str, completion: Any, input_tokens: int, output_tokens: int) -> float:
        self._metrics.judge_tokens.labels(model, "input").inc(input_tokens)
        self._metrics.judge_tokens.labels(model, "output").inc(output_tokens)
        prices = self._settings.prices
        price = prices.get(model) or prices.get(str(getattr(completion, "model", "") or ""))
        if price is None:
            if prices and model not in self._unpriced_models:
                self._unpriced_models.add(model)
                logger.warning("judge model %s has no entry in judge.prices; its cost is counted as 0", model)
            return 0.0
        cost = (input_tokens * price.input_per_million + output_tokens * price.output_per_million) / 1_000_000
        self._metrics.judge_cost.labels(model).inc(cost)
        return cost

    def _count(self, model: str, outcome: str, started: float) -> float:
        latency = time.monotonic() - started
        self._metrics.judge_requests.labels(model, outcome).inc()
        self._metrics.judge_latency.labels(model).observe(latency)
        return latency


def _error_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"])
    return exc.message


def _context_size(exc: openai.APIStatusError) -> int | None:
    """The model's context in tokens, when the error says it: llama.cpp's ``n_ctx``, or OpenAI/vLLM's text."""
    body = exc.body
    if isinstance(body, dict) and isinstance(body.get("n_ctx"), int):
        return int(body["n_ctx"])
    found = _CONTEXT_SIZE.search(_error_message(exc))
    return int(found.group(1)) if found else None


def _guarded_token_provider(credential: Any) -> Callable[[], Awaitable[str]]:
    """Entra ID bearer tokens for Azure OpenAI; a credential failure becomes ``_CredentialUnavailable``."""
    provider = get_bearer_token_provider(credential, AZURE_OPENAI_SCOPE)

    async def token() -> str:
        try:
            return await provider()
        except Exception as exc:  # azure-identity raises several unrelated types for "no token"
            detail = credential_failure(str(exc), "or use judge.api_key instead of judge.azure_ad")
            raise _CredentialUnavailable(f"{type(exc).__name__}: {detail}") from exc

    return token


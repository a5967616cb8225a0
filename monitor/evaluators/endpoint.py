"""Evaluators behind an HTTP(S) service: the conversation's fields POSTed as JSON, the reply's metrics validated.

The body is the fields ``data_schema`` declares (all of ``CONVERSATION_FIELDS`` the conversation has, when it
declares none) plus ``init_parameters`` when the rubric has any. The reply is a JSON object holding every declared
metric, at the top level or under ``metrics``, and optionally a ``reason``.

- A timeout, a connection error, 429 or a 5xx is tried again ``retries`` times, waiting ``backoff_seconds`` × 2ⁿ
  (or the service's ``Retry-After``, up to 60 s). When every attempt failed, ``EvaluatorServiceUnavailable`` is
  raised: the service being down is not the conversation's fault, so the evaluation stays pending and the
  pipeline tries it again next cycle (and records it unscored after its attempts are spent).
- 401 and 403 raise ``EvaluatorServiceRefused`` (a ``JudgeAuthError``): the evaluation waits, however long,
  for the token to be fixed; the token file is re-read for every request.
- Any other 4xx, or a reply that is not JSON or does not carry valid metrics, is the conversation's answer:
  ``unscored`` (``endpoint_rejected`` / ``invalid_reply``) with the reason.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from typing import Any

import httpx

from monitor.errors import JudgeAuthError, MonitorError
from monitor.evaluators.base import EvaluationContext, InvalidReply, JudgeUsage, unscored_result
from monitor.evaluators.foundry import check_data, conversation_fields, missing_data, parse_metrics, scored_result
from monitor.evaluators.views import EachReply, Target
from monitor.models import Conversation, EvaluationResult
from monitor.rubrics.evaluator_kinds import EndpointEvaluatorRubric
from monitor.settings.schema import check_one_line

MAX_REPLY_BYTES = 1 << 20
MAX_RETRY_AFTER_SECONDS = 60.0
_RETRIED_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})


class EvaluatorServiceUnavailable(MonitorError):
    """An endpoint evaluator's service failed every attempt (timeouts, connection errors, 429, 5xx)."""


class EvaluatorServiceRefused(JudgeAuthError):
    """An endpoint evaluator's service refused the credential (401/403)."""


def _token(rubric: EndpointEvaluatorRubric) -> str | None:
    if rubric.token_file is None:
        return None
    try:
        token = rubric.token_file.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise EvaluatorServiceRefused(f"{rubric.token_file}: cannot read the token file of rubric "
                                      f"{rubric.name}: {exc.strerror}") from None
    check_one_line(token, str(rubric.token_file), "token_file")
    return token


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after", "")
    try:
        return min(max(float(value), 0.0), MAX_RETRY_AFTER_SECONDS)
    except ValueError:
        return None


class EndpointEvaluator(EachReply[EndpointEvaluatorRubric]):
    kinds: tuple[str, ...] = ("endpoint",)

    def __init__(self, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._transport = transport
        self._clients: dict[tuple[str | None, float], httpx.AsyncClient] = {}

    def _client(self, rubric: EndpointEvaluatorRubric) -> httpx.AsyncClient:
        key = (str(rubric.ca_bundle) if rubric.ca_bundle else None, rubric.timeout_seconds)
        client = self._clients.get(key)
        if client is None:
            verify: ssl.SSLContext | bool = (ssl.create_default_context(cafile=str(rubric.ca_bundle))
                                             if rubric.ca_bundle else True)
            client = httpx.AsyncClient(timeout=rubric.timeout_seconds, verify=verify, transport=self._transport,
                                       follow_redirects=False, trust_env=False)
            self._clients[key] = client
        return client

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()

    async def _evaluate_target(
        self, conversation: Conversation, rubric: EndpointEvaluatorRubric, context: EvaluationContext, target: Target
    ) -> EvaluationResult:
        fields, problem = check_data(rubric, conversation_fields(target))
        if problem is not None:
            return missing_data(conversation, rubric, context, target, problem)
        body: dict[str, Any] = dict(fields)
        if rubric.initialization_parameters:
            body["init_parameters"] = rubric.initialization_parameters
        usage = JudgeUsage()
        status, payload, attempts = await self._post(rubric, body)
        extra = {"endpoint": {"status": status, "attempts": attempts}}
        if status >= 400:
            detail = payload[:300].decode("utf-8", errors="replace")
            return unscored_result(conversation, rubric, context, target.turn_index, usage,
                                   f"endpoint_rejected: HTTP {status}",
                                   f"Unscored: the evaluator service answered HTTP {status}: {detail}", details=extra)
        try:
            if len(payload) > MAX_REPLY_BYTES:
                raise InvalidReply(f"the reply is over {MAX_REPLY_BYTES} bytes")
            values, reason = parse_metrics(rubric, json.loads(payload))
        except (InvalidReply, ValueError, RecursionError) as exc:
            problem = str(exc) if isinstance(exc, InvalidReply) else f"the reply is not JSON ({type(exc).__name__})"
            return unscored_result(conversation, rubric, context, target.turn_index, usage,
                                   f"invalid_reply: {problem}", f"Unscored: invalid reply from the evaluator "
                                   f"service: {problem}", details=extra)
        return scored_result(conversation, rubric, context, target, usage, values, reason, extra)

    async def _post(self, rubric: EndpointEvaluatorRubric, body: dict[str, Any]) -> tuple[int, bytes, int]:
        """(status, body, attempts) of the first answer that is not retried; raises when every attempt failed."""
        content = json.dumps(body, ensure_ascii=False, default=str).encode()
        failure = "no attempt made"
        client = self._client(rubric)
        for attempt in range(rubric.retries + 1):
            headers = {"content-type": "application/json", "accept": "application/json"}
            token = _token(rubric)
            if token and rubric.token_header == "api-key":
                headers["api-key"] = token
            elif token:
                headers["authorization"] = f"Bearer {token}"
            wait = rubric.backoff_seconds * 2 ** attempt
            try:
                async with client.stream("POST", rubric.url or "", content=content, headers=headers) as response:
                    payload = await _read(response)
            except httpx.TimeoutException:
                failure = f"no answer within {rubric.timeout_seconds:g} s"
            except httpx.HTTPError as exc:
                failure = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code in (401, 403):
                    raise EvaluatorServiceRefused(f"evaluator service of rubric {rubric.name} ({rubric.url}) "
                                                  f"refused the credential: HTTP {response.status_code}")
                if response.status_code not in _RETRIED_STATUS:
                    return response.status_code, payload, attempt + 1
                failure = f"HTTP {response.status_code}"
                wait = _retry_after(response) or wait
            if attempt < rubric.retries:
                await asyncio.sleep(wait)
        raise EvaluatorServiceUnavailable(f"evaluator service of rubric {rubric.name} ({rubric.url}): {failure} "
                                          f"after {rubric.retries + 1} attempts")


async def _read(response: httpx.Response) -> bytes:
    kept = bytearray()
    async for chunk in response.aiter_bytes():
        kept += chunk
        if len(kept) > MAX_REPLY_BYTES:
            break
    return bytes(kept)

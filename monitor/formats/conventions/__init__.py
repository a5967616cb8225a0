"""Which GenAI convention a span follows, decided in one place, and its content in the one message model.

Every convention maps onto ``monitor.models`` (``Message``/``Part``/``ToolDefinition``) through the reader of the
current conventions (``semconv``, on the shared readers of ``monitor.formats.genai``): a convention that spells
content differently is rewritten into the current attribute names and the GenAI parts format by its own small
module, then read like any other span. One module per convention: ``semconv``, ``legacy_events`` (with its
``azure_sdk`` variant), ``semantic_kernel``, ``openllmetry_legacy``, ``openinference``.

==========================  =====================================================================================
convention                  recognised by
==========================  =====================================================================================
``semconv``                 ``gen_ai.input.messages`` / ``gen_ai.output.messages`` / ``gen_ai.system_instructions``
                            / ``gen_ai.tool.definitions`` on the span, on a ``gen_ai.client.inference.operation
                            .details`` event or log record
``legacy_events``           no messages on the span; events or log records ``gen_ai.*.message`` / ``gen_ai.choice``
``azure_sdk``               the same, with the body as JSON in ``gen_ai.event.content``
``semantic_kernel``         current names holding OpenAI-shaped values (messages without ``parts``)
``openllmetry_legacy``      ``gen_ai.prompt.N.*`` / ``gen_ai.completion.N.*`` (OpenLLMetry 0.4x)
``openinference``           ``llm.input_messages.N.*`` / ``llm.output_messages.N.*`` (Phoenix, Arize)
``unsupported``             content under a name none of the above reads (see ``UNSUPPORTED_CONTENT_KEYS``):
                            counted as ``unsupported_convention``, with the instrumentation scope in the log
==========================  =====================================================================================

``content_switch`` names, from a span's instrumentation scope, how its producer turns content capture on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from monitor.formats.conventions import (
    azure_sdk,
    legacy_events,
    openinference,
    openllmetry_legacy,
    semantic_kernel,
    semconv,
)
from monitor.formats.conventions.semconv import read_span_content as read_semconv_content
from monitor.formats.genai import ReadCache, SpanContent
from monitor.formats.genai_schema import Generation
from monitor.models import SpanRecord

SEMCONV = semconv.NAME
LEGACY_EVENTS = legacy_events.NAME
AZURE_SDK = azure_sdk.NAME
UNSUPPORTED = "unsupported"
UNSUPPORTED_REASON = "unsupported_convention"

UNSUPPORTED_CONTENT_KEYS = frozenset({
    "gen_ai.prompt", "gen_ai.completion",  # semconv 1.2x single-string content
    "llm.prompts", "llm.completions",  # OpenLLMetry before 0.10
    "ai.prompt", "ai.prompt.messages", "ai.response.text",  # Vercel AI SDK
    "mlflow.spanInputs", "mlflow.spanOutputs",  # MLflow tracing
    "langfuse.observation.input", "langfuse.observation.output",  # Langfuse SDK
    "gcp.vertex.agent.llm_request", "gcp.vertex.agent.llm_response",  # Google ADK
})
"""Attributes that hold message content in a convention this package does not read."""

_INFERENCE_ALIASES = {"chat.completions": "chat", "text.completions": "text_completion"}
_INDEXED_PREFIXES = tuple(prefix + "." for prefix in (
    openinference.INPUT, openinference.OUTPUT, openllmetry_legacy.PROMPT, openllmetry_legacy.COMPLETION))
"""Flattened conventions' keys start so (``llm.input_messages.0.message.role``, ``gen_ai.prompt.0.content`` ...)."""
_OI_INPUT, _OI_OUTPUT, _OL_PROMPT, _OL_COMPLETION = _INDEXED_PREFIXES
_INPUT, _OUTPUT, _TOOLS = "gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.tool.definitions"


_PLAIN_KEY_SETS: dict[tuple[str, ...], bool] = {}
"""Whether a span's attribute names (in order) are free of other conventions' names: one producer writes the same
names span after span, so the answer is looked up, not worked out, for almost every span."""
_KEY_SETS_KEPT = 4096


def _plain_keys(attributes: Mapping[str, Any]) -> bool:
    if not UNSUPPORTED_CONTENT_KEYS.isdisjoint(attributes):
        return False
    keys = "\n".join(attributes)
    return not ((_OI_INPUT in keys or _OI_OUTPUT in keys or _OL_PROMPT in keys or _OL_COMPLETION in keys) and (
        openinference.recognizes(attributes) or openllmetry_legacy.recognizes(attributes)))


def in_current_conventions(attributes: Mapping[str, Any]) -> bool:
    """The fast path: no key of a flattened or unsupported convention, and message or tool values (if any) not in
    Semantic Kernel's OpenAI shape. Most spans are in the current conventions; this decides it by one lookup of the
    span's attribute names and, for spans with messages, two substring tests: not a Python loop per key and per
    convention."""
    if not _plain(attributes):
        return False
    if _INPUT in attributes or _OUTPUT in attributes or _TOOLS in attributes:
        return not semantic_kernel.recognizes(attributes)
    return True


def _plain(attributes: Mapping[str, Any]) -> bool:
    """``_plain_keys``, looked up by the attribute names."""
    keys = tuple(attributes)
    plain = _PLAIN_KEY_SETS.get(keys)
    if plain is None:
        plain = _plain_keys(attributes)
        if len(_PLAIN_KEY_SETS) >= _KEY_SETS_KEPT:
            _PLAIN_KEY_SETS.clear()
        _PLAIN_KEY_SETS[keys] = plain
    return plain


def may_hold_input(span: SpanRecord) -> bool:
    """False only when ``span`` certainly holds no model input: no events (nor log records folded in) and
    attributes in the current conventions without ``gen_ai.input.messages``. Decided without reading content, so
    a reader that needs only the input (a trace's transcript) skips the other spans."""
    attributes = span.attributes
    # Semantic Kernel's shape matters only for a value under gen_ai.input.messages, which is read anyway.
    return bool(span.events) or _INPUT in attributes or not _plain(attributes)


def recognize(span: SpanRecord) -> str:
    """The convention of ``span``'s content: one of the names in the table above."""
    attributes = span.attributes
    if in_current_conventions(attributes):
        if span.events and _INPUT not in attributes and _OUTPUT not in attributes and legacy_events.recognizes(
                span.events):
            return AZURE_SDK if any(azure_sdk.recognizes(e.attributes) for e in span.events) else LEGACY_EVENTS
        return SEMCONV
    if openinference.recognizes(attributes):
        return openinference.NAME
    if openllmetry_legacy.recognizes(attributes):
        return openllmetry_legacy.NAME
    if semantic_kernel.recognizes(attributes):
        return semantic_kernel.NAME
    if UNSUPPORTED_CONTENT_KEYS.intersection(attributes):
        return UNSUPPORTED
    return SEMCONV


def read_span_content(
    span: SpanRecord, *, generation: Generation = "pre_move", cache: ReadCache | None = None
) -> SpanContent:
    """Messages, instructions and tool definitions of ``span``, whichever convention it follows."""
    if in_current_conventions(span.attributes):  # the fast path: most spans
        return read_semconv_content(span, generation=generation, cache=cache)
    convention = recognize(span)
    if convention in (SEMCONV, LEGACY_EVENTS, AZURE_SDK):
        return read_semconv_content(span, generation=generation, cache=cache)
    if convention == UNSUPPORTED:
        content = read_semconv_content(span, generation=generation, cache=cache)
        if content.messages or content.system_instructions:
            return content
        keys = sorted(UNSUPPORTED_CONTENT_KEYS.intersection(span.attributes))
        scope = span.scope or "unknown scope"
        return SpanContent(
            rejected={UNSUPPORTED_REASON: 1},
            problems=(f"span {span.span_id} of trace {span.trace_id} ({scope}): content under "
                      f"{', '.join(keys)}, a convention rubric-monitor does not read (docs/producers.md)",),
        )
    rewritten = _MODULES[convention](span.attributes)
    merged = {**span.attributes, **rewritten}
    return read_semconv_content(span.model_copy(update={"attributes": merged}), generation=generation, cache=cache)


_MODULES = {
    openinference.NAME: openinference.semconv_attributes,
    openllmetry_legacy.NAME: openllmetry_legacy.semconv_attributes,
    semantic_kernel.NAME: semantic_kernel.semconv_attributes,
}


def inference_operation(span: SpanRecord) -> str | None:
    """The GenAI operation of a model call whose producer does not name it with the current values: OpenInference
    ``LLM`` spans, OpenLLMetry ``llm.request.type``, Semantic Kernel's ``chat.completions``."""
    attributes = span.attributes
    operation = attributes.get("gen_ai.operation.name")
    if isinstance(operation, str) and operation in _INFERENCE_ALIASES:
        return _INFERENCE_ALIASES[operation]
    if operation:
        return None
    if openinference.is_inference(attributes):
        return "chat"
    return openllmetry_legacy.inference_operation(attributes)


def content_switch(scopes: Mapping[str, Any] | list[str] | tuple[str, ...]) -> list[str]:
    """How the producers behind ``scopes`` (instrumentation scope names) turn message content capture on."""
    found: list[str] = []
    for scope in scopes:
        advice = _switch_of(scope)
        if advice and advice not in found:
            found.append(advice)
    return found


def _switch_of(scope: str) -> str | None:
    name = scope.lower()
    if name.startswith("opentelemetry.util.genai") or name == "opentelemetry.instrumentation.openai_v2" or (
            name.startswith("opentelemetry.instrumentation.") and name.endswith("_v2")):
        return (f"{scope}: OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only (or event_only, "
                "span_and_event) with opentelemetry-util-genai 1.x, plus "
                "OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental for instrumentations older than it; "
                "util-genai 0.x takes OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true")
    if name.startswith("agent_framework"):
        return (f"{scope}: enable_sensitive_data=True (configure_otel_providers / setup_observability) or "
                "ENABLE_SENSITIVE_DATA=true")
    if name.startswith(("opentelemetry.instrumentation.", "traceloop")):
        return f"{scope} (OpenLLMetry): TRACELOOP_TRACE_CONTENT=true"
    if name.startswith("semantic_kernel"):
        return (f"{scope}: SEMANTICKERNEL_EXPERIMENTAL_GENAI_ENABLE_OTEL_DIAGNOSTICS_SENSITIVE=true")
    if name.startswith("azure"):
        return f"{scope}: AZURE_TRACING_GEN_AI_CONTENT_RECORDING_ENABLED=true"
    if name.startswith("openinference"):
        return (f"{scope}: leave OPENINFERENCE_HIDE_INPUTS / OPENINFERENCE_HIDE_OUTPUT_MESSAGES unset "
                "(content is on by default)")
    return None

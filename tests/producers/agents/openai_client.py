"""The scenario agent written directly on the ``openai`` client (its own tool loop), instrumented by one of
the libraries that patch that client: ``python openai_client.py openai-v2|openllmetry|openinference``.

This is how an agent team uses these instrumentations: set up the SDK, call the instrumentor's
``instrument()``, then use ``openai.OpenAI`` as usual.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests.producers import scenario
from tests.producers.agents._common import Settings, Telemetry


def instrument(which: str, settings: Settings, telemetry: Telemetry) -> None:
    if which == "openai-v2":
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

        OpenAIInstrumentor().instrument()
    elif which == "openllmetry":
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor as OpenLLMetryInstrumentor

        kwargs: dict[str, Any] = {}
        if "use_attributes_false" in settings.options:
            kwargs["use_attributes"] = False  # 0.62: content as log records instead of span attributes
        OpenLLMetryInstrumentor(**kwargs).instrument()
    elif which == "openinference":
        from openinference.instrumentation.openai import OpenAIInstrumentor as OpenInferenceInstrumentor

        OpenInferenceInstrumentor().instrument(tracer_provider=telemetry.tracer_provider)
    else:
        raise SystemExit(f"unknown instrumentation {which!r}")


def complete(client: Any, messages: list[dict[str, Any]], stream: bool) -> dict[str, Any]:
    """One chat completion, returned as the assistant message to append (streams are accumulated)."""
    if not stream:
        response = client.chat.completions.create(model=scenario.MODEL, messages=messages, tools=scenario.TOOLS,
                                                  temperature=0.2)
        message = response.choices[0].message
        if message.tool_calls:
            return {"role": "assistant", "content": message.content, "tool_calls": [
                {"id": c.id, "type": "function", "function": {"name": c.function.name,
                                                              "arguments": c.function.arguments}}
                for c in message.tool_calls]}
        return {"role": "assistant", "content": message.content}
    chunks = client.chat.completions.create(model=scenario.MODEL, messages=messages, tools=scenario.TOOLS,
                                            temperature=0.2, stream=True, stream_options={"include_usage": True})
    content: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    for chunk in chunks:
        for choice in chunk.choices:
            delta = choice.delta
            if delta.content:
                content.append(delta.content)
            for call in delta.tool_calls or []:
                entry = calls.setdefault(call.index, {"id": None, "type": "function",
                                                      "function": {"name": "", "arguments": ""}})
                if call.id:
                    entry["id"] = call.id
                if call.function and call.function.name:
                    entry["function"]["name"] += call.function.name
                if call.function and call.function.arguments:
                    entry["function"]["arguments"] += call.function.arguments
    if calls:
        return {"role": "assistant", "content": "".join(content) or None,
                "tool_calls": [calls[i] for i in sorted(calls)]}
    return {"role": "assistant", "content": "".join(content)}


def run_session(client: Any, session: scenario.Session, stream: bool) -> None:
    messages: list[dict[str, Any]] = [{"role": "system", "content": scenario.SYSTEM_PROMPT}]
    for turn in session.turns:
        messages.append({"role": "user", "content": turn.user})
        while True:
            reply = complete(client, messages, stream)
            messages.append(reply)
            if not reply.get("tool_calls"):
                break
            for call in reply["tool_calls"]:
                result = scenario.tool_result(call["function"]["name"], json.loads(call["function"]["arguments"]))
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    if messages != scenario.expected_messages(session):
        raise SystemExit(f"conversation differs from the scenario: {json.dumps(messages)}")


def main() -> None:
    which = sys.argv[1]
    settings = Settings.from_env()
    telemetry = Telemetry(settings)
    instrument(which, settings, telemetry)
    import openai

    client = openai.OpenAI(base_url=settings.base_url, api_key="test-key", max_retries=0)
    try:
        for session in scenario.SESSIONS:
            with telemetry.session_span(settings, session):
                run_session(client, session, settings.stream)
    finally:
        telemetry.shutdown()


if __name__ == "__main__":
    main()

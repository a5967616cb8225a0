"""The scenario agent on Semantic Kernel: a ``ChatCompletionAgent`` over the OpenAI chat completion connector
(``OpenAIChatCompletion`` with an ``AsyncOpenAI`` client aimed at the scripted server) and a ``Booking``
plugin holding the two tools (so the wire names are ``Booking-find_table`` / ``Booking-book_table``);
automatic function calling runs the tool loop. One ``ChatHistoryAgentThread`` (in memory) per session.

Telemetry as SK's docs show: the SDK's global providers, and a ``LoggingHandler`` on the ``semantic_kernel``
loggers, since SK writes the message content (with
``SEMANTICKERNEL_EXPERIMENTAL_GENAI_ENABLE_OTEL_DIAGNOSTICS_SENSITIVE=true``) as Python log records.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests.producers import scenario
from tests.producers.agents._common import Settings, Telemetry, run_agent


def booking_plugin() -> object:
    from semantic_kernel.functions import kernel_function

    class Booking:
        @kernel_function(name="find_table", description="Find free table times for a date and party size.")
        def find_table(self, date: Annotated[str, "ISO date, e.g. 2026-12-12"],
                       party_size: Annotated[int, "Number of guests"]) -> str:
            return scenario.tool_result("find_table", {"date": date, "party_size": party_size})

        @kernel_function(name="book_table", description="Book a table.")
        def book_table(self, date: Annotated[str, "ISO date"], time: Annotated[str, "HH:MM"],
                       party_size: Annotated[int, "Number of guests"],
                       name: Annotated[str, "Name for the booking"]) -> str:
            return scenario.tool_result("book_table", {"date": date, "time": time, "party_size": party_size,
                                                       "name": name})

    return Booking()


def export_semantic_kernel_logs(telemetry: Telemetry) -> None:
    from opentelemetry.sdk._logs import LoggingHandler

    handler = LoggingHandler(logger_provider=telemetry.logger_provider)
    handler.addFilter(logging.Filter("semantic_kernel"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)


async def run(settings: Settings, telemetry: Telemetry) -> None:
    export_semantic_kernel_logs(telemetry)
    from openai import AsyncOpenAI
    from semantic_kernel.agents import ChatCompletionAgent, ChatHistoryAgentThread
    from semantic_kernel.connectors.ai.open_ai import OpenAIChatCompletion

    service = OpenAIChatCompletion(ai_model_id=scenario.MODEL, api_key="test-key",
                                   async_client=AsyncOpenAI(base_url=settings.base_url, api_key="test-key",
                                                            max_retries=0))
    agent = ChatCompletionAgent(service=service, name=scenario.AGENT_NAME, description=scenario.AGENT_DESCRIPTION,
                                instructions=scenario.SYSTEM_PROMPT, plugins=[booking_plugin()])
    for session in scenario.SESSIONS:
        with telemetry.session_span(settings, session):
            thread = ChatHistoryAgentThread()
            for turn in session.turns:
                if settings.stream:
                    text = ""
                    async for item in agent.invoke_stream(messages=turn.user, thread=thread):
                        text += str(item.content or "")
                        thread = item.thread
                else:
                    response = await agent.get_response(messages=turn.user, thread=thread)
                    text, thread = str(response.content), response.thread
                if text != turn.reply:
                    raise SystemExit(f"unexpected reply {text!r} to {turn.user!r}")


if __name__ == "__main__":
    run_agent(run)

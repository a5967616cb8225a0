"""The scenario agent on Microsoft Agent Framework: an ``Agent`` over its OpenAI Chat Completions client
(``OpenAIChatCompletionClient``) with the two tools as Python functions; the framework runs the tool loop.
Observability as its docs show for your own providers: set up the SDK, then
``enable_instrumentation(enable_sensitive_data=True)``. Each session uses the agent's default in-memory
session (``agent.create_session()``); with ``PRODUCER_APP_SPAN=1`` each is wrapped in the app span.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests.producers import scenario
from tests.producers.agents._common import Settings, Telemetry, run_agent


def find_table(date: Annotated[str, "ISO date, e.g. 2026-12-12"],
               party_size: Annotated[int, "Number of guests"]) -> str:
    """Find free table times for a date and party size."""
    return scenario.tool_result("find_table", {"date": date, "party_size": party_size})


def book_table(date: Annotated[str, "ISO date"], time: Annotated[str, "HH:MM"],
               party_size: Annotated[int, "Number of guests"], name: Annotated[str, "Name for the booking"]) -> str:
    """Book a table."""
    return scenario.tool_result("book_table", {"date": date, "time": time, "party_size": party_size, "name": name})


async def run(settings: Settings, telemetry: Telemetry) -> None:
    from agent_framework import Agent
    from agent_framework.observability import enable_instrumentation
    from agent_framework.openai import OpenAIChatCompletionClient

    enable_instrumentation(enable_sensitive_data=True)
    client = OpenAIChatCompletionClient(model=scenario.MODEL, api_key="test-key", base_url=settings.base_url)
    agent = Agent(client, scenario.SYSTEM_PROMPT, name=scenario.AGENT_NAME, description=scenario.AGENT_DESCRIPTION,
                  tools=[find_table, book_table])
    for session in scenario.SESSIONS:
        with telemetry.session_span(settings, session):
            agent_session = agent.create_session()
            for turn in session.turns:
                if settings.stream:
                    text = ""
                    async for update in agent.run(turn.user, session=agent_session, stream=True):
                        text += update.text or ""
                else:
                    text = (await agent.run(turn.user, session=agent_session)).text
                if text != turn.reply:
                    raise SystemExit(f"unexpected reply {text!r} to {turn.user!r}: {json.dumps(turn.reply)}")


if __name__ == "__main__":
    run_agent(run)

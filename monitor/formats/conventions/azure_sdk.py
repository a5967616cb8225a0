"""The Azure SDKs' variant of the legacy events (``azure-ai-projects``, ``azure-ai-agents``, ``azure-ai-inference``):
each message event carries its whole body as JSON text in ``gen_ai.event.content``
(``{"content": {"text": {"value": "hi"}}, "role": "user"}``: the Assistants content shape, which
``monitor.formats.genai.content_parts`` reads), the agent's instructions come as a ``gen_ai.system.instruction``
event (``{"text": "..."}``), and ``gen_ai.thread.id`` names the conversation. The events are otherwise read as
the legacy convention's (``legacy_events``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from monitor.formats.genai import EVENT_CONTENT

NAME = "azure_sdk"
INSTRUCTION_EVENT = "gen_ai.system.instruction"


def recognizes(attributes: Mapping[str, Any]) -> bool:
    """Whether an event's attributes are in the Azure SDK variant."""
    return EVENT_CONTENT in attributes


def event_content(attributes: Mapping[str, Any]) -> Any:
    """The body an Azure SDK event carries as JSON text, or ``None`` for events of other producers."""
    return attributes.get(EVENT_CONTENT)

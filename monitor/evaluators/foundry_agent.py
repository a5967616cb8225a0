"""What a Foundry agent says it does, for rubric generation: a prompt agent's instructions, a hosted agent's
description (as Foundry's own generation reads them), through ``azure-ai-projects`` with Entra credentials.

``AIProjectClient.agents.get(name)`` (``GET {project endpoint}/agents/{name}?api-version=v1``) returns the agent with
its latest version, or ``agents.get_version(name, version)`` a given one; the version's ``definition.kind`` says
which text applies. ``azure-ai-projects`` is an optional dependency (``pip install 'rubric-monitor[foundry]'``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from monitor.errors import ConfigError
from monitor.settings import check_one_line

WHERE = "--foundry-agent"


@dataclass(frozen=True)
class FoundryAgent:
    name: str
    version: str | None
    kind: str
    """``prompt``, ``hosted``, ``workflow``..."""
    text: str
    """The instructions (prompt agents) or the description (any other kind)."""
    source: str
    """``instructions`` or ``description``."""


class TokenFileCredential:
    """An Entra bearer token obtained elsewhere (``az account get-access-token``, a mounted secret), read from a
    file at each request: the ``TokenCredential`` protocol ``azure-core`` asks for."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        from azure.core.credentials import AccessToken

        try:
            token = self.path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(str(self.path), "--foundry-token-file", f"cannot read: {exc.strerror}") from None
        check_one_line(token, str(self.path), "--foundry-token-file")
        return AccessToken(token, int(time.time()) + 300)

    def close(self) -> None:
        return None


def default_credential() -> Any:
    from azure.identity import DefaultAzureCredential

    return DefaultAzureCredential()


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def read_foundry_agent(endpoint: str, name: str, credential: Any, version: str | None = None,
                       **client_options: Any) -> FoundryAgent:
    """The agent's instructions or description; ``ConfigError`` (naming the agent) when it cannot be read or
    says nothing to generate from. ``client_options`` go to ``AIProjectClient`` (``connection_verify``...)."""
    try:
        from azure.ai.projects import AIProjectClient
        from azure.core.exceptions import ClientAuthenticationError, HttpResponseError, ResourceNotFoundError
    except ImportError:
        raise ConfigError(WHERE, None, "reading a Foundry agent needs azure-ai-projects: "
                                       "pip install 'rubric-monitor[foundry]'") from None
    client = AIProjectClient(endpoint=endpoint, credential=credential, **client_options)
    try:
        details = client.agents.get_version(name, version) if version else client.agents.get(name).versions.latest
    except ResourceNotFoundError:
        raise ConfigError(WHERE, None, f"no agent {name!r}{f' version {version}' if version else ''} in the "
                                       f"project {endpoint}") from None
    except ClientAuthenticationError as exc:
        raise ConfigError(WHERE, None, f"the project {endpoint} refused the credential: "
                                       f"{' '.join(str(exc).split())[:300]}") from None
    except HttpResponseError as exc:
        raise ConfigError(WHERE, None, f"reading agent {name!r} from {endpoint} failed: HTTP {exc.status_code}: "
                                       f"{' '.join(str(exc.message or exc).split())[:300]}") from None
    finally:
        client.close()
    definition = details.definition
    kind = str(getattr(definition, "kind", None) or (definition.get("kind") if definition else "") or "unknown")
    instructions = _text(getattr(definition, "instructions", None)) if kind == "prompt" else ""
    text, source = (instructions, "instructions") if instructions else (_text(details.description), "description")
    if not text:
        what = "instructions or description" if kind == "prompt" else "description"
        raise ConfigError(WHERE, None, f"agent {name!r} ({kind} agent) has no {what} to generate a rubric from")
    return FoundryAgent(name=name, version=str(details.version) if details.version else None, kind=kind, text=text,
                        source=source)

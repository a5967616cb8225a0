"""An in-memory judge with scripted replies, for tests and dry runs (like inspect_ai's ``mockllm``)."""

from __future__ import annotations

from collections.abc import Callable

from monitor.judge.base import JudgeReply, JudgeRequest, PromptStyle

Script = Callable[[JudgeRequest], str]


class ScriptedJudge:
    """Answers every request with ``script(request)``; records requests in ``requests``."""

    def __init__(self, script: Script, model: str = "scripted", prompt_style: PromptStyle = "full") -> None:
        self.model = model
        self.prompt_style: PromptStyle = prompt_style
        self._script = script
        self.requests: list[JudgeRequest] = []
        self.invalid_replies = 0
        self.problem: str | None = None
        """Never set by the judge itself (a script does not fail); a test sets it to play an unusable judge."""

    async def complete(self, request: JudgeRequest) -> JudgeReply:
        self.requests.append(request)
        text = self._script(request)
        prompt_chars = sum(len(m.content) for m in request.messages)
        return JudgeReply(text=text, model=request.model or self.model, mode="json_schema",
                          input_tokens=prompt_chars // 4, output_tokens=len(text) // 4)

    def record_invalid_reply(self, model: str | None = None) -> None:
        self.invalid_replies += 1

    async def aclose(self) -> None:
        return None

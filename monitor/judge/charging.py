"""A judge that charges every reply to its rubric's daily budget, whatever becomes of the evaluation.

Charging when a result is recorded would miss what failed evaluations spent (a reply that was invalid twice, a
turn-level evaluation that failed halfway), and those are the ones that repeat.
"""

from __future__ import annotations

from collections.abc import Callable

from monitor.errors import JudgeRefused
from monitor.judge.base import Judge, JudgeReply, JudgeRequest, PromptStyle

Charge = Callable[[str, int, float], None]
"""(rubric, tokens, usd) → None."""


class ChargingJudge:
    def __init__(self, inner: Judge, charge: Charge) -> None:
        self.inner = inner
        self._charge = charge

    @property
    def model(self) -> str:
        return self.inner.model

    @property
    def prompt_style(self) -> PromptStyle:
        return self.inner.prompt_style

    @property
    def problem(self) -> str | None:
        return self.inner.problem

    async def complete(self, request: JudgeRequest) -> JudgeReply:
        try:
            reply = await self.inner.complete(request)
        except JudgeRefused as exc:
            # A refusal still cost its tokens; the production judge attaches them to the error.
            refused: JudgeReply | None = getattr(exc, "reply", None)
            if refused is not None:
                self._bill(request, refused)
            raise
        self._bill(request, reply)
        return reply

    def _bill(self, request: JudgeRequest, reply: JudgeReply) -> None:
        if request.rubric:
            self._charge(request.rubric, reply.input_tokens + reply.output_tokens, reply.cost_usd)

    def record_invalid_reply(self, model: str | None = None) -> None:
        self.inner.record_invalid_reply(model)

    async def aclose(self) -> None:
        await self.inner.aclose()

"""Which verdicts people review: per rubric and UTC day, a uniform random share (so agreement measured on its
labels is an unbiased estimate), then failing, borderline and flagged verdicts, each tagged with why.

The uniform pick is a hash of (rubric, conversation), not a random draw: every replica and every restart picks
the same verdicts, and a pick does not depend on which other verdicts arrived that day (only the daily cap does).
A verdict is queued once, for its first reason in the order uniform, borderline, failing, flagged: a uniform pick
keeps its tag whatever else it is, so the uniform share stays a sample of all verdicts.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal

Reason = Literal["uniform", "borderline", "failing", "flagged"]
REASONS: tuple[Reason, ...] = ("uniform", "borderline", "failing", "flagged")


@dataclass(frozen=True)
class Quotas:
    uniform_share: float = 0.02
    uniform_per_day: int = 20
    failing_per_day: int = 5
    borderline_per_day: int = 5
    borderline_margin: float = 0.05
    flagged_per_day: int = 5

    def cap(self, reason: Reason) -> int:
        return {"uniform": self.uniform_per_day, "borderline": self.borderline_per_day,
                "failing": self.failing_per_day, "flagged": self.flagged_per_day}[reason]


@dataclass(frozen=True)
class Candidate:
    """A conversation-level verdict as the queue sees it."""

    rubric: str
    conversation_id: str
    outcome: str
    score: float | None
    threshold: float | None
    context_truncated: bool


def uniform_draw(rubric: str, conversation_id: str) -> float:
    """A number in [0, 1) fixed by the rubric and conversation: picked uniformly when below the share."""
    digest = hashlib.sha256(f"review\x00{rubric}\x00{conversation_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def reasons_for(candidate: Candidate, quotas: Quotas) -> list[Reason]:
    """Every reason the verdict qualifies for, in priority order (quotas not applied)."""
    found: list[Reason] = []
    if uniform_draw(candidate.rubric, candidate.conversation_id) < quotas.uniform_share:
        found.append("uniform")
    if (candidate.outcome != "unscored" and candidate.score is not None and candidate.threshold is not None
            and abs(candidate.score - candidate.threshold) <= quotas.borderline_margin):
        found.append("borderline")
    if candidate.outcome == "fail":
        found.append("failing")
    if candidate.outcome == "unscored" or candidate.context_truncated:
        found.append("flagged")
    return found


def pick(candidate: Candidate, quotas: Quotas, counts: dict[Reason, int]) -> Reason | None:
    """The reason to queue ``candidate`` for, given the day's counts so far (updated), or None."""
    for reason in reasons_for(candidate, quotas):
        if counts.get(reason, 0) < quotas.cap(reason):
            counts[reason] = counts.get(reason, 0) + 1
            return reason
    return None

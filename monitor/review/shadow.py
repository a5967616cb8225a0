"""Shadow before promote: a candidate (a new rubric version, judge model or prompt version) judges the labelled
conversations of its rubric and a sample of recent live ones; its verdicts are stored apart (``shadow_results``),
never in ``results``, so they feed no quality metric, rollup, write-back or alert. ``status`` sets the candidate's
agreement with people beside the active configuration's on the same conversations, and how far its scores move
from the active ones; only ``rubric-monitor shadow promote`` makes it active."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from monitor.evaluators.base import EvaluationContext, Evaluator
from monitor.models import Conversation, EvaluationResult
from monitor.review.agreement import Measure, RubricAgreement, agreement
from monitor.review.store import ReviewStore, StoredLabel
from monitor.rubrics.schema import Rubric
from monitor.trust.agreement import judge_conversations

log = logging.getLogger(__name__)


@dataclass
class ShadowRun:
    labelled: int = 0
    live: int = 0
    already: int = 0
    """Judged by this candidate before (a candidate judges each conversation once)."""
    missing: list[str] = field(default_factory=list)
    """Conversations whose spans are no longer stored (pruned): they cannot be judged again."""


async def run_shadow(candidate: str, rubric: Rubric, evaluator: Evaluator, context: EvaluationContext,
                     review: ReviewStore, live: int, concurrency: int) -> ShadowRun:
    """Judge the rubric's labelled conversations and its ``live`` newest verdicts' conversations with the
    candidate, storing each verdict beside the active one it is compared with."""
    done = review.shadowed_conversations(candidate)
    report = ShadowRun()
    labelled_ids = {label.conversation_id for label in review.labels(rubric=rubric.name)}
    targets: dict[str, tuple[int | None, bool]] = {
        cid: (review.current_result_id(cid, rubric.name), True) for cid in sorted(labelled_ids)}
    for result_id, cid in review.recent_conversation_results(rubric.name, live):
        targets.setdefault(cid, (result_id, False))
    conversations: list[Conversation] = []
    for cid in targets:
        if (cid, rubric.name) in done:
            report.already += 1
            continue
        conversation = review.conversation(cid)
        if conversation is None:
            report.missing.append(cid)
        else:
            conversations.append(conversation)
    judged = await judge_conversations(conversations, rubric, evaluator, context, concurrency)
    for cid, result in judged.items():
        active_id, labelled = targets[cid]
        if review.save_shadow(candidate, result, active_id, labelled):
            if labelled:
                report.labelled += 1
            else:
                report.live += 1
    return report


@dataclass(frozen=True)
class ShadowStatus:
    candidate: str
    rubric: str
    configuration: dict[str, str]
    """The candidate's rubric version, judge model and prompt version."""
    active_configuration: dict[str, str]
    judged: int
    labelled: int
    candidate_agreement: RubricAgreement | None
    active_agreement: RubricAgreement | None
    """On the same labelled conversations, with the same labels."""
    score_shift: float | None
    """Mean of (candidate score - active score) over conversations both scored."""
    flips: float | None
    """Share of those where pass/fail differs."""

    def as_dict(self) -> dict[str, Any]:
        def measures(found: RubricAgreement | None) -> dict[str, Any]:
            if found is None:
                return {}
            return {f"{dimension or 'verdict'}.{measure}": {"value": m.value, "lower": m.lower, "upper": m.upper,
                                                            "n": m.n}
                    for (dimension, measure), m in found.measures.items()}

        return {"candidate": self.candidate, "rubric": self.rubric, "configuration": self.configuration,
                "active_configuration": self.active_configuration, "judged": self.judged,
                "labelled": self.labelled, "agreement": measures(self.candidate_agreement),
                "active_agreement": measures(self.active_agreement), "score_shift": self.score_shift,
                "flips": self.flips}


def _configuration(result: EvaluationResult) -> dict[str, str]:
    return {"rubric_version": result.rubric_version, "judge_model": result.judge_model,
            "prompt_version": result.prompt_version or ""}


def _by_conversation(labels: Sequence[StoredLabel]) -> dict[str, list[StoredLabel]]:
    by_conversation: dict[str, list[StoredLabel]] = {}
    for label in labels:
        by_conversation.setdefault(label.conversation_id, []).append(label)
    return by_conversation


def shadow_status(review: ReviewStore, candidate: str | None = None) -> list[ShadowStatus]:
    """Each candidate's figures beside the active configuration's (see the module docstring)."""
    grouped: dict[tuple[str, str], list[tuple[bool, EvaluationResult, EvaluationResult | None]]] = {}
    for name, labelled, shadow, active in review.shadow_verdicts(candidate):
        grouped.setdefault((name, shadow.rubric), []).append((labelled, shadow, active))
    found = []
    for (name, rubric), verdicts in sorted(grouped.items()):
        labels = _by_conversation(review.labels(rubric=rubric))
        candidate_pairs, active_pairs = [], []
        shifts, flips = [], []
        for _, shadow, active in verdicts:
            for label in labels.get(shadow.conversation_id, []):
                candidate_pairs.append((label, shadow))
                if active is not None:
                    active_pairs.append((label, active))
            if active is not None and shadow.outcome != "unscored" and active.outcome != "unscored":
                shifts.append((shadow.score or 0.0) - (active.score or 0.0))
                flips.append(shadow.passed != active.passed)
        actives = [a for _, _, a in verdicts if a is not None]
        found.append(ShadowStatus(
            name, rubric, _configuration(verdicts[-1][1]), _configuration(actives[-1]) if actives else {},
            len(verdicts), sum(1 for lab, _, _ in verdicts if lab),
            agreement(candidate_pairs).get(rubric), agreement(active_pairs).get(rubric),
            sum(shifts) / len(shifts) if shifts else None, sum(flips) / len(flips) if flips else None))
    return found


def pass_fail(found: RubricAgreement | None) -> Measure | None:
    return None if found is None else found.measures.get(("", "pass_fail"))

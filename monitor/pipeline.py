"""The one place that knows the order of the stages: pull → store → assemble → sample → judge → record.

``Pipeline.run_cycle`` runs one cycle and returns a ``CycleReport``. Each stage's failure is isolated: a source
that fails this cycle still lets the conversations already stored be scored; a judge that cannot be reached
leaves its evaluations pending for the next cycle (after ``MAX_JUDGE_ATTEMPTS`` cycles they are recorded as
unscored, so nothing waits forever and nothing is lost).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from monitor.assemble import assemble
from monitor.errors import JudgeError, JudgeUnavailable, SourceError, StoreError
from monitor.evaluators.base import EvaluationContext, Evaluator, JudgeUsage, unscored_result
from monitor.metrics import MonitorMetrics
from monitor.models import Conversation, EvaluationResult, utc_now
from monitor.rubrics.schema import Rubric
from monitor.sampling import is_sampled
from monitor.settings import ConversationSettings, JudgeSettings, SamplingSettings
from monitor.sources.base import TraceSource
from monitor.store.base import PendingConversation, ResultStore, RetentionPolicy
from monitor.store.replicas import replica_id

log = logging.getLogger(__name__)

MAX_JUDGE_ATTEMPTS = 3
"""Cycles in which the judge failed (server errors, timeouts) before an evaluation is recorded as unscored."""


class RubricProvider(Protocol):
    def refresh(self) -> object: ...

    def for_agent(self, agent_name: str | None, agent_id: str | None) -> list[Rubric]: ...


@dataclass
class CycleReport:
    started_at: datetime
    finished_at: datetime | None = None
    spans_read: int = 0
    spans_new: int = 0
    conversations_ready: int = 0
    evaluations: Counter[str] = field(default_factory=Counter)
    """Recorded evaluations by outcome."""
    skipped: Counter[str] = field(default_factory=Counter)
    """Evaluations not made this cycle, by reason."""
    failures: list[str] = field(default_factory=list)
    """One line per failed stage; empty for a clean cycle."""
    stopped_early: bool = False
    judge_calls: int = 0

    @property
    def ok(self) -> bool:
        return not self.failures


@dataclass(frozen=True)
class _Task:
    pending: PendingConversation
    conversation: Conversation
    rubric: Rubric


@dataclass
class Pipeline:
    source: TraceSource
    store: ResultStore
    rubrics: RubricProvider
    evaluators: dict[str, Evaluator]
    context: EvaluationContext
    metrics: MonitorMetrics
    conversation_settings: ConversationSettings
    sampling_settings: SamplingSettings
    judge_settings: JudgeSettings
    completeness_delay: timedelta = timedelta(0)
    """Spans younger than this may not have reached the source yet (App Insights ingestion delay)."""
    stop: threading.Event = field(default_factory=threading.Event)
    """Set on SIGTERM: evaluations in flight finish and are recorded; no new one starts."""
    loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)
    replica: str = field(default_factory=replica_id)
    """This replica's name on the conversations it claims."""
    lease_seconds: float = 120.0
    """How long a claim lasts unless renewed (every third of it while judging)."""
    claim_batch: int = 16
    """Conversations claimed at a time: replicas sharing a backlog each take a batch, judge it, take the next."""
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)
    source_problem: str | None = None
    """Why the source's last read failed (``/readyz``); None once a read succeeds."""

    def run_cycle(self, now: datetime | None = None) -> CycleReport:
        now = now or utc_now()
        report = CycleReport(started_at=now)
        self._refresh_rubrics(report)
        self._pull(report, now)
        budget = self.sampling_settings.max_per_cycle
        try:
            while True:
                claimed, planned = self._judge_batch(report, now, budget)
                budget -= planned
                if not claimed or budget <= 0 or self.stop.is_set():
                    break
        finally:
            # What this cycle claimed but did not finish (judge down, cycle cap, SIGTERM) is free for any replica
            # at once, rather than after the lease.
            self._release_claims(report)
        self._prune(report, now)
        report.finished_at = utc_now()
        return report

    def _judge_batch(self, report: CycleReport, now: datetime, budget: int) -> tuple[int, int]:
        """Claim up to a batch of ready conversations, judge them; returns (claimed, evaluations planned)."""
        try:
            claimed, ready = self._ready(now, max(1, min(self.claim_batch, budget)))
        except StoreError as exc:
            self._note_failure(report, "store", exc)
            return 0, 0
        report.conversations_ready += len(ready)
        try:
            tasks, waiting, deferred = self._plan(ready, report, now, budget)
        except StoreError as exc:
            self._note_failure(report, "store", exc)
            return 0, 0
        if tasks:
            self.loop.run_until_complete(self._judge_all(tasks, waiting, deferred, report, now))
        return claimed, len(tasks)

    # ① pull ------------------------------------------------------------------------------------------------------

    def _pull(self, report: CycleReport, now: datetime) -> None:
        name = self.source.name
        try:
            with self.store.poller_lock(name) as poller:
                if not poller:
                    log.debug("source %s is being read by another replica; this one only judges", name)
                    return
                self._pull_batches(report, now)
            self.source_problem = None
        except SourceError as exc:
            self.source_problem = f"{exc.kind}: {exc}"
            self.metrics.source_errors.labels(name, exc.kind).inc()
            self._note_failure(report, "source", exc)
        except StoreError as exc:
            self._note_failure(report, "store", exc)

    def _pull_batches(self, report: CycleReport, now: datetime) -> None:
        name = self.source.name
        checkpoint = self.store.checkpoint(name)
        for batch in self.source.pull(checkpoint, now):
            stored = self.store.add_spans(name, batch.spans, batch.checkpoint, self.conversation_settings.late_turns)
            report.spans_read += len(batch.spans)
            report.spans_new += stored.new
            self.metrics.spans.labels(name).inc(len(batch.spans))
            self.metrics.source_rows.labels(name).inc(batch.rows)
            for reason, count in batch.rejected.items():
                self.metrics.spans_rejected.labels(name, reason).inc(count)
            if stored.late_ignored:
                log.info("late spans of %d already scored conversation(s) ignored", stored.late_ignored)
            if self.stop.is_set():
                break

    # ②③ assemble and sample ----------------------------------------------------------------------------------

    def _ready(self, now: datetime, limit: int) -> tuple[int, list[tuple[PendingConversation, Conversation]]]:
        """Claim up to ``limit`` ready conversations no other replica holds; returns (claimed, assembled)."""
        horizon = now - self.completeness_delay
        pending = self.store.claim_ready(
            self.replica, self.lease_seconds,
            idle_before=horizon - timedelta(seconds=self.conversation_settings.idle_timeout_seconds),
            started_before=horizon - timedelta(seconds=self.conversation_settings.max_age_seconds),
            # Each ready conversation needs at least one evaluation or is marked scored at once, so a backlog
            # drains at this pace without assembling all of it every cycle.
            limit=limit,
        )
        ready: list[tuple[PendingConversation, Conversation]] = []
        for item in pending:
            try:
                spans = self.store.spans_of(item.key)
                assembly = assemble(spans)
            except StoreError:
                raise
            except Exception:
                # Deterministic: the same spans fail the same way next cycle, so the conversation is set aside
                # (logged, counted) rather than blocking every cycle after it.
                log.exception("conversation %r cannot be assembled; it is skipped", item.key)
                self.metrics.conversations.labels("unreadable").inc()
                self.store.mark_scored(item.key, item.revision)
                continue
            for reason, count in assembly.rejected.items():
                self.metrics.spans_rejected.labels(self.source.name, reason).inc(count)
            conversation = _one_conversation(item.key, assembly.conversations)
            self.metrics.conversations.labels("assembled").inc()
            if conversation.truncated:
                self.metrics.conversations_truncated.labels(self.source.name).inc()
            ready.append((item, conversation))
        return len(pending), ready

    def _plan(
        self, ready: Sequence[tuple[PendingConversation, Conversation]], report: CycleReport, now: datetime,
        cap: int
    ) -> tuple[list[_Task], Counter[str], set[str]]:
        """Sampling, budgets and the per-cycle cap decide which evaluations run now. ``waiting`` counts, per
        conversation key, the evaluations it still needs this cycle; a conversation is marked scored when it
        reaches 0, unless it is in ``deferred`` (the cap left some of its evaluations for a later cycle)."""
        tasks: list[_Task] = []
        waiting: Counter[str] = Counter()
        deferred_keys: set[str] = set()
        for pending, conversation in ready:
            rubrics = self.rubrics.for_agent(conversation.agent_name, conversation.agent_id)
            sampled = deferred = already = 0
            for rubric in rubrics:
                rate = rubric.sampling_rate if rubric.sampling_rate is not None else self.sampling_settings.default_rate
                if not is_sampled(conversation.id, rate):
                    self._skip(report, rubric.name, "sampled_out")
                    continue
                if self.store.has_result(conversation.id, rubric.name, rubric.version or "", pending.revision):
                    already += 1
                    continue
                if self._budget_spent(rubric, now):
                    self._skip(report, rubric.name, "budget_exhausted")
                    continue
                sampled += 1
                if len(tasks) >= cap:
                    deferred += 1
                    self._skip(report, rubric.name, "cycle_cap")
                    continue
                tasks.append(_Task(pending, conversation, rubric))
                waiting[pending.key] += 1
            if sampled:
                self.metrics.conversations.labels("sampled").inc()
            elif already:
                self.metrics.conversations.labels("already_scored").inc()
            else:
                self.metrics.conversations.labels("skipped").inc()
            if deferred:
                deferred_keys.add(pending.key)
            elif not waiting[pending.key]:
                self.store.mark_scored(pending.key, pending.revision)
        return tasks, waiting, deferred_keys

    def _budget_spent(self, rubric: Rubric, now: datetime) -> bool:
        if rubric.daily_budget_tokens is None and rubric.daily_budget_usd is None:
            return False
        tokens, usd = self.store.usage(rubric.name, now.date())
        spent = ((rubric.daily_budget_tokens is not None and tokens >= rubric.daily_budget_tokens)
                 or (rubric.daily_budget_usd is not None and usd >= rubric.daily_budget_usd))
        self._publish_budget(rubric, tokens, usd, spent)
        return spent

    def _publish_budget(self, rubric: Rubric, tokens: int, usd: float, spent: bool) -> None:
        if rubric.daily_budget_tokens is not None:
            self.metrics.budget_remaining_tokens.labels(rubric.name).set(max(0, rubric.daily_budget_tokens - tokens))
        if rubric.daily_budget_usd is not None:
            self.metrics.budget_remaining_usd.labels(rubric.name).set(max(0.0, rubric.daily_budget_usd - usd))
        self.metrics.budget_exhausted.labels(rubric.name).set(1 if spent else 0)

    # ④⑤ judge and record ---------------------------------------------------------------------------------------

    async def _judge_all(self, tasks: list[_Task], waiting: Counter[str], deferred: set[str],
                         report: CycleReport, now: datetime) -> None:
        gate = asyncio.Semaphore(self.judge_settings.concurrency)
        incomplete: set[str] = set(deferred)
        in_flight = {t.pending.key for t in tasks}

        async def run(task: _Task) -> None:
            key = task.pending.key
            async with gate:
                if self.stop.is_set():
                    report.stopped_early = True
                    incomplete.add(key)
                    return
                try:
                    done = await self._judge_one(task, report, now)
                except StoreError as exc:
                    # The verdict may be lost, not doubled: the conversation stays pending and is judged again.
                    self._note_failure(report, "store", exc)
                    done = False
            if not done:
                incomplete.add(key)
            waiting[key] -= 1
            if waiting[key] == 0:
                in_flight.discard(key)
            if waiting[key] == 0 and key not in incomplete:
                try:
                    self.store.mark_scored(key, task.pending.revision)
                    self.metrics.conversations.labels("evaluated").inc()
                except StoreError as exc:
                    self._note_failure(report, "store", exc)

        # Every task runs to its end (none is left on the loop for the next cycle to resume with stale state).
        keeper = asyncio.ensure_future(self._keep_claims(in_flight, report))
        try:
            outcomes = await asyncio.gather(*(run(t) for t in tasks), return_exceptions=True)
        finally:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
        for outcome in outcomes:
            if isinstance(outcome, Exception):
                self._note_failure(report, "evaluate", outcome)

    async def _keep_claims(self, keys: set[str], report: CycleReport) -> None:
        """Renew the leases of the conversations still being judged, so a slow judge never lets another replica
        take over a conversation this one is about to record."""
        while True:
            await asyncio.sleep(self.lease_seconds / 3)
            if keys:
                try:
                    self.store.renew_claims(self.replica, sorted(keys), self.lease_seconds)
                except StoreError as exc:
                    self._note_failure(report, "store", exc)

    async def _judge_one(self, task: _Task, report: CycleReport, now: datetime) -> bool:
        """Evaluate and record one (conversation, rubric); False when it must be tried again next cycle."""
        rubric, conversation = task.rubric, task.conversation
        evaluator = self.evaluators.get(rubric.kind)
        if evaluator is None:
            self._skip(report, rubric.name, "no_evaluator")
            return True
        if self._budget_spent(rubric, now):
            # Checked again here: evaluations earlier in this cycle may have spent it.
            self._skip(report, rubric.name, "budget_exhausted")
            return True
        try:
            results = await evaluator.evaluate(conversation, rubric, self.context)
        except JudgeUnavailable as exc:
            # 5xx or timeouts past the transport's retries: possibly this conversation's fault (too long for the
            # endpoint), so after MAX_JUDGE_ATTEMPTS cycles it is recorded unscored rather than retried forever.
            given_up = self._give_up_after_attempts(task, report, "judge_unavailable", "judge", exc,
                                                    f"judge_error: {type(exc).outcome}: {exc}")
            if given_up is None:
                return False
            results = given_up
        except JudgeError as exc:
            # A refused credential, a spent quota, a misconfigured endpoint: not the conversation's fault, so it
            # waits, however long that lasts.
            self._skip(report, rubric.name, "judge_unavailable")
            self._note_failure(report, "judge", exc)
            return False
        except Exception as exc:
            # A bug or a reply no validator anticipated: one bad evaluation must not stop the others, nor be
            # retried forever.
            log.exception("evaluating conversation %r with rubric %r failed", conversation.id, rubric.name)
            given_up = self._give_up_after_attempts(task, report, "evaluator_error", "evaluate", exc,
                                                    f"evaluator_error: {type(exc).__name__}: {exc}")
            if given_up is None:
                return False
            results = given_up
        for result in results:
            self._record(result.model_copy(update={"revision": task.pending.revision}), report, now)
        return True

    def _give_up_after_attempts(
        self, task: _Task, report: CycleReport, reason: str, stage: str, exc: Exception, problem: str
    ) -> list[EvaluationResult] | None:
        """None while the evaluation may be tried again next cycle; after ``MAX_JUDGE_ATTEMPTS`` cycles, the
        unscored result that records why it never got a verdict."""
        attempts = self.store.record_failure(task.pending.key, task.rubric.name, task.pending.revision)
        if attempts < MAX_JUDGE_ATTEMPTS:
            self._skip(report, task.rubric.name, reason)
            self._note_failure(report, stage, exc)
            return None
        return [unscored_result(task.conversation, task.rubric, self.context, None, JudgeUsage(), problem,
                                f"Unscored: {problem}")]

    def _record(self, result: EvaluationResult, report: CycleReport, now: datetime) -> None:
        report.judge_calls += result.judge_calls
        if not self.store.record(result):
            self.metrics.conversations.labels("already_scored").inc()
            return
        report.evaluations[result.outcome] += 1
        self.metrics.record_result(result)

    # housekeeping ----------------------------------------------------------------------------------------------

    def _refresh_rubrics(self, report: CycleReport) -> None:
        try:
            self.rubrics.refresh()
        except Exception as exc:
            self._note_failure(report, "rubrics", exc)

    def _release_claims(self, report: CycleReport) -> None:
        try:
            self.store.release_claims(self.replica)
        except StoreError as exc:
            self._note_failure(report, "store", exc)

    def _prune(self, report: CycleReport, now: datetime) -> None:
        try:
            self.store.prune(now - timedelta(days=self.conversation_settings.retention_days))
            removed = self.store.retain(now, self.retention)
            if removed:
                log.info("retention: removed %s", ", ".join(f"{n} {table}" for table, n in sorted(removed.items())))
        except StoreError as exc:
            self._note_failure(report, "store", exc)

    def _skip(self, report: CycleReport, rubric: str, reason: str) -> None:
        report.skipped[reason] += 1
        self.metrics.skipped.labels(rubric, reason).inc()

    def _note_failure(self, report: CycleReport, stage: str, exc: Exception) -> None:
        line = f"{stage}: {type(exc).__name__}: {exc}"
        if line not in report.failures:
            log.warning("%s", line)
            report.failures.append(line)
            self.metrics.stage_failures.labels(stage).inc()

    def close(self) -> None:
        self.loop.run_until_complete(self.context.judge.aclose())
        self.loop.close()


def _one_conversation(key: str, conversations: Sequence[Conversation]) -> Conversation:
    """The store groups spans by the same rule as the assembler, so one key gives one conversation; should the
    assembler still split them, the parts are joined in time order rather than scored as fragments."""
    if not conversations:
        return Conversation(id=key)
    if len(conversations) == 1:
        return conversations[0].model_copy(update={"id": key})
    ordered = sorted(conversations, key=lambda c: c.started_at or utc_now())
    first = ordered[0]
    return first.model_copy(update={
        "id": key,
        "trace_ids": tuple(t for c in ordered for t in c.trace_ids),
        "messages": tuple(m for c in ordered for m in c.messages),
        "input_tokens": sum(c.input_tokens for c in ordered),
        "output_tokens": sum(c.output_tokens for c in ordered),
        "span_count": sum(c.span_count for c in ordered),
        "truncated": any(c.truncated for c in ordered),
        "last_activity_at": ordered[-1].last_activity_at,
    })


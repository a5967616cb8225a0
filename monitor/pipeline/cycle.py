"""The scoring stages of a cycle, in order: pull → store → assemble → sample → judge → record → prune.

``Pipeline.run_cycle`` runs them and returns a ``CycleReport``; ``monitor.pipeline.steps.Cycle`` runs the steps
that follow them (canaries, gauges, write-back, health, alerts). Each stage's failure is isolated: a source
that fails this cycle still lets the conversations already stored be scored; a judge that cannot be reached
leaves its evaluations pending for the next cycle (after ``MAX_JUDGE_ATTEMPTS`` cycles they are recorded as
unscored, so nothing waits forever and nothing is lost).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import Counter, deque
from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Protocol

from monitor.assemble import assemble
from monitor.errors import JudgeError, JudgeUnavailable, SourceError, StoreError
from monitor.evaluators.base import EvaluationContext, Evaluator, JudgeUsage, unscored_result
from monitor.evaluators.views import expected_turns
from monitor.formats.conventions import content_switch
from monitor.metrics import MonitorMetrics
from monitor.models import Conversation, EvaluationResult, SpanRecord, utc_now
from monitor.pipeline.budget import BudgetGate
from monitor.rubrics.schema import Rubric
from monitor.sampling import is_sampled
from monitor.settings import ConversationSettings, JudgeSettings, SamplingSettings
from monitor.sources.base import TraceSource
from monitor.store.base import PendingConversation, ResultStore, RetentionPolicy
from monitor.store.replicas import replica_id

log = logging.getLogger("monitor.pipeline")  # one name for the progress lines of every stage of the cycle

MAX_JUDGE_ATTEMPTS = 3
"""Cycles in which the judge failed (server errors, timeouts) before an evaluation is recorded as unscored."""
STOP_POLL_SECONDS = 0.1
READY_PAGE = 500
"""Ready conversations fetched from the store at a time while planning a cycle."""
FUTURE_TOLERANCE = timedelta(minutes=1)
"""Spans dated later than now plus this are future-dated (clock skew beyond the usual)."""
CONTENT_SAMPLE = 200
CONTENT_SAMPLE_MIN = 10
"""``/healthz`` looks at the last ``CONTENT_SAMPLE`` conversations (once it has seen this many) for content."""


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
    read_through: datetime | None = None
    """The ``read_through`` of the last batch stored that carried one."""
    duration_seconds: float = 0.0
    """Wall time of the scoring stages (set by ``Cycle.run``)."""
    behind: bool = False
    """The cycle stopped before the backlog ran out (spans read per cycle, or evaluations per cycle): the
    daemon starts the next cycle at once instead of waiting for the interval."""

    @property
    def ok(self) -> bool:
        return not self.failures


@dataclass(frozen=True)
class _Task:
    pending: PendingConversation
    conversation: Conversation
    rubric: Rubric
    done_turns: frozenset[int] = frozenset()
    """Turns recorded before a crash cut this evaluation short."""


CATCH_UP_POLL_SECONDS = 0.05
EAGER_PLAN = 32
"""Evaluations planned before the first judge call may start (at most one claim batch: replicas must share a
backlog): a small cycle is planned whole, so its progress lines count against the real total; beyond it, judging
overlaps the reading of the backlog."""


@dataclass
class _Judging:
    """The evaluations of one cycle in progress."""

    gate: asyncio.Semaphore
    """At most ``judge.concurrency`` evaluations at once."""
    waiting: Counter[str] = field(default_factory=Counter)
    """Per conversation key, its evaluations not finished yet."""
    incomplete: set[str] = field(default_factory=set)
    """Conversations not to mark scored this cycle: an evaluation failed, was deferred by the cap or stopped."""
    planned: int = 0
    started: int = 0
    finished: int = 0


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
    """Set on SIGTERM: no new evaluation starts; those in flight finish and are recorded, or are abandoned after
    ``shutdown_grace_seconds``."""
    loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)
    max_spans_per_cycle: int | None = None
    """A cycle stops reading the source after this many spans (whole batches) and judges what is ready."""
    shutdown_grace_seconds: float = 20.0
    """After ``stop`` is set, judge calls in flight get this long; then they are abandoned, their evaluations
    left pending (neither recorded nor lost)."""
    _content_seen: deque[bool] = field(default_factory=lambda: deque(maxlen=CONTENT_SAMPLE))
    _empty_scopes: deque[tuple[str, ...]] = field(default_factory=lambda: deque(maxlen=CONTENT_SAMPLE))
    """Instrumentation scopes of the recent conversations without content: whose switch the hint names."""
    _judge_failing: str | None = None
    replica: str = field(default_factory=replica_id)
    """This replica's name on the conversations it claims."""
    lease_seconds: float = 120.0
    """How long a claim lasts unless renewed (every third of it while judging)."""
    claim_batch: int = 16
    """Conversations claimed at a time: replicas sharing a backlog each take a batch, judge it, take the next."""
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)
    source_problem: str | None = None
    """Why the source's last read failed (``/readyz``); None once a read succeeds."""
    budget: BudgetGate | None = None
    """Each rubric's daily judge budget; built from the store and metrics when not given."""
    gate: BudgetGate = field(init=False, repr=False)
    """The budget in force (``budget`` or the one built), shared with the drift canaries."""
    _page_left: int = field(default=0, init=False, repr=False)
    """Conversations of the claimed page not yet handed to planning (0: the next one claims a new page)."""

    def __post_init__(self) -> None:
        self.gate = self.budget or BudgetGate(self.store, self.metrics)

    def run_cycle(self, now: datetime | None = None) -> CycleReport:
        """The scoring stages of one cycle (``Cycle.run`` adds the steps after them)."""
        now = now or utc_now()
        report = CycleReport(started_at=now)
        self._refresh_rubrics(report)
        self._pull(report, now)
        try:
            self.loop.run_until_complete(self._plan_and_judge(report, now))
        finally:
            # What this cycle claimed but did not finish (judge down, cycle cap, SIGTERM) is free for any replica
            # at once, rather than after the lease.
            self._release_claims(report)
        self._prune(report, now)
        self._export_backlog(now)
        report.finished_at = utc_now()
        return report

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
            if batch.read_through is not None:
                report.read_through = batch.read_through
                self.store.save_read_through(name, batch.read_through)
            self.metrics.spans.labels(name).inc(len(batch.spans))
            self.metrics.source_rows.labels(name).inc(batch.rows)
            for reason, count in batch.rejected.items():
                self.metrics.spans_rejected.labels(name, reason).inc(count)
            if stored.late_ignored:
                log.info("late spans of %d already scored conversation(s) ignored", stored.late_ignored)
            self._note_future(batch.spans, now)
            if self.stop.is_set():
                report.stopped_early = True
                break
            if (self.max_spans_per_cycle is not None and report.spans_read >= self.max_spans_per_cycle
                    and batch.checkpoint != checkpoint):
                # Judging starts on what is read so far (readiness stops at the source's read position);
                # the next cycle, started at once, reads on. Never before the position moved: a re-read
                # overlap alone must not use up the bound, or reading would make no progress.
                report.behind = True
                break

    def _note_future(self, spans: Sequence[SpanRecord], now: datetime) -> None:
        """Spans dated ahead of our clock (a skewed clock at the agent, or a bad timestamp) wait until that time
        comes before their conversation can become ready: say so rather than wait in silence."""
        ahead = now + FUTURE_TOLERANCE
        future = {span.conversation_id or span.trace_id: span.start_time for span in spans if span.start_time > ahead}
        if not future:
            return
        self.metrics.conversations.labels("future_dated").inc(len(future))
        key, moment = max(future.items(), key=lambda item: item[1])
        log.warning("%d conversation(s) have spans dated in the future (up to %r at %s, %s ahead of now); they "
                    "wait until then to be scored: check the clock of the instrumented service",
                    len(future), key, moment.isoformat(), moment - now)

    # ②③ assemble and sample ----------------------------------------------------------------------------------

    def _ready(self, now: datetime, report: CycleReport) -> Iterator[tuple[PendingConversation, Conversation]]:
        """Ready conversations, oldest first, claimed for this replica (``claim_batch`` at a time: never one that
        another replica holds, nor one already taken this cycle) and assembled as planning asks for them.

        Ready means idle (or old) enough by the earlier of the ingestion horizon and what the source has read
        in full: a conversation whose later spans sit behind a failed or unfinished read is not ready yet.
        """
        # Another replica may be the one reading the source: what it has read in full is in the store.
        positions = (self.source.read_through(), report.read_through, self.store.read_through(self.source.name))
        read_through = max((t for t in positions if t is not None), default=None)
        if read_through is None:
            return  # no read of the source has completed yet: any conversation may still be missing spans
        horizon = min(now - self.completeness_delay, read_through)
        idle_before = horizon - timedelta(seconds=self.conversation_settings.idle_timeout_seconds)
        started_before = horizon - timedelta(seconds=self.conversation_settings.max_age_seconds)
        seen: set[str] = set()
        while True:
            page = self.store.claim_ready(self.replica, self.lease_seconds, idle_before=idle_before,
                                          started_before=started_before, limit=self.claim_batch)
            self._page_left = len(page)
            for item in page:
                self._page_left -= 1
                if item.key in seen:
                    continue
                seen.add(item.key)
                report.conversations_ready += 1
                conversation = self._assemble(item)
                if conversation is not None:
                    yield item, conversation
            if len(page) < self.claim_batch:
                return

    def _assemble(self, item: PendingConversation) -> Conversation | None:
        spans = self.store.spans_of(item.key)
        try:
            assembly = assemble(spans, key=item.key)
        except Exception:
            # Deterministic: the same spans fail the same way next cycle, so the conversation is set aside
            # (logged, counted) rather than blocking every cycle after it.
            log.exception("conversation %r cannot be assembled; it is skipped", item.key)
            self.metrics.conversations.labels("unreadable").inc()
            self.store.mark_scored(item.key, item.revision)
            return None
        for reason, count in assembly.rejected.items():
            self.metrics.spans_rejected.labels(self.source.name, reason).inc(count)
        conversation = _one_conversation(item.key, assembly.conversations)
        self.metrics.conversations.labels("assembled").inc()
        if conversation.truncated:
            self.metrics.conversations_truncated.labels(self.source.name).inc()
        return conversation

    def _plan(
        self, ready: Iterable[tuple[PendingConversation, Conversation]], report: CycleReport, now: datetime,
        judging: _Judging,
    ) -> Generator[list[_Task], None, None]:
        """Sampling, budgets and the per-cycle cap decide which evaluations run now; yields each conversation's
        evaluations as soon as it is planned. ``judging.waiting`` counts, per conversation key, the evaluations
        it still needs this cycle; a conversation is marked scored when it reaches 0, unless it is in
        ``judging.incomplete`` (the cap left some of its evaluations for a later cycle).

        Only evaluations count against ``max_per_cycle``: a conversation no rubric samples (or with nothing to
        judge) is marked scored at once and costs no judge capacity, so planning reads on until the cap is
        filled or no ready conversation is left."""
        # Conversations with nothing to judge are marked scored a page at a time: one transaction, not one each.
        done: list[tuple[str, int]] = []
        try:
            yield from self._plan_each(ready, report, now, judging, done)
        finally:
            if done:
                self.store.mark_scored_many(done)

    def _plan_each(self, ready: Iterable[tuple[PendingConversation, Conversation]], report: CycleReport,
                   now: datetime, judging: _Judging, done: list[tuple[str, int]]
                   ) -> Generator[list[_Task], None, None]:
        cap = self.sampling_settings.max_per_cycle
        planned = 0
        for pending, conversation in ready:
            if len(done) >= READY_PAGE:
                self.store.mark_scored_many(done)
                done.clear()
            rubrics = self.rubrics.for_agent(conversation.agent_name, conversation.agent_id)
            self._note_content(conversation)
            if rubrics and not conversation.has_content:
                # Content capture is off at the source: a verdict on an empty transcript would be made up.
                for rubric in rubrics:
                    self._skip(report, rubric.name, "no_content")
                self.metrics.conversations.labels("no_content").inc()
                done.append((pending.key, pending.revision))
                continue
            sampled = deferred = already = 0
            tasks: list[_Task] = []
            for rubric in rubrics:
                rate = rubric.sampling_rate if rubric.sampling_rate is not None else self.sampling_settings.default_rate
                if not is_sampled(conversation.id, rate):
                    self._skip(report, rubric.name, "sampled_out")
                    continue
                recorded = self.store.recorded_turns(conversation.id, rubric.name, rubric.version or "",
                                                     pending.revision)
                expected = expected_turns(conversation, rubric)
                # -1 alone is a verdict on the whole evaluation (a turn-level one the judge gave up on).
                if recorded and (expected is None or -1 in recorded or recorded >= expected):
                    already += 1
                    continue
                if self.gate.spent(rubric, now):
                    self._skip(report, rubric.name, "budget_exhausted")
                    continue
                sampled += 1
                if planned >= cap:
                    deferred += 1
                    self._skip(report, rubric.name, "cycle_cap")
                    continue
                tasks.append(_Task(pending, conversation, rubric, frozenset(recorded)))
                planned += 1
                judging.waiting[pending.key] += 1
            if sampled:
                self.metrics.conversations.labels("sampled").inc()
            elif already:
                self.metrics.conversations.labels("already_scored").inc()
            else:
                self.metrics.conversations.labels("skipped").inc()
            if deferred:
                judging.incomplete.add(pending.key)
            elif not tasks:
                done.append((pending.key, pending.revision))
            if tasks:
                yield tasks
            if planned >= cap and sampled:
                # The cycle's judge capacity is taken: the rest of the backlog waits for the next cycle, which
                # the daemon starts at once.
                report.behind = True
                return

    def judge_problem(self) -> str | None:
        """For ``/healthz``: the judge's last call failed (5xx, timeouts past its retries) and none has succeeded
        since, even when the failed evaluations were recorded unscored and a cycle had nothing left to judge."""
        if self._judge_failing is None:
            return None
        return f"unreachable since its last call failed ({self._judge_failing}); evaluations wait"

    def _note_content(self, conversation: Conversation) -> None:
        self._content_seen.append(conversation.has_content)
        if not conversation.has_content:
            self._empty_scopes.append(conversation.scopes)

    def content_problem(self) -> str | None:
        """For ``/healthz``: most recent conversations of the source carry no message content."""
        seen = list(self._content_seen)
        empty = seen.count(False)
        if len(seen) < CONTENT_SAMPLE_MIN or empty * 2 <= len(seen):
            return None
        switches = content_switch(list(dict.fromkeys(s for scopes in self._empty_scopes for s in scopes)))
        advice = "; ".join(switches) if switches else (
            "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only (opentelemetry-util-genai 1.x; "
            "=true for 0.x) for the OpenTelemetry GenAI instrumentations, "
            "AZURE_TRACING_GEN_AI_CONTENT_RECORDING_ENABLED=true for the Azure AI / Foundry SDKs, "
            "enable_sensitive_data for Agent Framework, TRACELOOP_TRACE_CONTENT=true for OpenLLMetry")
        return (f"{empty} of the last {len(seen)} conversations read from source {self.source.name} carry no "
                "message content, so they are not judged (skipped: no_content). Turn content capture on in "
                f"the instrumented agents ({advice}); see docs/producers.md")

    def _export_backlog(self, now: datetime) -> None:
        horizon = now - self.completeness_delay
        try:
            backlog = self.store.backlog(
                idle_before=horizon - timedelta(seconds=self.conversation_settings.idle_timeout_seconds),
                started_before=horizon - timedelta(seconds=self.conversation_settings.max_age_seconds),
                future_after=now + FUTURE_TOLERANCE,
            )
        except StoreError as exc:
            log.warning("backlog gauges not updated: %s", exc)
            return
        name = self.source.name
        self.metrics.backlog.conversations.labels(name).set(backlog.ready)
        oldest = 0.0 if backlog.oldest is None else max(0.0, (now - backlog.oldest).total_seconds())
        self.metrics.backlog.oldest_age.labels(name).set(oldest)
        self.metrics.backlog.future.labels(name).set(backlog.future)

    # ④⑤ judge and record ---------------------------------------------------------------------------------------

    async def _plan_and_judge(self, report: CycleReport, now: datetime) -> None:
        """Each conversation's evaluations start as soon as it is planned, while the next conversations are read
        and assembled: the judge's latency hides that work, and a backlog drains at the judge's pace."""
        judging = _Judging(asyncio.Semaphore(self.judge_settings.concurrency))
        running: list[asyncio.Future[None]] = []
        watcher = asyncio.ensure_future(self._abandon_after_grace(running, report))
        keeper = asyncio.ensure_future(self._keep_claims(judging.waiting, report))
        plan = self._plan(self._ready(now, report), report, now, judging)
        try:
            for tasks in plan:
                running.extend(asyncio.ensure_future(self._run(task, judging, report, now)) for task in tasks)
                judging.planned += len(tasks)
                if judging.planned >= min(EAGER_PLAN, self.claim_batch):
                    await asyncio.sleep(0)  # let the calls in flight progress between two conversations
                # Claim the next page only once the judge has caught up: a replica holds about as many claims as it
                # works on, so replicas share a backlog (the claims of a page in hand are renewed as they are judged).
                while (self._page_left == 0 and judging.planned - judging.finished >= self.claim_batch
                       and not self.stop.is_set()):
                    await asyncio.sleep(CATCH_UP_POLL_SECONDS)
                if self.stop.is_set():
                    report.stopped_early = True
                    break
        except StoreError as exc:
            self._note_failure(report, "store", exc)
        finally:
            plan.close()
        # Every evaluation runs to its end (none is left on the loop for the next cycle to resume with stale
        # state), unless a stop outlasts the grace period: then the calls in flight are cancelled.
        try:
            outcomes = await asyncio.gather(*running, return_exceptions=True)
        finally:
            watcher.cancel()
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
        for outcome in outcomes:
            if isinstance(outcome, Exception):
                self._note_failure(report, "evaluate", outcome)

    async def _keep_claims(self, waiting: Counter[str], report: CycleReport) -> None:
        """Renew the leases of the conversations still being judged, so a slow judge never lets another replica
        take over a conversation this one is about to record."""
        while True:
            await asyncio.sleep(self.lease_seconds / 3)
            keys = sorted(key for key, count in waiting.items() if count > 0)
            if keys:
                try:
                    self.store.renew_claims(self.replica, keys, self.lease_seconds)
                except StoreError as exc:
                    self._note_failure(report, "store", exc)

    async def _run(self, task: _Task, judging: _Judging, report: CycleReport, now: datetime) -> None:
        try:
            await self._run_one(task, judging, report, now)
        finally:
            judging.finished += 1

    async def _run_one(self, task: _Task, judging: _Judging, report: CycleReport, now: datetime) -> None:
        key = task.pending.key
        async with judging.gate:
            if self.stop.is_set():
                report.stopped_early = True
                judging.incomplete.add(key)
                return
            judging.started += 1
            # One line per evaluation: on a slow judge (the embedded model on a CPU) it shows the work moving.
            log.info("judging %d/%d: conversation %s, rubric %s", judging.started, judging.planned,
                     task.conversation.id, task.rubric.name)
            try:
                done = await self._judge_one(task, report, now)
            except StoreError as exc:
                # The verdict may be lost, not doubled: the conversation stays pending and is judged again.
                self._note_failure(report, "store", exc)
                done = False
        if not done:
            judging.incomplete.add(key)
        judging.waiting[key] -= 1
        if judging.waiting[key] == 0 and key not in judging.incomplete:
            try:
                self.store.mark_scored(key, task.pending.revision)
                self.metrics.conversations.labels("evaluated").inc()
            except StoreError as exc:
                self._note_failure(report, "store", exc)

    async def _abandon_after_grace(self, running: Sequence[asyncio.Future[None]], report: CycleReport) -> None:
        """Once ``stop`` is set, wait ``shutdown_grace_seconds`` for the calls in flight, then cancel them. A
        cancelled evaluation records nothing and its conversation is not marked scored: it stays pending and
        the next start judges it (a turn-level one from the turns it had left)."""
        while not self.stop.is_set():
            await asyncio.sleep(STOP_POLL_SECONDS)
        _, pending = await asyncio.wait(running, timeout=self.shutdown_grace_seconds)
        if pending:
            log.warning("stopping: %d evaluation(s) still unfinished after %gs (shutdown_grace_seconds) are "
                        "abandoned with their judge calls; they stay pending", len(pending),
                        self.shutdown_grace_seconds)
            report.stopped_early = True
            for future in pending:
                future.cancel()

    async def _judge_one(self, task: _Task, report: CycleReport, now: datetime) -> bool:
        """Evaluate and record one (conversation, rubric); False when it must be tried again next cycle."""
        rubric, conversation = task.rubric, task.conversation
        evaluator = self.evaluators.get(rubric.kind)
        if evaluator is None:
            self._skip(report, rubric.name, "no_evaluator")
            return True
        if self.gate.spent(rubric, now):
            # Checked again here: evaluations earlier in this cycle may have spent it.
            self._skip(report, rubric.name, "budget_exhausted")
            return True
        try:
            context = replace(self.context, done_turns=task.done_turns) if task.done_turns else self.context
            results = await evaluator.evaluate(conversation, rubric, context)
            if any(result.judge_calls for result in results):
                self._judge_failing = None  # the judge answered
        except JudgeUnavailable as exc:
            self._judge_failing = f"{type(exc).__name__}: {exc}"
            # 5xx or timeouts past the transport's retries: possibly this conversation's fault (too long for the
            # endpoint), so after MAX_JUDGE_ATTEMPTS cycles it is recorded unscored rather than retried forever.
            given_up = self._give_up_after_attempts(task, report, "judge_unavailable", "judge", exc,
                                                    self._failure(f"judge_error: {type(exc).outcome}", exc))
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
                                                    self._failure(f"evaluator_error: {type(exc).__name__}", exc))
            if given_up is None:
                return False
            results = given_up
        for result in results:
            self._record(result.model_copy(update={"revision": task.pending.revision}), report, now)
        return True

    def _failure(self, head: str, exc: Exception) -> str:
        """Why an attempt failed, as stored (the failure log, the unscored result): with ``store.store_content``
        off only its kind, since an endpoint's error message may echo the prompt, conversation text included."""
        return f"{head}: {exc}" if self.context.store_content else head

    def _give_up_after_attempts(
        self, task: _Task, report: CycleReport, reason: str, stage: str, exc: Exception, problem: str
    ) -> list[EvaluationResult] | None:
        """None while the evaluation may be tried again next cycle; after ``MAX_JUDGE_ATTEMPTS`` cycles, the
        unscored result that records why it never got a verdict: the prompt last sent, every attempt's error,
        and the judge calls made over all attempts."""
        calls = exc.calls if isinstance(exc, JudgeError) else 0
        key, rubric = task.pending.key, task.rubric
        attempts = self.store.record_failure(key, rubric.name, task.pending.revision, problem, calls)
        if attempts < MAX_JUDGE_ATTEMPTS:
            self._skip(report, rubric.name, reason)
            self._note_failure(report, stage, exc)
            return None
        if isinstance(exc, JudgeUnavailable):
            # Recorded, but the judge is still unreachable: the cycle stays failed, so /healthz and
            # rubric_monitor_health stay degraded for as long as every call fails.
            self._note_failure(report, stage, exc)
        trail = self.store.failed_attempts(key, rubric.name, task.pending.revision)
        usage = JudgeUsage(calls=sum(a.calls for a in trail))
        if isinstance(exc, JudgeError) and exc.prompt is not None:
            usage.prompts.append(exc.prompt)
        result = unscored_result(task.conversation, rubric, self.context, None, usage, problem,
                                 f"Unscored: {problem}")
        errors = [{"at": a.at.isoformat(), "error": a.error, "judge_calls": a.calls} for a in trail]
        return [result.model_copy(update={"details": {**result.details, "attempts": errors}})]

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
        # Evaluators that hold connections of their own (an evaluator service, media hosts) release them too.
        for evaluator in {id(e): e for e in self.evaluators.values()}.values():
            release = getattr(evaluator, "aclose", None)
            if release is not None:
                self.loop.run_until_complete(release())
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


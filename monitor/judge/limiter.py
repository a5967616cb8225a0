"""Client-side request and token rate limiter for judge calls: run at the quota, not past it.

Providers enforce per-minute quotas over sub-minute slices (OpenAI documents that 60,000 RPM may be enforced
as 1,000 requests per second), so a burst of a minute's worth of requests would be refused even while "under"
the quota. Requests are therefore evenly spaced (a token bucket holding one request), and tokens flow through
a bucket holding one second's worth. A call larger than the token bucket is let through when the bucket is
full and leaves it in debt, so big prompts are slowed down rather than blocked forever.

Tokens are estimated before a call and corrected with the usage the endpoint reports (``settle``). A 429 or
an exhausted ``x-ratelimit-remaining-*`` header pauses every caller (``pause_for``), not just the one that saw
it, so concurrent calls do not storm a throttled endpoint.

The logic is synchronous and takes its time from an injectable ``clock``; only ``acquire`` awaits, through an
injectable ``sleep``, so unit tests run on a fake clock.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]

_SECONDS_PER_MINUTE = 60.0
_TOKEN_BURST_SECONDS = 1.0


@dataclass
class _Bucket:
    """A token bucket that may go into debt: a cost above ``capacity`` is allowed once the bucket is full."""

    rate: float
    """Units added per second."""
    capacity: float
    level: float
    updated: float

    def refill(self, now: float) -> None:
        if now > self.updated:
            self.level = min(self.capacity, self.level + (now - self.updated) * self.rate)
            self.updated = now

    def wait_for(self, cost: float) -> float:
        needed = min(cost, self.capacity)
        return 0.0 if self.level >= needed else (needed - self.level) / self.rate

    def adjust(self, delta: float) -> None:
        """Take ``delta`` units (give back when negative), never holding more than the capacity."""
        self.level = min(self.capacity, self.level - delta)


@dataclass(frozen=True)
class Permit:
    """What one admitted call was charged, so it can be corrected once its real usage is known."""

    estimated_tokens: int
    waited_seconds: float


class RateLimiter:
    """Admit calls at no more than ``requests_per_minute`` and ``tokens_per_minute`` (None: no limit).

    ``acquire`` admits callers one at a time in arrival order, so a queue of waiting calls leaves evenly
    spaced.
    """

    def __init__(
        self,
        requests_per_minute: float | None,
        tokens_per_minute: float | None,
        *,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        limits = (("requests_per_minute", requests_per_minute), ("tokens_per_minute", tokens_per_minute))
        for name, value in limits:
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive or None, got: {value}")
        self._clock = clock
        self._sleep = sleep
        now = clock()
        self._requests = self._bucket(requests_per_minute, 1.0, now)
        tokens_capacity = None if tokens_per_minute is None else tokens_per_minute / _SECONDS_PER_MINUTE
        self._tokens = self._bucket(tokens_per_minute, tokens_capacity, now)
        self._paused_until = now
        self._lock = asyncio.Lock()

    @staticmethod
    def _bucket(per_minute: float | None, capacity: float | None, now: float) -> _Bucket | None:
        if per_minute is None or capacity is None:
            return None
        rate = per_minute / _SECONDS_PER_MINUTE
        return _Bucket(rate=rate, capacity=max(capacity, 1.0), level=max(capacity, 1.0), updated=now)

    @property
    def paused_until(self) -> float:
        """Clock time before which no call is admitted (a 429's Retry-After, an exhausted quota header)."""
        return self._paused_until

    def pause_for(self, seconds: float) -> None:
        """Admit nothing for ``seconds`` from now; an earlier, shorter pause never shortens a longer one."""
        self._paused_until = max(self._paused_until, self._clock() + max(0.0, seconds))

    def wait_time(self, estimated_tokens: int) -> float:
        """Seconds a call of ``estimated_tokens`` would have to wait if it asked now (0 when it may go)."""
        now = self._clock()
        waits = [self._paused_until - now, 0.0]
        if self._requests is not None:
            self._requests.refill(now)
            waits.append(self._requests.wait_for(1.0))
        if self._tokens is not None:
            self._tokens.refill(now)
            waits.append(self._tokens.wait_for(float(estimated_tokens)))
        return max(waits)

    def try_acquire(self, estimated_tokens: int) -> float:
        """Admit the call now and return 0, or return how long to wait before asking again."""
        wait = self.wait_time(estimated_tokens)
        if wait > 0:
            return wait
        if self._requests is not None:
            self._requests.adjust(1.0)
        if self._tokens is not None:
            self._tokens.adjust(float(estimated_tokens))
        return 0.0

    async def acquire(self, estimated_tokens: int) -> Permit:
        """Wait until the call may go, then charge it; waiting callers are admitted in arrival order."""
        started = self._clock()
        async with self._lock:
            # Re-checked after every sleep: a 429 seen meanwhile may have extended the pause.
            while (wait := self.try_acquire(estimated_tokens)) > 0:
                await self._sleep(wait)
        return Permit(estimated_tokens=estimated_tokens, waited_seconds=max(0.0, self._clock() - started))

    def settle(self, permit: Permit, actual_tokens: int) -> None:
        """Correct the token charge of an admitted call with the usage the endpoint reported."""
        if self._tokens is not None:
            self._tokens.refill(self._clock())
            self._tokens.adjust(float(actual_tokens - permit.estimated_tokens))

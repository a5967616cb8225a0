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
_ROUNDING = 1e-9
"""Units a bucket may lack and still admit: refills computed in floating point land a hair short."""


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
        return 0.0 if self.level + _ROUNDING >= needed else (needed - self.level) / self.rate

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

    def set_request_limit(self, requests_per_minute: float) -> None:
        """Change the request rate (an endpoint announced its quota); spacing changes from the next call."""
        self._requests = self._resized(self._requests, requests_per_minute, 1.0)

    def set_token_limit(self, tokens_per_minute: float) -> None:
        self._tokens = self._resized(self._tokens, tokens_per_minute, tokens_per_minute / _SECONDS_PER_MINUTE)

    def _resized(self, bucket: _Bucket | None, per_minute: float, capacity: float) -> _Bucket | None:
        now = self._clock()
        resized = self._bucket(per_minute, capacity, now)
        if bucket is not None and resized is not None:
            bucket.refill(now)
            resized.level = min(resized.capacity, bucket.level)
        return resized

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


class AdaptiveRequestRate:
    """A request rate for endpoints that announce no quota and answer only 429 (bare gateways, some Azure
    deployments): additive-increase / multiplicative-decrease, as TCP does for congestion.

    Until a 429 arrives there is no limit. The first 429 after some calls succeeded starts pacing at the rate
    they were accepted at (over at most ``window`` seconds, at least one); every further 429 (at most one per
    ``cooldown``, as one burst brings several) cuts the rate by ``decrease``; every success raises it by
    ``increase`` of itself. Too high a start is cut within seconds, so the rate settles just under the
    endpoint's quota with an occasional 429 instead of a storm of them.
    """

    def __init__(self, *, clock: Clock = time.monotonic, window: float = 5.0, decrease: float = 0.7,
                 increase: float = 0.01, cooldown: float = 1.0, floor_per_minute: float = 6.0) -> None:
        self._clock = clock
        self._window = window
        self._decrease = decrease
        self._increase = increase
        self._cooldown = cooldown
        self._floor = floor_per_minute
        self._successes: list[float] = []
        self._last_decrease = float("-inf")
        self.requests_per_minute: float | None = None

    def record_success(self) -> float | None:
        """Note an accepted call; returns the new rate once pacing has started."""
        now = self._clock()
        self._successes.append(now)
        cutoff = now - self._window
        if self._successes[0] < cutoff:
            self._successes = [t for t in self._successes if t >= cutoff]
        if self.requests_per_minute is not None:
            # Grow only while calls keep up with the rate: hours of light load must not grow it without bound.
            accepted = self._accepted_per_minute(now)
            grown = self.requests_per_minute * (1.0 + self._increase)
            self.requests_per_minute = min(grown, max(self.requests_per_minute, 2.0 * accepted))
        return self.requests_per_minute

    def record_rate_limited(self) -> float | None:
        """Note a 429; returns the rate to pace at from now on (None: nothing succeeded yet to start from)."""
        now = self._clock()
        if self.requests_per_minute is None:
            accepted = self._accepted_per_minute(now)
            if not accepted:
                return None
            self.requests_per_minute = max(self._floor, accepted)
            self._last_decrease = now
        elif now - self._last_decrease >= self._cooldown:
            self.requests_per_minute = max(self._floor, self.requests_per_minute * self._decrease)
            self._last_decrease = now
        return self.requests_per_minute

    def _accepted_per_minute(self, now: float) -> float:
        recent = [t for t in self._successes if t >= now - self._window]
        if not recent:
            return 0.0
        return len(recent) / max(1.0, now - recent[0]) * _SECONDS_PER_MINUTE

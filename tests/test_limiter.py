"""The judge's rate limiter on a fake clock: even spacing, token debt and correction, shared pauses."""

from __future__ import annotations

import asyncio
import random

import pytest

from monitor.judge.limiter import AdaptiveRequestRate, Permit, RateLimiter
from tests.fakes.openai_server import max_in_window


class FakeClock:
    """Time that moves only when someone sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await asyncio.sleep(0)


def limiter(rpm: float | None, tpm: float | None) -> tuple[RateLimiter, FakeClock]:
    clock = FakeClock()
    return RateLimiter(rpm, tpm, clock=clock, sleep=clock.sleep), clock


def admit_all(rate_limiter: RateLimiter, clock: FakeClock, tokens: list[int]) -> list[float]:
    """Acquire for every entry of ``tokens`` concurrently; the clock time at which each was admitted."""

    async def one(count: int) -> float:
        await rate_limiter.acquire(count)
        return clock.now

    async def run() -> list[float]:
        return list(await asyncio.gather(*(one(count) for count in tokens)))

    return asyncio.run(run())


def test_requests_are_evenly_spaced_in_arrival_order() -> None:
    rate_limiter, clock = limiter(rpm=600, tpm=None)
    admitted = admit_all(rate_limiter, clock, [1] * 10)
    assert admitted == pytest.approx([i * 0.1 for i in range(10)])


def test_no_limits_admit_everything_at_once() -> None:
    rate_limiter, clock = limiter(rpm=None, tpm=None)
    assert admit_all(rate_limiter, clock, [10_000] * 50) == [0.0] * 50


def test_request_rate_never_exceeds_the_rpm_in_any_window() -> None:
    rate_limiter, clock = limiter(rpm=6000, tpm=None)
    admitted = admit_all(rate_limiter, clock, [1] * 1000)
    for window in (0.05, 0.5, 1.0, 5.0):
        assert max_in_window(admitted, window) <= round(100 * window) + 1
    assert admitted[-1] == pytest.approx(999 / 100)  # and it is not slower than the limit either


def test_tokens_flow_at_the_tpm_and_a_large_call_leaves_debt() -> None:
    rate_limiter, clock = limiter(rpm=None, tpm=6000)  # 100 tokens per second, a bucket of 100
    admitted = admit_all(rate_limiter, clock, [50, 50, 50, 400, 10])
    assert admitted[:3] == pytest.approx([0.0, 0.0, 0.5])
    # The 400-token call waits for a full bucket (1 s after 0.5), then leaves 300 tokens of debt.
    assert admitted[3] == pytest.approx(1.5)
    assert admitted[4] == pytest.approx(1.5 + 3.1)


def test_reported_usage_corrects_the_estimate_both_ways() -> None:
    rate_limiter, clock = limiter(rpm=None, tpm=6000)
    permit = asyncio.run(rate_limiter.acquire(100))
    assert rate_limiter.wait_time(80) == pytest.approx(0.8)
    rate_limiter.settle(permit, 20)  # the call used far less than estimated: 80 tokens come back
    assert rate_limiter.wait_time(80) == 0.0
    permit = asyncio.run(rate_limiter.acquire(80))
    rate_limiter.settle(permit, 280)  # ... and far more: 200 tokens of debt
    assert rate_limiter.wait_time(100) == pytest.approx(3.0)
    assert clock.now == 0.0


def test_long_run_token_rate_stays_at_the_tpm() -> None:
    rate_limiter, clock = limiter(rpm=None, tpm=60_000)  # 1000 tokens per second
    sizes = [random.Random(3).randint(50, 3000) for _ in range(300)]
    admitted = admit_all(rate_limiter, clock, sizes)
    # Everything but the last call's tokens had to flow through the bucket before it was admitted.
    assert sum(sizes[:-1]) / admitted[-1] <= 1000 * 1.01
    assert sum(sizes[:-1]) / admitted[-1] >= 1000 * 0.9


def test_a_pause_holds_every_caller_and_is_never_shortened() -> None:
    rate_limiter, clock = limiter(rpm=600, tpm=None)
    rate_limiter.pause_for(2.0)
    rate_limiter.pause_for(0.5)
    assert rate_limiter.paused_until == 2.0
    admitted = admit_all(rate_limiter, clock, [1, 1, 1])
    assert admitted == pytest.approx([2.0, 2.1, 2.2])


def test_wait_time_takes_nothing_and_try_acquire_does() -> None:
    rate_limiter, _ = limiter(rpm=60, tpm=None)
    assert rate_limiter.wait_time(1) == rate_limiter.wait_time(1) == 0.0
    assert rate_limiter.try_acquire(1) == 0.0
    assert rate_limiter.try_acquire(1) == pytest.approx(1.0)


def test_permit_reports_how_long_the_call_waited() -> None:
    rate_limiter, clock = limiter(rpm=60, tpm=None)

    async def two() -> tuple[Permit, Permit]:
        return await rate_limiter.acquire(5), await rate_limiter.acquire(5)

    first, second = asyncio.run(two())
    assert first.waited_seconds == 0.0 and second.waited_seconds == pytest.approx(1.0)
    assert second.estimated_tokens == 5


@pytest.mark.parametrize(
    ("rpm", "tpm", "field"), [(0, None, "requests_per_minute"), (None, -5, "tokens_per_minute")]
)
def test_non_positive_limits_are_rejected_by_name(rpm: float | None, tpm: float | None, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        RateLimiter(rpm, tpm)


def test_a_new_request_limit_changes_the_spacing() -> None:
    rate_limiter, clock = limiter(rpm=600, tpm=None)
    admit_all(rate_limiter, clock, [1, 1])
    rate_limiter.set_request_limit(60)
    assert admit_all(rate_limiter, clock, [1, 1]) == pytest.approx([1.1, 2.1])


def test_adaptive_rate_starts_at_the_accepted_rate_and_backs_off_once_per_burst() -> None:
    clock = FakeClock()
    rate = AdaptiveRequestRate(clock=clock, window=5.0, decrease=0.5, cooldown=1.0)
    assert rate.record_rate_limited() is None  # nothing accepted yet: no basis for a rate
    for _ in range(20):  # 20 accepted over 2 s: 10 per second
        clock.now += 0.1
        assert rate.record_success() is None
    clock.now += 0.1
    assert rate.record_rate_limited() == pytest.approx(20 / 2.0 * 60)
    clock.now += 0.2
    assert rate.record_rate_limited() == pytest.approx(600)  # same burst: no second cut
    clock.now += 1.0
    assert rate.record_rate_limited() == pytest.approx(300)


def test_adaptive_rate_grows_while_calls_keep_up_but_not_without_bound() -> None:
    clock = FakeClock()
    rate = AdaptiveRequestRate(clock=clock, window=5.0, increase=0.1)
    for _ in range(10):
        clock.now += 0.1
        rate.record_success()
    first = rate.record_rate_limited()
    assert first is not None
    clock.now += 0.1
    grown = rate.record_success()
    assert grown is not None and grown == pytest.approx(first * 1.1)
    for _ in range(50):  # a trickle of one call every 10 s: the rate stops growing
        clock.now += 10.0
        rate.record_success()
    assert rate.requests_per_minute is not None and rate.requests_per_minute <= grown * 1.1 ** 5

"""Deterministic sampling: the same conversations every run, and a higher rate selects a superset."""

from __future__ import annotations

from monitor.sampling import is_sampled, sample_position


def test_the_same_ids_are_selected_every_time() -> None:
    ids = [f"conv-{i}" for i in range(2000)]
    assert [is_sampled(i, 0.1) for i in ids] == [is_sampled(i, 0.1) for i in ids]


def test_a_higher_rate_selects_a_superset_near_the_rate() -> None:
    ids = [f"conv-{i}" for i in range(20000)]
    selected = {rate: {i for i in ids if is_sampled(i, rate)} for rate in (0.0, 0.05, 0.1, 0.5, 1.0)}
    assert selected[0.0] == set() and selected[1.0] == set(ids)
    assert selected[0.05] <= selected[0.1] <= selected[0.5]
    for rate in (0.05, 0.1, 0.5):
        assert abs(len(selected[rate]) / len(ids) - rate) < 0.01


def test_positions_are_uniform_fractions() -> None:
    positions = [sample_position(f"id-{i}") for i in range(1000)]
    assert all(0.0 <= p < 1.0 for p in positions)

"""③ Deterministic sampling: a hash of the conversation id against the rate.

Re-running a window selects the same conversations, and a higher rate selects a superset of a lower one (the
same position on [0, 1) is compared with both). The hash ignores the rubric on purpose: two rubrics sampled at
10 % see the same conversations, so their scores can be compared conversation by conversation.
"""

from __future__ import annotations

import hashlib


def sample_position(conversation_id: str) -> float:
    """Where a conversation falls on [0, 1): the first 8 bytes of SHA-256 of its id, as a fraction of 2**64."""
    digest = hashlib.sha256(conversation_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def is_sampled(conversation_id: str, rate: float) -> bool:
    return rate >= 1.0 or sample_position(conversation_id) < rate


"""Errors raised by rubric-monitor.

    MonitorError
    ├── ConfigError            bad settings or rubric file: names the file and the field; exit 2 at start-up
    │   └── RubricError        a rubric file that does not validate
    ├── SourceError            a trace source failed this cycle (the cycle is retried next time)
    │   ├── SourceAuthError    401/403: the credential is refused
    │   └── SourceQueryError   the query itself is wrong (bad KQL, unknown workspace)
    ├── JudgeError             a judge call failed after its retries
    │   ├── JudgeAuthError     401/403: calls to this judge stop until the credential works
    │   ├── JudgeRateLimited   429 past the retry budget
    │   ├── JudgeUnavailable   5xx past the retry budget
    │   │   └── JudgeTimeout   no reply within the timeout, past the retry budget
    │   └── JudgeRefused       a final answer about this prompt: the model declined, or it exceeds the context
    └── StoreError             the result store is unreachable

At run time a stage failure is logged, counted and isolated; only ``ConfigError`` stops the daemon, and only at
start-up.
"""

from __future__ import annotations

from collections.abc import Sequence


class MonitorError(Exception):
    """Root of every error this package raises on purpose."""


class ConfigError(MonitorError, ValueError):
    """A setting or rubric file is invalid. ``where`` is the file, ``field`` the dotted path inside it."""

    def __init__(self, where: str, field: str | None, message: str) -> None:
        self.where = where
        self.field = field
        self.message = message
        self.others: tuple[ConfigError, ...] = ()
        """Further problems found in the same pass (``check`` and start-up report every one, not the first)."""
        location = f"{where}: {field}" if field else where
        super().__init__(f"{location}: {message}")

    @property
    def all(self) -> tuple[ConfigError, ...]:
        """This problem and the others found with it, one line each."""
        return (self, *(e for other in self.others for e in other.all))

    @classmethod
    def collect(cls, errors: Sequence[ConfigError]) -> ConfigError:
        """One error to raise for ``errors`` (at least one): the first, carrying the rest."""
        first = errors[0]
        first.others = (*first.others, *errors[1:])
        return first


class RubricError(ConfigError):
    """A rubric file that does not validate."""


class SourceError(MonitorError):
    """A trace source could not deliver this cycle's window."""

    kind = "error"


class SourceAuthError(SourceError):
    kind = "auth"


class SourceQueryError(SourceError):
    kind = "query"


class JudgeError(MonitorError):
    """A judge call failed after its retries. ``outcome`` is the metric label it is counted under."""

    outcome = "error"
    calls: int = 0
    """Judge calls the evaluation made, this one included (set by the evaluator), for its audit trail."""
    prompt: list[dict[str, str]] | None = None
    """The prompt of the failed call (set by the evaluator), for its audit trail."""


class JudgeAuthError(JudgeError):
    outcome = "auth_error"


class JudgeRateLimited(JudgeError):
    outcome = "rate_limited"


class JudgeUnavailable(JudgeError):
    outcome = "server_error"


class JudgeTimeout(JudgeUnavailable):
    outcome = "timeout"


class JudgeRefused(JudgeError):
    outcome = "refused"


class StoreError(MonitorError):
    """The result store failed."""

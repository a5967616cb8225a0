"""The registry of active rubrics: a directory of rubric files, re-read while the daemon runs.

At start-up ``load()`` reads every file and raises the first ``RubricError``: a daemon must not start with a
broken rubric. Afterwards ``refresh()`` re-reads only files whose modification time, size or content changed.
A file that no longer validates keeps its previous version active and is reported: one log line naming the
file and the field, ``rubric_monitor_rubric_load_errors_total`` incremented once per distinct problem, and an
entry in ``problems`` (which ``check`` and ``/healthz`` show). A rubric without an explicit ``version`` is
versioned by its content hash, so every edit starts a new ``rubric_version`` series instead of mixing scales;
the gauge ``rubric_monitor_rubric_info{rubric,rubric_version,kind}`` holds exactly the active versions.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from monitor.errors import RubricError
from monitor.formats.documents import MAX_DOCUMENT_BYTES, DocumentError, decode_document
from monitor.metrics import MonitorMetrics
from monitor.rubrics.base import PromptVersion
from monitor.rubrics.loader import check_unique, load_rubric_text, rubric_files
from monitor.rubrics.schema import Rubric

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RegistryChanges:
    """What one ``refresh()`` changed; names are rubric names, ``rejected`` holds file paths."""

    added: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    rejected: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.added or self.updated or self.removed)


@dataclass(frozen=True)
class _FileState:
    stamp: tuple[int, int]
    """(mtime in ns, size): an unchanged stamp means the file is not read again."""
    digest: str
    rubric: Rubric | None
    """The rubric this file contributes: its last valid version, or None if it never validated."""


@dataclass
class _Refresh:
    files: dict[Path, _FileState]
    problems: dict[str, str]
    rejected: list[str] = field(default_factory=list)


UNSETTLED_NS = 2_000_000_000
"""A file modified less than this long before it was read is hashed again next time: file systems keep coarse
modification times, and an edit of the same size within one tick would otherwise go unseen."""


def _stamp(path: Path) -> tuple[int, int]:
    stat = path.stat()
    if time.time_ns() - stat.st_mtime_ns < UNSETTLED_NS:
        return -1, -1
    return stat.st_mtime_ns, stat.st_size


def _read(path: Path) -> tuple[tuple[int, int], str, str]:
    """Stamp, SHA-256 and text of a file; the stamp is taken first so a write during the read is seen next
    time. At most ``MAX_DOCUMENT_BYTES`` are read: a huge file is refused, not loaded."""
    try:
        stamp = _stamp(path)
        with path.open("rb") as handle:
            raw = handle.read(MAX_DOCUMENT_BYTES + 1)
    except OSError as exc:
        raise RubricError(str(path), None, f"cannot read: {exc.strerror}") from exc
    try:
        text = decode_document(raw)
    except DocumentError as exc:
        raise RubricError(str(path), None, str(exc)) from None
    return stamp, hashlib.sha256(raw).hexdigest(), text


class RubricRegistry:
    """Active rubrics from ``directory`` (a directory read recursively, or one file)."""

    def __init__(self, directory: Path, versions: PromptVersion, metrics: MonitorMetrics | None = None) -> None:
        self.directory = directory
        self._versions = versions
        self._metrics = metrics
        self._lock = threading.Lock()
        self._files: dict[Path, _FileState] = {}
        self._published: set[tuple[str, str, str]] = set()
        self.problems: dict[str, str] = {}
        """File path → why its latest content is not active (for ``check`` and health)."""

    # -- reading ------------------------------------------------------------------------------------------

    def load(self) -> list[Rubric]:
        """Read every file; invalid files, or two files with one rubric name, raise ``RubricError`` naming
        every problem (the first, carrying the others)."""
        files: dict[Path, _FileState] = {}
        errors: list[RubricError] = []
        for path in rubric_files(self.directory):
            try:
                stamp, digest, text = _read(path)
                files[path] = _FileState(stamp, digest, load_rubric_text(text, path, self._versions))
            except RubricError as exc:
                errors.append(exc)
        if errors:
            raise RubricError.collect(errors)
        rubrics = [s.rubric for s in files.values() if s.rubric is not None]
        check_unique(rubrics, (str(p) for p in files))
        with self._lock:
            self._files = files
            self.problems = {}
        self._publish()
        for rubric in rubrics:
            log.info("rubric %s version %s (%s) active", rubric.name, rubric.version, rubric.kind)
        return rubrics

    def refresh(self) -> RegistryChanges:
        """Re-read changed files. Never raises for a bad file: it is reported and its previous version
        stays."""
        with self._lock:
            before = {s.rubric.name: s.rubric for s in self._files.values() if s.rubric is not None}
            work = _Refresh(dict(self._files), dict(self.problems))
        try:
            paths = rubric_files(self.directory)
        except RubricError as exc:
            self._report(work, str(self.directory), exc)
            self._commit(work)
            return RegistryChanges(rejected=tuple(work.rejected))
        work.problems.pop(str(self.directory), None)
        for gone in [p for p in work.files if p not in set(paths)]:
            del work.files[gone]
            work.problems.pop(str(gone), None)
        for path in paths:
            self._refresh_file(work, path)
        self._commit(work)
        after = {r.name: r for r in self.active()}
        changes = RegistryChanges(
            added=tuple(sorted(set(after) - set(before))),
            updated=tuple(sorted(n for n in after.keys() & before.keys() if after[n] != before[n])),
            removed=tuple(sorted(set(before) - set(after))),
            rejected=tuple(work.rejected),
        )
        self._log_changes(changes, after, before)
        return changes

    def _refresh_file(self, work: _Refresh, path: Path) -> None:
        state = work.files.get(path)
        key = str(path)
        try:
            # A file with a pending problem is checked every time: a name clash can end without an edit.
            if state is not None and key not in work.problems and state.stamp[0] >= 0 \
                    and _stamp(path) == state.stamp:
                return
            stamp, digest, text = _read(path)
            if state is not None and key not in work.problems and digest == state.digest:
                work.files[path] = _FileState(stamp, digest, state.rubric)
                return
            rubric = load_rubric_text(text, path, self._versions)
            self._check_name(work, path, rubric)
        except OSError as exc:
            self._report(work, key, RubricError(key, None, f"cannot read: {exc.strerror}"))
            return
        except RubricError as exc:
            self._report(work, key, exc)
            return
        if state is not None and state.rubric is not None and state.rubric.version == rubric.version \
                and state.rubric != rubric:
            log.warning("%s: content changed but version %s was kept; its results share one metric series",
                        path, rubric.version)
        work.files[path] = _FileState(stamp, digest, rubric)
        work.problems.pop(key, None)

    @staticmethod
    def _check_name(work: _Refresh, path: Path, rubric: Rubric) -> None:
        for other, state in work.files.items():
            if other != path and state.rubric is not None and state.rubric.name == rubric.name:
                raise RubricError(str(path), "name", f"rubric name {rubric.name!r} is also used by {other}")

    def _report(self, work: _Refresh, key: str, exc: RubricError) -> None:
        message = "; ".join(str(problem) for problem in exc.all)
        work.rejected.append(key)
        if work.problems.get(key) == message:
            return  # reported already; an unchanged broken file is not a new error every cycle
        work.problems[key] = message
        kept = work.files.get(Path(key))
        outcome = (f"keeping version {kept.rubric.version} of {kept.rubric.name} active"
                   if kept is not None and kept.rubric is not None else "nothing from it is active")
        log.warning("rubric file rejected: %s; %s", message, outcome)
        if self._metrics is not None:
            self._metrics.rubric_load_errors.inc()

    def _commit(self, work: _Refresh) -> None:
        with self._lock:
            self._files = work.files
            self.problems = work.problems
        self._publish()

    def _publish(self) -> None:
        """Make ``rubric_monitor_rubric_info`` hold exactly the active versions; old versions' series go."""
        if self._metrics is None:
            return
        current: set[tuple[str, str, str]] = {(r.name, r.version or "", r.kind) for r in self.active()}
        for labels in self._published - current:
            self._metrics.rubric_info.remove(*labels)
        for labels in current - self._published:
            self._metrics.rubric_info.labels(*labels).set(1)
            self._metrics.rubric_active(labels[0])
        self._published = current

    @staticmethod
    def _log_changes(changes: RegistryChanges, after: dict[str, Rubric], before: dict[str, Rubric]) -> None:
        for name in changes.added:
            log.info("rubric %s version %s (%s) active", name, after[name].version, after[name].kind)
        for name in changes.updated:
            log.info("rubric %s: version %s replaces %s", name, after[name].version, before[name].version)
        for name in changes.removed:
            log.info("rubric %s removed", name)

    # -- queries ------------------------------------------------------------------------------------------

    def active(self) -> list[Rubric]:
        """Every active rubric, by name."""
        with self._lock:
            rubrics = [s.rubric for s in self._files.values() if s.rubric is not None]
        return sorted(rubrics, key=lambda r: r.name)

    def sources(self) -> dict[str, Path]:
        """Rubric name → the file it comes from."""
        with self._lock:
            return {s.rubric.name: p for p, s in self._files.items() if s.rubric is not None}

    def get(self, name: str) -> Rubric | None:
        return next((r for r in self.active() if r.name == name), None)

    def for_agent(self, agent_name: str | None, agent_id: str | None) -> list[Rubric]:
        return [r for r in self.active() if r.applies_to(agent_name, agent_id)]

"""The command line: ``rubric-monitor`` (``monitor.cli:main``). Nothing in ``monitor`` imports this package.

Importing it is cheap on purpose: ``main`` takes SIGTERM and SIGINT as stop requests before it imports the
commands (the stages, the SDKs), so a pod stopped during start-up exits cleanly (0), not killed by the signal.
"""

from __future__ import annotations

from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from monitor.daemon import shutdown

    shutdown.install()
    from monitor.cli.commands import run

    return run(argv)


__all__ = ["main"]

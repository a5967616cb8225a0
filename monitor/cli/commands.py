"""``rubric-monitor``: every command, in one place. Nothing in ``monitor`` imports this package; each command module
registers its verbs (``register``) and handles them (``cmd_*``), building the stages through ``monitor.app``.

Exit codes: 0 success; 1 a cycle failed (``run --once``); 2 invalid settings, rubric or input (the message names
the file and the field).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

# Each command module by its full name: ``from monitor.cli import ...`` would import the package, whose ``main``
# imports this module.
import monitor.cli.alerts as alerts
import monitor.cli.backfill as backfill
import monitor.cli.calibrate as calibrate
import monitor.cli.daemon as daemon
import monitor.cli.db as db
import monitor.cli.evaluate as evaluate
import monitor.cli.labels as labels
import monitor.cli.redact as redact_command
import monitor.cli.results as results
import monitor.cli.rubrics as rubrics
import monitor.cli.shadow as shadow
import monitor.cli.slo as slo
from monitor.cli.common import EXIT_CODES, version
from monitor.errors import ConfigError, JudgeError
from monitor.redaction import redact

COMMANDS = (daemon, evaluate, results, rubrics, calibrate, labels, shadow, db, alerts, backfill, slo, redact_command)
"""Command modules, in the order ``--help`` lists their verbs."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rubric-monitor", epilog=EXIT_CODES,
        description="Score LLM agent conversations against rubrics with an LLM judge; export Prometheus metrics.")
    parser.add_argument("--version", action="version", version=f"rubric-monitor {version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.register(sub)
    return parser


def run(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the command (``monitor.cli.main`` installed the signal handlers first). This module is
    not named ``main``: importing ``monitor.cli.main`` would then replace that function with the module."""
    args = build_parser().parse_args(argv)
    if args.handler is not daemon.cmd_run:
        from monitor.daemon import shutdown

        shutdown.release()  # only the daemon treats SIGTERM as a stop request
    try:
        result: Any = args.handler(args)
        return int(result)
    except ConfigError as exc:
        for problem in exc.all:
            print(redact(f"rubric-monitor: error: {problem}"), file=sys.stderr)
        return 2
    except JudgeError as exc:  # after its retries: unreachable, refusing the credential, misconfigured
        print(redact(f"rubric-monitor: the judge failed: {exc}"), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130

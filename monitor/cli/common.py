"""What every command shares: logging with secrets redacted, ``--config``, and how to name our own commands."""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import sys
from pathlib import Path

from monitor.redaction import install_log_redaction
from monitor.settings import ENV_PREFIX

EXIT_CODES = ("exit codes: 0 success; 1 a cycle failed (run --once), the judge failed (evaluate) or nothing was "
              "found (results show); 2 invalid settings, rubric or input")


def configure_logging(level: str) -> None:
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
        # A line per HTTP request and per scheduler tick would bury the daemon's own progress lines.
        for chatty in ("httpx", "httpx2"):
            logging.getLogger(chatty).setLevel(logging.WARNING)
        # Its warning that a run was skipped while a long first cycle runs is expected (runs are coalesced).
        logging.getLogger("apscheduler").setLevel(logging.ERROR)
        # azure-identity logs every credential it tried; our error says it in one line.
        logging.getLogger("azure.identity").setLevel(logging.ERROR)

    install_log_redaction()  # no configured secret reaches the logs, whichever module logs it


def self_command(subcommand: str, config: Path | None) -> str:
    """``subcommand`` as the user would type it, invoked as we were (``.venv/bin/rubric-monitor results --config
    examples/rubric-monitor.yaml``), so that follow-up commands we print can be pasted as they are."""
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else "rubric-monitor"
    if Path(argv0).name == "rubric-monitor":
        shown = argv0
        if os.sep in argv0:
            absolute = Path(argv0).resolve()
            try:
                shown = str(absolute.relative_to(Path.cwd().resolve()))
            except ValueError:
                shown = str(absolute)
    else:
        shown = f"{Path(sys.executable).name} -m monitor"
    return shlex.join([*shown.split(" "), subcommand, *(["--config", str(config)] if config else [])])


def config_arg(parser: argparse.ArgumentParser, help_text: str | None = None) -> None:
    """``--config``, the same on every command."""
    parser.add_argument("--config", type=Path, default=None,
                        help=help_text or f"YAML settings file (default: ${ENV_PREFIX}CONFIG, else built-in defaults)")


def version() -> str:
    """The installed distribution's version, else the package's own (a checkout run with python -m monitor)."""
    import importlib.metadata

    from monitor import __version__

    try:
        return importlib.metadata.version("rubric-monitor")
    except importlib.metadata.PackageNotFoundError:
        return __version__

"""``rubric-monitor db``: maintenance of the result store."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from monitor.settings import ENV_PREFIX, load_settings


def _cmd_rebuild_rollups(args: argparse.Namespace) -> int:
    from monitor.app import store_url
    from monitor.errors import StoreError
    from monitor.store.sql import SqlStore

    settings = load_settings(args.config)
    started = time.monotonic()
    try:
        store = SqlStore(store_url(settings))
        try:
            rows = store.rebuild_rollups()
        finally:
            store.close()
    except StoreError as exc:
        sys.stderr.write(f"rubric-monitor: {exc}\n")
        return 1
    sys.stdout.write(f"rebuilt {rows} hourly rollup rows from the current results in "
                     f"{time.monotonic() - started:.1f}s; a running daemon reads them at its next start\n")
    return 0


def add_db_commands(sub: Any) -> None:
    db = sub.add_parser("db", help="result store maintenance")
    db_sub = db.add_subparsers(dest="db_command", required=True)
    rebuild = db_sub.add_parser("rebuild-rollups",
                                help="recompute the hourly quality rollups (windowed gauges) from the stored results")
    rebuild.add_argument("--config", type=Path, default=None,
                         help=f"YAML settings file (default: ${ENV_PREFIX}CONFIG, else built-in defaults)")
    rebuild.set_defaults(handler=_cmd_rebuild_rollups)

"""``rubric-monitor db``: maintenance of the result store: schema revision (``upgrade``, ``current``, ``history``)
and the hourly rollups (``rebuild-rollups``)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from sqlalchemy import create_engine
from sqlalchemy.exc import SQLAlchemyError

from monitor.cli.common import config_arg
from monitor.errors import ConfigError, StoreError
from monitor.settings import load_settings
from monitor.store import migrate
from monitor.store.sql import SqlStore
from monitor.store.url import store_url


def cmd_rebuild_rollups(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    started = time.monotonic()
    try:
        store = SqlStore(store_url(settings), settings.store.migrate)
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


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")


def _engine_and_name(args: argparse.Namespace) -> tuple[Any, str]:
    settings = load_settings(args.config)
    url = store_url(settings)
    engine = create_engine(url)
    return engine, f"store {engine.url.render_as_string(hide_password=True)}"


def cmd_current(args: argparse.Namespace) -> int:
    engine, name = _engine_and_name(args)
    try:
        with engine.connect() as conn:
            found = migrate.state(conn)
    except SQLAlchemyError as exc:
        raise ConfigError(name, None, f"cannot read the schema revision: {exc}") from exc
    finally:
        engine.dispose()
    if found.empty:
        _say(f"{name}: empty (head {found.head})")
    elif found.current == found.head:
        _say(f"{name}: {found.current} (head){' (release 0.1.0, not stamped yet)' if found.legacy else ''}")
    else:
        _say(f"{name}: {found.current} (behind head {found.head}; run `rubric-monitor db upgrade`)")
    return 0


def cmd_upgrade(args: argparse.Namespace) -> int:
    engine, name = _engine_and_name(args)
    try:
        before, after = migrate.upgrade(engine, args.to)
    except SQLAlchemyError as exc:
        raise ConfigError(name, None, f"migration failed (nothing was changed): {exc}") from exc
    finally:
        engine.dispose()
    _say(f"{name}: {before or '(empty)'} → {after}" if before != after else f"{name}: already at {after}")
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    head = migrate.head()
    for revision, parent, message in migrate.history():
        marker = " (head)" if revision == head else ""
        _say(f"{parent or '<base>'} → {revision}{marker}: {message.splitlines()[0] if message else ''}")
    return 0


def register(sub: Any) -> None:
    db = sub.add_parser("db", help="result store maintenance: schema upgrade, current revision, history, rollups")
    db_sub = db.add_subparsers(dest="db_command", required=True)
    for name, handler, help_text in (
        ("upgrade", cmd_upgrade, "migrate the store to this release's schema (safe to repeat)"),
        ("current", cmd_current, "print the store's schema revision"),
        ("history", cmd_history, "list the schema revisions this release knows"),
    ):
        command = db_sub.add_parser(name, help=help_text)
        config_arg(command)
        if name == "upgrade":
            command.add_argument("--to", default="head", help="target revision (default: head)")
        command.set_defaults(handler=handler)
    rebuild = db_sub.add_parser("rebuild-rollups",
                                help="recompute the hourly quality rollups (windowed gauges) from the stored results")
    config_arg(rebuild)
    rebuild.set_defaults(handler=cmd_rebuild_rollups)

"""``rubric-monitor db upgrade | current | history``: the store's schema revision, from the command line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine
from sqlalchemy.exc import SQLAlchemyError

from monitor.errors import ConfigError
from monitor.settings import load_settings
from monitor.store import migrate


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")


def _engine_and_name(args: argparse.Namespace) -> tuple[Any, str]:
    from monitor.app import store_url

    settings = load_settings(args.config)
    url = store_url(settings)
    engine = create_engine(url)
    return engine, f"store {engine.url.render_as_string(hide_password=True)}"


def _cmd_current(args: argparse.Namespace) -> int:
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


def _cmd_upgrade(args: argparse.Namespace) -> int:
    engine, name = _engine_and_name(args)
    try:
        before, after = migrate.upgrade(engine, args.to)
    except SQLAlchemyError as exc:
        raise ConfigError(name, None, f"migration failed (nothing was changed): {exc}") from exc
    finally:
        engine.dispose()
    _say(f"{name}: {before or '(empty)'} → {after}" if before != after else f"{name}: already at {after}")
    return 0


def _cmd_history(args: argparse.Namespace) -> int:
    head = migrate.head()
    for revision, parent, message in migrate.history():
        marker = " (head)" if revision == head else ""
        _say(f"{parent or '<base>'} → {revision}{marker}: {message.splitlines()[0] if message else ''}")
    return 0


def add_db_commands(sub: Any) -> None:
    """Register ``db`` on the top-level subparsers of ``monitor.cli``."""
    db = sub.add_parser("db", help="the store's schema: upgrade, current revision, history")
    commands = db.add_subparsers(dest="db_command", required=True)
    for name, handler, help_text in (
        ("upgrade", _cmd_upgrade, "migrate the store to this release's schema (safe to repeat)"),
        ("current", _cmd_current, "print the store's schema revision"),
        ("history", _cmd_history, "list the schema revisions this release knows"),
    ):
        command = commands.add_parser(name, help=help_text)
        command.add_argument("--config", type=Path, default=None, help="YAML settings file (store.url)")
        if name == "upgrade":
            command.add_argument("--to", default="head", help="target revision (default: head)")
        command.set_defaults(handler=handler)

"""The store's URL from settings (inline or from a file), and the checks ``run`` and ``check`` make before anything
connects."""

from __future__ import annotations

from pathlib import Path

from monitor.errors import ConfigError
from monitor.redaction import remember_url_password
from monitor.settings import Settings, read_secret


def store_url(settings: Settings) -> str:
    url = read_secret(None, settings.store.url_file, "store.url_file")
    if url:
        remember_url_password(url)
    return url or settings.store.url


def checked_store_url(settings: Settings) -> str:
    """The store URL, refused (``ConfigError`` on ``store.url``) when it cannot work: not a URL, an unknown
    database, a driver that is not installed, an in-memory or missing-directory SQLite file. Nothing connects."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    url = store_url(settings)
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        # The URL is not echoed: it may carry a password.
        raise ConfigError("settings", "store.url", "is not a database URL like sqlite:///path.db or "
                                                    "postgresql+psycopg://user@host/db") from None
    try:
        dialect = parsed.get_dialect()
        dialect.import_dbapi()
    except NoSuchModuleError:
        raise ConfigError("settings", "store.url", f"unknown database or driver {parsed.drivername!r}") from None
    except ImportError as exc:
        hint = " (pip install 'rubric-monitor[postgres]')" if parsed.get_backend_name() == "postgresql" else ""
        raise ConfigError("settings", "store.url", f"the driver of {parsed.drivername!r} is not installed: "
                                                    f"no module {exc.name or ''!r}{hint}") from None
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ""
        if database in ("", ":memory:") or "mode=memory" in url:
            # One shared connection between the cycle thread and the scrape thread: writes would fail at random.
            raise ConfigError("settings", "store.url", "an in-memory SQLite database cannot back the daemon; "
                                                        "use a file")
        directory = Path(database).parent
        if not database.startswith("file:") and not directory.is_dir():
            raise ConfigError("settings", "store.url", f"the directory {directory} of the SQLite file does not exist")
    return url

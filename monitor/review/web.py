"""The review page's HTTP server: its own listener (``review.host``, ``review.port``), bounded, authenticated.

- Sign-in: ``Authorization: Bearer TOKEN`` (the token of ``review.token_file``), or the sign-in form, which sets a
  ``Secure; HttpOnly; SameSite=Strict`` cookie naming the reviewer, signed with a key derived from the token (it
  survives a restart, and rotating the token signs everyone out); or ``review.trusted_proxy_header`` from a proxy
  at ``review.trusted_proxy_addresses`` (oauth2-proxy). Without any of them the page is served on loopback only,
  to reviewer ``local`` (``check_review_settings`` refuses otherwise).
- Every form carries a CSRF token bound to the reviewer (HMAC); a POST without it, or from another site
  (``Sec-Fetch-Site: cross-site``), is refused with 403.
- Every response: a Content-Security-Policy allowing only this origin's script and style (no inline script, no
  inline style, no framing, forms only to this origin), ``nosniff``, no referrer, no caching.
- Bounded (the daemon's ``BoundedHTTPServer``): at most ``review.max_connections`` requests answered at once (more
  get 503), each arrived whole within ``review.request_timeout_seconds`` (else 408) while holding no thread, request
  bodies of at most ``MAX_BODY`` bytes.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from monitor.daemon.http import HEAD_BYTES, BoundedHTTPServer, HTTPLimits
from monitor.errors import ConfigError
from monitor.formats.json_text import cycle_collection_paused
from monitor.models import EvaluationResult
from monitor.review import pages
from monitor.review.agreement import agreement
from monitor.review.store import Filters, ReviewStore, StoredLabel
from monitor.settings import ReviewSettings, read_secret

log = logging.getLogger(__name__)

COOKIE = "rm_review"
MAX_BODY = 64 * 1024
SESSION_SECONDS = 12 * 3600
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; "
       "frame-ancestors 'none'; base-uri 'none'")
STATIC = {"review.js": "text/javascript; charset=utf-8", "review.css": "text/css; charset=utf-8"}


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_review_settings(settings: ReviewSettings) -> str | None:
    """The token (None when there is none); ``ConfigError`` when the page would be open off loopback."""
    token = read_secret(None, settings.token_file, "review.token_file")
    if token is not None and len(token) < 16:
        raise ConfigError(str(settings.token_file), "review.token_file", "the token is shorter than 16 characters")
    if token is None and settings.trusted_proxy_header is None and not is_loopback(settings.host):
        raise ConfigError("settings", "review.token_file", f"the review page on {settings.host!r} (not loopback) "
                          "needs review.token_file or review.trusted_proxy_header")
    return token


class Auth:
    """Who is asking, and the CSRF token of that reviewer."""

    def __init__(self, token: str | None, proxy_header: str | None, proxy_addresses: tuple[str, ...]) -> None:
        self.token = token
        self.proxy_header = proxy_header
        self.proxy_addresses = set(proxy_addresses)
        # Keyed by the token, so cookies and CSRF tokens survive a restart; a random key when there is no token.
        seed = token.encode() if token else secrets.token_bytes(32)
        self._key = hashlib.sha256(b"rubric-monitor review\x00" + seed).digest()

    def _sign(self, text: str) -> str:
        return hmac.new(self._key, text.encode(), hashlib.sha256).hexdigest()

    def csrf(self, reviewer: str) -> str:
        return self._sign(f"csrf\x00{reviewer}")

    def csrf_ok(self, reviewer: str, offered: str | None) -> bool:
        return offered is not None and hmac.compare_digest(self.csrf(reviewer), offered)

    def token_ok(self, offered: str) -> bool:
        return self.token is not None and hmac.compare_digest(self.token.encode(), offered.encode())

    def cookie(self, reviewer: str, now: datetime) -> str:
        expires = int(now.timestamp()) + SESSION_SECONDS
        name = base64.urlsafe_b64encode(reviewer.encode()).decode().rstrip("=")
        return f"{name}.{expires}.{self._sign(f'session{chr(0)}{name}{chr(0)}{expires}')}"

    def _from_cookie(self, header: str | None, now: datetime) -> str | None:
        for part in (header or "").split(";"):
            key, _, value = part.strip().partition("=")
            if key != COOKIE:
                continue
            pieces = value.split(".")
            if len(pieces) != 3 or not pieces[1].isdigit():
                return None
            name, expires, signature = pieces
            if int(expires) < now.timestamp():
                return None
            if not hmac.compare_digest(self._sign(f"session\x00{name}\x00{expires}"), signature):
                return None
            try:
                return base64.urlsafe_b64decode(name + "=" * (-len(name) % 4)).decode()
            except (ValueError, UnicodeDecodeError):
                return None
        return None

    def reviewer(self, headers: Any, peer: str, now: datetime) -> str | None:
        if self.proxy_header and peer in self.proxy_addresses:
            named = headers.get(self.proxy_header)
            if named:
                return str(named).strip()[:256]
        if self.token is not None:
            authorization = headers.get("Authorization") or ""
            if authorization.startswith("Bearer ") and self.token_ok(authorization[7:].strip()):
                return str(headers.get("X-Reviewer") or "api").strip()[:256]
            return self._from_cookie(headers.get("Cookie"), now)
        if self.proxy_header:
            return None
        return "local"


@dataclass
class ReviewApp:
    """What the handlers need: the store, the settings and how to sign in."""

    store: ReviewStore
    settings: ReviewSettings
    auth: Auth
    on_label: Callable[[], None] = lambda: None
    """Called after a label is saved (the daemon publishes agreement again)."""


def _filters(query: dict[str, list[str]]) -> Filters:
    def one(name: str) -> str | None:
        values = query.get(name)
        return values[0][:256] if values and values[0] else None

    def day(name: str) -> datetime | None:
        value = one(name)
        if value is None:
            return None
        try:
            return datetime.strptime(value[:10], "%Y-%m-%d").replace(tzinfo=UTC)
        except ValueError:
            return None

    label = one("label")
    return Filters(rubric=one("rubric"), agent=one("agent"),
                   label=label if label in ("labelled", "unlabelled") else None, reason=one("reason"),
                   outcome=one("outcome"), since=day("since"), until=day("until"))


def list_html(app: ReviewApp, path: str, query: dict[str, list[str]], reviewer: str, csrf: str) -> str:
    """The queue (``/queue``) or the results list (``/results``), one page of it."""
    filters = _filters(query)
    after = query.get("after", [None])[0]
    rubrics, agents = app.store.rubrics_and_agents()
    if path == "/queue":
        page = app.store.queue_page(filters, after)
        following = app.store.next_unlabelled(reviewer, filters)
        start = None if following is None else pages.link(pages.result_path(following), **pages.filter_query(filters))
        return pages.list_page("Review queue", "/queue", page, filters, rubrics, agents, True, reviewer, csrf, start)
    page = app.store.results_page(filters, after)
    return pages.list_page("Results", "/results", page, filters, rubrics, agents, False, reviewer, csrf, None)


def review_html(app: ReviewApp, result_id: int, result: EvaluationResult, reason: str | None,
                query: dict[str, list[str]], reviewer: str, csrf: str) -> str:
    """One verdict's page: the conversation, the judge's scores and reasons, the label form. A long conversation
    allocates tens of thousands of short-lived objects, none in a cycle: the cycle collector is paused meanwhile
    (its passes over the daemon's heap were most of the page's worst times)."""
    with cycle_collection_paused():
        return pages.review_page(
            result_id, result, reason, app.store.conversation(result.conversation_id),
            app.store.current_results(result.conversation_id), app.store.labels(result_id=result_id), reviewer,
            csrf, pages.filter_query(_filters(query)), app.settings.max_page_bytes, saved="saved" in query)


def make_handler(app: ReviewApp) -> type[BaseHTTPRequestHandler]:
    """The handler class serving ``app``."""
    return type("Handler", (ReviewHandler,), {"app": app})


class ReviewHandler(BaseHTTPRequestHandler):
    app: ReviewApp
    server_version = "rubric-monitor-review"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("review http: " + format, *args)

    # responses -------------------------------------------------------------------------------------------

    def _send(self, status: int, body: bytes, content_type: str = "text/html; charset=utf-8",
              headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("X-Frame-Options", "DENY")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Cache-Control", "no-store")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _html(self, status: int, text: str, headers: dict[str, str] | None = None) -> None:
        self._send(status, text.encode("utf-8"), headers=headers)

    def _redirect(self, location: str, headers: dict[str, str] | None = None) -> None:
        self._send(303, b"", "text/plain", {"Location": location, **(headers or {})})

    def _error(self, status: int, message: str) -> None:
        self._html(status, pages.error_page(status, message))

    def _who(self) -> str | None:
        return self.app.auth.reviewer(self.headers, self.client_address[0], datetime.now(UTC))

    # GET -------------------------------------------------------------------------------------------------

    def do_GET(self) -> None:
        try:
            self._get()
        except ConnectionError:
            log.debug("review page %s: the client went away", self.path[:200])
        except Exception:
            log.exception("review page %s failed", self.path[:200])
            self._error(500, "The page failed; the daemon's log says why.")

    def _get(self) -> None:
        parts = urlsplit(self.path)
        path, query = parts.path, parse_qs(parts.query, max_num_fields=32)
        if path.startswith("/static/"):
            name = path.removeprefix("/static/")
            if name not in STATIC:
                self._error(404, "No such file.")
                return
            body = resources.files("monitor.review").joinpath("static", name).read_bytes()
            self._send(200, body, STATIC[name], {"Cache-Control": "max-age=300"})
            return
        if path == "/signin":
            self._html(200, pages.signin_page(self.app.auth.csrf(""), None, query.get("next", ["/queue"])[0]))
            return
        reviewer = self._who()
        if reviewer is None:
            self._redirect("/signin")
            return
        csrf = self.app.auth.csrf(reviewer)
        if path in ("/", ""):
            self._redirect("/queue")
        elif path in ("/queue", "/results"):
            self._list(path, query, reviewer, csrf)
        elif path == "/agreement":
            report = agreement(self.app.store.labelled_verdicts(uniform_only=True))
            self._html(200, pages.agreement_page(report, reviewer, csrf))
        elif path.startswith("/conversations/"):
            self._conversation(unquote(path.removeprefix("/conversations/")))
        elif path.startswith("/review/"):
            self._review(path.removeprefix("/review/"), query, reviewer, csrf)
        else:
            self._error(404, "No such page.")

    def _list(self, path: str, query: dict[str, list[str]], reviewer: str, csrf: str) -> None:
        self._html(200, list_html(self.app, path, query, reviewer, csrf))

    def _conversation(self, conversation_id: str) -> None:
        found = self.app.store.current_results(conversation_id)
        if not found:
            self._error(404, "No verdict of this conversation is stored.")
            return
        whole = [i for i, r in found if r.turn_index is None] or [found[0][0]]
        self._redirect(pages.result_path(whole[0]))

    def _review(self, rest: str, query: dict[str, list[str]], reviewer: str, csrf: str) -> None:
        identifier, _, tail = rest.partition("/")
        if not identifier.isdigit():
            self._error(404, "No such verdict.")
            return
        found = self.app.store.result(int(identifier))
        if found is None:
            self._error(404, "No such verdict.")
            return
        result, reason = found
        limit = self.app.settings.max_page_bytes
        if tail == "prompt":
            self._html(200, pages.prompt_page(int(identifier), result, reviewer, csrf, limit))
            return
        if tail:
            self._error(404, "No such page.")
            return
        self._html(200, review_html(self.app, int(identifier), result, reason, query, reviewer, csrf))

    # POST ------------------------------------------------------------------------------------------------

    def do_POST(self) -> None:
        try:
            self._post()
        except ConnectionError:
            log.debug("review form %s: the client went away", self.path[:200])
        except Exception:
            log.exception("review form %s failed", self.path[:200])
            self._error(500, "Saving failed; the daemon's log says why.")

    def _form(self) -> dict[str, str] | None:
        try:
            length = int(self.headers.get("Content-Length") or "0")
        except ValueError:
            length = -1
        if length < 0 or length > MAX_BODY:
            self._error(413, f"A form is at most {MAX_BODY} bytes.")
            self.close_connection = True
            return None
        raw = self.rfile.read(length).decode("utf-8", errors="replace")
        return {k: v[0] for k, v in parse_qs(raw, keep_blank_values=True, max_num_fields=64).items()}

    def _post(self) -> None:
        path = urlsplit(self.path).path
        form = self._form()
        if form is None:
            return
        if self.headers.get("Sec-Fetch-Site") == "cross-site":
            self._error(403, "Forms are accepted from this site only.")
            return
        if path == "/signin":
            self._signin(form)
            return
        reviewer = self._who()
        if reviewer is None:
            self._error(401, "Sign in first.")
            return
        if not self.app.auth.csrf_ok(reviewer, form.get("csrf")):
            self._error(403, "The form's CSRF token is missing or wrong; reload the page and try again.")
            return
        if path == "/signout":
            self._redirect("/signin", {"Set-Cookie": f"{COOKIE}=; Path=/; Max-Age=0; Secure; HttpOnly; "
                                                     "SameSite=Strict"})
        elif path.startswith("/review/") and path.endswith("/label"):
            self._label(path.removeprefix("/review/").removesuffix("/label"), form, reviewer)
        else:
            self._error(404, "No such form.")

    def _signin(self, form: dict[str, str]) -> None:
        if not self.app.auth.csrf_ok("", form.get("csrf")):
            self._error(403, "The form's CSRF token is missing or wrong; reload the page and try again.")
            return
        reviewer = form.get("reviewer", "").strip()[:64]
        if self.app.auth.token is None or not reviewer or not self.app.auth.token_ok(form.get("token", "")):
            self._html(401, pages.signin_page(self.app.auth.csrf(""), "Wrong token (or no name given).", "/queue"))
            return
        cookie = self.app.auth.cookie(reviewer, datetime.now(UTC))
        target = form.get("next", "/queue")
        if not target.startswith("/") or target.startswith("//"):
            target = "/queue"  # only a path of this site: never an open redirect
        self._redirect(target, {"Set-Cookie": f"{COOKIE}={cookie}; Path=/; Max-Age={SESSION_SECONDS}; "
                                              "Secure; HttpOnly; SameSite=Strict"})

    def _label(self, identifier: str, form: dict[str, str], reviewer: str) -> None:
        found = self.app.store.result(int(identifier)) if identifier.isdigit() else None
        if found is None:
            self._error(404, "No such verdict.")
            return
        result, _ = found
        if result.turn_index is not None:
            self._error(400, "Labels are given to whole-conversation verdicts; this one judges a single turn.")
            return
        try:
            parsed = pages.parse_label_form(form, [d.id for d in result.dimension_scores])
        except ValueError as exc:
            self._error(400, f"The label was not saved: {exc}.")
            return
        self.app.store.save_label(StoredLabel(result.conversation_id, result.rubric, reviewer, parsed.passed,
                                         parsed.dimensions, note=parsed.note, result_id=int(identifier)))
        self.app.on_label()
        back = {k.removeprefix("back."): v for k, v in form.items() if k.startswith("back.") and v}
        following = self.app.store.next_unlabelled(reviewer, _filters({k: [v] for k, v in back.items()}),
                                              int(identifier))
        target = pages.result_path(following if following is not None else int(identifier))
        self._redirect(pages.link(target, **back, saved="1"))


def http_limits(settings: ReviewSettings) -> HTTPLimits:
    """The listener's bounds: ``max_connections`` requests answered at once (one more gets 503), a whole request
    within ``request_timeout_seconds`` (else 408), a form within ``MAX_BODY`` (a body a little over it reaches
    the handler, which answers 413 with a page saying so)."""
    return HTTPLimits(max_request_bytes=MAX_BODY + HEAD_BYTES, header_timeout_seconds=settings.request_timeout_seconds,
                      write_timeout_seconds=settings.request_timeout_seconds, workers=settings.max_connections,
                      max_queued=settings.max_connections, retry_after_seconds=1)


class ReviewServer:
    """The review page on the daemon's ``BoundedHTTPServer``: a reader thread and ``max_connections`` workers, so a
    slow or half-sent request holds no worker. ``on_drop`` counts the connections dropped, by reason."""

    def __init__(self, app: ReviewApp, on_drop: Callable[[str], None] | None = None) -> None:
        self.http = BoundedHTTPServer(app.settings.host, app.settings.port, make_handler(app),
                                      http_limits(app.settings), name="review-http", on_drop=on_drop)

    @property
    def address(self) -> tuple[str, int]:
        return self.http.address

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def start(self) -> None:
        self.http.start()

    def close(self) -> None:
        self.http.close()

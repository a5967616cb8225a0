"""Images and videos an agent produced, as GenAI message parts, read for a multimodal judge.

Parts (``monitor.formats.genai`` keeps their fields in ``Part.data``): ``blob`` (base64 ``content``), ``uri``
(fetched) and ``file`` (``file_id``, read from ``media.file_directory``), each with ``modality`` and an optional
``mime_type``. What is read is bounded by ``media.max_bytes``, and its type is checked (declared MIME type, else the
response's, else the first bytes); anything that cannot be read is a ``MediaProblem`` with its reason, which the
evaluator records as ``unscored``.

``uri`` parts (no server-side request forgery):
- only ``http``/``https`` URLs whose host ``media.allowed_hosts`` names are fetched; nothing is fetched otherwise;
- the host is resolved first and every address checked: a private, loopback, link-local, reserved or multicast
  address is refused unless the host is in ``media.allowed_private_hosts``; the connection then goes to the
  checked address (the Host header and TLS server name stay the host's), so a second DNS answer cannot redirect it;
- redirects are not followed; the body is read up to ``max_bytes``.

Video frames: an animated GIF is split into its frames with the standard library (``gif_frames``) and up to
``media.max_frames`` evenly spaced frames are shown as images. The frames are the GIF's own images, not composited:
a GIF that draws each frame as a patch over the previous one shows the patches. Other video formats (MP4, WebM...)
are not decoded here (no video decoder is bundled): send them whole to a judge that accepts video
(``video_input: file``), or they are unscored.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import fnmatch
import ipaddress
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from monitor.models import Part
from monitor.settings import MediaSettings

MEDIA_PART_TYPES = ("blob", "uri", "file")
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"), (b"\xff\xd8\xff", "image/jpeg"), (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"), (b"RIFF", "image/webp"), (b"\x1aE\xdf\xa3", "video/webm"),
)


class MediaProblem(Exception):
    """Why a media part cannot be shown to the judge; ``reason`` is the unscored reason's first word."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Media:
    mime_type: str
    data: bytes
    source: str
    """Where it came from, for the result's details: ``inline``, the URL, or ``file:<id>``."""


def modality(part: Part) -> str | None:
    """``image`` or ``video`` for a media part (by its modality, else its MIME type); None for anything else."""
    if part.type not in MEDIA_PART_TYPES:
        return None
    declared = part.data.get("modality")
    if declared in ("image", "video"):
        return str(declared)
    mime = str(part.data.get("mime_type") or "")
    return mime.split("/")[0] if mime.split("/")[0] in ("image", "video") else None


def _sniff(data: bytes) -> str | None:
    for magic, mime in _MAGIC:
        if data.startswith(magic):
            return mime if mime != "image/webp" or data[8:12] == b"WEBP" else None
    if data[4:8] == b"ftyp":
        return "video/mp4"
    return None


_SNIFFED = frozenset(mime for _, mime in _MAGIC) | {"video/mp4"}


def _checked_type(declared: str | None, data: bytes, source: str) -> str:
    """The media's type: the declared one when the bytes agree (a type whose first bytes we know must show them),
    else the one the bytes show; never something that is not an image or a video."""
    named = (declared or "").split(";")[0].strip().lower()
    sniffed = _sniff(data)
    mime = named or sniffed
    if not mime or mime.split("/")[0] not in ("image", "video"):
        raise MediaProblem("media_unreadable", f"{source}: not an image or a video ({mime or 'unknown type'})")
    if named in _SNIFFED and sniffed != named:
        raise MediaProblem("media_unreadable", f"{source}: declared {named}, but the bytes are "
                                               f"{sniffed or 'not a known image or video format'}")
    return mime


def _host_allowed(host: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(host, p.lower()) for p in patterns)


def _refused_address(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%")[0])
    return (ip.is_private or ip.is_loopback or ip.is_link_local or ip.is_reserved or ip.is_multicast
            or ip.is_unspecified)


class MediaReader:
    def __init__(self, settings: MediaSettings, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.settings = settings
        verify: ssl.SSLContext | bool = (ssl.create_default_context(cafile=str(settings.ca_bundle))
                                         if settings.ca_bundle else True)
        self._client = httpx.AsyncClient(timeout=settings.fetch_timeout_seconds, verify=verify,
                                         follow_redirects=False, trust_env=False, transport=transport)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def read(self, part: Part) -> Media:
        declared = part.data.get("mime_type")
        declared = declared if isinstance(declared, str) else None
        if part.type == "blob":
            return self._inline(part, declared)
        if part.type == "file":
            return self._file(part, declared)
        uri = part.data.get("uri")
        if not isinstance(uri, str) or not uri:
            raise MediaProblem("media_unreadable", "uri part without a uri")
        return await self._fetch(uri, declared)

    def _inline(self, part: Part, declared: str | None) -> Media:
        content = part.data.get("content")
        if not isinstance(content, str) or not content:
            raise MediaProblem("media_unreadable", "blob part without content")
        if len(content) * 3 // 4 > self.settings.max_bytes:
            raise MediaProblem("media_too_large", f"inline media over media.max_bytes ({self.settings.max_bytes})")
        try:
            data = base64.b64decode(content, validate=True)
        except (binascii.Error, ValueError):
            raise MediaProblem("media_unreadable", "blob content is not base64") from None
        return Media(_checked_type(declared, data, "inline media"), data, "inline")

    def _file(self, part: Part, declared: str | None) -> Media:
        file_id = part.data.get("file_id")
        directory = self.settings.file_directory
        if directory is None:
            raise MediaProblem("media_unavailable", "file part: media.file_directory is not set")
        if not isinstance(file_id, str) or not file_id or Path(file_id).name != file_id or file_id.startswith("."):
            raise MediaProblem("media_unreadable", f"file part: {file_id!r} is not a plain file name")
        path = directory / file_id
        try:
            size = path.stat().st_size
            if size > self.settings.max_bytes:
                raise MediaProblem("media_too_large", f"file:{file_id} is {size} bytes, over media.max_bytes")
            data = path.read_bytes()
        except OSError as exc:
            raise MediaProblem("media_unavailable", f"file:{file_id}: {exc.strerror}") from None
        return Media(_checked_type(declared, data, f"file:{file_id}"), data, f"file:{file_id}")

    async def _addresses(self, host: str, port: int) -> list[str]:
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise MediaProblem("media_unavailable", f"{host}: cannot resolve ({exc})") from None
        return list(dict.fromkeys(str(info[4][0]) for info in infos))

    async def _fetch(self, uri: str, declared: str | None) -> Media:
        parts = urlsplit(uri)
        host = (parts.hostname or "").lower()
        if parts.scheme not in ("http", "https") or not host:
            raise MediaProblem("media_refused", f"{uri[:200]}: only http(s) URLs are fetched")
        if not _host_allowed(host, self.settings.allowed_hosts):
            raise MediaProblem("media_refused", f"{host} is not in media.allowed_hosts")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        addresses = await self._addresses(host, port)
        private = _host_allowed(host, self.settings.allowed_private_hosts)
        refused = [a for a in addresses if _refused_address(a)]
        if refused and not private:
            raise MediaProblem("media_refused", f"{host} resolves to a private or local address ({refused[0]}); "
                                                "list it in media.allowed_private_hosts to allow it")
        if not addresses:
            raise MediaProblem("media_unavailable", f"{host}: no address")
        failure = "no address answered"
        for address in addresses:  # each one checked above; the next is tried when one cannot be reached
            shown = f"[{address}]" if ":" in address else address
            pinned = urlunsplit((parts.scheme, f"{shown}:{port}", parts.path or "/", parts.query, ""))
            try:
                data, content_type = await self._get(pinned, host, parts.scheme, parts.netloc.rsplit("@", 1)[-1])
            except httpx.ConnectError as exc:
                failure = f"{type(exc).__name__}: {exc}"
                continue
            except httpx.HTTPError as exc:
                raise MediaProblem("media_unavailable", f"{host}: {type(exc).__name__}: {exc}") from None
            return Media(_checked_type(declared or content_type, data, host), data, uri[:500])
        raise MediaProblem("media_unavailable", f"{host}: {failure}")

    async def _get(self, pinned: str, host: str, scheme: str, netloc: str) -> tuple[bytes, str | None]:
        """GET the pinned address with the host's name in the Host header and, for https, the TLS server name
        (the certificate is checked against it)."""
        extensions: dict[str, Any] = {"sni_hostname": host} if scheme == "https" else {}
        headers = {"host": netloc, "accept": "image/*, video/*"}
        limit = self.settings.max_bytes
        async with self._client.stream("GET", pinned, headers=headers, extensions=extensions) as response:
            if response.status_code != 200:
                raise MediaProblem("media_unavailable", f"{host}: HTTP {response.status_code}"
                                   + (" (redirects are not followed)" if response.is_redirect else ""))
            length = response.headers.get("content-length", "")
            if length.isdigit() and int(length) > limit:
                raise MediaProblem("media_too_large", f"{host}: {length} bytes, over media.max_bytes")
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > limit:
                    raise MediaProblem("media_too_large", f"{host}: over media.max_bytes ({limit})")
            return bytes(body), response.headers.get("content-type")


# -- animated GIF frames (standard library only) ----------------------------------------------------------


def _skip_sub_blocks(data: bytes, position: int) -> int:
    while True:
        size = data[position]
        position += 1
        if size == 0:
            return position
        position += size


def gif_frames(data: bytes) -> list[bytes]:
    """Each image of a GIF as a standalone one-frame GIF (header, screen descriptor and global colour table, the
    frame's graphic control extension, descriptor, local colour table and data). Raises ``ValueError`` when the
    GIF is malformed."""
    if not data.startswith((b"GIF87a", b"GIF89a")) or len(data) < 13:
        raise ValueError("not a GIF")
    flags = data[10]
    position = 13 + (3 * 2 ** ((flags & 7) + 1) if flags & 0x80 else 0)
    head = data[:position]
    frames: list[bytes] = []
    control = b""
    try:
        while position < len(data):
            marker = data[position]
            if marker == 0x3B:  # trailer
                break
            if marker == 0x21:  # extension
                end = _skip_sub_blocks(data, position + 2)
                if data[position + 1] == 0xF9:
                    control = data[position:end]
                position = end
            elif marker == 0x2C:  # image descriptor
                local = data[position + 9]
                start = position
                position += 10 + (3 * 2 ** ((local & 7) + 1) if local & 0x80 else 0)
                position = _skip_sub_blocks(data, position + 1)  # LZW minimum code size, then the data
                frames.append(head + control + data[start:position] + b"\x3b")
                control = b""
            else:
                raise ValueError(f"unexpected block 0x{marker:02x}")
    except IndexError:
        raise ValueError("truncated GIF") from None
    if not frames:
        raise ValueError("a GIF without images")
    return frames


def sample_evenly(items: list[bytes], limit: int) -> list[bytes]:
    """Up to ``limit`` items, evenly spaced, the first and last included."""
    if len(items) <= limit:
        return items
    if limit == 1:
        return [items[0]]
    return [items[round(i * (len(items) - 1) / (limit - 1))] for i in range(limit)]

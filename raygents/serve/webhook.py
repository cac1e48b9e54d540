"""Webhooks: a run's outcome POSTed to a URL when the run ends, signed, retried with backoff,
and never sent where it must not go (link-local and metadata addresses, private networks,
loopback) unless those networks were allowed."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import json
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from raygents.serve.problems import Problem

__all__ = ["Delivery", "SIGNATURE_HEADER", "body_of", "check_url", "deliver", "sign"]

SIGNATURE_HEADER = "X-Raygents-Signature"
_METADATA_HOSTS = frozenset({"metadata.google.internal", "metadata", "metadata.azure.com"})
_ATTEMPTS = 5
_TIMEOUT_S = 10.0


@dataclass
class Delivery:
    """Where a run's webhook stands: ``pending``, ``delivered`` or ``failed``."""

    url: str
    state: str = "pending"
    attempts: int = 0
    status_code: int | None = None
    last_error: str | None = None
    updated_at: float = field(default_factory=time.time)

    def document(self) -> dict[str, Any]:
        """As the run's info shows it."""
        return {
            "url": self.url,
            "state": self.state,
            "attempts": self.attempts,
            "status_code": self.status_code,
            "last_error": self.last_error,
        }


def sign(body: bytes, secret: str | None) -> str:
    """The signature header's value: ``sha256=<hex HMAC-SHA256 of the body>`` (``""``
    without a secret)."""
    if not secret:
        return ""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def _refused(url: str, why: str) -> Problem:
    return Problem(422, "ValidationError", f"webhook: {why}", field="webhook")


def check_url(url: str, networks: Sequence[str]) -> str:
    """``url`` if a webhook may go there (an ``http(s)`` URL with a host, without credentials,
    whitespace or control characters; an address literal is checked as :func:`allowed`).

    Raises:
        Problem: 422 naming the field ``webhook``.
    """
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in url) or not url.isascii():
        raise _refused(url, "the URL holds whitespace, control or non-ASCII characters")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _refused(url, "an http:// or https:// URL with a host is needed")
    if parts.username is not None or parts.password is not None:
        raise _refused(url, "the URL must not hold credentials")
    try:
        parts.port  # noqa: B018  (raises on a bad port)
    except ValueError:
        raise _refused(url, "the URL's port is not a port") from None
    host = parts.hostname
    if host in _METADATA_HOSTS:
        raise _refused(url, f"{host!r} is a cloud metadata address")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return url  # (a name: its addresses are checked at delivery)
    why = blocked(address, networks)
    if why is not None:
        raise _refused(url, why)
    return url


def blocked(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address, networks: Sequence[str]
) -> str | None:
    """Why a webhook may not reach ``address``, or None: it is not a global unicast address
    (loopback, private, shared, link-local such as the cloud metadata service, multicast,
    reserved, unspecified) and not in one of the allowed ``networks``."""
    mapped = getattr(address, "ipv4_mapped", None)
    if mapped is not None:
        address = mapped
    if any(address in ipaddress.ip_network(n) for n in networks):
        return None
    if address.is_global and not address.is_multicast:
        return None
    for flag in ("loopback", "link_local", "private", "multicast", "reserved", "unspecified"):
        if getattr(address, f"is_{flag}"):
            return f"{address} is a {flag.replace('_', '-')} address (not allowed)"
    return f"{address} is not a public address (not allowed)"


async def _vetted(url: str, networks: Sequence[str]) -> tuple[str | None, str | None]:
    """The address to send to for ``url`` (its host resolved once, every address it resolves
    to allowed), or None and why the host may not be reached."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        return None, f"cannot resolve {host!r}: {exc}"
    if not infos:
        return None, f"cannot resolve {host!r}: no address"
    for info in infos:
        why = blocked(ipaddress.ip_address(info[4][0]), networks)
        if why is not None:
            return None, f"{host!r} resolves to {why}"
    return str(infos[0][4][0]), None


def _pinned(url: str, address: str) -> tuple[str, dict[str, str], dict[str, Any]]:
    """``url`` sent to ``address`` (the one vetted: a name that resolves to another address by
    the time of the connection, DNS rebinding, never redirects it), with the ``Host`` header
    and the TLS server name (and so the certificate checked) still the URL's host."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    literal = f"[{address}]" if ":" in address else address
    netloc = literal if parts.port is None else f"{literal}:{parts.port}"
    shown = parts.netloc  # (no credentials: check_url refuses them)
    extensions = {"sni_hostname": host} if parts.scheme == "https" else {}
    return urlunsplit(parts._replace(netloc=netloc)), {"Host": shown}, extensions


def body_of(payload: dict[str, Any]) -> bytes:
    """The bytes a webhook sends for ``payload`` (compact UTF-8 JSON)."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


async def deliver(
    delivery: Delivery,
    payload: dict[str, Any] | bytes,
    secret: str | None,
    networks: Sequence[str],
    *,
    attempts: int = _ATTEMPTS,
    backoff_s: float = 1.0,
) -> Delivery:
    """POST ``payload`` (or the bytes of a body made before: :func:`body_of`) to the
    delivery's URL until a 2xx answer, up to ``attempts`` times, waiting ``backoff_s``, then
    twice as long, between tries; redirects are not followed (they could lead anywhere).
    Updates and returns ``delivery``."""
    body = payload if isinstance(payload, bytes) else body_of(payload)
    headers = {"Content-Type": "application/json", "User-Agent": "raygents-webhook"}
    signature = sign(body, secret)
    if signature:
        headers[SIGNATURE_HEADER] = signature
    address, why = await _vetted(delivery.url, networks)
    if address is None:
        delivery.state, delivery.last_error = "failed", why
        return delivery
    target, host, extensions = _pinned(delivery.url, address)
    headers.update(host)
    wait = backoff_s
    async with httpx.AsyncClient(timeout=_TIMEOUT_S, follow_redirects=False) as client:
        for attempt in range(1, attempts + 1):
            delivery.attempts = attempt
            delivery.updated_at = time.time()
            try:
                answer = await client.post(
                    target, content=body, headers=headers, extensions=extensions
                )
            except httpx.HTTPError as exc:
                delivery.status_code, delivery.last_error = None, f"{type(exc).__name__}: {exc}"
            else:
                delivery.status_code = answer.status_code
                if 200 <= answer.status_code < 300:
                    delivery.state, delivery.last_error = "delivered", None
                    return delivery
                delivery.last_error = f"answered {answer.status_code}"
            if attempt < attempts:
                await asyncio.sleep(wait)
                wait *= 2
    delivery.state = "failed"
    return delivery

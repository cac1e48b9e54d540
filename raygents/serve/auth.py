"""Auth: who may call the API. A bearer token, compared in constant time; with no token,
callers on this machine only."""

from __future__ import annotations

import hmac

from raygents.serve.problems import Problem
from raygents.serve.settings import is_loopback

__all__ = ["OPEN_PATHS", "check"]

OPEN_PATHS = frozenset({"/", "/healthz", "/page.js", "/page.css"})
"""What answers without a token: the page (it holds no data and asks for the token) and the
health check."""


def check(token: str | None, authorization: str | None, client_host: str | None) -> None:
    """Let a request through, or refuse it.

    Raises:
        Problem: 401 without the right ``Authorization: Bearer <token>``; 403 from another
            machine when the app has no token.
    """
    if token is None:
        if client_host is None or not is_loopback(client_host):
            raise Problem(
                403, "Forbidden", "this app has no auth token: it answers this machine only"
            )
        return
    scheme, _, given = (authorization or "").partition(" ")
    ok = scheme.lower() == "bearer" and hmac.compare_digest(
        given.strip().encode("utf-8", "replace"), token.encode()
    )
    if not ok:
        raise Problem(401, "Unauthorized", "send Authorization: Bearer <token>")

"""ServeSettings: what an HTTP app of agents is built with, checked in the caller's process."""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from raygents.agents.agent import Agent
from raygents.errors import UserError
from raygents.runtime.link.settings import Durability

__all__ = ["ServeSettings", "agents_by_name", "is_loopback", "packed", "settings", "unpacked"]

TOKEN_ENV = "RAYGENTS_API_TOKEN"
WEBHOOK_SECRET_ENV = "RAYGENTS_WEBHOOK_SECRET"
_MIN_TOKEN = 16  # characters: a bearer token shorter than this is guessable


@dataclass(frozen=True)
class ServeSettings:
    """The app's configuration, handed to each replica (agents are its only live objects: a
    replica needs them to start runs, as a driver does)."""

    agents: dict[str, Agent]
    auth_token: str | None
    webhook_secret: str | None
    namespace: str
    store: str | None
    route_prefix: str = "/"
    durability: Durability = "sync"
    """The coordinator's durability, which replicas and the keeper join with."""
    webhook_networks: tuple[str, ...] = ()
    """Networks (CIDR) webhooks may reach although they are private, loopback or link-local."""
    heartbeat_s: float = 15.0
    """How often an idle event stream gets a comment, so that proxies keep it open."""
    cors_origins: tuple[str, ...] = ()
    """Origins whose pages may call the API from a browser (CORS); none by default."""

    @property
    def signing_key(self) -> str | None:
        """What webhook bodies are signed with: the webhook secret, else the auth token."""
        return self.webhook_secret or self.auth_token

    @property
    def keeper_name(self) -> str:
        """The name of the app's keeper actor (threads and webhook deliveries)."""
        return f"raygents-serve-keeper:{self.route_prefix}"


def packed(app: ServeSettings) -> bytes:
    """The settings as the app's processes get them: one pickle, made where the app is built,
    that each replica and the keeper load (:func:`unpacked`). Copies loaded from one pickle
    are alike, so their agents have the same fingerprints and the app's runs share agent
    actors; a copy pickled again from a copy need not be."""
    from ray import cloudpickle

    return bytes(cloudpickle.dumps(app))  # type: ignore[no-untyped-call]


def unpacked(blob: bytes) -> ServeSettings:
    """The settings :func:`packed` made."""
    from ray import cloudpickle

    app: ServeSettings = cloudpickle.loads(blob)
    return app


def agents_by_name(agents: Agent | Sequence[Agent] | Mapping[str, Agent]) -> dict[str, Agent]:
    """``agents`` (an agent, a list of agents or ``{name: agent}``) keyed by the name requests
    use.

    Raises:
        UserError: something that is not an agent, no agent, or two agents of one name.
    """
    if isinstance(agents, Agent):
        pairs: list[tuple[Any, Any]] = [(agents.name, agents)]
    elif isinstance(agents, Mapping):
        pairs = list(agents.items())
    elif isinstance(agents, Sequence) and not isinstance(agents, str | bytes):
        pairs = [(getattr(a, "name", None), a) for a in agents]
    else:
        raise UserError(
            f"agents must be an Agent, a list of agents or a dict of them, got "
            f"{type(agents).__name__!r}"
        )
    out: dict[str, Agent] = {}
    for name, agent in pairs:
        if not isinstance(agent, Agent):
            raise UserError(f"agents must be raygents Agents, got {type(agent).__name__!r}")
        if not isinstance(name, str) or not name:
            raise UserError(f"an agent's name must be a non-empty str, got {name!r}")
        if name in out:
            raise UserError(f"two agents are named {name!r}; name each one once")
        out[name] = agent
    if not out:
        raise UserError("serve at least one agent")
    return out


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) is this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _token(auth_token: str | None) -> str | None:
    token = auth_token if auth_token is not None else os.environ.get(TOKEN_ENV) or None
    if token is None:
        return None
    if not isinstance(token, str) or len(token) < _MIN_TOKEN or not token.isprintable():
        raise UserError(
            f"the auth token must be a printable str of at least {_MIN_TOKEN} characters "
            f"(from auth_token= or ${TOKEN_ENV})"
        )
    if any(c.isspace() for c in token):
        raise UserError("the auth token must not hold whitespace")
    return token


def _networks(networks: Sequence[str]) -> tuple[str, ...]:
    out = []
    for n in networks:
        try:
            out.append(str(ipaddress.ip_network(n, strict=False)))
        except (TypeError, ValueError):
            raise UserError(f"webhook_networks takes CIDR networks, got {n!r}") from None
    return tuple(out)


_ORIGIN = re.compile(r"https?://([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?")


def _origins(origins: Sequence[str]) -> tuple[str, ...]:
    """CORS origins as browsers send them (``scheme://host[:port]``, no path).

    Raises:
        UserError: a string, or an item that is not such an origin (``*`` included: an app
            whose token a page holds names the pages it trusts).
    """
    if isinstance(origins, str | bytes):
        raise UserError(f"cors_origins takes a list of origins, got {origins!r}")
    out = []
    for origin in origins:
        if not isinstance(origin, str) or not _ORIGIN.fullmatch(origin):
            raise UserError(
                "cors_origins takes origins such as 'https://app.example.com' or "
                f"'http://127.0.0.1:3000' (a scheme, a host and maybe a port), got {origin!r}"
            )
        out.append(origin.lower())
    return tuple(out)


def _route_prefix(prefix: str) -> str:
    if not isinstance(prefix, str) or not prefix.startswith("/") or "//" in prefix:
        raise UserError(f"route_prefix must be a path beginning with '/', got {prefix!r}")
    if any(not (c.isalnum() or c in "/-_.") for c in prefix):
        raise UserError(f"route_prefix may hold letters, digits and '/-_.', got {prefix!r}")
    return prefix if prefix == "/" else prefix.rstrip("/")


def settings(
    agents: Agent | Sequence[Agent] | Mapping[str, Agent],
    *,
    auth_token: str | None,
    webhook_secret: str | None,
    route_prefix: str,
    webhook_networks: Sequence[str] = (),
    heartbeat_s: float = 15.0,
    cors_origins: Sequence[str] = (),
) -> ServeSettings:
    """The settings of an app, from the arguments of ``app``/``start`` and the environment:
    the token (``$RAYGENTS_API_TOKEN``), the webhook secret (``$RAYGENTS_WEBHOOK_SECRET``),
    and raygents' namespace, store and durability (this process's runtime's if raygents is
    initialised, else the default namespace, ``$RAYGENTS_STORE`` and ``sync``)."""
    from raygents.runtime.driver import client

    rt = client._runtime
    secret = webhook_secret if webhook_secret is not None else os.environ.get(WEBHOOK_SECRET_ENV)
    return ServeSettings(
        agents=agents_by_name(agents),
        auth_token=_token(auth_token),
        webhook_secret=secret or None,
        namespace=rt.namespace if rt is not None else "raygents",
        store=rt.settings.store if rt is not None else None,
        durability=rt.settings.durability if rt is not None else "sync",
        route_prefix=_route_prefix(route_prefix),
        webhook_networks=_networks(webhook_networks),
        heartbeat_s=heartbeat_s,
        cors_origins=_origins(cors_origins),
    )

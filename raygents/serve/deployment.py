"""The Ray Serve deployment of the API, and ``app``/``start``/``stop``."""

from __future__ import annotations

import logging
import socket
from collections.abc import Mapping, Sequence
from typing import Any

from ray import serve

from raygents.agents.agent import Agent
from raygents.errors import UserError
from raygents.serve.settings import TOKEN_ENV, ServeSettings, is_loopback, packed, settings

__all__ = ["APP_NAME", "RaygentsAPI", "app", "start", "stop"]

log = logging.getLogger("raygents")
APP_NAME = "raygents"
"""The Serve application's name."""


@serve.ingress()
class RaygentsAPI:
    """One replica of the API: a raygents driver that holds no run (the coordinator drives
    them, so they go on when a replica restarts or moves)."""

    def __init__(self, app_settings: bytes) -> None:
        from raygents.serve.service import Service

        self.service = Service(app_settings)

    def __serve_build_asgi_app__(self) -> Any:
        from raygents.serve.api import build_api

        return build_api(self.service)


Agents = Agent | Sequence[Agent] | Mapping[str, Agent]


def app(
    agents: Agents,
    *,
    auth_token: str | None = None,
    webhook_secret: str | None = None,
    route_prefix: str = "/",
    num_replicas: int = 1,
    webhook_networks: Sequence[str] = (),
    cors_origins: Sequence[str] = (),
    _heartbeat_s: float = 15.0,
) -> Any:
    """The HTTP API of ``agents`` as a Ray Serve application (for ``ray.serve.run`` or a
    Serve config file).

    Args:
        agents: an ``Agent``, a list of agents or ``{name: Agent}``; requests name the agent.
        auth_token: the bearer token every request must carry; default
            ``$RAYGENTS_API_TOKEN``. Without one, the app answers this machine only.
        webhook_secret: the key of webhook signatures; default ``$RAYGENTS_WEBHOOK_SECRET``,
            else the auth token.
        route_prefix: where the API lives on Serve's HTTP port.
        num_replicas: how many replicas answer (any replica answers for any run).
        webhook_networks: networks (CIDR) webhooks may reach although they are loopback,
            private or link-local (refused by default), e.g. ``["10.0.0.0/8"]``.
        cors_origins: the origins whose pages may call the API from a browser, e.g.
            ``["https://app.example.com"]``; none by default (CORS is off). Such a page still
            sends the bearer token itself.

    raygents' namespace, store and durability are this process's (if ``raygents.init``
    ran), else the default namespace, ``$RAYGENTS_STORE`` and ``sync``.

    Raises:
        UserError: bad agents, token, route prefix, networks or origins.
    """
    if type(num_replicas) is not int or num_replicas < 1:
        raise UserError(f"num_replicas must be an int >= 1, got {num_replicas!r}")
    built = settings(
        agents,
        auth_token=auth_token,
        webhook_secret=webhook_secret,
        route_prefix=route_prefix,
        webhook_networks=webhook_networks,
        heartbeat_s=_heartbeat_s,
        cors_origins=cors_origins,
    )
    return _application(built, num_replicas)


def _application(built: ServeSettings, num_replicas: int) -> Any:
    deployment = serve.deployment(
        name="raygents-api",
        num_replicas=num_replicas,
        # SSE streams and waiting requests are long and cost a replica almost nothing.
        max_ongoing_requests=1000,
        # A replica being stopped looks for requests still in flight every quarter second
        # (Serve's default: every 2 s, sleeping first, so an idle replica took 2 s to stop).
        graceful_shutdown_wait_loop_s=0.25,
        ray_actor_options={"num_cpus": 0},
    )(RaygentsAPI)
    return deployment.bind(packed(built))


def start(
    agents: Agents,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    auth_token: str | None = None,
    webhook_secret: str | None = None,
    route_prefix: str = "/",
    num_replicas: int = 1,
    webhook_networks: Sequence[str] = (),
    cors_origins: Sequence[str] = (),
    _heartbeat_s: float = 15.0,
) -> str:
    """Serve ``agents`` over HTTP on the current raygents/Ray instance (see :func:`app`);
    returns the base URL.

    Serve keeps the address it first listened on until ``ray.serve.shutdown()``: a later
    ``start`` on the same Ray instance must name the same host and port.

    Raises:
        UserError: a host other than a loopback one without an auth token (anyone who
            reaches it could run agents), an address Serve cannot listen on (in use), Serve
            already listening on another address, or what :func:`app` refuses.
    """
    from raygents.runtime.driver.client import current

    if type(port) is not int or not 0 < port < 65536:
        raise UserError(f"port must be an int from 1 to 65535, got {port!r}")
    if type(num_replicas) is not int or num_replicas < 1:
        raise UserError(f"num_replicas must be an int >= 1, got {num_replicas!r}")
    current()  # raygents (and Ray) up here: the app uses its namespace, store, durability
    built = settings(
        agents,
        auth_token=auth_token,
        webhook_secret=webhook_secret,
        route_prefix=route_prefix,
        webhook_networks=webhook_networks,
        heartbeat_s=_heartbeat_s,
        cors_origins=cors_origins,
    )
    if built.auth_token is None and not is_loopback(host):
        raise UserError(
            f"serving on {host!r} needs an auth token (auth_token= or ${TOKEN_ENV}): without "
            "one the app may only listen on a loopback host such as 127.0.0.1"
        )
    global _served
    _start_serve(host, port)
    serve.run(_application(built, num_replicas), name=APP_NAME, route_prefix=built.route_prefix)
    _served = built
    if built.auth_token is None:
        log.warning("raygents serves on %s:%d without an auth token: this machine only", host, port)
    shown = f"[{host}]" if ":" in host else host
    prefix = "" if built.route_prefix == "/" else built.route_prefix
    return f"http://{shown}:{port}{prefix}"


def _start_serve(host: str, port: int) -> None:
    """Serve's HTTP proxy listening on ``host:port``, or a ``UserError`` that says why not.
    A Serve this call started and could not listen is shut down again."""
    listening = _serve_address()
    if listening is not None:
        if listening != (host, port):
            raise UserError(
                f"Serve already listens on {listening[0]}:{listening[1]} on this Ray instance "
                f"(asked for {host}:{port}): start with that host and port, or call "
                "ray.serve.shutdown() first"
            )
        return
    # A proxy listens on this machine too, unless this driver reaches Ray as a Ray Client
    # (then the proxies' machines are elsewhere, and only Serve can tell).
    here = not _ray_client()
    problem = _cannot_listen(host, port) if here else None  # (before Serve starts anything)
    if problem is not None:
        raise UserError(f"cannot serve on {host}:{port}: {problem}")
    try:
        serve.start(http_options={"host": host, "port": port})
    except Exception as exc:
        serve.shutdown()  # type: ignore[no-untyped-call]  # (its proxy cannot listen)
        problem = _cannot_listen(host, port) if here else None
        if problem is None and "Failed to bind" in str(exc):
            problem = "the address was in use when Serve's proxy started"
        if problem is None:
            raise
        raise UserError(f"cannot serve on {host}:{port}: {problem}") from None


def _serve_address() -> tuple[str, int] | None:
    """The host and port of the Serve running on this Ray instance, or None when none
    runs (``serve.start`` ignores the address asked of a running Serve)."""
    from ray.serve.context import _get_global_client  # (Serve has no public reader of it)

    client = _get_global_client(raise_if_no_controller_running=False)
    if client is None:
        return None
    options = client.http_config
    return str(options.host), int(options.port)


def _ray_client() -> bool:
    """Whether this process reaches Ray as a Ray Client (``ray://``)."""
    from ray.util.client import ray as client

    return bool(client.is_connected())  # type: ignore[no-untyped-call]


def _cannot_listen(host: str, port: int) -> str | None:
    """Why this machine cannot listen on ``host:port`` (as the proxy would), or None."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as err:
            return err.strerror or str(err)
    return None


def stop() -> None:
    """Stop the app :func:`start` served (its runs go on: the coordinator has them), and its
    keeper. Queued thread messages and webhook deliveries not made stay in the store: an
    app started again with the same route prefix, namespace and store goes on with them.
    Serve itself stays up; ``ray.serve.shutdown()`` stops it."""
    import ray

    global _served
    served, _served = _served, None
    try:
        serve.delete(APP_NAME)
    except Exception as exc:  # (Serve is not running, or has no such app)
        log.debug("no Serve app to delete: %s", exc)
    if served is None:
        return
    try:
        keeper = ray.get_actor(served.keeper_name, namespace=served.namespace)
    except ValueError:
        return
    ray.kill(keeper, no_restart=True)


_served: ServeSettings | None = None
"""What :func:`start` served last in this process (:func:`stop` removes its keeper)."""

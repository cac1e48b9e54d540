"""A local S3 for tests: moto's threaded server, the AWS environment, and a fault proxy.

Typical use, as a pytest fixture in any test module::

    from s3_server import Fault, MotoServer, local_s3

    @pytest.fixture(scope="module")
    def moto_server():
        with MotoServer() as server:
            yield server

    @pytest.fixture
    def s3(moto_server):
        with local_s3(moto_server, proxy=True) as s3:
            yield s3   # s3.url("runs"), s3.proxy.inject(Fault.slow_down()), s3.client()

Everything listens on 127.0.0.1 only. moto keeps its buckets in process-wide memory, so data
survives a server restart (like S3 surviving an outage) and every ``local_s3`` gets a bucket
of its own. ``aws_env`` points boto3 at the server with fake credentials and no config files,
so a test can never reach real AWS.
"""

from __future__ import annotations

import functools
import http.client
import logging
import os
import random
import socket
import struct
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

__all__ = [
    "Fault",
    "FaultProxy",
    "LocalS3",
    "MotoServer",
    "ProxyRecord",
    "aws_env",
    "create_bucket",
    "local_s3",
    "s3_client",
]

FAKE_ACCESS_KEY = "testing-access-key-id"
FAKE_SECRET_KEY = "testing-secret-access-key"
_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "content-length"}
)


class MotoServer:
    """moto's S3 on 127.0.0.1, served from a thread; ``stop`` and ``start`` keep the port."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host, self.port = host, port
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start serving (again); the first start picks a free port."""
        from moto.moto_server.werkzeug_app import MotoRequestHandler
        from werkzeug.serving import make_server

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self._server = make_server(
            self.host,
            self.port,
            _moto_app(),
            threaded=True,
            request_handler=MotoRequestHandler,
        )
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name=f"moto-s3-{self.port}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop serving; connections are refused until ``start``."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    @property
    def running(self) -> bool:
        """Whether the server is serving."""
        return self._server is not None

    @property
    def endpoint_url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> MotoServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _moto_app() -> Any:
    """moto's WSGI application (every service; the tests use S3), whose dispatcher finds the
    backend for each request's host once per host: moto's own scans its package directory
    for every request, a third of its work per S3 request."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    class S3Dispatcher(DomainDispatcherApplication):
        def __init__(self) -> None:
            super().__init__(create_backend_app)
            self._backends: dict[str | None, Any] = {}

        def get_backend_for_host(self, host: str | None) -> Any:
            if host not in self._backends:
                self._backends[host] = super().get_backend_for_host(host)
            return self._backends[host]

    return S3Dispatcher()


@dataclass(frozen=True)
class Fault:
    """What the proxy does with one request; build one with the class methods."""

    kind: Literal["pass", "delay", "error", "reset", "truncate", "drop_after_apply"]
    delay_s: float = 0.0
    status: int = 0
    code: str = ""
    message: str = ""

    @classmethod
    def passthrough(cls) -> Fault:
        """Forward the request and its response unchanged."""
        return cls("pass")

    @classmethod
    def delay(cls, seconds: float) -> Fault:
        """Wait ``seconds``, then forward (the request still applies if the client gave up)."""
        return cls("delay", delay_s=seconds)

    @classmethod
    def error(cls, status: int, code: str, message: str = "injected by the fault proxy") -> Fault:
        """Answer with an S3 error document without forwarding."""
        return cls("error", status=status, code=code, message=message)

    @classmethod
    def slow_down(cls) -> Fault:
        """503 SlowDown (throttling)."""
        return cls.error(503, "SlowDown", "Please reduce your request rate.")

    @classmethod
    def unavailable(cls) -> Fault:
        """503 ServiceUnavailable."""
        return cls.error(503, "ServiceUnavailable", "Service is unable to handle request.")

    @classmethod
    def internal_error(cls) -> Fault:
        """500 InternalError."""
        return cls.error(500, "InternalError", "We encountered an internal error.")

    @classmethod
    def access_denied(cls) -> Fault:
        """403 AccessDenied."""
        return cls.error(403, "AccessDenied", "Access Denied")

    @classmethod
    def reset(cls) -> Fault:
        """Reset the connection (TCP RST) without forwarding."""
        return cls("reset")

    @classmethod
    def truncate(cls) -> Fault:
        """Forward, then send the headers and only half the response body, and close."""
        return cls("truncate")

    @classmethod
    def drop_after_apply(cls) -> Fault:
        """Forward (so the request applies), then reset the connection instead of answering."""
        return cls("drop_after_apply")


@dataclass(frozen=True)
class ProxyRecord:
    """One request the proxy saw, and what it did."""

    method: str
    path: str
    fault: str
    status: int | None
    """The status sent back, or None when the connection was reset."""
    agent: str = ""
    """The request's ``User-Agent``."""
    started: float = 0.0
    """When the proxy had the request (``time.time()``)."""
    ended: float = 0.0
    """When it had decided the answer: the upstream's reply, or the fault."""


@dataclass
class _Rule:
    fault: Fault
    method: str | None
    path_contains: str | None
    times: int | None  # None: until cleared

    def matches(self, method: str, path: str) -> bool:
        return (self.method is None or self.method == method) and (
            self.path_contains is None or self.path_contains in path
        )


@dataclass
class _Throttle:
    per_s: float
    fault: Fault
    methods: frozenset[str] | None
    times: deque[float] = field(default_factory=deque)  # the passed requests of the last 1 s

    def exceeded(self, method: str, now: float) -> bool:
        """Whether a request of ``method`` now is past the rate (else it counts toward it)."""
        if self.methods is not None and method not in self.methods:
            return False
        while self.times and self.times[0] <= now - 1.0:
            self.times.popleft()
        if len(self.times) >= self.per_s:
            return True
        self.times.append(now)
        return False


@dataclass
class _Random:
    rate: float
    faults: tuple[Fault, ...]
    methods: frozenset[str] | None
    rng: random.Random = field(repr=False)


class FaultProxy:
    """A threaded HTTP proxy on 127.0.0.1 in front of an S3 endpoint, injecting faults.

    Rules are checked in the order they were added; the first that matches a request decides
    it (a counted rule is used up after ``times`` requests). Without a matching rule, a throttle
    (``throttle``) answers requests past its rate, then a random schedule (``random_faults``)
    may pick a fault; otherwise the request passes. Every request is recorded in ``records``.
    """

    def __init__(self, upstream_url: str, host: str = "127.0.0.1", port: int = 0) -> None:
        scheme, _, rest = upstream_url.partition("://")
        if scheme != "http":
            raise ValueError(f"the fault proxy forwards to http:// only, got {upstream_url!r}")
        upstream_host, _, upstream_port = rest.rstrip("/").partition(":")
        self.upstream = (upstream_host, int(upstream_port or 80))
        self.host, self.port = host, port
        self.records: list[ProxyRecord] = []
        self._rules: list[_Rule] = []
        self._random: _Random | None = None
        self._throttle: _Throttle | None = None
        self._lock = threading.Lock()
        self._server: _ProxyServer | None = None
        self._thread: threading.Thread | None = None

    def inject(
        self,
        *faults: Fault,
        method: str | None = None,
        path_contains: str | None = None,
    ) -> None:
        """Apply ``faults``, one each, to the next matching requests, in order."""
        with self._lock:
            self._rules.extend(_Rule(f, method, path_contains, 1) for f in faults)

    def always(
        self, fault: Fault, *, method: str | None = None, path_contains: str | None = None
    ) -> None:
        """Apply ``fault`` to every matching request until ``clear``."""
        with self._lock:
            self._rules.append(_Rule(fault, method, path_contains, None))

    def random_faults(
        self,
        rate: float,
        faults: tuple[Fault, ...] = (Fault.slow_down(), Fault.internal_error()),
        *,
        seed: int = 0,
        methods: tuple[str, ...] | None = None,
    ) -> None:
        """Give each request (of ``methods``) a fault from ``faults`` with probability ``rate``.

        The schedule is seeded, so a run that fails can be replayed.
        """
        with self._lock:
            chosen = frozenset(methods) if methods else None
            self._random = _Random(rate, faults, chosen, random.Random(seed))

    def throttle(
        self,
        per_s: float,
        fault: Fault | None = None,
        *,
        methods: tuple[str, ...] | None = ("PUT",),
    ) -> None:
        """Answer ``fault`` (by default 503 SlowDown) to requests of ``methods`` past ``per_s``
        in any second, as S3 does past its request rate per prefix; those answered do not
        count toward the rate."""
        with self._lock:
            chosen = frozenset(methods) if methods else None
            self._throttle = _Throttle(per_s, fault or Fault.slow_down(), chosen)

    def clear(self) -> None:
        """Drop every rule, the random schedule and the throttle; requests pass from now on."""
        with self._lock:
            self._rules.clear()
            self._random = None
            self._throttle = None

    def count(self, method: str | None = None, fault: str | None = None) -> int:
        """How many requests were seen, optionally of one method and fault kind."""
        with self._lock:
            return sum(
                1
                for r in self.records
                if (method is None or r.method == method) and (fault is None or r.fault == fault)
            )

    def start(self) -> None:
        """Start listening; the first start picks a free port."""
        server = _ProxyServer((self.host, self.port), _ProxyHandler)
        server.proxy = self
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop listening; connections are refused until ``start``."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    @property
    def endpoint_url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> FaultProxy:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _choose(self, method: str, path: str) -> Fault:
        with self._lock:
            for rule in self._rules:
                if rule.matches(method, path):
                    if rule.times is not None:
                        rule.times -= 1
                        if rule.times == 0:
                            self._rules.remove(rule)
                    return rule.fault
            throttle = self._throttle
            if throttle is not None and throttle.exceeded(method, time.monotonic()):
                return throttle.fault
            chance = self._random
            applies = chance is not None and (chance.methods is None or method in chance.methods)
            if chance is not None and applies and chance.rng.random() < chance.rate:
                return chance.rng.choice(chance.faults)
        return Fault.passthrough()

    def _record(
        self,
        method: str,
        path: str,
        fault: Fault,
        status: int | None,
        agent: str = "",
        started: float = 0.0,
    ) -> None:
        record = ProxyRecord(method, path, fault.kind, status, agent, started, time.time())
        with self._lock:
            self.records.append(record)


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True
    proxy: FaultProxy

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients that hang up are part of the game: no tracebacks."""


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _ProxyServer

    def setup(self) -> None:
        """Send small writes at once (Nagle plus delayed ACKs would add 40 ms a request)."""
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:
        """Stay quiet."""

    def _handle(self) -> None:
        proxy: FaultProxy = self.server.proxy
        started = time.time()
        body = self._read_body()
        fault = proxy._choose(self.command, self.path)
        if fault.kind == "delay":
            time.sleep(fault.delay_s)
        if fault.kind == "reset":
            proxy._record(self.command, self.path, fault, None, started=started)
            self._reset()
            return
        if fault.kind == "error":
            proxy._record(self.command, self.path, fault, fault.status, started=started)
            self._send_error_document(fault)
            return
        try:
            status, reason, headers, payload = self._forward(body)
        except OSError:  # the upstream is down: look like it to the client
            proxy._record(self.command, self.path, fault, None, started=started)
            self._reset()
            return
        if fault.kind == "drop_after_apply":
            proxy._record(self.command, self.path, fault, None, started=started)
            self._reset()
            return
        agent = self.headers.get("User-Agent", "")
        proxy._record(self.command, self.path, fault, status, agent, started)
        self.send_response(status, reason)
        for name, value in headers:
            if name.lower() not in _HOP_BY_HOP:
                self.send_header(name, value)
        length = dict((k.lower(), v) for k, v in headers).get("content-length")
        head = self.command == "HEAD"
        self.send_header("Content-Length", length if head and length else str(len(payload)))
        self.end_headers()
        if head:
            return
        if fault.kind == "truncate":
            self.wfile.write(payload[: len(payload) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(payload)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while True:
                line = self.rfile.readline()
                chunks.append(line)
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while True:  # trailers, then the blank line
                        trailer = self.rfile.readline()
                        chunks.append(trailer)
                        if trailer in (b"\r\n", b"\n", b""):
                            return b"".join(chunks)
                chunks.append(self.rfile.read(size + 2))
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _forward(self, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
        host, port = self.server.proxy.upstream
        connection = http.client.HTTPConnection(host, port, timeout=30)
        try:
            connection.putrequest(
                self.command, self.path, skip_host=True, skip_accept_encoding=True
            )
            for name, value in self.headers.items():
                if name.lower() not in ("connection", "keep-alive"):
                    connection.putheader(name, value)
            connection.endheaders(body or None)
            response = connection.getresponse()
            return response.status, response.reason, response.getheaders(), response.read()
        finally:
            connection.close()

    def _send_error_document(self, fault: Fault) -> None:
        document = (
            '<?xml version="1.0" encoding="UTF-8"?>\n<Error>'
            f"<Code>{fault.code}</Code><Message>{fault.message}</Message>"
            "<RequestId>fault-proxy</RequestId></Error>"
        ).encode()
        self.send_response(fault.status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", "0" if self.command == "HEAD" else str(len(document)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(document)

    def _reset(self) -> None:
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()
        self.close_connection = True


@contextmanager
def aws_env(
    endpoint_url: str,
    *,
    access_key: str = FAKE_ACCESS_KEY,
    secret_key: str = FAKE_SECRET_KEY,
    region: str = "us-east-1",
) -> Iterator[dict[str, str]]:
    """Point boto3 at ``endpoint_url`` with fake credentials (and let raygents use a store there
    without the checkpoint key: moto is thrown away); restore the environment after.

    Yields:
        The variables set, e.g. to hand to a subprocess or a Ray ``runtime_env``.
    """
    variables = {
        "AWS_ACCESS_KEY_ID": access_key,
        "AWS_SECRET_ACCESS_KEY": secret_key,
        "AWS_DEFAULT_REGION": region,
        "AWS_REGION": region,
        "AWS_ENDPOINT_URL_S3": endpoint_url,
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "RAYGENTS_UNSIGNED_OK": "1",  # (a throwaway moto store runs without the key)
    }
    removed = (
        *("AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL"),
        *("AWS_MAX_ATTEMPTS", "AWS_RETRY_MODE", "AWS_CA_BUNDLE"),
    )
    saved = {name: os.environ.get(name) for name in (*variables, *removed)}
    for name in removed:
        os.environ.pop(name, None)
    os.environ.update(variables)
    try:
        yield variables
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@functools.lru_cache(maxsize=16)
def s3_client(endpoint_url: str) -> Any:
    """A boto3 S3 client for ``endpoint_url`` with fake credentials and no retries (cached)."""
    import boto3
    from botocore.config import Config

    return boto3.session.Session(
        aws_access_key_id=FAKE_ACCESS_KEY,
        aws_secret_access_key=FAKE_SECRET_KEY,
        region_name="us-east-1",
    ).client(
        "s3",
        endpoint_url=endpoint_url,
        config=Config(retries={"mode": "standard", "max_attempts": 1}),
    )


def create_bucket(endpoint_url: str, name: str | None = None) -> str:
    """Create a bucket (a fresh random name by default) and return its name."""
    name = name or f"raygents-test-{uuid.uuid4().hex[:12]}"
    s3_client(endpoint_url).create_bucket(Bucket=name)
    return name


@dataclass
class LocalS3:
    """A bucket on a local moto server, maybe behind a fault proxy, with the env set."""

    server: MotoServer
    bucket: str
    proxy: FaultProxy | None
    env: dict[str, str]
    """The AWS variables in effect."""

    @property
    def endpoint_url(self) -> str:
        """What boto3 talks to: the proxy when there is one, else the server."""
        return self.proxy.endpoint_url if self.proxy else self.server.endpoint_url

    def url(self, prefix: str = "") -> str:
        """``s3://<bucket>/<prefix>``, for ``open_store``."""
        return f"s3://{self.bucket}/{prefix}" if prefix else f"s3://{self.bucket}"

    def client(self) -> Any:
        """A boto3 client straight to the server (bypassing the proxy), for inspection."""
        return s3_client(self.server.endpoint_url)

    def keys(self) -> list[str]:
        """Every object key in the bucket, sorted."""
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=self.bucket)
        return sorted(item["Key"] for page in pages for item in page.get("Contents", ()))


@contextmanager
def local_s3(
    server: MotoServer | None = None,
    *,
    proxy: bool = False,
    secret_key: str = FAKE_SECRET_KEY,
) -> Iterator[LocalS3]:
    """A fresh bucket on ``server`` (or on a server of its own), with the AWS env set.

    Args:
        server: a running moto server to share; ``None`` starts and stops one.
        proxy: put a :class:`FaultProxy` between boto3 and the server.
        secret_key: the fake secret, e.g. a canary to search error messages for.
    """
    own = server is None
    server = server or MotoServer()
    if own:
        server.start()
    fault_proxy = FaultProxy(server.endpoint_url) if proxy else None
    try:
        if fault_proxy:
            fault_proxy.start()
        bucket = create_bucket(server.endpoint_url)
        endpoint = fault_proxy.endpoint_url if fault_proxy else server.endpoint_url
        with aws_env(endpoint, secret_key=secret_key) as env:
            yield LocalS3(server, bucket, fault_proxy, env)
    finally:
        if fault_proxy:
            fault_proxy.stop()
        if own:
            server.stop()

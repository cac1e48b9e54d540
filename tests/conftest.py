"""Shared fixtures: one private local Ray instance per test session, started on demand.

The suite runs in two pytest-xdist workers (``addopts`` in ``pyproject.toml``), each with its
own Ray instance: a test file goes to one worker whole (its module fixtures start once); the
fault tests go to one worker together, and the load tests run last, alone (see
:func:`pytest_xdist_make_scheduler`). The project's modules are compiled once before the
workers start (:func:`pytest_configure`), and the session's agent actors retire after
:data:`spaces.IDLE_ACTOR_S` idle: both keep the suite's many Ray processes cheap.
"""

from __future__ import annotations

import compileall
import os
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
from spaces import Namespaces, session_raygents

os.environ.setdefault("RAY_DEDUP_LOGS", "0")
# The suite's s3:// stores are moto's, thrown away with it: they opt out of the key a shared
# store needs (tests of that refusal unset it). Set before Ray starts: its workers inherit it.
os.environ["RAYGENTS_UNSIGNED_OK"] = "1"
# Tests never reach a real provider.
for _name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "RAY_ADDRESS"):
    os.environ.pop(_name, None)


HEAVY = ("faults", "load", "serve")
"""Test folders whose tests start clusters, kill processes or load the machine, or serve over
HTTP (their modules keep Serve up for the next, see :func:`served`): each runs in one xdist
worker, one file after the other."""
ALONE = "load"
"""The folder whose tests run last, once every other test is done: they keep both cores busy,
and tests beside them slow down many times over (those that start actors most)."""


SOURCES = ("raygents", "tests", "examples", "benchmarks", "tools")
"""The project's folders of Python modules, compiled once before any test starts."""


def pytest_configure(config: pytest.Config) -> None:
    """Write the bytecode of the project's modules once, in the process that starts the others.

    The suite starts hundreds of Python processes (Ray's workers and actors, the drivers of jobs,
    the CLI's commands) that import raygents and the test modules. Where
    ``PYTHONDONTWRITEBYTECODE`` is set, as in many container images, none of them keeps the
    bytecode it compiles and each compiles every module again: about 0.15 CPU-s per process, and
    a sixth of the CPU of ``tests/agents`` (docs/perf-log.md, finding 71). ``compileall`` writes
    it whatever that variable says (into the ``__pycache__`` folders Python would write anyway)
    and skips what is up to date. An xdist worker finds it done.
    """
    if hasattr(config, "workerinput"):
        return
    root = pathlib.Path(__file__).resolve().parent.parent
    for name in SOURCES:
        compileall.compile_dir(root / name, quiet=2)


def _folder(nodeid: str) -> str:
    """The folder below ``tests/`` of a test (``""`` for a module of ``tests/`` itself)."""
    parts = nodeid.split("::", 1)[0].split("/")
    return parts[1] if len(parts) > 2 else ""


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _long(item: pytest.Item, timeout_s: float) -> bool:
    """Whether a test is a long one: it uses the session's Ray instance, or it is given more
    time than the default (it starts a Ray instance or a cluster of its own)."""
    marker = item.get_closest_marker("timeout")
    given = marker.args[0] if marker is not None and marker.args else 0
    return "ray_session" in item.fixturenames or given > timeout_s


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest units of work first, so that the workers finish together: the tests of the
    :data:`HEAVY` folders, then the files with a long test (:func:`_long`), then the rest;
    those of :data:`ALONE` last. The HTTP API's tests that use :func:`served` come one after
    the other."""
    timeout_s = float(config.getini("timeout") or 0)
    long_files = {_file(item.nodeid) for item in items if _long(item, timeout_s)}

    def order(item: pytest.Item) -> tuple[bool, bool, bool, bool]:
        folder = _folder(item.nodeid)
        return (
            folder == ALONE,
            folder not in HEAVY,
            _file(item.nodeid) not in long_files,
            folder == "serve" and "served" not in item.fixturenames,  # (see `served`)
        )

    items.sort(key=order)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``--dist loadfile``, xdist's file scheduling in collection order, with each
    :data:`HEAVY` folder as one unit of work, and the :data:`ALONE` one handed out only
    once every worker is done with the rest."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class Scheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            folder = _folder(nodeid)
            return folder if folder in HEAVY else nodeid.split("::", 1)[0]

        def _reschedule(self, node: Any) -> None:
            # A worker runs the last test it was sent once it gets more or is told to stop:
            # done with the rest, each has one test left.
            if next(iter(self.workqueue), None) == ALONE:
                if any(self._pending_of(work) > 1 for work in self.assigned_work.values()):
                    return  # (the last worker to finish the rest takes it)
                for other in self.assigned_work:
                    if other is not node and not other.shutting_down:
                        other.shutdown()
            super()._reschedule(node)

    config.option.loadscopereorder = False  # (collection order: the fault tests first)
    return Scheduling(config, log)


_next: list[pytest.Item | None] = [None]
"""The test that runs after the one being torn down (None after the last)."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    _next[0] = nextitem
    return (yield)


@pytest.fixture(scope="module")
def served(ray_session: None, request: pytest.FixtureRequest) -> Iterator[Any]:
    """The test module's ``AGENTS`` served over HTTP (``raygents.serve.start``) on the
    session's Ray instance, bound to 127.0.0.1, with a token (the module's ``SERVE_TOKEN``,
    else :data:`servekit.TOKEN`). The app is stopped after the module, and Serve shut down
    unless the next test serves too (it then deploys its app on the Serve running: Serve's
    controller and proxy are processes to start and stop, about 3 s a module)."""
    from ray import cloudpickle, serve
    from servekit import TOKEN, Served, client, start

    import raygents.serve as rgs

    cloudpickle.register_pickle_by_value(request.module)
    session_raygents()  # (up already, unless a test before shut it down)
    token = getattr(request.module, "SERVE_TOKEN", TOKEN)
    url = start(
        request.module.AGENTS,
        auth_token=token,
        webhook_networks=["127.0.0.0/8"],
        _heartbeat_s=1.0,
    )
    http = client(url, token)
    try:
        yield Served(url, token, http)
    finally:
        http.close()
        rgs.stop()
        following = _next[0]
        if following is None or "served" not in following.fixturenames:
            serve.shutdown()


@pytest.fixture(scope="session")
def s3_proxy() -> Iterator[object]:
    """The fault proxy S3 clients go through, with the AWS environment pointing at it for the
    whole session: set before Ray starts, so that Ray's workers (the coordinator) inherit
    it. It answers like a server that is down until :func:`session_s3` starts moto behind it."""
    from s3_server import FaultProxy, aws_env

    with FaultProxy("http://127.0.0.1:9") as proxy, aws_env(proxy.endpoint_url):
        yield proxy


@pytest.fixture(scope="session")
def session_s3(s3_proxy: object) -> Iterator[object]:
    """moto's S3 server on 127.0.0.1 behind :func:`s3_proxy`, started by the first test that
    needs S3 (tests that do not never start it)."""
    from s3_server import MotoServer

    with MotoServer() as server:
        server.proxy = s3_proxy  # type: ignore[attr-defined]
        s3_proxy.upstream = (server.host, server.port)  # type: ignore[attr-defined]
        yield server


SESSION_HEAD = {
    "num_cpus": 2,
    "object_store_memory": 2 * 1024**3,
    "include_dashboard": False,
    "include_log_monitor": False,
    "no_monitor": True,
}
"""The session's Ray instance: a head of two CPUs without the log monitor (it streams workers'
output to drivers, which the session does not ask for: ``log_to_driver=False``; it scans every
worker's log file, and the session leaves thousands) nor the autoscaler's monitor (a local
instance does not scale): the two took 5% of a core all session long (docs/perf-log.md,
finding 77). Its object store is 2 GiB (``Cluster``'s nodes get 150 MiB unless told)."""


@pytest.fixture(scope="session")
def ray_session(s3_proxy: object) -> Iterator[None]:
    """A private local Ray instance with raygents initialised on it, for the whole session."""
    import ray
    from ray._common.utils import get_ray_address_file
    from ray.cluster_utils import Cluster

    import raygents

    current = pathlib.Path(get_ray_address_file(None))
    named = current.read_text() if current.exists() else None
    cluster = Cluster(initialize_head=True, head_node_args=SESSION_HEAD)
    # (Cluster names its head in the machine's current-cluster file, where `ray.init()` and
    # the CLI without an address look: the session's instance is nobody else's to find)
    if named is None:
        current.unlink(missing_ok=True)
    else:
        current.write_text(named)
    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    session_raygents()
    yield
    raygents.shutdown()
    ray.shutdown()
    cluster.shutdown()


@pytest.fixture
def rt(ray_session: None, request: pytest.FixtureRequest) -> None:
    """Ray is up, and raygents on it as the session set it up (unless the test uses
    :func:`own_raygents`); the test module's functions travel to workers by value (not by
    import)."""
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(request.module)
    if not {"own_raygents", "module_raygents"} & set(request.fixturenames):
        session_raygents()  # (up already but after a test that had its own)


@pytest.fixture(scope="module")
def module_raygents(
    ray_session: None, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Namespaces]:
    """The test module's :class:`Namespaces` (a test's fixture picks one with ``use``):
    :func:`rt` does not bring the session's raygents up for a test that asks for it."""
    prefix = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")
    namespaces = Namespaces(prefix, tmp_path_factory.mktemp(prefix))
    yield namespaces
    namespaces.close()


@pytest.fixture
def own_raygents(ray_session: None) -> Iterator[None]:
    """For a fixture that sets raygents up itself on a namespace of its own (``shutdown()``
    then ``init(...)``): :func:`rt` does not bring the session's raygents up for its test
    first, and raygents is shut down after it. The next test that uses :func:`rt` brings the
    session's back: a namespace's coordinator is an actor to start and to remove, twice per
    test if every such test put the session's back itself."""
    import raygents

    yield
    raygents.shutdown()


STORE_PREFIXES = ("runs", "sessions", "jobs", "budgets", "blobs", "serve")
"""The top-level folders raygents writes in a store (under the store URL's own prefix)."""


def hostile_keys(keys: list[str]) -> list[str]:
    """The keys that are not where raygents writes, or that hold what an id must not:
    ``<prefix>/runs|sessions|.../<id>/<record>`` (a served app's keeper:
    ``<prefix>/serve/<app>/threads|webhooks/<id>/<record>``) with ASCII segments of
    ``[A-Za-z0-9._-]``, none empty, ``.`` or with ``..``, no ``%`` (``%2e``), NUL or other
    control characters."""
    import re

    segment = r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}"
    tops = "|".join(p for p in STORE_PREFIXES if p != "serve")
    served = rf"serve/{segment}/(?:threads|webhooks)"
    shape = re.compile(rf"(?:{segment}/)*(?:{tops}|{served})/{segment}/{segment}")
    return [key for key in keys if not shape.fullmatch(key) or ".." in key or not key.isascii()]


class KeyAudit:
    """Buckets whose every key is checked at the end of the session (:meth:`watch`)."""

    def __init__(self) -> None:
        self.buckets: set[str] = set()

    def watch(self, bucket: str) -> str:
        """Check ``bucket``'s keys at the end of the session; returns the bucket."""
        self.buckets.add(bucket)
        return bucket

    hostile = staticmethod(hostile_keys)


@pytest.fixture(scope="session")
def s3_key_audit(session_s3: object) -> Iterator[KeyAudit]:
    """At the end of the session, list every key of each watched bucket (a bucket on the
    session's S3 server that a test gave to ``watch``) and fail if one falls outside
    :data:`STORE_PREFIXES` or holds ``..``, ``%``, NUL or non-ASCII (:func:`hostile_keys`).
    Only watched buckets: moto keeps every server's buckets in one process-wide backend, and
    store tests plant hostile keys in theirs on purpose."""
    audit = KeyAudit()
    yield audit
    from s3_server import s3_client

    client = s3_client(session_s3.endpoint_url)  # type: ignore[attr-defined]
    found: dict[str, list[str]] = {}
    for bucket in sorted(audit.buckets):
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
        keys = [str(o["Key"]) for page in pages for o in page.get("Contents", ())]
        bad = hostile_keys(keys)
        if bad:
            found[bucket] = bad[:10]
    assert not found, f"keys outside {STORE_PREFIXES} or with hostile characters: {found}"

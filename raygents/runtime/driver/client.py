"""The driver's runtime: the Ray connection, the coordinator handle, a background event loop,
and graceful suspend of this driver's runs on SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import itertools
import logging
import os
import signal
import socket
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from raygents.core.pricing import Price, check_prices
from raygents.errors import SUSPEND_FOR_CHECKPOINT, UserError
from raygents.models.budgets import Budget, check_budgets
from raygents.models.ratelimit import RateLimit, check_limits
from raygents.records.retention import retention_seconds
from raygents.runtime.coordinator.coordinator import Coordinator
from raygents.runtime.driver import startup
from raygents.runtime.driver.handle import RunHandle
from raygents.runtime.driver.publisher import Publisher
from raygents.runtime.link.coalesce import Coalescer
from raygents.runtime.link.coordinator_client import COORDINATOR_NAME, CoordinatorClient
from raygents.runtime.link.directory import Directory
from raygents.runtime.link.handles import actor_key
from raygents.runtime.link.settings import Durability, Recovery, Settings
from raygents.runtime.link.untied import untied

__all__ = ["Runtime", "current", "init", "shutdown"]

log = logging.getLogger("raygents")
T = TypeVar("T")


class Runtime:
    """One per driver process: the Ray connection, the coordinator, and a background loop."""

    def __init__(self, namespace: str, started_ray: bool, settings: Settings) -> None:
        self.namespace = namespace
        self.settings = settings
        """What this driver asked for (a coordinator it creates runs with them)."""
        self.started_ray = started_ray
        self.detached = settings.detached
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="raygents", daemon=True)
        self._thread.start()
        for attempt in itertools.count(1):
            coordinator = self._new_coordinator()
            self.directory = Directory(namespace, coordinator, self.owner, revive=self._revive)
            try:
                settings = self.wait(self.directory.settings())
                break
            except ray.exceptions.ActorDiedError:
                # Found by name just as its last handle went away (an earlier runtime of some
                # process shut down): Ray is removing it; a moment later the name is free.
                if attempt == 5:
                    raise
                time.sleep(0.2 * attempt)
        self._notes: Coalescer[None, _Note] = Coalescer(self._apply, _NOTE_WINDOW_S)
        self.created = settings.creator == self.owner
        """Whether this runtime created the coordinator (it then removes it in close)."""
        self._node: str = settings.node
        """The node of the coordinator (where a ``file://`` store's records are)."""
        self.handles: weakref.WeakValueDictionary[str, RunHandle] = weakref.WeakValueDictionary()
        """This driver's runs: a running run's handle is held by its drive, an ended one only
        by whoever still uses it (a long-lived driver does not keep every result it saw)."""
        self.followed: weakref.WeakValueDictionary[str, RunHandle] = weakref.WeakValueDictionary()
        """Handles of runs other processes drive, that ``attach`` gave and that did not end:
        one follower per run and process, whatever the number of readers."""
        self.stoppers: set[Callable[[], None]] = set()
        """What :meth:`suspend_all` stops first, so that nothing starts new runs meanwhile
        (a batch job's ``suspend``, registered while the job runs)."""
        self.suspending = False
        """Set by :meth:`suspend_all`: a run started from then on is suspended at once."""
        self.publisher = Publisher(self.owner, self.directory.client, self.handles)
        """Sends the events of this driver's runs that someone follows to the relay."""
        mismatch = self._mismatch(settings)
        if mismatch is not None:
            self.close()
            raise mismatch

    @property
    def coordinator(self) -> Any:
        """The namespace's coordinator actor, as this runtime knows it."""
        return self.directory.coordinator()

    def _new_coordinator(self, node: str | None = None) -> Any:
        """The namespace's coordinator: a new one (this runtime its creator), or the one that
        holds the name already."""
        # (a file:// store is a directory on this driver's node: its coordinator must be there)
        pinned = node is None and self.settings.store.startswith("file://")
        cls = _coordinator_class(self.namespace, self.detached, node, pinned=pinned)
        return cls.remote(self.namespace, dataclasses.replace(self.settings, creator=self.owner))

    def _mismatch(self, settings: Settings) -> UserError | None:
        """The error for a coordinator that runs with another store, durability, key or
        limit of runs in flight."""
        return startup.settings_mismatch(self.namespace, self.settings, settings)

    async def _revive(self, failed: Any) -> bool:
        """Take over from a coordinator that is gone for good; True once the directory uses
        another one (see :meth:`Directory.call`).

        A non-detached coordinator dies with the driver that created it, and its agent
        actors with it, while other drivers of the namespace may still use it. The next
        driver whose call fails finds its name free and creates a new one (or finds the one
        another driver just created); it rebuilds the run table from the store, and runs
        that were on the lost agent actors are recovered from their checkpoints. A
        coordinator that still holds its name is restarting (or just being removed): the
        caller waits for it.
        """
        current = self.directory.coordinator()
        if actor_key(current) != actor_key(failed):
            return True  # another of this driver's calls took over already
        loop = asyncio.get_running_loop()
        found = await loop.run_in_executor(None, _named_coordinator, self.namespace)
        if found is not None and actor_key(found) == actor_key(failed):
            return False
        if found is None:  # (on the lost one's node if it is still there: its store is)
            found = self._new_coordinator(self._node)
        try:
            settings = await CoordinatorClient(self.namespace, found).settings()
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
            return False  # gone as well: the caller tries again shortly
        mismatch = self._mismatch(settings)
        if mismatch is not None:  # another driver's, with other settings
            raise mismatch
        if actor_key(self.directory.coordinator()) == actor_key(failed):
            self.directory.replace(found, settings)
            self.created = settings.creator == self.owner
            self._node = settings.node
            log.warning(
                "the raygents coordinator of namespace %r (actor %s) is gone for good (the "
                "driver that created it exited, or it was killed); %s: actor %s",
                self.namespace,
                actor_key(failed),
                "this driver created a new one" if self.created else "using the new one",
                actor_key(found),
            )
        return True

    def note(self, method: str, *args: Any) -> None:
        """Tell the coordinator about a run (``claim`` of a generated id, ``finish``) without
        waiting: notes of the next few milliseconds travel together. On the runtime's loop."""
        self._notes.add(None, (method, args))

    async def _apply(self, key: None, notes: list[_Note]) -> None:
        try:
            await self.directory.client.apply(notes)
        except Exception as exc:  # (the next read of the run table reports what it finds)
            log.warning("could not update the run table: %s", exc)

    def _send_notes(self) -> set[asyncio.Future[Any]]:
        """Send the pending notes; returns every send still under way (this one included)."""
        return self._notes.flush_all()

    def has_notes(self, run_id: str) -> bool:
        """Whether a note about ``run_id`` may not have reached the coordinator yet.

        Safe from any thread for a run whose result the caller has seen: its end was noted
        before the result was delivered.
        """
        return any(_run_of(note) == run_id for note in self._notes.pending())

    def send_notes(self) -> None:
        """Send this driver's pending notes now and wait for the coordinator to apply them
        (before reading the run table, or taking a run or session this driver just ran)."""

        async def send() -> None:
            sending = self._send_notes()
            if sending:  # failures are logged; the read reports what it finds
                await asyncio.wait(sending)

        self.wait(send())

    def call_soon(self, fn: Any, *args: Any) -> None:
        """Run ``fn(*args)`` on the runtime's loop, untied from the caller's Ray task (see
        :mod:`~raygents.runtime.link.untied`)."""
        self.loop.call_soon_threadsafe(fn, *args, context=untied())

    def submit(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Schedule a coroutine on the runtime's loop. What it asks of Ray is untied from
        the caller's Ray task: a Serve request cancelled when its client hangs up, or a Ray
        task cancelled by its owner, cancels none of it (a run is cancelled by its handle)."""
        return untied().run(asyncio.run_coroutine_threadsafe, coro, self.loop)

    def wait(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = 120) -> T:
        """Run a coroutine on the runtime's loop and wait for its result."""
        future = self.submit(coro)
        result: T = future.result(timeout_s)
        return result

    def close(self, release: bool = True) -> None:
        """Stop the background loop; with ``release``, remove the coordinator this runtime
        created (unless it is detached) and wait until its name is free for the next one."""

        async def wind_down() -> None:
            sending = self._send_notes()
            if sending:
                await asyncio.wait(sending, timeout=2.0)
            tasks = [*self.directory.stop_watches(), *self.publisher.stop()]
            if tasks:
                await asyncio.wait(tasks, timeout=1.0)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(wind_down(), self.loop).result(timeout=3)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        if self.created and not self.detached:  # (before ray.shutdown too: spans get out)
            with contextlib.suppress(ray.exceptions.RayError, TimeoutError):
                ray.get(self.directory.client.stop_agents(), timeout=10.0)
            if release:
                ray.kill(self.coordinator, no_restart=True)
                _wait_until_free(self.namespace, self.coordinator, timeout_s=10.0)

    async def ensure_graph(
        self, fp: str, blob: bytes, replicas: dict[str, int], definitions: dict[str, str]
    ) -> None:
        """Tell the coordinator about a graph snapshot once per process (``definitions``: its
        agents' definition fingerprints)."""
        if fp not in self.directory.graphs:
            await self.directory.client.register_graph(fp, blob, replicas, definitions)
            self.directory.graphs[fp] = (blob, replicas, definitions)

    def ask(self, call: Coroutine[Any, Any, T]) -> T:
        """Make a coordinator call (a ``CoordinatorClient`` method) from the caller's thread
        and wait for its answer, however long the coordinator takes to restart."""
        return self.wait(call, timeout_s=None)

    def suspend_all(self, grace_s: float) -> int:
        """Stop what starts runs here (batch jobs), suspend every running run of this driver,
        those that start meanwhile included, and wait up to ``grace_s`` for them; returns how
        many ended."""
        import concurrent.futures

        self.suspending = True
        for stop in list(self.stoppers):
            stop()
        deadline = time.monotonic() + grace_s
        seen: set[RunHandle] = set()
        while True:
            running = [h for h in self.handles.values() if not h.done() and h not in seen]
            if not running:
                break
            seen.update(running)
            for handle in running:
                handle.suspend(SUSPEND_FOR_CHECKPOINT)
            futures = [h._future for h in running]
            concurrent.futures.wait(futures, timeout=max(0.0, deadline - time.monotonic()))
            if time.monotonic() >= deadline:
                break
        return sum(1 for h in seen if h.done())


_Note = tuple[str, tuple[Any, ...]]
"""A note for the coordinator's run table: its method (``claim``, ``finish``) and arguments."""


def _run_of(note: _Note) -> str:
    method, args = note
    return str(args[0].run_id if method == "finish" else args[0])


def _coordinator_class(
    namespace: str, detached: bool, node: str | None = None, *, pinned: bool = False
) -> Any:
    """The coordinator's actor class, placed on ``node`` (default: this process's node): a
    ``file://`` store's directory is on the node of the driver that made it. ``pinned``: only
    there (Ray's soft node affinity may place it elsewhere, e.g. off a head with no CPUs);
    else there when it can be."""
    options: dict[str, Any] = {
        "name": COORDINATOR_NAME,
        "namespace": namespace,
        "get_if_exists": True,
        "num_cpus": 0,
        "max_restarts": -1,
        # Calls in flight when it dies are made again once it is back (they are idempotent,
        # or a repeated claim fences the first); agent actors' reports wait meanwhile.
        "max_task_retries": -1,
        "max_concurrency": 10_000,
        "scheduling_strategy": NodeAffinitySchedulingStrategy(
            node or ray.get_runtime_context().get_node_id(), soft=not pinned
        ),
    }
    if detached:
        options["lifetime"] = "detached"
    return ray.remote(Coordinator).options(**options)


def _named_coordinator(namespace: str) -> Any:
    """The actor that holds the coordinator's name in ``namespace``, or None."""
    try:
        return ray.get_actor(COORDINATOR_NAME, namespace=namespace)
    except ValueError:
        return None


def _wait_until_free(namespace: str, coordinator: Any, timeout_s: float) -> None:
    """Wait until the name of a killed coordinator no longer finds it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = _named_coordinator(namespace)
        if found is None or actor_key(found) != actor_key(coordinator):
            return
        time.sleep(0.05)
    log.warning(
        "the coordinator of namespace %r still has its name after %.0f s", namespace, timeout_s
    )


_runtime: Runtime | None = None
_NOTE_WINDOW_S = 0.005
_lock = threading.Lock()
_previous_sigterm: Any = None


def init(
    address: str | None = None,
    *,
    namespace: str = "raygents",
    store: str | None = None,
    durability: Durability = "sync",
    detached: bool = False,
    handle_sigterm: bool = True,
    sigterm_grace_s: float = 30.0,
    max_attempts: int = 5,
    heartbeat_s: float = 2.0,
    stale_after_s: float = 30.0,
    actor_options: dict[str, Any] | None = None,
    max_concurrent_runs: int | None = None,
    rate_limits: Mapping[str, RateLimit] | None = None,
    prices: Mapping[str, Price] | None = None,
    budgets: Mapping[str, Budget] | None = None,
    retention: datetime.timedelta | float | None = None,
    keep_history: bool = False,
    idle_actor_s: float | None = 600.0,
    **ray_init_kwargs: Any,
) -> None:
    """Connect to Ray (or start a local instance) and set raygents up.

    Args:
        address: a Ray address; default ``$RAY_ADDRESS``, else a new local instance. If Ray
            is already initialised in this process, that connection is used.
        namespace: raygents' Ray namespace (its coordinator and agent actors live there).
        store: where checkpoints go: ``file://<dir>``, ``s3://bucket/prefix`` or
            ``memory://``; default ``$RAYGENTS_STORE``, else ``file://`` + ``./.raygents``.
            ``$RAYGENTS_CHECKPOINT_KEY`` (if set; at least 16 bytes) turns checksums into
            HMACs: without it, whoever can write the store can forge run state (a shared
            ``s3://`` store without a key is warned about; ``$RAYGENTS_REQUIRE_KEY=1`` makes
            a missing key an error). Every driver of a namespace uses the same key.
        durability: ``"sync"`` (a checkpoint is durable before the run goes on), ``"async"``
            (written behind, bounded backlog) or ``"exit"`` (only when a run stops early).
        detached: the coordinator and agent actors outlive this driver.
        handle_sigterm: on SIGTERM, suspend this driver's runs (waiting up to
            ``sigterm_grace_s`` for their checkpoints), then exit.
        sigterm_grace_s: how long a SIGTERM waits for the suspended runs' checkpoints.
        max_attempts: how often a run whose agent actor died (or went stale) is dispatched
            again from its newest checkpoint before it fails.
        heartbeat_s: how often drivers and actors ping the agent actors their runs are on
            (and how often agent actors with runs send the coordinator a beat).
        stale_after_s: an actor that does not answer a ping for this long, and sent no beat
            for as long (or one saying its event loop was stuck that long), is replaced.
        actor_options: Ray actor options for every agent actor, e.g.
            ``{"resources": {"cpu_nodes": 0.01}}`` to keep agents on some nodes.
        max_concurrent_runs: how many runs each tenant (``start(..., tenant=)``) may have
            in flight (running) in the namespace at once; ``start`` or ``resume`` past that
            raises ``TooManyRuns`` at once, and nothing of the refused run is kept. Suspended,
            interrupted and ended runs hold no slot; agent-as-tool children count as part of
            their parent. None (the default) admits every run; the coordinator's creator
            sets it for every driver of the namespace.
        rate_limits: requests and tokens per minute per model name (``{"gpt-4o-mini":
            RateLimit(requests_per_minute=3000)}``), for every agent actor of the namespace
            together: calls wait for their turn at one limiter actor, and a 429 with
            ``Retry-After`` holds every call of that model back. The coordinator's creator
            sets them for every driver of the namespace: another driver that asks for other
            limits gets a ``UserError``.
        prices: what each model name charges (``{"gpt-4o-mini": Price(input_per_mtok=0.15,
            output_per_mtok=0.60)}``): every model call of the namespace whose model has that
            name (``OpenAIChatModel(name)`` or a model with a ``model`` attribute) gets its
            ``Usage.cost_usd``, and ``max_cost_usd`` budgets count it. An agent's
            ``ModelSettings(price=)`` wins. The coordinator's creator sets them for every
            driver of the namespace, as ``rate_limits``.
        budgets: what each tenant may spend per UTC day (``{"acme": Budget(tokens_per_day=
            10_000_000, usd_per_day=50.0)}``; ``"default"`` is the tenant of runs started
            without one), across the namespace: every run, agent-as-tool child and batch
            item of the tenant, on every node and driver, asks the namespace's budget keeper
            before each model call, and stops with ``UsageLimitExceeded`` (``limit``
            ``"tenant_tokens_per_day"`` or ``"tenant_usd_per_day"``) once the tenant reached
            it. What each tenant spent is kept in the store and survives restarts;
            ``raygents budgets`` shows it. The coordinator's creator sets them, as
            ``rate_limits``.
        retention: how long ended runs (completed, failed, cancelled) keep their records and
            kept results in the store, counted from their end: a ``datetime.timedelta`` or
            seconds (> 0); the coordinator removes them in the background. None (the
            default) keeps them until ``raygents gc``. The coordinator's creator sets it for
            every driver of the namespace. An end is timed by the clock of the node that
            recorded it: a node whose clock is behind by D lets runs go up to D early, and an
            end in the future is never past retention.
        keep_history: completed runs keep their checkpoint records (every step of their
            history, for :func:`history`, :func:`fork` and :func:`replay`) until retention
            or ``raygents gc`` removes them, instead of only their completion marker (their
            final state). About 3 times the bytes of the final conversation, per run
            (``docs/history.md``). The coordinator's creator sets it for every driver of the
            namespace.
        idle_actor_s: an agent actor (there is one per agent, or ``replicas``, for each agent
            graph in use) that has had no run for this long retires: the coordinator stops
            handing it out, then it exits, and the agent's next run gets a fresh one. A run in
            flight, a parent waiting for its agent-as-tool children, and events its caller
            has not taken yet keep an actor; a suspended or awaiting-approval run holds
            nothing on it (its resume finds the agent's actor again). A run sent to an actor
            as it retires goes to the next one, with no recovery. Seconds (> 0); None: agent
            actors stay as long as the coordinator. An actor idle for a quarter of it may
            serve another agent that has no actor, instead of a new process starting
            (``docs/operating.md``). The coordinator's creator sets it for every driver of
            the namespace.
        **ray_init_kwargs: passed to ``ray.init``. A local instance started here keeps up to
            four idle worker processes per CPU warm for tool tasks (Ray's default is one), and
            a process asks for one new worker at a time per two CPUs (Ray's default: ten);
            keys given in ``_system_config`` win.
    """
    global _runtime
    if durability not in ("sync", "async", "exit"):
        raise UserError(f"durability must be 'sync', 'async' or 'exit', got {durability!r}")
    startup.check_recovery(max_attempts, heartbeat_s, stale_after_s, sigterm_grace_s)
    if max_concurrent_runs is not None and (
        type(max_concurrent_runs) is not int or max_concurrent_runs < 1
    ):
        raise UserError(
            f"max_concurrent_runs must be an int of at least 1 (or None), got "
            f"{max_concurrent_runs!r}"
        )
    limits = check_limits(rate_limits if rate_limits is not None else {})
    priced = check_prices(prices if prices is not None else {})
    daily = check_budgets(budgets if budgets is not None else {})
    retention_s = retention_seconds(retention)
    if not isinstance(keep_history, bool):
        raise UserError(f"keep_history must be True or False, got {keep_history!r}")
    startup.check_idle_actor_s(idle_actor_s)
    from raygents.stores.open import default_store_url, open_store

    store_url = store or os.environ.get("RAYGENTS_STORE") or default_store_url()
    if store_url.startswith("file://") and not store_url.startswith("file:///"):
        store_url = "file://" + os.path.abspath(store_url[len("file://") :])
    open_store(store_url)  # fail here, in the caller's process, on a bad URL
    key = startup.checkpoint_key(store_url)
    with _lock:
        if _runtime is not None:
            if _runtime.namespace != namespace:
                raise UserError(
                    f"raygents is already initialised with namespace {_runtime.namespace!r}; "
                    "call raygents.shutdown() first"
                )
            return
        started = False
        if not ray.is_initialized():
            target = address or os.environ.get("RAY_ADDRESS") or "local"
            if target == "local":
                ray_init_kwargs = startup.local_defaults(ray_init_kwargs)
            ray.init(address=target, **ray_init_kwargs)
            started = True
        recovery = Recovery(
            attempts=max_attempts, heartbeat_s=heartbeat_s, stale_after_s=stale_after_s
        )
        settings = Settings(
            store=store_url,
            durability=durability,
            key=key,
            detached=detached,
            recovery=recovery,
            actor_options=dict(actor_options or {}),
            max_concurrent_runs=max_concurrent_runs,
            rate_limits=limits,
            prices=priced,
            budgets=daily,
            retention_s=retention_s,
            keep_history=keep_history,
            idle_actor_s=idle_actor_s,
        )
        _runtime = Runtime(namespace, started, settings)
    if handle_sigterm:
        _install_sigterm(sigterm_grace_s)


def _install_sigterm(grace_s: float) -> None:
    global _previous_sigterm
    if threading.current_thread() is not threading.main_thread():
        return

    def on_sigterm(signum: int, frame: Any) -> None:
        rt = _runtime
        if rt is not None:
            suspended = rt.suspend_all(grace_s)
            log.warning("SIGTERM: %d run(s) suspended with checkpoints", suspended)
        raise SystemExit(128 + signum)

    _previous_sigterm = signal.signal(signal.SIGTERM, on_sigterm)


_shutdown_hooks: set[Callable[[], None]] = set()
"""What forgets handles that die with this process's Ray connection, run by :func:`shutdown`
(``raygents.testing`` registers one for its script store)."""


def on_shutdown(hook: Callable[[], None]) -> None:
    """Run ``hook`` at every :func:`shutdown` of raygents in this process."""
    _shutdown_hooks.add(hook)


def shutdown() -> None:
    """Stop raygents in this process, and Ray too if raygents started it.

    A (non-detached) coordinator this process created goes too, with its agent actors; the
    call returns once its name is free, so a following ``init()`` creates a new one.
    """
    global _runtime, _previous_sigterm
    with _lock:
        rt, _runtime = _runtime, None
    for hook in list(_shutdown_hooks):
        hook()
    if _previous_sigterm is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _previous_sigterm)
        _previous_sigterm = None
    if rt is None:
        return
    rt.close(release=not rt.started_ray)  # ray.shutdown() removes everything at once
    if rt.started_ray:
        ray.shutdown()


def current() -> Runtime:
    """The process's runtime, initialising raygents (and Ray) on first use."""
    if _runtime is None:
        init()
    assert _runtime is not None
    return _runtime

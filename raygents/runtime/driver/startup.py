"""Setting raygents up in a driver: the checks of ``init``'s settings and the checkpoint key,
and Ray's settings for a local instance raygents starts."""

from __future__ import annotations

import hmac
import logging
import math
import os
from typing import Any

from raygents.errors import UserError
from raygents.records import codec, storekey
from raygents.runtime.link.settings import Settings

__all__ = [
    "check_idle_actor_s",
    "check_recovery",
    "checkpoint_key",
    "local_defaults",
    "settings_mismatch",
]

log = logging.getLogger("raygents")

KEY_ENV = storekey.KEY_ENV
REQUIRE_KEY_ENV = "RAYGENTS_REQUIRE_KEY"
_warned_unkeyed = False
"""Whether this process has warned about a shared store without a key (once is enough)."""
_IDLE_WORKERS_PER_CPU = 4
_CPUS_PER_WORKER_REQUEST = 2


def local_defaults(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Ray settings for a local instance raygents starts itself.

    Ray keeps only as many idle worker processes as there are free CPUs and kills the rest
    after a second; tool tasks with fractional or zero CPUs then start (and import) a new
    worker for most calls. A local instance keeps up to four idle workers per CPU instead.

    Ray also starts workers for zero-CPU tasks as fast as they are asked for: while all its
    workers are busy, a process that submits tasks keeps up to ten requests for a new worker
    open per kind of task, and every start costs about half a CPU second. A burst of tool
    tasks then starts a worker for most of them, and the starts take the CPUs from the work
    already running. On a local instance a process asks for one new worker at a time per two
    CPUs, and a burst reuses the workers it has while the next one starts (measured in
    ``docs/perf-log.md``). Ray still starts as many workers at once as there are CPUs: one at a time
    would also start agent actors one by one. Any of these keys given in ``_system_config``
    wins.
    """
    cpus = int(kwargs.get("num_cpus") or os.cpu_count() or 1)
    system = dict(kwargs.get("_system_config") or {})
    system.setdefault("num_workers_soft_limit", max(8, _IDLE_WORKERS_PER_CPU * cpus))
    system.setdefault(
        "max_pending_lease_requests_per_scheduling_category",
        min(10, max(1, cpus // _CPUS_PER_WORKER_REQUEST)),
    )
    return {**kwargs, "_system_config": system}


def checkpoint_key(store_url: str) -> bytes | None:
    """The checkpoint HMAC key from ``$RAYGENTS_CHECKPOINT_KEY``, checked, or None.

    Without a key, records carry a checksum only: whoever can write the store can forge a
    run's state (approve a pending call, rewrite its conversation). A shared store
    (``s3://``, or a ``file://`` directory marked shared: :mod:`raygents.records.storekey`)
    without a key is refused, unless ``$RAYGENTS_UNSIGNED_OK=1`` (then it gets a loud
    warning, once per process); with ``$RAYGENTS_REQUIRE_KEY=1`` a missing key is an error
    whatever the store.

    Raises:
        UserError: the key is shorter than ``codec.MIN_KEY_BYTES``, or missing while required
            (a shared store, or ``$RAYGENTS_REQUIRE_KEY``).
    """
    global _warned_unkeyed
    text = os.environ.get(KEY_ENV)
    if text:
        key = text.encode()
        if len(key) < codec.MIN_KEY_BYTES:
            raise UserError(
                f"${KEY_ENV} is {len(key)} bytes long; a checkpoint key needs at least "
                f"{codec.MIN_KEY_BYTES} bytes: set it to a long random value, e.g. the output "
                f"of: {storekey.MAKE_KEY}"
            )
        return key
    if os.environ.get(REQUIRE_KEY_ENV, "").strip().lower() in ("1", "true", "yes"):
        raise UserError(
            f"${REQUIRE_KEY_ENV} is set but ${KEY_ENV} is not: set the key (at least "
            f"{codec.MIN_KEY_BYTES} random bytes, the same on every driver of the store), or "
            f"unset ${REQUIRE_KEY_ENV}"
        )
    storekey.require_key(store_url, None)
    if storekey.shared_because(store_url) is not None and not _warned_unkeyed:
        _warned_unkeyed = True
        log.warning(
            "the shared checkpoint store %s has no key ($%s is set): anyone who can write "
            "to it can forge run state (approve a pending tool call, rewrite a conversation) "
            "and raygents will resume it. Set $%s to at least %d random bytes (the same on "
            "every driver) to sign checkpoints",
            store_url,
            storekey.UNSIGNED_OK_ENV,
            KEY_ENV,
            codec.MIN_KEY_BYTES,
        )
    return None


def check_recovery(
    max_attempts: int, heartbeat_s: float, stale_after_s: float, sigterm_grace_s: float
) -> None:
    """Refuse recovery settings no run could work with, before anything starts."""
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise UserError(f"max_attempts must be an int of at least 1, got {max_attempts!r}")
    for name, value, zero_ok in (
        ("heartbeat_s", heartbeat_s, False),
        ("stale_after_s", stale_after_s, False),
        ("sigterm_grace_s", sigterm_grace_s, True),
    ):
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or math.isnan(value) or value < 0 or (value == 0 and not zero_ok):
            what = "a number of seconds, at least 0" if zero_ok else "a positive number of seconds"
            raise UserError(f"{name} must be {what}, got {value!r}")
    if stale_after_s < heartbeat_s:
        raise UserError(
            f"stale_after_s ({stale_after_s!r}) must be at least heartbeat_s ({heartbeat_s!r}): "
            "an actor is pinged every heartbeat_s"
        )


def check_idle_actor_s(idle_actor_s: float | None) -> None:
    """Refuse an idle time that is not a positive, finite number of seconds (or None).

    Raises:
        UserError: it is not.
    """
    if idle_actor_s is None:
        return
    number = isinstance(idle_actor_s, int | float) and not isinstance(idle_actor_s, bool)
    if not number or not math.isfinite(idle_actor_s) or idle_actor_s <= 0:
        raise UserError(
            f"idle_actor_s must be a positive number of seconds, or None (agent actors never "
            f"retire), got {idle_actor_s!r}"
        )


def settings_mismatch(namespace: str, asked: Settings, found: Settings) -> UserError | None:
    """The error for joining a coordinator whose settings (``found``) are not the ones this
    driver ``asked`` for, or None.

    A driver with a checkpoint key never joins a coordinator without one, or with another
    one (their key ids are compared; no key is shown). A driver without a key may join one
    that has a key: the coordinator signs and checks the records of every run anyway. A
    driver that asked for no limit of runs in flight takes the coordinator's, and one that
    asked for no rate limits takes the coordinator's.
    """
    if found.store != asked.store or found.durability != asked.durability:
        return UserError(
            f"the raygents coordinator of namespace {namespace!r} already runs with store "
            f"{found.store!r} and durability {found.durability!r}; use those, "
            "or another namespace"
        )
    limit = asked.max_concurrent_runs
    if limit is not None and found.max_concurrent_runs != limit:
        return UserError(
            f"the raygents coordinator of namespace {namespace!r} already runs with "
            f"max_concurrent_runs={found.max_concurrent_runs!r}; use that (or leave it "
            "out), or another namespace"
        )
    if asked.rate_limits and dict(found.rate_limits) != dict(asked.rate_limits):
        return UserError(
            f"the raygents coordinator of namespace {namespace!r} already runs with "
            f"rate_limits={dict(found.rate_limits)!r}; use those (or leave rate_limits out), "
            "or another namespace"
        )
    if asked.prices and dict(found.prices) != dict(asked.prices):
        return UserError(
            f"the raygents coordinator of namespace {namespace!r} already runs with "
            f"prices={dict(found.prices)!r}; use those (or leave prices out), or another "
            "namespace"
        )
    if asked.budgets and dict(found.budgets) != dict(asked.budgets):
        return UserError(
            f"the raygents coordinator of namespace {namespace!r} already runs with "
            f"budgets={dict(found.budgets)!r}; use those (or leave budgets out), or another "
            "namespace"
        )
    if asked.key is None:
        return None
    theirs, mine = found.key_id, codec.key_id(asked.key)
    if theirs is None:
        return UserError(
            f"the raygents coordinator of namespace {namespace!r} runs without a checkpoint "
            f"key, but $RAYGENTS_CHECKPOINT_KEY is set here (key id {mine.hex()}); restart "
            "it with the key (end the drivers and detached coordinator that use it), or use "
            "another namespace"
        )
    if not hmac.compare_digest(theirs, mine):
        return UserError(
            f"the raygents coordinator of namespace {namespace!r} runs with another "
            f"checkpoint key (key id {theirs.hex()}; this driver's $RAYGENTS_CHECKPOINT_KEY "
            f"has key id {mine.hex()}); use the same key on every driver, or another namespace"
        )
    return None

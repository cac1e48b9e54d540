"""Which stores must be signed: a shared store (``s3://``, or a ``file://`` directory its
operator marked shared) refuses to work without the checkpoint key, unless told explicitly
that this is a throwaway setup.

Without a key, records, completion markers, sessions and batch ledgers carry a checksum only:
whoever can write the store can forge them (approve a pending call, rewrite a conversation,
plant a batch job's outputs). A store on one machine, written by one user, is as safe as that
user's files; a store that other machines or users write is not. A ``file://`` store is
shared once its directory holds a file named :data:`SHARED_MARK` (e.g. on a network file
system: ``touch /mnt/nfs/raygents/raygents-shared``); every ``s3://`` store is.
"""

from __future__ import annotations

import os

from raygents.errors import UserError

__all__ = [
    "KEY_ENV",
    "MAKE_KEY",
    "SHARED_MARK",
    "UNSIGNED_OK_ENV",
    "require_key",
    "shared_because",
    "unsigned_ok",
]

KEY_ENV = "RAYGENTS_CHECKPOINT_KEY"
UNSIGNED_OK_ENV = "RAYGENTS_UNSIGNED_OK"
"""Set to ``1`` to run on a shared store without a key (a throwaway setup: tests, a demo)."""
SHARED_MARK = "raygents-shared"
"""The file whose presence at the root of a ``file://`` store marks it shared."""
MAKE_KEY = "python -c 'import secrets; print(secrets.token_hex(32))'"
"""A command that prints a good key."""


def shared_because(store_url: str) -> str | None:
    """Why the store ``store_url`` is shared (a phrase), or None when it is not."""
    if store_url.startswith("s3://"):
        return "an s3:// store"
    if store_url.startswith("file://"):
        mark = os.path.join(store_url[len("file://") :], SHARED_MARK)
        if os.path.lexists(mark):
            return f"its directory holds the mark {SHARED_MARK!r}"
    return None


def unsigned_ok() -> bool:
    """Whether ``$RAYGENTS_UNSIGNED_OK`` allows a shared store without a key."""
    return os.environ.get(UNSIGNED_OK_ENV, "").strip().lower() in ("1", "true", "yes")


def require_key(store_url: str, key: bytes | None) -> None:
    """Refuse a shared store without a key (unless ``$RAYGENTS_UNSIGNED_OK`` allows it).

    Raises:
        UserError: ``key`` is None, the store is shared, and nothing allows it; the message
            says how to make a key, and how to opt out.
    """
    if key is not None:
        return
    why = shared_because(store_url)
    if why is None or unsigned_ok():
        return
    raise UserError(
        f"the store {store_url} is shared ({why}) and ${KEY_ENV} is not set: whoever can "
        "write to it could forge run state (approve a pending tool call, rewrite a "
        "conversation, plant a batch job's outputs). Make a key with "
        f"{MAKE_KEY} and set ${KEY_ENV} to it on every driver, worker and raygents command "
        f"that uses the store; for a throwaway setup only, set ${UNSIGNED_OK_ENV}=1 to run "
        "without one"
    )

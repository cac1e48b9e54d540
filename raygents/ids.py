"""Ids and names that travel into store keys and actor names: what they may hold.

Run, session and job ids each become one store key segment (``runs/<run_id>/...``), so they
are single segments of ASCII letters, digits, ``.``, ``_`` and ``-``: no ``/`` (run
``victim/x`` would write into run ``victim``'s folder), no leading ``.`` and no ``..``, no
``%``, no control or look-alike characters, at most 128 characters. Agent names are shown to
models and people and may hold spaces and any letters, but never ``/`` or control characters;
they are never used raw as a key segment.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any, Literal

from raygents.errors import UserError

__all__ = [
    "DEFAULT_TENANT",
    "MAX_ID_LENGTH",
    "MAX_NAME_LENGTH",
    "IdKind",
    "is_id",
    "validate_agent_name",
    "validate_id",
]

MAX_ID_LENGTH = 128
"""The longest id: a store key segment (``raygents.stores.base.MAX_SEGMENT_LENGTH``)."""
MAX_NAME_LENGTH = 128
"""The longest agent name."""
IdKind = Literal["run id", "session id", "job id", "tenant"]
DEFAULT_TENANT = "default"
"""The tenant of a run started without one (its quota of runs in flight, its budget)."""
_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*", re.ASCII)
_RULE = (
    f"use 1 to {MAX_ID_LENGTH} ASCII letters, digits, '.', '_' or '-', starting with a letter, "
    "digit or '_', without '..' or '/'"
)


def validate_id(value: Any, what: IdKind = "run id") -> str:
    """Check that ``value`` is a usable id of kind ``what`` and return it.

    Raises:
        UserError: it is not a str, or not a single segment of ``[A-Za-z0-9._-]`` starting
            with a letter, digit or ``_``, without ``..``, of at most 128 characters; the
            message names the id (cut when long) and the rule.
    """
    if type(value) is not str:
        raise UserError(f"a {what} must be a str, not {type(value).__name__}")
    if is_id(value):
        return value
    raise UserError(f"invalid {what} {_shown(value)}: {_RULE}")


def is_id(value: str) -> bool:
    """Whether ``value`` is a usable id (see :func:`validate_id`)."""
    return len(value) <= MAX_ID_LENGTH and _ID.fullmatch(value) is not None and ".." not in value


def validate_agent_name(name: Any) -> str:
    """Check an agent name and return it: a non-blank str of at most 128 characters without
    ``/`` or control characters (spaces and any letters are fine: ``"Billing Support"``).

    Raises:
        UserError: the name breaks a rule; the message says which.
    """
    if not isinstance(name, str) or not name.strip():
        raise UserError(f"agent name must be a non-empty string, got {_shown(name)}")
    if len(name) > MAX_NAME_LENGTH:
        raise UserError(
            f"agent name {_shown(name)} is {len(name)} characters long; use at most "
            f"{MAX_NAME_LENGTH}"
        )
    if "/" in name:
        raise UserError(f"agent name {_shown(name)} must not contain '/'")
    bad = next((c for c in name if unicodedata.category(c) in ("Cc", "Cs", "Zl", "Zp")), None)
    if bad is not None:
        raise UserError(
            f"agent name {_shown(name)} must not contain a control character "
            f"(found U+{ord(bad):04X})"
        )
    return name


def _shown(value: Any) -> str:
    """``value``'s repr, cut to about 80 characters."""
    text = repr(value)
    if len(text) <= 80:
        return text
    size = len(value) if isinstance(value, str) else len(text)
    return f"{text[:60]}... ({size} characters)"

"""A digest of a pickle that does not depend on which equal strings were one object.

Pickle writes an object it met before as a reference to its first copy (its memo), so two
pickles of equal values differ when one value shared a string object where the other held two
equal ones. An agent and its copy (unpickled in a Serve replica, a Ray task or another driver)
are such a pair: the copy's code objects hold interned names and its other strings do not, so
the same definition pickled in both places gives different bytes. Fingerprints made from this
digest are equal for both: a copy of an agent gets the actors of the original instead of new
ones (and does not retire the original's actors as an older definition).

The digest reads the pickle's opcodes and writes each string or bytes value in full wherever
it is referenced, numbers the other memoized objects in order of appearance, and leaves frame
sizes out; everything else goes in as it is.
"""

from __future__ import annotations

import hashlib
import pickletools

__all__ = ["canonical_digest"]

_LITERALS = frozenset(
    {
        "STRING",
        "BINSTRING",
        "SHORT_BINSTRING",
        "UNICODE",
        "BINUNICODE",
        "SHORT_BINUNICODE",
        "BINUNICODE8",
        "BINBYTES",
        "SHORT_BINBYTES",
        "BINBYTES8",
    }
)
_PUTS = frozenset({"PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"})
_GETS = frozenset({"GET", "BINGET", "LONG_BINGET"})


def canonical_digest(blob: bytes) -> str:
    """The SHA-256 (hex) of ``blob``'s opcodes with strings and bytes written in full at
    each reference (see the module's docstring)."""
    digest = hashlib.sha256()
    memo: dict[int, tuple[str, object]] = {}
    objects = 0
    last: tuple[str, object] | None = None
    for op, arg, _ in pickletools.genops(blob):
        name = op.name
        if name == "FRAME":
            continue
        if name in _PUTS:
            index = len(memo) if name == "MEMOIZE" else int(arg)  # type: ignore[arg-type]
            if last is not None:
                memo[index] = last
            else:
                memo[index] = ("G", objects)
                objects += 1
                digest.update(b"M\0")
            continue
        if name in _GETS:
            token = memo[int(arg)]  # type: ignore[arg-type]
        elif name in _LITERALS:
            token = ("S" if "UNICODE" in name else "B", arg)
        else:
            token = (name, arg)
        last = token if token[0] in ("S", "B") else None
        digest.update(repr(token).encode())
        digest.update(b"\0")
    return digest.hexdigest()

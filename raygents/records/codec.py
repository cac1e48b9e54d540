"""The checkpoint byte format: msgpack of plain data in a versioned, size-limited, checked frame.

A frame is a fixed header, an integrity tag, then the msgpack payload::

    offset  size  field
    0       4     magic, b"RGCK"
    4       1     format version (1)
    5       1     flags: 0 = BLAKE2b-256 checksum, 1 = HMAC-SHA256
    6       4     key id: first 4 bytes of HMAC-SHA256(key, b"raygents key id"); zero unsigned
    10      8     payload length, unsigned big-endian
    18      32    tag over header (bytes 0-17) and payload: checksum or HMAC
    50      n     msgpack payload

Decoding checks, in order: total size against ``max_bytes``, header (magic, version, flags,
length), key, tag, and only then unpacks the payload with explicit limits and no extension
types. An unsigned frame is only checksummed (anyone who can write the store can forge one), so
what unpacking may allocate is bounded by the payload's size: each container's length by it,
and the lists and dicts together to 16 bytes of memory per payload byte (a byte per empty dict
would otherwise cost some 75); the encoder refuses what the decoder would. Every failure is a
:class:`~raygents.errors.CheckpointCorrupt`; nothing in a checkpoint can run code. Only this
module imports ``msgpack``.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from typing import Any, NoReturn, TypeAlias

import msgpack

from raygents.errors import CheckpointCorrupt, CheckpointError, CheckpointTooLarge, UserError
from raygents.stores.base import DEFAULT_MAX_BYTES  # (a record fits a default read)

__all__ = [
    "DEFAULT_MAX_BYTES",
    "FORMAT_VERSION",
    "MAGIC",
    "MAX_DEPTH",
    "MIN_KEY_BYTES",
    "OVERHEAD",
    "decode",
    "encode",
    "key_id",
    "packed_size",
]

MAGIC = b"RGCK"
FORMAT_VERSION = 1
"""The version this code writes; it reads every version up to this one."""
MAX_DEPTH = 256
"""Deepest container nesting that encodes; the msgpack unpacker itself stops at 1024."""
MIN_KEY_BYTES = 16
"""The shortest HMAC key accepted."""
_CONTAINER_BYTES = 16
"""The most memory the lists and dicts of a payload may take, per byte of the payload (above
a floor of ``_CONTAINER_FLOOR``), as :func:`_container_cost` counts it. Messages and rows of
JSON-like tool results take up to about 12; floods of tiny containers (a list of empty or
one-entry lists or dicts) take 30 to 75."""
_CONTAINER_FLOOR = 1 << 20
"""The memory for lists and dicts any payload may take, however small."""

_FLAG_CHECKSUM = 0
_FLAG_HMAC = 1
_HEADER = struct.Struct(">4sBB4sQ")
_TAG_SIZE = 32
OVERHEAD = _HEADER.size + _TAG_SIZE
"""Bytes a frame adds to its payload."""
_NO_KEY_ID = bytes(4)
_KEY_ID_LABEL = b"raygents key id"
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1
_SCALARS = frozenset({type(None), bool, int, float, str, bytes})
_Path: TypeAlias = "tuple[_Path, str | int] | None"
"""Where a value sits, as a linked list of keys and indexes from the leaf up."""
_PLAIN = "None, bool, int, float, str, bytes, list, tuple and dict with str keys"


def packed_size(obj: Any) -> int:
    """The size of plain data's msgpack payload (without a frame or checks)."""
    return len(msgpack.packb(obj, use_bin_type=True, datetime=False))


def encode(
    obj: Any,
    *,
    key: bytes | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    source: str | None = None,
) -> bytes:
    """Encode plain data as a checkpoint frame.

    Args:
        obj: None, bool, int (64-bit), float, str, bytes, list, tuple or dict with str keys,
            nested at most ``MAX_DEPTH`` deep. Tuples come back as lists.
        key: an HMAC key (at least 16 bytes) to sign the frame; ``None`` writes a checksum.
        max_bytes: the largest frame allowed.
        source: where the frame goes (a store key), for error messages.

    Returns:
        The frame bytes.

    Raises:
        CheckpointTooLarge: the frame would be larger than ``max_bytes``, or its lists and
            dicts would decode to more than 16 bytes per payload byte ("too large"); a
            :class:`~raygents.errors.PayloadTooLarge` of kind "checkpoint" and a
            CheckpointError, with the encoded size (or a lower bound, "at least") and the cap.
        CheckpointError: ``obj`` is not plain data (the message names the type and its path).
        UserError: ``key`` or ``max_bytes`` is unusable.
    """
    _check_key(key)
    _check_max_bytes(max_bytes)
    containers = _check_plain(obj, max_bytes, source)
    try:
        payload: bytes = msgpack.packb(obj, use_bin_type=True, datetime=False)
    except (ValueError, TypeError, OverflowError) as exc:  # the walk above should prevent it
        raise CheckpointError(f"{_name(source)} cannot be encoded: {exc}", key=source) from exc
    size = OVERHEAD + len(payload)
    if size > max_bytes:
        _too_large(source, size, max_bytes, f"{size} bytes encoded")
    if containers > _container_budget(len(payload)):
        raise CheckpointTooLarge(
            f"{_name(source)} too large: {containers} bytes of lists and dicts for a payload of "
            f"{len(payload)} bytes, over the limit of {_container_budget(len(payload))}: keep "
            "fewer, larger containers (a list of many empty or one-entry lists or dicts is "
            "refused on decode as a flood)",
            key=source,
            size=containers,
            limit=_container_budget(len(payload)),
        )
    flags, signer = (_FLAG_CHECKSUM, _NO_KEY_ID) if key is None else (_FLAG_HMAC, key_id(key))
    header = _HEADER.pack(MAGIC, FORMAT_VERSION, flags, signer, len(payload))
    return b"".join((header, _tag(header, payload, key), payload))


def decode(
    data: bytes,
    *,
    key: bytes | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    source: str | None = None,
) -> Any:
    """Check and decode a checkpoint frame.

    Args:
        data: the frame (bytes, bytearray or memoryview).
        key: the HMAC key; when set, only frames signed with this key are accepted.
        max_bytes: the largest frame accepted, checked before anything else.
        source: where the bytes came from (a store key); it becomes the error's ``key``.

    Returns:
        The plain data that was encoded (tuples as lists).

    Raises:
        CheckpointCorrupt: the bytes are too large, damaged, from a newer raygents, signed
            with another key or not signed while a key is set, or not plain msgpack.
            ``reason`` is one of "too large", "not bytes", "bad magic", "truncated",
            "newer version", "unknown version", "bad header", "trailing data",
            "key required", "unsigned", "wrong key", "checksum mismatch", "hmac mismatch",
            "undecodable".
        UserError: ``key`` or ``max_bytes`` is unusable.
    """
    _check_key(key)
    _check_max_bytes(max_bytes)
    if not isinstance(data, (bytes, bytearray, memoryview)):
        _corrupt(source, "not bytes", f"is a {type(data).__name__}, not bytes")
    size = data.nbytes if isinstance(data, memoryview) else len(data)
    if size > max_bytes:
        _corrupt(source, "too large", f"is {size} bytes, over the limit of {max_bytes}")
    data = bytes(data)
    _check_header(data, max_bytes, source)
    _check_tag(data, key, source)
    return _unpack(memoryview(data)[OVERHEAD:], source)


def _check_header(data: bytes, max_bytes: int, source: str | None) -> None:
    if data[: len(MAGIC)] != MAGIC[: len(data)]:
        _corrupt(source, "bad magic", "is not a raygents checkpoint (bad magic bytes)")
    if len(data) < OVERHEAD:
        _corrupt(source, "truncated", f"is truncated: {len(data)} bytes, shorter than a header")
    _, version, flags, signer, length = _HEADER.unpack_from(data)
    if version > FORMAT_VERSION:
        _corrupt(
            source,
            "newer version",
            f"has format version {version}, newer than {FORMAT_VERSION}, the newest this "
            "raygents reads: upgrade raygents to load it",
        )
    if version < 1:
        _corrupt(source, "unknown version", f"has unknown format version {version}")
    if flags not in (_FLAG_CHECKSUM, _FLAG_HMAC) or (flags == _FLAG_CHECKSUM and any(signer)):
        _corrupt(source, "bad header", f"has an invalid header (flags {flags:#04x})")
    expected = OVERHEAD + length
    if length > max_bytes:
        _corrupt(source, "too large", f"declares {length} bytes, over the limit of {max_bytes}")
    if len(data) < expected:
        _corrupt(source, "truncated", f"is truncated: {len(data)} of {expected} bytes")
    if len(data) > expected:
        _corrupt(source, "trailing data", f"has {len(data) - expected} bytes of trailing data")


def _check_tag(data: bytes, key: bytes | None, source: str | None) -> None:
    flags, signer = data[5], data[6:10]
    if flags == _FLAG_HMAC and key is None:
        _corrupt(
            source,
            "key required",
            "is signed with an HMAC key, but no key is configured to verify it",
        )
    if flags == _FLAG_CHECKSUM and key is not None:
        _corrupt(
            source,
            "unsigned",
            "is not signed, but an HMAC key is configured; unsigned checkpoints are refused",
        )
    if key is not None and not hmac.compare_digest(signer, key_id(key)):
        _corrupt(source, "wrong key", "is signed with a different HMAC key than the one configured")
    header, tag = data[: _HEADER.size], data[_HEADER.size : OVERHEAD]
    if not hmac.compare_digest(tag, _tag(header, memoryview(data)[OVERHEAD:], key)):
        if key is None:
            _corrupt(source, "checksum mismatch", "failed its checksum: the bytes are damaged")
        _corrupt(source, "hmac mismatch", "failed its HMAC check: the bytes were modified")


def _unpack(payload: memoryview, source: str | None) -> Any:
    size = max(len(payload), 1)
    budget = _container_budget(len(payload))
    spent = 0

    def _list(value: list[Any]) -> list[Any]:
        nonlocal spent
        spent += _container_cost(len(value), False)
        if spent > budget:
            raise _Flood
        return value

    def _dict(value: dict[Any, Any]) -> dict[str, Any]:
        nonlocal spent
        spent += _container_cost(len(value), True)
        if spent > budget:
            raise _Flood
        return _str_keys_only(value)

    unpacker = msgpack.Unpacker(
        None,
        max_buffer_size=size,
        raw=False,
        strict_map_key=True,
        use_list=True,
        list_hook=_list,
        object_hook=_dict,
        ext_hook=_refuse_ext,
        max_str_len=size,
        max_bin_len=size,
        max_array_len=size,
        max_map_len=size // 2,
        max_ext_len=0,  # also refuses the timestamp type, which bypasses ext_hook
    )
    try:
        unpacker.feed(payload)
        value = unpacker.unpack()
        consumed = unpacker.tell()
    except _Flood:
        _corrupt(
            source,
            "too large",
            f"holds more lists and dicts than its {len(payload)} bytes of payload account for "
            f"(over {budget} bytes of them)",
        )
    except Exception as exc:  # every unpacker failure means bad bytes, whatever its class
        _corrupt(source, "undecodable", f"is not valid plain msgpack: {type(exc).__name__}", exc)
    if consumed != len(payload):
        _corrupt(source, "trailing data", "has trailing data after its msgpack payload")
    return value


class _Flood(Exception):
    """A payload's lists and dicts went over their budget while unpacking."""


def _container_budget(payload_size: int) -> int:
    return _CONTAINER_FLOOR + _CONTAINER_BYTES * payload_size


def _container_cost(length: int, is_dict: bool) -> int:
    """The memory a decoded list or dict of ``length`` items takes, about (CPython's sizes,
    rounded up; the same count on both sides, so the encoder and decoder agree)."""
    if not is_dict:
        return 56 + 8 * length
    return 64 if length == 0 else max(184, 40 * length)


def _refuse_ext(code: int, data: bytes) -> NoReturn:
    raise ValueError(f"msgpack extension type {code} is not allowed")


def _str_keys_only(obj: dict[Any, Any]) -> dict[str, Any]:
    for name in obj:
        if type(name) is not str:
            raise ValueError(f"map key of type {type(name).__name__}")
    return obj


def _check_plain(obj: Any, max_bytes: int, source: str | None) -> int:
    """Walk ``obj`` without recursion; refuse anything that is not plain data. Returns what
    its lists and dicts will take once decoded (:func:`_container_cost`)."""
    size = 0  # a lower bound of the payload size, to refuse huge values before packing
    containers = 0
    stack: list[tuple[Any, _Path, int]] = [(obj, None, 0)]
    while stack:
        value, path, depth = stack.pop()
        kind = type(value)
        if kind is dict or kind is list or kind is tuple:
            if depth >= MAX_DEPTH:
                what = f"nesting deeper than {MAX_DEPTH} levels (or a container inside itself)"
                _not_plain(source, path, what)
            containers += _container_cost(len(value), kind is dict)
            stack.extend(_children(value, path, depth + 1, source))
            continue
        size += _check_scalar(value, path, source)
        if size > max_bytes:  # a lower bound: the rest is neither walked nor packed
            _too_large(source, size, max_bytes, f"at least {size} bytes of strings and bytes")
    return containers


def _children(
    value: Any, path: _Path, depth: int, source: str | None
) -> list[tuple[Any, _Path, int]]:
    if type(value) is not dict:
        return [(item, (path, index), depth) for index, item in enumerate(value)]
    for name in value:
        if type(name) is not str:
            _not_plain(source, path, f"a dict key of type {_type_name(name)}")
    return [(item, (path, name), depth) for name, item in value.items()]


def _check_scalar(value: Any, path: _Path, source: str | None) -> int:
    kind = type(value)
    if kind not in _SCALARS:
        _not_plain(source, path, f"a value of type {_type_name(value)}")
    if kind is int and not _INT_MIN <= value <= _INT_MAX:
        _not_plain(source, path, "an int outside the 64-bit range")
    return len(value) if kind is str or kind is bytes else 1


def _too_large(source: str | None, size: int, max_bytes: int, what: str) -> NoReturn:
    raise CheckpointTooLarge(
        f"{_name(source)} too large: {what}, over the limit of {max_bytes} bytes: keep tool "
        "results and the conversation shorter, or start a new run",
        key=source,
        size=size,
        limit=max_bytes,
    )


def _not_plain(source: str | None, path: _Path, what: str) -> NoReturn:
    raise CheckpointError(
        f"{_name(source)} cannot hold {what} at {_pointer(path)}: checkpoints hold plain data "
        f"only ({_PLAIN}); convert it first, e.g. with model_dump(mode='json')",
        key=source,
    )


def _pointer(path: _Path) -> str:
    """Render a linked path as a JSON pointer, e.g. ``'/messages/3/content'``."""
    parts: list[str] = []
    while path is not None:
        path, part = path
        parts.append(str(part).replace("~", "~0").replace("/", "~1"))
    if not parts:
        return "the top level"
    pointer = "/" + "/".join(reversed(parts))
    return repr(pointer if len(pointer) <= 120 else "..." + pointer[-117:])


def _type_name(value: Any) -> str:
    kind = type(value)
    if kind.__module__ == "builtins":
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"


def _tag(header: bytes, payload: bytes | memoryview, key: bytes | None) -> bytes:
    digest = (
        hashlib.blake2b(digest_size=_TAG_SIZE)
        if key is None
        else hmac.new(key, digestmod=hashlib.sha256)
    )
    digest.update(header)
    digest.update(payload)
    return digest.digest()


def key_id(key: bytes) -> bytes:
    """The 4-byte id of an HMAC key that frames carry (HMAC-SHA256 of a fixed label): tells
    keys apart without revealing them."""
    return hmac.new(key, _KEY_ID_LABEL, hashlib.sha256).digest()[:4]


def _check_key(key: bytes | None) -> None:
    if key is not None and (type(key) is not bytes or len(key) < MIN_KEY_BYTES):
        raise UserError(
            f"the checkpoint HMAC key must be bytes of at least {MIN_KEY_BYTES} bytes, "
            f"got a {type(key).__name__}" + (f" of {len(key)}" if isinstance(key, bytes) else "")
        )


def _check_max_bytes(max_bytes: int) -> None:
    if type(max_bytes) is not int or max_bytes < OVERHEAD:
        raise UserError(f"max_bytes must be an int of at least {OVERHEAD}, got {max_bytes!r}")


def _name(source: str | None) -> str:
    return f"checkpoint {source!r}" if source else "checkpoint"


def _corrupt(
    source: str | None, reason: str, what: str, cause: BaseException | None = None
) -> NoReturn:
    raise CheckpointCorrupt(f"{_name(source)} {what}", key=source, reason=reason) from cause

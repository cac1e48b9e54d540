"""Tests for raygents.records.codec: plain-data round trips and rejection of every damaged frame."""

from __future__ import annotations

import ast
import datetime
import decimal
import enum
import hashlib
import hmac
import json
import math
import pickle
import struct
from pathlib import Path
from typing import Any

import pytest

from raygents.errors import CheckpointCorrupt, CheckpointError, CheckpointTooLarge, UserError
from raygents.records import codec
from raygents.records.codec import (
    DEFAULT_MAX_BYTES,
    FORMAT_VERSION,
    MAX_DEPTH,
    OVERHEAD,
    decode,
    encode,
)

KEY = b"k" * 32
OTHER_KEY = b"o" * 32
GOLDEN = Path(__file__).parents[1] / "golden"
PACKAGE = Path(__file__).parents[2] / "raygents"

# A small checkpoint: about 80 bytes of payload, as in the reliability plan (F10).
SMALL = {
    "run": "run_01JD4Q5C",
    "seq": 7,
    "msgs": [{"role": "user", "content": "what time is it?"}],
    "ok": True,
    "n": 1.5,
}


def frame(
    payload: bytes,
    *,
    version: int = 1,
    flags: int | None = None,
    key_id: bytes | None = None,
    length: int | None = None,
    key: bytes | None = None,
) -> bytes:
    """Build a frame by hand, following the documented layout, with any field overridden."""
    if flags is None:
        flags = 0 if key is None else 1
    if key_id is None:
        key_id = (
            bytes(4) if key is None else hmac.new(key, b"raygents key id", "sha256").digest()[:4]
        )
    header = struct.pack(
        ">4sBB4sQ", b"RGCK", version, flags, key_id, len(payload) if length is None else length
    )
    if key is None:
        tag = hashlib.blake2b(header + payload, digest_size=32).digest()
    else:
        tag = hmac.new(key, header + payload, "sha256").digest()
    return header + tag + payload


def corrupt(data: Any, **kwargs: Any) -> CheckpointCorrupt:
    with pytest.raises(CheckpointCorrupt) as caught:
        decode(data, **kwargs)
    return caught.value


# --- round trips -------------------------------------------------------------------------

ROUND_TRIPS = [
    None,
    True,
    False,
    0,
    -1,
    2**63 - 1,
    -(2**63),
    2**64 - 1,
    1.5,
    -0.0,
    float("inf"),
    "",
    "héllo ✓ 🚀 \x00",
    b"",
    b"\x00\xff" * 100,
    [],
    {},
    [1, [2, [3, [None]]]],
    {"a": {"b": [None, {"c": b"d"}]}, "": 0, "x" * 300: "y" * 70_000},
    SMALL,
]


@pytest.mark.parametrize("value", ROUND_TRIPS, ids=lambda v: type(v).__name__)
@pytest.mark.parametrize("key", [None, KEY], ids=["checksum", "hmac"])
def test_round_trip(value: Any, key: bytes | None) -> None:
    data = encode(value, key=key)
    assert data[:4] == b"RGCK"
    assert data[4] == FORMAT_VERSION
    assert decode(data, key=key) == value
    assert decode(bytearray(data), key=key) == value
    assert decode(memoryview(data), key=key) == value


def test_tuples_come_back_as_lists_and_nan_survives() -> None:
    decoded = decode(encode({"t": (1, (2, 3)), "nan": float("nan")}))
    assert decoded["t"] == [1, [2, 3]]
    assert math.isnan(decoded["nan"])


def test_encoding_is_deterministic() -> None:
    assert encode(SMALL) == encode(dict(SMALL))
    assert encode(SMALL, key=KEY) == encode(SMALL, key=KEY)


def test_nesting_up_to_max_depth_encodes() -> None:
    value: Any = "leaf"
    for _ in range(MAX_DEPTH):
        value = [value]
    assert decode(encode(value)) == value
    with pytest.raises(CheckpointError, match="nesting deeper than"):
        encode([value])


# --- refusal of non-plain data ------------------------------------------------------------


class Color(enum.Enum):
    RED = 1


class Level(enum.IntEnum):
    LOW = 1


class Name(str):
    pass


class Thing:
    pass


NOT_PLAIN = [
    (datetime.datetime(2024, 1, 1), "datetime.datetime"),
    ({1, 2}, "set"),
    (frozenset(), "frozenset"),
    (Thing(), "Thing"),
    (Color.RED, "Color"),
    (Level.LOW, "Level"),
    (Name("x"), "Name"),
    (bytearray(b"x"), "bytearray"),
    (decimal.Decimal("1.5"), "decimal.Decimal"),
    (1j, "complex"),
    (lambda: None, "function"),
    (2**64, "64-bit"),
    (-(2**63) - 1, "64-bit"),
]


@pytest.mark.parametrize(("value", "named"), NOT_PLAIN, ids=lambda v: type(v).__name__)
def test_non_plain_values_are_refused_with_type_and_path(value: Any, named: str) -> None:
    checkpoint = {"messages": [{"role": "user"}, {"extra": [0, value]}]}
    with pytest.raises(CheckpointError) as caught:
        encode(checkpoint, source="runs/r1/3")
    error = caught.value
    assert type(error) is CheckpointError
    assert named in error.message
    assert "'/messages/1/extra/1'" in error.message
    assert error.key == "runs/r1/3"


@pytest.mark.parametrize("bad_key", [1, None, ("a",), b"bytes", Name("sub")])
def test_dict_keys_must_be_str(bad_key: Any) -> None:
    with pytest.raises(CheckpointError, match="dict key of type") as caught:
        encode({"outer": {bad_key: 1}})
    assert "'/outer'" in caught.value.message


def test_cycles_and_deep_values_are_refused_without_recursion_error() -> None:
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(CheckpointError, match="nesting deeper"):
        encode(cycle)
    deep: Any = None
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(CheckpointError, match="nesting deeper"):
        encode(deep)


def test_encode_refuses_a_frame_over_the_limit() -> None:
    with pytest.raises(CheckpointError, match="too large") as caught:
        encode(list(range(100)), max_bytes=OVERHEAD + 50, source="runs/r/1")
    assert type(caught.value) is CheckpointTooLarge
    assert caught.value.key == "runs/r/1"
    exact = encode("x")
    assert encode("x", max_bytes=len(exact)) == exact
    with pytest.raises(CheckpointError, match="too large"):
        encode("x", max_bytes=len(exact) - 1)


def test_encode_refuses_huge_strings_before_packing() -> None:
    huge = "x" * (DEFAULT_MAX_BYTES + 1)
    with pytest.raises(CheckpointError, match="too large"):
        encode({"tool_result": huge})


@pytest.mark.parametrize("key", [b"short", "a str key" * 4, bytearray(32)])
def test_unusable_keys_are_user_errors(key: Any) -> None:
    with pytest.raises(UserError, match="HMAC key"):
        encode(1, key=key)
    with pytest.raises(UserError, match="HMAC key"):
        decode(encode(1), key=key)


@pytest.mark.parametrize("max_bytes", [0, -1, 10, 1.5])
def test_unusable_limits_are_user_errors(max_bytes: Any) -> None:
    with pytest.raises(UserError, match="max_bytes"):
        encode(1, max_bytes=max_bytes)
    with pytest.raises(UserError, match="max_bytes"):
        decode(encode(1), max_bytes=max_bytes)


# --- damaged frames: exhaustive -----------------------------------------------------------


@pytest.mark.parametrize("key", [None, KEY], ids=["checksum", "hmac"])
def test_every_truncation_is_corrupt(key: bytes | None) -> None:
    data = encode(SMALL, key=key)
    assert 60 <= len(data) - OVERHEAD <= 100
    for length in range(len(data)):
        error = corrupt(data[:length], key=key, source="runs/r1/7")
        assert error.reason in ("truncated", "bad magic"), (length, error.reason)
        assert error.key == "runs/r1/7"


@pytest.mark.parametrize("key", [None, KEY], ids=["checksum", "hmac"])
def test_every_single_bit_flip_is_corrupt(key: bytes | None) -> None:
    data = encode(SMALL, key=key)
    reasons = set()
    for index in range(len(data)):
        for bit in range(8):
            damaged = bytearray(data)
            damaged[index] ^= 1 << bit
            reasons.add(corrupt(bytes(damaged), key=key).reason)
    assert len(data) * 8 > 900
    expected_mismatch = "checksum mismatch" if key is None else "hmac mismatch"
    assert {"bad magic", "newer version", expected_mismatch} <= reasons


@pytest.mark.parametrize("key", [None, KEY], ids=["checksum", "hmac"])
@pytest.mark.parametrize("garbage", [b"\x00", b"\xc0", b"garbage" * 100])
def test_trailing_garbage_is_corrupt(key: bytes | None, garbage: bytes) -> None:
    assert corrupt(encode(SMALL, key=key) + garbage, key=key).reason == "trailing data"


FOREIGN = [
    b"",
    b"R",
    b"RGC",
    b"RGCX" + bytes(60),
    bytes(100),
    b"\xff" * 100,
    b'{"run": "r1", "seq": 7}',
    b"\x1f\x8b\x08\x00" + bytes(60),  # gzip
    b"\x89PNG\r\n\x1a\n" + bytes(60),
    b"\x84\xa3run\xa2r1",  # bare msgpack, no frame
]


@pytest.mark.parametrize("data", FOREIGN, ids=range(len(FOREIGN)))
def test_foreign_bytes_are_corrupt(data: bytes) -> None:
    assert corrupt(data).reason in ("bad magic", "truncated")


@pytest.mark.parametrize("data", ["a str", 12, None, [1, 2]], ids=repr)
def test_non_bytes_are_corrupt(data: Any) -> None:
    assert corrupt(data).reason == "not bytes"


def test_newer_version_says_which_and_to_upgrade() -> None:
    error = corrupt(frame(b"\xc0", version=FORMAT_VERSION + 1), source="runs/r/9")
    assert error.reason == "newer version"
    assert str(FORMAT_VERSION + 1) in error.message
    assert "upgrade raygents" in error.message
    assert error.key == "runs/r/9"


def test_version_zero_and_unknown_flags_are_corrupt() -> None:
    assert corrupt(frame(b"\xc0", version=0)).reason == "unknown version"
    assert corrupt(frame(b"\xc0", flags=2)).reason == "bad header"
    assert corrupt(frame(b"\xc0", key_id=b"\x00\x00\x00\x01")).reason == "bad header"


def test_hand_built_frames_match_the_documented_layout() -> None:
    payload = b"\x81\xa1a\x01"  # {"a": 1}
    assert frame(payload) == encode({"a": 1})
    assert frame(payload, key=KEY) == encode({"a": 1}, key=KEY)
    assert decode(frame(payload)) == {"a": 1}


# --- HMAC ---------------------------------------------------------------------------------


def test_hmac_frame_without_a_key_is_corrupt() -> None:
    error = corrupt(encode(SMALL, key=KEY))
    assert error.reason == "key required"
    assert "no key is configured" in error.message


def test_hmac_frame_with_the_wrong_key_is_corrupt() -> None:
    assert corrupt(encode(SMALL, key=KEY), key=OTHER_KEY).reason == "wrong key"


def test_unsigned_frame_is_refused_when_a_key_is_configured() -> None:
    # Otherwise anyone could strip the HMAC and write a plain checksum instead.
    assert corrupt(encode(SMALL), key=KEY).reason == "unsigned"


def test_tampered_hmac_frame_with_a_recomputed_checksum_is_refused() -> None:
    forged = frame(encode({"max_turns": 10_000})[OVERHEAD:], flags=1, key_id=bytes(4))
    assert corrupt(forged, key=KEY).reason == "wrong key"
    payload = encode({"max_turns": 10_000})[OVERHEAD:]
    key_id = encode(1, key=KEY)[6:10]
    forged = frame(payload, flags=1, key_id=key_id, key=OTHER_KEY)
    assert corrupt(forged, key=KEY).reason == "hmac mismatch"


# --- size limits before decoding ----------------------------------------------------------


def test_size_limit_is_checked_before_anything_else() -> None:
    assert corrupt(b"x" * 1001, max_bytes=1000).reason == "too large"
    assert corrupt(encode("y" * 2000), max_bytes=1000).reason == "too large"
    assert corrupt(b"\x00" * (DEFAULT_MAX_BYTES + 1)).reason == "too large"


def test_a_declared_length_of_4_gib_is_refused() -> None:
    error = corrupt(frame(b"\xc0", length=4 * 2**30))
    assert error.reason == "too large"
    assert str(4 * 2**30) in error.message
    # Within the limit but longer than the data: truncated, and nothing is allocated for it.
    assert corrupt(frame(b"\xc0", length=1000)).reason == "truncated"


# --- hostile payloads behind a valid checksum --------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        b"\x91" * 100_000 + b"\xc0",  # arrays nested 100k deep
        b"\x81\xa1a" * 100_000 + b"\xc0",  # maps nested 100k deep
        b"\xdc\xff\xff" + b"\xc0" * 10,  # array declaring 65535 items
        b"\xdd\xff\xff\xff\xff",  # array declaring 4 Gi items
        b"\xdf\xff\xff\xff\xff",  # map declaring 4 Gi pairs
        b"\xdb\xff\xff\xff\xff" + b"x" * 10,  # str declaring 4 GiB
        b"\xc6\xff\xff\xff\xff" + b"x" * 10,  # bin declaring 4 GiB
        b"\xa2\xff\xfe",  # invalid UTF-8
        b"\x81\xc4\x01k\x01",  # bytes map key
        b"\x81\x01\x01",  # int map key
        b"\x81\x91\x01\x01",  # array map key
        b"\xc1",  # never-used byte
        b"",  # empty payload
        b"\xc0\xc0",  # two objects
    ],
    ids=lambda p: p[:6].hex(),
)
def test_hostile_payloads_with_valid_checksums_are_corrupt(payload: bytes) -> None:
    assert corrupt(frame(payload)).reason in ("undecodable", "trailing data")


@pytest.mark.parametrize(
    "ext",
    [
        b"\xd4\x01\x00",  # fixext 1
        b"\xd5\x01\x00\x00",  # fixext 2
        b"\xd6\xff\x00\x00\x00\x01",  # timestamp 32
        b"\xd7\xff" + bytes(8),  # timestamp 64
        b"\xc7\x0c\xff" + bytes(12),  # timestamp 96
        b"\xd8\x05" + bytes(16),  # fixext 16
        b"\xc7\x01\x07\x00",  # ext 8
        b"\xc8\x00\x01\x07\x00",  # ext 16
        b"\xc9\x00\x00\x00\x01\x07\x00",  # ext 32
    ],
    ids=lambda e: e[:2].hex(),
)
def test_extension_types_are_refused(ext: bytes) -> None:
    assert corrupt(frame(b"\x91" + ext)).reason == "undecodable"


class Canary:
    """Unpickling this creates a file: proof that code ran."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.path,))


def test_a_pickle_payload_never_runs(tmp_path: Path) -> None:
    live = tmp_path / "live"
    pickle.loads(pickle.dumps(Canary(live)))
    assert live.exists(), "the canary payload must be live for this test to mean anything"
    canary = tmp_path / "canary"
    payload = pickle.dumps(Canary(canary))
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        payload = pickle.dumps(Canary(canary), protocol=protocol)
        corrupt(payload)
        corrupt(frame(payload))
        corrupt(frame(payload), key=KEY)
        corrupt(frame(payload, key=KEY))
        assert decode(encode({"blob": payload})) == {"blob": payload}
    assert not canary.exists()


# --- errors carry the source --------------------------------------------------------------


def test_errors_name_the_source() -> None:
    error = corrupt(b"nope" * 20, source="tenant/runs/r1/000003")
    assert error.key == "tenant/runs/r1/000003"
    assert "tenant/runs/r1/000003" in error.message
    assert isinstance(error, CheckpointError)
    assert pickle.loads(pickle.dumps(error)).reason == "bad magic"


# --- static checks ------------------------------------------------------------------------

UNSAFE = {"pickle", "cloudpickle", "dill", "marshal", "shelve", "_pickle", "copyreg", "jsonpickle"}


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "__import__":
            names.add("__import__")
    return {name.split(".")[0] for name in names}


@pytest.mark.parametrize(
    "module", ["records/codec.py", "stores/open.py", "stores/memory.py", "stores/s3.py"]
)
def test_checkpoint_modules_import_nothing_unsafe(module: str) -> None:
    imported = imported_modules(PACKAGE / module)
    assert not imported & (UNSAFE | {"__import__", "ray", "importlib"})


def test_only_codec_imports_msgpack_and_only_store_imports_boto() -> None:
    for path in PACKAGE.rglob("*.py"):
        imported = imported_modules(path)
        if path != PACKAGE / "records/codec.py":
            assert "msgpack" not in imported, path
        if path != PACKAGE / "stores/s3.py":
            assert not imported & {"boto3", "botocore"}, path


def test_the_unpacker_is_configured_defensively() -> None:
    source = (PACKAGE / "records/codec.py").read_text()
    for option in (
        "ext_hook=",
        "max_buffer_size=",
        "max_bin_len=",
        "max_str_len=",
        "max_ext_len=0",
    ):
        assert option in source
    assert "max_array_len=" in source and "max_map_len=" in source


# --- golden files -------------------------------------------------------------------------


def from_json(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"$bytes"}:
            return bytes.fromhex(value["$bytes"])
        return {name: from_json(item) for name, item in value.items()}
    if isinstance(value, list):
        return [from_json(item) for item in value]
    return value


GOLDEN_FILES = sorted(GOLDEN.glob("*.rgck"))


def test_golden_files_exist_for_version_1() -> None:
    names = {path.name for path in GOLDEN_FILES}
    assert {"v1-checkpoint.rgck", "v1-checkpoint-hmac.rgck", "v1-scalar.rgck"} <= names


@pytest.mark.parametrize("path", GOLDEN_FILES, ids=lambda p: p.name)
def test_golden_files_still_decode(path: Path) -> None:
    record = json.loads(path.with_suffix(".json").read_text())
    key = bytes.fromhex(record["key_hex"]) if record["key_hex"] else None
    value = from_json(record["value"])
    data = path.read_bytes()
    assert decode(data, key=key, source=path.name) == value
    if record["format_version"] == FORMAT_VERSION:
        # The format has not changed silently: today's encoder writes the same bytes.
        assert encode(value, key=key) == data
    for damaged in (data[:-1], data + b"\x00", bytes([data[0] ^ 1]) + data[1:]):
        corrupt(damaged, key=key)


def test_codec_exports() -> None:
    assert sorted(codec.__all__) == codec.__all__
    assert OVERHEAD == 50

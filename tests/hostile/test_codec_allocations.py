"""An unsigned frame whose payload is a flood of tiny containers: decoding it allocates a
bounded multiple of the payload, not the ~75 times a byte per empty dict costs, and what the
encoder writes the decoder always reads back."""

from __future__ import annotations

import struct
import tracemalloc
from typing import Any

import msgpack
import pytest

from raygents.errors import CheckpointCorrupt, CheckpointTooLarge
from raygents.records import codec

PAYLOAD = 4 << 20
BOUND = 32
"""The most a hostile frame may cost to decode, in bytes per payload byte (the decoder's own
budget for lists and dicts is half of it; the rest is the copies of the frame and the
pointers of the outer array)."""


def _frame(payload: bytes) -> bytes:
    """A checksummed (unsigned) frame, as anyone who can write the store can forge."""
    header = codec._HEADER.pack(codec.MAGIC, codec.FORMAT_VERSION, 0, bytes(4), len(payload))
    return header + codec._tag(header, payload, None) + payload


def _flood(element: bytes) -> bytes:
    count = (PAYLOAD - 5) // len(element)
    return b"\xdd" + struct.pack(">I", count) + element * count


def _peak(data: bytes) -> tuple[int, str]:
    tracemalloc.start()
    try:
        try:
            codec.decode(data, max_bytes=len(data))
            outcome = "decoded"
        except CheckpointCorrupt as exc:
            outcome = exc.reason or ""
        return tracemalloc.get_traced_memory()[1], outcome
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(
    "element",
    [b"\x90", b"\x80", b"\x91\xc0", b"\x81\xa0\xc0", b"\x81\xa1a\x00"],
    ids=["empty lists", "empty dicts", "lists of one nil", "dicts of one entry", "{a: 0}"],
)
def test_a_flood_of_tiny_containers_costs_a_bounded_multiple_of_its_payload(
    element: bytes,
) -> None:
    payload = _flood(element)
    peak, outcome = _peak(_frame(payload))
    assert peak <= BOUND * len(payload), f"{peak / len(payload):.1f} bytes per payload byte"
    assert outcome == "too large"


def test_nested_headers_that_declare_huge_lengths_cost_little() -> None:
    header = b"\xdd" + struct.pack(">I", PAYLOAD - 100)
    payload = (header * 16).ljust(PAYLOAD, b"\xc0")
    peak, outcome = _peak(_frame(payload))
    assert peak <= BOUND * len(payload)
    assert outcome in ("undecodable", "too large")


@pytest.mark.parametrize(
    "value",
    [
        [{"role": "user", "text": f"message {i}", "meta": {"n": i}} for i in range(50_000)],
        {"rows": [[i, str(i), {"id": i, "ok": True}] for i in range(20_000)]},
        [[] for _ in range(10_000)],  # small: well under the floor of the budget
        "x" * (4 << 20),
    ],
    ids=["messages", "rows", "a few empty lists", "a long string"],
)
def test_ordinary_values_still_round_trip(value: Any) -> None:
    data = codec.encode(value, max_bytes=64 << 20)
    assert codec.decode(data, max_bytes=64 << 20) == value


def test_the_encoder_refuses_what_the_decoder_would() -> None:
    flood: list[Any] = [[] for _ in range(1_000_000)]
    with pytest.raises(CheckpointTooLarge, match="lists and dicts"):
        codec.encode(flood, max_bytes=64 << 20)
    # and the frame built without the encoder's check is the one the decoder refuses
    with pytest.raises(CheckpointCorrupt) as caught:
        codec.decode(_frame(msgpack.packb(flood)), max_bytes=64 << 20)
    assert caught.value.reason == "too large"

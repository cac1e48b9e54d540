"""Every error's message is text: built from any value, ``str()`` works and pickling keeps it."""

from __future__ import annotations

import pickle

import pytest
from ray import cloudpickle

from raygents import errors

ALL = [getattr(errors, name) for name in errors.__all__ if isinstance(getattr(errors, name), type)]

# (first argument, the message it becomes)
VALUES: list[tuple[object, str]] = [
    (3, "3"),
    (2.5, "2.5"),
    (None, ""),
    (b"raw", "b'raw'"),
    (["a", 1], "['a', 1]"),
    (ValueError("inner"), "inner"),
    ("text", "text"),
]


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
@pytest.mark.parametrize(("value", "text"), VALUES, ids=[repr(v[0]) for v in VALUES])
def test_a_non_text_message_becomes_text(cls: type, value: object, text: str) -> None:
    error = cls(value)
    assert error.message == text and isinstance(error.message, str)
    assert str(error) == text
    assert repr(error)  # never raises either


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
@pytest.mark.parametrize("dumps", [pickle.dumps, cloudpickle.dumps], ids=["pickle", "cloudpickle"])
def test_a_coerced_message_survives_pickling(cls: type, dumps: object) -> None:
    error = cls(3, run_id="run-1")
    copy = pickle.loads(dumps(error))  # type: ignore[operator]
    assert type(copy) is cls and copy.message == "3" and copy.run_id == "run-1"
    assert str(copy) == "3 (run run-1)"


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_a_non_text_run_id_becomes_text(cls: type) -> None:
    error = cls("boom", run_id=7)
    assert error.run_id == "7"
    assert str(error) == "boom (run 7)"


def test_max_turns_exceeded_with_a_number() -> None:
    error = errors.MaxTurnsExceeded(3)
    assert str(error) == "3"
    assert pickle.loads(pickle.dumps(error)).message == "3"


# --- PayloadTooLarge ---------------------------------------------------------------------------

KINDS = list(errors.MAX_PAYLOAD_BYTES)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("extra", [-1, 0], ids=["cap-1", "cap"])
def test_a_payload_at_or_below_its_cap_passes(kind: errors.PayloadKind, extra: int) -> None:
    errors.PayloadTooLarge.check(kind, "x" * (errors.MAX_PAYLOAD_BYTES[kind] + extra))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("times", [1, 10], ids=["cap+1", "10x cap"])
def test_a_payload_over_its_cap_is_refused(kind: errors.PayloadKind, times: int) -> None:
    limit = errors.MAX_PAYLOAD_BYTES[kind]
    size = limit * times + (1 if times == 1 else 0)
    with pytest.raises(errors.PayloadTooLarge) as caught:
        errors.PayloadTooLarge.check(kind, "x" * size, what="tool 'fetch'")
    error = caught.value
    assert (error.kind, error.size, error.limit) == (kind, size, limit)
    assert f"{kind} (tool 'fetch') is {size} bytes, over the limit of {limit} bytes" in str(error)
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.kind, copy.size, copy.limit, copy.message) == (kind, size, limit, error.message)


def test_payload_size_counts_utf8_bytes() -> None:
    limit = errors.MAX_PAYLOAD_BYTES["model output"]
    errors.PayloadTooLarge.check("model output", "é" * (limit // 2))  # 2 bytes each: the cap
    with pytest.raises(errors.PayloadTooLarge) as caught:
        errors.PayloadTooLarge.check("model output", "é" * (limit // 2) + "x")
    assert caught.value.size == limit + 1
    assert errors.PayloadTooLarge.size_of("\udcff") == 3


def test_payload_too_large_writes_its_own_message() -> None:
    error = errors.PayloadTooLarge(kind="run input", size=10, limit=5)
    assert str(error).startswith("run input is 10 bytes, over the limit of 5 bytes: ")
    assert errors.PayloadTooLarge("plain").message == "plain"
    assert errors.PayloadTooLarge("plain").kind is None

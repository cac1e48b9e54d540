"""The session log of a StoreSession without a store: records framed, replayed in order,
and malformed ones refused (raygents/sessions/storelog.py)."""

from __future__ import annotations

from typing import Any

import pytest

from raygents.core.messages import Message
from raygents.errors import CheckpointCorrupt, CheckpointTooLarge, RaygentsError
from raygents.records import codec
from raygents.sessions import storelog
from raygents.sessions.base import dump_messages
from raygents.sessions.storelog import Log

URL = "memory://log"
WHERE = f"session 's' in {URL}"
KEY = b"a test key of thirty-two bytes.."


def talk(n: int) -> list[Message]:
    """A conversation of ``n`` messages, long enough that a record of one is small beside
    a snapshot of them all."""
    return [
        Message("user" if i % 2 == 0 else "assistant", f"message {i}: " + "w " * 20)
        for i in range(n)
    ]


def saved(log: Log, messages: list[Message], **kwargs: Any) -> tuple[Log, dict[str, Any]]:
    """Frame the save of ``messages`` on ``log``, decode the frame as a load would, and
    replay it: the log after the save, and the record written."""
    payload, frame = storelog.frame(
        "s", log, dump_messages(messages), None, None, key=KEY, **kwargs
    )
    value = codec.decode(frame, key=KEY, source="sessions/s")
    assert value == payload and storelog.is_record(value, "s")
    seq = log.seq + 1
    if storelog.kind(value) == "snapshot":
        return storelog.start(WHERE, seq, value, len(frame)), value
    return storelog.apply("s", URL, log, seq, value, len(frame)), value


def test_the_first_save_is_a_snapshot_of_the_whole_conversation() -> None:
    log, value = saved(Log(), talk(3))
    assert value["kind"] == "snapshot" and "base" not in value
    assert log.messages == dump_messages(talk(3))
    assert (log.seq, log.snapshots, log.since, log.newest) == (1, [1], 0, value["id"])
    assert log.lineage == [value["id"]]


def test_records_applied_in_order_rebuild_the_conversation() -> None:
    log, first = saved(Log(), talk(20))
    ids = [first["id"]]
    for before, n in ((20, 21), (21, 22), (22, 24)):
        log, value = saved(log, talk(n))
        assert value["kind"] == "save" and value["base"] == ids[-1]
        assert value["keep"] == before and value["messages"] == dump_messages(talk(n))[before:]
        ids.append(value["id"])
    assert log.messages == dump_messages(talk(24))
    assert (log.seq, log.since, log.snapshots, log.lineage) == (4, 3, [1], ids)


def test_a_save_that_drops_messages_keeps_only_the_common_prefix() -> None:
    log, _ = saved(Log(), talk(20))
    edited = [*talk(20)[:5], Message("user", "a new turn")]
    log, value = saved(log, edited)
    assert (value["kind"], value["keep"], len(value["messages"])) == ("save", 5, 1)
    assert log.messages == dump_messages(edited)


def test_a_snapshot_follows_once_enough_records_follow_the_last(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(storelog, "_SNAPSHOT_EVERY", 3)
    log, _ = saved(Log(), talk(20))
    kinds = []
    for n in range(21, 26):
        log, value = saved(log, talk(n))
        kinds.append(value["kind"])
    assert kinds == ["save", "save", "snapshot", "save", "save"]
    assert log.snapshots == [1, 4] and log.messages == dump_messages(talk(25))


def test_a_snapshot_too_large_for_a_record_gives_way_to_a_record_of_the_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    encode = codec.encode

    def small(value: Any, **kwargs: Any) -> bytes:
        frame = encode(value, **kwargs)
        if value.get("kind") == "snapshot" and len(value["messages"]) > 20:
            raise CheckpointTooLarge("too large", size=len(frame), limit=len(frame) - 1)
        return frame

    monkeypatch.setattr(storelog, "_SNAPSHOT_EVERY", 1)  # (every save would be a snapshot)
    log, _ = saved(Log(), talk(20))
    monkeypatch.setattr(codec, "encode", small)
    log, value = saved(log, talk(21))
    assert value["kind"] == "save" and log.messages == dump_messages(talk(21))
    with pytest.raises(CheckpointTooLarge):  # (no log to build a change on: nothing fits)
        saved(Log(), talk(21))


def test_a_record_that_keeps_more_than_the_log_holds_is_corrupt() -> None:
    """A record applied out of order (on a shorter conversation than it was built on)."""
    log, _ = saved(Log(), talk(2))
    later = {"format": "raygents.session", "session_id": "s", "kind": "save", "keep": 5}
    with pytest.raises(CheckpointCorrupt, match=r"0000000002\.sess.*keeps more messages"):
        storelog.apply("s", URL, log, 2, {**later, "messages": []}, 10)


def test_a_record_whose_messages_do_not_read_fails_naming_the_session() -> None:
    log, _ = saved(Log(), talk(2))
    bad = {"kind": "save", "keep": 2, "messages": [{"role": "robot", "content": "beep"}]}
    with pytest.raises(RaygentsError, match=r"session 's' in memory://log"):
        storelog.apply("s", URL, log, 2, bad, 10)


GOOD: dict[str, Any] = {"format": "raygents.session", "session_id": "s", "messages": []}


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ({**GOOD, "kind": "snapshot"}, True),
        (GOOD, True),  # (a record of before records held changes: a whole conversation)
        ({**GOOD, "kind": "save", "keep": 0}, True),
        ({**GOOD, "kind": "compact", "upto": 1, "summary": []}, True),
        ({**GOOD, "kind": "save"}, False),  # no keep
        ({**GOOD, "kind": "save", "keep": -1}, False),
        ({**GOOD, "kind": "save", "keep": True}, False),  # (a bool is no count)
        ({**GOOD, "kind": "compact", "upto": 1}, False),  # no summary
        ({**GOOD, "kind": "compact", "summary": []}, False),  # no upto
        ({**GOOD, "kind": "unknown"}, False),
        ({**GOOD, "kind": 3}, False),
        ({**GOOD, "messages": "hi"}, False),
        ({**GOOD, "session_id": "t"}, False),  # another session's
        ({**GOOD, "format": "something else"}, False),
        (["a list"], False),
        (None, False),
    ],
)
def test_malformed_records_are_refused(value: Any, ok: bool) -> None:
    assert storelog.is_record(value, "s") is ok


def test_lineage_and_snapshot_numbers_of_odd_types_are_left_out() -> None:
    snapshot = {
        **GOOD,
        "id": "r3",
        "lineage": ["r1", 2, None, "r2"],
        "snapshots": [1, "two", 2.0, 2],
        "marks": "not a list",
    }
    log = storelog.start(WHERE, 3, snapshot, 10)
    assert (log.lineage, log.snapshots, log.marks) == (["r1", "r2", "r3"], [1, 2, 3], [])
    assert storelog.in_lineage(snapshot, "r2") and not storelog.in_lineage(snapshot, "r9")
    assert not storelog.in_lineage({"lineage": "r2"}, "r2")


@pytest.mark.parametrize(
    ("key", "seq"),
    [
        (storelog.record_key("s", 7), 7),
        ("sessions/s/0000000007.snap", -1),  # (a mark, read as a record)
        ("sessions/s/7.sess", -1),
        ("sessions/s/00000000x7.sess", -1),
        ("sessions/s/", -1),
    ],
)
def test_record_keys_read_back_their_number(key: str, seq: int) -> None:
    assert storelog.seq_of(key) == seq


def test_a_mark_key_reads_back_its_number_only_as_a_mark() -> None:
    mark = storelog.record_key("s", 12, storelog.MARK)
    assert mark == "sessions/s/0000000012.snap"
    assert storelog.seq_of(mark, storelog.MARK) == 12 and storelog.seq_of(mark) == -1

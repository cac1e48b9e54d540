"""Hostile stores: links, FIFOs and oversized objects planted where records should be.

Whoever can write the store directory (or bucket) may plant anything there. The file store
never follows a symbolic link (its root is resolved once, when it is opened), never opens
anything but a regular file, and no store reads more than ``max_bytes`` + 1 bytes of a value.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from s3_server import LocalS3, MotoServer, local_s3

from raygents.errors import CheckpointCorrupt, CheckpointError, UserError
from raygents.records.codec import DEFAULT_MAX_BYTES
from raygents.stores.base import Store
from raygents.stores.file import FileStore
from raygents.stores.memory import MemoryStore
from raygents.stores.open import open_store
from raygents.stores.s3 import S3Store

# --- links ----------------------------------------------------------------------------------


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory outside the store holding files whose names are valid record keys."""
    victim = tmp_path / "victim"
    victim.mkdir()
    for name in ("0000000001.ckpt", "0000000002.ckpt", "precious"):
        (victim / name).write_bytes(b"do not touch " + name.encode())
    return victim


@pytest.fixture
def store(tmp_path: Path) -> FileStore:
    store = FileStore(tmp_path / "store")
    store.put("runs/good/0000000001.ckpt", b"good")
    return store


def victim_files(victim: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(victim.iterdir())}


def plant_dir_link(store: FileStore, outside: Path, run_id: str = "evil") -> Path:
    link = store.root / "runs" / run_id
    link.symlink_to(outside, target_is_directory=True)
    return link


def test_list_skips_a_directory_link_and_warns(
    store: FileStore, outside: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plant_dir_link(store, outside)
    with caplog.at_level(logging.WARNING, logger="raygents"):
        assert store.list() == ["runs/good/0000000001.ckpt"]
        assert store.list("runs/evil/") == []
        assert store.list("runs/evil") == []
    assert "runs/evil" in caplog.text and "symbolic link" in caplog.text


def test_list_skips_file_links_and_other_non_files(
    store: FileStore, outside: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run = store.root / "runs" / "good"
    (run / "0000000002.ckpt").symlink_to(outside / "0000000001.ckpt")
    (run / "0000000003.ckpt").symlink_to("/dev/zero")
    os.mkfifo(run / "0000000004.ckpt")
    with caplog.at_level(logging.WARNING, logger="raygents"):
        assert store.list("runs/") == ["runs/good/0000000001.ckpt"]
    assert "runs/good/0000000002.ckpt" in caplog.text


def test_completing_a_linked_run_deletes_nothing_outside_the_store(
    store: FileStore, outside: Path
) -> None:
    """What the coordinator does when run ``evil`` completes: list, delete, prune."""
    link = plant_dir_link(store, outside)
    before = victim_files(outside)
    store.delete(store.list("runs/evil/"))
    store.delete(["runs/evil/0000000001.ckpt", "runs/evil/precious"])  # named outright
    store.remove_empty_dir("runs/evil/")
    assert victim_files(outside) == before
    assert link.is_symlink()


def test_delete_of_a_file_link_removes_the_link_not_its_target(
    store: FileStore, outside: Path
) -> None:
    record = store.root / "runs" / "good" / "0000000002.ckpt"
    record.symlink_to(outside / "precious")
    store.delete(["runs/good/0000000002.ckpt"])
    assert not record.is_symlink() and not record.exists()
    assert (outside / "precious").read_bytes() == b"do not touch precious"


def test_remove_empty_dir_leaves_a_linked_empty_directory_alone(
    store: FileStore, tmp_path: Path
) -> None:
    empty = tmp_path / "empty-outside"
    empty.mkdir()
    plant_dir_link(store, empty)
    store.remove_empty_dir("runs/evil/")
    assert empty.is_dir()


@pytest.mark.parametrize("target", ["outside", "dev-zero"])
def test_get_never_reads_through_a_file_link(store: FileStore, outside: Path, target: str) -> None:
    record = store.root / "runs" / "good" / "0000000002.ckpt"
    record.symlink_to(outside / "0000000001.ckpt" if target == "outside" else Path("/dev/zero"))
    with pytest.raises(CheckpointError, match="symbolic link") as caught:
        store.get("runs/good/0000000002.ckpt")
    assert caught.value.key == "runs/good/0000000002.ckpt"
    assert not isinstance(caught.value, CheckpointCorrupt)
    with pytest.raises(CheckpointError, match="symbolic link"):
        store.has("runs/good/0000000002.ckpt")


def test_reads_and_writes_never_go_through_a_directory_link(
    store: FileStore, outside: Path
) -> None:
    plant_dir_link(store, outside)
    before = victim_files(outside)
    key = "runs/evil/0000000001.ckpt"
    for read in (store.get, store.has):
        with pytest.raises(CheckpointError, match=r"'runs/evil' is a symbolic link") as caught:
            read(key)
        assert caught.value.key == key
    for write in (
        lambda: store.put("runs/evil/0000000009.ckpt", b"planted"),
        lambda: store.put_if_dir("runs/evil/0000000009.ckpt", b"planted"),
        lambda: store.mark("runs/evil/fence.9"),
        lambda: store.make_dir("runs/evil/sub/"),
    ):
        with pytest.raises(CheckpointError, match="symbolic link"):
            write()
    assert victim_files(outside) == before


def test_put_and_mark_never_write_through_a_file_link(store: FileStore, outside: Path) -> None:
    run = store.root / "runs" / "good"
    (run / "0000000002.ckpt").symlink_to(outside / "precious")
    (run / "fence.3").symlink_to(outside / "0000000001.ckpt")
    (run / "0000000004.ckpt").symlink_to(outside / "not-there-yet")
    before = victim_files(outside)
    with pytest.raises(CheckpointError, match="symbolic link"):
        store.put("runs/good/0000000002.ckpt", b"overwrite?")
    with pytest.raises(CheckpointError, match="symbolic link"):
        store.put("runs/good/0000000004.ckpt", b"create through a dangling link?")
    store.mark("runs/good/fence.3")  # the name exists: a mark never writes
    assert victim_files(outside) == before


def test_a_fifo_at_a_key_is_refused_without_blocking(store: FileStore) -> None:
    fifo = store.root / "runs" / "good" / "0000000002.ckpt"
    os.mkfifo(fifo)
    outcome: list[BaseException | bytes | None] = []

    def read() -> None:
        try:
            outcome.append(store.get("runs/good/0000000002.ckpt"))
        except BaseException as exc:  # collected for the assertion
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(5)
    if reader.is_alive():  # blocked in open(): let it go, then fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(5)
        pytest.fail("get blocked on a FIFO")
    [error] = outcome
    assert isinstance(error, CheckpointError) and "not a regular file" in str(error)


def test_a_root_opened_through_a_link_stays_where_it_resolved(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real, target_is_directory=True)
    store = FileStore(tmp_path / "link")
    assert store.url == f"file://{tmp_path}/link"  # the URL stays as given
    store.put("runs/r/1", b"x")
    assert (real / "runs" / "r" / "1").read_bytes() == b"x"
    assert store.get("runs/r/1") == b"x" and store.list() == ["runs/r/1"]

    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "runs" / "r").mkdir(parents=True)
    (elsewhere / "runs" / "r" / "2").write_bytes(b"swapped in")
    real.rename(tmp_path / "real-moved")
    real.symlink_to(elsewhere, target_is_directory=True)  # the root is now a link
    with pytest.raises(CheckpointError, match="store root") as caught:
        store.get("runs/r/2")
    assert "symbolic link" in str(caught.value)
    for other in (
        lambda: store.put("runs/r/3", b"x"),
        lambda: store.list(),
        lambda: store.delete(["runs/r/2"]),
        lambda: store.has("runs/r/2"),
    ):
        with pytest.raises(CheckpointError, match="store root"):
            other()
    assert (elsewhere / "runs" / "r" / "2").read_bytes() == b"swapped in"
    assert [p.name for p in (elsewhere / "runs" / "r").iterdir()] == ["2"]


# --- sizes ----------------------------------------------------------------------------------


def test_a_sparse_300_mb_record_is_refused_before_it_is_read(store: FileStore) -> None:
    path = store.root / "runs" / "good" / "0000000002.ckpt"
    with path.open("wb") as file:
        file.truncate(300 * 1024 * 1024)
    with pytest.raises(CheckpointCorrupt) as caught:
        store.get("runs/good/0000000002.ckpt")
    error = caught.value
    assert error.reason == "too large" and error.key == "runs/good/0000000002.ckpt"
    assert f"{300 * 1024 * 1024} bytes" in str(error) and str(DEFAULT_MAX_BYTES) in str(error)


def test_a_record_that_grows_after_its_size_was_checked_is_read_no_further(
    store: FileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A concurrent writer appending after the fstat: at most the limit + 1 bytes are read."""
    path = store.root / "runs" / "good" / "0000000002.ckpt"
    path.write_bytes(b"y" * 10_000)
    real_fstat, real_read, read = os.fstat, os.read, [0]

    def fstat_before_the_writer(fd: int) -> Any:
        result = real_fstat(fd)
        if result.st_size == 10_000:  # as it was when checked: empty
            return os.stat_result((*result[:6], 0, *result[7:]))
        return result

    def counted_read(fd: int, size: int) -> bytes:
        chunk = real_read(fd, size)
        read[0] += len(chunk)
        return chunk

    monkeypatch.setattr(os, "fstat", fstat_before_the_writer)
    monkeypatch.setattr(os, "read", counted_read)
    with pytest.raises(CheckpointCorrupt, match="more than 100 bytes") as caught:
        store.get("runs/good/0000000002.ckpt", max_bytes=100)
    assert caught.value.reason == "too large"
    assert read[0] <= 101


@pytest.fixture(scope="module")
def moto_server() -> Iterator[MotoServer]:
    with MotoServer() as server:
        yield server


@pytest.fixture
def s3(moto_server: MotoServer) -> Iterator[LocalS3]:
    with local_s3(moto_server, proxy=True) as s3:
        yield s3


class CountingBody:
    """A response body that counts the bytes read from it."""

    def __init__(self, body: Any) -> None:
        self.body, self.bytes_read, self.closed = body, 0, False

    def read(self, amt: int | None = None) -> bytes:
        chunk: bytes = self.body.read(amt)
        self.bytes_read += len(chunk)
        return chunk

    def close(self) -> None:
        self.closed = True
        self.body.close()


def count_body_reads(store: S3Store, content_length: int | None = None) -> list[CountingBody]:
    """Wrap every GetObject body of ``store``'s client; optionally lie about its length."""
    bodies: list[CountingBody] = []

    def wrap(parsed: dict[str, Any], **_: Any) -> None:
        if "Body" in parsed:
            bodies.append(CountingBody(parsed["Body"]))
            parsed["Body"] = bodies[-1]
            if content_length is not None:
                parsed["ContentLength"] = content_length

    store._client().meta.events.register("after-call.s3.GetObject", wrap)
    return bodies


def plant_s3(s3: LocalS3, key: str, size: int) -> None:
    s3.client().put_object(Bucket=s3.bucket, Key=f"tenant-a/{key}", Body=b"z" * size)


def test_s3_get_refuses_an_object_larger_than_the_limit_unread(s3: LocalS3) -> None:
    store = S3Store(s3.bucket, "tenant-a")
    plant_s3(s3, "runs/r/0000000001.ckpt", 1024 * 1024)
    bodies = count_body_reads(store)
    with pytest.raises(CheckpointCorrupt) as caught:
        store.get("runs/r/0000000001.ckpt", max_bytes=1000)
    error = caught.value
    assert error.reason == "too large" and error.key == "runs/r/0000000001.ckpt"
    assert f"{1024 * 1024} bytes" in str(error) and "1000" in str(error)
    [body] = bodies
    assert body.bytes_read == 0 and body.closed


def test_s3_get_reads_no_more_than_the_limit_when_the_length_lies(s3: LocalS3) -> None:
    store = S3Store(s3.bucket, "tenant-a")
    plant_s3(s3, "runs/r/0000000001.ckpt", 1024 * 1024)
    bodies = count_body_reads(store, content_length=10)
    with pytest.raises(CheckpointCorrupt, match="more than 1000 bytes") as caught:
        store.get("runs/r/0000000001.ckpt", max_bytes=1000)
    assert caught.value.reason == "too large"
    [body] = bodies
    assert body.bytes_read <= 1001 and body.closed


def test_s3_get_applies_the_codec_limit_by_default(s3: LocalS3) -> None:
    store = open_store(s3.url("tenant-a"))
    assert isinstance(store, S3Store)
    plant_s3(s3, "runs/r/0000000001.ckpt", DEFAULT_MAX_BYTES + 1)
    plant_s3(s3, "runs/r/0000000002.ckpt", DEFAULT_MAX_BYTES)
    bodies = count_body_reads(store)
    with pytest.raises(CheckpointCorrupt, match="over the limit"):
        store.get("runs/r/0000000001.ckpt")
    assert bodies[0].bytes_read == 0
    assert store.get("runs/r/0000000002.ckpt") == b"z" * DEFAULT_MAX_BYTES


@pytest.mark.parametrize("max_bytes", [-1, 1.5, "10", True, None])
def test_max_bytes_must_be_a_non_negative_int(max_bytes: Any) -> None:
    store: Store = MemoryStore(f"hostile-{uuid.uuid4().hex}")
    with pytest.raises(UserError, match="max_bytes"):
        store.get("runs/r/1", max_bytes=max_bytes)

"""Tests for raygents.stores: one behaviour suite over memory, file and S3 (moto over HTTP)."""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from s3_server import Fault, LocalS3, MotoServer, aws_env, local_s3

from raygents.errors import CheckpointCorrupt, CheckpointError, UserError
from raygents.stores.base import Store, validate_key
from raygents.stores.file import FileStore
from raygents.stores.memory import MemoryStore
from raygents.stores.open import default_store_url, open_store
from raygents.stores.s3 import S3Store

BACKENDS = ["memory", "file", "s3"]


@pytest.fixture(scope="module")
def moto_server() -> Iterator[MotoServer]:
    with MotoServer() as server:
        yield server


@pytest.fixture
def s3(moto_server: MotoServer) -> Iterator[LocalS3]:
    with local_s3(moto_server, proxy=True, secret_key=f"canary-{uuid.uuid4().hex}") as s3:
        yield s3


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "memory":
        return open_store(f"memory://test-{uuid.uuid4().hex}")
    if request.param == "file":
        return open_store(f"file://{tmp_path}/checkpoints")
    s3: LocalS3 = request.getfixturevalue("s3")
    return open_store(s3.url("tenant-a"))


def fast_s3(s3: LocalS3, prefix: str = "tenant-a", **options: Any) -> S3Store:
    """An S3 store with short backoffs, for fault tests."""
    settings: dict[str, Any] = {"max_attempts": 1, "extra_retries": 2, "backoff_s": 0.01}
    settings.update(options)
    return S3Store(s3.bucket, prefix, **settings)


# --- the behaviour suite, for every backend -----------------------------------------------


def test_put_then_get(store: Store) -> None:
    store.put("runs/r1/000001", b"one")
    store.put("runs/r1/000002", bytearray(b"two"))
    assert store.get("runs/r1/000001") == b"one"
    assert store.get("runs/r1/000002") == b"two"
    assert store.get("runs/r1/000003") is None
    assert store.get("runs/r2/000001") is None
    assert store.get("runs") is None


def test_empty_and_large_values(store: Store) -> None:
    large = os.urandom(2 * 1024 * 1024)
    store.put("empty", b"")
    store.put("large", large)
    assert store.get("empty") == b""
    assert store.get("large") == large


def test_get_refuses_values_over_max_bytes(store: Store) -> None:
    store.put("runs/r1/000001", b"x" * 100)
    assert store.get("runs/r1/000001", max_bytes=100) == b"x" * 100
    assert store.get("runs/r1/000404", max_bytes=0) is None
    with pytest.raises(CheckpointCorrupt, match="over the limit of 99") as caught:
        store.get("runs/r1/000001", max_bytes=99)
    assert caught.value.reason == "too large" and caught.value.key == "runs/r1/000001"
    assert "100 bytes" in str(caught.value)


def test_put_is_create_only(store: Store) -> None:
    store.put("runs/r1/000001", b"first")
    with pytest.raises(CheckpointError, match="already exists") as caught:
        store.put("runs/r1/000001", b"second")
    assert caught.value.key == "runs/r1/000001"
    assert store.get("runs/r1/000001") == b"first"


def test_identical_re_put_is_success(store: Store) -> None:
    store.put("runs/r1/000001", b"same")
    store.put("runs/r1/000001", b"same")
    store.put("runs/r1/000001", memoryview(b"same"))
    assert store.get("runs/r1/000001") == b"same"
    assert store.list() == ["runs/r1/000001"]


def test_list_is_sorted_and_filters_by_string_prefix(store: Store) -> None:
    keys = ["runs/b/2", "runs/a/10", "runs/a/2", "runs/ab/1", "heads/a", "top"]
    for key in keys:
        store.put(key, key.encode())
    assert store.list() == sorted(keys)
    assert store.list("") == sorted(keys)
    assert store.list("runs/a") == ["runs/a/10", "runs/a/2", "runs/ab/1"]
    assert store.list("runs/a/") == ["runs/a/10", "runs/a/2"]
    assert store.list("runs/a/1") == ["runs/a/10"]
    assert store.list("runs/c/") == []
    assert store.list("nothing") == []


def test_has_tells_whether_a_key_exists(store: Store) -> None:
    store.put("runs/r/1", b"one")
    store.mark("runs/r/fence.2")
    assert store.has("runs/r/1") and store.has("runs/r/fence.2")
    assert not store.has("runs/r/2") and not store.has("runs/q/1")
    with pytest.raises(UserError):
        store.has("../x")


def test_records_go_where_a_run_writes_them(store: Store) -> None:
    """What an agent actor writing its own records relies on: a put into a run's existing
    prefix lands; the file store alone refuses one whose run's directory is gone."""
    store.make_dir("runs/r/")
    assert store.put_if_dir("runs/r/0000000001.ckpt", b"a")
    assert store.get("runs/r/0000000001.ckpt") == b"a"
    store.delete(store.list("runs/r/"))
    store.remove_empty_dir("runs/r/")
    landed = store.put_if_dir("runs/r/0000000002.ckpt", b"b")
    assert landed == (not isinstance(store, FileStore))
    assert store.has("runs/r/0000000002.ckpt") == landed


def test_delete(store: Store) -> None:
    for key in ("runs/a/1", "runs/a/2", "runs/b/1"):
        store.put(key, b"x")
    store.delete(["runs/a/1", "runs/a/2", "runs/a/404", "never/there"])
    assert store.list() == ["runs/b/1"]
    assert store.get("runs/a/1") is None
    store.delete([])
    store.delete(iter(["runs/b/1"]))
    assert store.list() == []
    store.put("runs/a/1", b"new content after a delete")
    assert store.get("runs/a/1") == b"new content after a delete"


def test_concurrent_puts_of_one_key(store: Store) -> None:
    outcomes: list[str] = []
    lock = threading.Lock()

    def put(data: bytes) -> None:
        try:
            store.put("race", data)
            outcome = "ok"
        except CheckpointError:
            outcome = "conflict"
        with lock:
            outcomes.append(outcome)

    # moto checks If-None-Match and then writes, without a lock, so racing puts of different
    # bytes could both succeed there; S3 itself, like the other stores, lets exactly one win.
    others = 0 if store.url.startswith("s3://") else 6
    threads = [threading.Thread(target=put, args=(b"same",)) for _ in range(6)]
    threads += [threading.Thread(target=put, args=(f"other-{i}".encode(),)) for i in range(others)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    winner = store.get("race")
    assert winner is not None
    expected_ok = 6 if winner == b"same" else 1
    assert outcomes.count("ok") == expected_ok
    assert outcomes.count("conflict") == 6 + others - expected_ok


def test_url_reopens_the_same_store(store: Store) -> None:
    store.put("k", b"v")
    again = open_store(store.url)
    assert again.url == store.url
    assert again.get("k") == b"v"
    assert repr(store) == f"{type(store).__name__}({store.url!r})"


HOSTILE_KEYS = [
    "",
    "/",
    "/abs",
    "trailing/",
    "double//slash",
    ".",
    "..",
    "../escape",
    "runs/../../etc/passwd",
    "runs/..",
    "a..b",
    ".hidden",
    "runs/.tmp",
    "-rf",
    "%2e%2e",
    "%2e%2e/%2e%2e/x",
    "runs\\..\\x",
    "space here",
    "nul\x00byte",
    "new\nline",
    "tab\t",
    "caf\u00e9",
    "\uff41",  # fullwidth a
    "runs/\u2024\u2024",  # one dot leaders that look like ".."
    "runs/\u0430",  # Cyrillic a
    "x" * 129,
    "/".join(["y" * 100] * 6),
    "r" * 2000,
]


def test_hostile_keys_are_user_errors(store: Store) -> None:
    for key in HOSTILE_KEYS:
        with pytest.raises(UserError, match="invalid store key"):
            store.put(key, b"x")
        with pytest.raises(UserError, match="invalid store key"):
            store.get(key)
        with pytest.raises(UserError, match="invalid store key"):
            store.delete(["fine", key])
    assert store.list() == []


@pytest.mark.parametrize("key", [None, 12, b"bytes", ["a"]], ids=repr)
def test_non_str_keys_and_values_are_user_errors(store: Store, key: Any) -> None:
    with pytest.raises(UserError, match="must be a str"):
        store.put(key, b"x")
    with pytest.raises(UserError, match="must be bytes"):
        store.put("fine", "a str value")  # type: ignore[arg-type]
    with pytest.raises(UserError, match="must be a str"):
        store.list(key)


def test_hostile_list_prefixes_are_user_errors(store: Store) -> None:
    for prefix in ("../", "/", "a//", "..", "%2e"):
        with pytest.raises(UserError):
            store.list(prefix)


def test_validate_key_accepts_what_runs_need() -> None:
    for key in ("runs/run_01JD4Q5C7W/000001.ckpt", "t-1/runs/a.b_c-d/head", "_index", "0"):
        assert validate_key(key) == key
    assert validate_key("/".join(["a" * 128] * 3)) == "/".join(["a" * 128] * 3)


# --- open_store ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    ["http://example.com/x", "gs://bucket/x", "memory", "file:", "file://", "/tmp/dir", ""],
)
def test_unsupported_urls_list_the_schemes(url: str) -> None:
    with pytest.raises(UserError) as caught:
        open_store(url)
    for scheme in ("memory://", "file://", "s3://"):
        assert scheme in caught.value.message


def test_bad_s3_urls_are_user_errors_that_do_not_echo_credentials() -> None:
    for url in ("s3://AKIAX:topsecret@bucket/x", "https://user:topsecret@example.com/"):
        with pytest.raises(UserError) as caught:
            open_store(url)
        assert "topsecret" not in str(caught.value)
    for url in ("s3://", "s3://Bad_Bucket/x", "s3://ab", "s3://bucket/../x", "s3://b..b/x"):
        with pytest.raises(UserError):
            open_store(url)
    with pytest.raises(UserError):
        open_store("s3://bucket/x?versionId=1")
    with pytest.raises(UserError):
        open_store(b"memory://")  # type: ignore[arg-type]


def test_s3_urls_normalise() -> None:
    assert open_store("s3://my-bucket").url == "s3://my-bucket"
    assert open_store("s3://my-bucket/").url == "s3://my-bucket"
    assert open_store("s3://my-bucket/a/b/").url == "s3://my-bucket/a/b"


def test_missing_boto3_is_a_clear_user_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "boto3", None)
    with pytest.raises(UserError, match=r"pip install 'raygents\[s3\]'"):
        open_store("s3://my-bucket/prefix")


def test_default_store_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert default_store_url() == f"file://{tmp_path}/.raygents"
    assert open_store(default_store_url()).url == f"file://{tmp_path}/.raygents"


# --- memory -------------------------------------------------------------------------------


def test_memory_stores_share_by_name_only() -> None:
    name = f"shared-{uuid.uuid4().hex}"
    open_store(f"memory://{name}").put("k", b"v")
    assert open_store(f"memory://{name}").get("k") == b"v"
    assert MemoryStore(name).get("k") == b"v"
    assert open_store(f"memory://{name}-other").get("k") is None
    with pytest.raises(UserError):
        open_store("memory://../x")


# --- file ---------------------------------------------------------------------------------


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_file_store_resolves_relative_dirs_at_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = open_store("file://rel/dir")
    assert store.url == f"file://{tmp_path}/rel/dir"
    monkeypatch.chdir("/")
    store.put("runs/r/1", b"x")
    assert (tmp_path / "rel/dir/runs/r/1").read_bytes() == b"x"
    assert open_store(f"file://{tmp_path}/rel/dir").get("runs/r/1") == b"x"


def test_file_store_leaves_no_temporary_files(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    for i in range(20):
        store.put(f"runs/r/{i:06d}", b"x" * i)
        store.put(f"runs/r/{i:06d}", b"x" * i)
        with pytest.raises(CheckpointError):
            store.put(f"runs/r/{i:06d}", b"y")
    assert files_under(tmp_path) == [f"runs/r/{i:06d}" for i in range(20)]
    assert not [p for p in tmp_path.rglob(".*")]


def test_file_store_without_hard_links(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_links(source: Any, target: Any, **where: Any) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    store = FileStore(tmp_path)
    store.put("runs/r/1", b"one")
    store.put("runs/r/1", b"one")
    with pytest.raises(CheckpointError, match="already exists"):
        store.put("runs/r/1", b"two")
    assert store.get("runs/r/1") == b"one"
    assert files_under(tmp_path) == ["runs/r/1"]


@pytest.mark.skipif(not hasattr(os, "O_TMPFILE"), reason="no unnamed files on this platform")
def test_file_store_writes_unnamed_files_where_it_can(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Linux: a put links an unnamed file (no temporary name to create and remove); where the
    filesystem refuses unnamed files it falls back to a named temporary file, for good."""
    store = FileStore(tmp_path / "a")
    store.put("runs/r/1", b"one")
    assert store._unnamed, "this filesystem takes unnamed files"
    store.put("runs/r/1", b"one")
    with pytest.raises(CheckpointError, match="already exists"):
        store.put("runs/r/1", b"two")
    assert store.get("runs/r/1") == b"one" and files_under(tmp_path / "a") == ["runs/r/1"]

    real_open, unnamed = os.open, []

    def no_unnamed(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & os.O_TMPFILE == os.O_TMPFILE:
            unnamed.append(path)
            raise OSError(errno.EOPNOTSUPP, "Operation not supported")
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", no_unnamed)
    other = FileStore(tmp_path / "b")
    for i in range(3):
        other.put(f"runs/r/{i}", b"x" * i)
    assert len(unnamed) == 1 and not other._unnamed  # asked once
    with pytest.raises(CheckpointError, match="already exists"):
        other.put("runs/r/1", b"y")
    assert files_under(tmp_path / "b") == [f"runs/r/{i}" for i in range(3)]
    assert not [p for p in tmp_path.rglob(".*")]


def test_file_store_ignores_stray_files_and_removes_empty_dirs(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.put("runs/r/1", b"x")
    (tmp_path / "runs" / "r" / ".1.abc.tmp").write_bytes(b"half")
    (tmp_path / "runs" / "notes about r").write_bytes(b"")
    assert store.list() == ["runs/r/1"]
    store.delete(["runs/r/1"])
    (tmp_path / "runs" / "r" / ".1.abc.tmp").unlink()
    store.delete(["runs/r/1"])
    assert not (tmp_path / "runs" / "r").exists()
    assert tmp_path.is_dir()


def test_file_store_makes_a_directory_ahead_of_its_first_put(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.make_dir("runs/r/")
    assert (tmp_path / "runs" / "r").is_dir() and store.list() == []
    store.make_dir("runs/r/")  # (already there)
    store.put("runs/r/1", b"x")
    store.remove_empty_dir("runs/r/")  # not empty: stays
    assert store.get("runs/r/1") == b"x"
    store.delete(["runs/r/1"])
    assert not (tmp_path / "runs").exists()
    store.make_dir("runs/q/")
    store.make_dir("runs/s/")
    store.remove_empty_dir("runs/q/")  # the keys never came: it goes, runs/ stays for s
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["s"]
    store.remove_empty_dir("runs/s/")
    store.remove_empty_dir("runs/s/")  # (already gone)
    assert list(tmp_path.iterdir()) == [] and tmp_path.is_dir()
    with pytest.raises(ValueError):
        store.make_dir("runs/r")
    with pytest.raises(UserError):
        store.make_dir("../r/")


def test_file_store_puts_survive_deletes_removing_their_directories(tmp_path: Path) -> None:
    """Deleting a run's last records removes ``runs/`` itself when it is left empty; a put of
    another run's first record at that moment must still land."""
    import threading

    store = FileStore(tmp_path / "s")
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            for i in range(150):
                key = f"runs/w{w}-{i}/0000000001.ckpt"
                store.put(key, b"x")
                store.delete([key])  # often the only run there: runs/ goes too
        except BaseException as exc:  # collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert store.list("runs/") == []


def test_a_delete_during_a_puts_directory_fsyncs_cannot_remove_what_it_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A put that makes ``runs/`` and the run's directory fsyncs their parents only once both
    exist: a concurrent delete that prunes empty directories finds ``runs/`` in use."""
    from raygents.stores import file as store_module

    store = FileStore(tmp_path / "s")
    runs = tmp_path / "s" / "runs"
    real_fsync_dir = store_module._fsync_dir

    def fsync_dir_while_a_delete_prunes(path: Path) -> None:
        with contextlib.suppress(OSError):  # (not empty, or not there)
            runs.rmdir()
        real_fsync_dir(path)

    monkeypatch.setattr(store_module, "_fsync_dir", fsync_dir_while_a_delete_prunes)
    store.put("runs/r1/0000000001.ckpt", b"x")
    assert store.get("runs/r1/0000000001.ckpt") == b"x"


def test_file_store_os_errors_are_checkpoint_errors(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "a-file"
    not_a_dir.write_bytes(b"")
    store = FileStore(not_a_dir)
    with pytest.raises(CheckpointError, match="cannot write checkpoint 'runs/r/1'"):
        store.put("runs/r/1", b"x")
    directory_store = FileStore(tmp_path)
    directory_store.put("runs/r/1", b"x")
    with pytest.raises(CheckpointError):
        directory_store.put("runs/r", b"a key where a directory is")
    with pytest.raises(CheckpointError):
        directory_store.put("runs/r/1/deeper", b"a directory where a file is")


# --- S3 -----------------------------------------------------------------------------------


def assert_no_secret(error: BaseException, secret: str) -> None:
    text = "".join(traceback.format_exception(error))
    assert secret not in text
    assert secret not in repr(error)
    assert secret not in str(error.__cause__)


def test_s3_keys_stay_under_the_prefix(s3: LocalS3) -> None:
    store = open_store(s3.url("tenant-a"))
    sibling = open_store(s3.url("tenant-ab"))
    store.put("runs/r/1", b"a")
    sibling.put("runs/r/1", b"ab")
    s3.client().put_object(Bucket=s3.bucket, Key="tenant-a/not a valid key", Body=b"?")
    for key in HOSTILE_KEYS:
        with pytest.raises(UserError):
            store.put(key, b"x")
    assert store.list() == ["runs/r/1"]
    assert sibling.list() == ["runs/r/1"]
    assert s3.keys() == ["tenant-a/not a valid key", "tenant-a/runs/r/1", "tenant-ab/runs/r/1"]


def test_s3_requests_name_the_process_that_sent_them(s3: LocalS3) -> None:
    store = open_store(s3.url("tenant-a"))
    store.put("runs/r/1", b"a")
    assert store.has("runs/r/1")
    assert s3.proxy is not None
    agents = {record.agent for record in s3.proxy.records}
    assert agents and all(f"raygents pid/{os.getpid()}" in agent for agent in agents)


def test_s3_missing_bucket(s3: LocalS3) -> None:
    store = S3Store("raygents-no-such-bucket", "tenant-a", backoff_s=0.01)
    with pytest.raises(CheckpointError) as caught:
        store.put("runs/r/1", b"x")
    message = caught.value.message
    assert "'raygents-no-such-bucket' does not exist" in message
    assert s3.endpoint_url in message
    assert s3.proxy is not None and s3.proxy.count() == 1  # not retried
    assert_no_secret(caught.value, s3.env["AWS_SECRET_ACCESS_KEY"])


@pytest.mark.parametrize("operation", ["put", "get", "list", "delete"])
def test_s3_access_denied_is_not_retried_and_leaks_no_secret(s3: LocalS3, operation: str) -> None:
    assert s3.proxy is not None
    secret = os.environ["AWS_SECRET_ACCESS_KEY"]
    assert secret.startswith("canary-")
    store = fast_s3(s3, max_attempts=3)
    s3.proxy.always(Fault.access_denied())
    with pytest.raises(CheckpointError) as caught:
        if operation == "put":
            store.put("runs/r/1", b"x")
        elif operation == "get":
            store.get("runs/r/1")
        elif operation == "list":
            store.list("runs/")
        else:
            store.delete(["runs/r/1"])
    message = caught.value.message
    assert "access denied" in message
    assert repr(s3.bucket) in message
    assert "'tenant-a'" in message
    assert s3.proxy.count() == 1
    assert_no_secret(caught.value, secret)
    assert os.environ["AWS_ACCESS_KEY_ID"] not in message


@pytest.mark.parametrize("fault", [Fault.unavailable(), Fault.internal_error()], ids=str)
def test_s3_5xx_twice_then_success_inside_botocore(s3: LocalS3, fault: Fault) -> None:
    assert s3.proxy is not None
    store = open_store(s3.url("tenant-a"))  # default settings: botocore retries first
    s3.proxy.inject(fault, fault, method="PUT")
    store.put("runs/r/1", b"payload")
    assert s3.proxy.count("PUT") == 3
    assert s3.proxy.count("PUT", fault="error") == 2
    assert store.get("runs/r/1") == b"payload"


def test_s3_slow_down_twice_then_success_in_the_extra_retry_layer(s3: LocalS3) -> None:
    assert s3.proxy is not None
    store = fast_s3(s3, max_attempts=1, extra_retries=2)
    s3.proxy.inject(Fault.slow_down(), Fault.slow_down(), method="PUT")
    store.put("runs/r/1", b"payload")
    assert s3.proxy.count("PUT") == 3
    assert s3.client().get_object(Bucket=s3.bucket, Key="tenant-a/runs/r/1")["Body"].read() == (
        b"payload"
    )


def test_s3_retries_are_bounded(s3: LocalS3) -> None:
    assert s3.proxy is not None
    store = fast_s3(s3, max_attempts=2, extra_retries=1)
    s3.proxy.always(Fault.unavailable())
    with pytest.raises(CheckpointError, match=r"ServiceUnavailable \(HTTP 503\) after 4 attempts"):
        store.get("runs/r/1")
    assert s3.proxy.count("GET") == 4
    with pytest.raises(CheckpointError) as caught:
        store.put("runs/r/1", b"x")
    assert_no_secret(caught.value, s3.env["AWS_SECRET_ACCESS_KEY"])


def test_s3_connection_reset_is_retried(s3: LocalS3) -> None:
    assert s3.proxy is not None
    store = fast_s3(s3)
    s3.proxy.inject(Fault.reset(), method="PUT")
    s3.proxy.inject(Fault.reset(), method="GET")
    store.put("runs/r/1", b"payload")
    assert store.get("runs/r/1") == b"payload"
    assert s3.proxy.count(fault="reset") == 2


def test_s3_lost_reply_after_apply_is_idempotent(s3: LocalS3) -> None:
    assert s3.proxy is not None
    store = fast_s3(s3)
    s3.proxy.inject(Fault.drop_after_apply(), method="PUT")
    store.put("runs/r/1", b"payload")  # applied, reply lost, retry gets 412, bytes match
    assert [(r.method, r.status) for r in s3.proxy.records] == [
        ("PUT", None),
        ("PUT", 412),
        ("GET", 200),
    ]
    with pytest.raises(CheckpointError, match="already exists"):
        store.put("runs/r/1", b"different")


def test_s3_truncated_body_is_retried(s3: LocalS3) -> None:
    assert s3.proxy is not None
    store = fast_s3(s3)
    data = os.urandom(64 * 1024)
    store.put("runs/r/1", data)
    s3.proxy.inject(Fault.truncate(), method="GET")
    assert store.get("runs/r/1") == data
    assert s3.proxy.count("GET") == 2


def test_s3_slow_reply_times_out_and_is_retried(s3: LocalS3) -> None:
    assert s3.proxy is not None
    store = fast_s3(s3, read_timeout_s=0.3)
    store.put("runs/r/1", b"payload")
    s3.proxy.inject(Fault.delay(3.0), method="GET")
    started = time.monotonic()
    assert store.get("runs/r/1") == b"payload"
    assert time.monotonic() - started < 2.5  # the retry answered, not the slow reply


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_s3_closed_port_fails_fast_naming_the_endpoint() -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"
    with aws_env(endpoint, secret_key="canary-closed-port"):
        store = S3Store("some-bucket", "tenant-a", max_attempts=2, backoff_s=0.01)
        started = time.monotonic()
        with pytest.raises(CheckpointError) as caught:
            store.put("runs/r/1", b"x")
    assert time.monotonic() - started < 10  # bounded retries, no hang
    assert endpoint in caught.value.message
    assert "unreachable" in caught.value.message
    assert caught.value.key == "runs/r/1"
    assert_no_secret(caught.value, "canary-closed-port")


def test_s3_outage_and_recovery() -> None:
    with MotoServer() as server, local_s3(server) as s3:
        store = fast_s3(s3, max_attempts=2, extra_retries=1, connect_timeout_s=1.0)
        store.put("runs/r/1", b"before")
        server.stop()
        started = time.monotonic()
        with pytest.raises(CheckpointError, match="unreachable") as caught:
            store.get("runs/r/1")
        assert server.endpoint_url in caught.value.message
        with pytest.raises(CheckpointError, match="unreachable"):
            store.put("runs/r/2", b"during")
        assert time.monotonic() - started < 10  # bounded retries, no hang
        server.start()
        assert store.get("runs/r/1") == b"before"
        store.put("runs/r/2", b"after")
        assert store.list() == ["runs/r/1", "runs/r/2"]


def test_s3_without_credentials(s3: LocalS3, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(CheckpointError, match="no usable AWS credentials"):
        fast_s3(s3).get("runs/r/1")


def test_s3_max_attempts_from_the_environment(s3: LocalS3, monkeypatch: pytest.MonkeyPatch) -> None:
    assert s3.proxy is not None
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "3")
    store = S3Store(s3.bucket, "tenant-a", extra_retries=0)
    s3.proxy.always(Fault.unavailable(), method="GET")
    with pytest.raises(CheckpointError, match="after 3 attempts"):
        store.get("runs/r/1")
    assert s3.proxy.count("GET") == 3
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "lots")
    with pytest.raises(UserError, match="AWS_MAX_ATTEMPTS"):
        S3Store(s3.bucket)


def test_s3_delete_many(s3: LocalS3) -> None:
    store = open_store(s3.url("tenant-a"))
    keys = [f"runs/r/{i:06d}" for i in range(1100)]
    for key in keys[:30]:
        store.put(key, b"x")
    store.delete(keys)  # more than one DeleteObjects batch
    assert store.list() == []


def test_fault_proxy_random_schedule_is_seeded(s3: LocalS3) -> None:
    assert s3.proxy is not None
    store = fast_s3(s3, extra_retries=5)

    def run(seed: int) -> list[str]:
        s3.proxy.records.clear()  # type: ignore[union-attr]
        s3.proxy.random_faults(0.3, (Fault.unavailable(),), seed=seed)  # type: ignore[union-attr]
        for i in range(8):
            store.put(f"runs/{seed}/{i}", b"x")
        return [r.fault for r in s3.proxy.records]  # type: ignore[union-attr]

    first = run(1)
    assert "error" in first
    s3.proxy.clear()
    store.delete(store.list())
    assert run(1) == first


def test_a_mark_is_an_empty_key_made_once(store: Store) -> None:
    store.mark("runs/r1/fence.2")
    store.mark("runs/r1/fence.2")
    assert store.get("runs/r1/fence.2") == b""
    assert store.list("runs/r1/") == ["runs/r1/fence.2"]


def test_file_store_put_if_dir_writes_only_beside_existing_keys(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    assert not store.put_if_dir("runs/r1/0000000002.ckpt", b"late"), "no directory: no write"
    assert store.list() == []
    store.put("runs/r1/0000000001.ckpt", b"one")
    assert store.put_if_dir("runs/r1/0000000002.ckpt", b"two")
    assert store.put_if_dir("runs/r1/0000000002.ckpt", b"two"), "the same bytes again: success"
    with pytest.raises(CheckpointError, match="different content"):
        store.put_if_dir("runs/r1/0000000002.ckpt", b"other")
    store.delete(store.list())
    assert not store.put_if_dir("runs/r1/0000000003.ckpt", b"after the run's records went")
    assert not (tmp_path / "runs").exists()

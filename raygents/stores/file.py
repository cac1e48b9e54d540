"""The file store: one file per key under a directory, reached without following any link.

Whoever can write the store directory can plant anything in it, so no operation trusts a
path. Every key is reached from a directory descriptor one segment at a time, each opened
with ``O_NOFOLLOW`` and read, written or unlinked relative to its parent descriptor. The
store root is resolved once, when the store is opened, and from then on is walked the same
way from ``/``: a root later swapped for a link is refused, not followed. A link found where a
record or directory should be makes a read or write of that key fail with a
:class:`~raygents.errors.CheckpointError`; listing and deleting skip it with a warning, so a
delete removes a planted link at most, never what it points to.
"""

from __future__ import annotations

import builtins
import errno
import logging
import os
import secrets
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

from raygents.errors import CheckpointCorrupt, CheckpointError
from raygents.stores.base import Store, is_key, too_large, validate_key

__all__ = ["FileStore"]

log = logging.getLogger(__name__)

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
"""How a directory of the store is opened: readable (to list and fsync it), never a link."""
_PASS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
"""How a directory above the store root is opened: only to pass through (``O_PATH`` needs no
read permission, as walking a path does not)."""
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC
"""How a record is opened: never a link, and never waiting (a FIFO planted there)."""
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC
_NO_HARD_LINKS = frozenset({errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK})
_NO_UNNAMED = frozenset({errno.EOPNOTSUPP, errno.ENOTSUP, errno.EISDIR, errno.EINVAL})
"""What ``open(dir, O_TMPFILE)`` fails with where the kernel or filesystem lacks unnamed files."""
_DIR_ATTEMPTS = 20  # a put racing deletes that remove the directories it needs tries again
_CHUNK = 1024 * 1024
_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


class _LinkFound(OSError):
    """A symbolic link inside the store, where a record or a directory should be."""

    def __init__(self, where: str) -> None:
        super().__init__(
            errno.ELOOP,
            f"{where!r} is a symbolic link; the file store never follows links: remove it",
        )


class _RootMoved(OSError):
    """A link on the path of the store root, which had none when the store was opened."""


class _NotAFile(OSError):
    """Something other than a regular file (a FIFO, a device) where a record should be."""

    def __init__(self, where: str, mode: int) -> None:
        kind = _KINDS.get(stat.S_IFMT(mode), "not a file")
        super().__init__(
            errno.EINVAL, f"{where!r} is not a regular file ({kind}); records are: remove it"
        )


class FileStore(Store):
    """Files under a directory, one per key, written atomically and create-only.

    A put writes an unnamed file in the key's directory (``O_TMPFILE``), fsyncs it, and links
    it to the key's name, which fails if the name exists; readers never see partial files.
    Where unnamed files are not supported it writes a hidden temporary file instead, links it
    the same way and removes the temporary name; on filesystems without hard links it claims
    the name with ``O_EXCL`` and then renames the temporary file over it, so a reader may
    briefly see an empty file there. No operation follows a symbolic link (see the module).
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self._root = Path(os.path.abspath(os.path.expanduser(os.fspath(root))))
        self._real = Path(os.path.realpath(self._root))
        """Where the root resolved when the store was opened; it is walked without links."""
        self._unnamed = hasattr(os, "O_TMPFILE") and os.path.isdir("/proc/self/fd")
        """Whether puts write unnamed files (until the filesystem turns out not to allow it)."""

    @property
    def url(self) -> str:
        return f"file://{self._root}"

    @property
    def root(self) -> Path:
        """The directory that holds the files."""
        return self._root

    def has(self, key: str) -> bool:
        """Whether ``key`` exists (reads nothing).

        Raises:
            CheckpointError: a symbolic link is where the key or one of its directories
                should be.
        """
        *dirs, name = validate_key(key).split("/")
        with self._os_errors("read", key):
            try:
                with self._walk(dirs) as chain:
                    mode = os.stat(name, dir_fd=chain[-1], follow_symlinks=False).st_mode
            except (FileNotFoundError, NotADirectoryError):
                return False
            if stat.S_ISLNK(mode):
                raise _LinkFound(key)
            return stat.S_ISREG(mode)

    def make_dir(self, prefix: str) -> None:
        """Create (durably) the directory that the keys under ``prefix`` go into, as the first
        put there would; a put there then only writes its file."""
        with self._os_errors("write", prefix), self._walk(self._dirs_of(prefix), create=True):
            pass

    def remove_empty_dir(self, prefix: str) -> None:
        """Remove the directory of ``prefix`` if it is empty (one :meth:`make_dir` made for
        keys that never came), and the directories above it left empty, as deletes do."""
        dirs = self._dirs_of(prefix)
        with (
            self._os_errors("delete", prefix),
            self._skipping_links(prefix),
            suppress(FileNotFoundError, NotADirectoryError),
            self._walk(dirs) as chain,
        ):
            self._prune(chain, dirs)

    def put_if_dir(self, key: str, data: bytes) -> bool:
        """:meth:`put`, but only into a directory that exists; False (nothing written) if the
        key's directory is gone, e.g. a run's records were deleted when it completed."""
        validate_key(key)
        try:
            self._put(key, bytes(data), parents=False)
        except CheckpointError as exc:
            if isinstance(exc.__cause__, FileNotFoundError):
                return False
            raise
        return True

    def mark(self, key: str) -> None:
        *dirs, name = validate_key(key).split("/")
        with (
            self._os_errors("write", key),
            self._walk(dirs, create=True) as chain,
            suppress(FileExistsError),  # (O_EXCL: an existing link is not followed)
        ):
            os.close(os.open(name, _NEW, 0o600, dir_fd=chain[-1]))

    def _put(self, key: str, data: bytes, parents: bool = True) -> None:
        *dirs, name = key.split("/")
        with self._os_errors("write", key):
            for attempt in range(_DIR_ATTEMPTS):
                try:
                    with self._walk(dirs, create=parents) as chain:
                        written = self._write(chain[-1], name, data)
                    break
                except FileNotFoundError:  # a concurrent delete removed the empty directory
                    if not parents or attempt == _DIR_ATTEMPTS - 1:
                        raise
        if not written and not self._holds(key, data):
            raise self._conflict(key)

    def _write(self, directory: int, name: str, data: bytes) -> bool:
        """Give ``data`` the name ``name`` in ``directory``: True if written, False if the
        name exists."""
        if self._unnamed:
            published = self._link_unnamed(directory, name, data)
            if published is not None:
                return published
        temp = self._write_temp(directory, name, data)
        try:
            if not _publish(directory, temp, name):
                return False
            _fsync_dir(directory)
        finally:
            with suppress(FileNotFoundError):
                os.unlink(temp, dir_fd=directory)
        return True

    def _link_unnamed(self, directory: int, name: str, data: bytes) -> bool | None:
        """Write an unnamed file and link it as ``name``: True if written, False if the name
        exists, None if this filesystem does not allow it (``self._unnamed`` is then off)."""
        try:
            fd = os.open(".", os.O_TMPFILE | os.O_WRONLY | _CLOEXEC, 0o600, dir_fd=directory)
        except OSError as exc:
            if exc.errno not in _NO_UNNAMED:
                raise
            self._unnamed = False
            return None
        try:
            _write_all(fd, data)
            os.fsync(fd)
            try:  # (a directory fd makes it linkat, which follows the /proc link)
                os.link(f"/proc/self/fd/{fd}", name, dst_dir_fd=directory)
            except FileExistsError:
                return False
            except OSError as exc:
                if exc.errno not in _NO_HARD_LINKS:
                    raise
                self._unnamed = False
                return None
        finally:
            os.close(fd)
        _fsync_dir(directory)
        return True

    @staticmethod
    def _write_temp(directory: int, name: str, data: bytes) -> str:
        """Write ``data`` to a fsynced hidden file in ``directory``; return its name."""
        temp = f".{name}.{secrets.token_hex(8)}.tmp"
        fd = os.open(temp, _NEW, 0o600, dir_fd=directory)
        try:
            _write_all(fd, data)
            os.fsync(fd)
        except BaseException:
            os.unlink(temp, dir_fd=directory)
            raise
        finally:
            os.close(fd)
        return temp

    def _holds(self, key: str, data: bytes) -> bool:
        """Whether ``key`` holds exactly ``data`` (reading no more than that)."""
        try:
            return self._get(key, len(data)) == data
        except CheckpointCorrupt as exc:
            if getattr(exc, "reason", None) == "too large":
                return False
            raise

    def _get(self, key: str, max_bytes: int) -> bytes | None:
        *dirs, name = key.split("/")
        with self._os_errors("read", key):
            try:
                with self._walk(dirs) as chain:
                    return self._read(chain[-1], name, key, max_bytes)
            except (FileNotFoundError, NotADirectoryError):
                return None

    def _read(self, directory: int, name: str, key: str, max_bytes: int) -> bytes | None:
        """Read the record ``name`` in ``directory``: a regular file of at most ``max_bytes``,
        of which at most ``max_bytes`` + 1 bytes are read."""
        mode = os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode
        if stat.S_ISDIR(mode):
            return None
        _check_file(key, mode)  # before opening: opening a device may do something
        try:
            fd = os.open(name, _FILE, dir_fd=directory)
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # swapped for a link since the stat
                raise _LinkFound(key) from exc
            raise
        try:
            info = os.fstat(fd)
            _check_file(key, info.st_mode)
            if info.st_size > max_bytes:
                raise too_large(self.url, key, info.st_size, max_bytes)
            data = _read_at_most(fd, max_bytes + 1)
        finally:
            os.close(fd)
        if len(data) > max_bytes:  # it grew since the fstat
            raise too_large(self.url, key, None, max_bytes)
        return data

    def _list(self, prefix: str) -> Iterator[str]:
        base = prefix if prefix.endswith("/") else prefix.rpartition("/")[0]
        dirs = [segment for segment in base.split("/") if segment]
        with self._os_errors("list", prefix or None), self._skipping_links(prefix):
            try:
                with self._walk(dirs) as chain:
                    yield from self._scan(chain[-1], "".join(f"{d}/" for d in dirs), prefix)
            except (FileNotFoundError, NotADirectoryError):
                return

    def _scan(self, directory: int, relative: str, prefix: str) -> Iterator[str]:
        """The keys in ``directory`` (at ``relative``) and below that start with ``prefix``;
        links and anything else that is not a file or directory are skipped."""
        with os.scandir(directory) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                key = relative + entry.name
                if entry.is_symlink():
                    if key.startswith(prefix) or prefix.startswith(f"{key}/"):
                        self._skip(key, "it is a symbolic link, which the file store never follows")
                elif entry.is_dir(follow_symlinks=False):
                    wanted = key.startswith(prefix) or prefix.startswith(f"{key}/")
                    if wanted and not entry.name.startswith("."):
                        yield from self._scan_below(directory, entry.name, f"{key}/", prefix)
                elif not key.startswith(prefix) or not is_key(key):
                    continue  # (temporary and stray files)
                elif entry.is_file(follow_symlinks=False):
                    yield key
                else:
                    self._skip(key, "it is not a regular file")

    def _scan_below(self, directory: int, name: str, relative: str, prefix: str) -> Iterator[str]:
        try:
            below = os.open(name, _DIR, dir_fd=directory)
        except (FileNotFoundError, NotADirectoryError):  # gone, or swapped for a link, since
            return
        try:
            yield from self._scan(below, relative, prefix)
        finally:
            os.close(below)

    def _delete(self, keys: builtins.list[str]) -> None:
        """Delete ``keys``, one walk to each directory they are in (a run's records share
        one), then that directory and its parents while they are empty."""
        with self._os_errors("delete", keys[0] if len(keys) == 1 else None):
            for dirs, names in _by_directory(keys).items():
                where = "".join(f"{d}/" for d in dirs)
                with (
                    self._skipping_links(where + names[0] if len(names) == 1 else where),
                    suppress(FileNotFoundError, NotADirectoryError),
                    self._walk(dirs) as chain,
                ):
                    for name in names:
                        with suppress(FileNotFoundError):
                            os.unlink(name, dir_fd=chain[-1])  # (a link: the link itself)
                    self._prune(chain, dirs)

    @staticmethod
    def _prune(chain: Sequence[int], dirs: Sequence[str]) -> None:
        """Remove the directories ``dirs`` (``chain`` holds the root's and their descriptors),
        deepest first, while they are empty."""
        for depth in reversed(range(len(dirs))):
            try:
                os.rmdir(dirs[depth], dir_fd=chain[depth])
            except OSError:  # not empty, or gone
                break

    def _dirs_of(self, prefix: str) -> builtins.list[str]:
        if not prefix.endswith("/"):
            raise ValueError(f"a directory prefix ends with '/', got {prefix!r}")
        return validate_key(prefix[:-1]).split("/")

    @contextmanager
    def _walk(self, dirs: Sequence[str], *, create: bool = False) -> Iterator[list[int]]:
        """Open the store root, then each of ``dirs`` below it, never through a link; yield
        their descriptors, the root's first, and close them after.

        With ``create``, missing directories are made (all of them first, then their parents
        fsynced: a directory left empty for the length of an fsync is one a concurrent delete
        may remove); a walk that loses such a race starts again.

        Raises:
            FileNotFoundError: a directory is missing (and not ``create``).
            NotADirectoryError: a file is where a directory should be.
            _LinkFound: a link is where one of ``dirs`` should be.
            _RootMoved: the path of the store root now holds a link.
        """
        for attempt in range(_DIR_ATTEMPTS):
            fds: list[int] = []
            try:
                made = self._open_chain(fds, dirs, create)
                for parent in made:
                    _fsync_dir(parent)
                break
            except FileNotFoundError:  # a delete just removed a parent it left empty
                _close_all(fds)
                if not create or attempt == _DIR_ATTEMPTS - 1:
                    raise
            except BaseException:
                _close_all(fds)
                raise
        try:
            yield fds[len(self._real.parts) - 1 :]
        finally:
            _close_all(fds)

    def _open_chain(self, fds: list[int], dirs: Sequence[str], create: bool) -> list[int]:
        """Append the descriptors of ``/``, the root's path and ``dirs`` to ``fds``; return
        those of the directories that ``create`` made a directory in."""
        made: list[int] = []
        above = self._real.parts[1:]
        fds.append(os.open("/", _PASS if above else _DIR))
        for depth, name in enumerate(above):
            flags = _DIR if depth == len(above) - 1 else _PASS
            try:
                fds.append(_open_dir(fds[-1], name, flags, create, made))
            except _LinkFound:
                where = Path("/", *above[: depth + 1])
                raise _RootMoved(
                    errno.ELOOP,
                    f"the store root {str(self._root)!r} now passes through a symbolic link at "
                    f"{str(where)!r} (it resolved to {str(self._real)!r} when the store was "
                    "opened); the file store never follows links",
                ) from None
        for depth, name in enumerate(dirs):
            try:
                fds.append(_open_dir(fds[-1], name, _DIR, create, made))
            except _LinkFound:
                raise _LinkFound("/".join(dirs[: depth + 1])) from None
        return made

    @contextmanager
    def _skipping_links(self, key: str) -> Iterator[None]:
        """Skip, with a warning, what a link inside the store keeps from being reached."""
        try:
            yield
        except _LinkFound as exc:
            self._skip(key, exc.strerror or str(exc))

    def _skip(self, key: str, why: str) -> None:
        log.warning("skipping %r in %s: %s", key, self.url, why)

    @contextmanager
    def _os_errors(self, action: str, key: str | None) -> Iterator[None]:
        try:
            yield
        except OSError as exc:
            what = f"checkpoint {key!r}" if key else "checkpoints"
            raise CheckpointError(
                f"cannot {action} {what} in {self.url}: {exc.strerror or exc}", key=key
            ) from exc


def _by_directory(keys: Sequence[str]) -> dict[tuple[str, ...], list[str]]:
    """The names of ``keys`` by the directories they are in, in the keys' order."""
    found: dict[tuple[str, ...], list[str]] = {}
    for key in keys:
        *dirs, name = key.split("/")
        found.setdefault(tuple(dirs), []).append(name)
    return found


def _open_dir(parent: int, name: str, flags: int, create: bool, made: list[int]) -> int:
    """Open the directory ``name`` in ``parent`` without following a link; with ``create``,
    make it first if it is missing (``parent`` is then added to ``made``)."""
    try:
        return _open_no_link(parent, name, flags)
    except FileNotFoundError:
        if not create:
            raise
    with suppress(FileExistsError):
        os.mkdir(name, dir_fd=parent)
        made.append(parent)
    return _open_no_link(parent, name, flags)


def _open_no_link(parent: int, name: str, flags: int) -> int:
    try:
        return os.open(name, flags, dir_fd=parent)
    except OSError as exc:  # (a link opened with O_DIRECTORY | O_NOFOLLOW: ENOTDIR)
        if exc.errno in (errno.ENOTDIR, errno.ELOOP) and _is_link(parent, name):
            raise _LinkFound(name) from exc
        raise


def _is_link(parent: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _check_file(key: str, mode: int) -> None:
    if stat.S_ISLNK(mode):
        raise _LinkFound(key)
    if not stat.S_ISREG(mode):
        raise _NotAFile(key, mode)


def _publish(directory: int, temp: str, name: str) -> bool:
    """Give ``temp``'s content the name ``name``; False if the name already exists."""
    try:
        os.link(temp, name, src_dir_fd=directory, dst_dir_fd=directory, follow_symlinks=False)
        return True
    except FileExistsError:
        return False
    except OSError as exc:
        if exc.errno not in _NO_HARD_LINKS:
            raise
    try:
        os.close(os.open(name, _NEW, 0o600, dir_fd=directory))
    except FileExistsError:
        return False
    os.replace(temp, name, src_dir_fd=directory, dst_dir_fd=directory)
    return True


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_at_most(fd: int, limit: int) -> bytes:
    """Read until the end of the file or ``limit`` bytes, whichever comes first."""
    chunks, left = [], limit
    while left > 0:
        chunk = os.read(fd, min(left, _CHUNK))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _fsync_dir(directory: int) -> None:
    """fsync a directory (reopened readable: ``directory`` may be an ``O_PATH`` descriptor)."""
    fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC, dir_fd=directory)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _close_all(fds: builtins.list[int]) -> None:
    while fds:
        os.close(fds.pop())

"""Opening a store by its URL: ``memory://``, ``file://`` or ``s3://``.

The stores live in :mod:`~raygents.stores.memory`, :mod:`~raygents.stores.file` and
:mod:`~raygents.stores.s3`, their interface and key rules in :mod:`raygents.stores.base`; this
module names them all, so that one import gives a store and the function that opens one.
"""

from __future__ import annotations

import os

from raygents.errors import UserError
from raygents.stores.base import Store, short
from raygents.stores.file import FileStore
from raygents.stores.memory import MemoryStore
from raygents.stores.s3 import S3Store

__all__ = ["default_store_url", "open_store"]

_SCHEMES = "memory://[name], file://<dir>, s3://<bucket>[/<prefix>]"


def open_store(url: str) -> Store:
    """Open the checkpoint store that ``url`` names.

    Args:
        url: ``memory://`` or ``memory://<name>`` (a dict in this process);
            ``file://<dir>`` (a relative ``dir`` is resolved against the current directory,
            e.g. ``file://.raygents`` or ``file:///var/lib/raygents``);
            ``s3://<bucket>`` or ``s3://<bucket>/<prefix>``.

    Raises:
        UserError: the URL is malformed or its scheme is not supported.
    """
    if type(url) is not str:
        raise UserError(f"a store URL must be a str, not {type(url).__name__}")
    scheme, sep, rest = url.partition("://")
    if scheme == "memory" and sep:
        return MemoryStore(rest)
    if scheme == "file" and sep and rest:
        return FileStore(rest)
    if scheme == "s3" and sep:
        bucket, _, prefix = rest.partition("/")
        if "@" in bucket or "?" in rest or "#" in rest:
            raise UserError("an s3:// store URL takes no credentials, query or fragment")
        return S3Store(bucket, prefix)
    shown = short(url) if "@" not in url else f"{scheme}://..."
    raise UserError(f"unsupported store URL {shown}: use one of {_SCHEMES}")


def default_store_url() -> str:
    """Return ``file://`` and the absolute path of ``./.raygents`` in the current directory."""
    return f"file://{os.path.abspath('.raygents')}"

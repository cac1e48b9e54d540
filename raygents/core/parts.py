"""Content parts: the text, images and files a message carries, checked as they are built.

A part's bytes may be inline (``data``) or kept in the run's store under their SHA-256
(``blob``, with ``size``): :mod:`raygents.records.blobs` moves a large part's bytes out of a
message into the store and back. Here, everything is pure: no store, no network, no files.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal, TypeAlias
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_serializer,
    field_validator,
    model_serializer,
    model_validator,
)

from raygents.errors import MAX_PAYLOAD_BYTES, PayloadTooLarge, UserError

__all__ = [
    "IMAGE_TYPES",
    "FilePart",
    "ImagePart",
    "Part",
    "TextPart",
    "blob_name",
    "chat_part",
    "data_url",
    "image_part",
    "join_text",
    "sniff_image_type",
    "to_parts",
]

IMAGE_TYPES: Mapping[str, tuple[bytes, ...]] = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),
}
"""The image media types an image part may have, with the bytes such an image starts with."""
_MEDIA_TYPE = re.compile(r"^[a-z0-9][a-z0-9!#$&^_.+-]{0,63}/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}$")
_FILE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,255}$")
_BLOB = re.compile(r"^sha256:[0-9a-f]{64}$")
_MAX_URL = 8192
Detail = Literal["auto", "low", "high"]


def blob_name(digest_hex: str) -> str:
    """The ``blob`` of a part whose bytes have this SHA-256 (hex)."""
    return f"sha256:{digest_hex}"


class _Part(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> Any:
        """Every dump names the part's kind, with ``exclude_defaults`` too (records use it)."""
        data = handler(self)
        return {"kind": getattr(self, "kind", None), **data} if isinstance(data, dict) else data


class TextPart(_Part):
    """Text in a message of several parts."""

    kind: Literal["text"] = "text"
    text: str

    def __init__(self, text: str, **data: Any) -> None:
        BaseModel.__init__(self, text=text, **data)


class _BytesPart(_Part):
    """What image and file parts share: bytes inline, or kept in the store by their hash."""

    data: bytes | None = None
    """The bytes, inline (JSON-mode dumps carry them as base64)."""
    media_type: str | None = None
    """The bytes' media type, e.g. ``"image/png"``."""
    blob: str | None = None
    """``"sha256:<hex>"``: the bytes are kept in the run's store, not in the message."""
    size: int | None = None
    """The size of the bytes, with ``blob``."""

    @field_validator("data", mode="before")
    @classmethod
    def _decode(cls, value: Any) -> Any:
        if isinstance(value, str):  # a JSON-mode dump (or a user) gives base64
            return decode_base64(value, f"{cls.__name__}.data")
        return value

    @field_serializer("data", when_used="json")
    def _encode(self, value: bytes | None) -> str | None:
        return None if value is None else base64.b64encode(value).decode("ascii")

    def _check_bytes(self) -> None:
        name = type(self).__name__
        if self.blob is not None:
            if not isinstance(self.blob, str) or not _BLOB.match(self.blob):
                raise UserError(
                    f"{name}.blob must be 'sha256:' and 64 hex digits, got {self.blob!r}"
                )
            if self.data is not None or type(self.size) is not int or self.size < 0:
                raise UserError(f"{name} with a blob takes its size and no data")
        if self.size is not None and self.blob is None:
            raise UserError(f"{name}.size is given only with a blob")
        size = len(self.data) if self.data is not None else self.size
        limit = MAX_PAYLOAD_BYTES["content part"]
        if size is not None and size > limit:
            raise PayloadTooLarge(kind="content part", size=size, limit=limit)

    def with_data(self, data: bytes) -> Any:
        """This part with its bytes inline (in place of its blob)."""
        return self.model_copy(update={"data": data, "blob": None, "size": None})

    def with_blob(self, blob: str) -> Any:
        """This part with its bytes kept in the store as ``blob``."""
        assert self.data is not None
        return self.model_copy(update={"data": None, "blob": blob, "size": len(self.data)})


class ImagePart(_BytesPart):
    """An image: by ``url`` (``http(s)://``, or a base64 ``data:`` URL, which becomes
    ``data``), or as ``data`` bytes with their ``media_type`` (PNG, JPEG, GIF or WebP).

    Raises:
        UserError: no image or more than one is given; the URL is not ``http(s)`` nor a
            base64 ``data:`` URL (``file://`` is refused: a run does not read the driver's
            disk); the base64 is bad; the media type is not an image type a model takes, or
            does not match the bytes.
        PayloadTooLarge: the image is over ``MAX_PAYLOAD_BYTES["content part"]``.
    """

    kind: Literal["image"] = "image"
    url: str | None = None
    """An ``http(s)`` URL the model's provider fetches."""
    detail: Detail | None = None
    """The detail the model sees the image in (OpenAI's ``low``, ``high`` or ``auto``)."""

    @model_validator(mode="before")
    @classmethod
    def _data_url(cls, value: Any) -> Any:
        url = value.get("url") if isinstance(value, dict) else None
        if isinstance(url, str) and url.startswith("data:"):
            media_type, data = parse_data_url(url, "ImagePart.url")
            given = value.get("media_type")
            value = {**value, "url": None, "data": data, "media_type": given or media_type}
        return value

    @model_validator(mode="after")
    def _check(self) -> ImagePart:
        given = [n for n in ("url", "data", "blob") if getattr(self, n) is not None]
        if len(given) != 1:
            raise UserError(f"ImagePart takes one of url, data (with media_type), got {given}")
        if self.url is not None:
            check_url(self.url, "ImagePart.url")
            if self.media_type is not None:
                check_image_type(self.media_type, None)
            return self
        self._check_bytes()
        check_image_type(self.media_type, self.data)
        return self


class FilePart(_BytesPart):
    """A file: ``data`` bytes with their ``media_type`` and ``filename``, or a ``file_id``
    the provider already holds (uploaded through its files API).

    Raises:
        UserError: neither or both are given; bytes without a media type or file name; a
            malformed media type, or a PDF whose bytes are not one; bad base64.
        PayloadTooLarge: the file is over ``MAX_PAYLOAD_BYTES["content part"]``.
    """

    kind: Literal["file"] = "file"
    file_id: str | None = None
    """The provider's id of an uploaded file."""
    filename: str | None = None
    """The file's name, as the model is told it."""

    @model_validator(mode="after")
    def _check(self) -> FilePart:
        given = [n for n in ("file_id", "data", "blob") if getattr(self, n) is not None]
        if len(given) != 1:
            raise UserError(f"FilePart takes one of file_id, data (with media_type), got {given}")
        if self.file_id is not None:
            if not _FILE_ID.match(self.file_id):
                raise UserError(f"FilePart.file_id is not a file id: {self.file_id[:80]!r}")
            return self
        self._check_bytes()
        if not self.filename or len(self.filename) > 255 or "/" in self.filename:
            raise UserError(f"FilePart with data needs a filename (no '/'), got {self.filename!r}")
        check_media_type(self.media_type, "FilePart.media_type")
        pdf = self.media_type == "application/pdf"
        if pdf and self.data is not None and not self.data.startswith(b"%PDF-"):
            raise UserError("FilePart says application/pdf, but its bytes are not a PDF")
        if self.media_type in IMAGE_TYPES:
            check_image_type(self.media_type, self.data)
        return self


Part: TypeAlias = Annotated[TextPart | ImagePart | FilePart, Field(discriminator="kind")]
"""One part of a message's content."""


def decode_base64(text: str, what: str) -> bytes:
    """Strict base64 (whitespace allowed, as in wrapped text).

    Raises:
        UserError: it is not base64.
        PayloadTooLarge: it holds more than ``MAX_PAYLOAD_BYTES["content part"]`` (refused
            before it is decoded).
    """
    limit = MAX_PAYLOAD_BYTES["content part"]
    if len(text) > limit // 3 * 4 + 8:
        raise PayloadTooLarge(kind="content part", size=len(text) // 4 * 3, limit=limit)
    try:
        return base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        raise UserError(f"{what} is not valid base64 ({len(text)} characters)") from None


def parse_data_url(url: str, what: str) -> tuple[str, bytes]:
    """The media type and bytes of a ``data:<type>;base64,<data>`` URL.

    Raises:
        UserError: it is not a base64 data URL.
    """
    head, sep, body = url.partition(",")
    if not sep or not head.endswith(";base64"):
        raise UserError(f"{what} is a data: URL that is not 'data:<media type>;base64,<data>'")
    media_type = head[len("data:") : -len(";base64")].lower()
    check_media_type(media_type, what)
    return media_type, decode_base64(body, what)


def check_url(url: str, what: str) -> None:
    """Refuse any URL but ``http(s)://host/...``: a ``file://`` URL would read the disk of
    whichever process encoded the request.

    Raises:
        UserError: it is not an http(s) URL with a host, or is over 8 KiB.
    """
    if len(url) > _MAX_URL:
        raise UserError(f"{what} is {len(url)} characters long, over {_MAX_URL}")
    try:
        parts = urlsplit(url)
    except ValueError:
        parts = None
    if parts is None or parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        scheme = parts.scheme if parts is not None else "?"
        raise UserError(
            f"{what} must be an http(s):// URL or a base64 data: URL, got scheme {scheme!r} "
            f"({url[:60]!r}); pass a local file's bytes as data=, read by your own code"
        )


def check_media_type(media_type: object, what: str) -> None:
    """Raises: UserError: it is not a ``type/subtype`` media type."""
    if not isinstance(media_type, str) or not _MEDIA_TYPE.match(media_type):
        raise UserError(f"{what} needs a media type such as 'application/pdf', got {media_type!r}")


def check_image_type(media_type: object, data: bytes | None) -> None:
    """Raises: UserError: ``media_type`` is not an image type a model takes, or ``data``
    (when given) is not an image of that type."""
    if media_type not in IMAGE_TYPES:
        raise UserError(
            f"an image's media type must be one of {sorted(IMAGE_TYPES)}, got {media_type!r}"
        )
    if data is None:
        return
    ok = any(data.startswith(magic) for magic in IMAGE_TYPES[str(media_type)])
    if media_type == "image/webp":
        ok = ok and data[8:12] == b"WEBP"
    if not ok:
        raise UserError(f"the image's bytes are not {media_type} ({data[:8]!r}...)")


def data_url(part: ImagePart | FilePart) -> str:
    """The part's inline bytes as a base64 ``data:`` URL."""
    assert part.data is not None
    return f"data:{part.media_type};base64,{base64.b64encode(part.data).decode('ascii')}"


def chat_part(part: Part) -> dict[str, Any]:
    """A part as a Chat Completions content part; one kept in the store (its bytes not
    loaded) as raygents' own dump, which :func:`to_parts` reads back."""
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if part.blob is not None:
        return part.model_dump(mode="json", exclude_none=True)
    if isinstance(part, ImagePart):
        image: dict[str, Any] = {"url": part.url if part.url is not None else data_url(part)}
        if part.detail is not None:
            image["detail"] = part.detail
        return {"type": "image_url", "image_url": image}
    if part.file_id is not None:
        return {"type": "file", "file": {"file_id": part.file_id}}
    return {"type": "file", "file": {"filename": part.filename, "file_data": data_url(part)}}


def sniff_image_type(data: bytes) -> str | None:
    """The media type of image bytes, by the bytes they start with (None: not an image
    type a model takes)."""
    for media_type, magics in IMAGE_TYPES.items():
        webp_ok = media_type != "image/webp" or data[8:12] == b"WEBP"
        if webp_ok and any(data.startswith(m) for m in magics):
            return media_type
    return None


def image_part(value: Any, what: str = "an image") -> ImagePart:
    """An image from what a data set holds: an :class:`ImagePart`, image bytes (their type
    read from their first bytes), an ``http(s)``/``data:`` URL, or a part's dict.

    Raises:
        UserError: ``value`` is none of those, or not an image raygents takes.
    """
    if isinstance(value, ImagePart):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        data = bytes(value)
        media_type = sniff_image_type(data)
        if media_type is None and data.startswith((b"http://", b"https://", b"data:")):
            # (Arrow stores a column of bytes and strings as binary: a URL comes as bytes)
            return ImagePart(url=data.decode("ascii", "replace"))
        if media_type is None:
            raise UserError(f"{what} is {len(data)} bytes that are not a PNG, JPEG, GIF or WebP")
        return ImagePart(data=data, media_type=media_type)
    if isinstance(value, str):
        return ImagePart(url=value)
    if isinstance(value, Mapping):
        part = _to_part(0, value)
        if isinstance(part, ImagePart):
            return part
    raise UserError(
        f"{what} must be image bytes, a URL or an image part, got {type(value).__name__}"
    )


def join_text(parts: Iterable[Part]) -> str:
    """The text of ``parts``, joined."""
    return "".join(p.text for p in parts if isinstance(p, TextPart))


def to_parts(items: Iterable[Any]) -> tuple[Part, ...]:
    """Content parts from parts, strings and the dicts of OpenAI's APIs and raygents' own dumps.

    Raises:
        UserError: an item is of a type raygents does not carry (audio, say), or malformed.
    """
    if isinstance(items, str | bytes) or not isinstance(items, Iterable):
        raise UserError(f"content parts must be a list, got {type(items).__name__}")
    return tuple(_to_part(index, item) for index, item in enumerate(items))


def _to_part(index: int, item: Any) -> Part:
    if isinstance(item, TextPart | ImagePart | FilePart):
        return item
    if isinstance(item, str):
        return TextPart(item)
    if not isinstance(item, Mapping):
        raise UserError(f"content part #{index} is a {type(item).__name__}, not a part or dict")
    if "kind" in item:
        kind = item["kind"]
        cls = {"text": TextPart, "image": ImagePart, "file": FilePart}.get(kind)
        if cls is not None:
            return cls.model_validate(dict(item))  # type: ignore[attr-defined, no-any-return]
        raise UserError(f"content part #{index} is of kind {kind!r}: not text, image or file")
    return _from_openai(index, item)


def _from_openai(index: int, item: Mapping[str, Any]) -> Part:
    """An OpenAI content part (Chat Completions or Responses input) as a raygents part."""
    kind = item.get("type", "text")
    if kind in ("text", "input_text", "output_text") and isinstance(item.get("text"), str):
        return TextPart(item["text"])
    if kind == "image_url":  # Chat Completions: {"image_url": {"url": ..., "detail": ...}}
        inner = item.get("image_url")
        inner = inner if isinstance(inner, Mapping) else {"url": inner}
        return ImagePart(url=inner.get("url"), detail=inner.get("detail"))
    if kind == "input_image":  # Responses: {"image_url": "...", "detail": ...} or a file_id
        if item.get("file_id") is not None:
            raise UserError(
                f"content part #{index} is an input_image by file_id, which raygents does not "
                "carry; pass the image's URL or bytes"
            )
        return ImagePart(url=item.get("image_url"), detail=item.get("detail"))
    if kind == "image":  # the Agents SDK's tool output: {"image_url": ..., "detail": ...}
        return _from_openai(index, {**item, "type": "input_image"})
    if kind in ("input_file", "file"):  # Responses, Chat Completions' {"file": {...}}, the SDK
        inner = item.get("file", item) if kind == "file" else item
        if isinstance(inner, Mapping):
            return _file_part(inner)
    raise UserError(
        f"content part #{index} is of type {str(kind)[:40]!r}, which raygents does not carry "
        "(it takes text, images and files); describe the content in text instead"
    )


def _file_part(item: Mapping[str, Any]) -> FilePart:
    if item.get("file_url") is not None:
        raise UserError(
            "a file part by file_url is not taken (no process fetches files for a run); pass "
            "the file's bytes (file_data) or a provider file_id"
        )
    raw = item.get("file_data")
    if raw is None:
        return FilePart(file_id=item.get("file_id"), filename=item.get("filename"))
    if not isinstance(raw, str):
        raise UserError(f"a file part's file_data must be a string, got {type(raw).__name__}")
    if raw.startswith("data:"):
        media_type, data = parse_data_url(raw, "a file part's file_data")
    else:
        media_type, data = _guess_type(item.get("filename")), decode_base64(raw, "file_data")
    return FilePart(data=data, media_type=media_type, filename=item.get("filename"))


_TYPES_BY_SUFFIX = {
    "pdf": "application/pdf",
    "txt": "text/plain",
    "md": "text/markdown",
    "csv": "text/csv",
    "json": "application/json",
    "html": "text/html",
    "png": "image/png",
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "gif": "image/gif",
    "webp": "image/webp",
}


def _guess_type(filename: object) -> str:
    """The media type OpenAI's bare base64 ``file_data`` implies: by the name's suffix where
    it is a known one, else PDF (what OpenAI takes by default)."""
    if isinstance(filename, str) and "." in filename:
        return _TYPES_BY_SUFFIX.get(filename.rsplit(".", 1)[1].lower(), "application/pdf")
    return "application/pdf"

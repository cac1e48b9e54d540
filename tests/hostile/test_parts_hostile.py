"""Hostile content parts: refused where they are built, with an error that names them."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest

from raygents import FilePart, ImagePart, Message, PayloadTooLarge, UserError
from raygents.core.messages import ModelRequest, to_messages
from raygents.errors import CheckpointCorrupt, CheckpointError
from raygents.models.content import chat_message, responses_content
from raygents.models.responses_input import input_items
from raygents.records import blobs
from raygents.stores.memory import MemoryStore

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


def test_bad_base64_is_refused() -> None:
    with pytest.raises(UserError, match="not valid base64"):
        ImagePart(url="data:image/png;base64,iVBOR*not-base64!!")
    with pytest.raises(UserError, match="not valid base64"):
        to_messages([{"role": "user", "content": [{"type": "input_file", "file_data": "%%%"}]}])


def test_a_50_mb_image_is_over_the_cap() -> None:
    big = PNG + b"\x00" * (50 * 1024 * 1024)
    with pytest.raises(PayloadTooLarge, match="content part") as caught:
        ImagePart(data=big, media_type="image/png")
    assert caught.value.size == len(big) and caught.value.limit == 20 * 1024 * 1024
    # as a data URL it is refused before its base64 is decoded
    url = "data:image/png;base64," + "A" * (70 * 1024 * 1024)
    with pytest.raises(PayloadTooLarge, match="content part"):
        Message("user", [{"type": "input_image", "image_url": url}])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"data": PNG, "media_type": "image/svg+xml"}, "media type must be one of"),
        ({"data": PNG, "media_type": "text/html"}, "media type must be one of"),
        ({"data": b"<html>hello</html>", "media_type": "image/png"}, "are not image/png"),
        ({"data": PNG}, "media type must be one of"),
        ({"url": "data:text/html;base64,PGgxPg==", "media_type": None}, "media type must be"),
    ],
)
def test_wrong_media_types_are_refused(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(UserError, match=match):
        ImagePart(**kwargs)  # type: ignore[arg-type]


def test_a_pdf_that_is_not_one_is_refused() -> None:
    with pytest.raises(UserError, match="not a PDF"):
        FilePart(data=b"MZ\x90\x00", media_type="application/pdf", filename="x.pdf")
    with pytest.raises(UserError, match="needs a filename"):
        FilePart(data=b"%PDF-1.4", media_type="application/pdf")
    with pytest.raises(UserError, match="needs a media type"):
        FilePart(data=b"x", media_type="pdf", filename="x.pdf")


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "FILE:///etc/passwd",
        "file://localhost/etc/passwd",
        "javascript:alert(1)",
        "ftp://example.com/x.png",
        "//example.com/x.png",
        "/etc/passwd",
        "http:///no-host.png",
    ],
)
def test_non_http_urls_are_refused(url: str) -> None:
    with pytest.raises(UserError, match=r"must be an http\(s\):// URL"):
        ImagePart(url=url)
    with pytest.raises(UserError, match=r"must be an http\(s\):// URL"):
        Message("user", [{"type": "image_url", "image_url": {"url": url}}])


def test_a_file_url_never_reads_the_drivers_disk(tmp_path: Path) -> None:
    secret = tmp_path / "secret.png"
    secret.write_bytes(PNG + b"SECRET")
    with pytest.raises(UserError) as caught:
        Message("user", [{"type": "input_image", "image_url": secret.as_uri()}])
    assert "SECRET" not in str(caught.value)


def test_parts_raygents_does_not_carry_are_refused_not_dropped() -> None:
    audio = {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
    with pytest.raises(UserError, match="'input_audio'"):
        to_messages([{"role": "user", "content": [{"type": "text", "text": "hi"}, audio]}])
    with pytest.raises(UserError, match="kind 'video'"):
        Message("user", [{"kind": "video"}])


def test_adapters_refuse_parts_their_api_does_not_take() -> None:
    image = ImagePart(url="https://example.com/x.png")
    tool = Message("tool", ["chart", image], tool_call_id="c1")
    with pytest.raises(UserError, match=r"result of tool call 'c1'.*OpenAIResponsesModel"):
        chat_message(tool, "m")
    system = Message("system", ["rules", image])
    with pytest.raises(UserError, match="system message"):
        responses_content(system, "m")
    assistant = Message("assistant", ["look", image])
    with pytest.raises(UserError, match="assistant message"):
        list(input_items((assistant,), "m"))
    with pytest.raises(UserError, match="assistant message"):
        chat_message(assistant, "m")


def test_a_part_left_in_the_store_is_not_sent_as_is() -> None:
    store = MemoryStore("hostile-parts-unloaded")
    big = PNG + b"\x01" * (blobs.THRESHOLD + 1)
    (kept,) = blobs.keep((Message("user", [ImagePart(data=big, media_type="image/png")]),), store)
    with pytest.raises(UserError, match="were not loaded"):
        chat_message(kept, "m")
    request = ModelRequest(agent_name="a", messages=(kept,))
    with pytest.raises(UserError, match="were not loaded"):
        list(input_items(request.messages, "m"))


def test_blobs_missing_or_tampered_in_the_store_are_errors() -> None:
    store = MemoryStore("hostile-parts-blobs")
    big = PNG + b"\x02" * (blobs.THRESHOLD + 1)
    (kept,) = blobs.keep((Message("user", [ImagePart(data=big, media_type="image/png")]),), store)
    blob = kept.parts[0].blob  # type: ignore[union-attr]
    assert blob == "sha256:" + hashlib.sha256(big).hexdigest()
    with pytest.raises(CheckpointError, match="not in the store"):
        blobs.load((kept,), MemoryStore("hostile-parts-empty"))
    forged = MemoryStore("hostile-parts-forged")
    forged.put(blobs.blob_key(blob), PNG + b"\x03" * (blobs.THRESHOLD + 1))
    with pytest.raises(CheckpointCorrupt, match="do not match their hash"):
        blobs.load((kept,), forged)


def test_a_forged_blob_reference_is_refused() -> None:
    for blob in ("sha256:../../etc/passwd", "md5:abc", "sha256:" + "A" * 64):
        with pytest.raises(UserError, match="must be 'sha256:'"):
            ImagePart(blob=blob, size=1, media_type="image/png")
    b64 = base64.b64encode(PNG).decode()
    with pytest.raises(UserError, match="takes one of url, data"):
        Message(
            "user",
            [
                {
                    "kind": "image",
                    "blob": "sha256:" + "a" * 64,
                    "data": b64,
                    "media_type": "image/png",
                    "size": 1,
                }
            ],
        )

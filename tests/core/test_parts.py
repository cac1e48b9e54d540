"""Content parts: building them, the OpenAI dicts they come from, and messages made of them."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from raygents import FilePart, ImagePart, Message, TextPart, ToolResult, UserError
from raygents.core.messages import to_messages
from raygents.core.parts import chat_part, to_parts

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
PNG_URL = "data:image/png;base64," + base64.b64encode(PNG).decode()
PDF = b"%PDF-1.4\n%\xe2\xe3\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n"


def test_image_by_url_bytes_and_data_url() -> None:
    assert ImagePart(url="https://example.com/cat.png").url == "https://example.com/cat.png"
    assert ImagePart(data=PNG, media_type="image/png").data == PNG
    from_url = ImagePart(url=PNG_URL, detail="low")
    assert (from_url.url, from_url.data, from_url.media_type) == (None, PNG, "image/png")


@pytest.mark.parametrize(
    "item",
    [
        {"type": "input_image", "image_url": PNG_URL, "detail": "high"},
        {"type": "image_url", "image_url": {"url": PNG_URL}},
        {"type": "image_url", "image_url": PNG_URL},
        {"kind": "image", "data": base64.b64encode(PNG).decode(), "media_type": "image/png"},
    ],
)
def test_openai_image_dicts(item: dict[str, object]) -> None:
    (part,) = to_parts([item])
    assert isinstance(part, ImagePart) and part.data == PNG


def test_openai_file_dicts() -> None:
    b64 = base64.b64encode(PDF).decode()
    parts = to_parts(
        [
            {
                "type": "input_file",
                "filename": "a.pdf",
                "file_data": f"data:application/pdf;base64,{b64}",
            },
            {"type": "file", "file": {"filename": "b.pdf", "file_data": b64}},
            {"type": "input_file", "file_id": "file-abc123"},
        ]
    )
    assert [p.data for p in parts] == [PDF, PDF, None]  # type: ignore[union-attr]
    assert parts[2] == FilePart(file_id="file-abc123")


def test_message_of_parts_keeps_order_and_text() -> None:
    message = Message(
        "user",
        [
            {"type": "input_text", "text": "what is "},
            {"type": "input_image", "image_url": "https://example.com/x.png"},
            "this?",
        ],
    )
    assert message.text == "what is this?"
    assert [p.kind for p in message.parts] == ["text", "image", "text"]
    # all text: a plain message, as before parts existed
    assert Message("user", [{"type": "text", "text": "hi"}]) == Message("user", "hi")
    assert "parts" not in Message("user", "hi").model_dump()


def test_message_round_trips_json_and_openai() -> None:
    message = Message("user", [TextPart("see"), ImagePart(data=PNG, media_type="image/png")])
    dumped = message.model_dump(mode="json")
    assert dumped["parts"][1]["data"] == base64.b64encode(PNG).decode()
    assert Message.model_validate(dumped) == message
    assert Message.model_validate_json(message.model_dump_json()) == message
    (again,) = to_messages([message.to_openai()])
    assert again == message


def test_tool_result_of_parts() -> None:
    image = ImagePart(data=PNG, media_type="image/png")
    result = ToolResult([TextPart("chart:"), image])
    assert result.content == "chart:" and result.parts[1] == image
    captioned = ToolResult("a chart", parts=(image,))
    assert captioned.content == "a chart" and captioned.parts[0] == TextPart("a chart")
    assert ToolResult.model_validate(captioned.model_dump(mode="json")) == captioned


def test_chat_part_shapes() -> None:
    image = ImagePart(url="https://example.com/x.png", detail="low")
    assert chat_part(image) == {
        "type": "image_url",
        "image_url": {"url": "https://example.com/x.png", "detail": "low"},
    }
    pdf = FilePart(data=PDF, media_type="application/pdf", filename="a.pdf")
    assert chat_part(pdf)["file"]["file_data"].startswith("data:application/pdf;base64,")


def test_a_tool_result_of_an_image_alone_has_empty_text() -> None:
    image = ImagePart(data=PNG, media_type="image/png")
    assert ToolResult([image]).content == ""
    assert ToolResult.model_validate(ToolResult([image]).model_dump(mode="json")).parts == (image,)


def test_parts_dumped_without_defaults_load_back() -> None:
    """Checkpoint records dump with ``exclude_defaults``: a part still names its kind."""
    message = Message("user", ["see", ImagePart(data=PNG, media_type="image/png")])
    dumped = message.model_dump(mode="json", exclude_defaults=True)
    assert [p["kind"] for p in dumped["parts"]] == ["text", "image"]
    assert Message.model_validate(dumped) == message


def test_what_a_tool_returns_becomes_a_result_of_parts() -> None:
    from raygents.agents.tools import to_tool_result

    image = ImagePart(data=PNG, media_type="image/png")
    assert to_tool_result(image).parts == (image,)
    mixed = to_tool_result(["chart:", image])
    assert (mixed.content, mixed.parts, mixed.is_error) == (
        "chart:",
        (TextPart("chart:"), image),
        False,
    )
    assert to_tool_result(["a", "b"]).content == '["a", "b"]'  # (a list of text stays JSON)


def test_an_image_cell_of_a_dataset() -> None:
    from raygents.core.parts import image_part

    assert image_part(PNG).media_type == "image/png"
    assert image_part("https://example.com/a.png").url == "https://example.com/a.png"
    assert image_part(b"https://example.com/a.png").url == "https://example.com/a.png"
    assert image_part({"type": "input_image", "image_url": PNG_URL}).data == PNG


def test_an_image_counts_as_a_fixed_number_of_tokens_not_its_bytes() -> None:
    from raygents.models.tokens import PER_PART, estimate

    big = PNG + bytes(60_000)
    with_image = Message("user", ["hi", ImagePart(data=big, media_type="image/png")])
    assert estimate([with_image]) - estimate([Message("user", "hi")]) == PER_PART


@pytest.mark.parametrize("kind", ["memory", "sqlite", "store"])
def test_sessions_keep_messages_of_parts(kind: str, tmp_path: Any) -> None:
    from raygents.sessions import MemorySession, SQLiteSession, StoreSession

    sessions = {
        "memory": lambda: MemorySession(),
        "sqlite": lambda: SQLiteSession(tmp_path / "s.db"),
        "store": lambda: StoreSession(f"file://{tmp_path / 'store'}"),
    }
    session = sessions[kind]()
    kept = ImagePart(blob="sha256:" + "a" * 64, size=70_000, media_type="image/png")
    history = [
        Message("user", ["look", ImagePart(data=PNG, media_type="image/png")]),
        Message("tool", ["chart", kept], tool_call_id="c1"),
        Message("assistant", "a cat"),
    ]
    session.save("s1", history)
    assert session.load("s1") == history


def test_trimming_a_tool_output_of_parts_keeps_its_images_and_its_text_consistent() -> None:
    from raygents.core.compaction import trim_tool_outputs

    image = ImagePart(data=PNG, media_type="image/png")
    old = Message("tool", ["x" * 500, image], tool_call_id="c1")
    later = [Message("user", "next"), Message("assistant", "ok")] * 3
    trimmed = trim_tool_outputs([old, *later], max_chars=10, keep_last_turns=1)[0]
    assert trimmed.parts[1] == image and trimmed.text.startswith("x" * 10)
    assert trimmed.parts[0] == TextPart(trimmed.text)
    assert Message.model_validate(trimmed.model_dump(mode="json")) == trimmed


def test_the_agents_sdks_tool_outputs_become_parts() -> None:
    from raygents.agents.tools import to_tool_result

    b64 = base64.b64encode(PDF).decode()
    image = {"type": "image", "image_url": PNG_URL, "detail": "low"}
    result = to_tool_result([{"type": "text", "text": "here:"}, image])
    assert result.content == "here:"
    assert result.parts[1] == ImagePart(data=PNG, media_type="image/png", detail="low")
    pdf = to_tool_result({"type": "file", "file_data": b64, "filename": "r.pdf"})
    assert pdf.parts == (FilePart(data=PDF, media_type="application/pdf", filename="r.pdf"),)
    assert (
        to_tool_result({"type": "image", "name": "x"}).content == '{"type": "image", "name": "x"}'
    )
    with pytest.raises(UserError, match="file_url"):
        to_tool_result({"type": "file", "file_url": "https://example.com/a.pdf"})

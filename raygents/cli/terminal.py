"""Text for the operator's terminal: what a run or a store holds, made unable to drive it."""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from typing import Any

__all__ = ["json_text", "visible"]

_HIDDEN = frozenset(("Cc", "Cf", "Cs", "Zl", "Zp"))
"""Unicode categories a terminal acts on or draws as nothing: controls (C0, DEL, C1, so the
ESC and CSI/OSC introducers of ANSI sequences), format characters (bidi marks, embeddings,
overrides and isolates, zero-width spaces and joiners, the word joiner, BOM, soft hyphen,
tags), lone surrogates (which would also fail to encode), line and paragraph separators."""
_BLANK = frozenset("\u034f\u115f\u1160\u180e\u3164\uffa0")
"""Characters of other categories that print as nothing (a grapheme joiner, fillers)."""
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_SUSPECT = re.compile(r"[^\x20-\x7e]")  # (printable ASCII never needs a look)
_SUSPECT_IN_LINES = re.compile(r"[^\x20-\x7e\n]")


def visible(value: object, *, lines: bool = False) -> str:
    """``value``'s text with every character a terminal would act on or hide written as an
    escape (``\\x1b``, ``\\u202e``, ``\\U000e0041``; ``\\n``, ``\\r``, ``\\t``), so that
    nothing a run or a store holds can move the cursor, recolour, retitle, reorder or hide
    what the command prints. With ``lines``, newlines stay (the text is shown indented on
    lines of its own) and ``\\r\\n`` reads as a newline; a bare ``\\r`` never stays.

    A backslash is left as it is: an escape shown may have been the escape's text, but
    nothing is hidden either way.
    """
    text = value if isinstance(value, str) else str(value)
    if lines:
        return _SUSPECT_IN_LINES.sub(_escaped, text.replace("\r\n", "\n"))
    return _SUSPECT.sub(_escaped, text)


def json_text(value: Any) -> str:
    """``value`` as one line of JSON that parses back to it exactly, readable text kept as
    it is, and each character :func:`visible` would escape written as a ``\\u`` escape (the
    JSON encoder leaves DEL, C1 controls, bidi and zero-width characters raw otherwise)."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return _SUSPECT.sub(_json_escaped, text)


def _escaped(match: re.Match[str]) -> str:
    return _escape(match[0])


@functools.lru_cache(maxsize=4096)
def _escape(char: str) -> str:
    if char in _NAMED:
        return _NAMED[char]
    if not _hidden(char):
        return char
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _json_escaped(match: re.Match[str]) -> str:
    char = match[0]
    if not _hidden(char):
        return char
    code = ord(char)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000  # (JSON escapes a character past U+FFFF as a UTF-16 surrogate pair)
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def _hidden(char: str) -> bool:
    return char in _BLANK or unicodedata.category(char) in _HIDDEN

"""Credentials in text: finding the kinds a text holds, and masking the values a caller knows.

Finding is for text from outside (a model's output, an excerpt an error quotes): the detectors
below know the shapes of common providers' keys and tokens. Masking is for text that may echo a
secret the caller holds (an API key, a URL's password, a variable of the environment): each
caller decides which values are secret, and this module replaces them.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Literal
from urllib.parse import unquote

__all__ = ["MASK", "detect", "mask", "shown_url", "split_url", "url_secrets"]

MASK = "***"
"""What a masked secret is replaced with."""
MIN_MASKED = 4
"""Shorter values are never masked: replacing them would garble other words."""


@dataclass(frozen=True)
class _Detector:
    kind: str
    pattern: re.Pattern[str]
    check: Literal["random", "strong", "basic", "userinfo", "password", "none"] = "random"
    """How a match is confirmed: ``random`` needs two of upper / lower / digit characters in
    the captured value, ``strong`` all three, ``basic`` needs it to be base64 of
    ``user:password``, ``userinfo`` a ``user:password`` whose password is no placeholder,
    ``password`` a value with a digit or a symbol that is no placeholder or code."""


_TOKEN_START = r"(?<![A-Za-z0-9_-])"
_TOKEN_END = r"(?![A-Za-z0-9_-])"
_DATABASE_SCHEMES = (
    r"(?:postgres(?:ql)?|mysql|mariadb|mongodb(?:\+srv)?|rediss?|amqps?)(?:\+[a-z0-9]+)?"
)
_NEARBY = r"[\s\S]{1,100}?"
"""The most text between an AWS access key id and an unlabelled secret key that counts as one
pair: a 40-character random string anywhere else may be any hash or id."""
_DETECTORS = (
    _Detector("Anthropic API key", re.compile(_TOKEN_START + r"sk-ant-([A-Za-z0-9_-]{20,})")),
    _Detector(
        "OpenAI API key",
        re.compile(_TOKEN_START + r"sk-(?!ant-)(?:proj-|svcacct-|admin-)?([A-Za-z0-9_-]{20,})"),
    ),
    _Detector("Stripe secret key", re.compile(_TOKEN_START + r"(?:sk|rk)_live_([A-Za-z0-9]{16,})")),
    _Detector(
        "AWS access key id", re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA)([A-Z0-9]{16})(?![A-Z0-9])")
    ),
    _Detector(
        "AWS secret access key",
        re.compile(
            r"(?:aws[ _.-]?secret[A-Za-z _.-]{0,16}?|secret[ _.-]?access[ _.-]?key)"
            r"[\"']?\s*[:=]\s*[\"']?([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])",
            re.IGNORECASE,
        ),
    ),
    _Detector(  # unlabelled, right after its access key id
        "AWS secret access key",
        re.compile(
            r"(?<![A-Z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}[\"',:;=|\s]{1,20}"
            r"([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
        ),
        check="strong",
    ),
    _Detector(  # unlabelled, a few words after its access key id
        "AWS secret access key",
        re.compile(
            r"(?<![A-Z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])"
            + _NEARBY
            + r"(?<![A-Za-z0-9/+])([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
        ),
        check="strong",
    ),
    _Detector(  # unlabelled, a few words before its access key id
        "AWS secret access key",
        re.compile(
            r"(?<![A-Za-z0-9/+])([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
            + _NEARBY
            + r"(?<![A-Z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])"
        ),
        check="strong",
    ),
    _Detector(
        "GitHub token",
        re.compile(_TOKEN_START + r"(?:gh[pousr]_([A-Za-z0-9]{36,})|github_pat_(\w{22,}))"),
    ),
    _Detector("Slack token", re.compile(_TOKEN_START + r"xox[baprs]-([A-Za-z0-9-]{10,})")),
    _Detector(
        "GitLab token", re.compile(_TOKEN_START + r"gl(?:pat|dt|rt|ptt)-([\w-]{20,}(?:\.[\w.-]+)?)")
    ),
    _Detector(
        "Hugging Face token",
        re.compile(_TOKEN_START + r"(?:hf_|api_org_)([A-Za-z0-9]{34,})" + _TOKEN_END),
    ),
    _Detector("npm token", re.compile(_TOKEN_START + r"npm_([A-Za-z0-9]{36})" + _TOKEN_END)),
    _Detector(
        "SendGrid API key",
        re.compile(_TOKEN_START + r"SG\.([\w-]{22}\.[\w-]{43})" + _TOKEN_END),
    ),
    _Detector(
        "Azure storage key",
        re.compile(
            r"(?<![A-Za-z0-9])(?:AccountKey|SharedAccessKey)\s*=\s*([A-Za-z0-9+/]{30,}={0,2})",
            re.IGNORECASE,
        ),
    ),
    _Detector("Google API key", re.compile(_TOKEN_START + r"AIza([0-9A-Za-z_-]{35})" + _TOKEN_END)),
    _Detector(
        "JSON web token",
        re.compile(
            _TOKEN_START + r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.([A-Za-z0-9_-]{16,})"
        ),
    ),
    _Detector(
        "bearer credential",
        re.compile(
            r"\bauthorization[\"']?\s*[:=]\s*[\"']?bearer\s+([A-Za-z0-9._~+/-]{8,}=*)",
            re.IGNORECASE,
        ),
    ),
    _Detector(
        "bearer credential",
        re.compile(r"\bbearer\s+([A-Za-z0-9._~+/-]{20,}=*)", re.IGNORECASE),
    ),
    _Detector(
        "basic credential",
        re.compile(r"\bbasic\s+([A-Za-z0-9+/]{8,}={0,2})(?![A-Za-z0-9+/=])", re.IGNORECASE),
        check="basic",
    ),
    _Detector(
        "private key",
        re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"),
        check="none",
    ),
    _Detector(
        "database URL with credentials",
        re.compile(
            r"\b" + _DATABASE_SCHEMES + r"://[^\s:/@]*:[^\s/@]+@[^\s/@]+",
            re.IGNORECASE,
        ),
        check="none",
    ),
    _Detector(
        "URL with credentials",
        re.compile(
            # any scheme but the database ones above, which name their own kind
            r"(?<![A-Za-z0-9+.-])(?!" + _DATABASE_SCHEMES + r"://)[a-z][a-z0-9+.-]*://"
            r"([^\s:/?#@]*:[^\s/?#@]+)@[^\s/?#@]+",
            re.IGNORECASE,
        ),
        check="userinfo",
    ),
    _Detector(
        "password",
        re.compile(
            r"(?<![A-Za-z0-9_])(?:password|passwd|passphrase)[\"']?\s*[:=]\s*[\"']?"
            r"([^\s\"'`,;&<>{}()\[\]$]{4,})",
            re.IGNORECASE,
        ),
        check="password",
    ),
)
_PLACEHOLDER = re.compile(r"[A-Z_]+|[*xX.\u2022]+|[<{\[$%(].*")
"""Values that stand for a secret rather than being one: ``PASSWORD``, ``****``, ``<pw>``."""
_CODE = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
"""A dotted name such as ``os.environ`` or ``settings.db.password``: code, not a value."""
_NOT_PASSWORDS = frozenset({"none", "null", "nil", "true", "false", "undefined", "redacted"})


def _confirmed(detector: _Detector, match: re.Match[str]) -> bool:
    value = next((group for group in match.groups() if group), "")
    if detector.check == "none":
        return True
    if detector.check == "userinfo":
        return not _PLACEHOLDER.fullmatch(value.partition(":")[2])
    if detector.check == "password":
        return not (
            _PLACEHOLDER.fullmatch(value)
            or _CODE.fullmatch(value)
            or value.casefold() in _NOT_PASSWORDS
            or value.isalpha()
        )
    if detector.check == "basic":
        try:
            decoded = base64.b64decode(value, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return False
        return ":" in decoded and decoded.isprintable()
    classes = (
        any(c.isupper() for c in value),
        any(c.islower() for c in value),
        any(c.isdigit() for c in value),
    )
    return sum(classes) >= (3 if detector.check == "strong" else 2)


_INVISIBLE = "\u200b\u200c\u200d\u2060\ufeff"
"""Zero-width characters: inserted in a key, they hide it from a pattern but not from a reader."""
_DROP_INVISIBLE = dict.fromkeys(map(ord, _INVISIBLE))
_SPACED = (
    # every character apart: "A I z a S y ...", and the same after a first group: "AKIA I O S ..."
    re.compile(r"(?<![A-Za-z0-9])\S(?: \S(?![A-Za-z0-9])){7,}"),
    re.compile(r"\S(?: \S(?![A-Za-z0-9])){7,}"),
    # short groups apart: "AIza SyD- 9tSr ...". It also joins the short words of prose around a
    # key, which may hide the key's bounds: each pattern gives a reading of its own. (Groups of
    # five or more characters apart are prose words as much as key parts, and stay as written.)
    re.compile(r"(?<![A-Za-z0-9])\S{1,4}(?: \S{1,4}(?![A-Za-z0-9])){5,}"),
)
"""Runs of single spaces that may split one key, read again with the spaces taken out."""


def _readings(text: str) -> list[str]:
    """``text`` as written, without zero-width characters, and with spaced-out runs joined."""
    visible = text.translate(_DROP_INVISIBLE)
    readings = [text] if visible == text else [text, visible]
    for spaced in _SPACED:
        joined = spaced.sub(lambda m: m.group().replace(" ", ""), visible)
        if joined not in readings:
            readings.append(joined)
    return readings


def detect(text: str) -> list[str]:
    """The kinds of credentials found in ``text``, in a fixed order, without duplicates.

    A key split by zero-width characters or by single spaces (one character or a short group at
    a time) is found too.
    """
    readings = _readings(text)
    found: list[str] = []
    for detector in _DETECTORS:
        if detector.kind in found:
            continue
        if any(
            _confirmed(detector, m)
            for reading in readings
            for m in detector.pattern.finditer(reading)
        ):
            found.append(detector.kind)
    return found


def _written(secret: str) -> re.Pattern[str]:
    """``secret`` as text may show it: with zero-width characters or single spaces between its
    characters."""
    gap = f"[{_INVISIBLE}]*(?: [{_INVISIBLE}]*)?"
    return re.compile(gap.join(map(re.escape, secret)))


def mask(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with each of ``secrets`` replaced by :data:`MASK`, the longest first (so that
    no part of a secret that holds another one stays shown); ``None`` and values shorter than
    :data:`MIN_MASKED` are left out. A secret written with zero-width characters or single
    spaces between its characters is masked too."""
    for secret in sorted({s for s in secrets if s and len(s) >= MIN_MASKED}, key=len, reverse=True):
        text = text.replace(secret, MASK)
        if secret[0] in text:  # (the cheap test spares the pattern most texts)
            text = _written(secret).sub(MASK, text)
    return text


def split_url(url: str) -> tuple[str, str, str, str, str]:
    """``url`` as (scheme and ``//``, userinfo, host and path, query, fragment), each part
    without its separator. Everything up to the last ``@`` before the path's end counts as
    userinfo, so that a password with an unescaped ``/`` or ``@`` is never shown."""
    rest, _, fragment = url.partition("#")
    head, _, query = rest.partition("?")
    start = head.find("//") + 2 if "//" in head else 0
    at = head.rfind("@")
    if at < start:
        return head[:start], "", head[start:], query, fragment
    return head[:start], head[start:at], head[at + 1 :], query, fragment


def shown_url(url: str, shown_query: Collection[str] = ()) -> str:
    """``url`` with its userinfo, fragment and query values masked, but the values of the
    query parameters named (in lower case) in ``shown_query``."""
    scheme, userinfo, host, query, fragment = split_url(url)
    shown = scheme + (f"{MASK}@" if userinfo else "") + host
    if query:
        pairs = []
        for pair in query.split("&"):
            name, eq, value = pair.partition("=")
            if not eq:
                pairs.append(MASK if pair else "")
            else:
                pairs.append(f"{name}={value if name.lower() in shown_query else MASK}")
        shown += "?" + "&".join(pairs)
    return shown + (f"#{MASK}" if fragment else "")


def url_secrets(url: str, shown_query: Collection[str] = ()) -> list[str]:
    """The parts of ``url`` that :func:`shown_url` masks, as written and percent-decoded;
    very short ones are left out (masking them would garble other words)."""
    _, userinfo, _, query, fragment = split_url(url)
    found = [userinfo, *userinfo.split(":", 1), fragment]
    for pair in query.split("&"):
        name, eq, value = pair.partition("=")
        if not eq:
            found.append(pair)
        elif name.lower() not in shown_query:
            found.append(value)
    return [s for s in {*found, *map(unquote, found)} if len(s) >= MIN_MASKED]

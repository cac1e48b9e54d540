"""Credentials a model hides from the detectors: unlabelled AWS secret keys, Google keys, and
keys split by zero-width characters or single spaces; and the hashes and ids that must pass."""

from __future__ import annotations

import hashlib
import random
import string
import time

import pytest

from raygents.agents.builtin_guardrails import SensitiveDataGuardrail
from raygents.core.secrets import MASK, detect, mask

ALNUM = string.ascii_letters + string.digits
B64 = ALNUM + "+/"
UPPER_DIGITS = string.ascii_uppercase + string.digits
INVISIBLE = ("\u200b", "\u200c", "\u200d", "\u2060", "\ufeff")


def rand(n: int, alphabet: str = ALNUM, seed: int = 0) -> str:
    """A deterministic random-looking token body (secrets are built at run time, not stored)."""
    rng = random.Random(f"{seed}:{n}:{alphabet}")
    return "".join(rng.choice(alphabet) for _ in range(n))


KEY_ID = "AKIA" + rand(16, UPPER_DIGITS, seed=7)
AWS_SECRET = rand(40, B64, seed=8)
GOOGLE = "AIza" + rand(35, ALNUM + "_-", seed=9)
OPENAI = "sk-proj-" + rand(32, seed=10)


@pytest.mark.parametrize(
    "text",
    [
        f"key id {KEY_ID}, and the secret is {AWS_SECRET} (rotate it)",
        f"secret {AWS_SECRET}\nid {KEY_ID}",
        f"| {KEY_ID} | us-east-1 | {AWS_SECRET} |",
    ],
)
def test_an_unlabelled_aws_secret_key_near_its_key_id_is_found(text: str) -> None:
    assert "AWS secret access key" in detect(text)


@pytest.mark.parametrize(
    "text",
    [
        # a git commit, a sha-1 and a base64 digest near an access key id: no secret key shapes
        f"{KEY_ID} was rotated in commit {hashlib.sha1(b'x').hexdigest()}",
        f"{KEY_ID} etag {hashlib.sha1(b'y').hexdigest().upper()}",
        # a random 40-character string far from any key id, or with none at all
        f"{KEY_ID} " + "words " * 30 + AWS_SECRET,
        f"request id {AWS_SECRET} failed",
    ],
)
def test_hashes_and_ids_are_not_aws_secret_keys(text: str) -> None:
    assert "AWS secret access key" not in detect(text)


@pytest.mark.parametrize("invisible", INVISIBLE)
@pytest.mark.parametrize(
    ("kind", "key"),
    [("Google API key", GOOGLE), ("OpenAI API key", OPENAI), ("AWS access key id", KEY_ID)],
)
def test_a_key_split_by_zero_width_characters_is_found(kind: str, key: str, invisible: str) -> None:
    assert kind in detect(f"here: {key[:6]}{invisible}{key[6:12]}{invisible}{key[12:]} ok")
    assert kind in detect(f"here: {invisible.join(key)}.")


@pytest.mark.parametrize(
    ("kind", "key"),
    [("Google API key", GOOGLE), ("OpenAI API key", OPENAI), ("AWS access key id", KEY_ID)],
)
def test_a_key_split_by_single_spaces_is_found(kind: str, key: str) -> None:
    assert kind in detect(f"the key is {' '.join(key)} and that is all")
    assert kind in detect(f"key={' '.join(key)}")
    assert kind in detect(f"{key[:4]} {' '.join(key[4:])}")
    groups = " ".join(key[i : i + 4] for i in range(0, len(key), 4))
    assert kind in detect(f"key: {groups}.")


def test_ordinary_prose_with_short_words_and_spaced_letters_passes() -> None:
    text = (
        "It is a bit of an odd one, so do not flag it. S P A C E D letters, a task-based "
        "Workflow for Everyone, commit " + hashlib.sha1(b"z").hexdigest() + " and id 4 2 7 9 1 3."
    )
    assert detect(text) == []


async def test_the_guardrail_trips_on_an_evasion_and_names_only_the_kind() -> None:
    guardrail = SensitiveDataGuardrail()
    assert guardrail.detect("\u200b".join(GOOGLE)) == ["Google API key"]
    assert guardrail.detect(f"{KEY_ID} then {AWS_SECRET}") == [
        "AWS access key id",
        "AWS secret access key",
    ]


@pytest.mark.parametrize("invisible", [*INVISIBLE, " "])
def test_a_known_secret_written_with_gaps_is_masked(invisible: str) -> None:
    echoed = f"invalid key {invisible.join(OPENAI)} given"
    shown = mask(echoed, [OPENAI])
    assert shown == f"invalid key {MASK} given"
    assert OPENAI[8:16] not in shown.replace(invisible, "")


def test_detecting_in_a_large_text_stays_linear() -> None:
    text = ("word " * 200_000) + ("a " * 200_000) + "x" * 1_000_000
    started = time.perf_counter()
    assert detect(text) == []
    # generous: the point is no quadratic blow-up on a hostile few MiB, not speed
    assert time.perf_counter() - started < 60

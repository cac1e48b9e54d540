"""Corrections of malformed model output: the option, its default, and what an error quotes."""

from __future__ import annotations

import pytest

import raygents as rg
from raygents.core import corrections, loop


@pytest.mark.parametrize("value", [-1, 1.5, "3", None, True])
def test_a_bad_max_output_retries_is_refused(value: object) -> None:
    with pytest.raises(rg.UserError, match=r"agent 'a': max_output_retries must be an int >= 0"):
        rg.Agent("a", max_output_retries=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [0, 1, 50])
def test_a_good_max_output_retries_is_kept(value: int) -> None:
    assert rg.Agent("a", max_output_retries=value).max_output_retries == value
    with pytest.raises(rg.UserError, match="max_output_retries"):
        rg.Agent("a").clone(max_output_retries=-1)


def test_the_agent_and_its_view_share_the_default() -> None:
    assert rg.Agent("a").max_output_retries == corrections.DEFAULT_MAX_OUTPUT_RETRIES
    assert loop.AgentView(name="a").max_output_retries == corrections.DEFAULT_MAX_OUTPUT_RETRIES
    assert corrections.DEFAULT_MAX_OUTPUT_RETRIES == 3


PARSED = [
    ("", {}, None),
    ('{"a": 1}', {"a": 1}, None),
    ("{a: 1}", None, "arguments are not valid JSON"),
    ('{"a": Infinity}', None, "Infinity is not valid JSON"),
    ("null", None, "arguments must be a JSON object"),
    ("1e999999", None, "arguments must be a JSON object"),
]


@pytest.mark.parametrize(("arguments", "value", "problem"), PARSED)
def test_parse_arguments(arguments: str, value: object, problem: str | None) -> None:
    parsed, found = corrections.parse_arguments(arguments)
    assert parsed == value
    assert (found is None) if problem is None else (found is not None and problem in found)


def test_a_problem_never_quotes_the_arguments() -> None:
    _, problem = corrections.parse_arguments('{"password": "hunter2!"')
    assert problem is not None and "hunter2" not in problem


@pytest.mark.parametrize(
    "secret",
    [
        "sk-proj-" + "Ab3dE9xYz" * 5,
        "ghp_" + "aB3" * 12,
        "-----BEGIN RSA PRIVATE KEY-----",
        "postgres://app:s3cret!@db.internal/prod",
    ],
)
def test_an_excerpt_that_holds_a_credential_is_withheld(secret: str) -> None:
    shown = corrections.shown_excerpt('{"x": "' + secret + '"')
    assert secret not in shown and "withheld" in shown


def test_a_credential_cut_by_the_excerpt_is_withheld_too() -> None:
    text = " " * 190 + "sk-proj-" + "Ab3dE9xYz" * 5
    shown = corrections.shown_excerpt(text)
    assert "sk-proj" not in shown and "withheld" in shown


def test_an_ordinary_excerpt_is_quoted_and_cut() -> None:
    assert corrections.shown_excerpt("{oops") == "'{oops'"
    shown = corrections.shown_excerpt("y" * 5000)
    assert shown.startswith("'yyy") and "4800 more characters" in shown and len(shown) < 300

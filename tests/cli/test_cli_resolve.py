"""``raygents resolve``'s options: what they resolve, and what is refused. No Ray needed."""

from __future__ import annotations

import io

import pytest

import raygents as rg
from raygents.cli import resolve
from raygents.cli.main import parser


def parsed(*options: str) -> dict[str, object]:
    args = parser().parse_args(["resolve", "run-1", "--agent", "m:a", *options])
    return resolve.resolutions(args)


def test_each_option_gives_its_resolution() -> None:
    assert parsed("--rerun", "a", "--done", "b=paid 5", "--failed", "c=declined=twice") == {
        "a": "rerun",
        "b": rg.ToolResult("paid 5"),
        "c": rg.ToolResult("declined=twice", is_error=True),
    }
    assert parsed("--done", "b=") == {"b": rg.ToolResult("")}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ((), "say how to resolve each call in doubt"),
        (("--done", "b"), "--done takes CALL_ID=TEXT, got 'b'"),
        (("--failed", "=x"), "--failed takes CALL_ID=TEXT"),
        (("--rerun", "a", "--done", "a=x"), "call 'a' is resolved twice"),
    ],
)
def test_bad_options_are_refused(options: tuple[str, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parsed(*options)


def test_resolutions_must_name_exactly_the_calls_in_doubt() -> None:
    calls = [
        rg.InDoubt(
            call_id="c1",
            agent_name="a",
            tool_name="charge",
            arguments="{}",
            idempotency_key="run-1:c1",
            started_at=0.0,
            run_id="run-1",
        )
    ]
    with pytest.raises(rg.ResolutionsMismatch) as caught:
        resolve.check_covered("run-1", calls, {"c2": "rerun"})
    assert (caught.value.missing, caught.value.unknown) == (["c1"], ["c2"])
    resolve.check_covered("run-1", calls, {"c1": "rerun"})
    out = io.StringIO()
    resolve.show_resolutions("run-1", calls, {"c1": rg.ToolResult("no", is_error=True)}, out)
    assert "failed: no  c1  a: charge({})  key run-1:c1  started 1970-01-01T00:00:00+00:00" in (
        out.getvalue()
    )

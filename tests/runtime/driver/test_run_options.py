"""The run functions refuse an option they do not take, naming the function called."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import raygents as rg

AGENT = rg.Agent("options_agent")

CALLS: dict[str, Callable[..., Any]] = {
    "run": lambda **options: rg.run(AGENT, "hi", **options),
    "run_streamed": lambda **options: rg.run_streamed(AGENT, "hi", **options),
    "run_typed": lambda **options: rg.run_typed(AGENT, "hi", int, **options),
}


@pytest.mark.parametrize("function", sorted(CALLS))
def test_a_misspelt_option_is_refused_naming_the_function_and_listing_hooks(
    function: str,
) -> None:
    with pytest.raises(TypeError) as info:
        CALLS[function](hook=rg.RunHooks())
    message = str(info.value)
    assert message.startswith(f"{function}() got an unexpected keyword argument 'hook'")
    assert "hooks" in message


@pytest.mark.parametrize("function", sorted(CALLS))
@pytest.mark.parametrize("option", ["colour", "_stream", "_response_format"])
def test_an_unknown_or_private_option_is_refused_naming_the_function(
    function: str, option: str
) -> None:
    with pytest.raises(TypeError, match=rf"^{function}\(\) got an unexpected keyword argument"):
        CALLS[function](**{option: 1})


@pytest.mark.parametrize("function", sorted(CALLS))
@pytest.mark.parametrize("timeout", ["5", True, float("nan"), float("inf"), 0, -1, [1]])
def test_a_timeout_that_is_not_a_positive_number_of_seconds_is_refused(
    function: str, timeout: Any
) -> None:
    with pytest.raises(rg.UserError, match=r"timeout_s must be a positive, finite number"):
        CALLS[function](timeout_s=timeout)


@pytest.mark.parametrize("hooks", [3, "log", print, [rg.RunHooks(), object()]])
def test_hooks_that_are_not_run_hooks_are_refused_before_the_run_starts(hooks: Any) -> None:
    with pytest.raises(rg.UserError, match=r"hooks must be a RunHooks"):
        rg.start(AGENT, "hi", hooks=hooks)
    with pytest.raises(rg.UserError, match=r"hooks must be a RunHooks"):
        rg.resume("some-run", agent=AGENT, hooks=hooks)

"""Tool guardrails: checks of one tool's calls, before a call starts and after it returns.

A tool's ``tool_input_guardrails`` run in the agent actor before the call's task is submitted
(its arguments are in ``data.context.tool_arguments``); its ``tool_output_guardrails`` run
there once the call returned, before the ``tool_end`` event and hook (``data.output`` is the
result's text). Each returns a :class:`ToolGuardrailFunctionOutput`: ``allow`` goes on to the
next guardrail; ``reject_content(message)`` ends the checks and the model gets ``message`` as
the call's result (the call does not run; or its result is replaced); ``raise_exception``
fails the run with ``ToolInputGuardrailTripped`` / ``ToolOutputGuardrailTripped``. The names
and shapes are the OpenAI Agents SDK's.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias, TypedDict, overload

from raygents.core.toolcall import ToolContext
from raygents.errors import (
    RaygentsError,
    ToolInputGuardrailTripped,
    ToolOutputGuardrailTripped,
    UserError,
    excerpt,
)

__all__ = [
    "AllowBehavior",
    "RaiseExceptionBehavior",
    "RejectContentBehavior",
    "ToolGuardrailFunctionOutput",
    "ToolInputGuardrail",
    "ToolInputGuardrailData",
    "ToolOutputGuardrail",
    "ToolOutputGuardrailData",
    "check_tool_guardrails",
    "run_tool_input_guardrails",
    "run_tool_output_guardrails",
    "tool_input_guardrail",
    "tool_output_guardrail",
]


class AllowBehavior(TypedDict):
    """Go on: the next guardrail, then the call (or its result as it is)."""

    type: Literal["allow"]


class RejectContentBehavior(TypedDict):
    """The model gets ``message`` as the call's result; the run goes on."""

    type: Literal["reject_content"]
    message: str


class RaiseExceptionBehavior(TypedDict):
    """The run fails with the guardrail's trip error."""

    type: Literal["raise_exception"]


Behavior: TypeAlias = AllowBehavior | RejectContentBehavior | RaiseExceptionBehavior


@dataclass
class ToolGuardrailFunctionOutput:
    """What a tool guardrail function returns."""

    output_info: Any = None
    """Anything the guardrail found (picklable): the trip error carries it."""
    behavior: Behavior = field(default_factory=lambda: AllowBehavior(type="allow"))

    @classmethod
    def allow(cls, output_info: Any = None) -> ToolGuardrailFunctionOutput:
        """Let the call (or its result) through."""
        return cls(output_info, AllowBehavior(type="allow"))

    @classmethod
    def reject_content(cls, message: str, output_info: Any = None) -> ToolGuardrailFunctionOutput:
        """Send ``message`` to the model as the call's result instead; the run goes on."""
        return cls(output_info, RejectContentBehavior(type="reject_content", message=message))

    @classmethod
    def raise_exception(cls, output_info: Any = None) -> ToolGuardrailFunctionOutput:
        """Fail the run with the guardrail's trip error."""
        return cls(output_info, RaiseExceptionBehavior(type="raise_exception"))


@dataclass
class ToolInputGuardrailData:
    """What a tool input guardrail is given."""

    context: ToolContext
    """The call: run, call id, tool name, the run context, and ``tool_arguments`` (JSON)."""
    agent: Any
    """The agent making the call (an ``Agent``)."""


@dataclass
class ToolOutputGuardrailData(ToolInputGuardrailData):
    """What a tool output guardrail is given: the input guardrail's data and the result."""

    output: Any = None
    """The call's result as the model would see it (its text)."""


GuardrailFunction: TypeAlias = Callable[
    [Any], ToolGuardrailFunctionOutput | Awaitable[ToolGuardrailFunctionOutput]
]


@dataclass
class ToolInputGuardrail:
    """A check run in the agent actor before each call of the tools that list it."""

    guardrail_function: GuardrailFunction
    name: str | None = None

    def get_name(self) -> str:
        """The guardrail's name: ``name``, else the function's."""
        return self.name or str(getattr(self.guardrail_function, "__name__", "tool_guardrail"))


@dataclass
class ToolOutputGuardrail:
    """A check run in the agent actor after each call of the tools that list it."""

    guardrail_function: GuardrailFunction
    name: str | None = None

    def get_name(self) -> str:
        """The guardrail's name: ``name``, else the function's."""
        return self.name or str(getattr(self.guardrail_function, "__name__", "tool_guardrail"))


@overload
def tool_input_guardrail(func: GuardrailFunction, /) -> ToolInputGuardrail: ...
@overload
def tool_input_guardrail(
    *, name: str | None = None
) -> Callable[[GuardrailFunction], ToolInputGuardrail]: ...
def tool_input_guardrail(
    func: GuardrailFunction | None = None, /, *, name: str | None = None
) -> ToolInputGuardrail | Callable[[GuardrailFunction], ToolInputGuardrail]:
    """Make ``func(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput`` (sync or
    async) a tool input guardrail, named ``name`` or after the function."""

    def wrap(f: GuardrailFunction) -> ToolInputGuardrail:
        _check_callable("@tool_input_guardrail", f)
        return ToolInputGuardrail(f, name)

    return wrap(func) if func is not None else wrap


@overload
def tool_output_guardrail(func: GuardrailFunction, /) -> ToolOutputGuardrail: ...
@overload
def tool_output_guardrail(
    *, name: str | None = None
) -> Callable[[GuardrailFunction], ToolOutputGuardrail]: ...
def tool_output_guardrail(
    func: GuardrailFunction | None = None, /, *, name: str | None = None
) -> ToolOutputGuardrail | Callable[[GuardrailFunction], ToolOutputGuardrail]:
    """Make ``func(data: ToolOutputGuardrailData) -> ToolGuardrailFunctionOutput`` (sync or
    async) a tool output guardrail, named ``name`` or after the function."""

    def wrap(f: GuardrailFunction) -> ToolOutputGuardrail:
        _check_callable("@tool_output_guardrail", f)
        return ToolOutputGuardrail(f, name)

    return wrap(func) if func is not None else wrap


def _check_callable(owner: str, f: object) -> None:
    if not callable(f):
        raise UserError(f"{owner} needs a function, got {excerpt(repr(f), 80)}")


def check_tool_guardrails(
    owner: str, inputs: Sequence[Any] | None, outputs: Sequence[Any] | None
) -> tuple[tuple[ToolInputGuardrail, ...], tuple[ToolOutputGuardrail, ...]]:
    """A tool's guardrail lists as it keeps them.

    Raises:
        UserError: a list is not a list, or holds something other than a guardrail of its kind
            (an output guardrail in the input list, a plain function, ...), naming ``owner``.
    """
    checked: list[tuple[Any, ...]] = []
    for where, values, kind, label in (
        ("tool_input_guardrails", inputs, ToolInputGuardrail, "tool_input_guardrail"),
        ("tool_output_guardrails", outputs, ToolOutputGuardrail, "tool_output_guardrail"),
    ):
        if values is None:
            checked.append(())
            continue
        if isinstance(values, str | bytes) or not isinstance(values, Sequence):
            raise UserError(f"{owner}: {where} must be a list, got {excerpt(repr(values), 80)}")
        for i, guardrail in enumerate(values):
            if not isinstance(guardrail, kind):
                hint = f"decorate it with @{label}" if callable(guardrail) else f"use @{label}"
                raise UserError(
                    f"{owner}: {where}[{i}] is {excerpt(repr(guardrail), 80)}, not a "
                    f"{kind.__name__}: {hint}"
                )
        checked.append(tuple(values))
    return checked[0], checked[1]


async def run_tool_input_guardrails(
    guardrails: Sequence[ToolInputGuardrail], data: ToolInputGuardrailData
) -> str | None:
    """Run a call's input guardrails in order; the message of the first that rejects it, or
    None to run the call.

    Raises:
        ToolInputGuardrailTripped: one said ``raise_exception``.
        RaygentsError: one raised, or returned something that is not an output.
    """
    return await _run_all(guardrails, data, "input", "before", ToolInputGuardrailTripped)


async def run_tool_output_guardrails(
    guardrails: Sequence[ToolOutputGuardrail], data: ToolOutputGuardrailData
) -> str | None:
    """Run a call's output guardrails in order; the message of the first that rejects its
    result, or None to keep it.

    Raises:
        ToolOutputGuardrailTripped: one said ``raise_exception``.
        RaygentsError: one raised, or returned something that is not an output.
    """
    return await _run_all(guardrails, data, "output", "after", ToolOutputGuardrailTripped)


async def _run_all(
    guardrails: Sequence[ToolInputGuardrail] | Sequence[ToolOutputGuardrail],
    data: Any,
    kind: str,
    when: str,
    tripped: type[ToolInputGuardrailTripped] | type[ToolOutputGuardrailTripped],
) -> str | None:
    for guardrail in guardrails:
        output = await _run(guardrail, data, kind)
        behavior = output.behavior
        if behavior["type"] == "reject_content":
            return behavior["message"]
        if behavior["type"] == "raise_exception":
            raise tripped(
                f"tool {kind} guardrail {guardrail.get_name()!r} stopped the run {when} a call "
                f"of tool {data.context.tool_name!r}",
                guardrail=guardrail.get_name(),
                tool_name=data.context.tool_name,
                call_id=data.context.call_id,
                output_info=output.output_info,
            )
    return None


async def _run(
    guardrail: ToolInputGuardrail | ToolOutputGuardrail, data: Any, kind: str
) -> ToolGuardrailFunctionOutput:
    name, tool = guardrail.get_name(), data.context.tool_name
    where = f"tool {kind} guardrail {name!r} of tool {tool!r}"
    try:
        output = guardrail.guardrail_function(data)
        if inspect.isawaitable(output):
            output = await output
    except Exception as exc:
        raise RaygentsError(f"{where} raised {type(exc).__name__}: {excerpt(str(exc))}") from None
    behavior: Any = getattr(output, "behavior", None)
    kind_of = behavior.get("type") if isinstance(behavior, dict) else None
    valid = kind_of in ("allow", "raise_exception") or (
        kind_of == "reject_content" and isinstance(behavior.get("message"), str)
    )
    if not isinstance(output, ToolGuardrailFunctionOutput) or not valid:
        raise UserError(
            f"{where} returned {excerpt(repr(output), 120)}: it must return a "
            "ToolGuardrailFunctionOutput (allow, reject_content(message) or raise_exception)"
        )
    return output

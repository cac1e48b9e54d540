"""Guardrails: checks on a run's input and final message that can stop the run.

An input guardrail sees every message a run starts with (session history included) before the
first model call; an output guardrail sees the final assistant message. A guardrail returns
``None`` (pass) or a :class:`GuardrailResult`; a result with ``tripwire=True`` fails the run
with ``InputGuardrailTripped`` / ``OutputGuardrailTripped`` (see :mod:`raygents.errors`).
Guardrails travel inside agents to Ray actors, so they must pickle (cloudpickle). The
built-in ones are in :mod:`raygents.agents.builtin_guardrails`.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias, overload

from raygents.core.context import RunContext
from raygents.core.messages import Message
from raygents.core.schema import is_typed, parse_output
from raygents.errors import InputGuardrailTripped, OutputGuardrailTripped, RaygentsError, UserError

__all__ = [
    "FunctionInputGuardrail",
    "FunctionOutputGuardrail",
    "GuardrailResult",
    "InputGuardrail",
    "OutputGuardrail",
    "TripCallback",
    "bind_output_type",
    "check_guardrails",
    "guardrail_name",
    "input_guardrail",
    "output_guardrail",
    "run_input_guardrails",
    "run_output_guardrails",
]


@dataclass(frozen=True)
class GuardrailResult:
    """The verdict of one guardrail check."""

    tripwire: bool
    """Whether the guardrail stops the run."""
    message: str = ""
    """Why; it becomes part of the error message, so it must not repeat secrets."""
    output_info: Any = None
    """Anything else the guardrail found (picklable): the trip error carries it as
    ``output_info`` to the caller."""


GuardrailReturn: TypeAlias = GuardrailResult | bool | None
"""What a guardrail function may return: a result, ``True`` (trip), ``False`` or ``None``."""
InputCheck: TypeAlias = Callable[
    [RunContext, list[Message]], GuardrailReturn | Awaitable[GuardrailReturn]
]
OutputCheck: TypeAlias = Callable[..., GuardrailReturn | Awaitable[GuardrailReturn]]
"""``(ctx, message)``, or ``(ctx, message, output)`` to get the final output as the run's
result will hold it (an instance of the agent's ``output_type``, or the text)."""
TripCallback: TypeAlias = Callable[[str, GuardrailResult], Awaitable[None]]
"""``on_trip(name, result)``: awaited before the trip error is raised (for run hooks)."""


class InputGuardrail:
    """Base class of input guardrails; subclasses set ``name`` and implement :meth:`check`."""

    name: str = ""

    async def check(self, ctx: RunContext, messages: list[Message]) -> GuardrailResult | None:
        """Check the run's input messages; ``None`` or a result without tripwire passes."""
        raise NotImplementedError(f"{type(self).__name__}.check is not implemented")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {guardrail_name(self)!r}>"


class OutputGuardrail:
    """Base class of output guardrails; subclasses set ``name`` and implement :meth:`check`.

    In an agent actor, the guardrails of an agent with an ``output_type`` are copies with
    ``output_type`` set to it, so :meth:`output` can parse the final message.
    """

    name: str = ""
    output_type: Any = None

    def output(self, message: Message) -> Any:
        """The final output of ``message`` as the run's result holds it: an instance of
        ``output_type`` (parsed from the message's JSON), or the text for an untyped agent."""
        return parse_output(message.text, self.output_type)

    async def check(self, ctx: RunContext, message: Message) -> GuardrailResult | None:
        """Check the final assistant message; ``None`` or a result without tripwire passes."""
        raise NotImplementedError(f"{type(self).__name__}.check is not implemented")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {guardrail_name(self)!r}>"


def check_guardrails(owner: str, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
    """Check an agent's guardrail lists: an :class:`InputGuardrail` (or any object with a
    ``check`` method that is not an output guardrail) in ``inputs``, and the other way round.

    Raises:
        UserError: one is not, naming ``owner`` (the agent), the list and its place.
    """
    for field, values, kind, other in (
        ("input_guardrails", inputs, "input", OutputGuardrail),
        ("output_guardrails", outputs, "output", InputGuardrail),
    ):
        for i, guardrail in enumerate(values):
            where = f"{owner}: {field}[{i}]"
            if isinstance(guardrail, other):
                raise UserError(
                    f"{where} is an {'input' if kind == 'output' else 'output'} guardrail"
                )
            if inspect.isfunction(guardrail) or inspect.ismethod(guardrail):
                raise UserError(f"{where} is a function: decorate it with @{kind}_guardrail")
            if isinstance(guardrail, type) or not callable(getattr(guardrail, "check", None)):
                base = f"{kind.capitalize()}Guardrail"
                raise UserError(
                    f"{where}: {field} must be {base} objects (@{kind}_guardrail or a {base} "
                    f"subclass), got {guardrail!r:.80}"
                )


def guardrail_name(guardrail: object) -> str:
    """The guardrail's ``name``, or its class name when it has none."""
    name = getattr(guardrail, "name", "")
    return name if isinstance(name, str) and name else type(guardrail).__name__


# --- function guardrails -----------------------------------------------------------------


class FunctionInputGuardrail(InputGuardrail):
    """An input guardrail made from a function by :func:`input_guardrail`."""

    def __init__(self, fn: InputCheck, *, name: str | None = None) -> None:
        self.fn = fn
        self.name = _function_name(fn, name, "input_guardrail")
        self.__wrapped__ = fn

    async def check(self, ctx: RunContext, messages: list[Message]) -> GuardrailResult | None:
        """Call the function and turn its return value into a result."""
        return _to_result(await _maybe_await(self.fn(ctx, messages)), "input", self.name)


class FunctionOutputGuardrail(OutputGuardrail):
    """An output guardrail made from a function by :func:`output_guardrail`."""

    def __init__(self, fn: OutputCheck, *, name: str | None = None) -> None:
        self.fn = fn
        self.name = _function_name(fn, name, "output_guardrail", arities=(2, 3))
        self.with_output = _takes(fn, 3)
        """Whether the function takes the final output as a third argument."""
        self.__wrapped__ = fn

    async def check(self, ctx: RunContext, message: Message) -> GuardrailResult | None:
        """Call the function and turn its return value into a result."""
        args = (ctx, message, self.output(message)) if self.with_output else (ctx, message)
        return _to_result(await _maybe_await(self.fn(*args)), "output", self.name)


@overload
def input_guardrail(fn: InputCheck, /) -> FunctionInputGuardrail: ...


@overload
def input_guardrail(
    *, name: str | None = None
) -> Callable[[InputCheck], FunctionInputGuardrail]: ...


def input_guardrail(
    fn: InputCheck | None = None, /, *, name: str | None = None
) -> FunctionInputGuardrail | Callable[[InputCheck], FunctionInputGuardrail]:
    """Make ``fn(ctx, messages)`` (sync or async) into an :class:`InputGuardrail`.

    ``fn`` returns a :class:`GuardrailResult`, a bool (``True`` trips) or ``None`` (pass). A sync
    function runs on the agent actor's event loop, so keep it quick or make it ``async``.

    Args:
        fn: the function (when used as ``@input_guardrail`` without arguments).
        name: the guardrail's name in errors and hooks; the function's name by default.
    """
    if fn is not None:
        return FunctionInputGuardrail(fn, name=name)
    return lambda f: FunctionInputGuardrail(f, name=name)


@overload
def output_guardrail(fn: OutputCheck, /) -> FunctionOutputGuardrail: ...


@overload
def output_guardrail(
    *, name: str | None = None
) -> Callable[[OutputCheck], FunctionOutputGuardrail]: ...


def output_guardrail(
    fn: OutputCheck | None = None, /, *, name: str | None = None
) -> FunctionOutputGuardrail | Callable[[OutputCheck], FunctionOutputGuardrail]:
    """Make ``fn(ctx, message)`` (sync or async) into an :class:`OutputGuardrail`.

    ``fn`` returns a :class:`GuardrailResult`, a bool (``True`` trips) or ``None`` (pass).

    Args:
        fn: the function (when used as ``@output_guardrail`` without arguments).
        name: the guardrail's name in errors and hooks; the function's name by default.
    """
    if fn is not None:
        return FunctionOutputGuardrail(fn, name=name)
    return lambda f: FunctionOutputGuardrail(f, name=name)


def _function_name(
    fn: Callable[..., Any], name: str | None, decorator: str, arities: tuple[int, ...] = (2,)
) -> str:
    if not callable(fn):
        raise UserError(f"@{decorator} needs a function, got {type(fn).__name__!r}")
    if name is not None and (not isinstance(name, str) or not name):
        raise UserError(f"@{decorator}: name must be a non-empty str, got {name!r}")
    try:
        inspect.signature(fn).bind(None, None)
    except TypeError as exc:
        if not any(_takes(fn, n) for n in arities):
            shape = "(ctx, value)" + ("" if arities == (2,) else " or (ctx, message, output)")
            raise UserError(
                f"@{decorator} needs a function taking {shape}, but {fn!r} cannot: {exc}"
            ) from None
    except ValueError:  # no signature available (some builtins): find out when called
        pass
    return name or getattr(fn, "__name__", None) or type(fn).__name__


def _takes(fn: Callable[..., Any], count: int) -> bool:
    """Whether ``fn`` can be called with ``count`` positional arguments and requires them."""
    try:
        signature = inspect.signature(fn)
        signature.bind(*([None] * count))
    except (TypeError, ValueError):
        return False
    try:
        signature.bind(*([None] * (count - 1)))
    except TypeError:
        return True
    return False


def bind_output_type(guardrails: Sequence[Any], output_type: Any) -> list[Any]:
    """``guardrails`` with each :class:`OutputGuardrail` copied to know ``output_type`` (the
    same objects when there is nothing to bind)."""
    if not is_typed(output_type):
        return list(guardrails)
    bound = []
    for guardrail in guardrails:
        if isinstance(guardrail, OutputGuardrail) and guardrail.output_type is not output_type:
            guardrail = copy.copy(guardrail)
            guardrail.output_type = output_type
        bound.append(guardrail)
    return bound


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def _to_result(value: Any, kind: str, name: str) -> GuardrailResult | None:
    if value is None or value is False:
        return None
    if value is True:
        return GuardrailResult(True)
    if isinstance(value, GuardrailResult):
        return value
    raise RaygentsError(
        f'{kind} guardrail "{name}" returned a {type(value).__name__}: return a '
        "GuardrailResult, a bool (True trips) or None (pass)"
    )


# --- running guardrails --------------------------------------------------------------------


async def run_input_guardrails(
    guardrails: Sequence[InputGuardrail],
    ctx: RunContext,
    messages: Sequence[Message],
    *,
    on_trip: TripCallback | None = None,
) -> None:
    """Run input guardrails in order; the first trip stops the run.

    Args:
        guardrails: the agent's input guardrails.
        ctx: the run's context.
        messages: every message the run starts with (session history included); each
            guardrail gets its own list.
        on_trip: awaited with ``(name, result)`` before the trip error is raised.

    Raises:
        InputGuardrailTripped: a guardrail tripped; ``guardrail`` and ``guardrail_message``
            say which and why.
        RaygentsError: a guardrail raised or returned something unusable; the message names
            the guardrail and the error.
    """
    for guardrail in guardrails:
        name = guardrail_name(guardrail)
        result = await _check("input", name, ctx, guardrail.check, list(messages))
        if result is not None and result.tripwire:
            if on_trip is not None:
                await on_trip(name, result)
            raise InputGuardrailTripped(
                _trip_text("input", name, result.message),
                run_id=ctx.run_id,
                guardrail=name,
                guardrail_message=result.message,
                output_info=result.output_info,
            )


async def run_output_guardrails(
    guardrails: Sequence[OutputGuardrail],
    ctx: RunContext,
    message: Message,
    *,
    on_trip: TripCallback | None = None,
) -> None:
    """Run output guardrails in order on the final message; the first trip stops the run.

    Args:
        guardrails: the final agent's output guardrails.
        ctx: the run's context.
        message: the final assistant message.
        on_trip: awaited with ``(name, result)`` before the trip error is raised.

    Raises:
        OutputGuardrailTripped: a guardrail tripped; ``guardrail`` and ``guardrail_message``
            say which and why.
        RaygentsError: a guardrail raised or returned something unusable; the message names
            the guardrail and the error.
    """
    for guardrail in guardrails:
        name = guardrail_name(guardrail)
        result = await _check("output", name, ctx, guardrail.check, message)
        if result is not None and result.tripwire:
            if on_trip is not None:
                await on_trip(name, result)
            raise OutputGuardrailTripped(
                _trip_text("output", name, result.message),
                run_id=ctx.run_id,
                guardrail=name,
                guardrail_message=result.message,
                output_info=result.output_info,
            )


async def _check(
    kind: str, name: str, ctx: RunContext, check: Callable[[RunContext, Any], Any], value: Any
) -> GuardrailResult | None:
    try:
        out = await _maybe_await(check(ctx, value))
    except Exception as exc:  # any failure of user code: report it without the foreign type
        raise RaygentsError(
            f'cannot run {kind} guardrail "{name}": {type(exc).__name__}: {exc}',
            run_id=ctx.run_id,
        ) from exc
    return _to_result(out, kind, name)


def _trip_text(kind: str, name: str, message: str) -> str:
    head = f'{kind} guardrail "{name}" tripped'
    return f"{head}: {message}" if message else head

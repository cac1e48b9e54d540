"""RunContext and the predicate types: what every callback is given."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic

from typing_extensions import TypeVar

from raygents.core.messages import Usage
from raygents.errors import UserError, excerpt

__all__ = ["IsEnabled", "NeedsApproval", "RunContext", "TContext", "is_enabled"]

NeedsApproval = bool | Callable[..., Any]
"""``needs_approval`` of a tool: always (``True``), never (``False``), or a predicate
``(RunContext, arguments) -> bool`` (sync or async) asked per call, ``arguments`` being the
call's JSON arguments as a dict; a predicate with a third parameter also gets the call id."""

IsEnabled = bool | Callable[..., Any]
"""``is_enabled`` of a tool or handoff: whether the model is offered it, or a predicate
``(RunContext, Agent) -> bool`` (sync or async) asked in the agent actor each time the agent
becomes active."""


TContext = TypeVar("TContext", default=Any)
"""The type of the user's run context (``RunContext[MyContext]``, ``Agent[MyContext]``)."""


@dataclass(frozen=True)
class RunContext(Generic[TContext]):
    """What dynamic instructions and guardrails know about the run (``RunContext[T]`` for a
    context of type ``T``)."""

    run_id: str
    agent_name: str
    context: Any = None
    turns: int = 0
    usage: Usage = dataclasses.field(default_factory=Usage)


async def is_enabled(owner: str, value: IsEnabled, ctx: RunContext, agent: object) -> bool:
    """Whether a tool or handoff is offered now (see :data:`IsEnabled`); ``agent`` (the
    ``Agent`` that offers it) is handed to the predicate as it is.

    Raises:
        UserError: the predicate raised or returned something other than a bool.
    """
    if isinstance(value, bool):
        return value
    try:
        verdict = value(ctx, agent)
        if inspect.isawaitable(verdict):
            verdict = await verdict
    except Exception as exc:
        raise UserError(
            f"{owner}: its is_enabled function raised {type(exc).__name__}: {excerpt(str(exc))}"
        ) from None
    if not isinstance(verdict, bool):
        raise UserError(
            f"{owner}: its is_enabled function must return a bool, got {excerpt(repr(verdict), 80)}"
        )
    return verdict

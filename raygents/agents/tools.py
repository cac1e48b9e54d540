"""Tools: the ``@tool`` decorator, custom ``Tool`` classes, and what a tool call sees."""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, get_origin, overload

from pydantic import BaseModel, ValidationError

from raygents.agents.checks import (
    ExecutionOptions,
    check_needs_approval,
    check_options,
    check_resources,
    check_tool_name,
    parameters_problem,
)
from raygents.agents.params import (
    args_model,
    function_name,
    function_parameters,
    parsed_arguments,
    signature,
)
from raygents.agents.toolguardrails import (
    ToolInputGuardrail,
    ToolOutputGuardrail,
    check_tool_guardrails,
)
from raygents.core.context import IsEnabled, NeedsApproval, RunContext, is_enabled
from raygents.core.doubt import OnRecovery
from raygents.core.messages import ToolCall, ToolResult, ToolSpec
from raygents.core.schema import drop_defaulted_nulls
from raygents.core.toolcall import ToolContext, result_parts, result_text, split_arguments
from raygents.errors import EXCERPT, UserError, excerpt

__all__ = [
    "FunctionTool",
    "IsEnabled",
    "NeedsApproval",
    "RunContext",
    "Tool",
    "ToolContext",
    "ToolResult",
    "is_enabled",
    "tool",
]

F = TypeVar("F", bound=Callable[..., Any])


class Tool:
    """Base class for custom tools.

    Subclasses set ``name``, ``description`` and ``parameters`` (a JSON schema object) and
    implement :meth:`execute`. Execution options (``num_cpus``, ``timeout_s``, ``remote``, ...)
    are class or instance attributes with the same meaning as in :func:`tool`.
    """

    name: str = ""
    description: str = ""
    parameters: dict[str, Any] = {"type": "object", "properties": {}}  # noqa: RUF012
    num_cpus: float | None = None
    num_gpus: float | None = None
    resources: Mapping[str, float] | None = None
    max_retries: int | None = None
    timeout_s: float | None = None
    needs_approval: NeedsApproval = False
    remote: bool = True
    is_enabled: IsEnabled = True
    on_recovery: OnRecovery = "rerun"
    tool_input_guardrails: tuple[ToolInputGuardrail, ...] = ()
    """Checks run in the agent actor before each call (see
    :mod:`~raygents.agents.toolguardrails`)."""
    tool_output_guardrails: tuple[ToolOutputGuardrail, ...] = ()
    """Checks run in the agent actor after each call returned."""
    _checked_parameters: Any = None
    """The ``parameters`` object last found usable (checking one is slow: done once)."""

    async def execute(self, ctx: ToolContext, arguments: str) -> ToolResult:
        """Run the tool with the model's JSON ``arguments``."""
        raise NotImplementedError(f"{type(self).__name__}.execute is not implemented")

    def spec(self) -> ToolSpec:
        """What the model sees of this tool.

        Raises:
            UserError: the name is not 1-64 letters, digits, ``_`` or ``-``, or ``parameters``
                is not a JSON schema of an object that raygents can check arguments against
                (see :func:`parameters_problem`).
        """
        check_tool_name(self.name)
        if self.parameters is not self._checked_parameters:
            problem = parameters_problem(self.parameters)
            if problem is not None:
                raise UserError(
                    f"tool {self.name!r} has parameters that cannot be used: {problem}; "
                    "fix its JSON schema"
                )
            self._checked_parameters = self.parameters
        return ToolSpec(name=self.name, description=self.description, parameters=self.parameters)

    def options(self) -> ExecutionOptions:
        """The tool's execution options."""
        return ExecutionOptions(
            num_cpus=self.num_cpus,
            num_gpus=self.num_gpus,
            resources=self.resources,
            max_retries=self.max_retries,
            timeout_s=self.timeout_s,
            needs_approval=self.needs_approval,
            remote=self.remote,
            is_enabled=self.is_enabled,
            on_recovery=self.on_recovery,
        )

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


class FunctionTool(Tool):
    """A tool made from a Python function by :func:`tool`."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        options: ExecutionOptions = ExecutionOptions(),
        tool_input_guardrails: Sequence[ToolInputGuardrail] | None = None,
        tool_output_guardrails: Sequence[ToolOutputGuardrail] | None = None,
    ) -> None:
        if not callable(fn):
            raise UserError(f"@tool needs a function, got {type(fn).__name__!r}")
        self.fn = fn
        default_name = function_name(fn)
        if not name and default_name is None:
            raise UserError(f"@tool: {excerpt(repr(fn), 80)} has no __name__: pass name=")
        self.name = name or default_name or ""
        check_tool_name(self.name)
        check_needs_approval(self.name, options.needs_approval)
        params = list(signature(fn).parameters.values())
        self.takes_context = bool(params) and _is_context_param(params[0])
        self.positional = tuple(
            p.name for p in params[1 if self.takes_context else 0 :] if p.kind is p.POSITIONAL_ONLY
        )
        """The parameters the function takes by position only (its calls pass them so)."""
        try:
            schema, model, fields, docs = function_parameters(fn, skip_first=self.takes_context)
        except Exception as exc:
            raise UserError(f"cannot build a schema for tool {self.name!r}: {exc}") from exc
        self.parameters = self._checked_parameters = schema  # (made here: usable)
        self._arg_fields = fields
        self._args_model: type[BaseModel] | None = model
        self.raw_schema = model.model_json_schema()
        self.description = description if description is not None else docs[""]
        for field in dataclasses.fields(options):
            setattr(self, field.name, getattr(options, field.name))
        self.tool_input_guardrails, self.tool_output_guardrails = check_tool_guardrails(
            f"tool {self.name!r}", tool_input_guardrails, tool_output_guardrails
        )
        self.__wrapped__ = fn

    @property
    def args_model(self) -> type[BaseModel]:
        """The pydantic model that parses the arguments."""
        if self._args_model is None:
            name = function_name(self.fn) or "tool"  # (as function_parameters names it)
            self._args_model = args_model(f"{name}_args", self._arg_fields)
        return self._args_model

    def return_type(self) -> Any:
        """The type the function declares it returns (``inspect.Parameter.empty`` if none)."""
        return signature(self.fn).return_annotation

    def argument_types(self) -> list[Any]:
        """The types of the function's arguments (the tool context's aside)."""
        return [annotation for annotation, _, _ in self._arg_fields.values()]

    def __getstate__(self) -> dict[str, Any]:
        # The arguments' model is a class made at run time: cloudpickle would copy it whole
        # (most of a graph snapshot's bytes and time); the process that loads the tool builds
        # it again from its fields on first use.
        state = self.__dict__.copy()
        state["_args_model"] = None
        return state

    def parse_arguments(self, arguments: str) -> dict[str, Any] | ToolResult:
        """The keyword arguments of a call, from the model's JSON ``arguments``; or, when they
        are invalid, the error result the model sees."""
        try:
            raw = json.loads(arguments or "{}")
            value = drop_defaulted_nulls(raw, self.raw_schema)
            parsed = self.args_model.model_validate(value)
        except (ValidationError, ValueError, RecursionError) as exc:
            reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
            message = f'Invalid parameters for tool "{self.name}": {excerpt(reason, 3 * EXCERPT)}'
            return ToolResult(message, is_error=True)
        return parsed_arguments(parsed)

    async def execute(self, ctx: ToolContext, arguments: str) -> ToolResult:
        """Parse the arguments, call the function, and turn its return value into a result."""
        kwargs = self.parse_arguments(arguments)
        if isinstance(kwargs, ToolResult):
            return kwargs
        args, keywords = split_arguments(kwargs, self.positional)
        out = self.fn(*([ctx] if self.takes_context else []), *args, **keywords)
        if inspect.isawaitable(out):
            out = await out
        return to_tool_result(out)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the underlying function directly (handy in tests)."""
        return self.fn(*args, **kwargs)


def _is_context_param(param: inspect.Parameter) -> bool:
    annotation = param.annotation
    if annotation is ToolContext or get_origin(annotation) is ToolContext:
        return True
    if isinstance(annotation, str) and annotation.partition("[")[0] == "ToolContext":
        return True
    return param.name == "ctx" and annotation is inspect.Parameter.empty


async def call_needs_approval(t: Tool, ctx: RunContext, call: ToolCall) -> bool:
    """Whether ``call`` of tool ``t`` needs a human's approval (see :data:`NeedsApproval`).

    Raises:
        UserError: the tool's ``needs_approval`` is not a bool or a predicate, or its predicate
            raised or returned something other than a bool.
    """
    rule = t.needs_approval
    if isinstance(rule, bool):
        return rule
    check_needs_approval(t.name, rule)
    try:
        arguments = json.loads(call.arguments or "{}")
    except (ValueError, RecursionError):
        return True  # (never shown to the predicate: a human looks at it)
    if not isinstance(arguments, dict):
        return True
    args = (ctx, arguments, call.id) if _takes_call_id(rule) else (ctx, arguments)
    try:
        verdict = rule(*args)
        if inspect.isawaitable(verdict):
            verdict = await verdict
    except Exception as exc:
        raise UserError(
            f"tool {t.name!r}: its needs_approval function raised "
            f"{type(exc).__name__}: {excerpt(str(exc))}"
        ) from None
    if not isinstance(verdict, bool):
        raise UserError(
            f"tool {t.name!r}: its needs_approval function must return a bool, "
            f"got {excerpt(repr(verdict), 80)}"
        )
    return verdict


def _takes_call_id(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` takes a third positional argument (the call id, as the SDK passes)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 3 or any(p.kind == p.VAR_POSITIONAL for p in params)


def to_tool_result(value: Any) -> ToolResult:
    """Turn a tool function's return value into a :class:`ToolResult`."""
    if isinstance(value, ToolResult):
        return value
    return ToolResult(*result_text(value), parts=result_parts(value))


@overload
def tool(fn: F, /) -> FunctionTool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    num_cpus: float | None = None,
    num_gpus: float | None = None,
    resources: Mapping[str, float] | None = None,
    max_retries: int | None = None,
    timeout_s: float | None = None,
    needs_approval: NeedsApproval = False,
    remote: bool = True,
    is_enabled: IsEnabled = True,
    on_recovery: OnRecovery = "rerun",
    tool_input_guardrails: Sequence[ToolInputGuardrail] | None = None,
    tool_output_guardrails: Sequence[ToolOutputGuardrail] | None = None,
) -> Callable[[F], FunctionTool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    num_cpus: float | None = None,
    num_gpus: float | None = None,
    resources: Mapping[str, float] | None = None,
    max_retries: int | None = None,
    timeout_s: float | None = None,
    needs_approval: NeedsApproval = False,
    remote: bool = True,
    is_enabled: IsEnabled = True,
    on_recovery: OnRecovery = "rerun",
    tool_input_guardrails: Sequence[ToolInputGuardrail] | None = None,
    tool_output_guardrails: Sequence[ToolOutputGuardrail] | None = None,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Make a function into a tool; its schema comes from the signature and docstring.

    Args:
        fn: the function (when used as ``@tool`` without arguments).
        name: the tool name; the function name by default.
        description: the description; the docstring's summary by default.
        num_cpus: CPUs the Ray task reserves (Ray's default, 1, when unset).
        num_gpus: GPUs the Ray task reserves.
        resources: custom Ray resources the task reserves. A call whose task no node alive
            can hold is an error tool message at once (with ``timeout_s``: after waiting that
            long for one, as on an autoscaling cluster).
        max_retries: how often Ray retries the task after its worker died.
        timeout_s: after this many seconds the call becomes an error tool message.
        needs_approval: ``True``: every call waits for a human decision; or a predicate
            ``(ctx, arguments) -> bool`` (sync or async), asked in the agent actor for each
            call with the :class:`RunContext` and the call's arguments as a dict (a third
            parameter, if it takes one, gets the call id): the calls it answers ``True`` for
            wait. A call whose arguments are not a JSON object waits without asking it.
        remote: run each call as a Ray task (default); ``False`` runs it inside the agent actor,
            for cheap non-blocking tools.
        is_enabled: whether the model is offered the tool: a bool, or a predicate
            ``(ctx, agent) -> bool`` (sync or async) asked in the agent actor each time the
            agent becomes active.
        on_recovery: what recovery does with a call that started but left no result (its
            agent's actor or node died, or its task was lost): ``"rerun"`` (default) runs it
            again with the same idempotency key; ``"ask"`` runs it at most once: the run stops
            ``"in_doubt"`` (``RunInDoubt``) until ``resume(..., resolutions=...)`` says to run
            it again or gives its result. For effects whose other side ignores idempotency keys.
        tool_input_guardrails: ``@tool_input_guardrail`` checks run in the agent actor
            before each call's task starts (see :mod:`~raygents.agents.toolguardrails`).
        tool_output_guardrails: ``@tool_output_guardrail`` checks run in the agent actor
            after each call returned, before its ``tool_end`` event and hook.
    """
    owner = f"tool {name!r}" if name else "@tool"
    if description is not None and not isinstance(description, str):
        raise UserError(f"{owner}: description must be a str, got {excerpt(repr(description), 80)}")
    check_resources(owner, resources)
    options = ExecutionOptions(
        num_cpus=num_cpus,
        num_gpus=num_gpus,
        resources=dict(resources) if resources else None,
        max_retries=max_retries,
        timeout_s=timeout_s,
        needs_approval=needs_approval,
        remote=remote,
        is_enabled=is_enabled,
        on_recovery=on_recovery,
    )
    check_options(owner, options)
    check_tool_guardrails(owner, tool_input_guardrails, tool_output_guardrails)

    def wrap(f: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(
            f,
            name=name,
            description=description,
            options=options,
            tool_input_guardrails=tool_input_guardrails,
            tool_output_guardrails=tool_output_guardrails,
        )

    return wrap(fn) if fn is not None else wrap

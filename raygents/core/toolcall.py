"""A tool call as a Ray worker sees it: its :class:`ToolContext`, and the text of its result.

Only the standard library here: a Ray worker that runs a function tool loads this module, and
neither raygents' model classes nor the tool's argument model (which would cost every fresh
worker their import time).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass
from typing import Any, Generic

from typing_extensions import TypeVar

__all__ = [
    "ToolContext",
    "clean_text",
    "idempotency_key",
    "result_parts",
    "result_text",
    "split_arguments",
]


_C = TypeVar("_C", default=Any)


@dataclass(frozen=True)
class ToolContext(Generic[_C]):
    """What a tool call knows about the run that made it (``ToolContext[T]`` for a context of
    type ``T``)."""

    run_id: str
    call_id: str
    tool_name: str
    agent_name: str
    depth: int = 0
    context: Any = None
    """The run context (see ``run(..., context=...)``): a tool task's writes to it are
    carried back to the run when its batch ends."""
    tool_arguments: str = ""
    """The call's JSON arguments, as tool guardrails see them (a tool gets them parsed, as
    its parameters, and this is left empty)."""

    @property
    def idempotency_key(self) -> str:
        """A key stable across retries and recovery of this call: ``"<run_id>:<call_id>"``."""
        return idempotency_key(self.run_id, self.call_id)


def idempotency_key(run_id: str, call_id: str) -> str:
    """The idempotency key of call ``call_id`` of run ``run_id``."""
    return f"{run_id}:{call_id}"


def split_arguments(
    kwargs: dict[str, Any], positional: tuple[str, ...]
) -> tuple[list[Any], dict[str, Any]]:
    """A function tool's checked arguments as its function takes them: the values of its
    positional-only parameters (``positional``, in order) and the rest by keyword."""
    if not positional:
        return [], kwargs
    rest = dict(kwargs)
    return [rest.pop(name) for name in positional], rest


def clean_text(value: Any) -> Any:
    """``value`` with lone surrogates replaced by U+FFFD when it is a string that UTF-8 cannot
    encode (a surrogate pair becomes its character); any other value as it is.

    Python strings may hold lone surrogates (``os.listdir`` gives ``'report-\\udcff.txt'`` for
    a file name that is not UTF-8); checkpoints, sessions and model providers need UTF-8.
    """
    if not isinstance(value, str):
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return value


def result_text(value: Any) -> tuple[str, bool]:
    """A tool function's return value as the text the model sees, and whether it is an error.

    A string as it is; a ``ToolResult`` as its content; a pydantic model, a dataclass or any
    JSON-serialisable value as JSON; anything else is an error. The text is always valid
    UTF-8 (see :func:`clean_text`; ``json.dumps`` escapes lone surrogates itself). Pydantic
    values can only exist where pydantic is loaded, so they are recognised without importing
    it.
    """
    if isinstance(value, str):
        return clean_text(value), False
    tools = sys.modules.get("raygents.agents.tools")
    if tools is not None and isinstance(value, tools.ToolResult):
        return clean_text(value.content), value.is_error
    parts = result_parts(value)
    if parts:
        return clean_text("".join(getattr(p, "text", "") for p in parts)), False
    model = _base_model()
    if model is not None and isinstance(value, model):
        return value.model_dump_json(), False
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    try:
        return json.dumps(value, default=_json_default), False
    except (TypeError, ValueError) as exc:
        return f"Error: tool returned a value that is not JSON: {exc}", True


def result_parts(value: Any) -> tuple[Any, ...]:
    """The content parts of a tool's return value: a part (an image, say), a list holding
    parts (and strings, which become text parts), a ``ToolResult`` with parts, or the OpenAI
    Agents SDK's tool output dicts (``{"type": "image", "image_url": ...}``, ``{"type":
    "file", "file_data": ..., "filename": ...}``, alone or in a list); ``()`` for any other
    value. Parts objects can only exist where :mod:`raygents.core.parts` is loaded.

    Raises:
        UserError: an SDK image or file dict is not one raygents takes (bad base64, say).
    """
    if _sdk_output(value):
        from raygents.core import parts as loaded  # (only for a tool that returns one)

        items = value if isinstance(value, list) else [value]
        return tuple(loaded.to_parts(items))
    module = sys.modules.get("raygents.core.parts")
    if module is None:
        return ()
    kinds = (module.TextPart, module.ImagePart, module.FilePart)
    if isinstance(value, kinds[1:]):
        return (value,)
    tools = sys.modules.get("raygents.agents.tools")
    if tools is not None and isinstance(value, tools.ToolResult):
        return tuple(value.parts)
    some = isinstance(value, list | tuple) and any(isinstance(v, kinds[1:]) for v in value)
    if some and all(isinstance(v, (str, *kinds)) for v in value):
        return tuple(module.to_parts(value))
    return ()


def _sdk_output(value: Any) -> bool:
    """Whether ``value`` is one of the Agents SDK's image or file tool outputs, or a list of
    them (text ones allowed beside)."""

    def media(item: Any) -> bool:
        if not isinstance(item, dict) or item.get("type") not in ("image", "file"):
            return False
        return any(k in item for k in ("image_url", "file_data", "file_id", "file_url"))

    def text(item: Any) -> bool:
        return isinstance(item, dict) and item.get("type") == "text" and "text" in item

    if isinstance(value, list) and any(media(v) for v in value):
        return all(media(v) or text(v) for v in value)
    return media(value)


def _json_default(value: Any) -> Any:
    model = _base_model()
    if model is not None and isinstance(value, model):
        return value.model_dump(mode="json")
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _base_model() -> Any:
    """pydantic's ``BaseModel`` where pydantic is loaded, else ``None``."""
    pydantic = sys.modules.get("pydantic")
    return None if pydantic is None else pydantic.BaseModel

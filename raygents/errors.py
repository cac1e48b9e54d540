"""The raygents exception tree; every error survives a pickle round trip.

    RaygentsError
    ├── UserError                  bad input or configuration from the caller
    │   └── CheckpointNotFound     a run has no checkpoint of that seq (``seq``)
    ├── LimitExceeded              a run reached a limit (``limit``, ``value``)
    │   ├── MaxTurnsExceeded       its turn limit, or its model-call budget
    │   ├── MaxToolDepthExceeded   agent-as-tool nesting reached its depth limit
    │   └── UsageLimitExceeded     its token or dollar budget (``max_tokens``, ``max_cost_usd``)
    ├── InputGuardrailTripped      an input guardrail stopped the run
    ├── OutputGuardrailTripped     an output guardrail rejected the final message
    ├── ToolInputGuardrailTripped  a tool input guardrail stopped the run before a call
    ├── ToolOutputGuardrailTripped a tool output guardrail stopped the run after a call
    ├── SuspendedError             the run suspended gracefully; resume it later
    ├── RunCancelled               the run was cancelled; it cannot be resumed
    ├── RunInterrupted             the run waits for approval of tool calls
    ├── ApprovalDecisionsMismatch  approval decisions do not cover the pending set
    ├── RunInDoubt                 the run waits for a person to resolve calls in doubt
    ├── ResolutionsMismatch        resolutions do not cover the calls in doubt
    ├── ToolNotFound               the model called a tool the agent does not have
    ├── ModelError                 the model provider failed or answered badly
    ├── ModelOutputError           malformed model output past ``max_output_retries``
    ├── OutputValidationError      typed output failed its schema or type
    ├── RunNotFound                no run with that id is known
    ├── TooManyRuns                a tenant has ``max_concurrent_runs`` runs in flight
    ├── PayloadTooLarge            a payload is over its size cap (``MAX_PAYLOAD_BYTES``)
    │   └── CheckpointTooLarge     a checkpoint record is over its cap (also a CheckpointError)
    └── CheckpointError            a checkpoint could not be stored or loaded
        ├── CheckpointCorrupt      checkpoint bytes failed their integrity checks
        └── CheckpointTooLarge     (the same class: it is both)

Errors can be built from a message alone; every other field is a keyword argument and is kept
when the error crosses a process boundary. A message that is not text (``MaxTurnsExceeded(3)``)
is made text with ``str()``, and so is a run id. A message quotes a value made by a model or a
user through :func:`excerpt`, so that it stays short.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Literal

__all__ = [
    "MAX_PAYLOAD_BYTES",
    "SUSPEND_FOR_CHECKPOINT",
    "ApprovalDecisionsMismatch",
    "CheckpointCorrupt",
    "CheckpointError",
    "CheckpointNotFound",
    "CheckpointTooLarge",
    "InputGuardrailTripped",
    "LimitExceeded",
    "MaxToolDepthExceeded",
    "MaxTurnsExceeded",
    "ModelError",
    "ModelOutputError",
    "OutputGuardrailTripped",
    "OutputValidationError",
    "PayloadTooLarge",
    "RaygentsError",
    "ResolutionsMismatch",
    "RunCancelled",
    "RunInDoubt",
    "RunInterrupted",
    "RunNotFound",
    "SuspendedError",
    "TooManyRuns",
    "ToolInputGuardrailTripped",
    "ToolNotFound",
    "ToolOutputGuardrailTripped",
    "UsageLimitExceeded",
    "UserError",
]

SUSPEND_FOR_CHECKPOINT = "suspend_for_checkpoint"
"""The cause of a graceful suspend asked for by a user or a driver shutting down."""
CANCEL = "raygents:cancel"
"""The cause of a cancel: a suspend request that stops the run at once (see ``cancel``)."""
EXCERPT = 200
"""How much of a model-made value an error message quotes."""


def excerpt(value: str, limit: int = EXCERPT) -> str:
    """``value`` cut to ``limit`` characters, with how much was left out."""
    if len(value) <= limit:
        return value
    return f"{value[:limit]}... ({len(value) - limit} more characters)"


class RaygentsError(Exception):
    """Base of every raygents error.

    Attributes:
        message: the human-readable description.
        run_id: the run the error belongs to, when there is one.
    """

    _fields: tuple[str, ...] = ()

    def __init__(self, message: object = "", *, run_id: object = None, **fields: Any) -> None:
        text = _text(message)
        super().__init__(text)
        self.message: str = text
        self.run_id: str | None = None if run_id is None else _text(run_id)
        unknown = set(fields) - set(self._fields)
        if unknown:
            raise TypeError(f"{type(self).__name__} got unexpected fields {sorted(unknown)!r}")
        for name in self._fields:
            setattr(self, name, fields.get(name))

    def __reduce__(self) -> tuple[Any, ...]:
        state = {name: getattr(self, name) for name in self._fields}
        return (_rebuild, (type(self), self.message, self.run_id, state))

    def __str__(self) -> str:
        if self.run_id and self.run_id not in self.message:
            return f"{self.message} (run {self.run_id})"
        return self.message

    def with_run_id(self, run_id: str) -> RaygentsError:
        """Set the run id if the error has none yet, and return the error."""
        if self.run_id is None:
            self.run_id = run_id
        return self


def _text(value: object) -> str:
    """``value`` as text: a string as it is, ``None`` as ``""``, anything else by ``str()``."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    try:
        return str(value)
    except Exception:  # a value whose __str__ fails must not make the error unprintable
        return f"<{type(value).__name__} that cannot be shown>"


def _rebuild(
    cls: type[RaygentsError], message: str, run_id: str | None, state: dict[str, Any]
) -> RaygentsError:
    return cls(message, run_id=run_id, **state)


class UserError(RaygentsError):
    """The caller passed something raygents cannot use; the message says what to change."""


class CheckpointNotFound(UserError):
    """A run has no durable checkpoint of that seq (see ``raygents.history``).

    Attributes:
        seq: the seq asked for.
    """

    _fields = ("seq",)
    seq: int | None


class LimitExceeded(RaygentsError):
    """A run reached one of its limits; ``except LimitExceeded`` catches every one.

    Attributes:
        limit: the name of the limit: ``"max_turns"``, ``"max_model_calls"``,
            ``"max_tool_depth"``, ``"max_tokens"`` or ``"max_cost_usd"``.
        value: the limit's value in the run, when known.
    """

    _fields: tuple[str, ...] = ("limit", "value")
    limit: str | None
    value: int | None
    _default_limit: str | None = None
    _alias: str | None = None
    """The older field of a subclass that holds the same number as ``value``."""

    def __init__(self, message: object = "", *, run_id: object = None, **fields: Any) -> None:
        super().__init__(message, run_id=run_id, **fields)
        if self.limit is None:
            self.limit = self._default_limit
        if self._alias is not None:
            if self.value is None:
                self.value = getattr(self, self._alias)
            if getattr(self, self._alias) is None:
                setattr(self, self._alias, self.value)


class UsageLimitExceeded(LimitExceeded):
    """The run used its budget of tokens (``run(max_tokens=)``, ``limit`` ``"max_tokens"``,
    ``value`` the budget) or of dollars (``run(max_cost_usd=)``, ``limit``
    ``"max_cost_usd"``), its agent-as-tool children's included; ``used``: the tokens (or
    dollars) it had used when it stopped."""

    _fields = ("limit", "value", "used")
    value: float | None  # type: ignore[assignment]
    used: float | None
    _default_limit = "max_tokens"


class MaxTurnsExceeded(LimitExceeded):
    """The active agent reached ``max_turns`` model calls (``limit`` ``"max_turns"``), or the
    run its budget of model calls (``limit`` ``"max_model_calls"``).

    ``max_turns`` is the same number as ``value``.
    """

    _fields = ("limit", "value", "max_turns")
    max_turns: int | None
    _default_limit = "max_turns"
    _alias = "max_turns"


class MaxToolDepthExceeded(LimitExceeded):
    """An agent-as-tool call would nest deeper than the callee's ``max_tool_depth``.

    ``limit`` is ``"max_tool_depth"``; ``max_depth`` is the same number as ``value``.
    """

    _fields = ("limit", "value", "max_depth")
    max_depth: int | None
    _default_limit = "max_tool_depth"
    _alias = "max_depth"


class InputGuardrailTripped(RaygentsError):
    """An input guardrail rejected the run's input before any model call; ``output_info``
    is what its ``GuardrailResult`` carried."""

    _fields = ("guardrail", "guardrail_message", "output_info")


class OutputGuardrailTripped(RaygentsError):
    """An output guardrail rejected the final message; ``output_info`` is what its
    ``GuardrailResult`` carried."""

    _fields = ("guardrail", "guardrail_message", "output_info")


class ToolInputGuardrailTripped(RaygentsError):
    """A tool input guardrail (``raise_exception``) stopped the run before the call of tool
    ``tool_name`` ran (``call_id``); ``output_info`` is what the guardrail's output carried."""

    _fields = ("guardrail", "tool_name", "call_id", "output_info")


class ToolOutputGuardrailTripped(RaygentsError):
    """A tool output guardrail (``raise_exception``) stopped the run after the call of tool
    ``tool_name`` returned (``call_id``); ``output_info`` is what the guardrail's output
    carried."""

    _fields = ("guardrail", "tool_name", "call_id", "output_info")


class SuspendedError(RaygentsError):
    """The run stopped at a safe point with a checkpoint; ``resume(run_id)`` continues it.

    ``checkpoint`` carries the checkpoint inline only when it could not be stored.
    """

    _fields = ("cause", "checkpoint")
    cause: str | None
    checkpoint: Any


class RunCancelled(RaygentsError):
    """The run was cancelled (``RunHandle.cancel`` or ``raygents.cancel``): it stopped at
    once, its model call abandoned and its tool tasks and children cancelled. Its records
    stay in the store; it cannot be resumed."""


class RunInterrupted(RaygentsError):
    """Tool calls need approval; resume with a decision for each of ``pending``.

    ``interruptions`` is ``pending`` by the OpenAI Agents SDK's name, and :meth:`to_state`
    the SDK's ``RunState`` of the run (approve or reject each call on it, then pass it to
    ``run``), when the error comes from a run's result.
    """

    _fields = ("pending", "state")
    pending: list[Any] | None
    state: Any

    @property
    def interruptions(self) -> list[Any]:
        """The calls waiting for a decision (``pending``)."""
        return list(self.pending or [])

    def to_state(self) -> Any:
        """The run's :class:`~raygents.RunState`, to decide on and pass back to ``run``.

        Raises:
            UserError: the error was not raised by a run's result (it has no state).
        """
        if self.state is None:
            raise UserError(
                "this RunInterrupted has no state (it was not raised by a run's result): use "
                "raygents.resume(run_id, agent=..., approvals=...)",
                run_id=self.run_id,
            )
        return self.state


class ApprovalDecisionsMismatch(RaygentsError):
    """Approval decisions must cover exactly the pending calls of an interrupted run."""


class RunInDoubt(RaygentsError):
    """Calls of ``on_recovery="ask"`` tools may or may not have had their effect (the run
    was lost while they ran): the run stopped, ``in_doubt``, until a person resolves each
    of ``calls`` (``InDoubt``) with ``resume(run_id, agent=..., resolutions=...)``."""

    _fields = ("calls",)
    calls: list[Any] | None


class ResolutionsMismatch(RaygentsError):
    """Resolutions must cover exactly the calls in doubt of a run (``missing`` and
    ``unknown`` call ids)."""

    _fields = ("missing", "unknown")
    missing: list[str] | None
    unknown: list[str] | None


class ToolNotFound(RaygentsError):
    """The model called a tool that the active agent does not have."""

    _fields = ("tool_name",)
    tool_name: str | None


class ModelError(RaygentsError):
    """The model provider failed, refused, or answered with something unusable."""

    _fields = ("status_code", "retryable")


class ModelOutputError(RaygentsError):
    """The model kept sending malformed output (tool arguments that are not a JSON object)
    after the run had used its ``max_output_retries`` corrections.

    The message names the agent and what was wrong, and quotes an excerpt of the output
    (cut short, and withheld when it looks like it holds a credential).

    Attributes:
        agent_name: the agent whose model sent the output.
        tool_name: the tool the malformed call was for.
        excerpt: the excerpt quoted in the message.
        max_output_retries: the corrections the run was allowed.
    """

    _fields = ("agent_name", "tool_name", "excerpt", "max_output_retries")
    agent_name: str | None
    tool_name: str | None
    excerpt: str | None
    max_output_retries: int | None


class OutputValidationError(RaygentsError):
    """The final output does not match the expected schema or type.

    ``errors`` lists ``(path, message)`` pairs, the path in JSON-pointer form.
    """

    _fields = ("errors", "output")


class RunNotFound(RaygentsError):
    """No run with that id is known to the coordinator or the store."""


class TooManyRuns(RaygentsError):
    """A run was refused: its tenant already has ``max_concurrent_runs`` runs in flight
    (see ``raygents.init``). Nothing of the refused run was started or stored.

    Attributes:
        tenant: the tenant the run was started for.
        limit: the number of runs each tenant may have in flight.
    """

    _fields: tuple[str, ...] = ("tenant", "limit")
    tenant: str | None
    limit: int | None

    def __init__(self, message: object = "", *, run_id: object = None, **fields: Any) -> None:
        if not message and fields.get("tenant") is not None:
            message = (
                f"tenant {fields['tenant']!r} already has {fields.get('limit')} runs in flight "
                "(max_concurrent_runs); wait for one to end, or start the run later"
            )
        super().__init__(message, run_id=run_id, **fields)


class CheckpointError(RaygentsError):
    """A checkpoint could not be written, read or decoded."""

    _fields: tuple[str, ...] = ("key",)


class CheckpointCorrupt(CheckpointError):
    """Checkpoint bytes failed their size, integrity, format or version checks."""

    _fields = ("key", "reason")


PayloadKind = Literal[
    "model output", "tool arguments", "tool result", "checkpoint", "run input", "content part"
]
"""What a :class:`PayloadTooLarge` was about."""

MAX_PAYLOAD_BYTES: Mapping[PayloadKind, int] = MappingProxyType(
    {
        "model output": 1024 * 1024,
        "tool arguments": 1024 * 1024,
        "tool result": 1024 * 1024,
        "run input": 4 * 1024 * 1024,
        "checkpoint": 10 * 1024 * 1024,
        "content part": 20 * 1024 * 1024,
    }
)
"""The size caps, in bytes of UTF-8 text, that raygents holds payloads to.

Model output is the text of one answer, tool arguments those of one call (both checked by the
agent actor as the answer arrives); a tool result is checked in the tool's worker before it is
returned into Ray, and becomes an error result for the model past its cap; run input is the
text of all input messages of a run; a checkpoint is one encoded record
(:data:`raygents.records.codec.DEFAULT_MAX_BYTES`); a content part is the bytes of one image or
file in a message (:class:`raygents.ImagePart`, :class:`raygents.FilePart`: large ones are kept
in the store by their hash, not in the checkpoint, so it counts apart). 1 MiB of text is about
250,000 tokens, more than most models read or write in a turn, and several such payloads fit
in one checkpoint.
"""

_ADVICE: Mapping[str, str] = {
    "model output": "ask the model for a shorter answer or lower max_tokens",
    "tool arguments": "ask the model for smaller arguments, or pass large data by reference",
    "tool result": "return less (a summary, or a reference to where the data is kept)",
    "run input": "pass less input, or a reference to where the data is kept",
    "checkpoint": "keep tool results and the conversation shorter, or start a new run",
    "content part": "pass a smaller image or file, or an http(s) URL or provider file id",
}


class PayloadTooLarge(RaygentsError):
    """A payload is over its size cap, and was refused before it was sent anywhere.

    Built from ``kind``, ``size`` and ``limit`` alone, it writes its own message. See
    :data:`MAX_PAYLOAD_BYTES` for the caps.

    Attributes:
        kind: what was too large: ``"model output"``, ``"tool arguments"``, ``"tool result"``,
            ``"checkpoint"``, ``"run input"`` or ``"content part"``.
        size: its size in bytes.
        limit: the cap it exceeded, in bytes.
    """

    _fields: tuple[str, ...] = ("kind", "size", "limit")
    kind: PayloadKind | None
    size: int | None
    limit: int | None

    def __init__(self, message: object = "", *, run_id: object = None, **fields: Any) -> None:
        if not message and fields.get("kind") is not None:
            message = _payload_text(fields["kind"], fields.get("size"), fields.get("limit"))
        super().__init__(message, run_id=run_id, **fields)

    @staticmethod
    def size_of(text: str) -> int:
        """The size of ``text`` in bytes of UTF-8 (a lone surrogate counts as three)."""
        if text.isascii():
            return len(text)
        return len(text.encode("utf-8", "surrogatepass"))

    @classmethod
    def check(cls, kind: PayloadKind, text: str, *, what: str = "") -> None:
        """Raise if ``text`` is over the cap of ``kind``; ``what`` names it in the message.

        Raises:
            PayloadTooLarge: ``text`` has more bytes than ``MAX_PAYLOAD_BYTES[kind]``.
        """
        limit = MAX_PAYLOAD_BYTES[kind]
        if len(text) <= limit // 4:  # at most 4 bytes a character: no need to count
            return
        size = cls.size_of(text)
        if size > limit:
            message = _payload_text(kind, size, limit, what)
            raise cls(message, kind=kind, size=size, limit=limit)


class CheckpointTooLarge(PayloadTooLarge, CheckpointError):
    """A checkpoint record is over its cap (``MAX_PAYLOAD_BYTES["checkpoint"]``); nothing of it
    was written, and the run's previous checkpoint stays its newest.

    It is both a :class:`PayloadTooLarge` (``kind`` is always ``"checkpoint"``) and a
    :class:`CheckpointError`, so code that catches either catches it.

    Attributes:
        key: the store key the record was for, when known.
        size: the encoded size in bytes, or a lower bound of it when the record was refused
            before it was packed (the message then says "at least").
        limit: the cap, in bytes.
    """

    _fields: tuple[str, ...] = ("key", "kind", "size", "limit")

    def __init__(self, message: object = "", *, run_id: object = None, **fields: Any) -> None:
        if fields.get("size") is not None or fields.get("limit") is not None:
            fields.setdefault("kind", "checkpoint")  # (then a missing message is written)
        super().__init__(message, run_id=run_id, **fields)
        self.kind = "checkpoint"


def _payload_text(kind: object, size: object, limit: object, what: str = "") -> str:
    subject = f"{kind} ({what})" if what else str(kind)
    advice = _ADVICE.get(str(kind), "")
    return f"{subject} is {size} bytes, over the limit of {limit} bytes" + (
        f": {advice}" if advice else ""
    )

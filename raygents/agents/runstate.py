"""RunState: an interrupted run's pending approvals, the decisions made on them, and its context,
to pass back to ``run`` (the OpenAI Agents SDK's human-in-the-loop shape)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from raygents.core.approvals import ApprovalDecision, PendingApproval
from raygents.core.contextdata import StoredContext, revive, store
from raygents.errors import UserError, excerpt

__all__ = ["RunState"]


@dataclass
class RunState:
    """A run that waits for approvals, as ``RunInterrupted.to_state()`` gives it.

    Decide on each of :meth:`get_interruptions` with :meth:`approve` or :meth:`reject`, then
    pass the state back as the input of ``run`` / ``start`` / ``run_streamed`` with the agent
    (any agent whose graph holds the run's agents): the run resumes from its checkpoint
    with those decisions and with :attr:`context` (which may be changed meanwhile). Rejected
    calls get the rejection message as their result. It is ``resume(run_id, agent=,
    approvals=)`` in the SDK's shape, and works from any driver: :meth:`to_json` and
    :meth:`from_json` carry it as plain data.

    Attributes:
        run_id: the interrupted run.
        context: the run's context as the run left it (for a run started with a
            ``NotDurable`` context, the value the caller passed).
    """

    run_id: str
    interruptions: tuple[PendingApproval, ...] = ()
    context: Any = None
    durable: bool = True
    """Whether the run keeps its context in its checkpoints (it was not ``NotDurable``)."""
    decisions: dict[str, ApprovalDecision] = field(default_factory=dict)

    def get_interruptions(self) -> list[PendingApproval]:
        """The tool calls waiting for a decision (those decided already included)."""
        return list(self.interruptions)

    def approve(self, approval_item: PendingApproval | str, always_approve: bool = False) -> None:
        """Approve one pending call (a :class:`PendingApproval`, or its call id).

        Raises:
            UserError: it is not one of this run's pending calls, or ``always_approve`` is set
                (a standing approval is a tool's ``needs_approval`` predicate here).
        """
        self._decide(approval_item, ApprovalDecision(approved=True), always_approve, "approve")

    def reject(
        self,
        approval_item: PendingApproval | str,
        always_reject: bool = False,
        *,
        rejection_message: str | None = None,
    ) -> None:
        """Reject one pending call; the model gets ``rejection_message`` (or the default
        denial) as its result.

        Raises:
            UserError: it is not one of this run's pending calls, or ``always_reject`` is set.
        """
        decision = ApprovalDecision(approved=False, message=rejection_message)
        self._decide(approval_item, decision, always_reject, "reject")

    def _decide(self, item: Any, decision: ApprovalDecision, always: bool, verb: str) -> None:
        if always:
            raise UserError(
                f"RunState.{verb}(always_{verb}=True) is not supported: decide per call, or give "
                "the tool a needs_approval predicate"
            )
        call_id = item if isinstance(item, str) else getattr(item, "call_id", None)
        if call_id not in {p.call_id for p in self.interruptions}:
            raise UserError(
                f"{excerpt(repr(item), 120)} is not a pending call of run {self.run_id!r} "
                f"(pending: {sorted(p.call_id for p in self.interruptions)!r})"
            )
        self.decisions[call_id] = decision

    def undecided(self) -> list[str]:
        """The call ids of pending calls without a decision yet."""
        return [p.call_id for p in self.interruptions if p.call_id not in self.decisions]

    def to_json(self) -> dict[str, Any]:
        """The state as plain data (a ``NotDurable`` context is left out: pass it to ``run``
        again)."""
        stored = store(self.context) if self.durable else None
        return {
            "run_id": self.run_id,
            "interruptions": [p.model_dump(mode="json") for p in self.interruptions],
            "context": None if stored is None else stored.model_dump(mode="json"),
            "durable": self.durable,
            "decisions": {k: v.model_dump(mode="json") for k, v in self.decisions.items()},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunState:
        """A state :meth:`to_json` made.

        Raises:
            UserError: ``data`` is not such a state.
        """
        try:
            return cls(
                run_id=str(data["run_id"]),
                interruptions=_pending(data.get("interruptions", ())),
                context=_context(data.get("context")),
                durable=bool(data.get("durable", True)),
                decisions={
                    str(k): ApprovalDecision.model_validate(v)
                    for k, v in dict(data.get("decisions", {})).items()
                },
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise UserError(f"not a RunState's JSON: {type(exc).__name__}: {exc}") from None


def _context(data: Any) -> Any:
    """A context as :meth:`RunState.to_json` wrote it: revived as its class where this
    process has it, else the plain data."""
    return None if data is None else revive(StoredContext.model_validate(data))


def _pending(items: Sequence[Any]) -> tuple[PendingApproval, ...]:
    return tuple(PendingApproval.model_validate(p) for p in items)

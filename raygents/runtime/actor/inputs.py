"""RunInputs: what an agent actor prepares around a run's model calls.

The run's context object (revived from its record, captured after each step, and given
the writes of a batch's tool tasks and children); the content parts of a model request
(the bytes of large parts loaded from the store before the call, those of tool results
kept there after a batch); and the call's spending (refused before it when a budget
forbids it, priced after it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from raygents.core.contextdata import apply, assign, capture, revive, to_plain
from raygents.core.envelope import Envelope, RunState
from raygents.core.messages import ModelRequest, ModelResponse
from raygents.errors import UserError
from raygents.models.base import Model
from raygents.runtime.actor import spending
from raygents.runtime.actor.modelcall import call_model, model_name
from raygents.runtime.link import blobstores
from raygents.runtime.link.directory import Directory
from raygents.runtime.worker.tasks import StepResult

__all__ = ["RunInputs"]


class RunInputs:
    """Prepares the context, the model requests and the spending of one agent's runs.

    Args:
        agent_name: the agent the actor serves (errors name it).
        directory: the actor's directory (its namespace, and the settings that name the
            store of large content parts and the prices, looked up at each use: they may
            arrive after the actor starts).
    """

    def __init__(self, agent_name: str, directory: Directory) -> None:
        self.agent_name = agent_name
        self.directory = directory

    def _store(self) -> str:
        return self.directory.cached_settings().store

    # --- the run's context ----------------------------------------------------------------
    def captured(self, state: RunState, envelope: Envelope) -> RunState:
        """``state`` with the run's context as the steps so far left it in this actor.

        Raises:
            UserError: the context object is no longer plain data.
        """
        stored = capture(state.context, envelope.context)
        return state if stored is state.context else state.evolve(context=stored)

    def with_writes(
        self, state: RunState, envelope: Envelope, results: list[StepResult]
    ) -> RunState:
        """Apply the writes of a batch's tool tasks and agent-as-tool children to the run's
        context, in call order, once the batch ended (over the writes made in this actor
        meanwhile: where both wrote one field, the call's write stands)."""
        writes = [w for r in results if r.writes for w in r.writes]
        if state.context is None or not writes:
            return state.evolve(context_writes={}) if state.context_writes else state
        data = apply(to_plain(envelope.context, check=False), writes)
        stored = state.context.model_copy(update={"data": data})
        new = self.revived(state.evolve(context=stored), envelope.context)
        envelope.context = assign(envelope.context, new)
        return state.evolve(context=stored, context_writes={})

    def revived(self, state: RunState, given: Any) -> Any:
        """The run's context object in this actor (see :func:`~raygents.core.contextdata.revive`).

        Raises:
            UserError: the stored context does not validate as its class here.
        """
        try:
            return revive(state.context, given)
        except Exception as exc:
            raise UserError(
                f"agent {self.agent_name!r} cannot revive the run context of type "
                f"{state.context.type if state.context else None!r} from its plain form: "
                f"{type(exc).__name__}: {exc}"
            ) from None

    # --- content parts --------------------------------------------------------------------
    async def loaded(self, request: ModelRequest) -> ModelRequest:
        """``request`` with the bytes of its large parts loaded from the store (itself when
        it has none there).

        Raises:
            CheckpointError: a part's bytes are missing from the store, or corrupt.
        """
        loaded = await blobstores.load(request.messages, self._store())
        if loaded is request.messages:
            return request
        return request.model_copy(update={"messages": loaded})

    async def kept(self, results: list[StepResult]) -> list[Any]:
        """The results of a batch's calls, their large parts kept in the store (the records
        and the next model request then name them)."""
        return await blobstores.keep_results([r.result for r in results], self._store())

    # --- spending -------------------------------------------------------------------------
    async def before_call(self, state: RunState, request: ModelRequest, model: Model) -> None:
        """Refuse a model call that the run's or its tenant's budget forbids (see
        :func:`~raygents.runtime.actor.spending.before_call`)."""
        settings, namespace = self.directory.cached_settings(), self.directory.namespace
        await spending.before_call(settings, namespace, state, request, model_name(model))

    async def answered(
        self,
        model: Model,
        request: ModelRequest,
        state: RunState,
        on_delta: Callable[[str], None] | None,
        on_turn: Callable[[], None],
    ) -> ModelResponse:
        """The model's answer to ``request``, its large parts loaded first, its usage priced
        after (see :func:`~raygents.runtime.actor.modelcall.call_model`)."""
        request = await self.loaded(request)
        response = await call_model(
            model,
            self.agent_name,
            request,
            on_delta,
            namespace=self.directory.namespace,
            on_turn=on_turn,
        )
        settings, namespace = self.directory.cached_settings(), self.directory.namespace
        return spending.priced(settings, namespace, state, request, response, model_name(model))

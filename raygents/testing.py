"""Fake models and builders for tests of agents; shipped so users can test their own agents.

``ScriptedModel`` works across processes: once a run sends it to Ray, its steps live in a small
shared actor, so they are consumed in order whichever agent actor or replica asks, and
``.calls`` / ``.assert_complete()`` read them back from the driver.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from raygents.core.messages import ModelRequest, ModelResponse
from raygents.errors import ModelError
from raygents.models.function import FunctionModel, apply_step, call, calls, stream_text, text

__all__ = ["FunctionModel", "ScriptedModel", "call", "calls", "text"]

Step = ModelResponse | BaseException | Callable[[ModelRequest], Any]

_STORE_NAME = "raygents-testing-scripts"
_STORE_NAMESPACE = "raygents-testing"


class ScriptedModel:
    """A model that replays ``steps`` in order, one per model call.

    Args:
        steps: each a ``ModelResponse`` (see :func:`text`, :func:`calls`), an exception to
            raise, or a function ``(ModelRequest) -> ModelResponse`` (sync or async).
        latency_s: a delay before each reply, to simulate a real model.
    """

    def __init__(self, steps: Iterable[Step], *, latency_s: float = 0.0) -> None:
        self.id = f"script-{uuid.uuid4().hex}"
        self.latency_s = latency_s
        self._steps: list[Any] = list(steps)
        self._calls: list[ModelRequest] = []
        self._shared = False

    # --- crossing processes -------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        if not self._shared:
            self._share()
        return {
            "id": self.id,
            "latency_s": self.latency_s,
            "shared": self._shared,
            "steps": None if self._shared else self._steps,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.id = state["id"]
        self.latency_s = state["latency_s"]
        self._shared = state["shared"]
        self._steps = state["steps"] or []
        self._calls = []

    def _share(self) -> None:
        import ray

        if not ray.is_initialized():
            return
        ray.get(_store().register.remote(self.id, self._steps, self._calls))
        self._shared = True

    # --- the Model protocol -------------------------------------------------------------
    async def respond(self, request: ModelRequest) -> ModelResponse:
        """Reply with the next step."""
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        return await apply_step(await self._next(request), request)

    async def stream(self, request: ModelRequest) -> AsyncIterator[str | ModelResponse]:
        """Reply with the next step, its text streamed word by word."""
        response = await self.respond(request)
        async for item in stream_text(response):
            yield item

    async def _next(self, request: ModelRequest) -> Any:
        if self._shared:
            found, step = await _store().next.remote(self.id, request)
        else:
            self._calls.append(request)
            found, step = (True, self._steps.pop(0)) if self._steps else (False, len(self._calls))
        if not found:
            raise ModelError(f"ScriptedModel has no step left for call {step}")
        return step

    # --- inspection from the driver -----------------------------------------------------
    @property
    def calls(self) -> list[ModelRequest]:
        """Every request the model received, in order."""
        if self._shared:
            import ray

            return list(ray.get(_store().calls.remote(self.id)))
        return list(self._calls)

    @property
    def remaining(self) -> int:
        """How many steps are left."""
        if self._shared:
            import ray

            return int(ray.get(_store().remaining.remote(self.id)))
        return len(self._steps)

    def assert_complete(self) -> None:
        """Raise ``AssertionError`` unless every step was used."""
        left = self.remaining
        if left:
            raise AssertionError(
                f"ScriptedModel has {left} unused step(s) after {len(self.calls)} call(s)"
            )


class _ScriptStore:
    """Holds the steps and recorded calls of every shared ScriptedModel."""

    def __init__(self) -> None:
        self.steps: dict[str, list[Any]] = {}
        self.calls_: dict[str, list[ModelRequest]] = {}

    def register(self, script_id: str, steps: list[Any], calls: list[ModelRequest]) -> None:
        self.steps.setdefault(script_id, list(steps))
        self.calls_.setdefault(script_id, list(calls))

    def next(self, script_id: str, request: ModelRequest) -> tuple[bool, Any]:
        made = self.calls_.setdefault(script_id, [])
        made.append(request)
        steps = self.steps.get(script_id, [])
        if not steps:
            return False, len(made)
        return True, steps.pop(0)

    def calls(self, script_id: str) -> list[ModelRequest]:
        return self.calls_.get(script_id, [])

    def remaining(self, script_id: str) -> int:
        return len(self.steps.get(script_id, []))


_store_handle: Any = None


def _store() -> Any:
    global _store_handle
    import ray

    if _store_handle is None:
        from raygents.runtime.driver.client import on_shutdown

        on_shutdown(_reset_store_handle)  # the handle is Ray's, gone with its connection
        _store_handle = (
            ray.remote(_ScriptStore)
            .options(
                name=_STORE_NAME,
                namespace=_STORE_NAMESPACE,
                get_if_exists=True,
                num_cpus=0,
                lifetime="detached",
            )
            .remote()
        )
    return _store_handle


def _reset_store_handle() -> None:
    global _store_handle
    _store_handle = None

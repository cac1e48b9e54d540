"""A fake Ray actor handle over a plain object, for tests of the runtime without Ray."""

from __future__ import annotations

import asyncio
import inspect
from collections import defaultdict
from typing import Any


class _ActorId:
    def __init__(self, value: str) -> None:
        self.value = value

    def hex(self) -> str:
        return self.value


class _Method:
    def __init__(self, handle: FakeHandle, name: str) -> None:
        self._handle = handle
        self._name = name

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        """Call the object's method now, as Ray would run it: its answer comes back as a
        future (a coroutine runs as a task; a future the method returns is passed through)."""
        self._handle.calls[self._name].append(args if not kwargs else (*args, kwargs))
        result = getattr(self._handle.target, self._name)(*args, **kwargs)
        if isinstance(result, asyncio.Future):
            return result
        if inspect.isawaitable(result):
            return asyncio.ensure_future(result)
        if self._handle.fire_and_forget:
            return None
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        done.set_result(result)
        return done


class FakeHandle:
    """``handle.method.remote(*args)`` calls ``target.method(*args)`` and records the call.

    Args:
        target: the object whose methods the handle calls (a real ``Coordinator`` or
            ``AgentActor``, or a scripted stand-in).
        actor_id: what ``handle._actor_id.hex()`` answers, as a Ray handle would.
        fire_and_forget: return ``None`` from ``remote`` for plain (not async) methods,
            for callers that never await the call.
    """

    def __init__(
        self, target: Any, *, actor_id: str = "actor-1", fire_and_forget: bool = False
    ) -> None:
        self.target = target
        self.fire_and_forget = fire_and_forget
        self.calls: defaultdict[str, list[tuple[Any, ...]]] = defaultdict(list)
        """The arguments of each call, by method name, in order."""
        self._actor_id = _ActorId(actor_id)

    def __getattr__(self, name: str) -> _Method:
        if name.startswith("__") or not hasattr(self.target, name):
            raise AttributeError(name)
        return _Method(self, name)

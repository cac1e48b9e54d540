"""raygents.serve: agents as an HTTP service on Ray Serve (``pip install raygents[serve]``).

``app(agents, ...)`` is a Serve application (for ``ray.serve.run`` or a Serve config file);
``start(agents, ...)`` serves it on the current raygents/Ray instance and returns its URL;
``stop()`` takes it down. Importing this module starts nothing and imports Serve on first
use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from raygents.serve.deployment import app, start, stop

__all__ = ["app", "start", "stop"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from raygents.serve import deployment

        return getattr(deployment, name)
    raise AttributeError(f"module 'raygents.serve' has no attribute {name!r}")

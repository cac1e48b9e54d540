"""The Ray shell around the pure loop: agent actors, the coordinator, and the driver API."""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any


def __getattr__(name: str) -> Any:
    # Modules load on first use, as attributes too (``raygents.runtime.driver.client``): a Ray
    # worker that runs tool tasks needs only ``tasks``.
    if not name.startswith("__") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

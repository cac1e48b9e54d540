"""Model protocol and the adapters raygents ships."""

from __future__ import annotations

from raygents.models.base import Model, ModelSettings, resolve_model

__all__ = ["Model", "ModelSettings", "resolve_model"]

"""Agents over Ray Data (the public path of :mod:`raygents.integrations.ray_data`)."""

from raygents.integrations.ray_data import map_agent

__all__ = ["map_agent"]

"""Prompt templates shipped with raygents (package data)."""

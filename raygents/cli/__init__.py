"""The ``raygents`` command."""

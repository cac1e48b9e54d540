"""The Ray shell around the pure loop: agent actors, the coordinator, and the driver API."""

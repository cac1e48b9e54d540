"""The driver's API: init, run/start/resume, handles, attach."""

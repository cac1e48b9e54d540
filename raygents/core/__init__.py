"""The pure agent loop and its data: no Ray, no I/O (see README.md in this folder)."""

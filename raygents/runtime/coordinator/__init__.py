"""The coordinator actor: the run table, hot records, the store side, agent actors."""

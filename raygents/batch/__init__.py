"""Batch jobs: one agent over many inputs, with a ledger in the store."""

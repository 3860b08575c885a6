"""Failure detection: whom to probe (cluster health) and probing one silo (silo health)."""

"""Core: pure rules and the store (no engine, adapters, clients or pytest)."""

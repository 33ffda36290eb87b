"""The engine: the one record/replay decision per request, per-test state, the miss report."""

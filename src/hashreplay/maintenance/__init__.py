"""Tools over a store of recordings: find, verify, re-key, re-normalise, prune."""

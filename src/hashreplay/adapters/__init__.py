"""Client adapters: each one plugs a client library into the engine through one seam."""

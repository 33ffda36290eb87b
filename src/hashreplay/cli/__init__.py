"""The `hashreplay` command."""

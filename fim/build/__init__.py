"""Build: declarations -> an immutable Snapshot; reload swaps it atomically."""

"""The scheduling algorithm: pure functions over in-memory state, runnable without a cluster."""

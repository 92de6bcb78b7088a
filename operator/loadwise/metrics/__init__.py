"""Node metrics: sources (Prometheus) and the cache the scorers read."""

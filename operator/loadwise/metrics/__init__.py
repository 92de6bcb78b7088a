"""Node metrics: the sources (Prometheus, metrics.k8s.io) and the cache the scorers read."""

"""Node and pod usage sources (Prometheus, metrics.k8s.io), the samples cache, and the usage
learned per workload. The scheduler's own /metrics are observability.py."""

"""A local control plane, Prometheus and simulated nodes for tests, demo and benchmarks."""

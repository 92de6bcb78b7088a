"""Unit tests of kube/: transport, informers, list streaming, prefetch, the elector."""

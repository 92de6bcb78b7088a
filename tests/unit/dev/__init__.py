"""Unit tests of The development harness (loadwise_dev) and its benchmarks' pure parts."""

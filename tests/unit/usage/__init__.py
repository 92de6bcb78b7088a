"""Unit tests of usage/: the usage sources, their cache, history and learned estimates."""

"""Unit tests of policies/: the model, its CRD and reference, the watch, statuses."""

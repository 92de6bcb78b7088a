"""Unit tests of scheduler/ and the supervisor: loop, queue, binding, state, preemption."""

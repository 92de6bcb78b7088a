"""Binding: the binding cycle of a reserved pod (cycle.py), the reservations and bind slots the
loop hands off (inflight.py), the writing halves of plugins (plugins.py), the API writes for pods
(binder.py) and the Scheduled events written after their binds (events.py)."""

"""The scheduler: watch events in, the queue, the cluster state (cache), schedule-one, the binding
cycle, and preemption's side of the loop."""

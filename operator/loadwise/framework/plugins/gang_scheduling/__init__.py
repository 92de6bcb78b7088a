"""GangScheduling, the pure part: a pod group's decision, all of its minimum or nothing
(placement.py), and the preemption that makes room for its whole minimum (preemption.py). The
scheduler runs them in its pod group cycle; the policy is Kubernetes' gang scheduling."""

"""Dynamic resource allocation (kube-scheduler's DynamicResources plugin), the scheduler's half:
the ResourceClaims the cluster has (claims.py) and the PreEnqueue that holds a pod until the
claims it names exist (pre_enqueue.py). Allocating devices is not built yet: a pod whose claims
all exist is refused by name (framework/types.py), never guessed (docs/architecture.md has the
decided design)."""

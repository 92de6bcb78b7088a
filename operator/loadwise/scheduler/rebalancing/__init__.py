"""Rebalancing: the look at hot nodes and the moves planned (rebalancer.py), their eviction
(evictor.py), the ledger of moves the scheduler obeys (moves.py) and its copy in a ConfigMap
(move_store.py). The plan itself is framework/rebalance.py."""

"""Talking to the API server: the HTTP transport, list+watch informers, list streaming and start-up
prefetch, the RBAC preflight, the Lease elector."""

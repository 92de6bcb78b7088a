"""SchedulingPolicies: the pydantic model (the one source of truth), the CRD and the reference made
from it, their watch, and the statuses written back."""

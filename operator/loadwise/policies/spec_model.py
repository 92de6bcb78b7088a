"""The base of every SchedulingPolicy model: camelCase field names, unknown fields refused,
immutable (a policy object is shared by every cycle that reads it)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class SpecModel(BaseModel):
    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )

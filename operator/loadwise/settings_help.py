"""Every setting as `loadwise run --help` and its flags show it, made from the Config model."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from pydantic_core import PydanticUndefined

from .config import Config, env_name, env_value, flag_name
from .setting_groups import flat_fields


@dataclass(frozen=True)
class Setting:
    """One setting as `loadwise run --help` shows it."""

    field: str
    variable: str
    flag: str
    default: str
    description: str
    is_bool: bool


def settings() -> Iterator[Setting]:
    """Every setting of Config by its flat name, in definition order, from the models."""
    for field in flat_fields(Config):
        name, info = field.name, field.info
        default = info.get_default(call_default_factory=True)
        yield Setting(
            field=name,
            variable=env_name(name),
            flag=flag_name(name),
            default="(none)" if default is PydanticUndefined else env_value(default) or "empty",
            description=info.description or "",
            is_bool=info.annotation is bool,
        )

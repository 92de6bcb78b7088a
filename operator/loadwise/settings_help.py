"""Every setting as `loadwise run --help` and its flags show it, made from the Config model."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from pydantic_core import PydanticUndefined

from .config import Config, env_name, env_value, flag_name


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
    """Every setting of Config, in definition order, from the model itself."""
    for name, info in Config.model_fields.items():
        default = info.get_default(call_default_factory=True)
        yield Setting(
            field=name,
            variable=env_name(name),
            flag=flag_name(name),
            default="(none)" if default is PydanticUndefined else env_value(default) or "empty",
            description=info.description or "",
            is_bool=info.annotation is bool,
        )

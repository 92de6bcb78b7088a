"""Settings grouped by concern, each keeping the flat name users set it by.

The operator's settings are nested models (`config.election.lease_name`,
`config.sources.prometheus.url`), but every one is still set as LOADWISE_<NAME> or --<name>
with the flat name it always had (LOADWISE_LEASE_NAME, LOADWISE_PROMETHEUS_URL): a group's
fields are named by its `prefix` and the field's name, unless `flat_names` names one otherwise.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict
from pydantic.fields import FieldInfo


class SettingsGroup(BaseModel):
    """A group of settings (a field of Config, or of another group)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    # The flat names of this group's fields: prefix + field name ...
    prefix: ClassVar[str] = ""
    # ... unless named here (field -> flat name).
    flat_names: ClassVar[Mapping[str, str]] = {}


@dataclass(frozen=True)
class FlatField:
    """One setting: its flat name, where it sits in the nested model, and its field."""

    name: str
    path: tuple[str, ...]
    info: FieldInfo


def _group(info: FieldInfo) -> type[SettingsGroup] | None:
    kind = info.annotation
    return kind if isinstance(kind, type) and issubclass(kind, SettingsGroup) else None


def flat_fields(model: type[BaseModel]) -> Iterator[FlatField]:
    """Every setting of `model`, groups opened, in definition order."""
    yield from _fields(model, "", ())


def _fields(model: type[BaseModel], prefix: str, path: tuple[str, ...]) -> Iterator[FlatField]:
    renamed = model.flat_names if issubclass(model, SettingsGroup) else {}
    for name, info in model.model_fields.items():
        group = _group(info)
        if group is not None:
            yield from _fields(group, group.prefix, (*path, name))
        else:
            yield FlatField(renamed.get(name, prefix + name), (*path, name), info)


def nest(model: type[BaseModel], flat: Mapping[str, Any]) -> dict[str, Any]:
    """Flat name -> value, as the nested dict `model` validates. An unknown name raises
    ValueError naming it and the closest known one."""
    paths = {f.name: f.path for f in flat_fields(model)}
    nested: dict[str, Any] = {}
    for name, value in flat.items():
        if name not in paths:
            close = difflib.get_close_matches(name, list(paths), n=1, cutoff=0.8)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"unknown setting {name!r}{hint}")
        *groups, last = paths[name]
        where = nested
        for group in groups:
            where = where.setdefault(group, {})
        where[last] = value
    return nested


def explicit(settings: BaseModel) -> dict[str, Any]:
    """Flat name -> value of the settings given when `settings` was made (not those left at
    their defaults or filled in by a validator, such as a preset's)."""
    renamed = settings.flat_names if isinstance(settings, SettingsGroup) else {}
    prefix = settings.prefix if isinstance(settings, SettingsGroup) else ""
    out: dict[str, Any] = {}
    for name in settings.model_fields_set:
        value = getattr(settings, name)
        if isinstance(value, SettingsGroup):
            out.update(explicit(value))
        else:
            out[renamed.get(name, prefix + name)] = value
    return out


def flatten(settings: BaseModel) -> dict[str, Any]:
    """Flat name -> value of every setting of `settings`."""
    out = {}
    for field in flat_fields(type(settings)):
        value: Any = settings
        for step in field.path:
            value = getattr(value, step)
        out[field.name] = value
    return out


def flat_name(model: type[BaseModel], path: tuple[str | int, ...]) -> str | None:
    """The flat name of the setting at `path` (a validation error's location), or None when
    the path names a group (an error of the group as a whole)."""
    for field in flat_fields(model):
        if field.path == path[: len(field.path)]:
            return field.name
    return None

"""``policy show``'s YAML: the effective policy, every default filled in, each field preceded by its
description (the models' own ``Field(description=...)``, so the text cannot drift from the code).

The output is the same data as ``policy_to_dict`` (``yaml.safe_load`` of it gives exactly that), so
it can be saved and edited as a policy. In a list of sections (``fleet.groups``, their ``nodes``,
``schedules.windows``) only the first item carries the comments.
"""

from __future__ import annotations

import textwrap
from typing import Any

import yaml
from pydantic import BaseModel

WIDTH = 100


def commented_yaml(model: BaseModel) -> str:
    lines: list[str] = []
    _emit(model, model.model_dump(mode="json"), "", lines, describe=True)
    return "\n".join(lines) + "\n"


def _emit(model: BaseModel, data: dict[str, Any], pad: str, lines: list[str], *, describe: bool) -> None:
    for name, field in type(model).model_fields.items():
        value, attr = data[name], getattr(model, name)
        if describe and field.description:
            lines.extend(f"{pad}# {chunk}" for chunk in textwrap.wrap(field.description, max(40, WIDTH - len(pad) - 2),
                                                                      break_on_hyphens=False, break_long_words=False))
        if isinstance(attr, BaseModel):
            lines.append(f"{pad}{name}:")
            _emit(attr, value, pad + "  ", lines, describe=describe)
        elif isinstance(attr, tuple) and attr and all(isinstance(item, BaseModel) for item in attr):
            lines.append(f"{pad}{name}:")
            for i, (item, item_data) in enumerate(zip(attr, value)):
                sub: list[str] = []
                _emit(item, item_data, "", sub, describe=describe and i == 0)
                first = next(j for j, line in enumerate(sub) if not line.startswith("#"))
                lines.extend(f"{pad}  - {line}" if j == first else f"{pad}    {line}" for j, line in enumerate(sub))
        else:
            dumped = yaml.safe_dump({name: value}, sort_keys=False, default_flow_style=False, width=10**6)
            lines.extend(pad + line for line in dumped.splitlines())

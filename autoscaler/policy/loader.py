"""Load a policy file: YAML in, a validated ``Policy`` or a list of one-line errors out.

Error lines are ``FILE: field.path: message`` for a rule that failed, and
``FILE:LINE: yaml: message`` for a file that is not valid YAML.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from autoscaler.errors import BadInput
from autoscaler.policy.model import Policy


@dataclass(frozen=True)
class LoadedPolicy:
    policy: Policy
    path: str
    text: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()


class PolicyInvalid(BadInput):
    """The policy file is invalid; ``errors`` holds one line per problem."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("\n".join(errors))
        self.errors = errors


def _path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def format_validation_errors(source: str, exc: ValidationError) -> list[str]:
    """One line per pydantic error: ``source: field.path: value: rule``."""
    lines = []
    errors = exc.errors(include_url=False)
    locs = [tuple(p for p in e["loc"] if p not in ("function-after", "function-before")) for e in errors]
    for err, loc in zip(errors, locs):
        if err["type"] == "too_short" and any(len(o) > len(loc) and o[:len(loc)] == loc for o in locs):
            # A list whose only item is invalid is also "too short" once pydantic dropped that item
            # ("Tuple should have at least 1 item after validation, not 0"): the item's error says it all.
            continue
        msg: str = err["msg"]
        ctx_error = (err.get("ctx") or {}).get("error")
        text = str(ctx_error) if ctx_error is not None else msg
        if text.startswith("\x00"):  # a FieldError: a cross-field rule naming its own field
            _, field, rule = text.split("\x00", 2)
            prefix = _path(loc)
            lines.append(f"{source}: {prefix + '.' if prefix else ''}{field}: {rule}")
            continue
        path = _path(loc) or "(top level)"
        kind = err["type"]
        if kind == "extra_forbidden":
            lines.append(f"{source}: {path}: unknown field")
        elif kind == "missing":
            lines.append(f"{source}: {path}: required field is missing")
        elif kind == "value_error":
            lines.append(f"{source}: {path}: {text}")
        elif (hint := _exponent_hint(err.get("input"))) is not None:
            lines.append(f"{source}: {path}: {hint}")
        else:
            lines.append(f"{source}: {path}: {_short(err.get('input'))}: {msg}")
    return lines


# What YAML 1.1 (PyYAML) reads as text although it looks like a number: an exponent without a dot
# or without a sign (6e2, 1.0e12, 5E-3). The strict models then say "a valid number" about "6e2".
_EXPONENT_TEXT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")


def _exponent_hint(value: Any) -> str | None:
    if not isinstance(value, str) or not _EXPONENT_TEXT.match(value.strip()):
        return None
    number = float(value)
    if number.is_integer() and abs(number) < 1e16:
        plain = f"{int(number)} or {int(number)}.0"
    else:
        plain = f"{number!r}"
    return f"{value!r} is text to YAML, not a number (it reads an exponent only as in 6.0e+2); write {plain}"


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML loader that rejects a key given twice in one mapping (the last would win silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first on line {seen[key] + 1})", key_node.start_mark
                )
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


def parse_policy(text: str, source: str = "<policy>") -> Policy:
    """Parse and validate policy text; raise PolicyInvalid with every error found."""
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        line = f":{mark.line + 1}" if mark is not None else ""
        raise PolicyInvalid([f"{source}{line}: yaml: {problem}"]) from exc
    if not isinstance(data, dict):
        raise PolicyInvalid([f"{source}: (top level): expected a mapping of sections, got {type(data).__name__}"])
    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        raise PolicyInvalid(format_validation_errors(source, exc)) from exc


def decode_text(data: bytes, source: str) -> str:
    """Policies and snapshots are UTF-8 text: another encoding or a NUL byte is bad input, named
    with its line (``FILE:LINE: not UTF-8 text ...``)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise PolicyInvalid([f"{source}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
                             f"{exc.start}); save the file as UTF-8"]) from None
    if "\x00" in text:
        line = text[:text.index("\x00")].count("\n") + 1
        raise PolicyInvalid([f"{source}:{line}: a NUL byte: this is not a text file"])
    return text.removeprefix("\ufeff")  # a UTF-8 byte order mark is still UTF-8


def read_text_file(path: str | Path) -> str:
    """A policy or snapshot file's text (UTF-8, no NUL). BadInput (exit 2) naming the file."""
    path = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise PolicyInvalid([f"{path}: cannot read: {exc.strerror or exc}"]) from exc
    return decode_text(data, path)


def load_policy(path: str | Path) -> LoadedPolicy:
    """Read and validate a policy file. Raises PolicyInvalid (exit 2) on any problem."""
    path = str(path)
    text = read_text_file(path)
    return LoadedPolicy(parse_policy(text, path), path, text)


def live_edit_problems(running: Policy, edited: Policy, source: str) -> list[str]:
    """What a valid policy edit may not change while the controller runs, as error lines in the
    style of an invalid policy (``FILE: field: message``); empty when the edit may be loaded.

    ``cost.currency``: a run's costs are in one currency. One live edit of it made every report of
    the run fail for good (the two currencies within one run cannot be told apart by ``--run``).
    A restart starts a new run, which may use another currency: reports then name the runs."""
    problems = []
    if edited.cost.currency != running.cost.currency:
        problems.append(
            f"{source}: cost.currency: {edited.cost.currency!r} differs from the running policy's "
            f"{running.cost.currency!r}: a run's costs are in one currency, so it is not changed live; "
            "restart the controller to change it (the new run records in the new currency)"
        )
    return problems


def policy_to_dict(policy: Policy) -> dict[str, Any]:
    """The effective policy, every default filled in, as plain JSON-able data."""
    return policy.model_dump(mode="json")

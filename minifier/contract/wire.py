"""JSON encoding of the typed dataclasses that cross process boundaries.

Every message between the minifier driver, its workers and the language server is a dataclass;
this module turns them into plain JSON objects and back, checking field types on the way in so a
malformed line is rejected with a clear error instead of surfacing later as an AttributeError.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from typing import Any, TypeVar

T = TypeVar("T")


class WireError(ValueError):
    """A message that does not match its schema."""


def encode(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: encode(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [encode(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): encode(v) for k, v in obj.items()}
    return obj


def dumps(obj: Any) -> str:
    return json.dumps(encode(obj), separators=(",", ":"))


def decode(cls: type[T], data: Any) -> T:
    return _decode(cls, data, cls.__name__)


def decode_tagged(line: bytes, table: dict[str, type], what: str) -> Any:
    """One JSON object whose `type` field picks its dataclass in `table`."""
    try:
        data = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise WireError(f"unreadable {what}: {line[:120]!r}") from e
    if not isinstance(data, dict) or data.get("type") not in table:
        raise WireError(f"unknown {what}: {line[:120]!r}")
    return decode(table[data["type"]], data)


def _decode(tp: Any, data: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        if data is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _decode(option, data, where)
            except WireError as e:
                errors.append(str(e))
        raise WireError(f"{where}: {data!r} matches none of {options}: {errors}")
    if origin is typing.Literal:
        if data not in typing.get_args(tp):
            raise WireError(f"{where}: {data!r} is not one of {typing.get_args(tp)}")
        return data
    if origin in (list, tuple):
        if not isinstance(data, list):
            raise WireError(f"{where}: expected a list, got {type(data).__name__}")
        (item,) = typing.get_args(tp)[:1] or (Any,)
        values = [_decode(item, x, f"{where}[{i}]") for i, x in enumerate(data)]
        return values if origin is list else tuple(values)
    if origin is dict:
        if not isinstance(data, dict):
            raise WireError(f"{where}: expected an object, got {type(data).__name__}")
        _, value_tp = typing.get_args(tp) or (str, Any)
        return {k: _decode(value_tp, v, f"{where}.{k}") for k, v in data.items()}
    if dataclasses.is_dataclass(tp):
        return _decode_dataclass(tp, data, where)
    if tp is Any:
        return data
    if tp is float and isinstance(data, int) and not isinstance(data, bool):
        return float(data)
    if isinstance(tp, type) and not isinstance(data, tp):
        raise WireError(f"{where}: expected {tp.__name__}, got {type(data).__name__}")
    return data


def _decode_dataclass(cls: Any, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise WireError(f"{where}: expected an object, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in data:
            kwargs[f.name] = _decode(hints[f.name], data[f.name], f"{where}.{f.name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise WireError(f"{where}: missing field {f.name!r}")
    return cls(**kwargs)

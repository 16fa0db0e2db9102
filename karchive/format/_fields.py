"""Field checks for untrusted JSON objects: a required or optional field of a type, a count that is not negative.

One place says "missing" and "expected X, got Y" for every format model (the manifest's classes and
:class:`~karchive.format.target.Target`), each error naming the JSON location. Below both, so neither imports
the other for it.
"""

from __future__ import annotations

from typing import Any

from ..errors import SchemaError

__all__ = ["nonneg", "opt", "req", "typename"]


def req(obj: Any, key: str, typ: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        raise SchemaError(f"{where}: missing {key!r}", where=where)
    value = obj[key]
    if isinstance(value, bool) and typ in (int, (int,)):
        raise SchemaError(f"{where}.{key}: expected integer, got boolean", where=f"{where}.{key}")
    if not isinstance(value, typ):
        raise SchemaError(
            f"{where}.{key}: expected {typename(typ)}, got {type(value).__name__}", where=f"{where}.{key}"
        )
    return value


def opt(obj: Any, key: str, typ: type | tuple[type, ...], where: str) -> Any:
    """An optional field: absent or null gives None, anything else must have the type."""
    value = obj.get(key) if isinstance(obj, dict) else None
    if value is None:
        return None
    if (isinstance(value, bool) and typ is int) or not isinstance(value, typ):
        raise SchemaError(
            f"{where}.{key}: expected {typename(typ)}, got {type(value).__name__}", where=f"{where}.{key}"
        )
    return value


def typename(typ: type | tuple[type, ...]) -> str:
    return " or ".join(t.__name__ for t in typ) if isinstance(typ, tuple) else typ.__name__


def nonneg(value: int, where: str) -> int:
    if value < 0:
        raise SchemaError(f"{where}: must not be negative, got {value}", where=where)
    return value

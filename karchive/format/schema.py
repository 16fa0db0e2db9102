"""Access to the manifest's JSON Schema (the machine-readable half of spec/FORMAT.md)."""

from __future__ import annotations

import json
import re
from functools import lru_cache
from importlib import resources
from operator import gt, lt
from typing import Any

__all__ = ["load_schema"]


@lru_cache(maxsize=1)
def load_schema() -> dict:
    schema: dict = json.loads(resources.files(__package__).joinpath("manifest.schema.json").read_text())
    return schema


#: The JSON Schema keywords manifest.schema.json uses inside a variant, and that :class:`VariantChecker`
#: implements; any other keyword there is refused when the checker is made, never silently skipped.
_KEYWORDS = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "$ref",
        "enum",
        "const",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "pattern",
        "items",
        "minItems",
        "maxItems",
        "propertyNames",
        "allOf",
        "if",
        "then",
        "not",
        "description",
    }
)
_TYPES: dict[str, Any] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "null": lambda v: v is None,
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer()),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
}


class VariantChecker:
    """The schema's checks of one manifest variant, as ``karchive verify`` reports them, without a generic
    JSON Schema engine: a variant is checked by the typed model
    (:meth:`karchive.format.manifest.Variant.from_json`, in the reader's ``verify()``) and by the schema's
    own ``$defs``, compiled once into small functions, which report every violation the way ``jsonschema``
    words it (``tests/test_verify_schema.py`` compares the two on every
    schema-derived mutation of a variant). At 10,000 variants the generic engine took about 20 s of
    ``karchive verify``'s 25 s (issue 24); this takes about a tenth of that.
    """

    def __init__(self, definition: str = "variant") -> None:
        schema = load_schema()
        self._defs: dict[str, Any] = schema["$defs"]
        self._root = self._defs[definition]
        self._patterns: dict[str, re.Pattern[str]] = {}
        self._check_keywords(self._root, set())
        self._compiled: dict[int, Any] = {}
        self._check = self._compile(self._root)

    def _check_keywords(self, node: Any, seen: set[str]) -> None:
        if isinstance(node, dict):
            unknown = set(node) - _KEYWORDS
            if unknown:
                raise NotImplementedError(
                    f"manifest.schema.json uses {sorted(unknown)}, which VariantChecker does "
                    "not implement: add them (and to the comparison test) before relying on it"
                )
            if "pattern" in node:
                self._patterns[node["pattern"]] = re.compile(node["pattern"])
            ref = node.get("$ref")
            if ref is not None and ref not in seen:
                seen.add(ref)
                self._check_keywords(self._resolve(ref), seen)
            for sub in node.get("properties", {}).values():
                self._check_keywords(sub, seen)
            for key in ("additionalProperties", "items", "propertyNames", "if", "then", "not"):
                if isinstance(node.get(key), dict):
                    self._check_keywords(node[key], seen)
            for sub in node.get("allOf", ()):
                self._check_keywords(sub, seen)

    def _resolve(self, ref: str) -> Any:
        if not ref.startswith("#/$defs/"):
            raise NotImplementedError(f"$ref {ref!r}: only local #/$defs/ references are implemented")
        return self._defs[ref[len("#/$defs/") :]]

    def problems(self, instance: Any) -> list[tuple[tuple[Any, ...], str]]:
        """Every violation as ``(path within the variant, message)``, in ``jsonschema``'s words and order."""
        out: list[tuple[tuple[Any, ...], str]] = []
        self._check(instance, (), out)
        return out

    # Each schema node becomes one function (value, path, out) running its keywords' checks in the
    # schema's order (the order jsonschema reports them in); compiled once per checker, so a variant
    # costs a few calls per field instead of a generic engine's dispatch. ``$ref`` targets are compiled
    # once and shared (the cache is filled before descending, so a recursive reference would terminate).
    def _compile(self, schema: dict) -> Any:
        done = self._compiled.get(id(schema))
        if done is not None:
            return done
        steps: list[Any] = []

        def run(v: Any, path: tuple[Any, ...], out: list) -> None:
            for step in steps:
                step(v, path, out)

        self._compiled[id(schema)] = run
        for key, arg in schema.items():
            step = self._step(key, arg, schema)
            if step is not None:
                steps.append(step)
        return run

    def _valid(self, check: Any, v: Any) -> bool:
        found: list = []
        check(v, (), found)
        return not found

    def _step(self, key: str, arg: Any, schema: dict) -> Any:
        if key == "$ref":
            return self._compile(self._resolve(arg))
        if key == "type":
            types = arg if isinstance(arg, list) else [arg]
            tests = [_TYPES[t] for t in types]
            shown = ", ".join(repr(t) for t in types)

            def type_(v: Any, path: tuple, out: list) -> None:
                for t in tests:
                    if t(v):
                        return
                out.append((path, f"{v!r} is not of type {shown}"))

            return type_
        if key == "properties":
            subs = [(name, self._compile(sub)) for name, sub in arg.items()]

            def properties(v: Any, path: tuple, out: list) -> None:
                if isinstance(v, dict):
                    for name, sub in subs:
                        if name in v:
                            sub(v[name], path + (name,), out)

            return properties
        if key == "required":

            def required(v: Any, path: tuple, out: list) -> None:
                if isinstance(v, dict):
                    for name in arg:
                        if name not in v:
                            out.append((path, f"{name!r} is a required property"))

            return required
        if key == "additionalProperties":
            props = frozenset(schema.get("properties", {}))
            if isinstance(arg, dict):
                sub = self._compile(arg)

                def additional(v: Any, path: tuple, out: list) -> None:
                    if isinstance(v, dict):
                        for k in v:
                            if k not in props:
                                sub(v[k], path + (k,), out)

                return additional
            if arg is False:

                def closed(v: Any, path: tuple, out: list) -> None:
                    if isinstance(v, dict) and not props.issuperset(v):
                        shown = sorted((k for k in v if k not in props), key=str)
                        out.append(
                            (
                                path,
                                f"Additional properties are not allowed ({', '.join(repr(e) for e in shown)} "
                                f"{'was' if len(shown) == 1 else 'were'} unexpected)",
                            )
                        )

                return closed
            return None
        if key == "enum":

            def enum(v: Any, path: tuple, out: list) -> None:
                for each in arg:
                    if _equal(each, v):
                        return
                out.append((path, f"{v!r} is not one of {arg!r}"))

            return enum
        if key == "const":

            def const(v: Any, path: tuple, out: list) -> None:
                if not _equal(v, arg):
                    out.append((path, f"{arg!r} was expected"))

            return const
        if key in ("minimum", "maximum"):
            number, beyond = _TYPES["number"], (lt if key == "minimum" else gt)
            limit = "less than the minimum" if key == "minimum" else "greater than the maximum"

            def bound(v: Any, path: tuple, out: list) -> None:
                if number(v) and beyond(v, arg):
                    out.append((path, f"{v!r} is {limit} of {arg!r}"))

            return bound
        if key in ("minLength", "minItems", "maxLength", "maxItems"):
            kind = str if key.endswith("Length") else list
            if key.startswith("min"):
                beyond, word = lt, "should be non-empty" if arg == 1 else "is too short"
            else:
                beyond, word = gt, "is expected to be empty" if arg == 0 else "is too long"

            def length(v: Any, path: tuple, out: list) -> None:
                if isinstance(v, kind) and beyond(len(v), arg):
                    out.append((path, f"{v!r} {word}"))

            return length
        if key == "pattern":
            search = self._patterns[arg].search

            def pattern(v: Any, path: tuple, out: list) -> None:
                if isinstance(v, str) and not search(v):
                    out.append((path, f"{v!r} does not match {arg!r}"))

            return pattern
        if key == "items":
            sub = self._compile(arg)

            def items(v: Any, path: tuple, out: list) -> None:
                if isinstance(v, list):
                    for i, item in enumerate(v):
                        sub(item, path + (i,), out)

            return items
        if key == "propertyNames":
            sub = self._compile(arg)

            def property_names(v: Any, path: tuple, out: list) -> None:
                if isinstance(v, dict):
                    for name in v:
                        sub(name, path, out)

            return property_names
        if key == "allOf":
            parts = [self._compile(part) for part in arg]

            def all_of(v: Any, path: tuple, out: list) -> None:
                for part in parts:
                    part(v, path, out)

            return all_of
        if key == "if":
            cond = self._compile(arg)
            then = self._compile(schema["then"]) if "then" in schema else None

            def if_(v: Any, path: tuple, out: list) -> None:
                if then is not None and self._valid(cond, v):
                    then(v, path, out)

            return if_
        if key == "not":
            sub = self._compile(arg)

            def not_(v: Any, path: tuple, out: list) -> None:
                if self._valid(sub, v):
                    out.append((path, f"{v!r} should not be valid under {arg!r}"))

            return not_
        return None  # "then" (with its "if"), "description"


def _equal(one: Any, two: Any) -> bool:
    """JSON equality: ``True`` is not ``1`` (jsonschema's ``equal``), recursively."""
    if one is two:
        return True
    if isinstance(one, str) or isinstance(two, str):
        return bool(one == two)
    if isinstance(one, list) and isinstance(two, list):
        return len(one) == len(two) and all(_equal(a, b) for a, b in zip(one, two))
    if isinstance(one, dict) and isinstance(two, dict):
        return one.keys() == two.keys() and all(_equal(one[k], two[k]) for k in one)
    if isinstance(one, bool) or isinstance(two, bool):
        return type(one) is type(two) and one == two
    return bool(one == two)

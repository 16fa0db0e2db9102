"""Access to the manifest's JSON Schema (the machine-readable half of spec/FORMAT.md)."""

from __future__ import annotations

import json
import re
from functools import lru_cache
from importlib import resources
from typing import Any


@lru_cache(maxsize=1)
def load_schema() -> dict:
    return json.loads(resources.files(__package__).joinpath("manifest.schema.json").read_text())


#: The JSON Schema keywords manifest.schema.json uses inside a variant, and that :class:`VariantChecker`
#: implements; any other keyword there is refused when the checker is made, never silently skipped.
_KEYWORDS = frozenset({"type", "properties", "required", "additionalProperties", "$ref", "enum", "const", "minimum",
                       "minLength", "maxLength", "pattern", "items", "minItems", "maxItems", "propertyNames", "allOf",
                       "if", "then", "not", "description"})
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
    JSON Schema engine: a variant is checked by the typed model (:meth:`karchive.format.manifest.Variant.from_json`,
    in the reader's ``verify()``) and by this walk over the schema's own ``$defs``, which reports every
    violation the way ``jsonschema`` words it (``tests/test_verify_schema.py`` compares the two on every
    schema-derived mutation of a variant). At 10,000 variants the generic engine took about 20 s of
    ``karchive verify``'s 25 s (issue 24); this takes about a tenth of that.
    """

    def __init__(self, definition: str = "variant") -> None:
        schema = load_schema()
        self._defs: dict[str, Any] = schema["$defs"]
        self._root = self._defs[definition]
        self._patterns: dict[str, re.Pattern[str]] = {}
        self._check_keywords(self._root, set())

    def _check_keywords(self, node: Any, seen: set[str]) -> None:
        if isinstance(node, dict):
            unknown = set(node) - _KEYWORDS
            if unknown:
                raise NotImplementedError(f"manifest.schema.json uses {sorted(unknown)}, which VariantChecker does "
                                          "not implement: add them (and to the comparison test) before relying on it")
            if "pattern" in node:
                self._patterns[node["pattern"]] = re.compile(node["pattern"])
            ref = node.get("$ref")
            if ref is not None and ref not in seen:
                seen.add(ref)
                self._check_keywords(self._resolve(ref), seen)
            for key in ("properties",):
                for sub in node.get(key, {}).values():
                    self._check_keywords(sub, seen)
            for key in ("additionalProperties", "items", "propertyNames", "if", "then", "not"):
                if isinstance(node.get(key), dict):
                    self._check_keywords(node[key], seen)
            for sub in node.get("allOf", ()):
                self._check_keywords(sub, seen)

    def _resolve(self, ref: str) -> Any:
        if not ref.startswith("#/$defs/"):
            raise NotImplementedError(f"$ref {ref!r}: only local #/$defs/ references are implemented")
        return self._defs[ref[len("#/$defs/"):]]

    def problems(self, instance: Any) -> list[tuple[tuple[Any, ...], str]]:
        """Every violation as ``(path within the variant, message)``, in ``jsonschema``'s words and order."""
        out: list[tuple[tuple[Any, ...], str]] = []
        self._walk(instance, self._root, (), out)
        return out

    def _valid(self, instance: Any, schema: Any) -> bool:
        found: list[tuple[tuple[Any, ...], str]] = []
        self._walk(instance, schema, (), found)
        return not found

    def _walk(self, v: Any, schema: dict, path: tuple[Any, ...], out: list[tuple[tuple[Any, ...], str]]) -> None:
        for key, arg in schema.items():
            if key == "$ref":
                self._walk(v, self._resolve(arg), path, out)
            elif key == "type":
                types = arg if isinstance(arg, list) else [arg]
                if not any(_TYPES[t](v) for t in types):
                    out.append((path, f"{v!r} is not of type {', '.join(repr(t) for t in types)}"))
            elif key == "properties":
                if isinstance(v, dict):
                    for name, sub in arg.items():
                        if name in v:
                            self._walk(v[name], sub, path + (name,), out)
            elif key == "required":
                if isinstance(v, dict):
                    out.extend((path, f"{name!r} is a required property") for name in arg if name not in v)
            elif key == "additionalProperties":
                if isinstance(v, dict):
                    props = schema.get("properties", {})
                    extras = [k for k in v if k not in props]
                    if isinstance(arg, dict):
                        for k in extras:
                            self._walk(v[k], arg, path + (k,), out)
                    elif arg is False and extras:
                        shown = sorted(extras, key=str)
                        out.append((path, f"Additional properties are not allowed ({', '.join(repr(e) for e in shown)} "
                                          f"{'was' if len(shown) == 1 else 'were'} unexpected)"))
            elif key == "enum":
                if not any(_equal(each, v) for each in arg):
                    out.append((path, f"{v!r} is not one of {arg!r}"))
            elif key == "const":
                if not _equal(v, arg):
                    out.append((path, f"{arg!r} was expected"))
            elif key == "minimum":
                if _TYPES["number"](v) and v < arg:
                    out.append((path, f"{v!r} is less than the minimum of {arg!r}"))
            elif key == "minLength":
                if isinstance(v, str) and len(v) < arg:
                    out.append((path, f"{v!r} {'should be non-empty' if arg == 1 else 'is too short'}"))
            elif key == "maxLength":
                if isinstance(v, str) and len(v) > arg:
                    out.append((path, f"{v!r} {'is expected to be empty' if arg == 0 else 'is too long'}"))
            elif key == "pattern":
                if isinstance(v, str) and not self._patterns[arg].search(v):
                    out.append((path, f"{v!r} does not match {arg!r}"))
            elif key == "items":
                if isinstance(v, list):
                    for i, item in enumerate(v):
                        self._walk(item, arg, path + (i,), out)
            elif key == "minItems":
                if isinstance(v, list) and len(v) < arg:
                    out.append((path, f"{v!r} {'should be non-empty' if arg == 1 else 'is too short'}"))
            elif key == "maxItems":
                if isinstance(v, list) and len(v) > arg:
                    out.append((path, f"{v!r} {'is expected to be empty' if arg == 0 else 'is too long'}"))
            elif key == "propertyNames":
                if isinstance(v, dict):
                    for name in v:
                        self._walk(name, arg, path, out)
            elif key == "allOf":
                for sub in arg:
                    self._walk(v, sub, path, out)
            elif key == "if":
                if self._valid(v, arg):
                    if "then" in schema:
                        self._walk(v, schema["then"], path, out)
            elif key == "not":
                if self._valid(v, arg):
                    out.append((path, f"{v!r} should not be valid under {arg!r}"))


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

"""Trust policies: which keys may sign which archive names, how many must, which keys are revoked,
and when each key is valid (key rotation). A small TOML file, spec/SIGNING.md §5.

Everything a policy says is checked when it is loaded — unknown fields, unknown key names in a
rule, a threshold no set of keys can meet — because a typo in a security policy must be an error,
not a silently weaker policy. Its sha256 identifies it (cache receipts record what was verified
under which policy).
"""

from __future__ import annotations

import datetime
import fnmatch
import hashlib
import os
import re
from dataclasses import dataclass
from typing import Any

from ..core.digest import is_sha256_hex
from ..core.fsio import read_regular
from ..core.grammar import fullmatch
from ..core.tomlio import parse_toml
from ..core.units import utc_text
from ..errors import KeyFileError, TrustPolicyError
from .keys import PublicKey, parse_inline_public_key
from .registry_policy import RegistryRules, parse_registry_section, unknown_fields

POLICY_VERSION = 1
MAX_POLICY_BYTES = 1024 * 1024
_KEY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}")

_TOP = {"version", "keys", "rules", "revoked", "registry"}
_KEY_FIELDS = {"name", "public_key", "id", "not_before", "not_after"}
_RULE_FIELDS = {"names", "keys", "threshold"}


def is_key_name(value: object) -> bool:
    """A key name a policy accepts: letters, digits, ``._@+-``, at most 128 characters (whole string)."""
    return fullmatch(_KEY_NAME, value)


@dataclass(frozen=True)
class PolicyKey:
    """A public key the policy knows, with its rotation window (None: open on that side)."""

    name: str
    public: PublicKey
    not_before: datetime.datetime | None = None
    not_after: datetime.datetime | None = None

    @property
    def key_id(self) -> str:
        return self.public.key_id

    def window(self) -> dict[str, str | None]:
        return {"not_before": _fmt(self.not_before), "not_after": _fmt(self.not_after)}


@dataclass(frozen=True)
class Rule:
    """Archives whose name matches one of ``names`` (shell globs, case-sensitive) need ``threshold``
    signatures by distinct keys among ``keys``; ``threshold = 0`` allows unsigned archives."""

    names: tuple[str, ...]
    keys: tuple[str, ...]
    threshold: int
    index: int

    def matches(self, archive_name: str) -> bool:
        return any(fnmatch.fnmatchcase(archive_name, pattern) for pattern in self.names)

    def describe(self) -> str:
        return f"rule {self.index + 1} (names {', '.join(self.names)})"


@dataclass(frozen=True)
class TrustPolicy:
    keys: tuple[PolicyKey, ...]
    rules: tuple[Rule, ...]
    revoked: frozenset[str]
    sha256: str
    source: str = "<policy>"
    #: The ``[registry]`` section: signed registry metadata (spec/SIGNING.md §11); None when absent.
    registry: RegistryRules | None = None

    def rule_for(self, archive_name: str) -> Rule | None:
        """The first rule, in file order, whose patterns match the name (like a firewall's rules)."""
        return next((r for r in self.rules if r.matches(archive_name)), None)

    def key(self, key_id: str) -> PolicyKey | None:
        return next((k for k in self.keys if k.key_id == key_id), None)

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "sha256": self.sha256}

    @classmethod
    def load(cls, path: str | os.PathLike) -> TrustPolicy:
        where = os.fspath(path)
        try:  # a regular file only: a FIFO must not hang the load
            data = read_regular(path, MAX_POLICY_BYTES)
        except OSError as exc:
            raise TrustPolicyError(f"cannot read trust policy {where}: {exc.strerror or exc}", path=where) from exc
        return cls.from_bytes(data, where)

    @classmethod
    def from_bytes(cls, data: bytes, where: str = "<policy>") -> TrustPolicy:
        if len(data) > MAX_POLICY_BYTES:
            raise TrustPolicyError(f"trust policy {where} is larger than {MAX_POLICY_BYTES} bytes", path=where)
        doc = parse_toml(data, f"trust policy {where}", lambda msg: TrustPolicyError(msg, path=where))
        return _parse(doc, hashlib.sha256(data).hexdigest(), where)


def _fmt(t: datetime.datetime | None) -> str | None:
    return None if t is None else utc_text(t)


def _time(value: Any, where: str, path: str) -> datetime.datetime | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            value = None
    if not isinstance(value, datetime.datetime) or value.tzinfo is None:
        raise TrustPolicyError(
            f"{path}: {where} must be a date-time with a UTC offset, e.g. 2026-07-01T00:00:00Z "
            "(a local time would mean different instants on different servers)",
            path=path,
        )
    return value


def _parse(doc: dict, sha256: str, path: str) -> TrustPolicy:
    def bad(msg: str) -> TrustPolicyError:
        return TrustPolicyError(f"{path}: {msg}", path=path)

    unknown_fields(doc, _TOP, "the policy", path)
    # Values are typed strictly (issue 20): `version = true` and `version = 1.0` both equal 1 in Python,
    # and `revoked = {}` is falsy, so loose checks accepted them as a policy they do not spell.
    version = doc.get("version")
    if type(version) is not int or version != POLICY_VERSION:
        raise bad(
            f"'version = {POLICY_VERSION}' is required, an integer (found {version!r}); "
            "a newer policy version needs a newer karchive"
        )
    for table, spelling in (
        ("keys", "an array of [[keys]] tables"),
        ("rules", "an array of [[rules]] tables"),
        ("revoked", "a list of key ids"),
    ):
        if table in doc and type(doc[table]) is not list:
            raise bad(f"'{table}' must be {spelling}, not {type(doc[table]).__name__}")
    keys: list[PolicyKey] = []
    for i, k in enumerate(doc.get("keys", [])):
        where = f"[[keys]] #{i + 1}"
        if not isinstance(k, dict):
            raise bad(f"{where} is not a table")
        unknown_fields(k, _KEY_FIELDS, where, path)
        name = k.get("name")
        if not isinstance(name, str) or not fullmatch(_KEY_NAME, name):
            raise bad(f"{where} needs a name (letters, digits, '._@+-', up to 128 characters), got {name!r}")
        try:
            public = parse_inline_public_key(k.get("public_key"), f"key {name!r}: public_key", path)
        except KeyFileError as exc:
            raise bad(str(exc)) from exc
        if "id" in k and (type(k["id"]) is not str or k["id"] != public.key_id):
            raise bad(
                f"key {name!r}: id {k['id']!r} is not the id of its public_key ({public.key_id}); "
                "one of them was copied wrongly"
            )
        nb = _time(k.get("not_before"), f"key {name!r}: not_before", path)
        na = _time(k.get("not_after"), f"key {name!r}: not_after", path)
        if nb and na and nb >= na:
            raise bad(f"key {name!r}: not_before must be earlier than not_after")
        keys.append(PolicyKey(name, public, nb, na))
    names = [k.name for k in keys]
    if len(set(names)) != len(names):
        raise bad(f"key names must be unique: {sorted({n for n in names if names.count(n) > 1})}")
    ids = [k.key_id for k in keys]
    if len(set(ids)) != len(ids):
        dup = next(k for k in keys if ids.count(k.key_id) > 1)
        raise bad(f"the same public key is listed twice (id {dup.key_id}); list it once, with one window")
    revoked = doc.get("revoked", [])
    wrong = next((r for r in revoked if not is_sha256_hex(r)), None)
    if wrong is not None:  # whole string: "<id>\n" (a TOML multi-line string) once loaded and revoked nothing
        raise bad(
            f"'revoked' must be a list of key ids (64 lowercase hex digits, as karchive keygen prints, "
            f"nothing before or after them), got {wrong!r}"
        )
    rules: list[Rule] = []
    for i, r in enumerate(doc.get("rules", [])):
        where = f"[[rules]] #{i + 1}"
        if not isinstance(r, dict):
            raise bad(f"{where} is not a table")
        unknown_fields(r, _RULE_FIELDS, where, path)
        pats = r.get("names")
        if not isinstance(pats, list) or not pats or any(not isinstance(p, str) or not p for p in pats):
            raise bad(f"{where}: 'names' must be a non-empty list of archive-name patterns (globs such as 'kernels-*')")
        rkeys = r.get("keys", [])
        if not isinstance(rkeys, list) or any(not isinstance(n, str) for n in rkeys):
            raise bad(f"{where}: 'keys' must be a list of key names from [[keys]]")
        missing = [n for n in rkeys if n not in names]
        if missing:
            raise bad(f"{where}: unknown key name(s) {missing}; [[keys]] defines {names}")
        threshold = r.get("threshold", 1)
        if type(threshold) is not int or threshold < 0:
            raise bad(f"{where}: 'threshold' must be an integer >= 0")
        if threshold > len(set(rkeys)):
            raise bad(
                f"{where}: threshold {threshold} needs more distinct keys than the rule lists ({len(set(rkeys))})"
            )
        rules.append(Rule(tuple(pats), tuple(dict.fromkeys(rkeys)), threshold, i))
    if not rules:
        raise bad('no [[rules]]: the policy would refuse every archive; add a rule (names = ["*"] for all)')
    registry = parse_registry_section(doc.get("registry"), names, path)
    return TrustPolicy(tuple(keys), tuple(rules), frozenset(revoked), sha256, path, registry)

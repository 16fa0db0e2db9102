"""Format 2 manifest shards: one kernel's variants, stored by column, with where their members lie.

A shard (spec/FORMAT.md §6.5) is canonical JSON::

    {"kernel": "add_kernel",
     "parts": {"field": [["num_warps", 4], ...], "abi": [[0, 7, 9, ...], ...], "abi_params": [...],
               "options": [[...], ...], "provenance": [[...], ...], "param": [...], "source": [...],
               "target": [...]},
     "variants": {"key": ["<64 hex>", ...], "target": [2, ...], "params": [[0, 1, 2, 5], ...],
                  "options": [1, ...], "abi": [0, ...], "provenance": [0, ...],
                  "files.binary": [["./kernel.cubin", size, sha256, frame, offset], ...],
                  "files.metadata": [...], "files.ir": [{"ptx": [...], ...}, ...], "files.source": [0, ...]}}

``variants`` holds one column per field of the manifest's ``variants[]`` entries (§6.1), each a list
with one value per variant (``null``: the variant lacks that field); the kernel is the shard's. Values
are indexes into ``parts``: ``target``, ``options``, ``abi`` and ``provenance`` as a whole, ``params``
element by element (variants differ in a constexpr or two), and ``files.source``. An ABI, an options
object and a provenance object are stored as a list of indexes into ``parts.field``, whose entries are
``[key, value]`` pairs (the objects of one kernel differ in a field or two: ``shared``,
``num_stages``), except an ABI's ``params`` pair, whose value is an index into ``parts.abi_params``.
The variants of one kernel share almost all of these, so each distinct value is stored, and checked, once. A file object
(``files.<role>``, and each stage of ``files.ir``) becomes ``[path, size, sha256, frame, offset]``:
the member's place (frame number, data offset in the decompressed frame), which format 1 kept in the
index; a path under the variant's own directory is written ``./<rest>`` for ``variants/<key>/<rest>``
(no member name starts with ``./``). Any other column is a variant field stored as it is.

Columns and shared parts keep a shard small and quick to parse: a shard is read on the way to a
kernel's first launch. This module maps shards to and from the manifest's JSON
(:func:`encode_shard`, :func:`decode_shard`) and, for loading, straight to checked model objects
(:func:`shard_variants`), which the model's own checks build; :mod:`.reader` checks the places.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import chain, repeat
from operator import add, itemgetter
from typing import Any

from ..core.jsonio import canonical_json
from ..errors import FormatError, SchemaError
from .manifest import Abi, FileRef, Param, Provenance, Target, Variant, is_ir_stage

#: Variant fields stored once per distinct value, and the tables of parts a shard may have.
INTERNED = ("abi", "options", "provenance", "target")
PARTS = ("abi", "abi_params", "field", "options", "param", "provenance", "source", "target")
#: Parts stored as lists of ``parts.field`` indexes (objects that differ from each other in a few fields).
RECORDS = ("abi", "options", "provenance")
#: A located file object: path, size, sha256, frame number, data offset.
LOCATED = 5
FILES = "files."

#: (member name, frame, data offset, size, sha256) of one member a shard places.
Located = tuple[str, int, int, int, Any]


class _Table:
    """Distinct JSON values, by canonical text, in first-seen order."""

    def __init__(self) -> None:
        self.values: list[Any] = []
        self._seen: dict[bytes, int] = {}

    def add(self, value: Any) -> int:
        index = self._seen.setdefault(canonical_json(value), len(self.values))
        if index == len(self.values):
            self.values.append(value)
        return index


# -- writing ----------------------------------------------------------------------------------------
def _encode_file(ref: Any, locate: Callable[[str], tuple[int, int]], home: str, where: str) -> list:
    if not isinstance(ref, dict) or not isinstance(ref.get("path"), str):
        raise SchemaError(f"{where}: expected a file object", where=where)
    path = ref["path"]
    frame, offset = locate(path)
    short = "./" + path[len(home) :] if path.startswith(home) and len(path) > len(home) else path
    return [short, ref.get("size"), ref.get("sha256"), frame, offset]


def file_paths(files: Any) -> list[str]:
    """Member names a raw variant's ``files`` refers to (for deciding which shard owns a member)."""
    out: list[str] = []
    if not isinstance(files, dict):
        return out
    for value in files.values():
        if isinstance(value, dict) and isinstance(value.get("path"), str):
            out.append(value["path"])
        elif isinstance(value, dict):
            out.extend(
                ref["path"] for ref in value.values() if isinstance(ref, dict) and isinstance(ref.get("path"), str)
            )
    return out


def encode_shard(kernel: str, variants: list[dict], locate: Callable[[str], tuple[int, int]]) -> dict:
    """The shard document for ``variants`` (raw manifest entries of one kernel, in manifest order)."""
    parts = {name: _Table() for name in PARTS}
    n = len(variants)
    columns: dict[str, list[Any]] = {}

    def column(name: str) -> list[Any]:
        col = columns.get(name)
        if col is None:
            col = columns[name] = [None] * n
        return col

    for i, variant in enumerate(variants):
        where = f"variants of {kernel!r}[{i}]"
        if not isinstance(variant, dict):
            raise SchemaError(f"{where}: expected an object", where=where)
        for name, value in variant.items():
            if name == "kernel":
                continue
            if name == "params":
                if not isinstance(value, list):
                    raise SchemaError(f"{where}.params: expected a list", where=f"{where}.params")
                column(name)[i] = [parts["param"].add(p) for p in value]
            elif name == "abi":
                if not isinstance(value, dict) or not isinstance(value.get("params"), list):
                    raise SchemaError(f"{where}.abi: expected an object with a params list", where=f"{where}.abi")
                record = {**value, "params": parts["abi_params"].add(value["params"])}
                column(name)[i] = parts["abi"].add([parts["field"].add([k, v]) for k, v in sorted(record.items())])
            elif name in RECORDS:
                if not isinstance(value, dict):
                    raise SchemaError(f"{where}.{name}: expected an object", where=f"{where}.{name}")
                column(name)[i] = parts[name].add([parts["field"].add([k, v]) for k, v in sorted(value.items())])
            elif name in INTERNED:
                column(name)[i] = parts[name].add(value)
            elif name == "files":
                _encode_files(
                    value, column, i, locate, f"variants/{variant.get('key')}/", parts["source"].add, f"{where}.files"
                )
            elif name.startswith(FILES):
                raise SchemaError(f"{where}: field {name!r} clashes with a shard column", where=where)
            else:
                column(name)[i] = value
    return {"kernel": kernel, "parts": {k: t.values for k, t in parts.items() if t.values}, "variants": columns}


def _encode_files(
    files: Any,
    column: Callable[[str], list],
    i: int,
    locate: Callable[[str], tuple[int, int]],
    home: str,
    source: Callable[[Any], int],
    where: str,
) -> None:
    if not isinstance(files, dict):
        raise SchemaError(f"{where}: expected an object", where=where)
    column(FILES + "binary")  # every shard has these columns, so a row always has a files object
    for role, value in files.items():
        if role == "source":
            if value is not None:
                column(FILES + role)[i] = source(value)
        elif role == "ir":
            if not isinstance(value, dict):
                raise SchemaError(f"{where}.ir: expected a map of file objects", where=f"{where}.ir")
            column(FILES + role)[i] = {
                stage: _encode_file(ref, locate, home, f"{where}.ir.{stage}") for stage, ref in value.items()
            }
        else:
            column(FILES + role)[i] = _encode_file(value, locate, home, f"{where}.{role}")


# -- reading ----------------------------------------------------------------------------------------
def _index(value: Any, table: list, what: str) -> Any:
    if type(value) is not int or not 0 <= value < len(table):
        raise FormatError(f"{what}: {value!r} is not an index into its parts table")
    return table[value]


def _loc(value: Any, home: str) -> Located | None:
    """A well-formed located file (path resolved), else None."""
    if type(value) is list and len(value) == LOCATED:
        path, size, digest, frame, offset = value
        if (
            type(path) is str
            and type(size) is int
            and type(frame) is int
            and type(offset) is int
            and size >= 0
            and frame >= 0
            and offset >= 0
        ):
            return (home + path[2:] if path.startswith("./") else path), frame, offset, size, digest
    return None


def _located(value: Any, home: str, where: str) -> Located:
    """:func:`_loc`, or the error saying what is wrong with it."""
    loc = _loc(value, home)
    if loc is not None:
        return loc
    if type(value) is not list or len(value) != LOCATED:
        raise FormatError(f"{where}: expected [path, size, sha256, frame, offset]")
    if type(value[0]) is not str:
        raise FormatError(f"{where}: the path must be a string")
    raise FormatError(f"{where}: size, frame and offset must be non-negative integers, got {value[1:]!r}")


class _Shard:
    """A shard document checked as far as the encoding goes: its parts and columns."""

    def __init__(self, doc: Any, kernel: str) -> None:
        where = self.where = f"shard of {kernel!r}"
        if (
            not isinstance(doc, dict)
            or not isinstance(doc.get("parts"), dict)
            or not isinstance(doc.get("variants"), dict)
        ):
            raise FormatError(f"{where}: expected an object with parts and variants")
        if doc.get("kernel") != kernel:
            raise FormatError(f"{where}: the shard says it holds kernel {doc.get('kernel')!r}")
        parts = doc["parts"]
        for name, values in parts.items():
            if name not in PARTS or not isinstance(values, list):
                raise FormatError(f"{where}: unknown or malformed part {name!r}")
        fields = parts.get("field", [])
        if not (
            set(map(type, fields)) <= {list}
            and set(map(len, fields)) <= {2}
            and set(map(type, map(itemgetter(0), fields))) <= {str}
        ):  # else say which one is not
            for i, pair in enumerate(fields):
                if type(pair) is not list or len(pair) != 2 or type(pair[0]) is not str:
                    raise FormatError(f"{where}: parts.field[{i}] is not a [key, value] pair")
        records = {name: self._records(parts.get(name, []), fields, f"{where}: parts.{name}") for name in RECORDS}
        abi_params = parts.get("abi_params", [])
        abis = records["abi"]
        refs = [abi.get("params") for abi in abis]
        if int_column(refs, len(abi_params)):  # the usual case: one C-speed pass for every ABI's reference
            for abi, ref in zip(abis, refs):
                abi["params"] = abi_params[ref]
        else:
            for i, abi in enumerate(abis):
                abi["params"] = _index(abi.get("params"), abi_params, f"{where}: parts.abi[{i}].params")
        self.tables = {**records, "target": parts.get("target", [])}
        self.param = parts.get("param", [])
        self.source = parts.get("source", [])
        columns = doc["variants"]
        keys = columns.get("key")
        if type(keys) is not list:
            raise FormatError(f"{where}: variants has no key column")
        self.n = len(keys)
        for name, col in columns.items():
            if type(col) is not list or len(col) != self.n:
                raise FormatError(f"{where}: column {name!r} is not a list of {self.n} values")
            if name == "kernel":
                raise FormatError(f"{where}: a shard must not have a kernel column (the shard names its kernel)")
            if name.startswith(FILES) and name[len(FILES) :] not in ("binary", "metadata", "ir", "source"):
                raise FormatError(f"{where}: unknown file column {name!r}")
        self.columns = columns
        self.kernel = kernel

    @classmethod
    def _records(cls, table: list, fields: list, where: str) -> list[dict]:
        """:meth:`_record` of each entry of a parts table: every index checked in one C-speed pass and
        every object made at C speed when nothing is off, else entry by entry (which says what is)."""
        if set(map(type, table)) <= {list} and int_column(list(chain.from_iterable(table)), len(fields)):
            out = list(map(dict, map(map, repeat(fields.__getitem__), table)))
            if list(map(len, out)) == list(map(len, table)):  # no key named twice
                return out
        return [cls._record(r, fields, f"{where}[{i}]") for i, r in enumerate(table)]

    @staticmethod
    def _record(indexes: Any, fields: list, where: str) -> dict:
        """An object from its ``parts.field`` indexes (each key once)."""
        if type(indexes) is not list:
            raise FormatError(f"{where}: expected a list of indexes into parts.field")
        if indexes and not int_column(indexes, len(fields)):
            raise FormatError(f"{where}: not a list of indexes into parts.field")
        record = dict(map(fields.__getitem__, indexes))
        if len(record) != len(indexes):
            raise FormatError(f"{where}: names a key twice")
        return record

    def column(self, name: str) -> list:
        return self.columns.get(name) or [None] * self.n

    def value(self, name: str, v: Any, i: int) -> Any:
        """Column ``name``'s value ``v`` for variant ``i``, resolved (``None``: absent)."""
        if v is None:
            return None
        w = f"{self.where}: variants[{i}]"
        table = self.tables.get(name)
        if table is not None:
            return _index(v, table, f"{w}.{name}")
        if name == "params":
            if type(v) is not list:
                raise FormatError(f"{w}.params: expected a list of indexes into parts.param")
            return [_index(p, self.param, f"{w}.params") for p in v]
        return v

    def files(
        self, i: int, binary: Any, metadata: Any, ir: Any, source: Any, home: str, located: list[Located]
    ) -> dict[str, Any]:
        """Variant ``i``'s ``files`` object (and the members it places, appended to ``located``)."""
        w = f"{self.where}: variants[{i}].files"

        def ref(value: Any, where: str) -> dict[str, Any]:
            loc = _located(value, home, where)
            located.append(loc)
            return {"path": loc[0], "size": loc[3], "sha256": loc[4]}

        out = {role: ref(v, f"{w}.{role}") for role, v in (("binary", binary), ("metadata", metadata)) if v is not None}
        if ir is not None:
            if type(ir) is not dict:
                raise FormatError(f"{w}.ir: expected a map of located files")
            out["ir"] = {stage: ref(value, f"{w}.ir.{stage}") for stage, value in ir.items()}
        if source is not None:
            out["source"] = _index(source, self.source, f"{w}.source")
        return out


def decode_shard(doc: Any, kernel: str) -> tuple[list[dict], list[Located]]:
    """(raw manifest entries of ``kernel``, the members they place) from a shard: the manifest's JSON,
    for callers that want it whole. Rows that share a part share the same JSON object."""
    shard = _Shard(doc, kernel)
    located: list[Located] = []
    entries: list[dict] = [{"kernel": kernel} for _ in range(shard.n)]
    files = [shard.column(FILES + r) for r in ("binary", "metadata", "ir", "source")]
    keys = shard.columns["key"]
    for i, (entry, b, m, ir, src) in enumerate(zip(entries, *files)):
        entry["files"] = shard.files(i, b, m, ir, src, f"variants/{keys[i]}/", located)
    for name, col in shard.columns.items():
        if name.startswith(FILES):
            continue
        for i, (entry, v) in enumerate(zip(entries, col)):
            if v is not None:
                entry[name] = shard.value(name, v, i)
    return entries, located


_HEX = b"0123456789abcdef"
_NONE = type(None)


def _hex64s(values: tuple[str, ...] | list[str]) -> bool:
    """Every value 64 lowercase hex digits (the caller has checked that each is a str): a sha256 or a
    variant key. Joined and tested in two C passes (deleting the hex digits must leave nothing), which
    a regex over a shard's thousands of digests took ten times longer to do."""
    if set(map(len, values)) - {64}:
        return False
    joined = "".join(values)
    return joined.isascii() and not joined.encode("ascii").translate(None, _HEX)


def int_column(column: Any, bound: int) -> bool:
    """Every value an int in [0, bound) (checked a column at a time, at C speed; the reader's index uses it too)."""
    return type(column) in (list, tuple) and (
        not column or list(map(type, column)).count(int) == len(column) and min(column) >= 0 and max(column) < bound
    )


def _files(column: Any, homes: list[str]) -> tuple[list[FileRef], list[Located]] | None:
    """The file refs and places of a column of located files, or None if any is not well formed."""
    if not column:
        return [], []
    if set(map(type, column)) != {list} or set(map(len, column)) != {LOCATED}:
        return None
    paths, sizes, digests, frames, offsets = zip(*column)
    if (
        set(map(type, paths)) != {str}
        or set(map(type, digests)) != {str}
        or not _hex64s(digests)
        or not int_column(sizes, 1 << 62)
        or not int_column(frames, 1 << 62)
        or not int_column(offsets, 1 << 62)
    ):
        return None
    if all(map(str.startswith, paths, repeat("./"))):  # the usual case, at C speed: every file in its variant's home
        full = list(map(add, homes, map(str.removeprefix, paths, repeat("./"))))
    else:
        full = [home + p[2:] if p.startswith("./") else p for home, p in zip(homes, paths)]
    # FileRef is a named tuple: tuple.__new__ makes one without the Python-level __new__ namedtuple adds.
    return (
        list(map(tuple.__new__, repeat(FileRef), zip(full, sizes, digests))),
        list(zip(full, frames, offsets, sizes, digests)),
    )


def _bulk(shard: _Shard, kernel: str) -> tuple[list[Variant], list[Located]] | None:
    """:func:`shard_variants` for a shard with nothing unusual, checked a column at a time: the same
    checks, but each distinct part parsed once and each column tested in a few C-speed passes. None
    if anything is off (the row-by-row path then finds and reports it)."""
    cols, n = shard.columns, shard.n
    required = ("key", "target", "params", "options", "abi", "provenance", "files.binary", "files.metadata")
    if any(c not in cols for c in required):  # columns this version does not know hold nothing the model keeps
        return None
    keys = cols["key"]
    if n == 0:
        return [], []
    if set(map(type, keys)) != {str} or not _hex64s(keys):
        return None
    targets, abis, options, provs = (shard.tables[k] for k in ("target", "abi", "options", "provenance"))
    param, sources = shard.param, shard.source
    tc, pc, oc, ac, vc = cols["target"], cols["params"], cols["options"], cols["abi"], cols["provenance"]
    if not (
        int_column(tc, len(targets))
        and int_column(oc, len(options))
        and int_column(ac, len(abis))
        and int_column(vc, len(provs))
        and set(map(type, pc)) == {list}
        and int_column(list(chain.from_iterable(pc)), len(param))
    ):
        return None
    src = cols.get("files.source") or [None] * n
    if (
        not set(map(type, src)) <= {int, _NONE}
        or not int_column([x for x in src if x is not None], len(sources))
        or not all(type(sources[x]) is str for x in set(src) if x is not None)
    ):
        return None
    if not all(type(options[o]) is dict for o in set(oc)):
        return None
    homes = [f"variants/{k}/" for k in keys]
    binary, metadata = _files(cols["files.binary"], homes), _files(cols["files.metadata"], homes)
    irc = cols.get("files.ir") or [None] * n
    if binary is None or metadata is None or not set(map(type, irc)) <= {dict, _NONE}:
        return None
    shapes = set(map(tuple, irc)) if set(map(type, irc)) == {dict} else None
    if shapes is not None and len(shapes) == 1 and () not in shapes:
        # The usual shard: every variant has the same IR stages, in the same order; flattened and
        # regrouped at C speed (the loop below does the same for any other mix).
        (stages,) = shapes
        k = len(stages)
        values = list(chain.from_iterable(map(dict.values, irc)))
        ir_files = _files(values, list(chain.from_iterable(zip(*[homes] * k))))
        if ir_files is None or not all(map(is_ir_stage, stages)):
            return None
        irs: list[dict[str, FileRef]] = list(map(dict, map(zip, repeat(stages), zip(*[iter(ir_files[0])] * k))))
    else:
        owners: list[int] = []
        stage_list: list[str] = []
        values = []
        for i, ir in enumerate(irc):
            if ir:
                owners.extend([i] * len(ir))
                stage_list.extend(ir)
                values.extend(ir.values())
        ir_files = _files(values, [homes[i] for i in owners])
        if ir_files is None or not all(map(is_ir_stage, set(stage_list))):
            return None
        irs = [{} for _ in range(n)]
        for i, stage, ref in zip(owners, stage_list, ir_files[0]):
            irs[i][stage] = ref
    where = shard.where
    ptuples = list(map(tuple, pc))
    try:  # each distinct part once, through the model's own checks (the message only built for a failure)
        target_of = {i: Target.from_json(targets[i], f"{where}: parts.target[{i}]") for i in set(tc)}
        prov_of = {i: Provenance.from_json(provs[i], f"{where}: parts.provenance[{i}]") for i in set(vc)}
        param_of = {}
        for i in set(chain.from_iterable(pc)):
            p = Param._valid(param[i])
            param_of[i] = p if p is not None else Param.from_json(param[i], f"{where}: parts.param[{i}]")
        params_of = dict(zip(ptuples, map(tuple, map(map, repeat(param_of.__getitem__), ptuples))))
        if any(len({p.name for p in ps}) != len(ps) for ps in params_of.values()):
            return None  # a name twice: the row-by-row path says where
        memo: dict = {}
        # A FormatError here only sends the shard to the row-by-row path, which says where it is: no
        # location is spelled out per ABI (one per variant, often).
        abi_of = {(a, n_ps): Abi.from_json(abis[a], n_ps, where, memo) for a, n_ps in set(zip(ac, map(len, ptuples)))}
    except FormatError:
        return None
    out = [
        Variant.checked_new(
            kernel,
            key,
            target_of[ti],
            params_of[ps],
            options[oi],
            abi_of[(ai, len(ps))],
            b,
            m,
            ir,
            sources[si] if si is not None else None,
            prov_of[vi],
        )
        for key, ti, ps, oi, ai, vi, b, m, ir, si in zip(
            keys, tc, ptuples, oc, ac, vc, binary[0], metadata[0], irs, src
        )
    ]
    return out, binary[1] + metadata[1] + ir_files[1]


def shard_variants(doc: Any, kernel: str) -> tuple[list[Variant], list[Located]]:
    """(checked variants of ``kernel``, the members they place) from a shard: a column at a time
    (:func:`_bulk`) when nothing is unusual, else row by row through :meth:`Variant.from_json`, whose
    memo parses each distinct part once and which gives the precise error.
    """
    shard = _Shard(doc, kernel)
    bulk = _bulk(shard, kernel)
    if bulk is not None:
        return bulk
    located: list[Located] = []
    out: list[Variant] = []
    memo: dict = {}
    names = ("key", "target", "params", "options", "abi", "provenance")
    files = tuple(FILES + role for role in ("binary", "metadata", "ir", "source"))
    for i, row in enumerate(zip(shard.columns["key"], *map(shard.column, names[1:] + files))):
        key, (b, m, ir, src) = row[0], row[len(names) :]
        entry: dict[str, Any] = {"kernel": kernel, "files": shard.files(i, b, m, ir, src, f"variants/{key}/", located)}
        entry.update((name, shard.value(name, value, i)) for name, value in zip(names, row) if value is not None)
        out.append(Variant.from_json(entry, f"{shard.where}: variants[{i}]", memo))
    return out, located

"""Build spec files (TOML): which kernels, signatures, constexprs, options and targets to compile.

Every list-valued field multiplies: one variant per element of the product over constexpr values,
option values, signatures and targets. The whole file is validated before anything compiles.
"""

from __future__ import annotations

import itertools
import os
import sys
from dataclasses import dataclass, field
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from ..errors import KarchiveError, SpecFileError
from .aot import BACKEND_OPTIONS, VariantRequest
from ..format.target import Target
from .buildenv import validate_env

_KERNEL_KEYS = {"source", "signature", "signatures", "constexprs", "targets", "cuda", "hip", "include_ir"}
_ALL_OPTIONS = set().union(*BACKEND_OPTIONS.values())


@dataclass
class BuildSpec:
    name: str
    version: str
    requests: list[VariantRequest]
    include_ir: bool = True
    dictionary: Any = "auto"
    level: int = 19
    path: str | None = None
    warnings: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # [archive] env: codegen environment applied to every compile


def _as_list(value: Any) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _product(table: dict[str, Any]) -> list[dict[str, Any]]:
    keys = sorted(table)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(_as_list(table[k]) for k in keys))]


def load_spec(path: str | os.PathLike) -> BuildSpec:
    path = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError as exc:
        raise SpecFileError(f"spec file not found: {path}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise SpecFileError(f"{path}: not valid TOML: {exc}") from exc
    return parse_spec(data, base_dir=os.path.dirname(os.path.abspath(path)), label=path)


def parse_spec(data: dict, base_dir: str, label: str = "<spec>") -> BuildSpec:
    archive = data.get("archive")
    if not isinstance(archive, dict):
        raise SpecFileError(f"{label}: missing [archive] table")
    unknown_top = set(data) - {"archive", "kernel"}
    if unknown_top:
        raise SpecFileError(f"{label}: unknown top-level keys {sorted(unknown_top)}")
    name, version = archive.get("name"), archive.get("version")
    if not isinstance(name, str) or not name or not isinstance(version, str) or not version:
        raise SpecFileError(f"{label}: [archive] needs string 'name' and 'version'")
    unknown_archive = set(archive) - {"name", "version", "targets", "include_ir", "dictionary", "level", "env"}
    if unknown_archive:
        raise SpecFileError(f"{label}: unknown [archive] keys {sorted(unknown_archive)}")
    env = validate_env(archive.get("env"), f"{label}: [archive] env")
    default_targets = _as_list(archive.get("targets", []))
    include_ir = bool(archive.get("include_ir", True))
    kernels = data.get("kernel")
    if not isinstance(kernels, list) or not kernels:
        raise SpecFileError(f"{label}: no [[kernel]] entries")
    requests: list[VariantRequest] = []
    for n, k in enumerate(kernels):
        where = f"{label}: kernel #{n + 1}"
        if not isinstance(k, dict) or not isinstance(k.get("source"), str):
            raise SpecFileError(f"{where}: needs source = 'file.py:fn' or 'package.module:fn'")
        where = f"{label}: kernel {k['source']}"
        options = {key: k[key] for key in k if key in _ALL_OPTIONS}
        unknown = set(k) - _KERNEL_KEYS - _ALL_OPTIONS
        if unknown:
            raise SpecFileError(f"{where}: unknown keys {sorted(unknown)} (options known: {sorted(_ALL_OPTIONS)})")
        if "signature" in k and "signatures" in k:
            raise SpecFileError(f"{where}: give 'signature' or 'signatures', not both")
        signatures = _as_list(k["signatures"]) if "signatures" in k else [k.get("signature")]
        if any(not isinstance(s, (str, dict)) for s in signatures):
            raise SpecFileError(f"{where}: signature must be a string such as '*fp32:16, i32' or a table name -> type")
        constexprs = k.get("constexprs", {})
        if not isinstance(constexprs, dict):
            raise SpecFileError(f"{where}: constexprs must be a table, e.g. {{ BLOCK = [256, 1024] }}")
        targets = _as_list(k.get("targets", default_targets))
        if not targets:
            raise SpecFileError(f"{where}: no targets (set [archive] targets or the kernel's targets)")
        for t in targets:
            target = Target.parse(t)
            opts = dict(options)
            backend_opts = k.get(target.backend, {})
            if not isinstance(backend_opts, dict):
                raise SpecFileError(f"{where}: [{target.backend}] must be a table of options")
            opts.update(backend_opts)
            bad = set(opts) - BACKEND_OPTIONS[target.backend]
            if bad:
                raise SpecFileError(
                    f"{where}: options {sorted(bad)} do not apply to {target.backend}; "
                    f"put them under a [kernel.{'cuda' if target.backend == 'hip' else 'hip'}] table or remove them"
                )
            for sig in signatures:
                for cx in _product(constexprs):
                    for op in _product(opts):
                        requests.append(VariantRequest(
                            kernel_ref=k["source"], signature=sig, target=str(t), constexprs=cx, options=op,
                            include_ir=bool(k.get("include_ir", include_ir)), base_dir=base_dir, env=dict(env),
                        ))
    dictionary = archive.get("dictionary", "auto")
    if dictionary not in ("auto", "none", "always") and not isinstance(dictionary, int):
        raise SpecFileError(f"{label}: dictionary must be 'auto', 'none', 'always' or a size in bytes")
    return BuildSpec(name=name, version=version, requests=requests, include_ir=include_ir, dictionary=dictionary,
                     level=int(archive.get("level", 19)), path=label, env=env)


def validate_requests(requests: list[VariantRequest]) -> None:
    """Resolve every signature against its kernel before compiling, so typos fail fast."""
    from .aot import specialize
    from .kernel_ref import load_kernel

    for req in requests:
        try:
            fn, _ = load_kernel(req.kernel_ref, req.base_dir)
            specialize(fn, req.signature, req.constexprs)
        except KarchiveError as exc:
            raise SpecFileError(f"{req.label()}: {exc}") from exc

"""Build spec files (TOML): which kernels, signatures, constexprs, options and targets to compile.

Every list-valued field multiplies: one variant per element of the product over constexpr values,
option values, signatures and targets. The whole file is validated before anything compiles.
"""

from __future__ import annotations

import difflib
import itertools
import os
import sys
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BuildSpec", "OPTION_TYPES", "check_option", "load_spec", "parse_spec", "validate_requests"]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from ...core.fsio import read_bounded
from ...core.tomlio import MAX_DEPTH
from ...core.tomlio import depth as toml_depth
from ...errors import KarchiveError, SpecFileError
from ...format.target import Target
from ..compile.aot import BACKEND_OPTIONS, VariantRequest
from ..compile.buildenv import validate_env

#: A build spec larger than this is refused before it is parsed (a spec of 10,000 kernels is ~2 MiB).
MAX_SPEC_BYTES = 16 << 20

_KERNEL_KEYS = {"source", "signature", "signatures", "constexprs", "targets", "cuda", "hip", "include_ir", "configs"}
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


def _product(table: dict[str, Any], where: str = "<spec>", path: str | None = None) -> list[dict[str, Any]]:
    keys = sorted(table)
    for k in keys:
        if isinstance(table[k], (list, tuple)) and not table[k]:
            raise SpecFileError(
                f"{where}: {k} = [] lists no values, so it would build no variant; "
                "give at least one value or remove it",
                path=path,
            )
    return [dict(zip(keys, combo)) for combo in itertools.product(*(_as_list(table[k]) for k in keys))]


#: The type of each option's value (Triton's CUDAOptions/HIPOptions fields), and the rule for ints.
OPTION_TYPES: dict[str, type] = {
    "num_warps": int,
    "num_stages": int,
    "num_ctas": int,
    "maxnreg": int,
    "ptx_version": int,
    "waves_per_eu": int,
    "matrix_instr_nonkdim": int,
    "kpack": int,
    "schedule_hint": str,
    "enable_fp_fusion": bool,
    "enable_reflect_ftz": bool,
    "debug": bool,
    "launch_cooperative_grid": bool,
    "launch_pdl": bool,
    "sanitize_overflow": bool,
}
_INT_MINIMUM = {"num_stages": 0, "waves_per_eu": 0, "matrix_instr_nonkdim": 0}  # others: at least 1


def check_option(name: str, value: Any, where: str, path: str | None = None) -> None:
    """One option value: the right type and range, so a typo fails here and not inside Triton.

    ``num_warps`` must be a power of two (Triton asserts it); counts are at least 1 (``num_stages``,
    ``waves_per_eu`` and ``matrix_instr_nonkdim`` accept 0: no pipelining / the backend's choice).
    ``path`` is the spec file the value is from, for the error (None: a command-line option, or a request
    made without a spec file).
    """
    typ = OPTION_TYPES.get(name)
    if typ is None:
        return
    if typ is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecFileError(f"{where}: {name} must be an integer, not {value!r}", path=path)
        low = _INT_MINIMUM.get(name, 1)
        if value < low:
            raise SpecFileError(f"{where}: {name} must be at least {low}, not {value}", path=path)
        if name == "num_warps" and value & (value - 1):
            raise SpecFileError(
                f"{where}: num_warps must be a power of two (1, 2, 4, 8, 16, 32), not {value}", path=path
            )
    elif not isinstance(value, typ):
        raise SpecFileError(
            f"{where}: {name} must be {'true or false' if typ is bool else 'a string'}, not {value!r}", path=path
        )


def _check_options(options: dict[str, Any], where: str, path: str | None) -> None:
    for name, value in options.items():
        for v in _as_list(value):
            check_option(name, v, where, path)


def _check_constexprs(constexprs: dict[str, Any], where: str, path: str | None) -> None:
    for name, value in constexprs.items():
        for v in _as_list(value):
            if not isinstance(v, (bool, int, float, str)):
                raise SpecFileError(
                    f"{where}: constexpr {name} = {v!r}: a value is an integer, float, boolean or "
                    "string (a list gives one variant per value)",
                    path=path,
                )


def _text(archive: dict, key: str, label: str, path: str | None) -> str:
    value = archive.get(key)
    if not isinstance(value, str) or not value:
        raise SpecFileError(
            f'{label}: [archive] needs {key} = "...", a non-empty string'
            + (f' (quote it: {key} = "{value}")' if isinstance(value, (int, float)) else ""),
            path=path,
        )
    return value


def _unknown(keys: set[str], known: set[str]) -> str:
    """``key 'num_warp' (did you mean 'num_warps'?)``: each unknown key with the closest known one."""
    out = []
    for key in sorted(keys):
        close = difflib.get_close_matches(key, sorted(known), n=1)
        out.append(f"{key!r} (did you mean {close[0]!r}?)" if close else repr(key))
    return f"key{'s' if len(out) > 1 else ''} " + ", ".join(out)


def _bool(table: dict, key: str, default: bool, where: str, path: str | None) -> bool:
    value = table.get(key, default)
    if not isinstance(value, bool):
        raise SpecFileError(f"{where}: {key} must be true or false, not {value!r}", path=path)
    return value


def load_spec(path: str | os.PathLike) -> BuildSpec:
    path = os.fspath(path)
    try:
        # a FIFO is refused, not waited on; a device is not read on
        data = tomllib.loads(read_bounded(path, MAX_SPEC_BYTES).decode("utf-8"))
    except FileNotFoundError as exc:
        raise SpecFileError(f"spec file not found: {path}", path=path) from exc
    except IsADirectoryError:
        raise SpecFileError(
            f"{path} is a directory; give the build spec file (TOML), e.g. {path}/build.toml", path=path
        ) from None
    except OSError as exc:
        raise SpecFileError(f"cannot read spec file {path}: {exc.strerror or exc}", path=path) from None
    except UnicodeDecodeError:
        raise SpecFileError(f"{path}: not a text file; a build spec is TOML (spec/BUILD.md)", path=path) from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecFileError(f"{path}: not valid TOML: {exc}", path=path) from exc
    except RecursionError:  # tomllib recurses per nesting level: bounded here, as for trust policies
        raise SpecFileError(f"{path} is nested deeper than {MAX_DEPTH} levels", path=path) from None
    if toml_depth(data) > MAX_DEPTH:
        raise SpecFileError(f"{path} is nested deeper than {MAX_DEPTH} levels", path=path)
    return parse_spec(data, base_dir=os.path.dirname(os.path.abspath(path)), label=path, path=path)


def parse_spec(data: dict, base_dir: str, label: str = "<spec>", path: str | None = None) -> BuildSpec:
    """The spec ``data`` describes (its relative sources under ``base_dir``); errors start with ``label`` and
    carry ``path``, the file it was read from (None: a spec given as data)."""
    archive = data.get("archive")
    if not isinstance(archive, dict):
        raise SpecFileError(f"{label}: missing [archive] table", path=path)
    unknown_top = set(data) - {"archive", "kernel"}
    if unknown_top:
        raise SpecFileError(
            f"{label}: unknown top-level {_unknown(unknown_top, {'archive', 'kernel'})} "
            "(a spec has [archive] and [[kernel]] tables)",
            path=path,
        )
    name, version = _text(archive, "name", label, path), _text(archive, "version", label, path)
    archive_keys = {"name", "version", "targets", "include_ir", "dictionary", "level", "env"}
    unknown_archive = set(archive) - archive_keys
    if unknown_archive:
        raise SpecFileError(f"{label}: unknown [archive] {_unknown(unknown_archive, archive_keys)}", path=path)
    env = validate_env(archive.get("env"), f"{label}: [archive] env", path)
    default_targets = _as_list(archive.get("targets", []))
    include_ir = _bool(archive, "include_ir", True, f"{label}: [archive]", path)
    level = archive.get("level", 19)
    if isinstance(level, bool) or not isinstance(level, int) or not 1 <= level <= 22:
        raise SpecFileError(f"{label}: [archive] level must be a zstd level from 1 to 22, not {level!r}", path=path)
    kernels = data.get("kernel")
    if isinstance(kernels, dict):
        raise SpecFileError(f"{label}: write each kernel as [[kernel]] (an array of tables), not [kernel]", path=path)
    if not isinstance(kernels, list) or not kernels:
        raise SpecFileError(f"{label}: no [[kernel]] entries", path=path)
    requests: list[VariantRequest] = []
    seen: dict[str, VariantRequest] = {}
    repeats: dict[str, int] = {}
    for n, k in enumerate(kernels):
        where = f"{label}: kernel #{n + 1}"
        if not isinstance(k, dict) or not isinstance(k.get("source"), str):
            raise SpecFileError(f"{where}: needs source = 'file.py:fn' or 'package.module:fn'", path=path)
        where = f"{label}: kernel {k['source']}"
        options = {key: k[key] for key in k if key in _ALL_OPTIONS}
        unknown = set(k) - _KERNEL_KEYS - _ALL_OPTIONS
        if unknown:
            raise SpecFileError(
                f"{where}: unknown {_unknown(unknown, _KERNEL_KEYS | _ALL_OPTIONS)} "
                f"(options known: {', '.join(sorted(_ALL_OPTIONS))})",
                path=path,
            )
        if "signature" in k and "signatures" in k:
            raise SpecFileError(f"{where}: give 'signature' or 'signatures', not both", path=path)
        signatures = _as_list(k["signatures"]) if "signatures" in k else [k.get("signature")]
        if any(not isinstance(s, (str, dict)) for s in signatures):
            raise SpecFileError(
                f"{where}: signature must be a string such as '*fp32:16, i32' or a table name -> type", path=path
            )
        if not signatures:
            raise SpecFileError(f"{where}: signatures = [] lists no signature", path=path)
        constexprs = k.get("constexprs", {})
        if not isinstance(constexprs, dict):
            raise SpecFileError(f"{where}: constexprs must be a table, e.g. {{ BLOCK = [256, 1024] }}", path=path)
        _check_constexprs(constexprs, where, path)
        _check_options(options, where, path)
        kernel_ir = _bool(k, "include_ir", include_ir, where, path)
        configs = k.get("configs")
        if configs is not None and (
            not isinstance(configs, list)
            or not configs
            or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in configs)
        ):
            raise SpecFileError(f"{where}: configs must list autotune config indexes, e.g. configs = [0, 2]", path=path)
        targets = _as_list(k.get("targets", default_targets))
        if not targets:
            raise SpecFileError(f"{where}: no targets (set [archive] targets or the kernel's targets)", path=path)
        for t in targets:
            target = Target.parse(t)
            opts = dict(options)
            backend_opts = k.get(target.backend, {})
            if not isinstance(backend_opts, dict):
                raise SpecFileError(f"{where}: [{target.backend}] must be a table of options", path=path)
            opts.update(backend_opts)
            _check_options(backend_opts, f"{where}: [{target.backend}]", path)
            bad = set(opts) - BACKEND_OPTIONS[target.backend]
            if bad:
                raise SpecFileError(
                    f"{where}: options {sorted(bad)} do not apply to {target.backend}; "
                    f"put them under a [kernel.{'cuda' if target.backend == 'hip' else 'hip'}] table or remove them",
                    path=path,
                )
            for sig in signatures:
                for cx in _product(constexprs, where, path):
                    for op in _product(opts, where, path):
                        req = VariantRequest(
                            kernel_ref=k["source"],
                            signature=sig,
                            target=str(target),
                            constexprs=cx,
                            options=op,
                            include_ir=kernel_ir,
                            base_dir=base_dir,
                            env=dict(env),
                            configs=list(configs) if configs is not None else None,
                        )
                        ident = _identity(req)
                        if ident in seen:  # e.g. a target listed twice: compile it once, say so once
                            repeats[ident] = repeats.get(ident, 1) + 1
                            continue
                        seen[ident] = req
                        requests.append(req)
    dictionary = archive.get("dictionary", "auto")
    if dictionary not in ("auto", "none", "always") and (
        isinstance(dictionary, bool) or not isinstance(dictionary, int)
    ):
        raise SpecFileError(f"{label}: dictionary must be 'auto', 'none', 'always' or a size in bytes", path=path)
    warnings = [f"{seen[i].label()} is listed {n} times; it is compiled once" for i, n in repeats.items()]
    return BuildSpec(
        name=name,
        version=version,
        requests=requests,
        include_ir=include_ir,
        dictionary=dictionary,
        level=level,
        path=label,
        env=env,
        warnings=warnings,
    )


def _identity(req: VariantRequest) -> str:
    """Two requests with the same identity compile to the same variant (the spec asked twice)."""
    import json

    return json.dumps(
        [
            req.kernel_ref,
            req.signature,
            str(Target.parse(req.target)),
            req.constexprs,
            req.options,
            req.include_ir,
            req.configs,
        ],
        sort_keys=True,
        default=str,
    )


def validate_requests(requests: list[VariantRequest], path: str | None = None) -> list[str]:
    """Everything that can be checked before compiling, so a typo fails in a second, not after a build:
    each target against the installed toolchain (:func:`~karchive.producer.compile.toolchain.check_target`,
    once per target), each option value, each signature and constexpr against its kernel.
    Fills each request's ``equal_to_1`` names (for labels that say ``stride==1``, as ``inspect`` does).
    A request naming an autotuned or heuristics kernel is replaced, in place, by one request per config
    and computed value (:func:`karchive.producer.compile.wrapped.expand`); returns what that expansion warns.
    ``path``: the spec file the requests came from, for the errors (None: ``karchive compile``, or requests
    made in Python)."""
    from ..compile.aot import specialize
    from ..compile.kernel_ref import load_kernel
    from ..compile.toolchain import check_target, require_triton
    from ..compile.wrapped import expand

    if requests:
        require_triton()
    for target in sorted({str(r.target) for r in requests}):
        check_target(target, probe=True)
    try:
        plan = expand(requests, path)
    except SpecFileError:
        raise
    except KarchiveError as exc:
        raise SpecFileError(str(exc), path=path) from exc
    requests[:] = plan.requests
    for req in requests:
        try:
            _check_options(req.options, req.label(), path)
            fn, _ = load_kernel(req.kernel_ref, req.base_dir)
            spec = specialize(fn, req.signature, req.constexprs)
        except SpecFileError:
            raise
        except KarchiveError as exc:
            raise SpecFileError(f"{req.label()}: {exc}", path=path) from exc
        req.equal_to_1 = tuple(n for n in spec.names if n in spec.equal_to_1)
    return plan.warnings

"""Build info: what the build command knows that the archive's manifest does not (spec/SIGNING.md §4.2).

The manifest already names the toolchain (karchive, Triton, ptxas, LLVM versions), the kernels, the
targets and every source file by digest. The build command adds the build spec's digest, the
command and its parameters, the host platform, the ROCm version and run metadata, as a small JSON
object: ``karchive sign --provenance BUILDINFO`` reads it from a file, and :func:`collect_build_info`
makes one. It is checked strictly (unknown fields are refused: a typo must not silently drop a
claim), and it never holds a machine path, user or host name unless the caller puts one there.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import re
import sysconfig
from typing import Any

from ..core.digest import is_sha256_hex
from ..core.fsio import read_regular
from ..core.grammar import fullmatch
from ..core.units import utc_text
from ..errors import TrustError
from . import reasons

_FIELDS = {
    "builder_id": str,  # SLSA runDetails.builder.id, e.g. a CI workflow URI
    "command": str,  # "build", "compile", "capture"
    "spec": dict,  # {"name": relative file name, "sha256": hex}
    "parameters": dict,  # command parameters (jobs, keep_going, no_ir, ...)
    "toolchain": dict,  # extra toolchain versions: {"rocm": "6.2.0", ...}
    "platform": str,  # host platform tag, e.g. "linux-x86_64"
    "env": dict,  # environment that shapes the build: {"TRITON_DEFAULT_FP_FUSION": "1"}
    "dependencies": list,  # extra resolved dependencies: [{"uri"?, "name"?, "digest": {alg: hex}}]
    "invocation_id": str,  # SLSA runDetails.metadata.invocationId
    "started_on": str,  # RFC 3339 UTC, e.g. "2026-01-02T03:04:05Z"
    "finished_on": str,
}
_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z")
MAX_BUILD_INFO_BYTES = 1024 * 1024


def _fail(msg: str) -> TrustError:
    # build info is checked as a document of its own (a --provenance file, or what a build collected), apart
    # from the archive it will describe: no NAME@VERSION is at hand here
    return TrustError(f"build info: {msg}", reason=reasons.BAD_BUILD_INFO, archive=None)


def _is_json_scalar(v: Any) -> bool:
    return v is None or type(v) in (str, int, bool) or (type(v) is float and math.isfinite(v))


def _check_json_tree(v: Any, where: str, depth: int = 0) -> None:
    if depth > 8:
        raise _fail(f"{where} is nested too deeply")
    if type(v) is dict:
        for k, x in v.items():
            if type(k) is not str:
                raise _fail(f"{where} has a non-string key")
            _check_json_tree(x, f"{where}.{k}", depth + 1)
    elif type(v) is list:
        for i, x in enumerate(v):
            _check_json_tree(x, f"{where}[{i}]", depth + 1)
    elif not _is_json_scalar(v):
        raise _fail(f"{where} holds a {type(v).__name__}, not a JSON value")


def check_build_info(info: Any) -> dict[str, Any]:
    """Validate a build-info object; returns it unchanged (a plain dict) or raises TrustError."""
    if type(info) is not dict:
        raise _fail("expected a JSON object")
    unknown = sorted(set(info) - set(_FIELDS))
    if unknown:
        raise _fail(f"unknown field(s) {', '.join(map(repr, unknown))}; known: {', '.join(sorted(_FIELDS))}")
    for key, typ in _FIELDS.items():
        if key in info and type(info[key]) is not typ:
            raise _fail(f"{key!r} must be a {'JSON object' if typ is dict else typ.__name__}")
    spec = info.get("spec")
    if spec is not None:
        if set(spec) - {"name", "sha256"} or not is_sha256_hex(spec.get("sha256")):
            raise _fail('\'spec\' must be {"name": file name, "sha256": 64 lowercase hex digits}')
        if "name" in spec and type(spec["name"]) is not str:
            raise _fail("'spec.name' must be a string")
    for key in ("toolchain", "env"):
        for k, v in (info.get(key) or {}).items():
            if type(v) is not str:
                raise _fail(f"'{key}.{k}' must be a string")
    _check_json_tree(info.get("parameters") or {}, "parameters")
    for i, dep in enumerate(info.get("dependencies") or []):
        digest = dep.get("digest") if type(dep) is dict else None
        if (
            type(digest) is not dict
            or not digest
            or set(dep) - {"uri", "name", "digest"}
            or any(type(dep.get(k, "")) is not str for k in ("uri", "name"))
            or any(
                type(k) is not str or type(v) is not str or not re.fullmatch(r"[0-9a-f]+", v) for k, v in digest.items()
            )
        ):
            raise _fail(f'dependencies[{i}] must be {{"uri"?, "name"?, "digest": {{algorithm: lowercase hex}}}}')
    for key in ("started_on", "finished_on"):
        if key in info and not fullmatch(_TIME, info[key]):
            raise _fail(f"{key!r} must be an RFC 3339 UTC time such as 2026-01-02T03:04:05Z")
    return info


def _no_constant(name: str) -> Any:
    raise ValueError(f"JSON constant {name} is not allowed")


def load_build_info(path: str | os.PathLike) -> dict[str, Any]:
    where = os.fspath(path)
    try:
        data = read_regular(path, MAX_BUILD_INFO_BYTES)  # a FIFO is refused, not waited on
    except OSError as exc:
        raise _fail(f"cannot read {where}: {exc.strerror or exc}") from exc
    if len(data) > MAX_BUILD_INFO_BYTES:
        raise _fail(f"{where} is larger than {MAX_BUILD_INFO_BYTES} bytes")
    try:
        obj = json.loads(data.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise _fail(f"{where} is not valid JSON ({exc})") from exc
    return check_build_info(obj)


def rocm_version() -> str | None:
    """The ROCm release of this host (``$ROCM_PATH``/``/opt/rocm`` ``.info/version``), if any."""
    for root in (os.environ.get("ROCM_PATH"), "/opt/rocm"):
        if not root:
            continue
        try:
            with open(os.path.join(root, ".info", "version"), encoding="ascii") as fh:
                text = fh.read(64).strip()
        except (OSError, UnicodeDecodeError):
            continue
        if re.fullmatch(r"[0-9][0-9A-Za-z.+-]*", text):
            return text
    return None


def collect_build_info(
    *,
    command: str,
    spec_path: str | os.PathLike | None = None,
    parameters: dict[str, Any] | None = None,
    started_on: str | None = None,
    timestamps: bool = False,
    env_names: tuple[str, ...] = ("TRITON_DEFAULT_FP_FUSION", "SOURCE_DATE_EPOCH"),
) -> dict[str, Any]:
    """What a build command passes to signing. The spec is named by its base name and digest (no
    directory: no machine path); times are recorded only when ``timestamps`` is asked for, since
    provenance should be as reproducible as the archive."""
    info: dict[str, Any] = {
        "command": command,
        "platform": sysconfig.get_platform(),
        "toolchain": {"python": platform.python_version()},
        "parameters": dict(parameters or {}),
    }
    rocm = rocm_version()
    if rocm:
        info["toolchain"]["rocm"] = rocm
    if spec_path is not None:
        with open(spec_path, "rb") as fh:
            info["spec"] = {
                "name": os.path.basename(os.fspath(spec_path)),
                "sha256": hashlib.sha256(fh.read()).hexdigest(),
            }
    env = {k: os.environ[k] for k in env_names if k in os.environ}
    if env:
        info["env"] = env
    if timestamps:
        info["started_on"] = started_on or utc_text()
        info["finished_on"] = utc_text()
    return check_build_info(info)

"""Variant selection: first by device (backend, arch, warp size, limits), then by call (types, hints, constexprs).

Each check returns a reason string when it rejects, so a failed selection can list every variant with
the reason it did not fit. Selection runs only on a dispatch-cache miss; the hot path never comes here.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.grammar import whole
from ..errors import NoMatchingVariantError
from ..format.dtypes import FLOAT_TYPES, INT_RANGES
from ..format.manifest import Param, Variant
from .arg_dtypes import pointer_element, triton_dtype
from .args import PointerInfo, describe_arg
from .descriptors import descriptor_reason
from .device import DeviceInfo
from .launch._plan import LAUNCH_OPTIONS, option_value


class _Missing:
    """Marks a parameter the caller did not pass."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<missing>"


MISSING: Any = _Missing()
_UNKNOWN: Any = object()  # not yet in call_reason's memo (None there means: this parameter fits)

_SM = re.compile(r"sm_(\d+)([af]?)")


def cubin_runs_on(binary_arch: str, cc: tuple[int, int]) -> bool:
    """sm_XY runs on X.Z for Z >= Y; sm_XYf on the same family (major) likewise; sm_XYa only on X.Y."""
    m = whole(_SM, binary_arch)
    if not m:
        return False
    major, minor = divmod(int(m.group(1)), 10)
    if m.group(2) == "a":
        return cc == (major, minor)
    return cc[0] == major and cc[1] >= minor


def ptx_runs_on(ptx_target: str, cc: tuple[int, int]) -> bool:
    """PTX for sm_XY JITs for any cc >= X.Y; sm_XYa and sm_XYf run where their cubin would."""
    m = whole(_SM, ptx_target)
    if not m or m.group(2):
        return cubin_runs_on(ptx_target, cc)
    return cc >= divmod(int(m.group(1)), 10)


def _arch_rule(binary_arch: str, cc: tuple[int, int]) -> str:
    """Why a cubin does not run on ``cc``, in the words of the rule that refused it (for the rejection list)."""
    m = whole(_SM, binary_arch)
    if not m:
        return " (an arch name karchive cannot read)"
    major, minor = divmod(int(m.group(1)), 10)
    if m.group(2) == "a":
        return (
            f" (an arch-specific sm_{m.group(1)}a cubin runs only on exactly sm_{m.group(1)}: its "
            f"architecture-specific instructions (wgmma, tcgen05, setmaxnreg) are not carried to other models, "
            f"not even sm_{major}x siblings)"
        )
    if m.group(2) == "f":
        return f" (a family-specific sm_{m.group(1)}f cubin runs on sm_{major}x with x >= {minor} only)"
    if (cc[0], cc[1]) < (major, minor):
        return " (a cubin never runs on an older GPU)"
    return f" (a cubin runs on its own major version only: sm_{major}x)"


def _hip_base(arch: str) -> str:
    return arch.split(":", 1)[0].lower()


def may_run_on(target: str, dev: DeviceInfo, allow_ptx: bool) -> bool:
    """Whether variants built for ``target`` (``cuda:90``, a label of the archive's index) can run on ``dev``:
    the rules of :func:`device_fit` applied to the target alone, widened where the label cannot tell (an
    arch it cannot read counts as a candidate). True for every variant :func:`device_fit` can accept when
    the target names the arch its binary and PTX were built for (:func:`target_agrees`), so a kernel may
    read only these targets' variants for ``dev`` and select exactly what it would over all of them."""
    backend, _, arch = target.partition(":")
    if backend != dev.backend:
        return False
    if backend == "hip":
        return _hip_base(arch) == _hip_base(dev.arch)
    if backend != "cuda":
        return True
    try:
        built = divmod(int(arch), 10)
        cc = tuple(dev.cc or divmod(int(dev.arch), 10))
    except (TypeError, ValueError):
        return True
    if allow_ptx:  # PTX JITs for any newer GPU; a cubin (sm_XY, sm_XYf, sm_XYa) for its own major only
        return built <= cc
    return built[0] == cc[0] and built[1] <= cc[1]


def target_agrees(target: str, binary_arch: str) -> bool:
    """Whether a variant's binary arch is the one its target names (``cuda:90`` with ``sm_90``/``sm_90a``/
    ``sm_90f``, ``hip:gfx942`` with ``gfx942``): what :func:`may_run_on` relies on."""
    backend, _, arch = target.partition(":")
    if backend == "hip":
        return _hip_base(binary_arch) == _hip_base(arch)
    m = whole(_SM, binary_arch)
    return backend == "cuda" and m is not None and m.group(1) == arch


@dataclass(frozen=True)
class DeviceFit:
    """How a variant runs on a device: from its binary, or through the driver's PTX JIT."""

    mode: str  # "binary" | "ptx"
    distance: int  # 0 = built for exactly this arch; larger = older compatible arch


def device_fit(
    v: Variant,
    dev: DeviceInfo,
    allow_ptx: bool,
    ptx_header: Callable[[Variant], tuple[tuple[int, int] | None, str | None]] | None = None,
) -> DeviceFit | str:
    """A :class:`DeviceFit`, or the reason the variant cannot run on ``dev``."""
    abi = v.abi
    if v.target.backend != dev.backend:
        return f"built for {v.target.backend}, the device is {dev.backend}"
    if abi.warp_size != dev.warp_size:
        return f"built for warp size {abi.warp_size}, the device's is {dev.warp_size}"
    if dev.shared_optin is not None and abi.shared > dev.shared_optin:
        return f"needs {abi.shared} bytes of shared memory per block, the device allows {dev.shared_optin}"
    if dev.backend == "hip":
        if abi.binary_format != "hsaco":
            return f"binary format {abi.binary_format!r} is not a HIP code object"
        if _hip_base(abi.binary_arch) != _hip_base(dev.arch):
            return f"built for {abi.binary_arch}, the device is {dev.arch} (HIP code objects need an exact match)"
        return DeviceFit("binary", 0)
    if abi.binary_format != "cubin":
        return f"binary format {abi.binary_format!r} is not a cubin"
    cc = dev.cc or divmod(int(dev.arch), 10)
    cluster = abi.cluster_dims[0] * abi.cluster_dims[1] * abi.cluster_dims[2]
    if (abi.num_ctas > 1 or cluster > 1) and cc < (9, 0):
        return f"uses thread-block clusters (num_ctas={abi.num_ctas}), which need sm_90 or newer"
    fit = _cubin_fit(abi.binary_arch, tuple(cc))
    if fit is not None:
        return fit
    why = f"cubin is {abi.binary_arch}, the device is sm_{cc[0]}{cc[1]}" + _arch_rule(abi.binary_arch, cc)
    if not allow_ptx:
        return why + ("; PTX JIT fallback is off (open(..., allow_ptx=True))" if "ptx" in v.ir else "")
    if "ptx" not in v.ir or ptx_header is None:
        return why + "; the archive holds no PTX for it"
    version, target = ptx_header(v)
    if target is None or version is None:
        return why + "; its PTX has no readable .version/.target"
    if not ptx_runs_on(target, cc):
        return why + f"; its PTX targets {target}, which the driver cannot JIT for sm_{cc[0]}{cc[1]}"
    isa = dev.ptx_isa
    if isa is None:
        return why + "; the driver's PTX ISA level is unknown, so its PTX is not tried"
    if version > isa:
        return (
            why + f"; its PTX is ISA {version[0]}.{version[1]}, the driver (version {dev.driver_version}) "
            f"reads up to {isa[0]}.{isa[1]}"
        )
    return DeviceFit("ptx", 1000)


@functools.lru_cache(maxsize=256)
def _cubin_fit(binary_arch: str, cc: tuple[int, ...]) -> DeviceFit | None:
    """How a cubin of ``binary_arch`` runs on compute capability ``cc`` (None: it does not): the same
    answer for every variant of that arch, so a selection among hundreds reads each arch name once."""
    if not cubin_runs_on(binary_arch, (cc[0], cc[1])):
        return None
    m = whole(_SM, binary_arch)
    built = divmod(int(m.group(1)), 10) if m else cc
    return DeviceFit("binary", (cc[0] - built[0]) * 10 + cc[1] - built[1])


def _is_int(value: Any) -> bool:
    return (
        isinstance(value, int)
        or (hasattr(value, "__index__") and not hasattr(value, "__float__"))
        or type(value).__module__ == "numpy"
        and hasattr(value, "__index__")
        and "int" in type(value).__name__
    )


def param_reason(p: Param, value: Any, info: PointerInfo | None, block_from_variant: bool = False) -> str | None:
    """Why ``value`` does not fit parameter ``p`` of one variant (None when it fits)."""
    name = p.name
    if p.equal_to_1:
        if value is MISSING:
            return f"{name} is missing"
        if isinstance(value, bool) or not _is_int(value) or int(value) != 1:
            return f"{name}={value!r}, but this variant was specialised for {name} == 1"
        return None
    if p.is_constexpr:
        if value is MISSING:
            if not p.has_default:  # no default, or none on record: omitted_constexprs has decided
                return None
            value = p.default  # the call takes the signature's default, as Triton does
            if _differs(value, p.constexpr):
                return (
                    f"{name} is not passed, so it takes its default {value!r}, but this variant was "
                    f"compiled with {name}={p.constexpr!r}"
                )
            return None
        want = p.constexpr
        if value != want or (isinstance(value, bool) != isinstance(want, bool)):
            return f"{name}={value!r}, but this variant was compiled with {name}={want!r}"
        return None
    if value is MISSING:
        return f"{name} is missing"
    typ = p.type
    if typ.startswith("*"):
        if (
            value is None
        ):  # Triton specialises a None argument to the constexpr None: another variant, never a null pointer
            return f"{name} is None, which Triton compiles as the constexpr None; this variant takes a pointer ({typ})"
        if info is None:
            return f"{name} expects a pointer ({typ}), got {describe_arg(value)}"
        ptr, dtype, _dev = info
        elem = pointer_element(typ)
        got = triton_dtype(dtype)
        if dtype is not None and got != elem:
            return f"{name} has dtype {got or dtype}, this variant takes {typ}"
        if p.divisibility == 16 and ptr % 16:
            return f"{name} address 0x{ptr:x} is not 16-byte aligned, this variant assumes {name}:16"
        return None
    if typ in INT_RANGES:
        if not _is_int(value) or (isinstance(value, bool) and typ not in ("i1", "u1")):
            return f"{name} expects an integer ({typ}), got {describe_arg(value)}"
        lo, hi = INT_RANGES[typ]
        if not lo <= int(value) <= hi:
            return f"{name}={int(value)} does not fit {typ}"
        if p.divisibility == 16 and int(value) % 16:
            return f"{name}={int(value)} is not divisible by 16, this variant assumes {name}:16"
        return None
    if typ.startswith("tensordesc"):
        return descriptor_reason(name, typ, value, block_from_variant)
    if typ in FLOAT_TYPES:
        if isinstance(value, bool) or not isinstance(value, (int, float)) and not hasattr(value, "__float__"):
            return f"{name} expects a number ({typ}), got {describe_arg(value)}"
        return None
    return f"{name} has type {typ!r}, which this runtime cannot pass"


def _differs(value: Any, want: Any) -> bool:
    """Not the same constexpr: unequal, or a bool against a non-bool (``True`` is not ``1``)."""
    return value != want or isinstance(value, bool) != isinstance(want, bool)


#: Triton's defaults for the launch options, per backend (``CUDAOptions`` in
#: triton/backends/nvidia/compiler.py, ``HIPOptions`` in triton/backends/amd/compiler.py, read from
#: Triton 3.9). A call that omits an option gets the variant built with this value
#: where the candidates differ on it (docs/runtime.md, "Omitted arguments").
TRITON_OPTION_DEFAULTS: dict[str, dict[str, Any]] = {
    "cuda": {"num_warps": 4, "num_stages": 3, "num_ctas": 1, "maxnreg": None},
    "hip": {"num_warps": 4, "num_stages": 2, "num_ctas": 1, "maxnreg": None},
}


def _value_key(value: Any) -> tuple[str, str]:
    """A hashable identity of a JSON scalar that keeps ``True`` apart from ``1``."""
    return (type(value).__name__, repr(value))


def _distinct(values: Sequence[Any]) -> list[Any]:
    """The distinct values, numbers first in numeric order, then the rest by text (no input order)."""
    distinct = {_value_key(x): x for x in values}
    return sorted(distinct.values(), key=lambda x: (type(x).__name__ == "bool", _num_or_text(x)))


def _listing(values: Sequence[Any]) -> str:
    return ", ".join(repr(x) for x in _distinct(values))


def _reprs(values: Sequence[Any]) -> tuple[str, ...]:
    """The distinct values as repr, in :func:`_listing`'s order (the error's ``values`` field)."""
    return tuple(repr(x) for x in _distinct(values))


def _num_or_text(value: Any) -> tuple[int, Any]:
    return (0, value) if isinstance(value, (int, float)) and not isinstance(value, bool) else (1, str(value))


def omitted_constexprs(kernel: str, variants: Sequence[Variant], values: Sequence[Any], names: Sequence[str]) -> None:
    """Refuse a call that omits a constexpr on which the kernel's variants differ and that has no
    default to take (docs/runtime.md, "Omitted arguments"), naming the parameter and the archived values.

    Judged over the variants that can run on the device, before the call's arguments are looked at:
    a value that followed from an argument's alignment or dtype would change what the kernel computes
    behind the caller's back (``EVEN=True``, the unmasked path, because the pointers happen to be
    aligned). Per-arch values stay allowed (an archive may hold ``BLOCK=1024`` for sm_90 and only
    ``BLOCK=512`` for sm_80; a callable grid reads the one chosen). A constexpr with a default in the
    kernel's signature (recorded in the archive) takes it, as Triton does (:func:`param_reason`);
    without one Triton refuses the call outright, karchive where the archive leaves a choice.
    Archives that do not record defaults are treated as having none.
    """
    problems: list[tuple[str, str, tuple[str, ...]]] = []
    for i, name in enumerate(names):
        if values[i] is not MISSING:
            continue
        ps = [
            v.params[i]
            for v in variants
            if v.params[i].is_constexpr and not v.params[i].equal_to_1 and not v.params[i].has_default
        ]
        archived = [p.constexpr for p in ps]
        if len({_value_key(x) for x in archived}) > 1:
            why = (
                "has no default in the kernel's signature"
                if any(p.has_default is False for p in ps)
                else "has no default recorded in this archive (written before karchive recorded them)"
            )
            problems.append(
                (
                    name,
                    f"the call omits constexpr {name!r}, which {why}, and the archive holds "
                    f"{name} = {_listing(archived)}: pass one, e.g. {name}={_reprs(archived)[0]}",
                    _reprs(archived),
                )
            )
    if problems:
        raise NoMatchingVariantError(
            f"{kernel}: " + "; ".join(p[1] for p in problems),
            kernel=kernel,
            rejections=(),
            param=problems[0][0],
            values=problems[0][2],
        )


def resolve_options(
    kernel: str, fits: Sequence[Variant], option_names: Sequence[str], given: Mapping[str, Any], backend: str
) -> list[Variant]:
    """The candidates left once the launch options the call omits are settled (docs/runtime.md,
    "Omitted arguments"): for each omitted option on which the candidates differ, the candidates built
    with Triton's default for it (:data:`TRITON_OPTION_DEFAULTS`), for every such option at once, so
    no order of options can change the answer; none: refused, listing the choices. An option every
    candidate shares needs no rule (launch options change how fast a kernel runs, not what it computes).
    """
    defaults = TRITON_OPTION_DEFAULTS.get(backend, TRITON_OPTION_DEFAULTS["cuda"])
    ambiguous = [o for o in option_names if o not in given and len({_value_key(option_value(v, o)) for v in fits}) > 1]
    if not ambiguous:
        return list(fits)
    chosen = [v for v in fits if all(not _differs(option_value(v, o), defaults.get(o)) for o in ambiguous)]
    if chosen:
        return chosen
    choices = "; ".join(
        f"{o} = {_listing([option_value(v, o) for v in fits])} (Triton's default: {defaults.get(o)!r})"
        for o in ambiguous
    )
    raise NoMatchingVariantError(
        f"{kernel}: the call omits launch option(s) {', '.join(ambiguous)}, the variants that fit differ on "
        f"them and none was built with Triton's defaults for all of them; archived: {choices}. Pass the one "
        f"you want, e.g. {ambiguous[0]}=...",
        kernel=kernel,
        rejections=(),
        param=ambiguous[0],
        values=_reprs([option_value(v, ambiguous[0]) for v in fits]),
    )


def untyped_pointers(
    kernel: str, fits: Sequence[Variant], infos: Sequence[PointerInfo | None], names: Sequence[str]
) -> None:
    """Refuse a call whose raw address (an int: no dtype) fits variants of different element types
    (``*fp32`` and ``*bf16``): they compute different things, and no order of keys may choose between them."""
    for i, info in enumerate(infos):
        if info is None or info[1] is not None:
            continue
        types = sorted({t for v in fits if (t := v.params[i].type).startswith("*")})
        if len(types) > 1:
            raise NoMatchingVariantError(
                f"{kernel}: {names[i]} is a raw address, which says no element type, and the variants that fit "
                f"take {', '.join(types)}: pass an object with a dtype (a tensor, an array) so the call picks one",
                kernel=kernel,
                rejections=(),
                param=names[i],
                values=tuple(types),
            )


def option_reason(v: Variant, options: Mapping[str, Any]) -> str | None:
    """Why the launch options (``num_warps=`` & co.) do not fit variant ``v`` (None when they do)."""
    for name, want in options.items():
        have = option_value(v, name)
        if want != have or isinstance(want, bool) != isinstance(have, bool):
            return f"{name}={want!r}, but this variant was compiled with {name}={have!r}"
    return None


def call_reason(
    v: Variant,
    values: Sequence[Any],
    infos: Sequence[PointerInfo | None],
    options: Mapping[str, Any] | None = None,
    block_from_variant: bool = False,
    memo: list[dict[int, str | None]] | None = None,
) -> str | None:
    """Why the call's arguments and launch options do not fit variant ``v`` (None when they do).
    ``block_from_variant``: descriptors take the variant's block shape (autotuned kernels), so theirs is not compared.

    ``memo`` (one per call, kept while the variants live: a dict per position) remembers each parameter's
    answer by position and parameter object: the variants of a kernel share their parameter objects (a
    shard parses each distinct one once), so a selection among hundreds asks :func:`param_reason` once
    per distinct parameter, not once per variant and parameter."""
    if len(values) != len(v.params):
        return f"takes {len(v.params)} parameters, the call gave {len(values)}"
    if memo is None:
        reasons = [r for p, x, i in zip(v.params, values, infos) if (r := param_reason(p, x, i, block_from_variant))]
    else:
        while len(memo) < len(values):
            memo.append({})
        reasons = []
        for known, p, x, i in zip(memo, v.params, values, infos):
            r = known.get(id(p), _UNKNOWN)
            if r is _UNKNOWN:
                r = known[id(p)] = param_reason(p, x, i, block_from_variant)
            if r:
                reasons.append(r)
    if options and (r := option_reason(v, options)):
        reasons.append(r)
    return "; ".join(reasons) if reasons else None


def specialisation_count(v: Variant) -> int:
    return sum(1 for p in v.params if p.divisibility or p.equal_to_1)


def variant_label(v: Variant) -> str:
    cx = ", ".join(f"{k}={val!r}" for k, val in v.constexprs.items())
    hints = ",".join(p.name + (":1" if p.equal_to_1 else ":16") for p in v.params if p.equal_to_1 or p.divisibility)
    stages = v.options.get("num_stages")
    opts = (
        f"num_warps={v.abi.num_warps}"
        + (f", num_stages={stages}" if stages is not None else "")
        + (f", num_ctas={v.abi.num_ctas}" if v.abi.num_ctas != 1 else "")
        + (f", maxnreg={v.options['maxnreg']}" if v.options.get("maxnreg") is not None else "")
    )
    return (
        f"{v.key[:12]} [{v.target}/{v.abi.binary_arch}; {cx}{'; ' if cx else ''}{opts}{'; ' + hints if hints else ''}]"
    )


def select_variant(
    kernel: str,
    variants: Sequence[Variant],
    dev: DeviceInfo,
    values: Sequence[Any],
    infos: Sequence[PointerInfo | None],
    names: Sequence[str],
    allow_ptx: bool = False,
    ptx_header: Callable | None = None,
    options: Mapping[str, Any] | None = None,
    block_from_variant: bool = False,
) -> tuple[Variant, DeviceFit]:
    """The best variant for this device, call and launch options, or :class:`NoMatchingVariantError` listing
    every rejection.

    What the call omits is settled first (:func:`omitted_constexprs`, :func:`resolve_options`). Then,
    preference: runs from its binary over PTX JIT; more specialisation hints (``:16``, ``== 1``); the
    closest arch; then the variant key (never the order variants are listed in).
    """
    fits: list[tuple[tuple, int, Variant, DeviceFit]] = []
    # Labels are only for the error below: a kernel of hundreds of variants rejects most of them on
    # every successful selection too, and formatting each label would be most of the selection's cost.
    rejected: list[tuple[Variant, str]] = []
    runnable: list[tuple[int, Variant, DeviceFit]] = []
    for i, v in enumerate(variants):
        fit = device_fit(v, dev, allow_ptx, ptx_header)
        if isinstance(fit, str):
            rejected.append((v, fit))
        else:
            runnable.append((i, v, fit))
    omitted_constexprs(kernel, [v for _, v, _ in runnable], values, names)
    memo: list[dict[int, str | None]] = []  # the variants are alive throughout: ids stay theirs
    for i, v, fit in runnable:
        why = call_reason(v, values, infos, options, block_from_variant, memo)
        if why:
            rejected.append((v, why))
            continue
        fits.append(((fit.mode != "binary", -specialisation_count(v), fit.distance, v.key), i, v, fit))
    if fits:
        option_names = [o for o in LAUNCH_OPTIONS if o not in names]
        keep = {id(v) for v in resolve_options(kernel, [t[2] for t in fits], option_names, options or {}, dev.backend)}
        # What is left differs only in how well it runs (binary, hints, arch), never in what it computes;
        # the variant key breaks the last tie, so no manifest or insertion order decides.
        kept = [t for t in fits if id(t[2]) in keep]
        untyped_pointers(kernel, [t[2] for t in kept], infos, names)
        best = min(kept, key=lambda t: t[0])
        return best[2], best[3]
    labelled = [(variant_label(v), why) for v, why in rejected]
    asked = ", ".join(
        [f"{n}={describe_arg(x)}" for n, x in zip(names, values) if x is not MISSING]
        + [f"{n}={x!r}" for n, x in (options or {}).items()]
    )
    raise NoMatchingVariantError(
        f"no variant of {kernel!r} fits the call {kernel}({asked}) on {dev}; "
        f"{len(variants)} variant(s) rejected:\n" + "\n".join(f"  - {label}: {why}" for label, why in labelled),
        kernel=kernel,
        rejections=tuple(labelled),
        param=None,  # every variant was tried: the call omits nothing
    )

"""Serving at Triton's compile boundary: Triton's own runtime dispatches, the archive supplies the binary.

Where real Triton is installed, ``karchive.serve`` does not re-implement Triton's dispatch. Triton's
``JITFunction.run``, ``Autotuner.run`` and ``Heuristics.run`` -- and every library layer built on them -- bind the
arguments, apply defaults and keyword rules, specialise, key their caches, prune configs, run heuristics and
hooks exactly as without serving. Only two steps are answered by karchive:

- **compiling** (``triton.compiler.compile``, what ``JITFunction._do_compile`` and Inductor call): a request
  for a kernel an archive holds -- same ``module:qualname``, same source digest (:mod:`.identity`), a variant
  whose signature, constexprs, specialisation hints, target and codegen options are the request's
  (:func:`mismatch`) -- returns a real ``triton.compiler.CompiledKernel`` made from the archive's metadata and
  binary (:func:`compiled_kernel`) whose launcher, module and function are karchive's; anything else is a miss
  (``strict``: :class:`ServeMissError` at that first call, naming the nearest variant and why it differs).
- **benchmarking** (``Autotuner._bench``): the decision comes from the archive's tuning records for Triton's
  own key among the configs Triton's own ``prune_configs`` (the library's prune function included) offered; the
  recorded config answers 0, the others infinity, so Triton's ``min`` picks the recorded one and sets
  ``cache``, ``best_config`` and ``configs_timings`` itself. A decision the pruned configs do not contain is a
  miss. An archive built ahead of time (configs, no decisions) lets Triton time the configs on the device, with
  the archive's binaries (nothing compiles).

Return values, ``best_config``, ``warmup``, hooks (``pre_run_hooks``, ``launch_enter_hook``/``launch_exit_hook``,
``kernel_load_*_hook``, config ``pre_hook``/``post_hook``, ``reset_to_zero``/``restore_value``), defaults,
``do_not_specialize``, library autotuner subclasses, pre-filled ``Autotuner.cache`` and the errors for bad calls
are therefore Triton's by construction. docs/serving.md lists what this covers.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import KarchiveError, NoMatchingVariantError, ServeMissError
from ..format.autotune import CONFIG_OPTIONS
from ..runtime.args import pointer_value
from .identity import LiveIdentity, find, live_identity

INF = float("inf")
#: Options that describe what a Triton install can do, not what was asked of the compile: they may differ
#: between the release that built an archive and the one serving it without changing the binary.
CAPABILITY_OPTIONS = frozenset(
    {
        "supported_fp8_dtypes",
        "deprecated_fp8_dot_operand_dtypes",
        "allowed_dot_input_precisions",
        "extern_libs",
        "backend_name",
        "ptx_version",
        "arch",
        "warp_size",
        "max_num_imprecise_acc_default",
    }
)
#: Options Triton sets per call from its knobs (``knobs.runtime.debug`` & co.), compared when both sides hold them.
_IR_SUFFIX = {"ptx": "ptx", "ttir": "ttir", "ttgir": "ttgir", "llir": "llir", "amdgcn": "amdgcn", "source": "source"}


# -- the request ----------------------------------------------------------------------------------------------
class Request:
    """One ``compile(src, target, options)`` call as a variant would describe it (the params' types, constexpr
    values, hints), so it can be compared with an archive's variants field by field."""

    __slots__ = ("kernel", "names", "types", "constexprs", "divisibility", "target", "options", "unsupported")

    def __init__(self, src: Any, target: Any, options: Mapping[str, Any] | None) -> None:
        fn = src.fn
        names = list(fn.arg_names)
        self.names = names
        self.kernel = ""
        self.unsupported: str | None = None
        signature = dict(src.signature)
        consts: dict[int, Any] = {}
        for path, value in dict(getattr(src, "constants", {}) or {}).items():
            path = (path,) if isinstance(path, int) else path
            if isinstance(path, str):
                path = (names.index(path),)
            if len(path) != 1:
                self.unsupported = f"a tuple argument at {path} (the launch ABI takes no tuples)"
                continue
            consts[path[0]] = value
        self.types: dict[str, str] = {}
        self.constexprs: dict[str, Any] = {}
        for i, name in enumerate(names):
            typ = signature.get(name, signature.get(i))
            if not isinstance(typ, str):
                self.unsupported = f"parameter {name!r} of type {typ!r} (tuples are not supported)"
                typ = repr(typ)
            self.types[name] = typ
            if typ == "constexpr":
                self.constexprs[name] = consts.get(i)
        self.divisibility: dict[str, int] = {}
        for path, attrs in dict(getattr(src, "attrs", {}) or {}).items():
            path = (path,) if isinstance(path, int) else tuple(path)
            for attr in attrs or []:
                if attr[0] != "tt.divisibility" or len(path) != 1:
                    self.unsupported = f"specialisation {attr[0]}={attr[1]} on argument {path}"
                    continue
                self.divisibility[names[path[0]]] = int(attr[1])
        self.target = (getattr(target, "backend", None), getattr(target, "arch", None)) if target is not None else None
        self.options = dict(options or {})

    def spec(self) -> str:
        """The request in build-spec words (``*fp32:16, i32, 1024``), for messages and the misses file."""
        parts = []
        for n in self.names:
            t = self.types[n]
            if t == "constexpr":
                parts.append(f"{n}={_plain(self.constexprs[n])!r}")
            else:
                parts.append(f"{n}:{t}" + (f":{self.divisibility[n]}" if n in self.divisibility else ""))
        opts = [f"{k}={self.options[k]}" for k in CONFIG_OPTIONS if self.options.get(k) is not None]
        return ", ".join(parts + opts)


def _plain(value: Any) -> Any:
    """A constexpr as an archive holds it: ``tl.constexpr(x)`` is ``x``, a ``tl.dtype`` its name, a JIT function
    its ``module:qualname``."""
    if type(value).__name__ == "constexpr" and hasattr(value, "value"):
        value = value.value
    if type(value).__name__ in ("dtype", "pointer_type", "block_type") and type(value).__module__.startswith("triton"):
        return str(value)
    if hasattr(value, "cache_key") and hasattr(value, "fn"):
        return f"{getattr(value, 'module', '?')}:{getattr(getattr(value, 'fn', None), '__qualname__', '?')}"
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON would hold them, ``True`` never equal to ``1``."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b and isinstance(a, bool) == isinstance(b, bool)


def mismatch(v: Any, req: Request) -> str | None:
    """Why variant ``v`` is not what ``req`` asks Triton to compile (None: it is)."""
    if req.target is not None and (v.target.backend, str(v.target.arch)) != (req.target[0], str(req.target[1])):
        return f"built for {v.target}, the request is for {req.target[0]}:{req.target[1]}"
    if [p.name for p in v.params] != req.names:
        return f"parameters {[p.name for p in v.params]} differ from {req.names}"
    for p in v.params:
        t = req.types[p.name]
        if t == "constexpr":
            want = _plain(req.constexprs.get(p.name))
            if p.equal_to_1:
                if not (type(want) is int and want == 1):
                    return f"{p.name} was specialised to 1, the call passes {want!r}"
            elif not p.is_constexpr:
                return f"{p.name} is a runtime {p.type} in the variant, a constexpr {want!r} in the call"
            elif not _same(p.constexpr, want):
                return f"{p.name}={p.constexpr!r} in the variant, {want!r} in the call"
            continue
        if p.is_constexpr or p.equal_to_1:
            return f"{p.name} is fixed in the variant ({p.constexpr if p.is_constexpr else 1!r}), a runtime {t} here"
        if p.type != t:
            return f"{p.name}: {p.type} in the variant, {t} in the call"
        if (p.divisibility or None) != (req.divisibility.get(p.name) or None):
            return (
                f"{p.name}: divisibility {p.divisibility or 'none'} in the variant, "
                f"{req.divisibility.get(p.name) or 'none'} in the call"
            )
    return _option_mismatch(v, req.options)


def _option_mismatch(v: Any, options: Mapping[str, Any]) -> str | None:
    abi = v.abi
    fixed = {"num_warps": abi.num_warps, "num_ctas": abi.num_ctas}
    for name, have in list(v.options.items()) + list(fixed.items()):
        if name in CAPABILITY_OPTIONS or name not in options:
            continue
        want = options[name]
        if not _same(_jsonable(have), _jsonable(want)):
            return f"option {name}={have!r} in the variant, {want!r} requested"
    return None


def _jsonable(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_jsonable(x) for x in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(x) for k, x in value.items()}
    return value


# -- the served CompiledKernel ---------------------------------------------------------------------------------
class Served:
    """One archived kernel as a session serves it: which archive, how many launches (the report's line)."""

    __slots__ = ("name", "archive", "calls", "compiles", "kernel", "direct", "tunes_on_device")

    def __init__(self, name: str, archive: str, kernel: Any = None) -> None:
        self.name, self.archive, self.kernel = name, archive, kernel
        self.calls = 0
        self.compiles = 0
        self.direct = False
        self.tunes_on_device = False  # Triton timed its configs (the archive's binaries): no decisions recorded


class Launcher:
    """``CompiledKernel.run`` of a served kernel: Triton's launcher signature, karchive's launch.

    ``(gridX, gridY, gridZ, stream, function, packed_metadata, launch_metadata, enter_hook, exit_hook, *args)``
    as Triton's runtime and libraries relaunching a ``CompiledKernel`` call it. Triton chose the variant (its
    specialisation of the call is what the boundary matched), so the arguments go to the variant's launch entry as
    they are -- pointers read by address, no second selection --, the constexpr slots ignored as Triton's
    launcher ignores them; the hooks run around the launch as Triton's generated launcher runs them.
    """

    __slots__ = ("kernel", "record", "variant", "n", "runtime_pos", "_entries", "_positions", "_pointers")

    def __init__(self, kernel: Any, record: Served, variant: Any) -> None:
        self.kernel = kernel  # a karchive Kernel over this one variant (its plan and entries)
        self.record = record
        self.variant = variant
        self.n = len(variant.params)
        self.runtime_pos = tuple(i for i, p in enumerate(variant.params) if not (p.is_constexpr or p.equal_to_1))
        self._entries: dict[int, Any] = {}  # device -> LaunchEntry
        plan = kernel.plan
        self._positions = tuple(plan.call_positions)
        self._pointers = frozenset(plan.extracted)

    def __call__(
        self,
        gx: int,
        gy: int,
        gz: int,
        stream: Any,
        function: Any,
        packed_metadata: Any,
        launch_metadata: Any,
        enter_hook: Any,
        exit_hook: Any,
        *args: Any,
    ) -> None:
        if enter_hook is not None:
            enter_hook(launch_metadata)
        full = self.complete(args)
        if gx * gy * gz > 0:  # Triton's launcher launches nothing for an empty grid (the hooks still run)
            values = [
                pointer_value(full[i]) if i in self._pointers and full[i] is not None else full[i]
                for i in self._positions
            ]
            self.entry().launch_dims(gx, gy, gz, stream, values)
            self.record.calls += 1
        if exit_hook is not None:
            exit_hook(launch_metadata)

    def entry(self) -> Any:
        """The variant's launch entry on the current device (loaded once per device)."""
        arc = self.kernel.archive
        backend = arc.backend()
        index = backend.current_device()
        ent = self._entries.get(index)
        if ent is None:
            from ..runtime.select import device_fit

            fit = device_fit(self.variant, backend.device_info(index), arc.allow_ptx, arc.ptx_header)
            if isinstance(fit, str):
                raise NoMatchingVariantError(f"{self.variant.kernel}: {fit}", kernel=self.variant.kernel, param=None)
            ent = self._entries[index] = self.kernel._entry(self.variant, fit, index)
        return ent

    def complete(self, args: Sequence[Any]) -> list[Any]:
        """Every parameter's value. Triton passes all of them; a library relaunching a CompiledKernel may pass the
        runtime arguments only (constexpr slots are then empty: the binary has them built in)."""
        if len(args) == self.n:
            return list(args)
        if len(args) == len(self.runtime_pos):
            full: list[Any] = [None] * self.n
            for i, a in zip(self.runtime_pos, args):
                full[i] = a
            return full
        raise ServeMissError(
            f"karchive.serve: {self.kernel.name} launched with {len(args)} arguments; its binary takes "
            f"{len(self.runtime_pos)} runtime arguments ({self.n} parameters)",
            kernel=self.kernel.name,
            call="",
            rejections=(),
            archives=(self.record.archive,),
            param=None,
            values=(),
        )


class _Files:
    """Where served kernels' metadata groups live (Triton's CompiledKernel reads its metadata from files):
    one private directory per process, removed at exit."""

    def __init__(self) -> None:
        self._dir: str | None = None
        self._lock = threading.Lock()

    def directory(self) -> str:
        with self._lock:
            if self._dir is None or not os.path.isdir(self._dir):
                self._dir = tempfile.mkdtemp(prefix="karchive-served-")
                import atexit

                atexit.register(shutil.rmtree, self._dir, True)
            return self._dir


_FILES = _Files()
_BINARY_EXT = {"cuda": "cubin", "hip": "hsaco"}


def _metadata(arc: Any, variant: Any) -> dict[str, Any]:
    """The variant's Triton metadata as this process's Triton would hold it: machine paths restored under this
    Triton install (where the archive's producer had them under its own), and -- only for an archive from another
    Triton release -- the fields this release's ``CompiledKernel`` reads filled in from the launch ABI."""
    import triton

    from ..format.sentinel import restore_paths

    meta = json.loads(arc.reader.read(variant.metadata.path))
    if not isinstance(meta, dict):
        raise KarchiveError(f"{variant.kernel}: the variant's metadata is not an object")
    meta = restore_paths(meta, os.path.dirname(os.path.dirname(os.path.abspath(triton.__file__))))
    if str(meta.get("triton_version", "")) != str(getattr(triton, "__version__", "")):
        abi = variant.abi
        fill = {
            "name": abi.entry,
            "num_warps": abi.num_warps,
            "num_ctas": abi.num_ctas,
            "shared": abi.shared,
            "cluster_dims": list(abi.cluster_dims),
            "tmem_size": abi.tmem_size,
            "global_scratch_size": abi.global_scratch_size,
            "global_scratch_align": abi.global_scratch_align,
            "profile_scratch_size": abi.profile_scratch_size,
            "profile_scratch_align": abi.profile_scratch_align,
            "launch_cooperative_grid": abi.cooperative_grid,
            "launch_pdl": abi.pdl,
            "warp_size": abi.warp_size,
        }
        for k, v in fill.items():
            meta.setdefault(k, v)
    meta.setdefault(
        "target",
        {"backend": variant.target.backend, "arch": variant.target.arch, "warp_size": variant.target.warp_size},
    )
    meta.setdefault("hash", variant.key)
    return meta


def compiled_kernel(arc: Any, variant: Any, src: Any, record: Served, single: Any) -> Any:
    """A real ``CompiledKernel`` of ``variant``: Triton's own class made from the archive's metadata and binary
    (``metadata``, ``asm``, ``packed_metadata``, ``name``, ``hash`` as Triton makes them), with karchive's launcher as
    ``run`` and karchive's module load behind ``_init_handles`` (Triton's load hooks called around it)."""
    from triton.compiler import CompiledKernel

    meta = _metadata(arc, variant)
    name = str(meta.get("name") or variant.abi.entry)
    if not name.isidentifier():
        raise KarchiveError(f"{variant.kernel}: entry name {name!r} is not an identifier")
    where = os.path.join(_FILES.directory(), variant.key)
    os.makedirs(where, exist_ok=True)
    backend = variant.target.backend
    files = {
        f"{name}.json": json.dumps(meta).encode(),
        f"{name}.{_BINARY_EXT.get(backend, 'bin')}": arc.reader.read(variant.binary.path),
    }
    for stage, ref in variant.ir.items():
        if stage in _IR_SUFFIX:
            files[f"{name}.{_IR_SUFFIX[stage]}"] = arc.reader.read(ref.path)
    group = {}
    for fname, data in files.items():
        path = os.path.join(where, fname)
        tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        group[fname] = path
    kernel = CompiledKernel(src, group, meta["hash"])
    kernel._karchive_served = (record.archive, variant.key)  # which binary this is (capture skips served kernels)
    kernel._run = Launcher(single, record, variant)
    kernel._init_handles = _Handles(kernel, arc, variant)  # instance attribute: shadows the method
    return kernel


class _Handles:
    """``CompiledKernel._init_handles`` of a served kernel: karchive loads the module on the current device
    (once per variant and device, shared with every other user of the archive) and sets Triton's fields
    (``module``, ``function``, ``n_regs``, ``n_spills``, ``n_max_threads``); Triton's load hooks see it."""

    __slots__ = ("kernel", "arc", "variant", "_lock")

    def __init__(self, kernel: Any, arc: Any, variant: Any) -> None:
        self.kernel, self.arc, self.variant = kernel, arc, variant
        self._lock = threading.Lock()

    def __call__(self) -> None:
        k = self.kernel
        if k.module is not None:
            return
        from triton import knobs

        from ..runtime.select import device_fit

        with self._lock:
            if k.module is not None:
                return
            backend = self.arc.backend()
            index = backend.current_device()
            info = backend.device_info(index)
            shared = self.variant.abi.shared
            if info.shared_optin is not None and shared > info.shared_optin:
                # Triton's own error and fields: its autotuner times such a config inf, Inductor drops it
                from triton.runtime.errors import OutOfResources

                raise OutOfResources(shared, info.shared_optin, "shared memory")
            fit = device_fit(self.variant, info, self.arc.allow_ptx, self.arc.ptx_header)
            if isinstance(fit, str):
                raise NoMatchingVariantError(f"{self.variant.kernel}: {fit}", kernel=self.variant.kernel, param=None)
            start = getattr(knobs.runtime, "kernel_load_start_hook", None)
            if start is not None:
                start(k.module, k.function, k.name, k.metadata_group, k.hash)
            loaded = self.arc.load_function(self.variant, fit, index)
            attrs = getattr(backend, "function_attributes", None)
            regs, spills, max_threads = attrs(loaded.function) if attrs is not None else (0, 0, 1024)
            k.n_regs, k.n_spills, k.n_max_threads = regs, spills, max_threads
            k.function = _handle_int(loaded.function)
            k.module = loaded.module
            end = getattr(knobs.runtime, "kernel_load_end_hook", None)
            if end is not None:
                end(k.module, k.function, k.name, k.metadata_group, k.hash)


def _handle_int(handle: Any) -> Any:
    """A driver handle as Triton's fields hold it (an int address), where the binding's object gives one."""
    if isinstance(handle, int):
        return handle
    try:
        return int(handle)
    except (TypeError, ValueError):
        getptr = getattr(handle, "getPtr", None)
        return int(getptr()) if callable(getptr) else handle


# -- the boundary ---------------------------------------------------------------------------------------------
class Boundary:
    """The two patched steps of one session (compile and the autotuner's benchmark), and what they served."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.served: dict[tuple[str, str], Served] = {}
        self._singles: dict[tuple[int, str], Any] = {}
        self._lock = threading.RLock()
        self.orig_compile: Callable[..., Any] | None = None

    # -- compile --------------------------------------------------------------------------------------------
    def compile(self, src: Any, target: Any = None, options: Any = None, _env_vars: Any = None) -> Any:
        fn = getattr(src, "fn", None)
        mode = self.session.mode
        if fn is None or not hasattr(fn, "arg_names"):
            return self._unserved(
                src,
                target,
                options,
                _env_vars,
                None,
                None,
                [f"a compile from {type(src).__name__} (not a @triton.jit source) is not served"],
            )
        live = live_identity(fn)
        req = Request(src, target, options if isinstance(options, Mapping) else getattr(options, "__dict__", {}))
        req.kernel = live.name
        hit, reasons = self.lookup(live, req)
        if mode == "audit":
            if hit is not None:
                self._record(live.name, hit[0])
                self.session.report.would_serve(live.name, hit[1].key[:12], f"{hit[0].name}@{hit[0].version}")
            else:
                self.session.report.missed(live.name, "; ".join(reasons), f"{live.name}({req.spec()})")
            return self._orig(src, target, options, _env_vars)
        if hit is None:
            return self._unserved(src, target, options, _env_vars, live, req, reasons)
        arc, variant, name = hit
        record = self._record(live.name, arc)
        record.compiles += 1
        return compiled_kernel(arc, variant, src, record, self._single(arc, name, variant))

    def _orig(self, src: Any, target: Any, options: Any, env: Any) -> Any:
        assert self.orig_compile is not None
        if env is None:
            return self.orig_compile(src, target=target, options=options)
        return self.orig_compile(src, target=target, options=options, _env_vars=env)

    def lookup(self, live: LiveIdentity, req: Request) -> tuple[tuple[Any, Any, str] | None, list[str]]:
        """(archive, variant, archive's kernel name) serving this request, or None and why not (per archive)."""
        if req.unsupported:
            return None, [f"{live.name}: {req.unsupported}"]
        if live.digest is None:
            return None, [f"{live.name}: its source digest cannot be computed ({live.kind})"]
        reasons: list[str] = []
        for arc in self.session.archives:
            name, why = find(arc, live)
            if name is None:
                reasons += why
                continue
            label = f"{arc.name}@{arc.version}"
            near: list[str] = []
            for v in arc.variants(name):
                why_not = mismatch(v, req)
                if why_not is None:
                    return (arc, v, name), []
                near.append(f"{v.key[:12]}: {why_not}")
            shown = "; ".join(near[:4]) + (f"; ... {len(near) - 4} more" if len(near) > 4 else "")
            reasons.append(
                f"{label}: no variant of {name} is this specialisation for "
                f"{req.target[0] if req.target else '?'}:{req.target[1] if req.target else '?'} "
                f"({shown or 'no variants'})"
            )
        return None, reasons

    def _unserved(
        self,
        src: Any,
        target: Any,
        options: Any,
        env: Any,
        live: LiveIdentity | None,
        req: Request | None,
        reasons: list[str],
    ) -> Any:
        name = live.name if live is not None else str(getattr(src, "name", "?"))
        call = f"{name}({req.spec()})" if req is not None else name
        reason = "; ".join(reasons) or "not in the archives"
        self.session.report.missed(name, reason, call)
        if self.session.mode == "strict":
            raise ServeMissError(
                f"karchive.serve(strict): cannot serve {call}: {reason}. Triton was not asked to compile it; "
                f"archives: {', '.join(self.session.labels()) or '(none)'}",
                kernel=name,
                call=call,
                rejections=tuple((name, r) for r in reasons),
                archives=self.session.labels(),
                param=None,
                values=(),
            )
        log = self.session.misses
        if log is not None and req is not None and live is not None:
            log.add_request(getattr(src, "fn", None), live.name, req, reason)
        return self._orig(src, target, options, env)

    def _record(self, name: str, arc: Any) -> Served:
        label = f"{arc.name}@{arc.version}"
        key = (name, label)
        rec = self.served.get(key)
        if rec is None:
            with self._lock:
                rec = self.served.get(key)
                if rec is None:
                    rec = self.served[key] = Served(name, label)
                    self.session.report.routed(name, label, rec)
        return rec

    def _single(self, arc: Any, name: str, variant: Any) -> Any:
        """karchive's dispatcher over exactly this variant (its checks and launch path), once per archive+variant."""
        from ..runtime.launch.kernel import Kernel

        key = (id(arc), variant.key)
        k = self._singles.get(key)
        if k is None:
            with self._lock:
                k = self._singles.get(key)
                if k is None:
                    k = self._singles[key] = Kernel(arc, name, (variant,))
        return k

    def fast_path(self, obj: Any) -> Any:
        """The fast path of a plain JIT function an archive serves (:mod:`.fast`), kept on the object; False
        where there is none (another kind of object, not archived, a fast path that was turned off)."""
        found: Any = False
        jit_type, tuner_type = _STATE["jit_type"], _STATE["tuner_type"]
        tuned = (
            type(obj) is tuner_type
            and type(getattr(obj, "fn", None)) is jit_type
            and not any(getattr(c, "pre_hook", None) for c in getattr(obj, "configs", ()) or ())
        )
        if type(obj) is jit_type or tuned:
            live = live_identity(obj.fn if tuned else obj)
            for arc in self.session.archives:
                name, _why = find(arc, live)
                if name is None:
                    continue
                from .fast import FastPath, TunedFastPath

                record = self._record(live.name, arc)
                if not tuned:
                    found = FastPath(obj, self, arc, name, record, _STATE["jit_run"])
                elif (
                    hasattr(arc.kernel(name).resolver, "chosen_config") and not arc.kernel(name).resolver.tune_on_device
                ):
                    # (a key Triton times on the device is Triton's decision: its path decides, not karchive's timing)
                    found = TunedFastPath(obj, self, arc, name, record, _STATE["tuner_run"])
                break
        obj.__dict__["_karchive_fast"] = (self, found)
        return found

    # -- the autotuner's benchmark ------------------------------------------------------------------------
    def bench(self, tuner: Any, orig: Callable[..., Any], args: tuple, config: Any, meta: dict[str, Any]) -> Any:
        """``Autotuner._bench``: the archive's decision for Triton's key (0 for the recorded config, infinity for
        the others); Triton's own timing where the archive has configs but no decisions (ahead-of-time builds)."""
        conflicts = meta.keys() & getattr(config, "kwargs", {}).keys()
        if conflicts:  # Triton's own check, before anything is timed (the caller re-defined a tuned symbol)
            raise ValueError(
                f"Conflicting meta-parameters: {', '.join(conflicts)}."
                " Make sure that you don't re-define auto-tuned symbols."
            )
        decision = self.decision(tuner, args, meta)
        if decision is None:
            found = tuner.__dict__.get("_karchive_resolver")
            if found is not None and found[2] is not None:
                self._record(*found[2]).tunes_on_device = True
            return orig(tuner, *args, config=config, **meta)
        return [0.0, 0.0, 0.0] if _config_is(config, decision) else [INF, INF, INF]

    def decision(self, tuner: Any, args: tuple, meta: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The recorded config (``{"kwargs", "options"}``) for this call's key; None: let Triton time it."""
        resolver = self._resolver(tuner)
        if resolver is None:
            return None
        if getattr(resolver, "tune_on_device", False) and not getattr(resolver, "_tables", False):
            return None
        kwargs = {k: v for k, v in meta.items() if k not in ("grid", "warmup")}
        try:
            return resolver.chosen_config(meta.get("grid"), args, kwargs)
        except NoMatchingVariantError as exc:
            if self.session.mode == "strict":
                name = getattr(resolver, "name", "?")
                raise ServeMissError(
                    f"karchive.serve(strict): {name}: the archives hold no tuning decision for this call: {exc}. "
                    "Triton was not asked to benchmark it",
                    kernel=name,
                    call="",
                    rejections=((name, str(exc)),),
                    archives=self.session.labels(),
                    param=None,
                    values=(),
                ) from exc
            return None

    def _resolver(self, tuner: Any) -> Any:
        """The archive kernel's autotune resolver for the JIT function under ``tuner`` (None: not archived, or
        no records: Triton's own benchmark runs, and its launches go through the compile boundary)."""
        cached = tuner.__dict__.get("_karchive_resolver")
        if cached is not None and cached[0] is self:
            return cached[1]
        where = None
        jit = tuner
        for _ in range(16):
            if hasattr(jit, "arg_names") and hasattr(jit, "cache_key") and not hasattr(jit, "configs"):
                break
            jit = getattr(jit, "fn", None)
            if jit is None:
                break
        resolver = None
        if jit is not None:
            live = live_identity(jit)
            for arc in self.session.archives:
                name, _why = find(arc, live)
                if name is not None:
                    where = where or (live.name, arc)
                    r = getattr(arc.kernel(name), "resolver", None)
                    if hasattr(r, "chosen_config"):
                        resolver = r
                        break
        tuner.__dict__["_karchive_resolver"] = (self, resolver, where)
        return resolver


def _config_is(config: Any, decision: Mapping[str, Any]) -> bool:
    """Is Triton's ``Config`` the recorded one (same meta-parameters, same options where the record says)?"""
    values = dict(decision.get("kwargs") or {})
    if dict(getattr(config, "kwargs", {}) or {}) != values:
        return False
    for k, v in dict(decision.get("options") or {}).items():
        if hasattr(config, k) and getattr(config, k) != v:
            return False
    return True


# -- installing -----------------------------------------------------------------------------------------------
_STATE: dict[str, Any] = {
    "boundary": None,
    "patched": None,
    "orig": None,
    "jit_type": None,
    "jit_run": None,
    "tuner_type": None,
    "tuner_run": None,
    "knobs": None,
}


def _compile(src: Any, target: Any = None, options: Any = None, _env_vars: Any = None) -> Any:
    """What ``triton.compiler.compile`` is while serving (and what JIT functions whose binder was made while
    serving keep calling after ``stop()``: then Triton's own compile, as it was when serving started)."""
    b = _STATE["boundary"]
    if b is None:
        orig = _STATE["orig"]
        if _env_vars is None:
            return orig(src, target=target, options=options)
        return orig(src, target=target, options=options, _env_vars=_env_vars)
    return b.compile(src, target, options, _env_vars)


def _bench(self: Any, *args: Any, config: Any, **meta: Any) -> Any:
    b = _STATE["boundary"]
    orig = _STATE["patched"]["_bench"]
    if b is None:
        return orig(self, *args, config=config, **meta)
    return b.bench(self, orig, args, config, meta)


def _getitem(self: Any, grid: Any) -> Any:
    """``KernelInterface.__getitem__`` while serving: a served call site's fast path where it holds (:mod:`.fast`),
    else Triton's own. Written flat: it runs at every ``kernel[grid]`` of every Triton kernel in the process.
    Only grids whose reading Triton and the dispatcher share take the fast path (a callable, a tuple or list of 1 to
    3 entries): Triton launches a longer one with its first three dims and refuses a bare int, the dispatcher would
    refuse the one and take the other as ``(n,)``."""
    b = _STATE["boundary"]
    g = type(grid)
    if b is not None and ((g is tuple or g is list) and 0 < len(grid) < 4 or callable(grid)):
        mine = self.__dict__.get("_karchive_fast")
        fp = mine[1] if mine is not None and mine[0] is b else b.fast_path(self)
        if fp and fp.on and not fp.hooks:
            rt = _STATE["knobs"]  # no launch hook set (Triton 3.5+ keep them as hook chains: .calls)
            if not getattr(rt.launch_enter_hook, "calls", True) and not getattr(rt.launch_exit_hook, "calls", True):
                return fp.subscript(grid) if not fp.globals else fp.bound(grid)
    return _STATE["patched"]["__getitem__"](self, grid)


def _compile_modules() -> list[Any]:
    import importlib

    mods = []
    for name in ("triton.compiler.compiler", "triton.compiler", "triton"):
        try:
            mods.append(importlib.import_module(name))
        except ImportError:
            continue
    return mods


def install(session: Any) -> Boundary:
    """Answer Triton's compile (and its autotuner's benchmark) from ``session``'s archives."""
    from triton import knobs
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction, KernelInterface

    b = Boundary(session)
    if _STATE["patched"] is None:
        first = _compile_modules()[0]
        patched = {
            "compile": first.compile,
            "_bench": Autotuner.__dict__["_bench"],
            "__getitem__": KernelInterface.__dict__["__getitem__"],
        }
        for mod in _compile_modules():
            if getattr(mod, "compile", None) is patched["compile"]:
                mod.compile = _compile
        Autotuner._bench = _bench
        KernelInterface.__getitem__ = _getitem
        _STATE.update(
            jit_type=JITFunction,
            jit_run=JITFunction.run,
            tuner_type=Autotuner,
            tuner_run=Autotuner.run,
            knobs=knobs.runtime,
        )
        _STATE["patched"] = patched
        _STATE["orig"] = patched["compile"]
        _rebind_existing()
    b.orig_compile = _STATE["patched"]["compile"]
    if _STATE["boundary"] is not None:
        _purge_served()  # the previous session's binaries: this one's archives answer from now on
    _STATE["boundary"] = b
    return b


def _purge_served() -> None:
    """Take the kernels a session served out of Triton's JIT caches, so after ``stop()`` (or under a new session)
    the next call compiles -- or is served -- again instead of launching a binary nobody serves any more."""
    import gc

    from triton.runtime.jit import JITFunction

    for obj in gc.get_objects():
        if issubclass(type(obj), JITFunction):
            for caches in list(getattr(obj, "device_caches", {}).values()):
                cache = caches[0] if isinstance(caches, tuple) and caches and isinstance(caches[0], dict) else None
                if cache is None:
                    continue
                for key in [k for k, v in cache.items() if isinstance(getattr(v, "_run", None), Launcher)]:
                    del cache[key]


def _rebind_existing() -> None:
    """JIT functions whose binder was made before serving hold Triton's ``compile`` as an attribute: point them at
    the boundary too (``create_binder`` reads it from ``triton.compiler`` when a device is first used)."""
    import gc

    from triton.runtime.jit import JITFunction

    for obj in gc.get_objects():
        if issubclass(type(obj), JITFunction) and "compile" in obj.__dict__ and obj.__dict__["compile"] is not _compile:
            obj.compile = _compile


def uninstall() -> None:
    """Give Triton its own compile and benchmark back (kernels already compiled stay in Triton's caches)."""
    patched = _STATE["patched"]
    was = _STATE["boundary"]
    _STATE["boundary"] = None
    if patched is None:
        return
    if was is not None:
        _purge_served()
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import KernelInterface

    for mod in _compile_modules():
        if getattr(mod, "compile", None) is _compile:
            mod.compile = patched["compile"]
    Autotuner._bench = patched["_bench"]
    KernelInterface.__getitem__ = patched["__getitem__"]
    _STATE["patched"] = None


def active() -> Boundary | None:
    return _STATE["boundary"]


def suspend() -> Boundary | None:
    """Serving off for a while, keeping what it served (Triton's caches, the fast paths): Triton's own compile,
    benchmark and dispatch answer meanwhile. For benchmarks that interleave a served call site with Triton's
    own launches; :func:`resume` with what this returned turns it on again."""
    b = _STATE["boundary"]
    _STATE["boundary"] = None
    return b


def resume(b: Boundary | None) -> None:
    """Serving on again after :func:`suspend` (a session that was stopped meanwhile stays stopped)."""
    if _STATE["patched"] is not None:
        _STATE["boundary"] = b

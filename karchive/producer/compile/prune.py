"""``prune_configs_by`` ahead of time: what a build can apply without a device, and why the rest is not applied.

Triton prunes an autotuner's configs at each new key: ``early_config_prune(configs, named_args, **kwargs)``
first, then, with a ``perf_model``, keeps the ``top_k`` configs the model estimates fastest. A build has no
call and no device, so:

- ``early_config_prune`` is called once per request with the arguments the spec fixes (its constexpr
  values) as ``named_args`` and no keywords. Those arguments are a read-only mapping that refuses to
  answer for anything else (a missing name, iteration, ``len``): a function that reads an argument the
  build does not know, or fails for any other reason (it queries the device, it returns configs that are
  not the autotuner's), is not applied, and the record says which argument or error stopped it. A function
  that reads only the configs, or only fixed arguments, is applied: the configs it drops are not built.
- ``perf_model`` / ``top_k`` estimate each config's run time from the launch's arguments and the device
  (Triton's matmul model reads the GPU's clock and SM count): never applied ahead of time; every config
  ``early_config_prune`` kept is built and the device tunes among them.

The user's function runs in the build process, like the rest of the kernel's module the build imports;
nothing from an archive is ever executed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

PERF_MODEL_SKIPPED = (
    "perf_model/top_k not applied ahead of time: the model estimates each config's time from the "
    "launch's arguments and the device, which a build has not; every config early_config_prune "
    "kept is built and the device tunes among them"
)


class _NeedsArgument(Exception):
    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


class KnownArgs(Mapping[str, Any]):
    """The arguments a build knows (the spec's constexprs); anything else raises, so a prune function that
    would need a launch's argument is detected instead of silently seeing a default."""

    def __init__(self, known: Mapping[str, Any], params: set[str]) -> None:
        self._known = dict(known)
        self._params = params
        self.read: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name in self._known:
            self.read[name] = self._known[name]
            return self._known[name]
        raise _NeedsArgument(f"argument {name!r}")

    def get(self, name: str, default: Any = None) -> Any:
        if name in self._known or name in self._params:
            return self[name]
        return default  # not a parameter of the kernel: absent at run time too

    def __contains__(self, name: object) -> bool:
        if name in self._known:
            return True
        if name in self._params:  # present at run time, unknown now: the answer would be a guess
            raise _NeedsArgument(f"whether argument {name!r} is passed")
        return False

    def __iter__(self) -> Iterator[str]:
        raise _NeedsArgument("every argument (it iterates over them)")

    def __len__(self) -> int:
        raise _NeedsArgument("the number of arguments")


@dataclass
class PruneOutcome:
    """What ``prune_configs_by`` did for one kernel, over all its requests (stored in the autotune record)."""

    early: list[dict[str, Any]] = field(default_factory=list)  # one per distinct outcome: args read, kept or reason
    perf_model: bool = False
    top_k: Any = None

    def add(self, item: dict[str, Any]) -> None:
        if item not in self.early:
            self.early.append(item)

    def record(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.early:
            out["early_config_prune"] = self.early
        if self.perf_model:
            out["perf_model"] = {
                "applied": False,
                "reason": PERF_MODEL_SKIPPED,
                "top_k": self.top_k if isinstance(self.top_k, (int, float)) else None,
            }
        return out

    def summary(self) -> str:
        """One line for the record's ``prune`` field and the build's warnings."""
        parts = []
        applied = [e for e in self.early if e.get("applied")]
        skipped = [e for e in self.early if not e.get("applied")]
        if applied:
            kept = sorted({i for e in applied for i in e["kept"]})
            parts.append(f"early_config_prune applied ahead of time with the spec's arguments (kept configs {kept})")
        if skipped:
            parts.append(
                "early_config_prune not applied ahead of time: "
                + "; ".join(sorted({e["reason"] for e in skipped}))
                + "; every config is built and the device tunes among them"
            )
        if self.perf_model:
            parts.append(PERF_MODEL_SKIPPED)
        return "; ".join(parts)


def _index_of(configs: list, c: Any) -> int | None:
    for i, mine in enumerate(configs):
        if mine is c:
            return i
    from .autotune import config_json

    try:
        want = config_json(c)
    except Exception:  # noqa: BLE001 - not a Config at all
        return None
    same = [i for i, mine in enumerate(configs) if config_json(mine) == want]
    return same[0] if same else None


def early_prune(tuner: Any, known: Mapping[str, Any], params: set[str]) -> dict[str, Any]:
    """Call the tuner's ``early_config_prune`` with the arguments a build knows: ``{"applied": True, "kept":
    [config indexes], "args": {name: value read}}``, or ``{"applied": False, "reason": ...}``."""
    fn = getattr(tuner, "early_config_prune", None)
    if fn is None:
        return {"applied": False, "reason": "no early_config_prune"}
    configs = list(tuner.configs)
    args = KnownArgs({k: v for k, v in known.items() if k in params}, params)
    try:
        kept = fn(list(configs), args)
    except _NeedsArgument as need:
        return {
            "applied": False,
            "reason": f"it reads {need.what}, which a build does not know (only the spec's constexpr values)",
        }
    except Exception as exc:  # noqa: BLE001 - the user's function, run without a launch: any failure means "not now"
        return {
            "applied": False,
            "reason": f"it raised {type(exc).__name__}: {str(exc)[:200]} when called with the "
            "spec's arguments and no device call",
        }
    try:
        kept_list = list(kept)
    except TypeError:
        return {"applied": False, "reason": f"it returned a {type(kept).__name__}, not a list of configs"}
    indexes = [_index_of(configs, c) for c in kept_list]
    if not kept_list or any(i is None for i in indexes):
        why = "no config" if not kept_list else "configs that are not the autotuner's"
        return {"applied": False, "reason": f"it returned {why}"}
    out: dict[str, Any] = {"applied": True, "kept": sorted({i for i in indexes if i is not None})}
    if args.read:
        from ...format.autotune import json_safe

        out["args"] = json_safe(dict(sorted(args.read.items())))
    return out

"""Which variant of archive B is "the same variant" as one of archive A.

A variant key (spec/FORMAT.md §10) hashes every input, the kernel's source and the Triton version
included, so a release that edits a kernel gives all its variants new keys: keys alone would show
every edit as "removed + added". Matching therefore works on a **slot** — what a caller selects a
variant by — and uses the key only to pair exact equals first:

* **slot** = kernel name + target (backend, arch, warp size) + specialisation: the Python signature
  in order (parameter names, types, ``divisibility``/``equal_to_1`` hints) and the constexpr values.
  Variants in different slots are never paired: a new constexpr value, a changed type or hint, a
  renamed parameter or kernel is a removed variant plus an added one. One exception keeps an old
  and a new version of an archive comparable: a bare kernel name (written before qualified names)
  on one side counts as the one qualified kernel of that short name on the other side
  (:func:`kernel_aliases`; ``add_kernel`` and ``kernels:add_kernel``); where the other side has two
  such kernels nothing is guessed.
* Inside one slot an archive may hold several variants that differ only in their options (e.g.
  ``matmul_kernel`` at ``num_warps`` 4 and 8, examples/build.toml). They are paired in rounds from the
  strictest criterion to the loosest; a round pairs a variant only when its group holds exactly one
  variant from each archive, so nothing is paired by guesswork:

  1. ``key``: the same key (same inputs; the bytes may still differ, e.g. another ptxas);
  2. ``options``: all codegen options equal (the source, Triton version or hooks changed);
  3. ``tuning``: the same :data:`TUNING_OPTIONS` (``num_warps``, ``num_stages``, …; other options changed);
  4. ``slot``: the one variant left in the slot on each side (its tuning options changed).

  What is still unpaired after round 4 (e.g. ``num_warps`` {4, 8} became {2, 16}) is reported as
  removed and added.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..format.autotune import CONFIG_OPTIONS, HIP_TUNING_OPTIONS
from ..format.names import is_qualified, short_name

__all__ = [
    "Pair",
    "ROUNDS",
    "TUNING_OPTIONS",
    "canonical",
    "kernel_aliases",
    "pair_variants",
    "slot_of",
    "specialisation_text",
    "target_text",
    "tuning_of",
]

#: Options that shape the launch and that builds sweep (spec/BUILD.md): within a slot they tell
#: variants apart before the looser "one left on each side" round.
TUNING_OPTIONS = CONFIG_OPTIONS + HIP_TUNING_OPTIONS


def canonical(value: Any) -> str:
    """A stable text for comparing JSON values (keys sorted; 1 and 1.0 stay distinct)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def target_text(v: dict) -> str:
    t = v["target"]
    return f"{t['backend']}:{t['arch']}"


def _param_identity(p: dict) -> dict:
    out: dict[str, Any] = {"name": p["name"], "type": p["type"]}
    if "value" in p:
        out["value"] = p["value"]
    if p.get("hints"):
        out["hints"] = p["hints"]
    return out


def kernel_aliases(a: Iterable[str], b: Iterable[str]) -> dict[str, str]:
    """Bare kernel names of one side -> the one qualified name with that short name on the other side
    (and no bare kernel of that name there): the same kernel before and after qualified names."""
    names_a, names_b = set(a), set(b)
    out: dict[str, str] = {}
    for one, other in ((names_a, names_b), (names_b, names_a)):
        for k in sorted(one):
            if is_qualified(k) or k in other:
                continue
            found = [q for q in other if is_qualified(q) and short_name(q) == k]
            if len(found) == 1:
                out[k] = found[0]
    return out


def slot_of(v: dict, aliases: dict[str, str] | None = None) -> str:
    """The slot as canonical text: kernel, target and specialisation (see the module docstring)."""
    t = v["target"]
    return canonical(
        {
            "kernel": (aliases or {}).get(v["kernel"], v["kernel"]),
            "target": [t["backend"], t["arch"], t["warp_size"]],
            "params": [_param_identity(p) for p in v["params"]],
        }
    )


def tuning_of(v: dict) -> dict[str, Any]:
    options = v.get("options") or {}
    return {k: options[k] for k in TUNING_OPTIONS if options.get(k) is not None}


def specialisation_text(v: dict, full: bool = False) -> str:
    """``BLOCK=1024 stride==1`` (constexprs and ``==1`` ints, as ``inspect`` shows them); with ``full``
    also every other parameter's type and divisibility, for slots the short form cannot tell apart."""
    parts = []
    for p in v["params"]:
        hints = p.get("hints") or {}
        if hints.get("equal_to_1"):
            parts.append(f"{p['name']}==1")
        elif "value" in p:
            parts.append(f"{p['name']}={canonical(p['value']) if not isinstance(p['value'], str) else p['value']}")
        elif full:
            div = f":{hints['divisibility']}" if hints.get("divisibility") else ""
            parts.append(f"{p['name']}:{p['type']}{div}")
    return " ".join(parts)


@dataclass(frozen=True)
class Pair:
    """One row of a diff: ``a`` only (removed), ``b`` only (added), or both (paired by ``matched_by``)."""

    slot: str
    a: dict | None
    b: dict | None
    matched_by: str | None = None  # "key" | "options" | "tuning" | "slot"; None when unpaired

    @property
    def variant(self) -> dict:
        """``a``, or ``b`` where there is no ``a``: what names the row (every pair holds at least one)."""
        v = self.a if self.a is not None else self.b
        assert v is not None, "a Pair holds at least one variant"
        return v

    @property
    def kernel(self) -> str:
        """The row's kernel name: B's where both sides hold one (a bare A name paired with a qualified B)."""
        return (self.b if self.b is not None else self.variant)["kernel"]


#: The pairing rounds, strictest first: (name, what must be equal inside a slot).
ROUNDS: tuple[tuple[str, Callable[[dict], str]], ...] = (
    ("key", lambda v: v["key"]),
    ("options", lambda v: canonical(v.get("options") or {})),
    ("tuning", lambda v: canonical(tuning_of(v))),
    ("slot", lambda v: ""),
)


def _group(variants: Iterable[dict], fn: Callable[[dict], str]) -> dict[str, list[dict]]:
    groups: dict[str, list[dict]] = {}
    for v in variants:
        groups.setdefault(fn(v), []).append(v)
    return groups


def pair_variants(a: list[dict], b: list[dict]) -> list[Pair]:
    """Every variant of ``a`` and ``b`` in exactly one :class:`Pair`, in a stable order."""
    aliases = kernel_aliases((v["kernel"] for v in a), (v["kernel"] for v in b))
    slots_a, slots_b = _group(a, lambda v: slot_of(v, aliases)), _group(b, lambda v: slot_of(v, aliases))
    pairs: list[Pair] = []
    for slot in sorted(set(slots_a) | set(slots_b)):
        left_a, left_b = list(slots_a.get(slot, [])), list(slots_b.get(slot, []))
        for name, fn in ROUNDS:
            if not left_a or not left_b:
                break
            ga, gb = _group(left_a, fn), _group(left_b, fn)
            for value in sorted(set(ga) & set(gb)):
                if len(ga[value]) == 1 and len(gb[value]) == 1:
                    va, vb = ga[value][0], gb[value][0]
                    pairs.append(Pair(slot, va, vb, name))
                    left_a.remove(va)
                    left_b.remove(vb)
        pairs += [Pair(slot, v, None) for v in left_a]
        pairs += [Pair(slot, None, v) for v in left_b]
    pairs.sort(key=_order)
    return pairs


def _order(p: Pair) -> tuple:
    v = p.a if p.a is not None else p.b
    assert v is not None
    tuning = tuning_of(v)
    return (
        v["kernel"],
        target_text(v),
        specialisation_text(v),
        p.slot,
        _number(tuning.get("num_warps")),
        _number(tuning.get("num_stages")),
        canonical(tuning),
        p.a is None,
        v["key"],
    )


def _number(value: Any) -> tuple:
    """Sorts numbers numerically and anything else (a hostile manifest's strings) after them."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, value, "")
    return (1, 0, canonical(value))

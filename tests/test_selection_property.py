"""Property test of variant selection: for random archives and calls, karchive picks the variant Triton
would compile for the call, or refuses; and the pick never depends on the order of variants or keys.

Seeded random cases (hypothesis is not a dependency): each case draws a kernel signature (which
constexprs have a default, recorded or not), a set of variants (constexpr values, num_warps,
num_stages, arch, pointer hints), a device and a call that passes or omits each constexpr and launch
option. The oracle below states what Triton does with that call without reading karchive's code:
the value a constexpr takes (given, else its signature default, else the call is invalid) and the
launch options (given, else Triton's defaults for the backend).
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

from karchive.errors import NoMatchingVariantError
from karchive.format.manifest import Abi, AbiParam, FileRef, Param, Provenance, Target, Variant
from karchive.runtime import DeviceInfo
from karchive.runtime.select import MISSING, TRITON_OPTION_DEFAULTS, call_reason, device_fit, select_variant

ALIGNED, OFF = 0x7F00_0000_0000, 0x7F00_0000_0004
CONSTEXPRS = {"EVEN": [True, False], "BLOCK": [64, 128, 256]}
NAMES = ["x_ptr", "n", "EVEN", "BLOCK"]
CASES = 3000


def _variant(
    rng: random.Random,
    i: int,
    signature: dict[str, tuple[bool | None, Any]],
    cx: dict[str, Any],
    warps: int,
    stages: int,
    arch: str,
    aligned: bool,
) -> Variant:
    params = (
        Param("x_ptr", "*fp32", divisibility=16 if aligned else None),
        Param("n", "i32"),
        *(
            Param(
                n,
                "constexpr",
                constexpr=cx[n],
                is_constexpr=True,
                has_default=signature[n][0],
                default=signature[n][1] if signature[n][0] else None,
            )
            for n in CONSTEXPRS
        ),
    )
    abi = Abi(
        version=1,
        entry="k",
        binary_format="cubin",
        binary_arch=f"sm_{arch}",
        params=(AbiParam("x_ptr", "pointer", "*fp32", 0, 8), AbiParam("n", "scalar", "i32", 1, 4)),
        shared=0,
        num_warps=warps,
        warp_size=32,
        num_ctas=1,
        cluster_dims=(1, 1, 1),
        cooperative_grid=False,
        pdl=False,
        global_scratch_size=0,
        global_scratch_align=1,
        profile_scratch_size=0,
        profile_scratch_align=1,
    )
    ref = FileRef("variants/x/kernel.cubin", 1, "ab" * 32)
    key = f"{rng.getrandbits(256):064x}"
    return Variant(
        kernel="k",
        key=key,
        target=Target("cuda", arch, 32),
        params=params,
        options={"num_warps": warps, "num_stages": stages, "num_ctas": 1, "maxnreg": None},
        abi=abi,
        binary=ref,
        metadata=ref,
        provenance=Provenance("aot"),
    )


def _case(
    rng: random.Random,
) -> tuple[list[Variant], dict[str, tuple[bool | None, Any]], dict[str, Any], DeviceInfo, list[Any], dict[str, Any]]:
    # The kernel's true signature, and whether this archive records it (old archives do not).
    recorded = rng.random() < 0.7
    truth = {n: (True, rng.choice(vals)) if rng.random() < 0.5 else (False, None) for n, vals in CONSTEXPRS.items()}
    signature = truth if recorded else {n: (None, None) for n in CONSTEXPRS}
    variants, seen = [], set()
    for i in range(rng.randint(1, 7)):
        cx = {n: rng.choice(vals) for n, vals in CONSTEXPRS.items()}
        warps, stages = rng.choice([2, 4, 8]), rng.choice([2, 3, 4])
        arch, aligned = rng.choice(["80", "90"]), rng.random() < 0.5
        ident = (tuple(cx.items()), warps, stages, arch, aligned)
        if ident not in seen:  # a producer never archives the same compile twice
            seen.add(ident)
            variants.append(_variant(rng, i, signature, cx, warps, stages, arch, aligned))
    # Calls mostly ask for what some variant has (else nearly every case would be a plain mismatch).
    like = rng.choice(variants)
    dev = DeviceInfo.describe_target(f"cuda:{like.target.arch}" if rng.random() < 0.8 else "cuda:90")
    call_cx = {
        n: (like.constexprs[n] if rng.random() < 0.8 else rng.choice(vals)) if rng.random() < 0.5 else MISSING
        for n, vals in CONSTEXPRS.items()
    }
    options = {
        o: (like.options[o] if rng.random() < 0.8 else rng.choice(vals))
        for o, vals in (("num_warps", [2, 4, 8]), ("num_stages", [2, 3, 4]))
        if rng.random() < 0.4
    }
    values = [rng.choice([ALIGNED, OFF]), rng.randint(1, 4096), call_cx["EVEN"], call_cx["BLOCK"]]
    return variants, truth, signature, dev, values, options


def _pick(variants: list[Variant], dev: DeviceInfo, values: list[Any], options: dict[str, Any]) -> Any:
    infos = [(values[0], None, None), None, None, None]
    try:
        return select_variant("k", variants, dev, values, infos, NAMES, options=options)[0].key
    except NoMatchingVariantError as exc:
        return ("refused", exc.param)


def _runs(v: Variant, dev: DeviceInfo) -> bool:
    return not isinstance(device_fit(v, dev, False), str)


def _fits_call(v: Variant, values: list[Any], options: dict[str, Any]) -> bool:
    infos = [(values[0], None, None), None, None, None]
    given = list(values)
    for i in range(2, len(NAMES)):  # the oracle fills in recorded defaults itself
        if given[i] is MISSING and v.params[i].has_default:
            given[i] = v.params[i].default
    return call_reason(v, given, infos, options) is None


def test_pick_is_what_triton_compiles_or_a_refusal_and_never_depends_on_order():
    rng = random.Random(1919)
    picked = refused = exact = 0
    for case in range(CASES):
        variants, truth, signature, dev, values, options = _case(rng)
        got = _pick(variants, dev, values, options)
        # The same archive listed in another order, with option dicts in another key order, and the
        # call's launch options given in another order: the same answer.
        for _ in range(3):
            shuffled = [
                replace(v, options=dict(rng.sample(list(v.options.items()), len(v.options))))
                for v in rng.sample(variants, len(variants))
            ]
            opts = dict(rng.sample(list(options.items()), len(options)))
            assert _pick(shuffled, dev, values, opts) == got, f"case {case}: the pick depends on order"
        runnable = [v for v in variants if _runs(v, dev)]
        # What Triton compiles for this call: every constexpr given or from the signature's default.
        triton_cx: dict[str, Any] = {}
        for i, n in enumerate(NAMES[2:], start=2):
            if values[i] is not MISSING:
                triton_cx[n] = values[i]
            elif truth[n][0]:
                triton_cx[n] = truth[n][1]
        defaults = TRITON_OPTION_DEFAULTS["cuda"]
        triton_opts = {o: options.get(o, defaults[o]) for o in ("num_warps", "num_stages")}
        if isinstance(got, tuple):
            refused += 1
            # Refusing is always safe; it must not happen when the call settles everything (each
            # constexpr given or with a default on record, both options given) and a variant compiled
            # exactly so can run it.
            settled = all(values[NAMES.index(n)] is not MISSING or signature[n][0] for n in CONSTEXPRS)
            if settled and len(options) == 2:
                assert not any(v.constexprs == triton_cx and _fits_call(v, values, options) for v in runnable), (
                    f"case {case}: refused a complete call that an archived variant fits"
                )
            continue
        picked += 1
        v = next(x for x in variants if x.key == got)
        assert _runs(v, dev) and _fits_call(v, values, options)
        for n in CONSTEXPRS:
            if n in triton_cx and signature[n][0] is not None or values[NAMES.index(n)] is not MISSING:
                assert v.constexprs[n] == triton_cx[n] and type(v.constexprs[n]) is type(triton_cx[n]), (
                    f"case {case}: {n}={v.constexprs[n]!r}, Triton compiles {n}={triton_cx[n]!r}"
                )
            else:  # omitted, no default on record: only where the runnable variants leave no choice
                assert {x.constexprs[n] for x in runnable} == {v.constexprs[n]}, (
                    f"case {case}: omitted {n} picked from {[x.constexprs[n] for x in runnable]}"
                )
        exact += all(n in triton_cx and v.constexprs[n] == triton_cx[n] for n in CONSTEXPRS)
        # Launch options: given ones exactly; omitted ones Triton's default, unless every variant that
        # fits the call with these constexprs has the same value (then nothing was chosen).
        same = [x for x in runnable if x.constexprs == v.constexprs and _fits_call(x, values, options)]
        for o in ("num_warps", "num_stages"):
            have = v.abi.num_warps if o == "num_warps" else v.options[o]
            if o in options or have == triton_opts[o]:
                assert have == triton_opts[o]
            else:
                values_of = {x.abi.num_warps if o == "num_warps" else x.options[o] for x in same}
                assert values_of == {have}, f"case {case}: omitted {o} picked {have} among {values_of}"
    # The cases exercise both outcomes, and many picks are exactly Triton's compile.
    assert picked > CASES // 5 and refused > CASES // 5 and exact > CASES // 10, (picked, refused, exact)


@pytest.mark.parametrize("recorded", [True, False])
def test_the_issue_case_even_omitted(recorded):
    """``k.select(x, out, 1000, BLOCK=256, device="cuda:90")`` over EVEN in {True, False}: refused, naming
    EVEN and both values, with or without a record of the signature; a default on record is taken."""
    rng = random.Random(19)
    sig = {"EVEN": (False, None) if recorded else (None, None), "BLOCK": (False, None)}
    vs = [_variant(rng, i, sig, {"EVEN": even, "BLOCK": 256}, 4, 3, "90", True) for i, even in enumerate([True, False])]
    dev = DeviceInfo.describe_target("cuda:90")
    for order in (vs, vs[::-1]):
        with pytest.raises(NoMatchingVariantError, match=r"omits constexpr 'EVEN'.*EVEN = False, True") as e:
            select_variant(
                "k", order, dev, [ALIGNED, 1000, MISSING, 256], [(ALIGNED, None, None), None, None, None], NAMES
            )
        assert e.value.param == "EVEN" and e.value.values == ("False", "True")
    with_default = [
        replace(v, params=v.params[:2] + (replace(v.params[2], has_default=True, default=False),) + v.params[3:])
        for v in vs
    ]
    v, _ = select_variant(
        "k", with_default, dev, [ALIGNED, 1000, MISSING, 256], [(ALIGNED, None, None), None, None, None], NAMES
    )
    assert v.constexprs["EVEN"] is False


def test_omitted_num_warps_takes_triton_default_or_is_refused():
    rng = random.Random(20)
    sig = {"EVEN": (False, None), "BLOCK": (False, None)}
    dev = DeviceInfo.describe_target("cuda:90")
    call = [ALIGNED, 1000, False, 256]
    infos = [(ALIGNED, None, None), None, None, None]
    mk = lambda w, s: _variant(rng, 0, sig, {"EVEN": False, "BLOCK": 256}, w, s, "90", True)  # noqa: E731
    two_four = [mk(2, 3), mk(4, 3)]
    for order in (two_four, two_four[::-1]):
        assert select_variant("k", order, dev, call, infos, NAMES)[0].abi.num_warps == 4
    two_eight = [mk(2, 3), mk(8, 3)]
    with pytest.raises(
        NoMatchingVariantError,
        match=r"omits launch option\(s\) num_warps.*num_warps = 2, 8 "
        r"\(Triton's default: 4\)",
    ) as e:
        select_variant("k", two_eight, dev, call, infos, NAMES)
    assert e.value.param == "num_warps" and e.value.values == ("2", "8")
    assert select_variant("k", two_eight, dev, call, infos, NAMES, options={"num_warps": 8})[0].abi.num_warps == 8
    # two options at once, none with both defaults: refused whatever order the options are looked at in
    with pytest.raises(NoMatchingVariantError, match="num_warps, num_stages"):
        select_variant("k", [mk(4, 2), mk(8, 3)], dev, call, infos, NAMES)
    # HIP's default num_stages is 2, not 3
    assert TRITON_OPTION_DEFAULTS["hip"]["num_stages"] == 2 and TRITON_OPTION_DEFAULTS["cuda"]["num_stages"] == 3

"""prune_configs_by at an ahead-of-time build (issue 23): early_config_prune applied where it needs only the
configs and the spec's constexprs, recorded as not applied (with the argument or error that stopped it)
otherwise; perf_model/top_k never applied (they need the device). Real Triton compiles for cuda:90."""

from __future__ import annotations

import pathlib

import pytest
from support import needs_triton

pytestmark = needs_triton
ROOT = pathlib.Path(__file__).resolve().parent.parent
KERNELS = ROOT / "tests" / "prune_kernels.py"
SIG = "*fp32:16, *fp32:16, i32"
SPEC = f"""[archive]
name = "pruned"
version = "1"
targets = ["cuda:90"]
[[kernel]]
source = "{KERNELS}:pr_configs_only"
signature = "{SIG}"
[[kernel]]
source = "{KERNELS}:pr_spec_arg"
signature = "{SIG}"
constexprs = {{ HEAD = [64, 128] }}
[[kernel]]
source = "{KERNELS}:pr_launch_arg"
signature = "{SIG}"
[[kernel]]
source = "{KERNELS}:pr_membership"
signature = "*fp32:16, *fp32:16, *fp32:16, i32"
[[kernel]]
source = "{KERNELS}:pr_device"
signature = "{SIG}"
[[kernel]]
source = "{KERNELS}:pr_perf_model"
signature = "{SIG}"
configs = [0, 2]
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from karchive.format.open import open_location
    from karchive.producer.build.pipeline import build_archive
    from karchive.producer.build.spec_file import load_spec, validate_requests

    tmp = tmp_path_factory.mktemp("pruned")
    (tmp / "spec.toml").write_text(SPEC)
    spec = load_spec(tmp / "spec.toml")
    validate_requests(spec.requests)  # expands in place, as `karchive build` does before building
    result = build_archive(spec, tmp / "p.karc", progress=False)
    reader = open_location(tmp / "p.karc")
    built_cfg: dict[str, set] = {}
    for v in reader.model.variants:
        short = v.kernel.rpartition(":")[2]
        built_cfg.setdefault(short, set()).add(tuple(sorted(v.constexprs.items())))
    records = {r["kernel"].rpartition(":")[2]: r for r in reader.model.autotune}
    return result, built_cfg, records, reader


def blocks(built_cfg, name):
    return sorted({dict(c)["BLOCK"] for c in built_cfg[name]})


def test_a_prune_that_reads_only_configs_is_applied(built):
    result, built_cfg, records, _ = built
    assert blocks(built_cfg, "pr_configs_only") == [64, 128]
    r = records["pr_configs_only"]
    assert r["pruning"] == {"early_config_prune": [{"applied": True, "kept": [0, 1]}]}
    assert "early_config_prune applied ahead of time" in r["prune"] and "kept configs [0, 1]" in r["prune"]
    assert [c["kwargs"]["BLOCK"] for c in r["configs"]] == [64, 128, 256]  # every config stays in the record
    assert any("pr_configs_only" in w and "applied ahead of time" in w for w in result.warnings)


def test_a_prune_that_reads_spec_constexprs_is_applied_per_request(built):
    _, built_cfg, records, _ = built
    got = sorted((dict(c)["HEAD"], dict(c)["BLOCK"]) for c in built_cfg["pr_spec_arg"])
    assert got == [(64, 64), (64, 128), (64, 256), (128, 128), (128, 256)]
    early = records["pr_spec_arg"]["pruning"]["early_config_prune"]
    assert {"applied": True, "kept": [0, 1, 2], "args": {"HEAD": 64}} in early
    assert {"applied": True, "kept": [1, 2], "args": {"HEAD": 128}} in early and len(early) == 2


@pytest.mark.parametrize(
    "name, why",
    [
        ("pr_launch_arg", "it reads argument 'n', which a build does not know"),
        ("pr_membership", "it reads whether argument 'bias_ptr' is passed"),
        ("pr_device", "it raised RuntimeError: no CUDA device"),
    ],
)
def test_a_prune_that_needs_the_call_or_the_device_is_not_applied_and_says_why(built, name, why):
    _, built_cfg, records, _ = built
    assert blocks(built_cfg, name) == [64, 128, 256]
    r = records[name]
    (early,) = r["pruning"]["early_config_prune"]
    assert early["applied"] is False and early["reason"].startswith(why), early
    assert "not applied ahead of time" in r["prune"] and why in r["prune"]


def test_perf_model_and_top_k_are_recorded_as_skipped(built):
    result, built_cfg, records, _ = built
    # configs = [0, 2] selects BLOCK 64 and 256; the early prune (BLOCK <= 128) then drops 256; top_k=1 not applied
    assert blocks(built_cfg, "pr_perf_model") == [64]
    pm = records["pr_perf_model"]["pruning"]["perf_model"]
    assert pm["applied"] is False and pm["top_k"] == 1 and "the device" in pm["reason"]
    assert records["pr_device"]["pruning"]["perf_model"]["top_k"] == 2
    assert any("pr_perf_model" in w and "perf_model/top_k not applied" in w for w in result.warnings)


def test_the_pruning_record_passes_the_schema(built):
    from karchive.cli.inspect_cmds import schema_problems

    *_, reader = built
    assert schema_problems(reader.manifest) == [] and reader.verify() == []


def test_known_args_refuse_what_a_build_does_not_know():
    from karchive.producer.compile.prune import KnownArgs, _NeedsArgument

    a = KnownArgs({"HEAD": 64}, {"HEAD", "x", "n"})
    assert a["HEAD"] == 64 and a.get("HEAD") == 64 and "HEAD" in a
    assert a.get("not_a_param", 5) == 5 and "not_a_param" not in a
    for probe in (
        lambda: a["n"],
        lambda: a.get("n"),
        lambda: "x" in a,
        lambda: list(a),
        lambda: len(a),
        lambda: dict(a),
    ):
        with pytest.raises(_NeedsArgument):
            probe()

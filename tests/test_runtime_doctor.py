"""`karchive doctor`: which launch path is active and what the runtime finds; and the extension's own guards."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import types
from contextlib import redirect_stdout

import pytest
from runtime_support import ROOT, fake_cuda

from karchive.cli.main import main
from karchive.runtime import launch_path


def run_cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with redirect_stdout(out):
        rc = main(["doctor", *argv])
    return rc, out.getvalue()


def test_doctor_reports_path_packages_and_devices(monkeypatch):
    path = launch_path.EXTENSION if launch_path.extension() is not None else launch_path.PYTHON
    with fake_cuda(monkeypatch, path):
        rc, text = run_cli("--json")
        assert rc == 0
        r = json.loads(text)
        assert r["launch_path"]["extension_built"] is (launch_path.extension() is not None)
        assert r["cuda"]["usable"] is True and r["cuda"]["driver_version"] == 13000
        assert [d["name"] for d in r["cuda"]["devices"]] == ["Fake H100", "Fake H100"]
        assert r["cuda"]["devices"][0]["arch"] == "90"
        assert r["cuda"]["launch_function"] is (path == launch_path.EXTENSION)
        rc, text = run_cli()
        assert rc == 0
        assert "launch path" in text and "device 0" in text and "Fake H100, sm_90, warp 32, 132 SMs/CUs" in text
    rc, text = run_cli("--no-probe", "--json")
    assert "cuda" not in json.loads(text)


def test_doctor_says_when_the_python_path_is_forced_and_when_no_driver_works():
    env = {**os.environ, "PYTHONPATH": str(ROOT), launch_path.ENV: "python"}
    r = subprocess.run(
        [sys.executable, "-m", "karchive.cli.main", "doctor", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    report = json.loads(r.stdout)
    assert r.returncode == (0 if report["gpus"] else 1), r.stderr  # no GPU here: the answer is "no" (issue 35.11)
    assert report["launch_path"]["active"] == "python" and report["launch_path"]["env"] == "python"
    if not report["cuda"]["usable"]:  # this CPU machine: the reason is named, nothing is raised
        assert report["cuda"]["error"].startswith("cannot launch on CUDA")
    env[launch_path.ENV] = "fast please"
    r = subprocess.run(
        [sys.executable, "-m", "karchive.cli.main", "doctor", "--no-probe"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert r.returncode == 0 and "'fast please' is not one of auto, extension, python and was ignored" in r.stdout


@pytest.mark.skipif(launch_path.extension() is None, reason="the compiled launcher is not built here")
def test_extension_refuses_inconsistent_layouts_and_times_raw_launches():
    ext = launch_path.extension()
    owner = types.SimpleNamespace(failed=print, explain=print, launch_dims=print, scratch_for=print)
    common = dict(
        launch=0, function=0, block_x=128, shared=0, device=0, buffer_size=16, meta={}, owner=owner, via_python=True
    )
    ext.Entry(slots=((0, "P", 0), (1, "i", 8), (-1, "Z", 8)), **{**common, "buffer_size": 16})
    ext.Entry(slots=((0, "P", 0), (-1, "S", 8, 0, 64)), **common)  # a scratch pointer: pool index, bytes per block
    for bad in [
        ((0, "P", 12),),
        ((0, "x", 0),),
        ((0, "Z", 0),),
        ((-1, "i", 0),),
        ((0, "PP", 0),),
        ((-1, "S", 0),),
        ((0, "S", 0, 0, 64),),
        ((-1, "S", 0, 0, 0),),
        ((-1, "S", 12, 0, 64),),
    ]:
        with pytest.raises(ValueError, match="bad slot"):
            ext.Entry(slots=bad, **common)
    with pytest.raises(ValueError, match="no launch function"):
        ext.Entry(slots=(), **{**common, "via_python": False})
    with pytest.raises(ValueError, match="cluster dims"):
        ext.Entry(slots=(), **{**common, "cluster": (0, 1, 1)})
    with pytest.raises(AttributeError, match="explain"):
        ext.Entry(slots=(), **{**common, "owner": types.SimpleNamespace(failed=print, launch_dims=print)})
    dispatcher = dict(
        names=("a", "stream"),
        roles=b"\x01",
        flags=b"\x00",
        n_params=1,
        call_positions=(0,),
        owner=types.SimpleNamespace(
            miss=print, slow=print, grid=print, stream_handle=print, pointer_info=print, mixed_key=print
        ),
        missing=None,
        qualname="k_launch",
    )
    assert len(ext.Dispatcher(**dispatcher)) == 0
    with pytest.raises(ValueError, match="inconsistent plan"):
        ext.Dispatcher(**{**dispatcher, "roles": b"\x01\x01", "flags": b"\x00\x00", "n_params": 2})
    with pytest.raises(AttributeError, match="mixed_key"):  # the owner's contract (fastlaunch.h), checked when made
        ext.Dispatcher(
            **{
                **dispatcher,
                "owner": types.SimpleNamespace(
                    miss=print, slow=print, grid=print, stream_handle=print, pointer_info=print
                ),
            }
        )
    seconds, err = ext.time_launches(
        launch=ext.noop_address(),
        function=1,
        grid=(1, 1, 1),
        block_x=32,
        shared=0,
        stream=0,
        kernel_params=0,
        count=1000,
    )
    assert err == 0 and 0 < seconds < 1

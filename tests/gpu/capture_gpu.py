"""Shared pieces of the capture GPU tests (a plain module: pytest does not collect it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from capture_phases import phase_env


def work_dir(tmp_path_factory, name: str) -> Path:
    """$OUT/capture-gpu/<name> on the device run (logs and archives come back), else a temporary directory."""
    out = os.environ.get("OUT")
    if out:
        d = Path(out) / "capture-gpu" / name
        d.mkdir(parents=True, exist_ok=True)
        return d
    return tmp_path_factory.mktemp(name)


def ok(result: dict) -> dict:
    assert result.get("ok"), result.get("error") or result
    return result


def export(archive: Path, dest: Path) -> dict:
    """``karchive export-triton-cache`` (the CLI, in its own process) into ``dest``; returns the JSON report."""
    r = subprocess.run(
        [sys.executable, "-m", "karchive", "export-triton-cache", str(archive), "--cache-dir", str(dest), "--json"],
        capture_output=True,
        text=True,
        env=phase_env(dest.parent / "export-own-cache"),
    )
    assert r.returncode == 0, r.stderr or r.stdout
    return json.loads(r.stdout)

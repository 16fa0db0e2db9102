"""One phase of a GPU proof in a fresh interpreter (a plain module: pytest does not collect it).

The capture, corpus and serve proofs (capture_phases.py, corpus_phases.py, serve_phases.py) each run their
phases as child processes, so every phase starts with an empty ``sys.modules`` (Triton blocked or not, the
shim installed or not) and its own Triton cache. This is the part they share: run the script, keep a log, read
the JSON result the child wrote, or say why there is none.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path


def run_child(
    script: Path,
    args: list[str],
    work: Path,
    result_name: str,
    log_name: str,
    env: dict[str, str],
    timeout: int,
    label: str,
    time_key: str = "wall_s",
) -> dict:
    """``python SCRIPT ARGS --work WORK --result FILE`` with ``env``; its JSON result, with the child's wall time
    under ``time_key``. The command, return code, stdout and stderr are appended to ``work/logs/LOG_NAME``; a
    child that wrote no result gives ``{"ok": False, "error": label + the output's tail}``."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "logs").mkdir(exist_ok=True)
    result_file = work / f"{result_name}-{time.monotonic_ns()}.json"
    cmd = [sys.executable, str(script), *args, "--work", str(work), "--result", str(result_file)]
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        rc, stdout, stderr = r.returncode, r.stdout, r.stderr
    except subprocess.TimeoutExpired as exc:
        rc, stdout, stderr = 124, str(exc.stdout or ""), f"timed out after {timeout}s"
    with open(work / "logs" / log_name, "a") as fh:
        cache = env.get("TRITON_CACHE_DIR")
        fh.write(
            f"$ TRITON_CACHE_DIR={cache} {' '.join(cmd)}\nrc={rc} ({time.perf_counter() - t0:.1f}s)\n"
            f"--- stdout\n{stdout}\n--- stderr\n{stderr}\n"
        )
    if result_file.exists():
        result = json.loads(result_file.read_text())
    else:
        tail = (stderr or stdout).strip().splitlines()[-15:]
        result = {"ok": False, "error": f"{label} failed (rc={rc}):\n" + "\n".join(tail)}
    result[time_key] = round(time.perf_counter() - t0, 3)
    return result

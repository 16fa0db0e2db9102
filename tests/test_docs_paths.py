"""The map is true: every repository path that docs/, spec/ or README.md names in backticks exists.

A backticked word with a ``/`` that is not a URL, an option, a variable or a pattern is read as a path: from the
repository root, from ``karchive/`` (docs name modules as ``runtime/select``), from ``karchive/runtime/`` (the
launch path's ``launch/kernel.py``, ``c-ext/pack.c``), from ``karchive/producer/`` (``build/pack``) or from the
document's own folder; paths inside Triton or torch (``triton/...``, ``torch/...``) and media types are not ours; ``.py`` may be left out,
and a trailing ``.name`` may name something inside the module (``trust/decide.decide``). Paths that only
illustrate (a user's files, what a command writes) are listed in :data:`ILLUSTRATIVE`.
"""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = sorted([*ROOT.glob("docs/**/*.md"), *ROOT.glob("spec/*.md"), ROOT / "README.md"])
BASES = (ROOT, ROOT / "karchive", ROOT / "karchive" / "runtime", ROOT / "karchive" / "producer")
_TICKS = re.compile(r"`([^`\n]+)`")
_NOT_A_PATH = re.compile(r"[\s<>*{}()\[\]=$@,;|'\"…]|://|^[-~/.]|^[A-Z_]+/|^(triton|torch|application)/")

#: Words with a ``/`` the documents use that are not paths of this tree by design (each must still be named by some
#: document: the list only shrinks).
ILLUSTRATIVE: set[str] = {
    # a user's files and folders, and what commands write
    "out",
    "a/b/__init__.py",
    "a/b/c.py",
    "ops/kernels.py",
    "a/../b",
    "out/examples.karc",
    # members inside an archive, and the layout of a registry's store
    "karchive/manifest.json",
    "karchive/dictionary.zdict",
    "sources",
    "blobs",
    "names",
    "refs",
    "metadata",
    "metadata/snapshots",
    "metadata/timestamp.json",
    "blobs/sha256",
    "blobs/sha256/D.karc",
    "blobs/sha256/D.karc.sigs/KEYID.json",
    "metadata/snapshots/N.json",
    "names/NAME/versions",
    "names/NAME/versions/VERSION.json",
    # an OCI image's platform
    "linux/amd64",
    # Triton's own compile tool (its syntax), and words with a slash that are not paths
    "tools/compile.py",
    "if/else",
    "registers.vgpr/sgpr/agpr",
    "spills.vgpr/sgpr",
    "Registry.open/pull",
    "runDetails.metadata.invocationId/startedOn/finishedOn",
    # docs/benchmarks.md is a log: files a past run used, since replaced (it says by what)
    "karchive/runtime/codegen.py",
    "tools/gpu_capture.py",
    "tools/gpu_interop.py",
}


def _paths(doc: pathlib.Path) -> set[str]:
    out = set()
    for m in _TICKS.finditer(doc.read_text(encoding="utf-8")):
        text = m.group(1).strip().rstrip(".:")
        if "/" in text and not _NOT_A_PATH.search(text):
            out.add(text.rstrip("/"))
    return out


def _exists(text: str, doc: pathlib.Path) -> bool:
    for base in (*BASES, doc.parent):
        candidate = text
        while True:
            p = base / candidate
            if p.exists() or p.with_name(p.name + ".py").is_file():
                return True
            head, dot, _attr = candidate.rpartition(".")
            if not dot or "/" not in head:
                break
            candidate = head  # ``trust/decide.decide``: a name inside trust/decide.py
    return False


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_a_document_names_exists(doc):
    missing = sorted(t for t in _paths(doc) if t not in ILLUSTRATIVE and not _exists(t, doc))
    assert not missing, f"{doc.relative_to(ROOT)} names paths that do not exist: {missing}"


def test_the_illustrative_list_only_names_paths_documents_use():
    named = set().union(*(_paths(d) for d in DOCS))
    assert ILLUSTRATIVE <= named, f"no longer named by any document, remove: {sorted(ILLUSTRATIVE - named)}"


def test_the_reader_finds_paths_and_leaves_the_rest(tmp_path):
    doc = tmp_path / "d.md"
    doc.write_text(
        "`runtime/select` `trust/decide.decide` `c-ext/pack.c` `launch/kernel.py` `docs/cli.md` "
        "`https://x/y` `--keys FILE` `$KARCHIVE_CACHE_DIR/tuning/` `a/b` `runtime/nothing_here.py`"
    )
    found = _paths(doc)
    assert found == {
        "runtime/select",
        "trust/decide.decide",
        "c-ext/pack.c",
        "launch/kernel.py",
        "docs/cli.md",
        "a/b",
        "runtime/nothing_here.py",
    }
    assert {t for t in found if not _exists(t, doc)} == {"a/b", "runtime/nothing_here.py"}

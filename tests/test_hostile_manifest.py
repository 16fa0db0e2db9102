"""A well-formed container around a hostile manifest: every consumer fails with a karchive error.

The container tests (test_hostile_archives.py) forge bytes; here the bytes are valid and digests
match, but the manifest's *content* is hostile (wrong types, missing fields, huge numbers, terminal
escape sequences). `inspect`, `verify` and the runtime's open/select must answer with a karchive
error or a clean result, never a traceback, and never write control characters to the terminal.
"""

import copy
import random

import pytest
from support import needs_triton

import karchive
from karchive.cli.main import main
from karchive.errors import KarchiveError
from karchive.format.reader import ArchiveReader
from karchive.producer.build.pack import ArchiveBuilder
from karchive.runtime.device import DeviceInfo

pytestmark = needs_triton
HOSTILE_VALUES = [None, -1, 2**70, 1.5, True, "", "x", "\x1b[31mred\x1b[0m", [], {}, [1, 2], {"path": "a"}]
DELETE = object()
A = 0x7F0000000000


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))


def _mutate(manifest, rng):
    m = copy.deepcopy(manifest)
    paths = [p for p in _paths(m) if p]
    for _ in range(rng.randint(1, 3)):
        path = rng.choice(paths)
        parent = m
        try:
            for k in path[:-1]:
                parent = parent[k]
            value = rng.choice(HOSTILE_VALUES + [DELETE])
            if value is DELETE:
                del parent[path[-1]]
            else:
                parent[path[-1]] = copy.deepcopy(value)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed the path
    return m


@pytest.fixture(scope="module")
def base(add_variants):
    builder = ArchiveBuilder("hostile", "1", level=1, dictionary="none")
    builder.extend(add_variants)
    return builder.manifest_and_writer()


def test_hostile_manifest_content_never_escapes(base, tmp_path, capsys):
    manifest, writer = base
    rng = random.Random(20261122)
    h100 = DeviceInfo.describe_target("cuda:90", shared_optin=227 * 1024)
    outcomes = {"opened": 0, "refused_at_open": 0}
    for i in range(150):
        mutated = _mutate(manifest, rng)
        try:
            data = writer.to_bytes(mutated)
        except (KarchiveError, ValueError, TypeError):
            continue  # the writer itself refuses (e.g. a value JSON cannot encode)
        path = tmp_path / f"m{i}.karc"
        path.write_bytes(data)
        try:
            ArchiveReader.from_bytes(data)
        except KarchiveError:
            outcomes["refused_at_open"] += 1
        else:
            outcomes["opened"] += 1
        for argv in (["inspect", str(path)], ["inspect", str(path), "--json"], ["verify", str(path)]):
            code = main(argv)  # anything but a KarchiveError propagates and fails the test
            out, err = capsys.readouterr()
            assert code in (0, 1, 2), (argv, code)
            if argv[-1] != "--json":
                assert "\x1b" not in out and "\x1b" not in err, "control characters reached the terminal"
        try:
            arc = karchive.open(path)
            for name in arc.kernels():
                arc.kernel(name).select(A, A, A, 4096, BLOCK=1024, device=h100)
        except KarchiveError:
            pass
    assert outcomes["opened"] > 20 and outcomes["refused_at_open"] > 0, outcomes

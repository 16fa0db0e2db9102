"""Trust at load on a real GPU: a signed archive opened under a policy launches and computes the right
thing; the same archive unsigned, or with a byte changed, is refused before any module reaches the
driver (``CudaBackend.load``, i.e. ``cuModuleLoadData``, is never called). The CPU suite proves the
refusals in detail (tests/test_trust_*.py); this proves the accepted path end to end on the device."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import karchive
from karchive.errors import UntrustedArchiveError

torch = pytest.importorskip("torch")
pytest.importorskip("cryptography")


@pytest.fixture
def signed(fixtures: Path, tmp_path: Path) -> tuple[Path, Path]:
    from karchive.trust.keys import SigningKey
    from karchive.trust.sign import sign_archive

    key = SigningKey.generate()
    path = tmp_path / "examples_gpu.karc"
    shutil.copyfile(fixtures / "examples_gpu.karc", path)
    sign_archive(path, key)
    policy = tmp_path / "policy.toml"
    policy.write_text(
        f'version = 1\n[[keys]]\nname = "gpu-ci"\npublic_key = "{key.public.inline()}"\n'
        '[[rules]]\nnames = ["*"]\nkeys = ["gpu-ci"]\n'
    )
    return path, policy


@pytest.fixture
def module_loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    from karchive.runtime.drivers.cuda import CudaBackend

    calls: list[str] = []
    real = CudaBackend.load

    def counting(self, index, image, entry, shared, num_ctas=1):  # type: ignore[no-untyped-def]
        calls.append(entry)
        return real(self, index, image, entry, shared, num_ctas)

    monkeypatch.setattr(CudaBackend, "load", counting)
    return calls


def test_a_signed_archive_launches_under_a_policy(signed: tuple[Path, Path], module_loads: list[str]) -> None:
    path, policy = signed
    arc = karchive.open(path, trust=policy)
    n = 98_431
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.full_like(x, float("nan"))
    arc.kernel("add_kernel")[((n + 1023) // 1024,)](x, y, out, n, BLOCK=1024)
    torch.cuda.synchronize()
    assert torch.equal(out, x + y)
    assert len(module_loads) == 1


@pytest.mark.parametrize("damage", ["unsigned", "byte-changed"])
def test_a_refused_archive_loads_no_module(signed: tuple[Path, Path], module_loads: list[str], damage: str) -> None:
    path, policy = signed
    if damage == "unsigned":
        Path(str(path) + ".sig.json").unlink()
    else:  # inside the first variant's binary frame: the footer and index still match, only the hash differs
        from karchive.format.open import open_location

        reader = open_location(path)
        binary = reader.manifest["variants"][0]["files"]["binary"]["path"]
        frame = reader.frames[reader.members[binary].frame]
        reader.source.close()
        data = bytearray(path.read_bytes())
        data[frame.offset + frame.length // 2] ^= 0x01
        path.write_bytes(bytes(data))
    with pytest.raises(UntrustedArchiveError) as e:
        karchive.open(path, trust=policy)
    assert e.value.reason == ("unsigned" if damage == "unsigned" else "digest-mismatch")
    assert module_loads == []

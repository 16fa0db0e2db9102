"""``karchive oci-image``: archives wrapped as a standard OCI *image*, for Kubernetes image volumes
(spec/REGISTRY.md §10.5).

The image has one uncompressed tar layer holding, under ``karchive/``:

* ``karchive/registry/``: a karchive directory registry with every archive published in it (version
  records, blobs, and the signatures of ``ARCHIVE.sig.json`` sidecars beside them);
* ``karchive/karchive.lock``: a lockfile pinning each archive's sha256 and index digest.

A pod mounts the image read-only (say at ``/opt/karchive``) and sets
``KARCHIVE_REGISTRY=/opt/karchive/karchive/registry`` and
``KARCHIVE_LOCKFILE=/opt/karchive/karchive/karchive.lock``: ``karchive.open("NAME")`` and
``KARCHIVE_SERVE`` then resolve through the lockfile and read the mounted files, every digest checked,
with no registry client in the pod. The tar is deterministic (sorted entries, mtime 0, root-owned,
read-only modes), so the same registry contents give the same layer digest.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.digest import sha256_file
from ..core.fsio import atomic_write
from ..errors import DestinationError, RegistryError, RegistryValueError
from . import oci_layout as L
from .records import VersionRecord

ROOT = "karchive"
REGISTRY_DIR = f"{ROOT}/registry"
LOCKFILE = f"{ROOT}/karchive.lock"
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
A_REF_NAME = "org.opencontainers.image.ref.name"
A_ARCHIVES = L.P + "archives"


@dataclass(frozen=True)
class ImageResult:
    records: tuple[VersionRecord, ...]
    manifest: str  # sha256:<hex> of the image manifest
    destination: str  # the layout directory, or oci://host/repo:tag
    tag: str
    layer_size: int


def _deterministic_tar(root: Path, out: Path) -> None:
    """``root``'s tree as a tar under ``karchive/``: sorted, mtime 0, uid/gid 0, 0444 files, 0555 dirs."""
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:

        def add_dir(name: str) -> None:
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o555, 0
            tar.addfile(info)

        add_dir(ROOT)
        for dirpath, dirnames, filenames in sorted(os.walk(root)):
            dirnames.sort()
            rel = Path(dirpath).relative_to(root)
            base = ROOT if str(rel) == "." else f"{ROOT}/{rel.as_posix()}"
            if base != ROOT:
                add_dir(base)
            for name in sorted(filenames):
                if name.startswith("."):
                    continue  # lock files of the staging registry
                path = Path(dirpath) / name
                info = tarfile.TarInfo(f"{base}/{name}")
                info.size, info.mode, info.mtime = path.stat().st_size, 0o444, 0
                with open(path, "rb") as fh:
                    tar.addfile(info, fh)


def _stage(archives: Sequence[str | os.PathLike], work: Path) -> tuple[VersionRecord, ...]:
    """A directory registry with every archive published (verified, sidecar signatures kept), and a lockfile."""
    from .lockfile import Lockfile
    from .registry import Registry

    tree = work / "tree"
    reg = Registry(tree / "registry", cache=work / "cache")
    records = [reg.publish(archive).record for archive in archives]
    names = [r.name for r in records]
    if len(set(names)) != len(names):
        raise RegistryValueError(
            f"one image holds one version per name; given {', '.join(r.ref for r in records)}", value=repr(names)[:200]
        )
    lock = Lockfile.from_records(records)
    atomic_write(tree / "karchive.lock", lock.to_json())
    return tuple(records)


def build_image(
    archives: Sequence[str | os.PathLike],
    destination: str,
    *,
    tag: str | None = None,
    storage_options: dict[str, Any] | None = None,
    platform: str = "linux/amd64",
) -> ImageResult:
    """Wrap ``archives`` as an OCI image and write it to ``destination``: an OCI image layout directory
    (new or empty), or ``oci://HOST[:PORT]/REPOSITORY`` (pushed; an existing tag is never moved)."""
    if not archives:
        raise RegistryValueError("oci-image needs at least one archive", value="()")
    os_name, _, arch = platform.partition("/")
    if not os_name or not arch:
        raise RegistryValueError(f"bad platform {platform!r}: expected OS/ARCH (linux/amd64)", value=repr(platform))
    with tempfile.TemporaryDirectory(prefix="karchive-oci-image-") as tmp:
        work = Path(tmp)
        records = _stage(archives, work)
        tag = L.version_tag(tag or (records[0].version if len(records) == 1 else "latest"))
        layer = work / "layer.tar"
        _deterministic_tar(work / "tree", layer)
        layer_digest, layer_size = sha256_file(layer)
        config = L.encode(
            {
                "architecture": arch,
                "os": os_name,
                "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer_digest}"]},
                "config": {"Labels": {A_ARCHIVES: ",".join(r.ref for r in records)}},
            }
        )
        notes = {A_ARCHIVES: ",".join(r.ref for r in records), L.A_TITLE: "karchive kernel archives"}
        manifest = L.encode(
            {
                "schemaVersion": 2,
                "mediaType": L.MANIFEST_TYPE,
                "config": L.descriptor(CONFIG_TYPE, L.digest_of(config), len(config)),
                "layers": [L.descriptor(LAYER_TYPE, f"sha256:{layer_digest}", layer_size)],
                "annotations": notes,
            }
        )
        if destination.lower().startswith("oci://"):
            where = _push(destination, tag, layer, f"sha256:{layer_digest}", config, manifest, storage_options)
        else:
            where = _write_layout(Path(destination), tag, layer, layer_digest, config, manifest)
    return ImageResult(records, L.digest_of(manifest), where, tag, layer_size)


def _write_layout(out: Path, tag: str, layer: Path, layer_digest: str, config: bytes, manifest: bytes) -> str:
    """An OCI image layout (image-spec ``image-layout.md``): ``oci-layout``, ``index.json``, ``blobs/``."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise DestinationError(
            f"{out} exists and is not an empty directory; an OCI layout is written to a new or empty directory",
            path=str(out),
        )
    blobs = out / "blobs" / "sha256"
    try:
        blobs.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(layer, blobs / layer_digest)
        for data in (config, manifest):
            atomic_write(blobs / L.digest_of(data)[7:], data)
        atomic_write(out / "oci-layout", L.encode({"imageLayoutVersion": "1.0.0"}))
        index = {
            "schemaVersion": 2,
            "mediaType": L.INDEX_TYPE,
            "manifests": [L.descriptor(L.MANIFEST_TYPE, L.digest_of(manifest), len(manifest), {A_REF_NAME: tag})],
        }
        atomic_write(out / "index.json", L.encode(index))
    except OSError as exc:
        raise DestinationError(f"cannot write the OCI layout at {out}: {exc.strerror or exc}", path=str(out)) from None
    return str(out)


def _push(
    destination: str,
    tag: str,
    layer: Path,
    layer_digest: str,
    config: bytes,
    manifest: bytes,
    storage_options: dict[str, Any] | None,
) -> str:
    from .oci_store import OciStore, parse_oci_url
    from .retry import RetryPolicy

    host, repo = parse_oci_url(destination)
    if not repo:
        raise RegistryValueError(
            f"{destination}: name the image's repository (oci://HOST/REPOSITORY)", value=repr(destination)[:200]
        )
    store = OciStore(f"oci://{host}", storage_options, RetryPolicy.from_env())
    digest = L.digest_of(manifest)
    existing = store.manifest(repo, tag, "an image manifest")
    if existing is not None and existing[1] != digest:
        raise RegistryError(
            f"{destination}:{tag} already names image {existing[1]}; karchive never moves a tag to "
            "other bytes: use a new tag",
            registry=store.url,
        )
    store.push_file(repo, str(layer), layer_digest, LAYER_TYPE)
    store.push_bytes(repo, config)
    if existing is None:
        store.put_manifest(repo, tag, manifest)
    return f"{store.url}/{repo}:{tag}"

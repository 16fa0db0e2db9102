"""`karchive oci-image`: archives wrapped as an OCI image for Kubernetes image volumes (spec/REGISTRY.md §10.5).

Registries themselves need no command of their own: ``--registry oci://HOST/NAMESPACE`` works wherever
a registry is accepted.
"""

from __future__ import annotations

import argparse
from typing import Any

from .output import emit_json, human_bytes, plural


def cmd_oci_image(args: argparse.Namespace) -> int:
    from ..registry.config import storage_options_from_env
    from ..registry.oci_image import LOCKFILE, REGISTRY_DIR, build_image

    result = build_image(
        args.archives, args.output, tag=args.tag, platform=args.platform, storage_options=storage_options_from_env()
    )
    if args.json:
        emit_json(
            {
                "image": result.destination,
                "tag": result.tag,
                "manifest": result.manifest,
                "layer_size": result.layer_size,
                "archives": [r.ref for r in result.records],
                "registry_path": REGISTRY_DIR,
                "lockfile_path": LOCKFILE,
            }
        )
        return 0
    print(
        f"wrote {result.destination} (tag {result.tag}, manifest {result.manifest}): "
        f"{plural(len(result.records), 'archive')} in one {human_bytes(result.layer_size)} layer"
    )
    for record in result.records:
        print(f"  {record.ref} sha256:{record.sha256}")
    print(
        f"mount it read-only at MOUNT and set KARCHIVE_REGISTRY=MOUNT/{REGISTRY_DIR} KARCHIVE_LOCKFILE=MOUNT/{LOCKFILE}"
    )
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser(
        "oci-image",
        help="wrap archives as an OCI image (a layer holding a registry and a lockfile) for Kubernetes image volumes",
    )
    p.add_argument("archives", nargs="+", metavar="ARCHIVE", help=".karc files, one version per name")
    p.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="DEST",
        help="a new or empty directory (an OCI image layout), or oci://HOST[:PORT]/REPOSITORY to push",
    )
    p.add_argument(
        "--tag",
        help="the image's tag (default: the version of a single archive, else 'latest'); "
        "an existing tag is never moved",
    )
    p.add_argument("--platform", default="linux/amd64", help="the image config's OS/ARCH (default linux/amd64)")
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    p.set_defaults(func=cmd_oci_image, progress=None)

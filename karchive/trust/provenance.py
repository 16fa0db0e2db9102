"""The provenance statement: an in-toto Statement v1 about one archive, with a SLSA provenance v1
predicate (spec/SIGNING.md §4).

The subject is the archive file itself — its sha256 — named ``NAME@VERSION``, annotated with the
digest of the archive's index (from its footer): a reader that fetches only byte ranges never hashes
the whole file, but it does check the index against the footer, and the index pins the manifest and
every member, so the signed index digest binds a lazily read archive to the signature (§4.3). The
predicate says who built it with which toolchain, from which sources and build spec, with which
parameters. It is derived from the archive's manifest plus the optional build info
(:mod:`.buildinfo`). The statement lives beside the archive, so the archive's bytes are the same
signed or not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.digest import is_sha256_hex
from ..errors import TrustError
from ..format.manifest import Manifest
from . import reasons
from .buildinfo import check_build_info

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
#: SLSA buildType: the build described by spec/SIGNING.md §4 (a URN: karchive has no canonical URL).
BUILD_TYPE = "urn:karchive:build:v1"
#: SLSA builder.id when the build info names none: "whoever holds the signing key built it".
DEFAULT_BUILDER_ID = "urn:karchive:builder:local"
#: The subject's annotation holding karchive-specific digests. in-toto ResourceDescriptor v1 makes
#: ``annotations`` a map of field name -> object, so the index digest sits one level down.
ANNOTATION = "karchive"


def subject_name(name: str, version: str) -> str:
    return f"{name}@{version}"


def _builder_version(produced_by: dict, info: dict, archive: str) -> dict[str, str]:
    """Toolchain versions: the manifest's ``produced_by`` (what the archive says built it) plus the
    build info's ``toolchain`` and ``platform``. A disagreement is refused: one of them is wrong."""
    out = {k: str(v) for k, v in sorted((produced_by or {}).items()) if v is not None}
    for k, v in (info.get("toolchain") or {}).items():
        if k in out and out[k] != v:
            raise TrustError(
                f"build info says {k} {v}, the archive's manifest says {out[k]}",
                reason=reasons.BAD_BUILD_INFO,
                archive=archive,
            )
        out[k] = v
    if "platform" in info:
        out["platform"] = info["platform"]
    return out


def build_statement(
    manifest: Manifest | dict, sha256: str, build_info: dict | None = None, *, index_sha256: str
) -> dict[str, Any]:
    """The statement for the archive whose bytes hash to ``sha256``, whose footer names the index
    digest ``index_sha256``, and whose manifest is ``manifest`` (the typed model, or its JSON).

    Only the manifest's header is needed — identity, toolchain, sources, and kernels and targets
    from the per-kernel counts — so signing a format-2 archive reads none of its shards."""
    for what, digest in (("sha256", sha256), ("index_sha256", index_sha256)):
        if not is_sha256_hex(digest):
            raise ValueError(f"{what} is not a sha256 digest: {digest!r}")
    info = check_build_info(dict(build_info or {}))
    model = manifest if isinstance(manifest, Manifest) else Manifest.from_json(manifest, lazy=True)
    name, version = model.name, model.version
    external: dict[str, Any] = {
        "archive": {"name": name, "version": version},
        "kernels": model.kernels(),
        "targets": model.targets(),
    }
    for key in ("command", "spec", "parameters"):
        if key in info:
            external[key] = info[key]
    internal: dict[str, Any] = {
        "format_version": model.format_version,
        "abi_version": model.abi_version,
        "created": model.created,
        "variants": len(model),
    }
    if info.get("env"):
        internal["env"] = info["env"]
    deps = [{"name": s.path, "digest": {"sha256": s.sha256}} for s in model.sources]
    deps += [dict(d) for d in info.get("dependencies") or []]
    metadata = {
        k2: info[k1]
        for k1, k2 in (("invocation_id", "invocationId"), ("started_on", "startedOn"), ("finished_on", "finishedOn"))
        if k1 in info
    }
    run: dict[str, Any] = {
        "builder": {
            "id": info.get("builder_id", DEFAULT_BUILDER_ID),
            "version": _builder_version(model.produced_by, info, subject_name(name, version)),
        }
    }
    if metadata:
        run["metadata"] = metadata
    return {
        "_type": STATEMENT_TYPE,
        "subject": [
            {
                "name": subject_name(name, version),
                "digest": {"sha256": sha256},
                "annotations": {ANNOTATION: {"index_sha256": index_sha256}},
            }
        ],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": external,
                "internalParameters": internal,
                "resolvedDependencies": deps,
            },
            "runDetails": run,
        },
    }


def statement_bytes(statement: dict) -> bytes:
    """The payload that is signed: canonical JSON (FORMAT.md §7), so the same build gives the same bytes."""
    from ..core.jsonio import canonical_json

    return canonical_json(statement)


@dataclass(frozen=True)
class Statement:
    """A statement parsed from verified payload bytes: the claims a verifier acts on."""

    name: str
    version: str
    sha256: str
    index_sha256: str  # the archive index's digest (its footer's): what a ranged reader can check
    builder_id: str
    builder_version: dict
    raw: dict

    def summary(self) -> dict[str, Any]:
        """What the CLI shows about a signer's claim."""
        build = self.raw["predicate"].get("buildDefinition") or {}
        ext = build.get("externalParameters") or {}
        return {
            "subject": subject_name(self.name, self.version),
            "sha256": self.sha256,
            "index_sha256": self.index_sha256,
            "builder": self.builder_id,
            "toolchain": self.builder_version,
            **({"spec": ext["spec"]} if isinstance(ext.get("spec"), dict) else {}),
        }


def _bad(msg: str) -> TrustError:
    # the statement is what names the archive: refused before it is read, it concerns none yet
    return TrustError(f"provenance statement: {msg}", reason=reasons.MALFORMED_STATEMENT, archive=None)


def parse_statement(payload: bytes) -> Statement:
    """Check the shape karchive relies on (spec/SIGNING.md §4.3); refuse anything else."""
    from ..errors import FormatError
    from ..format.reader import Limits, load_json

    try:
        obj = load_json(payload, "statement", Limits(max_json_values=200_000))
    except FormatError as exc:
        raise _bad(str(exc)) from exc
    if type(obj) is not dict or obj.get("_type") != STATEMENT_TYPE:
        raise _bad(f"_type is not {STATEMENT_TYPE}")
    if obj.get("predicateType") != PREDICATE_TYPE:
        raise _bad(f"predicateType {obj.get('predicateType')!r} is not {PREDICATE_TYPE}")
    subjects = obj.get("subject")
    if type(subjects) is not list or len(subjects) != 1 or type(subjects[0]) is not dict:
        raise _bad("expected exactly one subject (the archive)")
    subj = subjects[0]
    sname, digest = subj.get("name"), subj.get("digest")
    if type(sname) is not str or sname.count("@") != 1 or type(digest) is not dict:
        raise _bad("the subject needs a name NAME@VERSION and a digest")
    sha = digest.get("sha256")
    if not is_sha256_hex(sha):
        raise _bad("the subject has no sha256 digest (64 lowercase hex digits)")
    notes = subj.get("annotations")
    ours = notes.get(ANNOTATION) if type(notes) is dict else None
    index = ours.get("index_sha256") if type(ours) is dict else None
    if not is_sha256_hex(index):
        raise _bad(
            f"the subject has no annotations.{ANNOTATION}.index_sha256 (64 lowercase hex digits): "
            "statements must carry the archive's index digest (sign the archive again)"
        )
    predicate = obj.get("predicate")
    build = predicate.get("buildDefinition") if type(predicate) is dict else None
    run = predicate.get("runDetails") if type(predicate) is dict else None
    builder = run.get("builder") if type(run) is dict else None
    if (
        type(build) is not dict
        or type(build.get("buildType")) is not str
        or type(builder) is not dict
        or type(builder.get("id")) is not str
    ):
        raise _bad("the SLSA predicate needs buildDefinition.buildType and runDetails.builder.id")
    version = builder.get("version", {})
    if type(version) is not dict:
        raise _bad("runDetails.builder.version must be an object")
    name, _, ver = sname.partition("@")
    return Statement(
        name=name,
        version=ver,
        sha256=sha,
        index_sha256=index,
        builder_id=builder["id"],
        builder_version=version,
        raw=obj,
    )

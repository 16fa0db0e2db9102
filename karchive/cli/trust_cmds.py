"""`karchive keygen`, `karchive sign`, and the trust report `karchive verify --trust POLICY` prints.

Nothing here imports cryptography until a command runs, so `karchive --help` works without the
`trust` extra.
"""

from __future__ import annotations

import argparse
import datetime
import os
from typing import Any

from ..errors import FormatError, KeyFileError, TrustError
from .arg_types import passphrase, registry_named
from .output import emit_json, plural, printable


def register(sub: argparse._SubParsersAction) -> None:
    k = sub.add_parser("keygen", help="make an Ed25519 signing key pair: PREFIX.key (private) and PREFIX.pub")
    k.add_argument(
        "-o",
        "--out",
        required=True,
        metavar="PREFIX",
        help="writes PREFIX.key (PKCS#8 PEM, mode 0600) and PREFIX.pub; never overwrites",
    )
    k.add_argument("--name", help="the key's name in a trust policy (default: the base name of PREFIX)")
    k.add_argument("--passphrase-env", metavar="VAR", help="encrypt the private key with the passphrase in $VAR")
    k.add_argument("--json", action="store_true", help="machine-readable output")
    k.set_defaults(func=cmd_keygen)

    s = sub.add_parser(
        "sign",
        help="sign an archive: provenance statement and signature in ARCHIVE.sig.json, "
        "or beside the blob for NAME@VERSION in a registry (the archive is not changed)",
    )
    s.add_argument("archive", help="local archive file (.karc), or NAME@VERSION already published in --registry")
    s.add_argument("--key", required=True, help="private key file (from karchive keygen)")
    s.add_argument("--passphrase-env", metavar="VAR", help="the key's passphrase is in $VAR")
    s.add_argument(
        "--provenance",
        metavar="BUILDINFO",
        help="build info (JSON) the build wrote: spec digest, parameters, platform (spec/SIGNING.md §4.2)",
    )
    s.add_argument(
        "--replace",
        action="store_true",
        help="start a new statement, dropping the sidecar's earlier signatures (local files only)",
    )
    s.add_argument(
        "--registry",
        metavar="URL",
        help="for NAME@VERSION: the registry (default: $KARCHIVE_REGISTRY, else the local registry)",
    )
    s.add_argument("--cache-dir", metavar="DIR", help="for NAME@VERSION: the local cache the archive is verified in")
    from .regmeta_cmds import add_registry_key_arg

    add_registry_key_arg(s)
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.set_defaults(func=cmd_sign)


def cmd_keygen(args: argparse.Namespace) -> int:
    from ..trust.keys import SigningKey, save_keypair
    from ..trust.policy import is_key_name

    name = args.name or os.path.basename(args.out)
    if not is_key_name(name):
        raise KeyFileError(
            f"key name {name!r} cannot be used in a trust policy; choose one with --name (letters, digits, '._@+-')",
            path=args.out + ".key",
        )
    from ..core.destination import output_file

    key = SigningKey.generate()
    private, public = output_file(args.out + ".key"), output_file(args.out + ".pub")
    save_keypair(key, private, public, passphrase(args.passphrase_env, args.out + ".key"))
    snippet = (
        f'[[keys]]\nname = "{name}"\npublic_key = "{key.public.inline()}"\nid = "{key.key_id}"\n'
        f"# not_before = 2026-01-01T00:00:00Z   # optional rotation window\n"
        f"# not_after = 2027-01-01T00:00:00Z\n"
    )
    if args.json:
        emit_json(
            {
                "private_key": private,
                "public_key_file": public,
                "key_id": key.key_id,
                "name": name,
                "public_key": key.public.inline(),
                "policy_snippet": snippet,
            }
        )
        return 0
    print(printable(f"wrote {private} (private: keep it secret) and {public}"))
    print(f"key id {key.key_id}")
    print("\nto trust it, add to a trust policy (spec/SIGNING.md §5):\n")
    print(printable(snippet, keep="\n"), end="")
    return 0


def cmd_sign(args: argparse.Namespace) -> int:
    from ..registry.refs import is_registry_ref
    from ..trust.buildinfo import load_build_info
    from ..trust.keys import load_private_key
    from ..trust.sign import sign_archive

    if is_registry_ref(args.archive):
        return _sign_published(args)
    if args.registry:
        raise FileNotFoundError(f"{args.archive}: --registry signs a published NAME@VERSION, not a file")
    if args.registry_key:
        raise FileNotFoundError(
            f"{args.archive}: --registry-key signs a registry's metadata; it goes with a published "
            "NAME@VERSION, not a file"
        )
    if not os.path.isfile(args.archive):
        raise FileNotFoundError(f"{args.archive}: no such archive file (sign a local .karc; publish it afterwards)")
    key = load_private_key(args.key, passphrase(args.passphrase_env, args.key))
    info = load_build_info(args.provenance) if args.provenance else None
    out = sign_archive(args.archive, key, build_info=info, replace=args.replace)
    if args.json:
        emit_json(out.to_json())
        return 0
    verb = "co-signed" if out.cosigned else "signed"
    print(printable(f"{verb} {out.name} {out.version} (sha256 {out.sha256}) with key {out.key_id[:16]}"))
    print(printable(f"wrote {out.sidecar}: {plural(len(out.key_ids), 'signature')}; {out.archive} is unchanged"))
    return 0


def _sign_published(args: argparse.Namespace) -> int:
    """`karchive sign NAME@VERSION --registry URL`: one more signer for an already published version."""
    from ..trust.buildinfo import load_build_info
    from ..trust.keys import load_private_key

    if args.replace:
        raise TrustError(
            "--replace is for sidecar files: a registry never replaces a signature (each signer has "
            "its own object; publish a new version to start over)",
            archive=args.archive,
        )
    key = load_private_key(args.key, passphrase(args.passphrase_env, args.key))
    info = load_build_info(args.provenance) if args.provenance else None
    from .regmeta_cmds import metadata_lines, registry_keys

    meta_keys = registry_keys(args.registry_key, args.passphrase_env)
    reg = registry_named(args)
    out = reg.sign(args.archive, key, build_info=info, registry_keys=meta_keys)
    if args.json:
        emit_json(
            {
                "registry": out.registry,
                "archive": out.record.ref,
                "sha256": out.record.sha256,
                "key_id": out.signature.key_id,
                "created": out.signature.created,
                "index_current": out.index_current,
                "signers": reg.signers(out.record.ref),
                **({"metadata": out.metadata.to_json()} if out.metadata else {}),
            }
        )
        return 0
    verb = "signed" if out.signature.created else "already signed (identical signature, nothing to do):"
    print(
        printable(f"{verb} {out.record.ref} (sha256 {out.record.sha256}) with key {key.key_id[:16]} in {out.registry}")
    )
    if out.metadata is not None:
        print("\n".join(printable(line) for line in metadata_lines(out.metadata)))
    if not out.index_current:
        print("warning: the derived signature index could not be refreshed; run `karchive reindex`")
    return 0


# --- karchive verify --trust POLICY (called by cli/inspect_cmds.py) -------------------------------
def trust_report_for(
    ref: str, policy_path: str, *, registry: str | None = None, cache_dir: str | None = None
) -> dict[str, Any]:
    """:func:`trust_report` for any archive reference: a local file (its sidecar), a URL (the sidecar
    beside it) or NAME@VERSION (the signatures beside the registry's blob), checked the way a load
    checks them (:func:`karchive.resolve.open`, which asks :func:`karchive.trust.decide.decide`). A
    refusal is a result, not an exception."""
    from ..registry.refs import is_registry_ref
    from ..trust import reasons
    from ..trust.decide import refusal_json

    if not is_registry_ref(ref) and "://" not in ref:
        return trust_report(ref, policy_path)
    report: dict[str, Any] = {"ok": False, "policy": {"source": policy_path}}
    try:
        from .. import resolve
        from ..registry.config import storage_options_from_env
        from ..trust.policy import TrustPolicy

        policy = TrustPolicy.load(policy_path)
        report["policy"] = policy.to_json()
        if is_registry_ref(ref):  # verified now, not from a cache receipt: the report shows the statements
            from ..registry import Registry

            reg = Registry(registry, storage_options_from_env(), cache=cache_dir)
            reader = reg.open(ref, trust=policy, reuse_verdict=False)
        else:
            reader = resolve.open(ref, trust=policy, storage_options=storage_options_from_env())
        verdict = reader.verdict
        getattr(reader.source, "close", lambda: None)()
    except TrustError as exc:
        report.update(refusal_json(exc))
        if is_registry_ref(ref) and exc.reason == reasons.UNSIGNED:
            # The usual cause: the local file was signed (its sidecar stays beside it), the registry's copy not.
            report["hint"] = (
                f"the registry holds no signature for {ref}; a signature made beside a local file "
                f"(ARCHIVE.sig.json) stays there: sign the published version with `karchive sign {ref} "
                "--key KEY`, or publish with `karchive publish ARCHIVE --sign KEY`"
            )
        return report
    if verdict is None:  # pragma: no cover - a policy was given, so the loader returned a verdict or raised
        raise TrustError(f"{ref}: no trust verdict although a policy was given", archive=ref)
    report.update(verdict.to_json())
    return report


def trust_report(
    archive: str, policy_path: str, *, sidecar: str | None = None, now: datetime.datetime | None = None
) -> dict[str, Any]:
    """Check a local archive's sidecar against a trust policy, as a load would (the sha256 of the file
    and the index digest its reader checked, spec/SIGNING.md §6.1); a JSON-ready dict with ``ok``. A
    refusal is a result (``ok: false``, ``reason``, ``error``, ``rejected``), not an exception, so
    `verify` can report it beside the digest checks."""
    from ..trust import reasons
    from ..trust.sidecar import sidecar_path

    side = sidecar or sidecar_path(archive)
    report: dict[str, Any] = {"ok": False, "policy": {"source": policy_path}, "sidecar": side}
    try:
        from ..trust.decide import Subject, decide, sidecar_evidence
        from ..trust.policy import TrustPolicy
        from ..trust.sidecar import read_sidecar

        policy = TrustPolicy.load(policy_path)
        report["policy"] = policy.to_json()
        sha256, index, name, version = _identity(archive)
        verdict = decide(
            policy,
            Subject(f"{name}@{version}", name, version, sha256, index),
            lambda _: sidecar_evidence(read_sidecar(side)),
            now=now,
        )
    except TrustError as exc:
        report.update(reason=exc.reason, error=str(exc), rejected=list(getattr(exc, "rejected", ()) or ()))
        return report
    except FormatError as exc:  # the archive's own name and version cannot even be read
        report.update(reason=reasons.DAMAGED_ARCHIVE, error=str(exc), rejected=[])
        return report
    assert verdict is not None and verdict.result is not None  # a policy was given and nothing was reused
    report.update(verdict.result.to_json())
    return report


def _identity(archive: str) -> tuple[str, str, str, str]:
    """(sha256, index digest, name, version) of a local archive, all from one open file descriptor."""
    from ..format.source import FileSource
    from ..trust.bind import hash_source, open_recorded
    from ..trust.enforce import manifest_identity

    source = FileSource(archive)
    try:
        reader, index = open_recorded(source)
        sha256 = hash_source(source, index)
        name, version = manifest_identity(reader, archive)
    finally:
        source.close()
    return sha256, index, name, version


def trust_lines(report: dict[str, Any]) -> list[str]:
    """The human form of :func:`trust_report`: who signed what, and what did not count."""
    pol = report.get("policy") or {}
    where = f"policy {pol.get('source')}" + (f" (sha256 {pol['sha256'][:16]})" if pol.get("sha256") else "")
    if not report.get("ok"):
        lines = [f"trust: REFUSED under {where}: {report.get('reason')}"]
        lines += [f"  {line}" for line in str(report.get("error", "")).splitlines()]
        if report.get("hint"):
            lines.append(f"  hint: {report['hint']}")
        return [printable(line) for line in lines]
    rule = report["rule"]
    lines = [
        f"trust: OK under {where}, rule {rule['index'] + 1} (names {', '.join(rule['names'])}): "
        f"{len(report['signers'])} valid signer(s), {rule['threshold']} needed"
    ]
    for s in report["signers"]:
        st = s.get("statement")
        if st is None:  # a verdict a cache receipt holds: who, not what (verify re-checks the statements)
            lines.append(f"  signed by {s['key_name']} (key {s['key_id'][:16]}) (verified earlier; cache receipt)")
            continue
        tools = ", ".join(f"{k} {v}" for k, v in sorted(st.get("toolchain", {}).items()))
        lines.append(
            f"  signed by {s['key_name']} (key {s['key_id'][:16]}): {st['subject']} sha256 {st['sha256'][:16]}"
        )
        lines.append(f"    built by {st['builder']}" + (f" with {tools}" if tools else ""))
        if st.get("spec"):
            lines.append(f"    from build spec {st['spec'].get('name', '?')} sha256 {st['spec']['sha256'][:16]}")
    for r in report.get("rejected", []):
        who = r.get("key_name") or (r.get("key_id") or "(no keyid)")[:16]
        lines.append(f"  ignored: key {who}: {r['reason']}: {r['detail']}")
    return [printable(line) for line in lines]


def print_trust(report: dict[str, Any], as_json: bool = False) -> int:
    """Print a trust report alone (human or JSON); exit status 0 if trusted, 1 if refused."""
    if as_json:
        emit_json(report)
    else:
        print("\n".join(trust_lines(report)))
    return 0 if report.get("ok") else 1

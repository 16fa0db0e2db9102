"""`karchive compile` (one variant, flags mirror Triton's compile.py) and `karchive build SPEC.toml`."""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from collections.abc import Callable

from ..errors import KarchiveError
from .arg_types import add_archive_out, archive_out, positive_int, signing_keys
from .output import emit_json, human_bytes, plural


def _option(name: str) -> Callable[[str], int]:
    """An argparse type for a compile option, checked by the same rule as a spec file's (spec_file.check_option)."""

    def parse(text: str) -> int:
        from ..errors import SpecFileError
        from ..producer.build.spec_file import check_option

        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        try:
            check_option(name, value, name)
        except SpecFileError as exc:
            raise argparse.ArgumentTypeError(str(exc).split(": ", 1)[-1]) from None
        return value

    parse.__name__ = name  # argparse names the type in "invalid <name> value"
    return parse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compile", help="compile one kernel variant into an archive (flags mirror triton/tools/compile.py)"
    )
    p.add_argument("path", help="Python file (or package.module) holding the kernel")
    p.add_argument("-n", "--kernel-name", required=True, help="name of the @triton.jit function")
    p.add_argument(
        "-s",
        "--signature",
        required=True,
        help='every parameter in order, constexprs as values: e.g. "*fp32:16, *fp32:16, i32, 1024" '
        "(:16 divisible by 16, :1 fixed to 1; spec/BUILD.md)",
    )
    p.add_argument(
        "-t", "--target", action="append", required=True, help="cuda:80, cuda:90, hip:gfx942 ... (repeat for several)"
    )
    p.add_argument("-w", "--num-warps", type=_option("num_warps"), default=4, help="warps per program, a power of two")
    p.add_argument(
        "-ns",
        "--num-stages",
        type=_option("num_stages"),
        default=None,
        help="software-pipelining stages for loops (default: Triton's, 3 on CUDA, 2 on HIP)",
    )
    p.add_argument(
        "--num-ctas", type=_option("num_ctas"), default=None, help="CTAs per cluster (cuda:90 and newer; default: 1)"
    )
    p.add_argument("--maxnreg", type=_option("maxnreg"), default=None, help="register cap per thread (cuda only)")
    add_archive_out(p)
    p.add_argument("--name", help="archive name (default: the kernel name)")
    p.add_argument("--version", dest="archive_version", default="0.0.0", help="archive version")
    p.add_argument("--no-ir", action="store_true", help="leave IR stages out (slim archive)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_compile)

    b = sub.add_parser("build", help="compile every variant a spec file asks for, in parallel, into one archive")
    b.add_argument("spec", help="build spec (TOML), see spec/BUILD.md")
    add_archive_out(b)
    b.add_argument("-j", "--jobs", type=positive_int, default=None, help="worker processes (default: CPU count)")
    b.add_argument("--keep-going", action="store_true", help="pack what built even if some variants failed")
    b.add_argument(
        "--executor",
        default="local",
        metavar="WHERE",
        help="where the compiles run: local (default), ray (a local Ray started for this build), auto (the "
        "Ray cluster of this machine), ray://HOST:PORT or HOST:PORT (an existing Ray cluster); Ray "
        "needs karchive[ray], see docs/build-at-scale.md",
    )
    b.add_argument(
        "--reuse",
        metavar="PREVIOUS",
        help="copy the variants of this archive (path, URL or NAME@VERSION) "
        "whose build inputs are unchanged; compile only the others",
    )
    b.add_argument("--no-ir", action="store_true", help="leave IR stages out (slim archive)")
    b.add_argument(
        "--sign",
        action="append",
        metavar="KEY",
        help="sign the archive with this private key (repeatable; ARCHIVE.sig.json beside it, spec/SIGNING.md)",
    )
    b.add_argument(
        "--provenance",
        action="store_true",
        help="put the build's provenance (spec and source digests, parameters, platform) in the signed "
        "statement (needs --sign)",
    )
    b.add_argument("--passphrase-env", metavar="VAR", help="environment variable holding the signing key's passphrase")
    b.add_argument("--quiet", action="store_true", help="no progress output")
    b.add_argument("--json", action="store_true", help="print the summary as JSON")
    b.set_defaults(func=cmd_build)


def _take_shell_env() -> list[str]:
    """Warn once about codegen variables in the shell, then drop them before anything imports Triton.

    Triton freezes some of them into defaults at import (``PTXAS_OPTIONS``); a build applies only
    its spec's ``[archive] env`` (spec/BUILD.md, "Environment").
    """
    from ..producer.compile.buildenv import shell_warning, strip_shell

    warning = shell_warning()
    if "triton" not in sys.modules:  # a process that already imported Triton (tests, notebooks) is left alone
        strip_shell()
    return [warning] if warning else []


def _summary(result, out: str, total: int) -> dict:
    # Variants with the same key are stored once: count what the archive holds, not what compiled.
    unique = {v.key: v for v in result.built}
    per = Counter((v.kernel, str(v.variant.target)) for v in unique.values())
    return {
        "archive": out,
        "requested": total,
        "built": len(unique),
        "duplicates": len(result.built) - len(unique),
        "failed": [{"variant": req.label(), "error": msg} for req, msg in result.failed],
        "per_kernel_target": [{"kernel": k, "target": t, "variants": n} for (k, t), n in sorted(per.items())],
        "archive_bytes": result.archive_bytes,
        "raw_bytes": result.raw_bytes,
        "seconds": round(result.seconds, 3),
        "warnings": list(result.warnings),
        "compiled": result.compiled,
        "from_cache": result.from_cache,
        "reused": result.reused,
        **({"reuse": result.reuse} if result.reuse is not None else {}),
        **({"executor": result.executor} if result.executor else {}),
    }


def _print_summary(summary: dict) -> None:
    for w in summary.get("warnings", []):
        print(f"warning: {w}", file=sys.stderr)
    dups = summary["duplicates"]
    cached = summary.get("from_cache", 0)
    print(
        f"built {summary['built']} of {plural(summary['requested'], 'variant')} in {summary['seconds']:.1f}s"
        + (f" ({plural(dups, 'duplicate')} of another variant's key, stored once)" if dups else "")
    )
    if cached:
        print(f"  {cached} from the build cache, {summary['compiled'] - cached} compiled")
    if summary.get("reuse") is not None:
        r = summary["reuse"]
        why = ", ".join(f"{n} {k}" for k, n in sorted(r["compiled_because"].items()))
        print(
            f"  reused {r['reused']} from {r['previous']}, compiled {summary['compiled']}"
            + (f" ({why})" if why else "")
            + ("" if r["same_toolchain"] else f"; toolchain differs: {'; '.join(r['toolchain_differs'])}")
        )
    ex = summary.get("executor") or {}
    if ex.get("kind") == "ray":
        print(
            f"  compiled on Ray ({ex.get('address')}): {plural(ex.get('nodes') or 0, 'node')}, {plural(len(ex.get('workers', [])), 'worker')}"
        )
    for row in summary["per_kernel_target"]:
        print(f"  {row['kernel']:<28} {row['target']:<12} {plural(row['variants'], 'variant')}")
    for f in summary["failed"]:
        print(f"  FAILED {f['error']}")
    if summary["archive_bytes"]:
        ratio = summary["raw_bytes"] / max(1, summary["archive_bytes"])
        print(
            f"wrote {summary['archive']}: {human_bytes(summary['archive_bytes'])} "
            f"({human_bytes(summary['raw_bytes'])} of members, {ratio:.1f}x)"
        )


def _sign(out: str, keys: list, args: argparse.Namespace, parameters: dict) -> list[dict]:
    """Sign the archive just written (ARCHIVE.sig.json beside it, never inside: its bytes do not change).

    The first key makes the in-toto statement (with ``--provenance``: the build spec's and sources'
    digests, these parameters, the platform; spec/SIGNING.md), the others co-sign that statement."""
    from ..trust.buildinfo import collect_build_info
    from ..trust.sign import sign_archive

    info = collect_build_info(command="build", spec_path=args.spec, parameters=parameters) if args.provenance else None
    done = []
    for i, key in enumerate(keys):
        signed = sign_archive(out, key, build_info=info if i == 0 else None, replace=i == 0)
        done.append({"key_id": signed.key_id, "provenance": bool(info) and i == 0, "sidecar": signed.sidecar})
    return done


def cmd_build(args: argparse.Namespace) -> int:
    from ..producer.build.pipeline import build_archive, executor_kind
    from ..producer.build.spec_file import load_spec, validate_requests
    from ..producer.compile.buildenv import check_cache_root

    shell_warnings = _take_shell_env()
    spec = load_spec(args.spec)
    out = archive_out(args.out, spec.name, spec.version)
    if executor_kind(args.executor) == "local":
        check_cache_root()  # one line naming it, before the header (build_archive checks again, for the API)
    if args.no_ir:
        for r in spec.requests:
            r.include_ir = False
    validate_requests(spec.requests, spec.path)
    previous = None
    if args.reuse:
        from ..resolve import open as open_ref

        previous = open_ref(args.reuse)
    if not args.quiet and not args.json:
        for w in spec.warnings:
            print(f"warning: {w}", file=sys.stderr)
        # "to build", not "to compile": what the build cache already holds is not compiled again (the
        # summary says how many came from it).
        print(f"{spec.name} {spec.version}: {plural(len(spec.requests), 'variant')} to build", file=sys.stderr)
    if args.provenance and not args.sign:
        raise KarchiveError("--provenance goes into the signed statement: give --sign KEY too")
    signers = signing_keys(args.sign, args.passphrase_env)  # a bad key or passphrase fails before anything compiles
    result = build_archive(
        spec,
        out,
        jobs=args.jobs or 0,
        keep_going=args.keep_going,
        progress=not (args.quiet or args.json),
        executor=args.executor,
        reuse=previous,
        reuse_label=args.reuse or "",
    )
    # The spec's warnings were printed before compiling (where they can save the wait); JSON carries them all.
    result.warnings[:0] = shell_warnings + (spec.warnings if args.json else [])
    summary = _summary(result, out, len(spec.requests))
    if signers:
        summary["signed"] = _sign(
            out,
            signers,
            args,
            {
                "jobs": args.jobs,
                "keep_going": args.keep_going,
                "no_ir": args.no_ir,
                "executor": args.executor or "local",
            },
        )
    if args.json:
        emit_json(summary)
    else:
        _print_summary(summary)
        for line in summary.get("signed", []):
            print(
                f"  signed by key {line['key_id'][:16]}"
                + (" (with provenance)" if line["provenance"] else "")
                + f" -> {line['sidecar']}"
            )
    return 1 if result.failed else 0


def cmd_compile(args: argparse.Namespace) -> int:
    from ..errors import BuildError
    from ..producer.build.pipeline import build_archive
    from ..producer.build.spec_file import BuildSpec, validate_requests
    from ..producer.compile.aot import VariantRequest

    shell_warnings = _take_shell_env()
    name = args.name or args.kernel_name
    out = archive_out(args.out, name, args.archive_version)
    ref = f"{args.path}:{args.kernel_name}"
    options = {"num_warps": args.num_warps}
    for key in ("num_stages", "num_ctas", "maxnreg"):
        if getattr(args, key) is not None:
            options[key] = getattr(args, key)
    targets = list(dict.fromkeys(args.target))  # "-t cuda:90 -t cuda:90" compiles once
    requests = [
        VariantRequest(
            kernel_ref=ref,
            signature=args.signature,
            target=t,
            options=dict(options),
            include_ir=not args.no_ir,
            base_dir=os.getcwd(),
        )
        for t in targets
    ]
    validate_requests(requests)  # targets, options and the signature, before compiling anything
    spec = BuildSpec(name=name, version=args.archive_version, requests=requests)
    try:
        result = build_archive(spec, out, jobs=1, progress=False)
    except BuildError as exc:
        # compile has no --keep-going: every target must build. Name the failures without build's hint.
        if not exc.failures:
            raise
        lines = "\n".join(f"  - {msg}" for _, msg in exc.failures)
        raise BuildError(
            f"{len(exc.failures)} of {plural(len(requests), 'target')} failed to compile; nothing written:\n{lines}",
            failures=exc.failures,
        ) from None
    result.warnings[:0] = shell_warnings
    summary = _summary(result, out, len(requests))
    if args.json:
        summary["variants"] = [
            {"kernel": v.kernel, "key": v.key, "target": str(v.variant.target)} for v in result.built
        ]
        emit_json(summary)
    else:
        _print_summary(summary)
    return 0

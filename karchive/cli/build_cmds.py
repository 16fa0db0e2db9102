"""`karchive compile` (one variant, flags mirror Triton's compile.py) and `karchive build SPEC.toml`."""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter

from .output import emit_json, human_bytes


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compile", help="compile one kernel variant into an archive (flags mirror triton/tools/compile.py)")
    p.add_argument("path", help="Python file (or package.module) holding the kernel")
    p.add_argument("-n", "--kernel-name", required=True, help="name of the @triton.jit function")
    p.add_argument("-s", "--signature", required=True, help='e.g. "*fp32:16, *fp32:16, i32, 1024"')
    p.add_argument("-t", "--target", action="append", required=True,
                   help="cuda:80, cuda:90, hip:gfx942 ... (repeat for several)")
    p.add_argument("-w", "--num-warps", type=int, default=4)
    p.add_argument("-ns", "--num-stages", type=int, default=None)
    p.add_argument("--num-ctas", type=int, default=None)
    p.add_argument("--maxnreg", type=int, default=None, help="register cap per thread (cuda only)")
    p.add_argument("-o", "--out", required=True, help="archive to write (.karc)")
    p.add_argument("--name", help="archive name (default: the kernel name)")
    p.add_argument("--version", dest="archive_version", default="0.0.0", help="archive version")
    p.add_argument("--no-ir", action="store_true", help="leave IR stages out (slim archive)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_compile)

    b = sub.add_parser("build", help="compile every variant a spec file asks for, in parallel, into one archive")
    b.add_argument("spec", help="build spec (TOML), see spec/BUILD.md")
    b.add_argument("-o", "--out", required=True, help="archive to write (.karc)")
    b.add_argument("-j", "--jobs", type=int, default=0, help="worker processes (default: CPU count)")
    b.add_argument("--keep-going", action="store_true", help="pack what built even if some variants failed")
    b.add_argument("--executor", default="local", metavar="WHERE",
                   help="where the compiles run: local (default), ray (a local Ray started for this build), auto (the "
                        "Ray cluster of this machine), ray://HOST:PORT or HOST:PORT (an existing Ray cluster); Ray "
                        "needs karchive[ray], see docs/build-at-scale.md")
    b.add_argument("--reuse", metavar="PREVIOUS", help="copy the variants of this archive (path, URL or NAME@VERSION) "
                                                       "whose build inputs are unchanged; compile only the others")
    b.add_argument("--no-ir", action="store_true", help="leave IR stages out (slim archive)")
    b.add_argument("--quiet", action="store_true", help="no progress output")
    b.add_argument("--json", action="store_true", help="print the summary as JSON")
    b.set_defaults(func=cmd_build)


def _take_shell_env() -> list[str]:
    """Warn once about codegen variables in the shell, then drop them before anything imports Triton.

    Triton freezes some of them into defaults at import (``PTXAS_OPTIONS``); a build applies only
    its spec's ``[archive] env`` (spec/BUILD.md, "Environment").
    """
    from ..producer.buildenv import shell_warning, strip_shell

    warning = shell_warning()
    if "triton" not in sys.modules:  # a process that already imported Triton (tests, notebooks) is left alone
        strip_shell()
    return [warning] if warning else []


def _summary(result, out: str, total: int) -> dict:
    per = Counter((v.kernel, str(v.variant.target)) for v in result.built)
    return {
        "archive": out,
        "requested": total,
        "built": len(result.built),
        "duplicates": result.duplicates,
        "failed": [{"variant": req.label(), "error": msg} for req, msg in result.failed],
        "per_kernel_target": [{"kernel": k, "target": t, "variants": n} for (k, t), n in sorted(per.items())],
        "archive_bytes": result.archive_bytes,
        "raw_bytes": result.raw_bytes,
        "seconds": round(result.seconds, 3),
        "warnings": list(result.warnings),
        "compiled": result.compiled,
        "reused": result.reused,
        **({"reuse": result.reuse} if result.reuse is not None else {}),
        **({"executor": result.executor} if result.executor else {}),
    }


def _print_summary(summary: dict) -> None:
    for w in summary.get("warnings", []):
        print(f"warning: {w}", file=sys.stderr)
    print(f"built {summary['built']} of {summary['requested']} variants in {summary['seconds']:.1f}s"
          + (f" ({summary['duplicates']} duplicate keys dropped)" if summary["duplicates"] else ""))
    if summary.get("reuse") is not None:
        r = summary["reuse"]
        why = ", ".join(f"{n} {k}" for k, n in sorted(r["compiled_because"].items()))
        print(f"  reused {r['reused']} from {r['previous']}, compiled {summary['compiled']}" + (f" ({why})" if why else "")
              + ("" if r["same_toolchain"] else f"; toolchain differs: {'; '.join(r['toolchain_differs'])}"))
    ex = summary.get("executor") or {}
    if ex.get("kind") == "ray":
        print(f"  compiled on Ray ({ex.get('address')}): {ex.get('nodes')} node(s), {len(ex.get('workers', []))} worker(s)")
    for row in summary["per_kernel_target"]:
        print(f"  {row['kernel']:<28} {row['target']:<12} {row['variants']} variant(s)")
    for f in summary["failed"]:
        print(f"  FAILED {f['error']}")
    if summary["archive_bytes"]:
        ratio = summary["raw_bytes"] / max(1, summary["archive_bytes"])
        print(f"wrote {summary['archive']}: {human_bytes(summary['archive_bytes'])} "
              f"({human_bytes(summary['raw_bytes'])} of members, {ratio:.1f}x)")


def cmd_build(args: argparse.Namespace) -> int:
    from ..producer.build import build_archive
    from ..producer.spec_file import load_spec, validate_requests

    shell_warnings = _take_shell_env()
    spec = load_spec(args.spec)
    if args.no_ir:
        for r in spec.requests:
            r.include_ir = False
    validate_requests(spec.requests)
    previous = None
    if args.reuse:
        from ..resolve import open_reader

        previous = open_reader(args.reuse)
    if not args.quiet and not args.json:
        print(f"{spec.name} {spec.version}: {len(spec.requests)} variants to compile", file=sys.stderr)
    result = build_archive(spec, args.out, jobs=args.jobs, keep_going=args.keep_going,
                           progress=not (args.quiet or args.json), executor=args.executor, reuse=previous,
                           reuse_label=args.reuse or "")
    result.warnings[:0] = shell_warnings
    summary = _summary(result, args.out, len(spec.requests))
    emit_json(summary) if args.json else _print_summary(summary)
    return 1 if result.failed else 0


def cmd_compile(args: argparse.Namespace) -> int:
    from ..producer.build import build_archive
    from ..producer.spec_file import BuildSpec
    from ..producer.aot import VariantRequest

    shell_warnings = _take_shell_env()
    ref = f"{args.path}:{args.kernel_name}"
    options = {"num_warps": args.num_warps}
    for key in ("num_stages", "num_ctas", "maxnreg"):
        if getattr(args, key) is not None:
            options[key] = getattr(args, key)
    requests = [VariantRequest(kernel_ref=ref, signature=args.signature, target=t, options=dict(options),
                               include_ir=not args.no_ir, base_dir=os.getcwd()) for t in args.target]
    spec = BuildSpec(name=args.name or args.kernel_name, version=args.archive_version, requests=requests)
    result = build_archive(spec, args.out, jobs=1, progress=False)
    result.warnings[:0] = shell_warnings
    summary = _summary(result, args.out, len(requests))
    if args.json:
        summary["variants"] = [{"kernel": v.kernel, "key": v.key, "target": str(v.variant.target)}
                               for v in result.built]
        emit_json(summary)
    else:
        _print_summary(summary)
    return 0

"""Version ordering for ``latest``: PEP 440 and SemVer aware, total, deterministic.

Versions that parse as PEP 440 (which also covers ``1.2.3``, ``1.2.3-rc.1``, ``v2.0``) compare by
release numbers, then pre-release (``dev`` < ``a``/``alpha`` < ``b``/``beta`` < ``rc`` < final <
``post``), then local label. Anything else sorts below every parseable version, by plain string
order. Ties (``1.0`` vs ``1.0.0``) are broken by the string so the order is total.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..core.grammar import whole

_PEP440 = re.compile(
    r"""v?
    (?P<release>\d+(?:\.\d+)*)
    (?:[-_.]?(?P<pre_l>a|alpha|b|beta|c|rc|pre|preview)[-_.]?(?P<pre_n>\d+)?)?
    (?:[-_.]?(?P<post_l>post|rev|r)[-_.]?(?P<post_n>\d+)?)?
    (?:[-_.]?(?P<dev_l>dev)[-_.]?(?P<dev_n>\d+)?)?
    (?:\+(?P<local>[a-z0-9]+(?:[-_.][a-z0-9]+)*))?
    """,
    re.VERBOSE | re.IGNORECASE,
)
_PRE_RANK = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "c": 2, "rc": 2, "pre": 2, "preview": 2}
_INF = float("inf")


def version_key(version: str) -> tuple:
    """Sort key: larger means newer."""
    m = whole(_PEP440, version)
    if not m:
        return (0, (), (), version)
    release = tuple(int(p) for p in m.group("release").split("."))
    while len(release) > 1 and release[-1] == 0:
        release = release[:-1]
    pre: tuple[float, int]  # (inf, 0) sorts a final release after all of its pre-releases
    if m.group("pre_l"):
        pre = (_PRE_RANK[m.group("pre_l").lower()], int(m.group("pre_n") or 0))
    elif m.group("dev_l") and not m.group("post_l"):
        pre = (-1, 0)  # 1.0.dev1 comes before 1.0a1
    else:
        pre = (_INF, 0)
    post = int(m.group("post_n") or 0) if m.group("post_l") else -1
    dev = int(m.group("dev_n") or 0) if m.group("dev_l") else _INF
    local = tuple(
        (0, int(p), "") if p.isdigit() else (-1, 0, p.lower()) for p in re.split(r"[-_.]", m.group("local") or "") if p
    )
    return (1, release, (pre, post, dev, local), version)


def is_prerelease(version: str) -> bool:
    m = whole(_PEP440, version)
    return bool(m and (m.group("pre_l") or m.group("dev_l")))


def sort_versions(versions: Iterable[str]) -> list[str]:
    """Oldest first."""
    return sorted(versions, key=version_key)


def newest(versions: Iterable[str]) -> str | None:
    """What ``latest`` means: the highest final release, or the highest pre-release if there is none."""
    ordered = sort_versions(versions)
    finals = [v for v in ordered if not is_prerelease(v)]
    if finals:
        return finals[-1]
    return ordered[-1] if ordered else None

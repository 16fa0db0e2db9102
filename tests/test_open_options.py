"""One frozen OpenOptions travels whole from karchive.open to the route that uses it (issue 24); the keyword
API users call keeps working as a thin constructor of it."""

from __future__ import annotations

import dataclasses
import warnings

import pytest
from registry_support import isolated, small_archive  # noqa: F401 - fixture

import karchive
from karchive import resolve
from karchive.errors import LockfileError, RegistryError, SettingsError
from karchive.registry import OpenOptions, Registry

pytestmark = pytest.mark.usefixtures("isolated")


def test_options_are_frozen_and_keywords_replace_single_fields():
    base = OpenOptions(fetch="lazy", allow_downgrade=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        base.fetch = "full"  # type: ignore[misc]
    changed = OpenOptions.of(base, fetch="full")
    assert (changed.fetch, changed.allow_downgrade, base.fetch) == ("full", True, "lazy")
    assert OpenOptions.of(base) is base
    with pytest.raises(TypeError, match="unknown open option.*trsut"):
        OpenOptions.of(None, trsut="policy.toml")  # a typo fails as a misspelt keyword argument does
    with pytest.raises(RegistryError, match="auto, lazy or full"):
        OpenOptions(fetch="eager")  # type: ignore[arg-type]


def test_the_environment_fills_options_when_used_not_when_made(monkeypatch):
    options = OpenOptions()
    monkeypatch.setenv("KARCHIVE_FETCH", "full")
    assert options.fetch_mode() == "full"
    monkeypatch.setenv("KARCHIVE_FETCH", "sometimes")
    with pytest.raises(SettingsError, match="KARCHIVE_FETCH"):  # the settings module checks every variable
        options.fetch_mode()
    assert OpenOptions(fetch="lazy").fetch_mode() == "lazy"  # an explicit option wins over the variable
    monkeypatch.setenv("KARCHIVE_LOCKFILE", "/x/karchive.lock")
    assert options.lockfile_or_env() == "/x/karchive.lock"


def test_one_options_value_opens_through_every_layer(tmp_path):
    reg = Registry(tmp_path / "registry", cache=tmp_path / "cache")
    reg.publish(small_archive("examples", "0.1.0"))
    options = OpenOptions(registry=reg, fetch="full", trust=False)
    by_value = karchive.open("examples@0.1.0", options)
    by_keywords = karchive.open("examples@0.1.0", registry=reg, fetch="full", trust=False)
    reader = resolve.open("examples@0.1.0", options)
    assert by_value.version == by_keywords.version == reader.model.version == "0.1.0"
    assert reader.verdict is None  # no policy: nothing was decided
    for a in (by_value, by_keywords):
        a.close()
    reader.source.close()
    with pytest.raises(LockfileError, match="a lockfile cannot pin it"):  # a path is not a registry reference
        resolve.open(str(small_archive("examples", "0.1.0")), OpenOptions(lockfile=tmp_path / "karchive.lock"))


def test_open_verified_still_works_and_says_it_is_deprecated(tmp_path):
    reg = Registry(tmp_path / "registry", cache=tmp_path / "cache")
    reg.publish(small_archive("examples", "0.1.0"))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        reader, verdict = reg.open_verified("examples@0.1.0", trust=False)
    assert verdict is None and reader.model.name == "examples"
    assert any(issubclass(w.category, DeprecationWarning) for w in seen)
    reader.source.close()


def test_pull_and_lock_take_the_options_value_whole(tmp_path):
    """Registry.pull / Registry.lock take one OpenOptions, as open does; the per-option keywords are gone."""
    from karchive.errors import LockfilePinError, RegistryValueError

    reg = Registry(tmp_path / "registry", cache=tmp_path / "cache")
    reg.publish(small_archive("examples", "0.1.0"))
    lock, verdicts = reg.lock(["examples@0.1.0"], OpenOptions(trust=False))
    assert verdicts == {} and lock.pins["examples"].version == "0.1.0"
    lock.write(tmp_path / "karchive.lock")
    pulled = reg.pull("examples", f"{tmp_path}/out/", OpenOptions(lockfile=tmp_path / "karchive.lock", trust=False))
    assert pulled.record.version == "0.1.0" and pulled.path == tmp_path / "out" / "examples-0.1.0.karc"
    # the lockfile travels in the value: a newer version is published, the pin still decides
    reg.publish(small_archive("examples", "0.2.0"))
    assert reg.pull("examples", options=OpenOptions(lockfile=tmp_path / "karchive.lock")).record.version == "0.1.0"
    with pytest.raises(LockfilePinError, match="pins examples@0.1.0"):
        reg.pull("examples@0.2.0", options=OpenOptions(lockfile=tmp_path / "karchive.lock"))
    with pytest.raises(TypeError):
        reg.pull("examples@0.1.0", trust=False)  # type: ignore[call-arg]  # no second, keyword signature
    with pytest.raises(RegistryValueError, match="makes a lockfile"):  # lock reads no lockfile: it writes one
        reg.lock(["examples@0.1.0"], OpenOptions(lockfile=tmp_path / "karchive.lock"))


def test_a_registry_option_that_is_no_registry_is_refused_by_name():
    """registry= is a Registry (anything with its open()), its URL or its path; anything else is a karchive
    error naming what was given (it was a bare TypeError from deep in the registry's URL parsing)."""
    import karchive
    from karchive.errors import RegistryValueError

    with pytest.raises(RegistryValueError, match="got an object of type int") as exc:
        karchive.open("ops@1", registry=123)
    assert exc.value.value == "123"

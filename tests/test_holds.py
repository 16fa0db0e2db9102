"""karchive.core.holds: a setting held while any holder is open, put back by the last, in any order."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from karchive.core.holds import hold_attr, hold_env


@pytest.mark.parametrize("first_ends_first", [True, False])
def test_an_attribute_stays_held_until_the_last_holder_releases_it(first_ends_first):
    config = SimpleNamespace(threads=4)
    a = hold_attr(config, "threads", 1)
    b = hold_attr(config, "threads", 1)
    (a if first_ends_first else b)()
    assert config.threads == 1
    (a if first_ends_first else b)()  # a second release of one holder releases nothing more
    assert config.threads == 1
    (b if first_ends_first else a)()
    assert config.threads == 4
    c = hold_attr(config, "threads", 2)  # a fresh hold saves the value of now
    config.threads = 3
    c()
    assert config.threads == 4


def test_an_environment_variable_unset_before_is_unset_again(monkeypatch):
    monkeypatch.delenv("KARCHIVE_TEST_HELD", raising=False)
    a = hold_env("KARCHIVE_TEST_HELD", "1")
    b = hold_env("KARCHIVE_TEST_HELD", "1")
    a()
    assert os.environ["KARCHIVE_TEST_HELD"] == "1"
    b()
    assert "KARCHIVE_TEST_HELD" not in os.environ
    monkeypatch.setenv("KARCHIVE_TEST_HELD", "7")
    c = hold_env("KARCHIVE_TEST_HELD", "1")
    assert os.environ["KARCHIVE_TEST_HELD"] == "1"
    c()
    assert os.environ["KARCHIVE_TEST_HELD"] == "7"

"""The switch that keeps CI honest: mount tests skip without root, and fail instead under
INTERP_REQUIRE_ROOT_TESTS=1 (which `.ci/run` sets).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.mounts import REQUIRE_ENV, require_root


def test_without_root_a_mount_test_skips_with_the_reason(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.delenv(REQUIRE_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match="the probe needs root to mount a small filesystem"):
        require_root("the probe")


def test_without_root_a_mount_test_fails_when_ci_requires_it(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setenv(REQUIRE_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match=f"{REQUIRE_ENV}=1 requires it to run"):
        require_root("the probe")


def test_the_ci_entry_point_requires_the_root_tests():
    script = Path(__file__).resolve().parents[2] / ".ci" / "run"
    assert f"export {REQUIRE_ENV}=1" in script.read_text()

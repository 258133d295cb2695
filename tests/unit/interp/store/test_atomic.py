"""Atomic writes leave the old file or the new one, never a mix, and no temporary files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from interp.store.atomic import append_jsonl, atomic_write_bytes, atomic_write_json, atomic_write_text


def test_writes_replace_the_whole_file_and_leave_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    atomic_write_bytes(path, b"x" * 1000)
    atomic_write_text(path, "short")
    assert path.read_text() == "short"
    atomic_write_json(path, {"a": [1, 2.5, None], "é": "ü"})
    assert json.loads(path.read_text(encoding="utf-8")) == {"a": [1, 2.5, None], "é": "ü"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.json"]


def test_a_write_that_is_not_durable_is_still_whole_and_atomic_but_never_fsyncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    syncs: list[int] = []
    monkeypatch.setattr(os, "fsync", syncs.append)
    path = tmp_path / "f.json"
    atomic_write_json(path, {"old": 1}, durable=False)
    atomic_write_json(path, {"new": [2]}, durable=False)
    assert json.loads(path.read_text()) == {"new": [2]} and syncs == []
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]
    atomic_write_json(path, {"durable": True})
    assert len(syncs) == 2  # the file, then its folder


def test_a_failed_write_keeps_the_old_file_and_removes_its_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "f.txt"
    atomic_write_text(path, "old")

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_text(path, "new")
    monkeypatch.undo()
    with pytest.raises(TypeError):
        atomic_write_json(path, {"not json": object()})
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]


def test_append_jsonl_appends_whole_lines_and_drops_a_partial_one(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    append_jsonl(path, {"step": 0})
    append_jsonl(path, {"step": 1, "loss": 0.5})
    with open(path, "ab") as f:
        f.write(b'{"step": 2, "lo')  # what a killed writer leaves
    append_jsonl(path, {"step": 2, "loss": 0.25})
    assert path.read_bytes() == b'{"step": 0}\n{"step": 1, "loss": 0.5}\n{"step": 2, "loss": 0.25}\n'


def test_append_jsonl_drops_a_partial_first_line(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_bytes(b"x" * 10_000)  # longer than one scan block, no newline at all
    append_jsonl(path, {"step": 0})
    assert path.read_bytes() == b'{"step": 0}\n'


def test_atomic_writes_get_ordinary_file_permissions(tmp_path):
    import os

    from interp.store.atomic import atomic_write_text

    atomic_write_text(tmp_path / "report.html", "x")
    (tmp_path / "plain.txt").write_text("x")
    assert (
        os.stat(tmp_path / "report.html").st_mode & 0o777 == os.stat(tmp_path / "plain.txt").st_mode & 0o777
    )

"""Nothing in the repository points at a file outside it: no notes of the developers' workspace
(the studies are cited by title and authors on their docs pages), no path of a machine.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Spelled in pieces so that this file does not match itself.
OUTSIDE = re.compile(
    "|".join([r"SCIENCE" + r"\.md", r"DESIGN" + r"\.md", r"HOUSE" + r"\.md", r"\.\./" + "shared"])
)
MACHINE = re.compile(r"(?<![\w.])/(work|home|Users|tmp/pytest-of)" + r"/[\w.-]+")


def _tracked_text_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    files = [ROOT / name for name in listed.stdout.splitlines()]
    return [f for f in files if f.is_file() and b"\0" not in f.read_bytes()[:4096]]


def test_no_file_cites_a_file_outside_the_repository_or_a_machines_path():
    files = _tracked_text_files()
    assert len(files) > 100, "git ls-files found the checkout"
    found = []
    for path in files:
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if OUTSIDE.search(line) or MACHINE.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}")
    assert not found, "\n".join(found)


def test_the_check_would_see_a_citation_and_a_path():
    assert OUTSIDE.search("see ../" + "shared/SCIENCE" + ".md") and MACHINE.search(
        "cd /" + "work/main && make"
    )
    assert not MACHINE.search("runs/work/x") and not MACHINE.search("https://example.org/home/x")

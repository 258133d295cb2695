"""Study B's protocols are data shipped with the package: each file is the settings its records
were measured with, and `PRESETS` reads them back to the same settings.

A pip install has no ``results/``, so the shipped file is what ``--preset`` measures with; the
records committed beside the result are what was measured. These tests tie the two together.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analyses.studies.study_b.settings import PRESETS, PROTOCOLS, StudyBSettings, load_protocol
from interp.config import to_dict
from interp.errors import ConfigError

ROOT = Path(__file__).resolve().parents[4]
SHIPPED = ROOT / "analyses" / "studies" / "study_b" / "protocols"
RECORDS = ROOT / "results" / "study-b"

# Each protocol's measured settings: the settings.json of the records its seeds exported.
MEASURED = {name: RECORDS / name / "settings.json" for name in PROTOCOLS}
NOT_COMMITTED = {
    "cpu": "protocol 1 (the settings' defaults, CPU_WLMD) ran before records were exported: "
    "docs/study_b.md quotes its table, results/study-b holds no folder of it",
}


def test_every_preset_is_a_shipped_protocol_or_says_why_it_has_no_records():
    assert set(PRESETS) == set(PROTOCOLS) | set(NOT_COMMITTED)
    assert sorted(p.stem for p in SHIPPED.glob("*.json")) == sorted(PROTOCOLS)
    assert PRESETS["cpu"] == StudyBSettings()


@pytest.mark.parametrize("name", PROTOCOLS)
def test_each_protocol_file_is_the_settings_json_beside_its_records(name):
    shipped = SHIPPED / f"{name}.json"
    assert json.loads(shipped.read_text()) == json.loads(MEASURED[name].read_text())
    assert shipped.read_bytes() == MEASURED[name].read_bytes()  # written by the same dumps_json
    # Read back, the settings write the same file: no key is dropped or added by the loader.
    assert to_dict(PRESETS[name]) == json.loads(shipped.read_text())


def test_an_absent_key_reads_as_what_the_protocol_ran_with():
    """Protocols 2-5 name no wall_force: absent reads as 'kept' (how they ran), not the
    default 'fresh'; protocol 6 names 'fresh'. target_walker, absent, is its default 'every'.
    """
    for name in ("protocol-2", "protocol-3", "protocol-4", "protocol-5"):
        assert "wall_force" not in json.loads((SHIPPED / f"{name}.json").read_text())["wlmd"]
        assert PRESETS[name].wlmd.wall_force == "kept"
    assert PRESETS["protocol-6"].wlmd.wall_force == "fresh" and StudyBSettings().wlmd.wall_force == "kept"
    assert PRESETS["protocol-2"].wlmd.target_walker == "every"
    assert PRESETS["protocol-2-walkers"].wlmd.target_walker == "median"


def test_an_unknown_protocol_is_refused_naming_the_shipped_ones():
    with pytest.raises(ConfigError, match="unknown study-B protocol 'protocol-9'") as error:
        load_protocol("protocol-9")
    assert "protocol-6" in error.value.hint

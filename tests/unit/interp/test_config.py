"""Config fields added after configs were first written (`interp.config.param`'s ``added`` and
``absent``): old configs read as they ran, new ones as the new default.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from interp.config import absent_value, from_dict, param, to_dict


@dataclass(frozen=True)
class _Config:
    lr: float = 0.1
    engine: str = param("loop", "added with the old behaviour as its default", added=True)
    wall: str = param("fresh", "added with a new default; configs without it kept", absent="kept")


def test_an_added_field_is_written_only_away_from_what_its_absence_means():
    assert to_dict(_Config()) == {"lr": 0.1, "wall": "fresh"}  # the new default is written
    assert to_dict(_Config(wall="kept", engine="fast")) == {"lr": 0.1, "engine": "fast"}


def test_a_config_written_before_the_fields_reads_as_it_ran():
    old = from_dict(_Config, {"lr": 0.1})
    assert (old.engine, old.wall) == ("loop", "kept")  # not the new default "fresh"
    assert to_dict(old) == {"lr": 0.1}  # and is written back unchanged
    for config in (_Config(), _Config(wall="kept"), _Config(engine="fast", wall="fresh")):
        assert from_dict(_Config, to_dict(config)) == config


def test_absent_value_names_what_a_missing_key_means():
    fields = {f.name: f for f in dataclasses.fields(_Config)}
    assert absent_value(fields["lr"]) is dataclasses.MISSING
    assert (absent_value(fields["engine"]), absent_value(fields["wall"])) == ("loop", "kept")

"""The named grids `interp sweep --grid NAME` knows: every study's, collected in one table.

Each study keeps its grids in its own room (`analyses.studies.study_a.grids`,
`analyses.studies.study_c.grids`); this module only gathers them, so the sweep command and the
reports look names up in one place. `PENDING` names grids that wait for a choice not made yet.
"""

from __future__ import annotations

from analyses.grids import Grid
from analyses.studies.study_a import grids as study_a
from analyses.studies.study_c import grids as study_c

GRIDS: dict[str, Grid] = {**study_a.GRIDS, **study_c.GRIDS}
PENDING: dict[str, str] = dict(study_a.PENDING)

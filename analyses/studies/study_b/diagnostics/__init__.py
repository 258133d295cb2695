"""Study B's diagnostics, whose decisions are taken: the pilots and coverage runs of protocols 2-3,
and the wall diagnostic of protocol 4 (run by the maintenance scripts in `scripts/long_runs/`).
"""

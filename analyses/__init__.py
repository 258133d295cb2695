"""Named experiments over runs and checkpoints (`Params -> compute -> Result`).

The analysis registry arrives with the dissection library (patching, ablation, fingerprints,
gradient groups); see DESIGN.md.
"""

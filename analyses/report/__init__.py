"""Reports of runs and sweeps, for every study: records, rates, survival curves, plots, the HTML page.

Study-free: a study adds its own section to `interp report` through `analyses.report.page`'s
section hook, and nothing here imports a study.
"""

"""Study C, label-noise grokking: its grids, tables, figures, report and command group (`interp study-c`)."""

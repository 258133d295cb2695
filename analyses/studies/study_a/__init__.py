"""Study A, shortcut saturation: its grids, statistics, circuit-evolution figure, mechanism test,
demo, report section and command group (`interp study-a`).
"""

"""Wang-Landau molecular dynamics on the weight sphere (study B's equilibrium models)."""

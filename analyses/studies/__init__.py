"""Study drivers: recipes, grids, protocols, reports and figures (not registered analyses)."""

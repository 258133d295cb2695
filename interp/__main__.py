"""`python -m interp` runs the CLI (the same as the `interp` console script)."""

from interp.cli import main

main()

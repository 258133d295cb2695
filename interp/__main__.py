"""`python -m interp` runs the CLI (the same as the `interp` console script)."""

from interp.cli import main

if __name__ == "__main__":  # importing the module (e.g. the API docs do) must not run the CLI
    main()

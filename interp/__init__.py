"""`interp`: a toolkit for the mechanistic interpretability of small models.

The top-level package is deliberately light: importing it must not import torch, so that
`interp --help` starts in well under a second. Import the submodules you need
(`interp.store.checkpoint`, `interp.splits`, ...).
"""

__version__ = "0.1.0"

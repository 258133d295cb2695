"""The on-disk run format: crash-safe writes, run folders, checkpoints and their byte formats."""

"""Backups of checkpoints: manifest and catalog, file selection, blob store, taking one, pruning."""

"""Leaf helpers with no domain knowledge: storage access, locks, process checks."""

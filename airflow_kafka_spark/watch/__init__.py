"""Watching running jobs: lag, status, retention headroom, mirror, audit."""

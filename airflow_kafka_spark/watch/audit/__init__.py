"""The fleet audit: one job (job), the trend file (history), the report (render, chart) and writing it (report)."""

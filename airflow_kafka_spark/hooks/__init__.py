"""Thin Airflow hooks over the core (the core itself never imports Airflow)."""

"""Tests that need a real Airflow (see conftest.py for the environment they get)."""

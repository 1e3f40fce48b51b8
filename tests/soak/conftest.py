"""The soak runs real Airflow: the same throwaway ``AIRFLOW_HOME`` and migrated DB as tests/airflow.

Importing tests/airflow/conftest.py points Airflow at that home before anything imports it.
"""

from tests.airflow.conftest import airflow_home, pytest_sessionfinish  # noqa: F401

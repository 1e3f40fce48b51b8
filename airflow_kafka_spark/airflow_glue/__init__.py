"""Airflow glue the operators and sensors share: job lookup, failure shape, the Spark connection.

Importing it hands Airflow's configuration reader to :mod:`airflow_kafka_spark.settings`, so the
``[kafka_spark]`` options set in ``airflow.cfg`` (or a secrets backend) reach the core in every
Airflow process; the core itself never imports Airflow.
"""

from airflow.sdk import conf as _conf

from airflow_kafka_spark import settings as _settings

_settings.use_airflow_config(lambda section, option: _conf.get(section, option, fallback=None))

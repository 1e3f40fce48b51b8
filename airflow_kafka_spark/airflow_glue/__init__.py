"""Airflow glue the operators and sensors share: job lookup, failure shape, the Spark connection."""

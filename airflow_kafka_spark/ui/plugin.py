"""The Airflow plugin: the streaming-jobs app under the API server and its entry in the UI's navigation.

Declared in the provider's ``plugins`` list (``provider_info.py``), which is how Airflow 3 finds a
provider's plugins; no ``airflow.plugins`` entry point is needed. ``external_views`` with a
``url_route`` makes Airflow's React UI show ``href`` in an iframe at ``/plugin/<url_route>``, inside
its own navigation, on the same origin: the session cookie of the UI's login reaches the app.
"""

from __future__ import annotations

from typing import Any, ClassVar

from airflow.plugins_manager import AirflowPlugin

from airflow_kafka_spark.ui.app import URL_PREFIX, create_app


class StreamingJobsPlugin(AirflowPlugin):
    """Streaming jobs page (``/streaming-jobs/``), Prometheus text (``/streaming-jobs/metrics``), nav entry."""

    name = "airflow_kafka_spark"
    fastapi_apps: ClassVar[list[dict[str, Any]]] = [
        {"app": create_app(), "url_prefix": URL_PREFIX, "name": "Streaming jobs"}]
    external_views: ClassVar[list[dict[str, Any]]] = [
        {"name": "Streaming jobs", "href": f"{URL_PREFIX}/", "url_route": "streaming-jobs", "destination": "nav",
         "category": "browse"}]

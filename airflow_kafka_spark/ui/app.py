"""The plugin's FastAPI app, mounted by ``airflow api-server`` under :data:`URL_PREFIX`.

Authentication is Airflow's, not ours: every route depends on
:func:`airflow.api_fastapi.core_api.security.get_user`, the dependency of Airflow's own REST API. It
accepts ``Authorization: Bearer <jwt>`` (scripts, Prometheus with a token) or the ``_token`` cookie the
UI's login sets, so a person signed in to the Airflow UI sees the page in the UI's iframe and anybody
else is refused. A browser without a valid session is redirected to the auth manager's login page
(``get_url_login(next_url=...)``, which brings the person back here); other clients get the 401/403.
Authorisation: the user must be allowed to read the safe-restart DAG (``is_authorized_dag(GET)``): the
page shows the state of the jobs that DAG acts on and links to its trigger.

Job names in URLs are checked against the registry (:meth:`Registry.get`): an unknown or malformed
name is a 404 with one line, never a path.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response

from airflow_kafka_spark._util.text import now_ms
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.ui import html
from airflow_kafka_spark.ui.jobs import all_jobs, one_job, registry

URL_PREFIX = "/streaming-jobs"
_SCRAPE_HISTORY: dict[str, list[Any]] = {}
METRICS_MISSING = "# the metrics module (airflow_kafka_spark.watch.metrics) is not installed in this version\n"


def _authorized_user(request: Request) -> Any:
    """Airflow's ``get_user`` (bearer header or ``_token`` cookie), then the DAG read permission."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails

    user = request.state.aks_user
    dag = DagDetails(id=html.SAFE_RESTART_DAG_ID)
    if not get_auth_manager().is_authorized_dag(method="GET", user=user, details=dag):
        raise HTTPException(status_code=403, detail=f"not allowed to read the {html.SAFE_RESTART_DAG_ID} DAG")
    return user


async def _authenticated(request: Request) -> None:
    from airflow.api_fastapi.core_api.security import bearer_scheme, get_user

    request.state.aks_user = await get_user(request, None, await bearer_scheme(request))


User = Annotated[Any, Depends(_authorized_user)]


def _wants_html(request: Request) -> bool:
    return "text/html" in request.headers.get("accept", "") and not request.url.path.endswith("/metrics")


def _base(request: Request) -> str:
    return str(request.scope.get("root_path") or URL_PREFIX).rstrip("/")


def _registry_or_404() -> Any:
    try:
        return registry()
    except UserError as exc:
        raise HTTPException(status_code=404, detail=str(exc)) from None


def create_app() -> FastAPI:
    app = FastAPI(title="Streaming jobs (airflow-kafka-spark)", docs_url=None, redoc_url=None, openapi_url=None,
                  dependencies=[Depends(_authenticated)])

    @app.exception_handler(HTTPException)
    async def _refused(request: Request, exc: HTTPException) -> Response:
        if exc.status_code in (401, 403) and _wants_html(request) and not hasattr(request.state, "aks_user"):
            from airflow.api_fastapi.app import get_auth_manager

            return RedirectResponse(get_auth_manager().get_url_login(next_url=str(request.url)), status_code=303)
        if exc.status_code == 404 and _wants_html(request):
            return HTMLResponse(html.not_found(str(exc.detail)), status_code=404)
        return PlainTextResponse(f"{exc.detail}\n", status_code=exc.status_code)

    @app.get("/", response_class=HTMLResponse)
    def jobs(request: Request, user: User) -> str:
        reg = _registry_or_404()
        return html.jobs_page(all_jobs(reg), base=_base(request), generated_at_ms=now_ms(), registry_path=reg.path)

    @app.get("/jobs/{name}", response_class=HTMLResponse)
    def job(request: Request, name: str, user: User) -> str:
        try:
            view = one_job(_registry_or_404(), name)
        except UserError as exc:
            raise HTTPException(status_code=404, detail=str(exc)) from None
        return html.job_page(view, base=_base(request))

    @app.get("/jobs/{name}/restart", response_class=HTMLResponse)
    def restart(request: Request, name: str, user: User) -> str:
        reg = _registry_or_404()
        try:
            spec = reg.get(name)
        except UserError as exc:
            raise HTTPException(status_code=404, detail=str(exc)) from None
        return html.restart_form(spec.name, base=_base(request))

    @app.get("/metrics", response_class=PlainTextResponse)
    def metrics(user: User) -> Response:
        """Prometheus text for every registry job: the metrics module's names and labels (kafka-lag-exporter's).

        Broker samples are kept between scrapes (per API-server worker), so the status has its trend as
        under ``aks lag --watch``.
        """
        try:
            from airflow_kafka_spark.watch.metrics import CONTENT_TYPE, prometheus_text, registry_metrics
        except ImportError:
            return PlainTextResponse(METRICS_MISSING, status_code=501)
        from airflow_kafka_spark.ui.jobs import kafka_config_from_connection

        samples = registry_metrics(_registry_or_404(), kafka_config_from_connection, history=_SCRAPE_HISTORY)
        return Response(prometheus_text(samples), media_type=CONTENT_TYPE)

    return app

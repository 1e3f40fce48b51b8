"""Extra links on the task page: the Spark application, the docs of each finding, the audit report.

Airflow 3 computes an operator's links in the worker when the task ends (``get_link`` gets the
running task instance as ``ti_key``) and keeps each URL as the XCom ``_link_<class name>``, which
the UI reads; so every link here is derived from what the task itself pushed (its return value)
and, for the driver's cluster manager, from the lifecycle record the submit wrote.

* :class:`SparkApplicationLink` (submit, stop, health gate): the YARN ResourceManager's page of the
  application (``/cluster/app/<id>``), or the standalone master's status of the driver
  (``/v1/submissions/status/<id>``). A local driver runs without UI (``spark.ui.enabled=false``),
  and a Kubernetes pod's API page needs a token no browser has: no link then.
* :class:`FindingDocsLink` ×3 (validate): the anchor of the three worst finding codes in
  ``docs/findings.md`` (one section per code of ``verdict.findings.CODES``).
* :class:`AuditReportLink` (the audit DAG's ``report`` task): the Markdown report it wrote.

The docs base URL is ``[kafka_spark] docs_url`` when set, else :data:`DOCS_URL`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from airflow.sdk import BaseOperatorLink

from airflow_kafka_spark import settings
from airflow_kafka_spark.airflow_glue import jobs as _glue  # noqa: F401  (registers airflow.cfg as a settings source)
from airflow_kafka_spark.verdict.findings import CODES

DOCS_URL = "https://github.com/airflow-kafka-spark/airflow-kafka-spark/blob/main/docs"
FINDINGS_DOC = "findings.md"
SEVERITY_ORDER = {"BLOCK": 0, "WARN": 1, "INFO": 2, "PASS": 3}


def docs_url() -> str:
    return (settings.value("docs_url") or DOCS_URL).rstrip("/")


def finding_anchor(code: str) -> str:
    """The anchor of ``code`` in docs/findings.md (an explicit ``<a id>``, the same in every renderer)."""
    return code.lower()


def finding_url(code: str) -> str:
    return f"{docs_url()}/{FINDINGS_DOC}#{finding_anchor(code)}" if code in CODES else ""


def application_url(driver: Mapping[str, Any] | None, endpoint: Mapping[str, Any] | None) -> str:
    """Where a person looks at the driver in a browser, from the recorded driver and its cluster endpoint."""
    if not driver or not endpoint or not endpoint.get("urls"):
        return ""
    base, kind, ident = str(endpoint["urls"][0]).rstrip("/"), str(driver.get("kind")), str(driver.get("id"))
    if kind == "yarn":
        return f"{base}/cluster/app/{ident}"
    if kind == "standalone":
        return f"{base}/v1/submissions/status/{ident}"
    return ""


def _own(ti: Any) -> Any:
    """The task's return value (pulled in the worker at the end of the task)."""
    return ti.xcom_pull(task_ids=ti.task_id)


class SparkApplicationLink(BaseOperatorLink):
    """The job's Spark application in its cluster manager's UI."""

    name = "Spark application"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        own = _own(ti_key)
        own = own if isinstance(own, Mapping) else {}
        driver, endpoint = own.get("driver"), own.get("endpoint")
        if driver and not endpoint:   # stop / health gate: the endpoint the submit recorded for this driver
            from airflow_kafka_spark.airflow_glue.jobs import load_job
            from airflow_kafka_spark.lifecycle.record import LifecycleRecord
            from airflow_kafka_spark.runtime.app_versions import submitted_app

            _, spec = load_job(operator.job, getattr(operator, "registry_path", None))
            sub = submitted_app(LifecycleRecord.load(spec.checkpoint)) or {}
            if (sub.get("driver") or {}).get("id") == driver.get("id"):
                endpoint = sub.get("endpoint")
        return application_url(driver, endpoint)


class FindingDocsLink(BaseOperatorLink):
    """The docs section of the ``rank``-th worst finding code of a validate task's verdict."""

    rank: ClassVar[int] = 1

    @property
    def name(self) -> str:
        return f"Finding {self.rank}: docs"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        verdict = _own(ti_key) or ti_key.xcom_pull(task_ids=ti_key.task_id, key="verdict")   # a BLOCK pushes this
        codes = ranked_codes(verdict)
        return finding_url(codes[self.rank - 1]) if len(codes) >= self.rank else ""


class SecondFindingDocsLink(FindingDocsLink):
    rank = 2


class ThirdFindingDocsLink(FindingDocsLink):
    rank = 3


def ranked_codes(verdict: Any) -> list[str]:
    """Distinct codes of a verdict's findings, worst first, ``OK`` left out."""
    findings = verdict.get("findings") if isinstance(verdict, Mapping) else None
    ordered = sorted(findings or (), key=lambda f: SEVERITY_ORDER.get(str(f.get("severity")), 9))
    return [c for c in dict.fromkeys(str(f.get("code")) for f in ordered) if c != "OK"]


class AuditReportLink(BaseOperatorLink):
    """The Markdown report the audit DAG's report task wrote."""

    name = "Audit report"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        doc = _own(ti_key)
        path = ((doc or {}).get("paths") or {}).get("markdown") if isinstance(doc, Mapping) else None
        if not path:
            return ""
        return str(path) if "://" in str(path) else Path(path).resolve().as_uri()


FINDING_LINKS = (FindingDocsLink(), SecondFindingDocsLink(), ThirdFindingDocsLink())

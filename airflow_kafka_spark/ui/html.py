"""The streaming-jobs pages as HTML: pure functions of :class:`~airflow_kafka_spark.ui.jobs.JobView`.

Server-rendered on purpose: no npm build to ship or audit, one request per page, and the same page
works in Airflow's iframe and opened on its own. Every value goes through :func:`html.escape`;
machine-readable numbers sit in ``data-value`` attributes next to the text a person reads (the
browser test compares them with ``aks lag --json``). Nothing here can show a secret: a
:class:`JobView` holds no connection value (the registry holds connection *ids* only) and the
observation's notes are the core's, already scrubbed.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from urllib.parse import quote

from airflow_kafka_spark._util.text import fmt_duration, utc_display
from airflow_kafka_spark.runtime.safe_restart import RestartMode
from airflow_kafka_spark.ui.jobs import HistoryPoint, JobView

SAFE_RESTART_DAG_ID = "streaming_safe_restart"
STATUS_COLORS = {"OK": "#2e7d32", "IDLE": "#78909c", "UNKNOWN": "#9e9e9e", "WARN": "#ef6c00", "STALLED": "#e53935",
                 "STOPPED": "#6d0000", "REWIND": "#8e24aa", "ERROR": "#212121"}

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:16px;color:#1a202c;font-size:14px}
h1{font-size:20px;margin:0 0 8px} h2{font-size:16px;margin:18px 0 6px}
table{border-collapse:collapse;width:100%} th,td{border-bottom:1px solid #e2e8f0;padding:6px 8px;text-align:left;
vertical-align:top} th{background:#f7fafc;font-weight:600} td.num{text-align:right;font-variant-numeric:tabular-nums}
.status{display:inline-block;padding:1px 8px;border-radius:10px;color:#fff;font-weight:600;font-size:12px}
.muted{color:#718096;font-size:12px} .alert{color:#c53030} a{color:#2b6cb0}
form label{display:block;margin:8px 0 2px;font-weight:600} form input,form select{padding:4px;min-width:280px}
button{margin-top:12px;padding:6px 14px}
"""


def _page(title: str, body: str) -> str:
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
            f"<style>{STYLE}</style></head><body>{body}</body></html>")


def _num(value: int | float | None, text: str) -> str:
    raw = "" if value is None else str(value)
    return f'data-value="{escape(raw)}">{escape(text)}'


def _records(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


def _status_badge(status: str, reason: str) -> str:
    color = STATUS_COLORS.get(status, "#4a5568")
    return (f'<span class="status" data-field="status" style="background:{color}" title="{escape(reason)}">'
            f"{escape(status)}</span>")


def _headroom(v: JobView) -> tuple[str, str]:
    """(headroom cell, time-to-data-loss cell)."""
    obs = v.observation
    if obs is None:
        return "<td>-</td>", "<td>-</td>"
    h = obs.headroom
    if h.lost_records:
        return (f'<td class="num alert" data-field="headroom" {_num(0, "LOST")}</td>',
                f'<td class="alert" data-field="data-loss">{h.lost_records:,} unread records already deleted</td>')
    if h.infinite:
        return (f'<td class="num" data-field="headroom" data-infinite="true" {_num(None, "∞")}</td>',
                '<td data-field="data-loss">never (retention cannot delete unread records)</td>')
    if h.seconds is None:
        return (f'<td class="num" data-field="headroom" {_num(None, "?")}</td>',
                '<td data-field="data-loss">unknown</td>')
    loss_at = utc_display(obs.observed_at_ms + int(h.seconds * 1000))
    return (f'<td class="num" data-field="headroom" {_num(h.seconds, fmt_duration(h.seconds))}'
            f'<div class="muted">by {escape(str(h.limited_by or "-"))}</div></td>',
            f'<td data-field="data-loss">{escape(loss_at)}</td>')


def _driver(v: JobView) -> str:
    d = v.driver
    who = "no driver recorded" if d is None else f"{d.kind} {d.id}" + (f" on {d.host}" if d.host else "")
    return (f'<td data-field="driver"><div>{escape(v.spec.application.rsplit("/", 1)[-1])}</div>'
            f'<div class="muted" title="{escape(v.spec.application)}">{escape(who)}</div></td>')


def _verdict(v: JobView) -> str:
    if v.verdict is None:
        return '<td data-field="verdict" class="muted">no audit yet</td>'
    return (f'<td data-field="verdict" title="{escape(v.verdict.headline or "")}">{escape(v.verdict.severity)}'
            f'<div class="muted">audit {escape(utc_display(v.verdict.at_ms))}</div></td>')


def _restart(v: JobView) -> str:
    r = v.last_restart
    if r is None:
        return '<td data-field="last-restart" class="muted">none recorded</td>'
    what = " · ".join(x for x in (r.outcome, r.mode, f"by {r.actor}" if r.actor else None) if x)
    return (f'<td data-field="last-restart" data-entry="{escape(r.entry_id)}">{escape(what)}'
            f'<div class="muted">{escape(utc_display(r.at_ms))} · entry {escape(r.entry_id)}'
            f'{" · " + escape(r.reason) if r.reason else ""}</div></td>')


def _job_href(base: str, name: str) -> str:
    return f"{base}/jobs/{quote(name)}"


def _row(v: JobView, base: str) -> str:
    obs = v.observation
    name = escape(v.spec.name)
    if obs is None:
        lag = '<td class="num" data-field="lag-records">-</td><td class="num" data-field="lag-seconds">-</td>'
        status = _status_badge("ERROR", v.error or "") + f'<div class="muted alert">{escape(v.error or "")}</div>'
    else:
        records = obs.lag.records_effective
        lag = (f'<td class="num" data-field="lag-records" {_num(records, _records(records))}</td>'
               f'<td class="num" data-field="lag-seconds" {_num(obs.lag.seconds, fmt_duration(obs.lag.seconds))}</td>')
        status = _status_badge(v.status, obs.status.reason)
    alerts = "".join(f'<div class="alert" data-alert="{escape(a.code)}">{escape(a.code)}: {escape(a.message)}</div>'
                     for a in v.alerts)
    head, loss = _headroom(v)
    observed = "" if obs is None else f' data-observed-at="{obs.observed_at_ms}"'
    return (f'<tr data-job="{name}"{observed}><td><a href="{escape(_job_href(base, v.spec.name))}">{name}</a></td>'
            f"{_driver(v)}{_verdict(v)}{lag}<td>{status}{alerts}</td>{head}{loss}{_restart(v)}"
            f'<td><a data-field="restart-link" href="{escape(_job_href(base, v.spec.name))}/restart">'
            "safe restart…</a></td></tr>")


HEADER = ("<tr><th>Job</th><th>Application / driver</th><th>Last verdict</th><th>Lag (records)</th>"
          "<th>Lag (time)</th><th>Status</th><th>Headroom</th><th>Data loss at</th><th>Last safe restart</th>"
          "<th></th></tr>")


def jobs_page(views: Sequence[JobView], *, base: str, generated_at_ms: int, registry_path: str) -> str:
    rows = "".join(_row(v, base) for v in views) or '<tr><td colspan="10">no jobs in the registry</td></tr>'
    body = (f'<h1>Streaming jobs</h1><div class="muted">observed {escape(utc_display(generated_at_ms))} · '
            f"registry {escape(registry_path)} · lag, status and headroom from the checkpoint and the broker now "
            f'(as <code>aks lag</code>)</div><table id="jobs">{HEADER}{rows}</table>')
    return _page("Streaming jobs", body)


# --------------------------------------------------------------------------------------------------
# the job page: the row, the history chart, partitions
# --------------------------------------------------------------------------------------------------


def svg_chart(points: Sequence[HistoryPoint], attr: str, label: str, *, seconds: bool, width: int = 640,
              height: int = 160) -> str:
    """A small line chart of one series (``lag_records``, ``lag_seconds`` or ``headroom_s``); dots coloured
    by the run's status. Points without a value (unknown, infinite headroom) are left out, and said so."""
    vals = [(p, getattr(p, attr)) for p in points]
    known = [(p, float(v)) for p, v in vals if v is not None]
    pad_l, pad_b, pad_t = 70, 22, 10
    if not known:
        return (f'<figure data-chart="{escape(attr)}"><figcaption>{escape(label)}</figcaption>'
                '<div class="muted">no values yet</div></figure>')
    t0, t1 = min(p.at_ms for p, _ in known), max(p.at_ms for p, _ in known)
    top = max(v for _, v in known) or 1.0
    span = max(t1 - t0, 1)

    def xy(p: HistoryPoint, v: float) -> tuple[float, float]:
        x = pad_l + (width - pad_l - 10) * ((p.at_ms - t0) / span if t1 > t0 else 0.5)
        y = pad_t + (height - pad_t - pad_b) * (1 - v / top)
        return round(x, 1), round(y, 1)

    coords = [xy(p, v) for p, v in known]
    line = " ".join(f"{x},{y}" for x, y in coords)
    dots = "".join(f'<circle cx="{x}" cy="{y}" r="3.5" fill="{STATUS_COLORS.get(p.status, "#4a5568")}">'
                   f"<title>{escape(utc_display(p.at_ms))}: {escape(fmt_duration(v) if seconds else f'{v:,.0f}')}"
                   f" ({escape(p.status)})</title></circle>" for (p, v), (x, y) in zip(known, coords, strict=True))
    top_txt = fmt_duration(top) if seconds else f"{top:,.0f}"
    skipped = len(vals) - len(known)
    note = f'<div class="muted">{skipped} point(s) without a value (unknown or ∞)</div>' if skipped else ""
    return (f'<figure data-chart="{escape(attr)}" data-points="{len(known)}"><figcaption>{escape(label)}</figcaption>'
            f'<svg width="{width}" height="{height}" role="img" aria-label="{escape(label)}">'
            f'<line x1="{pad_l}" y1="{height - pad_b}" x2="{width - 10}" y2="{height - pad_b}" stroke="#a0aec0"/>'
            f'<line x1="{pad_l}" y1="{pad_t}" x2="{pad_l}" y2="{height - pad_b}" stroke="#a0aec0"/>'
            f'<text x="{pad_l - 6}" y="{pad_t + 10}" text-anchor="end" font-size="11">{escape(top_txt)}</text>'
            f'<text x="{pad_l - 6}" y="{height - pad_b}" text-anchor="end" font-size="11">0</text>'
            f'<text x="{pad_l}" y="{height - 4}" font-size="11">{escape(utc_display(t0))}</text>'
            f'<text x="{width - 10}" y="{height - 4}" text-anchor="end" font-size="11">{escape(utc_display(t1))}</text>'
            f'<polyline points="{line}" fill="none" stroke="#2b6cb0" stroke-width="2"/>{dots}</svg>{note}</figure>')


def job_page(v: JobView, *, base: str) -> str:
    obs = v.observation
    parts = ""
    if obs is not None:
        head = obs.headroom.by_tp()
        prow = []
        for p in obs.lag.partitions:
            h = head.get(p.tp)
            h_txt = "-" if h is None else "∞" if h.infinite else fmt_duration(h.seconds)
            prow.append(f'<tr data-partition="{escape(str(p.tp))}"><td>{escape(str(p.tp))}</td>'
                        f'<td class="num">{_records(p.position)}</td><td class="num">{_records(p.log_start)}</td>'
                        f'<td class="num">{_records(p.log_end)}</td><td class="num">{_records(p.records)}</td>'
                        f'<td class="num">{escape(fmt_duration(p.seconds))}</td>'
                        f'<td class="num">{escape(h_txt)}</td></tr>')
        parts = ("<h2>Partitions</h2><table><tr><th>Partition</th><th>Position</th><th>Log start</th><th>Log end</th>"
                 f"<th>Lag</th><th>Lag (time)</th><th>Headroom</th></tr>{''.join(prow)}</table>"
                 + "".join(f'<div class="muted">note: {escape(n)}</div>' for n in [*obs.status.notes, *obs.notes]))
    charts = (svg_chart(v.history, "lag_records", "Lag (records)", seconds=False)
              + svg_chart(v.history, "lag_seconds", "Lag (time)", seconds=True)
              + svg_chart(v.history, "headroom_s", "Retention headroom (time to data loss)", seconds=True))
    body = (f'<div><a href="{escape(base)}/">← all streaming jobs</a></div><h1>Streaming job {escape(v.spec.name)}</h1>'
            f'<table id="jobs">{HEADER}{_row(v, base)}</table>'
            f'<h2>History</h2><div class="muted">the audit\'s last runs ({len(v.history)} point(s), the last one '
            f"is now)</div>{charts}{parts}")
    return _page(f"Streaming job {v.spec.name}", body)


# --------------------------------------------------------------------------------------------------
# the safe-restart form
# --------------------------------------------------------------------------------------------------


RESTART_SCRIPT = """
document.getElementById('restart').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const f = ev.target, out = document.getElementById('result');
  const conf = {job: f.dataset.job, mode: f.mode.value, dry_run: f.dry_run.checked,
                reason: f.reason.value || null, backup_id: f.backup_id.value || null,
                datetime: f.datetime.value || null};
  out.textContent = 'triggering…';
  const r = await fetch(f.dataset.api, {method: 'POST', credentials: 'same-origin',
    headers: {'Content-Type': 'application/json'}, body: JSON.stringify({logical_date: null, conf})});
  const doc = await r.json().catch(() => ({}));
  if (r.ok) {
    const a = document.createElement('a');
    a.href = f.dataset.runs + encodeURIComponent(doc.dag_run_id); a.target = '_top'; a.textContent = doc.dag_run_id;
    out.replaceChildren('started run ', a);
  } else {
    out.textContent = 'refused (' + r.status + '): ' + (typeof doc.detail === 'string' ? doc.detail
                                                         : JSON.stringify(doc.detail || doc));
  }
});
"""


def restart_form(job: str, *, base: str) -> str:
    """The safe-restart trigger form with the job filled in.

    Airflow 3.3's own trigger form cannot be prefilled from a URL (its routes have no trigger page), so
    this form posts the same ``conf`` to Airflow's REST API (``POST /api/v2/dags/<id>/dagRuns``) with
    the signed-in user's own session: Airflow checks that user's right to trigger the DAG, and the
    DAG's params validate the values exactly as they do for the built-in form.
    """
    modes = "".join(f'<option value="{escape(str(m))}">{escape(str(m))}</option>' for m in RestartMode)
    dag = quote(SAFE_RESTART_DAG_ID)
    body = (f'<div><a href="{escape(_job_href(base, job))}">← job {escape(job)}</a></div>'
            f"<h1>Safe restart of {escape(job)}</h1>"
            f'<div class="muted">triggers the <a href="/dags/{dag}" target="_top">{SAFE_RESTART_DAG_ID}</a> DAG; '
            "its plan, backup and verdict steps decide what actually happens</div>"
            f'<form id="restart" data-job="{escape(job)}" data-api="/api/v2/dags/{dag}/dagRuns" '
            f'data-runs="/dags/{dag}/runs/">'
            f'<label>Job</label><input name="job" value="{escape(job)}" readonly>'
            f'<label for="mode">Mode</label><select name="mode" id="mode">{modes}</select>'
            '<label for="backup_id">Backup id (mode restore)</label><input name="backup_id" id="backup_id">'
            '<label for="datetime">Date and time (mode reset-to-datetime, ISO-8601)</label>'
            '<input name="datetime" id="datetime">'
            '<label for="reason">Reason</label><input name="reason" id="reason" maxlength="500">'
            '<label><input type="checkbox" name="dry_run" checked> Dry run (plan only, change nothing)</label>'
            '<button type="submit">Trigger</button></form><p id="result" role="status"></p>'
            f"<script>{RESTART_SCRIPT}</script>")
    return _page(f"Safe restart of {job}", body)


def not_found(message: str) -> str:
    return _page("Not found", f"<h1>Not found</h1><p>{escape(message)}</p>")

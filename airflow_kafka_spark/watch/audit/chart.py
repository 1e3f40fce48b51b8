"""The audit's PNG: lag (records, seconds) and retention headroom per job over the last runs.

matplotlib is imported inside :func:`render_chart` only: ``aks`` and the DAG parse must not pay for it.
It is the ``[chart]`` extra, not a dependency: an Airflow image without it still audits, and the
report degrades to JSON + Markdown without the PNG (:func:`chart_available`; the report step says so
in one line).
"""

from __future__ import annotations

import io
import threading
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow_kafka_spark._util.text import fmt_duration, utc_display
from airflow_kafka_spark.errors import UserError

MAX_CHART_JOBS = 12
STATUS_COLORS = {
    "OK": "#2e7d32", "IDLE": "#78909c", "UNKNOWN": "#9e9e9e", "WARN": "#ef6c00",
    "STALLED": "#e53935", "STOPPED": "#6d0000", "REWIND": "#8e24aa", "ERROR": "#212121",
}


CHART_MISSING = "no PNG chart: matplotlib is not installed (pip install 'airflow-kafka-spark[chart]')"


def chart_available() -> bool:
    """Whether :func:`render_chart` can draw (matplotlib, the ``[chart]`` extra, is importable)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _load() -> None:
    """Import matplotlib with the Agg backend (~0.5 s of CPU: worth starting early, see :func:`warm_up`)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.dates
    import matplotlib.pyplot


def warm_up() -> threading.Thread | None:
    """Import matplotlib in a background thread while the jobs are audited (their Kafka waits hide it)."""
    if not chart_available():
        return None
    thread = threading.Thread(target=_load, name="aks-chart-import", daemon=True)
    thread.start()
    return thread


_UNITS = (("s", 1.0), ("min", 60.0), ("h", 3600.0), ("d", 86400.0))


def _duration_unit(values: Sequence[float]) -> tuple[str, float]:
    """The unit that keeps the largest value between 1 and ~100: readable ticks (5 min, not 300 s)."""
    top = max((v for v in values if v is not None), default=0.0)
    for name, size in reversed(_UNITS):
        if top >= 2 * size:
            return name, size
    return "s", 1.0


def render_chart(runs: Sequence[Mapping[str, Any]], *, title: str | None = None) -> bytes:
    """PNG of lag (records, seconds) and retention headroom per job over ``runs`` (oldest first).

    One row per job (failing jobs first, at most :data:`MAX_CHART_JOBS`), three panels per row.
    Points are coloured by the status of that run; the headroom panel shades the zone below the
    job's ``min_headroom_s``. Infinite headroom (nothing retention could delete) is written, not
    drawn. Each duration panel picks its own unit so the ticks are round numbers.
    """
    if not chart_available():
        raise UserError(CHART_MISSING)
    _load()
    import matplotlib.pyplot as plt

    runs = sorted(runs, key=lambda r: r["at_ms"])
    last = runs[-1]["jobs"] if runs else {}
    jobs = sorted({j for r in runs for j in r.get("jobs", {})},
                  key=lambda j: (not (last.get(j) or {}).get("failed", False), j))
    shown = jobs[:MAX_CHART_JOBS]
    rows = max(1, len(shown))
    # Not ``sharex``: 36 shared axes re-propagate every limit change to each other (quadratic, most of
    # the drawing time); the same limits and locator are set on each axis below instead.
    fig, axes = plt.subplots(rows, 3, figsize=(14, 1.3 + 2.2 * rows), squeeze=False)
    panels = (("lag_records", "lag (records)"), ("lag_seconds", "lag (age of the oldest unread record)"),
              ("headroom_s", "retention headroom (time to data loss)"))

    row_labels: list[tuple[Any, str, str]] = []
    for row, job in enumerate(shown):
        entry = last.get(job) or {}
        status = str(entry.get("status", "?"))
        failed = bool(entry.get("failed"))
        label = f"{job}\n{status}"
        if failed:
            label += "\nFAIL:\n" + "\n".join(entry.get("alerts") or [])
        for col, (key, name) in enumerate(panels):
            _draw_panel(axes[row][col], runs, job, entry, key, name if row == 0 else None)
        row_labels.append((axes[row][0], label, "#c62828" if failed else STATUS_COLORS.get(status, "#212121")))
    if not shown:
        for ax in axes[0]:
            ax.text(0.5, 0.5, "no jobs", transform=ax.transAxes, ha="center", va="center")
    _time_axes(axes, runs)
    hidden = len(jobs) - len(shown)
    heading = title or "Streaming audit"
    if runs:
        failing = sum(1 for e in last.values() if e.get("failed"))
        heading += (f" — {utc_display(runs[-1]['at_ms'])} — {len(last)} job(s), {failing} failing — "
                    f"last {len(runs)} run(s), times in UTC")
    if hidden:
        heading += f" (+{hidden} more jobs in the report)"
    fig.suptitle(heading, fontsize=11)
    handles = [plt.Line2D([], [], marker="o", linestyle="", color=c, label=s)
               for s, c in STATUS_COLORS.items() if s != "UNKNOWN"]
    handles.append(plt.Line2D([], [], marker="o", linestyle="", markerfacecolor="none", markeredgecolor="#c62828",
                              markersize=9, label="run in which the job failed the audit"))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, frameon=False,
               title="status of the job at each run", title_fontsize=8, bbox_to_anchor=(0.5, 0.0))
    # Fixed margins (in inches, turned into fractions) instead of tight_layout: same result for this
    # regular grid, and tight_layout alone took seconds per chart on a small worker.
    height = fig.get_figheight()
    fig.subplots_adjust(left=0.15, right=0.985, top=1 - 0.75 / height, bottom=1.0 / height, hspace=0.18,
                        wspace=0.2)
    for ax, text, color in row_labels:   # job names in the left margin, after the layout is fixed
        box = ax.get_position()
        fig.text(0.008, (box.y0 + box.y1) / 2, text, ha="left", va="center", fontsize=9, fontweight="bold",
                 color=color)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, pil_kwargs={"compress_level": 1})   # zlib level 6: 0.2 s more
    plt.close(fig)
    return buf.getvalue()


def _draw_panel(ax: Any, runs: Sequence[Mapping[str, Any]], job: str, entry: Mapping[str, Any], key: str,
                title: str | None) -> None:
    """One panel: ``job``'s ``key`` over the runs, coloured by status, with the headroom limit shaded."""
    from matplotlib.ticker import MaxNLocator

    pts: list[tuple[datetime, float, str, bool]] = []
    for r in runs:
        e = r.get("jobs", {}).get(job)
        if e is not None and e.get(key) is not None:
            pts.append((datetime.fromtimestamp(r["at_ms"] / 1000, tz=UTC), float(e[key]),
                        STATUS_COLORS.get(str(e.get("status")), "#616161"), bool(e.get("failed"))))
    limit = entry.get("min_headroom_s") if key == "headroom_s" else None
    unit, size = ("", 1.0) if key == "lag_records" else _duration_unit(
        [p[1] for p in pts] + ([float(limit)] if limit else []))
    ys = [p[1] / size for p in pts]
    if pts:
        ax.plot([p[0] for p in pts], ys, color="#90a4ae", linewidth=1.2, zorder=1)
        ax.scatter([p[0] for p in pts], ys, c=[p[2] for p in pts], s=30, zorder=2, clip_on=False)
        bad = [(p[0], y) for p, y in zip(pts, ys, strict=True) if p[3]]
        if bad:   # runs in which this job failed the audit: a red ring
            ax.scatter([b[0] for b in bad], [b[1] for b in bad], s=90, facecolors="none",
                       edgecolors="#c62828", linewidths=1.4, zorder=3, clip_on=False)
    top = max([*ys, (float(limit) / size) if limit else 0.0, 1e-9])
    ax.set_ylim(0, top * 1.18 if top > 1e-9 else 1)
    if limit:
        ax.axhline(limit / size, color="#c62828", linestyle="--", linewidth=1)
        ax.axhspan(0, limit / size, color="#ffcdd2", alpha=0.5, zorder=0)
        ax.text(0.01, limit / size, f" min {fmt_duration(limit)}", transform=ax.get_yaxis_transform(),
                color="#c62828", fontsize=7, va="bottom")
    if key == "headroom_s" and entry.get("headroom_infinite") and not pts:
        ax.text(0.5, 0.5, "∞  retention cannot delete unread records", transform=ax.transAxes,
                ha="center", va="center", fontsize=9, color="#455a64")
    elif not pts:
        ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center", fontsize=9,
                color="#9e9e9e")
    ax.yaxis.set_major_locator(MaxNLocator(nbins=4, integer=key == "lag_records"))
    if unit:
        ax.set_ylabel(unit, fontsize=8)
    ax.grid(True, alpha=0.3)
    ax.tick_params(labelsize=7)
    if title is not None:
        ax.set_title(title, fontsize=10)


def _time_axes(axes: Any, runs: Sequence[Mapping[str, Any]]) -> None:
    """One time axis for every panel, even those without points (infinite headroom); dates on the last row."""
    import matplotlib.dates as mdates

    if runs:
        first = datetime.fromtimestamp(runs[0]["at_ms"] / 1000, tz=UTC)
        newest = datetime.fromtimestamp(runs[-1]["at_ms"] / 1000, tz=UTC)
        span = newest - first
        pad = span * 0.05 if span > timedelta(0) else timedelta(minutes=30)   # one run: an hour around it
        for ax in axes.flat:
            ax.set_xlim(first - pad, newest + pad)
    for row, row_axes in enumerate(axes):
        for ax in row_axes:
            locator = mdates.AutoDateLocator(minticks=2, maxticks=7, tz=UTC)
            ax.xaxis.set_major_locator(locator)
            if row == len(axes) - 1:
                ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, tz=UTC))
            else:
                ax.tick_params(labelbottom=False)

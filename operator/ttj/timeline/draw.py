"""The timeline as a picture, like the paper's Figure 1: pod lifetimes per slot, the global step, the cost.

Needs matplotlib (``pip install 'ttj[viz]'``); imported only when a picture is drawn.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ttj.timeline.model import DeadlineTrack, PodSpan, Timeline
from ttj.timeline.text import cost_line
from ttj_contract import Role

PENDING, RUNNING, CHIEF, LOST = "#e0e0e0", "#90caf9", "#6a1b9a", "#ef6c00"
OUTCOME_COLOURS = {
    "succeeded": "#2e7d32",
    "failed": "#c62828",
    "preempted": LOST,
    "migrated": "#1565c0",
    "deleted": "#757575",
}
EVALUATION = "#ad1457"
DEADLINE, ETA, SPOT, ON_DEMAND = "#37474f", "#00838f", "#1565c0", "#d84315"
#: The time axis stretches to a deadline at most this many times the run's length away.
DEADLINE_REACH = 3.0
#: Evaluations labelled with their metrics on the picture (the latest ones; more would overlap).
MAX_LABELLED_EVALUATIONS = 6
#: Drawing order: bars, then the chief's bar on them, then every marker on top of both.
Z_BAR, Z_GAP, Z_CHIEF, Z_MARKER = 2, 2.5, 3, 5


def draw(timeline: Timeline, path: Path, title: str) -> Path:
    """Write the picture to ``path`` (PNG, SVG or PDF by its suffix)."""
    import matplotlib.pyplot as plt

    fig = figure(timeline, title)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def figure(timeline: Timeline, title: str) -> Any:
    """The picture as a matplotlib Figure (the caller closes it): the pods' lanes, the global step, for a job
    with a deadline the uniform line and the workers running, and once the job is priced the money, over one
    time axis."""
    import matplotlib

    matplotlib.use("Agg")
    end = _right_edge(timeline)
    fig, axes = _panels(with_workers=timeline.deadline is not None, with_cost=bool(timeline.cost))
    _draw_lanes(axes[0], timeline, end, title)
    _draw_steps(axes[1], timeline)
    if timeline.deadline is not None:
        _draw_deadline(axes[1], timeline.deadline)
        _draw_workers(axes[2], timeline)
    for axis in axes:
        _draw_preemption_lines(axis, timeline)
        _draw_deadline_moves(axis, timeline)
    if timeline.cost:
        _draw_money(axes[-1], timeline)
    axes[-1].set_xlim(left=0)
    _reach_the_deadline(axes, timeline, end)
    axes[-1].set_xlabel("seconds since the job was applied")
    return fig


def _right_edge(timeline: Timeline) -> float:
    """The latest time anything in the timeline happened (at least 1 s)."""
    return max(
        [timeline.end, 1.0]
        + [s.ended or 0.0 for s in timeline.pods.values()]
        + [t for t, _ in timeline.steps]
        + [t for t, _ in timeline.cost]
    )


def _reach_the_deadline(axes: Any, timeline: Timeline, end: float) -> None:
    """The time axis reaches the deadline and the ETA when they are near (within :data:`DEADLINE_REACH` times
    what the job has run); a farther deadline would squeeze the run to a sliver, so it is named at the right
    edge instead."""
    track = timeline.deadline
    if track is None:
        return
    ahead = max([track.at, *(track.eta or ())])
    if ahead <= end:
        return
    if ahead <= DEADLINE_REACH * end:
        axes[-1].set_xlim(right=ahead * 1.03)
        return
    axes[-1].set_xlim(right=end * 1.03)
    axes[1].annotate(
        f"deadline at {track.at:.0f} s →",
        (1.0, 0.02),
        xycoords="axes fraction",
        ha="right",
        fontsize=8,
        color=DEADLINE,
    )


def _panels(*, with_workers: bool, with_cost: bool) -> tuple[Any, Any]:
    """The figure and its panels stacked on a shared time axis: lanes, global step, workers running for a job
    with a deadline, and money when priced."""
    import matplotlib.pyplot as plt

    ratios = [3.0, 2.0] + ([1.4] if with_workers else []) + ([1.4] if with_cost else [])
    return plt.subplots(
        len(ratios),
        1,
        figsize=(11, 6.5 + 1.5 * (len(ratios) - 2)),
        sharex=True,
        gridspec_kw={"height_ratios": ratios},
        constrained_layout=True,
    )


# -- the lanes: one row per worker slot or parameter server ---------------------------------------------------
def _draw_lanes(lanes: Any, timeline: Timeline, end: float, title: str) -> None:
    spans = sorted(timeline.pods.values(), key=lambda s: (s.role != Role.PS, s.slot or 0, s.created))
    rows = list(dict.fromkeys(span.lane for span in spans))
    for span in spans:
        y = rows.index(span.lane)
        stop = span.ended if span.ended is not None else end
        _draw_pod_bar(lanes, span, y, stop)
        if span.group is not None:  # which kind of node the worker was made for
            lanes.annotate(span.group, (span.created, y - 0.34), fontsize=7, color="#424242", zorder=Z_MARKER)
        _draw_chief_terms(lanes, timeline, span, y, stop)
        _draw_outcome(lanes, span, y, stop)
    _draw_empty_slots(lanes, timeline, rows, end)
    lanes.set_yticks(range(len(rows)), rows)
    lanes.set_ylim(len(rows) - 0.4, -0.7)
    lanes.set_title(title)
    _lanes_legend(lanes)


def _draw_pod_bar(lanes: Any, span: PodSpan, y: int, stop: float) -> None:
    """Pending from creation, running from when it ran; never-run pods wait for capacity the whole time."""
    if span.running is None:
        lanes.barh(y, stop - span.created, left=span.created, height=0.6, color=PENDING, zorder=Z_BAR)
        return
    lanes.barh(y, stop - span.running, left=span.running, height=0.6, color=RUNNING, edgecolor="#1565c0", zorder=Z_BAR)
    if span.running > span.created:
        lanes.barh(y, span.running - span.created, left=span.created, height=0.6, color=PENDING, zorder=Z_BAR)


def _draw_chief_terms(lanes: Any, timeline: Timeline, span: PodSpan, y: int, stop: float) -> None:
    """A thinner bar over the pod while it held the Lease, from its election to the next (or its end)."""
    for index, (elected, epoch, pod) in enumerate(timeline.chiefs):
        if pod != span.name:
            continue
        until = timeline.chiefs[index + 1][0] if index + 1 < len(timeline.chiefs) else stop
        lanes.barh(y, max(0.0, min(until, stop) - elected), left=elected, height=0.25, color=CHIEF, zorder=Z_CHIEF)
        lanes.annotate(f"chief e{epoch}", (elected, y + 0.38), fontsize=8, color=CHIEF, zorder=Z_MARKER)


def _draw_outcome(lanes: Any, span: PodSpan, y: int, stop: float) -> None:
    """How the pod ended, at its end: an X for a preemption, a bar for anything else."""
    if span.ended is None or span.outcome == "running":
        return
    marker = "X" if span.outcome == "preempted" else "|"
    lanes.plot(
        stop,
        y,
        marker=marker,
        color=OUTCOME_COLOURS.get(span.outcome, "black"),
        markeredgecolor="white" if marker == "X" else None,
        markersize=12,
        linestyle="",
        zorder=Z_MARKER,
    )


def _draw_empty_slots(lanes: Any, timeline: Timeline, rows: list[str], end: float) -> None:
    """Hatched while a slot stood empty after a loss, over the replacement's pending bar."""
    for start, gap_end, lane in timeline.gaps:
        if lane in rows:
            lanes.barh(
                rows.index(lane),
                (gap_end if gap_end is not None else end) - start,
                left=start,
                height=0.6,
                facecolor="none",
                hatch="///",
                edgecolor=LOST,
                linewidth=0,
                zorder=Z_GAP,
            )


def _lanes_legend(lanes: Any) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch, Rectangle

    handles = [
        Rectangle((0, 0), 1, 1, color=PENDING, label="pending"),
        Rectangle((0, 0), 1, 1, color=RUNNING, label="running"),
        Rectangle((0, 0), 1, 1, color=CHIEF, label="chief"),
        Patch(facecolor="white", edgecolor=LOST, hatch="///", label="slot empty"),
        Line2D([], [], marker="X", color=LOST, linestyle="", label="preempted"),
    ]
    lanes.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)


# -- the global step, with checkpoints, evaluations, the export and the chief epochs ---------------------------
def _draw_steps(steps: Any, timeline: Timeline) -> None:
    if timeline.steps:
        times, values = zip(*timeline.steps, strict=True)
        steps.plot(times, values, color="#1565c0", marker="." if len(times) < 30 else None, label="global step")
    if timeline.checkpoints:
        times, values = zip(*timeline.checkpoints, strict=True)
        steps.plot(times, values, "o", color="#2e7d32", markersize=4, label="checkpoint", zorder=Z_MARKER)
    _draw_evaluations(steps, timeline)
    if timeline.export is not None:
        exported_at = timeline.export[0]
        steps.axvline(exported_at, color=EVALUATION, linestyle="-.", linewidth=1)
        steps.annotate("model exported", (exported_at, 0), fontsize=8, color=EVALUATION, rotation=90, ha="right")
    for when, epoch, _pod in timeline.chiefs[1:]:
        steps.axvline(when, color=CHIEF, linestyle=":", linewidth=1)
        steps.annotate(f"epoch {epoch}", (when, 0), fontsize=8, color=CHIEF)
    steps.set_ylabel("global step")
    steps.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)


def _draw_evaluations(steps: Any, timeline: Timeline) -> None:
    """A star at each evaluation's step; the latest labelled with their first two metrics."""
    if not timeline.evaluations:
        return
    times, values = zip(*((when, step) for when, step, _ in timeline.evaluations), strict=True)
    steps.plot(times, values, "*", color=EVALUATION, markersize=9, label="evaluation", zorder=Z_MARKER)
    for when, step, metrics in timeline.evaluations[-MAX_LABELLED_EVALUATIONS:]:
        shown = ", ".join(f"{name}={value:.3g}" for name, value in list(metrics.items())[:2])
        steps.annotate(
            shown,
            (when, step),
            fontsize=7,
            color=EVALUATION,
            xytext=(-6, 2),  # left of the star: the latest is at the picture's right edge
            textcoords="offset points",
            ha="right",
        )


def _draw_preemption_lines(axis: Any, timeline: Timeline) -> None:
    for when, _what in timeline.preemptions:
        axis.axvline(when, color=LOST, linestyle="--", linewidth=1, zorder=1)


# -- the deadline: the uniform line, the ETA, the policy's moves and the workers running -------------------------
def _draw_deadline(steps: Any, track: DeadlineTrack) -> None:
    """The straight line from the start to trainSteps at the deadline that the progress should stay on or above,
    the deadline, and the ETA (p50 to p90) at trainSteps."""
    steps.plot(
        [track.started, track.at],
        [0, track.steps_total],
        color=DEADLINE,
        linestyle="--",
        linewidth=1.2,
        label="uniform progress",
    )
    steps.axvline(track.at, color=DEADLINE, linewidth=1.5)
    steps.annotate(f"deadline ({track.state or 'open'})", (track.at, 0), fontsize=8, color=DEADLINE, ha="right")
    if track.eta is not None:
        p50, p90 = track.eta
        steps.plot([p50, p90], [track.steps_total] * 2, color=ETA, linewidth=3, solid_capstyle="butt", label="ETA")
        steps.plot([p50], [track.steps_total], "|", color=ETA, markersize=12, zorder=Z_MARKER)
    steps.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)


def _draw_deadline_moves(axis: Any, timeline: Timeline) -> None:
    """A line at each catch-up worker added (up) or released (down), and where the deadline was found
    infeasible."""
    if timeline.deadline is None:
        return
    for move in timeline.deadline.moves:
        colour = {"DeadlineEscalated": ON_DEMAND, "DeadlineReleased": SPOT}.get(move.reason, LOST)
        axis.axvline(move.time, color=colour, linestyle="-.", linewidth=1, zorder=1)


def _draw_workers(workers: Any, timeline: Timeline) -> None:
    """Workers running over time, other (spot) and catch-up, and the catch-up workers the policy held, until
    the newest time known (not out to a deadline still ahead)."""
    track = timeline.deadline
    assert track is not None
    counts = timeline.workers_running(track.catch_up_group)
    end = max(timeline.end, counts[-1][0])
    counts.append((end, counts[-1][1], counts[-1][2]))
    times = [t for t, _, _ in counts]
    workers.step(times, [n for _, n, _ in counts], where="post", color=SPOT, label="spot workers running")
    workers.step(times, [n for _, _, n in counts], where="post", color=ON_DEMAND, label="catch-up workers running")
    held = track.held(end)
    workers.step(
        [t for t, _ in held],
        [n for _, n in held],
        where="post",
        color=ON_DEMAND,
        linestyle=":",
        label=f"catch-up held ({track.catch_up_group or 'group'})",
    )
    for move in track.moves:
        if move.change:
            workers.annotate(f"{move.change:+d}", (move.time, max(0, move.held or 0)), fontsize=8, color=ON_DEMAND)
    workers.set_ylabel("workers")
    workers.set_ylim(bottom=0)
    workers.yaxis.get_major_locator().set_params(integer=True)
    workers.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)


# -- the money ---------------------------------------------------------------------------------------------------
def _draw_money(money: Any, timeline: Timeline) -> None:
    """US dollars paid, against the on-demand equivalent, under the cost line of the text."""
    times, values = zip(*timeline.cost, strict=True)
    money.plot(times, values, color="#00695c", marker="." if len(times) < 30 else None, label="paid (USD)")
    on_demand = float(timeline.cost_status.get("onDemandEquivalentUSD") or 0.0)
    if on_demand > 0:
        money.plot([times[0], times[-1]], [0.0, on_demand], color="#9e9e9e", linestyle="--", label="on-demand")
    money.set_ylabel("US dollars")
    money.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    money.set_title(cost_line(timeline).replace("$", r"\$"), fontsize=9, loc="left")  # not mathtext

"""A run's timeline, recorded from what the cluster shows, and drawn like the paper's Figure 1.

The recorder only folds observations (pods, the job's status) into plain records; it knows
nothing about how they were fetched, so the demo and the end-to-end tests share it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ttj_contract import LABEL_ROLE, LABEL_SLOT, Role


@dataclass
class PodSpan:
    """One pod's life as the recorder saw it, in seconds since the run began."""

    name: str
    role: str
    slot: int | None
    node: str | None = None
    created: float = 0.0
    running: float | None = None
    ended: float | None = None
    outcome: str = "running"  # running | succeeded | failed | preempted | deleted


@dataclass
class Timeline:
    """Everything the summary and the picture need."""

    pods: dict[str, PodSpan] = field(default_factory=dict)
    steps: list[tuple[float, int]] = field(default_factory=list)
    checkpoints: list[tuple[float, int]] = field(default_factory=list)
    chiefs: list[tuple[float, int, str]] = field(default_factory=list)  # (time, epoch, pod)
    preemptions: list[tuple[float, str]] = field(default_factory=list)  # (time, what was hit)
    phases: list[tuple[float, str]] = field(default_factory=list)

    def observe_pod(self, now: float, pod: dict[str, Any]) -> None:
        """Fold one pod as listed from the API into its span."""
        meta = pod.get("metadata", {})
        labels = meta.get("labels") or {}
        name = meta["name"]
        slot = labels.get(LABEL_SLOT)
        span = self.pods.get(name)
        if span is None:
            span = self.pods[name] = PodSpan(
                name=name, role=labels.get(LABEL_ROLE, "?"), slot=int(slot) if slot is not None else None, created=now
            )
        status = pod.get("status") or {}
        span.node = (pod.get("spec") or {}).get("nodeName") or span.node
        phase = status.get("phase")
        if phase == "Running" and span.running is None:
            span.running = now
        if phase in ("Succeeded", "Failed") and span.ended is None:
            span.ended = now
            reason = status.get("reason") or ""
            preempted = reason in ("Terminated", "Shutdown", "NodeShutdown") or any(
                c.get("type") == "DisruptionTarget" and c.get("status") == "True"
                for c in status.get("conditions") or []
            )
            span.outcome = "preempted" if preempted else ("succeeded" if phase == "Succeeded" else "failed")

    def observe_gone(self, now: float, present: set[str]) -> None:
        """Pods no longer listed have ended (deleted by the operator, or gone with their node)."""
        for name, span in self.pods.items():
            if name not in present and span.ended is None:
                span.ended = now
                span.outcome = "deleted"

    def observe_status(self, now: float, status: dict[str, Any]) -> None:
        """Fold the job's status: step, checkpoints, chief epochs, phase."""
        progress = status.get("progress") or {}
        step = progress.get("globalStep")
        if isinstance(step, int) and (not self.steps or self.steps[-1][1] != step):
            self.steps.append((now, step))
        checkpoint = progress.get("checkpointStep")
        if isinstance(checkpoint, int) and (not self.checkpoints or self.checkpoints[-1][1] != checkpoint):
            self.checkpoints.append((now, checkpoint))
        chief = status.get("chief") or {}
        if chief.get("pod") and (not self.chiefs or self.chiefs[-1][1] != chief.get("epoch")):
            self.chiefs.append((now, int(chief.get("epoch") or 0), str(chief["pod"])))
        phase = status.get("phase")
        if phase and (not self.phases or self.phases[-1][1] != phase):
            self.phases.append((now, phase))

    def steps_lost(self) -> int:
        """Global steps that went backwards (only a parameter-server loss should cause any)."""
        lost, peak = 0, 0
        for _, step in self.steps:
            if step < peak:
                lost += peak - step
                peak = step
            peak = max(peak, step)
        return lost


def draw(timeline: Timeline, path: Path, title: str) -> Path:
    """Write the run's picture: worker lifetimes per slot above, the global step below."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Rectangle

    end = max(
        [s.ended or 0.0 for s in timeline.pods.values()] + [t for t, _ in timeline.steps] + [1.0],
    )
    fig, (lanes, steps) = plt.subplots(
        2, 1, figsize=(11, 6.5), sharex=True, gridspec_kw={"height_ratios": [3, 2]}, constrained_layout=True
    )
    rows: list[str] = []
    colours = {"succeeded": "#2e7d32", "failed": "#c62828", "preempted": "#ef6c00", "deleted": "#757575"}
    for span in sorted(timeline.pods.values(), key=lambda s: (s.role != Role.PS, s.slot or 0, s.created)):
        row = "PS" if span.role == Role.PS else f"worker {span.slot}"
        if row not in rows:
            rows.append(row)
        y = rows.index(row)
        stop = span.ended if span.ended is not None else end
        if span.running is None:  # never ran: waiting for capacity the whole time
            lanes.barh(y, stop - span.created, left=span.created, height=0.6, color="#e0e0e0")
        else:
            lanes.barh(y, stop - span.running, left=span.running, height=0.6, color="#90caf9", edgecolor="#1565c0")
            if span.running > span.created:
                lanes.barh(y, span.running - span.created, left=span.created, height=0.6, color="#e0e0e0")
        if span.ended is not None and span.outcome != "running":
            marker = "X" if span.outcome == "preempted" else "|"
            lanes.plot(stop, y, marker=marker, color=colours.get(span.outcome, "black"), markersize=11)
        for index, (elected, epoch, pod) in enumerate(timeline.chiefs):
            if pod != span.name:
                continue
            until = timeline.chiefs[index + 1][0] if index + 1 < len(timeline.chiefs) else stop
            lanes.barh(y, min(until, stop) - elected, left=elected, height=0.25, color="#6a1b9a")
            lanes.annotate(f"chief e{epoch}", (elected, y + 0.35), fontsize=8, color="#6a1b9a")
    lanes.set_yticks(range(len(rows)), rows)
    lanes.invert_yaxis()
    lanes.set_title(title)
    handles = [
        Rectangle((0, 0), 1, 1, color="#e0e0e0", label="pending"),
        Rectangle((0, 0), 1, 1, color="#90caf9", label="running"),
        Rectangle((0, 0), 1, 1, color="#6a1b9a", label="chief"),
        Line2D([], [], marker="X", color="#ef6c00", linestyle="", label="preempted"),
    ]
    lanes.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    if timeline.steps:
        times, values = zip(*timeline.steps, strict=True)
        steps.step(times, values, where="post", color="#1565c0", label="global step")
    if timeline.checkpoints:
        times, values = zip(*timeline.checkpoints, strict=True)
        steps.plot(times, values, "o", color="#2e7d32", markersize=4, label="checkpoint")
    for when, _what in timeline.preemptions:
        steps.axvline(when, color="#ef6c00", linestyle="--", linewidth=1)
        lanes.axvline(when, color="#ef6c00", linestyle="--", linewidth=1)
    for when, epoch, _pod in timeline.chiefs[1:]:
        steps.axvline(when, color="#6a1b9a", linestyle=":", linewidth=1)
        steps.annotate(f"epoch {epoch}", (when, 0), fontsize=8, color="#6a1b9a")
    steps.set_xlabel("seconds since the job was applied")
    steps.set_ylabel("global step")
    steps.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

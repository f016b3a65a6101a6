"""The timeline as text, for a terminal: the lanes, the evaluations and the export, what happened when, what
each loss cost, the money."""

from __future__ import annotations

from ttj.planner.evaluation import evaluated_message, exported_message
from ttj.planner.stages.losses import describe
from ttj.timeline.model import Timeline
from ttj_contract import Role, format_usd


def _at(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:7.1f}s"


def cost_line(timeline: Timeline) -> str:
    """Paid, the on-demand equivalent, and the savings net of what preemptions cost, in one line."""
    cost, savings = timeline.cost_status, timeline.savings
    if not cost:
        return "cost: not accrued (the operator runs without prices)"
    paid = float(cost.get("usd") or 0.0)
    text = (
        f"paid {format_usd(paid)}, on-demand equivalent {format_usd(float(cost.get('onDemandEquivalentUSD') or 0.0))}"
    )
    if savings:
        loss = float(savings.get("preemptionLossUSD") or 0.0)
        text += f"; preemptions cost {format_usd(loss)}; saved {format_usd(float(savings.get('netUSD') or 0.0))} net"
        if savings.get("netPercent") is not None:
            text += f" ({float(savings['netPercent']):.1f} %)"
    return text


def deadline_lines(timeline: Timeline) -> list[str]:
    """The deadline, where the job stands against it, and each move of the policy."""
    track = timeline.deadline
    if track is None:
        return []
    lines = [
        f"deadline at {_at(track.at).strip()}: {track.state or 'not judged yet'}, "
        f"catch-up workers {track.catch_up_workers} (group {track.catch_up_group or '-'})"
        + ("" if track.slack_seconds is None else f", slack {float(track.slack_seconds):.0f} s")
        + ("" if track.eta is None else f", ETA p50 {_at(track.eta[0]).strip()} p90 {_at(track.eta[1]).strip()}")
    ]
    if timeline.steps:
        when, step = timeline.steps[-1]
        lines.append(
            f"  at {_at(when).strip()}: step {step} of {track.steps_total}, the uniform line asks "
            f"{track.uniform_steps(when):.0f}"
        )
    if track.condition is not None:
        status, reason, message = track.condition
        lines.append(f"  DeadlineAtRisk {status} ({reason}): {message}")
    spot, catch_up = _most_running(timeline)
    lines.append(f"  workers running at once, at most: {spot} others, {catch_up} catch-up")
    lines += [f"  {_at(move.time)}  {move.reason}: {move.message}" for move in track.moves]
    return lines


def _most_running(timeline: Timeline) -> tuple[int, int]:
    group = timeline.deadline.catch_up_group if timeline.deadline is not None else None
    counts = timeline.workers_running(group)
    return max(spot for _, spot, _ in counts), max(catch_up for _, _, catch_up in counts)


def render(timeline: Timeline, title: str) -> str:
    """The whole timeline as lines of text."""
    lines = [title, ""]
    lost = sum(1 for s in timeline.pods.values() if s.outcome == "preempted")
    empty = float(timeline.savings.get("slotEmptySeconds") or 0.0)
    step = timeline.steps[-1][1] if timeline.steps else 0
    lines.append(
        f"global step {step}, preemptions seen {lost}, chief epochs {len(timeline.chiefs)}, "
        f"steps lost {timeline.steps_lost()}, slot-empty time {empty:.0f} s"
    )
    lines.append(cost_line(timeline))
    lines += ["", "pods (seconds since the job was applied):"]
    spans = sorted(timeline.pods.values(), key=lambda s: (s.role != Role.PS, s.slot or 0, s.created))
    width = max((len(s.name) for s in spans), default=10)
    for span in spans:
        chief = [f"e{epoch}" for _, epoch, pod in timeline.chiefs if pod == span.name]
        lines.append(
            f"  {span.lane:<9} {span.name:<{width}}  created {_at(span.created)}  running {_at(span.running)}  "
            f"ended {_at(span.ended)}  {span.outcome}"
            + (f"  group {span.group}" if span.group else "")
            + (f"  chief {','.join(chief)}" if chief else "")
        )
    if timeline.deadline is not None:
        lines += ["", *deadline_lines(timeline)]
    if timeline.evaluations or timeline.export:
        lines += ["", "evaluation and the exported model:"]
        lines += [f"  {_at(when)}  {evaluated_message(step, metrics)}" for when, step, metrics in timeline.evaluations]
        if timeline.export:
            lines.append(f"  {_at(timeline.export[0])}  {exported_message(timeline.export[1])}")
    if timeline.events:
        lines += ["", "events the cluster still keeps:"]
        lines += [f"  {_at(when)}  {kind:<7} {reason}: {message}" for when, kind, reason, message in timeline.events]
    if timeline.losses:
        lines += ["", "what each loss cost:"]
        lines += [f"  {describe(record)}" for record in timeline.losses]
    return "\n".join(lines) + "\n"

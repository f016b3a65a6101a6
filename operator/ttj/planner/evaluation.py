"""What the chief's reports tell users as Events: a new evaluation (``Evaluated``) and the exported model
(``ModelExported``). ``ttj timeline`` reads these Events back, so their wording is written and parsed here only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ttj.api.models import ProgressStatus
from ttj.planner.actions import EVENT_MESSAGE_LIMIT, EmitEvent

EVALUATED = "Evaluated"
MODEL_EXPORTED = "ModelExported"

_EVALUATED = re.compile(r"^evaluated at global step (?P<step>\d+): (?P<metrics>.*)$")
_METRIC = re.compile(r"(?P<name>[^\s=,]+)=(?P<value>[-+0-9.e]+)(?:,|$| \(\+)")
_EXPORTED = re.compile(r"^the final model is exported to (?P<path>\S.*?) \(model\.keras and saved_model/\)$")


def evaluated_message(step: int, metrics: Mapping[str, float]) -> str:
    """``evaluated at global step 1000: accuracy=0.8123, loss=0.4567``, as many metrics as fit in an Event."""
    head = f"evaluated at global step {step}: "
    shown: list[str] = []
    for index, (name, value) in enumerate(metrics.items()):
        more = len(metrics) - index - 1
        item = f"{name}={value:.4g}"
        tail = f" (+{more} more)" if more else ""
        if len(head + ", ".join([*shown, item]) + tail) > EVENT_MESSAGE_LIMIT:
            return head + ", ".join(shown) + f" (+{len(metrics) - index} more)"
        shown.append(item)
    return head + (", ".join(shown) or "no metrics")


def parse_evaluated(message: str) -> tuple[int, dict[str, float]] | None:
    """The step and metrics of an Evaluated Event's message; None when it is not one."""
    found = _EVALUATED.match(message)
    if found is None:
        return None
    metrics = {m["name"]: float(m["value"]) for m in _METRIC.finditer(found["metrics"])}
    return int(found["step"]), metrics


def exported_message(path: str) -> str:
    return f"the final model is exported to {path} (model.keras and saved_model/)"


def parse_exported(message: str) -> str | None:
    """The path of a ModelExported Event's message; None when it is not one."""
    found = _EXPORTED.match(message)
    return found["path"] if found is not None else None


def progress_events(previous: ProgressStatus | None, progress: ProgressStatus | None) -> list[EmitEvent]:
    """Events for what the new status adds to the previous one: an evaluation at a new step, and the export
    path when it first appears (or changes). Planned with the status that holds them, so each is posted once
    its status is written, and planned again while that write has not happened."""
    if progress is None:
        return []
    before = previous or ProgressStatus()
    events: list[EmitEvent] = []
    if (
        progress.evaluation_step is not None
        and progress.evaluation is not None
        and progress.evaluation_step != before.evaluation_step
    ):
        events.append(EmitEvent("Normal", EVALUATED, evaluated_message(progress.evaluation_step, progress.evaluation)))
    if progress.export_path and progress.export_path != before.export_path:
        events.append(EmitEvent("Normal", MODEL_EXPORTED, exported_message(progress.export_path)))
    return events

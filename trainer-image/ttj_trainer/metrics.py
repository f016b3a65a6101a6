"""Prometheus metrics of one trainer process, served on POD_IP:TTJ_METRICS_PORT (0 turns them off)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from prometheus_client import Counter, Gauge, Histogram, start_http_server

from ttj_trainer.logs import event

if TYPE_CHECKING:
    from ttj_trainer.evaluation import Evaluation

log = logging.getLogger("ttj_trainer.metrics")

ROLES = ("ps", "worker", "chief")
role = Gauge("ttj_trainer_role", "1 for the role this process plays now (ps, worker or chief)", ["role"])
global_step = Gauge("ttj_trainer_global_step", "The global step last seen on the parameter server")
local_steps = Counter("ttj_trainer_local_steps_total", "Training steps this worker applied")
steps_per_second = Gauge("ttj_trainer_steps_per_second", "This worker's training steps per second (last 10 s)")
exchanges = Counter(
    "ttj_trainer_exchanges_total",
    "Steps' exchanges with the parameter servers, by transport: wire (the PS's own stream) or tensorflow (its call)",
    ["transport"],
)
loss = Gauge("ttj_trainer_loss", "Training loss of this worker's latest batch")
learning_rate = Gauge("ttj_trainer_learning_rate", "Learning rate in use (after active-worker scaling)")
checkpoint_step = Gauge("ttj_trainer_checkpoint_step", "Global step of the latest checkpoint this chief knows")
checkpoint_timestamp = Gauge("ttj_trainer_checkpoint_timestamp_seconds", "Unix time of the latest checkpoint")
checkpoint_age = Gauge("ttj_trainer_checkpoint_age_seconds", "Seconds since the latest checkpoint (chief only)")
checkpoint_seconds = Histogram(
    "ttj_trainer_checkpoint_write_seconds",
    "Time to write and commit one checkpoint",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
checkpoints_refused = Counter("ttj_trainer_checkpoints_refused_total", "Checkpoint writes refused as stale (fencing)")
device = Gauge(
    "ttj_trainer_device_info", "The device the training step runs on (1 for the one in use)", ["device", "kind"]
)
active_workers = Gauge("ttj_trainer_active_workers_seen", "Workers with a fresh heartbeat on the PS (chief only)")
evaluation = Gauge(
    "ttj_trainer_evaluation",
    "The latest evaluation of the program's evaluation set (chief only), by Keras name",
    ["metric"],
)
evaluation_step = Gauge("ttj_trainer_evaluation_step", "The global step of the latest evaluation (chief only)")


def show_evaluation(latest: Evaluation) -> None:
    for name, value in latest.metrics.items():
        evaluation.labels(name).set(value)
    evaluation_step.set(latest.step)


def set_role(name: str) -> None:
    for candidate in ROLES:
        role.labels(candidate).set(1 if candidate == name else 0)


def serve(address: str, port: int) -> None:
    if port <= 0:
        return
    try:
        start_http_server(port, addr=address)
    except OSError as err:
        # Metrics are not worth failing a training job for; say so and go on.
        event(log, "cannot serve metrics", logging.WARNING, address=address, port=port, error=str(err))
        return
    event(log, "serving metrics", address=address, port=port)

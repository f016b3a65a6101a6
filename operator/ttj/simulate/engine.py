"""The discrete-event core: one training run of one job under one policy, on one preemption trace.

Time 0 is when training starts (every first VM has booted, as in the paper's durations); a first VM
was created ``startup_s`` earlier, so its lifetime is counted from then. Between events the global
step grows at the fitted throughput of the running workers (zero while there is no ready chief or
fewer than ``min_workers`` run). Events: a VM revoked (its lifetime ended; the 24 h limit included),
a worker ready, a chief handover done, a periodic checkpoint, completion, the active deadline.

After every event the policy sees the run (:class:`RunView`) and answers :class:`SimAction`s, which
the engine applies. Policies never see the trace: the same seeded trace is replayed for each policy,
so they are compared on the very same revocations (a replacement VM in a slot gets that slot's next
lifetime of the trace, whoever asked for it).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from ttj.api.models import TransientTrainingJobSpec
from ttj.preemption.lifetimes import LifetimeDistribution
from ttj.simulate.fit import ThroughputModel
from ttj.simulate.prices import ICAC19_PRICE_TABLE, price_per_hour, ps_price_per_hour

#: A run that has not finished after this long is stopped and counted as failed ("stalled").
MAX_SIMULATED_S = 30 * 24 * 3600.0
_EPS = 1e-9


@dataclass(frozen=True)
class SimJob:
    """What the simulator needs of a TransientTrainingJob (plus the spec, for the planner)."""

    name: str
    spec: TransientTrainingJobSpec
    #: One worker training alone, no parameter server (the paper's single-GPU baseline): the model state
    #: lives on that worker, so losing it rolls training back to the last checkpoint.
    without_ps: bool = False
    #: A mixed fleet: (accelerator, provisioning) of each slot; empty: every slot as ``spec.workers`` says.
    #: A replacement stays in its slot's group (capacity is not modelled, so no fallback is needed).
    slot_hardware: tuple[tuple[str, str], ...] = ()

    def hardware(self, slot: int) -> tuple[str, str]:
        """(accelerator, provisioning) of ``slot``'s VMs."""
        if slot < len(self.slot_hardware):
            return self.slot_hardware[slot]
        return self.accelerator, self.provisioning

    @property
    def train_steps(self) -> int:
        return self.spec.train_steps

    @property
    def workers(self) -> int:
        return self.spec.workers.replicas

    @property
    def min_workers(self) -> int:
        return self.spec.workers.min_replicas

    @property
    def slots(self) -> int:
        return self.spec.workers.slots

    @property
    def accelerator(self) -> str:
        return self.spec.workers.accelerator_type

    @property
    def provisioning(self) -> str:
        return str(self.spec.workers.provisioning)

    @property
    def ps_replicas(self) -> int:
        return 0 if self.without_ps else self.spec.parameter_servers.replicas

    @property
    def label(self) -> str:
        gpu = self.accelerator.removeprefix("nvidia-tesla-").removeprefix("nvidia-").upper()
        kind = "on-demand" if self.provisioning == "on-demand" else "transient"
        return f"{gpu} {kind} x{self.workers}" + (" no PS" if self.without_ps else "")

    def single_gpu(self) -> SimJob:
        """This job on its one worker alone, without a parameter server."""
        job = self.with_cluster(workers=1, accelerator=self.accelerator, provisioning=self.provisioning)
        return SimJob(self.name, job.spec, without_ps=True)

    def with_cluster(self, *, workers: int, accelerator: str, provisioning: str) -> SimJob:
        """The same job on another cluster (min/max replicas follow, as a user would set them)."""
        spec = self.spec.model_copy(deep=True)
        spec.workers.replicas = workers
        spec.workers.max_replicas = max(workers, spec.workers.max_replicas or 0) if spec.workers.max_replicas else None
        spec.workers.min_replicas = min(spec.workers.min_replicas, workers)
        spec.workers.accelerator_type = accelerator
        spec.workers.provisioning = provisioning  # type: ignore[assignment]
        return SimJob(self.name, spec)


class PreemptionTrace:
    """The seeded randomness of one run: each slot's successive VM lifetimes, and the run's speed."""

    def __init__(
        self,
        seed: int,
        run: int,
        lifetimes: LifetimeDistribution | None,
        noise_sigma: float,
        fixed: Mapping[tuple[int, int], float] | None = None,
        *,
        slot_lifetimes: Mapping[int, LifetimeDistribution | None] | None = None,
    ) -> None:
        self.seed = seed
        self.run = run
        self._lifetimes = lifetimes
        #: a mixed fleet's slots each draw from their own GPU type's lifetimes (None: on-demand)
        self._slot_lifetimes = dict(slot_lifetimes or {})
        self._fixed = dict(fixed or {})
        self._cache: dict[tuple[int, int], float] = {}
        noise = random.Random(f"ttj-simulate/{seed}/{run}/speed")
        self.speed_factor = math.exp(noise.gauss(0.0, noise_sigma)) if noise_sigma > 0 else 1.0

    def lifetime(self, slot: int, serial: int, *, outlives: float = 0.0) -> float:
        """Seconds the ``serial``-th VM of ``slot`` lives from its creation (inf: never revoked).

        ``outlives`` conditions the draw: a first VM revoked while booting would have been replaced
        before the measured run started, so first VMs are drawn among those that outlive start-up.
        """
        key = (slot, serial)
        if key in self._fixed:
            return self._fixed[key]
        lifetimes = self._slot_lifetimes.get(slot, self._lifetimes)
        if lifetimes is None:
            return math.inf
        if key not in self._cache:
            rng = random.Random(f"ttj-simulate/{self.seed}/{self.run}/{slot}/{serial}")
            drawn = lifetimes.sample(rng)
            for _ in range(1000):
                if drawn > outlives:
                    break
                drawn = lifetimes.sample(rng)
            self._cache[key] = drawn
        return self._cache[key]


@dataclass
class WorkerVm:
    slot: int
    serial: int
    created_at: float
    ready_at: float
    dies_at: float
    ended_at: float | None = None
    revoked: bool = False

    def running(self, now: float) -> bool:
        return self.ended_at is None and self.ready_at <= now + _EPS

    @property
    def alive(self) -> bool:
        return self.ended_at is None


# --- what a policy may ask for ---------------------------------------------------------------------


@dataclass(frozen=True)
class StartWorker:
    """Create a worker in ``slot`` on a new VM; it trains ``startup_s`` later."""

    slot: int


@dataclass(frozen=True)
class MakeChief:
    """Hand the chief role to the worker in ``slot`` (a new epoch); training pauses ``handover_s``."""

    slot: int


@dataclass(frozen=True)
class RestoreCheckpoint:
    """Roll the global step back to the last checkpoint (a chief restarted from it)."""


@dataclass(frozen=True)
class FailJob:
    reason: str


SimAction = StartWorker | MakeChief | RestoreCheckpoint | FailJob


@dataclass(frozen=True)
class RunView:
    """What a policy observes after an event."""

    now: float
    job: SimJob
    live_slots: Mapping[int, bool]  # slot → running (False: still starting) for every live worker VM
    vm_created_at: Mapping[int, float]  # slot → when its live VM was created (node age, for the planner)
    lost_slots: Sequence[int]  # slots whose VM was revoked at this event
    chief_slot: int | None
    chief_epoch: int
    global_step: float
    checkpoint_step: float
    checkpoint_time: float
    preemptions: int
    cost_usd: float
    #: what a periodic checkpoint takes to write (the chief reports it, for the adaptive interval)
    checkpoint_write_s: float = 0.0


class CheckpointIntervalChoice(Protocol):
    """Seconds to the next checkpoint, from the chief VM's age (s), provisioning, accelerator and write time (s)."""

    def __call__(self, chief_age_s: float, provisioning: str, accelerator: str, write_s: float) -> float: ...


class Policy(Protocol):
    name: str
    #: whether the chief writes a checkpoint in the 30 s preemption notice (SIGTERM)
    checkpoint_on_sigterm: bool

    def decide(self, view: RunView) -> list[SimAction]: ...

    def published_checkpoint_interval_s(self) -> float | None:
        """The checkpoint interval the policy has told the trainer to use, if any."""
        ...


# --- results ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunResult:
    policy: str
    run: int
    outcome: Literal["Succeeded", "Failed"]
    reason: str
    time_s: float
    cost_usd: float
    revocations: int
    replacements: int
    chief_elections: int
    steps_lost: float  # rolled back to checkpoints, plus all progress of a failed run
    #: periodic checkpoints written, and the steps the chief did not make while writing them
    checkpoints: int
    checkpoint_overhead_steps: float
    #: the same run without any revocation (same speed factor), for per-revocation overheads
    baseline_time_s: float
    baseline_cost_usd: float

    @property
    def succeeded(self) -> bool:
        return self.outcome == "Succeeded"


@dataclass(frozen=True)
class _Setting:
    """What stays fixed during one run."""

    job: SimJob
    policy: Policy
    trace: PreemptionTrace
    throughput: ThroughputModel
    startup_s: float
    handover_s: float
    worker_price_h: float
    ps_price_h: float
    checkpoint_write_s: float
    checkpoint_interval: CheckpointIntervalChoice | None
    deadline: float
    #: a mixed fleet's hourly price per slot (slots not here cost ``worker_price_h``)
    slot_price_h: Mapping[int, float] = field(default_factory=dict)

    def price_h(self, slot: int) -> float:
        return self.slot_price_h.get(slot, self.worker_price_h)


@dataclass
class _Run:
    """What changes during one run: the clock, the VMs, the chief, the training progress and the tallies."""

    now: float = 0.0
    vms: list[WorkerVm] = field(default_factory=list)
    serials: dict[int, int] = field(default_factory=dict)
    chief_slot: int | None = None
    chief_ready_at: float = 0.0
    epoch: int = 0
    elections: int = 0
    step: float = 0.0
    checkpoint_step: float = 0.0
    checkpoint_time: float = 0.0
    revocations: int = 0
    replacements: int = 0
    steps_lost: float = 0.0
    checkpoints: int = 0
    checkpoint_overhead_steps: float = 0.0

    def live(self) -> dict[int, WorkerVm]:
        return {vm.slot: vm for vm in self.vms if vm.alive}

    def running_workers(self) -> int:
        return sum(1 for vm in self.vms if vm.running(self.now))

    def chief_vm(self) -> WorkerVm | None:
        return self.live().get(self.chief_slot) if self.chief_slot is not None else None

    def checkpoint_now(self) -> None:
        self.checkpoint_step, self.checkpoint_time = self.step, self.now

    def roll_back(self) -> None:
        """Back to the last checkpoint: the steps since are lost."""
        self.steps_lost += self.step - self.checkpoint_step
        self.step = self.checkpoint_step


@dataclass(frozen=True)
class _Intervals:
    """Between periodic checkpoints: seconds and steps (0: not by that measure)."""

    seconds: float
    steps: int


def _rate(setting: _Setting, run: _Run) -> float:
    """Global steps per second now: zero without a ready chief or with fewer than the minimum workers."""
    chief = run.chief_vm()
    if chief is None or not chief.running(run.now) or run.chief_ready_at > run.now + _EPS:
        return 0.0
    active = run.running_workers()
    if active < setting.job.min_workers:
        return 0.0
    if setting.job.slot_hardware:
        running = [vm.slot for vm in run.vms if vm.running(run.now)]
        return fleet_steps_per_second(setting.throughput, setting.job, running) * setting.trace.speed_factor
    steps = setting.throughput.steps_per_second(active, setting.job.accelerator, setting.job.ps_replicas)
    return steps * setting.trace.speed_factor


def fleet_steps_per_second(throughput: ThroughputModel, job: SimJob, slots: Sequence[int]) -> float:
    """Global steps/s of the workers in ``slots`` of a mixed fleet: each type's rate summed, behind the PS."""
    counts: dict[str, int] = {}
    for slot in slots:
        accelerator = job.hardware(slot)[0]
        counts[accelerator] = counts.get(accelerator, 0) + 1
    return throughput.mix_steps_per_second(counts, job.ps_replicas)


def _cost(setting: _Setting, run: _Run, at: float) -> float:
    worker_usd_s = sum(
        max(0.0, min(vm.ended_at if vm.ended_at is not None else at, at) - vm.created_at) * setting.price_h(vm.slot)
        for vm in run.vms
    )
    return (worker_usd_s + at * setting.ps_price_h * setting.job.ps_replicas) / 3600.0


def _start_worker(setting: _Setting, run: _Run, slot: int, *, first: bool) -> None:
    serial = run.serials.get(slot, 0)
    run.serials[slot] = serial + 1
    lifetime = setting.trace.lifetime(slot, serial, outlives=setting.startup_s if first else 0.0)
    if first:  # booted before training started; billed from time 0, like the paper's costs
        vm = WorkerVm(slot, serial, 0.0, 0.0, lifetime - setting.startup_s)
    else:
        vm = WorkerVm(slot, serial, run.now, run.now + setting.startup_s, run.now + lifetime)
        run.replacements += 1
    run.vms.append(vm)


def _first_run(setting: _Setting) -> _Run:
    """Every slot's first VM up, slot 0 chief of epoch 1, at time 0."""
    run = _Run(chief_slot=0, epoch=1)
    for slot in range(setting.job.workers):
        _start_worker(setting, run, slot, first=True)
    return run


def _baseline(setting: _Setting) -> tuple[float, float]:
    """Time and cost of the same run without any revocation (same speed factor)."""
    job = setting.job
    if job.slot_hardware:
        rate = fleet_steps_per_second(setting.throughput, job, range(job.workers))
    else:
        rate = setting.throughput.steps_per_second(job.workers, job.accelerator, job.ps_replicas)
    time_s = job.train_steps / (rate * setting.trace.speed_factor)
    workers_price_h = sum(setting.price_h(slot) for slot in range(job.workers))
    cost = time_s * (workers_price_h + job.ps_replicas * setting.ps_price_h) / 3600.0
    return time_s, cost


def _intervals(setting: _Setting, run: _Run) -> _Intervals:
    """The interval now: the given choice, else what the policy published to the trainer (the operator's
    adaptive interval replaces both of the spec's), else the spec's."""
    chief = run.chief_vm()
    if setting.checkpoint_interval is not None and chief is not None:
        age = run.now - chief.created_at
        accelerator, provisioning = setting.job.hardware(chief.slot)
        return _Intervals(setting.checkpoint_interval(age, provisioning, accelerator, setting.checkpoint_write_s), 0)
    published = setting.policy.published_checkpoint_interval_s()
    if published is not None:
        return _Intervals(published, 0)
    checkpoint = setting.job.spec.checkpoint
    return _Intervals(float(checkpoint.interval_seconds), checkpoint.interval_steps)


def _revoke_due(setting: _Setting, run: _Run) -> list[int]:
    """End the VMs whose lifetime is over (a first VM may die before training even starts); their slots."""
    lost: list[int] = []
    for vm in run.vms:
        if vm.alive and vm.dies_at <= run.now + _EPS:
            # the chief's SIGTERM checkpoint, written while its VM still runs (before it is marked ended)
            if vm.slot == run.chief_slot and setting.policy.checkpoint_on_sigterm and vm.running(run.now):
                run.checkpoint_now()
            vm.ended_at = max(run.now, vm.created_at)
            vm.revoked = True
            run.revocations += 1
            lost.append(vm.slot)
            if setting.job.without_ps and vm.slot == run.chief_slot:  # the model state died with the worker
                run.roll_back()
    return lost


#: What a policy is shown of the cluster to tell whether it changed: (slot, running) per live VM, handover done.
_Observation = tuple[tuple[tuple[int, bool], ...], bool]


def _observation(run: _Run) -> _Observation:
    running = tuple((slot, vm.running(run.now)) for slot, vm in sorted(run.live().items()))
    return running, run.chief_ready_at <= run.now + _EPS


def _view(setting: _Setting, run: _Run, lost: list[int]) -> RunView:
    live = run.live()
    return RunView(
        now=run.now,
        job=setting.job,
        live_slots={slot: vm.running(run.now) for slot, vm in sorted(live.items())},
        vm_created_at={slot: vm.created_at for slot, vm in live.items()},
        lost_slots=tuple(lost),
        chief_slot=run.chief_slot,
        chief_epoch=run.epoch,
        global_step=run.step,
        checkpoint_step=run.checkpoint_step,
        checkpoint_time=run.checkpoint_time,
        preemptions=run.revocations,
        cost_usd=_cost(setting, run, run.now),
        checkpoint_write_s=setting.checkpoint_write_s,
    )


def _apply(setting: _Setting, run: _Run, actions: Sequence[SimAction]) -> str | None:
    """Carry out the policy's actions; the reason when one of them fails the job."""
    for action in actions:
        if isinstance(action, FailJob):
            return action.reason
        if isinstance(action, StartWorker):
            if action.slot not in run.live():  # else already has a VM: idempotent, like a create answered 409
                _start_worker(setting, run, action.slot, first=False)
        elif isinstance(action, MakeChief):
            if action.slot != run.chief_slot:
                run.chief_slot = action.slot
                run.epoch += 1
                run.elections += 1
                run.chief_ready_at = run.now + setting.handover_s
                if setting.policy.checkpoint_on_sigterm:  # a new chief checkpoints when elected (contract)
                    run.checkpoint_now()
        elif isinstance(action, RestoreCheckpoint):
            run.roll_back()
    return None


def _next_event(setting: _Setting, run: _Run, rate: float, interval: _Intervals) -> float:
    """When the next thing happens: a VM's end or readiness, a handover done, completion, a checkpoint due,
    the deadline (now when nothing lies ahead)."""
    candidates = [setting.deadline, MAX_SIMULATED_S]
    for vm in run.vms:
        if vm.alive:
            candidates.append(vm.dies_at)
            if vm.ready_at > run.now + _EPS:
                candidates.append(vm.ready_at)
    if run.chief_ready_at > run.now + _EPS:
        candidates.append(run.chief_ready_at)
    if rate > 0:
        candidates.append(run.now + (setting.job.train_steps - run.step) / rate)
        if interval.seconds:
            candidates.append(max(run.now, run.checkpoint_time + interval.seconds))
        if interval.steps:
            candidates.append(run.now + max(0.0, run.checkpoint_step + interval.steps - run.step) / rate)
    ahead = [c for c in candidates if c > run.now + _EPS]
    return min(ahead) if ahead else run.now


def _checkpoint_if_due(setting: _Setting, run: _Run, rate: float, interval: _Intervals) -> bool:
    """Write a periodic checkpoint if one is due; whether one was written."""
    if rate <= 0 or run.chief_slot is None:
        return False
    due_steps = interval.steps and run.step >= run.checkpoint_step + interval.steps - 1e-6
    due_time = interval.seconds and run.now >= run.checkpoint_time + interval.seconds - 1e-6
    if not (due_steps or due_time):
        return False
    # the chief writes instead of training: its share of the throughput, for the write time
    deficit = min(run.step, rate * setting.checkpoint_write_s / max(1, run.running_workers()))
    run.step -= deficit
    run.checkpoint_overhead_steps += deficit
    run.checkpoints += 1
    run.checkpoint_now()
    return True


def _result(
    setting: _Setting,
    run: _Run,
    baseline: tuple[float, float],
    outcome: Literal["Succeeded", "Failed"],
    reason: str,
) -> RunResult:
    """The run ended now: its VMs stop, and a failed run loses all its progress."""
    for vm in run.vms:
        if vm.ended_at is None:
            vm.ended_at = run.now
    if outcome == "Failed":
        run.steps_lost += run.step
    return RunResult(
        policy=setting.policy.name,
        run=setting.trace.run,
        outcome=outcome,
        reason=reason,
        time_s=run.now,
        cost_usd=_cost(setting, run, run.now),
        revocations=run.revocations,
        replacements=run.replacements,
        chief_elections=run.elections,
        steps_lost=run.steps_lost,
        checkpoints=run.checkpoints,
        checkpoint_overhead_steps=run.checkpoint_overhead_steps,
        baseline_time_s=baseline[0],
        baseline_cost_usd=baseline[1],
    )


def simulate_run(
    job: SimJob,
    policy: Policy,
    trace: PreemptionTrace,
    throughput: ThroughputModel,
    *,
    startup_s: float,
    handover_s: float = 15.0,
    price_table: str = ICAC19_PRICE_TABLE,
    checkpoint_write_s: float = 0.0,
    checkpoint_interval: CheckpointIntervalChoice | None = None,
) -> RunResult:
    """Run ``job`` once under ``policy`` on ``trace``, charging the prices of ``price_table``.

    Each periodic checkpoint keeps the chief from training for ``checkpoint_write_s`` (its share of the
    steps is lost to the job). ``checkpoint_interval``, when given, chooses the time interval after every
    checkpoint and chief change from the chief's VM (as the operator does for ``checkpoint.adaptive``)
    and replaces the spec's intervals; otherwise the spec's fixed intervals apply.
    """
    setting = _Setting(
        job=job,
        policy=policy,
        trace=trace,
        throughput=throughput,
        startup_s=startup_s,
        handover_s=handover_s,
        worker_price_h=price_per_hour(job.accelerator, job.provisioning, price_table),
        ps_price_h=ps_price_per_hour(price_table),
        checkpoint_write_s=checkpoint_write_s,
        checkpoint_interval=checkpoint_interval,
        deadline=float(job.spec.active_deadline_seconds) if job.spec.active_deadline_seconds else math.inf,
        slot_price_h=_slot_prices(job, price_table),
    )
    run = _first_run(setting)
    baseline = _baseline(setting)
    shown: _Observation | None = None
    while True:
        lost = _revoke_due(setting, run)
        # Like a controller woken by watch events, the policy is asked only when the cluster changed (a VM
        # lost or ready, a handover done), not at checkpoints.
        observation = _observation(run)
        if lost or observation != shown:
            shown = observation
            failure = _apply(setting, run, policy.decide(_view(setting, run, lost)))
            if failure is not None:
                return _result(setting, run, baseline, "Failed", failure)
        # The interval follows the chief's VM as it ages or changes.
        interval = _intervals(setting, run)
        rate = _rate(setting, run)
        upcoming = _next_event(setting, run, rate, interval)
        run.step = _steps_after(job, run.step, rate * (upcoming - run.now))
        run.now = upcoming
        if run.step == job.train_steps:
            return _result(setting, run, baseline, "Succeeded", "TrainStepsReached")
        if _checkpoint_if_due(setting, run, rate, interval) and job.spec.checkpoint.adaptive:
            shown = None  # the chief publishes its new checkpoint (and write time) on the Lease: a watch event
        if run.now >= setting.deadline - _EPS:
            return _result(setting, run, baseline, "Failed", "DeadlineExceeded")
        if run.now >= MAX_SIMULATED_S - _EPS:
            return _result(setting, run, baseline, "Failed", "Stalled")


def _slot_prices(job: SimJob, price_table: str) -> dict[int, float]:
    """A mixed fleet's hourly price per slot; empty when every slot costs the job's worker price."""
    if not job.slot_hardware:
        return {}
    return {slot: price_per_hour(*job.hardware(slot), price_table) for slot in range(job.slots)}


def _steps_after(job: SimJob, step: float, trained: float) -> float:
    """The global step after ``trained`` more steps: at most the job's, and the job's once within rounding of it."""
    step = min(float(job.train_steps), step + trained)
    return float(job.train_steps) if step >= job.train_steps - 1e-6 else step

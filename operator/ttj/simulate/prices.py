"""Hourly prices the simulator charges: the ICAC'19 paper's Table II (USD per hour, GCE, 2019).

The simulator must reproduce the paper's costs, so it uses the paper's prices rather than today's.
Kept here as a small table so the simulator stays self-contained; ``ttj.cost`` carries the project's
price tables for the operator.
"""

from __future__ import annotations

#: (accelerator, provisioning) → USD/h of one worker VM (GPU and host together), Table II
WORKER_PRICES: dict[tuple[str, str], float] = {
    ("nvidia-tesla-k80", "on-demand"): 0.723,
    ("nvidia-tesla-k80", "preemptible"): 0.256,
    ("nvidia-tesla-p100", "on-demand"): 1.43,
    ("nvidia-tesla-p100", "preemptible"): 0.551,
    ("nvidia-tesla-v100", "on-demand"): 2.144,
    ("nvidia-tesla-v100", "preemptible"): 0.861,
}

#: The parameter server (4 vCPU, 16 GB, no GPU), always on-demand in the paper and in ttj.
PS_PRICE_ON_DEMAND = 0.143


def price_per_hour(accelerator: str, provisioning: str) -> float:
    """USD/h of one worker; spot is charged as preemptible (GCE priced them alike in 2019)."""
    kind = "preemptible" if provisioning == "spot" else provisioning
    try:
        return WORKER_PRICES[(accelerator, kind)]
    except KeyError:
        known = ", ".join(sorted({a for a, _ in WORKER_PRICES}))
        raise ValueError(f"no price for {accelerator} ({provisioning}); the simulator knows {known}") from None

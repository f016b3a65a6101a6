"""The stages of a planner pass, each a function from values to a value.

Only :mod:`ttj.planner.core` composes them; no stage imports another (an import-linter contract in
``pyproject.toml`` holds it), and what two stages share lives one level up in :mod:`ttj.planner`
(observed, classify, children, groups, lease, lost ...). In the order a running job's pass calls them:

reading what is there
    :mod:`~ttj.planner.stages.suspension` (``spec.suspend`` and a resume),
    :mod:`~ttj.planner.stages.assess` (each worker pod: active, lost, counted),
    :mod:`~ttj.planner.stages.stall` (the step's progress and a stall),
    :mod:`~ttj.planner.stages.static_children` (Service, RBAC, NetworkPolicy, the PS Deployment),
    :mod:`~ttj.planner.stages.costing` (the cost so far and the budget)
whether the job ends
    :mod:`~ttj.planner.stages.ending` (steps done, failures, budget, deadline; the clean-up after)
deciding
    :mod:`~ttj.planner.stages.parameter_servers` (their pods replaced, the model state they held),
    :mod:`~ttj.planner.stages.deadline` (catch-up workers the deadline needs),
    :mod:`~ttj.planner.stages.slots` (a pod for every worker slot, fallback and move back),
    :mod:`~ttj.planner.stages.chief` (keep the chief or elect one),
    :mod:`~ttj.planner.stages.checkpoint_interval` (the adaptive interval)
what it cost, and what the job waits for
    :mod:`~ttj.planner.stages.losses` (each preemption priced, the savings net of them),
    :mod:`~ttj.planner.stages.waiting` (the pods a Recovering job waits for, named)

Last, :mod:`ttj.planner.conditions` derives the phase and the conditions from what the stages returned.
"""

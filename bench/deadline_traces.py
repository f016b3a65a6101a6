"""Deadlines on measured spot availability: ttj's policy against always-on-demand, greedy, the paper's uniform
progress and the hindsight optimum, on the same traces (issue 38). Simulated: the figures do not depend on the
machine's load. Run from the repository root:

    .venv/bin/python bench/deadline_traces.py [--traces DIR] [--job-hours 12] [--starts 4] [--calibrate]

Prints the job, then per deadline slack and policy: deadlines met, median cost, cost over the optimum's
(median and p90 over the deadlines), the saving against always-on-demand (median; and where the spot group
had capacity at least half the deadline's window: median and range), then how honest ttj's p90 ETA was.
``--calibrate`` also sweeps the p90's spread (:attr:`ttj.deadline.policy.DeadlineView.eta_spread`): chosen on
the traces of one campaign (aws-02-15-2023), checked on the other (aws-10-26-2022).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ttj.deadline.policy import ETA_SPREAD
from ttj.simulate.cli import load_job
from ttj.simulate.deadline_replay import POLICIES, ReplayJob, cases_of, replay_cases, replay_job
from ttj.simulate.deadline_report import eta_figures, header, table
from ttj.simulate.engine import SimJob
from ttj.simulate.fit import fit
from ttj.simulate.icac19 import load_training_data
from ttj.simulate.traces import CapacityTrace, load_traces

REPOSITORY = Path(__file__).resolve().parents[1]
SPREADS = (1.2816, 1.6449, 2.0, 2.5, 3.0)
CHOSEN_ON, CHECKED_ON = "aws-02-15-2023", "aws-10-26-2022"


def calibration(job: ReplayJob, traces: list[CapacityTrace], slacks: list[float], starts: int) -> str:
    """Per spread: the share of ETA samples whose run ended after their p90, per slack, on both campaigns."""
    campaigns = {name: [t for t in traces if name in t.name] for name in (CHOSEN_ON, CHECKED_ON)}
    lines = [
        "| spread (std devs) | " + " | ".join(f"{name} {s:g}×" for name in campaigns for s in slacks) + " |",
        "|---|" + "---|" * (len(campaigns) * len(slacks)),
    ]
    for spread in SPREADS:
        cells = []
        for chosen in campaigns.values():
            results = replay_cases(job, cases_of(chosen, job, slacks, starts), ("ttj",), eta_spread=spread)
            cells += [f"{eta_figures([r for r in results if r.case.slack == s]).after_p90:.1%}" for s in slacks]
        mark = " (ETA_SPREAD)" if abs(spread - ETA_SPREAD) < 1e-3 else ""
        lines.append(f"| {spread:g}{mark} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=Path, default=Path("/work/shared/data/spot-traces/availability"))
    parser.add_argument("--manifest", type=Path, default=REPOSITORY / "examples/simulate/k80-transient-4.yaml")
    parser.add_argument("--job-hours", type=float, default=12.0)
    parser.add_argument("--starts", type=int, default=4)
    parser.add_argument("--slacks", default="1.1,1.5,2")
    parser.add_argument("--price-table", default="icac19-table2")
    parser.add_argument("--catch-up-max", type=int, default=None, help="[the job's replicas]")
    parser.add_argument("--calibrate", action="store_true")
    args = parser.parse_args()
    slacks = [float(s) for s in args.slacks.split(",")]
    manifest = load_job(args.manifest)
    job = replay_job(
        SimJob(args.manifest.stem, manifest.spec),
        fit(load_training_data()),
        args.price_table,
        catch_up_max=args.catch_up_max,
        hours=args.job_hours,
    )
    traces = load_traces(args.traces)
    cases = cases_of(traces, job, slacks, args.starts)
    print(header(job, len(traces), len(cases)))
    print(table(job, replay_cases(job, cases), POLICIES))
    if args.calibrate:
        print("\nShare of ttj's ETA samples that ended after their p90, by the p90's spread:")
        print(calibration(job, traces, slacks, args.starts))


if __name__ == "__main__":
    main()

"""The operator, two replicas with leader election, under chaos on the local cluster; the invariants are
checked at every event (see :mod:`tests.chaos.harness`). Bounded: ~45 s of chaos on two jobs, then the
settling. The longer soak with the same checker: ``bench/operator_chaos.py``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.chaos.harness import Chaos, ChaosPlan, quiet_kubernetes_logs

pytestmark = [pytest.mark.timeout(900)]


def test_no_invariant_breaks_under_api_faults_watch_gaps_operator_kills_and_preemptions(tmp_path: Path) -> None:
    plan = ChaosPlan(seed=int(os.environ.get("TTJ_CHAOS_SEED", "1")))
    with quiet_kubernetes_logs():
        outcome = Chaos(plan, tmp_path).run()
    summary = outcome.summary()
    print("chaos:", summary)
    for problem in outcome.problems:
        print("problem:", problem)
    if outcome.violations or outcome.problems:
        print(f"the API's state at the end and every operator's log: {tmp_path}")
        for log in sorted(tmp_path.glob("operator-*.log")):
            print(f"--- {log.name} (tail)\n{log.read_text(errors='replace')[-4000:]}")
    assert outcome.violations == []
    assert outcome.problems == []
    # The run did what it says (a run that injected nothing would prove nothing).
    assert outcome.tally.kills >= 1
    assert outcome.tally.preemptions >= 1
    assert outcome.tally.faults >= 1
    assert outcome.tally.relists >= 1

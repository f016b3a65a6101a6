"""``python -m ttj_localcluster.crd_cost CRD.yaml...``: the CEL rule cost kube-apiserver 1.25 would estimate
for each CRD, failing when one comes within 2x of its budgets (``make verify`` runs it on crds/)."""

import sys

from .apiserver.celcost import main

if __name__ == "__main__":
    sys.exit(main())

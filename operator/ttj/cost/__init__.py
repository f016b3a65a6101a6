"""Cost: price tables, per-second accrual kept in status, budgets, and node pool matching.

``prices`` (tables), ``model`` (accrual, pure), ``budget`` (decisions, pure), ``pools`` (placement
matching, pure) and ``gke`` (the GKE node pool client, not pure).
"""

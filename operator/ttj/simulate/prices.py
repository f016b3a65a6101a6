"""Hourly prices the simulator charges, from the project's price tables (``ttj.cost.prices``).

The default table is ``icac19-table2``, the paper's Table II (K80 $0.723 on-demand / $0.256 transient,
P100 $1.43 / $0.551, V100 $2.144 / $0.861, the PS $0.143 on-demand): the simulator must reproduce the
paper's costs. ``ttj simulate --price-table gce-us-central1`` prices today's GKE instead.
"""

from __future__ import annotations

from functools import lru_cache

from ttj.cost.prices import PriceTable, load_price_table

ICAC19_PRICE_TABLE = "icac19-table2"


@lru_cache(maxsize=8)
def price_table(name: str = ICAC19_PRICE_TABLE) -> PriceTable:
    return load_price_table(table=name)


def price_per_hour(accelerator: str, provisioning: str, table: str = ICAC19_PRICE_TABLE) -> float:
    """USD/h of one worker node with one GPU of ``accelerator``, host included."""
    prices = price_table(table)
    node = prices.node_price(
        machine_type=prices.host_machine_types.get(accelerator),
        accelerator_type=accelerator,
        accelerator_count=1,
        provisioning=provisioning,
    )
    if node.notes:
        raise ValueError(f"cannot price a {accelerator} worker ({provisioning}): {'; '.join(node.notes)}")
    return node.usd_per_hour


def ps_price_per_hour(table: str = ICAC19_PRICE_TABLE) -> float:
    """USD/h of one parameter server: the table's fallback CPU machine (n1-standard-4), on-demand."""
    prices = price_table(table)
    machine, note = prices.machine_price(None)
    if machine is None:
        raise ValueError(f"cannot price a parameter server: {note}")
    return machine.on_demand

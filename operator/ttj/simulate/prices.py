"""Hourly prices the simulator charges, from the project's price tables (``ttj.cost.prices``).

The default table is ``icac19-table2``, the paper's Table II (K80 $0.723 on-demand / $0.256 transient,
P100 $1.43 / $0.551, V100 $2.144 / $0.861, the PS $0.143 on-demand): the simulator must reproduce the
paper's costs. ``ttj simulate --price-table gce-us-central1`` prices today's GKE instead.

A GPU the chosen table does not price (the paper's table has no T4, the CRD's default) is priced from the
price file's default table instead, and :func:`price_note` says so: the output shows the note.
"""

from __future__ import annotations

from functools import lru_cache

from ttj.cost.prices import NodePrice, PriceTable, load_price_book

ICAC19_PRICE_TABLE = "icac19-table2"


@lru_cache(maxsize=8)
def price_table(name: str = ICAC19_PRICE_TABLE) -> PriceTable:
    return load_price_book().table(name)


@lru_cache(maxsize=64)
def _worker_price(accelerator: str, provisioning: str, table: str) -> tuple[float, str | None]:
    prices = price_table(table)
    node = _node(prices, accelerator, provisioning)
    if not node.notes:
        return node.usd_per_hour, None
    book = load_price_book()
    fallback = book.table()
    fallback_node = _node(fallback, accelerator, provisioning)
    if fallback.name != prices.name and not fallback_node.notes:
        return fallback_node.usd_per_hour, (
            f"{accelerator} is not in price table {prices.name} of {book.source}: priced from its default table "
            f"{fallback.name} (${fallback_node.usd_per_hour:.3f}/h {provisioning}); add it to {prices.name} "
            "or pass --price-table"
        )
    tables = ", ".join(sorted(book.tables))
    raise ValueError(
        f"cannot price a {accelerator} worker ({provisioning}): {'; '.join(node.notes)} (price file "
        f"{book.source}, tables: {tables}); add the accelerator there or pass --price-table"
    )


def _node(prices: PriceTable, accelerator: str, provisioning: str) -> NodePrice:
    return prices.node_price(
        machine_type=prices.host_machine_types.get(accelerator),
        accelerator_type=accelerator,
        accelerator_count=1,
        provisioning=provisioning,
    )


def price_per_hour(accelerator: str, provisioning: str, table: str = ICAC19_PRICE_TABLE) -> float:
    """USD/h of one worker node with one GPU of ``accelerator``, host included."""
    return _worker_price(accelerator, provisioning, table)[0]


def price_note(accelerator: str, provisioning: str, table: str = ICAC19_PRICE_TABLE) -> str | None:
    """Why the price of ``accelerator`` does not come from ``table`` (None when it does)."""
    return _worker_price(accelerator, provisioning, table)[1]


def ps_price_per_hour(table: str = ICAC19_PRICE_TABLE) -> float:
    """USD/h of one parameter server: the table's fallback CPU machine (n1-standard-4), on-demand."""
    prices = price_table(table)
    machine, note = prices.machine_price(None)
    if machine is None:
        raise ValueError(f"cannot price a parameter server: {note} (price file {load_price_book().source})")
    return machine.on_demand

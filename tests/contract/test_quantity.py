"""The one quantity parser (operator API, local API server, local scheduler), as resource.ParseQuantity reads."""

from __future__ import annotations

from decimal import Decimal

import pytest

from ttj_contract.quantity import parse_quantity

PARSED = [
    ("500m", Decimal("0.5")),
    ("4Gi", Decimal(4 * 2**30)),
    ("1Ki", Decimal(1024)),
    ("2k", Decimal(2000)),
    ("1E", Decimal(10**18)),
    ("1e3", Decimal(1000)),
    ("1.5E2", Decimal(150)),
    ("250u", Decimal("0.00025")),
    ("3n", Decimal("3e-9")),
    (".5", Decimal("0.5")),
    ("2.", Decimal(2)),
    ("-1", Decimal(-1)),
    ("+3M", Decimal(3 * 10**6)),
    (2, Decimal(2)),
    (1.5, Decimal("1.5")),
]
REFUSED = ["4 GB", " 1", "1.2.3", "", "e3", "1e", "1Ki2", "1KI", "1e999999999", True, None, [1]]


@pytest.mark.parametrize(("text", "value"), PARSED)
def test_quantities_parse_to_their_value_in_units(text: object, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", REFUSED)
def test_what_is_not_a_quantity_is_refused(text: object) -> None:
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        parse_quantity(text)

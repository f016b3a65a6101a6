"""Kubernetes resource quantities ("500m", "4Gi", "1e3", 2): the one parser of the operator, the local API
server and the local scheduler."""

from __future__ import annotations

import re
from decimal import Decimal, DecimalException

#: A quantity's number and suffix, as resource.ParseQuantity reads them: binary SI, decimal SI, or a decimal
#: exponent.
_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))((?:[KMGTPE]i)|[numkMGTPE]|[eE][+-]?[0-9]+)?$")
_SUFFIXES = {
    **{s: Decimal(1024) ** (i + 1) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
    **{"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1)},
    **{s: Decimal(1000) ** (i + 1) for i, s in enumerate(("k", "M", "G", "T", "P", "E"))},
}


def parse_quantity(value: object) -> Decimal:
    """A quantity's value in units (a JSON number as it is); ValueError when it is not a quantity."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"not a Kubernetes quantity: {value!r}")
    if not isinstance(value, str):
        return Decimal(str(value))
    match = _QUANTITY.match(value)
    if not match:
        raise ValueError(f"not a Kubernetes quantity: {value!r}")
    number, suffix = match.group(1), match.group(2) or ""
    try:
        if suffix in _SUFFIXES:
            return Decimal(number) * _SUFFIXES[suffix]
        return Decimal(number) * Decimal(10) ** int(suffix[1:])  # a decimal exponent
    except DecimalException as exc:
        raise ValueError(f"not a Kubernetes quantity: {value!r}") from exc

"""Price tables: what a node costs per hour, by accelerator, machine shape and provisioning.

The tables ship as package data (``ttj/data/prices.yaml``) and, with the same text, as the ConfigMap
``ttj-prices`` in ``manifests/base``; the platform team overrides them by editing that ConfigMap, which
the operator reads through the file named by ``TTJ_PRICES_FILE``. ``TTJ_PRICE_TABLE`` picks a table.

Pure apart from reading the YAML file: no Kubernetes, no cloud clients.
``python -m ttj.cost.prices`` prints the ConfigMap manifest for the packaged file.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from ttj_contract import Provisioning

PRICES_FILE_ENV = "TTJ_PRICES_FILE"
PRICE_TABLE_ENV = "TTJ_PRICE_TABLE"
CONFIGMAP_NAME = "ttj-prices"
CONFIGMAP_KEY = "prices.yaml"
PROVISIONINGS: tuple[str, ...] = tuple(p.value for p in Provisioning)
#: GCP's price of VM-to-VM traffic between two zones of one region, USD per GiB in each direction (docs/cost.md);
#: a table's ``interZoneUSDPerGiB`` overrides it.
DEFAULT_INTER_ZONE_USD_PER_GIB = 0.01


class PriceTableError(ValueError):
    """A price file that cannot be used; the message says where and why."""


@dataclass(frozen=True)
class HourlyPrice:
    """USD per hour of one item (a GPU or a machine) for each way of buying it."""

    on_demand: float
    preemptible: float
    spot: float

    def for_provisioning(self, provisioning: str) -> float:
        if provisioning == Provisioning.SPOT:
            return self.spot
        if provisioning == Provisioning.PREEMPTIBLE:
            return self.preemptible
        return self.on_demand


@dataclass(frozen=True)
class NodePrice:
    """The hourly price of one node as bought and as it would cost on-demand."""

    usd_per_hour: float
    on_demand_usd_per_hour: float
    #: Why the figure is an estimate (unknown machine shape or accelerator), empty when it is not.
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class PriceTable:
    """One named table of hourly prices."""

    name: str
    description: str
    accelerators: Mapping[str, HourlyPrice]
    machines: Mapping[str, HourlyPrice]
    host_machine_types: Mapping[str, str] = field(default_factory=dict)
    fallback_machine_type: str | None = None
    accelerator_includes_host: bool = False
    #: USD per GiB a worker's traffic with a parameter server in another zone costs (ttj.cost.traffic).
    inter_zone_usd_per_gib: float = DEFAULT_INTER_ZONE_USD_PER_GIB

    def machine_price(self, machine_type: str | None) -> tuple[HourlyPrice | None, str | None]:
        """The price of a machine shape, or of the fallback shape with a note saying so."""
        if machine_type and machine_type in self.machines:
            return self.machines[machine_type], None
        fallback = self.machines.get(self.fallback_machine_type or "")
        shape = machine_type or "an unknown machine type"
        if fallback is None:
            return None, f"{shape} is not in price table {self.name} and it has no fallbackMachineType: priced at $0"
        return fallback, f"{shape} is not in price table {self.name}: priced as {self.fallback_machine_type}"

    def node_price(
        self,
        *,
        machine_type: str | None,
        accelerator_type: str | None,
        accelerator_count: int,
        provisioning: str,
    ) -> NodePrice:
        """What one node costs per hour bought as ``provisioning``, and what it would cost on-demand."""
        notes: list[str] = []
        usd = 0.0
        on_demand = 0.0
        gpu_price: HourlyPrice | None = None
        if accelerator_type and accelerator_count > 0:
            gpu_price = self.accelerators.get(accelerator_type)
            if gpu_price is None:
                notes.append(f"accelerator {accelerator_type} is not in price table {self.name}: its GPUs priced at $0")
            else:
                usd += gpu_price.for_provisioning(provisioning) * accelerator_count
                on_demand += gpu_price.on_demand * accelerator_count
        if not (self.accelerator_includes_host and gpu_price is not None):
            machine, note = self.machine_price(machine_type)
            if note:
                notes.append(note)
            if machine is not None:
                usd += machine.for_provisioning(provisioning)
                on_demand += machine.on_demand
        return NodePrice(usd_per_hour=usd, on_demand_usd_per_hour=on_demand, notes=tuple(notes))


@dataclass(frozen=True)
class PriceBook:
    """All tables of one price file and the one used unless another is asked for."""

    tables: Mapping[str, PriceTable]
    default_table: str
    source: str

    def table(self, name: str | None = None) -> PriceTable:
        wanted = name or self.default_table
        try:
            return self.tables[wanted]
        except KeyError:
            known = ", ".join(sorted(self.tables))
            raise PriceTableError(f"{self.source}: no price table named {wanted!r} (tables: {known})") from None


def _hourly(raw: Any, where: str) -> HourlyPrice:
    if not isinstance(raw, Mapping):
        raise PriceTableError(f"{where}: expected a mapping of {', '.join(PROVISIONINGS)} to USD per hour")
    values: dict[str, float] = {}
    for key in PROVISIONINGS:
        value = raw.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise PriceTableError(f"{where}.{key}: expected a price in USD per hour (a number >= 0), got {value!r}")
        values[key] = float(value)
    return HourlyPrice(on_demand=values["on-demand"], preemptible=values["preemptible"], spot=values["spot"])


def parse_price_book(text: str, source: str = "prices.yaml") -> PriceBook:
    """Parses a price file; every mistake is reported with the path of the offending entry."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PriceTableError(f"{source}: not valid YAML: {exc}") from exc
    if not isinstance(document, Mapping) or not isinstance(document.get("tables"), Mapping):
        raise PriceTableError(f"{source}: expected a mapping with a `tables` mapping")
    tables: dict[str, PriceTable] = {}
    for name, raw in document["tables"].items():
        where = f"{source}: tables.{name}"
        if not isinstance(raw, Mapping):
            raise PriceTableError(f"{where}: expected a mapping")
        accelerators_raw = raw.get("accelerators") or {}
        machines_raw = raw.get("machines") or {}
        if not isinstance(accelerators_raw, Mapping) or not isinstance(machines_raw, Mapping):
            raise PriceTableError(f"{where}: accelerators and machines must be mappings")
        accelerators = {str(k): _hourly(v, f"{where}.accelerators.{k}") for k, v in accelerators_raw.items()}
        machines = {str(k): _hourly(v, f"{where}.machines.{k}") for k, v in machines_raw.items()}
        hosts = {
            str(k): str(v["hostMachineType"])
            for k, v in accelerators_raw.items()
            if isinstance(v, Mapping) and v.get("hostMachineType")
        }
        inter_zone = raw.get("interZoneUSDPerGiB", DEFAULT_INTER_ZONE_USD_PER_GIB)
        if isinstance(inter_zone, bool) or not isinstance(inter_zone, int | float) or inter_zone < 0:
            raise PriceTableError(
                f"{where}.interZoneUSDPerGiB: expected a price in USD per GiB (a number >= 0), got {inter_zone!r}"
            )
        fallback = raw.get("fallbackMachineType")
        if fallback is not None and str(fallback) not in machines:
            raise PriceTableError(f"{where}.fallbackMachineType: {fallback!r} is not one of its machines")
        tables[str(name)] = PriceTable(
            name=str(name),
            description=str(raw.get("description", "")).strip(),
            accelerators=accelerators,
            machines=machines,
            host_machine_types=hosts,
            fallback_machine_type=str(fallback) if fallback is not None else None,
            accelerator_includes_host=bool(raw.get("acceleratorIncludesHost", False)),
            inter_zone_usd_per_gib=float(inter_zone),
        )
    if not tables:
        raise PriceTableError(f"{source}: `tables` is empty")
    default = str(document.get("defaultTable") or next(iter(tables)))
    if default not in tables:
        raise PriceTableError(f"{source}: defaultTable {default!r} is not one of the tables ({', '.join(tables)})")
    return PriceBook(tables=tables, default_table=default, source=source)


def packaged_prices_text() -> str:
    """The price file shipped inside the ``ttj`` package."""
    try:
        return resources.files("ttj").joinpath("data", "prices.yaml").read_text(encoding="utf-8")
    except (NotADirectoryError, FileNotFoundError, ModuleNotFoundError):
        # A stale editable install can expose ``ttj`` as a namespace package; the file is still beside us.
        return (Path(__file__).resolve().parent.parent / "data" / "prices.yaml").read_text(encoding="utf-8")


def load_price_book(path: str | os.PathLike[str] | None = None) -> PriceBook:
    """The price file at ``path``, else the one ``TTJ_PRICES_FILE`` names, else the packaged one."""
    chosen = path if path is not None else os.environ.get(PRICES_FILE_ENV) or None
    if chosen is None:
        return parse_price_book(packaged_prices_text(), source="ttj/data/prices.yaml")
    try:
        text = Path(chosen).read_text(encoding="utf-8")
    except OSError as exc:
        raise PriceTableError(f"cannot read the price file {chosen} ({PRICES_FILE_ENV}): {exc.strerror}") from exc
    return parse_price_book(text, source=str(chosen))


def load_price_table(path: str | os.PathLike[str] | None = None, table: str | None = None) -> PriceTable:
    """The table named ``table`` (else ``TTJ_PRICE_TABLE``, else the file's default) of the chosen file."""
    return load_price_book(path).table(table or os.environ.get(PRICE_TABLE_ENV) or None)


class PriceSource:
    """Re-reads the price file when it changes (a mounted ConfigMap is updated in place by the kubelet)."""

    def __init__(self, path: str | os.PathLike[str] | None = None, table: str | None = None) -> None:
        self._path = path if path is not None else os.environ.get(PRICES_FILE_ENV) or None
        self._table_name = table or os.environ.get(PRICE_TABLE_ENV) or None
        self._stamp: float | None = None
        self._table: PriceTable | None = None

    def current(self) -> PriceTable:
        """The table in force; a broken edit of the file keeps the last good table (and raises if there is none)."""
        stamp = Path(self._path).stat().st_mtime if self._path is not None else 0.0
        if self._table is None or stamp != self._stamp:
            try:
                self._table = load_price_table(self._path if self._path is not None else None, self._table_name)
            except PriceTableError:
                if self._table is None:
                    raise
            self._stamp = stamp
        return self._table


def render_configmap(text: str | None = None) -> str:
    """The ConfigMap manifest carrying the price file verbatim (comments included)."""
    body = text if text is not None else packaged_prices_text()
    indented = "".join(f"    {line}" if line.strip() else "\n" for line in body.splitlines(keepends=True))
    return (
        "# Generated by `python -m ttj.cost.prices` from operator/ttj/data/prices.yaml; edit that file and\n"
        "# regenerate, or edit this ConfigMap in your cluster to override prices (the operator re-reads it).\n"
        "apiVersion: v1\n"
        "kind: ConfigMap\n"
        "metadata:\n"
        f"  name: {CONFIGMAP_NAME}\n"
        "data:\n"
        f"  {CONFIGMAP_KEY}: |\n"
        f"{indented}"
    )


if __name__ == "__main__":
    sys.stdout.write(render_configmap())

"""Price tables: the packaged file, the ConfigMap, parsing, and how a node is priced."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from ttj.cost import prices as prices_module
from ttj.cost.prices import (
    PriceSource,
    PriceTableError,
    load_price_book,
    load_price_table,
    packaged_prices_text,
    parse_price_book,
    render_configmap,
)

REPO = Path(__file__).resolve().parents[2]
CONFIGMAP = REPO / "manifests" / "base" / "prices-configmap.yaml"


def test_configmap_carries_the_packaged_file_verbatim() -> None:
    manifest = yaml.safe_load(CONFIGMAP.read_text())
    assert manifest["kind"] == "ConfigMap"
    assert manifest["metadata"]["name"] == prices_module.CONFIGMAP_NAME
    assert manifest["data"][prices_module.CONFIGMAP_KEY] == packaged_prices_text(), (
        "manifests/base/prices-configmap.yaml differs from operator/ttj/data/prices.yaml: "
        "run `.venv/bin/python -m ttj.cost.prices > manifests/base/prices-configmap.yaml`"
    )
    assert CONFIGMAP.read_text() == render_configmap()


def test_kustomization_installs_the_configmap() -> None:
    kustomization = yaml.safe_load((REPO / "manifests" / "base" / "kustomization.yaml").read_text())
    assert "prices-configmap.yaml" in kustomization["resources"]


def test_packaged_tables_cover_the_common_gpus_and_the_paper() -> None:
    book = load_price_book()
    assert book.default_table == "gce-us-central1"
    gce = book.table()
    for gpu in (
        "nvidia-tesla-t4",
        "nvidia-l4",
        "nvidia-tesla-v100",
        "nvidia-tesla-a100",
        "nvidia-tesla-p100",
        "nvidia-tesla-k80",
    ):
        price = gce.accelerators[gpu]
        assert 0 < price.spot < price.on_demand, gpu
        assert gce.host_machine_types[gpu] in gce.machines, gpu
    paper = book.table("icac19-table2")
    k80 = paper.accelerators["nvidia-tesla-k80"]
    assert (k80.on_demand, k80.preemptible) == (0.723, 0.256)
    assert (paper.accelerators["nvidia-tesla-p100"].on_demand, paper.accelerators["nvidia-tesla-p100"].spot) == (
        1.43,
        0.551,
    )
    assert (paper.accelerators["nvidia-tesla-v100"].on_demand, paper.accelerators["nvidia-tesla-v100"].spot) == (
        2.144,
        0.861,
    )
    assert paper.machines["n1-standard-4"].on_demand == 0.143


def test_node_price_adds_gpus_and_machine() -> None:
    gce = load_price_table()
    price = gce.node_price(
        machine_type="n1-standard-4", accelerator_type="nvidia-tesla-t4", accelerator_count=2, provisioning="spot"
    )
    assert price.usd_per_hour == pytest.approx(2 * 0.11 + 0.04)
    assert price.on_demand_usd_per_hour == pytest.approx(2 * 0.35 + 0.19)
    assert price.notes == ()


def test_a_table_whose_gpu_price_includes_the_host_prices_the_gpu_alone() -> None:
    paper = load_price_table(table="icac19-table2")
    gpu_node = paper.node_price(
        machine_type="n1-standard-4",
        accelerator_type="nvidia-tesla-k80",
        accelerator_count=1,
        provisioning="preemptible",
    )
    assert gpu_node.usd_per_hour == pytest.approx(0.256)
    cpu_node = paper.node_price(
        machine_type="n1-standard-4", accelerator_type=None, accelerator_count=0, provisioning="on-demand"
    )
    assert cpu_node.usd_per_hour == pytest.approx(0.143)


def test_unknown_shapes_are_priced_by_fallback_and_say_so() -> None:
    gce = load_price_table()
    price = gce.node_price(
        machine_type="n2-custom-6", accelerator_type="nvidia-h100-80gb", accelerator_count=1, provisioning="spot"
    )
    assert price.usd_per_hour == pytest.approx(0.04)  # the fallback machine, the unknown GPU at $0
    assert any("n2-custom-6" in note and "n1-standard-4" in note for note in price.notes)
    assert any("nvidia-h100-80gb" in note for note in price.notes)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("tables: [", "not valid YAML"),
        ("{}", "`tables` mapping"),
        ("tables: {t: {machines: {m: {on-demand: 1, preemptible: 1}}}}", "tables.t.machines.m.spot"),
        ("tables: {t: {machines: {m: {on-demand: -1, preemptible: 1, spot: 1}}}}", "tables.t.machines.m.on-demand"),
        ("tables: {t: {fallbackMachineType: x, machines: {}}}", "fallbackMachineType"),
        ("defaultTable: nope\ntables: {t: {}}", "defaultTable 'nope'"),
    ],
)
def test_broken_price_files_are_refused_with_the_place(text: str, expected: str) -> None:
    with pytest.raises(PriceTableError, match=r"custom\.yaml") as raised:
        parse_price_book(text, source="custom.yaml")
    assert expected in str(raised.value)


def test_unknown_table_names_the_known_ones() -> None:
    with pytest.raises(PriceTableError, match=r"no price table named 'gce-mars'.*icac19-table2"):
        load_price_table(table="gce-mars")


def test_settings_point_at_an_override_file_and_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    custom = tmp_path / "prices.yaml"
    custom.write_text(
        "defaultTable: negotiated\n"
        "tables:\n"
        "  negotiated: {fallbackMachineType: m, machines: {m: {on-demand: 1.0, preemptible: 0.5, spot: 0.25}}}\n"
        "  other: {machines: {m: {on-demand: 9, preemptible: 9, spot: 9}}}\n"
    )
    monkeypatch.setenv(prices_module.PRICES_FILE_ENV, str(custom))
    assert load_price_table().name == "negotiated"
    monkeypatch.setenv(prices_module.PRICE_TABLE_ENV, "other")
    assert load_price_table().machines["m"].spot == 9
    monkeypatch.setenv(prices_module.PRICES_FILE_ENV, str(tmp_path / "missing.yaml"))
    with pytest.raises(PriceTableError, match="cannot read the price file"):
        load_price_table()


def test_price_source_rereads_an_edited_file_and_keeps_the_last_good_one(tmp_path: Path) -> None:
    custom = tmp_path / "prices.yaml"
    custom.write_text("tables: {t: {machines: {m: {on-demand: 1, preemptible: 1, spot: 1}}}}\n")
    source = PriceSource(custom)
    assert source.current().machines["m"].spot == 1
    custom.write_text("tables: {t: {machines: {m: {on-demand: 2, preemptible: 2, spot: 2}}}}\n")
    os.utime(custom, (1, 1))  # a different mtime, whatever the file system's resolution
    assert source.current().machines["m"].spot == 2
    custom.write_text("tables: [broken\n")
    os.utime(custom, (2, 2))
    assert source.current().machines["m"].spot == 2

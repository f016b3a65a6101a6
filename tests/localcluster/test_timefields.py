"""The local API server's reading of metav1.Time / MicroTime follows Go's time.Parse for the two layouts."""

from __future__ import annotations

import pytest

from ttj_localcluster.apiserver.timefields import TimeKind, decode, decode_value, go_time_parse

TIME, MICRO = TimeKind.TIME, TimeKind.MICRO_TIME


@pytest.mark.parametrize(
    ("value", "kind", "error"),
    [
        ("2026-11-21T10:00:00Z", TIME, None),
        ("2026-11-21T10:00:00+05:30", TIME, None),
        ("2026-11-21T10:00:00.123456789-07:00", TIME, None),
        ("2026-11-21T10:00:00,5Z", TIME, None),  # Go takes a comma as the fraction's separator too
        ("2026-11-21T1:00:00Z", TIME, None),  # and a one-digit hour in its general parser
        ("2026-11-21T10:00:00", TIME, 'cannot parse "" as "Z07:00"'),
        ("2026-11-21T10:00:00z", TIME, 'cannot parse "z" as "Z07:00"'),
        ("2026-11-21t10:00:00Z", TIME, 'cannot parse "t10:00:00Z" as "T"'),
        ("2026-11-21T10:00:00Z ", TIME, 'parsing time "2026-11-21T10:00:00Z ": extra text: " "'),
        ("2026-02-29T10:00:00Z", TIME, 'parsing time "2026-02-29T10:00:00Z": day out of range'),
        ("2028-02-29T10:00:00Z", TIME, None),
        ("2026-13-01T10:00:00Z", TIME, 'parsing time "2026-13-01T10:00:00Z": month out of range'),
        ("2026-11-21T10:60:00Z", TIME, 'parsing time "2026-11-21T10:60:00Z": minute out of range'),
        ("2026-11-21T10:00:00.000000Z", MICRO, None),
        ("2026-11-21T10:00:00.000000+01:00", MICRO, None),
        ("2026-11-21T10:00:00+00:00", MICRO, 'cannot parse "+00:00" as ".000000"'),
        ("2026-11-21T10:00:00.123Z", MICRO, 'cannot parse ".123Z" as ".000000"'),
        ("2026-11-21T10:00:00.1234567Z", MICRO, 'cannot parse "7Z" as "Z07:00"'),
        ("2026-11-21T10:00:00.00000aZ", MICRO, 'cannot parse ".00000aZ" as ".000000"'),
    ],
)
def test_go_time_parse(value: str, kind: TimeKind, error: str | None) -> None:
    moment, said = go_time_parse(value, kind)
    if error is None:
        assert said is None
        assert moment is not None
    else:
        assert moment is None
        assert said is not None
        assert said.endswith(error)
        assert said.startswith(f'parsing time "{value}"')


def test_values_are_written_back_in_utc_at_the_type_precision() -> None:
    assert decode_value("2026-11-21T12:00:00.987654321+02:00", TIME) == ("2026-11-21T10:00:00Z", None)
    assert decode_value("2026-11-21T09:30:00.123456-00:30", MICRO) == ("2026-11-21T10:00:00.123456Z", None)
    assert decode_value(None, MICRO) == (None, None)
    assert decode_value(5, TIME) == (None, "json: cannot unmarshal number into Go value of type string")


def test_decode_walks_lists_and_maps() -> None:
    pod = {
        "metadata": {"name": "p", "creationTimestamp": None},
        "status": {
            "startTime": "2026-11-21T10:00:00+00:00",
            "containerStatuses": [{"lastState": {"terminated": {"finishedAt": "2026-11-21T11:00:00+01:00"}}}],
        },
    }
    assert decode("", "Pod", pod) is None
    assert pod["status"]["startTime"] == "2026-11-21T10:00:00Z"
    assert pod["status"]["containerStatuses"][0]["lastState"]["terminated"]["finishedAt"] == "2026-11-21T10:00:00Z"
    pdb = {"metadata": {}, "status": {"disruptedPods": {"a": "2026-11-21"}}}
    assert decode("policy", "PodDisruptionBudget", pdb) == (
        'parsing time "2026-11-21" as "2006-01-02T15:04:05Z07:00": cannot parse "" as "T"'
    )
    lease = {"metadata": {}, "spec": {"renewTime": "2026-11-21T10:00:00Z"}}
    assert decode("coordination.k8s.io", "Lease", lease) is not None
    assert decode("", "ConfigMap", {"metadata": {}, "data": {"renewTime": "x"}}) is None

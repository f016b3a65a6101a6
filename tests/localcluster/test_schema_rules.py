"""CEL rules of a custom resource's schema, admitted write after write: the server remembers a rule's outcome by
its ``self`` and ``oldSelf``, so every write must be judged as if the rules ran afresh."""

from __future__ import annotations

from typing import Any

import pytest

from ttj_localcluster.apiserver.schema import CrdSchema

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "x-kubernetes-validations": [
                {"rule": "self.low <= self.high", "message": "low must not exceed high"},
                {"rule": "self.high == oldSelf.high || self.low == 0", "message": "high is fixed once low is set"},
                {"rule": "self.high / self.low >= 0"},
            ],
            "properties": {"low": {"type": "integer"}, "high": {"type": "integer"}},
        },
        "status": {"type": "object", "properties": {"step": {"type": "integer"}}},
    },
}


def job(low: int, high: int, step: int = 0) -> dict[str, Any]:
    return {"spec": {"low": low, "high": high}, "status": {"step": step}}


def errors_of(schema: CrdSchema, obj: dict[str, Any], old: dict[str, Any] | None) -> list[tuple[str, str]]:
    return schema.admit(obj, old)[1]


LOW_OVER_HIGH = ("spec", 'Invalid value: "object": low must not exceed high')
HIGH_FIXED = ("spec", 'Invalid value: "object": high is fixed once low is set')
DIVIDED_BY_ZERO = (
    "spec",
    "Invalid value: \"object\": ('modulus or divide by zero', <class 'ZeroDivisionError'>, "
    "('integer division or modulo by zero',))",
)

# (name, writes: (object, old) in order, the errors of each write)
CASES = [
    (
        "the same spec twice is judged twice the same",
        [(job(2, 1), None), (job(2, 1, step=3), None)],
        [[LOW_OVER_HIGH], [LOW_OVER_HIGH]],
    ),
    (
        "a transition rule: one self, two oldSelfs",
        [(job(1, 5), job(1, 5)), (job(1, 5), job(1, 4)), (job(1, 5, step=9), job(1, 5))],
        [[], [HIGH_FIXED], []],
    ),
    (
        "a transition rule is not run on a create, even after an update ran it on the same self",
        [(job(1, 5), job(1, 4)), (job(1, 5), None)],
        [[HIGH_FIXED], []],
    ),
    (
        "an evaluation error stays an error",
        [(job(0, 3), None), (job(0, 3, step=1), None)],
        [[DIVIDED_BY_ZERO], [DIVIDED_BY_ZERO]],
    ),
]


@pytest.mark.parametrize(("writes", "want"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_every_write_is_judged_as_if_its_rules_ran_afresh(
    writes: list[tuple[dict[str, Any], dict[str, Any] | None]], want: list[list[tuple[str, str]]]
) -> None:
    schema = CrdSchema(SCHEMA)
    assert schema.definition_errors == []
    assert [errors_of(schema, obj, old) for obj, old in writes] == want
    fresh = [errors_of(CrdSchema(SCHEMA), obj, old) for obj, old in writes]
    assert fresh == want

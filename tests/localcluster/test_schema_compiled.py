"""A custom resource's schema checked by compiled code first: what is admitted, and every error said, must be
what interpreting the schema alone gives (draft 4, as Kubernetes' structural schemas), and the compiled check
must not write into the object (defaulting is the server's own)."""

from __future__ import annotations

from typing import Any

import pytest

from ttj_localcluster.apiserver.schema import CrdSchema

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "required": ["replicas"],
            "properties": {
                "replicas": {"type": "integer", "minimum": 1, "maximum": 64},
                "rate": {"type": "number", "minimum": 0, "exclusiveMinimum": True, "default": 0.1},
                "mode": {"type": "string", "enum": ["Spot", "OnDemand"], "default": "Spot"},
                "name": {"type": "string", "pattern": "^[a-z][a-z0-9-]*$", "maxLength": 12},
                "size": {"x-kubernetes-int-or-string": True},
                "note": {"type": "string", "nullable": True},
                "tags": {"type": "array", "maxItems": 2, "items": {"type": "string", "minLength": 1}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        },
        "status": {"type": "object", "properties": {"step": {"type": "integer"}}},
    },
}


def obj(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "x"}, "spec": {"replicas": 2, **spec}}


class Interpreted(CrdSchema):
    """The same schema, interpreted only."""

    def _passes(self, obj: dict[str, Any]) -> bool:
        return False


CASES = [
    ("valid, defaults filled in", obj()),
    ("valid, every field", obj(rate=2.5, mode="OnDemand", name="a-1", size="50%", note=None, tags=["a"], labels={})),
    ("int-or-string as an integer", obj(size=3)),
    ("a float where an integer is wanted", obj(replicas=2.0)),
    ("a boolean where an integer is wanted", obj(replicas=True)),
    ("a boolean where a number is wanted", obj(rate=True)),
    ("below the minimum", obj(replicas=0)),
    ("over the maximum", obj(replicas=65)),
    ("at an exclusive minimum", obj(rate=0)),
    ("not in the enum", obj(mode="Preemptible")),
    ("not matching the pattern", obj(name="A_b")),
    ("too long", obj(name="abcdefghijklm")),
    ("null where not nullable", obj(name=None)),
    ("a list too long", obj(tags=["a", "b", "c"])),
    ("an empty string in a list", obj(tags=[""])),
    ("a map value of the wrong type", obj(labels={"a": 1})),
    ("a required field missing", {"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "x"}, "spec": {}}),
    ("a status of the wrong type", {**obj(), "status": {"step": "one"}}),
    ("several errors at once", obj(replicas=0, mode="x", tags=[1, 2, 3])),
]


@pytest.mark.parametrize("body", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_compiled_checks_admit_and_say_what_interpreting_says(body: dict[str, Any]) -> None:
    compiled, interpreted = CrdSchema(SCHEMA), Interpreted(SCHEMA)
    assert compiled.definition_errors == []
    assert compiled.admit(body, None) == interpreted.admit(body, None)
    assert compiled.admit(body, None) == interpreted.admit(body, None)  # and again, compiled once


def test_the_cases_cover_both_outcomes() -> None:
    outcomes = {bool(Interpreted(SCHEMA).admit(body, None)[1]) for _, body in CASES}
    assert outcomes == {True, False}


def test_a_schema_that_does_not_compile_is_interpreted_for_every_write(monkeypatch: pytest.MonkeyPatch) -> None:
    import fastjsonschema

    from ttj_localcluster.apiserver import schema as schema_module

    def cannot_compile(*args: Any, **kwargs: Any) -> Any:
        raise fastjsonschema.JsonSchemaDefinitionException("unsupported")

    monkeypatch.setattr(fastjsonschema, "compile", cannot_compile)
    monkeypatch.setattr(schema_module, "_COMPILED", {})
    compiled, interpreted = CrdSchema(SCHEMA), Interpreted(SCHEMA)
    assert [compiled.admit(body, None) for _, body in CASES] == [interpreted.admit(body, None) for _, body in CASES]

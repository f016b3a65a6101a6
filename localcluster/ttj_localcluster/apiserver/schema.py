"""Custom resources: prune unknown fields, apply schema defaults, validate against the openAPIV3Schema (with the
``jsonschema`` library) and evaluate ``x-kubernetes-validations`` CEL rules (with ``cel-python``), in the
order the apiserver does, and report failures as kube's field errors."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sized
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from . import celcost

if TYPE_CHECKING:
    import jsonschema

_ROOT_KEPT = ("apiVersion", "kind", "metadata")


def _to_json_schema(node: Any) -> Any:
    """An OpenAPI v3 (Kubernetes structural) schema as draft-4 JSON Schema: nullable and int-or-string spelt out."""
    if isinstance(node, list):
        return [_to_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        # `default` validates nothing in draft 4, and compiled code would write it into the object: defaulting is
        # _default's, over the OpenAPI schema, as kube's
        if key.startswith("x-kubernetes-") or key in ("nullable", "description", "example", "externalDocs", "default"):
            continue
        if key in ("properties", "patternProperties", "definitions"):
            out[key] = {k: _to_json_schema(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties", "not", "allOf", "anyOf", "oneOf"):
            out[key] = _to_json_schema(value)
        else:
            out[key] = value
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    return out


def _path(parts: list[Any]) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return '"object"'
    if isinstance(value, list):
        return '"array"'
    return json.dumps(value)


def _field_error(error: jsonschema.ValidationError) -> tuple[str, str]:
    where = list(error.absolute_path)
    path = _path(where)
    kind = error.validator
    if kind == "required":
        missing = error.message.split("'")[1] if "'" in error.message else ""
        return (_path([*where, missing]), "Required value")
    if kind == "enum":
        allowed = ", ".join(json.dumps(v) for v in cast(list[Any], error.validator_value))
        return (path, f"Unsupported value: {_show(error.instance)}: supported values: {allowed}")
    if kind == "type":
        return (path, f"Invalid value: {_show(error.instance)}: {path} in body must be of type {error.validator_value}")
    if kind in ("minimum", "maximum"):
        exclusive = (
            cast(dict[str, Any], error.schema).get("exclusiveMinimum" if kind == "minimum" else "exclusiveMaximum")
            is True
        )
        relation = ("greater than" if kind == "minimum" else "less than") + ("" if exclusive else " or equal to")
        return (
            path,
            f"Invalid value: {_show(error.instance)}: {path} in body should be {relation} {error.validator_value}",
        )
    if kind in ("maxItems", "maxProperties"):
        return (path, f"Too many: {len(cast(Sized, error.instance))}: must have at most {error.validator_value} items")
    if kind == "maxLength":
        return (path, f"Too long: may not be longer than {error.validator_value}")
    return (path, f"Invalid value: {_show(error.instance)}: {error.message}")


@dataclass
class CelRule:
    rule: str
    message: str | None
    program: Any
    uses_old_self: bool
    field_path: str | None


def _compile_rules(schema: dict[str, Any], where: str, errors: list[tuple[str, str]]) -> list[CelRule]:
    import celpy  # imported on first use: it takes longer to import than the whole server takes to start

    env = celpy.Environment()
    rules: list[CelRule] = []
    for index, rule in enumerate(schema.get("x-kubernetes-validations") or []):
        text = rule.get("rule", "")
        try:
            program = env.program(env.compile(text))
        except Exception as exc:
            errors.append(
                (
                    f"{where}.x-kubernetes-validations[{index}].rule",
                    f"Invalid value: {json.dumps(text)}: compilation failed: {exc}",
                )
            )
            continue
        rules.append(CelRule(text, rule.get("message"), program, "oldSelf" in text, rule.get("fieldPath")))
    return rules


def _check_structural(schema: Any, where: str, errors: list[tuple[str, str]]) -> None:
    """The parts of kube's CRD schema validation that generated schemas get wrong most often."""
    if not isinstance(schema, dict):
        return
    for key in ("exclusiveMinimum", "exclusiveMaximum"):
        if key in schema and not isinstance(schema[key], bool):
            errors.append(
                (f"{where}.{key}", f"Invalid value: {json.dumps(schema[key])}: must be a boolean (OpenAPI v3.0)")
            )
    if "properties" in schema and schema.get("type") not in (None, "object"):
        errors.append((f"{where}.type", f'Invalid value: "{schema.get("type")}": must be object if properties are set'))
    for name, sub in (schema.get("properties") or {}).items():
        _check_structural(sub, f"{where}.properties[{name}]", errors)
    if isinstance(schema.get("items"), dict):
        _check_structural(schema["items"], f"{where}.items", errors)
    if isinstance(schema.get("additionalProperties"), dict):
        _check_structural(schema["additionalProperties"], f"{where}.additionalProperties", errors)


class CrdSchema:
    """One served version's openAPIV3Schema, ready to admit objects."""

    def __init__(self, schema: dict[str, Any], where: str = "spec.validation.openAPIV3Schema") -> None:
        self.schema = schema
        errors: list[tuple[str, str]] = []
        _check_structural(schema, where, errors)
        structural = not errors
        self._rules: dict[int, list[CelRule]] = {}
        self._outcomes = _Outcomes()
        self._compile_all(schema, where, errors)
        if structural:
            # kube prices the rules once the schema itself is valid; a rule that does not compile costs 0
            errors.extend(celcost.budget_errors(schema, where))
        self.definition_errors = errors
        import jsonschema  # on first use: importing it takes longer than starting the whole server

        self._json_schema = _to_json_schema(schema)
        self._validator = jsonschema.Draft4Validator(self._json_schema)
        self._compiled: Callable[[Any], Any] | None = None

    def _compile_all(self, schema: Any, where: str, errors: list[tuple[str, str]]) -> None:
        if not isinstance(schema, dict):
            return
        if schema.get("x-kubernetes-validations"):
            self._rules[id(schema)] = _compile_rules(schema, where, errors)
        for name, sub in (schema.get("properties") or {}).items():
            self._compile_all(sub, f"{where}.properties[{name}]", errors)
        if isinstance(schema.get("items"), dict):
            self._compile_all(schema["items"], f"{where}.items", errors)
        if isinstance(schema.get("additionalProperties"), dict):
            self._compile_all(schema["additionalProperties"], f"{where}.additionalProperties", errors)

    # -- admission --------------------------------------------------------------------------------

    def admit(
        self, obj: dict[str, Any], old: dict[str, Any] | None, defaults_first: bool = True
    ) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        """Prune, default and validate; returns the admitted object and field errors (empty when valid).

        ``defaults_first`` False validates the object as written and defaults it only for storage: kube-apiserver
        defaults a request's body as it decodes it, but the scale subresource sets the replicas path in the stored
        object and validates that, so a parent object the write creates reaches the CEL rules without defaults."""
        obj = copy.deepcopy(obj)
        kept = {k: obj[k] for k in _ROOT_KEPT if k in obj}
        obj = _prune(self.schema, obj)
        if defaults_first:
            obj = _default(self.schema, obj)
        obj.update(kept)
        errors = [] if self._passes(obj) else self._field_errors(obj)
        if not errors:
            self._run_rules(self.schema, obj, old, [], errors)
        if not defaults_first:
            obj = _default(self.schema, obj)  # what kube's readers see: it defaults what it reads from etcd
        return obj, errors

    def _passes(self, obj: dict[str, Any]) -> bool:
        """Whether ``obj`` is valid, by the schema compiled to Python: 2 ms of jsonschema's interpreting for a job's
        status write become 0.1. Only a refusal is then interpreted, for its complete list of field errors, so
        what is admitted and what is said are jsonschema's alone."""
        if self._compiled is None:
            self._compiled = _compiled(self._json_schema)
        try:
            self._compiled(obj)
        except Exception:  # a refusal, or a value the compiled code did not foresee: jsonschema decides
            return False
        return True

    def _field_errors(self, obj: dict[str, Any]) -> list[tuple[str, str]]:
        return [_field_error(e) for e in sorted(self._validator.iter_errors(obj), key=lambda e: list(e.absolute_path))]

    def _run_rules(self, schema: Any, value: Any, old: Any, where: list[Any], errors: list[tuple[str, str]]) -> None:
        if not isinstance(schema, dict) or value is None:
            return
        site = _Site(value, old)
        for rule in self._rules.get(id(schema), ()):
            if rule.uses_old_self and old is None:
                continue  # transition rules only apply to updates
            outcome = self._outcomes.outcome(rule, site)
            if outcome.out_of_range:  # CEL integers are int64, as Kubernetes stores them
                errors.append((_path(where), f"Invalid value: {_show(value)}: a number is outside the int64 range"))
                return
            if not outcome.holds:
                why = outcome.error if outcome.error is not None else rule.message or f"failed rule: {rule.rule}"
                errors.append((_path(where) + (rule.field_path or ""), f"Invalid value: {_show(value)}: {why}"))
        if isinstance(value, dict):
            for name, sub in (schema.get("properties") or {}).items():
                if name in value:
                    old_sub = old.get(name) if isinstance(old, dict) else None
                    self._run_rules(sub, value[name], old_sub, [*where, name], errors)
        elif isinstance(value, list) and isinstance(schema.get("items"), dict):
            for index, item in enumerate(value):
                self._run_rules(schema["items"], item, None, [*where, index], errors)


#: Compiled validators by their schema's canonical JSON: each test cluster creates the same CRDs again, and
#: compiling the job's schema takes half a second.
_COMPILED: dict[str, Callable[[Any], Any]] = {}
_COMPILED_LIMIT = 32


def _compiled(json_schema: dict[str, Any]) -> Callable[[Any], Any]:
    key = json.dumps(json_schema, sort_keys=True, separators=(",", ":"))
    if key not in _COMPILED:
        import fastjsonschema  # on first use, as jsonschema

        if len(_COMPILED) >= _COMPILED_LIMIT:
            del _COMPILED[next(iter(_COMPILED))]
        try:
            # draft 4, as the interpreting validator; formats unchecked by both
            _COMPILED[key] = fastjsonschema.compile({**json_schema, "$schema": _DRAFT4}, use_formats=False)
        except Exception:  # a schema it cannot compile is interpreted for every write, never refused for that
            _COMPILED[key] = _refuse_all
    return _COMPILED[key]


def _refuse_all(obj: Any) -> Any:
    """The check of a schema that did not compile: it passes nothing, so jsonschema decides every write."""
    raise ValueError("not compiled")


_DRAFT4 = "http://json-schema.org/draft-04/schema#"


@dataclass(frozen=True)
class _Outcome:
    """What evaluating a rule gave."""

    holds: bool
    #: The evaluation's error (the rule then does not hold); None when it evaluated.
    error: str | None = None
    #: ``self`` or ``oldSelf`` holds an integer CEL cannot represent.
    out_of_range: bool = False


_HOLDS = _Outcome(holds=True)
_FALSE = _Outcome(holds=False)
_OUT_OF_RANGE = _Outcome(holds=False, out_of_range=True)


class _Site:
    """The value a node's rules see as ``self`` (and ``oldSelf``): as CEL values, and as canonical JSON to
    remember outcomes by, each made once per node, however many rules it has."""

    def __init__(self, value: Any, old: Any) -> None:
        self.value, self.old = value, old
        self._texts: dict[bool, str] = {}
        self._cel: dict[bool, Any] = {}

    def text(self, of_old: bool) -> str:
        if of_old not in self._texts:
            self._texts[of_old] = json.dumps(self.old if of_old else self.value, sort_keys=True, separators=(",", ":"))
        return self._texts[of_old]

    def cel(self, of_old: bool) -> Any:
        from celpy.adapter import json_to_cel

        if of_old not in self._cel:
            self._cel[of_old] = json_to_cel(self.old if of_old else self.value)
        return self._cel[of_old]


class _Outcomes:
    """Rule outcomes remembered by rule, ``self`` and ``oldSelf``. A CEL rule is a pure function of those, so
    this admits exactly what evaluating again would; it spares the interpreter the parts of an object a write
    carries unchanged (the spec, on every status write), which were most of the server's time under load."""

    #: Enough for every node of a few hundred objects; the oldest are forgotten first.
    LIMIT = 4096

    def __init__(self) -> None:
        self._known: dict[tuple[int, str, str | None], _Outcome] = {}

    def outcome(self, rule: CelRule, site: _Site) -> _Outcome:
        key = (id(rule), site.text(False), site.text(True) if rule.uses_old_self else None)
        if key in self._known:
            return self._known[key]
        outcome = _evaluate(rule, site)
        if len(self._known) >= self.LIMIT:
            del self._known[next(iter(self._known))]
        self._known[key] = outcome
        return outcome


def _evaluate(rule: CelRule, site: _Site) -> _Outcome:
    try:
        activation = {"self": site.cel(False)}
        if rule.uses_old_self:
            activation["oldSelf"] = site.cel(True)
    except (ValueError, OverflowError):
        return _OUT_OF_RANGE
    try:
        result = rule.program.evaluate(activation)
    except Exception as exc:
        result = exc
    if isinstance(result, Exception):
        return _Outcome(holds=False, error=str(result))
    return _HOLDS if bool(result) else _FALSE


def _prune(schema: Any, value: Any) -> Any:
    if not isinstance(schema, dict):
        return value
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
        out: dict[str, Any] = {}
        for key, item in value.items():
            if props and key in props:
                out[key] = _prune(props[key], item)
            elif isinstance(extra, dict):
                out[key] = _prune(extra, item)
            elif extra is True or preserve or (schema.get("x-kubernetes-embedded-resource") and key in _ROOT_KEPT):
                out[key] = item
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_prune(schema["items"], item) for item in value]
    return value


def _default(schema: Any, value: Any) -> Any:
    if not isinstance(schema, dict):
        return value
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for key, sub in props.items():
            if key not in value and isinstance(sub, dict) and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
        for key in list(value):
            if key in props:
                value[key] = _default(props[key], value[key])
            elif isinstance(schema.get("additionalProperties"), dict):
                value[key] = _default(schema["additionalProperties"], value[key])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_default(schema["items"], item) for item in value]
    return value

"""The estimated cost of ``x-kubernetes-validations`` rules, as kube-apiserver 1.25 computes it when a
CustomResourceDefinition is created or updated, and the errors it answers when a rule or the whole schema
is over budget.

kube (apiextensions-apiserver 1.25 with cel-go 0.12) prices each rule statically, before any object exists:

- every schema node a rule can see gets a worst-case size: ``maxLength`` (times 4 for strings: a code point
  can take 4 bytes), ``maxItems``, ``maxProperties``, or, where the schema declares none, as many elements
  as fit in the 3 MiB largest request given the smallest JSON an element can be serialised to;
- cel-go's checker walks the rule and adds the cost of every node: 1 per identifier and field select,
  the list/map/struct creation base costs, comprehensions (``all``, ``exists``, ``filter``, ``map``...)
  paid once per possible element of their range, string functions by the length of the strings they
  traverse (0.1 per byte), ``matches`` by string length times a quarter of the regex length, and the
  Kubernetes library functions (lists, regex, urls, strings) by their own formulas;
- the rule's cost is multiplied by how many times it can run: the product of ``maxItems``/``maxProperties``
  of the lists and maps above it, or, when one of them is unbounded, as many copies of the rule's node as
  fit in 3 MiB;
- a rule over 10 000 000 (``StaticEstimatedCostLimit``) is refused, and so is a schema whose rules add up
  to more than 100 000 000 (``StaticEstimatedCRDCostLimit``).

The numbers here are kube's, read from its source; the code is this project's own.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

PER_RULE_LIMIT = 10_000_000
PER_SCHEMA_LIMIT = 100_000_000
MAX_REQUEST_BYTES = 3 * 1024 * 1024
_U64 = 2**64 - 1

_SELECT_AND_IDENT = 1
_CONST = 0
_LIST_CREATE = 10
_MAP_CREATE = 30
_STRUCT_CREATE = 40
_STRING_TRAVERSAL = 0.1
_REGEX_LENGTH = 0.25

# the smallest JSON for a value of each kind
_MIN_STRING = 2  # ""
_MIN_NUMBER = 1  # 0
_MIN_BOOL = 4  # true
_MIN_DURATION = 3  # "0"
_MIN_DATE = 12  # "YYYY-MM-DD"
_MIN_DATETIME = 21  # "YYYY-MM-DDTHH:MM:SS"
_MAX_FORMATTED = {"duration": 32, "date": 12, "date-time": 32}

_ACCUMULATOR = "__result__"


def _add(x: int, y: int) -> int:
    return min(x + y, _U64)


def _mul(x: int, y: int) -> int:
    return min(x * y, _U64)


def _by_factor(x: int, factor: float) -> int:
    product = float(x) * factor
    if float(x) > 0 and factor > 0 and float(x) > float(_U64) / factor:
        return _U64
    return min(math.ceil(product), _U64)


@dataclass(frozen=True)
class Range:
    """A [min, max] estimate of a cost or a size, saturating at 2**64-1 as kube's uint64 arithmetic does."""

    low: int
    high: int

    def __add__(self, other: Range) -> Range:
        return Range(_add(self.low, other.low), _add(self.high, other.high))

    def times(self, other: Range) -> Range:
        return Range(_mul(self.low, other.low), _mul(self.high, other.high))

    def by_factor(self, factor: float) -> Range:
        return Range(_by_factor(self.low, factor), _by_factor(self.high, factor))

    def union(self, other: Range) -> Range:
        return Range(min(self.low, other.low), max(self.high, other.high))


_ZERO = Range(0, 0)
_ONE = Range(1, 1)
_UNKNOWN_SIZE = Range(0, _U64)


# -- what a rule sees: CEL declarations of schema nodes ------------------------------------------------------------


@dataclass
class Decl:
    """The CEL view of a schema node: its type, its worst-case size and the smallest JSON it serialises to."""

    kind: str  # object, list, map, string, bytes, duration, timestamp, bool, int, double, uint, null, dyn, type
    max_elements: int = 0
    min_size: int = 1
    fields: dict[str, Decl] = field(default_factory=dict)
    elem: Decl | None = None
    key: Decl | None = None


_STRING = Decl("string", min_size=_MIN_STRING)
_BOOL = Decl("bool", min_size=_MIN_BOOL)
_INT = Decl("int", min_size=_MIN_NUMBER)
_UINT = Decl("uint", min_size=1)
_DOUBLE = Decl("double", min_size=_MIN_NUMBER)
_BYTES = Decl("bytes", min_size=_MIN_STRING)
_DYN = Decl("dyn")
#: The declarations of the schema's scalar types, by their OpenAPI name.
_SCALARS: dict[object, Decl] = {"boolean": _BOOL, "number": _DOUBLE, "integer": _INT}
_NULL = Decl("null", min_size=4)
_TYPE = Decl("type")
_DURATION = Decl("duration", min_size=_MIN_DURATION)
_TIMESTAMP = Decl("timestamp", min_size=_MIN_DATE)
_URL = Decl("object")


def _list_of(elem: Decl) -> Decl:
    return Decl("list", min_size=2, elem=elem)


_RESERVED = frozenset(
    [
        "true",
        "false",
        "null",
        "in",
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
        "while",
    ]
)


def cel_field_name(name: str) -> str | None:
    """The name a property has in CEL, or None where kube leaves it out (characters CEL cannot spell)."""
    if name in _RESERVED:
        return f"__{name}__"
    if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_./-]*", name):
        return None
    escapes = {"__": "__underscores__", ".": "__dot__", "-": "__dash__", "/": "__slash__"}
    return re.sub(r"__|[./-]", lambda m: escapes[m.group(0)], name)


def _string_limit(schema: dict[str, Any]) -> int:
    fmt = schema.get("format")
    if schema.get("x-kubernetes-int-or-string"):
        return MAX_REQUEST_BYTES - 2
    return _MAX_FORMATTED.get(fmt or "", MAX_REQUEST_BYTES - 2)


def _with_type_and_object_meta(schema: dict[str, Any]) -> dict[str, Any]:
    """kube makes apiVersion, kind, metadata.name and metadata.generateName visible at a resource's root."""
    props = schema.get("properties") or {}
    meta = props.get("metadata") or {}
    if (
        (props.get("kind") or {}).get("type") == "string"
        and (props.get("apiVersion") or {}).get("type") == "string"
        and meta.get("type") == "object"
        and ((meta.get("properties") or {}).get("name") or {}).get("type") == "string"
        and ((meta.get("properties") or {}).get("generateName") or {}).get("type") == "string"
    ):
        return schema
    plain = {"type": "string"}
    props = {
        **props,
        "kind": plain,
        "apiVersion": plain,
        "metadata": {"type": "object", "properties": {"name": plain, "generateName": plain}},
    }
    return {**schema, "properties": props}


def declare(schema: Any, resource_root: bool = False) -> Decl | None:
    """A schema node's CEL declaration, or None when kube does not expose it to rules."""
    if not isinstance(schema, dict):
        return None
    if schema.get("x-kubernetes-int-or-string"):
        return Decl("dyn", max_elements=MAX_REQUEST_BYTES - 2, min_size=1)
    if resource_root:
        schema = _with_type_and_object_meta(schema)
    kind = schema.get("type")
    if kind == "array":
        return _declare_array(schema)
    if kind == "object":
        return _declare_map(schema) if isinstance(schema.get("additionalProperties"), dict) else _declare_object(schema)
    if kind == "string":
        return _declare_string(schema)
    return _SCALARS.get(kind)


def _declare_nested(schema: Any) -> Decl | None:
    """An item, value or property: an embedded resource is declared as a resource's root is."""
    return declare(schema, bool(isinstance(schema, dict) and schema.get("x-kubernetes-embedded-resource")))


def _declare_array(schema: dict[str, Any]) -> Decl | None:
    """A list: maxItems bounds it, else as many of its smallest item as fit in a request."""
    items = schema.get("items")
    elem = _declare_nested(items) if isinstance(items, dict) else None
    if elem is None:
        return None
    bound = _declared_bound(schema, "maxItems", (MAX_REQUEST_BYTES - 2) // (elem.min_size + 1))
    return Decl("list", max_elements=bound, min_size=2, elem=elem)


def _declare_map(schema: dict[str, Any]) -> Decl | None:
    """An object with additionalProperties: maxProperties bounds it, else as many smallest entries as fit."""
    values = _declare_nested(schema["additionalProperties"])
    if values is None:
        return None
    bound = _declared_bound(schema, "maxProperties", (MAX_REQUEST_BYTES - 2) // (values.min_size + 6))
    return Decl("map", max_elements=bound, min_size=2, elem=values, key=_STRING)


def _declared_bound(schema: dict[str, Any], key: str, otherwise: int) -> int:
    """The schema's own bound (``maxItems``, ``maxProperties``), else what a request can hold."""
    return max(int(schema[key]), 0) if key in schema else otherwise


def _declare_object(schema: dict[str, Any]) -> Decl:
    """An object of named properties; its smallest size counts the required properties without a default."""
    required = set(schema.get("required") or [])
    fields: dict[str, Decl] = {}
    min_size = 2  # {}
    for name, prop in (schema.get("properties") or {}).items():
        sub = _declare_nested(prop)
        if sub is None:
            continue
        cel_name = cel_field_name(name)
        if cel_name is not None:
            fields[cel_name] = sub
        if name in required and "default" not in prop:
            min_size += len(name) + sub.min_size + 4
    return Decl("object", min_size=min_size, fields=fields)


def _declare_string(schema: dict[str, Any]) -> Decl:
    """A string, or the CEL type its format gives it (bytes, duration, timestamp)."""
    fmt = schema.get("format")
    if fmt == "byte":
        bound = max(int(schema["maxLength"]), 0) if "maxLength" in schema else _string_limit(schema)
        return Decl("bytes", max_elements=bound, min_size=_MIN_STRING)
    if fmt == "duration":
        return Decl("duration", max_elements=_string_limit(schema), min_size=_MIN_DURATION)
    if fmt in ("date", "date-time"):
        smallest = _MIN_DATE if fmt == "date" else _MIN_DATETIME
        return Decl("timestamp", max_elements=_string_limit(schema), min_size=smallest)
    # maxLength counts code points; a code point takes up to 4 bytes
    bound = max(int(schema["maxLength"]), 0) * 4 if "maxLength" in schema else _string_limit(schema)
    return Decl("string", max_elements=bound, min_size=_MIN_STRING)


def max_cardinality(min_size: int) -> int:
    """How many copies of a value at least ``min_size`` bytes long fit in one request (a comma between each)."""
    return MAX_REQUEST_BYTES // (min_size + 1)


# -- the rule's syntax tree, with cel-go's macros expanded ---------------------------------------------------------


class Node:
    pass


@dataclass(eq=False)
class Const(Node):
    kind: str
    size: int | None  # byte length of a string or bytes constant; 1 for scalars; None for null


@dataclass(eq=False)
class Ident(Node):
    name: str


@dataclass(eq=False)
class Select(Node):
    operand: Node
    name: str
    test_only: bool = False


@dataclass(eq=False)
class Call(Node):
    function: str
    target: Node | None
    args: list[Node]


@dataclass(eq=False)
class ListLit(Node):
    elements: list[Node]


@dataclass(eq=False)
class MapLit(Node):
    entries: list[tuple[Node, Node]]


@dataclass(eq=False)
class StructLit(Node):
    name: str
    entries: list[tuple[str, Node]]


@dataclass(eq=False)
class Fold(Node):
    """A comprehension, as cel-go expands ``all``, ``exists``, ``exists_one``, ``map`` and ``filter``."""

    iter_var: str
    iter_range: Node
    accu_init: Node
    condition: Node
    step: Node
    result: Node
    macro: str


class UnsupportedRule(ValueError):
    """The rule uses syntax the estimator does not read (it is then left to the compiler to refuse)."""


_OPERATORS = {
    "relation_lt": "_<_",
    "relation_le": "_<=_",
    "relation_gt": "_>_",
    "relation_ge": "_>=_",
    "relation_eq": "_==_",
    "relation_ne": "_!=_",
    "relation_in": "@in",
    "addition_add": "_+_",
    "addition_sub": "_-_",
    "multiplication_mul": "_*_",
    "multiplication_div": "_/_",
    "multiplication_mod": "_%_",
}

_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


def _unquote(text: str) -> bytes:
    """The bytes a CEL string or bytes literal denotes."""
    raw = text[0] in "rR"
    if raw:
        text = text[1:]
    quote = 3 if text[:3] in ('"""', "'''") else 1
    body = text[quote:-quote]
    if raw:
        return body.encode()
    out = bytearray()
    i = 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out += ch.encode()
            i += 1
            continue
        nxt = body[i + 1]
        if nxt in _ESCAPES:
            out += _ESCAPES[nxt].encode()
            i += 2
        elif nxt in "xX":
            out.append(int(body[i + 2 : i + 4], 16))
            i += 4
        elif nxt == "u":
            out += chr(int(body[i + 2 : i + 6], 16)).encode()
            i += 6
        elif nxt == "U":
            out += chr(int(body[i + 2 : i + 10], 16)).encode()
            i += 10
        elif nxt.isdigit():
            out.append(int(body[i + 1 : i + 4], 8))
            i += 4
        else:
            out += nxt.encode()
            i += 2
    return bytes(out)


def _literal(token: Any) -> Const:
    kind = token.type
    text = str(token)
    if kind in ("STRING_LIT", "MLSTRING_LIT"):
        return Const("string", len(_unquote(text)))
    if kind == "BYTES_LIT":
        return Const("bytes", len(_unquote(text[1:])))
    if kind == "NULL_LIT":
        return Const("null", 1)
    named = {"INT_LIT": "int", "UINT_LIT": "uint", "FLOAT_LIT": "double", "BOOL_LIT": "bool"}
    return Const(named[kind], 1)


def parse(rule: str) -> Node:
    """The rule's tree, read with cel-python's parser, with has() and the comprehension macros expanded."""
    from celpy.celparser import CELParser

    return _Reader().node(CELParser().parse(rule))


class _Reader:
    def __init__(self) -> None:
        self._counter = 0

    def node(self, tree: Any) -> Node:
        from lark import Token

        if isinstance(tree, Token):
            raise UnsupportedRule(f"unexpected token {tree!r}")
        kind = tree.data
        kids = list(tree.children)
        if kind == "expr":
            if len(kids) == 1 or kids[1] is None:
                return self.node(kids[0])
            return Call("_?_:_", None, [self.node(k) for k in kids])
        if kind in ("conditionalor", "conditionaland"):
            if kids[0] is None or len(kids) == 1:
                return self.node(kids[-1])
            name = "_||_" if kind == "conditionalor" else "_&&_"
            return Call(name, None, [self.node(kids[0]), self.node(kids[1])])
        if kind in ("relation", "addition", "multiplication"):
            if len(kids) == 1 or kids[0] is None:
                return self.node(kids[-1])
            op_tree = kids[0]
            return Call(_OPERATORS[op_tree.data], None, [self.node(op_tree.children[0]), self.node(kids[1])])
        if kind == "unary":
            if len(kids) == 1:
                return self.node(kids[0])
            name = "!_" if kids[0].data == "unary_not" else "-_"
            return Call(name, None, [self.node(kids[1])])
        if kind in ("member", "primary"):
            return self.node(kids[0])
        if kind == "member_dot":
            return Select(self.node(kids[0]), str(kids[1]))
        if kind == "member_dot_arg":
            return self._call(str(kids[1]), self.node(kids[0]), self._args(kids[2] if len(kids) > 2 else None))
        if kind == "member_index":
            return Call("_[_]", None, [self.node(kids[0]), self.node(kids[1])])
        if kind == "member_object":
            return StructLit(_dotted(kids[0]), self._fields(kids[1] if len(kids) > 1 else None))
        if kind in ("ident_arg", "dot_ident_arg"):
            return self._call(str(kids[0]), None, self._args(kids[1] if len(kids) > 1 else None))
        if kind in ("ident", "dot_ident"):
            return Ident(str(kids[0]))
        if kind == "paren_expr":
            return self.node(kids[0])
        if kind == "literal":
            return _literal(kids[0])
        if kind == "list_lit":
            return ListLit(self._args(kids[0] if kids else None))
        if kind == "map_lit":
            entries: list[tuple[Node, Node]] = []
            if kids and kids[0] is not None:
                parts = [self.node(k) for k in kids[0].children]
                entries = list(zip(parts[0::2], parts[1::2], strict=True))
            return MapLit(entries)
        raise UnsupportedRule(f"unexpected grammar rule {kind}")

    def _args(self, exprlist: Any) -> list[Node]:
        if exprlist is None:
            return []
        return [self.node(k) for k in exprlist.children]

    def _fields(self, fieldinits: Any) -> list[tuple[str, Node]]:
        if fieldinits is None:
            return []
        kids = fieldinits.children
        return [(str(kids[i]), self.node(kids[i + 1])) for i in range(0, len(kids), 2)]

    def _call(self, name: str, target: Node | None, args: list[Node]) -> Node:
        if target is None and name == "has" and len(args) == 1:
            arg = args[0]
            if not isinstance(arg, Select):
                raise UnsupportedRule("invalid argument to has() macro")
            return Select(arg.operand, arg.name, test_only=True)
        if target is not None and name in ("all", "exists", "exists_one", "filter", "map") and len(args) in (2, 3):
            if not isinstance(args[0], Ident):
                raise UnsupportedRule("argument must be a simple name")
            if len(args) == 2 or name == "map":
                return self._fold(name, target, args)
        return Call(name, target, args)

    def _fold(self, macro: str, target: Node, args: list[Node]) -> Fold:
        var = args[0]
        assert isinstance(var, Ident)
        accu = Ident(_ACCUMULATOR)

        def acc() -> Ident:
            return Ident(_ACCUMULATOR)

        if macro == "all":
            return Fold(
                var.name,
                target,
                Const("bool", 1),
                Call("@not_strictly_false", None, [acc()]),
                Call("_&&_", None, [acc(), args[1]]),
                accu,
                macro,
            )
        if macro == "exists":
            return Fold(
                var.name,
                target,
                Const("bool", 1),
                Call("@not_strictly_false", None, [Call("!_", None, [acc()])]),
                Call("_||_", None, [acc(), args[1]]),
                accu,
                macro,
            )
        if macro == "exists_one":
            return Fold(
                var.name,
                target,
                Const("int", 1),
                Const("bool", 1),
                Call("_?_:_", None, [args[1], Call("_+_", None, [acc(), Const("int", 1)]), acc()]),
                Call("_==_", None, [accu, Const("int", 1)]),
                macro,
            )
        if macro == "map":
            transform = args[-1]
            step: Node = Call("_+_", None, [acc(), ListLit([transform])])
            if len(args) == 3:
                step = Call("_?_:_", None, [args[1], step, acc()])
            return Fold(var.name, target, ListLit([]), Const("bool", 1), step, accu, macro)
        step = Call("_?_:_", None, [args[1], Call("_+_", None, [acc(), ListLit([Ident(var.name)])]), acc()])
        return Fold(var.name, target, ListLit([]), Const("bool", 1), step, accu, macro)


def _dotted(tree: Any) -> str:
    from lark import Token, Tree

    parts = [str(t) for t in tree.scan_values(lambda v: isinstance(v, Token))] if isinstance(tree, Tree) else []
    return ".".join(parts)


# -- types: just enough of cel-go's checker to pick the overloads that price differently ---------------------------


_COMPARISONS = ("_<_", "_<=_", "_>_", "_>=_")
_LIST_LIBRARY = ("isSorted", "sum", "max", "min", "indexOf", "lastIndexOf")


class _Types:
    """The type of every node (a Decl), from the rule's root declaration."""

    def __init__(self, root: Decl) -> None:
        self.root = root
        self.types: dict[int, Decl] = {}
        self.scopes: list[tuple[str, Decl]] = []

    def of(self, node: Node) -> Decl:
        return self.types.get(id(node), _DYN)

    def check(self, node: Node) -> Decl:
        found = self._check(node)
        self.types[id(node)] = found
        return found

    def _lookup(self, name: str) -> Decl:
        for var, decl in reversed(self.scopes):
            if var == name:
                return decl
        if name in ("self", "oldSelf"):
            return self.root
        return _DYN

    def _check(self, node: Node) -> Decl:
        if isinstance(node, Const):
            return {
                "string": _STRING,
                "bytes": _BYTES,
                "bool": _BOOL,
                "int": _INT,
                "uint": _UINT,
                "double": _DOUBLE,
                "null": _NULL,
            }[node.kind]
        if isinstance(node, Ident):
            return self._lookup(node.name)
        if isinstance(node, Select):
            return self._check_select(node)
        if isinstance(node, ListLit):
            elems = [self.check(e) for e in node.elements]
            return _list_of(elems[0] if elems else _DYN)
        if isinstance(node, MapLit):
            pairs = [(self.check(k), self.check(v)) for k, v in node.entries]
            return Decl("map", min_size=2, key=pairs[0][0] if pairs else _DYN, elem=pairs[0][1] if pairs else _DYN)
        if isinstance(node, StructLit):
            for _, value in node.entries:
                self.check(value)
            return _DYN
        if isinstance(node, Fold):
            return self._check_fold(node)
        assert isinstance(node, Call)
        target = self.check(node.target) if node.target is not None else None
        args = [self.check(a) for a in node.args]
        return self._result(node.function, target, args)

    def _check_select(self, node: Select) -> Decl:
        """A field of an object, a value of a map, or a has() test."""
        operand = self.check(node.operand)
        if node.test_only:
            return _BOOL
        if operand.kind == "object":
            return operand.fields.get(node.name, _DYN)
        if operand.kind == "map" and operand.elem is not None:
            return operand.elem
        return _DYN

    def _check_fold(self, node: Fold) -> Decl:
        """A comprehension (all, exists, exists_one, map, filter): its variables scoped over its parts."""
        range_type = self.check(node.iter_range)
        self.check(node.accu_init)
        var_type = _DYN
        if range_type.kind == "list" and range_type.elem is not None:
            var_type = range_type.elem
        elif range_type.kind == "map" and range_type.key is not None:
            var_type = range_type.key
        accu_type = self.of(node.accu_init)
        if node.macro == "filter":
            accu_type = _list_of(var_type)
        self.scopes.append((_ACCUMULATOR, accu_type))
        self.scopes.append((node.iter_var, var_type))
        self.check(node.condition)
        self.check(node.step)
        self.scopes.pop()
        if node.macro == "map":
            transform = node.step
            if isinstance(transform, Call) and transform.function == "_?_:_":
                transform = transform.args[1]
            assert isinstance(transform, Call)
            new_list = transform.args[1]
            assert isinstance(new_list, ListLit)
            accu_type = _list_of(self.of(new_list.elements[0]))
        self.scopes.append((_ACCUMULATOR, accu_type))
        result = self.check(node.result)
        self.scopes.pop()
        self.scopes.pop()
        return result if node.macro != "map" else accu_type

    def _result(self, name: str, target: Decl | None, args: list[Decl]) -> Decl:
        if name in ("_&&_", "_||_", "!_", "@not_strictly_false", "@in", "_==_", "_!=_", *_COMPARISONS):
            return _BOOL
        if name == "_?_:_":
            return args[1] if args[1].kind == args[2].kind else _DYN
        if name in ("_+_", "_-_", "_*_", "_/_", "_%_", "-_"):
            return args[0]
        if name == "_[_]":
            container = args[0]
            if container.kind in ("list", "map") and container.elem is not None:
                return container.elem
            return _DYN
        if name in ("matches", "startsWith", "endsWith", "contains", "isSorted", "isURL"):
            return _BOOL
        if name in ("size", "int", "indexOf", "lastIndexOf"):
            return _INT
        if name in ("string", "lowerAscii", "upperAscii", "trim", "substring", "replace", "charAt", "join", "find"):
            return _STRING
        if name in ("getScheme", "getHost", "getHostname", "getPort", "getEscapedPath"):
            return _STRING
        if name in ("split", "findAll"):
            return _list_of(_STRING)
        if name in ("sum", "min", "max") and target is not None and target.elem is not None:
            return target.elem
        conversions = {
            "uint": _UINT,
            "double": _DOUBLE,
            "bytes": _BYTES,
            "bool": _BOOL,
            "duration": _DURATION,
            "timestamp": _TIMESTAMP,
            "type": _TYPE,
            "url": _URL,
        }
        return conversions.get(name, _DYN)


def _overloads(call: Call, target: Decl | None, args: list[Decl]) -> list[str]:
    """The cel-go overload ids, for the functions whose cost depends on which overload the checker picked."""
    name = call.function

    def kinds(decl: Decl, *wanted: str) -> bool:
        return decl.kind in wanted or decl.kind == "dyn"

    if name in ("_&&_", "_||_"):
        return ["logical_and" if name == "_&&_" else "logical_or"]
    if name == "_?_:_":
        return ["conditional"]
    if name in ("_==_", "_!=_"):
        return ["equals" if name == "_==_" else "not_equals"]
    if name in _COMPARISONS:
        found = ["compare_other"] if args[0].kind not in ("string", "bytes") else []
        if kinds(args[0], "string") and kinds(args[1], "string"):
            found.append("compare_string")
        if kinds(args[0], "bytes") and kinds(args[1], "bytes"):
            found.append("compare_bytes")
        return found or ["compare_other"]
    if name == "@in" and len(args) == 2:
        found = []
        if kinds(args[1], "list"):
            found.append("in_list")
        if kinds(args[1], "map"):
            found.append("in_map")
        return found or ["in_other"]
    if name == "_+_" and len(args) == 2:
        found = []
        for kind in ("string", "bytes", "list"):
            if kinds(args[0], kind) and kinds(args[1], kind):
                found.append(f"add_{kind}")
        if args[0].kind not in ("string", "bytes", "list"):
            found.append("add_other")
        return found
    if name == "_[_]":
        found = []
        if kinds(args[0], "list"):
            found.append("index_list")
        if kinds(args[0], "map"):
            found.append("index_map")
        return found or ["index_other"]
    string_method = name in ("startsWith", "endsWith", "contains", "matches")
    if string_method and call.target is not None and target is not None and len(args) == 1 and kinds(target, "string"):
        return [f"{name}_string"]
    if call.target is None and len(args) == 1:
        if name == "bytes" and kinds(args[0], "string"):
            return ["string_to_bytes"]
        if name == "string" and kinds(args[0], "bytes"):
            return ["bytes_to_string"]
    return [name]


# -- the cost walk: cel-go's checker.Cost with Kubernetes' size estimator and library costs ------------------------


class _Coster:
    def __init__(self, root: Decl, types: _Types) -> None:
        self.root = root
        self.types = types
        self.paths: dict[int, list[str] | None] = {}
        self.iter_ranges: dict[str, list[Node]] = {}
        self.computed: dict[int, Range] = {}

    # sizes

    def _path(self, node: Node) -> list[str] | None:
        path = self.paths.get(id(node))
        if path and path[0] == _ACCUMULATOR:
            return None
        return path

    def _decl_at(self, path: list[str]) -> Decl | None:
        current = self.root
        for name in path[1:]:  # the first element is the variable, self or oldSelf
            if name in ("@items", "@values"):
                if current.elem is None:
                    return None
                current = current.elem
            elif name == "@keys":
                if current.key is None:
                    return None
                current = current.key
            else:
                found = current.fields.get(name)
                if found is None:
                    return None
                current = found
        return current

    def size(self, node: Node | None, path: list[str] | None = None) -> Range:
        """cel-go's size estimate of a node (or, without one, of the schema node at ``path``): what the
        expression itself tells (constants, literals, results of +, ?:), else the declared or derived bound."""
        if node is not None:
            computed = self.computed.get(id(node))
            if computed is not None:
                return computed
            if isinstance(node, Const):
                return _UNKNOWN_SIZE if node.size is None else Range(node.size, node.size)
            if isinstance(node, ListLit):
                return Range(len(node.elements), len(node.elements))
            if isinstance(node, MapLit):
                return Range(len(node.entries), len(node.entries))
            if isinstance(node, StructLit):
                return _ZERO  # cel-go sizes a message literal as 0
            path = self._path(node)
        if path:
            decl = self._decl_at(path)
            if decl is not None:
                return Range(0, decl.max_elements)
        return _UNKNOWN_SIZE

    # nodes

    def cost(self, node: Node) -> Range:
        if isinstance(node, Const):
            return Range(_CONST, _CONST)
        if isinstance(node, Ident):
            return self._ident(node)
        if isinstance(node, Select):
            return self._select(node)
        if isinstance(node, Call):
            return self._call(node)
        if isinstance(node, ListLit):
            total = _ZERO
            for element in node.elements:
                total = total + self.cost(element)
            return total + Range(_LIST_CREATE, _LIST_CREATE)
        if isinstance(node, MapLit):
            total = _ZERO
            for key, value in node.entries:
                total = total + self.cost(key) + self.cost(value)
            return total + Range(_MAP_CREATE, _MAP_CREATE)
        if isinstance(node, StructLit):
            total = _ZERO
            for _, value in node.entries:
                total = total + self.cost(value)
            return total + Range(_STRUCT_CREATE, _STRUCT_CREATE)
        assert isinstance(node, Fold)
        return self._fold(node)

    def _ident(self, node: Ident) -> Range:
        ranges = self.iter_ranges.get(node.name)
        if ranges:
            iter_range = ranges[-1]
            range_type = self.types.of(iter_range)
            base = self.paths.get(id(iter_range)) or []
            if range_type.kind == "list":
                self.paths[id(node)] = [*base, "@items"]
            elif range_type.kind == "map":
                self.paths[id(node)] = [*base, "@keys"]
        else:
            self.paths[id(node)] = [node.name]
        return Range(_SELECT_AND_IDENT, _SELECT_AND_IDENT)

    def _select(self, node: Select) -> Range:
        if node.test_only:
            return _ZERO
        total = self.cost(node.operand)
        if self.types.of(node.operand).kind in ("map", "object"):
            total = total + Range(_SELECT_AND_IDENT, _SELECT_AND_IDENT)
        self.paths[id(node)] = [*(self.paths.get(id(node.operand)) or []), node.name]
        return total

    def _fold(self, node: Fold) -> Range:
        total = self.cost(node.iter_range) + self.cost(node.accu_init)
        self.iter_ranges.setdefault(node.iter_var, []).append(node.iter_range)
        loop = self.cost(node.condition)
        step = self.cost(node.step)
        self.iter_ranges[node.iter_var].pop()
        total = total + self.cost(node.result)
        count = self.size(node.iter_range)
        return total + count.times(step + loop)

    def _call(self, node: Call) -> Range:
        arg_costs = [self.cost(a) for a in node.args]
        total = _ZERO
        target_type = None
        if node.target is not None:
            total = total + self.cost(node.target)
            target_type = self.types.of(node.target)
        overloads = _overloads(node, target_type, [self.types.of(a) for a in node.args])
        fn_cost = Range(_U64, 0)
        result_size: Range | None = None
        for overload in overloads:
            cost, size = self._function(node, overload, arg_costs)
            fn_cost = fn_cost.union(cost)
            if size is not None:
                result_size = size if result_size is None else result_size.union(size)
            if overload == "index_list" and node.args:
                self.paths[id(node)] = [*(self.paths.get(id(node.args[0])) or []), "@items"]
            if overload == "index_map" and node.args:
                self.paths[id(node)] = [*(self.paths.get(id(node.args[0])) or []), "@values"]
        if result_size is not None:
            self.computed[id(node)] = result_size
        return total + fn_cost

    def _function(self, node: Call, overload: str, arg_costs: list[Range]) -> tuple[Range, Range | None]:
        args = node.args
        arg_sum = _ZERO
        for cost in arg_costs:
            arg_sum = arg_sum + cost
        library = self._library(node)
        if library is not None:
            return library + arg_sum, None
        if overload in ("startsWith_string", "endsWith_string", "string_to_bytes", "bytes_to_string"):
            return self.size(args[0]).by_factor(_STRING_TRAVERSAL) + arg_sum, None
        if overload == "in_list" and len(args) == 2:
            return self.size(args[1]).by_factor(1) + arg_sum, None
        if overload == "matches_string" and node.target is not None and len(args) == 1:
            text = (self.size(node.target) + _ONE).by_factor(_STRING_TRAVERSAL)
            regex = self.size(args[0]).by_factor(_REGEX_LENGTH)
            return text.times(regex) + arg_sum, None
        if overload == "contains_string" and node.target is not None and len(args) == 1:
            text = self.size(node.target).by_factor(_STRING_TRAVERSAL)
            sub = self.size(args[0]).by_factor(_STRING_TRAVERSAL)
            return text.times(sub) + arg_sum, None
        if overload in ("logical_and", "logical_or"):
            return Range(arg_costs[0].low, (arg_costs[0] + arg_costs[1]).high), None
        if overload == "conditional":
            size = self.size(args[1]).union(self.size(args[2]))
            return arg_costs[0] + arg_costs[1].union(arg_costs[2]), size
        if overload in ("add_string", "add_bytes", "add_list") and len(args) == 2:
            size = self.size(args[0]) + self.size(args[1])
            if overload == "add_list":
                return _ONE + arg_sum, size
            return size.by_factor(_STRING_TRAVERSAL) + arg_sum, size
        if overload in ("compare_string", "compare_bytes", "equals", "not_equals"):
            smallest = min(self.size(args[0]).high, self.size(args[1]).high)
            return Range(1 if smallest > 0 else 0, smallest).by_factor(_STRING_TRAVERSAL) + arg_sum, None
        return _ONE + arg_sum, None

    def _library(self, node: Call) -> Range | None:
        """The Kubernetes CEL library's own estimates (lists, regex, urls, strings), by function name."""
        name, target, args = node.function, node.target, node.args
        if name in _LIST_LIBRARY and target is not None:
            target_type = self.types.of(target)
            if target_type.kind == "list" and target_type.elem is not None:
                elem_cost = _ONE
                elem_path = self._path(target)
                if target_type.elem.kind in ("string", "bytes"):
                    elem_size = self.size(None, [*elem_path, "@items"] if elem_path is not None else None)
                    elem_cost = elem_cost + elem_size.by_factor(_STRING_TRAVERSAL)
                return self.size(target).times(elem_cost)
            return self.size(target).by_factor(_STRING_TRAVERSAL)
        if name == "url" and len(args) == 1:
            return self.size(args[0]).by_factor(_STRING_TRAVERSAL)
        if name in ("lowerAscii", "upperAscii", "substring", "trim") and target is not None:
            return self.size(target).by_factor(_STRING_TRAVERSAL)
        if name == "replace" and target is not None and len(args) >= 2:
            return self.size(target).by_factor(2 * _STRING_TRAVERSAL)
        if name == "split" and target is not None:
            return self.size(target).by_factor(2 * _STRING_TRAVERSAL)
        if name == "join" and target is not None:
            target_type = self.types.of(target)
            list_size = self.size(target)
            size = _ZERO
            if target_type.kind == "list" and target_type.elem is not None:
                elem_path = self._path(target)
                elem_size = self.size(None, [*elem_path, "@items"] if elem_path is not None else None)
                size = list_size.times(elem_size)
            if args:
                separators = Range(max(list_size.low - 1, 0), max(list_size.high - 1, 0))
                size = size + self.size(args[0]).times(separators)
            return size.by_factor(_STRING_TRAVERSAL)
        if name in ("find", "findAll") and target is not None and args:
            text = (self.size(target) + _ONE).by_factor(_STRING_TRAVERSAL)
            return text.times(self.size(args[0]).by_factor(_REGEX_LENGTH))
        return None


def estimate(rule: str, root: Decl) -> int:
    """The worst-case cost of one evaluation of ``rule`` on a node declared as ``root`` (kube's MaxCost)."""
    tree = parse(rule)
    types = _Types(root)
    if types.check(tree).kind not in ("bool", "dyn"):
        return 0  # kube refuses the rule (it must evaluate to a bool) and counts no cost
    return _Coster(root, types).cost(tree).high


# -- a whole schema ------------------------------------------------------------------------------------------------


@dataclass
class RuleCost:
    path: str  # kube's field path of the rule, ending in x-kubernetes-validations[i].rule
    rule: str
    cost: int  # one evaluation
    cardinality: int  # how many times it can run per object
    total: int  # cost x cardinality, the figure kube checks


def _max_elements(schema: dict[str, Any]) -> int | None:
    """How many children a node can have (None: unbounded), as kube counts it for cardinality."""
    kind = schema.get("type")
    if kind == "object":
        if "additionalProperties" in schema and schema["additionalProperties"] not in (None, False):
            return max(int(schema["maxProperties"]), 0) if "maxProperties" in schema else None
        return 1
    if kind == "array":
        return max(int(schema["maxItems"]), 0) if "maxItems" in schema else None
    return 1


def rule_costs(schema: dict[str, Any], where: str) -> list[RuleCost]:
    """Every rule's cost, walking the schema as kube's CRD validation does (properties, items,
    additionalProperties)."""
    return list(_walk(schema, where, 1, is_root=True))


def _walk(schema: Any, where: str, cardinality: int | None, is_root: bool) -> Iterator[RuleCost]:
    if not isinstance(schema, dict):
        return
    rules = schema.get("x-kubernetes-validations") or []
    if rules:
        decl = declare(schema, is_root or bool(schema.get("x-kubernetes-embedded-resource")))
        if decl is not None:
            for index, rule in enumerate(rules):
                text = str(rule.get("rule", ""))
                try:
                    cost = estimate(text, decl) if text.strip() else 0
                except Exception:  # a rule that does not compile costs nothing: the compiler says why
                    cost = 0
                times = cardinality if cardinality is not None else max_cardinality(decl.min_size)
                total = 0 if cost == 0 else _mul(cost, times)
                path = f"{where}.x-kubernetes-validations[{index}].rule"
                yield RuleCost(path, text, cost, times, total)
    bound = _max_elements(schema)
    child = None if cardinality is None or bound is None else _mul(cardinality, bound)
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        yield from _walk(extra, f"{where}.additionalProperties", child, False)
    for name, sub in (schema.get("properties") or {}).items():
        yield from _walk(sub, f"{where}.properties[{name}]", child, False)
    items = schema.get("items")
    if isinstance(items, dict):
        yield from _walk(items, f"{where}.items", child, False)


def budget_message(what: str, cost: int, limit: int) -> str:
    """kube's wording for a cost over its limit, the factor formatted as kube formats it."""
    factor = float(cost) / float(limit)
    if factor > 100.0:
        shown = "more than 100x"
    elif factor < 1.5:
        shown = f"{factor:f}x"
    else:
        shown = f"{factor:.1f}x"
    return (
        f"{what} exceeds budget by factor of {shown} (try simplifying the rule, or adding maxItems, "
        "maxProperties, and maxLength where arrays, maps, and strings are declared)"
    )


def budget_errors(schema: dict[str, Any], where: str) -> list[tuple[str, str]]:
    """The (field, message) errors kube answers for a schema whose rules are over budget."""
    costs = rule_costs(schema, where)
    errors = [
        (c.path, "Forbidden: " + budget_message("estimated rule cost", c.total, PER_RULE_LIMIT))
        for c in costs
        if c.total > PER_RULE_LIMIT
    ]
    total = 0
    for c in costs:
        total = _add(total, c.total)
    if total > PER_SCHEMA_LIMIT:
        # kube names the four most expensive rules that are each at least 1 % of the budget
        heaviest = sorted((c for c in costs if c.total >= PER_SCHEMA_LIMIT // 100), key=lambda c: -c.total)[:4]
        for c in heaviest:
            errors.append(
                (
                    c.path,
                    "Forbidden: contributed to estimated rule cost total exceeding cost limit for entire "
                    "OpenAPIv3 schema",
                )
            )
        what = "x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema"
        errors.append((where, "Forbidden: " + budget_message(what, total, PER_SCHEMA_LIMIT)))
    return errors


# -- a safety margin for CI ----------------------------------------------------------------------------------------


def version_schemas(crd: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(version name, kube's field path, schema) of each version's schema. kube validates a schema that every
    version shares once, as ``spec.validation`` (its internal form moves it there)."""
    versions = (crd.get("spec") or {}).get("versions") or []
    shared = len({json.dumps(v.get("schema"), sort_keys=True) for v in versions}) == 1
    found = []
    for index, version in enumerate(versions):
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        if not isinstance(schema, dict) or (shared and index > 0):
            continue
        where = "spec.validation.openAPIV3Schema" if shared else f"spec.versions[{index}].schema.openAPIV3Schema"
        found.append((str(version.get("name")), where, schema))
    return found


def margin_problems(crd: dict[str, Any], margin: int = 2) -> list[str]:
    """What in a CRD comes within ``margin`` times of kube's budgets: each rule over PER_RULE_LIMIT/margin, or
    a schema whose rules add up to more than PER_SCHEMA_LIMIT/margin."""
    problems: list[str] = []
    for name, where, schema in version_schemas(crd):
        costs = rule_costs(schema, where)
        for c in costs:
            if c.total * margin > PER_RULE_LIMIT:
                problems.append(
                    f"{c.path}: rule {c.rule!r} costs {c.total} ({c.cost} per evaluation x {c.cardinality} "
                    f"evaluations), more than 1/{margin} of kube's per-rule budget {PER_RULE_LIMIT}"
                )
        total = sum(c.total for c in costs)
        if total * margin > PER_SCHEMA_LIMIT:
            heaviest = sorted(costs, key=lambda c: -c.total)[:4]
            named = "; ".join(f"{c.path} {c.rule!r}: {c.total}" for c in heaviest)
            problems.append(
                f"{where} (version {name}): the rules cost {total} in all, more than 1/{margin} of kube's "
                f"per-CRD budget {PER_SCHEMA_LIMIT}; the heaviest: {named}"
            )
    return problems


def report(crd: dict[str, Any]) -> str:
    """The heaviest rules and the total, against kube's budgets."""
    lines = []
    for name, where, schema in version_schemas(crd):
        costs = rule_costs(schema, where)
        total = sum(c.total for c in costs)
        lines.append(
            f"{where} (version {name}): {len(costs)} rules, estimated total {total} "
            f"({100 * total / PER_SCHEMA_LIMIT:.1f} % of {PER_SCHEMA_LIMIT}); the heaviest:"
        )
        for c in sorted(costs, key=lambda c: -c.total)[:3]:
            lines.append(
                f"  {c.total} = {c.cost} x {c.cardinality} ({100 * c.total / PER_RULE_LIMIT:.1f} % of "
                f"{PER_RULE_LIMIT}) {c.path}: {c.rule}"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the estimated CEL rule cost of CRDs; exit 1 when one comes within 2x of kube's budgets."""
    import argparse

    import yaml

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("files", nargs="+", help="CustomResourceDefinition YAML files")
    parser.add_argument("--margin", type=int, default=2, help="how far under kube's budgets to stay (default 2x)")
    args = parser.parse_args(argv)
    failed = False
    for path in args.files:
        with open(path, encoding="utf-8") as stream:
            for crd in yaml.safe_load_all(stream):
                if not isinstance(crd, dict) or crd.get("kind") != "CustomResourceDefinition":
                    continue
                print(f"{path}: {crd['metadata']['name']}")
                print(report(crd))
                for problem in margin_problems(crd, args.margin):
                    failed = True
                    print(f"{path}: {problem}", file=sys.stderr)
    return 1 if failed else 0

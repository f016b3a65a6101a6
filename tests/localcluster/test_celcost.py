"""The local API server's CEL rule cost estimate against kube-apiserver 1.25's.

The figures of CASES are worked out by hand from kube's rules (cel-go 0.12 checker/cost.go, the
apiextensions-apiserver size estimator and library/cost.go), the working in the comment beside each. All of
them, and those of CONFIRMED_ON_KUBE, were checked on a real kube-apiserver 1.25: with the rule on the items of
a list whose maxItems N takes N x cost just over the 10 000 000 per-rule budget, kube refused with the same
factor (six decimals: the exact cost) and accepted N - 1 (tests/conformance/test_crd_cost.py does this for a
few of them on whichever cluster it runs against).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ttj_localcluster.apiserver import celcost

MAX_STR = 3 * 1024 * 1024 - 2  # a string without maxLength: as long as fits in 3 MiB, less the quotes


def s(max_length: int | None = None) -> dict[str, Any]:
    return {"type": "string"} if max_length is None else {"type": "string", "maxLength": max_length}


def obj(required: list[str] | None = None, **properties: Any) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def lst(items: dict[str, Any], max_items: int | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "array", "items": items}
    if max_items is not None:
        schema["maxItems"] = max_items
    return schema


def mp(values: dict[str, Any], max_properties: int | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "additionalProperties": values}
    if max_properties is not None:
        schema["maxProperties"] = max_properties
    return schema


INT = {"type": "integer"}
ROOT = obj(
    a=INT,
    b=INT,
    s=s(10),  # 40 bytes: maxLength counts code points, up to 4 bytes each
    t=s(100),
    u=s(),
    l=lst(s(5), 10),
    lu=lst(s(5)),
    m=mp(s(5), 5),
    mi=mp(INT),
    n=obj(o=obj(c=INT)),
    x=obj(),
    y=obj(),
)

CASES = [
    # ident 1 + select on an object 1, twice; an int comparison is 1
    ("self.a < self.b", 5),
    # == prices min(size) x 0.1 rounded up: min(40, 3) -> 1; + self.s 2
    ("self.s == 'abc'", 3),
    ("self.s == self.t", 4 + 4),  # min(40, 400) x 0.1 = 4; + 2 + 2
    ("self.u == self.u", 314573 + 4),  # unbounded: 3145726 x 0.1 rounded up
    # has() is free; == on two has() results has no known size: (2^64) x 0.1 (real: refused, more than 100x)
    ("has(self.x) != has(self.y)", 1844674407370955264),
    ("has(self.x) ? !has(self.y) : has(self.y)", 1),  # 0 + max(1 + 0, 0)
    # startsWith prices its argument, not its target: 20 x 0.1 = 2; + target 2
    ("self.s.startsWith('abcdefghijklmnopqrst')", 4),
    # matches: (40 + 1) x 0.1 -> 5, times regex length 8 x 0.25 = 2; + target 2 (real)
    ("self.s.matches('^[a-z]+$')", 12),
    ("!self.s.matches('^[a-z]+$')", 13),
    ("self.s.contains('ab')", 6),  # 40 x 0.1 = 4 times 2 x 0.1 -> 1; + 2
    # string concatenation: (40 + 400) x 0.1 = 44 + 4; then == against 'x': min(440, 1) -> 1
    ("self.s + self.t == 'x'", 49),
    ("self.n.o.c == 1", 4),  # three selects on objects + self; ints have size 0 -> == costs 0
    # all: range 2 + init 0 + result 1 + 10 x (loop 2 + step: accu 1 + (size 2 + < 1))
    ("self.l.all(x, x.size() < 5)", 63),
    # exists: loop is @not_strictly_false(!accu) = 3; step accu 1 + (x == 'a': 1 + 1)
    ("self.l.exists(x, x == 'a')", 63),
    # an unbounded list of strings holds (3145726) / (2 + 1) items (real)
    ("self.lu.exists(x, x == 'a')", 3 + 6 * (MAX_STR // 3)),
    # filter: range 2 + init [] 10 + result 1 + 10 x (cond 2 + accu + [x] 13); size() 1; > 1
    ("self.l.filter(x, x == 'a').size() > 0", 165),
    # map: step accu + [x + 'a']: (20 + 1) x 0.1 -> 3 + 1; [..] + 10; + 1 + accu 1 -> 16
    ("self.l.map(x, x + 'a').size() > 0", 175),
    # map keys are sized 0 (kube declares them as a plain string): startsWith 1 + 1, accu 1, loop 2
    ("self.m.all(k, k.startsWith('a'))", 3 + 5 * 5),
    ("'x' in self.m", 3),
    ("'x' in ['x', 'y', 'z']", 3 + 10),  # in a list: 3 x 1 + the list 10
    # an unbounded map of ints: (3145726) / (1 + 6) entries; per entry loop 2 + accu 1 + (k == 'a') 1
    ("self.mi.all(k, k == 'a')", 3 + 4 * (MAX_STR // 7)),
    ("self.l[0] == 'a'", 4),  # index 1 + self.l 2; the item (20) == 'a' -> 1
    # Kubernetes library functions
    ("self.s.lowerAscii() == 'a'", 7),  # 40 x 0.1 + 2; its result size is unknown: == costs 1
    ("self.s.split(',').size() > 1", 12),  # 40 x 0.2 + 2, size 1, > 1
    ("self.l.isSorted()", 32),  # 10 items x (1 + 20 x 0.1) + 2
    ("self.l.join(',') == 'a'", 24),  # (10 x 20 + 1 x 9) x 0.1 -> 21 + 2; == 1
    ("self.s.find('[0-9]+') == '1'", 13),  # (40 + 1) x 0.1 -> 5 x (6 x 0.25 -> 2) + 2; == 1
]

# Read off a real kube-apiserver 1.25 (the factor it printed at the bound where it flips from accepting
# to refusing; see the module docstring), beyond the hand-worked cases above.
CONFIRMED_ON_KUBE = [
    ("self.u.lowerAscii() == 'a'", 314576),
    ("self.s.upperAscii().size() > 0", 8),
    ("self.s.trim() == 'a'", 7),
    ("self.s.substring(1) == 'a'", 7),
    ("self.s.replace('a', 'bb') == 'a'", 11),
    ("self.l.indexOf('a') > 0", 33),
    ("self.s.indexOf('a') > 0", 7),
    ("self.s.findAll('[a-z]').size() > 0", 14),
    ("isURL(self.s)", 3),
    ("url(self.s).getHost() == 'a'", 8),
    ("self.l.exists_one(x, x == 'a')", 44),
    ("self.l.map(x, x == 'a', x + 'b').size() > 0", 195),
    ("self.m['a'] == 'b'", 4),
    ("self.l.all(x, self.l.exists(y, x == y))", 863),
    ("self.n.o.c + 1 > self.a * 2", 9),
    ("self.s < self.t", 8),
    ("size(self.s) > 2", 4),
    ("self.s in self.l", 14),
    ("self.l + ['a'] == ['b']", 24),
    ("{'a': self.s}['a'] == 'a'", 33),
    ("self.s.endsWith(self.t)", 44),
    ("self.s.contains(self.t)", 164),
    ("bytes(self.s).size() > 0", 8),
    ("string(self.a) == '1'", 4),
    ("type(self.a) == int", 4),
    ("self.mi.exists(k, self.mi[k] > 2)", 4044504),
    ("self.s.matches(self.t)", 504),
    ("has(self.s) == has(self.t)", 1844674407370955264),  # kube: "more than 100x"
    ("self.l.filter(x, x.startsWith('a')).all(y, y.endsWith('b'))", 2**64 - 1),  # kube: "more than 100x"
]


@pytest.mark.parametrize(("rule", "expected"), CASES + CONFIRMED_ON_KUBE, ids=[c[0] for c in CASES + CONFIRMED_ON_KUBE])
def test_rule_cost_is_kube_apiservers(rule: str, expected: int) -> None:
    root = celcost.declare(ROOT)
    assert root is not None
    assert celcost.estimate(rule, root) == expected


def test_the_resource_root_sees_metadata_name() -> None:
    root = celcost.declare(obj(spec=obj()), resource_root=True)
    assert root is not None
    # self 1 + metadata 1 + name 1; == 'x': min(3145726, 1) -> 1
    assert celcost.estimate("self.metadata.name == 'x'", root) == 4


def _rule(rule: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {**schema, "x-kubernetes-validations": [{"rule": rule}]}


CHECK_A = "self.a < self.b"  # 5 per evaluation
NAMED = obj(["name"], name=s(10), a=INT, b=INT)

CARDINALITY = [
    # the product of maxItems and maxProperties above the rule
    (obj(outer=lst(obj(inner=lst(_rule(CHECK_A, obj(a=INT, b=INT)), 8)), 4)), 32),
    (obj(m=mp(_rule(CHECK_A, obj(a=INT, b=INT)), 5)), 5),
    # unbounded above: as many copies of the rule's node as fit in 3 MiB, a comma between each;
    # {"name":""} is 12 bytes at least
    (obj(outer=lst(_rule(CHECK_A, NAMED))), (3 * 1024 * 1024) // 13),
    (obj(outer=lst(obj(inner=lst(_rule(CHECK_A, NAMED), 2)))), (3 * 1024 * 1024) // 13),
    (_rule(CHECK_A, obj(a=INT, b=INT)), 1),
]


@pytest.mark.parametrize(("schema", "cardinality"), CARDINALITY)
def test_a_rule_is_paid_once_per_copy_of_its_node(schema: dict[str, Any], cardinality: int) -> None:
    (cost,) = celcost.rule_costs(schema, "spec.validation.openAPIV3Schema")
    assert (cost.cost, cost.cardinality, cost.total) == (5, cardinality, 5 * cardinality)


def test_kube_formats_the_factor_three_ways() -> None:
    table = [
        (12_000_000, "1.200000x"),
        (25_000_000, "2.5x"),
        (1_000_000_000, "100.0x"),
        (1_000_000_001, "more than 100x"),
    ]
    got = [(cost, celcost.budget_message("estimated rule cost", cost, 10_000_000)) for cost, _ in table]
    assert got == [
        (
            cost,
            f"estimated rule cost exceeds budget by factor of {factor} (try simplifying the rule, or adding "
            "maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)",
        )
        for cost, factor in table
    ]


def test_errors_name_each_rule_over_budget_and_the_schema_total() -> None:
    expensive = _rule("self.lu.exists(x, x == 'a')", obj(lu=lst(s(5))))  # 6291453 per evaluation
    schema = obj(one=lst(expensive, 2), two=expensive)
    where = "spec.validation.openAPIV3Schema"
    errors = celcost.budget_errors(schema, where)
    one = f"{where}.properties[one].items.x-kubernetes-validations[0].rule"
    two = f"{where}.properties[two].x-kubernetes-validations[0].rule"
    assert errors == [
        (one, "Forbidden: " + celcost.budget_message("estimated rule cost", 2 * 6291453, 10_000_000)),
    ]
    many = obj(**{f"p{i}": lst(expensive, 1) for i in range(16)}, two=expensive)
    errors = celcost.budget_errors(many, where)
    contributed = "Forbidden: contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema"
    assert [e for e in errors if e[1] == contributed] == [
        (f"{where}.properties[p{i}].items.x-kubernetes-validations[0].rule", contributed) for i in range(4)
    ]
    what = "x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema"
    assert errors[4:] == [(where, "Forbidden: " + celcost.budget_message(what, 17 * 6291453, 100_000_000))]
    assert two not in [path for path, _ in errors]


def test_the_projects_crd_stays_under_half_of_each_budget() -> None:
    from ttj.api.crd import crd

    assert celcost.margin_problems(crd()) == []


def test_a_crd_near_the_budget_fails_the_margin_check() -> None:
    from ttj.api.crd import crd

    near = crd()
    spec = near["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    # 2 + 1048575 items x 6 = 6291452: over half the per-rule budget, still under the budget itself
    spec["properties"]["tags"] = _rule("self.exists(x, x == 'a')", lst(s(5)))
    assert celcost.margin_problems(near) == [
        "spec.validation.openAPIV3Schema.properties[spec].properties[tags].x-kubernetes-validations[0]"
        ".rule: rule \"self.exists(x, x == 'a')\" costs 6291452 (6291452 per evaluation x 1 evaluations), more "
        "than 1/2 of kube's per-rule budget 10000000"
    ]


def test_the_verify_command_fails_on_a_total_near_the_budget(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import yaml

    from ttj.api.crd import crd

    near = crd()
    schema = near["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    own = sum(c.total for c in celcost.rule_costs(schema, "spec.validation.openAPIV3Schema"))
    spec = schema["properties"]["spec"]
    # 12 more rules of 12 x 322639 = 3 871 668 each (under half the per-rule budget): 46.5 M, over 50 M with
    # the CRD's own (14.5 M); (40 + 1) x 0.1 -> 5 times 8 x 0.25 = 10, + self 1, + ! 1
    cheap_enough = _rule("!self.matches('^[a-z]+$')", s(10))
    for index in range(12):
        spec["properties"][f"tags{index}"] = lst(cheap_enough, 322639)
    path = tmp_path / "near.yaml"
    path.write_text(yaml.safe_dump(near))
    assert celcost.main([str(path)]) == 1
    err = capsys.readouterr().err
    assert own + 12 * 3871668 > 50_000_000
    assert f"the rules cost {own + 12 * 3871668} in all, more than 1/2 of kube's per-CRD budget 100000000" in err
    assert celcost.main([str(tmp_path / "near.yaml"), "--margin", "1"]) == 0

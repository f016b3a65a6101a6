"""RFC 7396 merge patches: the one implementation the interpreter, the controller and the local API server share."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ttj.mergepatch import apply_merge_patch, merge_patch_between

# JSON documents without nulls: in a merge patch a null means "remove", so a document holding one cannot be
# reached by any patch (RFC 7396, section 2).
scalars = st.booleans() | st.integers() | st.text(max_size=5)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=12,
)
documents = st.dictionaries(st.text(max_size=3), values, max_size=4)


@given(old=documents, new=documents)
def test_the_patch_between_two_documents_turns_one_into_the_other(old: dict[str, Any], new: dict[str, Any]) -> None:
    before = copy.deepcopy(old)
    assert apply_merge_patch(old, merge_patch_between(old, new)) == new
    assert old == before, "applying a patch must not modify its target"


@given(document=documents)
def test_no_change_is_an_empty_patch(document: dict[str, Any]) -> None:
    assert merge_patch_between(document, copy.deepcopy(document)) == {}


def test_the_rfc_7396_example() -> None:
    target = {"title": "Goodbye!", "author": {"givenName": "John", "familyName": "Doe"}, "tags": ["example", "sample"]}
    patch = {"title": "Hello!", "phoneNumber": "+01-123-456-7890", "author": {"familyName": None}, "tags": ["example"]}
    assert apply_merge_patch(target, patch) == {
        "title": "Hello!",
        "author": {"givenName": "John"},
        "tags": ["example"],
        "phoneNumber": "+01-123-456-7890",
    }


def test_a_patch_that_is_not_an_object_replaces_the_target() -> None:
    assert apply_merge_patch({"a": 1}, ["b"]) == ["b"]
    assert apply_merge_patch("text", {"a": {"b": None, "c": 1}}) == {"a": {"c": 1}}

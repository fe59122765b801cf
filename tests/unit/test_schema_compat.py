"""The compatibility rule /readyz and start-up apply (app/store/migrate.judge):
which database schemas a given code can run on (docs/upgrading.md)."""

from __future__ import annotations

import pytest

from app.store.migrate import code_revisions, judge

CODE = ("0001", "0002", "0003")  # this code's migrations, head 0003


def rec(revision: str, need: str) -> dict:
    return {"revision": revision, "min_code_revision": need}


def test_current_schema_is_ready() -> None:
    s = judge(("0003",), CODE, None)
    assert s.ready and s.database == "0003" and s.code == "0003"


@pytest.mark.parametrize("db", [(), ("0001",), ("0002",)])
def test_empty_or_older_schema_is_not_ready_and_says_upgrade(db: tuple[str, ...]) -> None:
    """The migration Job has not run: the new code must not take traffic."""
    s = judge(db, CODE, rec("0002", "0001"))
    assert not s.ready and "gpuq db upgrade" in s.detail


def test_newer_compatible_schema_is_ready() -> None:
    """The next release migrated (expand) and says code at 0003 still runs on it:
    this (old) code stays in service during the rollout and after a rollback."""
    s = judge(("0004",), CODE, rec("0004", "0003"))
    assert s.ready and s.min_code_revision == "0003" and "compatible" in s.detail
    # any bound the code has reached is fine, not only its head
    assert judge(("0005",), CODE, rec("0005", "0002")).ready


def test_newer_schema_needing_newer_code_is_not_ready() -> None:
    """A contract step of a later release: code before 0004 must be gone."""
    s = judge(("0005",), CODE, rec("0005", "0004"))
    assert not s.ready and "needs code at revision 0004" in s.detail


@pytest.mark.parametrize(
    "record",
    [None, rec("0004", "0003"), {"revision": "0005"}, {"revision": "0005", "min_code_revision": 3}],
)
def test_unknown_schema_without_a_matching_record_is_not_ready(record) -> None:
    """No record, a record of another revision (stale), or a malformed one: the
    code cannot tell, so it does not claim to be compatible."""
    assert not judge(("0005",), CODE, record).ready


def test_several_heads_are_not_ready() -> None:
    assert not judge(("0003", "0004"), CODE, rec("0004", "0001")).ready


def test_the_codes_revisions_are_linear_oldest_first() -> None:
    revs = code_revisions()
    assert revs[0] == "0001" and len(set(revs)) == len(revs)
    assert list(revs) == sorted(revs)  # numbered in order

"""Expand-then-contract, enforced on app/migrations/versions (docs/upgrading.md).

A release must never need the code of the previous release to stop before its
migration runs. So, read from each migration's source (no database needed):

- every migration declares ``min_code_revision``, a revision at or before its own;
- from 0004 on (when the rule was written down; 0002 and 0003 predate it),
  ``min_code_revision`` is at or before ``down_revision``: the previous release's
  code still runs on the new schema;
- ``upgrade()`` holds no destructive operation (drop or rename a column or table,
  change a column's type, make a column NOT NULL, add a NOT NULL column without a
  server default to an existing table, the same in raw SQL) unless the migration is
  marked ``contract = True``, a contract step whose ``min_code_revision`` names the
  earlier release that stopped using what it removes.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

VERSIONS = Path(__file__).resolve().parents[2] / "app" / "migrations" / "versions"
RULE_SINCE = "0004"
DROPS = {"drop_column", "drop_table", "rename_table"}
RAW_SQL = re.compile(
    r"\bDROP\s+(COLUMN|TABLE)\b|\bRENAME\b|\bSET\s+NOT\s+NULL\b"
    r"|\bALTER\s+COLUMN\s+\S+\s+(SET\s+DATA\s+)?TYPE\b",
    re.IGNORECASE,
)


def module_attrs(tree: ast.Module) -> dict[str, object]:
    out: dict[str, object] = {}
    for node in tree.body:
        target = None
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            target, value = node.target.id, node.value
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            target, value = node.targets[0].id, node.value
        if target and value is not None:
            try:
                out[target] = ast.literal_eval(value)
            except ValueError:
                out[target] = None
    return out


def _kw(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _const(node: ast.expr | None) -> object:
    return node.value if isinstance(node, ast.Constant) else None


def _sql_text(node: ast.expr) -> str:
    """The literal parts of an op.execute argument (str, f-string, sa.text(...))."""
    if isinstance(node, ast.Call) and node.args:
        return _sql_text(node.args[0])
    return " ".join(n.value for n in ast.walk(node)
                    if isinstance(n, ast.Constant) and isinstance(n.value, str))


def destructive_ops(source: str) -> list[str]:
    """What in ``upgrade()`` the code of the previous release could break on."""
    tree = ast.parse(source)
    upgrade = next((n for n in tree.body
                    if isinstance(n, ast.FunctionDef) and n.name == "upgrade"), None)
    if upgrade is None:
        return []
    created: set[str] = set()
    found: list[str] = []
    calls = sorted((n for n in ast.walk(upgrade) if isinstance(n, ast.Call)
                    and isinstance(n.func, ast.Attribute)), key=lambda n: (n.lineno, n.col_offset))
    for call in calls:
        op, line = call.func.attr, call.lineno
        first = _const(call.args[0]) if call.args else None
        if op == "create_table" and isinstance(first, str):
            created.add(first)
        elif op in DROPS:
            found.append(f"line {line}: {op}")
        elif op == "alter_column":
            if _kw(call, "new_column_name") is not None:
                found.append(f"line {line}: rename column")
            if _kw(call, "type_") is not None:
                found.append(f"line {line}: change a column's type")
            if _const(_kw(call, "nullable")) is False:
                found.append(f"line {line}: make a column NOT NULL")
        elif op == "add_column" and first not in created and len(call.args) > 1:
            col = call.args[1]
            if (isinstance(col, ast.Call) and _const(_kw(col, "nullable")) is False
                    and _kw(col, "server_default") is None):
                found.append(f"line {line}: NOT NULL column without a server default "
                             f"on existing table {first}")
        elif op == "execute" and call.args and RAW_SQL.search(_sql_text(call.args[0])):
            found.append(f"line {line}: raw SQL drops, renames or tightens a column")
    return found


def migrations() -> list[Path]:
    return sorted(VERSIONS.glob("[0-9]*.py"))


def test_the_migrations_are_found() -> None:
    names = [p.name[:4] for p in migrations()]
    assert names[:6] == ["0001", "0002", "0003", "0004", "0005", "0006"]


@pytest.mark.parametrize("path", migrations(), ids=lambda p: p.name)
def test_migration_follows_expand_then_contract(path: Path) -> None:
    source = path.read_text()
    attrs = module_attrs(ast.parse(source))
    rev, down, need = attrs["revision"], attrs["down_revision"], attrs.get("min_code_revision")
    known = {p.name[:4] for p in migrations()}
    assert isinstance(need, str) and need in known and need <= rev, (
        f"{path.name}: declare min_code_revision, the oldest code revision that runs on it")
    if rev >= RULE_SINCE:
        assert down is not None and need <= down, (
            f"{path.name}: min_code_revision {need} is later than the previous release "
            f"({down}): its pods would have to stop before this migration runs")
    ops = destructive_ops(source)
    if attrs.get("contract") is not True:
        assert ops == [], (f"{path.name} is not marked `contract = True` but its upgrade() "
                           f"would break the previous release's code: {ops}")


# The checker itself, on migrations written to break the rule (so it can fail).
BAD = {
    "drop column": 'op.drop_column("jobs", "reason")',
    "drop table": 'op.drop_table("leases")',
    "rename table": 'op.rename_table("jobs", "tasks")',
    "rename column": 'op.alter_column("jobs", "reason", new_column_name="why")',
    "type change": 'op.alter_column("jobs", "units", type_=sa.Integer())',
    "not null": 'op.alter_column("jobs", "reason", nullable=False)',
    "not null column": 'op.add_column("jobs", sa.Column("x", sa.Text(), nullable=False))',
    "raw drop": 'op.execute("ALTER TABLE jobs DROP COLUMN reason")',
    "raw rename": 'op.execute(sa.text("ALTER TABLE jobs RENAME COLUMN reason TO why"))',
    "raw type": 'op.execute("ALTER TABLE jobs ALTER COLUMN units TYPE integer")',
    "raw not null": 'op.execute(f"ALTER TABLE {T} ALTER COLUMN x SET NOT NULL")',
    "batch": ('with op.batch_alter_table("jobs") as b:\n'
              '        b.drop_column("reason")'),
}
GOOD = {
    "nullable column": 'op.add_column("jobs", sa.Column("x", sa.Text(), nullable=True))',
    "defaulted column": ('op.add_column("jobs", sa.Column("x", sa.Text(), nullable=False, '
                         'server_default="a"))'),
    "new table": ('op.create_table("t", sa.Column("id", sa.Integer(), nullable=False))\n'
                  '    op.add_column("t", sa.Column("x", sa.Text(), nullable=False))'),
    "relax": 'op.alter_column("jobs", "reason", nullable=True)',
    "index": 'op.create_index("ix", "jobs", ["reason"])',
    "raw create type": 'op.execute("CREATE TYPE mood AS ENUM (\'a\', \'b\')")',
}


def _migration(body: str) -> str:
    return f"def upgrade() -> None:\n    {body}\n\n\ndef downgrade() -> None:\n" \
           f"    op.drop_table(\"t\")\n"


@pytest.mark.parametrize("body", BAD.values(), ids=BAD.keys())
def test_the_checker_flags_destructive_operations(body: str) -> None:
    assert destructive_ops(_migration(body)), body


@pytest.mark.parametrize("body", GOOD.values(), ids=GOOD.keys())
def test_the_checker_allows_expand_operations(body: str) -> None:
    assert destructive_ops(_migration(body)) == [], body  # downgrade() is not read


def test_contract_marker_is_read() -> None:
    src = 'revision = "0009"\ncontract = True\nmin_code_revision: str = "0008"\n'
    assert module_attrs(ast.parse(src)) == {
        "revision": "0009", "contract": True, "min_code_revision": "0008"}

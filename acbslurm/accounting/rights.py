"""Which jobs a user may see in the report: what sacct would show them.

sacct (slurmdbd) shows every job to everybody unless slurmdbd.conf's ``PrivateData``
names ``jobs``; then a user sees their own jobs, the jobs of the accounts they
coordinate (and of those accounts' sub-accounts), and an operator or administrator
(``AdminLevel``, or root) sees all. The report service applies the same rule in SQL
(``Filters.visible_*``), so nobody ever receives a row they may not read.
"""

from __future__ import annotations

import pwd
from typing import Any

from acbslurm.accounting.schema import Schema, fetch_rows
from acbslurm.values import frozen

# user_table.admin_level: 1 none, 2 operator, 3 administrator.
OPERATOR = 2


@frozen
class Rights:
    uid: int
    user: str
    all_jobs: bool
    accounts: tuple[str, ...] = ()  # coordinated, with their sub-accounts

    def describe(self) -> str:
        if self.all_jobs:
            return "all jobs"
        coord = f" and of the accounts {', '.join(self.accounts)}" if self.accounts else ""
        return f"the jobs of {self.user or self.uid}{coord} (PrivateData=jobs)"


def private_jobs(private_data: str) -> bool:
    """``PrivateData`` (``jobs,usage``...) hides jobs from other users."""
    return "jobs" in {p.strip().lower() for p in private_data.split(",")}


def rights_for(conn: Any, schema: Schema, uid: int, private: bool) -> Rights:
    """What ``uid`` may see; every value is a query parameter."""
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = ""  # a uid without a name: its own jobs only, even if private
    if not private or uid == 0:
        return Rights(uid, user, all_jobs=True)
    level = fetch_rows(
        conn, "SELECT admin_level FROM user_table WHERE name = %s AND deleted = 0", (user,)
    )
    if level and int(level[0][0]) >= OPERATOR:
        return Rights(uid, user, all_jobs=True)
    # The accounts the user coordinates and every account below them (lft..rgt nest).
    coordinated = fetch_rows(
        conn, "SELECT acct FROM acct_coord_table WHERE user = %s AND deleted = 0", (user,)
    )
    accounts: tuple[str, ...] = ()
    if coordinated:
        # Sub-accounts by parent_acct, which every schema has (lft/rgt went in 23.11,
        # lineage came then). The table name comes from Schema (validated).
        tree = fetch_rows(
            conn,
            f"SELECT acct, parent_acct FROM {schema.table('assoc_table')}"  # noqa: S608
            " WHERE user = '' AND deleted = 0",
        )
        accounts = tuple(sorted(descendants({str(r[0]) for r in coordinated}, tree)))
    return Rights(uid, user, all_jobs=False, accounts=accounts)


def descendants(roots: set[str], tree: list[tuple[object, ...]]) -> set[str]:
    """``roots`` and every account below them in ``(account, parent)`` rows."""
    children: dict[str, set[str]] = {}
    for acct, parent in tree:
        children.setdefault(str(parent), set()).add(str(acct))
    found: set[str] = set()
    stack = list(roots)
    while stack:
        acct = stack.pop()
        if acct not in found:
            found.add(acct)
            stack.extend(children.get(acct, ()))
    return found

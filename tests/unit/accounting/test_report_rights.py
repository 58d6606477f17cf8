"""The report service's rules: what sacct would show a user, applied in SQL."""

from __future__ import annotations

from acbslurm.accounting.queries import Filters, where_clause
from acbslurm.accounting.rights import Rights, private_jobs
from acbslurm.slurm.dbdconfig import parse_private_data

SHOW_CONFIG = """Configuration data as of 2026-12-01T08:51:10
AccountingStorageType  = accounting_storage/slurmdbd
PrivateData            = none
SlurmDBD configuration:
LogFile                = /var/log/slurmdbd.log
PrivateData            = jobs,usage
SLURMDBD_VERSION       = 22.05.8
"""


def test_private_data_is_slurmdbds_not_slurmctlds() -> None:
    assert parse_private_data(SHOW_CONFIG) == "jobs,usage"
    # No slurmdbd section (an old sacctmgr, an error): jobs count as private.
    assert parse_private_data("PrivateData = none\n") == "jobs"
    assert private_jobs("jobs,usage") and private_jobs("Jobs") and not private_jobs("none")


def test_a_sacctmgr_that_shows_slurmctlds_private_data_as_slurmdbds_is_not_believed() -> None:
    # 26.05's sacctmgr fills the SlurmDBD section's PrivateData from its own slurm.conf
    # (26.05.3's sandbox: slurmdbd.conf says jobs, the section said none).
    def show(release: str) -> str:
        return SHOW_CONFIG.replace(
            "PrivateData            = none\n",
            f"PrivateData            = none\nSLURM_VERSION          = {release}\n",
            1,
        ).replace("jobs,usage", "none")

    assert parse_private_data(show("25.11.7")) == "none"
    assert parse_private_data(show("26.05.3")) == "jobs"
    assert parse_private_data(show("27.05.0")) == "jobs"


def test_visibility_is_a_parameterized_sql_condition() -> None:
    f = Filters(start=1, end=2, visible_uid=1001, visible_accounts=("lab", "lab-sub"))
    sql, params = where_clause(f)
    assert sql.endswith(" AND (t1.id_user = %s OR t1.account IN (%s, %s))")
    assert params[-3:] == [1001, "lab", "lab-sub"]
    sql, params = where_clause(Filters(start=1, end=2, visible_uid=1001))
    assert sql.endswith(" AND (t1.id_user = %s)") and params[-1] == 1001
    assert "id_user" not in where_clause(Filters(start=1, end=2))[0]


def test_rights_say_what_they_allow() -> None:
    assert Rights(0, "root", all_jobs=True).describe() == "all jobs"
    r = Rights(1001, "user1", all_jobs=False, accounts=("lab",))
    assert r.describe() == "the jobs of user1 and of the accounts lab (PrivateData=jobs)"


def test_a_coordinator_sees_the_accounts_below_theirs() -> None:
    from acbslurm.accounting.rights import descendants

    tree = [("root", ""), ("lab", "root"), ("lab-a", "lab"), ("lab-a1", "lab-a"), ("other", "root")]
    assert descendants({"lab"}, tree) == {"lab", "lab-a", "lab-a1"}
    assert descendants({"other"}, tree) == {"other"}
    assert descendants({"lab-a1"}, tree) == {"lab-a1"}


def test_the_service_reads_a_deeply_nested_request_as_a_bad_request() -> None:
    # Any user may write to the report service: "[" * 50000 (under its size limit) made
    # json.loads raise RecursionError, reported as an internal error with a traceback.
    import socket

    import pytest

    from acbslurm.accounting.service import _read_request
    from acbslurm.errors import ConfigError

    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.sendall(b"[" * 50_000 + b"\n")
        with pytest.raises(ConfigError, match="bad request: not one line of JSON"):
            _read_request(ours)

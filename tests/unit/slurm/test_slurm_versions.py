"""What differs between Slurm releases (acbslurm/slurm/versions.py)."""

import pytest

from acbslurm.slurm.versions import (
    SCHEMA_RELEASES,
    SUPPORTED,
    SlurmInstall,
    config_choices,
    major,
    parse_release,
    sacctmgr_shows_dbd_private_data,
    upgrade_path,
)


def test_parse_release() -> None:
    assert parse_release("25.11.7") == (25, 11, 7)
    assert parse_release("slurm 22.05.8\n") == (22, 5, 8)
    assert major("23.11.11") == "23.11"
    with pytest.raises(ValueError):
        parse_release("25.11.x")


def test_config_lines_by_release() -> None:
    old, new = config_choices("22.05.8"), config_choices("25.11.7")
    assert old.cred_line == "CryptoType=crypto/munge"
    assert new.cred_line == "CredType=cred/munge"
    assert old.accounting_tres == "gres/gpu"
    assert config_choices("23.02.8").accounting_tres == "gres/gpu,gres/gpumem,gres/gpuutil"
    assert dict(old.mariadb_settings)["innodb-buffer-pool-size"] == "1G"
    assert dict(new.mariadb_settings)["innodb-buffer-pool-size"] == "2G"
    for release in SUPPORTED:
        c = config_choices(release)
        assert c.prolog_flags == "Alloc"
        # A GPU site's shape on every release.
        assert c.proctrack == "proctrack/cgroup"
        assert c.task_plugin_line == "TaskPlugin=task/cgroup,task/affinity"
        assert c.jobacct_gather == "jobacct_gather/cgroup"
        assert {"ConstrainCores=yes", "ConstrainRAMSpace=yes", "ConstrainDevices=yes"} <= set(
            c.cgroup_conf
        )


def test_install_paths() -> None:
    deb = SlurmInstall()
    assert deb.is_debian and deb.daemon("slurmd") == "/usr/sbin/slurmd"
    assert deb.path_env() == "/usr/sbin:/usr/bin:/sbin:/bin"
    built = SlurmInstall(prefix="/c/25.11.7/prefix", release="25.11.7")
    assert built.client("scontrol") == "/c/25.11.7/prefix/bin/scontrol"
    assert built.path_env().startswith("/c/25.11.7/prefix/bin:/c/25.11.7/prefix/sbin:")


def test_schema_labels_and_upgrade_path() -> None:
    assert SCHEMA_RELEASES[13] == "23.02"
    assert SCHEMA_RELEASES[14] == "23.11"  # not 23.02
    assert upgrade_path(12, "25.11.7") == ["23.11"]
    assert upgrade_path(12, "23.11.11") == []
    assert upgrade_path(15, "26.05.3") == []


def test_sacctmgr_shows_slurmdbds_private_data_up_to_25_11() -> None:
    shown = [r for r in SUPPORTED if sacctmgr_shows_dbd_private_data(r)]
    assert shown == ["22.05.8", "23.02.8", "23.11.11", "24.11.7", "25.05.8", "25.11.7"]
    assert not sacctmgr_shows_dbd_private_data("26.05.3")

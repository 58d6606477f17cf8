"""The ACL codec (gpu/acl.py) against the kernel's own format and behaviour."""

from __future__ import annotations

import errno
import os
import struct
from pathlib import Path

import pytest

from acbslurm.gpu import acl
from acbslurm.gpu.fence import read_acl, write_acl

# What `setfacl -m u:1001:rw` leaves on a 0660 file, as the kernel stores it.
KERNEL_BYTES = struct.pack(
    "<I" + "HHI" * 5,
    2,
    0x01, 6, 0xFFFFFFFF,
    0x02, 6, 1001,
    0x04, 6, 0xFFFFFFFF,
    0x10, 6, 0xFFFFFFFF,
    0x20, 0, 0xFFFFFFFF,
)  # fmt: skip


def test_decode_reads_the_kernels_bytes() -> None:
    a = acl.decode(KERNEL_BYTES)
    assert a == acl.Acl(6, 6, 0, users=((1001, 6),))
    assert acl.show(a) == "u::rw-,u:1001:rw-,g::rw-,o::---"


def test_encode_writes_the_kernels_bytes_with_a_mask() -> None:
    assert acl.encode(acl.Acl(6, 6, 0, users=((1001, 6),))) == KERNEL_BYTES


def test_entries_are_sorted_and_the_mask_covers_every_named_entry() -> None:
    a = acl.Acl(6, 0, 0, users=((2000, 6), (1001, 4)), groups=((50, 2),))
    back = acl.decode(acl.encode(a))
    assert back.users == ((1001, 4), (2000, 6))
    tags = [struct.unpack_from("<HHI", acl.encode(a), 4 + 8 * i) for i in range(6)]
    assert [(t, i) for t, _, i in tags] == [
        (acl.USER_OBJ, acl.NO_ID),
        (acl.USER, 1001),
        (acl.USER, 2000),
        (acl.GROUP_OBJ, acl.NO_ID),
        (acl.GROUP, 50),
        (acl.MASK, acl.NO_ID),
    ]
    assert tags[-1][1] == 6  # mask: group_obj 0 | 4 | 6 | 2


def test_a_minimal_acl_has_no_mask() -> None:
    assert len(acl.encode(acl.from_mode(0o660))) == 4 + 3 * 8
    assert acl.from_mode(0o640) == acl.Acl(6, 4, 0)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x02\x00\x00",
        struct.pack("<I", 1) + KERNEL_BYTES[4:],
        KERNEL_BYTES[:-1],
        struct.pack("<IHHI", 2, 0x40, 6, 0),
        struct.pack("<IHHI", 2, 0x01, 0o17, 0xFFFFFFFF),
        struct.pack("<IHHIHHI", 2, 0x01, 6, 0xFFFFFFFF, 0x20, 0, 0xFFFFFFFF),
    ],
    ids=["empty", "short", "version", "half-entry", "tag", "perm", "no-group"],
)
def test_what_is_not_an_acl_is_refused(data: bytes) -> None:
    with pytest.raises(acl.AclError):
        acl.decode(data)


def test_with_users_replaces_named_users_and_keeps_groups() -> None:
    a = acl.Acl(6, 6, 0, users=((1, 6),), groups=((9, 4),))
    assert a.with_users({2: 6}) == acl.Acl(6, 6, 0, users=((2, 6),), groups=((9, 4),))
    assert a.user_perm(1) == 6 and a.user_perm(2) == 0


def test_the_kernel_takes_it_and_drops_the_xattr_when_no_named_entry_is_left(
    tmp_path: Path,
) -> None:
    f = tmp_path / "dev"
    f.write_bytes(b"")
    os.chmod(f, 0o600)
    try:
        write_acl(str(f), acl.Acl(6, 0, 0, users=((1001, 6),)))
    except OSError as exc:
        if exc.errno == errno.EOPNOTSUPP:
            pytest.skip(f"no POSIX ACLs on {tmp_path}")
        raise
    assert read_acl(str(f)) == acl.Acl(6, 0, 0, users=((1001, 6),))
    assert os.stat(f).st_mode & 0o777 == 0o660  # the group bits show the mask
    write_acl(str(f), read_acl(str(f)).with_users({}))
    with pytest.raises(OSError) as err:
        os.getxattr(f, acl.XATTR)
    assert err.value.errno == errno.ENODATA
    assert os.stat(f).st_mode & 0o777 == 0o600  # the mode it had, group ---

"""POSIX access ACLs as the kernel stores them (the ``system.posix_acl_access`` xattr).

The GPU fence (gpu/fence.py) gives a job's user ``rw`` on exactly the job's GPU device
files with one named-user entry each, set through ``os.setxattr``: no ``setfacl``
process on the hooks' path (fork+exec costs more than the whole 100 ms budget allows
per GPU). The format (linux/posix_acl_xattr.h): a little-endian u32 version (2), then
8-byte entries ``u16 tag, u16 perm, u32 id``, sorted by tag then id; ``id`` is
0xFFFFFFFF for the entries without one. An ACL with named entries needs a mask; the
kernel keeps the file mode's group bits equal to the mask, and turns an ACL of the three
base entries alone back into a plain mode (no xattr left).
"""

from __future__ import annotations

import struct

from acbslurm.values import frozen

XATTR = "system.posix_acl_access"
VERSION = 2
USER_OBJ = 0x01
USER = 0x02
GROUP_OBJ = 0x04
GROUP = 0x08
MASK = 0x10
OTHER = 0x20
NO_ID = 0xFFFFFFFF
READ, WRITE, EXECUTE = 4, 2, 1
_TAGS = (USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER)
_HEAD = struct.Struct("<I")
_ENTRY = struct.Struct("<HHI")


class AclError(ValueError):
    """Bytes that are not an access ACL this module can rewrite."""


@frozen
class Acl:
    """An access ACL: the mode's three classes plus named users and groups (id -> perm)."""

    user_obj: int
    group_obj: int
    other: int
    users: tuple[tuple[int, int], ...] = ()
    groups: tuple[tuple[int, int], ...] = ()

    def user_perm(self, uid: int) -> int:
        return dict(self.users).get(uid, 0)

    def with_users(self, users: dict[int, int]) -> Acl:
        """This ACL with exactly ``users`` (uid -> perm) as its named users."""
        return Acl(
            self.user_obj, self.group_obj, self.other, tuple(sorted(users.items())), self.groups
        )


def from_mode(mode: int) -> Acl:
    """The ACL a file without an ACL xattr has: its mode's permission bits."""
    return Acl((mode >> 6) & 7, (mode >> 3) & 7, mode & 7)


def decode(data: bytes) -> Acl:
    """An ``Acl`` from the xattr's bytes; AclError when they are not one."""
    if len(data) < _HEAD.size or (len(data) - _HEAD.size) % _ENTRY.size:
        raise AclError(f"ACL of {len(data)} bytes is not a header plus whole entries")
    if _HEAD.unpack_from(data)[0] != VERSION:
        raise AclError(f"ACL version {_HEAD.unpack_from(data)[0]} (expected {VERSION})")
    base: dict[int, int] = {}
    named: dict[int, dict[int, int]] = {USER: {}, GROUP: {}}
    for off in range(_HEAD.size, len(data), _ENTRY.size):
        tag, perm, ident = _ENTRY.unpack_from(data, off)
        if tag not in _TAGS or perm & ~7:
            raise AclError(f"ACL entry with tag {tag:#x} perm {perm:#o}")
        if tag in named:
            named[tag][ident] = perm
        else:
            base[tag] = perm
    if not {USER_OBJ, GROUP_OBJ, OTHER} <= base.keys():
        raise AclError("ACL without its user, group and other entries")
    return Acl(
        base[USER_OBJ],
        base[GROUP_OBJ],
        base[OTHER],
        tuple(sorted(named[USER].items())),
        tuple(sorted(named[GROUP].items())),
    )


def encode(acl: Acl) -> bytes:
    """The xattr's bytes; the mask (when named entries need one) is the union of the
    group class's permissions, so no entry is cut by it."""
    entries = [(USER_OBJ, acl.user_obj, NO_ID)]
    entries += [(USER, perm, uid) for uid, perm in sorted(acl.users)]
    entries.append((GROUP_OBJ, acl.group_obj, NO_ID))
    entries += [(GROUP, perm, gid) for gid, perm in sorted(acl.groups)]
    if acl.users or acl.groups:
        mask = acl.group_obj
        for _, perm in (*acl.users, *acl.groups):
            mask |= perm
        entries.append((MASK, mask, NO_ID))
    entries.append((OTHER, acl.other, NO_ID))
    return _HEAD.pack(VERSION) + b"".join(_ENTRY.pack(t, p, i) for t, p, i in entries)


def show(acl: Acl) -> str:
    """getfacl's short form (``u::rw-,u:1001:rw-,g::rw-,o::---``), for messages."""

    def rwx(p: int) -> str:
        return "".join(c if p & b else "-" for c, b in (("r", READ), ("w", WRITE), ("x", EXECUTE)))

    parts = [f"u::{rwx(acl.user_obj)}"]
    parts += [f"u:{uid}:{rwx(p)}" for uid, p in acl.users]
    parts.append(f"g::{rwx(acl.group_obj)}")
    parts += [f"g:{gid}:{rwx(p)}" for gid, p in acl.groups]
    parts.append(f"o::{rwx(acl.other)}")
    return ",".join(parts)

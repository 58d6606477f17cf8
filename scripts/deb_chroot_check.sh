#!/usr/bin/env bash
# The Debian package on a clean Debian 12 (run as root): a fresh bookworm chroot
# (debootstrap --variant=minbase, no compiler in it), `apt install ./acbslurm_*.deb`
# timed, then the commands a user and an admin start with, the files where the package
# puts them, and a purge that leaves nothing behind.
#
#   sudo bash scripts/deb_chroot_check.sh [dist/acbslurm_*_all.deb]
#
# The bookworm base is made once and kept as a tarball (ACBSLURM_DEB_CHROOT_CACHE,
# default /var/cache/acbslurm/bookworm-minbase.tar); each run unpacks a fresh copy into
# a temporary folder and removes it at the end. apt needs deb.debian.org (or the mirror
# in DEBIAN_MIRROR) for the dependencies.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
deb=${1:-$(ls -t "$root"/dist/acbslurm_*_all.deb 2>/dev/null | head -1)}
[ -f "$deb" ] || { echo "deb-chroot: no package (make deb first)" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "deb-chroot: must run as root" >&2; exit 3; }
cache=${ACBSLURM_DEB_CHROOT_CACHE:-/var/cache/acbslurm/bookworm-minbase.tar}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
say() { echo "deb-chroot: $*" >&2; }

if [ ! -f "$cache" ]; then
  mkdir -p "$(dirname "$cache")"
  base=$(mktemp -d /var/tmp/bookworm-base.XXXXXX)
  say "debootstrap bookworm (minbase) into $base, once"
  debootstrap --variant=minbase bookworm "$base" "$mirror" >/dev/null
  tar -C "$base" -cf "$cache.tmp" . && mv "$cache.tmp" "$cache"
  rm -rf "$base"
fi

dir=$(mktemp -d /var/tmp/acbslurm-chroot.XXXXXX)
cleanup() {
  umount "$dir/proc" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
tar -C "$dir" -xf "$cache"
chmod 755 "$dir"  # the chroot's / (tar gave it the 0700 of debootstrap's temporary folder)
mount -t proc proc "$dir/proc"
cp /etc/resolv.conf "$dir/etc/resolv.conf"
cp "$deb" "$dir/tmp/"
in_root() { chroot "$dir" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$@"; }

for cc in gcc cc x86_64-linux-gnu-gcc; do
  if in_root sh -c "command -v $cc" >/dev/null; then
    say "FAIL: the chroot has a compiler ($cc)"; exit 1
  fi
done
in_root apt-get update -q >/dev/null
t0=$(date +%s.%N)
in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
  "/tmp/$(basename "$deb")" >"$dir/tmp/apt.log" 2>&1 || { cat "$dir/tmp/apt.log"; exit 1; }
t1=$(date +%s.%N)
say "apt install ./$(basename "$deb") took $(printf "%.1f" "$(echo "$t1 - $t0" | bc)") s (dependencies downloaded included)"
grep -E "^(Get|Setting up)" "$dir/tmp/apt.log" | grep -c "^Setting up" | xargs -I{} echo "deb-chroot: {} packages set up" >&2
if in_root sh -c 'command -v gcc || command -v cc' >/dev/null; then
  say "FAIL: the install brought a compiler"; exit 1
fi

fails=0
check() {
  local what=$1; shift
  if out=$("$@" 2>&1); then say "ok   $what"; else say "FAIL $what: $out"; fails=$((fails + 1)); fi
}
check "acbslurm --help" in_root acbslurm --help
check "acbslurm doctor --help" in_root acbslurm doctor --help
check "agarun --help" in_root agarun --help
check "acbslurm report --help" in_root acbslurm report --help
check "as a user (nobody): acbslurm run --help" in_root setpriv --reuid=65534 --regid=65534 --clear-groups acbslurm run --help
check "the hooks are Python the package runs" in_root sh -c 'for h in prolog epilog task-prolog; do head -1 /usr/libexec/acbslurm/acbslurm-$h | grep -qx "#!/usr/bin/python3 -I" || exit 1; done'
check "the broker's gRPC code loads on Debian's grpcio and protobuf" in_root python3 -I -c \
  'import sys; sys.path.insert(0, "/usr/lib/acbslurm"); from acbslurm.broker import proto; print(proto.pb_grpc.GpuBrokerStub)'
check "pynvml (vendored) and MySQLdb (Debian's) import" in_root python3 -I -c \
  'import sys; sys.path.insert(0, "/usr/lib/acbslurm"); import acbslurm, pynvml, MySQLdb, click, jinja2, yaml, grpc'
check "the OCI runtime names the package's Python and folder" in_root grep -q "PYTHONPATH='/usr/lib/acbslurm'" /usr/libexec/acbslurm/acbslurm-runc
check "byte-compiled by postinst" in_root test -d /usr/lib/acbslurm/acbslurm/hooks/__pycache__
check "/run/acbslurm made (root, 0755)" in_root sh -c '[ "$(stat -c %U:%a /run/acbslurm)" = root:755 ]'
check "conffile /etc/acbslurm/acbslurm.yaml" in_root sh -c 'dpkg-query -W -f="\${Conffiles}" acbslurm | grep -q /etc/acbslurm/acbslurm.yaml'
check "units, tmpfiles.d, completion, docs" in_root test -f /usr/lib/systemd/system/acbslurm-report.service \
  -a -f /usr/lib/systemd/system/acbslurm-broker.service -a -f /usr/lib/tmpfiles.d/acbslurm.conf \
  -a -f /usr/share/bash-completion/completions/acbslurm -a -f /usr/share/doc/acbslurm/slurm.conf.acbslurm
check "doctor reads the package's settings file (no Slurm here: only that check)" in_root sh -c \
  'acbslurm doctor --json >/tmp/doctor.json; python3 -c "import json; c = {x[\"name\"]: x for x in json.load(open(\"/tmp/doctor.json\"))[\"checks\"]}; s = c[\"settings\"]; assert s[\"status\"] == \"ok\" and \"/etc/acbslurm/acbslurm.yaml\" in s[\"summary\"], s"'
check "bash completion answers" in_root env COMP_WORDS="acbslurm do" COMP_CWORD=1 _ACBSLURM_COMPLETE=bash_complete acbslurm
check "doctor points at the installed conf/" in_root test -f /usr/lib/acbslurm/acbslurm/conf/systemd/acbslurm-report.service
check "a hook waits while dpkg replaces files (preinst's flag)" in_root sh -c \
  'touch /run/acbslurm/.upgrading; timeout 2 /usr/libexec/acbslurm/acbslurm-task-prolog; rc=$?; rm /run/acbslurm/.upgrading; [ $rc = 124 ]'
check "and not for a flag of an upgrade that died" in_root sh -c \
  'touch -d "1 hour ago" /run/acbslurm/.upgrading; timeout 10 acbslurm --help >/dev/null; rc=$?; rm /run/acbslurm/.upgrading; [ $rc = 0 ]'
check "no flag left by the install" in_root test ! -e /run/acbslurm/.upgrading
check "reinstall (same version)" in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --reinstall "/tmp/$(basename "$deb")"
check "purge" in_root env DEBIAN_FRONTEND=noninteractive apt-get purge -y -q acbslurm
check "nothing left in /usr/lib/acbslurm, /usr/libexec/acbslurm, /etc/acbslurm" in_root sh -c \
  '! ls -d /usr/lib/acbslurm /usr/libexec/acbslurm /etc/acbslurm 2>/dev/null'
[ "$fails" -eq 0 ] || { say "$fails checks failed"; exit 1; }
say "all checks passed"

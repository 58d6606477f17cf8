#!/usr/bin/env bash
# Follow docs/admin-guide.md "Install on a site, step by step" on an acbslurm sandbox, as
# the site's admin would, and check that the installed hooks work.
#
#   make guide, or: sudo ACBSLURM_PYTHON=/path/to/.venv/bin/python \
#       scripts/admin_guide_walkthrough.sh SANDBOX_DIR [PORT_BASE]
#
# The sandbox (real slurmctld/slurmd/slurmdbd/MariaDB/munge, user1's rootless dockerd,
# emulated GPUs) stands in for the site: it is brought up fresh with the sandbox's own
# hooks, then the admin's part is done with nothing but the guide: a wheel of this
# checkout installed into a venv at $ACBSLURM_GUIDE_PREFIX (default /opt/acbslurm-guide),
# settings in a file of its own named by ACBSLURM_CONFIG (never /etc/acbslurm, which
# other sandboxes on the machine may use), gres.conf, the chaining wrappers of step 4
# around a dummy site prolog/epilog/task prolog that write marker files, `scontrol
# reconfigure` and a slurmd restart, and `acbslurm doctor` as root and as user1. Then, as
# user1 with the installed acbslurm: a GPU job whose container must see exactly the
# job's GPU UUID, the markers of the site's hooks, the epilog's clean-up, and a hook
# error where step 8 says it goes.
#
# ACBSLURM_GUIDE_KEEP=1 leaves the sandbox up and the venv in place for a look; by
# default both go at the end (sandbox down, venv removed).
set -euo pipefail

SB=${1:?usage: $0 SANDBOX_DIR [PORT_BASE]}
SB=$(realpath -m "$SB")
PORT_BASE=${2:-${ACBSLURM_SANDBOX_PORT_BASE:-}}
PREFIX=${ACBSLURM_GUIDE_PREFIX:-/opt/acbslurm-guide}
REPO=$(cd "$(dirname "$0")/.." && pwd)
PY=${ACBSLURM_PYTHON:-$REPO/.venv/bin/python}
USER1=user1
T0=$(date +%s)

say() { printf '\n== %s (%ss)\n' "$*" "$(($(date +%s) - T0))"; }
die() { printf 'FAILED: %s\n' "$*" >&2; exit 1; }
# wait_for SECONDS DESCRIPTION COMMAND...: poll a state, never sleep as synchronisation
wait_for() {
    local limit=$1 what=$2 end
    shift 2
    end=$(($(date +%s) + limit))
    until "$@"; do
        [ "$(date +%s)" -lt "$end" ] || die "timed out after ${limit}s waiting for $what"
        sleep 0.5
    done
}

[ "$(id -u)" = 0 ] || die "run as root (the admin installs hooks that slurmd runs as root)"
[ -x "$PY" ] || die "no Python with the sandbox's requirements at $PY (set ACBSLURM_PYTHON)"
case "$PREFIX" in /opt/acbslurm | /opt/acbslurm/) die "use a prefix of your own, not /opt/acbslurm" ;; esac

# -- the site: a fresh sandbox -------------------------------------------------------------
export ACBSLURM_SANDBOX_DIR=$SB
if [ -n "$PORT_BASE" ]; then export ACBSLURM_SANDBOX_PORT_BASE=$PORT_BASE; fi
sandbox() { PYTHONPATH=$REPO "$PY" -m acbslurm sandbox "$@"; }
say "site: fresh sandbox at $SB"
sandbox down >/dev/null 2>&1 || true
sandbox up
SLURM_CONF=$SB/etc/slurm.conf
export SLURM_CONF
param() { "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$SB/sandbox.json" "$1"; }
NODE=$(param node)
CLUSTER=$(param cluster)
NGPU=$(find "$SB/dev" -maxdepth 1 -name 'nvidia[0-9]*' | wc -l)
[ "$NGPU" -ge 1 ] || die "the sandbox has no emulated GPUs in $SB/dev"
SLURMD_LOG=$SB/log/slurmd.log

# What the site has where a real one has /etc/slurm, /run/user/UID and NVML:
#   slurm.conf $SLURM_CONF; the GPUs' device files $SB/dev/nvidia*, and, instead of
#   NVML, a static inventory $SB/etc/gpus.json; user1's rootless dockerd on
#   $SB/run/user1/docker.sock (its XDG_RUNTIME_DIR is $SB/run/user1).
G=$SB/guide # the admin's own files: settings, wrappers, the dummy site hooks
rm -rf "$G"
install -d -m 0755 -o root -g root "$G" "$G/etc" "$G/run"
install -d -m 1777 "$G/markers" # the dummy site hooks write here (the task prolog as user1)

# -- step 1: install the package --------------------------------------------------------
say "step 1: wheel of $REPO into a venv at $PREFIX"
WHEELS=$(mktemp -d)
trap 'rm -rf "$WHEELS"' EXIT
"$PY" -m pip wheel --no-deps -q -w "$WHEELS" "$REPO"
rm -rf "$PREFIX"
/usr/bin/python3 -m venv "$PREFIX"
"$PREFIX/bin/pip" install -q --disable-pip-version-check "$WHEELS"/acbslurm-*.whl
chown -R root:root "$PREFIX"
chmod -R go-w "$PREFIX"
for f in acbslurm acbslurm-prolog acbslurm-epilog acbslurm-task-prolog; do
    [ -x "$PREFIX/bin/$f" ] || die "step 1 promised $PREFIX/bin/$f"
done

# -- step 2: settings (JSON), in a file named by ACBSLURM_CONFIG --------------------------
say "step 2: settings $G/etc/acbslurm.json"
CONF=$G/etc/acbslurm.json
write_settings() { # $1: the gres.conf the hooks read
    cat >"$CONF.tmp" <<EOF
{
  "node_acbslurm": "$PREFIX/bin/acbslurm",
  "slurm_conf": "$SLURM_CONF",
  "gres_conf": "$1",
  "gpu_inventory": "$SB/etc/gpus.json",
  "record_dir": "$G/run/jobs",
  "job_runtime_dir": "$G/run/job",
  "docker_host": "unix://$SB/run/{user}/docker.sock",
  "db_config": "$SB/etc/report-db.cnf",
  "cluster": "$CLUSTER",
  "report_socket": "$SB/run/report.sock",
  "container_cgroups": "join",
  "gpu_fence": true
}
EOF
    chmod 0644 "$CONF.tmp"
    mv "$CONF.tmp" "$CONF"
}
write_settings "$SB/etc/gres.conf"

# -- step 3: gres.conf ------------------------------------------------------------------
say "step 3: gres.conf with File= lines"
printf 'NodeName=%s Name=gpu File=%s/dev/nvidia[0-%d]\n' "$NODE" "$SB" $((NGPU - 1)) >"$SB/etc/gres.conf"
cat "$SB/etc/gres.conf"

# -- step 4: slurm.conf, chaining with the site's own hooks -------------------------------
say "step 4: chaining wrappers and slurm.conf"
# The site's existing hooks (dummies): each leaves a marker per job; the prolog's names
# the GPU indices Slurm gave the job (SLURM_JOB_GPUS, with PrologFlags=Alloc).
cat >"$G/site-prolog.sh" <<EOF
#!/bin/sh
echo "\$(id -un) \$SLURM_JOB_GPUS" >"$G/markers/prolog.\$SLURM_JOB_ID"
EOF
cat >"$G/site-epilog.sh" <<EOF
#!/bin/sh
echo "\$(id -un)" >"$G/markers/epilog.\$SLURM_JOB_ID"
EOF
cat >"$G/site-task-prolog.sh" <<EOF
#!/bin/sh
echo "\$(id -un)" >"$G/markers/task-prolog.\$SLURM_JOB_ID.\${SLURM_STEP_ID:-x}"
echo "export SITE_TASK_PROLOG=ran"
EOF
# The wrappers, as in step 4 (ACBSLURM_CONFIG set, since slurmd does not pass it).
cat >"$G/prolog.sh" <<EOF
#!/bin/sh
$G/site-prolog.sh || exit \$?
ACBSLURM_CONFIG=$CONF exec $PREFIX/bin/acbslurm-prolog
EOF
cat >"$G/epilog.sh" <<EOF
#!/bin/sh
ACBSLURM_CONFIG=$CONF $PREFIX/bin/acbslurm-epilog; rc=\$?
$G/site-epilog.sh || rc=\$?
exit \$rc
EOF
cat >"$G/task-prolog.sh" <<EOF
#!/bin/sh
$G/site-task-prolog.sh
ACBSLURM_CONFIG=$CONF exec $PREFIX/bin/acbslurm-task-prolog
EOF
chmod 0755 "$G"/*.sh
sed -i -E \
    -e "s|^PrologFlags=.*|PrologFlags=Alloc|" \
    -e "s|^Prolog=.*|Prolog=$G/prolog.sh|" \
    -e "s|^Epilog=.*|Epilog=$G/epilog.sh|" \
    -e "s|^TaskProlog=.*|TaskProlog=$G/task-prolog.sh|" \
    -e "s|^PrologEpilogTimeout=.*|PrologEpilogTimeout=60|" \
    -e "s|^KillWait=.*|KillWait=30|" \
    "$SLURM_CONF"
grep -E '^(PrologFlags|Prolog|Epilog|TaskProlog|PrologEpilogTimeout|KillWait)=' "$SLURM_CONF"
scontrol reconfigure
# gres.conf changed (step 3): slurmd reads it at start; here the site's `systemctl
# restart slurmd` is the sandbox's restart, which starts slurmd with the edited files
# (only a cold `sandbox up` renders them again; it is not called from here on).
sandbox restart slurmd
wait_for 60 "slurmd to use the new Prolog=" \
    grep -q "Prolog *= $G/prolog.sh" <(scontrol show config)

# -- steps 5-7: the toolkit, rootless Docker, directories ----------------------------------
say "steps 5-7: what the site already has"
# 5: the sandbox's stand-in nvidia-container-runtime-hook is on user1's dockerd PATH;
# 6: user1's rootless daemon runs and has the image, and acbslurm's runtime (the
# sandbox's, as "Containers in the job's cgroups" installs it); 7: the prolog makes the
# directories. The device files are fenced as "GPU fence" says (the sandbox's gpus.fence).
# user1's login environment; ACBSLURM_CONFIG is what step 2's /etc/profile.d line sets.
as_user1() {
    runuser -u "$USER1" -- env -i HOME="$(getent passwd "$USER1" | cut -d: -f6)" \
        USER=$USER1 LOGNAME=$USER1 LANG=C.UTF-8 PATH=/usr/bin:/bin \
        XDG_RUNTIME_DIR="$SB/run/$USER1" SLURM_CONF="$SLURM_CONF" ACBSLURM_CONFIG="$CONF" \
        "$@"
}
IMAGE=acbslurm/busybox:latest
as_user1 docker -H "unix://$SB/run/$USER1/docker.sock" image inspect "$IMAGE" >/dev/null \
    || die "step 6: $IMAGE is not in $USER1's daemon"

# -- step 9: the doctor, as root for user1 and as user1 -------------------------------------
say "step 9: acbslurm doctor as root --user $USER1"
# as `sudo env ACBSLURM_CONFIG=... acbslurm doctor` runs it: without SLURM_CONF
env -u SLURM_CONF ACBSLURM_CONFIG="$CONF" "$PREFIX/bin/acbslurm" doctor --user "$USER1"
if [ ! -e /etc/acbslurm/acbslurm.yaml ]; then # plain `sudo acbslurm doctor` loses the file
    BARE=$(env -u SLURM_CONF -u ACBSLURM_CONFIG "$PREFIX/bin/acbslurm" doctor --user "$USER1") \
        && die "step 9: the doctor passed a node without its settings"
    grep -E '^warn +settings +no settings file' <<<"$BARE" || die "step 9: no warning without settings"
fi
say "step 9: acbslurm doctor as $USER1"
as_user1 "$PREFIX/bin/acbslurm" doctor

# -- a GPU job as user1 with the installed acbslurm ----------------------------------------
say "step 10: the test job (srun ... acbslurm run) as $USER1"
OUT10=$(cd /tmp && as_user1 srun -p p1 -A "$USER1" --gres=gpu:1 --mem=100M \
    "$PREFIX/bin/acbslurm" run "$IMAGE" -- sh -c 'echo "GPU $NVIDIA_VISIBLE_DEVICES"')
echo "$OUT10"
grep -qE '^GPU GPU-[0-9a-f-]{36}$' <<<"$OUT10" || die "step 10: no GPU UUID in the container"
# the same without the job's ACBSLURM_CONFIG (a login without step 2's profile line)
if OUT10=$(cd /tmp && as_user1 env -u ACBSLURM_CONFIG srun -p p1 -A "$USER1" --gres=gpu:1 \
    --mem=100M "$PREFIX/bin/acbslurm" run "$IMAGE" -- true 2>&1); then
    die "step 10: acbslurm run found a record without the node's settings"
fi
grep -q "no acbslurm record for job [0-9]* in .*gave this record_dir" <<<"$OUT10" \
    || die "step 10: unclear error without ACBSLURM_CONFIG: $OUT10"
echo "ok: without ACBSLURM_CONFIG the job is told: $(grep -o 'no acbslurm record.*record_dir' <<<"$OUT10")"

say "step 10: a job spec, container on one GPU, submitted by $USER1"
WORK=$G/work
install -d -m 0755 -o "$USER1" -g "$USER1" "$WORK"
cat >"$WORK/gpu.yaml" <<EOF
name: guide-gpu
partition: p1
account: $USER1
gpus: 1
mem: 500M
time: "5:00"
output: $WORK/guide-gpu-%j.out
container:
  image: $IMAGE
  command: 'echo "GPU \${NVIDIA_VISIBLE_DEVICES:-none}"'
EOF
chown "$USER1:" "$WORK/gpu.yaml"
JOB=$(cd "$WORK" && as_user1 "$PREFIX/bin/acbslurm" submit --wait gpu.yaml | head -n 1)
JOB=${JOB%% *}
[[ $JOB =~ ^[0-9]+$ ]] || die "no job id from acbslurm submit: $JOB"
grep -q "exec srun $PREFIX/bin/acbslurm run" <(scontrol write batch_script "$JOB" - 2>/dev/null) \
    || echo "note: could not read job $JOB's script back to check node_acbslurm"
OUTF=$WORK/guide-gpu-$JOB.out
cat "$OUTF"
# Which GPU Slurm gave the job: its index -> gres.conf File= -> minor -> the inventory's UUID.
read -r WHO IDX <"$G/markers/prolog.$JOB" || die "the site's prolog left no marker for job $JOB"
[ "$WHO" = root ] && [[ $IDX =~ ^[0-9]+$ ]] || die "site prolog marker of job $JOB: $WHO $IDX"
MINOR=$(stat -c '%T' "$SB/dev/nvidia$IDX")
WANT=$("$PY" -c 'import json,sys
inv = json.load(open(sys.argv[1]))["gpus"]
print(next(g["uuid"] for g in inv if g["minor"] == int(sys.argv[2], 16)))' "$SB/etc/gpus.json" "$MINOR")
grep -qx "GPU $WANT" "$OUTF" || die "the container did not get exactly $WANT (GPU index $IDX)"
echo "ok: the container got exactly $WANT (Slurm's GPU index $IDX)"

say "steps 4, 7, 10: the site hooks ran (chaining), the epilog cleaned up"
epilog_done() { [ -e "$G/markers/epilog.$JOB" ]; }
wait_for 60 "the epilog of job $JOB" epilog_done
[ "$(cat "$G/markers/epilog.$JOB")" = root ] || die "epilog marker not written by root"
ls "$G/markers/task-prolog.$JOB".* >/dev/null 2>&1 || die "the site's task prolog did not run"
[ ! -e "$G/run/jobs/$JOB.json" ] || die "the epilog left the record $G/run/jobs/$JOB.json"
[ "$(stat -c '%U %a' "$G/run/jobs")" = "root 755" ] || die "step 7: record_dir not root's 0755"
LEFT=$(as_user1 docker -H "unix://$SB/run/$USER1/docker.sock" ps -aq --filter "label=acbslurm.job_id=$JOB")
[ -z "$LEFT" ] || die "containers of job $JOB remain: $LEFT"
echo "ok: site prolog/epilog/task-prolog markers; no record, no container left"

say "step 4: both task prologs' exports reach the job"
cat >"$WORK/env.yaml" <<EOF
name: guide-env
partition: p1
account: $USER1
gpus: 1
mem: 100M
time: "5:00"
output: $WORK/guide-env-%j.out
command: 'echo "uuids=\$ACBSLURM_GPU_UUIDS site=\$SITE_TASK_PROLOG"'
EOF
chown "$USER1:" "$WORK/env.yaml"
JOB2=$(cd "$WORK" && as_user1 "$PREFIX/bin/acbslurm" submit --wait env.yaml | head -n 1)
JOB2=${JOB2%% *}
cat "$WORK/guide-env-$JOB2.out"
grep -qE '^uuids=GPU-[0-9a-f-]+ site=ran$' "$WORK/guide-env-$JOB2.out" \
    || die "the job did not get ACBSLURM_GPU_UUIDS and the site's export"

# -- step 8: where a hook error goes --------------------------------------------------------
say "step 8: a failing prolog (gres.conf without GPUs) shows in slurmd's log"
printf 'NodeName=%s Name=gpu Count=%d\n' "$NODE" "$NGPU" >"$G/etc/gres-broken.conf"
write_settings "$G/etc/gres-broken.conf"
BEFORE=$(wc -l <"$SLURMD_LOG")
JOB3=$(as_user1 sbatch --parsable -p p1 -A "$USER1" --gres=gpu:1 --mem=100M -o /dev/null \
    --wrap true)
drained() { scontrol show node "$NODE" -o | grep -q 'State=[A-Z+]*DRAIN'; }
wait_for 60 "the node to drain after the failed prolog" drained
wait_for 30 "slurmd's log line" grep -q 'lists no GPU device files' <(tail -n +"$BEFORE" "$SLURMD_LOG")
tail -n +"$BEFORE" "$SLURMD_LOG" | grep -E 'prolog failed|acbslurm-prolog' | head -n 5
scontrol show node "$NODE" -o | grep -o 'Reason=.*'
# and in syslog: this machine has no /dev/log (nor may this script make one: other
# sandboxes share it), so the same prolog wrapper runs, outside slurmd, in a mount
# namespace of its own whose /dev holds a real syslog socket.
say "step 8: the same error reaches syslog (facility daemon, tag acbslurm-prolog)"
SYSLOG=$(unshare -m --propagation private "$PY" - "$G/prolog.sh" "$NODE" <<'PYEOF'
import os, socket, subprocess, sys
subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", "/dev"], check=True)
os.mknod("/dev/null", 0o666 | 0o020000, os.makedev(1, 3))
os.chmod("/dev/null", 0o666)
log = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
log.bind("/dev/log")
log.settimeout(30)
env = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "999999", "SLURM_JOB_UID": "1001",
       "SLURM_JOB_USER": "user1", "SLURM_JOB_GPUS": "9", "SLURMD_NODENAME": sys.argv[2]}
r = subprocess.run([sys.argv[1]], env=env, capture_output=True, text=True)
print(f"rc={r.returncode} stderr={r.stderr.strip()}")
# Every line the prolog logged (a warning, as that it asks slurmctld again, may come
# before the error): the prolog has ended, so they are all queued on the socket.
log.settimeout(0.5)
try:
    while True:
        print(log.recv(65536).decode(errors="replace"))
except TimeoutError:
    pass
PYEOF
)
echo "$SYSLOG"
grep -q '^rc=1 ' <<<"$SYSLOG" || die "step 8: the prolog did not fail on GPU index 9"
# <27>: facility daemon (3) * 8 + priority err (3)
grep -qE '^<27>.*acbslurm-prolog\[[0-9]+\]: error: job 999999: ' <<<"$SYSLOG" \
    || die "step 8: no daemon.err line tagged acbslurm-prolog in syslog"
rm -f "$G/markers/prolog.999999"
write_settings "$SB/etc/gres.conf"
scancel "$JOB3"
scontrol update nodename="$NODE" state=resume
idle() { scontrol show node "$NODE" -o | grep -qE 'State=IDLE( |$)'; }
wait_for 60 "the node to be idle again" idle

say "done: the guide's install works (total $(($(date +%s) - T0)) s)"
if [ "${ACBSLURM_GUIDE_KEEP:-0}" != 1 ]; then
    sandbox down >/dev/null
    rm -rf "$PREFIX"
    echo "sandbox down, $PREFIX removed"
fi

"""What `acbslurm run`, acbslurm's OCI runtime and the job's cgroup helper agree on
(a module of constants alone: `acbslurm run` imports it on its fast path)."""

# The runtime's name in the user's daemon (`dockerd --add-runtime acbslurm=...`).
RUNTIME_NAME = "acbslurm"
# In a job's container's environment, read by the runtime at create: the helper's
# socket, and the pid of the `acbslurm run` whose cgroups the container joins.
SOCKET_ENV = "ACBSLURM_CGROUP_SOCKET"
RUN_PID_ENV = "ACBSLURM_RUN_PID"
# The helper's directory, <job_runtime_dir>/<jobid>.cgroup beside the job's own (a job id
# has no dot): root's, 0755, so that the job's user can neither rename nor plant what
# root binds and hands over in it (in the user's own directory they could: issue 39).
HELPER_DIR_SUFFIX = ".cgroup"
# The helper's socket in that directory: the job's user's, 0600.
HELPER_SOCKET = "cgroup.sock"

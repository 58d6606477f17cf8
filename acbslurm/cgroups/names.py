"""What `acbslurm run`, acbslurm's OCI runtime and the job's cgroup helper agree on
(a module of constants alone: `acbslurm run` imports it on its fast path)."""

# The runtime's name in the user's daemon (`dockerd --add-runtime acbslurm=...`).
RUNTIME_NAME = "acbslurm"
# In a job's container's environment, read by the runtime at create: the helper's
# socket, and the pid of the `acbslurm run` whose cgroups the container joins.
SOCKET_ENV = "ACBSLURM_CGROUP_SOCKET"
RUN_PID_ENV = "ACBSLURM_RUN_PID"
# The helper's socket in the job's runtime directory.
HELPER_SOCKET = "cgroup.sock"

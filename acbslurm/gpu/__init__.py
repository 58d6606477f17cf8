"""GPU inventories (NVML, static file) and the Slurm index -> UUID mapping."""

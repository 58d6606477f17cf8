"""Slurm prolog, epilog and task-prolog: small, fast, explicit exit codes."""

"""A job's container inside the job's own cgroups (docs/design.md, "Why the container joins")."""

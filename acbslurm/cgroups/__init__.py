"""A job's container inside the job's own cgroups (docs/design.md, "The container is the job's")."""

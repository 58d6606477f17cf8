"""``acbslurm serve``: an OpenAI-compatible pool of models sharing GPUs through the broker.

One gateway (``gateway``) and one long-lived worker process per model (``worker``);
the workers take broker leases per batch and move their weights to host memory when
the broker needs the room (``residency``). See docs/serve.md.
"""

"""The built-in engine (``engine: builtin``): the project's own decode loop.

``worker``: the model's worker process (``BuiltinWorker``); ``decoding``: one request's
prompt, KV cache, sampling and stop conditions; ``gang`` and ``residency``: whose weights
sit on which of the lease's devices, and moving them to host memory and back in place;
``group``, ``follower`` and ``stages``: a model over several processes (``procs: N``),
its layers cut into pipeline stages over ``torch.distributed``.
"""

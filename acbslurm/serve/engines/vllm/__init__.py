"""The vLLM engine (``engine: vllm``): one vLLM OpenAI server per model, supervised by
the model's worker.

``worker``: the model's worker process (``VllmWorker``: the server driven by the
model's leases, woken at a grant, put to sleep at a yield or an eviction, the client's
requests forwarded, the answers relayed); ``server``: the server's process (command
line, start, readiness, stop and kill, what it leaves behind); ``client``: HTTP to it
on its unix socket; ``answers``: what the worker reads in and changes of vLLM's
answers; ``nodes`` and ``follower``: a model over several nodes (``procs: N``), vLLM's
own multi-node executor with a headless node per follower.
"""

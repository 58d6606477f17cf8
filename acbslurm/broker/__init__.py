"""The ACB-style GPU broker: per-request GPU leases over gRPC, agarun, eviction."""

"""The OxyGen engine: shared-prefix KV pool, request state, scheduler and baselines."""

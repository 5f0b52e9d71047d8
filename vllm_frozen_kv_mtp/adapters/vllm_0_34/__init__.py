"""vLLM 0.34: the 0.32 adapter's modules where 0.34 kept the names, overrides where it
changed them (docs/upstream.md, "What breaks on 0.34.0"). No V1 runner on 0.34, so no
``proposer`` or ``proposer_helpers`` role."""

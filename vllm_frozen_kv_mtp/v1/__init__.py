"""The V1 runner (also vLLM's CPU runner): the frozen-KV proposer."""

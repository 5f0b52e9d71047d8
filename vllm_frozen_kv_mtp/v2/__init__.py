"""Model Runner V2 (the GPU default): the frozen-KV speculator and its seed-row kernel."""

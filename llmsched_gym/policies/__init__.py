"""Local scheduling policies: vLLM V1 (exact), the papers' baselines, reference agents."""

"""Policies: OpenAI-compatible chat API, in-process transformers, scripted (docs/contracts.md "Policy")."""

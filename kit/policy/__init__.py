"""Policies: OpenAI-compatible chat API, in-process transformers, scripted (DESIGN.md "Policy")."""

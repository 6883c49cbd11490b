"""Policies: OpenAI-compatible chat API, in-process transformers, scripted, the rule-based demonstrator
(docs/contracts.md "Policy"); :func:`make_policy` picks one from a name or endpoint, refusing a dead one.
"""

from kit._lazy import lazy_exports

# public names, imported on first use (``import kit.policy`` stays cheap)
__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "OpenAIChatPolicy": "kit.policy.openai_client",
    "TransformersPolicy": "kit.policy.transformers_policy",
    "ScriptedPolicy": "kit.policy.scripted",
    "CharTokenCounter": "kit.policy.scripted",
    "DemonstratorPolicy": "kit.policy.demonstrator",
    "make_policy": "kit.policy.factory",
    "ModelUnavailable": "kit.policy.factory",
    "check_endpoint": "kit.policy.factory",
    "QwenTokenCounter": "kit.policy.tokens",
    "counter_for": "kit.policy.tokens",
})

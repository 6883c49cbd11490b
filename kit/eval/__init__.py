"""Evaluation: benchmark loaders into the kit's Task schema and judges."""

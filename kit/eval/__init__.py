"""Evaluation (WeAgent §5, §7; POINTS-Seeker §4).

loaders/ (local benchmark files -> Task, one module per benchmark family), hub_loaders.py (published
releases by name, pinned revisions), benchmarks.py (names, display, one loading entry point),
crypto.py (the canary cipher of MM-BrowseComp / MMSearch-Plus), vistarget.py (VisTarget-style
tasks), judges.py (rule, LLM and image judges), configs.py (direct / harness / no re-feed /
text-only), runner.py (benchmarks x configs x repeats through the harness, resumable), metrics.py
(equation (2), mean +- std, Table 1, tool use), report.py (CSV / Markdown / HTML tables, plotly
figures).
"""

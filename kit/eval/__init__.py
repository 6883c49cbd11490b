"""Evaluation (WeAgent §5, §7; POINTS-Seeker §4).

loaders/ (local benchmark files -> Task, one module per benchmark family), hub_loaders.py (published
releases by name, pinned revisions), benchmarks.py (names, display, one loading entry point),
crypto.py (the canary cipher of MM-BrowseComp / MMSearch-Plus), vistarget.py (VisTarget-style
tasks), judges.py (rule, LLM and image judges), configs.py (direct / harness / no re-feed /
text-only), protocols.py (per-paper benchmark filters, trials rule, hard subset), runner.py
(benchmarks x configs x repeats through the harness, resumable), metrics.py
(equation (2), mean +- std, Table 1, tool use), report.py (CSV / Markdown / HTML tables, plotly
figures).
"""

from kit._lazy import lazy_exports

# public names, imported on first use (``import kit.eval`` stays cheap)
__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "load_benchmark": "kit.eval.benchmarks",
    "make_configs": "kit.eval.configs",
    "EvalConfig": "kit.eval.configs",
    "EvalProtocol": "kit.eval.protocols",
    "get_protocol": "kit.eval.protocols",
    "hard_subset": "kit.eval.protocols",
    "interaction_rounds": "kit.eval.protocols",
    "run_evaluation": "kit.eval.runner",
    "RuleJudge": "kit.eval.judges",
    "LLMJudge": "kit.eval.judges",
    "PerceptualImageJudge": "kit.eval.judges",
    "VLMImageJudge": "kit.eval.judges",
    "table1": "kit.eval.metrics",
    "vistarget_table": "kit.eval.metrics",
    "write_table1": "kit.eval.report",
    "figure6": "kit.eval.report",
    "write_figure": "kit.eval.report",
    "replay_evaluation": "kit.eval.replay",
    "build_zim_vistarget": "kit.eval.vistarget",
    "verification_tasks": "kit.eval.vistarget",
})

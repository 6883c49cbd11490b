"""Dataset cards for what the data pipeline produces (issue 5 "Mixtures and cards").

Rendering goes through :func:`kit.hub.cards.render_dataset_card` (``huggingface_hub``'s
``DatasetCard.from_template`` with the YAML metadata block) and the templates in ``data_cards/``:
``data_mixture.md`` for SFT / RL mixtures and normalized sources, ``vistarget_build.md`` for
VisTarget-style task sets. Each card is written as ``README.md`` into the dataset folder (the Hub's
convention) and, when ``cards_dir`` is given, as ``<cards_dir>/<name>.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kit.hub.cards import md_table, render_dataset_card, size_category_for

_SFT_SCHEMA = [
    ("id", "string", "episode id"), ("source", "string", "source name (synth, mmsearch_r1, ...)"),
    ("origin", "string", "in-house or open-source"), ("question", "string", "the user question"),
    ("answers", "list[string]", "reference answer first, then accepted variants"),
    ("messages", "string (JSON)", "the chat: system, user, canonical assistant turns, namespaced tool observations"),
    ("images", "list[Image]", "every image registered in the episode (bytes embedded)"),
    ("image_names", "list[string]", "workspace file name of each image, as the messages refer to it"),
    ("episode", "string (JSON)", "the rest of the episode record (status, events, cited images, labels)"),
    ("turns / tool_calls", "int32", "assistant turns and tool calls"), ("labels", "list[string]", "provenance labels")]
_RL_SCHEMA = [
    ("id", "string", "task id"), ("source", "string", "source name"), ("origin", "string", "in-house or open-source"),
    ("question", "string", "the prompt"), ("answers", "list[string]", "reference answers (judgeable targets)"),
    ("input_images", "list[Image]", "the user's images"), ("input_image_names", "list[string]", "their file names"),
    ("target_image", "Image or null", "held-out target image (Target Match reward), when known"),
    ("solve_rate", "float or null", "share of correct rollouts in the filtering group"),
    ("metadata", "string (JSON)", "chain depth, modality, filter outcome")]


#: Card notice of a run labelled ``preflight`` (kit.profiles: a paper recipe at tiny sizes, tiny stand-in models).
PREFLIGHT_NOTE = ("**Preflight run** (label `preflight`): the paper recipe's settings at tiny sizes with tiny "
                  "random-weight stand-in models; it checks that every stage runs and reports, its rows are not data.")


def _notices(labels: Sequence[str], empty: Sequence[str], unit: str, total: int) -> str:
    """Sentences a card adds for a preflight and for sources (or a whole set) with no rows."""
    out = [PREFLIGHT_NOTE] if "preflight" in labels else []
    if total == 0:
        out.append(f"**Empty:** 0 {unit}. Every candidate was rejected or failed upstream; the filter table and "
                   "the run's stage counts (`stage_counts.csv`, `*_rejected.jsonl`, `*_failed.jsonl`) give the reasons.")
    elif empty:
        out.append(f"Sources with no {unit}: {', '.join(empty)} (every candidate was rejected or failed upstream; "
                   "see the run's stage counts).")
    return " ".join(out)


FACT_SOURCE_TEXT = {"expert": "read from the image by the expert model (fact_source=expert)",
                    "pixel_statistics": "computed from pixel statistics, tone and orientation "
                                        "(fact_source=pixel_statistics, the offline stand-in)"}


def _commit() -> str | None:
    from kit.manifest import git_state

    return git_state().get("commit")


def _write(text: str, dataset_dir: str | Path | None, cards_dir: str | Path | None, name: str) -> list[Path]:
    out = []
    if dataset_dir is not None:
        p = Path(dataset_dir) / "README.md"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
        out.append(p)
    if cards_dir is not None:
        p = Path(cards_dir) / f"{name}.md"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
        out.append(p)
    return out


def mixture_card(stats: dict[str, Any], *, name: str, kind: str, dataset_dir: str | Path | None = None,
                 cards_dir: str | Path | None = None, filters: Sequence[dict[str, Any]] = (), smoke: bool = False,
                 offline: bool = False, run: str | None = None, description: str | None = None,
                 license: str = "cc-by-sa-4.0", fact_sources: dict[str, int] | None = None,
                 labels: Sequence[str] = ()) -> tuple[str, list[Path]]:
    """Render and write the card of an SFT (``kind="sft"``) or RL (``kind="rl"``) mixture.

    ``labels``: the run's labels; each becomes a tag, and ``preflight`` adds :data:`PREFLIGHT_NOTE`. An
    empty mixture, or sources with no rows (``stats["empty_sources"]``), are stated in the description.

    ``fact_sources``: stage-1 seeds per fact source (``{"expert": n, "pixel_statistics": m}``,
    :func:`kit.data.seeds.seed_summary`); stated in the description, so a reader sees whether the
    in-house facts were read from the images by the expert or computed from pixel statistics.

    ``stats`` is :func:`kit.data.mixtures.mixture_stats` of the dataset; ``filters`` rows (e.g.
    ``{"stage": "normalize", "reason": "image_missing", "count": 10}``) list what was removed and why.
    Returns ``(card text, paths written)``.

    Raises:
        ValueError: unknown ``kind``; kit.hub.cards.CardError: template missing.
    """
    if kind not in ("sft", "rl"):
        raise ValueError(f"kind must be 'sft' or 'rl', got {kind!r}")
    unit = "trajectories" if kind == "sft" else "prompts"
    schema = _SFT_SCHEMA if kind == "sft" else _RL_SCHEMA
    note = ("Load with `datasets.load_from_disk(<folder>/arrow)` or the Parquet file under `data/`; "
            "`kit.data.mixtures.records_from_sft_dataset` rebuilds episode records for "
            "`kit.train.sft_data.SFTEncoder`." if kind == "sft" else
            "Load with `datasets.load_from_disk(<folder>/arrow)` or the Parquet file under `data/`.")
    description = description or (f"The {'SFT' if kind == 'sft' else 'RL'} mixture of mmsearch-kit: "
                                  f"{unit} from the in-house synthesis pipeline and normalized open-source data.")
    if fact_sources:
        description += (" In-house seed facts (WeAgent §4.1): " + ", ".join(
            f"{n} {FACT_SOURCE_TEXT.get(k, k)}" for k, n in sorted(fact_sources.items())) + ".")
    notes = _notices(labels, stats.get("empty_sources", ()), unit, stats["total"])
    description += f"\n\n{notes}" if notes else ""
    tags = ["mmsearch-kit", "multimodal-search", "agent-trajectories" if kind == "sft" else "rl-prompts"] \
        + (["synthetic-offline"] if offline else []) + (["smoke"] if smoke else [])
    text = render_dataset_card(
        "data_mixture.md", pretty_name=name, license=license,
        tags=tags + [t for t in labels if t not in tags],
        size_category=size_category_for(stats["total"]),
        description=description,
        offline=offline, smoke=smoke, total=stats["total"], unit=unit, images=stats.get("images", 0),
        origin_table=md_table(stats["by_origin"]), source_table=md_table(stats["by_source"]),
        filters_table=md_table(list(filters)) if filters else "",
        schema_table=md_table([{"column": c, "type": t, "meaning": m} for c, t, m in schema]), schema_note=note,
        commit=_commit(), run=run)
    return text, _write(text, dataset_dir, cards_dir, name)


def vistarget_card(split_counts: dict[str, int], *, name: str, dataset_dir: str | Path | None = None,
                   cards_dir: str | Path | None = None, verdicts: dict[str, int] | None = None, smoke: bool = False,
                   offline: bool = False, run: str | None = None, labels: Sequence[str] = ()) -> tuple[str, list[Path]]:
    """Render and write the card of a VisTarget-style task set (:mod:`kit.data.vistarget_build`).

    ``split_counts``: tasks per modality (``input_image`` / ``text_only``); ``verdicts``: counts of
    imported human verdicts (``None``: not yet reviewed); ``labels``: the run's labels (tags; a
    ``preflight`` one adds :data:`PREFLIGHT_NOTE`). An empty set says so in its review note."""
    total = sum(split_counts.values())
    review = ("Not yet human-verified: the review export awaits verdicts." if not verdicts else
              "Human verdicts imported from the review file (accept / fix / reject):")
    notes = _notices(labels, (), "tasks", total)
    review = f"{notes} {review}" if notes else review
    tags = ["mmsearch-kit", "vistarget", "benchmark"] + (["synthetic-offline"] if offline else []) \
        + (["smoke"] if smoke else [])
    text = render_dataset_card(
        "vistarget_build.md", pretty_name=name, license="cc-by-sa-4.0",
        tags=tags + [t for t in labels if t not in tags], size_category=size_category_for(total), offline=offline,
        smoke=smoke,
        split_table=md_table([{"modality": k, "tasks": v} for k, v in split_counts.items()]),
        review_note=review, verdict_table=md_table([{"verdict": k, "tasks": v} for k, v in (verdicts or {}).items()])
        if verdicts else "", commit=_commit(), run=run)
    return text, _write(text, dataset_dir, cards_dir, name)

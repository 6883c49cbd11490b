"""Hub cards for what the kit publishes, rendered from the templates in ``data_cards/``.

Rendering goes through ``huggingface_hub``'s card classes (``DatasetCard`` / ``ModelCard``
``.from_template``: Jinja2 with the YAML metadata block), so the metadata is validated the way the
Hub reads it. A dataset folder gets ``data_cards/<folder name>.md`` when such a card exists, else the
generic ``data_cards/dataset.md``.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from kit.paths import PROJECT_ROOT
from kit.web.cache import snapshot_counts

CARDS_DIR = PROJECT_ROOT / "data_cards"
LICENSE = "apache-2.0"


class CardError(ValueError):
    """A card cannot be rendered (missing template, unreadable input)."""


def _template(name: str) -> Path:
    p = CARDS_DIR / name
    if not p.is_file():
        raise CardError(f"card template {p} does not exist")
    return p


def md_table(rows: list[dict[str, Any]]) -> str:
    """A Markdown table of ``rows`` (columns from the first row); ``"(none)"`` for no rows."""
    if not rows:
        return "(none)"
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def render_dataset_card(template: str | Path, *, pretty_name: str, tags: list[str], license: str = LICENSE,
                        size_category: str | None = None, **context: Any) -> str:
    """Render a dataset card (YAML metadata + Markdown) from a Jinja template file.

    Raises:
        CardError: the template does not exist.
    """
    from huggingface_hub import DatasetCard, DatasetCardData

    data = DatasetCardData(pretty_name=pretty_name, license=license, tags=tags,
                           size_categories=[size_category] if size_category else None)
    t = Path(template) if Path(template).is_absolute() else _template(str(template))
    return str(DatasetCard.from_template(data, template_path=str(t), pretty_name=pretty_name, license=license, **context))


def render_model_card(template: str | Path, *, pretty_name: str, base_model: str | None, library_name: str,
                      tags: list[str], license: str = LICENSE, **context: Any) -> str:
    """Render a model card from a Jinja template file (``base_model`` and ``library_name`` in the metadata).

    Raises:
        CardError: the template does not exist.
    """
    from huggingface_hub import ModelCard, ModelCardData

    data = ModelCardData(license=license, library_name=library_name, tags=tags,
                         base_model=base_model if base_model and "/" in base_model else None)
    t = Path(template) if Path(template).is_absolute() else _template(str(template))
    return str(ModelCard.from_template(data, template_path=str(t), pretty_name=pretty_name, base_model=base_model,
                                       license=license, **context))


def size_category_for(n: int) -> str:
    """The Hub's ``size_categories`` label for ``n`` items (``"n<1K"`` … ``"n>1M"``)."""
    for limit, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if n < limit:
            return name
    return "n>1M"


def smoke_kind(manifest: dict[str, Any]) -> str | None:
    """What a run's outputs are, from its manifest: ``"smoke"`` (a tiny random-weight or scripted policy:
    not model quality), ``"smoke-budgets"`` (a real model under the smoke profile's small budgets) or
    ``None`` (a full run). A smoke-profile manifest without either label (older runs) counts as smoke."""
    labels = manifest.get("labels") or []
    if "smoke" in labels or (manifest.get("model") or {}).get("smoke") is True:
        return "smoke"
    if "smoke-budgets" in labels:
        return "smoke-budgets"
    return "smoke" if (manifest.get("config") or {}).get("profile") == "smoke" else None


def _ran(manifest: dict[str, Any]) -> str | None:
    """The profile and recipe that ran, an alias resolved (``weagent_mmsearch (recipe weagent_mmsearch+preflight)``),
    never a default: a card says what produced the numbers."""
    cfg = manifest.get("config", {})
    name = manifest.get("profile_resolved") or cfg.get("profile")
    recipe = cfg.get("recipe")
    return f"{name} (recipe {recipe})" if name and recipe else name


def evaluation_card(manifest: dict[str, Any], summary_md: str, *, repo_id: str, tag: str, cache_repo: str | None,
                    n_items: int) -> str:
    """Card of an evaluation-results repository (notebook 06 outputs)."""
    cfg = manifest.get("config", {})
    kind = smoke_kind(manifest)
    return render_dataset_card(
        "evaluation_results.md", pretty_name=f"mmsearch-kit evaluation results ({tag})",
        tags=["mmsearch-kit", "evaluation", "multimodal-search"] + ([kind] if kind else []),
        size_category=size_category_for(n_items), summary_table=summary_md.strip() or "(no summary table)",
        smoke=kind == "smoke", smoke_budgets=kind == "smoke-budgets",
        commit=(manifest.get("git") or {}).get("commit"), dirty=(manifest.get("git") or {}).get("dirty"),
        profile=_ran(manifest), seed=manifest.get("seed"), repeats=cfg.get("repeats"), judge=cfg.get("judge"),
        policy=(manifest.get("model") or {}).get("kind") or (manifest.get("model") or {}).get("model"),
        benchmarks=", ".join(cfg.get("benchmarks") or []), cache_repo=cache_repo, repo_id=repo_id, tag=tag)


def cache_counts(snapshot: str | Path) -> list[dict[str, Any]]:
    """Entries per (backend, operation) of a tool-cache snapshot.

    Raises:
        CardError: not a tool-cache SQLite file.
    """
    try:
        rows = snapshot_counts(snapshot)
    except (ValueError, FileNotFoundError) as e:
        raise CardError(str(e)) from e
    return [{"backend": b, "operation": o, "entries": n} for b, o, n in rows]


def cache_card(snapshot: Path, sha256: str, manifest: dict[str, Any], *, repo_id: str, tag: str, run: str) -> str:
    """Card of a tool-response cache snapshot repository."""
    counts = cache_counts(snapshot)
    total = sum(r["entries"] for r in counts)
    smoke = smoke_kind(manifest) is not None  # smoke-profile budgets, tiny model or not
    return render_dataset_card(
        "tool_cache_snapshot.md", pretty_name=f"mmsearch-kit tool-response cache snapshot ({run}, {tag})",
        tags=["mmsearch-kit", "tool-cache", "replay"] + (["smoke"] if smoke else []), size_category=size_category_for(total),
        license="cc-by-sa-4.0", filename=snapshot.name, sha256=sha256, entries=total, counts_table=md_table(counts),
        commit=(manifest.get("git") or {}).get("commit"), run=run, smoke=smoke, repo_id=repo_id, tag=tag)


def checkpoint_info(folder: Path) -> dict[str, Any]:
    """``{"adapter": bool, "base_model", "library_name"}`` of a checkpoint folder.

    A folder with ``adapter_config.json`` is a PEFT LoRA adapter; one with ``config.json`` and weights
    (``*.safetensors`` / ``*.bin``) is a full (merged) model.

    Raises:
        CardError: neither.
    """
    if (folder / "adapter_config.json").is_file():
        cfg = json.loads((folder / "adapter_config.json").read_text(encoding="utf-8"))
        return {"adapter": True, "base_model": cfg.get("base_model_name_or_path"), "library_name": "peft"}
    if (folder / "config.json").is_file() and (any(folder.glob("*.safetensors")) or any(folder.glob("*.bin"))):
        cfg = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        return {"adapter": False, "base_model": cfg.get("_name_or_path") or None, "library_name": "transformers"}
    raise CardError(f"{folder} is neither a LoRA adapter (adapter_config.json) nor a model (config.json + weights)")


def checkpoint_card(folder: Path, manifest: dict[str, Any], *, repo_id: str, tag: str, run: str, smoke: bool) -> str:
    """Model card of a LoRA adapter or merged checkpoint folder."""
    info = checkpoint_info(folder)
    files = [f for f in folder.rglob("*") if f.is_file()]
    return render_model_card(
        "model_checkpoint.md", pretty_name=f"{repo_id.split('/')[-1]} ({tag})", base_model=info["base_model"],
        library_name=info["library_name"], tags=["mmsearch-kit", "multimodal-search", "tool-use"] +
        (["lora"] if info["adapter"] else []) + (["smoke"] if smoke else []), adapter=info["adapter"], smoke=smoke,
        n_files=len(files), size_mb=round(sum(f.stat().st_size for f in files) / 1e6, 2),
        commit=(manifest.get("git") or {}).get("commit"), run=run, repo_id=repo_id, tag=tag)


def dataset_card(folder: Path, manifest: dict[str, Any], *, repo_id: str, tag: str, run: str, smoke: bool) -> str:
    """Card of a produced dataset folder: ``data_cards/<folder name>.md`` if present, else the generic one."""
    files = [f for f in folder.rglob("*") if f.is_file()]
    by_ext = Counter(f.suffix.lower() or "(none)" for f in files)
    specific = CARDS_DIR / f"{folder.name}.md"
    return render_dataset_card(
        specific if specific.is_file() else "dataset.md", pretty_name=f"{folder.name} ({tag})",
        tags=["mmsearch-kit"] + (["smoke"] if smoke else []), size_category=size_category_for(len(files)),
        description=f"folder `{folder.name}` of run `{run}`",
        files_table=md_table([{"extension": k, "files": v} for k, v in sorted(by_ext.items())]),
        commit=(manifest.get("git") or {}).get("commit"), run=run, smoke=smoke, repo_id=repo_id, tag=tag)

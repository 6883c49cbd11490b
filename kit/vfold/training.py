"""Fully rendered trajectories for the SFT mixture (POINTS-Seeker §3.3 "Discussions", Appendix A.3).

POINTS-Seeker trains on two forms of each trajectory: the text-only one and a *rendered visual
trajectory where all intermediate tool observations are rendered into images* (5k of them teach the
model to read folded history). :func:`render_trajectory` turns an :class:`EpisodeRecord` into that
second form: every tool observation's text is replaced by its Table 8 page images, registered in the
workspace as ``rendered_obs`` with provenance; images the observation already carried (registered
evidence) keep their references. The folded message format is exactly V-Fold's at inference
(:meth:`kit.vfold.fold.VFoldContext.fold_message`), so training and deployment agree.

``mode`` (:mod:`kit.vfold.modes`): ``"paper"`` renders *every* non-empty observation with Table 8's
layout, as A.3 describes; one that loses characters (page cap, glyphs no font has) is rendered anyway
and an event ``vfold_folded_lossy`` on the record says what was lost. ``"kit"`` (default) uses the
flowed layout and keeps such an observation as text, with an event ``vfold_kept_as_text``. Both forms
fold regardless of token cost. The record's labels name the mode (``vfold_mode:paper``).

The SFT collator (images + loss masks) consumes these records like any other.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable
from pathlib import Path

from kit.harness.episode import EpisodeRecord, Event
from kit.harness.events import EventType
from kit.harness.portable import portable_record
from kit.harness.registry import EvidenceRegistry
from kit.vfold.fold import VFoldContext

RENDERED_LABEL = "vfold_rendered"
MODE_LABEL = "vfold_mode:{mode}"


class _Counter:
    """Counting is not needed to render everything; V-Fold's builder wants a counter anyway."""

    def count_text(self, text: str) -> int:
        return len(text)

    def count_image(self, width: int, height: int) -> int:
        return 1


def render_trajectory(record: EpisodeRecord, workspace: str | Path | None = None, renderer=None, *,
                      note: bool = True, id_suffix: str = "-vfold", mode: str = "kit", layout: str | None = None,
                      require_lossless: bool | None = None) -> EpisodeRecord:
    """The fully rendered variant of ``record`` (a new record; ``record`` is not modified).

    Args:
        record: a finished episode whose ``workspace`` holds its registered images.
        workspace: where the new record's images live. ``None`` adds the rendered pages to the
            record's own workspace; another folder gets a copy of every registered image first.
        renderer: a :class:`kit.vfold.render.Renderer` (default: the shared renderer of the mode's layout).
        note: keep V-Fold's one-line text note naming the page images.
        id_suffix: appended to the record id (both forms can then share one dataset).
        mode, layout, require_lossless: V-Fold mode and overrides (see the module docstring);
            ``only_if_smaller`` is always off (every observation is rendered).

    Raises:
        ValueError: the record has no workspace; an unknown mode or layout.
        FileNotFoundError: a registered image file is missing from the record's workspace.
    """
    fold = VFoldContext(_Counter(), renderer=renderer, tau=0, keep=0, note=note, mode=mode, layout=layout,
                        only_if_smaller=False, require_lossless=require_lossless)  # validates before any copy
    if not record.workspace and workspace is None:
        raise ValueError(f"episode {record.id} has no workspace; pass workspace=")
    src = Path(record.workspace) if record.workspace else None
    dst = Path(workspace) if workspace is not None else src
    dst.mkdir(parents=True, exist_ok=True)
    if src is None or src.resolve() != dst.resolve():
        for e in record.images:
            f = (src / e.filename) if src is not None else None
            if f is None or not f.is_file():
                raise FileNotFoundError(f"registered image {e.filename} of episode {record.id} not found in {src}")
            shutil.copyfile(f, dst / e.filename)
    registry = EvidenceRegistry.from_images(dst, record.images)
    st = fold.state(registry)
    vfold = fold.options.record()
    messages, events = [], list(record.events)
    for m in record.messages:
        if m.role == "tool" and m.text().strip():
            fo = fold.fold_observation(m.text(), m, registry, st)
            new = fold.fold_message(m, registry, st)
            if new is m:
                events.append(Event(type=EventType.VFOLD_KEPT_AS_TEXT, turn=m.turn,
                                    detail={"tool": m.name, "reason": fo.reason, "report": fo.report, "vfold": vfold}))
            elif fo.losses:
                events.append(Event(type=EventType.VFOLD_FOLDED_LOSSY, turn=m.turn,
                                    detail={"tool": m.name, "losses": fo.losses, "report": fo.report, "vfold": vfold}))
            m = new
        messages.append(m)
    labels = list(record.labels)
    labels += [lab for lab in (RENDERED_LABEL, MODE_LABEL.format(mode=fold.options.mode)) if lab not in labels]
    return record.model_copy(update={"id": record.id + id_suffix, "messages": messages, "images": list(registry.images),
                                     "workspace": str(dst), "labels": labels, "events": events}, deep=True)


def render_dataset(records: Iterable[EpisodeRecord], out_dir: str | Path, renderer=None, *,
                   trainable_only: bool = True, mode: str = "kit", layout: str | None = None,
                   require_lossless: bool | None = None) -> list[EpisodeRecord]:
    """Render many episodes into ``out_dir``: ``episodes.jsonl`` plus one workspace per episode
    (``workspaces/<id>/``). With ``trainable_only`` only records marked ``trainable`` are kept
    (context-limit, wall-clock and error episodes never enter training, WeAgent Table 5). ``mode``,
    ``layout``, ``require_lossless``: as in :func:`render_trajectory` (``"paper"`` for A.3's data).

    Returns the rendered records in input order.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rendered = []
    with open(out / "episodes.jsonl", "w", encoding="utf-8") as fh:
        for rec in records:
            if trainable_only and not rec.trainable:
                continue
            new = render_trajectory(rec, out / "workspaces" / (rec.id + "-vfold"), renderer, mode=mode, layout=layout,
                                    require_lossless=require_lossless)
            # the workspace relative to out, so the rendered folder can move (kit.harness.portable)
            fh.write(json.dumps(portable_record(new, out).model_dump(mode="json"), ensure_ascii=False) + "\n")
            rendered.append(new)
    return rendered

"""Stage 1: visually grounded seeds (WeAgent §4.1).

Two branches:

* **stable facts** (:func:`stable_seeds`): concept name, definition and category of an article of a
  knowledge source (any Kiwix ZIM through :class:`kit.web.zim.LocalZimWeb`), with a target image
  placed on its page. Under the paper profile the expert reads the fact D from the image
  (:class:`kit.data.visual_fact.ExpertFactReader`, ``fact_source="expert"``); offline it is computed
  from the pixels (:func:`pixel_fact`: tone and orientation, ``fact_source="pixel_statistics"``).
  Neither may be stated by a title, URL, caption or metadata.
* **time-sensitive events** (:func:`collect_event_seeds`): an expert agent searches a topic inside a
  5-day date window through the harness (:func:`date_windows`, :data:`EVENT_TOPICS`) and reports one
  event with a source page, event date, as-of time, a registered image and a fact read from it.

Acceptance (both branches, :func:`check_seed`): the target image is reachable through the harness
(fetched through the backend, not read from disk), its fact does not leak through the page title,
image URL, caption or alt text, and provenance (backend, URLs, archive, time) is recorded. Search
results observed here go through the caller's backend, normally a
:class:`kit.web.cache.CachedBackend` (the shared cache pool).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from kit.data import OFFLINE_LABEL
from kit.data.expert import ExpertError
from kit.data.linkgraph import LinkGraph
from kit.data.records import Failure, PixelFact, Rejection, Seed, StageFiles, TargetImage, fact_source_of
from kit.recipes import paper_default as _P
from kit.types import BackendError, PolicyError, SearchBackend

# --- paper values of the event branch, read from kit/recipes (weagent_mmsearch.yaml, smoke.yaml): WeAgent
# §4.1 "date windows at five-day intervals between January 1 and July 30, 2026 (e.g., January 1–5 and
# January 5–10)" -------------------------------------------------------------------------------------
#: Window length in days (§4.1 "five-day intervals").
EVENT_WINDOW_DAYS = int(_P("data.event_window_days"))
#: Paper date range of the event windows (§4.1): 42 windows of 5 days, the last ending on July 30.
PAPER_EVENT_RANGE = (str(_P("data.event_start")), str(_P("data.event_end")))
#: Smoke date range (kit choice: the first two windows, enough to exercise the branch).
SMOKE_EVENT_RANGE = (str(_P("data.event_start", "smoke")), str(_P("data.event_end", "smoke")))
# -----------------------------------------------------------------------------------------------------
#: WeAgent §4.1 topic list for the event branch ("among others").
EVENT_TOPICS = ("sports/games", "science/technology/nature", "finance", "business/brands/organizations",
                "politics/government", "entertainment/culture")
#: Mean HSV saturation (0..1) at or under which an image counts as black-and-white, and the lowest
#: one for colour; images in between are ambiguous to a viewer and rejected.
GREY_MAX_SAT, COLOUR_MIN_SAT = 0.06, 0.14
#: Width/height ratios: square within SQUARE_RATIO of 1, landscape above ORIENT_RATIO, portrait below
#: its inverse; ratios in between are ambiguous to a viewer and rejected.
SQUARE_RATIO, ORIENT_RATIO = 1.03, 1.15
_TONE_WORDS = ("black-and-white", "black and white", "monochrome", "greyscale", "grayscale", "sepia", "colour",
               "color", "colorized", "colourised", "b&w")
_ORIENT_WORDS = ("portrait", "landscape", "square", "panorama", "panoramic")
FACT_QUESTION = ("Is that picture black-and-white or in colour, and is its shape portrait, landscape or square? "
                 'Answer like "colour, landscape".')




def fact_label(source: str) -> str:
    """The provenance label of a seed's fact source (``fact:expert`` / ``fact:pixel_statistics``); it
    travels with the seed into tasks, trajectories, RL prompts and the mixtures' ``labels`` column."""
    return f"fact:{source}"


class SeedError(ValueError):
    """A seed cannot be made from this image or page; ``reason`` is the rejection key."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


def _measure(img: Image.Image) -> tuple[float, float]:
    """(mean HSV saturation in 0..1, width/height) of an image, on a 128-px thumbnail."""
    im = img.convert("RGB")
    w, h = im.size
    im.thumbnail((128, 128))
    sat = np.asarray(im.convert("HSV"), dtype=np.float32)[..., 1] / 255.0
    return float(sat.mean()), w / h


def pixel_fact(data: bytes) -> PixelFact:
    """The tone (black-and-white / colour) and shape (portrait / landscape / square) of an image.

    Read from pixels only, and required to be stable: the same answer on a half-size JPEG
    re-encoding (what a search thumbnail would show).

    Raises:
        SeedError: undecodable image (``image_unreadable``), tone or orientation too close to the
            threshold (``ambiguous_tone``, ``ambiguous_orientation``) or unstable under re-encoding
            (``unstable_fact``).
    """
    try:
        with Image.open(io.BytesIO(data)) as im:
            im.load()
            sat, ratio = _measure(im)
            small = im.convert("RGB").resize((max(1, im.width // 2), max(1, im.height // 2)))
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
        raise SeedError("image_unreadable", str(e)) from e
    buf = io.BytesIO()
    small.save(buf, "JPEG", quality=60)
    sat2, _ = _measure(Image.open(io.BytesIO(buf.getvalue())))
    if GREY_MAX_SAT < sat < COLOUR_MIN_SAT:
        raise SeedError("ambiguous_tone", f"mean saturation {sat:.3f}")
    if 1 / ORIENT_RATIO <= ratio <= ORIENT_RATIO and not 1 / SQUARE_RATIO <= ratio <= SQUARE_RATIO:
        raise SeedError("ambiguous_orientation", f"aspect ratio {ratio:.2f}")
    tone = "black-and-white" if sat <= GREY_MAX_SAT else "colour"
    if (sat2 <= GREY_MAX_SAT) != (tone == "black-and-white") or GREY_MAX_SAT < sat2 < COLOUR_MIN_SAT:
        raise SeedError("unstable_fact", f"saturation {sat:.3f} -> {sat2:.3f} after re-encoding")
    orient = "square" if 1 / SQUARE_RATIO <= ratio <= SQUARE_RATIO else "landscape" if ratio > 1 else "portrait"
    tone_alts = ["black-and-white", "black and white", "monochrome", "greyscale", "grayscale"] \
        if tone == "black-and-white" else ["colour", "color"]
    answers = [f"{t}, {orient}" for t in tone_alts]
    return PixelFact(kind="tone_orientation", question=FACT_QUESTION, answer=answers[0], answers=answers,
                     evidence={"mean_saturation": round(sat, 4), "reencoded_saturation": round(sat2, 4),
                               "aspect_ratio": round(ratio, 4)})


def fact_correct(response: str | None, fact: PixelFact) -> bool:
    """True when ``response`` states the fact's tone and orientation and no contradicting value."""
    if not response:
        return False
    r = response.casefold().replace("gray", "grey").replace("color", "colour")
    grey = any(w in r for w in ("black-and-white", "black and white", "monochrome", "greyscale"))
    colour = re.search(r"\bcolour\b", r) is not None and not re.search(r"\bin colour\?|or (?:in )?colour", r)
    orient = {o for o in ("portrait", "landscape", "square") if re.search(rf"\b{o}\b", r)}
    want_grey = fact.answer.startswith("black")
    tone_ok = (grey and not colour) if want_grey else (colour and not grey)
    return tone_ok and orient == {fact.answer.rsplit(", ", 1)[1]}


def leak_fields(fact: PixelFact, fields: dict[str, str]) -> list[str]:
    """Names of the text fields (title, URL, caption, ...) that state the fact's tone or orientation
    words: the answer would not depend on the pixels (WeAgent §4.1, §4.3)."""
    words = [w for w in _TONE_WORDS + _ORIENT_WORDS]
    out = []
    for name, text in fields.items():
        t = (text or "").casefold().replace("_", " ")
        if any(re.search(rf"(?<![a-z]){re.escape(w)}(?![a-z])", t) for w in words):
            out.append(name)
    return out


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def save_target(data: bytes, mime: str | None, image_dir: Path) -> tuple[Path, str, int, int]:
    """Store image bytes under ``image_dir/<sha256[:16]>.<ext>``; returns (path, sha256, w, h)."""
    h = _sha(data)
    with Image.open(io.BytesIO(data)) as im:
        w, hgt = im.size
        ext = (im.format or (mime or "image/png").split("/")[-1]).lower().replace("jpeg", "jpg")
    image_dir.mkdir(parents=True, exist_ok=True)
    p = image_dir / f"{h[:16]}.{ext}"
    if not p.exists():
        p.write_bytes(data)
    return p.resolve(), h, w, hgt


@dataclass
class _SeedTally:
    """Running state of one :func:`stable_seeds` pass: the stage's files, decided ids, counts and bounds."""

    files: StageFiles
    done: set[str]
    kept_ids: set[str]
    per_fact: Counter[str]
    quota: int | None
    limit: int | None
    max_candidates: int | None
    accepted: int = 0
    decided: int = 0

    def full(self) -> bool:
        """Whether ``limit`` seeds are accepted."""
        return self.limit is not None and self.accepted >= self.limit

    def out_of_candidates(self) -> bool:
        """Whether ``max_candidates`` are decided (then ``files.stopped`` says so)."""
        if self.max_candidates is not None and self.decided >= self.max_candidates:
            self.files.stopped = f"max_candidates: {self.decided} candidates decided"
            return True
        return False


async def _try_seed(tally: _SeedTally, sid: str, art, image_url: str, by_url: dict, title: str, image_dir: Path,
                    as_of: str, web: SearchBackend, fact_reader: Any | None) -> Seed | None:
    """The seed of one candidate, or None when it was rejected or its expert failed (recorded in the files)."""
    files = tally.files
    try:
        return await _make_seed(sid, art, image_url, by_url, title, image_dir, as_of, getattr(web, "name", ""),
                                fact_reader)
    except SeedError as e:
        files.rejected.append(Rejection(id=sid, stage="seeds", reason=e.reason, detail=e.detail,
                                        item={"page": art.url, "image": image_url}))
    except (ExpertError, PolicyError) as e:  # the expert failed after its retries: not a filter verdict
        err = f"{e.reason}: {e}" if isinstance(e, ExpertError) else f"policy: {e}"  # as stage 2 writes it
        files.failed.append(Failure(id=sid, stage="seeds", error=err, attempts=getattr(fact_reader, "attempts", 1)))
    return None


async def _decide_page(tally: _SeedTally, art, cands: list, ids: dict[str, str], page, *, web: SearchBackend,
                       image_dir: Path, as_of: str, fact_reader: Any | None) -> None:
    """Decide one fetched article's candidates in order, until ``limit`` or ``max_candidates``."""
    files = tally.files
    by_url = {h.image_url: (i + 1, h) for i, h in enumerate(page.images)}
    for im in cands:
        sid = ids[im.url]
        if sid in tally.done:  # decided by an earlier run: an accepted one still counts towards the limit
            tally.decided += 1
            if sid in tally.kept_ids:
                tally.accepted += 1
                if tally.full():
                    return
            continue
        if tally.out_of_candidates():
            return
        tally.decided += 1
        seed = await _try_seed(tally, sid, art, im.url, by_url, page.title or art.title, image_dir, as_of, web,
                               fact_reader)
        if seed is None:
            continue
        if tally.quota is not None and tally.per_fact[seed.fact.answer] >= tally.quota:
            files.rejected.append(Rejection(id=sid, stage="seeds", reason="fact_quota_full",
                                            detail=f"{seed.fact.answer!r} already has {tally.quota} seeds",
                                            item={"page": art.url, "image": im.url}))
            continue
        files.accepted.append(seed)
        tally.per_fact[seed.fact.answer] += 1
        tally.accepted += 1
        if tally.full():
            return


async def stable_seeds(web: SearchBackend, graph: LinkGraph, out_dir: str | Path, *, max_images_per_page: int = 5,
                       limit: int | None = None, as_of: str | None = None,
                       max_fact_share: float | None = None, fact_reader: Any | None = None,
                       max_candidates: int | None = None) -> StageFiles:
    """Stage 1, stable-fact branch: one candidate per (article, image) among the first
    ``max_images_per_page`` images of every article of ``graph`` (those ``web_extract`` re-feeds).

    Each candidate is fetched through ``web`` (so the image is reachable through the harness and
    the observation enters the cache pool), its pixel fact computed, and leak checks applied.
    Writes ``seeds.jsonl`` / ``seeds_rejected.jsonl`` under ``out_dir`` and skips ids already
    decided (resume). Returns the stage's files.

    ``max_fact_share`` (needs ``limit``) balances the answers: once one fact answer (e.g.
    "colour, square", which album covers make common) holds ``ceil(share * limit)`` seeds, further
    seeds with it are rejected as ``fact_quota_full``.

    ``fact_reader`` (the paper profile: :class:`kit.data.visual_fact.ExpertFactReader`) makes the fact
    D: the expert reads it from the image (``fact_source="expert"``); ``None`` (offline / smoke)
    computes :func:`pixel_fact` (``fact_source="pixel_statistics"``). Its endpoint failures after
    retries go to ``seeds_failed.jsonl``.

    ``max_candidates`` bounds the candidates decided (accepted, rejected or failed, earlier runs'
    included; a size: a preflight's stand-in expert rejects every fact, and without a bound the stage
    would ask it about every image of the archives). The stage stops there; the rest stay undecided
    (a rerun with a larger bound resumes), and ``files.stopped`` says why (None when the stage ran
    out of candidates or reached ``limit``).

    Raises:
        ValueError: ``max_fact_share`` outside (0, 1], or given without ``limit``; ``max_candidates`` < 1.
    """
    if max_fact_share is not None and (limit is None or not 0 < max_fact_share <= 1):
        raise ValueError("max_fact_share must be in (0, 1] and needs a limit")
    if max_candidates is not None and max_candidates < 1:
        raise ValueError(f"max_candidates must be >= 1, got {max_candidates}")
    out = Path(out_dir)
    files = StageFiles(out, "seeds", Seed)
    files.stopped = None
    done = files.done_ids()
    kept = files.accepted.read()
    quota = math.ceil(max_fact_share * limit) if max_fact_share is not None and limit is not None else None
    tally = _SeedTally(files, done, {s.id for s in kept}, Counter(s.fact.answer for s in kept), quota, limit,
                       max_candidates)
    image_dir = out / "images"
    as_of = as_of or dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()
    for art in sorted(graph.articles.values(), key=lambda a: a.url):
        if tally.full() or tally.out_of_candidates():
            break
        cands = [im for im in art.images if im.position <= max_images_per_page]
        if not cands:
            continue
        ids = {im.url: "seed_" + hashlib.sha256(f"{art.url}|{im.url}".encode()).hexdigest()[:12] for im in cands}
        if all(i in done for i in ids.values()):
            tally.accepted += sum(1 for i in ids.values() if i in tally.kept_ids)  # rejected ones do not count
            tally.decided += len(ids)
            continue
        try:
            page = await web.fetch(art.url)
        except BackendError as e:
            for im in cands:
                if ids[im.url] not in done:
                    files.rejected.append(Rejection(id=ids[im.url], stage="seeds", reason="page_unreachable",
                                                    detail=str(e)))
            tally.decided += len(ids)
            continue
        await _decide_page(tally, art, cands, ids, page, web=web, image_dir=image_dir, as_of=as_of,
                           fact_reader=fact_reader)
    return files


async def _make_seed(sid: str, art, image_url: str, by_url: dict, title: str, image_dir: Path, as_of: str,
                     backend: str, fact_reader: Any | None = None) -> Seed:
    if image_url not in by_url:
        raise SeedError("target_unreachable", f"{image_url} is not on the fetched page")
    pos, hit = by_url[image_url]
    if not hit.content:
        raise SeedError("target_unreachable", "the backend returned the image without bytes")
    fields = {"title": title, "url": image_url, "caption": hit.caption or "", "page_url": art.url,
              "definition": art.definition or ""}
    if fact_reader is not None:  # the expert reads D from the image; the reader checks leaks itself
        fact = await fact_reader.read(hit.content, title=title, position=pos, fields=fields)
        method = f"zim_article_image+expert_fact:{getattr(fact_reader, 'name', 'expert')}"
    else:
        fact = pixel_fact(hit.content)
        method = "zim_article_image+pixel_fact"
        leaks = leak_fields(fact, fields)
        if leaks:
            raise SeedError("answer_exposed_by_metadata", ", ".join(leaks))
    path, sha, w, h = save_target(hit.content, hit.mime, image_dir)
    target = TargetImage(url=image_url, page_url=art.url, page_title=title, caption=hit.caption, position=pos,
                         path=str(path), sha256=sha, width=w, height=h, mime=hit.mime or "")
    return Seed(id=sid, branch="stable", concept=title, definition=art.definition, category=art.category,
                source_page=art.url, as_of=as_of, target=target, fact=fact,
                provenance={"backend": backend, "archive": art.archive, "page_url": art.url, "image_url": image_url,
                            "method": method, "image_sha256": sha},
                labels=[OFFLINE_LABEL, fact_label(fact_source_of(fact))] if fact_reader is None
                else [fact_label(fact_source_of(fact))])


# ---------------------------------------------------------------------------------------------- event branch
def date_windows(start: str | dt.date, end: str | dt.date,
                 days: int = EVENT_WINDOW_DAYS) -> list[tuple[dt.date, dt.date]]:
    """Consecutive date windows of ``days`` days from ``start`` to ``end`` (WeAgent §4.1: 5-day
    windows, e.g. Jan 1–5, Jan 5–10: each window starts on the day the previous one ended, and an
    event dated on that shared day belongs to both). The last window is cut at ``end``. The kit reads
    "five-day intervals" as a fixed stride of ``days`` from ``start``: over :data:`PAPER_EVENT_RANGE`
    that is 42 windows, (Jan 1, Jan 6) ... (Jul 25, Jul 30), the last ending exactly on July 30.

    Raises:
        ValueError: ``end`` before ``start`` or ``days`` < 1.
    """
    s = dt.date.fromisoformat(str(start)) if not isinstance(start, dt.date) else start
    e = dt.date.fromisoformat(str(end)) if not isinstance(end, dt.date) else end
    if e < s or days < 1:
        raise ValueError(f"bad window range {s}..{e} step {days}")
    out, cur = [], s
    while cur < e:
        nxt = min(e, cur + dt.timedelta(days=days))
        out.append((cur, nxt))
        cur = nxt
    return out or [(s, e)]


EVENT_PROMPT = (
    "Find one notable {topic} event that happened between {start} and {end}. Use the tools to find an authoritative "
    "source page and an image of the event, open the page, and look at the image. Then answer with only a JSON object "
    'inside <response>: {{"concept": ..., "definition": one sentence, "category": "{topic}", "source_page": URL you '
    'opened, "event_date": "YYYY-MM-DD", "image": the registered image filename, "fact_question": a question about '
    'something visible in the image, "fact_answer": a short answer read from the image\'s pixels}}. The answer must not '
    "appear in the page title, the image URL or its caption."
)


async def collect_event_seeds(harness, topics: Sequence[str], windows: Iterable[tuple[dt.date, dt.date]],
                              out_dir: str | Path, *, as_of: str | None = None) -> StageFiles:
    """Stage 1, event branch: one harness episode per (topic, window) with the expert policy.

    The episode's final response must be the JSON object of :data:`EVENT_PROMPT`. Accepted only if:
    the image is registered in the episode (reachable through the harness), the source page was
    fetched in it, the event date lies in the window, and the answer is not in the page title,
    image URL or caption. Episodes go to ``out_dir/event_runs/episodes.jsonl`` (audit trail).

    Returns the stage files (``event_seeds*.jsonl``); rejected items carry the reason.
    """
    from kit.harness.episode import Task
    from kit.harness.runner import run_batch

    out = Path(out_dir)
    files = StageFiles(out, "event_seeds", Seed)
    done = files.done_ids()
    as_of = as_of or dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()
    tasks = []
    for topic in topics:
        for s, e in windows:
            tid = "event_" + hashlib.sha256(f"{topic}|{s}|{e}".encode()).hexdigest()[:12]
            if tid not in done:
                tasks.append(Task(id=tid, question=EVENT_PROMPT.format(topic=topic, start=s, end=e), source="event_seed",
                                  metadata={"topic": topic, "start": str(s), "end": str(e)}))
    records = await run_batch(harness, tasks, out / "event_runs", progress=False) if tasks else []
    for rec in records:
        try:
            seed = _event_seed(rec, out / "images", as_of)
        except SeedError as e:
            files.rejected.append(Rejection(id=rec.task.id, stage="event_seeds", reason=e.reason, detail=e.detail))
            continue
        files.accepted.append(seed)
    return files


def _event_seed(rec, image_dir: Path, as_of: str) -> Seed:
    if rec.status not in ("answered", "max_turns_synthesis") or not rec.final_response:
        why = rec.error or ("no final response" if rec.status in ("answered", "max_turns_synthesis") else "")
        raise SeedError("expert_no_answer", f"episode ended {rec.status}: {why}")
    text = rec.final_response
    m = re.search(r"\{.*\}", text, re.S)
    try:
        import json_repair

        obj = json_repair.loads(m.group(0)) if m else None
    except Exception:  # json_repair raises assorted errors on hopeless input
        obj = None
    if not isinstance(obj, dict):
        raise SeedError("expert_output_unparsable", text[:200])
    need = ("concept", "source_page", "event_date", "image", "fact_question", "fact_answer")
    miss = [k for k in need if not str(obj.get(k) or "").strip()]
    if miss:
        raise SeedError("incomplete_seed", f"missing {miss}")
    md = rec.task.metadata
    try:
        day = dt.date.fromisoformat(str(obj["event_date"])[:10])
    except ValueError as e:
        raise SeedError("bad_event_date", str(obj["event_date"])) from e
    if not (dt.date.fromisoformat(md["start"]) <= day <= dt.date.fromisoformat(md["end"])):
        raise SeedError("event_outside_window", f"{day} not in {md['start']}..{md['end']}")
    img = next((i for i in rec.images if obj["image"] in (i.filename, i.ref)), None)
    if img is None:
        raise SeedError("target_unreachable", f"{obj['image']} was not registered in the episode")
    src = str(obj["source_page"]).strip()
    opened = any(m.role == "tool" and m.name == "web_extract" and f"URL: {src}" in m.text() for m in rec.messages)
    if not opened and src != (img.page_url or ""):
        raise SeedError("provenance_unverified", f"source page {src} was not opened in the episode")
    answer = str(obj["fact_answer"]).strip()
    fields = {"title": img.title or "", "url": img.source_url or "", "page_url": img.page_url or ""}
    leaked = [k for k, v in fields.items() if answer.casefold() in v.casefold()]
    if leaked:
        raise SeedError("answer_exposed_by_metadata", ", ".join(leaked))
    data = (Path(rec.workspace) / img.filename).read_bytes()
    path, sha, w, h = save_target(data, img.mime, image_dir)
    target = TargetImage(url=img.source_url or "", page_url=img.page_url or src, page_title=img.title or "",
                         caption="", position=1, path=str(path), sha256=sha, width=w, height=h, mime=img.mime)
    fact = PixelFact(kind="expert_read", question=str(obj["fact_question"]), answer=answer, answers=[answer],
                     evidence={"episode": rec.id})
    return Seed(id=rec.task.id, branch="event", concept=str(obj["concept"]), definition=str(obj.get("definition", "")),
                category=str(obj.get("category", md["topic"])), source_page=src, event_date=str(day), as_of=as_of,
                target=target, fact=fact,
                provenance={"episode": rec.id, "policy": rec.policy, "backend": rec.backend, "topic": md["topic"],
                            "window": [md["start"], md["end"]], "image_tool": img.tool, "image_turn": img.turn},
                labels=[*rec.labels, fact_label("expert")])


def seed_summary(files: StageFiles) -> dict[str, Any]:
    """Counts of a seed stage (accepted, rejected by reason, failed), fact balance (``facts``: seeds
    per answer) and ``fact_sources`` (seeds per :data:`kit.data.records.FactSource`)."""
    c = files.counts()
    facts: dict[str, int] = {}
    sources: dict[str, int] = {}
    for s in files.accepted.read():
        facts[s.fact.answer] = facts.get(s.fact.answer, 0) + 1
        sources[str(s.fact_source)] = sources.get(str(s.fact_source), 0) + 1
    c["facts"] = facts
    c["fact_sources"] = sources  # expert / pixel_statistics (Seed.fact_source)
    return c

"""VisTarget-style tasks (WeAgent §5): a question paired with a held-out target image.

The agent never sees ``Task.target_image`` (the harness does not register or show it); it must find
the supporting image with its tools and cite it with ``<IMG: filename>``. Target Match compares the
cited image with the held-out target (:mod:`kit.eval.judges` image judges).

VisTarget-Bench itself is loaded with :func:`kit.eval.loaders.load_vistarget_jsonl`. For offline
runs, :func:`build_zim_vistarget` derives VisTarget-style tasks from any Kiwix ZIM archive served by
:class:`kit.web.zim.LocalZimWeb` (or any search backend): it picks article images whose caption says
more than the article title, and asks which article shows the picture with that caption. Answering
needs the picture's page (title = reference answer); the image itself is the held-out target. These
are a diagnostic of the Target Match pipeline on real data, not VisTarget-Bench.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from pathlib import Path

from kit.eval.judges import normalize_answer
from kit.eval.loaders import BenchmarkError, LoadResult, save_image_bytes
from kit.harness.episode import Task
from kit.types import BackendError, SearchBackend

DEFAULT_SEED_QUERIES = ("Ray Charles", "piano", "album", "singer", "concert", "record label", "song", "film",
                        "city", "history", "river", "football", "jazz", "soul music", "television", "award",
                        "blues", "Georgia", "orchestra", "president", "church", "university", "war", "painting")
QUESTION = ('A picture on a Wikipedia page has the caption: "{caption}". Which page shows this picture? '
            "Answer with the page title and cite the picture.")


def _specific(caption: str) -> bool:
    """A caption that names something (a capitalised word after the first): "Theatrical release
    poster" could be on any film page and would make the question ambiguous."""
    return any(w[:1].isupper() for w in caption.split()[1:])


async def build_zim_vistarget(web: SearchBackend, n: int, image_dir: str | Path, *,
                              seed_queries: Sequence[str] = DEFAULT_SEED_QUERIES, hits_per_query: int = 5,
                              min_caption_chars: int = 25) -> LoadResult:
    """Up to ``n`` VisTarget-style tasks from the backend's pages, deterministic for a given archive.

    Each task: ``question`` quotes an image caption, ``answers = [page title]``, ``target_image`` is
    the captioned image saved under ``image_dir`` (held out), no input image. Pages that fail to
    fetch and undecodable images are reported in ``problems``.

    Raises:
        BenchmarkError: the backend returned no page at all for the seed queries.
    """
    res = LoadResult("vistarget_zim", info={"builder": "build_zim_vistarget", "seed_queries": list(seed_queries),
                                            "backend": getattr(web, "name", type(web).__name__)})
    seen_pages: set[str] = set()
    seen_captions: set[str] = set()
    seen_titles: set[str] = set()
    pages = 0
    for q in seed_queries:
        try:
            hits = await web.search(q, hits_per_query)
        except BackendError as e:
            res.problem(f"search:{q}", f"BackendError: {e}")
            continue
        for h in hits:
            if len(res.tasks) >= n:
                return res
            if h.url in seen_pages:
                continue
            seen_pages.add(h.url)
            try:
                page = await web.fetch(h.url)
            except BackendError as e:
                res.problem(h.url, f"BackendError: {e}")
                continue
            pages += 1
            title = (page.title or h.title or "").strip()
            if normalize_answer(title) in seen_titles:  # the same article from another archive edition
                continue
            for im in page.images:
                cap = " ".join((im.caption or "").split())
                key = normalize_answer(cap)
                if (not im.content or len(cap) < min_caption_chars or not title or key == normalize_answer(title)
                        or key in seen_captions or not _specific(cap)):
                    continue
                try:
                    target = save_image_bytes(im.content, image_dir, "vistarget_zim")
                except BenchmarkError as e:
                    res.problem(im.image_url, str(e))
                    continue
                seen_captions.add(key)
                seen_titles.add(normalize_answer(title))
                tid = "vtzim_" + hashlib.sha256(f"{page.url}|{im.image_url}".encode()).hexdigest()[:12]
                res.tasks.append(Task(id=tid, question=QUESTION.format(caption=cap), answers=[title],
                                      target_image=str(target), source="vistarget_zim",
                                      metadata={"page_url": page.url, "image_url": im.image_url}))
                break  # one task per page keeps the set diverse
    if pages == 0 and not res.tasks:
        raise BenchmarkError("the backend returned no page for the seed queries: cannot build VisTarget-style tasks")
    return res


VERIFY_QUESTION = ('Is the picture with the caption "{caption}" shown on the Wikipedia page "{title}"? '
                   "Answer yes or no.")
_CAPTION_RE = re.compile(re.escape(QUESTION).replace(re.escape("{caption}"), "(?P<caption>.+)"), re.DOTALL)


def verification_tasks(tasks: Sequence[Task]) -> list[Task]:
    """Yes/no claim checks derived from :func:`build_zim_vistarget` tasks (one per task, same order).

    Task ``i`` pairs its caption with its own page title (answer ``yes``) when ``i`` is even and with
    the next task's title (answer ``no``) when odd, so the answers are balanced. A "no" label assumes
    the borrowed page does not show the same picture (not checked; a shared image would make the label
    wrong, which a pipeline check tolerates but a benchmark would not). Scored with the
    ``exact`` rule (``metadata["rule_mode"]``): a hedged "yes or no" answer is wrong. A binary answer
    gives even a barely trained policy a non-zero success rate, hence groups with mixed rewards; the
    RL smoke run uses these next to the page-title questions.

    Raises:
        ValueError: fewer than two tasks, or a task whose question is not a VisTarget-style question.
    """
    if len(tasks) < 2:
        raise ValueError("need at least two VisTarget-style tasks (a false claim borrows another task's title)")
    out = []
    for i, t in enumerate(tasks):
        m = _CAPTION_RE.fullmatch(t.question)
        if m is None or not t.answers or not normalize_answer(t.answers[0]):
            raise ValueError(f"task {t.id} is not a VisTarget-style question with a non-empty answer")
        true = i % 2 == 0
        title = t.answers[0] if true else tasks[(i + 1) % len(tasks)].answers[0]
        if not true and normalize_answer(title) == normalize_answer(t.answers[0]):
            true = True  # the borrowed title is the same page: the claim holds
        out.append(Task(id=f"{t.id}_verify", question=VERIFY_QUESTION.format(caption=m["caption"], title=title),
                        answers=["yes" if true else "no"], source="vistarget_zim_verify",
                        metadata={"rule_mode": "exact", "claimed_title": title, "page_title": t.answers[0],
                                  "from_task": t.id}))
    return out

"""Stage 3: task validation and final query synthesis (WeAgent §4.3).

Filters, each with a stable rejection reason:

* structural: ``incomplete_structure`` (missing anchor, bridge, endpoint or provenance),
  ``broken_chain`` (a hop's answer is not the next hop's subject, or the last answer is not the
  seed's page), ``cycle`` (an entity twice);
* retrieval level: ``missing_target_image`` (the image file is gone or its hash changed, or the
  endpoint page no longer shows it at its position), ``non_unique_bridge`` (a bridge sentence
  not on its page any more, or a search for the bridge subject does not return it first),
  ``answer_in_url`` / ``answer_in_metadata`` / ``answer_in_question`` (D or a bridge answer exposed);
* semantic: ``inconsistent_chain`` / ``not_image_dependent`` from the expert's review, and
  ``image_dependence`` (the pixel fact recomputed from the stored image must still give D).

Accepted tasks get the final user-facing query from the expert and keep query, answer, chain,
target image and the audit evidence of every check.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from pathlib import Path

from kit.data.expert import Expert, ExpertError, with_retries
from kit.data.linkgraph import norm_title
from kit.data.records import Chain, Failure, Rejection, Seed, StageFiles, SynthTask
from kit.data.seeds import SeedError, leak_fields, pixel_fact
from kit.types import BackendError, PolicyError, SearchBackend


class ValidationError(ValueError):
    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


def _norm(s: str) -> str:
    return " ".join(norm_title(s).split())


def modality_for(chain: Chain, share_input_image: float = 0.5) -> str:
    """Deterministic input-image / text-only assignment (WeAgent §5.1: 80 of 150 with an input image):
    input-image when the anchor has an image and the chain id hashes under ``share_input_image``."""
    if not chain.anchor_image:
        return "text_only"
    u = int(hashlib.sha256(chain.id.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return "input_image" if u < share_input_image else "text_only"


def check_structure(chain: Chain, seed: Seed) -> dict:
    """Structural checks. Raises :class:`ValidationError`; returns audit evidence."""
    if not chain.hops or not chain.anchor or not seed.target.path or not seed.provenance:
        raise ValidationError("incomplete_structure", "missing anchor, bridges, endpoint or provenance")
    if any(not (h.subject and h.answer and h.question and h.evidence and h.subject_url) for h in chain.hops):
        raise ValidationError("incomplete_structure", "a hop lacks subject, answer, question or evidence")
    if len(chain.hops) != chain.depth:
        raise ValidationError("broken_chain", f"{len(chain.hops)} hops for depth {chain.depth}")
    for a, b in zip(chain.hops, chain.hops[1:]):
        if a.answer_url != b.subject_url:
            raise ValidationError("broken_chain", f"{a.answer!r} is not followed by {b.subject!r}")
    if chain.hops[-1].answer_url != seed.source_page or chain.hops[0].subject_url != chain.anchor_url:
        raise ValidationError("broken_chain", "chain does not run from the anchor to the seed page")
    ents = [_norm(chain.hops[0].subject)] + [_norm(h.answer) for h in chain.hops]
    if len(set(ents)) != len(ents):
        raise ValidationError("cycle", f"entities repeat: {ents}")
    return {"entities": ents}


async def check_retrieval(chain: Chain, seed: Seed, web: SearchBackend, modality: str) -> dict:
    """Retrieval-level checks through the backend (so they see what the harness would).

    Raises :class:`ValidationError`; returns audit evidence (search ranks, page checks).
    """
    audit: dict = {}
    p = Path(seed.target.path)
    if not p.is_file() or hashlib.sha256(p.read_bytes()).hexdigest() != seed.target.sha256:
        raise ValidationError("missing_target_image", f"{p} missing or changed")
    try:
        page = await web.fetch(seed.source_page)
    except BackendError as e:
        raise ValidationError("missing_target_image", f"endpoint page unreachable: {e}") from e
    urls = [im.image_url for im in page.images]
    if seed.target.url not in urls or urls.index(seed.target.url) + 1 != seed.target.position:
        raise ValidationError("missing_target_image", f"target not at position {seed.target.position} of its page")
    audit["target_position_ok"] = True
    fact = seed.fact
    answers = [_norm(a) for a in fact.answers or [fact.answer]]
    # the tone/orientation vocabulary applies to pixel-statistic facts only: a caption saying "colour"
    # does not state an expert fact such as "three dancers"
    words = (lambda fields: leak_fields(fact, fields)) if fact.kind == "tone_orientation" else (lambda fields: [])
    if any(a and a in _norm(seed.target.url) for a in answers) or words({"url": seed.target.url}):
        raise ValidationError("answer_in_url", seed.target.url)
    meta = {"caption": seed.target.caption, "title": seed.target.page_title, "page_url": seed.source_page}
    if words(meta) or any(a and a in _norm(v) for a in answers for v in meta.values()):
        raise ValidationError("answer_in_metadata", str(meta))
    ranks = []
    for h in chain.hops:
        try:
            subj = await web.fetch(h.subject_url)
        except BackendError as e:
            raise ValidationError("non_unique_bridge", f"bridge page {h.subject_url} unreachable: {e}") from e
        if " ".join(h.evidence.split())[:60].casefold() not in " ".join(subj.markdown.replace("*", "").split()).casefold() \
                and h.provenance.get("method") != "llm_hop_episode":
            raise ValidationError("non_unique_bridge", f"evidence sentence not on {h.subject_url}")
        try:
            hits = await web.search(h.subject, 5)
        except BackendError as e:
            raise ValidationError("non_unique_bridge", f"search for {h.subject!r} failed: {e}") from e
        titles = [_norm(x.title) for x in hits]
        rank = titles.index(_norm(h.subject)) + 1 if _norm(h.subject) in titles else None
        if rank != 1:
            raise ValidationError("non_unique_bridge", f"searching {h.subject!r} does not return it first (rank {rank})")
        if h.subject_url not in [x.url for x in hits]:
            raise ValidationError("non_unique_bridge", f"the page carrying the bridge ({h.subject_url}) is not among "
                                                       f"the results for {h.subject!r}")
        ranks.append(rank)
    audit["bridge_search_ranks"] = ranks
    return audit


def check_question(query: str, chain: Chain, seed: Seed) -> None:
    """The final query names neither the answer nor any bridge answer (and n_0 only for text-only)."""
    q = _norm(query)
    if any(_norm(a) and _norm(a) in q for a in seed.fact.answers or [seed.fact.answer]):
        raise ValidationError("answer_in_question", "the query states the answer")
    for h in chain.hops:
        if _norm(h.answer) in q:
            raise ValidationError("answer_in_question", f"the query names bridge entity {h.answer!r}")


def check_image_dependence(seed: Seed) -> dict:
    """Recompute the pixel fact from the stored target image; it must give the same answer."""
    if seed.fact.kind != "tone_orientation":
        return {"image_dependence": "expert_read (not recomputable offline)"}
    try:
        again = pixel_fact(Path(seed.target.path).read_bytes())
    except (SeedError, OSError) as e:
        raise ValidationError("image_dependence", str(e)) from e
    if again.answer != seed.fact.answer:
        raise ValidationError("image_dependence", f"{again.answer!r} != {seed.fact.answer!r}")
    return {"image_dependence": again.evidence}


async def validate_chains(expert: Expert, chains: Sequence[Chain], seeds: dict[str, Seed], web: SearchBackend,
                          out_dir: str | Path, *, attempts: int = 3, concurrency: int = 4,
                          share_input_image: float = 0.5) -> StageFiles:
    """Stage 3 over chains: filters, expert review, query synthesis. Writes ``tasks.jsonl`` /
    ``tasks_rejected.jsonl`` / ``tasks_failed.jsonl``; skips decided ids (task id = chain id)."""
    files = StageFiles(out_dir, "tasks", SynthTask)
    done = files.done_ids()
    sem, lock = asyncio.Semaphore(max(1, concurrency)), asyncio.Lock()

    async def one(ch: Chain) -> None:
        seed = seeds.get(ch.seed_id)
        async with sem:
            try:
                if seed is None:
                    raise ValidationError("incomplete_structure", f"seed {ch.seed_id} unknown")
                modality = modality_for(ch, share_input_image)
                audit = {"structure": check_structure(ch, seed)}
                audit["retrieval"] = await check_retrieval(ch, seed, web, modality)
                audit["pixels"] = check_image_dependence(seed)
                draft = SynthTask(id=ch.id, seed_id=seed.id, chain=ch, seed=seed, query="", answer=seed.fact.answer,
                                  answers=list(seed.fact.answers or [seed.fact.answer]), modality=modality,
                                  input_images=[ch.anchor_image] if modality == "input_image" else [],
                                  labels=sorted(set(ch.labels) | set(seed.labels)))
                review = await with_retries(lambda: expert.review(draft), attempts)
                audit["review"] = review
                if not review.get("consistent", False):
                    raise ValidationError("inconsistent_chain", review.get("reason", ""))
                if not review.get("image_dependent", False):
                    raise ValidationError("not_image_dependent", review.get("reason", ""))
                query = await with_retries(lambda: expert.synthesize_query(ch, seed, modality), attempts)
                if modality == "input_image" and _norm(ch.anchor) in _norm(query):
                    # the query names the anchor: the attached image would not be needed to start
                    modality = "text_only"
                    query = await with_retries(lambda: expert.synthesize_query(ch, seed, modality), attempts)
                    draft = draft.model_copy(update={"modality": modality, "input_images": []})
                    audit["modality_fallback"] = "anchor named by a bridge sentence"
                check_question(query, ch, seed)
                task = draft.model_copy(update={"query": query, "audit": audit})
            except ValidationError as e:
                async with lock:
                    files.rejected.append(Rejection(id=ch.id, stage="tasks", reason=e.reason, detail=e.detail[:500]))
                return
            except (ExpertError, PolicyError) as e:
                async with lock:
                    files.failed.append(Failure(id=ch.id, stage="tasks", error=f"{type(e).__name__}: {e}", attempts=attempts))
                return
        async with lock:
            files.accepted.append(task)

    await asyncio.gather(*(one(c) for c in chains if c.id not in done))
    files.sort([c.id for c in chains])  # the chains' order, whichever finished first
    return files

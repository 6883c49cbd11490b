"""Stage 2: backward multi-hop expansion (WeAgent §4.2).

The controller starts from a seed's page (the endpoint n_d that holds target image C) and calls
the expert ``d`` times, each call receiving only the current node and returning one QA pair whose
answer is that node (the predecessor becomes the new current node). The result is the chain
n_0 -> ... -> n_d with ``d`` in {2, 3, 4}. Dead ends (no predecessor) are rejected with their
reason; expert failures after retries are recorded as failed; a rerun skips decided chain ids.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from kit.data.expert import Expert, ExpertError, with_retries
from kit.data.records import Chain, Failure, Rejection, Seed, StageFiles
from kit.recipes import paper_default
from kit.types import PolicyError

DEPTHS = tuple(paper_default("data.hop_depths"))  # §4.2: d ∈ {2, 3, 4} (kit/recipes/weagent_mmsearch.yaml)
AnchorImage = Callable[[str], Awaitable["tuple[str, str] | None"]]


def chain_id(seed_id: str, depth: int, variant: int = 0) -> str:
    return f"{seed_id}-d{depth}" + (f"-v{variant}" if variant else "")


async def expand_chain(expert: Expert, seed: Seed, depth: int, *, attempts: int = 3, variant: int = 0,
                       anchor_image: AnchorImage | None = None) -> Chain:
    """Expand one seed to a chain of ``depth`` hops (one expert call per hop).

    ``anchor_image(url)`` returns (local path, image URL) of a picture of the anchor article, or
    ``None`` (used for input-image tasks).

    Raises:
        ExpertError: a hop failed (dead end, or retries exhausted).
        PolicyError: the expert's endpoint failed after retries.
    """
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    node_url, node_title = seed.source_page, seed.concept
    hops = []
    avoid = {seed.source_page}
    for i in range(depth):
        key = f"{seed.id}|d{depth}|h{i}" + (f"|v{variant}" if variant else "")
        hop = await with_retries(lambda: expert.expand_hop(node_url, node_title, avoid=set(avoid), key=key),  # noqa: B023
                                 attempts)  # (the lambda is awaited within this iteration)
        hops.insert(0, hop)
        avoid.add(hop.subject_url)
        node_url, node_title = hop.subject_url, hop.subject
    img = await anchor_image(node_url) if anchor_image is not None else None
    return Chain(id=chain_id(seed.id, depth, variant), seed_id=seed.id, depth=depth, hops=hops, anchor=node_title,
                 anchor_url=node_url, anchor_image=img[0] if img else None, anchor_image_url=img[1] if img else None,
                 labels=list(getattr(expert, "labels", [])))


async def expand_seeds(expert: Expert, seeds: Sequence[Seed], out_dir: str | Path, *, depths: Sequence[int] = DEPTHS,
                       attempts: int = 3, concurrency: int = 4, variants: int = 1,
                       anchor_image: AnchorImage | None = None) -> StageFiles:
    """Stage 2 over many seeds: ``variants`` chains per (seed, depth), each variant exploring other
    predecessors (the expert gets a different key). Writes ``chains.jsonl``,
    ``chains_rejected.jsonl`` (dead ends) and ``chains_failed.jsonl`` (expert failures); skips ids
    already decided.

    Raises:
        ValueError: a depth outside 1..8.
    """
    bad = [d for d in depths if not 1 <= d <= 8]
    if bad:
        raise ValueError(f"depths must be in 1..8 (the paper uses 2, 3, 4): {bad}")
    files = StageFiles(out_dir, "chains", Chain)
    done = files.done_ids()
    sem = asyncio.Semaphore(max(1, concurrency))
    lock = asyncio.Lock()

    async def one(seed: Seed, d: int, v: int) -> None:
        cid = chain_id(seed.id, d, v)
        async with sem:
            try:
                ch = await expand_chain(expert, seed, d, attempts=attempts, variant=v, anchor_image=anchor_image)
            except ExpertError as e:
                async with lock:
                    if e.retryable:
                        files.failed.append(Failure(id=cid, stage="chains", error=f"{e.reason}: {e}", attempts=attempts))
                    else:
                        files.rejected.append(Rejection(id=cid, stage="chains", reason=e.reason, detail=str(e)))
                return
            except PolicyError as e:
                async with lock:
                    files.failed.append(Failure(id=cid, stage="chains", error=f"policy: {e}", attempts=attempts))
                return
        async with lock:
            if any(c.hops == ch.hops for c in made.get((seed.id, d), [])):
                files.rejected.append(Rejection(id=cid, stage="chains", reason="duplicate_chain",
                                                detail="same hops as another variant"))
                return
            made.setdefault((seed.id, d), []).append(ch)
            files.accepted.append(ch)

    made: dict[tuple[str, int], list[Chain]] = {}
    for c in files.accepted.read():
        made.setdefault((c.seed_id, c.depth), []).append(c)
    async def in_order(seed: Seed, d: int, vs: list[int]) -> None:
        for v in vs:  # a (seed, depth)'s variants one after another: of equal hops the lowest variant is kept
            await one(seed, d, v)

    groups: dict[tuple[str, int], tuple[Seed, int, list[int]]] = {}
    for s in seeds:
        for d in depths:
            for v in range(variants):
                if chain_id(s.id, d, v) not in done:
                    groups.setdefault((s.id, d), (s, d, []))[2].append(v)
    await asyncio.gather(*(in_order(s, d, vs) for s, d, vs in groups.values()))
    files.sort([chain_id(s.id, d, v) for s in seeds for d in depths for v in range(variants)])
    return files

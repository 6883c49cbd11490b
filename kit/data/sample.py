"""Stage 4: trajectory sampling through the harness, SFT / RL splits, held-out benchmark candidates
(WeAgent §4.4).

Benchmark candidates are held out first, at seed level (every task of a held-out seed) and then at
task level, before any split (:func:`holdout`). The remaining tasks are solved through
:class:`kit.harness.loop.Harness` by the expert policy (offline: :class:`ChainFollower`, a scripted
demonstrator that follows the latent chain with the five tools and reads the target image's pixels
from the workspace). Correct and complete trajectories form the SFT set; the RL query set stratifies
model-solved, mixed and unsolved tasks (:func:`split_outcomes`).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kit.data.linkgraph import norm_title
from kit.data.records import SynthTask, write_json
from kit.data.seeds import SeedError, fact_correct, pixel_fact
from kit.harness.episode import EpisodeRecord
from kit.harness.portable import record_line
from kit.policy.demonstrator import DemonstratorPolicy, _call
from kit.types import AssistantTurn, Message, SamplingParams, Usage

_BLANK = "___"


def _u(key: str) -> float:
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF


def holdout(tasks: Sequence[SynthTask], *, seed_fraction: float = 0.1, task_fraction: float = 0.05,
            salt: str = "holdout") -> tuple[list[SynthTask], list[SynthTask]]:
    """Split ``(train_pool, benchmark_candidates)``: all tasks of a held-out seed, then a share of the
    other tasks, by hash (stable across reruns and independent of outcomes).

    Raises:
        ValueError: fractions outside [0, 1].
    """
    if not (0 <= seed_fraction <= 1 and 0 <= task_fraction <= 1):
        raise ValueError("holdout fractions must be in [0, 1]")
    train, bench = [], []
    for t in tasks:
        if _u(f"{salt}|seed|{t.seed_id}") < seed_fraction or _u(f"{salt}|task|{t.id}") < task_fraction:
            bench.append(t)
        else:
            train.append(t)
    return train, bench


class ChainFollower(DemonstratorPolicy):
    """Offline expert: follows one task's latent chain through the harness (implements Policy).

    Turn plan: reverse image search of the input image (input-image tasks) or a web search for the
    anchor; then per bridge ``web_extract`` of the current page with the bridge sentence as goal,
    reading the blank's filler from the returned text, and a web search for it; on the last page a
    ``web_extract`` that registers its images, and a ``<response>`` that states the pixel fact of
    the picture at the task's position (read from the registered file) and cites it. Every step
    depends on what the tools return: a filler missing from the extract, or a wrong search hit,
    makes the episode fail. ``slip`` is the chance of picking a lower-ranked search hit (sampling
    diversity for RL groups; 0 = deterministic).
    """

    name = "chain-follower"

    def __init__(self, task: SynthTask, *, slip: float = 0.0, rng_seed: int = 0, token_counter=None):
        super().__init__(token_counter=token_counter)
        self.task = task
        self.slip = slip
        self.rng = random.Random(rng_seed)
        self.hop = 0  # next bridge to read
        self.state = "start"
        self.url: str | None = None
        self.alternatives: list[str] = []
        self.want = ""

    async def generate(self, messages: list[Message], tools: list[dict], sampling: SamplingParams,
                       workspace: str | None = None) -> AssistantTurn:
        text = self._next(messages, tools, workspace)
        return AssistantTurn(text=text, usage=Usage(completion_tokens=self.token_counter.count_text(text)))

    # -- helpers reading observations
    def _pick(self, obs: str, want: str) -> str | None:
        """The URL to open from a results list: the hits titled ``want`` (other editions kept as
        fallbacks in ``self.alternatives``), else the first hit; a slip picks another hit."""
        hits = re.findall(r"^\s*\d+\. (.+)\n\s+URL: (\S+)", obs, re.M)
        if not hits:
            return None
        exact = [u for t, u in hits if norm_title(t) == norm_title(want)]
        self.alternatives = exact[1:]
        if self.slip and self.rng.random() < self.slip and len(hits) > 1:
            others = [u for _, u in hits if u not in exact[:1]]
            self.alternatives = []
            return others[0] if others else hits[0][1]
        return exact[0] if exact else hits[0][1]

    @staticmethod
    def _filler(obs: str, masked: str) -> str | None:
        flat = " ".join(obs.replace("*", "").split())
        left, _, right = masked.partition(_BLANK)
        pat = re.escape(" ".join(left.split()[-6:])) + r"\s*(.{1,120}?)\s*" + re.escape(" ".join(right.split()[:4]))
        m = re.search(pat, flat)
        return m.group(1).strip(" \"'“”") if m else None

    def _answer(self, text: str) -> str:
        return f"<think>{text}</think>\n<response>I could not complete the chain: {text}</response>"

    def _next(self, messages: list[Message], tools: list[dict], workspace: str | None) -> str:
        t = self.task
        last = next((m for m in reversed(messages) if m.role == "tool"), None)
        obs = last.text() if last is not None else ""
        if self.state == "start":
            user = next(m for m in messages if m.role == "user")
            imgs = user.image_refs()
            if t.modality == "input_image" and imgs:
                self.state = "anchor_rev"
                return _call("web_search_based_on_image", {"image": imgs[0], "num": 5},
                             "Identify the subject of the attached image first.")
            self.state = "anchor_search"
            return _call("web_search", {"query": t.chain.anchor, "num": 5}, f"Find the page about {t.chain.anchor}.")
        if self.state == "anchor_rev":
            kg = re.search(r"Knowledge graph match: ([^\n—(]+)", obs)
            self.url = self._pick(obs, kg.group(1).strip() if kg else "")
            if self.url is None:
                return self._answer("the reverse image search found no page for the image.")
            return self._extract()
        if self.state == "anchor_search" or self.state == "search":
            want = t.chain.anchor if self.state == "anchor_search" else self.want
            self.url = self._pick(obs, want)
            if self.url is None:
                return self._answer(f"no search result for {want}.")
            return self._extract()
        if self.state == "extract":
            hop = t.chain.hops[self.hop]
            masked = hop.question.split('one sentence reads: "', 1)[-1].rsplit('" Which page', 1)[0]
            filler = self._filler(obs, masked)
            if not filler and self.alternatives:  # another edition of the page may carry the sentence
                self.url = self.alternatives.pop(0)
                return self._extract()
            if not filler:
                return self._answer(f"the sentence about step {self.hop + 1} is not on the page I opened.")
            self.hop += 1
            self.want = filler
            self.state = "search"
            return _call("web_search", {"query": filler, "num": 5}, f"The blank is {filler}; open its page next.")
        if self.state == "final":
            saved = re.findall(r"((?:page)_image_\d+\.\w+)", obs.split("Page images saved:", 1)[-1]) \
                if "Page images saved:" in obs else []
            k = t.seed.target.position
            if len(saved) < k or workspace is None:
                return self._answer(f"the last page has no picture number {k}.")
            fname = saved[k - 1]
            try:
                fact = pixel_fact((Path(workspace) / fname).read_bytes())
                ans = fact.answer
            except (SeedError, OSError) as e:
                return self._answer(f"I cannot tell from picture {fname}: {e}")
            return (f"<think>Picture {k} on the page is {fname}; looking at it, it is {ans}.</think>\n"
                    f"<response>{ans} <IMG: {fname}></response>")
        return self._answer("unexpected state")

    def _extract(self) -> str:
        t = self.task
        if self.hop < len(t.chain.hops):
            hop = t.chain.hops[self.hop]
            goal = hop.question.split('one sentence reads: "', 1)[-1].rsplit('" Which page', 1)[0].replace(_BLANK, " ")
            self.state = "extract"
            return _call("web_extract", {"urls": [self.url], "goal": goal}, "Read the sentence with the blank.")
        self.state = "final"
        return _call("web_extract", {"urls": [self.url], "goal": t.seed.fact.question},
                     "Open the last page and look at its pictures.")


def same_picture(a: Path, b: Path) -> bool:
    """Target-matched selection's decision: :func:`kit.images.same_picture` (the one the Target Match
    judge uses), ``False`` when a file cannot be read. The same picture in another archive edition
    or re-encoding (the registry stores WebP as PNG) still matches."""
    from kit.images import same_picture as _same

    return _same(a, b).match is True


def judge_episode(task: SynthTask, rec: EpisodeRecord) -> dict[str, Any]:
    """Outcome of one episode against the verified endpoint answer: ``correct`` (the fact is stated),
    ``target_match`` (a cited image is the target picture, :func:`same_picture`), ``complete``
    (trainable record), ``citation_mismatch`` (a cited image's page and caption name another entity than the
    answer: :func:`kit.data.normalize.trainable.citation_mismatches`; the record gets a ``citation_mismatch``
    event)."""
    by_name = {i.filename: i.sha256 for i in rec.images}
    ws = Path(rec.workspace) if rec.workspace else None
    match = any(by_name.get(c) == task.seed.target.sha256 or
                (ws is not None and c in by_name and same_picture(ws / c, Path(task.seed.target.path)))
                for c in rec.cited_images)
    correct = fact_correct(rec.final_response, task.seed.fact) if task.seed.fact.kind == "tone_orientation" else \
        any(a.casefold() in (rec.final_response or "").casefold() for a in task.answers)
    from kit.data.normalize.trainable import citation_mismatches
    from kit.harness.episode import Event
    from kit.harness.events import EventType

    mismatched = citation_mismatches(rec)  # a cited image about another entity: flagged on the record
    if mismatched and not any(e.type == EventType.CITATION_MISMATCH for e in rec.events):
        rec.events.append(Event(type=EventType.CITATION_MISMATCH, turn=rec.turns, detail={"images": mismatched}))
    return {"correct": bool(correct), "target_match": match, "complete": bool(rec.trainable),
            "citation_mismatch": bool(mismatched)}


async def sample_trajectories(tasks: Sequence[SynthTask], web, out_dir: str | Path, *, samples: int = 1,
                              slip: float = 0.25, concurrency: int = 4, config=None,
                              policy_factory: Callable[[SynthTask, int], Any] | None = None,
                              labels: Sequence[str] = (), summarizer=None) -> tuple[list[EpisodeRecord], dict[str, list[dict]]]:
    """Run ``samples`` episodes per task through the harness (resumable ``episodes.jsonl`` under
    ``out_dir``). Sample 0 of the offline follower is deterministic; later samples slip with
    probability ``slip``. ``policy_factory(task, sample)`` replaces the follower (expert endpoint).
    ``summarizer``: web_extract's (:func:`kit.harness.summarize.make_summarizer`; None: extractive).

    Returns (records, outcomes by task id: one dict per sample from :func:`judge_episode`).
    """
    from kit.harness.config import HarnessConfig
    from kit.harness.loop import Harness
    from kit.harness.runner import run_batch

    config = config or HarnessConfig()
    by_id = {t.id: t for t in tasks}

    def make(task, sample: int) -> Harness:
        st = by_id[task.id]
        pol = policy_factory(st, sample) if policy_factory else ChainFollower(
            st, slip=0.0 if sample == 0 else slip, rng_seed=int(hashlib.sha256(f"{task.id}|{sample}".encode()).hexdigest()[:8], 16))
        # the seed's fact-source label (fact:expert / fact:pixel_statistics) travels with its episodes
        fact = [x for x in st.seed.labels if x.startswith("fact:") and x not in labels]
        return Harness(pol, web, config, labels=[*labels, *fact], summarizer=summarizer)

    recs = await run_batch(make, [t.to_task() for t in tasks], out_dir, samples=samples, concurrency=concurrency,
                           progress=False)
    outcomes: dict[str, list[dict]] = {}
    for r in recs:
        outcomes.setdefault(r.task.id, []).append({"episode": r.id, **judge_episode(by_id[r.task.id], r)})
    return recs, outcomes


def sft_eligible(outcome: dict[str, Any], *, require_target_match: bool = False) -> bool:
    """Whether a :func:`judge_episode` outcome may enter the SFT set: correct and complete (WeAgent §4.4:
    "Correct and complete trajectories form the SFT set"); with ``require_target_match`` also
    target-matched (a cited image is the target picture) — a stricter kit option the paper does not state.

    Raises:
        KeyError: the outcome lacks ``correct``, ``complete`` or (when required) ``target_match``."""
    ok = bool(outcome["correct"]) and bool(outcome["complete"])
    return ok and bool(outcome["target_match"]) if require_target_match else ok


def split_outcomes(tasks: Sequence[SynthTask], records: Sequence[EpisodeRecord], outcomes: dict[str, list[dict]],
                   out_dir: str | Path, *, rl_unsolved_share: float = 0.5, require_target_match: bool = False) -> dict[str, Any]:
    """SFT = correct and complete episodes (:func:`sft_eligible`; also target-matched with
    ``require_target_match``; at most one per task, the first); RL = tasks stratified into solved /
    mixed / unsolved by the same rule, with all mixed ones and solved vs unsolved balanced so unsolved
    make about ``rl_unsolved_share`` of the rest (WeAgent §4.4). Writes ``sft_episodes.jsonl``,
    ``rl_prompts.jsonl`` and ``split_counts.json`` under ``out_dir``; returns the counts."""
    out = Path(out_dir)
    rec_by_id = {r.id: r for r in records}
    sft, strata = [], {"solved": [], "mixed": [], "unsolved": []}
    for t in tasks:
        outs = outcomes.get(t.id, [])
        if not outs:
            continue
        ok = [o for o in outs if sft_eligible(o, require_target_match=require_target_match)]
        if ok:
            sft.append(rec_by_id[ok[0]["episode"]])
        rate = len(ok) / len(outs)
        strata["solved" if rate == 1 else "unsolved" if rate == 0 else "mixed"].append((t, rate))
    n_s, n_u = len(strata["solved"]), len(strata["unsolved"])
    share = min(max(rl_unsolved_share, 0.0), 1.0)
    keep_u = min(n_u, int(round(n_s * share / (1 - share)))) if share < 1 and n_s else n_u
    keep_s = min(n_s, int(round(n_u * (1 - share) / share))) if share > 0 and n_u else n_s
    rl = strata["mixed"] + strata["solved"][:keep_s] + strata["unsolved"][:keep_u]
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "sft_episodes.jsonl", "w", encoding="utf-8") as f:
        for r in sft:
            # workspaces of the sampling run beside out (02's trajectories/): relative, so the folder can move
            f.write(record_line(r, out / "sft_episodes.jsonl", up=1) + "\n")
    with open(out / "rl_prompts.jsonl", "w", encoding="utf-8") as f:
        for t, rate in rl:
            row = t.to_task().model_dump()
            row["metadata"]["solve_rate"] = rate
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    counts = {"tasks": len(tasks), "sft": len(sft), "rl": len(rl), "require_target_match": require_target_match,
              "strata": {k: len(v) for k, v in strata.items()},
              "rl_strata": {"mixed": len(strata["mixed"]), "solved": keep_s, "unsolved": keep_u}}
    write_json(counts, out / "split_counts.json")
    return counts

"""A rule-based demonstrator that drives four of the five tools (all but ``execute_code``) like a careful
agent would (not a model).

It reads the observations in the context and follows a fixed plan: reverse image search on the user's
image (or a web search without one), a web search on the question's content words (plus a
knowledge-graph hint), ``web_extract`` on the best page with the question as goal, an image search for
the page's subject, then a final ``<response>``: the subject, the page's first whole sentence (never cut
at an abbreviation or mid-sentence) and a citation of a found image whose page or caption names the subject. A yes/no claim check ("Is the
picture with the caption "…" shown on the Wikipedia page "…"? Answer yes or no.") is answered "Yes" when
the claimed page is among the search hits for the caption, else "No". Its outputs show the harness
working on real inputs without a model; they are labelled ``scripted-demonstrator`` and are never
reported as model results. The data pipeline reuses it as its offline trajectory sampler.
"""

from __future__ import annotations

import json
import re
from typing import Any

from kit.policy.scripted import CharTokenCounter
from kit.types import AssistantTurn, Message, SamplingParams, Usage

_STOP = set("""a an the of in on at to for from by with and or is are was were be been what which who whom whose when
where why how this that these those it its as do does did shown image picture photo in the following please tell me
name can you find than then same day which one""".split())


def content_words(text: str, k: int = 8) -> str:
    """The first ``k`` non-stopword words of ``text`` (a search query built from a question)."""
    words = re.findall(r"[\w'’-]+", text)
    return " ".join([w for w in words if w.lower() not in _STOP][:k]) or text[:80]


_VERIFY_RE = re.compile(r'caption "(?P<caption>.+)" shown on the Wikipedia page "(?P<title>.+)"\? Answer yes or no\.', re.DOTALL)


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def _call(name: str, args: dict[str, Any], think: str) -> str:
    return f"<think>{think}</think>\n<tool_call>\n" + json.dumps({"name": name, "arguments": args}, ensure_ascii=False) + "\n</tool_call>"


class DemonstratorPolicy:
    """Deterministic tool-using demonstrator (see module docstring). Implements :class:`kit.types.Policy`."""

    name = "scripted-demonstrator"

    def __init__(self, token_counter=None, max_context_tokens: int | None = None):
        self.token_counter = token_counter or CharTokenCounter()
        self.max_context_tokens = max_context_tokens

    async def generate(self, messages: list[Message], tools: list[dict], sampling: SamplingParams,
                       workspace: str | None = None) -> AssistantTurn:
        text = self.next_text(messages, tools)
        return AssistantTurn(text=text, usage=Usage(completion_tokens=self.token_counter.count_text(text)))

    def next_text(self, messages: list[Message], tools: list[dict]) -> str:
        user = next(m for m in messages if m.role == "user")
        question = user.text().split("\n\nRegistered image paths:")[0]
        user_images = user.image_refs()
        observations = [m.text() for m in messages if m.role == "tool"]
        extracts = [m.text() for m in messages if m.role == "tool" and m.name == "web_extract"]
        step = sum(1 for m in messages if m.role == "assistant")
        allowed = {t["function"]["name"] for t in tools}
        kg = next((m.group(1) for o in observations for m in [re.search(r"Knowledge graph match: ([^\n—(]+)", o)] if m), None)
        urls = [u for o in observations for u in re.findall(r"URL: (\S+)", o)]
        images = [f for o in observations for f in re.findall(r"\b((?:search|page|code)_image_\d+\.\w+)", o)]
        claim = _VERIFY_RE.search(question)
        plan = []
        if claim:  # a yes/no claim check: one search on the caption, then the verdict
            plan.append(("web_search", {"query": content_words(claim["caption"]), "num": 5},
                         "Search the web for the caption."))
        elif user_images:
            plan.append(("web_search_based_on_image", {"image": user_images[0], "num": 5},
                         "First find out what the image shows with a reverse image search."))
        if not claim:
            plan.append(("web_search", {"query": (kg.strip() + " " if kg else "") + content_words(question), "num": 5},
                         "Search the web for the question's key terms."))
            if urls:
                plan.append(("web_extract", {"urls": [urls[0]], "goal": question}, "Read the most relevant page."))
            subject = kg or next((m.group(1) for o in observations for m in [re.search(r"^\s*1\. (.+)$", o, re.M)] if m),
                                 None)  # the page's subject: its picture can support the answer
            plan.append(("web_search_for_image", {"query": (subject or content_words(question, 5)).strip(), "num": 4},
                         "Look for an image that shows the answer's subject."))
        if tools and step < len(plan) and plan[step][0] in allowed:
            name, args, think = plan[step]
            return _call(name, args, think)
        if claim:
            hits = {_norm(t) for o in observations for t in re.findall(r"^\s*\d+\. (.+)$", o, re.M)}
            verdict = "Yes" if _norm(claim["title"]) in hits else "No"
            return f"<think>Check whether the claimed page is among the hits.</think>\n<response>{verdict}.</response>"
        return self._answer(question, kg, observations, extracts, images)

    @staticmethod
    def _answer(question: str, kg: str | None, observations: list[str], extracts: list[str], images: list[str]) -> str:
        """The final turn: the answer's subject, the first whole sentence of the page read about it (never
        cut: one that would be cut, or that ends at an abbreviation, is left out), and a citation of an
        image whose page or caption names that subject (none when no image does)."""
        from kit.data.normalize.trainable import answer_cut, first_sentence

        title = kg.strip() if kg else None
        if title is None:
            for o in observations:
                m = re.search(r"^\s*1\. (.+)$", o, re.M)
                if m:
                    title = m.group(1).strip()
                    break
        fact = ""
        for o in extracts:
            body = re.sub(r"^(#|\||!).*$|\*\*|\[|\]\([^)]*\)", "", o.split("\n", 2)[-1], flags=re.M).strip()
            if body and not body.startswith("Error"):
                first = " ".join(first_sentence(body).split())
                fact = first if len(first) <= MAX_FACT_CHARS and not answer_cut(first) else ""
                break
        answer = title or "I could not find enough evidence"
        lead = answer if answer[-1] in ".!?" else answer + "."
        cited = next((f for f, info in image_catalog(observations).items() if title and _names(title, info)), None)
        cite = f" <IMG: {cited}>" if cited else ""
        return (f"<think>Answer from the evidence gathered.</think>\n"
                f"<response>{lead}{(' ' + fact) if fact and _norm(fact) != _norm(lead) else ''}{cite}</response>")


#: The longest page sentence the demonstrator adds to its answer (a longer one is left out, never cut).
MAX_FACT_CHARS = 300
_SEARCH_IMAGE = re.compile(r"^\[Image \d+\] (\S+) — (.+?)(?: \([^()]*\))?\n\s+Page: (\S+)(?:\n\s+Caption: (.*))?", re.M)
_PAGE_IMAGE = re.compile(r"\b(page_image_\d+\.\w+) — ([^;\n]*)")


def image_catalog(observations: list[str]) -> dict[str, dict[str, str]]:
    """Images the observations describe: file name -> ``{"title", "page_url", "caption"}`` (image search
    entries: their page and caption; ``web_extract``'s saved page images: the page read and the caption)."""
    out: dict[str, dict[str, str]] = {}
    for o in observations:
        for m in _SEARCH_IMAGE.finditer(o):
            out.setdefault(m.group(1), {"title": m.group(2).strip(), "page_url": m.group(3), "caption": (m.group(4) or "").strip()})
        if "Page images saved:" in o:
            head = re.match(r"## (.+)\nURL: (\S+)", o)
            for m in _PAGE_IMAGE.finditer(o.split("Page images saved:", 1)[1]):
                out.setdefault(m.group(1), {"title": head.group(1).strip() if head else "",
                                            "page_url": head.group(2) if head else "", "caption": m.group(2).strip()})
    return out


def _names(entity: str, info: dict[str, str]) -> bool:
    from kit.data.normalize.trainable import image_names_entity

    return image_names_entity(entity, title=info.get("title"), caption=info.get("caption"), page_url=info.get("page_url"))

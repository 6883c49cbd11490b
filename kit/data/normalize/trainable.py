"""What a trainable record must be (issue 27, parts 2, 3 and 6), as small checks the adapters and the
demonstrator share.

* **Every observation is what the model saw.** A rebuilt observation counts only when it matches the
  trace's own hash (or, when the trace stores no hash, its length): :func:`verify_rebuilt`. A long
  observation persisted as a preview is not what a source's model read (it read the whole text):
  label ``observation_truncated``.
* **Trainable implies encodable.** A record with an image placeholder written as text fails the SFT
  encoder: the encoder's own rule (:func:`kit.train.sft_data.literal_image_placeholders`) is applied
  where ``trainable`` is decided (label ``literal_image_placeholder``).
* **Answers are whole and cited images support them**: :func:`answer_cut` (an answer ending at an
  abbreviation or mid-sentence), :func:`first_sentence` (a sentence split that knows abbreviations),
  :func:`image_names_entity` / :func:`citation_mismatches` (a cited image whose page title or caption
  names another entity than the answer).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from typing import Any

from kit.harness.events import EventType

#: The placeholder the MMSearch-R1 reproduction writes where a thumbnail is shown.
VISION_PLACEHOLDER = "<|vision_start|><|image_pad|><|vision_end|>"

#: Abbreviations after which a period does not end a sentence (lower case, without the final period).
ABBREVIATIONS = frozenset("""c ca cca approx fl b d r lit mr mrs ms dr prof st mt ft sr jr vs etc no nos vol pp p
ed eds fig figs op cf al gen gov sen rep rev capt col lt sgt inc ltd co corp bros dept est jan feb mar apr jun jul aug
sep sept oct nov dec e.g i.e u.s u.k u.s.a u.n a.d b.c a.m p.m ph.d""".split())
#: Of those, the ones that never end a text (they announce what follows: "c. 1850", "St. Paul", "lit. 'x'");
#: name suffixes ("Jr.", "Inc.") and "U.S." may end a sentence and are not on it.
NEVER_FINAL = frozenset("""c ca cca approx fl lit mr mrs ms dr prof st mt ft vs e.g i.e cf no nos vol pp fig figs op
gen gov sen rep rev capt col lt sgt""".split())
_TERMINAL = ".!?…\"'”’»)]"
_WORD_BEFORE_DOT = re.compile(r"(?:^|[\s(\[\"'“‘])([^\s(\[\"'“‘]+)\.$")


def verify_rebuilt(text: str, sha256: str | None, chars: Any) -> tuple[str | None, dict[str, Any]]:
    """Whether ``text`` is what the trace says the model read: ``("sha256", detail)`` when it matches the
    stored hash, ``("characters", detail)`` when the trace stores only a length and it matches, else
    ``(None, detail)`` (a stored hash that differs, a length that differs, or nothing to check against)."""
    got = hashlib.sha256(text.encode("utf-8")).hexdigest()
    detail = {"returned_text_sha256": sha256, "returned_text_characters": chars,
              "rendered_sha256": got, "rendered_characters": len(text)}
    if isinstance(sha256, str) and sha256:
        return ("sha256" if sha256.lower() == got else None), detail
    if isinstance(chars, int) and not isinstance(chars, bool):
        return ("characters" if chars == len(text) else None), detail
    return None, detail


def untrainable_reasons(messages: list, events: list) -> list[str]:
    """Labels that keep a normalized record out of training beyond the adapters' own events:
    ``observation_truncated`` (a persisted preview stands where the model read the whole text) and
    ``literal_image_placeholder`` (the SFT encoder's placeholder rule fails)."""
    from kit.train.sft_data import literal_image_placeholders

    out = []
    if any(e.type == EventType.RESULT_PERSISTED for e in events):
        out.append("observation_truncated")
    if literal_image_placeholders(messages):
        out.append("literal_image_placeholder")
    return out


# ------------------------------------------------------------------------------------- whole answers
def _ends_with_abbreviation(text: str, words: frozenset[str] = ABBREVIATIONS, initials: bool = True) -> bool:
    m = _WORD_BEFORE_DOT.search(text.rstrip())
    if not m:
        return False
    w = m.group(1).lower()
    return w in words or initials and ((len(w) == 1 and w.isalpha()) or bool(re.fullmatch(r"(?:[a-z]\.)+[a-z]", w)))


def first_sentence(text: str) -> str:
    """The first whole sentence of ``text``: it ends at ``.``, ``!`` or ``?`` followed by a space, never
    at an abbreviation (``c.``, ``St.``, ``U.S.``, an initial) or inside an open bracket; the whole text
    when no sentence ends in it."""
    depth = 0
    for m in re.finditer(r"[()\[\]]|[.!?](?=\s|$)", text):
        ch = m.group(0)
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth = max(0, depth - 1)
        elif depth == 0 and not (ch == "." and _ends_with_abbreviation(text[: m.end()])):
            return text[: m.end()].strip()
    return text.strip()


def answer_cut(text: str | None) -> str | None:
    """Why an answer is not whole, or ``None``: ``"abbreviation"`` (it ends at one that never ends a
    text, :data:`NEVER_FINAL`: "built c."),
    ``"open_bracket"`` (a bracket or quote left open) or ``"mid_sentence"`` (a closing sentence
    after a first one, without terminal punctuation). Citations (``<IMG: …>``) are ignored; a short
    answer without a sentence ("Ray Charles") is whole."""
    body = re.sub(r"<IMG:[^>]*>", "", text or "").strip()
    if not body:
        return None
    if _ends_with_abbreviation(body, NEVER_FINAL, initials=False):
        return "abbreviation"
    if body.count("(") > body.count(")") or body.count("[") > body.count("]") or body.count('"') % 2:
        return "open_bracket"
    if re.search(r"[.!?]\s", body) and body[-1] not in _TERMINAL:
        return "mid_sentence"
    return None


# ------------------------------------------------------------------------------------- cited images
def _norm(text: str) -> str:
    text = unicodedata.normalize("NFKC", text or "").casefold()
    return " ".join(re.sub(r"[^\w\s]", " ", text).split())


def _slug(url: str | None) -> str:
    tail = (url or "").rstrip("/").rsplit("/", 1)[-1]
    return _norm(re.sub(r"\.html?$", "", tail).replace("_", " "))


def image_names_entity(entity: str, *, title: str | None = None, caption: str | None = None,
                       page_url: str | None = None) -> bool:
    """Whether an image's page (title or URL) or caption names ``entity``: the entity is in one of them,
    or the page title is the entity written with a qualifier ("Ray (film)" for "Ray")."""
    e = _norm(entity)
    if not e:
        return False
    fields = [_norm(title or ""), _norm(caption or ""), _slug(page_url)]
    if any(e and f and re.search(rf"(?<!\w){re.escape(e)}(?!\w)", f) for f in fields):
        return True
    base = _norm(re.sub(r"\s*\([^)]*\)\s*$", "", title or ""))
    return bool(base) and base == e


def citation_mismatches(record: Any, entity: str | None = None) -> list[dict[str, Any]]:
    """Cited images of ``record`` whose page title, page URL and caption all name another entity than
    the answer. ``entity`` defaults to the answer's head (its text before the first sentence end,
    citations removed). Images the registry does not describe (no title and no page) are not judged."""
    final = re.sub(r"<IMG:[^>]*>", "", record.final_response or "").strip()
    head = entity or first_sentence(final).rstrip(".!?").strip()
    if not head:
        return []
    by_name = {i.filename: i for i in record.images} | {i.ref: i for i in record.images}
    out = []
    for c in record.cited_images:
        img = by_name.get(c)
        if img is None or not (img.title or img.page_url):
            continue
        if not image_names_entity(head, title=img.title, page_url=img.page_url or img.source_url):
            out.append({"image": c, "title": img.title, "page_url": img.page_url, "answer_entity": head})
    return out

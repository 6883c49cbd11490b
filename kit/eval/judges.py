"""Rule-based answer judge (normalization, exact match, containment).

Normalization follows the common SQuAD/MMSearch practice: lower case, strip punctuation and the
articles a/an/the, collapse whitespace. ``exact``: the normalized prediction equals a normalized
reference; ``contains``: a normalized reference occurs in the normalized prediction as whole words.
"""

from __future__ import annotations

import re
import string
import unicodedata

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans({c: " " for c in string.punctuation + "“”‘’«»、，。！？：；（）"})


def normalize_answer(s: str) -> str:
    """Lower-cased, punctuation- and article-free, whitespace-collapsed form of ``s``."""
    s = unicodedata.normalize("NFKC", s or "").lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", s).split())


def rule_match(prediction: str | None, references: list[str]) -> dict[str, bool]:
    """``{"exact": bool, "contains": bool}`` of ``prediction`` against any of ``references``.
    A missing prediction matches nothing."""
    if not prediction or not references:
        return {"exact": False, "contains": False}
    p = normalize_answer(prediction)
    refs = [normalize_answer(r) for r in references if r and normalize_answer(r)]
    exact = any(p == r for r in refs)
    contains = exact or any(re.search(r"(?:^| )" + re.escape(r) + r"(?: |$)", p) for r in refs)
    return {"exact": exact, "contains": bool(contains)}

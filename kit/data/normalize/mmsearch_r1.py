"""Adapter for MMSearch-R1 multi-round traces (``trace.rounds[]``, as in the reproduction's
``predictions_*.jsonl`` and ``case_*.json``) -> episode records with the ``MMR1_`` tool namespace.

Source grammar: each round's ``response`` holds ``<reason>…</reason>`` then one of
``<search><img></search>`` (image search on the input image), ``<text_search>q</text_search>``
or ``<answer>…</answer>``; the round's ``tool.status`` holds what the tool returned (image-search
titles; text-search summaries or snippets per page). ``trace.hard_failures`` lists tool failures
(the episode ends there): they become an error observation and a non-trainable ``error`` record.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator

from kit.data.normalize.base import (NormalizeError, canonical_call, canonical_response, store_file, text_msg,
                                     tool_schema)
from kit.harness.episode import EpisodeRecord, Task
from kit.types import ContentPart, Message

_REASON = re.compile(r"<reason>(.*?)</reason>", re.S)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)
_TEXT_SEARCH = re.compile(r"<text_search>(.*?)</text_search>", re.S)
SYSTEM = ("You answer questions about an image. You may search the web with the image "
          "(MMR1_image_search) or with text (MMR1_text_search), one call per turn, then answer.")


def read_mmsearch_r1(path: str | Path) -> Iterator[Any]:
    """Rows of a ``.jsonl`` prediction file or a single-case ``.json`` file. A line that is not JSON
    is yielded as a ``{"_unparsable": line}`` marker so the normalizer quarantines it (never skipped)."""
    p = Path(path)
    if p.suffix == ".json":
        yield json.loads(p.read_text(encoding="utf-8"))
        return
    with open(p, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as e:
                yield {"_unparsable": line[:200], "_error": str(e)}


class MMSearchR1Adapter:
    """MMSearch-R1 traces -> :class:`EpisodeRecord` (tools ``MMR1_image_search``, ``MMR1_text_search``).

    Args:
        image_dir: folder holding the traces' input images by file name (the traces store absolute
            paths from the machine that made them; ``../shared/data/benchmarks/fvqa_mmsearch_r1/images``).
        prefix: tool namespace prefix.

    ``to_episode`` raises :class:`NormalizeError` with reasons ``unparsable_json``, ``missing_trace``,
    ``missing_rounds``, ``missing_response``, ``unknown_action``, ``missing_query``, ``image_missing``,
    ``image_unreadable``.
    """

    source = "mmsearch_r1"

    def __init__(self, image_dir: str | Path, prefix: str = "MMR1_"):
        self.image_dir = Path(image_dir)
        self.prefix = prefix

    def tool_schemas(self) -> list[dict[str, Any]]:
        p = self.prefix
        return [tool_schema(f"{p}image_search", "Search the web with the input image; returns page titles.",
                            {"image": {"type": "string"}}, ["image"]),
                tool_schema(f"{p}text_search", "Search the web with a text query; returns page summaries.",
                            {"query": {"type": "string"}}, ["query"])]

    def _observation(self, rnd: dict, failure: dict | None) -> str:
        if failure is not None:
            return json.dumps({"error": failure.get("stage", "tool_failure"), "message": failure.get("error", "")},
                              ensure_ascii=False)
        st = (rnd.get("tool") or {}).get("status") or {}
        if rnd["action"] == "image_search":
            titles = st.get("titles") or []
            lines = ["Image search results:"] + [f"{i}. {t}" for i, t in enumerate(titles, 1)]
            return "\n".join(lines if titles else ["Image search results: none."])
        blocks = []
        for s in st.get("summaries") or []:
            if s.get("summary"):
                blocks.append(f"## {s.get('title', '')}\nURL: {s.get('url', '')}\n{s['summary']}")
        if not blocks:
            for d in st.get("documents") or st.get("results") or []:
                blocks.append(f"## {d.get('title', '')}\nURL: {d.get('url', '')}\n{d.get('snippet', '')}")
        return "\n\n".join(blocks) or "No results."

    def to_episode(self, row: dict[str, Any], index: int, workspace_root: Path) -> EpisodeRecord:
        if "_unparsable" in row:
            raise NormalizeError("unparsable_json", row.get("_error", ""))
        tr = row.get("trace")
        if not isinstance(tr, dict):
            raise NormalizeError("missing_trace", "no trace object")
        rounds = tr.get("rounds")
        if not isinstance(rounds, list) or not rounds:
            raise NormalizeError("missing_rounds", "trace has no rounds")
        did = str(tr.get("data_id") or f"row{index}")
        rid = f"mmr1-{index}-{did}"
        img_name = Path(str((tr.get("image") or {}).get("path") or "")).name
        if not img_name:
            raise NormalizeError("image_missing", "the trace names no input image")
        src = self.image_dir / img_name  # a missing file raises image_missing in store_file (one stat, not two)
        ws = workspace_root / rid
        user_img = store_file(src, ws, "user_image_1")
        question = str(tr.get("question") or "").strip()
        if not question:
            raise NormalizeError("missing_question", rid)
        failures = {int(f.get("round", -1)): f for f in tr.get("hard_failures") or [] if isinstance(f, dict)}
        msgs = [text_msg("system", SYSTEM),
                Message(role="user", content=[ContentPart(type="image", image=user_img.filename),
                                              ContentPart(type="text", text=question)])]
        final = None
        n_calls = 0
        for k, rnd in enumerate(rounds, 1):
            if not isinstance(rnd, dict) or not isinstance(rnd.get("response"), str) or not rnd["response"].strip():
                raise NormalizeError("missing_response", f"round {k}")
            resp = rnd["response"]
            m = _REASON.search(resp)
            think = m.group(1) if m else resp.split("<", 1)[0]
            action = rnd.get("action")
            if action == "answer":
                a = _ANSWER.search(resp)
                final = (a.group(1) if a else str(rnd.get("parsed_payload") or "")).strip()
                if not final:
                    raise NormalizeError("missing_response", f"round {k} answers nothing")
                msgs.append(text_msg("assistant", canonical_response(think, final), turn=k))
                break
            if action == "image_search":
                name, args = f"{self.prefix}image_search", {"image": user_img.filename}
            elif action == "text_search":
                q = rnd.get("query") or rnd.get("parsed_payload")
                if not q:
                    qm = _TEXT_SEARCH.search(resp)
                    q = qm.group(1).strip() if qm else None
                if not q:
                    raise NormalizeError("missing_query", f"round {k}")
                name, args = f"{self.prefix}text_search", {"query": str(q)}
            else:
                raise NormalizeError("unknown_action", f"round {k}: {action!r}")
            n_calls += 1
            msgs.append(text_msg("assistant", canonical_call(think, name, args), turn=k))
            msgs.append(text_msg("tool", self._observation(rnd, failures.get(k)), name=name, tool_call_id=f"call_{k}",
                                 turn=k))
            if k in failures:
                break
        answered = final is not None and tr.get("terminal_status", "answered") == "answered"
        fail = next(iter(failures.values()), None)
        gt = tr.get("ground_truth")
        answers = [str(gt)] + [str(c) for c in tr.get("candidate_answers") or []] if gt else []
        correct = bool(row.get("pass") or tr.get("exact_match"))
        return EpisodeRecord(
            id=rid, task=Task(id=rid, question=question, input_images=[str(src)], answers=answers, source=self.source,
                              metadata={"data_id": did, "category": tr.get("category"),
                                        "data_source": tr.get("data_source"), "correct": correct}),
            config_hash="source:mmsearch_r1", policy=str(((row.get("models") or {}).get("mmsearch") or {}).get(
                "repository", "mmsearch_r1")), backend="source:mmsearch_r1", messages=msgs, images=[user_img],
            final_response=final, status="answered" if answered else "error",
            error=None if answered else (f"{fail.get('stage')}: {fail.get('error')}" if fail else
                                         str(tr.get("terminal_status"))),
            trainable=answered, turns=len([m for m in msgs if m.role == "assistant"]), tool_calls=n_calls,
            workspace=str(ws), labels=[self.source, "correct" if correct else "incorrect"])

"""Adapter for MMSearch-R1 multi-round traces (``trace.rounds[]``, as in the reproduction's
``predictions_*.jsonl`` and ``case_*.json``) -> episode records with the ``MMR1_`` tool namespace.

Source grammar: each round's ``response`` holds ``<reason>…</reason>`` then one of
``<search><img></search>`` (image search on the input image), ``<text_search>q</text_search>``
or ``<answer>…</answer>``; the round's ``tool.status`` holds what the tool returned (image-search
titles and thumbnails; text-search summaries or snippets per page).

Faithfulness (issue 14; WeAgent §4.5, Table 5):

* **Correctness** is the kit's rule judge (``exact``: MMSearch-R1's own FVQA/InfoSeek reward) on
  the trace's own final answer against its deduplicated references (``ground_truth`` +
  ``candidate_answers``). Source flags (``pass``, ``exact_match``, ``failure_capture_pass`` …) mean
  other things (a captured failure "passes") and are kept under ``metadata["source_fields"]`` only.
  A record is ``trainable`` only when it answered, the judge says correct, and its context is what
  the model saw (no ``input_image_missing`` / ``input_image_mismatch`` / ``observation_missing`` /
  ``observation_hash_mismatch`` event).
* **The answer** is the last complete ``<answer>`` block of the answer round (the harness rule;
  event ``multiple_responses`` when there are several); rounds after it are not part of the
  episode (event ``rounds_after_answer``); a ``trace.final_answer`` that disagrees with it is an
  event ``final_answer_mismatch`` (the record keeps what the model wrote).
* **Observations** are what the model saw: a ``returned_text`` stored with the round is used
  verbatim (checked against ``returned_text_sha256``); otherwise the text is rebuilt from the
  structured status in the reproduction's own format and the record says so (event
  ``observation_reconstructed``, ``verified``: ``sha256`` / ``characters``); a rebuild that matches
  neither the trace's hash nor (without one) its length is kept for inspection, untrainable, with
  event ``observation_hash_mismatch`` (issue 27). Long text is persisted as the harness does
  (:func:`persist_observation`; the preview names no tool the source lacks) and the record is then
  untrainable (label ``observation_truncated``: the model read the whole text).
  Thumbnails shown by image search stand where the model saw them (each vision placeholder of the
  text) when found by file name in ``thumbnail_dir`` (``search_image_<n>``, with their URL);
  otherwise event ``observation_images_missing`` lists them and the record is not trainable.
* **Missing inputs are said, not hidden**: an input image absent from ``image_dir`` keeps the
  record (so every trace is judged) with event ``input_image_missing`` and label of that name; one
  whose sha256 differs from the trace's ``png_sha256`` (another picture under that file name) gets
  ``input_image_mismatch``. Neither is ever trainable.
* **Nothing invented**: a round whose tool hit a hard failure (``trace.hard_failures``) ended the
  episode before the model saw anything: the record keeps the call, gets no observation, an event
  ``tool_hard_failure``, status ``error`` and is not trainable (``round`` may be written ``2``,
  ``"2"`` or ``2.0``). A trace that ends in a ``*_hard_failure`` terminal status without naming the
  round, and any call round that stores no tool result, get no observation either: event
  ``observation_missing`` (never a "No results." made up from nothing).
* **Workspaces** are named safely from the record id (:func:`safe_workspace`): a ``data_id`` such
  as ``../../x`` stays the id, never a path.

Input shapes: the trace image as a path string, a data URL, or an object (``{"path"}``,
``{"bytes"}`` raw or base64 — line breaks allowed —, ``{"url"}``), resolved by file name in
``image_dir`` when the path is foreign; files as JSON lines, single-case JSON (one object or a list)
or concatenated cases (:func:`kit.data.normalize.files.read_json_rows`). Damaged input (truncated JSON, bad encoding,
wrong types) becomes a quarantine line with its reason, never an exception.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kit.data.normalize.base import (
    NormalizeError,
    canonical_call,
    canonical_response,
    dedupe_answers,
    judge_label,
    persist_observation,
    safe_workspace,
    store_file,
    store_image,
    text_msg,
    tool_schema,
)
from kit.data.normalize.files import read_json_rows
from kit.data.normalize.trainable import VISION_PLACEHOLDER, untrainable_reasons, verify_rebuilt
from kit.harness.episode import EpisodeRecord, Event, RegisteredImage, Task
from kit.harness.events import EventType
from kit.types import ContentPart, Message

_REASON = re.compile(r"<reason>(.*?)</reason>", re.S)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)
_TEXT_SEARCH = re.compile(r"<text_search>(.*?)</text_search>", re.S)
SYSTEM = ("You answer questions about an image. You may search the web with the image "
          "(MMR1_image_search) or with text (MMR1_text_search), one call per turn, then answer.")
RULE_MODE = "exact"  # MMSearch-R1's reward on FVQA / InfoSeek
#: Source fields kept for provenance; none of them is the record's correctness.
#: Status fields that hold a tool's results; a status with none of them stores no observation.
_RESULT_KEYS = ("titles", "summaries", "documents", "results", "local_thumbnail_paths", "thumbnail_urls")
SOURCE_FLAGS = ("pass", "status", "exact_match", "failure_capture_pass", "path_pass", "representative_pass",
                "case_type", "evaluation_semantics")


def read_mmsearch_r1(path: str | Path) -> Iterator[Any]:
    """Rows of an MMSearch-R1 trace file: JSON lines, single-case JSON (one object or a list of
    them) or pretty-printed cases one after another, whatever the suffix says (layout rules:
    :func:`kit.data.normalize.files.read_json_rows`). Never raises on content: damaged lines or
    files (truncated, nested too deeply, wrong encoding, empty) are yielded as
    ``{"_unparsable", "_reason", "_error"}`` markers that the normalizer quarantines
    (``unparsable_json`` / ``bad_encoding`` / ``empty_file``), the error naming file and line.

    Raises:
        OSError: the file cannot be opened.
    """
    return read_json_rows(path)


def _expect(value: Any, kind: type | tuple, what: str) -> Any:
    if not isinstance(value, kind):
        raise NormalizeError("bad_type", f"{what} is {type(value).__name__}")
    return value


class MMSearchR1Adapter:
    """MMSearch-R1 traces -> :class:`EpisodeRecord` (tools ``MMR1_image_search``, ``MMR1_text_search``).

    Args:
        image_dir: folder holding the traces' input images by file name (the traces store absolute
            paths from the machine that made them; ``../shared/data/benchmarks/fvqa_mmsearch_r1/images``).
        prefix: tool namespace prefix.
        thumbnail_dir: folder of the image-search thumbnails by file name (``local_thumbnail_paths``
            / ``thumbnail_urls``); ``None``: thumbnails are recorded as missing.

    ``to_episode`` raises :class:`NormalizeError` with reasons ``unparsable_json``, ``bad_encoding``,
    ``missing_trace``, ``missing_rounds``, ``missing_response``, ``missing_question``, ``bad_type``,
    ``unknown_action``, ``missing_query``, ``image_missing``, ``image_unreadable`` (and ``empty_file``
    from the reader's markers).
    """

    source = "mmsearch_r1"

    def __init__(self, image_dir: str | Path, prefix: str = "MMR1_", thumbnail_dir: str | Path | None = None):
        self.image_dir = Path(image_dir)
        self.prefix = prefix
        self.thumbnail_dir = Path(thumbnail_dir) if thumbnail_dir is not None else None

    def tool_schemas(self) -> list[dict[str, Any]]:
        p = self.prefix
        return [tool_schema(f"{p}image_search", "Search the web with the input image; returns page titles.",
                            {"image": {"type": "string"}}, ["image"]),
                tool_schema(f"{p}text_search", "Search the web with a text query; returns page summaries.",
                            {"query": {"type": "string"}}, ["query"])]

    # ---------------------------------------------------------------------------- input image
    def _input_image(self, img: Any, ws: Path) -> tuple[RegisteredImage, str, str]:
        """The trace's input image in any published shape -> (registered image, local path, source reference)."""
        if img is None or img == "" or img == {}:
            raise NormalizeError("image_missing", "the trace names no input image")
        if isinstance(img, str):
            img = {"bytes": img} if img.startswith("data:") else {"path": img}
        _expect(img, dict, "trace.image")
        raw = img.get("bytes")
        if raw is not None:
            if isinstance(raw, str):
                try:  # MIME base64 wraps lines: whitespace is not data, anything else non-base64 is refused
                    raw = base64.b64decode("".join((raw.split(",", 1)[1] if raw.startswith("data:") else raw).split()),
                                           validate=True)
                except (binascii.Error, ValueError) as e:
                    raise NormalizeError("image_unreadable", f"trace.image.bytes is not base64: {e}") from e
            _expect(raw, (bytes, bytearray), "trace.image.bytes")
            reg = store_image(bytes(raw), ws, "user_image_1")
            return reg, str(ws / reg.filename), str(img.get("path") or img.get("url") or "<bytes>")
        ref = img.get("path") or img.get("url")
        if not ref:
            raise NormalizeError("image_missing", f"trace.image has neither path, bytes nor url: {sorted(img)}")
        _expect(ref, str, "trace.image path/url")
        direct = Path(ref)
        if not ref.startswith(("http://", "https://")) and direct.is_absolute() and direct.is_file():
            return store_file(direct, ws, "user_image_1"), str(direct), ref
        name = Path(ref.split("?", 1)[0]).name
        if not name:
            raise NormalizeError("image_missing", f"no file name in {ref[:120]!r}")
        # a foreign path or a URL (not fetched: offline): the file of that name in image_dir
        src = self.image_dir / name
        return store_file(src, ws, "user_image_1"), str(src), ref

    # ---------------------------------------------------------------------------- observations
    @staticmethod
    def _render(action: str, st: dict) -> str:
        """The text the reproduction's tools returned, rebuilt from the stored status in their own format
        (``FVQACachedImageSearch``: one vision placeholder per thumbnail; ``SerperJinaTextSearch`` with
        the Qwen3 summarizer: the Serper list, a blank line, then the summaries). Whether it is what the
        model read is decided by the trace's hash or length (:func:`verify_rebuilt`), never assumed."""
        import html

        if action == "image_search":
            lines = ["[Image Search Results] Official FVQA cached Google Lens results, ranked by relevance:"]
            for i, (t, u) in enumerate(zip(st.get("titles") or [], st.get("thumbnail_urls") or []), 1):
                lines.append(f"{i}. image: {VISION_PLACEHOLDER}\ntitle: {t}\nthumbnail_url: {u}")
            return "\n".join(lines) + "\n"
        lines = ["[Serper Text Search Results] Organic results ranked by relevance:"]
        for r in st.get("results") or []:
            if isinstance(r, dict):
                lines += [f"{r.get('rank')}. {r.get('title')}", f"URL: {r.get('url')}", f"Snippet: {r.get('snippet')}"]
        text = "\n".join(lines) + "\n"
        summaries = st.get("summaries")
        if not isinstance(summaries, list):
            return text  # raw-reader mode: the page text is not stored, so this cannot match the hash
        esc = lambda x: html.escape(str(x), quote=False)  # noqa: E731
        ok = sorted((d for d in summaries if isinstance(d, dict) and not d.get("error")),
                    key=lambda d: d["rank"] if isinstance(d.get("rank"), int) else 2**31 - 1)
        out = ["[Webpage Summaries] Local Qwen3 summaries, ranked by Serper relevance."]
        for d in ok:
            out += ["", f"=== Result {d.get('rank')} ===", f"Title: {esc(d.get('title', ''))}",
                    f"URL: {esc(d.get('url', ''))}", "Summary:", esc(d.get("summary", ""))]
        if not ok:
            out += ["", "No webpage summary was available."]
        return f"{text}\n" + "\n".join(out).strip() + "\n"

    def _observation_text(self, rnd: dict, k: int, events: list[Event]) -> str | None:
        """What the model read after round ``k``'s call; ``None`` when the round stores no tool data
        (no ``tool``, or a status without any result field): nothing is rendered from nothing."""
        tool = _expect(rnd.get("tool") or {}, dict, f"round {k} tool")
        st = _expect(tool.get("status") or {}, dict, f"round {k} tool.status")
        sha, n = tool.get("returned_text_sha256"), tool.get("returned_text_characters")
        returned = tool.get("returned_text", st.get("returned_text"))
        if returned is not None and not isinstance(returned, str):
            raise NormalizeError("bad_type", f"round {k} returned_text is {type(returned).__name__}")
        if returned is None and not any(key in st for key in _RESULT_KEYS):
            return None
        if isinstance(returned, str):
            if (sha or n is not None) and not verify_rebuilt(returned, sha, n)[0]:
                events.append(Event(type=EventType.OBSERVATION_HASH_MISMATCH, turn=k, detail={
                    "returned_text_sha256": sha, "returned_text_characters": n, "stored_characters": len(returned)}))
            return returned
        text = self._render(rnd["action"], st)
        check, detail = verify_rebuilt(text, sha, n)
        events.append(Event(type=EventType.OBSERVATION_RECONSTRUCTED, turn=k, detail={
            **detail, "verified": check,
            "note": "the trace stores the tool status, not the text the model read; rebuilt from the status"}))
        if check is None:  # kept for inspection; never trained on
            events.append(Event(type=EventType.OBSERVATION_HASH_MISMATCH, turn=k, detail={
                **detail, "reconstructed": True,
                "note": "the rebuilt text matches neither the trace's hash nor its length: not what the model read"}))
        return text

    def _thumbnails(self, rnd: dict, k: int, ws: Path, n_search: int, events: list[Event],
                    name: str) -> list[RegisteredImage | None]:
        """The thumbnails image search showed, in order: registered when found by file name in
        ``thumbnail_dir``, ``None`` where missing (event ``observation_images_missing`` lists them)."""
        st = (rnd.get("tool") or {}).get("status") or {}
        paths = list(st.get("local_thumbnail_paths") or [])
        urls = [str(u) for u in st.get("thumbnail_urls") or []]
        titles = [str(t) for t in st.get("titles") or []]
        out: list[RegisteredImage | None] = []
        missing: list[dict] = []
        for i in range(max(len(paths), len(urls))):
            url = urls[i] if i < len(urls) else None
            ref = str(paths[i]) if i < len(paths) and paths[i] else url or ""
            f = self.thumbnail_dir / Path(ref.split("?", 1)[0]).name if self.thumbnail_dir and ref else None
            title = titles[i] if i < len(titles) else None
            if f is not None and f.is_file():
                reg = store_file(f, ws, f"search_image_{n_search + sum(r is not None for r in out) + 1}")
                out.append(reg.model_copy(update={"tool": name, "turn": k, "source_url": url, "title": title}))
            else:
                out.append(None)
                missing.append({"ref": ref, "url": url, "title": title})
        if missing:
            events.append(Event(type=EventType.OBSERVATION_IMAGES_MISSING, turn=k, detail={
                "tool": name, "count": len(missing), "images": missing,
                "note": "the model saw these thumbnails; the record is not trainable until they are supplied"}))
        return out

    @staticmethod
    def _tool_content(text: str, shown: list[RegisteredImage | None]) -> list[ContentPart]:
        """The observation as the model saw it: each vision placeholder of the returned text becomes the
        thumbnail it stood for (``[image not available]`` where the thumbnail is missing); thumbnails
        without a placeholder in the text follow it."""
        pieces = text.split(VISION_PLACEHOLDER)
        parts: list[ContentPart] = []
        for i, piece in enumerate(pieces):
            if i:
                reg = shown[i - 1] if i - 1 < len(shown) else None
                if reg is not None:
                    parts.append(ContentPart(type="image", image=reg.filename))
                else:
                    parts.append(ContentPart(type="text", text="[image not available]"))
            if piece:
                parts.append(ContentPart(type="text", text=piece))
        parts += [ContentPart(type="image", image=r.filename) for r in shown[len(pieces) - 1:] if r is not None]
        return parts or [ContentPart(type="text", text="")]

    # ---------------------------------------------------------------------------- episode
    def to_episode(self, row: dict[str, Any], index: int, workspace_root: Path) -> EpisodeRecord:
        tr, rounds, did, rid, ws, question = _parse_trace(row, index, workspace_root)
        failures, unplaced = _hard_failures(tr)
        terminal = tr.get("terminal_status", "answered")
        answers = dedupe_answers(tr.get("ground_truth"), tr.get("candidate_answers"))
        events: list[Event] = []
        user_img, img_path, img_ref = self._user_image(tr, ws, events)
        user_parts = [ContentPart(type="image", image=user_img.filename)] if user_img else []
        msgs = [text_msg("system", SYSTEM),
                Message(role="user", content=user_parts + [ContentPart(type="text", text=question)])]
        images = [user_img] if user_img else []
        final, n_calls, fail = self._play_rounds(rounds, ws, user_img, msgs, images, events, failures, unplaced, terminal)
        _check_final_answer(tr.get("final_answer"), final, msgs, events)
        if fail is None and failures:
            fail = next(iter(failures.values()))
        if fail is None and unplaced:
            fail = unplaced[0]
        answered = final is not None and fail is None and terminal == "answered"
        correct, judge = judge_label(final, answers, RULE_MODE)
        missing_imgs = sum(e.detail.get("count", 0) for e in events if e.type == EventType.OBSERVATION_IMAGES_MISSING)
        labels, untrainable = self._labels(correct, user_img is not None, msgs, events)
        if answered:
            error = None
        elif fail is not None:
            error = f"{fail.get('stage')}: {fail.get('error')}"
        else:
            error = str(terminal or "the trace ends without an answer")
        return EpisodeRecord(
            id=rid, task=Task(id=rid, question=question, input_images=[img_path] if img_path else [], answers=answers, source=self.source,
                              metadata={"data_id": did, "category": tr.get("category"),
                                        "data_source": tr.get("data_source"), "rule_mode": RULE_MODE, "image_ref": img_ref,
                                        "correct": correct, "judge": judge, "missing_images": missing_imgs,
                                        "source_fields": {k: v for k, v in {**row, **tr}.items()
                                                          if k in SOURCE_FLAGS}}),
            config_hash="source:mmsearch_r1", policy=str(((row.get("models") or {}).get("mmsearch") or {}).get(
                "repository", "mmsearch_r1")), backend="source:mmsearch_r1", messages=msgs, images=images,
            final_response=final, events=events, status="answered" if answered else "error", error=error,
            trainable=answered and correct is True and user_img is not None and not untrainable,
            turns=len([m for m in msgs if m.role == "assistant"]), tool_calls=n_calls, workspace=str(ws), labels=labels)

    def _user_image(self, tr: dict, ws: Path, events: list[Event]) -> tuple[RegisteredImage | None, str | None, str]:
        """The input image, or ``None`` with event ``input_image_missing``; event ``input_image_mismatch`` on a hash
        that differs from the trace's ``png_sha256``."""
        user_img: RegisteredImage | None
        img_path: str | None
        try:
            user_img, img_path, img_ref = self._input_image(tr.get("image"), ws)
        except NormalizeError as e:
            if e.reason != "image_missing":
                raise
            # the model saw an image we do not have: keep the trace, say so, never train on it
            user_img, img_path = None, None
            img_ref = str((tr.get("image") or {}).get("path") if isinstance(tr.get("image"), dict) else tr.get("image"))
            events.append(Event(type=EventType.INPUT_IMAGE_MISSING, turn=0, detail={
                "ref": img_ref, "reason": e.detail[:300],
                **({k: tr["image"].get(k) for k in ("png_sha256", "width", "height")}
                   if isinstance(tr.get("image"), dict) else {})}))
        expected = tr["image"].get("png_sha256") if isinstance(tr.get("image"), dict) else None
        if user_img is not None and isinstance(expected, str) and expected.lower() != user_img.sha256:
            # a different picture under the file name the trace names: not what the model saw
            events.append(Event(type=EventType.INPUT_IMAGE_MISMATCH, turn=0, detail={
                "ref": img_ref, "expected_sha256": expected, "found_sha256": user_img.sha256}))
        return user_img, img_path, img_ref

    def _play_rounds(self, rounds: list, ws: Path, user_img: RegisteredImage | None, msgs: list[Message],
                     images: list[RegisteredImage], events: list[Event], failures: dict[int, dict], unplaced: list[dict],
                     terminal: Any) -> tuple[str | None, int, dict | None]:
        """The rounds up to the answer or the failure that ended the episode, appended to ``msgs`` / ``images``;
        returns (final answer, calls made, the failure that ended it)."""
        hard_end = isinstance(terminal, str) and terminal.endswith("hard_failure")
        final, n_calls, fail = None, 0, None
        for k, rnd in enumerate(rounds, 1):
            if not isinstance(rnd, dict) or not isinstance(rnd.get("response"), str) or not rnd["response"].strip():
                raise NormalizeError("missing_response", f"round {k}")
            resp = rnd["response"]
            m = _REASON.search(resp)
            think = m.group(1) if m else resp.split("<", 1)[0]
            action = rnd.get("action")
            if action == "answer":
                final = self._answer_round(rnd, k, rounds, think, msgs, events)
                break
            name, args = self._call(rnd, k, action, user_img)
            msgs.append(text_msg("assistant", canonical_call(think, name, args), turn=k))
            n_calls += 1  # executed, whether or not it failed (as the harness counts)
            if k in failures:  # the tool failed and the episode ended: the model saw no observation
                fail = failures[k]
                events.append(Event(type=EventType.TOOL_HARD_FAILURE, turn=k, detail={
                    "tool": name, "stage": fail.get("stage"), "error": fail.get("error"),
                    "note": "no observation: the episode ended at this call"}))
                break
            if k == len(rounds) and (hard_end or unplaced) and not failures.keys() & set(range(1, k + 1)):
                # the trace ended in a hard failure without naming its round: its last call returned
                # nothing the trace records as seen; never render one from the stored status
                events.append(Event(type=EventType.OBSERVATION_MISSING, turn=k, detail={
                    "tool": name, "terminal_status": terminal, "hard_failures": unplaced[:3],
                    "note": "the episode ended in a hard failure whose round the trace does not name"}))
                break
            self._observe(rnd, k, action, name, ws, msgs, images, events)
        return final, n_calls, fail

    def _answer_round(self, rnd: dict, k: int, rounds: list, think: str, msgs: list[Message],
                      events: list[Event]) -> str:
        """The answer round ``k``: its answer message, and events for tool data on it and for rounds after it."""
        final = self._answer(rnd, k, events)
        if rnd.get("tool"):  # a result stored on the answer round: no call asked for it, nobody read it
            events.append(Event(type=EventType.OBSERVATION_WITHOUT_CALL, turn=k, detail={
                "note": "the answer round stores tool data; it is not part of the episode"}))
        msgs.append(text_msg("assistant", canonical_response(think, final), turn=k))
        if k < len(rounds):  # the episode ended at the answer: later rounds are not part of it
            events.append(Event(type=EventType.ROUNDS_AFTER_ANSWER, turn=k, detail={
                "count": len(rounds) - k,
                "actions": [r.get("action") if isinstance(r, dict) else None for r in rounds[k:]]}))
        return final

    def _call(self, rnd: dict, k: int, action: Any, user_img: RegisteredImage | None) -> tuple[str, dict[str, str]]:
        """The namespaced tool call of search round ``k``: (tool name, arguments)."""
        if action == "image_search":
            return f"{self.prefix}image_search", {"image": user_img.filename if user_img else "user_image_1"}
        if action == "text_search":
            q = rnd.get("query") or rnd.get("parsed_payload")
            if not q:
                qm = _TEXT_SEARCH.search(rnd["response"])
                q = qm.group(1).strip() if qm else None
            if not q:
                raise NormalizeError("missing_query", f"round {k}")
            return f"{self.prefix}text_search", {"query": str(q)}
        raise NormalizeError("unknown_action", f"round {k}: {action!r}")

    def _observe(self, rnd: dict, k: int, action: Any, name: str, ws: Path, msgs: list[Message],
                 images: list[RegisteredImage], events: list[Event]) -> None:
        """Round ``k``'s tool message as the model saw it (long text persisted, thumbnails in place), or an event
        ``observation_missing`` when the round stores no result."""
        text = self._observation_text(rnd, k, events)
        if text is None:
            events.append(Event(type=EventType.OBSERVATION_MISSING, turn=k, detail={
                "tool": name, "note": "the round stores no tool result: what the model read is unknown"}))
            return
        text, persisted = persist_observation(text, ws, k, name)  # no tool of this source reads files
        if persisted:
            events.append(Event(type=EventType.RESULT_PERSISTED, turn=k, detail=persisted))
        shown = (self._thumbnails(rnd, k, ws, sum(r.kind == "search_image" for r in images), events, name)
                 if action == "image_search" else [])
        images += [r for r in shown if r is not None]
        msgs.append(Message(role="tool", name=name, tool_call_id=f"call_{k}", turn=k,
                            content=self._tool_content(text, shown)))

    def _labels(self, correct: bool | None, has_image: bool, msgs: list[Message],
                events: list[Event]) -> tuple[list[str], list[str]]:
        """The record's labels and the reasons it is not trainable (a context that is not what the model saw)."""
        labels = [self.source, {True: "correct", False: "incorrect", None: "unjudged"}[correct]]
        if not has_image:
            labels.append("input_image_missing")
        kinds = {e.type for e in events}
        # a record whose context is not what the model saw is kept and judged, never trained on
        untrainable: list[str] = [t for t in (EventType.INPUT_IMAGE_MISMATCH, EventType.OBSERVATION_MISSING,
                                              EventType.OBSERVATION_HASH_MISMATCH, EventType.OBSERVATION_IMAGES_MISSING)
                                  if t in kinds]
        untrainable += untrainable_reasons(msgs, events)
        labels += untrainable
        if EventType.OBSERVATION_RECONSTRUCTED in kinds:
            labels.append("observation_reconstructed")
        return labels, untrainable

    @staticmethod
    def _answer(rnd: dict, k: int, events: list[Event]) -> str:
        """The answer of an answer round: the last complete ``<answer>`` block (the harness rule,
        event ``multiple_responses`` when there are several), else ``parsed_payload`` (a string,
        a number, or a one-item list of one).

        Raises:
            NormalizeError: ``missing_response`` (nothing answered), ``bad_type`` (another payload).
        """
        tags = _ANSWER.findall(rnd["response"])
        if tags:
            if len(tags) > 1:
                events.append(Event(type=EventType.MULTIPLE_RESPONSES, turn=k, detail={
                    "count": len(tags), "kept": "last", "dropped": [t.strip()[:200] for t in tags[:-1]]}))
            final = tags[-1].strip()
        else:
            payload = rnd.get("parsed_payload")
            if isinstance(payload, list) and len(payload) == 1:
                payload = payload[0]
            if payload is not None and (isinstance(payload, bool) or not isinstance(payload, (str, int, float))):
                raise NormalizeError("bad_type", f"round {k} parsed_payload is {type(payload).__name__}: {str(payload)[:80]}")
            final = str(payload if payload is not None else "").strip()
        if not final:
            raise NormalizeError("missing_response", f"round {k} answers nothing")
        return final


def _round_no(value: Any) -> int | None:
    """A round number as releases write it (``2``, ``"2"``, ``2.0``); ``None`` when absent or not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _hard_failures(tr: dict) -> tuple[dict[int, dict], list[dict]]:
    """``trace.hard_failures`` -> ({round: failure}, failures that name no usable round).

    Raises:
        NormalizeError: (``bad_type``) not a list of objects.
    """
    placed: dict[int, dict] = {}
    unplaced: list[dict] = []
    for f in _expect(tr.get("hard_failures") or [], list, "trace.hard_failures"):
        _expect(f, dict, "trace.hard_failures item")
        k = _round_no(f.get("round"))
        if k is None:
            unplaced.append(f)
        else:
            placed.setdefault(k, f)
    return placed, unplaced


def _parse_trace(row: dict[str, Any], index: int, workspace_root: Path) -> tuple[dict, list, str, str, Path, str]:
    """A row's trace, rounds, data id, record id, workspace and question.

    Raises:
        NormalizeError: a reader's marker, no trace or rounds, a question missing or not a string.
    """
    if "_unparsable" in row:
        raise NormalizeError(row.get("_reason") or "unparsable_json", row.get("_error", ""))
    tr = row.get("trace")
    if not isinstance(tr, dict):
        raise NormalizeError("missing_trace", "no trace object")
    rounds = tr.get("rounds")
    if not isinstance(rounds, list) or not rounds:
        raise NormalizeError("missing_rounds", "trace has no rounds")
    did = str(tr.get("data_id") or f"row{index}")
    rid = f"mmr1-{index}-{did}"
    ws = safe_workspace(workspace_root, rid)  # the id comes from the data: never a path
    question = tr.get("question")
    if question is not None and not isinstance(question, str):
        raise NormalizeError("bad_type", f"trace.question is {type(question).__name__}")
    question = (question or "").strip()
    if not question:
        raise NormalizeError("missing_question", rid)
    return tr, rounds, did, rid, ws, question


def _check_final_answer(fa: Any, final: str | None, msgs: list[Message], events: list[Event]) -> None:
    """Event ``final_answer_mismatch`` when the trace's ``final_answer`` disagrees with what the model wrote."""
    if final is not None and isinstance(fa, (str, int, float)) and not isinstance(fa, bool) \
            and " ".join(str(fa).split()) != " ".join(final.split()):
        # the source's summary field disagrees with what the model wrote: the record keeps the latter
        events.append(Event(type=EventType.FINAL_ANSWER_MISMATCH, turn=len(msgs) and msgs[-1].turn or 0, detail={
            "final_answer": str(fa)[:300], "round_answer": final[:300]}))

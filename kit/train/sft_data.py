"""Episode records → model inputs with the assistant-only loss mask (WeAgent §6.1, Appendix A).

POINTS-Seeker §3.2.3 trains with ``L = -Σ_t m_t log p(y_t | y_<t)`` where ``m_t = 1`` exactly on the
tokens the agent generated. :class:`SFTEncoder` renders a record through the target model's own chat
template and processor and sets the mask to 1 on each assistant turn (its ``<think>``, tool calls,
``<response>``/``<answer>`` text and the closing ``<|im_end|>``) and 0 on the system prompt (with the
tool schemas), user prompts, tool observations, harness interventions (``Message.intervention``) and
the ``<|im_start|>assistant\\n`` header.

How the spans are found: templates with ``{% generation %}`` blocks (the kit's
:data:`kit.models.qwen_tokenizer.QWEN_VL_CHAT_TEMPLATE`, carried by the tiny checkpoints) give
character spans directly; other templates (stock Qwen releases) are rendered prefix by prefix and the
span of assistant turn *i* is what turn *i* appends after the generation prompt. Character spans
become token masks through the tokenizer's offset mapping on the text with every ``<|image_pad|>``
expanded to its image's feature count (``prod(image_grid_thw) / merge²``), so the result is
identical to what the processor feeds the model.

Filters (WeAgent §4.5 SFT normalization, ``sft_data`` of kit/recipes/weagent_mmsearch.yaml): a trajectory
with any assistant response over 4,096 tokens, or over 48K (49,152) tokens in all, is dropped;
:meth:`SFTEncoder.encode_many` counts every skip by reason.
"""

from __future__ import annotations

import bisect
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.harness.episode import EpisodeRecord
from kit.harness.neutralize import neutralize_control_tokens
from kit.policy.tokens import chat_entry
from kit.recipes import paper_default
from kit.types import Message

IMAGE_PAD = "<|image_pad|>"
MAX_RESPONSE_TOKENS = int(paper_default("sft_data.max_response_tokens"))  # WeAgent §4.5: drop a longer response
MAX_TRAJECTORY_TOKENS = int(paper_default("sft_data.max_trajectory_tokens"))  # ... and trajectories over 48K tokens
IGNORE_INDEX = -100
_GENERATION_RE = re.compile(r"\{%-?\s*generation\s*-?%\}")


class SFTDataError(ValueError):
    """A record cannot become a training example; ``reason`` is the skip-count key."""

    reason = "invalid"

    def __init__(self, record_id: str, message: str):
        super().__init__(f"record {record_id}: {message}")
        self.record_id = record_id


class NoAssistantTurn(SFTDataError):
    reason = "no_assistant_turn"


class ImageLoadError(SFTDataError):
    reason = "image_load_failed"


class ResponseTooLong(SFTDataError):
    reason = "response_over_limit"


class TrajectoryTooLong(SFTDataError):
    reason = "trajectory_over_limit"


class TemplateError(SFTDataError):
    """The chat template cannot render this record (or cannot render tools at all)."""

    reason = "template_error"


@dataclass
class SFTExample:
    """One encoded trajectory (batch dimension absent).

    Shapes: ``input_ids``, ``loss_mask``, ``mm_token_type_ids``: ``[L]``; ``pixel_values``:
    ``[P, C·T·p·p]`` (``None`` without images); ``image_grid_thw``: ``[n_images, 3]``.
    ``response_tokens`` is the masked token count of each trained assistant turn;
    ``control_tokens_neutralized`` the chat-control strings broken in user and tool text
    (:func:`data_view`).
    """

    id: str
    input_ids: Any
    loss_mask: Any
    mm_token_type_ids: Any
    pixel_values: Any = None
    image_grid_thw: Any = None
    response_tokens: list[int] = field(default_factory=list)
    control_tokens_neutralized: int = 0

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def num_loss_tokens(self) -> int:
        return int(self.loss_mask.sum())


@dataclass
class EncodeReport:
    """Outcome of :meth:`SFTEncoder.encode_many`: kept count and skips by reason, with messages."""

    kept: int = 0
    skipped: Counter = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"kept": self.kept, "skipped": dict(self.skipped), "errors": self.errors[:20]}


def default_tool_schemas() -> list[dict[str, Any]]:
    """The harness's tool schemas (Table 4), as the harness passes them to the policy."""
    from kit.harness.tools import tool_specs

    return [s.schema() for s in tool_specs().values()]


def data_view(messages: list[Message]) -> tuple[list[Message], int]:
    """``messages`` with the text of user prompts and tool observations neutralized
    (:func:`kit.harness.neutralize.neutralize_control_tokens`), and the number of strings broken.

    Task text and observations are data: a record from any source (harness, normalized public
    traces) whose question quotes ``<|im_start|>system`` or ``<|image_pad|>`` must not become a chat
    turn or an image placeholder in training. Left as written: system prompts and harness
    interventions (the kit's own text, rendered the same way at inference) and assistant turns (the
    model's own ``<think>`` and ``<tool_call>`` tokens are what it is trained to emit). Idempotent, so
    harness records, already neutralized, are unchanged.
    """
    out, total = [], 0
    for m in messages:
        if m.role == "tool" or (m.role == "user" and not m.intervention):
            parts = []
            for p in m.content:
                if p.type == "text" and p.text:
                    text, n = neutralize_control_tokens(p.text)
                    if n:
                        total += n
                        p = p.model_copy(update={"text": text})
                parts.append(p)
            m = m.model_copy(update={"content": parts})
        out.append(m)
    return out, total


#: Image placeholders that are never text in a trained example: the processor's vision tokens (the encoder
#: counts ``<|image_pad|>`` against the record's images; user and tool text is neutralized by :func:`data_view`)
#: and, in a trained (assistant) turn, the releases' ``<image>`` slot (ms-swift / LLaVA layouts expand it).
VISION_TOKENS = (IMAGE_PAD, "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|video_pad|>")
TRAINED_TURN_PLACEHOLDERS = ("<image>",)


def literal_image_placeholders(messages: list[Message]) -> list[tuple[int, str]]:
    """The encoder's placeholder rule without a processor: ``(message index, placeholder)`` for each image
    placeholder still written as text once :func:`data_view` has neutralized user and tool text. Any hit
    makes :meth:`SFTEncoder.encode_messages` raise :class:`TemplateError`, so a record with one is not
    trainable (``kit.data.normalize`` applies this where it decides ``trainable``)."""
    out = []
    for i, m in enumerate(data_view(messages)[0]):
        text = m.text()
        trained = m.role == "assistant" and not m.intervention
        for tok in VISION_TOKENS + (TRAINED_TURN_PLACEHOLDERS if trained else ()):
            if tok in text:
                out.append((i, tok))
    return out


def record_images(record: EpisodeRecord, workspace: str | Path | None = None) -> list[Path]:
    """Files of the record's image parts in message order, resolved through its evidence registry.

    Raises:
        ImageLoadError: no workspace, an image part naming no registered image, or a missing file.
    """
    from kit.harness.registry import EvidenceRegistry

    refs = [r for m in record.messages for r in m.image_refs()]
    if not refs:
        return []
    ws = workspace if workspace is not None else record.workspace
    if ws is None:
        raise ImageLoadError(record.id, "has image parts but no workspace")
    root = Path(ws)
    if not root.is_dir():
        raise ImageLoadError(record.id, f"workspace {root} does not exist")
    known = {e.filename for e in record.images} | {e.ref for e in record.images}
    reg = EvidenceRegistry.from_images(root, record.images) if record.images else None
    out = []
    for r in refs:
        if r in known and reg is not None:
            path = reg.path(reg.resolve(r).filename)
        else:  # user images may be unregistered in hand-made records: must still lie inside the workspace
            path = (root / r).resolve()
            if Path(r).is_absolute() or not path.is_relative_to(root.resolve()):
                raise ImageLoadError(record.id, f"image {r!r} is not inside the workspace")
        if not Path(path).is_file():
            raise ImageLoadError(record.id, f"image {r!r} not found in {root}")
        out.append(Path(path))
    return out


class SFTEncoder:
    """Encode episode records for one model (its tokenizer, image processor and chat template).

    Args:
        processor: the model's processor (:func:`kit.models.processor.load_image_only_processor`);
            needs ``tokenizer`` (fast, with offsets) and ``image_processor``.
        tools: tool schemas rendered into the system turn (default: the harness's Table 4 tools;
            ``[]`` renders none).
        chat_template: template to use (default: the tokenizer's; a template that ignores tools is
            replaced by the kit's Qwen2.5-style one only if ``replace_toolless_template``).
        max_response_tokens, max_trajectory_tokens: the Appendix A filters.
        replace_toolless_template: use :data:`QWEN_VL_CHAT_TEMPLATE` when the model's template drops
            tools (stock Qwen2-VL); False raises :class:`TemplateError` instead.

    Raises:
        TemplateError: no chat template, or a template that cannot render tools (when tools are
            given and ``replace_toolless_template`` is False).
    """

    def __init__(self, processor, tools: list[dict[str, Any]] | None = None, chat_template: str | None = None, *,
                 max_response_tokens: int = MAX_RESPONSE_TOKENS, max_trajectory_tokens: int = MAX_TRAJECTORY_TOKENS,
                 replace_toolless_template: bool = True):
        self.processor = processor
        self.tokenizer = getattr(processor, "tokenizer", processor)
        self.image_processor = processor.image_processor
        self.tools = default_tool_schemas() if tools is None else list(tools)
        self.max_response_tokens = int(max_response_tokens)
        self.max_trajectory_tokens = int(max_trajectory_tokens)
        template = chat_template or getattr(self.tokenizer, "chat_template", None)
        if not template:
            raise TemplateError("-", "the tokenizer has no chat template")
        self.template = template
        if self.tools and not self._renders_tools(template):
            if not replace_toolless_template:
                raise TemplateError("-", "the chat template does not render tools (stock Qwen2-VL drops them)")
            from kit.models.qwen_tokenizer import QWEN_VL_CHAT_TEMPLATE

            self.template = QWEN_VL_CHAT_TEMPLATE
        self.has_generation_blocks = bool(_GENERATION_RE.search(self.template))
        self.image_token_id = int(self.tokenizer.convert_tokens_to_ids(IMAGE_PAD))
        self.merge = int(self.image_processor.merge_size)
        self.pad_token_id = int(self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None
                                else self.tokenizer.eos_token_id)

    # ------------------------------------------------------------------ rendering
    def _render(self, chat, *, add_generation_prompt=False, spans=False):
        from transformers.utils.chat_template_utils import render_jinja_template

        rendered, gen = render_jinja_template(
            conversations=[chat], tools=self.tools or None, chat_template=self.template,
            return_assistant_tokens_mask=spans, add_generation_prompt=add_generation_prompt,
            **self.tokenizer.special_tokens_map)
        return rendered[0], (gen[0] if gen else [])

    def _renders_tools(self, template: str) -> bool:
        """True when rendering a probe with tools differs from rendering it without."""
        from transformers.utils.chat_template_utils import render_jinja_template

        probe = [[{"role": "user", "content": [{"type": "text", "text": "x"}]}]]
        kw = dict(conversations=probe, chat_template=template, **self.tokenizer.special_tokens_map)
        try:
            with_tools = render_jinja_template(tools=self.tools, **kw)[0][0]
            without = render_jinja_template(tools=None, **kw)[0][0]
        except Exception as e:  # jinja errors while rendering the tool block
            raise TemplateError("-", f"chat template cannot render tools: {type(e).__name__}: {e}") from e
        return with_tools != without

    def render(self, messages: list[Message], record_id: str = "-") -> tuple[str, list[tuple[int, int]]]:
        """Render ``messages`` and return ``(text, spans)``: the full chat text (one
        ``<|image_pad|>`` per image) and the character spans ``[start, end)`` that get loss mask 1,
        one per trained assistant turn (interventions excluded). User and tool text is rendered
        through :func:`data_view`.

        Raises:
            NoAssistantTurn: no non-intervention assistant message.
            TemplateError: the template fails, or earlier turns render differently once turns are
                appended (no consistent assistant span exists).
        """
        trained = [i for i, m in enumerate(messages) if m.role == "assistant" and not m.intervention]
        if not trained:
            raise NoAssistantTurn(record_id, "has no assistant turn to train on")
        chat = [chat_entry(m) for m in data_view(messages)[0]]
        try:
            if self.has_generation_blocks:
                text, gen = self._render(chat, spans=True)
                asst = [i for i, m in enumerate(messages) if m.role == "assistant"]
                if len(gen) != len(asst):
                    raise TemplateError(record_id, f"template marked {len(gen)} generation blocks for {len(asst)} "
                                                   "assistant turns")
                by_msg = dict(zip(asst, gen))
                return text, [tuple(by_msg[i]) for i in trained]
            text, _ = self._render(chat)
            spans = []
            for i in trained:
                start_text, _ = self._render(chat[:i], add_generation_prompt=True)
                end_text, _ = self._render(chat[: i + 1])
                if not text.startswith(end_text) or not end_text.startswith(start_text):
                    raise TemplateError(record_id, f"template renders turn {i} differently as turns are appended; "
                                                   "assistant spans are ambiguous (use a template with "
                                                   "{% generation %} blocks)")
                end = len(end_text.rstrip("\n"))  # the newline after the end-of-turn token is template framing
                spans.append((len(start_text), end))
            return text, spans
        except SFTDataError:
            raise
        except Exception as e:  # jinja errors: unknown role/part type, raise_exception in the template
            raise TemplateError(record_id, f"chat template failed: {type(e).__name__}: {e}") from e

    # ------------------------------------------------------------------ encoding
    def load_images(self, paths: list[Path], record_id: str) -> list:
        from kit.images import ImageError, load_image_file  # the kit's one decoder: upright as displayed (EXIF)

        images = []
        for p in paths:
            try:
                images.append(load_image_file(p).convert("RGB"))
            except (OSError, ImageError, ValueError) as e:
                raise ImageLoadError(record_id, f"cannot load image {p.name}: {e}") from e
        return images

    def encode_messages(self, messages: list[Message], image_paths: list[Path], record_id: str = "-") -> SFTExample:
        """Encode one conversation whose image parts correspond, in order, to ``image_paths``.

        Raises: see :meth:`encode`.
        """
        import torch

        bad = literal_image_placeholders(messages)
        if bad:
            raise TemplateError(record_id, f"message {bad[0][0]} holds a literal image placeholder {bad[0][1]!r} "
                                           "(only image parts become placeholders)")
        messages, n_neutralized = data_view(messages)
        text, spans = self.render(messages, record_id)
        n_pad = text.count(IMAGE_PAD)
        if n_pad != len(image_paths):
            raise TemplateError(record_id, f"rendered text has {n_pad} {IMAGE_PAD} placeholders for "
                                           f"{len(image_paths)} images (a literal {IMAGE_PAD} in a message?)")
        images = self.load_images(image_paths, record_id)
        pixel_values = grid = None
        if images:
            try:
                vis = self.image_processor(images=images, return_tensors="pt")
            except (ValueError, OSError) as e:
                raise ImageLoadError(record_id, f"image processor rejected an image: {e}") from e
            pixel_values, grid = vis["pixel_values"], vis["image_grid_thw"]
            counts = (grid.prod(dim=-1) // (self.merge**2)).tolist()
            text, spans = _expand_pads(text, spans, counts)
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        ids = torch.tensor(enc["input_ids"], dtype=torch.long)
        starts = [s for s, e in enc["offset_mapping"]]
        mask = torch.zeros(len(ids), dtype=torch.bool)
        response_tokens = []
        for s, e in spans:
            a, b = bisect.bisect_left(starts, s), bisect.bisect_left(starts, e)
            mask[a:b] = True
            response_tokens.append(b - a)
        n_img_tok = int((ids == self.image_token_id).sum())
        n_feat = 0 if grid is None else int(grid.prod(dim=-1).sum()) // self.merge**2
        if n_img_tok != n_feat:
            raise TemplateError(record_id, f"{n_img_tok} image tokens for {n_feat} image features")
        if max(response_tokens) > self.max_response_tokens:
            raise ResponseTooLong(record_id, f"an assistant response has {max(response_tokens)} tokens "
                                             f"(limit {self.max_response_tokens})")
        if len(ids) > self.max_trajectory_tokens:
            raise TrajectoryTooLong(record_id, f"{len(ids)} tokens (limit {self.max_trajectory_tokens})")
        return SFTExample(id=record_id, input_ids=ids, loss_mask=mask, mm_token_type_ids=(ids == self.image_token_id).long(),
                          pixel_values=pixel_values, image_grid_thw=grid, response_tokens=response_tokens,
                          control_tokens_neutralized=n_neutralized)

    def encode(self, record: EpisodeRecord, workspace: str | Path | None = None) -> SFTExample:
        """Encode one episode record (its images resolved in ``workspace`` or ``record.workspace``).

        V-Fold-rendered records (:func:`kit.vfold.training.render_trajectory`) are ordinary records
        whose observations are page images, so they go through the same path.

        Raises:
            NoAssistantTurn, ImageLoadError, ResponseTooLong, TrajectoryTooLong, TemplateError.
        """
        return self.encode_messages(record.messages, record_images(record, workspace), record.id)

    def encode_many(self, records: Iterable[EpisodeRecord], *, trainable_only: bool = True
                    ) -> tuple[list[SFTExample], EncodeReport]:
        """Encode records, skipping (and counting by reason) those that cannot be trained on.

        ``trainable_only`` skips records with ``trainable == False`` (context-limit, wall-clock and
        error episodes, WeAgent Table 5) under the reason ``not_trainable``.
        """
        out, rep = [], EncodeReport()
        for r in records:
            if trainable_only and not r.trainable:
                rep.skipped["not_trainable"] += 1
                continue
            try:
                out.append(self.encode(r))
            except SFTDataError as e:
                rep.skipped[e.reason] += 1
                rep.errors.append(str(e))
        rep.kept = len(out)
        return out, rep

    def encode_prompt(self, messages: list[Message], image_paths: list[Path]):
        """Generation inputs (batch of 1) for ``messages`` followed by the assistant header."""
        text, _ = self._render([chat_entry(m) for m in data_view(messages)[0]], add_generation_prompt=True)
        images = self.load_images(image_paths, "prompt")
        return self.processor(text=[text], images=images or None, return_tensors="pt")


def _expand_pads(text: str, spans: list[tuple[int, int]], counts: list[int]) -> tuple[str, list[tuple[int, int]]]:
    """Repeat the i-th ``<|image_pad|>`` ``counts[i]`` times and shift the spans to match."""
    pieces, shifts, pos = [], [], 0
    for n in counts:
        j = text.index(IMAGE_PAD, pos)
        pieces.append(text[pos:j] + IMAGE_PAD * n)
        shifts.append((j, (n - 1) * len(IMAGE_PAD)))
        pos = j + len(IMAGE_PAD)
    pieces.append(text[pos:])

    def move(x: int) -> int:
        return x + sum(d for j, d in shifts if j < x)

    return "".join(pieces), [(move(s), move(e)) for s, e in spans]


class SFTCollator:
    """Pad encoded examples into a batch (right padding).

    Returns a dict: ``input_ids``, ``attention_mask``, ``labels`` (``-100`` where the mask is 0 or on
    padding), ``mm_token_type_ids``: ``[B, L_max]``; ``pixel_values`` ``[ΣP, D]`` and
    ``image_grid_thw`` ``[Σn_images, 3]`` when any example has images.

    Accepts :class:`SFTExample` or dicts with the same fields (as a ``datasets`` row).
    """

    def __init__(self, pad_token_id: int):
        self.pad_token_id = int(pad_token_id)

    def __call__(self, examples: list) -> dict[str, Any]:
        import torch

        if not examples:
            raise ValueError("empty batch")
        ex = [e if isinstance(e, SFTExample) else SFTExample(**{k: e[k] for k in e if k in _FIELDS}) for e in examples]
        L = max(e.num_tokens for e in ex)
        B = len(ex)
        ids = torch.full((B, L), self.pad_token_id, dtype=torch.long)
        att = torch.zeros((B, L), dtype=torch.long)
        labels = torch.full((B, L), IGNORE_INDEX, dtype=torch.long)
        mm = torch.zeros((B, L), dtype=torch.long)
        for b, e in enumerate(ex):
            n = e.num_tokens
            ids[b, :n] = e.input_ids
            att[b, :n] = 1
            labels[b, :n] = torch.where(torch.as_tensor(e.loss_mask, dtype=torch.bool), e.input_ids, IGNORE_INDEX)
            mm[b, :n] = e.mm_token_type_ids
        batch = {"input_ids": ids, "attention_mask": att, "labels": labels, "mm_token_type_ids": mm}
        pv = [e.pixel_values for e in ex if e.pixel_values is not None]
        if pv:
            batch["pixel_values"] = torch.cat(pv, dim=0)
            batch["image_grid_thw"] = torch.cat([e.image_grid_thw for e in ex if e.image_grid_thw is not None], dim=0)
        return batch


_FIELDS = {"id", "input_ids", "loss_mask", "mm_token_type_ids", "pixel_values", "image_grid_thw", "response_tokens",
           "control_tokens_neutralized"}

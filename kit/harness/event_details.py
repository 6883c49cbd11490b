"""Typed event details: one pydantic model per :class:`~kit.harness.events.EventType` (docs/rules.md).

An :class:`~kit.harness.episode.Event` stores its ``detail`` as a plain JSON object, so records on disk stay
as they were. The models here say which keys each event type carries and what they hold:

* **Written** (``Event(type=..., detail=...)`` in code): :func:`check_detail` refuses a key the type's model
  does not declare (a misspelt key fails where it is written) and a value that does not fit its field. Keys
  may be left out (tests and hand-built records write partial details); the stored dict is not changed.
* **Read** (records loaded from JSONL, ``Event.model_validate``): nothing is checked; :func:`parse_detail`
  (``event.details``) gives typed access, a missing key reading ``None`` and a value of the wrong type
  kept as it was.

The models form a union discriminated by ``type`` (:data:`AnyDetail`), with the event's type as the
``type`` field (never stored inside ``detail``). A type without a model (one just added to
:class:`EventType`) falls back to :class:`OpenDetail`, which accepts any key, until its model is written
(``tests/test_event_details.py`` lists such types). Models marked ``extra="allow"`` are open by design:
``tool_note`` (a tool's own finding) and the ``hook_*`` events (a hook may attach its own keys).
"""

from __future__ import annotations

import functools
from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from kit.harness.events import EventType

__all__ = ["DETAIL_MODELS", "AnyDetail", "Detail", "OpenDetail", "check_detail", "detail_model", "parse_detail"]


class Detail(BaseModel):
    """Base of every detail model: ``type`` is the event type (a ``Literal`` in each subclass);
    :meth:`to_detail` gives the stored dict back (only the keys it was made with)."""

    model_config = ConfigDict(extra="forbid")
    open: ClassVar[bool] = False  # True: keys beyond the declared ones are accepted when written

    type: str

    def to_detail(self) -> dict[str, Any]:
        """The ``detail`` dict this model stands for (the keys that were set, without ``type``)."""
        out = self.model_dump(mode="json", exclude={"type"}, exclude_unset=True)
        return {**out, **(self.model_extra or {})}


class OpenDetail(Detail):
    """Any keys: the fallback for an event type without its own model."""

    model_config = ConfigDict(extra="allow")
    open: ClassVar[bool] = True


# ---------------------------------------------------------------------------------------------- shapes
class _Reason(Detail):
    reason: str | None  # why the episode ended (HarnessConfig budgets, the failing component)


class _Preview(Detail):
    preview: str


class _Tool(Detail):
    tool: str | None


class _Count(Detail):
    count: int


class _Chars(Detail):
    chars: int


class _Empty(Detail):
    pass


class _Overlong(Detail):
    completion_tokens: int
    chars: int
    preview: str
    attempt: int
    self_recovery: bool


class _Hook(Detail):
    model_config = ConfigDict(extra="allow")
    open: ClassVar[bool] = True
    hook: str
    tool: str | None
    new_tool: str | None = None
    arguments: dict[str, Any] | None = None
    reason: str | None = None


class _VFold(Detail):
    tool: str | None
    report: Any
    vfold: Any


# ---------------------------------------------------------------------------------------------- episode ends
class WallClockDetail(_Reason):
    type: Literal["wall_clock"] = "wall_clock"


class ContextLimitDetail(_Reason):
    type: Literal["context_limit"] = "context_limit"


class EpisodeErrorDetail(_Reason):
    type: Literal["episode_error"] = "episode_error"


class BudgetExhaustedDetail(_Reason):
    type: Literal["budget_exhausted"] = "budget_exhausted"


class InvalidActionDetail(_Reason):
    type: Literal["invalid_action"] = "invalid_action"


class SynthesisRequestedDetail(Detail):
    """``reason``: why the synthesis turn was asked for (``max_turns``, ``max_calls``, a hook's stop ...)."""

    type: Literal["synthesis_requested"] = "synthesis_requested"
    reason: str


class SynthesisIncompleteDetail(_Preview):
    type: Literal["synthesis_incomplete"] = "synthesis_incomplete"


class ToolCallInSynthesisDetail(Detail):
    type: Literal["tool_call_in_synthesis"] = "tool_call_in_synthesis"
    not_executed: int  # calls written in the no-tool turn


# ---------------------------------------------------------------------------------------------- recovery
class ArgumentRepairDetail(Detail):
    type: Literal["argument_repair"] = "argument_repair"
    tool: str
    repairs: list[str]  # repair codes (kit.harness.recovery)


class InvalidCallDetail(Detail):
    """A call that could not run: ``code`` / ``message`` of its :class:`~kit.harness.errors.ToolError`;
    a cut call adds ``truncated`` and the first 200 characters of the ``raw`` text."""

    type: Literal["invalid_call"] = "invalid_call"
    code: str
    message: str
    tool: str | None
    truncated: bool | None = None
    raw: str | None = None


class DuplicateSuppressedDetail(_Tool):
    type: Literal["duplicate_suppressed"] = "duplicate_suppressed"


class LoopGuardDetail(Detail):
    """``tool`` for repeated invalid calls; ``call`` (``"<no action>"``) for repeated turns without an action."""

    type: Literal["loop_guard"] = "loop_guard"
    tool: str | None = None
    call: str | None = None


class NoActionDetail(_Preview):
    type: Literal["no_action"] = "no_action"
    departures: list[str]


class OverlongRegeneratedDetail(_Overlong):
    type: Literal["overlong_regenerated"] = "overlong_regenerated"


class OverlongKeptDetail(_Overlong):
    type: Literal["overlong_kept"] = "overlong_kept"


class ToolErrorDetail(Detail):
    type: Literal["tool_error"] = "tool_error"
    tool: str
    code: str
    message: str


# ---------------------------------------------------------------------------------------------- hooks
class HookDeniedDetail(_Hook):
    type: Literal["hook_denied"] = "hook_denied"


class HookRewriteDetail(_Hook):
    type: Literal["hook_rewrite"] = "hook_rewrite"


class HookStopDetail(_Hook):
    type: Literal["hook_stop"] = "hook_stop"


class HookObservationDetail(_Hook):
    type: Literal["hook_observation"] = "hook_observation"
    chars: int | None = None  # the observation's length before the hook
    new_chars: int | None = None


# ---------------------------------------------------------------------------------------------- persistence
class ResultPersistedDetail(Detail):
    """``chars``: the full result's length; ``file``: where it is saved (relative to the workspace). The
    normalizers add ``shown_chars`` and two notes."""

    type: Literal["result_persisted"] = "result_persisted"
    tool: str | None
    chars: int
    file: str
    shown_chars: int | None = None
    seen_by_model: str | None = None
    untrainable: str | None = None


class PersistFailedDetail(Detail):
    type: Literal["persist_failed"] = "persist_failed"
    file: str
    error: str


class ResultCappedDetail(_Tool, _Chars):
    type: Literal["result_capped"] = "result_capped"
    cap: int | None


class ImagesNotShownDetail(_Tool):
    type: Literal["images_not_shown"] = "images_not_shown"
    shown: int
    not_shown: list[str]


# ---------------------------------------------------------------------------------------------- turn grammar
class ExtraActionsIgnoredDetail(Detail):
    type: Literal["extra_actions_ignored"] = "extra_actions_ignored"
    ignored: list[str]


class MultipleResponsesDetail(_Count):
    """The harness writes ``used`` / ``discarded``; the normalizers ``kept`` (``"last"``) / ``dropped``."""

    type: Literal["multiple_responses"] = "multiple_responses"
    used: int | None = None
    discarded: list[str] | None = None
    kept: str | None = None
    dropped: list[str] | None = None


class ResponseUnclosedDetail(_Empty):
    type: Literal["response_unclosed"] = "response_unclosed"


class ToolCallAfterResponseDetail(Detail):
    type: Literal["tool_call_after_response"] = "tool_call_after_response"
    not_executed: list[str]


class TextOutsideGrammarDetail(_Chars, _Preview):
    type: Literal["text_outside_grammar"] = "text_outside_grammar"


class ThinkMissingDetail(_Empty):
    type: Literal["think_missing"] = "think_missing"


class ThinkUnclosedDetail(_Chars):
    type: Literal["think_unclosed"] = "think_unclosed"


class MultipleThinkDetail(_Count):
    type: Literal["multiple_think"] = "multiple_think"


class ThinkOpenedByTemplateDetail(_Empty):
    type: Literal["think_opened_by_template"] = "think_opened_by_template"


class UnknownCitationDetail(Detail):
    type: Literal["unknown_citation"] = "unknown_citation"
    ref: str


class CitationMismatchDetail(Detail):
    type: Literal["citation_mismatch"] = "citation_mismatch"
    images: list[Any]  # kit.data.normalize.trainable.citation_mismatches


# ---------------------------------------------------------------------------------------------- evidence
class ControlTokensNeutralizedDetail(_Count):
    type: Literal["control_tokens_neutralized"] = "control_tokens_neutralized"
    field: str  # "question" or "observation"
    tool: str | None = None


class EvidenceModifiedDetail(Detail):
    type: Literal["evidence_modified"] = "evidence_modified"
    image: str


class ImageRejectedDetail(_Tool):
    """``url`` for a downloaded image, ``file`` for one saved by ``execute_code``."""

    type: Literal["image_rejected"] = "image_rejected"
    reason: str
    url: str | None = None
    file: str | None = None


class ImagesNotRegisteredDetail(_Tool, _Count):
    type: Literal["images_not_registered"] = "images_not_registered"


class SandboxCloseErrorDetail(Detail):
    type: Literal["sandbox_close_error"] = "sandbox_close_error"
    error: str


class ToolNoteDetail(Detail):
    """A tool's own finding: ``name`` says which; any other keys are the tool's."""

    model_config = ConfigDict(extra="allow")
    open: ClassVar[bool] = True
    type: Literal["tool_note"] = "tool_note"
    name: str


# ---------------------------------------------------------------------------------------------- V-Fold
class VFoldKeptAsTextDetail(_VFold):
    type: Literal["vfold_kept_as_text"] = "vfold_kept_as_text"
    reason: Any


class VFoldFoldedLossyDetail(_VFold):
    type: Literal["vfold_folded_lossy"] = "vfold_folded_lossy"
    losses: Any


# ---------------------------------------------------------------------------------------------- normalization
class ObservationWithoutCallDetail(Detail):
    type: Literal["observation_without_call"] = "observation_without_call"
    message: int | None = None  # index of the source message
    note: str | None = None


class ObservationMissingDetail(_Tool):
    type: Literal["observation_missing"] = "observation_missing"
    note: str
    terminal_status: Any = None
    hard_failures: list[Any] | None = None


class _Rebuilt(Detail):
    returned_text_sha256: Any  # as the source stores it (may be missing or not a string)
    returned_text_characters: Any
    rendered_sha256: str | None = None
    rendered_characters: int | None = None
    note: str | None = None


class ObservationReconstructedDetail(_Rebuilt):
    type: Literal["observation_reconstructed"] = "observation_reconstructed"
    verified: str | None  # "sha256", "characters" or None (kit.data.normalize.trainable.verify_rebuilt)


class ObservationHashMismatchDetail(_Rebuilt):
    type: Literal["observation_hash_mismatch"] = "observation_hash_mismatch"
    stored_characters: int | None = None
    reconstructed: bool | None = None


class ObservationImagesMissingDetail(_Tool, _Count):
    type: Literal["observation_images_missing"] = "observation_images_missing"
    images: list[Any]
    note: str


class InputImageMissingDetail(Detail):
    type: Literal["input_image_missing"] = "input_image_missing"
    ref: Any
    reason: str
    png_sha256: Any = None
    width: Any = None
    height: Any = None


class InputImageMismatchDetail(Detail):
    type: Literal["input_image_mismatch"] = "input_image_mismatch"
    ref: Any
    expected_sha256: str
    found_sha256: str


class RoundsAfterAnswerDetail(_Count):
    type: Literal["rounds_after_answer"] = "rounds_after_answer"
    actions: list[Any]


class ToolHardFailureDetail(_Tool):
    type: Literal["tool_hard_failure"] = "tool_hard_failure"
    stage: Any
    error: Any
    note: str


class FinalAnswerMismatchDetail(Detail):
    type: Literal["final_answer_mismatch"] = "final_answer_mismatch"
    final_answer: str
    round_answer: str


_MODELS: tuple[type[Detail], ...] = (
    WallClockDetail, ContextLimitDetail, EpisodeErrorDetail, BudgetExhaustedDetail, InvalidActionDetail,
    SynthesisRequestedDetail, SynthesisIncompleteDetail, ToolCallInSynthesisDetail,
    ArgumentRepairDetail, InvalidCallDetail, DuplicateSuppressedDetail, LoopGuardDetail, NoActionDetail,
    OverlongRegeneratedDetail, OverlongKeptDetail, ToolErrorDetail,
    HookDeniedDetail, HookRewriteDetail, HookStopDetail, HookObservationDetail,
    ResultPersistedDetail, PersistFailedDetail, ResultCappedDetail, ImagesNotShownDetail,
    ExtraActionsIgnoredDetail, MultipleResponsesDetail, ResponseUnclosedDetail, ToolCallAfterResponseDetail,
    TextOutsideGrammarDetail, ThinkMissingDetail, ThinkUnclosedDetail, MultipleThinkDetail,
    ThinkOpenedByTemplateDetail, UnknownCitationDetail, CitationMismatchDetail,
    ControlTokensNeutralizedDetail, EvidenceModifiedDetail, ImageRejectedDetail, ImagesNotRegisteredDetail,
    SandboxCloseErrorDetail, ToolNoteDetail, VFoldKeptAsTextDetail, VFoldFoldedLossyDetail,
    ObservationWithoutCallDetail, ObservationMissingDetail, ObservationReconstructedDetail,
    ObservationHashMismatchDetail, ObservationImagesMissingDetail, InputImageMissingDetail,
    InputImageMismatchDetail, RoundsAfterAnswerDetail, ToolHardFailureDetail, FinalAnswerMismatchDetail,
)

#: event type (its string value) -> its detail model
DETAIL_MODELS: dict[str, type[Detail]] = {m.model_fields["type"].default: m for m in _MODELS}

#: every detail model, discriminated by ``type`` (validate ``{"type": event.type, **event.detail}``)
AnyDetail = Annotated[Union[_MODELS], Field(discriminator="type")]  # type: ignore[valid-type]  # noqa: UP007


def detail_model(type_: EventType | str) -> type[Detail]:
    """The detail model of an event type; :class:`OpenDetail` for a type that has none yet."""
    return DETAIL_MODELS.get(str(type_), OpenDetail)


@functools.cache
def _field_adapter(model: type[Detail], name: str) -> TypeAdapter:
    return TypeAdapter(model.model_fields[name].annotation or Any)


def check_detail(type_: EventType | str, detail: dict[str, Any]) -> None:
    """Check a detail the code is writing against its type's model: every key declared (unless the model is
    open), every value of its field's type; keys may be missing.

    Raises:
        ValueError: an undeclared key (the message lists the declared ones) or a value of the wrong type."""
    model = detail_model(type_)
    declared = [k for k in model.model_fields if k != "type"]
    unknown = sorted(k for k in detail if k not in model.model_fields or k == "type")
    if unknown and not model.open:
        raise ValueError(f"event {str(type_)!r}: unknown detail key(s) {unknown}; {model.__name__} declares "
                         f"{declared} (kit/harness/event_details.py)")
    for k in declared:
        if k in detail:
            try:
                _field_adapter(model, k).validate_python(detail[k])
            except ValidationError as e:
                raise ValueError(f"event {str(type_)!r}: detail key {k!r} = {str(detail[k])[:80]!r}: "
                                 f"{e.errors()[0]['msg']}") from None


def parse_detail(type_: EventType | str, detail: dict[str, Any]) -> Detail:
    """Typed view of a stored detail (lenient, for records of any age): declared keys validated where they
    fit (else kept as stored), missing ones ``None``, undeclared ones kept on open models only.
    ``parse_detail(t, d).to_detail() == d`` for any detail the kit writes."""
    model = detail_model(type_)
    values: dict[str, Any] = {}
    for k in model.model_fields:
        if k == "type" or k not in detail:
            continue
        try:
            values[k] = _field_adapter(model, k).validate_python(detail[k])
        except ValidationError:
            values[k] = detail[k]
    filled = {k: None for k in model.model_fields if k != "type"} | values
    extra = {k: v for k, v in detail.items() if k not in model.model_fields} if model.open else {}
    out = model.model_construct(_fields_set=set(values) | {"type"}, **filled, type=str(type_))
    if model.open:
        object.__setattr__(out, "__pydantic_extra__", extra)
    return out

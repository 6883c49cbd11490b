"""Task and episode record: the one format every stage exchanges (docs/contracts.md "Episode record").

One :class:`EpisodeRecord` is one JSON line. Statuses: ``answered``, ``max_turns_synthesis``,
``context_limit``, ``wall_clock``, ``error``, and without self-recovery ``budget_exhausted`` /
``invalid_action``. Context-limit and wall-clock episodes are never
trainable (WeAgent Table 5, "Excluded trajectories").
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic_core import to_jsonable_python

from kit.harness.event_details import Detail, check_detail, parse_detail
from kit.harness.events import EventType
from kit.types import Message

# budget_exhausted / invalid_action: only without self-recovery (HarnessConfig.self_recovery=False)
Status = Literal["answered", "max_turns_synthesis", "context_limit", "wall_clock", "error", "budget_exhausted",
                 "invalid_action"]


class Task(BaseModel):
    """A question for the agent.

    ``input_images`` are paths (absolute or relative to the caller) of the user's images; they are
    copied into the workspace as ``user_image_<n>.<ext>``. ``target_image`` is held out: never shown
    to the agent (VisTarget, WeAgent §5).
    """

    id: str
    question: str
    input_images: list[str] = Field(default_factory=list)
    answers: list[str] = Field(default_factory=list)  # reference answer first, then alternatives
    target_image: str | None = None
    source: str = ""
    metadata: dict[str, Any] = Field(default_factory=dict)


def _json_fallback(value: Any) -> Any:
    """A value pydantic cannot serialize: numpy scalars/arrays → Python numbers/lists, anything else → ``str``."""
    if type(value).__module__ == "numpy" and hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def json_safe(value: Any) -> Any:
    """``value`` as plain JSON types (dict with str keys, list, str, int, float, bool, None).

    Known types serialize as pydantic writes them (``Path`` → str, ``datetime`` → ISO 8601, sets →
    lists); numpy scalars become Python numbers, any other object its ``str``; bytes that are not
    UTF-8 become base64. Never raises, so a record holding it can always be written.
    """
    try:
        return to_jsonable_python(value, fallback=_json_fallback)
    except ValueError:  # e.g. bytes that are not UTF-8
        return to_jsonable_python(value, fallback=_json_fallback, bytes_mode="base64")


_WRITTEN = {"event_written": True}  # validation context of an Event built in code (Event(...))


class Event(BaseModel):
    """One harness intervention or budget decision, recorded on the episode.

    ``type`` is one of :class:`~kit.harness.events.EventType` (any other value raises ``ValidationError``)
    and is held as its string value, so ``event.type == "invalid_call"`` and JSON stay as they were.
    ``detail`` is stored as given (plain JSON); its keys are those of the type's model in
    :mod:`kit.harness.event_details`: an event built in code (``Event(type=..., detail=...)``) with an
    undeclared key or a value of the wrong type raises ``ValidationError`` there, while records loaded from
    JSON (``model_validate`` / ``model_validate_json``, nested in an :class:`EpisodeRecord`) are taken as
    they are, whatever their age. :attr:`details` gives typed access."""

    model_config = ConfigDict(use_enum_values=True)

    type: EventType
    turn: int
    detail: dict[str, Any] = Field(default_factory=dict)

    def __init__(self, /, **data: Any) -> None:
        # a constructor call is code writing an event: validated with the detail check on (see _written)
        self.__pydantic_validator__.validate_python(data, self_instance=self, context=_WRITTEN)

    # loading (model_validate, a nested Event in an EpisodeRecord) must not run __init__ (pydantic calls a
    # model's own __init__ when validating unless it is marked as the base one): loading stays lenient
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    @field_validator("detail", mode="before")
    @classmethod
    def _json_detail(cls, v: Any) -> Any:
        # a tool's detail may hold numpy counts or arbitrary objects: coerce now so the episode record
        # that carries this event always serializes (a non-dict still fails the dict check)
        return json_safe(v) if isinstance(v, dict) else v

    @model_validator(mode="after")
    def _written(self, info: ValidationInfo) -> Event:
        if isinstance(info.context, dict) and info.context.get("event_written"):
            check_detail(self.type, self.detail)  # ValueError -> ValidationError where the event is written
        return self

    @property
    def details(self) -> Detail:
        """The detail as its type's model (:func:`kit.harness.event_details.parse_detail`): e.g.
        ``event.details.tool``; a key the record lacks reads ``None``."""
        return parse_detail(self.type, self.detail)


class RegisteredImage(BaseModel):
    """An image in the evidence registry (docs/contracts.md "Evidence registry")."""

    ref: str  # model-visible reference without brackets, e.g. "search_image_3"
    filename: str  # stable relative file name in the workspace, e.g. "search_image_3.jpg"
    kind: str  # user_image | search_image | page_image | code_image
    tool: str | None = None
    turn: int = 0
    source_url: str | None = None
    page_url: str | None = None
    title: str | None = None
    sha256: str
    width: int
    height: int
    mime: str


class Timings(BaseModel):
    wall_s: float = 0.0
    policy_s: float = 0.0
    tool_s: float = 0.0
    harness_s: float = 0.0
    harness_turn_ms: list[float] = Field(default_factory=list)  # per regular turn, excluding policy and tool time


WORKSPACE_MAX_CHARS = 4096  # kit: Linux PATH_MAX; a longer workspace can name no folder


class EpisodeRecord(BaseModel):
    """A finished (or aborted) episode; always written, whatever happened."""

    id: str
    task: Task
    config_hash: str
    policy: str = ""
    backend: str = ""
    messages: list[Message] = Field(default_factory=list)
    images: list[RegisteredImage] = Field(default_factory=list)
    final_response: str | None = None
    cited_images: list[str] = Field(default_factory=list)  # registered filenames cited with <IMG: ...>
    uncited_refs: list[str] = Field(default_factory=list)  # <IMG: ...> citations naming no registered image
    events: list[Event] = Field(default_factory=list)
    status: Status = "error"
    error: str | None = None
    trainable: bool = False
    turns: int = 0
    tool_calls: int = 0
    usage: dict[str, int] = Field(default_factory=dict)
    timings: Timings = Field(default_factory=Timings)
    workspace: str | None = None
    labels: list[str] = Field(default_factory=list)  # e.g. ["smoke"] for tiny random models

    @field_validator("workspace")
    @classmethod
    def _usable_workspace(cls, v: str | None) -> str | None:
        """A path every reader can resolve: no NUL byte, at most 4096 characters (Linux PATH_MAX);
        raw tracebacks from os calls otherwise (kit.harness.portable)."""
        if v is not None and "\0" in v:
            raise ValueError("workspace holds a NUL byte")
        if v is not None and len(v) > WORKSPACE_MAX_CHARS:
            raise ValueError(f"workspace is {len(v)} characters long (at most {WORKSPACE_MAX_CHARS})")
        return v

    def event_counts(self) -> dict[str, int]:
        """Number of events per type."""
        out: dict[str, int] = {}
        for e in self.events:
            out[e.type] = out.get(e.type, 0) + 1
        return out

"""Evaluation configurations (WeAgent Tables 1–2; POINTS-Seeker Table 1 "Direct answer").

* ``direct``: direct answer, no tools — ``HarnessConfig(tools_enabled=[])``. The harness handles an
  empty tool list as it is: the Table 6 system prompt lists no tools, the policy gets no tool
  schemas, a tool call the model still writes is refused with an ``unknown_tool`` observation, and
  the episode ends with the model's ``<response>`` (or the no-tool synthesis turn).
* ``harness``: the full WeAgent-Harness (all five tools, image re-feed).
* ``no_refeed``: the Table 2 ablation, ``HarnessConfig(refeed_images=False)``: same tools, images
  returned by tools kept out of later model turns (a text note names the saved files).
* ``text_only``: a text-only-observation harness standing in for the paper's Hermes comparison
  (Table 2 "Harness Ablation"): same tools and budgets, but every tool-returned image reaches the
  model only as a text line (its source URL and title), never as pixels and without the registry
  note, as in harnesses whose tools return text. User-provided input images are still shown.

All configurations share tasks, seeds and judge; they differ only in what is listed here. Each
names its evaluation ``protocol`` (:mod:`kit.eval.protocols`: ``weagent_mmsearch`` or
``points_seeker``), which decides the runs per benchmark (:meth:`EvalProtocol.trials`) and must be
the protocol the benchmarks were loaded under (their filters).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from kit.eval.protocols import DEFAULT_PROTOCOL, EvalProtocol, get_protocol
from kit.harness.config import HarnessConfig
from kit.harness.context import ContextBuilder
from kit.harness.neutralize import neutralize_control_tokens
from kit.harness.registry import EvidenceRegistry
from kit.types import ContentPart, Message


class TextOnlyContextBuilder(ContextBuilder):
    """Model-facing context with text-only tool observations (Hermes-style stand-in).

    Each image part of a tool message is replaced by ``[image: <source url> — <title>]`` from the
    evidence registry (chat-control strings neutralized); user messages keep their images. The episode record is unchanged (images
    stay registered, so tools can still take them by name if the model writes one).
    """

    def __init__(self):
        super().__init__(refeed_images=False)

    def build(self, messages: list[Message], registry: EvidenceRegistry) -> list[Message]:
        out = []
        for m in messages:
            if m.role == "tool" and m.image_refs():
                parts = [p for p in m.content if p.type == "text"]
                for ref in m.image_refs():
                    try:
                        e = registry.resolve(ref)
                        desc = (e.source_url or e.filename) + (f" — {e.title}" if e.title else "")
                    except Exception:  # an unresolvable ref still must not leak pixels or crash
                        desc = ref
                    # source URL and title come from the web: data, like any observation
                    parts.append(ContentPart(type="text", text=neutralize_control_tokens(f"[image: {desc}]")[0]))
                m = m.model_copy(update={"content": parts})
            out.append(m)
        return out


class EvalConfig(BaseModel):
    """One evaluated configuration: a name (run folders, tables), a label for reports, the harness
    budgets and rules, the context strategy and the evaluation protocol (by name).

    Raises:
        ValueError: an unknown field, a ``harness`` that is not a :class:`HarnessConfig`, or an
            unknown ``protocol`` name.
    """

    model_config = ConfigDict(extra="forbid")

    name: str
    label: str
    harness: HarnessConfig
    text_only: bool = False
    description: str = ""
    labels: list[str] = Field(default_factory=list)
    protocol: str = DEFAULT_PROTOCOL

    @field_validator("protocol")
    @classmethod
    def _known_protocol(cls, v: str) -> str:
        get_protocol(v)  # ProtocolError is a ValueError: pydantic reports it on the field
        return v

    def eval_protocol(self) -> EvalProtocol:
        """The :class:`EvalProtocol` this configuration names."""
        return get_protocol(self.protocol)

    def context_builder(self) -> ContextBuilder:
        """The model-facing context strategy for :class:`kit.harness.loop.Harness`."""
        return TextOnlyContextBuilder() if self.text_only else ContextBuilder(refeed_images=self.harness.refeed_images)


CONFIG_NAMES = ("direct", "harness", "no_refeed", "text_only")


def make_configs(profile="paper", names: list[str] | tuple[str, ...] = CONFIG_NAMES, *,
                 real_model: bool = False, protocol: str | None = None, **overrides) -> dict[str, EvalConfig]:
    """The configurations ``names`` with the profile's harness (its recipe's: ``paper`` Table 5,
    ``points_seeker`` its 10-turn / 32k environment, ``smoke`` :meth:`HarnessConfig.smoke`), ``overrides``
    applied to every one. ``profile``: a name or a :class:`kit.profiles.Profile` (a preflight too).
    ``real_model``: the evaluated policy is a named real model, which keeps Table 5's response length under
    smoke budgets. ``protocol``: the evaluation protocol every configuration names (None: the recipe's).

    Raises:
        ValueError: unknown profile, configuration or protocol name.
    """
    from kit.profiles import get_profile

    prof = get_profile(profile)
    protocol = protocol or str(prof.value("eval.protocol", DEFAULT_PROTOCOL))
    get_protocol(protocol)
    unknown = [n for n in names if n not in CONFIG_NAMES]
    if unknown:
        raise ValueError(f"unknown configurations {unknown}; available: {list(CONFIG_NAMES)}")

    def base(**kw) -> HarnessConfig:
        kw = {**overrides, **kw}
        return prof.harness(real_model=real_model, **kw)

    all_configs = {
        "direct": EvalConfig(name="direct", label="Direct answer", protocol=protocol, harness=base(tools_enabled=[], tool_set=None),
                             description="no tools: the model answers from the question and its images"),
        "harness": EvalConfig(name="harness", label="Full harness", protocol=protocol, harness=base(),
                              description="WeAgent-Harness, image re-feed"),
        "no_refeed": EvalConfig(name="no_refeed", label="Harness w/o image re-feed", protocol=protocol, harness=base(refeed_images=False),
                                description="Table 2 ablation: tool images kept out of later turns"),
        "text_only": EvalConfig(name="text_only", label="Text-only observations", protocol=protocol, harness=base(refeed_images=False),
                                text_only=True,
                                description="tool images reach the model as text lines only (Hermes stand-in)"),
    }
    return {n: all_configs[n] for n in names}


def config_tools(config: EvalConfig) -> list[str]:
    """The names of the tools an episode under ``config`` is offered: its enabled native tools, then its
    ``tool_set``'s (POINTS-Seeker §4.1 web_search / image_search / visit have ``tools_enabled == []``), so a
    configurations table never shows a tool-using harness as "(none)".

    Raises:
        ValueError: an unknown tool set (:func:`kit.harness.toolsets.config_tool_specs`).
    """
    from kit.harness.toolsets import config_tool_specs

    return list(config_tool_specs(config.harness))

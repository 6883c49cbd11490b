"""One map of the harness rules: paper row → config field → implementing function → events.

:data:`RULES` lists every budget, recovery and persistence rule of WeAgent Table 5, the Table 6 turn
grammar, and the kit's own hygiene rules, with the :class:`~kit.harness.config.HarnessConfig` fields that
set them, the function that applies them and the :class:`~kit.harness.events.EventType` values they emit.
``docs/rules.md`` is rendered from it (:func:`rules_markdown`; a test keeps the two equal), and a test
checks that every event type appears here and that every named config field and function exists.
"""

from __future__ import annotations

from dataclasses import dataclass

from kit.harness.events import EventType as E


@dataclass(frozen=True)
class Rule:
    """One rule. ``implementation``: dotted path of the function/method that applies it."""

    name: str
    source: str  # where the paper states it ("WeAgent Table 5", ...) or "kit" for the kit's own rules
    config: tuple[str, ...]  # HarnessConfig fields (empty: not configurable)
    implementation: str
    events: tuple[E, ...]
    effect: str  # what the model / the training data sees, in one line

    @property
    def vanilla(self) -> str:
        """What the rule does under ``HarnessConfig.self_recovery=False`` (:data:`VANILLA`)."""
        return VANILLA.get(self.name, UNCHANGED)


RULES: tuple[Rule, ...] = (
    Rule("Turn / executed-call limits", "WeAgent Table 5", ("max_turns", "max_calls"),
         "kit.harness.loop.Harness._episode", (E.SYNTHESIS_REQUESTED,),
         "after the last regular turn (or call) tools are disabled and one synthesis turn is requested"),
    Rule("Max-turn finalization", "WeAgent Table 5", ("max_turns",), "kit.harness.loop.Harness._synthesis",
         (E.SYNTHESIS_REQUESTED, E.SYNTHESIS_INCOMPLETE, E.TOOL_CALL_IN_SYNTHESIS),
         "the no-tool turn is kept only with a complete `<response>`; calls written in it are not run"),
    Rule("Early final synthesis", "WeAgent Table 5", ("synthesis_reserve_tokens",),
         "kit.harness.loop.Harness._episode", (E.SYNTHESIS_REQUESTED,),
         "once at most the reserve remains in the context, tools are disabled and an answer is requested"),
    Rule("Total context limit", "WeAgent Table 5", ("max_context_tokens",), "kit.harness.loop.Harness._context",
         (E.CONTEXT_LIMIT,), "the episode ends; the trajectory is excluded from training"),
    Rule("Wall-clock limit", "WeAgent Table 5", ("wall_clock_s",), "kit.harness.loop.Harness.run",
         (E.WALL_CLOCK,), "the episode ends; the trajectory is excluded from training"),
    Rule("Self-recovery switch", "WeAgent §6.2, Table 3", ("self_recovery",), "kit.harness.loop.Harness._episode",
         (E.BUDGET_EXHAUSTED, E.INVALID_ACTION),
         "on (default, FA-GSPO): every recovery rule below applies; off: the vanilla-GSPO rollout of Table 3 "
         "(column self_recovery=False), which can end in status `budget_exhausted` or `invalid_action`"),
    Rule("Excluded trajectories", "WeAgent Table 5", (), "kit.rl.eligibility.check",
         (E.CONTEXT_LIMIT, E.WALL_CLOCK, E.EPISODE_ERROR, E.SYNTHESIS_INCOMPLETE, E.OVERLONG_KEPT,
          E.BUDGET_EXHAUSTED, E.INVALID_ACTION),
         "never trained on, whatever answer followed"),
    Rule("Argument repair", "WeAgent Table 5", (), "kit.harness.hooks.ArgumentRepairHook.before_call",
         (E.ARGUMENT_REPAIR, E.INVALID_CALL),
         "only unambiguous aliases, scalar→list and ignored extra fields (`kit.harness.recovery.repair_call`); "
         "anything else is a structured error. The first built-in hook"),
    Rule("Duplicate suppression", "WeAgent Table 5", (), "kit.harness.hooks.DuplicateHook.before_call",
         (E.DUPLICATE_SUPPRESSED,), "the same call as the preceding executed one is not run; a corrective observation "
         "(`kit.harness.recovery.DuplicateSuppressor`). The second built-in hook"),
    Rule("Repeated format errors", "WeAgent Table 5", ("loop_guard_repeats",), "kit.harness.recovery.LoopGuard.invalid",
         (E.LOOP_GUARD, E.NO_ACTION, E.INVALID_CALL),
         "after two identical invalid calls (or turns without an action) a loop-guard observation (for calls: "
         "inside the built-in argument-repair hook, which alone sees them invalid)"),
    Rule("Harness hooks", "kit", (), "kit.harness.hooks.HookChain.before_call",
         (E.HOOK_DENIED, E.HOOK_REWRITE, E.HOOK_STOP, E.HOOK_OBSERVATION, E.SYNTHESIS_REQUESTED, E.EPISODE_ERROR),
         "hooks given to the harness (`Harness(hooks=[...])`) decide about each call after the built-in ones: allow, "
         "deny with an observation, rewrite, or stop into the synthesis turn (reason `hook_stop`); they may replace an "
         "executed call's observation; a hook that raises ends the episode with status error naming it"),
    Rule("Overlong response", "WeAgent Table 5", ("max_response_tokens", "overlong_regenerations"),
         "kit.harness.loop.Harness._generate", (E.OVERLONG_REGENERATED, E.OVERLONG_KEPT),
         "an overlong response is discarded and regenerated once; a second overlong one is kept, untrainable"),
    Rule("Tool failure", "WeAgent §3.2", ("tool_timeout_s", "code_timeout_s"), "kit.harness.tools.execute",
         (E.TOOL_ERROR,), "a failing or slow tool becomes a structured error observation; the episode goes on"),
    Rule("General result threshold", "WeAgent Table 5", ("persist_threshold_chars", "persist_preview_chars"),
         "kit.harness.loop.Harness._observation_text", (E.RESULT_PERSISTED, E.PERSIST_FAILED),
         "a long result is saved to tool_results/ with an in-context preview (tools with persist_exempt skip it)"),
    Rule("Web extraction length", "WeAgent Table 5", ("extract_max_chars", "extract_refeed"),
         "kit.harness.tools.web_extract", (), "at most five 5,000-character summaries, one per URL"),
    Rule("Per-tool result cap and re-feed limit", "WeAgent Table 4", ("image_search_refeed", "reverse_search_refeed",
                                                                    "reverse_search_max_vision_tokens",
                                                                    "code_refeed", "code_max_images"),
         "kit.harness.loop.Harness._observation_text", (E.RESULT_CAPPED, E.IMAGES_NOT_SHOWN, E.IMAGES_NOT_REGISTERED),
         "ToolSpec.max_result_chars / refeed_limit bound what any tool (native or added) shows the model"),
    Rule("Image re-feed", "WeAgent §3.1, Table 2", ("refeed_images",), "kit.harness.context.ContextBuilder.build", (),
         "registered images are shown again in every later turn; off: the no-re-feed ablation (a text note instead)"),
    Rule("Tool set", "WeAgent Table 4; POINTS-Seeker §4.1 (tool_set points_seeker)", ("tools_enabled", "tool_set"),
         "kit.harness.toolsets.config_tool_specs", (E.INVALID_CALL,),
         "only enabled native tools and the config's named tool set (plus tools given to the harness) are offered; "
         "a call to another is an `unknown_tool` error"),
    Rule("Code sandbox limits", "WeAgent Table 4", ("code_isolation", "code_memory_mb", "code_cpu_s"),
         "kit.harness.sandbox.CodeSandbox", (E.TOOL_ERROR, E.SANDBOX_CLOSE_ERROR),
         "execute_code runs isolated (bubblewrap, or rlimits) within memory and CPU limits; a breach is a tool error"),
    Rule("Turn grammar", "WeAgent Table 6; POINTS-Seeker §3.2.2 (protocol points_seeker: `<answer>`)", ("protocol",),
         "kit.harness.parsing.parse_turn",
         (E.EXTRA_ACTIONS_IGNORED, E.MULTIPLE_RESPONSES, E.RESPONSE_UNCLOSED, E.TOOL_CALL_AFTER_RESPONSE,
          E.TEXT_OUTSIDE_GRAMMAR, E.THINK_MISSING, E.THINK_UNCLOSED, E.MULTIPLE_THINK, E.THINK_OPENED_BY_TEMPLATE),
         "one action per turn; each departure is recorded and costs the format term (Eq. 5)"),
    Rule("Image citations", "WeAgent Table 6 rule 5", (), "kit.harness.loop.Harness._finish",
         (E.UNKNOWN_CITATION,), "`<IMG: name>` must name a registered image; others are recorded, not resolved"),
    Rule("System prompt", "WeAgent Table 6; POINTS-Seeker: kit text (its prompt is a figure)",
         ("timezone", "timezone_label", "prompt_time", "untrusted_notice", "protocol"),
         "kit.harness.prompts.system_prompt", (),
         "CURRENT_TIME at hour granularity in the zone (smoke: pinned); an optional rule that tool results are data"),
    Rule("Task text and observations are data", "kit", (), "kit.harness.neutralize.neutralize_control_tokens",
         (E.CONTROL_TOKENS_NEUTRALIZED,), "chat-control strings cannot open a turn or add image placeholders"),
    Rule("Evidence integrity", "kit", ("max_image_pixels",), "kit.harness.registry.EvidenceRegistry",
         (E.EVIDENCE_MODIFIED, E.IMAGE_REJECTED),
         "an image failing the decoder's checks is not registered; one changed on disk is not shown again"),
    Rule("Added tools' own findings", "kit", (), "kit.harness.tool_spec.ToolContext.event", (E.TOOL_NOTE,),
         "a tool records what it found with `ctx.event(EventType.TOOL_NOTE, name=..., ...)`"),
    Rule("Failures are recorded", "kit", (), "kit.harness.loop.Harness.run", (E.EPISODE_ERROR, E.SANDBOX_CLOSE_ERROR),
         "a failing component ends the episode with status error and its reason; the record is always written"),
    Rule("V-Fold rendering", "POINTS-Seeker §3.3, Table 8",
         ("context_strategy", "context_tau", "context_keep", "vfold_mode", "vfold_layout", "vfold_only_if_smaller",
          "vfold_require_lossless"),
         "kit.vfold.training.render_trajectory", (E.VFOLD_KEPT_AS_TEXT, E.VFOLD_FOLDED_LOSSY),
         "stale observations become images (paper mode: all, Table 8 layout; kit mode: only if smaller and "
         "lossless, else text); a lossy fold is recorded"),
    Rule("Faithful normalization", "WeAgent §4.5", (), "kit.data.normalize",
         (E.OBSERVATION_WITHOUT_CALL, E.OBSERVATION_MISSING, E.OBSERVATION_RECONSTRUCTED, E.OBSERVATION_HASH_MISMATCH,
          E.OBSERVATION_IMAGES_MISSING, E.INPUT_IMAGE_MISSING, E.INPUT_IMAGE_MISMATCH, E.ROUNDS_AFTER_ANSWER,
          E.TOOL_HARD_FAILURE, E.FINAL_ANSWER_MISMATCH, E.MULTIPLE_RESPONSES, E.RESULT_PERSISTED),
         "a trace is converted without inventing anything; what it lacks is an event and may make it untrainable"),
    Rule("Cited images support the answer", "kit check on synthesized trajectories (issue 27; WeAgent §4.4 keeps "
         "correct and complete ones)", (), "kit.data.sample.judge_episode", (E.CITATION_MISMATCH,),
         "an expert trajectory citing an image whose page title, URL and caption all name another entity than its "
         "answer is flagged (kit.data.normalize.trainable.citation_mismatches); the outcome says so"),
)


UNCHANGED = "unchanged"
#: Each rule under ``self_recovery=False`` (WeAgent Table 3: "Vanilla GSPO omits trajectory self-recovery
#: and invalid-trajectory filtering"); a rule not named here applies unchanged (a safety limit, a tool
#: limit or the grammar, not a recovery). Events are still recorded, so analysis can count what happened.
VANILLA: dict[str, str] = {
    "Self-recovery switch": "the vanilla rollout",
    "Turn / executed-call limits": "the episode ends at the budget with status `budget_exhausted` and no answer "
                                   "(no synthesis turn)",
    "Max-turn finalization": "off: no tool-free answer turn is requested",
    "Early final synthesis": "off: tools stay enabled; the context limit itself ends the episode",
    "Total context limit": "unchanged (safety limit)",
    "Wall-clock limit": "unchanged (safety limit)",
    "Excluded trajectories": "unchanged for FA-GSPO; vanilla GSPO does not filter: every trajectory with a "
                             "computable reward is in the group normalization",
    "Argument repair": "off: a call needing any serialization or argument repair is refused as `repair_required` "
                       "(`kit.harness.recovery.require_exact`; schema defaults are still filled)",
    "Duplicate suppression": "off: the repeated call is executed",
    "Harness hooks": "unchanged (they run); a stop ends the episode with status `budget_exhausted` and no synthesis "
                     "turn, as the budgets do",
    "Repeated format errors": "off: the first invalid call or turn without an action ends the episode "
                              "(`invalid_call` / `no_action`, then status `invalid_action`); no observation, no guard",
    "Overlong response": "off: kept as the engine cut it at max_response_tokens (`overlong_kept`, detail "
                         "self_recovery false); the episode goes on with it",
    "Tool failure": "unchanged (the environment's result, not a repair)",
    "Tool set": "unchanged; a call to another tool is an invalid call and ends the episode",
    "Code sandbox limits": "unchanged (safety limit)",
    "Turn grammar": "unchanged (the same parse; departures cost the format term)",
    "Task text and observations are data": "unchanged (safety)",
    "Evidence integrity": "unchanged (safety)",
    "Faithful normalization": "unchanged (data conversion, not rollouts)",
    "Cited images support the answer": "unchanged (a check on built data, not rollouts)",
}


def rules_for(event: E | str) -> list[Rule]:
    """The rules that emit ``event``."""
    return [r for r in RULES if E(event) in r.events]


def rules_markdown() -> str:
    """``docs/rules.md``: a summary table (rule → config fields → events), then one section per rule with its
    source, implementing function and effect (regenerate with
    ``python -c "from kit.harness.rules import rules_markdown; print(rules_markdown(), end='')" > docs/rules.md``)."""
    def codes(xs) -> str:
        return ", ".join(f"`{x}`" for x in xs) or "—"

    head = ("# Harness rules: paper row → config field → function → events\n\n"
            "Generated from `kit/harness/rules.py` (`RULES`); a test keeps this page equal to it and checks that every\n"
            "event type (`kit.harness.events.EventType`) and every `HarnessConfig` field appears in it. An episode\n"
            "record's `events` list holds the events with the turn and details.\n\n"
            "Column `self_recovery=False`: the rule in the vanilla-GSPO rollout (WeAgent Table 3; "
            "`HarnessConfig.self_recovery`).\n\n"
            "| rule | config fields | events | self_recovery=False |\n|---|---|---|---|\n")
    rows = [f"| [{r.name}](#{_anchor(r.name)}) | {codes(r.config)} | {codes(e.value for e in r.events)} | {r.vanilla} |"
            for r in RULES]
    sections = [f"\n## {r.name}\n\n{r.effect[0].upper() + r.effect[1:]}.\n\n- source: {r.source}\n"
                f"- config fields: {codes(r.config)}\n- implemented by: `{r.implementation}`\n"
                f"- events: {codes(e.value for e in r.events)}\n- self_recovery=False: {r.vanilla}\n" for r in RULES]
    return head + "\n".join(rows) + "\n" + "".join(sections)


def _anchor(title: str) -> str:
    # the toc extension's slug: lower case, punctuation dropped, spaces to hyphens
    import re

    return re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", title.lower()).strip())


__all__ = ["RULES", "UNCHANGED", "VANILLA", "Rule", "rules_for", "rules_markdown"]

"""The episode loop of WeAgent-Harness (WeAgent §3, Tables 4–6).

:class:`Harness` runs one task as one episode: Table 6 prompts, one action per turn, argument repair,
structured error observations, duplicate suppression, the loop guard, regeneration of an overlong
response, persistence of large results, and the turn / call / context / wall-clock budgets with the
final no-tool synthesis turn. ``HarnessConfig.self_recovery=False`` turns every recovery rule off (the
vanilla-GSPO rollout of WeAgent Table 3; each rule's behaviour then: docs/rules.md) while the safety
limits (wall clock, context, sandbox) stay. Hooks (:mod:`kit.harness.hooks`) decide about each call after the
kit's own pre-call rules, which run as its built-in hooks. Every intervention is an :class:`~kit.harness.episode.Event`; the
:class:`~kit.harness.episode.EpisodeRecord` is returned whatever happens (policy failure, corrupt
input image, wall clock) — nothing a model or a backend does escapes as an exception.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kit.harness.config import HarnessConfig
from kit.harness.context import ContextBuilder, TokenLedger, make_context_builder
from kit.harness.episode import EpisodeRecord, Event, Status, Task
from kit.harness.errors import ToolError
from kit.harness.events import EventType
from kit.harness.hooks import Call, EpisodeView, HookChain, HookError, as_hook, builtin_hooks
from kit.harness.neutralize import neutralize_control_tokens  # also re-exported: the old import path
from kit.harness.parsing import RawCall, cited_images, clean_text, parse_turn
from kit.harness.prompts import NO_ACTION_MESSAGE, SYNTHESIS_PROMPT, system_prompt, turn_protocol, user_prompt  # noqa: F401
from kit.harness.recovery import LoopGuard
from kit.harness.registry import EvidenceRegistry
from kit.harness.summarize import ExtractiveSummarizer
from kit.harness.tool_spec import policy_vision_token_pixels
from kit.harness.tools import ToolContext, ToolSpec, execute
from kit.types import AssistantTurn, ContentPart, Message, Policy, PolicyError, SamplingParams, SearchBackend
from kit.web.budget import time_budget  # stdlib only: kit.web.fetch would pull httpx into this import

TERMINAL_OK = {"answered", "max_turns_synthesis"}


TOOL_RESULTS_DIR = "tool_results"  # read-only inside the code sandbox (CodeSandbox readonly_dirs)


def write_no_follow(workspace: Path, rel: str, data: bytes) -> None:
    """Write ``workspace/rel`` (one sub-folder deep) without following a symlink at either level, so
    code run in the episode cannot redirect the harness's writes outside the workspace.

    Raises:
        OSError: the folder or file is a symlink (ELOOP) or cannot be written.
    """
    folder, name = rel.split("/", 1)
    (workspace / folder).mkdir(exist_ok=True)
    dfd = os.open(workspace / folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644, dir_fd=dfd)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    finally:
        os.close(dfd)


def clean_turn(turn: AssistantTurn) -> AssistantTurn:
    """An :class:`AssistantTurn` with every model-written string made serializable."""
    calls = [c.model_copy(update={"id": clean_text(c.id), "name": clean_text(c.name), "arguments": clean_text(c.arguments)})
             for c in turn.tool_calls]
    return turn.model_copy(update={"text": clean_text(turn.text or ""), "tool_calls": calls})


class _EpisodeEnd(Exception):
    def __init__(self, status: Status, reason: str = ""):
        super().__init__(reason)
        self.status = status
        self.reason = reason


def _text(s: str) -> list[ContentPart]:
    return [ContentPart(type="text", text=s)]


def _default_sandbox_factory(workspace: Path, config: HarnessConfig) -> Callable[[], Any]:
    def make():
        from kit.harness.code_exec import CodeSandbox

        return CodeSandbox(workspace, timeout_s=config.code_timeout_s, memory_mb=config.code_memory_mb,
                           cpu_s=config.code_cpu_s, isolation=config.code_isolation,
                           readonly_dirs=(TOOL_RESULTS_DIR,))

    return make


class Harness:
    """Runs episodes of one policy against one search backend.

    Args:
        policy: any :class:`kit.types.Policy`; its ``token_counter`` counts the context budget and its
            optional ``max_context_tokens`` caps it further.
        backend: any :class:`kit.types.SearchBackend` (wrap it in :class:`kit.web.cache.CachedBackend`).
        config: budgets and rules (Table 5 defaults).
        sampling: sampling parameters; ``seed`` (if set) is varied per turn and attempt.
        summarizer: goal-conditioned summarizer for ``web_extract`` (default: extractive BM25).
        context_builder: model-facing context strategy (default: full re-feed, or the Table 2
            no-re-feed ablation when ``config.refeed_images`` is False).
        labels: strings stored on every record (e.g. ``"smoke"`` for tiny random models).
        tools: extra tools for this harness (:func:`kit.harness.tool_spec.tool`), offered after the enabled
            ones; every recovery rule applies to them as to the native five (docs/tools.md).
        hooks: guardrails run in order after the kit's built-in pre-call rules (:mod:`kit.harness.hooks`;
            docs/harness.md "Hooks"); kept as the ``hooks`` attribute.

    Raises:
        TypeError: a hook with none of ``before_call`` / ``after_observation`` / ``episode_end`` that is not a function.
    """

    def __init__(self, policy: Policy, backend: SearchBackend, config: HarnessConfig | None = None, *,
                 sampling: SamplingParams | None = None, summarizer=None, context_builder: ContextBuilder | None = None,
                 sandbox_factory: Callable[[Path, HarnessConfig], Callable[[], Any]] | None = None,
                 labels: list[str] | tuple[str, ...] = (), tools: list[ToolSpec] | tuple[ToolSpec, ...] = (),
                 hooks: Sequence[Any] = ()):
        self.policy = policy
        self.backend = backend
        self.config = config or HarnessConfig()
        self.sampling = sampling or SamplingParams()
        self.summarizer = summarizer or ExtractiveSummarizer()
        self.context_builder = context_builder or make_context_builder(self.config, policy=policy)
        self.sandbox_factory = sandbox_factory or _default_sandbox_factory
        self.labels = list(labels)
        self.hooks = [as_hook(h) for h in hooks]
        from kit.harness.toolsets import config_tool_specs  # the config's tool set + these tools

        self.specs = config_tool_specs(self.config, extra=tools)
        self.schemas = [s.schema() for s in self.specs.values()]
        self.protocol = turn_protocol(self.config.protocol)  # prompt, answer tag, harness messages

    # ------------------------------------------------------------------------------------------ public
    async def run(self, task: Task, workspace: str | Path, episode_id: str | None = None) -> EpisodeRecord:
        """Run ``task`` in ``workspace`` (created if needed) and return its record.

        The record's ``status`` is one of answered / max_turns_synthesis / context_limit / wall_clock /
        error, and without self-recovery budget_exhausted / invalid_action; ``trainable`` is False for
        context-limit, wall-clock, error, budget-exhausted and invalid-action episodes and for a synthesis turn
        without a complete ``<response>`` (Table 5).
        """
        t0 = time.monotonic()
        ws = Path(workspace)
        task = task.model_copy(update={"question": clean_text(task.question)})
        rec = EpisodeRecord(id=clean_text(episode_id or f"{task.id}-{uuid.uuid4().hex[:8]}"), task=task,
                            config_hash=self.config.config_hash(), policy=getattr(self.policy, "name", ""),
                            backend=getattr(self.backend, "name", ""), workspace=str(ws.absolute()), labels=self.labels)
        # absolute in memory (a later chdir cannot break it); episode files store it relative (kit.harness.portable)
        # The record keeps the question as given; user_prompt() neutralizes it for the model (task text is data).
        n_control = neutralize_control_tokens(task.question)[1]
        if n_control:
            rec.events.append(Event(type=EventType.CONTROL_TOKENS_NEUTRALIZED, turn=0,
                                    detail={"field": "question", "count": n_control}))
        registry = ctx = None
        st = _State(rec, None, None, t0)  # type: ignore[arg-type]  # registry and ctx are set before the episode runs
        st.guard = LoopGuard(self.config.loop_guard_repeats)
        try:
            st.hooks = HookChain(builtin_hooks(self.specs, st.guard, self.config.self_recovery, self.protocol.harness_text),
                                 self.hooks, self.specs)
            ws.mkdir(parents=True, exist_ok=True)
            registry = EvidenceRegistry(ws, max_pixels=self.config.max_image_pixels)
            ctx = ToolContext(registry=registry, backend=self.backend, config=self.config, summarizer=self.summarizer,
                              sandbox_factory=self.sandbox_factory(ws, self.config), events=rec.events,
                              vision_token_pixels=policy_vision_token_pixels(self.policy))
            st.registry, st.ctx = registry, ctx
            with time_budget(self.config.wall_clock_s):  # backend retries never sleep past the episode's end
                await asyncio.wait_for(self._episode(st), timeout=self.config.wall_clock_s)
        except TimeoutError:
            self._end(st, "wall_clock", f"wall-clock budget of {self.config.wall_clock_s:.0f} s exhausted")
        except _EpisodeEnd as e:
            self._end(st, e.status, e.reason)
        except HookError as e:  # a guardrail's failure: the reason names the hook and the method
            self._end(st, "error", clean_text(str(e))[:2000])
        except asyncio.CancelledError:
            task_ = asyncio.current_task()
            if task_ is not None and task_.cancelling():
                raise  # the caller cancelled this episode: honour it (the finally block still cleans up)
            self._end(st, "error", "a component raised CancelledError without a cancellation request")
        except Exception as e:  # last line of defence: the record is still written
            self._end(st, "error", clean_text(f"{type(e).__name__}: {e}")[:2000])
        finally:
            if ctx is not None and ctx.sandbox is not None:
                try:
                    await ctx.sandbox.close()
                except Exception as e:  # closing must not lose the record either
                    rec.events.append(Event(type=EventType.SANDBOX_CLOSE_ERROR, turn=st.turn, detail={"error": str(e)}))
            rec.images = list(registry.images) if registry is not None else []
            rec.turns, rec.tool_calls = st.turn, st.calls
            rec.timings.wall_s = round(time.monotonic() - t0, 4)
            rec.timings.policy_s = round(st.policy_s, 4)
            rec.timings.tool_s = round(st.tool_s, 4)
            rec.timings.harness_s = round(max(0.0, rec.timings.wall_s - st.policy_s - st.tool_s), 4)
            rec.usage = dict(st.usage)
            rec.trainable = rec.status in TERMINAL_OK and rec.final_response is not None and st.response_complete
        if st.hooks is not None and st.hooks.hooks:  # they see the complete record
            await st.hooks.episode_end(rec, lambda e: self._hook_failed(st, e))
        return rec

    # ------------------------------------------------------------------------------------------ internals
    def _end(self, st: _State, status: Status, reason: str) -> None:
        st.rec.status = status
        st.rec.error = reason or None
        st.rec.events.append(Event(type=EventType.EPISODE_ERROR if status == "error" else EventType(status), turn=st.turn,
                                   detail={"reason": reason}))

    def _hook_failed(self, st: _State, e: HookError) -> None:
        """An ``episode_end`` hook raised: the finished record becomes an error record naming it."""
        self._end(st, "error", clean_text(str(e))[:2000])
        st.rec.trainable = False

    async def _episode(self, st: _State) -> None:
        cfg, rec = self.config, st.rec
        user_files = []
        for p in rec.task.input_images:
            entry = st.registry.register_file(Path(p), "user_image", source_url=str(p))  # ImageError -> error status
            user_files.append(entry.filename)
        prompt = system_prompt(self.schemas, untrusted_notice=cfg.untrusted_notice, tz=cfg.timezone, protocol=cfg.protocol,
                               tz_label=cfg.timezone_label, now=cfg.prompt_time)
        rec.messages.append(Message(role="system", content=_text(prompt)))
        rec.messages.append(Message(role="user", content=[ContentPart(type="image", image=f) for f in user_files]
                                    + _text(user_prompt(rec.task.question, user_files))))
        st.ledger = TokenLedger(self.policy.token_counter, st.registry)
        model_ctx = getattr(self.policy, "max_context_tokens", None) or math.inf
        st.max_ctx = int(min(cfg.max_context_tokens, model_ctx))
        synthesis_reason = None
        while synthesis_reason is None:
            if st.turn >= cfg.max_turns:
                synthesis_reason = ("max_turns", f"You have used all {cfg.max_turns} regular turns.")
                break
            if st.calls >= cfg.max_calls:
                synthesis_reason = ("max_calls", f"You have used all {cfg.max_calls} tool calls.")
                break
            ctx_msgs, prompt_tokens = self._context(st, self.schemas)
            # without self-recovery no early synthesis: the context limit itself ends the episode
            if cfg.self_recovery and st.max_ctx - prompt_tokens <= cfg.synthesis_reserve_tokens:
                synthesis_reason = ("context", "The context budget is almost used up.")
                break
            st.turn += 1
            mark = (time.perf_counter(), st.policy_s, st.tool_s)
            turn = await self._generate(st, ctx_msgs, self.schemas, prompt_tokens)
            done = await self._act(st, turn)
            spent = time.perf_counter() - mark[0] - (st.policy_s - mark[1]) - (st.tool_s - mark[2])
            rec.timings.harness_turn_ms.append(round(1000 * (spent + st.harness_overheads[-1]), 3))
            if done:
                return
            if st.stop is not None:  # a hook stopped the regular turns: the same end as a budget
                synthesis_reason = ("hook_stop", st.stop)
        if not cfg.self_recovery:  # vanilla rollout: the budget ends the episode, no tool-free answer turn
            raise _EpisodeEnd("budget_exhausted", f"{synthesis_reason[0]}: {synthesis_reason[1]}")
        await self._synthesis(st, *synthesis_reason)

    def _context(self, st: _State, schemas: list[dict]) -> tuple[list[Message], int]:
        t = time.perf_counter()
        ctx_msgs = self._drop_tampered(st, self.context_builder.build(st.rec.messages, st.registry))
        assert st.ledger is not None  # set at the start of _episode
        n = st.ledger.prompt_tokens(ctx_msgs, schemas)
        st.usage["max_prompt_tokens"] = max(st.usage.get("max_prompt_tokens", 0), n)
        st.harness_overheads.append(time.perf_counter() - t)
        if n > st.max_ctx:
            raise _EpisodeEnd("context_limit", f"prompt of {n} tokens exceeds the {st.max_ctx}-token context")
        return ctx_msgs, n

    def _drop_tampered(self, st: _State, msgs: list[Message]) -> list[Message]:
        """Keep images that were replaced, removed or symlinked after registration (e.g. by code run
        in the episode) out of the model's context, and record it once per file."""
        bad = {r for m in msgs for r in m.image_refs() if r in st.tampered or not st.registry.intact(r)}
        if not bad:
            return msgs
        for r in sorted(bad - st.tampered):
            st.rec.events.append(Event(type=EventType.EVIDENCE_MODIFIED, turn=st.turn, detail={"image": r}))
        st.tampered |= bad
        out = []
        for m in msgs:
            if bad.intersection(m.image_refs()):
                parts = [p if not (p.type == "image" and p.image in bad) else
                         ContentPart(type="text", text=f"[{p.image} was modified after registration and is not shown]")
                         for p in m.content]
                m = m.model_copy(update={"content": parts})
            out.append(m)
        return out

    async def _generate(self, st: _State, ctx_msgs: list[Message], schemas: list[dict],
                        prompt_tokens: int) -> AssistantTurn:
        """One policy call; an overlong response is discarded and regenerated once (Table 5). Without
        self-recovery it is kept as the engine cut it (``overlong_kept``, ``self_recovery: false``)."""
        cfg = self.config
        max_tokens = max(1, min(cfg.max_response_tokens, st.max_ctx - prompt_tokens))
        regenerations = cfg.overlong_regenerations if cfg.self_recovery else 0
        for attempt in range(regenerations + 1):
            seed = None if self.sampling.seed is None else self.sampling.seed + 7919 * st.turn + attempt
            sampling = self.sampling.model_copy(update={"max_tokens": max_tokens, "seed": seed})
            t = time.monotonic()
            try:
                turn = await self.policy.generate(ctx_msgs, schemas, sampling, str(st.registry.workspace))
            except PolicyError as e:
                if getattr(e, "context_overflow", False):
                    raise _EpisodeEnd("context_limit", f"the model rejected the prompt as too long: {e}") from e
                raise _EpisodeEnd("error", f"policy failed: {e}") from e
            finally:
                st.policy_s += time.monotonic() - t
            if not isinstance(turn, AssistantTurn):
                raise _EpisodeEnd("error", f"policy returned {type(turn).__name__}, not an AssistantTurn")
            turn = clean_turn(turn)
            st.usage["prompt_tokens"] = st.usage.get("prompt_tokens", 0) + turn.usage.prompt_tokens
            st.usage["completion_tokens"] = st.usage.get("completion_tokens", 0) + turn.usage.completion_tokens
            overlong = turn.finish_reason == "length" or turn.usage.completion_tokens > cfg.max_response_tokens
            if not overlong:
                return turn
            detail = {"completion_tokens": turn.usage.completion_tokens, "chars": len(turn.text),
                      "preview": turn.text[:200], "attempt": attempt + 1, "self_recovery": cfg.self_recovery}
            if attempt < regenerations:
                st.rec.events.append(Event(type=EventType.OVERLONG_REGENERATED, turn=st.turn, detail=detail))
                continue
            if prompt_tokens + turn.usage.completion_tokens > st.max_ctx:
                raise _EpisodeEnd("context_limit", "response crossed the context limit")
            st.rec.events.append(Event(type=EventType.OVERLONG_KEPT, turn=st.turn, detail=detail))
        return turn

    def _assistant_message(self, st: _State, turn: AssistantTurn) -> Message:
        m = Message(role="assistant", content=_text(turn.text), tool_calls=list(turn.tool_calls), turn=st.turn)
        st.rec.messages.append(m)
        return m

    def _finish(self, st: _State, response: str, complete: bool, status: Status) -> None:
        rec = st.rec
        rec.final_response, rec.status = response, status
        st.response_complete = complete
        for name in cited_images(response):
            try:
                rec.cited_images.append(st.registry.resolve(name).filename)
            except ToolError:
                rec.uncited_refs.append(name)
                rec.events.append(Event(type=EventType.UNKNOWN_CITATION, turn=st.turn, detail={"ref": name}))

    async def _act(self, st: _State, turn: AssistantTurn) -> bool:
        """Apply the turn's single action (Table 6). Returns True when the episode is answered.

        Each grammar departure of the parsed turn is an event of the same name (docs/contracts.md "Turn
        grammar"); a turn without any action records only ``no_action`` (its departures in the detail).
        """
        rec = st.rec
        self._assistant_message(st, turn)
        parsed = parse_turn(turn.text, turn.tool_calls, truncated=turn.finish_reason == "length",
                            answer_tag=self.protocol.answer_tag)
        first_call = parsed.calls[0] if parsed.calls else None
        if not parsed.has_action:
            rec.events.append(Event(type=EventType.NO_ACTION, turn=st.turn,
                                    detail={"preview": turn.text[:200], "departures": parsed.departure_codes()}))
            if not self.config.self_recovery:  # no format prompt: a turn without an action ends a vanilla rollout
                raise _EpisodeEnd("invalid_action", "a turn with neither a tool call nor a response")
            guard = st.guard.invalid("<no action>", "", no_action=True)
            text = self.protocol.harness_text(self.protocol.no_action_message + ("" if guard.allowed else "\n\n" + guard.message))
            if not guard.allowed:
                rec.events.append(Event(type=guard.event, turn=st.turn, detail={"call": "<no action>"}))
            rec.messages.append(Message(role="user", content=_text(text), intervention=True, turn=st.turn))
            return False
        self._grammar_events(st, parsed)
        if first_call is None:
            assert parsed.response is not None  # an action that is not a call is a response
            self._finish(st, parsed.response, parsed.response_complete, "answered")
            return True
        await self._call(st, first_call)
        return False

    def _grammar_events(self, st: _State, parsed) -> None:
        """One event per departure and note of a parsed turn, on the current turn."""
        for d in parsed.departures:
            st.rec.events.append(Event(type=EventType(d.code), turn=st.turn, detail=d.detail))
        for n in parsed.notes:
            st.rec.events.append(Event(type=EventType(n), turn=st.turn))

    def _observation_message(self, st: _State, call: RawCall, tool: str, text: str, images: Sequence[str] = (),
                             intervention: bool = False) -> None:
        text, n = neutralize_control_tokens(clean_text(text))
        if n:
            st.rec.events.append(Event(type=EventType.CONTROL_TOKENS_NEUTRALIZED, turn=st.turn,
                                       detail={"field": "observation", "tool": tool, "count": n}))
        parts = _text(text) + [ContentPart(type="image", image=f) for f in images]
        st.rec.messages.append(Message(role="tool", content=parts, tool_call_id=call.id, name=tool,
                                       intervention=intervention, turn=st.turn))

    def _view(self, st: _State) -> EpisodeView:
        return EpisodeView(st.rec, st.turn, st.calls, self.config)

    async def _call(self, st: _State, call: RawCall) -> None:
        """Run one parsed call through the hooks (the kit's recovery rules first), then execute it."""
        assert st.hooks is not None  # built before the episode runs
        verdict = await st.hooks.before_call(Call.from_raw(call), self._view(st))
        final, d = verdict.call, verdict.decision
        if d.action == "stop" and d.end is not None:
            raise _EpisodeEnd(d.end, d.reason)
        if d.action != "allow":  # deny, or stop: the model sees why the call did not run
            self._observation_message(st, call, final.name or "invalid", d.observation, intervention=True)
            if d.action == "stop":
                st.stop = d.reason
            return
        spec = self.specs[final.name]
        st.ctx.turn = st.turn
        st.calls += 1
        t = time.monotonic()
        try:
            obs, err = await execute(spec, final.plain_arguments(), st.ctx, self.config.tool_timeout_s), None
        except ToolError as e:
            obs, err = None, e
        finally:
            st.tool_s += time.monotonic() - t
        if err is not None:
            st.rec.events.append(Event(type=EventType.TOOL_ERROR, turn=st.turn,
                                       detail={"tool": final.name, "code": err.code, "message": err.message}))
            self._observation_message(st, call, final.name, await st.hooks.after_observation(
                final, err.observation_json(), self._view(st)))
            return
        assert obs is not None
        text = await st.hooks.after_observation(final, obs.text, self._view(st))
        shown, images = self._observation_text(st, spec, text, list(obs.images))
        if shown is None:
            self._observation_message(st, call, final.name, images[0])
            return
        self._observation_message(st, call, final.name, shown, images)

    def _observation_text(self, st: _State, spec: ToolSpec, text: str, images: list[str]) -> tuple[str | None, list[str]]:
        """Apply the tool's result policy: its hard cap (``max_result_chars``), its re-feed limit and Table 5's
        persistence (unless ``persist_exempt``). Returns ``(text, images)``, or ``(None, [error body])``
        when a long result could not be saved."""
        rec, cfg = st.rec, self.config
        if spec.max_result_chars is not None and len(text) > spec.max_result_chars:
            rec.events.append(Event(type=EventType.RESULT_CAPPED, turn=st.turn,
                                    detail={"tool": spec.name, "chars": len(text), "cap": spec.max_result_chars}))
            text = text[: spec.max_result_chars] + f"\n\n[Result cut at {spec.max_result_chars} of {len(text)} characters.]"
        cap = spec.refeed_cap(cfg)
        if len(images) > cap:
            rec.events.append(Event(type=EventType.IMAGES_NOT_SHOWN, turn=st.turn,
                                    detail={"tool": spec.name, "shown": cap, "not_shown": images[cap:]}))
            note = f"\n[{len(images) - cap} more registered images not shown: {', '.join(images[cap:])}]"
            images = images[:cap]
        else:
            note = ""
        if spec.persist_exempt or len(text) <= cfg.persist_threshold_chars:
            return text + note, images
        rel = f"{TOOL_RESULTS_DIR}/turn{st.turn:02d}_{spec.name}.txt"
        try:
            write_no_follow(st.registry.workspace, rel, text.encode("utf-8"))
        except OSError as e:  # e.g. a symlink planted at the name (ELOOP): refuse, report, go on
            rec.events.append(Event(type=EventType.PERSIST_FAILED, turn=st.turn, detail={"file": rel, "error": str(e)}))
            err = ToolError("persist_failed", f"the {len(text)}-character result could not be saved as {rel}: "
                                              f"{e.strerror or e}", preview=text[: cfg.persist_preview_chars])
            return None, [err.observation_json()]
        rec.events.append(Event(type=EventType.RESULT_PERSISTED, turn=st.turn,
                                detail={"tool": spec.name, "chars": len(text), "file": rel}))
        # the preview names a way to read the rest only when this run offers one (a tool the model lacks is a lie)
        more = ("read it with execute_code if you need more." if "execute_code" in self.specs
                else "no tool of this run reads files, so only this preview is available.")
        text = (text[: cfg.persist_preview_chars]
                + f"\n\n[Result truncated: {len(text)} characters in total. The full result is saved as {rel}; {more}]")
        return text + note, images

    async def _synthesis(self, st: _State, reason_code: str, reason: str) -> None:
        """The final no-tool evidence-synthesis turn (Table 5 "Max-turn finalization" / "Early final
        synthesis"); kept as an answer only with a complete ``<response>`` (the last complete one when
        there are several, as in :meth:`_act`)."""
        rec = st.rec
        rec.events.append(Event(type=EventType.SYNTHESIS_REQUESTED, turn=st.turn, detail={"reason": reason_code}))
        rec.messages.append(Message(role="user", content=_text(self.protocol.synthesis_prompt.format(reason=reason)),
                                    intervention=True, turn=st.turn))
        ctx_msgs, prompt_tokens = self._context(st, [])
        st.turn += 1
        turn = await self._generate(st, ctx_msgs, [], prompt_tokens)
        self._assistant_message(st, turn)
        parsed = parse_turn(turn.text, turn.tool_calls, truncated=turn.finish_reason == "length",
                            answer_tag=self.protocol.answer_tag)
        if parsed.response is not None:  # grammar departures of the final turn (they cost Eq. 5's F)
            self._grammar_events(st, parsed)
        if parsed.calls or parsed.calls_after_response:
            rec.events.append(Event(type=EventType.TOOL_CALL_IN_SYNTHESIS, turn=st.turn,
                                    detail={"not_executed": len(parsed.calls) + len(parsed.calls_after_response)}))
        rec.status = "max_turns_synthesis"
        if parsed.response is not None and parsed.response_complete:
            self._finish(st, parsed.response, True, "max_turns_synthesis")
        else:
            rec.events.append(Event(type=EventType.SYNTHESIS_INCOMPLETE, turn=st.turn, detail={"preview": turn.text[:200]}))


class _State:
    def __init__(self, rec: EpisodeRecord, registry: EvidenceRegistry, ctx: ToolContext, t0: float):
        self.rec, self.registry, self.ctx, self.t0 = rec, registry, ctx, t0
        self.turn = 0
        self.calls = 0
        self.policy_s = 0.0
        self.tool_s = 0.0
        self.usage: dict[str, int] = {}
        self.ledger: TokenLedger | None = None
        self.max_ctx = 0
        self.guard = LoopGuard()
        self.hooks: HookChain | None = None  # the episode's hooks: the kit's built-ins, then the harness's
        self.stop: str | None = None  # a hook's stop reason: the regular turns end after this one
        self.response_complete = False
        self.harness_overheads: list[float] = []
        self.tampered: set[str] = set()

"""Before/after evaluation of agentic SFT: tool-call validity, format compliance, held-out loss.

For each held-out record and each of its trained assistant turns, the model generates one turn from
the conversation before it (greedy). The generation is parsed with the harness's own parser
(:func:`kit.harness.parsing.parse_turn`) and every call is repaired and validated against the Table 4
schemas (:func:`kit.harness.recovery.repair_call` with :data:`kit.harness.tools.TOOL_SPECS`):

* ``tool_call_validity``: valid calls / calls written (a call is valid when its JSON decodes and
  its name and arguments pass schema validation after the harness's repairs);
* ``format_compliance``: share of generations that follow the Table 6 turn grammar with no
  departure (:attr:`kit.harness.parsing.ParsedTurn.departures`: a reasoning block, exactly one
  action — a call or a complete ``<response>…</response>`` —, no text outside the blocks, no call
  after the response), the same reading as the RL format term (:func:`kit.rl.rewards.turn_format_ok`);
* ``loss``: mean masked token loss on the held-out examples (POINTS-Seeker §3.2.3).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kit.harness.episode import EpisodeRecord
from kit.train.sft_data import SFTCollator, SFTEncoder, SFTExample, record_images


@dataclass
class GenerationCheck:
    """Parse result of one generated turn."""

    calls: int
    valid_calls: int
    compliant: bool
    departures: list[str] = field(default_factory=list)  # Table 6 grammar departures (codes)


def check_generation(text: str) -> GenerationCheck:
    """Parse one assistant generation the way the harness does and validate its calls."""
    from kit.harness.errors import ToolError
    from kit.harness.parsing import parse_turn
    from kit.harness.recovery import repair_call
    from kit.harness.tools import TOOL_SPECS

    turn = parse_turn(text)
    valid = 0
    for c in turn.calls:
        if c.arguments is None or c.error:
            continue
        try:
            repair_call(c.name, c.arguments, TOOL_SPECS)
        except (ToolError, TypeError):
            continue
        valid += 1
    compliant = (not turn.departures and (bool(turn.calls) or (turn.response is not None and turn.response_complete))
                 and not turn.calls_after_response)
    return GenerationCheck(calls=len(turn.calls), valid_calls=valid, compliant=bool(compliant),
                           departures=turn.departure_codes())


def masked_loss(model, examples: list[SFTExample], pad_token_id: int) -> float:
    """Mean loss per trained token over ``examples`` (one example per forward pass)."""
    import torch

    collate = SFTCollator(pad_token_id)
    total, n = 0.0, 0
    model.eval()
    with torch.inference_mode():
        for ex in examples:
            batch = {k: v.to(model.device) for k, v in collate([ex]).items()}
            k = int((batch["labels"][:, 1:] != -100).sum())
            if k == 0:
                continue
            total += float(model(**batch).loss) * k
            n += k
    if n == 0:
        raise ValueError("no trained tokens in the evaluation examples")
    return total / n


def evaluate_sft(model, encoder: SFTEncoder, records: list[EpisodeRecord], *, max_new_tokens: int = 128,
                 max_turns_per_record: int = 3) -> dict[str, Any]:
    """Generate on held-out records and report validity, compliance and loss (see module doc).

    Returns a dict: ``generations``, ``calls``, ``valid_calls``, ``tool_call_validity`` (0 when no
    call was written), ``format_compliance``, ``loss``, ``examples`` and ``samples`` (first 3 texts).
    Records that cannot be encoded raise (evaluate on records that passed the encoder's filters).
    """
    import torch

    examples = [encoder.encode(r) for r in records]
    loss = masked_loss(model, examples, encoder.pad_token_id)
    gens, calls, valid, compliant, samples = 0, 0, 0, 0, []
    model.eval()
    for rec in records:
        paths = record_images(rec)
        img_i = 0
        turns = 0
        for i, m in enumerate(rec.messages):
            if m.role == "assistant" and not m.intervention and turns < max_turns_per_record:
                inputs = encoder.encode_prompt(rec.messages[:i], paths[:img_i]).to(model.device)
                with torch.inference_mode():
                    out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False,
                                         pad_token_id=encoder.pad_token_id)
                text = encoder.tokenizer.decode(out[0, inputs["input_ids"].shape[-1]:], skip_special_tokens=True)
                chk = check_generation(text)
                gens += 1
                calls += chk.calls
                valid += chk.valid_calls
                compliant += chk.compliant
                turns += 1
                if len(samples) < 3:
                    samples.append(text)
            img_i += len(m.image_refs())
    return {"generations": gens, "calls": calls, "valid_calls": valid,
            "tool_call_validity": valid / calls if calls else 0.0,
            "format_compliance": compliant / gens if gens else 0.0, "loss": loss, "examples": len(examples),
            "samples": samples}


def compare(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows ``{metric, before, after}`` for a before/after table."""
    keys = ["loss", "tool_call_validity", "format_compliance", "calls", "valid_calls", "generations"]
    return [{"metric": k, "before": before[k], "after": after[k]} for k in keys]



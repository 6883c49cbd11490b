"""A self-contained, format-true episode record for SFT/RL checks that need no shared data.

:func:`sample_record` writes three small PNGs into a workspace and returns an
:class:`~kit.harness.episode.EpisodeRecord` with every message kind the loss mask must handle
(WeAgent §6.1; POINTS-Seeker §3.2.3): system prompt, a user turn with an image, two assistant tool
calls, a tool observation that returns two images, a harness intervention observation and an
intervention user turn, and a final cited ``<response>``. Tests, benchmarks and the GPU check
(``scripts/gpu_check_sft.py``, run where the shared data is not present) use it.
"""

from __future__ import annotations

import io
from pathlib import Path

from kit.harness.episode import EpisodeRecord, RegisteredImage, Task
from kit.types import ContentPart, Message, ToolCall

ASSISTANT_TEXTS = (
    '<think>I should search for the image.</think>\n<tool_call>\n'
    '{"name": "image_search", "arguments": {"query": "red barn"}}\n</tool_call>',
    '<think>Look closer at the second one.</think>\n<tool_call>\n{"name": "web_search", "arguments": {"query": "barn ohio"}}\n</tool_call>',
    "<think>Done.</think>\n<response>It is a barn <IMG: search_image_1.png></response>",
)
IMAGES = (("user_image_1", "user_image", "red"), ("search_image_1", "search_image", "green"),
          ("search_image_2", "search_image", (0, 0, 200)))


def png_bytes(color, size: tuple[int, int] = (64, 56)) -> bytes:
    """A solid-colour PNG of ``size`` (width, height) pixels."""
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, "PNG")
    return buf.getvalue()


def _text(t: str) -> list[ContentPart]:
    return [ContentPart(type="text", text=t)]


def sample_record(workspace: str | Path, rid: str = "ep-1", *, assistant: bool = True,
                  structured_call: bool = False) -> EpisodeRecord:
    """Write the record's images into ``workspace`` and return the record (see module doc).

    Args:
        workspace: folder for ``user_image_1.png``, ``search_image_1.png``, ``search_image_2.png``
            (64×56 pixels each); created if missing.
        rid: the record id.
        assistant: False drops every assistant turn (a record the SFT encoder must refuse).
        structured_call: the first call as an OpenAI-style structured ``tool_calls`` entry instead
            of a ``<tool_call>`` block in the text.
    """
    ws = Path(workspace)
    ws.mkdir(parents=True, exist_ok=True)
    for ref, _, colour in IMAGES:
        (ws / f"{ref}.png").write_bytes(png_bytes(colour))
    msgs = [Message(role="system", content=_text("You are a search agent.")),
            Message(role="user", content=[ContentPart(type="image", image="user_image_1.png")] + _text("What is this?"))]
    if assistant:
        if structured_call:
            msgs.append(Message(role="assistant", content=_text("<think>search</think>"), turn=1,
                                tool_calls=[ToolCall(id="c1", name="image_search", arguments='{"query": "red barn"}')]))
        else:
            msgs.append(Message(role="assistant", content=_text(ASSISTANT_TEXTS[0]), turn=1))
    msgs.append(Message(role="tool", name="image_search", tool_call_id="c1", turn=1,
                        content=_text("Found 2 images: ") + [ContentPart(type="image", image="search_image_1.png"),
                                                           ContentPart(type="image", image="search_image_2.png")]))
    if assistant:
        msgs.append(Message(role="assistant", content=_text(ASSISTANT_TEXTS[1]), turn=2))
    msgs += [Message(role="tool", name="web_search", tool_call_id="c2", turn=2, intervention=True,
                     content=_text("Duplicate call: this exact call was already made.")),
             Message(role="user", intervention=True, turn=3, content=_text("You have used all turns. Answer now."))]
    if assistant:
        msgs.append(Message(role="assistant", content=_text(ASSISTANT_TEXTS[2]), turn=3))
    images = [RegisteredImage(ref=ref, filename=ref + ".png", kind=kind, sha256="0" * 64, width=64, height=56,
                              mime="image/png") for ref, kind, _ in IMAGES]
    return EpisodeRecord(id=rid, task=Task(id="t", question="What is this?"), config_hash="x", messages=msgs,
                         images=images, status="answered", trainable=True, workspace=str(ws))

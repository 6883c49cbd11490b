"""Errors the harness turns into structured observations (docs/contracts.md "Tool": nothing a model writes
can crash the loop)."""

from __future__ import annotations

import json
from typing import Any


def _json_default(o: Any) -> Any:
    item = getattr(o, "item", None)  # numpy scalars and 0-d arrays
    if callable(item):
        try:
            return item()
        except Exception:  # fall back to the text form
            pass
    return str(o)


class ToolError(Exception):
    """A tool call that cannot be executed as written.

    ``code`` is a short machine-readable reason (``unknown_tool``, ``bad_arguments``,
    ``missing_argument``, ``bad_image_ref``, ``backend_error``, ...); ``detail`` carries extra fields
    for the structured observation shown to the model.
    """

    MAX_MESSAGE = 2000  # error text echoes model input: keep observations bounded
    MAX_OBSERVATION = 20_000  # characters of the whole JSON observation (a tool's detail may be large)

    def __init__(self, code: str, message: str, **detail: Any):
        if len(message) > self.MAX_MESSAGE:
            message = message[: self.MAX_MESSAGE] + f"… [{len(message) - self.MAX_MESSAGE} more characters]"
        super().__init__(message)
        self.code = code
        self.message = message
        self.detail = detail

    def observation(self) -> dict[str, Any]:
        """The JSON object returned to the model as the tool's observation."""
        return {"error": self.code, "message": self.message, **self.detail}

    def observation_json(self) -> str:
        """:meth:`observation` as JSON text: values JSON cannot hold (numpy scalars, objects) become numbers or
        text, and the whole is cut at :attr:`MAX_OBSERVATION` characters."""
        text = json.dumps(self.observation(), ensure_ascii=False, default=_json_default)
        if len(text) > self.MAX_OBSERVATION:
            text = text[: self.MAX_OBSERVATION] + f"… [{len(text) - self.MAX_OBSERVATION} more characters]"
        return text


class ImageError(ToolError):
    """An image that cannot be registered: corrupt, truncated, too large, unsupported, or a bad
    reference (absolute path, ``..``, unregistered name)."""

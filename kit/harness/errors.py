"""Errors the harness turns into structured observations (docs/contracts.md "Tool": nothing a model writes
can crash the loop)."""

from __future__ import annotations

from typing import Any


class ToolError(Exception):
    """A tool call that cannot be executed as written.

    ``code`` is a short machine-readable reason (``unknown_tool``, ``bad_arguments``,
    ``missing_argument``, ``bad_image_ref``, ``backend_error``, ...); ``detail`` carries extra fields
    for the structured observation shown to the model.
    """

    MAX_MESSAGE = 2000  # error text echoes model input: keep observations bounded

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


class ImageError(ToolError):
    """An image that cannot be registered: corrupt, truncated, too large, unsupported, or a bad
    reference (absolute path, ``..``, unregistered name)."""

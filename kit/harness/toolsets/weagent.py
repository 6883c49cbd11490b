"""WeAgent-MMSearch's tool set ``"weagent_mmsearch"``: the five native tools of WeAgent Table 4, in
Table 4 order (web_search, web_search_for_image, web_search_based_on_image, web_extract,
execute_code). They are enabled by default through ``HarnessConfig.tools_enabled``; the set names them so
a recipe can say which tools its agent gets the same way for every paper."""

from __future__ import annotations

from kit.harness.tool_spec import ToolSpec
from kit.harness.tools import NATIVE_TOOLS


def weagent_tools() -> list[ToolSpec]:
    """The native specs themselves (not copies): ``Harness(tools=weagent_tools())`` with the default
    ``tools_enabled`` offers each once."""
    return list(NATIVE_TOOLS.values())

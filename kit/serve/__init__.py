"""Services over the kit's local web (issue 17): :mod:`kit.serve.web_service` speaks Serper's search
JSON and Jina's reader text over HTTP (``python -m kit.cli serve-web``; docs/serve_web.md);
:mod:`kit.serve.mcp_server` exposes the same tools over MCP (``serve-mcp``).

Importing this package is light: the service stacks load with the submodules.
"""

from kit.extras import require

require("serve", "starlette", "uvicorn", "mcp", feature="kit.serve (serve-web, serve-mcp)")

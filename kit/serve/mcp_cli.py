"""``python -m kit.cli serve-mcp``: the CLI of the MCP tool server (:mod:`kit.serve.mcp_server`), kept apart
so that building the CLI's parser imports neither the harness nor the MCP SDK."""

from __future__ import annotations

import asyncio

from kit.serve._args import port, positive_int


def add_parser(sub) -> None:
    """Register ``serve-mcp`` on the CLI's subparsers."""
    p = sub.add_parser("serve-mcp", help="serve the five harness tools over MCP (stdio or streamable HTTP)")
    p.add_argument("zim", nargs="+", help="ZIM archives of the local web")
    p.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    p.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default loopback)")
    p.add_argument("--port", type=port, default=8765, help="HTTP port (default 8765)")
    p.add_argument("--api-key", default=None,
                   help="required bearer key for HTTP (default $KIT_MCP_API_KEY; needed off loopback)")
    p.add_argument("--index-dir", default=None, help="index cache root (default <kit cache>/zim_index)")
    p.add_argument("--workspace", default=None, help="folder for episode workspaces (default: a temporary one)")
    p.add_argument("--max-episodes", type=positive_int, default=256, help="episodes kept at once (LRU)")


def run_cli(args) -> int:
    """``serve-mcp``: build the local web (index load or build), then serve until interrupted. Returns the exit
    status (2: missing or corrupt archives, a bad key or an unsafe bind; one line on stderr, no traceback).
    Logs go to stderr: on stdio, stdout is the protocol."""
    import contextlib
    import os
    import sys

    from kit.serve.auth import check_api_key
    from kit.serve.mcp_server import LOOPBACK, McpToolServer, http_app, serve_stdio
    from kit.web.zim import LocalZimWeb, ZimError

    api_key = args.api_key or os.environ.get("KIT_MCP_API_KEY") or None
    try:
        check_api_key(api_key, "--api-key" if args.api_key else "$KIT_MCP_API_KEY")
    except ValueError as e:
        print(f"serve-mcp: {e}", file=sys.stderr)
        return 2
    if args.transport == "http" and args.host not in LOOPBACK and not api_key:
        print(f"serve-mcp: binding to {args.host} needs an API key (--api-key or KIT_MCP_API_KEY)", file=sys.stderr)
        return 2
    try:
        web = LocalZimWeb(args.zim, args.index_dir)
        with contextlib.redirect_stdout(sys.stderr):  # on stdio, stdout carries only the protocol
            web.ensure_ready()
    except (ZimError, OSError) as e:  # a missing or corrupt archive, an unwritable cache: say which
        print(f"serve-mcp: {e}", file=sys.stderr)
        return 2
    server = McpToolServer(web, workspace_root=args.workspace, max_episodes=args.max_episodes)
    if args.transport == "stdio":
        asyncio.run(serve_stdio(server))
        return 0
    import uvicorn

    print(f"serve-mcp: http://{args.host}:{args.port}/mcp ({len(web.archives)} archives)", file=sys.stderr)
    try:
        uvicorn.run(http_app(server, host=args.host, api_key=api_key), host=args.host, port=args.port,
                    log_level="warning")
    finally:
        asyncio.run(server.close())
    return 0

"""``python -m kit.cli serve-web ZIM... [--host 127.0.0.1] [--port 8321] [--api-key K]``: the local web
as a Serper/Jina-compatible HTTP service (:mod:`kit.serve.web_service`, docs/serve_web.md).

Binds to loopback by default; any other address needs an API key (``--api-key`` or
``$KIT_SERVE_API_KEY``), otherwise the command refuses to start (exit 2). Indexes are loaded (or
built) before the port opens, so a load balancer never routes to a replica that is still building.

TLS (:mod:`kit.serve.tls`): ``--ssl-certfile F --ssl-keyfile F`` serve HTTPS (the files are checked before
any archive is opened); ``--make-certs DIR`` makes a local CA and a certificate for the real API host names
(google.serper.dev, r.jina.ai, s.jina.ai) and prints the ``/etc/hosts`` line and client variables that let
code hard-wired to those hosts run unchanged against this service (docs/serve_web.md "TLS").
"""

from __future__ import annotations

import ipaddress
import os
import sys
from typing import Any

from kit.serve._args import port, positive_int

DEFAULT_PORT = 8321
API_KEY_ENV = "KIT_SERVE_API_KEY"


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IP literals (127.0.0.0/8, ::1)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def check_bind(host: str, api_key: str | None) -> None:
    """Refuse a non-loopback ``host`` without an API key.

    Raises:
        ValueError: ``host`` is not loopback and ``api_key`` is empty (the message says how to fix it).
    """
    if not api_key and not is_loopback(host):
        raise ValueError(f"refusing to serve on {host!r} without an API key: anyone who can reach it could use "
                         f"it. Pass --api-key (or set ${API_KEY_ENV}), or bind to 127.0.0.1")


def build_app(zims: list[str] | None, *, api_key: str | None = None, cache_path: str | None = None,
              cache_mode: str = "readwrite", public_url: str | None = None, limits: Any = None,
              index_dir: str | None = None):
    """(app, web) for the archives ``zims`` (``None``: the shared data folder's), indexes loaded,
    with a :class:`~kit.web.cache.ToolCache` at ``cache_path`` (default
    ``<kit cache>/serve_web/cache.sqlite``) in ``cache_mode`` in front."""
    from kit.paths import cache_dir
    from kit.serve.web_service import create_app
    from kit.web import open_local_web, open_tool_cache
    from kit.web.cache import CachedBackend

    web = open_local_web(zims or None, **({"index_dir": index_dir} if index_dir else {}))
    web.ensure_ready()
    path = cache_path or str(cache_dir() / "serve_web" / "cache.sqlite")
    cache = open_tool_cache(None if cache_mode == "off" else path, cache_mode)
    return create_app(web, CachedBackend(web, cache), api_key=api_key, limits=limits, public_url=public_url), web


EXAMPLES = """examples:
  python -m kit.cli serve-web                                   # every shared archive on http://127.0.0.1:8321
  curl -s localhost:8321/search -H 'Content-Type: application/json' -d '{"q": "Ray Charles", "num": 3}'
  curl -s "localhost:8321/images?q=Ray+Charles&num=2"           # Serper's parameters in the query string
  curl -s localhost:8321/r/https://en.wikipedia.org/wiki/Ray_Charles   # Jina reader (GET /<url> too)
  curl -s "localhost:8321/s/Genius%20Loves%20Company"           # Jina search
  python -m kit.cli serve-web ZIM... --host 0.0.0.0 --api-key "$KEY"   # reachable: a key is required
  python -m kit.cli serve-web --make-certs certs/                # TLS for code hard-wired to the real hosts
docs/serve_web.md has every endpoint, the error shapes and the TLS recipe."""


def add_parser(sub) -> None:
    """Register ``serve-web`` on an argparse sub-parsers object."""
    import argparse

    sp = sub.add_parser("serve-web", help="serve the local web over HTTP in Serper / Jina-reader JSON shapes",
                        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EXAMPLES)
    sp.add_argument("zim", nargs="*", help="ZIM archives (default: every archive of the shared data folder)")
    sp.add_argument("--host", default="127.0.0.1", help="bind address (non-loopback needs --api-key)")
    sp.add_argument("--port", type=port, default=DEFAULT_PORT)
    sp.add_argument("--api-key", default=None, help=f"required X-API-KEY (default ${API_KEY_ENV})")
    sp.add_argument("--cache", default=None, help="tool-cache SQLite file (default <kit cache>/serve_web/cache.sqlite)")
    sp.add_argument("--cache-mode", default="readwrite", choices=["readwrite", "readonly", "off"])
    sp.add_argument("--public-url", default=None, help="base URL of the links handed out (e.g. the load balancer's)")
    sp.add_argument("--max-body-bytes", type=positive_int, default=None, help="largest request body (default 8 MiB)")
    sp.add_argument("--rate", type=float, default=None, help="requests/s per client (default 500; 0: unbounded)")
    sp.add_argument("--burst", type=positive_int, default=None, help="requests a client may send at once (default 1000)")
    sp.add_argument("--index-dir", default=None, help="index cache root (default <kit cache>/zim_index)")
    tls = sp.add_argument_group("TLS (docs/serve_web.md \"TLS\")")
    tls.add_argument("--ssl-certfile", default=None, metavar="FILE",
                     help="serve HTTPS with this PEM certificate (chain: the server's first)")
    tls.add_argument("--ssl-keyfile", default=None, metavar="FILE",
                     help="its unencrypted PEM private key (omit when it is in --ssl-certfile)")
    tls.add_argument("--make-certs", default=None, metavar="DIR",
                     help="make a local CA and a server certificate for the real API hosts (google.serper.dev, "
                          "r.jina.ai, s.jina.ai) and loopback in DIR, print how to use them, and exit")
    tls.add_argument("--cert-host", action="append", default=[], metavar="NAME",
                     help="with --make-certs: one more host name or IP address for the certificate (repeatable)")


def make_certs_cmd(folder: str, extra_names: list[str]) -> int:
    """``serve-web --make-certs DIR``: write the CA and server certificate (:func:`kit.serve.tls.make_certs`),
    print the recipe on stdout; 2 (one line on stderr) on a bad name or an unwritable folder."""
    from kit.serve.tls import DEFAULT_CERT_NAMES, make_certs, recipe

    try:
        files = make_certs(folder, [*DEFAULT_CERT_NAMES, *extra_names])
    except (ValueError, OSError) as e:
        print(f"serve-web: --make-certs {folder}: {e}", file=sys.stderr)
        return 2
    print(recipe(files), end="")
    return 0


def cmd(args) -> int:
    """Run the service until interrupted; 2 on a refused bind, a bad key, limits or TLS files, or archives
    that cannot be opened (missing, corrupt: one line on stderr, no traceback). ``--make-certs``: write the
    certificates, print how to use them and return."""
    from kit.serve.auth import check_api_key
    from kit.serve.tls import check_tls_files, route_by_host
    from kit.serve.web_service import ServiceLimits
    from kit.web.zim import ZimError

    certfile, keyfile = getattr(args, "ssl_certfile", None), getattr(args, "ssl_keyfile", None)
    if getattr(args, "make_certs", None):
        if certfile or keyfile:
            print("serve-web: --make-certs writes certificates and exits; run serve-web again with "
                  "--ssl-certfile / --ssl-keyfile to serve", file=sys.stderr)
            return 2
        return make_certs_cmd(args.make_certs, list(args.cert_host))
    if getattr(args, "cert_host", None):
        print("serve-web: --cert-host goes with --make-certs", file=sys.stderr)
        return 2
    api_key = args.api_key or os.environ.get(API_KEY_ENV) or None
    try:
        check_api_key(api_key, "--api-key" if args.api_key else f"${API_KEY_ENV}")
        check_bind(args.host, api_key)
        check_tls_files(certfile, keyfile)
        given = {k: v for k, v in (("max_body_bytes", args.max_body_bytes), ("rate_per_s", args.rate),
                                   ("burst", args.burst)) if v is not None}
        limits = ServiceLimits(**given)
    except ValueError as e:
        print(f"serve-web: {e}", file=sys.stderr)
        return 2
    import uvicorn

    try:
        app, web = build_app(args.zim, api_key=api_key, cache_path=args.cache, cache_mode=args.cache_mode,
                             public_url=args.public_url, limits=limits, index_dir=args.index_dir)
    except (ZimError, OSError) as e:  # a missing or corrupt archive, an unwritable cache: say which
        print(f"serve-web: {e}", file=sys.stderr)
        return 2
    scheme = "https" if certfile else "http"
    host = f"[{args.host}]" if ":" in args.host and not args.host.startswith("[") else args.host
    print(f"serve-web: {len(web.archives)} archive(s) on {scheme}://{host}:{args.port} "
          f"({'key required' if api_key else 'no key'})", file=sys.stderr)
    tls = {"ssl_certfile": certfile, "ssl_keyfile": keyfile} if certfile else {}
    # requests sent to r.jina.ai / s.jina.ai (hosts-file setups) reach the /r and /s routes
    uvicorn.run(route_by_host(app), host=args.host, port=args.port, log_level="warning", access_log=False, **tls)
    return 0

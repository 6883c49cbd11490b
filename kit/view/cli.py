"""The ``view`` sub-command (registered by :mod:`kit.cli`)::

    python -m kit.cli view RUN_DIR [OTHER_RUN_DIR] [-o OUT] [--configs A B] [--inspect-log DIR|OUT.json]

Exit status 0 when the site was written, 2 when a run folder cannot be read (the reason on stderr).
"""

from __future__ import annotations

import sys
from pathlib import Path


def add_parser(sub) -> None:
    """Register ``view`` on an argparse sub-parsers object."""
    vw = sub.add_parser("view", help="static run viewer: index with filters, episode pages, run comparison")
    vw.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="one run folder, or two to compare item by item")
    vw.add_argument("-o", "--out", default=None, help="site folder (default: RUN_DIR/view, the committed site; rebuilt from scratch, "
                                                   "its images reused by content where this copy lacks workspaces/)")
    vw.add_argument("--configs", nargs=2, default=None, metavar=("A", "B"),
                    help="compare these two configurations inside each run (default: every pair of an evaluation's)")
    vw.add_argument("--title", default=None, help="index page title")
    vw.add_argument("--image-max-side", type=int, default=None, metavar="PX",
                    help="store larger images as smaller WebP copies (default 1024; 0 copies every image as is)")
    vw.add_argument("--inspect-log", default=None, metavar="DIR|OUT.json",
                    help="also write an inspect_ai eval log of the run(s): into folder DIR named as inspect names its "
                         "logs (listed by `inspect view --log-dir DIR`), or to OUT.json (warned when inspect won't list it)")


def cmd(args) -> int:
    """Build the site (and the inspect_ai log); print where they are."""
    from kit.view.load import ViewError
    from kit.view.site import IMAGE_MAX_SIDE, build_site

    if len(args.run_dirs) > 2:
        print(f"view: one or two run folders, got {len(args.run_dirs)}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else Path(args.run_dirs[0]) / "view"
    try:
        index = build_site(args.run_dirs, out, configs=tuple(args.configs) if args.configs else None, title=args.title,
                           image_max_side=IMAGE_MAX_SIDE if args.image_max_side is None else args.image_max_side)
    except (ViewError, ValueError) as e:
        print(f"view: {e}", file=sys.stderr)
        return 2
    print(f"view: {index} (open it in a browser; no server needed)")
    if args.inspect_log:
        from kit.view.inspect_export import InspectUnavailable, name_warning, write_inspect_log

        try:
            path, n = write_inspect_log(args.run_dirs, args.inspect_log)
        except InspectUnavailable as e:
            print(f"view: {e}", file=sys.stderr)
            return 2
        print(f"view: inspect_ai eval log {path} ({n} samples; `inspect view --log-dir {path.parent}`)")
        warn = name_warning(path)
        if warn:
            print(f"view: warning: {warn}", file=sys.stderr)
    return 0

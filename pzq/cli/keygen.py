"""``pzq-keygen``: make a CURVE key pair for a node or a client."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from pzq import security
from pzq.cli.common import fail
from pzq.errors import EXISTS, ExitCode
from pzq.tool_base import ToolParser, quiet_on_closed_pipe, quiet_on_interrupt


def pair_name(text: str) -> str:
    """A name of files in the directory given: not empty, no path in it, no leading dot
    (the node's --curve-authorized-keys reads NAME.key files and skips hidden ones)."""
    if not text or "/" in text or text.startswith("."):
        raise argparse.ArgumentTypeError(
            f"{text!r}: give a file name without '/' that does not start with '.', "
            "e.g. node or producer-1")
    return text


def make_argument_parser() -> ToolParser:
    parser = ToolParser("pzq-keygen", "Make a CURVE key pair for a node or a client.")
    parser.add_argument("directory", help="where to write NAME.key and NAME.key_secret")
    parser.add_argument("name", type=pair_name, help="the pair's name, e.g. node or producer-1")
    parser.add_argument("--force", action="store_true",
                        help="replace a key pair of that name (clients holding the old "
                             "public key are locked out)")
    return parser


@quiet_on_closed_pipe
@quiet_on_interrupt
def keygen_main(argv: Sequence[str] | None = None) -> int:
    parser = make_argument_parser()
    args = parser.parse_args(argv)
    existing = [path for path in security.key_pair_paths(args.directory, args.name)
                if path.exists()]
    if existing and not args.force:
        return fail(parser.prog, f"{existing[0]} exists; give --force to replace the key pair",
                    EXISTS)
    try:
        public, secret = security.generate(args.directory, args.name)
    except OSError as exc:
        return fail(parser.prog, f"cannot write keys in {Path(args.directory)}: "
                                 f"{exc.strerror}", ExitCode.FAILURE)
    print(f"public key (authorize it, give it to clients): {public}")
    print(f"secret key (keep it private): {secret}")
    return ExitCode.OK

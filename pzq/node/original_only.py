"""Options of the original pzq that pzq does not take, each refused with why.

The original's code (not its README) also had ``--background`` (fork into a
daemon) and ``--user`` (drop privileges to that user). pzq leaves both to the
supervisor that starts it; argparse alone would say only "unrecognized arguments".
"""

from __future__ import annotations

from collections.abc import Sequence

REFUSALS = {
    "--background": ("--background is the original pzq's: pzq stays in the foreground; "
                     "start it under a supervisor (systemd, docker) to run it in the "
                     "background"),
    "--user": ("--user is the original pzq's: pzq runs as the user that starts it; "
               "start it as that user (systemd's User=, or runuser -u USER -- pzq ...)"),
}


def original_only(argv: Sequence[str]) -> str | None:
    """The refusal of the first such option on the command line, else None."""
    for argument in argv:
        if argument == "--":
            return None
        flag = argument.split("=", 1)[0]
        if flag in REFUSALS:
            return REFUSALS[flag]
    return None

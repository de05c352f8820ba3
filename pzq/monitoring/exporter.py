"""pzq-exporter: Prometheus metrics and a status page for pzq nodes.

    pzq-exporter                                  the quick-start node, on 127.0.0.1:9646
    pzq-exporter --dsn A --dsn B --listen 0.0.0.0:9646

/metrics asks every node's STATS at scrape time, all nodes at once, each within
--timeout (a node that does not answer is pzq_up 0, never an error); /api/stats
gives the same answers as JSON; / is a status page over /api/history, the last
minutes of every node, sampled every --sample-interval seconds.
"""

from __future__ import annotations

import argparse
import select
import signal
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pzq.cli.common import (
    DEFAULT_MONITOR,
    add_curve_options,
    curve_from,
    endpoint,
    fail,
    positive_minutes,
    positive_seconds,
)
from pzq.errors import ExitCode
from pzq.monitoring.history import History
from pzq.monitoring.node_states import NodeStates
from pzq.monitoring.scrape import Scraper
from pzq.node.waker import Waker
from pzq.security import ClientSecurity
from pzq.tool_base import ToolParser, quiet_on_closed_pipe

# Its meanings of the codes in pzq.errors:
EXIT_OK = ExitCode.OK
EXIT_USAGE = ExitCode.USAGE  # a bad option, or the monitoring extra is not installed
EXIT_LISTEN = ExitCode.BIND  # the HTTP address could not be bound (in use, bad address)
DEFAULT_LISTEN = "127.0.0.1:9646"
# How often the HTTP loop looks for a stop: a stop waits up to this long for it.
SHUTDOWN_POLL_S = 0.05

if TYPE_CHECKING:
    from pzq.monitoring.server import QuietServer


@dataclass
class Exporter:
    """A running exporter: its HTTP server and the history sampler behind the page."""

    server: QuietServer
    history: History
    scraper: Scraper

    @property
    def port(self) -> int:
        return int(self.server.server_port)

    def stop(self) -> None:
        self.scraper.close()  # first: a sample or scrape under way ends now
        self.history.stop()
        self.server.shutdown()
        self.server.server_close()


def serve(dsns: Sequence[str], host: str, port: int, timeout: float,
          curve: ClientSecurity | None = None, sample_interval: float = 2.0,
          history_minutes: float = 10.0) -> Exporter:
    """Start serving in background threads; OSError when the address cannot be bound."""
    # Imported here: without the monitoring extra, main() says what to install.
    from prometheus_client.registry import CollectorRegistry

    from pzq.monitoring.metrics import PzqCollector
    from pzq.monitoring.server import QuietServer, make_handler, routes

    scraper = Scraper(dsns, timeout, curve, NodeStates(tell_stderr))

    def registry_for(scrape_timeout: float) -> CollectorRegistry:
        registry = CollectorRegistry()
        registry.register(PzqCollector(scraper, scrape_timeout))
        return registry

    history = History(scraper, sample_interval, history_minutes * 60)
    try:
        server = QuietServer((host, port), make_handler(routes(scraper, registry_for, history)))
    except OSError:
        scraper.close()
        raise
    history.start()
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": SHUTDOWN_POLL_S},
                     name="pzq-http", daemon=True).start()
    return Exporter(server, history, scraper)


def tell_stderr(line: str) -> None:
    print(f"pzq-exporter: {line}", file=sys.stderr, flush=True)


def listen_address(text: str) -> tuple[str, int]:
    """An argparse type: HOST:PORT (the port may be 0 for any free one)."""
    host, _, port = text.rpartition(":")
    if not port.isdigit():
        raise argparse.ArgumentTypeError(f"{text} is not HOST:PORT, e.g. {DEFAULT_LISTEN}")
    if int(port) > 65535:
        raise argparse.ArgumentTypeError(f"{text}: port {port} is out of range (0 to 65535)")
    return host.strip("[]") or "127.0.0.1", int(port)


def make_argument_parser() -> argparse.ArgumentParser:
    parser = ToolParser("pzq-exporter", __doc__)
    parser.add_argument("--dsn", type=endpoint, action="append",
                        help=f"a node's --monitor-dsn, repeatable (default: {DEFAULT_MONITOR})")
    parser.add_argument("--listen", type=listen_address, default=DEFAULT_LISTEN,
                        metavar="HOST:PORT", help="where to serve HTTP")
    parser.add_argument("--timeout", type=positive_seconds, default=2.0, metavar="SECONDS",
                        help="seconds to wait for each node (nodes are asked in parallel; "
                        "a Prometheus scrape whose scrape_timeout is shorter waits that "
                        "less half a second)")
    parser.add_argument("--sample-interval", type=positive_seconds, default=2.0,
                        metavar="SECONDS", help="how often the status page's history is sampled")
    parser.add_argument("--history-minutes", type=positive_minutes, default=10.0,
                        metavar="MINUTES", help="how much history the status page shows")
    add_curve_options(parser)
    return parser


@quiet_on_closed_pipe
def main(argv: Sequence[str] | None = None) -> int:
    parser = make_argument_parser()
    args = parser.parse_args(argv)
    if not monitoring_extra_installed():
        return fail(parser.prog, "needs prometheus-client: pip install 'pzq[monitoring]'",
                    EXIT_USAGE)
    host, port = args.listen  # argparse converts the default text too
    dsns = args.dsn or [DEFAULT_MONITOR]
    try:
        exporter = serve(dsns, host, port, args.timeout, curve_from(parser, args),
                         args.sample_interval, args.history_minutes)
    except OSError as exc:
        return fail(parser.prog, f"cannot listen on {host}:{port}: {exc.strerror or exc}",
                    EXIT_LISTEN)
    waker = Waker()
    stops: list[int] = []
    # Set explicitly, as the daemon does: a shell starts background jobs with SIGINT
    # ignored, and a service manager stops with SIGTERM. Before the line below, which
    # tells whoever waits for it that the exporter can be stopped. The handlers only
    # note the signal; its wake-up byte ends the wait (a handler that took a lock the
    # waiting thread held could never return).
    previous = {signum: signal.signal(signum, lambda signum, frame: stops.append(signum))
                for signum in (signal.SIGINT, signal.SIGTERM)}
    signal.set_wakeup_fd(waker.write_fd, warn_on_full_buffer=False)
    print(f"pzq-exporter: serving http://{host}:{exporter.port}/ for {', '.join(dsns)}",
          flush=True)
    try:
        while not stops:
            select.select([waker], [], [])
            waker.drain()
    finally:
        signal.set_wakeup_fd(-1)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        waker.close()
        exporter.stop()
    return EXIT_OK


def monitoring_extra_installed() -> bool:
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        return False
    return True


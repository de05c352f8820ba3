"""The exporter's HTTP side: /metrics, /api/stats, /api/history and the status page.

A browser or scraper that goes away mid-answer is the normal life of a web server:
it ends that request quietly, never with a traceback.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any

from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

from pzq.cli.monitor import as_json
from pzq.monitoring.history import History
from pzq.monitoring.scrape import Scraper

GONE = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError)
# Prometheus tells each scrape's deadline; the nodes are asked within it, less this
# margin (blackbox_exporter's default) for the answer's making and sending, so a node
# that is down is pzq_up 0 rather than a failed scrape of every node.
SCRAPE_TIMEOUT_HEADER = "X-Prometheus-Scrape-Timeout-Seconds"
SCRAPE_MARGIN_S = 0.5
Route = Callable[[Message], tuple[str, bytes]]


def status_page() -> bytes:
    return resources.files("pzq.monitoring").joinpath("status.html").read_bytes()


class QuietServer(ThreadingHTTPServer):
    """Serves each request in a thread; a client that hangs up is not an error."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, GONE):
            return
        print(f"pzq-exporter: error answering {client_address[0]}: "
              f"{type(error).__name__}: {error}", file=sys.stderr, flush=True)


def scrape_timeout(headers: Message, timeout: float) -> float:
    """How long this scrape waits for each node: ``timeout``, or less when the scraper
    said it gives up sooner (a header that is not a positive number is ignored)."""
    try:
        deadline = float(headers.get(SCRAPE_TIMEOUT_HEADER, "inf"))
    except ValueError:
        return timeout
    if not deadline > 0:  # also NaN
        return timeout
    return min(timeout, deadline - min(SCRAPE_MARGIN_S, deadline / 4))


def make_handler(routes: dict[str, Route]) -> type:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server API
            route = routes.get(self.path.split("?")[0])
            if route is None:
                self._reply(404, "text/plain", b"not found\n")
            else:
                self._reply(200, *route(self.headers))

        def _reply(self, status: int, content_type: str, body: bytes) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)
            except GONE:
                self.close_connection = True

        def log_message(self, format: str, *args: object) -> None:
            pass  # one line per scrape is noise

    return Handler


def routes(scraper: Scraper, registry_for: Callable[[float], CollectorRegistry],
           history: History) -> dict[str, Route]:
    """``registry_for(timeout)``: the metrics of one scrape waiting that long for a node."""
    def as_bytes(value: Any) -> bytes:
        return json.dumps(value, sort_keys=True).encode()

    def metrics(headers: Message) -> tuple[str, bytes]:
        registry = registry_for(scrape_timeout(headers, scraper.timeout))
        return CONTENT_TYPE_LATEST, generate_latest(registry)

    page = ("text/html; charset=utf-8", status_page())
    return {
        "/metrics": metrics,
        "/api/stats": lambda headers: ("application/json", as_bytes(_by_endpoint(scraper))),
        "/api/history": lambda headers: ("application/json", as_bytes(history.snapshot())),
        "/": lambda headers: page,
        "/index.html": lambda headers: page,
    }


def _by_endpoint(scraper: Scraper) -> dict[str, Any]:
    """Every node's STATS by monitor endpoint; a node that did not answer says why."""
    answers = scraper.scrape()
    shown = as_json(answers)
    return shown if len(answers) > 1 else {answers[0].dsn: shown}

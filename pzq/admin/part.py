"""What an operator (pzq-ctl) or a routing client asks on the monitor socket, as a part
of the loop that contributes its verbs to the monitor's table (pzq.admin.monitor): the
dead letters and PENDING (``node_admin``), topics and groups (``topic_admin``), and the
route table of partitioned topics (ROUTES)."""

from __future__ import annotations

import json

from pzq.admin.node_admin import Admin
from pzq.admin.topic_admin import TopicAdmin
from pzq.admin.usage import alone
from pzq.clock import Now
from pzq.cluster.routes import Routes
from pzq.parts import Part, Verb


class Administration(Part):
    def __init__(self, admin: Admin, topics: TopicAdmin, routes: Routes) -> None:
        self.admin = admin
        self.topics = topics
        self.routes = routes

    def verbs(self) -> dict[bytes, Verb]:
        node = self.admin.verbs()
        return {**node, b"ROUTES": alone("ROUTES", self._routes),
                **self.topics.verbs(node[b"PENDING"])}

    def _routes(self, arguments: list[bytes], now: Now) -> bytes:
        return json.dumps(self.routes.table(now.mono), sort_keys=True).encode()

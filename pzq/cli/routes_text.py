"""``pzq-ctl routes``: the route table (ROUTES, a JSON object) as lines a person reads."""

from __future__ import annotations

import json
from typing import Any


def routes_text(reply: bytes) -> str:
    table: dict[str, Any] = json.loads(reply)
    lines = ["nodes:"]
    for endpoint, node in table["nodes"].items():
        endpoints = " ".join(f"{role}={where}" for role, where in sorted(node.items())
                             if role != "state")
        lines.append(f"  {endpoint} {node['state']} {endpoints or '(endpoints not known yet)'}")
    if not table["topics"]:
        lines.append("no partitioned topic (pzq-ctl topic declare NAME --partitions P)")
    for topic, routes in table["topics"].items():
        lines.append(f"topic {topic}: {routes['partitions']} partitions")
        for partition, owner in enumerate(routes["owners"]):
            receive = table["nodes"].get(owner, {}).get("receive", "?")
            lines.append(f"  partition {partition} owner {owner} receive={receive}")
    return "\n".join(lines)

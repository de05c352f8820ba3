"""A consumer of a group in its own process, as a user's job worker is: it takes
``count`` deliveries, says ``got <body>`` for each on stdout, then works
``work_s`` seconds without calling the client (a negative time: for ever, until it
is killed), ACKs them, says ``acked`` and leaves.

    python tests/support/group_worker.py DSN TOPIC GROUP WINDOW COUNT WORK_S
"""

from __future__ import annotations

import sys
import time

from pzq.client import GroupConsumer


def main(dsn: str, topic: str, group: str, window: int, count: int, work_s: float) -> None:
    with GroupConsumer(dsn, topic, group, window=window) as consumer:
        taken = []
        while len(taken) < count:
            message = consumer.receive(10)
            if message is None:
                raise SystemExit(f"only {len(taken)} of {count} delivered")
            taken.append(message)
            print("got", message.parts[0].decode(), flush=True)
        print("working", flush=True)
        while work_s < 0:
            time.sleep(60)  # hung: its code never comes back
        time.sleep(work_s)  # the job itself, not a wait for anything
        consumer.ack_many(taken)
        print("acked", flush=True)


if __name__ == "__main__":
    dsn, topic, group, window, count, work_s = sys.argv[1:7]
    main(dsn, topic, group, int(window), int(count), float(work_s))

"""Delivery: which stored message goes to a consumer next, and what happens after.

A DeliveryState walks one store area (this node's messages, or a down node's it took
over) through stored, in flight, acked or ready again (``state``, with its
``settings``), with ordered tables for the in-flight LRU, the redelivery queue and
deliveries that wait (``entries``, ``inflight``, ``redelivery``, ``delayed``), what
it owes the store (``owed``), whether another node has a message out (``held``), the
areas themselves (``areas``, ``groups``), --send-dsn's frames (``framing``) and the
window that keeps deliveries within the consumers' pace (``window``). No sockets
here; time comes in.
"""

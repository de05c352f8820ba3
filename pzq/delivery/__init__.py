"""Delivery: which stored message goes to a consumer next, and what happens after.

A DeliveryState walks one store area (this node's messages, or a down node's it took
over) through stored, in flight, acked or ready again (``state``), with ordered
tables for the in-flight LRU and the redelivery queue (``entries``, ``inflight``,
``redelivery``), the areas themselves (``areas``), and the window that keeps
deliveries within the consumers' pace (``window``). No sockets here; time comes in.
"""

"""The device's message key and the numbers inside it: what consumers see and ACK,
what cluster frames carry, and what the store's key layout is built from.

A message key is ASCII ``<node id>-<seq as 16 hex digits>``: unique across the
cluster (the node id, 8 hex characters) and across restarts (the sequence
high-water mark is stored with every batch). On the wire and in store keys a
sequence number is 8 bytes big-endian (``SEQ``).
"""

from __future__ import annotations

import binascii
import re
import struct
from itertools import repeat
from operator import itemgetter

from pzq.errors import DecodeError

NODE_ID_LENGTH = 8  # ASCII hex characters
SEQ = struct.Struct(">Q")
MESSAGE_KEY_PATTERN = re.compile(rb"([0-9a-f]{8})-([0-9a-f]{16})")
MESSAGE_KEY_LENGTH = NODE_ID_LENGTH + 1 + 16
MESSAGE_KEY_FORMAT = b"%s-%016x"  # (node id, seq)
HEX_DIGITS = b"0123456789abcdef"
RAW_KEY = b"IQ"  # a message key's node id and seq, from hex
RAW_KEY_SIZE = struct.calcsize(b">" + RAW_KEY)
SEQ_ONLY = b"4xQ"  # its seq alone
NODE_ID_OF = itemgetter(slice(NODE_ID_LENGTH))  # of a message key
NODE_ID_PATTERN = re.compile(rb"[0-9a-f]{8}")


def message_key(node_id: bytes, seq: int) -> bytes:
    return MESSAGE_KEY_FORMAT % (node_id, seq)


def message_keys(node_id: bytes, seqs: list[int]) -> list[bytes]:
    """``message_key`` of each seq, made in C."""
    return list(map(MESSAGE_KEY_FORMAT.__mod__, zip(repeat(node_id), seqs)))


def parse_message_key(key: bytes) -> tuple[bytes, int]:
    """Split a consumer-supplied key into (node id, seq); DecodeError if it is not one."""
    match = MESSAGE_KEY_PATTERN.fullmatch(key)
    if match is None:
        raise DecodeError(f"{key[:40].decode(errors='replace')} is not a pzq message key")
    return match.group(1), int(match.group(2), 16)


def parse_message_keys(keys: list[bytes] | tuple[bytes, ...]) -> list[tuple[bytes, int]] | None:
    """(node id, seq) of every key (``message_key_numbers``, the node ids as bytes);
    None when any is not a message key (parse_message_key then says which)."""
    numbers = message_key_numbers(keys)
    if numbers is None:
        return None
    node_ids, seqs = numbers
    if node_ids.count(node_ids[0]) == len(keys):  # (mostly: one node's) one node id for all
        return list(zip(repeat(keys[0][:NODE_ID_LENGTH]), seqs))
    return list(zip(map(NODE_ID_OF, keys), seqs, strict=True))


def message_key_numbers(keys: list[bytes] | tuple[bytes, ...]
                        ) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The node ids (as numbers: ``int(node_id, 16)``) and seqs of the keys, in two
    tuples, all checked and read by a few passes in C over the keys joined (an ACK's
    keys, without a step or an object per key); None when any is not a message key."""
    return joined_key_numbers(b" ".join(keys), len(keys))


KeyNumbers = tuple[tuple[int, ...], tuple[int, ...]]  # node ids (as numbers) and seqs


def joined_key_numbers(joined: bytes, count: int) -> KeyNumbers | None:
    """``message_key_numbers`` of ``count`` keys joined by single spaces (as an ACK of
    protocol 2 sends them in one frame: read as it came, not split into keys)."""
    # each as MESSAGE_KEY_PATTERN, joined by single spaces: a dash and a space at
    # their places in each key's 26 bytes, and nothing but lowercase hex digits between
    if (len(joined) != count * (MESSAGE_KEY_LENGTH + 1) - 1
            or joined[NODE_ID_LENGTH::MESSAGE_KEY_LENGTH + 1] != b"-" * count
            or joined[MESSAGE_KEY_LENGTH::MESSAGE_KEY_LENGTH + 1] != b" " * (count - 1)):
        return None
    digits = joined.replace(b" ", b"").replace(b"-", b"")
    if len(digits) != count * (MESSAGE_KEY_LENGTH - 1):
        return None
    try:  # (hex digits of either case; then none in upper case: as HEX_DIGITS)
        raw = binascii.unhexlify(digits)
    except binascii.Error:
        return None
    if digits.lower() != digits:
        return None
    # each key, its dash and space gone, is 12 bytes: the node id's 4, the seq's 8;
    # mostly one node's keys: the node ids' bytes compared, the seqs alone made ints
    if (raw[::RAW_KEY_SIZE] == raw[:1] * count and raw[1::RAW_KEY_SIZE] == raw[1:2] * count
            and raw[2::RAW_KEY_SIZE] == raw[2:3] * count
            and raw[3::RAW_KEY_SIZE] == raw[3:4] * count):
        node_id = int.from_bytes(raw[:4], "big")
        return (node_id,) * count, struct.unpack(b">" + SEQ_ONLY * count, raw)
    numbers = struct.unpack(b">" + RAW_KEY * count, raw)
    return numbers[::2], numbers[1::2]


def first_bad_key(keys: list[bytes]) -> int:
    """The index of the first of ``keys`` that is no message key (len(keys): none)."""
    fullmatch = MESSAGE_KEY_PATTERN.fullmatch
    return next((at for at, key in enumerate(keys) if fullmatch(key) is None), len(keys))


def is_node_id(frame: bytes) -> bool:
    return NODE_ID_PATTERN.fullmatch(frame) is not None

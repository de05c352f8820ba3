"""The rules of an --authorization file: what patterns match, what --send-dsn needs,
and that answers kept per topic stay right."""

from __future__ import annotations

import pytest
import zmq

from pzq.authorization import (
    REMEMBERED,
    Authorizing,
    Mistake,
    Rights,
    load_rules,
    parse_rules,
    produce_refusal,
)
from pzq.errors import ConfigError

KEY = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"


def test_globs_match_whole_names():
    rights = Rights(produce=("orders", "audit.*", "log-[ab]"), consume=("orders:*", "*:audit"))
    assert rights.may_produce("orders") and rights.may_produce("audit.eu")
    assert not rights.may_produce("orders2") and not rights.may_produce("audit")
    assert rights.may_produce("log-a") and not rights.may_produce("log-c")
    assert rights.may_consume("orders", "billing") and rights.may_consume("x", "audit")
    assert not rights.may_consume("x", "billing")


def test_nothing_listed_allows_nothing():
    rights = Rights()
    assert not rights.may_produce("orders") and not rights.may_consume("orders", "g")
    assert not rights.admin and not rights.may_consume_send()


@pytest.mark.parametrize(("patterns", "send"), [
    (("*:default",), True), (("*:*",), True), (("*:d*",), True),
    (("orders:default",), False), (("*:billing",), False), (("orders:*",), False)])
def test_send_dsn_needs_group_default_of_every_topic(patterns, send):
    assert Rights(consume=patterns).may_consume_send() is send


def test_answers_kept_per_topic_stay_right_past_the_bound():
    rights = Rights(produce=("keep.*",))
    for number in range(REMEMBERED + 10):
        assert rights.may_produce(f"keep.{number}")
        assert not rights.may_produce(f"drop.{number}")


def test_listed_keys_have_their_rights_and_the_others_default():
    rules = parse_rules({"default": {"produce": ["public"]},
                         "clients": {KEY: {"produce": ["orders"], "admin": True}}})
    assert rules.of(KEY).may_produce("orders") and rules.of(KEY).admin
    assert not rules.of(KEY).may_produce("public")
    other = rules.of("someone else")
    assert other.may_produce("public") and not other.admin


def test_without_default_an_unlisted_key_may_do_nothing():
    rules = parse_rules({"clients": {KEY: {"produce": ["orders"]}}})
    assert not rules.of("").may_produce("orders") and not rules.of("").admin


@pytest.mark.parametrize("raw", [
    {"default": {"produce": "orders"}}, {"default": {"produce": [1]}},
    {"default": {"consume": ["a:b:c"]}}, {"default": {"consume": ["a:"]}},
    {"default": {"produce": [""]}}, {"default": {"produce": ["a]"]}},
    {"default": []}, {"clients": {"short": {}}}, {"clients": []}])
def test_mistakes_are_refused(raw):
    with pytest.raises(Mistake):
        parse_rules(raw)


def test_a_message_without_a_key_has_the_default_rights():
    """A frame no connection gave a User-Id (none without CURVE) falls to [default]."""
    rules = parse_rules({"default": {"produce": ["public"]},
                         "clients": {KEY: {"produce": ["orders"]}}})
    frame = zmq.Frame(b"routing id")
    for keyed in (True, False):
        authorization = Authorizing(rules, keyed=keyed)
        assert authorization.of(frame).may_produce("public")
        assert not authorization.of(frame).may_produce("orders")
        assert authorization.key_of(frame) == ""


BAD_FILES = {
    "unknown table": ("[defaults]\nproduce = []\n", "line 1: unknown table or key 'defaults'"),
    "unknown key": ("[default]\nproduce = []\nread = []\n",
                    "line 3: [default]: unknown key 'read'"),
    "a pattern": ('[default]\n\nproduce = ["orders/*"]\n',
                  "line 3: [default] produce: bad pattern 'orders/*'"),
    "consume without group": ('[default]\nconsume = ["orders"]\n',
                              "line 2: [default] consume: 'orders' must be TOPIC:GROUP"),
    "unpaired bracket": ('[default]\nproduce = ["o[rders"]\n', "its [ and ] do not pair"),
    "not a key": ('[default]\n[clients."abc"]\nadmin = true\n',
                  'line 2: [clients."abc"]: not a CURVE public key'),
    "admin": (f'[default]\nadmin = false\n\n[clients."{"x" * 40}"]\nadmin = "yes"\n',
              f'line 5: [clients."{"x" * 40}"]: admin must be true or false'),
    "TOML": ('[default]\nproduce = ["a"]\nadmin = yes\n', "line 3: Invalid value (column 9)"),
    # tomllib said these as "Cannot declare ... twice (at line 4, column 52)"
    "a right twice": ('[default]\nproduce = ["a"]\nconsume = []\nproduce = ["b"]\n',
                      "line 4: produce is given twice: give it once"),
    "a key twice": (f'[default]\n[clients."{"x" * 40}"]\nadmin = true\n'
                    f'[clients."{"x" * 40}"]\n',
                    f'line 4: [clients."{"x" * 40}"] is declared twice: give each table once'),
    "default twice": ("[default]\n[default]\n", "line 2: [default] is declared twice"),
    # tomllib said these as "Illegal character '\n'" and "(at end of document)"
    "a text left open": ('[default]\nproduce = ["a]\n',
                         "line 2: a text in quotes is not closed on its line"),
    "a list left open": ('[default]\nproduce = ["a",\n',
                         "line 2: Invalid value (the file ends first)"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_files_mistake_is_named_with_its_line(tmp_path, case):
    text, said = BAD_FILES[case]
    path = tmp_path / "rules.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as raised:
        load_rules(path)
    assert str(raised.value).startswith(f"--authorization {path}")
    assert said in str(raised.value) and "\n" not in str(raised.value)
    assert "(at line" not in str(raised.value)


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_rules(tmp_path / "none.toml")


def test_a_directory_given_as_the_file_is_one_line_without_an_errno(tmp_path):
    """It said ``could not be read: [Errno 21] Is a directory: '...'`` (the path twice)."""
    with pytest.raises(ConfigError) as raised:
        load_rules(tmp_path)
    assert str(raised.value) == f"--authorization {tmp_path} is a directory: give the rules' file"


def test_a_refused_message_says_why():
    """The ACK said ``FORBIDDEN produce orders`` alone, where a CONSUME's and a command's
    refusals say why."""
    assert produce_refusal("orders", Rights()) == (
        "FORBIDDEN produce orders: this client key may not produce to that topic (see the "
        "node's --authorization file)")
    rules = parse_rules({"default": {"produce": ["*"]}, "clients": {KEY: {"produce": ["*"]}}})
    authorization = Authorizing(rules, keyed=True, admitted=frozenset({KEY}))
    authorization.readmit(frozenset())  # its file deleted, the node reloaded
    assert produce_refusal("orders", authorization.rights(KEY)) == (
        "FORBIDDEN produce orders: this client key was removed from the node's "
        "--curve-authorized-keys")

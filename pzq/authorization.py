"""What each client key may do (``--authorization FILE``): produce to which topics,
consume which groups of which topics, and whether it may administer the node.

The file is TOML: ``[default]`` for every admitted key not listed, and one
``[clients."<Z85 public key>"]`` table per key listed, each with ``produce`` (topic
patterns), ``consume`` (``topic:group`` patterns) and ``admin`` (true or false).
Patterns are globs (``*``, ``?``, ``[...]``). A key's messages are known by the
User-Id that ZAP gives a CURVE connection (pyzmq's authenticator: the key in Z85);
without CURVE no message names a key and ``[default]`` applies to all.

The rules are parsed and checked once (a mistake is a ConfigError naming the line,
the table and the key), the patterns compiled, and each key's answers kept per topic, so a message
costs a dictionary look-up or two, not a glob match. ``NO_AUTHORIZATION`` stands for
a node without the option: everything is allowed, nothing is read per message.
"""

from __future__ import annotations

import re
import time
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import translate
from pathlib import Path
from typing import Any, Protocol

import zmq

from pzq.errors import ConfigError
from pzq.logs import get_logger
from pzq.toml_mistakes import toml_mistake

log = get_logger("pzq.authorization")

PRODUCE, CONSUME, ADMIN = "produce", "consume", "admin"
KINDS = (PRODUCE, CONSUME, ADMIN)
USER_ID = b"User-Id"  # the property ZAP sets: as bytes, pyzmq skips an encode per ask
SEND_GROUP = "default"  # the group of the consumers on --send-dsn, of every topic
# a pattern: a topic's or group's letters with glob characters
PATTERN_CHARACTERS = re.compile(r"[A-Za-z0-9._*?\[\]!-]{1,255}")
Z85_KEY = re.compile(r"[0-9a-zA-Z.\-:+=^!/*?&<>()\[\]{}@%$#]{40}")
BRACKETS = re.compile(r"\[!?[^\[\]]+\]")  # a glob's set of characters, [abc] or [!abc]
REMEMBERED = 4096  # answers kept per key before they are forgotten (and found again)
DEFAULT_HOLDER = "[default]"  # the rights of every key the file does not list
REFUSAL_LOG_EVERY_S = 10.0  # a refusal of one key, kind and name: logged once, then so often
REFUSALS_REMEMBERED = 1024


class Rights:
    """One key's rights, its patterns compiled; answers kept per topic (and group)."""

    produces_anywhere = False  # True: ``may_produce`` is True for every topic (not asked)
    revoked = False  # True: a key removed from --curve-authorized-keys (it has nothing)

    def __init__(self, produce: tuple[str, ...] = (), consume: tuple[str, ...] = (),
                 admin: bool = False, holder: str = DEFAULT_HOLDER) -> None:
        self.holder = holder  # whose rights: a client's key, or [default]'s (the log's)
        self.produce_patterns = produce
        self.consume_patterns = consume
        self.admin = admin
        self._produce = _compiled(produce)
        self._consume = _compiled(consume)
        self._produce_answers: dict[str, bool] = {}
        self._consume_answers: dict[str, bool] = {}

    def may_produce(self, topic: str) -> bool:
        answer = self._produce_answers.get(topic)
        if answer is None:
            answer = _remember(self._produce_answers, topic,
                               self._produce.fullmatch(topic) is not None)
        return answer

    def may_consume(self, topic: str, group: str) -> bool:
        both = f"{topic}:{group}"
        answer = self._consume_answers.get(both)
        if answer is None:
            answer = _remember(self._consume_answers, both,
                               self._consume.fullmatch(both) is not None)
        return answer

    def may_read_archive(self, topic: str) -> bool:
        """The archive holds what every group of the topic was given: reading it takes
        a consume right over every group (``orders:*``, ``*:*``) or the right to
        administer (which backs the archive up anyway)."""
        return self.admin or self.may_consume(topic, "*")

    def may_consume_send(self) -> bool:
        """--send-dsn delivers group ``default`` of every topic: a pattern must give
        that group of every topic (``*:default`` or ``*:*``)."""
        return any(pattern.partition(":")[0] == "*"
                   and re.fullmatch(translate(pattern.partition(":")[2]), SEND_GROUP)
                   for pattern in self.consume_patterns)


class AllRights(Rights):
    """A node without --authorization: every key may do everything."""

    produces_anywhere = True

    def may_produce(self, topic: str) -> bool:
        return True

    def may_consume(self, topic: str, group: str) -> bool:
        return True

    def may_read_archive(self, topic: str) -> bool:
        return True

    def may_consume_send(self) -> bool:
        return True


def _compiled(patterns: tuple[str, ...]) -> re.Pattern[str]:
    """One expression for a list of globs; none matches nothing."""
    if not patterns:
        return re.compile(r"(?!)")
    return re.compile("|".join(f"(?:{translate(pattern)})" for pattern in patterns))


def _remember(answers: dict[str, bool], asked: str, answer: bool) -> bool:
    if len(answers) >= REMEMBERED:
        answers.clear()  # names made up one after another cannot grow it for ever
    answers[asked] = answer
    return answer


EVERYTHING = AllRights(admin=True)


class Rules:
    """The rights of every key listed, and ``default`` for the others."""

    def __init__(self, default: Rights, clients: Mapping[str, Rights], path: str = "") -> None:
        self.default = default
        self.clients = dict(clients)
        self.path = path

    def of(self, key: str) -> Rights:
        return self.clients.get(key, self.default)


# -- the file ------------------------------------------------------------------


class Mistake(ValueError):
    """What is wrong in the file, and a text to find the line it is on (``found``, the
    first line holding it after the first holding ``after``: its table's header)."""

    def __init__(self, message: str, found: str, after: str = "") -> None:
        super().__init__(message)
        self.found = found
        self.after = after

    def line(self, text: str) -> int | None:
        lines = text.splitlines()
        start = next((index for index, content in enumerate(lines) if self.after in content),
                     0)
        return next((index + 1 for index in range(start, len(lines))
                     if self.found in lines[index]), None)


def load_rules(path: str | Path) -> Rules:
    """The rules of ``path``; ConfigError naming the file, the line and what is wrong."""
    try:
        text = Path(path).read_bytes().decode()
        raw = tomllib.loads(text)
    except FileNotFoundError:
        raise ConfigError(f"--authorization {path} does not exist") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"--authorization {path} is not UTF-8 text (TOML is): byte "
                          f"{exc.object[exc.start]:#04x} at position {exc.start}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"--authorization {path}{toml_mistake(str(exc), text)}") from None
    except IsADirectoryError:
        raise ConfigError(f"--authorization {path} is a directory: give the rules' "
                          f"file") from None
    except OSError as exc:  # its words, not the errno's repr with the path again
        raise ConfigError(f"--authorization {path} could not be read: "
                          f"{exc.strerror or exc}") from None
    try:
        return parse_rules(raw, str(path))
    except Mistake as mistake:
        line = mistake.line(text)
        at = f", line {line}" if line is not None else ""
        raise ConfigError(f"--authorization {path}{at}: {mistake}") from None


def parse_rules(raw: Mapping[str, Any], path: str = "") -> Rules:
    """The rules of a parsed file; Mistake for anything that is not as documented."""
    for name in raw:
        if name not in ("default", "clients"):
            raise Mistake(f"unknown table or key {name!r} (the file holds [default] and "
                          "[clients.\"KEY\"] tables)", name)
    default = _rights(raw.get("default", {}), "[default]", "[default]")
    clients = raw.get("clients", {})
    if not isinstance(clients, dict):
        raise Mistake("clients must be tables, [clients.\"KEY\"]", "clients")
    rights = {}
    for key, table in clients.items():
        where = f"[clients.\"{key}\"]"
        if not Z85_KEY.fullmatch(key):
            raise Mistake(f"{where}: not a CURVE public key (40 characters of Z85, as in "
                          "the client's NAME.key file)", key)
        rights[key] = _rights(table, where, key)
        rights[key].holder = key
    return Rules(default, rights, path)


def _rights(table: Any, where: str, header: str) -> Rights:
    """A table's rights; a Mistake in it is looked for below ``header``."""
    try:
        return _table_rights(table, where)
    except Mistake as mistake:
        mistake.after = mistake.after or header
        raise


def _table_rights(table: Any, where: str) -> Rights:
    if not isinstance(table, dict):
        raise Mistake(f"{where} must be a table", where.strip("[]"))
    for name in table:
        if name not in KINDS:
            raise Mistake(f"{where}: unknown key {name!r} (produce, consume and admin are "
                          "known)", name)
    admin = table.get(ADMIN, False)
    if not isinstance(admin, bool):
        raise Mistake(f"{where}: admin must be true or false", ADMIN)
    produce = _patterns(table.get(PRODUCE, []), f"{where} {PRODUCE}", False)
    consume = _patterns(table.get(CONSUME, []), f"{where} {CONSUME}", True)
    return Rights(produce, consume, admin)


def _patterns(value: Any, where: str, grouped: bool) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise Mistake(f"{where} must be a list of patterns", where.rpartition(" ")[2])
    for pattern in value:
        parts = pattern.split(":") if grouped else [pattern]
        if grouped and len(parts) != 2:
            raise Mistake(f"{where}: {pattern!r} must be TOPIC:GROUP (\"orders:*\" is every "
                          "group of orders)", f'"{pattern}"')
        for part in parts:
            _check_pattern(part, pattern, where)
    return tuple(value)


def _check_pattern(part: str, pattern: str, where: str) -> None:
    problem = None
    if not PATTERN_CHARACTERS.fullmatch(part):
        problem = ("a name pattern is 1-255 of A-Z a-z 0-9 . _ - and the glob "
                   "characters * ? [ ] !")
    elif "[" in BRACKETS.sub("", part) or "]" in BRACKETS.sub("", part):
        problem = "its [ and ] do not pair"
    if problem is not None:
        raise Mistake(f"{where}: bad pattern {pattern!r}: {problem}", f'"{pattern}"')


# -- the node's side -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RulesReloaded:
    """New rules are in force (SIGHUP): what was allowed under the old ones is looked
    at again (the consumers of named groups)."""


class Authorization(Protocol):
    """Who may do what on a node (``Authorizing``), or everyone everything
    (``NO_AUTHORIZATION``). ``of``: the rights of the client that sent the message
    whose first frame is ``frame`` (``key_of`` its key, ``rights`` a key's rights);
    ``refused`` counts a refusal of its kind."""

    def of(self, frame: zmq.Frame) -> Rights: ...

    def shared(self) -> Rights | None: ...  # every client's rights, when they are one

    def key_of(self, frame: zmq.Frame) -> str: ...

    def rights(self, key: str) -> Rights: ...

    def refused(self, kind: str, what: str, who: str) -> None: ...  # who: a key, or holder

    def admits_send(self, key: str) -> bool: ...  # ZAP's thread asks (--send-dsn)

    def ask_reload(self) -> None: ...  # a signal handler's: only sets a flag

    def reload_if_asked(self) -> bool: ...  # new rules are in force

    def readmit(self, admitted: frozenset[str]) -> bool: ...  # True: a key lost its rights

    def revoked_key(self, key: str) -> bool: ...  # removed from --curve-authorized-keys

    def figures(self) -> dict[str, object]: ...


class Everyone:
    """No --authorization: everything allowed, nothing read per message."""

    def of(self, frame: zmq.Frame) -> Rights:
        return EVERYTHING

    def shared(self) -> Rights | None:
        return EVERYTHING

    def key_of(self, frame: zmq.Frame) -> str:
        return ""

    def rights(self, key: str) -> Rights:
        return EVERYTHING

    def refused(self, kind: str, what: str, who: str) -> None:
        pass

    def admits_send(self, key: str) -> bool:
        return True

    def ask_reload(self) -> None:
        pass

    def reload_if_asked(self) -> bool:
        return False

    def readmit(self, admitted: frozenset[str]) -> bool:
        return False  # nothing read per message: a connection keeps what it had

    def revoked_key(self, key: str) -> bool:
        return False

    def figures(self) -> dict[str, object]:
        return {"forbidden": dict.fromkeys(KINDS, 0)}


NO_AUTHORIZATION = Everyone()


class Authorizing:
    """The rules of a file, read again on SIGHUP (a file that cannot be read or is
    wrong is refused with one log line, and the rules in force stay). ``keyed``: the
    node serves CURVE, so each message names its key (User-Id); without it every
    client has ``[default]``'s rights."""

    def __init__(self, rules: Rules, keyed: bool,
                 admitted: frozenset[str] | None = None) -> None:
        self.keyed = keyed
        self.admitted = admitted  # the keys of --curve-authorized-keys (SIGHUP: again)
        # keys removed from --curve-authorized-keys since the start (SIGHUP): rights to
        # nothing, whatever the file says, for the connections they made before
        self.revoked: frozenset[str] = frozenset()
        self._refusals_logged: dict[tuple[str, str, str], tuple[float, int]] = {}
        self.rules = rules
        self.counts = dict.fromkeys(KINDS, 0)
        self.send_refusals = 0  # counted by ZAP's thread alone (refused handshakes)
        self.reloads = 0
        self.reloads_refused = 0
        self._reload_asked = False

    @property
    def rules(self) -> Rules:
        """The file's rules (those in force add the keys revoked since the start)."""
        return self._file_rules

    @rules.setter
    def rules(self, rules: Rules) -> None:
        self._file_rules = rules
        self._rules = rules if not self.revoked else Rules(
            rules.default, {**rules.clients, **{key: _revoked(key) for key in self.revoked}},
            rules.path)
        # a key is read from a message only when it can make a difference
        self._by_key = self.keyed and bool(self._rules.clients)

    def of(self, frame: zmq.Frame) -> Rights:
        rules = self._rules
        if not self._by_key:
            return rules.default
        try:  # per message: inline (a try costs nothing until it catches)
            return rules.clients.get(frame.get(USER_ID), rules.default)
        except zmq.ZMQError:  # no User-Id (no key): ZAP always gives one with CURVE
            return rules.default

    def shared(self) -> Rights | None:
        """The rights of every client when no message's key can change them (None:
        ask ``of`` for each message)."""
        return None if self._by_key else self._rules.default

    def key_of(self, frame: zmq.Frame) -> str:
        try:
            return frame.get(USER_ID) if self.keyed else ""
        except zmq.ZMQError:
            return ""

    def rights(self, key: str) -> Rights:
        return self._rules.of(key) if self.keyed else self._rules.default

    def refused(self, kind: str, what: str, who: str) -> None:
        """Counted, and logged (``forbidden``) once per key, kind and name, then at
        most every ``REFUSAL_LOG_EVERY_S`` with the count in between: a client refused
        in a loop does not flood the log."""
        self.counts[kind] += 1
        now = time.monotonic()
        said = (who, kind, what)
        logged_at, unlogged = self._refusals_logged.get(said, (None, 0))
        if logged_at is not None and now - logged_at < REFUSAL_LOG_EVERY_S:
            self._refusals_logged[said] = (logged_at, unlogged + 1)
            return
        if len(self._refusals_logged) >= REFUSALS_REMEMBERED:
            self._refusals_logged.clear()
        self._refusals_logged[said] = (now, 0)
        log.info("forbidden", kind=kind, what=what, client_key=who,
                 refused_since_last_logged=unlogged)

    def admits_send(self, key: str) -> bool:
        if self._rules.of(key).may_consume_send():
            return True
        self.send_refusals += 1
        return False

    def ask_reload(self) -> None:
        self._reload_asked = True

    def reload_if_asked(self) -> bool:
        if not self._reload_asked:
            return False
        self._reload_asked = False
        try:
            rules = load_rules(self.rules.path)
        except ConfigError as exc:
            self.reloads_refused += 1
            log.error("authorization_reload_refused", error=str(exc),
                      kept=self.rules.path)
            return False
        self.rules = rules
        self.reloads += 1
        log.info("authorization_reloaded", path=rules.path, clients=len(rules.clients))
        warn_of_rules_that_cannot_apply(rules, self.keyed, self.admitted)
        return True

    def readmit(self, admitted: frozenset[str]) -> bool:
        """--curve-authorized-keys read again: a key no longer there has no rights from
        now on (ZAP refuses its next handshake; its connections made before are refused
        here, message by message); one put back has its rights again. True when a key
        lost its rights (the consumers of named groups are looked at again)."""
        if not self.keyed or self.admitted is None:
            return False
        revoked = (self.revoked | (self.admitted - admitted)) - admitted
        newly = revoked - self.revoked
        self.admitted, self.revoked = admitted, revoked
        self.rules = self._file_rules
        return bool(newly)

    def revoked_key(self, key: str) -> bool:
        return key in self.revoked

    def figures(self) -> dict[str, object]:
        counts = dict(self.counts)
        counts[CONSUME] += self.send_refusals
        return {"forbidden": counts,
                "authorization": {"path": self.rules.path, "clients": len(self.rules.clients),
                                  "keyed": self.keyed, "reloads": self.reloads,
                                  "reloads_refused": self.reloads_refused}}


def produce_refusal(topic: str, rights: Rights) -> str:
    """A producer's refused message, with why, as a CONSUME's and a command's say it."""
    why = ("this client key was removed from the node's --curve-authorized-keys"
           if rights.revoked else "this client key may not produce to that topic (see the "
           "node's --authorization file)")
    return f"FORBIDDEN produce {topic}: {why}"


def _revoked(key: str) -> Rights:
    rights = Rights(holder=key)
    rights.revoked = True
    return rights


def authorization(path: str | None, keyed: bool,
                  admitted: frozenset[str] | None = None) -> Authorization:
    """The node's: NO_AUTHORIZATION without ``path``; ConfigError for a bad file.
    ``admitted``: the public keys (Z85) the node's CURVE admits, when known."""
    if path is None:
        return NO_AUTHORIZATION
    rules = load_rules(path)
    warn_of_rules_that_cannot_apply(rules, keyed, admitted)
    return Authorizing(rules, keyed, admitted)


def grants_nothing(rules: Rules) -> bool:
    """No key may do anything: no client listed and ``[default]`` empty (an empty
    file is valid TOML, and may be one a deployment left half written)."""
    default = rules.default
    return not (rules.clients or default.produce_patterns or default.consume_patterns
                or default.admin)


def warn_of_rules_that_cannot_apply(rules: Rules, keyed: bool,
                                    admitted: frozenset[str] | None = None) -> None:
    """A warning for a file that gives nobody anything, for client tables on a node
    without CURVE, where no message names a key, and for listed keys CURVE does not
    admit (a secret key pasted for the public one, say): each was ignored unsaid."""
    if keyed and admitted is not None:
        strangers = sorted(key for key in rules.clients if key not in admitted)
        if strangers:
            log.warning("authorization_clients_not_admitted", path=rules.path,
                        keys=strangers[:10], count=len(strangers),
                        reason="not among the public keys in --curve-authorized-keys: "
                               "such a key never gets in (its client's NAME.key file not "
                               "copied there, or a key from another line of the file?)")
    if rules.clients and not keyed:
        log.warning("authorization_clients_ignored", path=rules.path,
                    clients=len(rules.clients),
                    reason="the node serves no CURVE (no --curve-secret-key), so no "
                           "client is known by its key: every client has [default]'s "
                           "rights")
    if grants_nothing(rules):
        log.warning("authorization_grants_nothing", path=rules.path,
                    reason="the file lists no client and [default] gives nothing: every "
                           "produce, CONSUME, archive read and command that changes the "
                           "node is refused")

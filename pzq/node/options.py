"""The daemon's options: every one declared once, in ``OPTIONS``; the argument parser
(pzq.node.main), the config file reader and the checks are all driven by that table,
so an option cannot be known to one of them and unknown to another. The endpoints'
rows follow from their declarations (pzq.node.endpoints).

A row gives the option's name (the config file's key), its flag, type, default and
help, its checks (at least 0 or 1, one of some words) and the Config attribute it
fills, in that attribute's unit: ``--flush-interval`` is given in milliseconds and
kept as ``flush_interval_us``.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pzq.durations import DurationError, duration_us
from pzq.endpoints import Endpoint
from pzq.errors import ConfigError
from pzq.node.config import US_PER_HOUR, US_PER_MS, Config
from pzq.node.config_checks import validate
from pzq.node.endpoints import ENDPOINTS
from pzq.protocol.time_headers import MAX_SPAN_MS
from pzq.toml_mistakes import toml_mistake

LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("console", "json")
DURATION = " (microseconds, or with a unit: 250ms, 5s, 2m, 1h)"
US_PER_DAY = 24 * US_PER_HOUR
CENTURY_US = MAX_SPAN_MS * US_PER_MS  # the longest time an option takes, as a DELAY or TTL
UNIT_WORDS = {US_PER_MS: "ms", US_PER_HOUR: "hours"}  # the options' own units, by scale


@dataclass(frozen=True)
class Option:
    """One daemon option: its flag, type, default, the words of its --help, its checks,
    and the Config attribute it fills (``field``, its value times ``scale``)."""

    name: str  # the config file's key, and the argument parser's
    flag: str  # the command-line flag, kept as the original pzq spelled it
    kind: Callable[[str], Any] | type
    default: Any
    help: str
    aliases: tuple[str, ...] = ()
    field: str = ""  # the Config attribute (empty: ``name``)
    scale: int = 1  # from the option's unit to the attribute's
    least: int | None = None  # the smallest value taken (None: any)
    choices: tuple[str, ...] = ()
    # a time's largest value, in µs (its attribute's unit): a century, as a time header's
    # (None: not a time). A tick's period beyond it overflowed APScheduler's timedelta.
    most_us: int | None = None

    @property
    def attribute(self) -> str:
        return self.field or self.name

    def to_attribute(self, value: Any) -> Any:
        """The option's value in its attribute's unit."""
        return value * self.scale if self.scale != 1 else value

    def check(self, value: Any, named: str = "") -> None:
        """Refuse a value out of range; ``named`` is how the refusal names the option
        (its flag unless given: a config file's key)."""
        named = named or self.flag
        if self.least is not None and value < self.least:
            raise ConfigError(f"{named} must be "
                              + ("greater than 0" if self.least else "0 or more"))
        if self.choices and value not in self.choices:
            raise ConfigError(f"{named} must be one of {', '.join(self.choices)}")
        if self.most_us is not None and self.to_attribute(value) > self.most_us:
            most = (f"{self.most_us // US_PER_DAY}d" if self.kind is duration_us
                    else f"{self.most_us // self.scale} {UNIT_WORDS[self.scale]}")
            century = " (a century)" if self.most_us == CENTURY_US else ""
            raise ConfigError(f"{named} must be at most {most}{century}")


def _dsn_list(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def endpoint_option(endpoint: Endpoint) -> Option:
    """An endpoint's row: its DSN, off when unset unless it has a default."""
    return Option(endpoint.option, endpoint.flag, str, endpoint.default, endpoint.help)


def _duration(name: str, flag: str, default: int, help: str, field: str = "",
              least: int | None = 1, aliases: tuple[str, ...] = (),
              most_us: int = CENTURY_US) -> Option:
    return Option(name, flag, duration_us, default, help + DURATION, aliases,
                  field or f"{name}_us", least=least, most_us=most_us)


_BEFORE_ENDPOINTS: tuple[Option, ...] = (
    Option("database", "--database", str, "pzq-data",
           "LevelDB directory holding this node's messages (created if missing)"),
    _duration("ack_timeout", "--ack-timeout", 5_000_000,
              "how long to wait for a consumer ACK before delivering again"),
    _duration("reaper_frequency", "--reaper-frequency", 2_500_000,
              "how often expired deliveries are collected", field="reaper_period_us"),
    Option("hard_sync", "--hard-sync", bool, False,
           "fsync every batch before ACKing producers (survives power loss)"),
    _duration("sync_interval", "--sync-interval", 1_000_000,
              "without --hard-sync, fsync the store's log at least this often, so a power "
              "cut loses at most about this much (0: no timed sync, as LevelDB's 32 MiB write "
              "buffer alone bounds the loss)", least=0),
    Option("inflight_size", "--inflight-size", int, 31_457_280,
           "maximum bytes of messages in flight; beyond it the least recently "
           "sent delivery is evicted and delivered again", least=1),
)

_AFTER_ENDPOINTS: tuple[Option, ...] = (
    _duration("consume_heartbeat", "--consume-heartbeat", 1_000_000,
              "ZeroMQ heartbeat period on --consume-dsn; a connection silent for three is "
              "cut (at most a day)",
              most_us=US_PER_DAY),
    Option("prefetch", "--prefetch", int, 1000,
           "most deliveries unacked at once on --send-dsn; below it the node keeps "
           "each delivery's wait for a consumer well inside --ack-timeout", least=1),
    Option("delivery_headers", "--delivery-headers", bool, False,
           "send the delivery count (DELIVERY:n) and the producer's header frames "
           "before the empty frame of every delivery (off: the original pzq's layout)"),
    Option("max_message_size", "--max-message-size", int, 16 * 1024 * 1024,
           "largest accepted message body in bytes (all parts together)", least=1),
    Option("max_frame_size", "--max-frame-size", int, 0,
           "longest ZeroMQ frame read on --receive-dsn, --broadcast-dsn and "
           "--zper-writer-dsn, in bytes: ZeroMQ closes the connection of a peer that "
           "sends a longer one, unread and unanswered (0: 64 MiB, or --max-message-size "
           "and 1.125 MiB when that is more)", least=0),
    Option("batch_size", "--batch-size", int, 4096,
           "most producer messages and consumer ACKs taken in one wake of the loop", least=1),
    Option("max_deliveries", "--max-deliveries", int, 0,
           "deliveries without an ACK after which a message moves to the dead letters "
           "(0: no limit)", least=0),
    _duration("dedup_window", "--dedup-window", 120_000_000,
              "how long a topic remembers a producer's DEDUP-ID, storing a repeat once "
              "(a topic's own dedup_window overrides it)"),
    _duration("max_age", "--max-age", 0,
              "messages of the default topic (--archive-topic: those without a TOPIC "
              "header) older than this expire and are never delivered; set on that topic "
              "at each start when given (0: leave the topic's own max_age)", least=0),
    Option("on_expire", "--on-expire", str, "dead",
           "what an expired message of the default topic becomes: a dead letter (dead) "
           "or nothing (drop); set on that topic at each start when drop",
           choices=("dead", "drop")),
    Option("send_priorities", "--send-priorities", bool, False,
           "messages of the default topic (those without a TOPIC header, on --send-dsn) "
           "go by their PRIORITY header, 9 first: the topic's priorities=on, set at "
           "each start when given"),
    Option("max_messages", "--max-messages", int, 0,
           "stored messages beyond which producers get QUEUE_FULL (0: no limit)", least=0),
    Option("max_bytes", "--max-bytes", int, 0,
           "stored bytes beyond which producers get QUEUE_FULL (0: no limit)", least=0),
    Option("archive_dir", "--archive-dir", str, None,
           "archive every acked message to a ZPER segment log here (off when unset)"),
    Option("segment_size", "--segment-size", int, 536_870_912,
           "archive: roll to a new segment file past this many bytes", least=1),
    Option("flush_messages", "--flush-messages", int, 10_000,
           "archive: fsync after this many messages", least=1),
    Option("flush_interval", "--flush-interval", int, 1000,
           "archive: fsync at least this often when something is unsynced (milliseconds)",
           field="flush_interval_us", scale=US_PER_MS, least=1, most_us=CENTURY_US),
    Option("retain_hours", "--retain-hours", int, 168,
           "archive: delete whole segments older than this", field="retain_us",
           scale=US_PER_HOUR, least=1, most_us=CENTURY_US),
    Option("archive_topic", "--archive-topic", str, "default",
           "archive: topic of messages without a TOPIC:name header"),
    Option("retain_bytes", "--retain-bytes", int, 0,
           "archive: per topic, delete the oldest whole segments while the topic is "
           "larger than this many bytes (0: no limit)", least=0),
    Option("relay_poll", "--relay-poll", int, 1000,
           "archive: how often the relay looks for new records (milliseconds)",
           field="relay_poll_us", scale=US_PER_MS, least=1, most_us=CENTURY_US),
    Option("replay_rate", "--replay-rate", int, 1000,
           "archive: messages a second the node's replays read back from the archive, "
           "all together (a rate the live path keeps its pace beside)", least=1),
    Option("curve_secret_key", "--curve-secret-key", str, None,
           "this node's CURVE key pair (a .key_secret file): encrypt every socket"),
    Option("curve_authorized_keys", "--curve-authorized-keys", str, None,
           "directory of public keys allowed to connect (needed with --curve-secret-key; "
           "read again on SIGHUP)"),
    Option("cluster_authorized_keys", "--cluster-authorized-keys", str, None,
           "directory of the other nodes' public keys, NAME.key for each NAME=ENDPOINT "
           "in --nodes: each node its own key pair, and only these keys join the cluster "
           "(read again on SIGHUP)"),
    Option("authorization", "--authorization", str, None,
           "TOML file of what each client key may do: the topics it may produce to and "
           "consume, and whether it may administer (read again on SIGHUP; off when unset: "
           "everything allowed)"),
    Option("log_level", "--log-level", str, "info", "one of " + ", ".join(LOG_LEVELS),
           choices=LOG_LEVELS),
    Option("log_format", "--log-format", str, "console", "one of " + ", ".join(LOG_FORMATS),
           choices=LOG_FORMATS),
    Option("replicas", "--replicas", int, 0,
           "peers that must hold a copy before a producer is ACKed", least=0),
    Option("nodes", "--nodes", _dsn_list, (),
           "cluster endpoints of the other nodes, separated by ','; NAME=ENDPOINT "
           "names a node's key NAME.key in --cluster-authorized-keys"),
    _duration("timeout_nodes", "--timeout-nodes", 10_000_000,
              "silence after which a peer is considered down"),
    _duration("timeout_replication", "--timeout_replication", 100_000,
              "how long to wait for replicas before ACKing with REPLICATION_FAILED",
              aliases=("--timeout-replication",)),
    Option("partitions", "--partitions", str, "",
           "partitioned topics to declare at start, NAME=COUNT separated by ',' "
           "(e.g. orders=16,payments=4; see pzq-ctl topic declare --partitions)"),
    Option("shards", "--shards", int, 1,
           "node processes on this host as one cluster, supervised: shard K stores in "
           "DATABASE/shard-K and adds 10*K to every tcp port (1: this process is the node)",
           least=1),
)

ENDPOINT_OPTIONS = {endpoint.option: endpoint for endpoint in ENDPOINTS}
OPTIONS: tuple[Option, ...] = (*_BEFORE_ENDPOINTS,
                               *(endpoint_option(endpoint) for endpoint in ENDPOINTS),
                               *_AFTER_ENDPOINTS)
OPTIONS_BY_NAME = {option.name: option for option in OPTIONS}
FLAGS = frozenset(option.flag for option in OPTIONS)


def defaults() -> dict[str, Any]:
    return {option.name: option.default for option in OPTIONS}


def read_config_file(path: Path) -> dict[str, Any]:
    """Read a TOML config file; keys are option names with '-' or '_'."""
    return read_config_file_spelt(path)[0]


def read_config_file_spelt(path: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """A config file's values by option name, and each option's key as the file spells it."""
    text = ""
    try:
        text = path.read_bytes().decode()
        raw = tomllib.loads(text)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {path} is a directory: give the file's path") from None
    except PermissionError:
        raise ConfigError(f"config file {path} may not be read by this user "
                          "(permission denied)") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path} is not UTF-8 text (TOML is): byte "
                          f"{exc.object[exc.start]:#04x} at position {exc.start}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path}{toml_mistake(str(exc), text)}") from None
    except OSError as exc:
        raise ConfigError(f"config file {path} could not be read: {exc}") from None
    values: dict[str, Any] = {}
    spelt: dict[str, str] = {}  # option name -> the key the file gave it under
    for key, value in raw.items():
        name = key.replace("-", "_")
        if name not in OPTIONS_BY_NAME:
            raise ConfigError(f"config file {path}: unknown option {key!r}")
        if name in spelt:  # ack-timeout and ack_timeout: which was meant cannot be told
            raise ConfigError(f"config file {path}: {spelt[name]} and {key} are one option: "
                              "give it once")
        spelt[name] = key
        values[name] = _coerce_file_value(path, OPTIONS_BY_NAME[name], key, value)
    return values, spelt


def _coerce_file_value(path: Path, option: Option, key: str, value: Any) -> Any:
    """Accept the TOML type that matches the option (a list or a string for nodes);
    a refusal names the option by ``key``, as the file spells it."""
    if option.name == "nodes":
        if isinstance(value, str):
            return _dsn_list(value)
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            return tuple(value)
    elif option.kind is duration_us and isinstance(value, float):
        raise ConfigError(f"config file {path}: {key} = {value}: give whole "
                          f'microseconds or a text with a unit, e.g. "{value}s"')
    elif option.kind is duration_us and isinstance(value, (int, str)) \
            and not isinstance(value, bool):
        try:
            return duration_us(str(value))
        except DurationError as exc:
            raise ConfigError(f"config file {path}: {key}: {exc}") from None
    elif option.kind is bool and isinstance(value, bool):
        return value
    elif option.kind is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    elif option.kind is str and isinstance(value, str):
        return value
    raise ConfigError(f"config file {path}: {key} has the wrong type ({value!r}): give "
                      f"{TOML_WANTED[option.kind]}")


# what a refused value's option takes, as its TOML
TOML_WANTED: dict[object, str] = {
    _dsn_list: 'a text of endpoints separated by "," or a list of texts',
    duration_us: 'whole microseconds or a text with a unit, e.g. "5s"',
    bool: "true or false", int: "a whole number", str: "a text in quotes"}


def build_config(cli_values: Mapping[str, Any], config_file: Path | None = None) -> Config:
    """Merge defaults < config file < command line, check each value, then validate the
    whole once."""
    values = defaults()
    spelt: dict[str, str] = {}  # option name -> its key in the config file
    if config_file is not None:
        file_values, spelt = read_config_file_spelt(config_file)
        values.update(file_values)
    values.update(cli_values)
    for option in OPTIONS:
        key = spelt.get(option.name) if option.name not in cli_values else None
        option.check(values[option.name],
                     f"config file {config_file}: {key}" if key else option.flag)
    config = Config(**_fields(values))
    try:
        validate(config)
    except ConfigError as exc:
        if config_file is None:
            raise
        raise ConfigError(in_file_terms(str(exc), config_file, spelt, cli_values)) from None
    return config


FLAG = re.compile(r"--[a-z][a-z-]*[a-z]")


def in_file_terms(refusal: str, config_file: Path, spelt: Mapping[str, str],
                  cli_values: Mapping[str, Any]) -> str:
    """A whole configuration's refusal that names first an option the file gave, said
    as the file says it (``config file F: nodes needs broadcast-dsn, ...``): the user
    looks in the file, not for a flag never typed. An option given on the command line
    keeps its flag; a refusal that begins with one is left as it is."""
    file_keys = {OPTIONS_BY_NAME[name].flag: key for name, key in spelt.items()
                 if name not in cli_values}
    command_line = {OPTIONS_BY_NAME[name].flag for name in cli_values
                    if name in OPTIONS_BY_NAME}
    flags = FLAG.findall(refusal)
    if not flags or flags[0] not in file_keys:
        return refusal

    def in_file(flag: re.Match[str]) -> str:
        if flag[0] in command_line or flag[0] not in FLAGS:
            return flag[0]
        return file_keys.get(flag[0], flag[0][2:])

    return f"config file {config_file}: {FLAG.sub(in_file, refusal)}"


def with_options(config: Config, values: Mapping[str, Any]) -> Config:
    """``config`` with some options given anew (a shard's: pzq.node.shard_layout), not
    validated."""
    fields = {name: getattr(config, name) for name in Config.__dataclass_fields__}
    endpoints = dict(config.endpoints)
    for name, value in values.items():
        endpoint = ENDPOINT_OPTIONS.get(name)
        if endpoint is not None:
            endpoints[endpoint.role] = value
        else:
            option = OPTIONS_BY_NAME[name]
            fields[option.attribute] = option.to_attribute(value)
    return Config(**{**fields, "endpoints": endpoints})


def _fields(values: Mapping[str, Any]) -> dict[str, Any]:
    """Option values as Config's attributes, in their units; the endpoints that are set."""
    fields: dict[str, Any] = {}
    for option in OPTIONS:
        if option.name not in ENDPOINT_OPTIONS:
            fields[option.attribute] = option.to_attribute(values[option.name])
    fields["endpoints"] = {endpoint.role: values[endpoint.option] for endpoint in ENDPOINTS
                           if values[endpoint.option] is not None}
    return fields

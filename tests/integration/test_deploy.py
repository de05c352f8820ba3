"""Deployment: the systemd unit passes systemd-analyze, and the container image's build
steps install a node that starts as the image's CMD starts it and passes the image's
health check (the image itself is built and run where a Docker engine answers)."""

from __future__ import annotations

import json
import os
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tomllib
import urllib.request
from pathlib import Path

import pytest
import zmq

from tests.support.harness import NodeProcess, wait_until
from tests.support.ports import port_below_ephemeral

ROOT = Path(__file__).parents[2]
DEPLOY = ROOT / "config" / "deploy"
pytestmark = pytest.mark.timeout(60)


def instruction(name: str) -> str:
    """One instruction of the Dockerfile, its continued lines joined."""
    text = (DEPLOY / "Dockerfile").read_text().replace("\\\n", " ")
    found = re.search(rf"^{name} (.*)$", text, re.MULTILINE)
    assert found is not None, f"no {name} in config/deploy/Dockerfile"
    return found[1]


def exec_form(name: str) -> list[str]:
    """The JSON array of a CMD or of a HEALTHCHECK's CMD."""
    array: list[str] = json.loads(re.search(r"(\[.*\])", instruction(name))[1])
    return array


def test_the_systemd_unit_passes_systemd_analyze_verify(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed here")
    unit = (DEPLOY / "pzq.service").read_text()
    for wanted in ("Restart=on-failure", "User=pzq", "ProtectSystem=strict", "NoNewPrivileges=true",
                   "PrivateTmp=true", "ReadWritePaths=/var/lib/pzq", "LimitNOFILE="):
        assert wanted in unit
    # verify checks that ExecStart's program is there: the suite's own pzq stands in for
    # the installed /opt/pzq/bin/pzq; every other line is verified as it is.
    installed = Path(shutil.which("pzq") or ROOT / ".venv" / "bin" / "pzq")
    (tmp_path / "pzq.service").write_text(unit.replace("/opt/pzq/bin/pzq", str(installed)))
    result = subprocess.run([analyze, "verify", str(tmp_path / "pzq.service")],
                            capture_output=True, text=True, timeout=30, check=False)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_the_image_runs_as_a_user_of_its_own_with_a_volume_and_asks_the_monitor():
    assert re.match(r"python:[\d.]+-slim", instruction("FROM"))
    assert instruction("USER") not in ("root", "0")
    assert instruction("VOLUME") == '["/var/lib/pzq"]'
    assert "config/deploy/build-steps.sh" in instruction("RUN")
    assert exec_form("HEALTHCHECK")[:2] == ["/opt/pzq/bin/pzq-monitor", "--check"]


def test_the_deploy_files_name_files_of_the_repository():
    """The image copies the repository (the build context, its root) to /src/pzq and the
    build steps read SOURCE's files: each path they name is a file of the repository,
    wherever the deployment's folder moves."""
    copied = instruction("COPY").split()
    assert copied == [".", "/src/pzq"], copied
    named = re.findall(r"/src/pzq/(\S+)", (DEPLOY / "Dockerfile").read_text())
    named += re.findall(r'"\$source/([^"]+)"', (DEPLOY / "build-steps.sh").read_text())
    assert named and all((ROOT / path).is_file() for path in named), named


def test_the_image_makes_the_backups_folder_the_page_mounts_its_user_s():
    """A new volume takes the owner of the folder it is mounted on, root's where the
    image has none: the page's backups volume must be mounted on a folder of the user's,
    or the node's backups into it are refused (Permission denied)."""
    page = (ROOT / "docs" / "deploying.rst").read_text()
    (mounted,) = set(re.findall(r"-v pzq-backups:(/\S+?)``", page))
    assert f"backup {mounted}/" in page
    user = instruction("USER")
    assert re.search(rf"install -d -o {user} -g {user} (-m \d+ )?{re.escape(mounted)}\b",
                     instruction("RUN")), instruction("RUN")


def on_ports(text: str, ports: dict[str, int]) -> str:
    """The image's ports 11131-11136 as ports drawn for this test (nodes of other tests
    and other programs run beside it)."""
    return re.sub(r":(1113\d)\b", lambda port: f":{ports[port[1]]}", text)


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_the_image_s_build_steps_install_a_node_that_passes_its_health_check(tmp_path):
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "__pycache__", "*.egg-info", "build", "_build", "pzq-data"))
    prefix, data, etc = tmp_path / "opt", tmp_path / "data", tmp_path / "etc"
    built = subprocess.run([str(DEPLOY / "build-steps.sh"), str(source), str(prefix),
                            str(data), str(etc)], capture_output=True, text=True,
                           timeout=360, check=False)
    assert built.returncode == 0, built.stderr
    assert built.stdout.strip() == "pzq 0.1.0"
    ports = {str(port): port_below_ephemeral() for port in range(11131, 11137)}
    config = etc / "pzq.toml"
    config.write_text(on_ports(config.read_text(), ports))

    def as_installed(command: list[str]) -> list[str]:
        return [on_ports(word.replace("/opt/pzq", str(prefix)).replace("/etc/pzq", str(etc)),
                         ports) for word in command]

    node = subprocess.Popen(as_installed(exec_form("CMD")), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        check = as_installed(exec_form("HEALTHCHECK"))

        def healthy() -> subprocess.CompletedProcess[str] | None:
            assert node.poll() is None, node.stderr.read() if node.stderr else ""
            ran = subprocess.run(check, capture_output=True, text=True, timeout=30,
                                 check=False)
            return ran if ran.returncode == 0 else None

        answer = wait_until(healthy, 60, interval=0.5, message="the health check")
        assert answer.stdout.strip().endswith(": healthy")
        assert (data / "store" / "CURRENT").exists() and (data / "archive").is_dir()
        # The page runs the exporter beside each node from this install: it was
        # installed without the monitoring extra ("needs prometheus-client", exit 2).
        listen = f"127.0.0.1:{port_below_ephemeral()}"
        exporter = subprocess.Popen(
            [str(prefix / "bin" / "pzq-exporter"), "--dsn", check[check.index("--dsn") + 1],
             "--listen", listen], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True)
        try:
            def scraped() -> str | None:
                assert exporter.poll() is None, exporter.stderr.read() if exporter.stderr else ""
                try:
                    with urllib.request.urlopen(f"http://{listen}/metrics", timeout=5) as page:
                        return page.read().decode()
                except OSError:
                    return None

            metrics = wait_until(scraped, 30, interval=0.2, message="the exporter's /metrics")
            assert re.search(r"^pzq_up\{[^}]*\} 1\.0$", metrics, re.M), metrics[:2000]
        finally:
            exporter.send_signal(signal.SIGTERM)
            assert exporter.wait(30) == 0
    finally:
        node.send_signal(signal.SIGTERM)
        assert node.wait(30) == 0


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_image_builds_and_reports_healthy_where_docker_runs(tmp_path):
    docker = shutil.which("docker")
    if docker is None or subprocess.run([docker, "info"], capture_output=True, timeout=30,
                                        check=False).returncode != 0:
        pytest.skip("no Docker engine answers here: the build steps are tested as a script")
    tag = f"pzq-test:{tmp_path.name.lower()}"
    built = subprocess.run([docker, "build", "-f", str(DEPLOY / "Dockerfile"), "-t", tag,
                            str(ROOT)], capture_output=True, text=True, timeout=600,
                           check=False)
    assert built.returncode == 0, built.stderr[-2000:]
    volume = f"pzq-test-backups-{tmp_path.name.lower()}"
    started = subprocess.run([docker, "run", "-d", "--ulimit", "nofile=65536", "-v",
                              f"{volume}:/backups", tag], capture_output=True,
                             text=True, timeout=60, check=True)
    container = started.stdout.strip()
    try:
        def health() -> str | None:
            state = subprocess.run([docker, "inspect", "-f", "{{.State.Health.Status}}",
                                    container], capture_output=True, text=True, timeout=30,
                                   check=False).stdout.strip()
            assert state != "unhealthy"
            return state if state == "healthy" else None

        wait_until(health, 180, interval=2, message="the container's health check")
        # the page's backup into its volume: the node's user writes there
        backup = subprocess.run([docker, "exec", container, "/opt/pzq/bin/pzq-ctl", "--dsn",
                                 "tcp://127.0.0.1:11133", "backup", "/backups/first"],
                                capture_output=True, text=True, timeout=120, check=False)
        assert backup.returncode == 0, backup.stderr
        # docker stop's SIGTERM stops the node as asked, well within docker's 10 s
        subprocess.run([docker, "stop", container], capture_output=True, timeout=60,
                       check=True)
        stopped = subprocess.run([docker, "inspect", "-f", "{{.State.ExitCode}}", container],
                                 capture_output=True, text=True, timeout=30, check=True)
        assert stopped.stdout.strip() == "0"
    finally:
        subprocess.run([docker, "rm", "-f", container], capture_output=True, timeout=60,
                       check=False)
        subprocess.run([docker, "volume", "rm", "-f", volume], capture_output=True,
                       timeout=60, check=False)
        subprocess.run([docker, "rmi", "-f", tag], capture_output=True, timeout=60,
                       check=False)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_capacity_script_gives_every_figure_of_the_page(tmp_path):
    """scripts/capacity.py, small: the figures of docs/deploying.rst, "Capacity"."""
    ran = subprocess.run([sys.executable, str(ROOT / "scripts" / "capacity.py"), "--count",
                          "3000", "--sizes", "200", "--json", str(tmp_path / "c.json")],
                         capture_output=True, text=True, timeout=170, check=False)
    assert ran.returncode == 0, ran.stderr
    (row,) = json.loads((tmp_path / "c.json").read_text())
    assert row["store_bytes_per_message"] > 200 and row["store_bytes_per_message_restarted"] > 200
    assert row["inflight_bytes_per_message"] > 200  # the record it keeps, and more
    assert 0 <= row["waiting_bytes_per_message"] < row["inflight_bytes_per_message"]
    assert row["archive_bytes_per_million"] > 200 * 1_000_000


def test_the_backup_schedule_reaches_the_monitor_of_every_node_the_page_configures():
    """Each crontab line's pzq-ctl asks a monitor the page's configurations serve, with
    CURVE keys where it serves CURVE: the line for config/deploy/pzq.toml's 127.0.0.1 was
    the only one, and on a host of the three-host cluster (its monitor on the host's
    address, CURVE on every socket) nothing answered it."""
    page = (ROOT / "docs" / "deploying.rst").read_text()
    configs = [tomllib.loads((DEPLOY / "pzq.toml").read_text())] + [
        tomllib.loads(re.sub(r"^   ", "", block, flags=re.M)) for block in
        re.findall(r"^\.\. code-block:: toml\n\n((?:   .*\n|\n)+)", page, re.M)]
    asked = []
    for line in re.findall(r"^   \S+ \S+ \* \* \* pzq (.*)$", page, re.M):
        words = shlex.split(line.split(" && ")[0])
        assert words[0] == "/opt/pzq/bin/pzq-ctl" and "backup" in words, line
        options = dict(zip(words[1::2], words[2::2], strict=False))
        asked.append((options["--dsn"], options.get("--curve-client-key"),
                      options.get("--curve-server-key")))
    for config in configs:
        secret = config.get("curve-secret-key")
        server_key = secret and secret.removesuffix("_secret")
        wanted = [(dsn, client, server) for dsn, client, server in asked
                  if dsn == config["monitor-dsn"].replace("*", "127.0.0.1")]
        assert wanted, (config["monitor-dsn"], asked)
        assert all(server == server_key for _, _, server in wanted), (server_key, wanted)
        assert all((client is None) == (secret is None) for _, client, _ in wanted), wanted


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_store_as_written_is_the_log_s_figure_when_the_messages_outgrow_the_log(tmp_path):
    """40 MB of bodies, past LevelDB's 32 MiB log: the figure as written was measured
    while the log was being written as a table beside it (1.5 times the body, and 1 092
    or 1 737 B for 1 000 B from run to run); now it is the log's, steady."""
    ran = subprocess.run([sys.executable, str(ROOT / "scripts" / "capacity.py"), "--count",
                          "20000", "--sizes", "2000", "--json", str(tmp_path / "c.json")],
                         capture_output=True, text=True, timeout=170, check=False)
    assert ran.returncode == 0, ran.stderr
    (row,) = json.loads((tmp_path / "c.json").read_text())
    assert 2000 < row["store_bytes_per_message"] < 2000 * 1.1, row
    assert row["store_messages_as_written"] < 20000
    # every column with its unit, and the memory waiting as the page gives it (0.04 B,
    # where the table said 0)
    assert "restarted B/msg" in ran.stdout
    assert f"{row['waiting_bytes_per_message']:.2f}" in ran.stdout.splitlines()[1].split()


def test_the_firewall_rules_open_every_port_the_page_s_cluster_serves():
    """Each port a node of the three-host cluster binds, and its exporter's, has a rule
    of the page's nftables example (the exporter's 9646 had none: Prometheus, outside
    the host, was dropped)."""
    page = (ROOT / "docs" / "deploying.rst").read_text()
    (node,) = re.findall(r"^\.\. code-block:: toml\n\n((?:   .*\n|\n)+)", page, re.M)
    served = {int(port) for port in re.findall(r'-dsn = "tcp://[^"]+:(\d+)"', node)}
    served |= {int(port) for port in re.findall(r"--listen \S+:(\d+)", page)}
    opened: set[int] = set()
    for ports in re.findall(r"^   nft add rule .* tcp dport '?\{?([\d, ]+)\}?'? accept$",
                            page, re.M):
        opened |= {int(port) for port in ports.split(",")}
    assert served and served <= opened, sorted(served - opened)


def test_the_deploy_files_comments_give_the_page_s_commands():
    """The useradd in the unit's comment and the docker run in the Dockerfile's are the
    page's: the unit's left out --user-group (Group=pzq needs the group, which useradd
    makes without it only where USERGROUPS_ENAB is on), the Dockerfile's the raised
    descriptor limit and the consumer groups' port."""
    def commands(text: str, prefix: str) -> list[str]:
        joined = re.sub(r"\\\n[#\s]*", " ", text)
        return [" ".join(found.split()) for found in
                re.findall(rf"^[#\s]*({prefix} .*)$", joined, re.M)]

    page = (ROOT / "docs" / "deploying.rst").read_text()
    for file, prefix in (("pzq.service", "useradd"), ("Dockerfile", "docker run")):
        given = commands((DEPLOY / file).read_text(), prefix)
        assert given and set(given) <= set(commands(page, prefix)), (file, given)


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_the_build_steps_keep_an_options_file_there_as_it_is(tmp_path):
    """The upgrade steps build the new release with the same ETC: the operator's
    pzq.toml (a cluster node's endpoints, keys and peers) was replaced by the
    template's, and the node came back alone, without CURVE."""
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "__pycache__", "*.egg-info", "build", "_build", "pzq-data"))
    etc = tmp_path / "etc"
    etc.mkdir()
    operators = 'broadcast-dsn = "tcp://10.0.0.1:11134"\nreplicas = 1\n'
    (etc / "pzq.toml").write_text(operators)
    built = subprocess.run([str(DEPLOY / "build-steps.sh"), str(source), str(tmp_path / "new"),
                            str(tmp_path / "data"), str(etc)], capture_output=True, text=True,
                           timeout=360, check=False)
    assert built.returncode == 0, built.stderr
    assert (etc / "pzq.toml").read_text() == operators
    assert f"{etc / 'pzq.toml'} is there already: kept as it is" in built.stderr


def test_the_upgrade_steps_drop_in_points_the_unit_at_the_new_release(tmp_path):
    """The drop-in the page writes to point the unit at /opt/pzq-NEW: systemd takes it
    (verify reads drop-ins beside the unit) and it runs the new release's pzq."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed here")
    page = (ROOT / "docs" / "deploying.rst").read_text()
    (printf,) = re.findall(r"^ +(printf '\[Service\].*)\\\n +> (\S+)$", page, re.M)
    written = subprocess.run(["sh", "-c", printf[0]], capture_output=True, text=True,
                             timeout=30, check=True).stdout
    assert printf[1] == "/etc/systemd/system/pzq.service.d/release.conf"
    installed = str(Path(shutil.which("pzq") or ROOT / ".venv" / "bin" / "pzq"))
    (tmp_path / "pzq.service.d").mkdir()
    (tmp_path / "pzq.service.d" / "release.conf").write_text(
        written.replace("/opt/pzq-NEW/bin/pzq", installed))
    (tmp_path / "pzq.service").write_text((DEPLOY / "pzq.service").read_text().replace(
        "/opt/pzq/bin/pzq", "/opt/pzq-OLD-GONE/bin/pzq"))  # only the drop-in's may run
    result = subprocess.run([analyze, "verify", str(tmp_path / "pzq.service")],
                            capture_output=True, text=True, timeout=30, check=False,
                            env={"PATH": "/usr/bin:/bin", "SYSTEMD_UNIT_PATH": f"{tmp_path}:"})
    assert (result.returncode, result.stdout + result.stderr) == (0, "")
    assert written.splitlines()[1:] == [
        "ExecStart=", "ExecStart=/opt/pzq-NEW/bin/pzq --config /etc/pzq/pzq.toml"]


def test_the_page_s_health_check_with_curve_is_the_image_s_with_keys():
    """An options file with CURVE: the image's health check asks without a key and the
    container stays unhealthy; the page's --health-cmd is the image's check with the
    client's key pair and the node's public key."""
    page = (ROOT / "docs" / "deploying.rst").read_text()
    (given,) = re.findall(r"--health-cmd '([^']+)'", page)
    words = shlex.split(given)
    options = dict(zip(words[2::2], words[3::2], strict=False))  # after PROGRAM --check
    image = exec_form("HEALTHCHECK")
    assert words[:2] == image[:2]
    assert dict(zip(image[2::2], image[3::2], strict=False)).items() <= options.items()
    assert options["--curve-client-key"].endswith(".key_secret")
    assert options["--curve-server-key"].endswith(".key")


def test_a_node_running_out_of_descriptors_says_so(tmp_path):
    """The page's limits section: a node out of descriptors accepts no connection.
    ZeroMQ said nothing of it (the page said it logs 'Too many open files'; the node's
    log had not a line, and new clients waited for ever); now the node warns with its
    count and its limit, and says when they are enough again."""
    limit = 128

    def few_descriptors() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    node = NodeProcess(tmp_path / "db", preexec_fn=few_descriptors).start()
    context = zmq.Context()
    connections: list[zmq.Socket[bytes]] = []
    try:
        for _ in range(limit):  # a producer's connection each, past the limit
            connection = context.socket(zmq.DEALER)
            connection.connect(node.receive_dsn)
            connections.append(connection)
        warned = wait_until(lambda: node.event("descriptors_running_out"), 20,
                            message="the node's warning")
        assert warned["limit"] == limit and warned["open"] >= 0.9 * limit, warned
        assert warned["level"] == "warning"
        # a health check once none is left (the warning comes at 90 %): its connection
        # completes and is never accepted; it blamed a busy node, another program or
        # CURVE, and not the descriptors
        assert node.process is not None
        held = Path(f"/proc/{node.process.pid}/fd")
        wait_until(lambda: len(list(held.iterdir())) >= limit, 20,
                   message="every descriptor of the node taken")
        checked = subprocess.run(
            [str(Path(sys.executable).parent / "pzq-monitor"), "--check", "--dsn",
             node.monitor_dsn, "--timeout", "2"], capture_output=True, text=True,
            timeout=30, check=False)
        assert checked.returncode == 3, checked.stderr
        assert "out of file descriptors (its log says descriptors_running_out)" in \
            checked.stderr.splitlines()[-1], checked.stderr
        for connection in connections:
            connection.close(0)
        calm = wait_until(lambda: node.event("descriptors_enough"), 20,
                          message="the node saying its descriptors are enough again")
        assert calm["open"] < 0.8 * limit
    finally:
        for connection in connections:
            connection.close(0)
        context.term()
        node.stop()


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_the_build_steps_refuse_an_interpreter_the_node_s_user_cannot_run(tmp_path):
    """Built as root on root's own Python (one under /root, mode 0700), the install ran
    for root and the build said "pzq 0.1.0"; the unit, which runs it as the user pzq,
    failed at its start ("Permission denied"). The build steps now ask the user to run
    it and say in one line which interpreter it cannot run."""
    if os.geteuid() != 0:
        pytest.skip("the build steps make and check the node's user as root only")
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "__pycache__", "*.egg-info", "build", "_build", "pzq-data"))
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "python3").symlink_to(os.path.realpath(sys._base_executable))
    built = subprocess.run([str(DEPLOY / "build-steps.sh"), str(source), str(tmp_path / "opt"),
                            str(tmp_path / "data"), str(tmp_path / "etc"), "nobody"],
                           capture_output=True, text=True, timeout=360, check=False,
                           env={**os.environ, "PYTHON": str(private / "python3")})
    assert built.returncode == 1, built.stdout + built.stderr
    (said,) = [line for line in built.stderr.splitlines() if "build-steps.sh" in line]
    assert said.startswith("build-steps.sh: the user nobody cannot run "), said
    assert "PYTHON=" in said and "pzq 0.1.0" not in built.stdout


def test_the_page_s_firewall_rules_load_on_a_host_without_a_table_and_close_the_ports():
    """nft takes the page's commands as they are on a host with no ruleset (they added
    rules to a table and chain that were not there: "No such file or directory"), and
    after the accepts a drop closes every port of the page's table to anyone else (the
    accepts alone, in a chain whose policy accepts, let everyone in)."""
    nft = shutil.which("nft")
    if nft is None or os.geteuid() != 0:
        pytest.skip("nft is not installed here, or not as root (it checks as root only)")
    page = (ROOT / "docs" / "deploying.rst").read_text()
    commands = [shlex.split(line)[1:] for line in re.findall(r"^   (nft .*)$", page, re.M)]
    script = "".join(" ".join(words) + "\n" for words in commands)
    checked = subprocess.run([nft, "-c", "-f", "-"], input=script, capture_output=True,
                             text=True, timeout=30, check=False)
    assert checked.returncode == 0, checked.stderr
    last = commands[-1]
    assert last[:4] == ["add", "rule", "inet", "filter"] and last[-1] == "drop", last
    dropped = re.fullmatch(r"\{ (\d+)-(\d+), (\d+) \}", last[-2])
    assert dropped, last
    table = {int(port) for port in re.findall(r"^``[^`]+``\s+(\d+)\s", page, re.M)}
    low, high, single = (int(port) for port in dropped.groups())
    assert table and table <= {*range(low, high + 1), single}, sorted(table)

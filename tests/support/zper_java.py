"""ZPER's own Java tests and perf clients, compiled from a ZPER source folder and run
against a pzq node (tests/integration/test_zper_java.py).

What is needed, and where it is looked for:

* ``PZQ_ZPER_SRC``: a checkout of ZPER (github.com/miniway/zper), the folder holding
  ``src/main/java`` and ``src/test/java``. Nothing of ZPER is kept in this repository.
* ``javac`` and ``java`` on ``PATH``, or in ``$JAVA_HOME/bin``.
* jeromq: ``PZQ_JEROMQ_JAR``, else ``/usr/share/java/jeromq.jar`` (Debian's
  ``libjeromq-java``, 0.3.6).
* junit 4 with hamcrest, commons-cli and slf4j-api: the jars named in
  ``PZQ_ZPER_CLASSPATH`` (separated by ``:``), else in ``/usr/share/java`` (Debian's
  ``junit4``, ``libcommons-cli-java``, ``libslf4j-java``).

Only what the runs need is compiled: ZPER's ``MsgIterator``, ``ZPUtils``, ``ZLog``,
``ZLogManager``, ``TestZPReader`` and ``org.zper.perf``, beside three small classes
of ours (tests/support/zper_java/): ``org.zper.ZPer``, which stands in for ZPER's
broker (the broker is the pzq node; ZPER's server classes are not built), a writer
check, and a probe of what the jeromq at hand does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

SYSTEM_JARS = Path("/usr/share/java")
OUR_CLASSES = Path(__file__).parent / "zper_java"
# Jars besides jeromq, by the names Debian gives them (a versioned name matches too).
NEEDED_JARS = {"junit": ("junit4", "junit"), "hamcrest": ("hamcrest-core", "hamcrest"),
               "commons-cli": ("commons-cli",), "slf4j-api": ("slf4j-api",)}
ZPER_SOURCES = ("src/main/java/org/zper/MsgIterator.java",
                "src/main/java/org/zper/ZPUtils.java",
                "src/main/java/org/zper/base/ZLog.java",
                "src/main/java/org/zper/base/ZLogManager.java",
                "src/test/java/org/zper/TestZPReader.java")
ZPER_PERF = "src/test/java/org/zper/perf"
COMPILE_TIMEOUT = 180.0
HOW = ("set PZQ_ZPER_SRC to a ZPER checkout (github.com/miniway/zper) and have a JDK "
       "(javac), jeromq (PZQ_JEROMQ_JAR, or Debian's libjeromq-java), junit4, "
       "libcommons-cli-java and libslf4j-java")


@dataclass(frozen=True)
class ZperJava:
    source: Path
    javac: str
    java: str
    jars: tuple[Path, ...]  # jeromq first

    def classpath(self, classes: Path) -> str:
        return os.pathsep.join([str(classes), *map(str, self.jars)])

    def compile(self, classes: Path) -> None:
        """ZPER's classes the runs need, and ours, into ``classes``; javac's output in
        the error when it fails."""
        sources = [self.source / name for name in ZPER_SOURCES]
        sources += sorted((self.source / ZPER_PERF).glob("*.java"))
        sources += sorted(OUR_CLASSES.glob("*.java"))
        classes.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([self.javac, "-nowarn", "-encoding", "UTF-8", "-d", str(classes),
                               "-cp", os.pathsep.join(map(str, self.jars)),
                               *map(str, sources)],
                              capture_output=True, text=True, timeout=COMPILE_TIMEOUT,
                              check=False)
        if done.returncode != 0:
            raise RuntimeError(f"javac failed:\n{done.stdout}{done.stderr}")

    def run(self, classes: Path, main: str, *args: str, timeout: float = 120.0,
            properties: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        defines = [f"-D{name}={value}" for name, value in (properties or {}).items()]
        return subprocess.run([self.java, *defines, "-cp", self.classpath(classes), main,
                               *args], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, check=False)


def find() -> ZperJava | str:
    """What the runs need, or one line saying what is missing and what to set."""
    source = os.environ.get("PZQ_ZPER_SRC")
    if not source:
        return f"PZQ_ZPER_SRC is not set: {HOW}"
    missing = [name for name in (*ZPER_SOURCES, ZPER_PERF) if not (Path(source) / name).exists()]
    if missing:
        return f"PZQ_ZPER_SRC={source} is not a ZPER checkout (no {missing[0]}): {HOW}"
    tools = {name: _jdk_tool(name) for name in ("javac", "java")}
    if not all(tools.values()):
        return f"no javac or java on PATH or in $JAVA_HOME/bin: {HOW}"
    jeromq = Path(os.environ.get("PZQ_JEROMQ_JAR") or SYSTEM_JARS / "jeromq.jar")
    if not jeromq.is_file():
        return f"no jeromq jar at {jeromq}: {HOW}"
    jars = [jeromq]
    for what, names in NEEDED_JARS.items():
        found = _jar(names)
        if found is None:
            return f"no {what} jar in PZQ_ZPER_CLASSPATH or {SYSTEM_JARS}: {HOW}"
        jars.append(found)
    return ZperJava(Path(source), str(tools["javac"]), str(tools["java"]), tuple(jars))


def _jdk_tool(name: str) -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / name).is_file():
        return str(Path(home) / "bin" / name)
    return shutil.which(name)


def _jar(names: tuple[str, ...]) -> Path | None:
    given = [Path(p) for p in os.environ.get("PZQ_ZPER_CLASSPATH", "").split(":") if p]
    for name in names:
        for jar in given:
            if jar.is_file() and jar.name.startswith(name):
                return jar
        for jar in (SYSTEM_JARS / f"{name}.jar", *sorted(SYSTEM_JARS.glob(f"{name}-[0-9]*.jar"))):
            if jar.is_file():
                return jar
    return None

"""Where the local broker's jars and its JVM come from.

The jars are resolved from Maven Central by Maven (the POM beside this module names the Kafka
server artifacts plus a log4j2 back end) into a cache outside the repository:
``<cache_dir>/kafka-<version>/libs``. A marker written after a complete copy lets every later start
skip Maven. When ``KAFKA_HOME`` names an unpacked Kafka distribution, its ``libs`` are used as they
are and Maven is not needed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from spectral.devstack.kafka_config import (
    java_major_version,
    kafka_version_of,
    required_java,
    uses_log4j2,
)
from spectral.devstack.process import locked
from spectral.errors import ConfigurationError
from spectral.settings import load_settings

_MAVEN_TIMEOUT = 900.0
_TAIL_LINES = 25
_MARKER = "libs.complete"
_JAVA_HELP = (
    "install a JDK 17+ (`apt-get install -y openjdk-17-jre-headless`) or set JAVA_HOME to one"
)


@dataclass(frozen=True)
class KafkaJars:
    libs_dir: Path
    version: str
    log4j2: bool


def default_cache_dir() -> Path:
    """``$SPECTRAL_CACHE_DIR``, else ``$XDG_CACHE_HOME/spectral``, else ``~/.cache/spectral``
    (the settings' ``cache_dir``)."""
    return load_settings().cache_dir


def package_file(name: str) -> bytes:
    """A file shipped beside this module in ``spectral/devstack/kafka/``."""
    return (resources.files("spectral.devstack") / "kafka" / name).read_bytes()


def find_java(kafka_version: str) -> str:
    """The ``java`` executable (``$JAVA_HOME/bin/java``, else PATH), checked to be new enough."""
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java or not Path(java).is_file():
        raise ConfigurationError(
            "Java was not found (`java` is not on PATH and JAVA_HOME is unset or wrong); the "
            f"local Kafka broker runs on the JVM: {_JAVA_HELP}, or point SPECTRAL_KAFKA_BOOTSTRAP "
            "at an existing Kafka cluster."
        )
    try:
        probe = subprocess.run(  # noqa: S603 - our own java, fixed arguments
            [java, "-version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigurationError(f"`{java} -version` failed ({exc}); {_JAVA_HELP}.") from exc
    major = java_major_version(probe.stderr + probe.stdout)
    needed = required_java(kafka_version)
    if major is None or major < needed:
        raise ConfigurationError(
            f"Kafka {kafka_version} needs Java {needed}+, but `{java} -version` says "
            f"{(probe.stderr or probe.stdout).strip().splitlines()[:1]}; {_JAVA_HELP}."
        )
    return java


def kafka_home_jars(kafka_home: Path) -> KafkaJars:
    """The jars of an unpacked Kafka distribution."""
    libs = kafka_home / "libs"
    names = _jar_names(libs)
    version = kafka_version_of(names)
    if version is None:
        raise ConfigurationError(
            f"KAFKA_HOME={kafka_home} is not an unpacked Kafka distribution: {libs} holds no "
            "kafka_2.13-X.Y.Z.jar. Point KAFKA_HOME at the directory that contains bin/ and libs/ "
            "of a Kafka download, or unset it to fetch the jars from Maven Central."
        )
    return KafkaJars(libs_dir=libs, version=version, log4j2=uses_log4j2(names))


def maven_jars(cache_dir: Path, version: str) -> KafkaJars:
    """The jars of Kafka ``version``, fetched by Maven into the cache on first use."""
    home = cache_dir / f"kafka-{version}"
    libs = home / "libs"
    pom = package_file("pom.xml")
    fingerprint = libs_fingerprint(pom, version)
    cached = _complete_libs(home, fingerprint)
    if cached is not None:
        return KafkaJars(libs_dir=libs, version=version, log4j2=uses_log4j2(cached))
    home.mkdir(parents=True, exist_ok=True)
    with locked(cache_dir / f"kafka-{version}.lock"):
        cached = _complete_libs(home, fingerprint)  # another process may have fetched meanwhile
        if cached is None:
            cached = _fetch(home, pom, version, fingerprint)
    return KafkaJars(libs_dir=libs, version=version, log4j2=uses_log4j2(cached))


def libs_fingerprint(pom: bytes, version: str) -> str:
    """Identifies a libs directory's content: a changed POM or version means fetching again."""
    return hashlib.sha256(pom + b"\0" + version.encode()).hexdigest()


def _complete_libs(home: Path, fingerprint: str) -> list[str] | None:
    try:
        marker = json.loads((home / _MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(marker, dict) or marker.get("fingerprint") != fingerprint:
        return None
    jars = marker.get("jars")
    if not isinstance(jars, list) or not jars:
        return None
    names = [str(name) for name in jars]
    libs = home / "libs"
    if not all((libs / name).is_file() for name in names):
        return None
    return names


def _fetch(home: Path, pom: bytes, version: str, fingerprint: str) -> list[str]:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ConfigurationError(
            "Maven (`mvn`) is not on PATH; it fetches the Kafka broker's jars from Maven Central. "
            "Install it (`apt-get install -y maven`), or set KAFKA_HOME to an unpacked Kafka "
            "distribution, or point SPECTRAL_KAFKA_BOOTSTRAP at an existing Kafka cluster."
        )
    pom_file = home / "pom.xml"
    pom_file.write_bytes(pom)
    staging = home / f"libs.partial-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    log = home / "maven.log"
    command = [
        mvn,
        "-B",
        "-U",  # retry artifacts a failed earlier attempt marked missing in ~/.m2
        "-Dstyle.color=never",
        "-f",
        str(pom_file),
        f"-Dkafka.version={version}",
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={staging}",
    ]
    try:
        with log.open("wb") as out:
            done = subprocess.run(  # noqa: S603 - Maven on our own POM
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=home,
                timeout=_MAVEN_TIMEOUT,
                check=False,
            )
        failed = done.returncode != 0
    except subprocess.TimeoutExpired:
        failed = True
    names = _jar_names(staging) if staging.is_dir() else []
    if failed or kafka_version_of(names) != version:
        shutil.rmtree(staging, ignore_errors=True)
        raise ConfigurationError(
            f"Maven could not fetch Kafka {version} from Maven Central (full output: {log}). "
            "Check that Maven Central is reachable (proxy settings in ~/.m2/settings.xml) and "
            "that the version exists, or set KAFKA_HOME to an unpacked Kafka distribution. "
            f"Last lines of Maven's output:\n{_maven_tail(log)}"
        )
    libs = home / "libs"
    shutil.rmtree(libs, ignore_errors=True)
    staging.rename(libs)
    marker = {"fingerprint": fingerprint, "version": version, "jars": names}
    (home / _MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
    return names


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_MAVEN_BOILERPLATE = ("Re-run Maven", "For more information", "[Help 1]", "To see the full stack")


def _maven_tail(log: Path) -> str:
    """Maven's last lines without colour codes, separators and its generic advice."""
    useful: list[str] = []
    for raw in tail(log, 4 * _TAIL_LINES).splitlines():
        line = _ANSI.sub("", raw).rstrip()
        text = line.removeprefix("[ERROR]").removeprefix("[INFO]").strip()
        if text and not text.startswith(_MAVEN_BOILERPLATE) and text.strip("-") != "":
            useful.append(line)
    return "\n".join(useful[-_TAIL_LINES:])


def _jar_names(libs: Path) -> list[str]:
    try:
        return sorted(entry.name for entry in libs.iterdir() if entry.name.endswith(".jar"))
    except OSError:
        return []


def tail(path: Path, lines: int) -> str:
    """The last ``lines`` lines of a text file, or a note that it is empty or missing."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 64 * 1024))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return f"({path} does not exist)"
    last = text.splitlines()[-lines:]
    return "\n".join(last) if last else f"({path} is empty)"

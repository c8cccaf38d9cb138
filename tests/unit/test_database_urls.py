"""PostgreSQL URLs through a Unix-domain socket: how they are read, built and refused."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import asyncpg
import pytest
from pydantic import ValidationError

from consumers.work_executor.deployment import journal_directory
from spectral.settings import (
    SOCKET_PATH_MAX,
    Settings,
    check_url,
    load_settings,
    socket_directory,
    socket_path,
    socket_url,
    url_port,
)
from tests.support import as_login, transport


def _asyncpg_reaches(url: str, socket_file: str) -> bool:
    """Whether asyncpg, connecting with ``url``, reaches a Unix-domain server at ``socket_file``
    (it answers nothing: the connection fails after it is made)."""
    reached: list[bool] = []

    async def attempt() -> None:
        def answer(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            reached.append(True)
            writer.close()

        server = await asyncio.start_unix_server(answer, path=socket_file)
        async with server:
            with pytest.raises((ConnectionError, asyncpg.PostgresError, OSError)):
                await asyncpg.connect(url, timeout=5)

    asyncio.run(attempt())
    return reached == [True]


def _shown(url: str) -> str:
    """What the settings print of ``url``: the error refusing it, or the settings' view."""
    try:
        current = Settings(database_url=url)
    except ValidationError as refused:
        return str(refused)
    return str(current.describe())


def test_a_url_naming_a_host_or_port_in_its_netloc_is_tcp_whatever_its_query_says() -> None:
    assert socket_directory("postgresql://u@db:5432/x") is None
    assert socket_directory("postgresql://u@127.0.0.1:5432/x?host=/run/pg") is None
    # asyncpg takes ":5432" for the empty host and ignores host=
    assert socket_directory("postgresql://u@:5432/x?host=/run/pg") is None
    assert socket_directory("postgresql://u@/x?host=db.example") is None
    assert socket_directory("postgresql://u@/x?host=/run/pg&port=5&passfile=/p") == "/run/pg"
    assert socket_directory("postgresql:///x?host=/run/pg") == "/run/pg"
    assert url_port("postgresql://u@/x?host=/run/pg&port=5") == 5
    assert url_port("postgresql://u@h:7/x?port=5") == 7
    assert url_port("postgresql://u@h/x") is None


def test_a_socket_url_round_trips_its_directory_and_parameters() -> None:
    directory = "/var/lib/spectral/a b%c"
    url = socket_url("postgres", directory, 54321, "spectral", passfile="/s/pgpass")
    assert url.startswith("postgresql://postgres@/spectral?")
    assert socket_directory(url) == directory
    assert url_port(url) == 54321
    parts = urlsplit(url)
    assert parts.hostname is None
    assert parse_qs(parts.query)["passfile"] == ["/s/pgpass"]


def test_asyncpg_connects_to_the_socket_file_the_url_names(tmp_path: Path) -> None:
    """The form asyncpg reads (it ignores ``host=`` when the netloc names a host or a port)."""
    url = socket_url("postgres", tmp_path, 5999, "db")
    assert _asyncpg_reaches(url, socket_path(tmp_path, 5999))


def test_a_socket_path_longer_than_the_system_allows_is_refused_clearly() -> None:
    fits = "/" + "d" * (SOCKET_PATH_MAX - len("/.s.PGSQL.5432") - 1)
    assert len(socket_path(fits, 5432)) == SOCKET_PATH_MAX
    check_url(f"postgresql://u@/x?host={fits}&port=5432")
    too_long = fits + "d"
    with pytest.raises(ValueError, match=r"is 108 bytes; the system allows 107"):
        check_url(f"postgresql://u@/x?host={too_long}&port=5432")
    with pytest.raises(ValueError, match="108 bytes"):
        socket_url("u", too_long, 5432, "x")
    with pytest.raises(ValidationError, match="shorter socket directory"):
        Settings(database_url=f"postgresql://u@/x?host={too_long}&port=5432")
    with pytest.raises(ValidationError, match="shorter socket directory"):
        Settings(operator_database_url=f"postgresql://u@/x?host={too_long}&port=5432")
    Settings(database_url=f"postgresql://u@db.example.{'x' * 200}:5432/x")  # TCP: no limit


def test_another_login_on_a_socket_url_keeps_the_socket_not_the_passfile() -> None:
    url = socket_url("postgres", "/run/stack", 6000, "db", passfile="/s/pgpass")
    other = as_login(url, "alice", "pw")
    assert socket_directory(other) == "/run/stack"
    assert "passfile" not in other
    assert urlsplit(other).username == "alice"
    assert transport("postgresql://u@h:1/db?passfile=/p") == ""


def test_executors_of_one_socket_share_a_journal_and_other_sockets_do_not(
    tmp_path: Path,
) -> None:
    settings = load_settings(state_dir=tmp_path)
    one = journal_directory(settings, socket_url("u", "/run/a", 6000, "db"))
    assert one == journal_directory(settings, socket_url("v", "/run/a", 6000, "db", passfile="/p"))
    assert one != journal_directory(settings, socket_url("u", "/run/b", 6000, "db"))
    assert one.parent == tmp_path / "work-journal"
    assert one.name == "_run_a_6000_db"
    tcp = journal_directory(settings, "postgresql://u@127.0.0.1:6000/db")
    assert tcp.name == "127.0.0.1_6000_db"


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:hunter2@/x?host={dir}&port=5432",
        "postgresql://u@/x?host={dir}&port=5432&password=hunter2",
    ],
)
def test_a_refused_socket_url_is_reported_without_its_password(url: str) -> None:
    """A URL refused for its socket path is reported (``spectral db migrate`` prints the error)
    without the password it carries, in its netloc or in its query."""
    too_long = "/" + "d" * SOCKET_PATH_MAX
    with pytest.raises(ValidationError) as refused:
        Settings(database_url=url.format(dir=too_long))
    assert "shorter socket directory" in str(refused.value)
    assert "hunter2" not in str(refused.value)


def test_a_password_in_a_socket_urls_query_is_masked_in_the_settings_view() -> None:
    """``Settings.describe`` is the printable view with every secret masked: a socket URL has no
    host to carry ``user:password@`` before, and both asyncpg and libpq read ``password=``."""
    current = Settings(database_url="postgresql://u@/x?host=/run/pg&port=5432&password=hunter2")
    assert "hunter2" not in str(current.describe())


@pytest.mark.parametrize(
    "url",
    [
        # asyncpg reads the last of repeated parameters
        "postgresql://u@/x?host=/run/pg&host={dir}&port=5432",
        # a socket directory percent-encoded in the netloc (asyncpg and libpq unquote it)
        "postgresql://u@{quoted}:5432/x",
        # "." components and repeated slashes count: the system reads the path as spelled
        "postgresql://u@/x?host=/run{dots}&port=5432",
    ],
)
def test_check_url_checks_the_socket_asyncpg_connects_to(url: str) -> None:
    """check_url refuses a too-long socket path in every spelling asyncpg connects through;
    otherwise every connection attempt fails and reads as a database outage."""
    too_long = "/" + "d" * SOCKET_PATH_MAX
    url = url.format(dir=too_long, quoted=too_long.replace("/", "%2F"), dots="/." * 60)
    with pytest.raises(OSError, match="AF_UNIX path too long"):
        asyncio.run(asyncpg.connect(url, timeout=1))  # how the driver fails on it
    with pytest.raises(ValueError, match="shorter socket directory"):
        check_url(url)


def test_socket_directory_of_a_list_of_socket_hosts_is_not_one_directory() -> None:
    """``host=/a,/b`` is two sockets to asyncpg (tried in order), not one directory named
    ``/a,/b``: two directories that each fit are not refused for their joined length."""
    each = "/" + "d" * 60
    url = f"postgresql://u@/x?host={each},{each}&port=5432"
    check_url(url)
    assert socket_directory(url) in {None, each}


@pytest.mark.parametrize(
    "url",
    [
        # a port the query spells with a sign, a space or digit groups: asyncpg's int() reads
        # them all ("+" in a query is a space once decoded)
        "postgresql://u@/x?host={dir}&port=+10000",
        "postgresql://u@/x?host={dir}&port=%2010000",
        "postgresql://u@/x?host={dir}&port=10_000",
        # the same in the netloc, after a socket directory percent-encoded there
        "postgresql://u@{quoted}:+10000/x",
        "postgresql://u@{quoted}:1_0000/x",
    ],
)
def test_check_url_reads_a_ports_spelling_as_asyncpg_does(url: str) -> None:
    """asyncpg reads a port with ``int()``: ``+10000``, `` 10000`` and ``10_000`` are all port
    10000, and the socket it connects through is ``<dir>/.s.PGSQL.10000``. check_url reads only
    a port of digits and takes 5432 for the others, so it checks a path one byte shorter than
    the one asyncpg opens: a directory that fits with 5432 and not with 10000 is accepted at start,
    then every connection attempt fails with "AF_UNIX path too long" (read as an outage)."""
    directory = "/" + "d" * (SOCKET_PATH_MAX - len("/.s.PGSQL.5432") - 1)
    assert len(socket_path(directory, 5432)) == SOCKET_PATH_MAX  # fits at 5432
    url = url.format(dir=directory, quoted=directory.replace("/", "%2F"))
    with pytest.raises(OSError, match="AF_UNIX path too long"):
        asyncio.run(asyncpg.connect(url, timeout=1))  # asyncpg's path: 108 bytes
    with pytest.raises(ValueError, match="shorter socket directory"):
        check_url(url)


def test_check_url_accepts_a_url_naming_the_socket_file_itself(tmp_path: Path) -> None:
    """asyncpg takes a socket host that already contains ``.s.PGSQL.`` for the socket file
    itself (connect_utils: it appends ``.s.PGSQL.<port>`` only to a host without it), so
    ``host=/run/pg/.s.PGSQL.5432`` connects through ``/run/pg/.s.PGSQL.5432``. check_url appends
    the file name again and measures ``/run/pg/.s.PGSQL.5432/.s.PGSQL.5432``: a URL whose socket
    fits, and which asyncpg connects through, is refused at start and the process never runs."""
    directory = tmp_path / ("d" * (SOCKET_PATH_MAX - len(f"{tmp_path}/.s.PGSQL.5999") - 1))
    directory.mkdir()
    socket_file = socket_path(directory, 5999)
    assert len(socket_file) == SOCKET_PATH_MAX
    url = f"postgresql://u@/x?host={socket_file}"
    assert _asyncpg_reaches(url, socket_file)  # asyncpg reached the socket the URL names
    check_url(url)


def test_a_url_refused_for_its_brackets_is_reported_without_its_password() -> None:
    """A password with square brackets written as they are (``u:[hunter2]@db``) makes the URL
    unreadable: urlsplit takes the bracketed text for an IPv6 host and raises a ValueError
    naming it, and check_url lets that error through as the settings' validation error, which
    ``spectral db migrate`` and every command print at start. ``hide_input_in_errors`` hides the
    URL, not the message: the password is printed."""
    with pytest.raises(ValidationError) as refused:
        Settings(database_url="postgresql://u:[hunter2]@db.example:5432/x")
    assert "hunter2" not in str(refused.value)


def test_a_query_password_after_a_tab_or_newline_is_masked_in_the_settings_view() -> None:
    """urlsplit (and asyncpg's urlparse) drop tabs and newlines anywhere in a URL, so asyncpg
    connects with ``password=hunter2`` from this URL. redact_url masks the query urlsplit read
    (without them) and then cuts the original URL's text by that query's length: each dropped
    character shifts the cut, and as many characters of the password are printed after the
    asterisks by ``Settings.describe``."""
    current = Settings(database_url="postgresql://u@/x?host=/run/pg&\t\t\t\t\t\t\tpassword=hunter2")
    assert "hunter2" not in str(current.describe())


def test_the_client_keys_password_is_masked_in_the_settings_view() -> None:
    """asyncpg reads ``sslpassword`` from the URL's query (as libpq does): the passphrase of the
    client's TLS key. redact_url masks only ``password``, so ``Settings.describe`` prints it."""
    current = Settings(
        database_url="postgresql://u@db.example/x?sslmode=verify-full"
        "&sslkey=/etc/spectral/client.key&sslpassword=hunter2"
    )
    assert "hunter2" not in str(current.describe())


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:hun/ter2@db.example:5432/x",
        "postgresql://u:hun?ter2@db.example:5432/x",
        "postgresql://u:hun#ter2@db.example:5432/x",
    ],
)
def test_a_password_cut_short_by_a_slash_question_mark_or_hash_is_not_printed(url: str) -> None:
    """A password written as it is with a ``/``, ``?`` or ``#`` in it (common in generated
    passwords: base64 has ``/``) ends the URL's netloc there: urlsplit reads the netloc
    ``u:hun`` (no ``@``, so no password at all) and the rest as the path, query or fragment.
    The settings accept the URL (no socket in it), and redact_url, finding no password, returns
    it unchanged: ``Settings.describe`` prints the whole password. asyncpg then fails on the
    port ``hun`` with ``invalid literal for int() with base 10: 'hun'``, quoting it again."""
    shown = _shown(url)
    assert "hun" not in shown
    assert "ter2" not in shown


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u@db.example/x?password=hun&ter2",
        "postgresql://u@db.example/x?sslpassword=hun&ter2&sslkey=/k",
        "postgresql://u@db.example/x?password=hun#ter2",
    ],
)
def test_a_query_password_cut_short_by_an_ampersand_or_hash_is_not_printed(url: str) -> None:
    """A ``password=`` (or ``sslpassword=``) written as it is with a ``&`` or ``#`` in it ends
    its query field there: redact_url masks ``hun`` and leaves the rest of the password as the
    next field (``&ter2``) or the fragment (``#ter2``), which ``Settings.describe`` prints. The
    settings accept the URL; asyncpg's strict query parser then refuses it with
    ``bad query field: 'ter2'``, quoting the rest of the password again."""
    shown = _shown(url)
    assert "hun" not in shown
    assert "ter2" not in shown


@pytest.mark.parametrize(
    "url",
    [
        # quoted in a container's env file, which keeps the quotes in the value
        '"postgresql://u:hunter2@db.example:5432/x"',
        "'postgresql://u:hunter2@db.example:5432/x'",
        # one slash short
        "postgresql:/u:hunter2@db.example:5432/x",
    ],
)
def test_a_url_with_a_mistyped_scheme_is_not_printed_with_its_password(url: str) -> None:
    """A URL whose scheme is not read (quotes kept around it, a ``/`` missing) has no netloc
    for urlsplit: all of it is the path, so redact_url finds no password and returns it as it
    is. The settings accept it (no socket in it), and ``Settings.describe`` prints the password.
    asyncpg refuses the quoted ones (not a postgresql scheme); the one a slash short it reads as
    no host (its default local sockets and localhost) and the database ``u:hunter2@db...``,
    which a server names back in its "database does not exist" error."""
    shown = _shown(url)
    assert "hunter2" not in shown


def test_check_url_reads_the_port_of_pgport(monkeypatch: pytest.MonkeyPatch) -> None:
    """A URL naming a socket directory and no port connects, in asyncpg, on the port of the
    ``PGPORT`` environment variable (libpq's, often set in PostgreSQL containers), not 5432:
    ``<dir>/.s.PGSQL.10000``. check_url measures ``<dir>/.s.PGSQL.5432``, one byte shorter: a
    directory that fits with 5432 and not with 10000 is accepted at start, then every
    connection attempt fails with "AF_UNIX path too long" (read as a database outage)."""
    monkeypatch.setenv("PGPORT", "10000")
    directory = "/" + "d" * (SOCKET_PATH_MAX - len("/.s.PGSQL.5432") - 1)
    assert len(socket_path(directory, 5432)) == SOCKET_PATH_MAX  # fits at 5432
    url = f"postgresql://u@/x?host={directory}"
    with pytest.raises(OSError, match="AF_UNIX path too long"):
        asyncio.run(asyncpg.connect(url, timeout=1))  # asyncpg's path: 108 bytes
    with pytest.raises(ValueError, match="shorter socket directory"):
        check_url(url)


def test_check_url_accepts_a_socket_on_port_zero_that_fits(tmp_path: Path) -> None:
    """asyncpg reads ``port=0`` as port 0 and connects through ``<dir>/.s.PGSQL.0``; check_url
    reads it as "no port" (``socket_path``'s ``port or 5432``) and measures
    ``<dir>/.s.PGSQL.5432``, three bytes longer: a URL whose socket fits, and which asyncpg
    connects through, is refused at start."""
    directory = tmp_path / ("d" * (SOCKET_PATH_MAX - len(f"{tmp_path}/.s.PGSQL.0") - 1))
    directory.mkdir()
    socket_file = f"{directory}/.s.PGSQL.0"
    assert len(socket_file) == SOCKET_PATH_MAX
    url = f"postgresql://u@/x?host={directory}&port=0"
    assert _asyncpg_reaches(url, socket_file)  # asyncpg reached the socket the URL names
    check_url(url)


def test_check_url_accepts_a_socket_directory_whose_name_is_not_utf8(tmp_path: Path) -> None:
    """A directory name with a byte that is not UTF-8 (``caf\\xe9``, Latin-1) reaches Python
    from the environment as a lone surrogate (os.environ decodes with surrogateescape), and the
    system gets the same bytes back when asyncpg connects: the URL works. check_url measures
    the path with ``str.encode()``, which raises on the surrogate: the settings refuse a short
    socket path with "'utf-8' codec can't encode character '\\udce9'", and the process never
    runs."""
    directory = os.fsdecode(os.fsencode(tmp_path) + b"/caf\xe9")
    Path(directory).mkdir()
    socket_file = socket_path(directory, 5999)
    url = f"postgresql://u@/x?host={directory}&port=5999"
    assert _asyncpg_reaches(url, socket_file)  # asyncpg reached the socket the URL names
    check_url(url)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u@/x?host={socket_dir}%00&port=5999&passfile={pgpass}",
        "postgresql://u@127.0.0.1:5999/x?passfile={pgpass}%00",
    ],
)
def test_the_local_stack_tells_a_url_with_a_nul_byte_is_not_its_own(
    tmp_path: Path, url: str
) -> None:
    """``spectral dev up``, ``dev status`` and every command that resolves the database ask the
    local stack whether SPECTRAL_DATABASE_URL is its own server (``LocalPostgres.owns``). A
    ``%00`` in the URL's socket directory or passfile (accepted by the settings: the path is
    short) makes ``Path.resolve`` raise "embedded null byte" there, and the command ends in a
    traceback instead of using the URL as an external server's (or refusing it clearly)."""
    from spectral.devstack.postgres import LocalPostgres  # noqa: PLC0415

    stack = LocalPostgres(tmp_path)
    (tmp_path / "postgres.json").write_text('{"port": 5999}\n', encoding="utf-8")
    url = url.format(socket_dir=stack.socket_dir, pgpass=tmp_path / "pgpass")
    Settings(database_url=url)  # accepted
    assert stack.owns(url) is False


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u@%2Frun%2Fa:+6000/db",
        "postgresql://u@/db?host=/run/a&port=+6000",
        "postgresql://u@/db?host=/run/a&port=6_000",
    ],
)
def test_url_port_reads_a_ports_spelling_as_asyncpg_does(tmp_path: Path, url: str) -> None:
    """The settings accept ``+6000`` and ``6_000`` as port 6000 (asyncpg reads ports with
    ``int()``, and check_url now does too), but url_port does not: in the netloc urlsplit's
    ``port`` raises "Port could not be cast to integer value as '+6000'", so the work-executor
    deployment fails to build; in the query it reads no port, so the executor's journal is named
    after port 5432 and is shared with the executors of another server's socket in the same
    directory (and the local stack does not recognise its own URL so spelled)."""
    settings = load_settings(state_dir=tmp_path)
    assert url_port(url) == 6000
    assert journal_directory(settings, url) == journal_directory(
        settings, socket_url("u", "/run/a", 6000, "db")
    )


@pytest.mark.parametrize(
    ("url", "port"),
    [
        ("postgresql:///db?host=h1:5433&port=5432", 5432),
        ("postgresql:///db?host=h1:abc&port=5432", 5432),
        ("postgresql:///db?host=h1:5433", 5433),
    ],
)
def test_a_port_parameter_wins_over_the_port_a_host_parameter_carries(url: str, port: int) -> None:
    """asyncpg reads the ``port`` parameter before the ``host`` parameter, and the ports written
    in ``host=`` only when there is none: ``host=h1:5433&port=5432`` connects on 5432, and a
    host's port is then not read at all (``h1:abc`` is accepted)."""
    check_url(url)
    assert url_port(url) == port

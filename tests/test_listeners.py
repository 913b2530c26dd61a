"""Nothing a command starts is reachable from another machine: the local Dask cluster of `meshsim sweep` and
`meshsim campaign` (`scenarios.fleet`) listens on 127.0.0.1 only, scheduler, nannies, workers and their HTTP
servers; its HTTP server answers health checks, not Dask's pages, unless `--dashboard` asks for them, and
the dashboard too binds 127.0.0.1 unless the user names another address. A `--scheduler` that is not a Dask
scheduler (an HTTP server, one that answers nothing) is one clear line and exit 2 within the promised time."""

from __future__ import annotations

import argparse
import http.server
import os
import re
import shlex
import shutil
import socket
import socketserver
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest
from docs_pages import named_block, page

from scenarios import ScenarioError
from scenarios.cli import main
from scenarios.cli._cluster import DASHBOARD, dashboard_address
from scenarios.fleet import LOOPBACK, FleetError, Job, fleet, run_jobs
from scenarios.fleet._fleet import CONNECT_TIMEOUT_S

TLS_RECIPE = named_block(page("reference/clusters"), "tls-recipe-commands")

ROOT = Path(__file__).resolve().parents[1]


def listening() -> set[tuple[int, str, int]]:
    """(pid, address, port) of every listening TCP socket of this process and all its descendants."""
    found = set()
    for process in [psutil.Process(), *psutil.Process().children(recursive=True)]:
        try:
            connections = process.net_connections(kind="tcp")
        except psutil.Error:  # a process that ended meanwhile listens no more
            continue
        found |= {(process.pid, c.laddr.ip, c.laddr.port) for c in connections if c.status == psutil.CONN_LISTEN}
    return found


def other_addresses() -> list[str]:
    """This machine's addresses other than 127.0.0.1, the ones another machine (or process) could try.

    The interface a packet to the outside would leave by (a UDP socket's connect sends nothing), every
    IPv4 address of every interface, and 127.0.0.2: on Linux the whole of 127.0.0.0/8 reaches this machine,
    so a listener bound to every interface answers there, one bound to 127.0.0.1 alone does not. A machine
    with no network interface at all still has that one.
    """
    found = {"127.0.0.2"}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: routed like any outside address, never reached
            found.add(probe.getsockname()[0])
        except OSError:  # no route out: the interfaces below and 127.0.0.2 remain
            pass
    for addresses in psutil.net_if_addrs().values():
        found |= {a.address for a in addresses if a.family == socket.AF_INET}
    found.discard(LOOPBACK)
    return sorted(found)


def refused(host: str, port: int) -> bool:
    """Whether a TCP connection to host:port fails (refused, unreachable, or no answer within 2 s)."""
    try:
        socket.create_connection((host, port), timeout=2).close()
    except OSError:
        return True
    return False


def square(n: int) -> int:
    return n * n


@pytest.fixture(scope="module", params=[None, DASHBOARD], ids=["no dashboard", "dashboard"])
def cluster(request):
    """A local cluster of 2 workers started as sweep and campaign start it (with and without the dashboard),
    after a few jobs ran, and the listeners it added to this process tree."""
    before = listening()
    with fleet(workers=2, dashboard=request.param) as client:
        got: dict[str, int] = {}
        run_jobs(client, [Job(f"j{n}", square, (n,)) for n in range(4)], lambda job, r: got.update({job.key: r}))
        assert got == {f"j{n}": n * n for n in range(4)}
        yield client, listening() - before, request.param


def test_every_listener_binds_loopback_only(cluster):
    """Scheduler, nannies, workers and HTTP servers: each listening socket is bound to 127.0.0.1, and there
    is one in each of the two worker processes at least (the check sees the whole process tree)."""
    _, sockets, _ = cluster
    assert len(sockets) >= 6, sockets
    assert {address for _, address, _ in sockets} == {LOOPBACK}, sockets
    workers = {pid for pid, _, _ in sockets} - {os.getpid()}
    assert len(workers) >= 2


def test_no_listener_answers_on_another_address(cluster):
    """A connection to each listening port through each of the machine's other addresses is refused, while
    the same port answers on 127.0.0.1 (so the check can tell the two apart)."""
    _, sockets, _ = cluster
    others = other_addresses()
    assert others
    for _, _, port in sockets:
        assert not refused(LOOPBACK, port)
        for host in others:
            assert refused(host, port), f"port {port} answers on {host}"


def test_a_listener_on_every_interface_would_be_caught():
    """The control: a socket bound to every interface answers on the other addresses, so the test above
    would fail for a cluster that listened there."""
    with socket.socket() as server:
        server.bind(("0.0.0.0", 0))
        server.listen()
        port = server.getsockname()[1]
        assert not any(refused(host, port) for host in other_addresses())


def _get(url: str) -> int:
    """The HTTP status of a GET of `url`."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_without_dashboard_the_http_server_answers_health_only(cluster):
    """Without --dashboard the scheduler's HTTP server answers /health and refuses Dask's pages (workers'
    addresses, call stacks, logs, the event stream, the proxy); with it, those pages are served (locally)."""
    client, _, dashboard = cluster
    port = client.scheduler_info()["services"]["dashboard"]
    base = f"http://{LOOPBACK}:{port}"
    assert _get(f"{base}/health") == 200
    pages = [_get(f"{base}{path}") for path in ("/info/main/workers.html", "/json/counts.json")]
    if dashboard is None:
        assert pages == [404, 404]
    else:
        assert pages == [200, 200]


def test_the_dashboard_url_is_printed_and_local(tmp_path, capsys):
    """`meshsim sweep --dashboard` prints the dashboard's URL, on 127.0.0.1, on stderr."""
    sweep = tmp_path / "s.toml"
    sweep.write_text('title = "t"\ndescription = "d"\ncollective = "psum"\nmesh = {x = 2}\n'
                     'size = {from = "1KiB", to = "1KiB", factor = 2}\ndtype = "float32"\n')
    assert main(["sweep", str(sweep), "-o", str(tmp_path / "out"), "--workers", "1", "--dashboard"]) == 0
    err = capsys.readouterr().err
    assert f"meshsim: Dask dashboard at http://{LOOPBACK}:" in err


@pytest.mark.parametrize(("given", "address"), [
    (DASHBOARD, DASHBOARD), (":9000", f"{LOOPBACK}:9000"), ("localhost", "localhost:8787"),
    ("0.0.0.0:8788", "0.0.0.0:8788"), ("[::1]:8789", "[::1]:8789"), (None, None),
])
def test_dashboard_addresses(given, address):
    """--dashboard's address: 127.0.0.1 and port 8787 where not given; another host only when named."""
    assert dashboard_address(argparse.Namespace(dashboard=given, scheduler=None)) == address


@pytest.mark.parametrize(("given", "scheduler", "match"), [
    ("sweep.toml", None, r"--dashboard='sweep\.toml' must be an address.*after the other arguments"),
    ("host:99999", None, r"must be an address"),
    ("a b", None, r"must be an address"),
    (DASHBOARD, "tcp://10.0.0.1:8786", r"--dashboard applies to a local cluster.*--scheduler='tcp://10\.0\.0\.1"),
])
def test_bad_dashboard_addresses(given, scheduler, match):
    """A --dashboard that is not an address, or one given with --scheduler, is refused by name."""
    with pytest.raises(ScenarioError, match=match):
        dashboard_address(argparse.Namespace(dashboard=given, scheduler=scheduler))


def test_fleet_refuses_a_dashboard_for_a_remote_scheduler():
    """The API says the same as the command line: a running scheduler's dashboard is its own."""
    with pytest.raises(FleetError, match="applies to a local cluster"), \
            fleet(scheduler="tcp://127.0.0.1:1", dashboard=DASHBOARD):
        pass


class _Text(socketserver.BaseRequestHandler):
    """Answers every connection with a short HTTP response in text, then closes it."""

    def handle(self) -> None:
        self.request.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nhello, this is not Dask\n")


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@contextmanager
def serving(server: socketserver.BaseServer) -> Iterator[str]:
    """`server` answering on a thread while the block runs; yields its tcp:// address."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"tcp://{LOOPBACK}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _servers() -> dict[str, socketserver.BaseServer]:
    return {"text": socketserver.ThreadingTCPServer((LOOPBACK, 0), _Text),
            "http.server": http.server.ThreadingHTTPServer((LOOPBACK, 0), _Quiet)}


@pytest.mark.parametrize(("kind", "command"), [("text", "sweep"), ("text", "campaign"), ("http.server", "sweep")])
def test_a_scheduler_that_is_not_dask_is_one_line_and_exit_2(tmp_path, kind, command):
    """`--scheduler` at a server that answers HTTP text (which Dask would read as a frame of exabytes), or at
    `python -m http.server` (which waits for a request line and says nothing): one `meshsim: error:` line
    naming the address and what was expected, exit 2, no traceback, within the promised 10 s (plus the
    command's own start)."""
    sweep = tmp_path / "s.toml"
    sweep.write_text('title = "t"\ndescription = "d"\ncollective = "psum"\nmesh = {x = 2}\n'
                     'size = {from = "1KiB", to = "1KiB", factor = 2}\ndtype = "float32"\n')
    with serving(_servers()[kind]) as address:
        argv = [str(sweep)] if command == "sweep" else ["--cases", "1"]
        start = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "scenarios.cli", command, *argv, "-o", str(tmp_path / "out"),
                               "--scheduler", address], cwd=ROOT, capture_output=True, text=True, timeout=120)
        elapsed = time.monotonic() - start
    lines = done.stderr.splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith(f"meshsim: error: cannot reach the Dask scheduler scheduler='{address}': ")
    assert "expected the address a running Dask scheduler listens on" in lines[0]
    assert ("another protocol than Dask's" if kind == "text" else "no Dask handshake within 10 s") in lines[0]
    assert elapsed < CONNECT_TIMEOUT_S + 10


def test_a_closed_port_is_refused_at_once(tmp_path):
    """Nothing listening at the address: the error comes at once (no waiting out the timeout)."""
    with socket.socket() as holder:
        holder.bind((LOOPBACK, 0))  # bound, not listening: a connection there is refused
        address = f"tcp://{LOOPBACK}:{holder.getsockname()[1]}"
        start = time.monotonic()
        with pytest.raises(FleetError, match=r"cannot reach the Dask scheduler .*: no connection: "
                                             r"ConnectionRefusedError"), fleet(scheduler=address):
            pass
        assert time.monotonic() - start < CONNECT_TIMEOUT_S / 2


def _certificates(folder: Path) -> dict[str, str]:
    """A CA and one certificate signed by it, made in `folder` by the `openssl` commands of the TLS recipe."""
    for line in TLS_RECIPE.splitlines():
        if line.startswith("openssl "):
            subprocess.run(shlex.split(line), cwd=folder, check=True, capture_output=True, timeout=60)
    return {name: str(folder / name) for name in ("ca.pem", "node.pem", "node.key")}


def _in_folder(value: str, files: dict[str, str]) -> str:
    """`value` from the recipe, a certificate's file name made the path of that file in the test's folder."""
    return files.get(value, value)


def _recipe_tls_options(files: dict[str, str]) -> list[str]:
    """The recipe's `TLS="..."` options of `dask scheduler` and `dask worker`, naming the test's files."""
    (value,) = re.findall(r'^TLS="(.*)"$', TLS_RECIPE, flags=re.M)
    return [_in_folder(word, files) for word in shlex.split(value)]


def _recipe_client_environment(files: dict[str, str]) -> dict[str, str]:
    """The recipe's `export DASK_DISTRIBUTED__...` variables that give meshsim, the client, its certificate."""
    found = dict(re.findall(r"(DASK_DISTRIBUTED__\w+)=(\S+)", TLS_RECIPE))
    assert found, "the TLS recipe exports no DASK_DISTRIBUTED__ variables"
    return {name: _in_folder(value, files) for name, value in found.items()}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        return probe.getsockname()[1]


@pytest.mark.skipif(shutil.which("openssl") is None or shutil.which("dask", path=str(Path(sys.executable).parent))
                    is None, reason="needs openssl and Dask's `dask` command")
def test_a_tls_cluster_as_the_reference_starts_it(tmp_path):
    """The TLS recipe of docs/reference/clusters.md, its commands, options and variables read from the page: a
    scheduler and a worker on tls:// with certificates from one CA; meshsim with the client's certificate in
    Dask's configuration runs a sweep there; without it, or over tcp://, it is one error line, exit 2."""
    files = _certificates(tmp_path)
    tls = _recipe_tls_options(files)
    assert tls[::2] == ["--tls-ca-file", "--tls-cert", "--tls-key"]
    dask = str(Path(sys.executable).parent / "dask")
    port = _free_port()
    address = f"tls://{LOOPBACK}:{port}"
    started = [subprocess.Popen([dask, "scheduler", "--protocol", "tls", "--host", LOOPBACK, "--port", str(port),
                                 "--no-dashboard", *tls], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        time.sleep(3)
        started.append(subprocess.Popen([dask, "worker", address, "--host", LOOPBACK, "--nthreads", "1",
                                         "--no-dashboard", *tls], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL))
        sweep = tmp_path / "s.toml"
        sweep.write_text('collective = "psum"\nmesh = {x = 2}\nsize = ["1KiB", "2KiB"]\n')
        client = _recipe_client_environment(files)

        def sweep_on(scheduler: str, env: dict[str, str], out: str) -> subprocess.CompletedProcess:
            return subprocess.run([sys.executable, "-m", "scenarios.cli", "sweep", str(sweep), "-o",
                                   str(tmp_path / out), "--scheduler", scheduler], cwd=ROOT, capture_output=True,
                                  text=True, timeout=180, env={**os.environ, **env})

        for scheduler, env, expected in ((address, {}, "needs this client's certificate"),
                                         (address.replace("tls", "tcp"), {}, "closed the connection")):
            done = sweep_on(scheduler, env, "refused")
            assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
            assert expected in done.stderr
        done = sweep_on(address, client, "out")
        assert done.returncode == 0, done.stderr
        assert len((tmp_path / "out" / "results.jsonl").read_text().splitlines()) == 2
    finally:
        for process in reversed(started):
            process.terminate()
            process.wait(timeout=30)

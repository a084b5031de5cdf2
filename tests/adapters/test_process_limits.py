"""Processes that cannot run away: declared limits, another user, no network, a clean
environment and bounded output, with real processes (issue 18)."""

from __future__ import annotations

import grp
import json
import logging
import os
import pwd
import socket
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
import yaml

from gateway.adapters.process import adapter as adapter_module
from gateway.adapters.process import limits as limits_module
from gateway.adapters.process.adapter import ProcessAdapter, create
from gateway.adapters.process.limits import exceeded
from gateway.adapters.process.spec import MARKER_ENV, LimitOptions
from gateway.declarations.catalogue import Catalogue
from gateway.errors import ConfigError
from gateway.settings import Settings
from gateway.testing import (
    free_port,
    make_project,
    run_agent_code_without_approval,
    serve,
    stop,
    wait_healthy,
)
from gateway.types import Outcome
from gateway.workspace import Workspace
from tests.adapters.test_process import (
    NO_TOOLS,
    declare,
    isolation_or_skip,
    run,
    script,
)
from tests.adapters.test_proctree import no_stray_children
from tests.helpers import ALICE
from tests.server.helpers import body

__all__ = ["no_stray_children"]  # the autouse fixture applies here too
pytestmark = pytest.mark.anyio
NOBODY = "nobody"


@pytest.fixture(params=["isolated", "unisolated"])
def adapter(request: pytest.FixtureRequest, tmp_path: Path) -> ProcessAdapter:
    """Both launcher paths: inside the mount-namespace view, and without one."""
    if request.param == "isolated":
        isolation_or_skip()
        made = create(Settings(base_dir=tmp_path), {}, NO_TOOLS)
        assert made.isolation is not None
        return made
    made = create(Settings(base_dir=tmp_path, process_isolation="off"), {}, NO_TOOLS)
    assert made.isolation is None
    return made


@pytest.fixture
def auto(tmp_path: Path) -> ProcessAdapter:
    """The default adapter (isolation ``auto``), for what one launcher path shows enough."""
    return create(Settings(base_dir=tmp_path), {}, NO_TOOLS)


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    root = tmp_path / "ws"
    root.mkdir()
    return Workspace("demo", root.resolve())


def limited(tmp_path: Path, **limits: Any) -> Any:
    return declare(tmp_path, limits=limits)


def limit_of(out: Any) -> dict[str, Any]:
    assert out.outcome is Outcome.FAILED, out
    assert out.error is not None and out.error.code == "limit_exceeded", out.error
    details: dict[str, Any] = out.error.to_json()
    assert out.data["limit_exceeded"] == details["limit"]
    return details


# --- each limit, and how it is told -----------------------------------------------------------

SPIN = """
import signal, sys
if sys.argv[1:] == ["ignore"]:
    signal.signal(signal.SIGXCPU, signal.SIG_IGN)
while True:
    pass
"""


async def test_cpu_seconds_ends_a_spinning_command_by_sigxcpu(
    adapter: ProcessAdapter, ws: Workspace, tmp_path: Path
) -> None:
    script(ws, SPIN)
    out, _ = await run(adapter, ws, limited(tmp_path, cpu_seconds=1))
    details = limit_of(out)
    assert (details["limit"], details["limit_value"]) == ("cpu_seconds", 1)
    assert (details["detected_by"], details["signal"]) == ("signal", "SIGXCPU")
    assert "exceeded its cpu_seconds limit (1 s)" in out.error.message
    assert "process tree was stopped" in out.error.message


async def test_a_command_ignoring_sigxcpu_is_killed_at_the_hard_limit(
    auto: ProcessAdapter, ws: Workspace, tmp_path: Path
) -> None:
    script(ws, SPIN)
    out, _ = await run(auto, ws, limited(tmp_path, cpu_seconds=1), args=["ignore"])
    details = limit_of(out)
    assert (details["signal"], details["detected_by"]) == ("SIGKILL", "cpu_time")


async def test_file_size_kills_a_writer_by_sigxfsz(
    adapter: ProcessAdapter, ws: Workspace, tmp_path: Path
) -> None:
    tool = declare(
        tmp_path,
        command=["dd", "if=/dev/zero", "of=big", "bs=65536", "count=64"],
        limits={"file_size": "1MiB"},
    )
    out, _ = await run(adapter, ws, tool)
    details = limit_of(out)
    assert (details["limit"], details["signal"], details["detected_by"]) == (
        "file_size",
        "SIGXFSZ",
        "signal",
    )
    assert (ws.root / "big").stat().st_size == 1024 * 1024  # not a byte more
    assert "(1 MiB)" in out.error.message


async def test_a_python_writer_sees_efbig_and_the_limit_is_named_from_stderr(
    adapter: ProcessAdapter, ws: Workspace, tmp_path: Path
) -> None:
    # Python ignores SIGXFSZ: the write fails with EFBIG and the script dies of the error.
    script(ws, "with open('big', 'wb') as f:\n    f.write(b'x' * (3 << 20))\n")
    out, _ = await run(adapter, ws, limited(tmp_path, file_size="1MiB"))
    details = limit_of(out)
    assert (details["limit"], details["detected_by"], details["exit_code"]) == (
        "file_size",
        "stderr",
        1,
    )
    assert "File too large" in out.data["stderr"]


async def test_memory_limits_the_address_space(
    adapter: ProcessAdapter, ws: Workspace, tmp_path: Path
) -> None:
    script(ws, "import sys\nblock = bytearray(int(sys.argv[1]))\nprint('allocated')\n")
    tool = limited(tmp_path, memory="256MiB")
    out, _ = await run(adapter, ws, tool, args=[str(1 << 30)])
    details = limit_of(out)
    assert (details["limit"], details["limit_value"]) == ("memory", 256 << 20)
    assert "MemoryError" in out.data["stderr"]
    small, _ = await run(adapter, ws, tool, args=[str(16 << 20)])  # the limit, not Python
    assert small.outcome is Outcome.SUCCEEDED, small.data
    assert small.data["limit_exceeded"] is None


async def test_open_files(adapter: ProcessAdapter, ws: Workspace, tmp_path: Path) -> None:
    script(
        ws,
        "import resource\nprint(resource.getrlimit(resource.RLIMIT_NOFILE))\n"
        "fs = [open('s.py') for _ in range(64)]\n",
    )
    out, _ = await run(adapter, ws, limited(tmp_path, open_files=32))
    details = limit_of(out)
    assert details["limit"] == "open_files" and details["detected_by"] == "stderr"
    assert out.data["stdout"].startswith("(32, 32)")
    assert "Too many open files" in out.data["stderr"]


async def test_without_a_limit_hit_a_failure_stays_command_failed(
    adapter: ProcessAdapter, ws: Workspace, tmp_path: Path
) -> None:
    """The stderr signs are read only for a declared limit: the same text without one is an
    ordinary failure, and a limit the run did not hit names nothing."""
    script(ws, "import sys\nsys.exit('File too large, Too many open files')\n")
    for tool in (declare(tmp_path), limited(tmp_path, memory="1GiB", cpu_seconds=30)):
        out, _ = await run(adapter, ws, tool)
        assert out.error is not None and out.error.code == "command_failed", out.error
        assert out.data["limit_exceeded"] is None


# --- processes and users ----------------------------------------------------------------------


@pytest.fixture
def open_ws() -> Iterator[Workspace]:
    """A workspace another user can enter and write (tmp_path's parents are root's, 0700)."""
    base = Path(tempfile.mkdtemp(prefix="toolgate-user-"))
    base.chmod(0o755)
    root = base / "ws"
    root.mkdir()
    if os.geteuid() == 0:
        os.chown(root, pwd.getpwnam(NOBODY).pw_uid, pwd.getpwnam(NOBODY).pw_gid)
    try:
        yield Workspace("demo", root.resolve())
    finally:
        for path in sorted(base.rglob("*"), reverse=True):
            path.unlink() if not path.is_dir() else path.rmdir()
        base.rmdir()


def nobody_group() -> str:
    """The name of nobody's group (``nogroup`` on Debian, ``nobody`` elsewhere)."""
    return grp.getgrgid(pwd.getpwnam(NOBODY).pw_gid).gr_name


def root_or_skip() -> None:
    if os.geteuid() != 0:
        message = "running a tool as another user needs a root gateway"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


def system_python() -> str:
    """An interpreter another user can run (the venv's may live under root's home)."""
    for path in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.path.exists(path) and os.stat(path).st_mode & stat.S_IXOTH:
            return path
    message = "no interpreter that another user can run (/usr/bin/python3 is Debian's)"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


async def test_user_and_group_switch(
    adapter: ProcessAdapter, open_ws: Workspace, tmp_path: Path
) -> None:
    root_or_skip()
    script(
        open_ws,
        "import os\nprint(os.getuid(), os.geteuid(), os.getgid(), os.getgroups())\n"
        "open('mine', 'w').write('x')\n",
    )
    tool = declare(tmp_path, command=[system_python(), "s.py"], user=NOBODY, group=nobody_group())
    out, _ = await run(adapter, open_ws, tool)
    assert out.outcome is Outcome.SUCCEEDED, out.data["stderr"]
    nobody = pwd.getpwnam(NOBODY)
    assert out.data["stdout"].split() == [str(nobody.pw_uid)] * 2 + [
        str(nobody.pw_gid),
        f"[{nobody.pw_gid}]",
    ]
    assert (open_ws.root / "mine").stat().st_uid == nobody.pw_uid


async def test_a_group_alone_keeps_root_without_its_file_override(
    adapter: ProcessAdapter, ws: Workspace, tmp_path: Path
) -> None:
    root_or_skip()
    script(ws, "import os\nprint(os.getuid(), os.getgid(), os.getgroups())\n" + STATUS)
    out, _ = await run(adapter, ws, declare(tmp_path, group=nobody_group()))
    assert out.outcome is Outcome.SUCCEEDED, out.data["stderr"]
    gid = pwd.getpwnam(NOBODY).pw_gid
    assert out.data["stdout"].splitlines()[0] == f"0 {gid} [{gid}]"
    if adapter.isolation is not None:  # the decoys stay unreadable: no CAP_DAC_OVERRIDE
        bounding = int(status_field(out.data["stdout"], "CapBnd"), 16)
        assert bounding & 0b110 == 0, hex(bounding)


async def test_processes_counts_the_users_processes(
    adapter: ProcessAdapter, open_ws: Workspace, tmp_path: Path
) -> None:
    root_or_skip()
    script(open_ws, FORKER)
    tool = declare(
        tmp_path, command=[system_python(), "s.py"], user=NOBODY, limits={"processes": 4}
    )
    out, _ = await run(adapter, open_ws, tool)
    details = limit_of(out)
    assert (details["limit"], details["limit_value"]) == ("processes", 4)
    assert "Resource temporarily unavailable" in out.data["stderr"]
    assert out.data["stdout"].strip() == "forked 3"


FORKER = """
import os, sys, time
children = []
try:
    for _ in range(10):
        pid = os.fork()
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        children.append(pid)
finally:
    print("forked", len(children), flush=True)
"""


async def test_processes_is_refused_where_it_would_not_bind(
    adapter: ProcessAdapter, ws: Workspace, tmp_path: Path
) -> None:
    """RLIMIT_NPROC does not bind root: a root child with the limit does not start."""
    root_or_skip()
    script(ws, "open('ran', 'w').write('x')\n")
    out, _ = await run(adapter, ws, limited(tmp_path, processes=8))
    assert out.outcome is Outcome.FAILED and out.error is not None
    assert out.error.code == "confinement_unavailable"
    assert "not enforce" in out.error.message
    assert not out.side_effect.attempted and not (ws.root / "ran").exists()


async def test_another_user_needs_a_root_gateway(
    adapter: ProcessAdapter, ws: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script(ws, "open('ran', 'w').write('x')\n")
    monkeypatch.setattr(limits_module.os, "geteuid", lambda: 1000)
    out, _ = await run(adapter, ws, declare(tmp_path, user=NOBODY))
    assert out.error is not None and out.error.code == "confinement_unavailable"
    assert "needs a gateway running as root" in out.error.message
    assert not (ws.root / "ran").exists()


async def test_a_confinement_the_kernel_refuses_runs_nothing(
    adapter: ProcessAdapter, open_ws: Workspace, tmp_path: Path
) -> None:
    """The launcher fails closed: a step it cannot take is a failed start, not a run without."""
    root_or_skip()
    script(open_ws, "open('ran', 'w').write('x')\n")
    out, _ = await run(adapter, open_ws, declare(tmp_path, user="4294967295"))  # uid -1
    assert out.error is not None and out.error.code == "command_failed_to_start", out.error
    assert "failed" in out.error.message and not out.side_effect.attempted
    assert not (open_ws.root / "ran").exists()


def test_a_kernel_without_network_namespaces_is_named_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    tool = declare(tmp_path, network="none")
    catalogue = Catalogue((tool,))
    monkeypatch.setattr(adapter_module, "network_namespace_refused", lambda: "EPERM, say")
    with caplog.at_level(logging.WARNING, "toolgate.process"):
        create(Settings(base_dir=tmp_path, process_isolation="off"), {}, catalogue)
    assert "test.proc" in caplog.text and "refuses a network namespace (EPERM, say)" in caplog.text
    with pytest.raises(ConfigError, match="required"):
        create(Settings(base_dir=tmp_path, process_isolation="required"), {}, catalogue)
    create(Settings(base_dir=tmp_path, process_isolation="required"), {}, NO_TOOLS)  # no tool


@pytest.mark.parametrize(
    ("keys", "fragment"),
    [
        ({"user": "no-such-user-here"}, "there is no user 'no-such-user-here'"),
        ({"group": "no-such-group-here"}, "there is no group 'no-such-group-here'"),
        ({"network": "off"}, "network"),
        ({"limits": {"memory": "1MiB"}}, "limits.memory"),
        ({"limits": {"cpu_seconds": 0}}, "limits.cpu_seconds"),
        ({"limits": {"open_files": 2}}, "limits.open_files"),
        ({"limits": {"memory": "lots"}}, "not a size"),
        ({"limits": {"threads": 3}}, "limits.threads"),
    ],
)
def test_bad_confinement_keys_are_load_errors(
    tmp_path: Path, keys: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        declare(tmp_path, **keys)
    assert fragment in str(caught.value) and ".yaml:" in str(caught.value)


# --- privileges, signals, network --------------------------------------------------------------

STATUS = "print(open('/proc/self/status').read())\n"


def status_field(text: str, name: str) -> str:
    return next(
        line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith(name + ":")
    )


@pytest.mark.slow  # starts a process itself
async def test_no_new_privs_is_on_by_default(
    adapter: ProcessAdapter, ws: Workspace, tmp_path: Path
) -> None:
    script(ws, STATUS)
    out, _ = await run(adapter, ws, declare(tmp_path))
    assert status_field(out.data["stdout"], "NoNewPrivs") == "1"
    off = declare(tmp_path, limits={"no_new_privs": False})
    out, _ = await run(adapter, ws, off)
    assert status_field(out.data["stdout"], "NoNewPrivs") == "0"


async def test_the_command_gets_sigpipe_and_sigxfsz_back(
    adapter: ProcessAdapter, ws: Workspace, tmp_path: Path
) -> None:
    """The launcher's interpreter ignores both; an ignored signal would stay ignored."""
    out, _ = await run(adapter, ws, declare(tmp_path, command=["cat", "/proc/self/status"]))
    ignored = int(status_field(out.data["stdout"], "SigIgn"), 16)
    assert ignored & (1 << (13 - 1)) == 0, "SIGPIPE ignored"
    assert ignored & (1 << (25 - 1)) == 0, "SIGXFSZ ignored"


CONNECT = """
import socket, sys
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5).close()
    print("connected")
except OSError as exc:
    print("refused", exc.errno)
print(sorted(line.split(":")[0].strip() for line in open("/proc/net/dev").readlines()[2:]))
"""


@pytest.fixture
def listener() -> Iterator[int]:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield server.getsockname()[1]


async def test_network_none_has_no_network(
    adapter: ProcessAdapter, ws: Workspace, tmp_path: Path, listener: int
) -> None:
    script(ws, CONNECT)
    out, _ = await run(adapter, ws, declare(tmp_path), args=[str(listener)])
    assert out.data["stdout"].startswith("connected"), out.data  # the test can fail
    out, _ = await run(adapter, ws, declare(tmp_path, network="none"), args=[str(listener)])
    assert out.outcome is Outcome.SUCCEEDED, out
    first, interfaces = out.data["stdout"].splitlines()
    assert first == "refused 101", first  # ENETUNREACH: no route, not even to 127.0.0.1
    assert interfaces == "['lo']"  # a namespace of its own: only its loopback, down


# --- the environment ------------------------------------------------------------------------

CANARY = "canary-3f9a1c0e5b7d"
ENV_DUMP = """
import json, os
seen = {"env": dict(os.environ)}
try:
    seen["parent"] = open(f"/proc/{os.getppid()}/environ", "rb").read().decode("utf-8", "replace")
except OSError as exc:
    seen["parent"] = type(exc).__name__
print(json.dumps(seen))
"""


async def test_only_declared_variables_reach_the_child(
    adapter: ProcessAdapter,
    ws: Workspace,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("TOOLGATE_DB_PASSWORD", CANARY)
    monkeypatch.setenv("LC_CTYPE", "C.UTF-8")
    caplog.set_level(logging.DEBUG)
    script(ws, ENV_DUMP)
    # PYTHONCOERCECLOCALE=0: the child's own interpreter would set LC_CTYPE itself (PEP 538)
    constants = {"MODE": "x", "PYTHONCOERCECLOCALE": "0"}
    tool = declare(tmp_path, env={"allow": ["PATH", "NOT_SET_ANYWHERE"], "set": constants})
    out, recorder = await run(adapter, ws, tool)
    assert out.outcome is Outcome.SUCCEEDED, out
    seen = json.loads(out.data["stdout"])
    assert set(seen["env"]) == {"PATH", "MODE", "PYTHONCOERCECLOCALE", MARKER_ENV}, seen["env"]
    assert seen["env"]["PATH"] == os.environ["PATH"]
    if adapter.isolation is not None:  # its own user namespace: the gateway's /proc is shut
        assert seen["parent"] == "PermissionError"
    else:  # the documented hole: the gateway's own user may read its /proc/<pid>/environ
        assert "PATH=" in seen["parent"]  # (as it was at exec: not the canary set since)
    everything = json.dumps([out.data, recorder.output, recorder.states, caplog.text])
    assert CANARY not in everything.replace(seen["parent"], "")


# --- through a real gateway: a 200 MB flood, a limit, a secret --------------------------------

FLOOD = """
import sys
block = b"y" * (1 << 20)
for _ in range(200):
    sys.stdout.buffer.write(block)
sys.stdout.flush()
"""


class Peak:
    """The highest RSS of a process while it is sampled (in a thread)."""

    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)
        self.peak = self.process.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self.process.memory_info().rss)

    def __enter__(self) -> Peak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@pytest.mark.slow
def test_a_real_gateway_survives_a_flood_a_runaway_and_keeps_its_secret(tmp_path: Path) -> None:
    isolation_or_skip()  # the gateway runs with process_isolation: auto
    config = make_project(tmp_path, f"sqlite:///{tmp_path / 'var' / 'toolgate.db'}")
    run_agent_code_without_approval(tmp_path, ("proc.python", "test.spin"))
    spin = yaml_tool(tmp_path)
    workspace = tmp_path / "var" / "workspaces" / "demo"
    workspace.mkdir(parents=True)
    (workspace / "flood.py").write_text(FLOOD)
    (workspace / "env.py").write_text(ENV_DUMP)
    (workspace / "spin.py").write_text(SPIN)
    log_path = tmp_path / "gateway.log"
    port = free_port()
    with log_path.open("wb") as log:
        proc = serve(config, port, log, {"TOOLGATE_DB_PASSWORD": CANARY})
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ALICE}"}) as http:
            env = call(http, "proc.python", {"script": "env.py"})
            assert env["result"]["outcome"] == "succeeded", env
            seen = json.loads(env["result"]["data"]["stdout"])
            assert seen["parent"] == "PermissionError"  # isolated: the gateway's environ too
            assert set(seen["env"]) <= {
                "PATH",
                "HOME",
                "LANG",
                "PYTHONDONTWRITEBYTECODE",
                MARKER_ENV,
            }
            before = psutil.Process(proc.pid).memory_info().rss
            with Peak(proc.pid) as peak:
                flood = call(http, "proc.python", {"script": "flood.py"}, timeout=300)
            after = psutil.Process(proc.pid).memory_info().rss
            runaway = call(http, spin, {"script": "spin.py"})
            events = [
                http.get(f"/v1/executions/{done['id']}/events").text
                for done in (env, flood, runaway)
            ]
    finally:
        stop(proc)
    result = flood["result"]
    assert result["outcome"] == "succeeded", result
    assert result["truncated"] is True and result["data"]["stdout_bytes"] == 200 << 20
    assert len(result["data"]["stdout"]) <= 64 * 1024 + 100
    assert f"[... {(200 << 20) - 64 * 1024} bytes dropped ...]" in result["data"]["stdout"]
    growth = max(peak.peak, after) - before
    assert growth < 50 << 20, f"the gateway's RSS grew by {growth >> 20} MiB during the flood"
    assert sum(len(e) for e in events) < 2 << 20  # tool.output is bounded too
    error = runaway["result"]["error"]
    assert runaway["result"]["outcome"] == "failed" and error["type"] == "limit_exceeded", error
    assert (error["limit"], error["signal"]) == ("cpu_seconds", "SIGXCPU")
    assert CANARY not in json.dumps([env, flood, runaway]) + "".join(events)
    assert CANARY not in log_path.read_text(errors="replace")


def call(http: httpx.Client, tool: str, arguments: dict[str, Any], timeout: float = 60) -> Any:
    response = http.post("/v1/executions", json=body(tool, arguments), timeout=timeout)
    assert response.status_code == 200, response.text
    return response.json()


def yaml_tool(project: Path) -> str:
    """A copy of proc.python in the project's tools.d, limited to one CPU second."""
    tool = yaml.safe_load((project / "tools.d" / "proc.python.yaml").read_text())
    tool["name"] = "test.spin"
    tool["limits"] = {**tool.get("limits", {}), "cpu_seconds": 1}
    (project / "tools.d" / "test.spin.yaml").write_text(yaml.safe_dump(tool))
    return "test.spin"


# --- which limit: the rules on their own ----------------------------------------------------


def test_exceeded_names_only_declared_limits_and_reads_stderr_only_after_a_failure() -> None:
    cpu = LimitOptions(cpu_seconds=5)
    both = LimitOptions(cpu_seconds=5, memory=64 << 20)
    kill, xcpu = -9, -24
    assert exceeded(cpu, kill, 4.9, "", True) is None  # killed before its budget: not the limit
    hit = exceeded(cpu, kill, 5.2, "", True)
    assert hit is not None and (hit.limit, hit.detected_by) == ("cpu_seconds", "cpu_time")
    assert exceeded(LimitOptions(), xcpu, 9.0, "", True) is None  # undeclared: not named
    assert exceeded(cpu, 1, 0.0, "MemoryError", True) is None
    hit = exceeded(both, 1, 0.0, "...\nMemoryError\n", True)
    assert hit is not None and (hit.limit, hit.detected_by) == ("memory", "stderr")
    assert exceeded(both, 0, 0.0, "MemoryError", False) is None  # it succeeded after all

"""The process adapter: run a declared command (argv, never a shell) inside a workspace.

Each ``command`` element is a template rendered on its own, so an argument is always one
argv element whatever it contains (a whole-element ``{arguments.x}`` holding a list becomes
one element per item). The child gets its own session, a confined ``cwd``, an environment
built only from the declaration's allowlist and constants, and optionally stdin from a
template. stdout and stderr are read concurrently, streamed as ``tool.output`` and kept
within the output budget (head and tail). The whole process tree is stopped on cancel, on
the deadline and when the command ends (see ``gateway.adapters.process.proctree``); its identity is
checkpointed right after the spawn so that recovery can stop it after a crash. Declared
limits, another user and ``network: none`` are applied by the launcher before ``exec``
(``gateway.adapters.process.sandbox``); a run that hit a limit ends ``limit_exceeded``.
"""

from __future__ import annotations

import codecs
import functools
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import anyio
import psutil
from anyio.abc import ByteReceiveStream, ByteSendStream, Process
from pydantic import ValidationError as PydanticValidationError

from gateway.adapters.base import AdapterCall, AdapterOutcome, Evidence
from gateway.adapters.base import SideEffectReport as Effect
from gateway.adapters.process import sandbox
from gateway.adapters.process.capture import Capture, split_budget
from gateway.adapters.process.junit import JUnitError, read_report
from gateway.adapters.process.limits import LimitHit, exceeded
from gateway.adapters.process.plan import Plan, make_plan, rendered_argv
from gateway.adapters.process.proctree import (
    ProcessIdentity,
    ProcessTree,
    become_subreaper,
    identify,
    kill_all_recorded,
)
from gateway.adapters.process.spec import ProcessOptions, ProcessSettings
from gateway.adapters.shared.fileio import file_sha256
from gateway.declarations.catalogue import Catalogue
from gateway.declarations.model import ToolDeclaration
from gateway.errors import ConfigError, ExecutionError, ToolgateError
from gateway.settings import Settings, make_directory
from gateway.types import JSON, Outcome, SideEffect
from gateway.workspace import ResolvedPath, Workspace, confine, protected_in

log = logging.getLogger("toolgate.process")
TRACK_INTERVAL = 0.25
"""How often the root's descendants are recorded while it runs (seconds)."""
_WRITES = (SideEffect.WRITE, SideEffect.EXTERNAL)


def create(settings: Settings, config: Mapping[str, Any], catalogue: Catalogue) -> ProcessAdapter:
    """Check the ``adapters.process`` section and become a subreaper if asked to."""
    try:
        parsed = ProcessSettings.model_validate(dict(config))
    except PydanticValidationError as exc:
        raise ConfigError(
            [f"adapters.process.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
        ) from exc
    executables = {"python": sys.executable, **parsed.executables}
    bad = sorted(k for k, v in executables.items() if "/" in k or not os.path.isabs(v))
    if bad:
        raise ConfigError(f"adapters.process.executables: {bad} must map names to absolute paths")
    if parsed.subreaper:
        become_subreaper()
    _check_network(settings, catalogue)
    _check_writable(settings, catalogue)
    return ProcessAdapter(executables, isolation(settings))


def own_directories(settings: Settings) -> tuple[str, ...]:
    """The gateway's own directories, real paths: the project directory, the configuration
    file's, tools.d, rego/, policies/, var_dir (the store, artifacts, default workspaces), a
    SQLite store's directory and the gateway's code. No process tool may write in them."""
    dirs = [settings.base_dir, settings.path(settings.var_dir), settings.path(settings.tools_dir)]
    dirs += [settings.path(settings.rego_dir), settings.path(settings.policies_dir)]
    dirs += [settings.config_file.parent] if settings.config_file else []
    database = _sqlite_file(settings)
    dirs += [Path(database).parent] if database else []
    dirs.append(Path(__file__).parents[2])  # the gateway package
    return tuple(sorted({os.path.realpath(d) for d in dirs}))


def _overlap(path: str, dirs: Sequence[str]) -> str | None:
    """The first of ``dirs`` that ``path`` is, lies in or contains (real paths), or None."""
    return next((d for d in dirs if sandbox.inside(path, d) or sandbox.inside(d, path)), None)


def _check_writable(settings: Settings, catalogue: Catalogue) -> None:
    """A declared ``writable`` path may not re-open the gateway's own directories."""
    own = own_directories(settings)
    faults = []
    for tool in catalogue.all():
        if not isinstance(tool.options, ProcessOptions):
            continue
        for path in tool.options.writable:
            clash = _overlap(os.path.realpath(path), own)
            if clash is not None:
                faults.append(
                    f"{tool.ref}: writable path {path} overlaps {clash}, one of the gateway's "
                    "own directories (project, var_dir, the store, its code): a process tool "
                    "may never write there"
                )
    if faults:
        raise ConfigError(faults)


def _check_network(settings: Settings, catalogue: Catalogue) -> None:
    """Tools with ``network: none`` where this kernel refuses a network namespace: their
    calls will fail to start (never run with the network); ``required`` refuses to start."""
    tools = [
        t.ref
        for t in catalogue.all()
        if isinstance(t.options, ProcessOptions) and t.options.network == "none"
    ]
    reason = network_namespace_refused() if tools else None
    if reason is None:
        return
    message = (
        f"{', '.join(tools)} declare network: none, but this kernel refuses a network "
        f"namespace ({reason})"
    )
    if settings.process_isolation == "required":
        raise ConfigError(f"process_isolation is 'required' and {message}")
    log.warning("%s: their calls will fail to start", message)


@functools.cache
def network_namespace_refused() -> str | None:
    """Why this kernel refuses a child a network namespace of its own, or None (asked once
    per process: the answer does not change)."""
    return sandbox.probe(sys.executable, None, sandbox.Confinement(no_network=True))


@dataclass(frozen=True, slots=True)
class Isolation:
    """What every child's filesystem view hides, and the directories it may never write (see
    ``gateway.adapters.process.sandbox``)."""

    hidden_dirs: tuple[str, ...]
    hidden_files: tuple[str, ...]
    own_dirs: tuple[str, ...] = ()
    """``own_directories``: a declared writable path is checked against them per call."""

    def view(
        self,
        workspace: Workspace,
        cwd: Path,
        readonly: Sequence[str] = (),
        writable: Sequence[str] = (),
        report: Path | None = None,
    ) -> sandbox.View:
        """The view of one call: ``readonly`` (its workspace's protected paths), the
        declaration's ``writable`` directories, and the test ``report`` file it declares."""
        root = str(workspace.root)
        if any(os.path.realpath(d) == root for d in self.hidden_dirs):
            raise _not_started(
                f"the workspace {workspace.id!r} is the gateway's var_dir, which process "
                "isolation hides: give it a root of its own"
            )
        extra = [_writable(path, self.own_dirs, workspace) for path in writable]
        if report is not None:
            real = os.path.realpath(report)
            if not sandbox.inside(real, root):
                raise _not_started(f"the test report {report} leads outside the workspace")
            extra.append(real)
        return sandbox.view(self.hidden_dirs, self.hidden_files, root, str(cwd), readonly, extra)


def _writable(path: str, own: Sequence[str], workspace: Workspace) -> str:
    """A declared writable directory, checked again now (a symlink on the way may have
    changed since the load): its real path."""
    real = os.path.realpath(path)
    clash = _overlap(real, own)
    if clash is not None:
        raise _not_started(f"the writable path {path} ({real}) overlaps the gateway's own {clash}")
    if _overlap(real, (str(workspace.root),)) is not None:
        raise _not_started(
            f"the writable path {path} ({real}) overlaps the workspace {workspace.id!r}, "
            "whose protected paths must stay read-only"
        )
    if not os.path.isdir(real):
        raise _not_started(f"the writable path {path} is not a directory")
    return real


def _not_started(message: str) -> ExecutionError:
    return ExecutionError(message, code="command_failed_to_start")


def _sqlite_file(settings: Settings) -> str | None:
    url = settings.resolved_database_url
    if url.startswith("sqlite:///") and ":memory:" not in url:
        return url[len("sqlite:///") - 1 :].split("?", 1)[0]
    return None


def isolation(settings: Settings) -> Isolation | None:
    """The isolation ``settings.process_isolation`` asks for and this kernel allows, or None
    (``off``, or ``auto`` where the kernel refuses it: logged once). ``required`` where the
    kernel refuses it is a ConfigError: the gateway does not start."""
    mode = settings.process_isolation
    if mode == "off":
        return None
    var = settings.path(settings.var_dir)
    make_directory(var, "var_dir")
    files = [str(settings.config_file)] if settings.config_file else []
    database = _sqlite_file(settings)
    if database is not None:
        files += [database, database + "-wal", database + "-shm", database + "-journal"]
    reason = sandbox.probe(sys.executable, str(var))
    if reason is None:
        return Isolation((str(var),), tuple(files), own_directories(settings))
    if mode == "required":
        raise ConfigError(
            f"process_isolation is 'required' but this kernel refuses it ({reason}): "
            "process tools would see var_dir and the configuration file and could write "
            "wherever the gateway's user may; allow user and mount namespaces (and "
            "mount_setattr, Linux 5.12), or set process_isolation: auto or off"
        )
    log.warning(
        "process isolation is not available (%s): process tools run WITHOUT it and can read "
        "%s and the configuration file, and write wherever the gateway's user may; set "
        "process_isolation: required to refuse to start",
        reason,
        var,
    )
    return None


class ProcessAdapter:
    """Real processes, one tree per call."""

    name: ClassVar[str] = "process"

    def __init__(self, executables: Mapping[str, str], isolation: Isolation | None = None) -> None:
        self._executables = dict(executables)
        self.isolation = isolation

    async def execute(self, call: AdapterCall) -> AdapterOutcome:
        try:
            plan = make_plan(call, self._executables)
        except ToolgateError as exc:
            return not_started(exc)
        if call.cancelled.is_set():
            error = ExecutionError("the call was cancelled before it started", code="cancelled")
            return not_started(error, Outcome.CANCELLED)
        return await _Run(plan, call, self.isolation).run()

    def policy_view(self, tool: ToolDeclaration, context: Mapping[str, JSON]) -> dict[str, JSON]:
        """The argv the call will run (``input.action``), rendered as ``execute`` renders it;
        ``argv[0]`` is the program as declared, before it is looked up on a PATH."""
        options = tool.options
        assert isinstance(options, ProcessOptions)
        return {"argv": list(rendered_argv(options, context))}

    async def probe(self, name: str, params: Mapping[str, str], call: AdapterCall) -> JSON:
        target = confine(call.workspace, params["path"], "probe path").absolute
        if name == "file_exists":
            return await anyio.to_thread.run_sync(target.exists)
        return await anyio.to_thread.run_sync(file_sha256, target)

    async def recover(self, states: Sequence[Mapping[str, JSON]]) -> None:
        """After a restart: stop the trees ``state.checkpointed`` events recorded, each only
        if it is provably still the one this adapter started (pid + start time, or its
        marker); all of them at once, their grace periods side by side."""
        try:
            stopped = await anyio.to_thread.run_sync(kill_all_recorded, states)
        except (psutil.Error, OSError) as exc:
            pids = sorted({str(state.get("pid")) for state in states})
            raise ExecutionError(
                f"cannot stop the recorded processes {', '.join(pids)}: {exc}",
                code="interrupted",
            ) from exc
        for state, signalled in zip(states, stopped, strict=True):
            if signalled:
                log.warning("stopped the leftover process tree of %s", state.get("marker"))

    async def aclose(self) -> None:
        return None


def not_started(error: ToolgateError, outcome: Outcome = Outcome.FAILED) -> AdapterOutcome:
    """Nothing ran: the outcome says so, whatever the tool's side_effect."""
    return AdapterOutcome(outcome, error=error, side_effect=Effect(False, False, "not started"))


# --- one run ---------------------------------------------------------------------------------


@dataclass
class _Run:
    plan: Plan
    call: AdapterCall
    isolation: Isolation | None
    out: Capture = field(init=False)
    err: Capture = field(init=False)
    cancelled: bool = False
    """A cancel stopped the command (a cancel after it ended changes nothing)."""
    ended: bool = False
    cpu_seen: float = 0.0
    """The root's CPU seconds when last looked at (with a ``cpu_seconds`` limit)."""

    def __post_init__(self) -> None:
        budget = max(self.call.output_budget, 0)
        self.out, self.err = Capture(budget), Capture(budget)

    async def run(self) -> AdapterOutcome:
        made_report = self._make_report()
        report_before = _stat(self.plan.junit)
        try:
            return await self._run(report_before)
        finally:
            junit = self.plan.junit
            if made_report and junit is not None and _stat(junit) == report_before:
                junit.absolute.unlink(missing_ok=True)  # the empty file made above

    async def _run(self, report_before: tuple[int, int, int] | None) -> AdapterOutcome:
        spawned_at = time.time()
        try:
            process, status = await self._spawn()
        except OSError as exc:
            reason = os.strerror(exc.errno) if exc.errno else type(exc).__name__
            return not_started(self._start_error(reason))
        except ExecutionError as exc:
            return not_started(exc)
        started = time.monotonic()
        tree = ProcessTree(_identity(process.pid, spawned_at), marker=self.call.execution_id)
        try:
            if status is not None:
                failed = await _launched(status)
                if failed is not None:
                    stage, reason = failed
                    if stage == "exec":
                        return not_started(self._start_error(reason))
                    what = "process isolation" if self.isolation else "confinement"
                    return not_started(self._start_error(f"its {what} failed: {reason}"))
            await self.call.checkpoint(self._state(tree))
            returncode = await self._supervise(process, tree)
        finally:
            with anyio.CancelScope(shield=True):
                await tree.stop(self.plan.kill_grace)
                await _close(process, tree)
        duration = time.monotonic() - started
        result = _Result(self, process.pid, returncode, duration, len(tree.signalled))
        return await result.outcome(report_before)

    def _make_report(self) -> bool:
        """Under isolation the declared test report is bound writable into a read-only view
        (it may lie in a protected path such as ``.toolgate/``), so it must exist before the
        command starts: made empty here (True), unless it is there already."""
        junit = self.plan.junit
        if self.isolation is None or junit is None:
            return False
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            os.close(os.open(junit.absolute, flags, 0o644))
        except OSError:
            return False  # there already (or unusable: the launcher then says why)
        return True

    def _start_error(self, reason: str) -> ExecutionError:
        return ExecutionError(
            f"{self.plan.program} could not be started: {reason}",
            code="command_failed_to_start",
        )

    async def _spawn(self) -> tuple[Process, int | None]:
        """The process, and with isolation the read end of the launcher's status pipe."""
        plan = self.plan
        argv = list(plan.argv)
        options: dict[str, Any] = {
            "stdin": subprocess.PIPE if plan.stdin is not None else subprocess.DEVNULL,
            "stdout": subprocess.PIPE,
            "stderr": subprocess.PIPE,
            "cwd": plan.cwd.absolute,
            "env": dict(plan.env),
            "start_new_session": True,
        }
        if self.isolation is None and plan.confinement.empty:
            return await anyio.open_process(argv, **options), None
        view = None
        if self.isolation is not None:
            workspace = self.call.workspace
            readonly = await anyio.to_thread.run_sync(protected_in, workspace)
            report = plan.junit.absolute if plan.junit is not None else None
            view = self.isolation.view(
                workspace, plan.cwd.absolute, readonly, plan.writable, report
            )
        read, write = os.pipe()
        try:
            launcher = sandbox.launcher(sys.executable, write, plan.env, view, plan.confinement)
            process = await anyio.open_process([*launcher, *argv], pass_fds=(write,), **options)
        except BaseException:
            os.close(read)
            raise
        finally:
            os.close(write)
        return process, read

    def _state(self, tree: ProcessTree) -> dict[str, JSON]:
        root = tree.root
        return {
            "pid": root.pid,
            "create_time": root.create_time,
            "pgid": root.pid,
            "marker": self.call.execution_id,
            "program": self.plan.program,
            "kill_grace": self.plan.kill_grace,
        }

    async def _supervise(self, process: Process, tree: ProcessTree) -> int:
        async with anyio.create_task_group() as watchers:
            watchers.start_soon(self._watch_cancel, tree)
            watchers.start_soon(_track, tree)
            if self.plan.limits.cpu_seconds is not None:
                watchers.start_soon(self._watch_cpu, tree)
            async with anyio.create_task_group() as io:
                assert process.stdout is not None and process.stderr is not None
                io.start_soon(self._pump, process.stdout, "stdout", self.out)
                io.start_soon(self._pump, process.stderr, "stderr", self.err)
                if self.plan.stdin is not None and process.stdin is not None:
                    io.start_soon(_feed, process.stdin, self.plan.stdin)
                returncode = await process.wait()
                self.ended = True
                if not self.cancelled:
                    # Descendants left behind may hold the pipes open: stop them now.
                    await tree.stop(self.plan.kill_grace)
            watchers.cancel_scope.cancel()
        return returncode

    async def _watch_cancel(self, tree: ProcessTree) -> None:
        await self.call.cancelled.wait()
        if not self.ended:
            self.cancelled = True
            await tree.stop(self.plan.kill_grace)

    async def _watch_cpu(self, tree: ProcessTree) -> None:
        while True:
            root = tree.root.process()
            if root is not None:
                try:
                    times = root.cpu_times()
                    self.cpu_seen = max(self.cpu_seen, times.user + times.system)
                except psutil.Error:
                    pass
            await anyio.sleep(TRACK_INTERVAL)

    async def _pump(self, stream: ByteReceiveStream, name: str, capture: Capture) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        try:
            async for chunk in stream:
                capture.add(chunk)
                text = decoder.decode(chunk)
                if text:
                    self.call.emit_output(name, text)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass
        rest = decoder.decode(b"", final=True)
        if rest:
            self.call.emit_output(name, rest)


async def _launched(status: int) -> tuple[str, str] | None:
    """What the launcher reported: None once it exec'd the command (the pipe closed empty)."""
    report = await anyio.to_thread.run_sync(_read_all, status, abandon_on_cancel=True)
    return sandbox.failure(report)


def _read_all(fd: int) -> bytes:
    with os.fdopen(fd, "rb") as pipe:
        return pipe.read(4096)


def _identity(pid: int, spawned_at: float) -> ProcessIdentity:
    try:
        return identify(pid)
    except psutil.Error:
        # Already exited and reaped: an identity that no live process will match.
        return ProcessIdentity(pid, spawned_at - 2.0)


async def _track(tree: ProcessTree) -> None:
    while True:
        await anyio.sleep(TRACK_INTERVAL)
        tree.track()


async def _feed(stdin: ByteSendStream, data: bytes) -> None:
    try:
        await stdin.send(data)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        pass  # the command did not read all of it: its choice
    finally:
        await stdin.aclose()


async def _close(process: Process, tree: ProcessTree) -> None:
    # Signal only a root that is provably still ours: its pid may already be reaped and reused.
    if process.returncode is None and tree.root.process() is not None:
        process.kill()
    await process.aclose()


def _stat(path: ResolvedPath | None) -> tuple[int, int, int] | None:
    try:
        st = path.absolute.stat() if path is not None else None
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size) if st is not None else None


# --- the outcome -------------------------------------------------------------------------------


@dataclass
class _Result:
    run: _Run
    pid: int
    returncode: int
    duration: float
    stopped: int

    @property
    def signal_name(self) -> str | None:
        if self.returncode >= 0:
            return None
        try:
            return signal.Signals(-self.returncode).name
        except ValueError:
            return f"signal {-self.returncode}"

    async def outcome(self, report_before: tuple[int, int, int] | None) -> AdapterOutcome:
        plan, call = self.run.plan, self.run.call
        data, truncated = self._data()
        if self.run.cancelled:
            return self._cancelled(data, truncated)
        evidence = [self._evidence()]
        report_error: ToolgateError | None = None
        if plan.junit is not None:
            report, report_error = await _report(plan.junit, report_before)
            if report is not None:
                data["junit"] = dict(report.data)
                evidence.append(report)
        error = self._exit_error() or report_error
        attempted = call.tool.side_effect in _WRITES
        summary = f"ran {plan.program} for {self.duration:.2f}s: " + self._how_it_ended()
        return AdapterOutcome(
            Outcome.FAILED if error else Outcome.SUCCEEDED,
            data=data,
            side_effect=Effect(attempted, attempted, summary),
            evidence=tuple(evidence),
            error=error,
            truncated=truncated,
        )

    def _how_it_ended(self) -> str:
        name = self.signal_name
        return f"killed by {name}" if name else f"exit code {self.returncode}"

    @property
    def limit_hit(self) -> LimitHit | None:
        run = self.run
        failed = self.returncode not in run.plan.success_exit_codes
        return exceeded(run.plan.limits, self.returncode, run.cpu_seen, run.err.last(), failed)

    def _exit_error(self) -> ToolgateError | None:
        plan = self.run.plan
        hit = self.limit_hit
        if hit is not None:
            return self._limit_error(hit)
        if self.returncode in plan.success_exit_codes:
            return None
        expected = ", ".join(str(c) for c in sorted(plan.success_exit_codes))
        name = self.signal_name
        if name:
            message = f"{plan.program} was killed by {name}"
        else:
            message = f"{plan.program} exited with code {self.returncode} (success: {expected})"
        return ExecutionError(
            message + "; see data.stderr",
            code="command_failed",
            details={"exit_code": self.returncode if not name else None, "signal": name},
        )

    def _limit_error(self, hit: LimitHit) -> ToolgateError:
        name = self.signal_name
        how = f"killed by {name}" if name else f"exit code {self.returncode}"
        told = {"signal": "", "cpu_time": " at its hard CPU limit"}.get(hit.detected_by, "")
        told = told or (" (its stderr names the error)" if hit.detected_by == "stderr" else "")
        return ExecutionError(
            f"{self.run.plan.program} exceeded {hit.describe()}: {how}{told}; its process "
            "tree was stopped; see data.stderr",
            code="limit_exceeded",
            details={
                "limit": hit.limit,
                "limit_value": hit.value,
                "detected_by": hit.detected_by,
                "exit_code": self.returncode if not name else None,
                "signal": name,
            },
        )

    def _cancelled(self, data: dict[str, JSON], truncated: bool) -> AdapterOutcome:
        plan, call = self.run.plan, self.run.call
        attempted = call.tool.side_effect in _WRITES
        summary = (
            f"{plan.program} was stopped on request after {self.duration:.2f}s "
            f"({self.stopped} processes signalled); its effects may be partial"
        )
        return AdapterOutcome(
            Outcome.CANCELLED,
            data=data,
            side_effect=Effect(attempted, False, summary),
            evidence=(self._evidence(),),
            error=ExecutionError(
                f"the call was cancelled while {plan.program} ran; its process tree was stopped",
                code="cancelled",
            ),
            truncated=truncated,
        )

    def _data(self) -> tuple[dict[str, JSON], bool]:
        run = self.run
        out_limit, err_limit = split_budget(
            max(run.call.output_budget, 0), run.out.total, run.err.total
        )
        truncated = run.out.total > out_limit or run.err.total > err_limit
        name = self.signal_name
        data: dict[str, JSON] = {
            "command": list(run.plan.argv),
            "cwd": run.plan.cwd.relative,
            "pid": self.pid,
            "exit_code": None if name else self.returncode,
            "signal": name,
            "duration_ms": int(self.duration * 1000),
            "stdout": run.out.text(out_limit),
            "stderr": run.err.text(err_limit),
            "stdout_bytes": run.out.total,
            "stderr_bytes": run.err.total,
            "truncated": truncated,
            "stopped_processes": self.stopped,
        }
        hit = self.limit_hit
        data["limit_exceeded"] = hit.limit if hit is not None else None
        return data, truncated

    def _evidence(self) -> Evidence:
        run = self.run
        return Evidence(
            "process_exit",
            run.plan.program,
            None,
            {
                "exit_code": None if self.signal_name else self.returncode,
                "signal": self.signal_name,
                "duration_ms": int(self.duration * 1000),
                "stdout_sha256": run.out.digest.hexdigest(),
                "stderr_sha256": run.err.digest.hexdigest(),
            },
        )


async def _report(
    path: ResolvedPath, before: tuple[int, int, int] | None
) -> tuple[Evidence | None, ToolgateError | None]:
    """The report as evidence, or why there is none."""
    if _stat(path) == before:
        return None, ExecutionError(
            f"the test report {path.relative} was not written by this run",
            code="test_report_missing",
        )
    try:
        return await anyio.to_thread.run_sync(_report_evidence, path), None
    except JUnitError as exc:
        return None, ExecutionError(
            f"the test report {path.relative} is unusable: {exc}", code="test_report_invalid"
        )


def _report_evidence(path: ResolvedPath) -> Evidence:
    report = read_report(path.absolute)
    data: dict[str, JSON] = {"summary": report.summary(), **report.to_json()}
    return Evidence("test_report", path.relative, file_sha256(path.absolute), data)

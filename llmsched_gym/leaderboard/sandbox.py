"""A submission's code runs in its own process; the harness keeps the run, scores and checks.

``SandboxedAgent`` starts ``python -m llmsched_gym.leaderboard._sandbox_child``, which imports
the entry point (``file.py:factory`` or ``module:factory``), calls the factory and then answers
observation -> action; the harness wraps it as ``AgentPolicy`` / ``AgentRouter`` like any agent
(SB3's ``predict`` shape). The simulation, the observations, scoring and validation stay in this
process, which the submission's code cannot reach: it shares no memory with it, and the parent
never unpickles what the child sends.

Protocol (the child's stdin and stdout; its prints go to stderr): frames of a 4-byte big-endian
length and a body. A message is one JSON frame, followed, for an observation, by one raw frame
per array (dtype and shape in the JSON). Actions come back as JSON (an integer, or an array's
dtype, shape and values), checked here: numbers only, finite, at most ``_MAX_ACTION`` values.

Enforced on the child (``what_is_enforced`` in its answer says which parts took):

* limits, from the suite: ``memory_mb`` (RLIMIT_AS), CPU seconds ``per_workload_s`` (RLIMIT_CPU;
  a hard limit 5 s later kills a child that ignores SIGXCPU), and wall deadlines kept by this
  process with timeouts on its reads (``startup_s`` for import and factory, ``per_action_s`` per
  action, ``per_workload_s`` for the whole workload); on a deadline the child's process group
  is killed with SIGKILL and ``SandboxError`` names the limit;
* a fresh scratch folder as cwd, HOME and TMPDIR (removed afterwards), a minimal environment, no
  inherited file descriptors but its pipes;
* Landlock, where the kernel has it (ABI >= 1): writing, creating, removing or renaming files
  only under the scratch folder (and writing /dev/null); TCP bind and connect denied (ABI >= 4);
  signals to and abstract Unix sockets of processes outside the sandbox denied (ABI >= 6). The
  child sets ``no_new_privs`` first. Without Landlock, an audit hook refuses those writes,
  ``socket.connect`` / ``bind`` and starting processes: an audit hook is not a security
  boundary (ctypes or a C extension bypasses it), only a guard against accidents;
* unpickling refused (an audit hook on ``pickle.find_class``) unless ``trust_pickle``: a pickle
  (SB3's ``model.zip`` entries, ``torch.load(weights_only=False)``) runs code chosen by whoever
  wrote the file. ``torch.load(weights_only=True)`` and ``np.load(allow_pickle=False)`` work.

Not enforced: reading any file the user can read (other submissions, the harness's sources, the
home folder); UDP and Unix sockets by path; CPU-time side channels and timing; a child that
escapes the process group (``setsid`` in a process it starts) outlives the kill, though it keeps
the limits and the Landlock domain. The child runs with the user's uid: this is a guard against
policies that cheat the judge or run away, not a jail for hostile code.
"""

from __future__ import annotations

import json
import math
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from llmsched_gym.errors import SandboxError
from llmsched_gym.leaderboard.suite import Suite

__all__ = ["SandboxLimits", "SandboxedAgent", "close_policy"]

CHILD_MODULE = "llmsched_gym.leaderboard._sandbox_child"
_HEADER = 4
_MAX_REPLY = 1 << 20
"""Bytes of one JSON answer from the child; more is an error, not a buffer to grow."""
_MAX_ACTION = 1 << 16
"""Numbers in one action (the largest action space is a few dozen)."""
ACTION_DTYPES = frozenset(
    ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
    + ("float16", "float32", "float64")
)
"""Dtypes an action array may come back in (the agent's own, so the harness sees what it saw)."""
_KILL_GRACE_S = 5.0


@dataclass(frozen=True)
class SandboxLimits:
    """The suite's limits on a submission's process (``Suite`` fields of the same names)."""

    memory_mb: int = Suite.memory_mb
    startup_s: float = Suite.startup_s
    per_action_s: float = Suite.per_action_s
    per_workload_s: float = 600.0
    """``Suite.workload_limit_s``, as a suite file without ``per_workload_s`` sets it."""

    @classmethod
    def of(cls, suite: Any) -> SandboxLimits:
        """The limits a suite (``llmsched_gym.leaderboard.suite.Suite``) sets."""
        return cls(suite.memory_mb, suite.startup_s, suite.per_action_s, suite.workload_limit_s)


def _frame(body: bytes | memoryview) -> list[bytes | memoryview]:
    return [len(body).to_bytes(_HEADER, "big"), body]


def _jsonable_frames(message: Mapping[str, Any]) -> list[bytes | memoryview]:
    return _frame(json.dumps(message, allow_nan=False).encode())


def encode_arrays(
    header: dict[str, Any], arrays: list[tuple[str | None, Any]]
) -> list[bytes | memoryview]:
    """Frames of ``header`` plus ``arrays`` as raw buffers (key, dtype and shape in the header)."""
    specs, bodies = [], []
    for key, value in arrays:
        a = np.asarray(value)
        if a.dtype.hasobject:
            raise SandboxError(f"observation {key!r} has dtype object; the sandbox sends numbers")
        if not a.flags.c_contiguous:
            a = a.copy(order="C")
        specs.append({"key": key, "dtype": a.dtype.str, "shape": list(a.shape)})
        bodies.append(memoryview(a.reshape(-1)).cast("B"))
    frames = _jsonable_frames({**header, "arrays": specs})
    for body in bodies:
        frames += _frame(body)
    return frames


def parse_action(value: Any, where: str) -> Any:
    """The action an answer carries: an int, or an array rebuilt from dtype, shape and values."""
    if type(value) is int:
        return value
    if not isinstance(value, dict) or set(value) != {"dtype", "shape", "values"}:
        raise SandboxError(f"{where}: an action must be an integer or an array of numbers")
    dtype, shape, values = value["dtype"], value["shape"], value["values"]
    if dtype not in ACTION_DTYPES:
        raise SandboxError(f"{where}: action dtype {str(dtype)[:40]!r} is not a number type")
    ok_shape = isinstance(shape, list) and all(type(n) is int and n >= 0 for n in shape)
    if not ok_shape or len(shape) > 4 or math.prod(shape) > _MAX_ACTION:
        raise SandboxError(f"{where}: action shape {str(shape)[:40]} is not a small array shape")
    if not isinstance(values, list) or len(values) != math.prod(shape):
        raise SandboxError(f"{where}: the action's values do not fill its shape {shape}")
    number = (bool,) if dtype == "bool" else (int,) if dtype[0] in "iu" else (int, float)
    for x in values:
        if type(x) not in number or (type(x) is float and not math.isfinite(x)):
            raise SandboxError(f"{where}: action value {str(x)[:40]} is not a finite {dtype}")
    try:
        return np.array(values, dtype=dtype).reshape(shape)
    except OverflowError:
        raise SandboxError(f"{where}: an action value is out of range for {dtype}") from None


def _no_constant(name: str) -> Any:
    raise SandboxError(f"the child sent {name}: actions must be finite numbers")


class SandboxedAgent:
    """An agent running in a child process (SB3's ``predict`` shape), for one workload.

    Args:
        entry: ``/absolute/path/file.py:factory`` or ``package.module:factory``.
        task: The suite task; the factory gets ``task=`` if it takes it.
        name: Names the policy in errors.
        limits: The suite's limits.
        trust_pickle: Let the child unpickle (``PPO.load`` of a model.zip); off by default.
        deadline_s: ``time.monotonic()`` by which the whole workload must be done (the suite's
            ``per_workload_s``, counted by the harness from the workload's start).
        model: A ``policy: model`` submission's checked ``model:`` spec: the child builds the
            agent from its weights (``weights.build_agent``) with ``entry`` the folder, and
            runs no submission code.

    Raises ``SandboxError`` (naming the limit, or the child's own error) when the child breaks
    a limit, dies or answers what is not an action; the child is killed first.
    """

    def __init__(
        self,
        entry: str,
        task: str,
        *,
        name: str,
        limits: SandboxLimits,
        trust_pickle: bool = False,
        deadline_s: float | None = None,
        model: Mapping[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.limits = limits
        self._deadline = math.inf if deadline_s is None else deadline_s
        self._scratch = tempfile.mkdtemp(prefix="llmsched-sandbox-")
        root = str(Path(__file__).resolve().parents[2])
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": root,
            "HOME": self._scratch,
            "TMPDIR": self._scratch,
            "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONHASHSEED": "0",
            "PYTHONUTF8": "1",
        }
        env.update({k: v for k, v in os.environ.items() if k.startswith("LLMSCHED_")})
        self._proc = subprocess.Popen(
            [sys.executable, "-s", "-m", CHILD_MODULE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=self._scratch,
            env=env,
            close_fds=True,
            start_new_session=True,
        )
        self._finalizer = weakref.finalize(self, _kill, self._proc, self._scratch)
        self._stderr: deque[bytes] = deque(maxlen=64)
        threading.Thread(target=_drain, args=(self._proc.stderr, self._stderr), daemon=True).start()
        self._buf = bytearray()
        self._in = self._proc.stdin.fileno()
        self._out = self._proc.stdout.fileno()
        os.set_blocking(self._in, False)
        init = {
            "entry": entry,
            "task": task,
            "sys_path": [os.getcwd() if p == "" else p for p in sys.path],
            "scratch": self._scratch,
            "memory_mb": limits.memory_mb,
            "cpu_s": math.ceil(limits.per_workload_s),
            "trust_pickle": bool(trust_pickle),
            "model": None if model is None else dict(model),
        }
        stop = time.monotonic() + limits.startup_s
        limit = f"its import and factory took over {limits.startup_s:g} s (startup_s)"
        try:
            self._send(_jsonable_frames(init), stop, limit)
            ready = self._receive(stop, limit)
        except BaseException:
            self.close()
            raise
        top_k = ready.get("top_k")
        if type(top_k) is not int or not 1 <= top_k <= 4096:
            self.close()
            raise SandboxError(f"policy {name}: the child reported top_k {top_k!r}")
        self.top_k = top_k
        """The agent's own ``top_k`` (an int), else the environments' default 16."""
        self.enforced: dict[str, Any] = dict(ready.get("enforced") or {})
        """What the child managed to enforce on itself (Landlock ABI, audit hooks)."""

    def predict(
        self, obs: Any, deterministic: bool = True, action_masks: Any = None
    ) -> tuple[Any, None]:
        """The child agent's action for ``obs`` (the masks go to it if its predict takes them)."""
        # A null key carries the action masks; "" the observation when it is one array.
        is_dict = isinstance(obs, Mapping)
        arrays = [(str(k), v) for k, v in obs.items()] if is_dict else [("", obs)]
        if action_masks is not None:
            arrays.append((None, action_masks))
        header = {"op": "act", "dict": is_dict}
        stop = time.monotonic() + self.limits.per_action_s
        limit = f"no action within {self.limits.per_action_s:g} s (per_action_s)"
        try:
            self._send(encode_arrays(header, arrays), stop, limit)
            reply = self._receive(stop, limit)
            return parse_action(reply.get("action"), f"policy {self.name}"), None
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Stop the child (its whole process group) and remove its scratch folder."""
        self._finalizer()

    # -- pipes --------------------------------------------------------------------------------
    def _fail(self, what: str) -> SandboxError:
        self.close()
        return SandboxError(f"policy {self.name}: {what}")

    def _wait(self, fd: int, stop: float, limit: str, write: bool = False) -> None:
        """Wait until ``fd`` is ready, or kill the child at the first deadline and say which."""
        deadline = min(stop, self._deadline)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                if self._deadline <= stop:
                    lim = self.limits.per_workload_s
                    limit = f"ran past the suite's limit of {lim:g} s per workload (per_workload_s)"
                raise self._fail(limit)
            r, w, _ = select.select([] if write else [fd], [fd] if write else [], [], left)
            if r or w:
                return

    def _send(self, frames: list[bytes | memoryview], stop: float, limit: str) -> None:
        """Write a message in as few calls as the pipe allows (one, for an observation)."""
        view = memoryview(b"".join(frames))
        while view:
            try:
                view = view[os.write(self._in, view) :]
            except BlockingIOError:
                self._wait(self._in, stop, limit, write=True)
            except BrokenPipeError:
                raise self._died() from None

    def _read(self, n: int, stop: float, limit: str) -> bytes:
        """``n`` bytes of the child's answers, buffered: an answer usually takes one read."""
        buf = self._buf
        while len(buf) < n:
            self._wait(self._out, stop, limit)
            chunk = os.read(self._out, 1 << 16)
            if not chunk:
                raise self._died()
            buf += chunk
        out = bytes(buf[:n])
        del buf[:n]
        return out

    def _receive(self, stop: float, limit: str) -> dict[str, Any]:
        size = int.from_bytes(self._read(_HEADER, stop, limit), "big")
        if size > _MAX_REPLY:
            raise self._fail(f"the child sent a {size:,}-byte answer (at most {_MAX_REPLY:,})")
        body = self._read(size, stop, limit)
        try:
            reply = json.loads(body, parse_constant=_no_constant)
        except SandboxError as exc:
            raise self._fail(str(exc)) from None
        except ValueError:
            raise self._fail("the child sent an answer that is not JSON") from None
        if not isinstance(reply, dict):
            raise self._fail("the child sent an answer that is not a JSON object")
        if "error" in reply:
            raise self._fail(str(reply["error"])[:1000])
        return reply

    def _died(self) -> SandboxError:
        """The child closed its pipe: why (exit status or signal) and its last stderr lines."""
        try:
            code = self._proc.wait(timeout=_KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            code = None
        if code is None:
            why = "closed its pipe without exiting"
        elif code < 0:
            why = f"was killed by {_signal_name(-code)}"
        else:
            why = f"exited with status {code}"
        tail = b"".join(self._stderr).decode(errors="replace").strip().splitlines()[-5:]
        text = " | ".join(tail)
        if len(text) > 600:
            text = "..." + text[-600:]
        return self._fail(f"its process {why}" + (f"; its last output: {text}" if text else ""))


_SIGNALS = {
    signal.SIGKILL: "SIGKILL (its CPU-time hard limit, per_workload_s + 5 s, or out of memory)",
    signal.SIGXCPU: "SIGXCPU (its CPU-time limit, per_workload_s)",
    signal.SIGSEGV: "SIGSEGV (a crash)",
}


def _signal_name(num: int) -> str:
    try:
        sig = signal.Signals(num)
    except ValueError:
        return f"signal {num}"
    return _SIGNALS.get(sig, sig.name)


def _drain(stream: Any, tail: deque[bytes]) -> None:
    """Read the child's stderr to its end, keeping the last chunks (bounded memory)."""
    for chunk in iter(lambda: stream.read1(4096), b""):
        tail.append(chunk)


def _kill(proc: subprocess.Popen, scratch: str) -> None:
    """SIGKILL the child's process group (it leads its own session), reap it, drop its scratch."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for stream in (proc.stdin, proc.stdout):
        try:
            stream.close()
        except OSError:
            pass
    try:
        proc.wait(timeout=_KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    shutil.rmtree(scratch, ignore_errors=True)


def close_policy(policy: Any) -> None:
    """Stop the sandbox behind a built policy, if it has one (``AgentPolicy`` / ``AgentRouter``)."""
    agent = getattr(policy, "agent", None)
    if isinstance(agent, SandboxedAgent):
        agent.close()

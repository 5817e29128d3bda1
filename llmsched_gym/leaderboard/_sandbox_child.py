"""The sandbox's child: confine this process, import a submission's entry point, answer actions.

Started by ``llmsched_gym.leaderboard.sandbox.SandboxedAgent`` (which documents the protocol and
what is and is not enforced). Order matters: the limits, Landlock and the audit hook are in
place before any of the submission's code is imported, so its import-time code runs under them.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import inspect
import json
import os
import pickle
import platform
import resource
import sys
from pathlib import Path
from typing import Any

import numpy as np

from llmsched_gym.leaderboard.sandbox import ACTION_DTYPES, _frame, _jsonable_frames

_TOP_K = 16
"""The environments' default ``top_k``: what an agent without its own int ``top_k`` acts with."""

# Landlock (include/uapi/linux/landlock.h); syscall numbers of x86_64 and aarch64.
_SYSCALLS = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38
_FS_WRITE_FILE = 1 << 1
_FS_WRITES = sum(1 << b for b in (1, 4, 5, 6, 7, 8, 9, 10, 11, 12))
"""WRITE_FILE, REMOVE_DIR, REMOVE_FILE and every MAKE_* right (ABI 1); read and execute are not
handled, so they stay allowed everywhere."""
_FS_REFER = 1 << 13  # ABI 2: renaming and linking across folders
_FS_TRUNCATE = 1 << 14  # ABI 3
_NET_TCP = (1 << 0) | (1 << 1)  # ABI 4: bind and connect
_SCOPES = (1 << 0) | (1 << 1)  # ABI 6: abstract Unix sockets and signals outside the domain
_PROCESS_EVENTS = frozenset(
    ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork")
    + ("os.forkpty", "pty.spawn")
)


class PickleRefused(pickle.UnpicklingError):
    """Unpickling asked for a class or function while ``trust_pickle`` is off.

    An ``UnpicklingError``, not a ``RuntimeError``/``TypeError``/``AttributeError``, which SB3's
    ``json_to_data`` would swallow and go on without the object.
    """


class _Ruleset(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def landlock(scratch: str) -> int | str:
    """Allow writes only under ``scratch`` (and to /dev/null); deny TCP. The ABI, or why not."""
    numbers = _SYSCALLS.get(platform.machine())
    if numbers is None:
        return f"no Landlock syscall numbers for {platform.machine()}"
    create, add_rule, restrict = numbers
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    abi = libc.syscall(create, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    if abi < 1:
        return f"Landlock unavailable ({os.strerror(ctypes.get_errno())})"
    fs = _FS_WRITES | (_FS_REFER if abi >= 2 else 0) | (_FS_TRUNCATE if abi >= 3 else 0)
    attr = _Ruleset(fs, _NET_TCP if abi >= 4 else 0, _SCOPES if abi >= 6 else 0)
    size = 8 if abi < 4 else 16 if abi < 6 else 24  # the struct as this ABI knows it
    ruleset = libc.syscall(create, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        return f"landlock_create_ruleset failed ({os.strerror(ctypes.get_errno())})"
    try:
        file_rights = _FS_WRITE_FILE | (_FS_TRUNCATE if abi >= 3 else 0)
        for path, rights in ((scratch, fs), ("/dev/null", file_rights)):
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                rule = _PathBeneath(rights, fd)
                if libc.syscall(add_rule, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0) < 0:
                    return f"landlock_add_rule {path} failed ({os.strerror(ctypes.get_errno())})"
            finally:
                os.close(fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return f"prctl(PR_SET_NO_NEW_PRIVS) failed ({os.strerror(ctypes.get_errno())})"
        if libc.syscall(restrict, ruleset, 0) < 0:
            return f"landlock_restrict_self failed ({os.strerror(ctypes.get_errno())})"
    finally:
        os.close(ruleset)
    return int(abi)


def audit_hook(scratch: str, *, trust_pickle: bool, guard: bool) -> Any:
    """The hook refusing unpickling (unless trusted) and, as ``guard``, writes, sockets, processes.

    ``guard`` stands in for Landlock when the kernel lacks it; it is no security boundary.
    """
    root = os.path.realpath(scratch) + os.sep

    def hook(event: str, args: tuple) -> None:
        if event == "pickle.find_class" and not trust_pickle:
            raise PickleRefused(
                f"unpickling {args[0]}.{args[1]} refused: pickled objects run code; pass "
                "--trust-pickle to allow"
            )
        if not guard:
            return
        if event == "open":
            path, mode, flags = args
            writes = any(c in (mode or "") for c in "wax+") or (
                isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)
            )
            if writes and isinstance(path, (str, bytes)):
                real = os.path.realpath(os.fsdecode(path))
                if real != os.devnull and not (real + os.sep).startswith(root):
                    raise PermissionError(f"sandbox: writing {real} refused (scratch only)")
        elif event in ("socket.connect", "socket.bind"):
            raise PermissionError(f"sandbox: {event} refused")
        elif event in _PROCESS_EVENTS:
            raise PermissionError(f"sandbox: {event} refused")

    return hook


def _describe(exc: BaseException, limit_mb: int) -> str:
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, MemoryError):
        text += f" (the sandbox's memory limit: memory_mb = {limit_mb})"
    return text[:800]


def load_factory(entry: str, memory_mb: int) -> Any:
    """The callable of ``/path/file.py:attr`` or ``module:attr``, imported here."""
    target, _, attr = entry.rpartition(":")
    if target.endswith(".py"):
        name = "_llmsched_submission_" + Path(target).stem
        module_spec = importlib.util.spec_from_file_location(name, target)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        where = f"importing {target}"
        try:
            module_spec.loader.exec_module(module)
        except BaseException as exc:
            raise _Failed(f"{where} raised {_describe(exc, memory_mb)}") from exc
    else:
        try:
            module = importlib.import_module(target)
        except BaseException as exc:
            raise _Failed(f"importing {target} raised {_describe(exc, memory_mb)}") from exc
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise _Failed(f"{target} has no callable {attr!r}")
    return factory


def build_agent(factory: Any, task: str, memory_mb: int) -> Any:
    """The factory's agent; a workload-taking factory or a whole scheduler is refused."""
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        params = {}
    if "workload" in params:
        raise _Failed(
            "the factory takes a workload; a submission's code runs in a sandbox and never sees "
            "the judge's workload (the lookahead oracle is the built-in 'lookahead-oracle')"
        )
    try:
        agent = factory(**({"task": task} if "task" in params else {}))
    except BaseException as exc:
        raise _Failed(f"the factory raised {_describe(exc, memory_mb)}") from exc
    if hasattr(agent, "route") or hasattr(agent, "schedule"):
        raise _Failed(
            f"the factory returned a {type(agent).__name__}: a submission's code may act only "
            "through the task's action interface (an agent); whole schedulers are registered in "
            "the project and submitted as reference rows"
        )
    if not (callable(agent) or hasattr(agent, "predict")):
        raise _Failed(
            f"the factory returned a {type(agent).__name__}, not an agent (a callable "
            "observation -> action, or an object with SB3's predict)"
        )
    return agent


def _weights_agent(folder: str, model: dict[str, Any], task: str, memory_mb: int) -> Any:
    """A ``policy: model`` agent: its weights loaded into the network the project builds."""
    from pathlib import Path

    from llmsched_gym.leaderboard.weights import build_agent as build_from_weights

    try:
        return build_from_weights(Path(folder), model, task)
    except BaseException as exc:
        why = _describe(exc, memory_mb)
        raise _Failed(f"building the agent from its weights raised {why}") from exc


def encode_action(action: Any) -> Any:
    """An action as JSON: an int as is, anything else as dtype, shape and flat values."""
    if type(action) is int:
        return action
    try:
        a = np.asarray(action)
    except Exception as exc:
        raise _Failed(f"the action is not numbers: {type(exc).__name__}: {exc}") from None
    if a.dtype.name not in ACTION_DTYPES:
        raise _Failed(f"the action has dtype {a.dtype}; actions are numbers")
    return {"dtype": a.dtype.name, "shape": list(a.shape), "values": a.reshape(-1).tolist()}


class _Failed(Exception):
    """What the child tells the harness before exiting."""


class _Pipe:
    """Blocking frames on the two descriptors the protocol owns."""

    def __init__(self, fd_in: int, fd_out: int) -> None:
        self.fd_in, self.fd_out = fd_in, fd_out
        self.buf = bytearray()

    def read(self, n: int) -> bytes:
        buf = self.buf
        while len(buf) < n:
            chunk = os.read(self.fd_in, 1 << 16)
            if not chunk:
                raise SystemExit(0)  # the harness closed the pipe: nothing more to answer
            buf += chunk
        out = bytes(buf[:n])
        del buf[:n]
        return out

    def frame(self) -> bytes:
        return self.read(int.from_bytes(self.read(4), "big"))

    def send(self, message: dict[str, Any]) -> None:
        try:
            frames = _jsonable_frames(message)
        except ValueError:  # NaN or infinity in an action: say so instead
            frames = _frame(json.dumps({"error": "the action is not finite"}).encode())
        view = memoryview(b"".join(frames))
        while view:
            view = view[os.write(self.fd_out, view) :]


def _observation(pipe: _Pipe, header: dict[str, Any]) -> tuple[Any, Any]:
    obs: dict[str, np.ndarray] = {}
    mask = None
    for spec in header["arrays"]:
        buf = bytearray(pipe.frame())  # writable, as the environment's own arrays are
        a = np.frombuffer(buf, dtype=np.dtype(spec["dtype"])).reshape(spec["shape"])
        if spec["key"] is None:
            mask = a
        else:
            obs[spec["key"]] = a
    return (obs if header["dict"] else obs[""]), mask


def main() -> None:
    """Confine, import, build, then answer until the harness closes the pipe."""
    # The protocol keeps the original stdin/stdout; the submission's prints go to stderr.
    pipe = _Pipe(os.dup(0), os.dup(1))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(2, 1)
    init = json.loads(pipe.frame())
    scratch, memory_mb, trust = init["scratch"], init["memory_mb"], init["trust_pickle"]
    mem = memory_mb << 20
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    cpu = init["cpu_s"]
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
    abi = landlock(scratch)
    guard = not isinstance(abi, int)
    sys.addaudithook(audit_hook(scratch, trust_pickle=trust, guard=guard))
    enforced = {
        "landlock_abi": None if guard else abi,
        "landlock_missing": abi if guard else None,
        "pickle_refused": not trust,
        "audit_guard": guard,
        "memory_mb": memory_mb,
        "cpu_s": cpu,
    }
    sys.path[:0] = [p for p in init["sys_path"] if p not in sys.path]
    from llmsched_gym.envs.adapters import _call_agent

    try:
        if init.get("model") is not None:  # policy: model: weights into the project's network
            agent = _weights_agent(init["entry"], init["model"], init["task"], memory_mb)
        else:
            agent = build_agent(load_factory(init["entry"], memory_mb), init["task"], memory_mb)
        k = getattr(agent, "top_k", _TOP_K)
        pipe.send({"top_k": k if type(k) is int else _TOP_K, "enforced": enforced})
        while True:
            header = json.loads(pipe.frame())
            if header.get("op") != "act":
                return
            obs, mask = _observation(pipe, header)
            try:
                action = _call_agent(agent, obs, mask)
            except BaseException as exc:
                raise _Failed(f"the agent raised {_describe(exc, memory_mb)}") from exc
            pipe.send({"action": encode_action(action)})
    except _Failed as exc:
        pipe.send({"error": str(exc)})
        sys.exit(1)


if __name__ == "__main__":
    main()

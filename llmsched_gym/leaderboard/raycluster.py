"""Joining a running Ray cluster (``--address``) when it requires Ray's authentication token.

Ray (2.52 and later) can require a shared token on every call (``RAY_AUTH_MODE=token``); since
2.59 ``ray start --head`` turns it on whenever a token exists on the machine (``~/.ray/auth_token``,
which any local ``ray.init()`` writes). A driver that joins by an explicit address does not turn
it on by itself: it retries ``InvalidAuthToken`` for 20 s, then fails with "Failed to connect".

So before ``ray.init`` the harness asks the cluster once (one gRPC call, ``PROBE_TIMEOUT_S``)
whether it answers without a token (``join_plan``):

* it does: join as Ray would;
* it requires one and this process uses token mode already (``RAY_AUTH_MODE=token``): join, once
  the cluster accepted the token Ray will send;
* it requires one, the mode is unset, the cluster runs on this machine and accepts the token
  found here: join in token mode (what Ray itself does for ``address="auto"``);
* otherwise fail at once with what to set. This machine's token goes to a cluster on another
  machine only where the user set ``RAY_AUTH_MODE=token`` (Ray's own rule for an explicit address),
  and authentication is never turned off.

Addresses other than ``HOST:PORT`` (``auto``, ``ray://...``) and clusters behind TLS
(``RAY_USE_TLS``) are left to Ray.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmsched_gym.errors import ConfigError

__all__ = [
    "PROBE_TIMEOUT_S",
    "JoinPlan",
    "Probe",
    "find_token",
    "is_this_machine",
    "join_plan",
    "probe_gcs",
    "ray_joined",
]

PROBE_TIMEOUT_S = 1.5
"""How long the one call that asks a cluster about authentication may take."""

MODE_VAR = "RAY_AUTH_MODE"
TOKEN_HINT = (
    "the head's token (`ray get-auth-token` on the head prints it) in ~/.ray/auth_token, "
    "RAY_AUTH_TOKEN or a file named by RAY_AUTH_TOKEN_PATH"
)
_DOCS = "https://docs.ray.io/en/latest/ray-security/token-auth.html"


@dataclass(frozen=True)
class Probe:
    """What a cluster's GCS answered: ``ok``, ``unauthenticated``, ``unreachable`` or ``other``."""

    outcome: str
    detail: str = ""


@dataclass(frozen=True)
class JoinPlan:
    """How to join: the environment to set for the connection (``{}``: none) and why."""

    env: Mapping[str, str]
    note: str = ""


def split_address(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of a plain ``HOST:PORT`` (``[v6]:PORT`` too); None for anything else."""
    if "://" in address or ":" not in address:
        return None
    host, _, port = address.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not host or not port.isdigit():
        return None
    return host, int(port)


def probe_gcs(address: str, token: str | None, timeout_s: float = PROBE_TIMEOUT_S) -> Probe:
    """Ask the GCS at ``address`` for its cluster id, with ``token`` or without one.

    The call is Ray's own (``NodeInfoGcsService/GetClusterId``), sent with an empty request and
    read as raw bytes, so it needs gRPC only, not Ray's generated stubs.
    """
    try:
        import grpc
    except ImportError:  # Ray always installs grpcio; without it, leave the check to Ray
        return Probe("other", "grpcio is not installed")
    metadata = [("authorization", f"Bearer {token}")] if token else None
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary("/ray.rpc.NodeInfoGcsService/GetClusterId")
        try:
            call(b"", timeout=timeout_s, metadata=metadata)
        except grpc.RpcError as exc:
            code, detail = exc.code(), exc.details() or ""
            if code == grpc.StatusCode.UNAUTHENTICATED:
                return Probe("unauthenticated", detail)
            if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                return Probe("unreachable", f"{code.name}: {detail}")
            return Probe("other", f"{code.name}: {detail}")
    return Probe("ok")


def find_token(environ: Mapping[str, str], home: Path) -> tuple[str | None, str]:
    """The token Ray would use here, and where it is, in Ray's order of precedence.

    ``RAY_AUTH_TOKEN`` (if not empty), then the file named by ``RAY_AUTH_TOKEN_PATH``, then
    ``~/.ray/auth_token``; surrounding whitespace stripped, as Ray strips it.
    """
    if environ.get("RAY_AUTH_TOKEN", "").strip():
        return environ["RAY_AUTH_TOKEN"].strip(), "RAY_AUTH_TOKEN"
    path_var = environ.get("RAY_AUTH_TOKEN_PATH")
    if path_var:
        try:
            token = Path(path_var).expanduser().read_text().strip()
        except OSError as exc:
            raise ConfigError(
                f"RAY_AUTH_TOKEN_PATH={path_var} cannot be read ({exc.strerror}): point it at the "
                "file that holds the cluster's token, or unset it"
            ) from None
        if not token:
            raise ConfigError(f"RAY_AUTH_TOKEN_PATH={path_var} is empty: put the token in it")
        return token, f"RAY_AUTH_TOKEN_PATH={path_var}"
    default = home / ".ray" / "auth_token"
    try:
        token = default.read_text().strip()
    except OSError:
        return None, "~/.ray/auth_token"
    return (token or None), "~/.ray/auth_token"


def is_this_machine(host: str) -> bool:
    """Whether ``host`` names this machine: each of its addresses can be bound here."""
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError:
        return False
    if not infos:
        return False
    for family, _, _, _, sockaddr in infos:
        try:
            with socket.socket(family, socket.SOCK_STREAM) as s:
                s.bind((sockaddr[0], 0))
        except OSError:
            return False
    return True


def join_plan(
    address: str,
    environ: Mapping[str, str],
    *,
    probe: Callable[[str, str | None], Probe] = probe_gcs,
    token_of: Callable[[], tuple[str | None, str]] | None = None,
    local: Callable[[str], bool] = is_this_machine,
) -> JoinPlan:
    """How to join ``address`` (see the module's docstring), or a ``ConfigError`` saying why not.

    ``probe``, ``token_of`` and ``local`` are the network, file and host look-ups, apart so that
    the decision can be tested without a cluster.
    """
    parts = split_address(address)
    if parts is None or environ.get("RAY_USE_TLS", "0").lower() not in ("", "0", "false"):
        return JoinPlan({})
    first = probe(address, None)
    if first.outcome == "unreachable":
        raise ConfigError(
            f"no Ray cluster answers at {address} ({first.detail}): start one there with "
            f"`ray start --head --port {parts[1]}`, or pass the address that `ray start --head` "
            "printed"
        )
    if first.outcome != "unauthenticated":
        return JoinPlan({})
    mode = environ.get(MODE_VAR, "").strip().lower()
    where = f"the Ray cluster at {address} requires token authentication ({_DOCS})"
    if mode and mode != "token":
        raise ConfigError(
            f"{where}, but {MODE_VAR}={environ[MODE_VAR]} here: set {MODE_VAR}=token, with "
            f"{TOKEN_HINT}"
        )
    token, source = (token_of or (lambda: find_token(environ, Path.home())))()
    if token is None:
        raise ConfigError(
            f"{where} and this machine has no token: put {TOKEN_HINT}"
            + ("" if mode == "token" else f", and set {MODE_VAR}=token unless it runs here")
        )
    if mode != "token" and not local(parts[0]):
        raise ConfigError(
            f"{where}: set {MODE_VAR}=token to send it the token in {source} (it must be "
            f"{TOKEN_HINT}); only a cluster on this machine is sent this machine's token unasked"
        )
    second = probe(address, token)
    if second.outcome == "unauthenticated":
        raise ConfigError(f"{where} and refuses the token in {source}: put {TOKEN_HINT}")
    if mode == "token":
        return JoinPlan({})
    return JoinPlan(
        {MODE_VAR: "token"},
        note=f"the Ray cluster at {address} requires token authentication: joining with the "
        f"token in {source}",
    )


def _refresh_ray_config(ray: Any) -> None:
    """Make an imported Ray re-read ``RAY_AUTH_MODE`` (it reads its settings once, at import)."""
    config = getattr(getattr(ray, "_raylet", None), "Config", None)
    if config is not None and hasattr(config, "initialize"):
        config.initialize("")


@contextlib.contextmanager
def ray_joined(ray: Any, address: str) -> Iterator[str]:
    """Within: ``ray`` may ``init(address=...)`` as ``join_plan`` decided; yields its note.

    The environment it sets is this process's for the connection only: restored on exit.
    """
    plan = join_plan(address, os.environ)
    saved = {k: os.environ.get(k) for k in plan.env}
    os.environ.update(plan.env)
    if plan.env:
        _refresh_ray_config(ray)
    try:
        yield plan.note
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if plan.env:
            _refresh_ray_config(ray)

"""Joining a Ray cluster by address under token authentication, and the start-up note."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from concurrent import futures
from pathlib import Path

import pytest

from llmsched_gym.errors import ConfigError
from llmsched_gym.leaderboard import raycluster as RC
from llmsched_gym.leaderboard.run import startup_note

ADDR = "10.1.2.3:6379"
LOCAL = "127.0.0.1:6379"


class FakeCluster:
    """A GCS answering as told; records which tokens it was sent."""

    def __init__(self, first: str, token: str | None = "t0k", accepts: str = "t0k") -> None:
        self.first, self.token, self.accepts, self.sent = first, token, accepts, []

    def probe(self, address: str, token: str | None) -> RC.Probe:
        self.sent.append(token)
        if token is None:
            return RC.Probe(self.first, "detail")
        return RC.Probe("ok" if token == self.accepts else "unauthenticated")

    def plan(self, address: str, env: dict, local: bool) -> RC.JoinPlan:
        return RC.join_plan(
            address,
            env,
            probe=self.probe,
            token_of=lambda: (self.token, "~/.ray/auth_token"),
            local=lambda host: local,
        )


def test_a_cluster_without_authentication_is_joined_as_is():
    cluster = FakeCluster("ok")
    assert cluster.plan(ADDR, {}, local=False).env == {}
    assert cluster.sent == [None]


def test_a_token_cluster_on_this_machine_is_joined_in_token_mode():
    cluster = FakeCluster("unauthenticated")
    plan = cluster.plan(LOCAL, {}, local=True)
    assert plan.env == {"RAY_AUTH_MODE": "token"}
    assert "requires token authentication" in plan.note and "~/.ray/auth_token" in plan.note
    assert cluster.sent == [None, "t0k"]


def test_a_token_cluster_elsewhere_is_never_sent_the_token_unasked():
    cluster = FakeCluster("unauthenticated")
    message = r"requires token authentication.*set RAY_AUTH_MODE=token"
    with pytest.raises(ConfigError, match=message):
        cluster.plan(ADDR, {}, local=False)
    assert cluster.sent == [None]


def test_token_mode_set_by_the_user_joins_once_the_token_is_accepted():
    cluster = FakeCluster("unauthenticated")
    assert cluster.plan(ADDR, {"RAY_AUTH_MODE": "token"}, local=False).env == {}
    assert cluster.sent == [None, "t0k"]


@pytest.mark.parametrize(
    ("cluster", "env", "message"),
    [
        (FakeCluster("unreachable"), {}, r"no Ray cluster answers at .*ray start --head --port"),
        (FakeCluster("unauthenticated"), {"RAY_AUTH_MODE": "disabled"}, r"RAY_AUTH_MODE=disabled"),
        (FakeCluster("unauthenticated", token=None), {}, r"has no token: put the head's token"),
        (FakeCluster("unauthenticated", accepts="other"), {}, r"refuses the token in ~/\.ray"),
    ],
    ids=["unreachable", "auth-disabled-here", "no-token", "wrong-token"],
)
def test_what_cannot_join_fails_at_once_saying_what_to_set(cluster, env, message):
    with pytest.raises(ConfigError, match=message):
        cluster.plan(LOCAL, env, local=True)


@pytest.mark.parametrize("address", ["auto", "ray://head:10001", "head"])
def test_addresses_other_than_host_port_are_left_to_ray(address):
    cluster = FakeCluster("unauthenticated")
    assert cluster.plan(address, {}, local=True).env == {}
    assert cluster.sent == []


def test_tls_clusters_are_left_to_ray():
    cluster = FakeCluster("unreachable")
    assert cluster.plan(ADDR, {"RAY_USE_TLS": "1"}, local=False).env == {}
    assert cluster.sent == []


def test_split_address():
    assert RC.split_address("head:6379") == ("head", 6379)
    assert RC.split_address("[::1]:6379") == ("::1", 6379)
    assert RC.split_address("head:port") is None


def test_the_token_is_found_where_ray_looks_first(tmp_path):
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text("from-home\n")
    (tmp_path / "tok").write_text(" from-path ")
    assert RC.find_token({}, home) == ("from-home", "~/.ray/auth_token")
    path_env = {"RAY_AUTH_TOKEN_PATH": str(tmp_path / "tok")}
    assert RC.find_token(path_env, home)[0] == "from-path"
    assert RC.find_token({**path_env, "RAY_AUTH_TOKEN": "from-env"}, home)[0] == "from-env"
    assert RC.find_token({}, tmp_path / "nobody") == (None, "~/.ray/auth_token")
    with pytest.raises(ConfigError, match="RAY_AUTH_TOKEN_PATH=.*cannot be read"):
        RC.find_token({"RAY_AUTH_TOKEN_PATH": str(tmp_path / "missing")}, home)


def test_this_machine():
    assert RC.is_this_machine("127.0.0.1")
    assert not RC.is_this_machine("203.0.113.7")  # TEST-NET-3: nobody's address


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_probe_reads_a_gcs_that_wants_a_token():
    grpc = pytest.importorskip("grpc")

    def cluster_id(request: bytes, context) -> bytes:
        if ("authorization", "Bearer right") not in context.invocation_metadata():
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "InvalidAuthToken")
        return b""

    handler = grpc.method_handlers_generic_handler(
        "ray.rpc.NodeInfoGcsService",
        {"GetClusterId": grpc.unary_unary_rpc_method_handler(cluster_id)},
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        address = f"127.0.0.1:{port}"
        assert RC.probe_gcs(address, None).outcome == "unauthenticated"
        assert RC.probe_gcs(address, "wrong").outcome == "unauthenticated"
        assert RC.probe_gcs(address, "right").outcome == "ok"
    finally:
        server.stop(None)


def test_probe_of_a_closed_port_is_quick():
    pytest.importorskip("grpc")
    t0 = time.perf_counter()
    assert RC.probe_gcs(f"127.0.0.1:{_free_port()}", None).outcome == "unreachable"
    assert time.perf_counter() - t0 < 2


def test_the_token_mode_is_set_for_the_connection_only(monkeypatch):
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    plan = RC.JoinPlan({"RAY_AUTH_MODE": "token"}, note="joining")
    monkeypatch.setattr(RC, "join_plan", lambda address, environ: plan)
    refreshed = []

    class Config:
        @staticmethod
        def initialize(text):
            refreshed.append(os.environ.get("RAY_AUTH_MODE"))

    class Ray:
        class _raylet:  # noqa: N801 - Ray's module name
            pass

    Ray._raylet.Config = Config
    with RC.ray_joined(Ray, LOCAL) as note:
        assert note == "joining" and os.environ["RAY_AUTH_MODE"] == "token"
    assert "RAY_AUTH_MODE" not in os.environ
    assert refreshed == ["token", None]


# -- the start-up note -------------------------------------------------------------------------
def test_a_small_job_is_told_serial_would_have_been_faster():
    rows = [{"wall_s": 0.25}] * 8
    note = startup_note({"start_s": 7.0, "stop_s": 1.5}, rows, 2, elapsed_s=11.0)
    assert note is not None
    assert "Ray took 8.5 s to start and stop, of this run's 11.0 s" in note
    assert "the 8 runs themselves 2.0 s in all" in note
    assert "2 workers pay off from about 68 runs like these" in note  # 8.5 / (0.25 / 2)


def test_a_job_that_ray_speeds_up_gets_no_note():
    rows = [{"wall_s": 10.0}] * 8
    assert startup_note({"start_s": 7.0, "stop_s": 1.5}, rows, 2, elapsed_s=49.0) is None


# -- a real cluster ----------------------------------------------------------------------------
@pytest.mark.slow
def test_address_joins_a_token_cluster_started_with_ray_start(tmp_path, monkeypatch):
    """`ray start --head` with a token on this machine, then `evaluate --address`: as serial."""
    pytest.importorskip("ray", reason="Ray is an extra: pip install -e '.[ray]'")
    from llmsched_gym.leaderboard.run import VALIDATED_COLUMNS
    from llmsched_gym.leaderboard.submission import compare_results, read_results

    ray_cli = Path(sys.executable).with_name("ray")
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text(secrets.token_hex(32))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(HOME=str(home), PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    port = _free_port()
    address = f"127.0.0.1:{port}"
    temp_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # Ray's socket paths must stay short
    head = subprocess.Popen(
        [str(ray_cli), "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
         "--node-ip-address=127.0.0.1", f"--temp-dir={temp_dir}", "--include-dashboard=false",
         "--disable-usage-stats"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while RC.probe_gcs(address, None).outcome == "unreachable":
            assert head.poll() is None and time.monotonic() < deadline, "ray start failed"
            time.sleep(0.5)
        # the head turned token authentication on because a token exists on this machine
        assert RC.probe_gcs(address, None).outcome == "unauthenticated"

        # without the token here: fails at once, saying what to put where
        t0 = time.perf_counter()
        with pytest.raises(ConfigError, match="has no token"):
            RC.join_plan(address, {}, token_of=lambda: (None, "~/.ray/auth_token"))
        assert time.perf_counter() - t0 < 2

        def evaluate(out: Path, *extra: str) -> tuple[list[dict], str]:
            cmd = [sys.executable, "-m", "llmsched_gym", "leaderboard", "evaluate", "vllm-v1",
                   "--task", "Priority", "--suite", "quick", "--quiet", "--out", str(out), *extra]
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stderr[-2000:]
            return read_results(out / "results.csv"), done.stderr

        serial, _ = evaluate(tmp_path / "serial")
        joined, stderr = evaluate(tmp_path / "ray", "--address", address)
        assert "joining with the token in ~/.ray/auth_token" in stderr
        assert len(joined) == len(serial) > 0
        assert compare_results(serial, joined, VALIDATED_COLUMNS) == []
    finally:
        head.terminate()
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            head.kill()
        shutil.rmtree(temp_dir, ignore_errors=True)

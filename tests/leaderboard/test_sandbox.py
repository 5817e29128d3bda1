"""The sandbox: a submission's code cannot reach the judge, break its limits, or write outside.

Each adversarial submission is the committed cem-linear folder (a pure-numpy agent) with a
``policy.py`` that misbehaves; each must end in a ``failed`` row naming the reason (or a
``ConfigError`` before anything runs), while the honest folder reproduces its committed row.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import shutil
import socket
import textwrap
import uuid
from pathlib import Path

import pytest

import llmsched_gym.leaderboard.submission as submission
from llmsched_gym.errors import ConfigError
from llmsched_gym.leaderboard.policy import resolve_policy
from llmsched_gym.leaderboard.run import VALIDATED_COLUMNS, run_workload
from llmsched_gym.leaderboard.submission import compare_results, read_results, write_results
from llmsched_gym.leaderboard.suite import load_suite
from llmsched_gym.leaderboard.validate import validate_submission

ROOT = Path(__file__).resolve().parents[2]
CEM = ROOT / "leaderboards" / "priority" / "cem-linear"
HONEST_MAKE = """
from pathlib import Path
from llmsched_gym.leaderboard.agents import LinearRowScorer

def make(task="Priority"):
    return LinearRowScorer.load(Path(__file__).with_name("weights.json"))
"""
REAL_SAME, REAL_COMPARE = submission._same, submission.compare_results


@pytest.fixture(scope="module")
def suite():
    """The shipped suite with limits small enough for tests."""
    return dataclasses.replace(load_suite(), startup_s=30.0, per_action_s=2.0)


@pytest.fixture(scope="module")
def workload(suite):
    """A quick Priority workload of about 6,000 engine steps (under a second of simulation)."""
    return suite.workloads("test", tasks=["Priority"], quick=True)[1]


def _folder(tmp_path: Path, code: str, make: str = HONEST_MAKE) -> Path:
    """cem-linear's folder with ``code`` (then ``make``) as its policy.py."""
    folder = tmp_path / "sub"
    shutil.copytree(CEM, folder)
    (folder / "policy.py").write_text(textwrap.dedent(code) + make)
    return folder


def _failed(row: dict, *needles: str) -> str:
    assert row["status"] == "failed", row
    for needle in needles:
        assert needle in row["error"], row["error"]
    return row["error"]


def test_honest_submission_reproduces_its_committed_row(suite, workload):
    row = run_workload(suite, str(CEM), workload)
    committed = {r["workload"]: r for r in read_results(CEM / "results.csv")}[workload.id]
    assert row["status"] == "ok", row["error"]
    assert compare_results([committed], [row], VALIDATED_COLUMNS) == []


TAMPER = """
import llmsched_gym.leaderboard.submission as s
s._same = lambda a, b: True
s.compare_results = lambda *args, **kwargs: []
"""


def test_rebinding_harness_internals_reaches_only_the_child(tmp_path, suite, workload):
    folder = _folder(tmp_path, TAMPER)
    row = run_workload(suite, str(folder), workload)
    assert row["status"] == "ok", row["error"]
    assert submission._same is REAL_SAME and submission.compare_results is REAL_COMPARE
    rows = read_results(folder / "results.csv")
    mine = next(r for r in rows if r["workload"] == workload.id)
    mine["value"] *= 0.9
    assert compare_results([mine], [row], VALIDATED_COLUMNS)  # the parent's check still bites


@pytest.mark.slow
def test_rebinding_harness_internals_does_not_validate_tampered_results(tmp_path, workload):
    folder = _folder(tmp_path, TAMPER)
    rows = read_results(folder / "results.csv")
    next(r for r in rows if r["workload"] == workload.id)["value"] *= 0.9
    write_results(rows, folder / "results.csv")
    problems = validate_submission(folder, quick=True)
    assert submission._same is REAL_SAME and submission.compare_results is REAL_COMPARE
    assert any(f"{workload.id}: value committed" in p for p in problems), problems


class _System:
    """Unpickles to ``os.system(command)``."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


def test_unpickling_is_refused_unless_trusted(tmp_path, suite, workload):
    marker = tmp_path / f"pwned-{uuid.uuid4().hex}"
    folder = _folder(
        tmp_path,
        """
        import pickle
        from pathlib import Path
        pickle.loads(Path(__file__).with_name("payload.pkl").read_bytes())
        print("unpickled")  # on stdout, which the protocol does not share
        """,
    )
    (folder / "payload.pkl").write_bytes(pickle.dumps(_System(f"touch {marker}")))
    row = run_workload(suite, str(folder), workload)
    _failed(row, "unpickling posix.system refused", "--trust-pickle")
    assert not marker.exists()
    (folder / "payload.pkl").write_bytes(pickle.dumps(uuid.UUID(int=7)))  # harmless: a class
    _failed(run_workload(suite, str(folder), workload), "unpickling uuid.UUID refused")
    row = run_workload(suite, str(folder), workload, trust_pickle=True)
    assert row["status"] == "ok", row["error"]


@pytest.mark.slow
def test_weights_only_torch_load_works_under_the_refusal(tmp_path, suite, workload):
    torch = pytest.importorskip("torch")
    folder = _folder(
        tmp_path,
        """
        import torch
        from pathlib import Path
        w = torch.load(Path(__file__).with_name("w.pt"), weights_only=True)
        assert w["x"].tolist() == [1.0, 2.0]
        """,
    )
    torch.save({"x": torch.tensor([1.0, 2.0])}, folder / "w.pt")
    row = run_workload(suite, str(folder), workload)
    assert row["status"] == "ok", row["error"]


@pytest.mark.parametrize("how", ["parent", "absolute", "policy-link", "other-link"])
def test_paths_out_of_the_folder_are_refused_before_running(tmp_path, suite, how):
    marker = tmp_path / "ran"
    outside = tmp_path / "elsewhere.py"
    outside.write_text(f"open({str(marker)!r}, 'w').close()\n" + HONEST_MAKE)
    folder = _folder(tmp_path, "")
    policy = {"parent": "../elsewhere.py:make", "absolute": f"{outside}:make"}.get(
        how, "policy.py:make"
    )
    if how == "policy-link":
        (folder / "policy.py").unlink()
        (folder / "policy.py").symlink_to(outside)
    if how == "other-link":
        (folder / "data").symlink_to(tmp_path)
    text = (folder / "submission.yaml").read_text().replace("policy.py:make", policy)
    (folder / "submission.yaml").write_text(text)
    match = {
        "parent": "field 'policy': '../elsewhere.py' must be a file inside",
        "absolute": "must be a file inside the submission folder",
        "policy-link": "policy.py is a symbolic link to .*outside the submission folder",
        "other-link": "data is a symbolic link to .*outside the submission folder",
    }[how]
    with pytest.raises(ConfigError, match=match):
        resolve_policy(str(folder), suite.task("Priority"))
    assert not marker.exists()


def test_a_factory_that_never_returns_fails_within_startup_s(tmp_path, suite, workload):
    folder = _folder(tmp_path, "", make="def make():\n    while True:\n        pass\n")
    row = run_workload(dataclasses.replace(suite, startup_s=1.0), str(folder), workload)
    _failed(row, "import and factory took over 1 s (startup_s)")
    assert row["wall_s"] < 10


IGNORE_SIGNALS = """
import signal, time
for sig in (signal.SIGALRM, signal.SIGXCPU, signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, signal.SIG_IGN)

def make():
    def agent(obs):
        while True:
            try:
                time.sleep(100)
            except BaseException:
                pass
    return agent
"""


def test_an_agent_that_ignores_signals_fails_at_per_action_s(tmp_path, suite, workload):
    folder = _folder(tmp_path, "", make=IGNORE_SIGNALS)
    row = run_workload(dataclasses.replace(suite, per_action_s=1.0), str(folder), workload)
    _failed(row, "no action within 1 s (per_action_s)")
    assert row["wall_s"] < 10


def test_a_busy_agent_fails_at_per_workload_s(tmp_path, suite, workload):
    code = "def make():\n    def agent(obs):\n        while True:\n            pass\n\n    return agent\n"
    folder = _folder(tmp_path, "", make=code)
    strict = dataclasses.replace(suite, per_action_s=100.0, workload_limit_s=1.5)
    _failed(run_workload(strict, str(folder), workload), "1.5 s per workload (per_workload_s)")


@pytest.mark.parametrize("where", ["import", "predict"])
def test_allocating_6_gb_fails_naming_memory(tmp_path, suite, workload, where):
    if where == "import":
        folder = _folder(tmp_path, "hoard = bytearray(6 << 30)\n")
    else:
        make = "def make():\n    return lambda obs: bytearray(6 << 30)\n"
        folder = _folder(tmp_path, "", make=make)
    row = run_workload(suite, str(folder), workload)
    _failed(row, "MemoryError", "memory_mb = 4096")


def test_writes_outside_scratch_are_blocked(tmp_path, suite, workload):
    targets = [CEM.parent / f"written-{uuid.uuid4().hex}", Path(f"/tmp/x-{uuid.uuid4().hex}")]
    code = f"""
    import os, tempfile
    with open(os.path.join(tempfile.gettempdir(), "mine.txt"), "w") as f:  # scratch: allowed
        f.write("ok")
    blocked = []
    for path in {[str(t) for t in targets]!r}:
        try:
            open(path, "w").close()
        except PermissionError:
            blocked.append(path)
    assert len(blocked) == 2, blocked
    """
    folder = _folder(tmp_path, code)
    row = run_workload(suite, str(folder), workload)
    assert row["status"] == "ok", row["error"]
    (folder / "policy.py").write_text(f"open({str(targets[1])!r}, 'w')\n" + HONEST_MAKE)
    _failed(run_workload(suite, str(folder), workload), "PermissionError")
    assert not any(t.exists() for t in targets)


def test_tcp_connect_is_refused(tmp_path, suite, workload):
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
        folder = _folder(tmp_path, code)
        _failed(run_workload(suite, str(folder), workload), "PermissionError")


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (
            "from llmsched_gym.policies.registry import make_policy\n"
            "def make():\n    return make_policy('vllm-v1')\n",
            "may act only through the task's action interface",
        ),
        ("def make():\n    return lambda obs: float('nan')\n", "not finite"),
        ("def make():\n    return lambda obs: 'first'\n", "dtype <U5; actions are numbers"),
        ("import os\ndef make():\n    os._exit(3)\n", "exited with status 3"),
    ],
)
def test_what_is_not_an_agent_or_an_action_fails(tmp_path, suite, workload, make, needle):
    folder = _folder(tmp_path, "", make=make)
    _failed(run_workload(suite, str(folder), workload), needle)

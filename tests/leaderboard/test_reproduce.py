"""``llmsched-gym leaderboard reproduce``: declared experiments -> the paper-vs-ours tables.

The committed headline tables (``leaderboards/<paper>/results/headlines.md``) must regenerate
exactly from the committed results CSVs; a malformed experiments.yaml names file, entry and
field; a quick run writes only under ``--out``; serial and Ray runs give the same files.
"""

from __future__ import annotations

import filecmp
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from llmsched_gym.cli.main import main as cli_main
from llmsched_gym.leaderboard import experiments as E
from llmsched_gym.leaderboard import reproduce as R

ROOT = R.repo_root()
PAPERS = ["relserve", "proserve", "hexgen", "infermax"]


def _git_status() -> str:
    """Tracked changes in the repository (``git status --porcelain -uno``)."""
    return subprocess.run(
        ["git", "status", "--porcelain", "-uno"], cwd=ROOT, capture_output=True, text=True
    ).stdout


def test_papers_found():
    assert set(PAPERS) <= set(R.papers(ROOT))


@pytest.mark.parametrize("paper", PAPERS)
def test_committed_headlines_regenerate_exactly(paper, tmp_path):
    """--from-results on the committed CSVs gives the committed headline table byte for byte."""
    rc = cli_main(["leaderboard", "reproduce", paper, "--from-results", "--out", str(tmp_path)])
    assert rc == 0
    committed = ROOT / "leaderboards" / paper / "results"
    for name in ("headlines.md", "headlines.csv"):
        assert (tmp_path / name).read_text() == (committed / name).read_text(), name


def test_readme_tables_are_the_generated_ones():
    """Each paper README carries its generated headline table verbatim."""
    for paper in PAPERS:
        md = (ROOT / "leaderboards" / paper / "results" / "headlines.md").read_text()
        readme = (ROOT / "leaderboards" / paper / "README.md").read_text()
        assert md.strip() in readme, f"leaderboards/{paper}/README.md lacks headlines.md"


def _write(tmp_path: Path, mutate) -> Path:
    """A copy of relserve's experiments.yaml with ``mutate(doc)`` applied."""
    doc = yaml.safe_load((ROOT / "leaderboards" / "relserve" / "experiments.yaml").read_text())
    mutate(doc)
    path = tmp_path / "experiments.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_missing_field_names_file_entry_and_field(tmp_path):
    path = _write(tmp_path, lambda d: d["experiments"][2].pop("paper"))
    with pytest.raises(E.ExperimentError) as e:
        E.load(path)
    msg = str(e.value)
    assert str(path) in msg and "'vs-vllm'" in msg and "'paper'" in msg and "missing" in msg


def test_unknown_rule_names_file_entry_and_field(tmp_path):
    path = _write(tmp_path, lambda d: d["experiments"][0]["rule"].update(kind="roughly"))
    with pytest.raises(E.ExperimentError) as e:
        E.load(path)
    msg = str(e.value)
    assert str(path) in msg and "'fig4-hit-ratio'" in msg and "'rule.kind'" in msg
    assert "roughly" in msg and "band" in msg  # the bad value and the choices


def test_unknown_csv_column_names_file_entry_and_field(tmp_path):
    def mutate(d):
        d["experiments"][0]["ours"]["column"] = "hit_ratio_typo"
        d["results"] = str(ROOT / "leaderboards" / "relserve" / "results")

    paper = E.load(_write(tmp_path, mutate))
    with pytest.raises(E.ExperimentError) as e:
        E.evaluate(paper)
    msg = str(e.value)
    assert "experiments.yaml" in msg and "'fig4-hit-ratio'" in msg and "'ours.column'" in msg
    assert "hit_ratio_typo" in msg and "hit_ratio_rq" in msg  # the typo and the real columns


def test_bad_expression_is_rejected_at_load(tmp_path):
    path = _write(tmp_path, lambda d: d["experiments"][0]["ours"].update(column="__import__('os')"))
    with pytest.raises(E.ExperimentError, match="'ours.column'"):
        E.load(path)


def test_workers_without_ray_says_how_to_install(tmp_path, monkeypatch, capsys):
    import builtins

    real = builtins.__import__

    def no_ray(name, *a, **k):
        if name == "ray":
            raise ImportError("no ray")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(E.ExperimentError, match=r"pip install -e '\.\[ray\]'"):
        R.run_units([["true"]], ROOT, tmp_path, workers=2)


def test_update_refuses_quick(capsys):
    rc = cli_main(["leaderboard", "reproduce", "infermax", "--quick", "--update"])
    assert rc == 2
    assert "--quick" in capsys.readouterr().err


def test_relserve_quick_end_to_end_leaves_the_repository_clean(tmp_path):
    """~6 s: the quick reproduction into --out, headlines beside it, nothing tracked changes."""
    before = _git_status()
    rc = cli_main(["leaderboard", "reproduce", "relserve", "--quick", "--out", str(tmp_path)])
    assert rc == 0
    assert (tmp_path / "opt-amazon-quick.csv").exists()
    assert (tmp_path / "findings-quick.md").exists()
    rows = E.evaluate(R.load_paper("relserve"), tmp_path, quick=True)
    by_id = {r["id"]: r for r in rows}
    assert by_id["vs-vllm"]["ours"] != "n/a"  # the quick CSV feeds the Fig. 9 headline
    assert by_id["vs-vllm-matched"]["verdict"] == "not run"  # no authors' run in --quick
    assert (tmp_path / "headlines.md").read_text() == E.markdown(rows)
    assert _git_status() == before


@pytest.mark.slow
def test_serial_equals_ray(tmp_path):
    """Two relserve units serially and on Ray (2 workers): the same CSV rows and findings."""
    pytest.importorskip("ray", reason="Ray is optional: pip install -e '.[ray]'")
    script = str(ROOT / "leaderboards" / "relserve" / "reproduce.py")

    def units(out: Path) -> list[list[str]]:
        return [
            [sys.executable, script, "--quick", "--out", str(out)],
            [sys.executable, script, "--settings", "opt-beer", "--rates", "1.0",
             "--num-queries", "40", "--no-ablation", "--no-report", "--out", str(out)],
        ]  # fmt: skip

    serial, par = tmp_path / "serial", tmp_path / "ray"
    R.run_units(units(serial), ROOT, tmp_path / "logs-serial")
    R.run_units(units(par), ROOT, tmp_path / "logs-ray", workers=2)

    def rows(p: Path) -> list[str]:  # the last column (wall_s) differs run to run
        return [line.rsplit(",", 1)[0] for line in p.read_text().split()]

    for name in ("opt-amazon-quick.csv", "opt-beer.csv"):
        assert rows(serial / name) == rows(par / name), name
    assert filecmp.cmp(serial / "findings-quick.md", par / "findings-quick.md", shallow=False)
    paper = R.load_paper("relserve")
    assert E.evaluate(paper, serial, quick=True) == E.evaluate(paper, par, quick=True)


def test_without_the_repository_the_error_says_so(tmp_path, monkeypatch):
    """From an installed package (no leaderboards/ above it) the error names the fix."""
    monkeypatch.setattr(R, "__file__", str(tmp_path / "site-packages" / "reproduce.py"))
    with pytest.raises(E.ExperimentError, match="needs the repository checkout"):
        R.repo_root(start=tmp_path)


@pytest.mark.parametrize(
    "script",
    [
        "infermax/reproduce.py",
        "relserve/reproduce.py",
        "proserve/reproduce.py",
        "hexgen/reproduce.py",
        "hexgen/seeds.py",
    ],
)
def test_scripts_default_outside_the_committed_results(script):
    """Without --update no script's default output folder is its committed results/."""
    text = (ROOT / "leaderboards" / script).read_text()
    assert "DEFAULT_OUT" in text and '"--update"' in text, script


def test_infermax_quick_refuses_update_and_writes_only_under_out(tmp_path):
    """InferMax --quick never writes over the committed full-grid CSVs."""
    script = str(ROOT / "leaderboards" / "infermax" / "reproduce.py")
    bad = subprocess.run(
        [sys.executable, script, "--quick", "--update", "--only", ""],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert bad.returncode == 2 and "--quick never writes" in bad.stderr
    before = _git_status()
    ok = subprocess.run(
        [sys.executable, script, "--quick", "--only", "", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "findings.md").exists()
    assert _git_status() == before


def test_infermax_quick_default_folder_is_its_own(tmp_path, monkeypatch):
    """Without --out, --quick writes under out/.../infermax/quick/, never the committed CSVs."""
    import importlib.util

    path = ROOT / "leaderboards" / "infermax" / "reproduce.py"
    spec = importlib.util.spec_from_file_location("infermax_reproduce_quick", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "DEFAULT_OUT", tmp_path / "infermax")
    before = {p.name: p.read_bytes() for p in mod.COMMITTED.glob("*.csv")}
    assert mod.main(["--quick", "--only", ""]) == 0
    assert mod.RESULTS == tmp_path / "infermax" / "quick"
    assert (mod.RESULTS / "findings.md").exists()
    assert {p.name: p.read_bytes() for p in mod.COMMITTED.glob("*.csv")} == before
    assert mod.main(["--only", ""]) == 0  # the full grids' default: its parent, not quick/
    assert mod.RESULTS == tmp_path / "infermax"

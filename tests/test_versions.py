"""`aoti-minify versions`: the bisection over releases (pure), and a real release installed by uv from a wheel
folder running a real minimal repro."""

import json
import math
import os

import pytest
from conftest import aoti_minify

from minifier.contract.artifacts import write_text
from minifier.contract.events import ReleaseRun, Versions, load_failure, load_versions
from minifier.contract.layout import DumpLayout
from minifier.contract.signature import Signature
from minifier.driver.bisect import Bisection, bisect_releases
from minifier.driver.releases import latest_patches, version_key
from minifier.driver.versions import upgrade_release

RELEASES = [f"2.{minor}.0" for minor in range(3, 16)]  # 13 releases
LOCAL_WHEELS = "/opt/wheels"  # this machine's torch 2.13.0+cpu wheel (the CI machine is one like it)


def prober(verdicts: dict[str, str]):
    def probe(release: str) -> ReleaseRun:
        return ReleaseRun(release, verdicts.get(release, "cannot_run"), "", 0.0)  # type: ignore[arg-type]

    return probe


def test_a_bug_the_newest_release_has_is_bisected_back_to_the_release_that_broke_it():
    broke = "2.11.0"
    verdicts = {r: "same_failure" if version_key(r) >= version_key(broke) else "passes" for r in RELEASES}
    found = bisect_releases(RELEASES, "2.13.0", prober(verdicts), version_key)
    assert (found.first_bad, found.last_good, found.fixed_in) == ("2.11.0", "2.10.0", None)
    assert found.runs[0].release == "2.15.0" and len(found.runs) <= math.log2(len(RELEASES)) + 2


def test_a_bug_fixed_later_names_the_release_that_fixed_it_and_skips_releases_that_tell_nothing():
    verdicts = {r: "same_failure" if version_key(r) < (2, 14) else "passes" for r in RELEASES}
    verdicts["2.14.0"] = "other_error"  # it fails another way: stepped over, as git bisect skips
    found = bisect_releases(RELEASES, "2.12.0", prober(verdicts), version_key)
    assert (found.first_bad, found.last_good, found.fixed_in) == ("2.3.0", None, "2.15.0")
    assert [r.release for r in found.runs[:3]] == ["2.15.0", "2.14.0", "2.13.0"]  # then back from 2.12.0, unrun
    assert "2.12.0" not in [r.release for r in found.runs] and len(found.runs[3:]) <= math.log2(len(RELEASES)) + 1


def test_a_dump_from_a_release_not_among_those_tried_bounds_the_search_without_running():
    verdicts = {r: "same_failure" if (2, 11) <= version_key(r) < (2, 14) else "passes" for r in RELEASES}
    found = bisect_releases(RELEASES, "2.12.1+cpu", prober(verdicts), version_key)
    assert (found.first_bad, found.last_good, found.fixed_in) == ("2.11.0", "2.10.0", "2.14.0")
    assert "2.12.1+cpu" not in [r.release for r in found.runs]


def test_a_bug_every_release_has_is_broken_since_the_oldest_tried():
    found = bisect_releases(RELEASES, "2.13.0", prober(dict.fromkeys(RELEASES, "same_failure")), version_key)
    assert (found.first_bad, found.last_good) == ("2.3.0", None) and len(found.runs) <= math.log2(len(RELEASES)) + 2


def test_the_default_releases_are_the_newest_patch_of_each_minor_from_2_9():
    listed = ["2.8.0", "2.9.0", "2.9.1", "2.10.0rc1", "2.10.0", "2.11.0+cpu", "1.13.1", "2.15.0", "2.14.1", "2.14.0"]
    assert latest_patches(listed) == ["2.9.1", "2.10.0", "2.11.0", "2.14.1", "2.15.0"]


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir(LOCAL_WHEELS), reason=f"no torch wheel folder at {LOCAL_WHEELS}")
def test_a_release_from_a_wheel_folder_runs_the_repro_in_its_own_environment(dumps, tmp_path):
    launcher = dumps.get(str(tmp_path), minified=True)
    failure = load_failure(DumpLayout.of(launcher).failure_json)
    envs = str(tmp_path / "envs")  # this test's own; uv's wheel cache stays shared
    proc = aoti_minify("versions", launcher, "--find-links", LOCAL_WHEELS, "--releases", "2.13.0", "--envs", envs)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "torch 2.13.0: same failure" in proc.stderr and proc.stdout.strip().endswith("versions.json")
    versions = load_versions(DumpLayout.of(launcher).versions_json)
    [run] = versions.runs
    assert run.verdict == "same_failure" and versions.signature.matches(failure.signature)
    assert os.path.isfile(os.path.join(envs, "cpu", "torch-2.13.0", "bin", "python"))
    # offline, with no wheel for it: cannot run, said, and versions.json written all the same
    empty = tmp_path / "no-wheels"
    empty.mkdir()
    offline = ("--find-links", str(empty), "--offline", "--releases", "2.12.0", "--envs", envs)
    proc = aoti_minify("versions", launcher, *offline)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [run] = json.load(open(DumpLayout.of(launcher).versions_json))["runs"]
    assert run["verdict"] == "cannot_run" and "torch" in run["detail"]
    assert aoti_minify("report", launcher, "--no-versions").returncode == 0
    assert "Releases (aoti-lens versions" in open(DumpLayout.of(launcher).report_md).read()
    # a newer release that passes the repro runs the original program too: here 2.13.0 with the bug switch taken out
    # of the repro and the original, and the dump said to come from 2.12.0
    layout = DumpLayout.of(launcher)
    for path in (launcher, layout.repro_py, layout.repro_standalone):
        lines = open(path).read().replace("# torch version: 2.13.0+cpu", "# torch version: 2.12.0").splitlines()
        write_text(path, "\n".join(line for line in lines if "inject_relu_bug_TESTING_ONLY" not in line))
    proc = aoti_minify("versions", launcher, "--find-links", LOCAL_WHEELS, "--releases", "2.13.0", "--envs", envs)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "torch 2.13.0: the original passes" in proc.stderr, proc.stderr[-3000:]
    found = load_versions(layout.versions_json)
    assert found.original is not None and found.original.verdict == "passes"
    assert "upgrading torch to 2.13.0 works around it" in found.line()


def test_upgrading_is_checked_on_the_newest_newer_release_that_passes_and_said_as_it_went():
    runs = [ReleaseRun(r, v, "", 0.0) for r, v in [("2.15.0", "passes"), ("2.14.1", "passes"), ("2.12.0", "passes")]]
    assert upgrade_release(Bisection(runs=runs), "2.13.0+cpu") == "2.15.0"
    assert upgrade_release(Bisection(runs=runs[2:]), "2.13.0+cpu") is None  # only older ones pass: none to upgrade to
    original = ReleaseRun("2.15.0", "passes", "ran without error", 9.0)
    bug = Signature("CppCompileError", "'compile' was not declared in this scope", "compile_error")
    versions = Versions(bug, "repro.py", "cpu", runs, None, None, "2.14.1", "2.13.0+cpu", original)
    assert "upgrading torch to 2.15.0 works around it" in versions.line()
    failing = ReleaseRun("2.15.0", "same_failure", "", 9.0)
    assert "still fails the same way on 2.15.0" in Versions(**{**versions.__dict__, "original": failing}).line()

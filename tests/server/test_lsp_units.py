"""The server's pure pieces: settings, aoti: URIs, mapping watched paths to launchers."""

from __future__ import annotations

import sys

from minifier.contract.events import KEEP_WARM_SECONDS
from minifier.contract.layout import launcher_for
from server.protocol import Settings, VirtualDoc, graph_uri, kernel_uri, original_uri, parse_uri


def test_keep_warm_defaults_to_what_aoti_minify_warm_waits():
    assert Settings().keep_warm == KEEP_WARM_SECONDS
    assert Settings(keep_warm=5.0).merged({"keepWarm": None})[0].keep_warm == KEEP_WARM_SECONDS


def test_settings_merge_keeps_absent_keys_and_reports_bad_values():
    settings, problems = Settings().merged({"trusted": True, "workers": 2, "debugDirRoots": ["/d"]})
    assert (settings.trusted, settings.workers, settings.debug_dir_roots, problems) == (True, 2, ("/d",), [])
    settings, problems = settings.merged({"aoti": {"workers": 0, "timeout": 30, "python": "", "devices": None}})
    assert (settings.trusted, settings.workers, settings.timeout) == (True, 2, 30.0)
    assert (settings.python, settings.devices) == (sys.executable, "")
    assert problems == ["setting workers=0 ignored: expected an integer >= 1"]
    assert settings.merged(None) == (settings, [])
    assert settings.merged([1])[1] == ["settings must be an object, got list"]


def test_virtual_document_uris_round_trip():
    run = "run_2026_11_29_16_34_13_593805-pid_1859~2"
    assert parse_uri(graph_uri(run)) == VirtualDoc(run, "graph")
    assert parse_uri(original_uri(run)) == VirtualDoc(run, "original")
    assert parse_uri(kernel_uri(run, "cpp_fused_relu_0")) == VirtualDoc(run, "kernel", "cpp_fused_relu_0")
    assert parse_uri("aoti:/run%5F1/graph.py") == VirtualDoc("run_1", "graph")
    assert parse_uri("aoti:/run_1/other.py") is None and parse_uri("file:///run_1/graph.py") is None


def test_watched_paths_map_to_their_launcher():
    launcher = "/w/torch_compile_debug/run_1/minifier/minifier_launcher.py"
    for path in (
        launcher,
        "/w/torch_compile_debug/run_1",
        "/w/torch_compile_debug/run_1/minifier/failure.json",
        "/w/torch_compile_debug/run_1/minifier/checkpoints/3.py",
    ):
        assert launcher_for(path) == launcher
    assert launcher_for("/w/torch_compile_debug") is None and launcher_for("/w/src/model.py") is None


def test_candidates_waiting_for_memory_show_in_the_progress_line_until_none_does():
    from minifier.contract.events import CandidateEvent, MemoryEvent
    from server.failures import FailureRecord

    record = FailureRecord(id="run_1", launcher="/dump/minifier/minifier_launcher.py", nodes_start=73, nodes_now=12)
    record.begin("minifying", "minifying", keep_graph=True)
    record.apply(MemoryEvent(waiting=2, detail="CUDA out of memory"))
    assert record.message == "73 -> 12 nodes, 0 queries, 0 s, 2 waiting for GPU/host memory"
    record.apply(CandidateEvent(nodes=6, verdict="fails", seconds=1.0, queries=5))
    assert record.message.endswith("5 queries, 0 s, 2 waiting for GPU/host memory")
    record.apply(MemoryEvent(waiting=0))
    assert record.message == "73 -> 12 nodes, 5 queries, 0 s"


def test_the_actions_offered_follow_who_works_on_the_failure():
    from server.actions import available
    from server.failures import FailureRecord
    from server.jobs import Job, JobKind, Working

    record = FailureRecord(id="run_1", launcher="/dump/minifier/minifier_launcher.py")

    def titles(working: Working | None) -> list[str]:
        return [title for title, _ in available(record, working)]

    def job(kind: JobKind) -> Working:
        return Working(kind, Job("run_1", kind, user=True))

    assert titles(None)[0] == "Minify this failure"
    assert titles(job("minify")) == ["Show shrinking graph", "Cancel minification"]
    assert titles(job("triage"))[1] == "Cancel the workaround search"
    assert titles(job("run")) == ["Minify this failure", "Cancel reproduction"]
    assert titles(job("report"))[1] == "Cancel the bug report"
    outside = Working("minify", pid=42)
    assert titles(outside) == ["Show shrinking graph", "Stop aoti-minify (pid 42)"]
    assert outside.describe() == "aoti-minify minify (pid 42), started outside the editor"

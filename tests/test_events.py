import json
import os

import pytest

from minifier.contract.events import (
    SCHEMA_VERSION,
    CandidateEvent,
    CheckpointEvent,
    DoneEvent,
    Failure,
    FailureEvent,
    StandaloneEvent,
    encode_event,
    parse_event,
)
from minifier.contract.signature import ErrorAnalysis, KernelRef, Signature
from minifier.contract.wire import WireError
from minifier.exchange import fork_protocol as fp
from minifier.exchange.worker_protocol import (
    Divergence,
    KeptNodes,
    Outcome,
    ProbeRequest,
    QueryRequest,
    SavedProgram,
    TrialFindings,
    TrialOptions,
    decode_reply,
    decode_request,
    encode,
)

SIG = Signature("CppCompileError", "'compile' was not declared in this scope", "compile_error")


@pytest.mark.parametrize(
    "event",
    [
        CandidateEvent(nodes=12, verdict="fails", seconds=4.1),
        CheckpointEvent(nodes=12, path="/x/checkpoints/12.py", graph="def forward(self, x): ..."),
        DoneEvent(nodes=1, repro="/x/repro.py", queries=5, seconds=31.0, start_nodes=73, signature=SIG),
        StandaloneEvent(path="/x/repro_standalone.py", fallback="with exact values it does not fail", seconds=3.2),
        FailureEvent(
            path="/x/failure.json",
            failure=Failure(
                launcher="/x/l.py",
                signature=SIG,
                headline="h",
                details="d",
                kernel=KernelRef(name="k", line=3, source_nodes=["relu"]),
            ),
        ),
    ],
)
def test_events_round_trip(event):
    line = encode_event(event)
    assert json.loads(line)["v"] == SCHEMA_VERSION
    assert parse_event(line) == event


def test_design_example_lines_parse():
    event = parse_event(
        '{"event": "candidate", "nodes": 12, "verdict": "fails", "seconds": 4, "cached": false, "v": 1}'
    )
    assert event == CandidateEvent(nodes=12, verdict="fails", seconds=4.0)


@pytest.mark.parametrize(
    "line, message",
    [
        ("garbage", "not a JSON event"),
        ('{"event": "nope", "v": 1}', "not an aoti-minify event"),
        ('{"event": "done", "nodes": 1, "repro": "r", "queries": 1, "seconds": 1, "v": 99}', "schema v99"),
        ('{"event": "candidate", "nodes": "many", "verdict": "fails", "seconds": 1, "v": 1}', "expected int"),
        ('{"event": "candidate", "nodes": 1, "verdict": "maybe", "seconds": 1, "v": 1}', "is not one of"),
    ],
)
def test_bad_lines_are_rejected_clearly(line, message):
    with pytest.raises(WireError, match=message):
        parse_event(line)


def test_worker_messages_round_trip():
    query = QueryRequest(key="abc", program=KeptNodes(["relu"], "/v.pt"))
    assert decode_request(encode(query)) == query
    trial = QueryRequest(
        key="t", program=SavedProgram("/r.pt2"), trial=TrialOptions(configs={"cpp.simdlen": 0}, aten_fallback=["a"])
    )
    assert decode_request(encode(trial)) == trial
    assert decode_request(encode(ProbeRequest(key="probe", values_path="/v.pt"))) == ProbeRequest("probe", "/v.pt")
    outcome = Outcome(
        key="abc",
        status="raised",
        seconds=1.5,
        error=ErrorAnalysis(signature=SIG, headline="h", kernel=KernelRef(file="/k.cpp", line=15)),
    )
    assert decode_reply(encode(outcome)) == outcome
    # each operation's findings come back as their own variant, and only they
    probed = Outcome(key="probe", status="passed", seconds=2.0, findings=Divergence(["mul"], ["view"]))
    tried = Outcome(key="t", status="passed", seconds=3.0, findings=TrialFindings(0.5, ["p1"], ["aten.relu"], "f0"))
    assert decode_reply(encode(probed)) == probed and decode_reply(encode(probed)).trial() == TrialFindings()
    assert decode_reply(encode(tried)) == tried and decode_reply(encode(tried)).divergence() == Divergence()


@pytest.mark.parametrize(
    "message",
    [
        fp.Hello(pid=7),
        fp.Hello(pid=7, prepared=True),
        fp.Prepared(),
        fp.Spawn(env={"CUDA_VISIBLE_DEVICES": "1"}, cwd="/w"),
        fp.Spawned(pid=8),
        fp.Refused(message="no fds"),
        fp.Exited(pid=8, returncode=-11),
    ],
)
def test_fork_server_messages_round_trip(message):
    assert fp.decode(fp.encode(message)) == message


def test_bad_fork_server_records_are_rejected_clearly():
    with pytest.raises(WireError, match="unknown fork server message"):
        fp.decode(b'{"type": "fork_bomb"}')
    with pytest.raises(WireError, match="Exited: missing field 'returncode'"):
        fp.decode(b'{"type": "exited", "pid": 3}')


def test_events_log_is_read_back_whole_lines_only_and_from_the_start_when_replaced(tmp_path):
    from minifier.contract.events import BeginEvent, EventsTail, LogEvent, last_run
    from minifier.driver.reporter import Reporter

    log = str(tmp_path / "work" / "events.jsonl")
    tail = EventsTail(log)
    assert tail.read().events == []  # no log yet
    reporter = Reporter(events=False)
    reporter.record_to(log, "minify", "/x/minifier_launcher.py")
    reporter.emit(LogEvent(message="one"))
    with open(log, "a") as f:
        f.write('{"message":"half a line')  # still being written
    read = tail.read()
    assert [type(e) for e in read.events] == [BeginEvent, LogEvent] and read.problems == []
    begin = read.events[0]
    assert begin.command == "minify" and begin.pid == os.getpid() and begin.launcher == "/x/minifier_launcher.py"
    with open(log, "a") as f:
        f.write('","level":"info","event":"log","v":1}\nnot json\n')
    read = tail.read()
    assert [e.message for e in read.events] == ["half a line"] and len(read.problems) == 1
    reporter.record_to(log, "run", "/x/minifier_launcher.py")  # a second run appends
    events = EventsTail(log).read().events
    assert [e.command for e in last_run(events) if isinstance(e, BeginEvent)] == ["run"]
    os.remove(log)
    reporter.record_to(log, "run", "/x/minifier_launcher.py")  # replaced: read again from its start
    reporter.close()
    read = tail.read()
    assert read.restarted and [type(e) for e in read.events] == [BeginEvent]

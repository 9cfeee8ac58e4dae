"""``toolgate replay`` (issue 26): requests recorded through the gateway under uvicorn
against one scripted model, replayed against a second scripted model that (a) agrees,
(b) picks another tool, (c) changes an argument, (d) calls a tool that writes. The
report and the exit status say so; no tool server receives a request during a replay
but the read calls ``--live-read-tools`` lets through; a write never runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest
import redis
import yaml

from gateway.cli.main import main
from tests.support.recorder import Answer, Received, Recorder
from tests.support.scripted import (
    MODEL,
    SECRETS,
    TENANT_KEY,
    Harness,
    Model,
    asks,
    call,
    config,
    says,
    tool,
)
from tests.support.servers import wait_for

OTHER = "other-model"


def tool_answer(hit: Received) -> Answer:
    return Answer(body=json.dumps({"path": hit.raw_path, "name": "Ada"}).encode())


class Setup:
    def __init__(
        self,
        harness: Harness,
        tmp_path: Path,
        recorded: Model,
        replaying: Model,
        store: dict[str, Any] | None = None,
    ) -> None:
        self.tools = Recorder(tool_answer)
        url = harness.serve(self.tools).url
        self.data = config(
            harness.serve(recorded.recorder).url,
            [
                tool("lookup", f"{url}/lookup/{{id}}", {"id": {"type": "string"}}),
                tool(
                    "search",
                    f"{url}/search",
                    {"q": {"type": "string"}},
                    http={"url": f"{url}/search", "query": {"q": "{q}"}},
                ),
                tool(
                    "create_ticket",
                    f"{url}/tickets",
                    {"title": {"type": "string"}},
                    http={"url": f"{url}/tickets", "method": "POST"},
                ),
            ],
        )
        self.data["upstreams"].append(
            {"name": "other", "base_url": f"{harness.serve(replaying.recorder).url}/v1"}
        )
        self.data["models"].append({"name": OTHER, "upstream": "other"})
        self.data["tenants"][0]["record"] = "all"
        if store is not None:
            self.data["store"] = store
        self.path = tmp_path / "gateway.yaml"
        self.path.write_text(yaml.safe_dump(self.data))
        self.gateway = harness.gateway(self.data)
        self.harness = harness
        self.tmp_path = tmp_path

    def record_id(self) -> str:
        client = openai.OpenAI(base_url=f"{self.gateway.url}/v1", api_key=TENANT_KEY, max_retries=0)
        self.harness.on_close(client.close)
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=[{"role": "user", "content": "look c1 and c2 up"}]
        )
        return str(raw.headers["x-request-id"])

    def record(self) -> Path:
        """Record one request; its trace (with the recording) as a file."""
        request_id = self.record_id()
        trace = self.harness.client(self.gateway).get(f"/v1/toolgate/traces/{request_id}")
        path = self.tmp_path / f"{request_id}.json"
        path.write_text(trace.text)
        return path

    def replay(
        self, source: Path, capsys: pytest.CaptureFixture[str], *options: str
    ) -> tuple[int, dict[str, Any]]:
        capsys.readouterr()
        status = main(
            [
                "replay",
                str(source),
                "--model",
                OTHER,
                "--config",
                str(self.path),
                "--json",
                *options,
            ]
        )
        return status, json.loads(capsys.readouterr().out)


def recorded_model() -> Model:
    return Model(
        asks(call("lookup", {"id": "c1"}, "r1")),
        asks(call("lookup", {"id": "c2"}, "r2")),
        says("Both are Ada."),
    )


@pytest.mark.parametrize(
    ("replaying", "agree", "verdicts", "served", "missing"),
    [
        (  # (a) agrees
            Model(
                asks(call("lookup", {"id": "c1"})),
                asks(call("lookup", {"id": "c2"})),
                says("Ada, twice."),
            ),
            True,
            ["same", "same"],
            ["recorded", "recorded"],
            [],
        ),
        (  # (b) picks another tool
            Model(asks(call("search", {"q": "c1"})), says("Not sure.")),
            False,
            ["new"],
            ["not_recorded"],
            ["lookup", "lookup"],
        ),
        (  # (c) changes an argument
            Model(
                asks(call("lookup", {"id": "c1"})), asks(call("lookup", {"id": "c9"})), says("Hm.")
            ),
            False,
            ["same", "different"],
            ["recorded", "not_recorded"],
            ["lookup"],
        ),
        (  # (d) calls a tool that writes
            Model(asks(call("create_ticket", {"title": "c1"})), says("Filed.")),
            False,
            ["new"],
            ["write_refused"],
            ["lookup", "lookup"],
        ),
    ],
)
def test_a_replay_reports_how_the_new_model_differs(
    harness: Harness,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    replaying: Model,
    agree: bool,
    verdicts: list[str],
    served: list[str],
    missing: list[str],
) -> None:
    setup = Setup(harness, tmp_path, recorded_model(), replaying)
    source = setup.record()
    assert len(setup.tools.hits) == 2  # the recording's two calls
    setup.tools.clear()

    status, report = setup.replay(source, capsys)

    assert status == (0 if agree else 1)
    assert report["agree"] is agree
    assert [c["verdict"] for c in report["calls"]] == verdicts
    assert [c["served"] for c in report["calls"]] == served
    assert [c["name"] for c in report["missing"]] == missing
    assert report["rounds"]["recorded"] == 3
    assert report["models"] == {"recorded": MODEL, "replayed": OTHER}
    assert report["answer"]["recorded"] == "Both are Ada."
    assert setup.tools.hits == []  # no tool server was asked anything
    if verdicts == ["same", "different"]:
        (different,) = [c for c in report["calls"] if c["verdict"] == "different"]
        assert different["arguments"] == {"id": "c9"}
        assert {"id": "c2"} in different["recorded_arguments"]
    served_results = replaying.tool_results()
    if "write_refused" in served:
        assert "changes things" in served_results[0]
    assert not any(secret in json.dumps(report) for secret in SECRETS)


def test_live_read_tools_run_reads_never_writes(
    harness: Harness, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    replaying = Model(
        asks(call("search", {"q": "c1"}), call("create_ticket", {"title": "t"})), says("ok")
    )
    setup = Setup(harness, tmp_path, recorded_model(), replaying)
    source = setup.record()
    setup.tools.clear()

    status, report = setup.replay(source, capsys, "--live-read-tools")

    assert status == 1
    assert [c["served"] for c in report["calls"]] == ["live", "write_refused"]
    assert [h.raw_path for h in setup.tools.hits] == ["/search?q=c1"]  # the read, only


def test_text_report_and_what_cannot_be_replayed(
    harness: Harness, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    replaying = Model(
        asks(call("lookup", {"id": "c1"})), asks(call("lookup", {"id": "c2"})), says("Ada.")
    )
    setup = Setup(harness, tmp_path, recorded_model(), replaying)
    source = setup.record()
    capsys.readouterr()
    status = main(["replay", str(source), "--model", OTHER, "--config", str(setup.path)])
    out = capsys.readouterr().out
    assert status == 0
    assert "same      lookup" in out
    assert "the trajectories agree" in out

    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"request_id": "x", "rounds": []}))
    assert main(["replay", str(empty), "--model", OTHER, "--config", str(setup.path)]) == 2
    assert "holds no recording" in capsys.readouterr().err
    by_id = ["replay", "req_nope", "--model", OTHER, "--config", str(setup.path)]
    assert main(by_id) == 2
    assert "say whose trace (--tenant)" in capsys.readouterr().err
    assert main([*by_id, "--tenant", "acme"]) == 2
    assert "no trace of 'req_nope' for tenant 'acme'" in capsys.readouterr().err


def test_a_recording_is_replayed_by_its_request_id_from_the_store(
    harness: Harness,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    redis_url: str,
    redis_prefix: str,
) -> None:
    replaying = Model(
        asks(call("lookup", {"id": "c1"})), asks(call("lookup", {"id": "c2"})), says("Ada.")
    )
    store = {"url": redis_url, "prefix": f"{redis_prefix}replay:", "timeout_s": 2.0}
    setup = Setup(harness, tmp_path, recorded_model(), replaying, store)
    request_id = setup.record_id()
    # The CLI reads the store as another replica would: the recording is kept just
    # after the answer was sent (``ops/afterwards.py``), so it is there a moment later.
    client = redis.Redis.from_url(redis_url)
    try:
        assert wait_for(lambda: client.exists(f"{store['prefix']}t:acme:trace:{request_id}"))
    finally:
        client.close()
    capsys.readouterr()
    command = ["replay", request_id, "--tenant", "acme", "--model", OTHER, "--json"]
    status = main([*command, "--config", str(setup.path)])
    report = json.loads(capsys.readouterr().out)
    assert status == 0
    assert report["agree"] is True
    assert [c["served"] for c in report["calls"]] == ["recorded", "recorded"]


def test_recordings_export_as_json_lines_and_replay_as_a_batch(
    harness: Harness, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two recordings of two tool rounds and one of three, exported from the route,
    replayed together: the summary says how many agree and what differed."""
    three = [
        asks(call("lookup", {"id": "c1"}, "r1")),
        asks(call("lookup", {"id": "c2"}, "r2")),
        asks(call("search", {"q": "c3"}, "r3")),
        says("Three."),
    ]
    recorded = Model(*recorded_model().script, *recorded_model().script, *three)

    def two_lookups(body: dict[str, Any]) -> dict[str, Any]:
        """Agrees with the two-round recordings, stops early on the third: every time."""
        done = sum(m["role"] == "tool" for m in body["messages"])
        if done < 2:
            return asks(call("lookup", {"id": f"c{done + 1}"}))
        return says("Ada.")

    replaying = Model(two_lookups)
    setup = Setup(harness, tmp_path, recorded, replaying)
    for _ in range(3):
        setup.record_id()
    exported = setup.harness.client(setup.gateway).get("/v1/toolgate/recordings")
    assert exported.headers["content-type"].startswith("application/x-ndjson")
    lines = exported.text.splitlines()
    assert len(lines) == 3
    assert [len(json.loads(line)["rounds"]) for line in lines] == [3, 3, 4]
    assert all(json.loads(line)["request_id"].startswith("req_") for line in lines)
    batch = tmp_path / "recordings.jsonl"
    batch.write_text(exported.text + "not json\n")
    setup.tools.clear()

    capsys.readouterr()
    command = ["replay", "--from", str(batch), "--model", OTHER, "--config", str(setup.path)]
    status = main([*command, "--json"])
    found = json.loads(capsys.readouterr().out)
    assert status == 1  # one of them differs, one line is not a recording
    summary = found["summary"]
    assert (summary["replayed"], summary["agree"]) == (3, 2)
    assert summary["differences"]["missing"] == 1  # the third's search
    assert summary["rounds"]["recorded"] == 10
    assert (
        summary["not_replayed"] == ["line 4: not valid JSON"] or len(summary["not_replayed"]) == 1
    )
    assert setup.tools.hits == []
    assert main(command) == 1
    assert "replayed 3: 2 agree" in capsys.readouterr().out

    bad = setup.harness.client(setup.gateway).get("/v1/toolgate/recordings?limit=0")
    assert bad.status_code == 400


def test_a_ci_job_replays_through_the_admin_route(harness: Harness, tmp_path: Path) -> None:
    replaying = Model(
        asks(call("lookup", {"id": "c1"})), asks(call("lookup", {"id": "c9"})), says("Hm.")
    )
    setup = Setup(harness, tmp_path, recorded_model(), replaying)
    setup.data["server"] = {"admin_key": "admin-CANARY-26"}
    gateway = harness.gateway(setup.data)
    setup.gateway = gateway
    request_id = setup.record_id()
    setup.tools.clear()
    body = {"model": OTHER, "tenant": "acme", "request_ids": [request_id, "req_gone"]}

    assert harness.client(gateway).post("/v1/toolgate/replays", json=body).status_code == 401
    admin = harness.client(gateway, key="admin-CANARY-26")
    answer = admin.post("/v1/toolgate/replays", json=body)
    assert answer.status_code == 200, answer.text
    found = answer.json()
    assert found["object"] == "toolgate.replays"
    assert found["summary"]["replayed"] == 1
    assert found["summary"]["agree"] == 0
    assert found["summary"]["not_replayed"] == ["req_gone: no kept recording"]
    (report,) = found["reports"]
    assert [c["verdict"] for c in report["calls"]] == ["same", "different"]
    assert setup.tools.hits == []
    assert admin.post("/v1/toolgate/replays", json={"tenant": "acme"}).status_code == 400


@pytest.mark.parametrize("surface", ["streamed chat", "responses"])
def test_streamed_and_responses_requests_replay_alike(
    harness: Harness, tmp_path: Path, capsys: pytest.CaptureFixture[str], surface: str
) -> None:
    replaying = Model(
        asks(call("lookup", {"id": "c1"})), asks(call("lookup", {"id": "c2"})), says("Ada.")
    )
    setup = Setup(harness, tmp_path, recorded_model(), replaying)
    client = openai.OpenAI(base_url=f"{setup.gateway.url}/v1", api_key=TENANT_KEY, max_retries=0)
    harness.on_close(client.close)
    if surface == "responses":
        raw = client.responses.with_raw_response.create(model=MODEL, input="look c1 and c2 up")
        request_id = raw.headers["x-request-id"]
    else:
        with client.chat.completions.with_streaming_response.create(
            model=MODEL, messages=[{"role": "user", "content": "look c1 and c2 up"}], stream=True
        ) as streamed:
            request_id = streamed.headers["x-request-id"]
            assert (
                "".join(c.choices[0].delta.content or "" for c in streamed.parse() if c.choices)
                == "Both are Ada."
            )
    trace = harness.client(setup.gateway).get(f"/v1/toolgate/traces/{request_id}")
    source = tmp_path / "trace.json"
    source.write_text(trace.text)
    assert trace.json()["recording"]["route"] == (
        "/v1/responses" if surface == "responses" else "/v1/chat/completions"
    )
    status, report = setup.replay(source, capsys)
    assert status == 0
    assert [c["verdict"] for c in report["calls"]] == ["same", "same"]


# ------------------------------------------------------------------ a replay never writes
# (issue 34 §2): what may run live is the gateway's own current policy's word.


def _edit(source: Path, change: Any) -> None:
    trace = json.loads(source.read_text())
    change(trace["recording"])
    source.write_text(json.dumps(trace))


def _recorded(recording: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in recording["tools"] if t["name"] == name)


def test_a_write_recorded_as_a_read_never_runs(
    harness: Harness, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    replaying = Model(asks(call("create_ticket", {"title": "t"})), says("ok"))
    setup = Setup(harness, tmp_path, recorded_model(), replaying)
    source = setup.record()
    _edit(source, lambda r: _recorded(r, "create_ticket").update(effects="read"))
    setup.tools.clear()

    status, report = setup.replay(source, capsys, "--live-read-tools")

    assert [c["served"] for c in report["calls"]] == ["write_refused"]
    assert setup.tools.hits == []  # the POST tool was not called
    assert status == 1


def test_a_read_the_operator_marks_write_never_runs(
    harness: Harness, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    replaying = Model(asks(call("search", {"q": "c1"})), says("ok"))
    setup = Setup(harness, tmp_path, recorded_model(), replaying)
    source = setup.record()
    setup.data["policy"] = {"tools": [{"tools": ["search"], "effects": "write"}]}
    setup.path.write_text(yaml.safe_dump(setup.data))
    setup.tools.clear()

    _, report = setup.replay(source, capsys, "--live-read-tools")

    assert [c["served"] for c in report["calls"]] == ["write_refused"]
    assert setup.tools.hits == []


def test_a_tool_the_gateway_does_not_know_never_runs_and_a_changed_one_is_named(
    harness: Harness, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    replaying = Model(asks(call("mystery", {"q": "x"}), call("search", {"q": "c1"})), says("ok"))
    setup = Setup(harness, tmp_path, recorded_model(), replaying)
    source = setup.record()

    def change(recording: dict[str, Any]) -> None:
        search = _recorded(recording, "search")
        mystery = json.loads(json.dumps(search))
        mystery["name"] = mystery["definition"]["function"]["name"] = "mystery"
        recording["tools"].append(mystery)

    _edit(source, change)
    # Since the recording, the operator has changed what the search tool says.
    next(t for t in setup.data["tools"] if t["name"] == "search")["description"] = "Searches."
    setup.path.write_text(yaml.safe_dump(setup.data))
    setup.tools.clear()

    _, report = setup.replay(source, capsys, "--live-read-tools")

    assert [c["served"] for c in report["calls"]] == ["not_recorded", "live"]
    assert [h.raw_path for h in setup.tools.hits] == ["/search?q=c1"]
    assert report["warnings"] == [
        "tool 'search': the recorded definition differs from the gateway's"
    ]


def test_live_reads_use_the_gateways_egress_settings(
    harness: Harness, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not stricter: a tool on 127.0.0.1 that ``allow_hosts`` allows is read live; not
    looser: without it, ``deny_private`` refuses it."""

    def searches_once(body: dict[str, Any]) -> dict[str, Any]:
        answered = any(m["role"] == "tool" for m in body["messages"])
        return says("ok") if answered else asks(call("search", {"q": "c1"}))

    replaying = Model(searches_once)
    setup = Setup(harness, tmp_path, recorded_model(), replaying)
    source = setup.record()
    for allow, hits in ((["127.0.0.1"], ["/search?q=c1"]), ([], [])):
        setup.data["egress"] = {"deny_private": True, "allow_hosts": allow}
        setup.path.write_text(yaml.safe_dump(setup.data))
        setup.tools.clear()
        _, report = setup.replay(source, capsys, "--live-read-tools")
        assert [h.raw_path for h in setup.tools.hits] == hits
        assert [c["served"] for c in report["calls"]] == ["live"]

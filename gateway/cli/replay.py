"""``toolgate replay TRACE_ID|FILE --model M``: a recorded request run again against
another model (issue 26), through the gateway's own engine, with the configuration's
models and upstreams; its report says what changed. Exit 0 when the trajectories agree
on tools and arguments, 1 when they do not, 2 when there is nothing to replay.

A recording comes from a file (a trace as ``GET /v1/toolgate/traces/{id}`` gives it,
a bare recording, or the first line of a JSON Lines file) or, by its request id, from
the configuration's store (``--tenant``: whose trace it is).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from gateway.config import GatewayConfig
from gateway.errors import GatewayError
from gateway.runtime.replayer import Replayer
from gateway.runtime.trajectories import replay_all, summary
from gateway.store import Keys, open_store
from gateway.store.traces import TraceStore
from gateway.upstream.wire import upstream_wire
from tool_registry import create_tool_transport, dumps_text, loads

DEFAULT_TENANT = "default"


def add_command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], default: str
) -> None:
    replay = commands.add_parser(
        "replay", help="run a recorded request against another model and compare"
    )
    replay.add_argument(
        "source", nargs="?", help="a request id (from the store) or a recording file"
    )
    replay.add_argument(
        "--from", dest="batch", help="replay every recording of a JSON Lines file, and sum up"
    )
    replay.add_argument("--model", required=True, help="the model to replay against")
    replay.add_argument("--tenant", help="whose recording (default: the only tenant)")
    replay.add_argument("--config", default=default, help=f"config file (default {default})")
    replay.add_argument(
        "--live-read-tools",
        action="store_true",
        help="run calls not in the recording live when their tool only reads",
    )
    replay.add_argument("--json", action="store_true", help="print the report as JSON")


class NothingToReplay(Exception):
    """The source holds no recording (the message says why)."""


def recording_of(document: Any) -> dict[str, Any]:
    """The recording in a trace, or the document itself when it is one."""
    if isinstance(document, dict) and isinstance(document.get("recording"), dict):
        document = document["recording"]
    if not isinstance(document, dict) or "loop" not in document:
        raise NothingToReplay("it holds no recording (was the tenant's record on?)")
    if document.get("kept") is False:
        raise NothingToReplay("its recording was not kept (larger than recordings.max_bytes)")
    return document


def read_file(path: Path) -> dict[str, Any]:
    text = path.read_text()
    try:
        return recording_of(loads(text))
    except ValueError:
        first = next((line for line in text.splitlines() if line.strip()), "")
        return recording_of(loads(first))


async def read_store(config: GatewayConfig, tenant: str, request_id: str) -> dict[str, Any]:
    store = open_store(config.store.url, max(config.store.timeout_s, 2.0))
    await store.connect()
    try:
        traces = TraceStore(
            store, Keys(config.store.prefix), config.traces.ttl_s, config.traces.result_chars
        )
        found = await traces.load(tenant, request_id)
    finally:
        await store.aclose()
    if found is None:
        raise NothingToReplay(f"no trace of {request_id!r} for tenant {tenant!r} in the store")
    return recording_of(found)


def render(report: dict[str, Any]) -> str:
    """The report, side by side, for a person."""
    models = report["models"]
    lines = [f"replay of {models['recorded']} against {models['replayed']}"]
    for call in report["calls"]:
        arguments = dumps_text(call["arguments"])
        line = f"  {call['verdict']:<9} {call['name']} {arguments}"
        if call.get("served"):
            line += f"  ({call['served']})"
        lines.append(line)
        for recorded in call.get("recorded_arguments", []):
            lines.append(f"            recorded: {dumps_text(recorded)}")
    for call in report["missing"]:
        lines.append(f"  missing   {call['name']} {dumps_text(call['arguments'])}")
    for what in ("rounds", "tokens", "cost_usd", "finish_reason", "answer"):
        pair = report[what]
        lines.append(f"  {what:<13} {pair['recorded']!r:>24}  ->  {pair['replayed']!r}")
    if report.get("error"):
        lines.append(f"  error: {report['error']}")
    lines.append("the trajectories agree" if report["agree"] else "the trajectories differ")
    return "\n".join(lines)


async def _replay_all(
    config: GatewayConfig, args: argparse.Namespace, recordings: list[tuple[str, Any]]
) -> tuple[list[dict[str, Any]], list[str]]:
    """The named recordings replayed with one set of clients (a ``None`` recording is
    read from the store by its name, a request id)."""
    tenants = [t.id for t in config.tenants or []] or [DEFAULT_TENANT]
    tenant = args.tenant or (tenants[0] if len(tenants) == 1 else None)
    if any(found is None for _, found in recordings):
        if tenant is None:
            raise NothingToReplay("several tenants are configured: say whose trace (--tenant)")
        recordings = [
            (name, found if found is not None else await read_store(config, tenant, name))
            for name, found in recordings
        ]
    upstream, tools = upstream_wire(), create_tool_transport(config.egress.policy())
    try:
        replayer = Replayer.of_config(config, upstream, tools)
        tenant_id = args.tenant if args.tenant is not None else (tenant if config.tenants else None)
        return await replay_all(
            replayer=replayer,
            recordings=recordings,
            model=args.model,
            tenant=tenant_id,
            live_read=args.live_read_tools,
            config=config,
            progress=_progress(len(recordings)) if args.batch and sys.stderr.isatty() else None,
        )
    finally:
        await upstream.aclose()
        await tools.aclose()


def _progress(total: int) -> Callable[[], None]:
    """A progress bar on stderr, one step a recording."""
    done = 0

    def step() -> None:
        nonlocal done
        done += 1
        filled = round(30 * done / total)
        bar = f"\r[{'#' * filled}{'.' * (30 - filled)}] {done}/{total}"
        print(bar, end="\n" if done == total else "", file=sys.stderr, flush=True)

    return step


def render_summary(found: dict[str, Any]) -> str:
    lines = [
        f"replayed {found['replayed']}: {found['agree']} agree ({found['agreement']})",
        *(
            f"  {what:<9} {found[what]['recorded']!r:>14}  ->  {found[what]['replayed']!r}"
            for what in ("rounds", "tokens", "cost_usd")
        ),
        "  differences: " + ", ".join(f"{k} {v}" for k, v in found["differences"].items()),
    ]
    lines += [f"  not replayed: {reason}" for reason in found["not_replayed"]]
    return "\n".join(lines)


def _batch(config: GatewayConfig, args: argparse.Namespace, out: TextIO) -> int:
    """``--from FILE.jsonl``: every line replayed in turn, and summed up."""
    lines = [line for line in Path(args.batch).read_text().splitlines() if line.strip()]
    recordings: list[tuple[str, Any]] = []
    unread = []
    for number, line in enumerate(lines, 1):
        try:
            recordings.append((f"line {number}", recording_of(loads(line))))
        except (NothingToReplay, ValueError) as exc:
            unread.append(f"line {number}: {exc}")
    reports, failures = asyncio.run(_replay_all(config, args, recordings))
    found = summary(reports, [*unread, *failures])
    if args.json:
        print(dumps_text({"summary": found, "reports": reports}), file=out)
    else:
        print(render_summary(found), file=out)
    return 0 if reports and found["agree"] == len(reports) and not found["not_replayed"] else 1


def run(config: GatewayConfig, args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    if args.batch is not None:
        try:
            return _batch(config, args, out)
        except OSError as exc:
            print(f"toolgate replay: {args.batch}: {exc}", file=sys.stderr)
            return 2
    if args.source is None:
        print("toolgate replay: name a request id or a file, or --from FILE.jsonl", file=sys.stderr)
        return 2
    try:
        source = Path(args.source)
        found = read_file(source) if source.is_file() else None
        reports, failures = asyncio.run(_replay_all(config, args, [(args.source, found)]))
    except (NothingToReplay, GatewayError, OSError) as exc:
        failures, reports = [str(exc)], []
    if not reports:
        reason = failures[0].removeprefix(f"{args.source}: ")
        print(f"toolgate replay: {args.source}: {reason}", file=sys.stderr)
        return 2
    (report,) = reports
    print(dumps_text(report) if args.json else render(report), file=out)
    return 0 if report["agree"] else 1

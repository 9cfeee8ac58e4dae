"""``toolgate check``: everything loading validates, then the remote tool sources.

Offline checks (the file, tool files, OpenAPI files, references) fail with exit 2, as
at start. Then, unless ``--offline``, the OpenAPI URLs are fetched and the MCP servers
listed under the egress policy, as the gateway would at start: one that cannot be read
is reported and makes the exit status 1 — the gateway itself would start without its
tools and keep trying, so this is the moment to hear about it. ``--probe`` also asks
every model server and tool origin whether it answers, as ``toolgate serve`` does at
start, and prints the same block; anything that does not answer makes it 1 too.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import TextIO

from gateway.config import GatewayConfig
from gateway.runtime.health import findings
from gateway.runtime.probe import probe_all, render
from gateway.runtime.services import Gateway


def add_command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], default: str
) -> None:
    check = commands.add_parser("check", help="validate a config file and its tool sources")
    check.add_argument("--config", default=default, help=f"config file (default {default})")
    check.add_argument(
        "--offline",
        action="store_true",
        help="do not fetch OpenAPI URLs or list MCP servers",
    )
    check.add_argument(
        "--probe",
        action="store_true",
        help="also ask each model server and tool origin whether it answers",
    )


def run(config: GatewayConfig, args: argparse.Namespace, out: TextIO | None = None) -> int:
    return asyncio.run(_run(Gateway(config), args, out or sys.stdout))


async def _run(gateway: Gateway, args: argparse.Namespace, out: TextIO) -> int:
    config = gateway.config
    remote = [s.label for s in config.openapi if s.is_url] + [s.name for s in config.mcp]
    failed = 0
    if args.probe:
        async with gateway:
            probes = await probe_all(gateway)
        print(render(probes), file=out)
        failed = sum(not p.ok for p in probes)
    elif remote and not args.offline:
        async with gateway:
            for source in gateway.runtimes.sources.all() if gateway.runtimes.sources else []:
                detail = f": {source.last_error}" if source.last_error else ""
                print(
                    f"{source.label}: {source.state}, {len(source.tools)} tools{detail}", file=out
                )
                failed += source.state != "ready"
    elif remote:
        print(f"{len(remote)} remote tool sources not read (--offline)", file=out)
    runtime = gateway.runtime
    otel = gateway.otel
    print(f"tracing: {otel.describe() if otel is not None else 'off'}", file=out)
    # With every tool known, a rule that names none is a slip.
    for finding in findings(config, runtime, every_tool_known=not (remote and args.offline)):
        print(f"warning: {finding}", file=out)
    tenants = (
        "no tenants (open mode)" if config.tenants is None else f"{len(config.tenants)} tenants"
    )
    what = "probes failed" if args.probe else "tool sources could not be read"
    status = "ok" if not failed else f"{failed} {what}"
    print(
        f"{args.config}: {status} ({len(config.upstreams)} upstreams, {len(config.models)} "
        f"models, {len(runtime.registry)} tools, {tenants})",
        file=out,
    )
    return 1 if failed else 0

"""``toolgate tools list|show|call`` (docs/design.md §12): a tenant's tools as the model
sees them, and one call made with the gateway's own executor and egress policy."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any, TextIO

from gateway.chat_json import encode_tool
from gateway.config import GatewayConfig
from gateway.runtime.services import Gateway
from tool_registry import CallContext, ToolArgumentsInvalid, error_result


def add_commands(commands: Any, default_config: str) -> None:
    """The ``tools`` subcommands, on ``toolgate``'s parser."""
    tools = commands.add_parser("tools", help="a tenant's tools: list, show, call one")
    actions = tools.add_subparsers(dest="action", required=True)
    for name, text in (
        ("list", "the tools in play for a tenant"),
        ("show", "one tool's definition as the model sees it"),
        ("call", "make one call, as the loop would"),
    ):
        action = actions.add_parser(name, help=text)
        action.add_argument("--config", default=default_config, help="config file")
        action.add_argument("--tenant", help="tenant id (needed when there are several)")
        if name != "list":
            action.add_argument("tool", help="tool name")
        if name == "call":
            action.add_argument("--args", default="{}", help="arguments, as JSON")
            action.add_argument(
                "--header",
                action="append",
                default=[],
                help="a request header for bind, 'name: value' (repeatable)",
            )


def run(config: GatewayConfig, args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run one ``tools`` action. The gateway is started as it would serve (its remote
    sources read, MCP servers listed) without listening anywhere."""
    return asyncio.run(_run(Gateway(config), args, out or sys.stdout))


async def _run(gateway: Gateway, args: argparse.Namespace, out: TextIO) -> int:
    async with gateway:
        runtime = gateway.runtime
        tenants = {tenant.id: tenant for tenant in runtime.tenants.all()}
        if args.tenant is None and len(tenants) > 1:
            print(f"toolgate: name a --tenant: {', '.join(sorted(tenants))}", file=sys.stderr)
            return 2
        tenant = tenants.get(args.tenant) if args.tenant else next(iter(tenants.values()))
        if tenant is None:
            print(f"toolgate: no tenant {args.tenant!r}", file=sys.stderr)
            return 2
        if args.action == "list":
            for name in tenant.tools:
                tool = runtime.registry.get(name)
                if tool is not None:
                    description = tool.definition.description or ""
                    said = tenant.policy.of(tool)  # what the policy point reads of it
                    columns = [name, tool.source, said.effects, said.output, said.approval]
                    print("\t".join([*columns, description]), file=out)
            return 0
        tool = runtime.registry.get(args.tool) if args.tool in tenant.tools else None
        if tool is None:
            print(f"toolgate: tenant {tenant.id!r} has no tool {args.tool!r}", file=sys.stderr)
            return 2
        if args.action == "show":
            print(json.dumps(encode_tool(tool.definition), indent=2), file=out)
            return 0
        headers = {}
        for header in args.header:
            name, _, value = header.partition(":")
            headers[name.strip().lower()] = value.strip()
        try:
            prepared = tool.prepare(args.args, CallContext(tenant.id, headers))
        except ToolArgumentsInvalid as exc:
            result = error_result(str(exc), "invalid_args")
        else:
            result = await gateway.executor.execute(prepared)
    answer = {"outcome": result.outcome, "status": result.status, "content": result.content}
    print(json.dumps(answer, indent=2), file=out)
    return 0 if result.outcome == "ok" else 1

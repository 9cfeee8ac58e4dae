"""``toolgate serve``, ``toolgate check``, ``toolgate tools`` and ``toolgate example-tools``."""

from __future__ import annotations

import argparse
import ipaddress
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import uvicorn

from gateway.app import create_app
from gateway.cli import check as check_cli
from gateway.cli import replay as replay_cli
from gateway.cli import tools as tools_cli
from gateway.cli.example_tools import create_example_tools_app
from gateway.cli.protocol import EnvelopeHttpToolsProtocol
from gateway.config import GatewayConfig
from gateway.errors import ConfigError
from gateway.ops.gc_tuning import tune_gc
from gateway.ops.logs import configure_logging
from gateway.ops.redaction import redactor_of
from gateway.ops.telemetry import otel_settings
from gateway.runtime.loader import load_config

DEFAULT_CONFIG = "config/gateway.yaml"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def open_mode_refusal(config: GatewayConfig, host: str) -> str | None:
    """Why the gateway may not listen on ``host``, or None.

    Without tenants anyone who can reach the gateway uses it with no key, so that mode
    stays on loopback unless ``server.allow_open`` says otherwise.
    """
    if config.open_mode and not config.server.allow_open and not is_loopback(host):
        return (
            f"refusing to listen on {host} with no tenants configured (no API keys): "
            "add a tenants section, listen on a loopback address, or set server.allow_open: true"
        )
    return None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="toolgate", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    default = os.environ.get("TOOLGATE_CONFIG", DEFAULT_CONFIG)
    serve = commands.add_parser("serve", help="run the gateway")
    serve.add_argument("--config", default=default, help=f"config file (default {default})")
    serve.add_argument("--host", help="listen address (overrides server.host)")
    serve.add_argument("--port", type=int, help="listen port (overrides server.port)")
    serve.add_argument("--workers", type=int, help="worker processes (overrides server.workers)")
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    check_cli.add_command(commands, default)
    replay_cli.add_command(commands, default)
    example = commands.add_parser(
        "example-tools", help="serve the example configuration's tools (make run starts it)"
    )
    example.add_argument("--host", default="127.0.0.1")
    example.add_argument("--port", type=int, default=9100)
    tools_cli.add_commands(commands, default)
    return parser


def _serve(config: GatewayConfig, path: str, args: argparse.Namespace) -> int:
    host = args.host or config.server.host
    port = config.server.port if args.port is None else args.port
    workers = args.workers or config.server.workers
    refusal = open_mode_refusal(config, host)
    if refusal:
        print(f"toolgate: {refusal}", file=sys.stderr)
        return 2
    common: dict[str, Any] = {
        "host": host,
        "port": port,
        "log_level": args.log_level,
        "log_config": None,  # our JSON lines, not uvicorn's formats
        "access_log": False,  # gateway.access logs every request
        "lifespan": "on",
        "http": EnvelopeHttpToolsProtocol,  # its 400s for unparseable HTTP are envelopes
    }
    if workers == 1:
        app = create_app(config, config_path=path, announce=f"http://{host}:{port}/v1")
        # Log lines are redacted with the gateway's own redactor: a reload extends it.
        configure_logging(args.log_level, app.state.gateway.redactor)
        tune_gc()
        uvicorn.run(app, **common)
        return 0
    # Each worker process builds its own app from the same file; metrics are merged
    # over the workers through prometheus_client's multiprocess directory. SIGHUP to
    # this process makes uvicorn replace its workers, which read the file again.
    configure_logging(args.log_level, redactor_of(config))
    os.environ["TOOLGATE_CONFIG"] = str(Path(path).resolve())
    os.environ["TOOLGATE_LOG_LEVEL"] = args.log_level
    own_directory = "PROMETHEUS_MULTIPROC_DIR" not in os.environ
    if own_directory:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="toolgate-metrics-")
    try:
        uvicorn.run(
            "gateway.app:create_app_from_env",
            factory=True,
            workers=workers,
            timeout_worker_healthcheck=config.server.worker_healthcheck_s,
            **common,
        )
    finally:
        if own_directory:
            shutil.rmtree(os.environ.pop("PROMETHEUS_MULTIPROC_DIR"), ignore_errors=True)
    return 0


def _example_tools(args: argparse.Namespace) -> int:
    """Harmless demo tools (arithmetic, a made-up CRM): no keys of their own."""
    configure_logging("warning")
    uvicorn.run(
        create_example_tools_app(),
        host=args.host,
        port=args.port,
        log_level="warning",
        log_config=None,
        access_log=False,
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "example-tools":
        return _example_tools(args)
    try:
        config = load_config(args.config)
        otel_settings(config.otel, os.environ)  # a bad OTEL_* variable stops us here too
    except ConfigError as exc:
        print(f"toolgate: invalid configuration: {exc}", file=sys.stderr)
        return 2
    if args.command == "check":
        return check_cli.run(config, args)
    if args.command == "tools":
        return tools_cli.run(config, args)
    if args.command == "replay":
        return replay_cli.run(config, args)
    return _serve(config, args.config, args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

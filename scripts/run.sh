#!/bin/sh
# `make run`: the gateway on the example configuration, with the example tools beside it.
#
# The model server is whatever you have:
#   UPSTREAM_BASE_URL set      -> that server (any OpenAI-compatible one)
#   else OPENAI_API_KEY set    -> OpenAI, model $UPSTREAM_MODEL (default gpt-4o-mini)
#   else                       -> Ollama's default, http://127.0.0.1:11434/v1
# TOOLGATE_PORT (8080) and TOOLS_PORT (9100) move the two servers.
# The operator console is on, at /console: signed in with TOOLGATE_ADMIN_KEY, made
# here (and printed) unless you set one; TOOLGATE_CONSOLE=false turns it off.
set -eu
BIN=${BIN:-.venv/bin}
CONFIG=${CONFIG:-config/gateway.yaml}
TOOLS_PORT=${TOOLS_PORT:-9100}

if [ -z "${UPSTREAM_BASE_URL:-}" ] && [ -n "${OPENAI_API_KEY:-}" ]; then
    export UPSTREAM_BASE_URL=https://api.openai.com/v1
    export UPSTREAM_API_KEY="${UPSTREAM_API_KEY:-$OPENAI_API_KEY}"
    export UPSTREAM_MODEL="${UPSTREAM_MODEL:-gpt-4o-mini}"
fi
export TOOLS_BASE_URL="${TOOLS_BASE_URL:-http://127.0.0.1:$TOOLS_PORT}"
export TOOLGATE_CONSOLE="${TOOLGATE_CONSOLE:-true}"
if [ -z "${TOOLGATE_ADMIN_KEY:-}" ]; then
    TOOLGATE_ADMIN_KEY="tg-admin-$("$BIN/python" -c 'import secrets; print(secrets.token_urlsafe(24))')"
    export TOOLGATE_ADMIN_KEY
    if [ "$TOOLGATE_CONSOLE" = true ]; then
        echo "Console: http://127.0.0.1:${TOOLGATE_PORT:-8080}/console (sign in with the key $TOOLGATE_ADMIN_KEY, made for this run)"
    fi
fi

"$BIN/toolgate" example-tools --port "$TOOLS_PORT" &
tools=$!
trap 'kill "$tools" 2>/dev/null; wait "$tools" 2>/dev/null || true' EXIT INT TERM

set -- --config "$CONFIG"
if [ -n "${TOOLGATE_PORT:-}" ]; then
    set -- "$@" --port "$TOOLGATE_PORT"
fi
"$BIN/toolgate" serve "$@"

#!/usr/bin/env bash
# Before the tests: make sure the Redis at REDIS_URL (default 127.0.0.1:6379) answers.
# Starts a throw-away redis-server (no persistence) when nothing listens on a local
# address and the binary is installed; otherwise says what the Redis tests will need.
set -u
[ "${TOOLGATE_SKIP_REDIS:-}" = "1" ] && exit 0
url="${REDIS_URL:-redis://127.0.0.1:6379/0}"
hostport="${url#*://}"; hostport="${hostport#*@}"; hostport="${hostport%%/*}"
host="${hostport%%:*}"; port="${hostport##*:}"
[ "$port" = "$hostport" ] && port=6379

listening() { (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; }

listening && exit 0
case "$host" in
  127.0.0.1|localhost) ;;
  *) echo "ensure-redis: nothing answers at $host:$port; the Redis tests will fail"; exit 0 ;;
esac
if ! command -v redis-server >/dev/null 2>&1; then
  echo "ensure-redis: no Redis at $host:$port and redis-server is not installed"
  echo "  (apt-get install redis-server, or TOOLGATE_SKIP_REDIS=1 to skip the Redis tests)"
  exit 0
fi
redis-server --daemonize yes --bind 127.0.0.1 --port "$port" --save "" --appendonly no \
  --logfile "${TMPDIR:-/tmp}/toolgate-test-redis.log" >/dev/null
for _ in $(seq 1 50); do listening && { echo "ensure-redis: started redis-server on $port"; exit 0; }; sleep 0.1; done
echo "ensure-redis: redis-server did not come up on $port"

#!/usr/bin/env bash
# Makes docs/dashboard.png, docs/serve.md's picture of tq serve: a SQLite store
# with an hour of history in five queues (written by SQL, as a producer
# could), a worker running some jobs, then a headless Chromium screenshot.
# usage: docs/dashboard.sh [BUILD_DIR]   (needs chromium)
set -euo pipefail
tq=$(cd "${1:-build}" && pwd)/tq
out=$(cd "$(dirname "$0")" && pwd)/dashboard.png
dir=$(mktemp -d /tmp/tq-dashboard.XXXXXX)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$dir"' EXIT
export TQ_DB=$dir/store.db
"$tq" init >/dev/null
for q in emails images reports webhooks billing; do "$tq" queue "$q" >/dev/null; done
"$tq" queue images --max-attempts 2 >/dev/null
sqlite3 "$TQ_DB" "
WITH RECURSIVE m(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM m WHERE i < 3599),
 t(now) AS (SELECT CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)),
 q(name, every, ms) AS (VALUES ('emails', 1, 40), ('images', 2, 900), ('reports', 9, 4000),
                               ('webhooks', 1, 120))
INSERT INTO tq_jobs (queue, state, payload, attempts, created_at, started_at, finished_at, run_at)
SELECT name, 'done', '{\"n\":' || i || '}', 1, now - (3600 - i) * 1000000,
  now - (3600 - i) * 1000000 + 2000,
  now - (3600 - i) * 1000000 + 2000 + ms * (800 + abs(random() % 400)),
  now - (3600 - i) * 1000000
FROM m, t, q WHERE i % every = 0 AND (name <> 'webhooks' OR (i / 300) % 3 <> 1)"
# Dead jobs, with their errors.
fail() { # QUEUE PAYLOAD ERROR
    sqlite3 "$TQ_DB" "INSERT INTO tq_jobs (queue, state, payload, attempts, created_at,
      started_at, finished_at, last_error) SELECT '$1', 'dead', '$2', 3,
      t - 600000000, t - 5000000, t - 4000000, '$3' FROM (SELECT CAST((julianday('now')
      - 2440587.5) * 86400000000 AS INTEGER) AS t)"
}
fail images '{"src":"s3://uploads/8841.heic"}' 'exit status 1: convert: no decode delegate for this image format HEIC'
fail images '{"src":"s3://uploads/8902.png"}' 'exit status 137: killed by SIGKILL (out of memory?)'
fail webhooks '{"url":"https://hooks.example.com/a1"}' 'exit status 22: curl: (22) The requested URL returned error: 503'
fail emails '{"to":"ops@example.com"}' 'exit status 1: smtp: 550 5.1.1 mailbox unavailable'
for i in $(seq 1 40); do "$tq" enqueue --queue reports "{\"report\":$i}" >/dev/null; done
for i in $(seq 1 12); do "$tq" enqueue --queue billing "{\"invoice\":$i}" >/dev/null; done
"$tq" queue billing --pause >/dev/null
"$tq" enqueue --queue emails --delay 10m '{"digest":"weekly"}' >/dev/null
"$tq" work --queue reports --concurrency 3 --name reports-1 -- sleep 30 2>/dev/null &
pids+=($!)
"$tq" serve --listen 127.0.0.1:0 >"$dir/serve.out" 2>/dev/null &
pids+=($!)
for _ in $(seq 1 100); do grep -q listening "$dir/serve.out" && break; sleep 0.1; done
url=$(grep -o 'http://127.0.0.1:[0-9]*' "$dir/serve.out")
sleep 2
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$dir/c" \
    --window-size=1400,1060 --virtual-time-budget=5000 --screenshot="$out" "$url/" 2>/dev/null
echo "wrote $out"

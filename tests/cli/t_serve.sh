# tq serve over a store holding jobs in every state: /metrics checked by
# promtool and against the store; the JSON API against the CLI's --json;
# actions refused without a token, with a wrong one and by GET, done with
# the right one (header or form field); bad requests, oversized ones and
# slow clients (300 that never end their headers, cut after 10 s while a
# normal client is answered); a password in --db shown nowhere; and the
# dashboard in headless Chromium: its counts, XSS payloads rendered as
# text, a job's detail (text and hex), and a screenshot kept as a test
# artefact.
. "$(dirname "$0")/lib.sh"
"$TQ" init >/dev/null
SRC=$(cd "$(dirname "$0")/../.." && pwd)
ART=${TQ_TEST_ARTIFACTS:-$TQ_TEST_TMP/artifacts}
mkdir -p "$ART"
PROMTOOL=$("$SRC/scripts/promtool.sh" "$TQ_TEST_TMP/promtool")
command -v chromium >/dev/null || fail "chromium is not installed (make test installs it)"

# ---- bad input: one line, exit 2, nothing stored ---------------------------
before=$(fingerprint)
expect_exit 2 "$TQ" serve --listen nonsense
grep -q "expected ADDRESS:PORT" "$T/err" || fail "bad --listen: $(cat "$T/err")"
expect_exit 2 "$TQ" serve --listen 127.0.0.1:70000
expect_exit 2 "$TQ" serve --listen no.such.host.invalid:80
expect_exit 2 "$TQ" serve --token-file "$T/none"
printf 'short\n' >"$T/short"
expect_exit 2 "$TQ" serve --token-file "$T/short"
grep -q "at least 16" "$T/err" || fail "short token: $(cat "$T/err")"
printf '0123456789abcdef\000rest\n' >"$T/nul"
expect_exit 2 "$TQ" serve --token-file "$T/nul"
grep -q "NUL" "$T/err" || fail "a NUL in the token: $(cat "$T/err")"
expect_exit 2 "$TQ" serve --token-file "$T"
grep -qi "directory" "$T/err" || fail "a directory as the token file: $(cat "$T/err")"
expect_exit 2 "$TQ" serve extra
expect_exit 2 "$TQ" serve --bogus
expect_eq "$(fingerprint)" "$before" "the store after refused serves"

# ---- a store with jobs in every state --------------------------------------
XSS='<script>document.body.setAttribute("data-pwned","1")</script><img src=x onerror="document.body.setAttribute(&quot;data-pwned&quot;,&quot;2&quot;)">'
printf '%s' "$XSS" >"$T/xss"
handler h.sh '
p=$(cat)
case "$p" in
hold) while [ ! -f "'"$T"'/release" ]; do sleep 0.05; done ;;
fail*) printf "%s\n" "$(cat "'"$T"'/xss")" >&2; exit 1 ;;
*) ;;
esac'
"$TQ" queue alpha --max-attempts 1 >/dev/null
"$TQ" queue beta >/dev/null
id_of() { "$TQ" enqueue --json "$@" | jq -r .id; }
for i in 1 2 3 4; do id_of --queue alpha "ok $i" >/dev/null; done
dead1=$(id_of --queue alpha fail-one)
dead2=$(id_of --queue alpha "fail$XSS")
printf 'fail\000\001\002binary\377' >"$T/bin"
deadbin=$(id_of --queue alpha - <"$T/bin")
hold=$(id_of --queue alpha hold)
"$TQ" work --queue alpha --concurrency 2 --name serve-w1 -- "$T/h.sh" 2>"$T/work.log" &
BG=$!
BG_PIDS+=("$BG")
WORKER=$BG
counts() { [ "$(sql "SELECT count(*) FROM $JOBS WHERE queue = 'alpha' AND state = '$1'")" = "$2" ]; }
wait_for 30 counts done 4
wait_for 30 counts dead 3
wait_for 30 counts running 1
"$TQ" queue alpha --pause >/dev/null
parent=$(id_of --queue alpha "parent")
child=$(id_of --queue alpha --after "$parent" "child")
cancelled=$(id_of --queue alpha "to cancel")
"$TQ" cancel "$cancelled" >/dev/null
later=$(id_of --queue alpha --delay 1h later)
"$TQ" queue beta --pause >/dev/null
for i in 1 2; do id_of --queue beta "b $i" >/dev/null; done
"$TQ" cron set nightly --queue beta --schedule '0 3 * * *' --tz Europe/Berlin >/dev/null
# alpha: ready 2 (1 not due), running 1, waiting 1, done 4, dead 3, cancelled 1

# ---- the server ------------------------------------------------------------
PWURL=$TQ_DB
SECRET=""
if [ "$ENGINE" = postgres ]; then
    # A password in the URL (the cluster trusts local connections, so it
    # is accepted and unused): it must appear nowhere.
    SECRET=Sekr3tPassw0rdXYZ
    PWURL=${TQ_DB/postgresql:\/\/\//postgresql://tq:$SECRET@/}\&sslpassword=$SECRET
    [ "$PWURL" != "$TQ_DB" ] || fail "could not put a password in $TQ_DB"
fi
start_serve() { # LOGNAME [ARGS...]: starts tq serve, sets $URL
    local log=$1
    shift
    "$TQ" serve --db "$PWURL" --listen 127.0.0.1:0 "$@" >"$T/$log.out" 2>"$T/$log.log" &
    BG=$!
    BG_PIDS+=("$BG")
    SERVE=$BG
    wait_for 30 grep -q "listening on" "$T/$log.out"
    URL=$(grep -o 'http://127.0.0.1:[0-9]*' "$T/$log.out")
}
stop_serve() {
    kill -TERM "$SERVE"
    wait_rc "$SERVE"
    expect_eq "$RC" 0 "tq serve's exit on SIGTERM"
}
sleep 1.5 # so that every job above finished more than the settling second before the start
start_serve serve1
grep -q "actions off" "$T/serve1.out" || fail "serve does not say actions are off"

# ---- /metrics ----------------------------------------------------------------
metric() { # NAME{LABELS}: its value in $T/metrics
    awk -v k="$1" '$1 == k { print $2 }' "$T/metrics"
}
curl -fsS "$URL/metrics" -o "$T/metrics" -D "$T/headers"
grep -qi '^content-type: text/plain; version=0.0.4' "$T/headers" || fail "metrics content type"
"$PROMTOOL" check metrics <"$T/metrics" >"$T/promtool.log" 2>&1 ||
    fail "promtool check metrics: $(cat "$T/promtool.log")"
for st in ready:2 running:1 waiting:1 done:4 dead:3 cancelled:1; do
    expect_eq "$(metric "tq_jobs{queue=\"alpha\",state=\"${st%:*}\"}")" "${st#*:}" "tq_jobs alpha ${st%:*}"
done
expect_eq "$(metric 'tq_jobs{queue="beta",state="ready"}')" 2 "tq_jobs beta ready"
expect_eq "$(metric 'tq_jobs_delayed{queue="alpha"}')" 1 "delayed"
expect_eq "$(metric 'tq_queue_paused{queue="beta"}')" 1 "beta paused"
expect_eq "$(metric 'tq_workers{status="alive"}')" 1 "alive workers"
age=$(metric 'tq_oldest_ready_age_seconds{queue="beta"}')
awk -v a="$age" 'BEGIN { exit !(a > 0 && a < 600) }' || fail "oldest ready age of beta: $age"
# The counters count what finishes while the server runs, from 0 at its
# start (read a second after each job finished): in queue eps, 2 done, 1
# dead, 1 cancelled; alpha's jobs finished before the start.
"$TQ" queue eps --max-attempts 1 >/dev/null
for p in ok1 ok2 fail-eps; do id_of --queue eps "$p" >/dev/null; done
"$TQ" cancel "$(id_of --queue eps --delay 1h later)" >/dev/null
"$TQ" work --queue eps --drain -- "$T/h.sh" 2>>"$T/work.log" || true
expect_eq "$(sql "SELECT count(*) FROM $JOBS WHERE queue = 'eps' AND state = 'done'")" 2 "eps done"
finished_ok() {
    curl -fsS "$URL/metrics" -o "$T/metrics" &&
        [ "$(metric 'tq_jobs_finished_total{queue="eps",state="done"}')" = 2 ] &&
        [ "$(metric 'tq_jobs_finished_total{queue="eps",state="dead"}')" = 1 ] &&
        [ "$(metric 'tq_jobs_finished_total{queue="eps",state="cancelled"}')" = 1 ]
}
wait_for 10 finished_ok
for st in done dead cancelled; do
    expect_eq "$(metric "tq_jobs_finished_total{queue=\"alpha\",state=\"$st\"}")" 0 "alpha's $st before the start"
done
expect_eq "$(metric 'tq_job_duration_seconds_count{queue="eps"}')" 2 "durations counted"
expect_eq "$(metric 'tq_job_duration_seconds_bucket{queue="eps",le="+Inf"}')" 2 "+Inf bucket"
grep -q '^tq_scrape_duration_seconds [0-9.]*$' "$T/metrics" || fail "no scrape duration"
"$PROMTOOL" check metrics <"$T/metrics" >"$T/promtool.log" 2>&1 ||
    fail "promtool check metrics: $(cat "$T/promtool.log")"

# ---- the JSON API --------------------------------------------------------------
api() { curl -sS -o "$T/body" -w '%{http_code}' "$@"; }
expect_eq "$(api "$URL/api/overview")" 200 "overview"
expect_eq "$(jq -c '.queues[] | select(.name == "alpha") | .counts' "$T/body")" \
    '{"ready":2,"running":1,"done":4,"dead":3,"cancelled":1,"waiting":1}' "overview counts"
expect_eq "$(jq -r '.workers[0].name + " " + .workers[0].status + " " + (.workers[0].running|tostring)' "$T/body")" \
    "serve-w1 alive 1" "overview workers"
expect_eq "$(jq '.queues[] | select(.name == "alpha") | .done_per_minute | add' "$T/body")" 4 "chart"
expect_eq "$(jq .actions "$T/body")" false "actions in the overview"
# Finished jobs page newest finished first, the others newest first.
read -r d1 d2 d3 <<<"$(sql "SELECT id FROM $JOBS WHERE queue = 'alpha' AND state = 'dead'
    ORDER BY finished_at DESC, id DESC" | tr '\n' ' ')"
expect_eq "$(api "$URL/api/jobs?state=dead&queue=alpha&limit=2")" 200 "jobs"
expect_eq "$(jq -r 'map(.id) | join(" ")' "$T/body")" "$d1 $d2" "dead jobs, newest finished first"
expect_eq "$(api "$URL/api/jobs?state=dead&queue=alpha&limit=2&before=$d2")" 200 "page 2"
expect_eq "$(jq -r 'map(.id) | join(" ")' "$T/body")" "$d3" "the next page"
expect_eq "$(api "$URL/api/jobs?state=dead&before=$hold")" 200 "a page after a job not dead"
expect_eq "$(jq length "$T/body")" 0 "the page after a job not in the state"
# A long binary payload's preview stays binary (base64), cut at 256 bytes.
head -c 400 /dev/zero | tr '\0' '\200' >"$T/bin400"
bin400=$(id_of --queue gamma - <"$T/bin400")
expect_eq "$(api "$URL/api/jobs?queue=gamma")" 200 "a binary payload's list"
cut=$(jq -r '.[0].payload_base64' "$T/body" | base64 -d | wc -c)
[ "$cut" -ge 253 ] && [ "$cut" -le 256 ] || fail "the binary preview has $cut bytes"
expect_eq "$(jq -r '.[0].payload_cut' "$T/body")" true "the binary preview is cut"
expect_eq "$(api "$URL/api/jobs/$dead2")" 200 "a dead job"
expect_eq "$(jq -r .last_error "$T/body")" "exit status 1: $XSS" "a last error, as it is"
for st in "ready:$later $parent" "running:$hold" "waiting:$child"; do
    expect_eq "$(api "$URL/api/jobs?state=${st%%:*}&queue=alpha")" 200 "${st%%:*} jobs"
    expect_eq "$(jq -r 'map(.id) | join(" ")' "$T/body")" "${st#*:}" "${st%%:*} jobs listed"
done
expect_eq "$(api "$URL/api/jobs/$dead2")" 200 "one job"
"$TQ" show "$dead2" --json | jq -S . >"$T/show.json"
jq -S . "$T/body" | diff - "$T/show.json" >/dev/null || fail "/api/jobs/ID differs from tq show --json"
expect_eq "$(api "$URL/api/queues")" 200 "queues"
"$TQ" queue --json | jq -S . >"$T/queues.json"
jq -S . "$T/body" | diff - "$T/queues.json" >/dev/null || fail "/api/queues differs from tq queue --json"
expect_eq "$(api "$URL/api/schedules")" 200 "schedules"
"$TQ" cron list --json | jq -S . >"$T/cron.json"
jq -S . "$T/body" | diff - "$T/cron.json" >/dev/null || fail "/api/schedules differs from tq cron list --json"
expect_eq "$(api "$URL/api/workers")" 200 "workers"
expect_eq "$(jq -r '.[0].name' "$T/body")" serve-w1 "workers"
# Bad requests.
expect_eq "$(api "$URL/api/jobs?state=bogus")" 400 "unknown state"
expect_eq "$(api "$URL/api/jobs?limit=100000")" 400 "limit too large"
expect_eq "$(api "$URL/api/jobs?before=-3")" 400 "negative before"
expect_eq "$(api "$URL/api/jobs?queue=no%20way")" 400 "bad queue name"
expect_eq "$(api "$URL/api/jobs/abc")" 404 "a job id that is not a number"
expect_eq "$(api "$URL/api/jobs/999999")" 404 "no such job"
expect_eq "$(api "$URL/nope")" 404 "unknown path"
expect_eq "$(api -X PUT "$URL/")" 405 "PUT"
# A browser page on another name resolved to 127.0.0.1 (DNS rebinding).
expect_eq "$(api -H 'Host: evil.example' "$URL/api/overview")" 403 "a foreign Host"
expect_eq "$(api -H "Host: localhost:${URL##*:}" "$URL/api/overview")" 200 "Host localhost"
exec {h2}<>"/dev/tcp/127.0.0.1/${URL##*:}"
printf 'GET /api/overview HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\n\r\n' >&$h2
read -r -t 5 status <&$h2 || fail "no answer with two Hosts"
exec {h2}>&-
[[ "$status" == *" 403 "* ]] || fail "two Hosts: $status"
code=$(curl -sS -o /dev/null -w '%{http_code}' -H "X-Big: $(head -c 40000 /dev/zero | tr '\0' a)" "$URL/metrics" || true)
[ "$code" != 200 ] || fail "a 40 KB header was served"

# ---- actions without a token: refused, nothing changes ---------------------------
st_before=$(job "$dead1" state)
expect_eq "$(api -X POST "$URL/api/jobs/$dead1/retry")" 403 "retry without a token configured"
grep -q "actions are off" "$T/body" || fail "the 403 does not say why: $(cat "$T/body")"
expect_eq "$(api -X POST -H 'Authorization: Bearer whatever-it-is-here' "$URL/api/queues/beta/resume")" 403 "resume without a token configured"
expect_eq "$(api "$URL/api/jobs/$dead1/retry")" 404 "an action by GET"
expect_eq "$(job "$dead1" state)" "$st_before" "the job after refused actions"
expect_eq "$("$TQ" queue beta --json | jq .paused)" true "beta after a refused resume"

# ---- slow clients and huge bodies do not stop the server --------------------------
port=${URL##*:}
# A body announced at 10 GB is refused before it is read.
exec {big}<>"/dev/tcp/127.0.0.1/$port"
printf 'POST /api/jobs/1/retry HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10000000000\r\n\r\n' >&$big
read -r -t 5 status <&$big || fail "no answer to a 10 GB body"
exec {big}>&-
[[ "$status" == *" 413 "* ]] || fail "a 10 GB body: $status"
slow=()
for i in $(seq 1 20); do
    exec {fd}<>"/dev/tcp/127.0.0.1/$port"
    printf 'GET /metrics HTTP/1.1\r\nHost: x\r\n' >&$fd # never finished
    slow+=("$fd")
done
curl -fsS --max-time 5 "$URL/metrics" -o /dev/null || fail "the server stopped answering beside slow clients"
for fd in "${slow[@]}"; do exec {fd}>&-; done

# ---- slow requests are cut after 10 s, and others are answered meanwhile ----------
# 300 connections from five addresses, more than the server's 256 slots, each
# sending one header line every 3 s and never the end of its headers (the
# server's silence timeout never fires). The server takes 32 from each
# address (160) and refuses the others at once; it must close each one it
# took 10 s after its opening, since a request must arrive whole within
# 10 s, and a normal client must be answered within 12 s all the same
# (without that bound, and with 64 an address, the slow clients held every
# slot for as long as they liked and no one else was answered).
perl "$SRC/tests/cli/slow_clients.pl" "$port" 60 14 "$T/slow.ready" >"$T/slow.out" 2>"$T/slow.log" &
BG=$!
BG_PIDS+=("$BG")
SLOWC=$BG
wait_for 20 test -f "$T/slow.ready"
ms() { local t=${EPOCHREALTIME//[.,]/}; echo $((t / 1000)); }
t0=$(ms)
answered=""
while [ -z "$answered" ] && [ $(($(ms) - t0)) -lt 15000 ]; do
    code=$(curl -sS -o /dev/null -w '%{http_code}' --max-time 3 "$URL/" 2>/dev/null || true)
    [ "$code" != 200 ] || answered=$(($(ms) - t0))
done
wait_rc "$SLOWC"
expect_eq "$RC" 0 "the slow clients' exit"
read -r held first last refused open <<<"$(awk '
    $1 == "open" { o++; next }
    $1 < 1 { r++; next }
    { h++; if (min == "" || $1 < min) min = $1; if ($1 > max) max = $1 }
    END { printf "%d %.2f %.2f %d %d\n", h, min, max, r, o }' "$T/slow.out")"
normal="not answered in 15 s"
[ -z "$answered" ] || normal="answered after $answered ms"
slowsum="$held held, closed $first to $last s after opening; $refused refused at once; $open open after 14 s; a normal client $normal"
echo "slow clients: $slowsum"
[ -n "$answered" ] && [ "$answered" -le 12000 ] || fail "a normal client was starved: $slowsum"
[ "$open" = 0 ] && [ "$held" -gt 0 ] || fail "slow requests not cut: $slowsum"
awk -v a="$first" -v b="$last" 'BEGIN { exit !(a >= 9.5 && b <= 13) }' ||
    fail "slow requests cut at the wrong time: $slowsum"

# ---- the dashboard in Chromium ----------------------------------------------------------
browse() { # OUT URL [ARGS...]: the DOM after the page's scripts ran
    local out=$1 url=$2
    shift 2
    timeout 60 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars \
        --user-data-dir="$T/chromium" --window-size=1400,1100 \
        --virtual-time-budget=5000 "$@" --dump-dom "$url" >"$out" 2>>"$T/chromium.log" ||
        fail "chromium failed on $url"
}
"$TQ" work --queue nothing-here --name aaa-stopped --drain -- true 2>/dev/null # a stopped worker
browse "$T/dom" "$URL/"
grep -q 'data-ready="1"' "$T/dom" || fail "the dashboard did not render (no data-ready)"
# Alive workers first; the stopped one after them, folded behind a button.
grep -o '<tr data-worker="[^"]*"[^>]*>' "$T/dom" >"$T/wrows"
expect_eq "$(head -1 "$T/wrows")" '<tr data-worker="serve-w1">' "the first worker row is the live one"
grep -q '<tr data-worker="aaa-stopped" hidden="">' "$T/wrows" || fail "the stopped worker is not folded: $(cat "$T/wrows")"
grep -qE 'id="workers-fold">show the [1-9][0-9]* not alive<' "$T/dom" ||
    fail "no button for the folded workers: $(grep -o '<button[^>]*workers-fold[^<]*<' "$T/dom")"
cell() { grep -o "data-q=\"$1\" data-s=\"$2\">[^<]*<" "${DOM:-$T/dom}" | sed 's/.*>\(.*\)</\1/'; }
for st in ready:1 delayed:1 running:1 waiting:1 done:4 dead:3 cancelled:1; do
    expect_eq "$(cell alpha "${st%:*}")" "${st#*:}" "the page's alpha ${st%:*}"
done
expect_eq "$(cell beta ready)" 2 "the page's beta ready"
grep -q 'data-queue="beta"><td>beta <span class="badge paused">paused' "$T/dom" || fail "beta not shown paused"
grep -q 'data-worker="serve-w1"' "$T/dom" || fail "the worker is not shown"
grep -q '<tr data-schedule="nightly"><td>nightly</td><td>beta</td><td>0 3 \* \* \*</td><td>Europe/Berlin</td>' "$T/dom" ||
    fail "the schedule is not shown"
grep -q "data-job=\"$dead2\"" "$T/dom" || fail "the dead job is not listed"
grep -qE 'data-pwned="[12]"' "$T/dom" && fail "a payload's script ran in the page"
grep -qF '&lt;script&gt;document.body.setAttribute' "$T/dom" || fail "the error is not shown as text"
browse "$T/dom2" "$URL/#job=$dead2"
grep -q "data-job=\"$dead2\"" "$T/dom2" || fail "the job's detail did not open"
grep -qE 'data-pwned="[12]"' "$T/dom2" && fail "a payload's script ran in the detail"
grep -qF 'id="detail-payload">fail&lt;script&gt;' "$T/dom2" || fail "the payload is not shown as text"
# A batch's callback (--when ended): its page says how far the batch is.
batch=$(id_of --queue gamma --after "$dead2,$later" --when ended "batch")
browse "$T/dom_batch" "$URL/#job=$batch"
grep -qF 'data-field="batch">1 of 2 ended: 0 done, 1 failed<' "$T/dom_batch" ||
    fail "the batch's progress is not shown: $(grep -o 'data-field="batch">[^<]*' "$T/dom_batch")"
browse "$T/dom3" "$URL/#job=$deadbin"
grep -qF '66 61 69 6c 00 01 02 62' "$T/dom3" || fail "the binary payload is not shown in hex"
browse "$T/shot.log" "$URL/" --screenshot="$ART/dashboard-$ENGINE.png"
[ -s "$ART/dashboard-$ENGINE.png" ] || fail "no screenshot"

# ---- a lost connection: answered with an error, then connected again ---------------
if [ "$ENGINE" = postgres ]; then
    sql "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
        WHERE query LIKE '%$SCHEMA.%' AND pid <> pg_backend_pid()" >/dev/null
    api "$URL/metrics" >/dev/null || true
    wait_for 10 curl -fsS -o /dev/null "$URL/metrics"
    expect_eq "$(api "$URL/api/overview")" 200 "the overview after reconnecting"
fi

# ---- a password in --db is nowhere ----------------------------------------------
if [ -n "$SECRET" ]; then
    for f in "$T"/serve1.out "$T"/serve1.log "$T"/metrics "$T"/headers "$T"/dom "$T"/dom2; do
        grep -q "$SECRET" "$f" && fail "the password appears in $(basename "$f")"
    done
    curl -sS -D - "$URL/api/overview" | grep -q "$SECRET" && fail "the password appears in the overview"
fi
stop_serve

# ---- actions with a token ------------------------------------------------------------------
TOKEN=t0ken-$(od -An -tx8 -N8 /dev/urandom | tr -d ' ')
printf '%s\n' "$TOKEN" >"$T/token"
start_serve serve2 --token-file "$T/token"
grep -q "actions on" "$T/serve2.out" || fail "serve does not say actions are on"
grep -q "$TOKEN" "$T/serve2.out" "$T/serve2.log" && fail "the token is printed"
expect_eq "$(api -X POST "$URL/api/jobs/$dead1/retry")" 403 "retry without the token"
expect_eq "$(api -X POST -H "Authorization: Bearer ${TOKEN}x" "$URL/api/jobs/$dead1/retry")" 403 "a longer token"
wrong=${TOKEN%?}Z
expect_eq "$(api -X POST -H "Authorization: Bearer $wrong" "$URL/api/jobs/$dead1/retry")" 403 "a wrong token of the same length"
expect_eq "$(api -X POST -H "X-TQ-Token: ${TOKEN:0:10}" "$URL/api/jobs/$dead1/retry")" 403 "a prefix of the token"
expect_eq "$(job "$dead1" state)" dead "the job after refused retries"
expect_eq "$(api -X POST -H "Authorization: Bearer $TOKEN" "$URL/api/jobs/$dead1/retry")" 200 "retry with the token"
expect_eq "$(job "$dead1" state)" ready "the job after its retry (alpha is paused)"
expect_eq "$(api -X POST -H "X-TQ-Token: $TOKEN" "$URL/api/jobs/$dead1/cancel")" 200 "cancel with the token"
expect_eq "$(job "$dead1" state)" cancelled "the job after its cancel"
expect_eq "$(api -X POST -d "token=$TOKEN" "$URL/api/queues/beta/resume")" 200 "resume with the token as a form field"
expect_eq "$("$TQ" queue beta --json | jq .paused)" false "beta after resume"
expect_eq "$(api -X POST -d "token=$TOKEN" "$URL/api/queues/beta/pause")" 200 "pause"
expect_eq "$("$TQ" queue beta --json | jq .paused)" true "beta after pause"
expect_eq "$(api -X POST -H "X-TQ-Token: $TOKEN" "$URL/api/queues/alpha/retry-dead")" 200 "retry the dead jobs of alpha"
expect_eq "$(jq .retried "$T/body")" 2 "jobs retried"
expect_eq "$(api -X POST -H "X-TQ-Token: $TOKEN" "$URL/api/queues/nosuch/pause")" 404 "pause of an unknown queue"
"$TQ" queue --json | jq -e 'map(.name) | index("nosuch")' >/dev/null && fail "a refused pause created a queue"
expect_eq "$(api -X POST -H "X-TQ-Token: $TOKEN" "$URL/api/jobs/$dead2/cancel")" 200 "cancel a ready job"
expect_eq "$(api -X POST -H "X-TQ-Token: $TOKEN" "$URL/api/jobs/$dead2/cancel")" 409 "cancel a cancelled job"
expect_eq "$(api -X POST -H "X-TQ-Token: $TOKEN" "$URL/api/jobs/$dead2/explode")" 404 "an unknown action"
head -c 5000 /dev/zero | tr '\0' a >"$T/bigbody"
expect_eq "$(api -X POST -H "X-TQ-Token: $TOKEN" --data-binary @"$T/bigbody" "$URL/api/jobs/$dead2/retry")" 413 "a body over 4 KiB"
expect_eq "$(job "$dead2" state)" cancelled "the job after a refused oversized request"
# A multipart part without a name (the form parser gives no key).
curl -sS -o /dev/null -H 'Content-Type: multipart/form-data; boundary=X' \
    --data-binary $'--X\r\n\r\nv\r\n--X--\r\n' "$URL/api/jobs/$dead2/retry" || true
curl -fsS --max-time 5 "$URL/metrics" -o /dev/null || fail "the server died on a nameless part"
expect_eq "$(api -X POST -d "token=$TOKEN&token=$TOKEN" "$URL/api/queues/beta/resume")" 403 "a token given twice"

# ---- 100 queues and 10,000 dead jobs: the page lists them all, paged ----
for i in $(seq -w 0 99); do echo "q$i"; done >"$T/queues"
if [ "$ENGINE" = postgres ]; then
    sql "INSERT INTO $SCHEMA.queues (name) SELECT 'q' || to_char(i, 'FM00')
        FROM generate_series(0, 99) i;
        INSERT INTO $JOBS (queue, state, payload, attempts, created_at, started_at,
          finished_at, last_error)
        SELECT 'many', 'dead', convert_to('p' || i, 'UTF8'), 3, now(), now(),
          now() - i * interval '1 millisecond', 'error ' || i
        FROM generate_series(1, 10000) i" >/dev/null
else
    sql "WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i < 99)
        INSERT INTO tq_queues (name) SELECT printf('q%02d', i) FROM c;
        WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 10000),
          t(now) AS (SELECT CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER))
        INSERT INTO tq_jobs (queue, state, payload, attempts, created_at, started_at,
          finished_at, last_error)
        SELECT 'many', 'dead', 'p' || i, 3, now, now, now - i * 1000, 'error ' || i FROM c, t"
fi
expect_eq "$(api -X POST -H "X-TQ-Token: $TOKEN" "$URL/api/queues/many/pause")" 200 "an action asks for a count"
many_counted() {
    curl -fsS "$URL/metrics" -o "$T/metrics" &&
        [ "$(metric 'tq_jobs{queue="many",state="dead"}')" = 10000 ]
}
wait_for 10 many_counted
browse "$T/dom4" "$URL/"
expect_eq "$(grep -o 'data-queue="[^"]*"' "$T/dom4" | sort -u | wc -l)" 105 "queues on the page"
expect_eq "$(DOM=$T/dom4 cell many dead)" 10,000 "the page's dead count of 10,000"
expect_eq "$(grep -o 'data-job="[0-9]*"' "$T/dom4" | wc -l)" 50 "dead jobs on the first page"
grep -qE '<button id="older" type="button" data-next="[0-9]+">' "$T/dom4" || fail "no enabled 'older' button"
pages=0
before=""
while :; do
    api "$URL/api/jobs?state=dead&queue=many&limit=500${before:+&before=$before}" >/dev/null
    n=$(jq length "$T/body")
    [ "$n" -gt 0 ] || break
    jq -r '.[].last_error' "$T/body" >>"$T/paged"
    before=$(jq -r '.[-1].id' "$T/body")
    pages=$((pages + 1))
done
expect_eq "$pages" 20 "pages of 500"
expect_eq "$(sort -u "$T/paged" | wc -l)" 10000 "dead jobs paged, each once"
expect_eq "$(head -1 "$T/paged") $(tail -1 "$T/paged")" "error 1 error 10000" "newest finished first"
stop_serve

touch "$T/release"
kill -TERM "$WORKER"
wait_rc "$WORKER"
echo "ok: tq serve ($ENGINE)"

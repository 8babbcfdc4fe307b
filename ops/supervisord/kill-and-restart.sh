#!/usr/bin/env bash
# Runs cairn-worker under a real supervisord with ops/supervisord/cairn-worker.conf,
# kill -9s the worker in the middle of its work, and shows that supervisord restarted it
# and that every queued job ended `done` exactly once, with no observation lost or doubled.
#
#   ops/supervisord/kill-and-restart.sh [path/to/cairn-worker]
#
# Needs python3 (a slow fake model API and the queue check) and supervisord (installed
# with apt-get when missing and run as root). Everything lives in a temp dir that is
# removed at the end; nothing touches ~/.cairn.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
worker="${1:-}"
if [[ -z "$worker" ]]; then
    (cd "$repo" && cargo build --quiet --bin cairn-worker)
    worker="$repo/target/debug/cairn-worker"
fi
worker="$(cd "$(dirname "$worker")" && pwd)/$(basename "$worker")"
[[ -x "$worker" ]] || { echo "error: no cairn-worker at $worker" >&2; exit 2; }

if ! command -v supervisord >/dev/null; then
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
        echo "installing supervisor (apt-get)..."
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq supervisor >/dev/null
    else
        echo "error: supervisord is not installed (Debian: apt-get install supervisor)" >&2
        exit 2
    fi
fi

jobs_total=${JOBS:-24}
tmp="$(mktemp -d)"
data="$tmp/cairn"
mkdir -p "$data/logs"
sup_pid=""
model_pid=""
cleanup() {
    if [[ -n "$sup_pid" ]]; then
        supervisorctl -c "$tmp/supervisord.conf" shutdown >/dev/null 2>&1 || true
        for _ in $(seq 100); do kill -0 "$sup_pid" 2>/dev/null || break; sleep 0.1; done
    fi
    [[ -n "$model_pid" ]] && kill "$model_pid" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT

# A fake Messages API: 0.4 s per call, one observation per job, named after the job.
cat >"$tmp/model.py" <<'PY'
import http.server, json, re, sys, time
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0))).decode()
        time.sleep(0.4)
        names = re.findall(r"echo (job-[0-9]+)", body)
        text = "".join(f"<observation><type>change</type><title>Ran {n}</title></observation>" for n in names) or "<none/>"
        out = json.dumps({"type": "message", "content": [{"type": "text", "text": text}],
                          "usage": {"input_tokens": 100, "output_tokens": 10}}).encode()
        try:
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)
        except BrokenPipeError:
            pass  # the worker that asked was killed
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
PY
python3 "$tmp/model.py" >"$tmp/port" &
model_pid=$!
for _ in $(seq 50); do [[ -s "$tmp/port" ]] && break; sleep 0.1; done
port="$(cat "$tmp/port")"

# The migrated database with the jobs queued, written the way cairn-hook writes them
# (a session, its prompt, one job per tool call), from the real PostToolUse fixture.
"$worker" --data-dir "$data" --once >/dev/null 2>&1 || true
python3 - "$data/cairn.db" "$repo/tests/fixtures/claude-code-hooks/PostToolUse.json" "$jobs_total" <<'PY'
import json, sqlite3, sys, time
db, fixture, total = sys.argv[1], sys.argv[2], int(sys.argv[3])
hook = json.load(open(fixture))
now = int(time.time() * 1000)
c = sqlite3.connect(db)
with c:
    for s in range(3):
        sid = f"demo-session-{s}"
        c.execute("INSERT INTO sessions (session_id, project, cwd, prompt_counter, started_at, updated_at) VALUES (?, 'acme-api', ?, 1, ?, ?)", (sid, hook["cwd"], now, now))
        c.execute("INSERT INTO user_prompts (session_id, project, prompt_number, prompt_text, created_at) VALUES (?, 'acme-api', 1, 'please do the full tour', ?)", (sid, now))
    for j in range(total):
        sid = f"demo-session-{j % 3}"
        ev = {"tool_name": hook["tool_name"], "tool_use_id": f"toolu_{j}", "tool_input": dict(hook["tool_input"], command=f"echo job-{j}"),
              "tool_response": hook["tool_response"], "cwd": hook["cwd"], "prompt_id": hook["prompt_id"], "occurred_at": now}
        c.execute("INSERT INTO pending_messages (session_id, project, kind, prompt_number, payload, dedupe_key, available_at, created_at, updated_at) VALUES (?, 'acme-api', 'observation', 1, ?, ?, ?, ?, ?)",
                  (sid, json.dumps(ev), f"{sid}:toolu_{j}", now, now, now))
PY

# supervisord with the shipped program section, its paths pointed at the temp dir.
sed -e "s#^command=.*#command=$worker --log-stderr#" \
    -e "s#^environment=.*#environment=CAIRN_DATA_DIR=\"$data\",HOME=\"$tmp\",ANTHROPIC_API_KEY=\"dummy\",ANTHROPIC_BASE_URL=\"http://127.0.0.1:$port\",CAIRN_BATCH__ENABLED=\"false\",CAIRN_WORKER__POLL_MS=\"50\"#" \
    -e "/^user=/d" \
    -e "s#^stdout_logfile=.*#stdout_logfile=$tmp/worker.log#" \
    "$here/cairn-worker.conf" >"$tmp/program.conf"
cat >"$tmp/supervisord.conf" <<EOF
[unix_http_server]
file=$tmp/supervisor.sock
[supervisord]
logfile=$tmp/supervisord.log
pidfile=$tmp/supervisord.pid
childlogdir=$tmp
nodaemon=false
[rpcinterface:supervisor]
supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface
[supervisorctl]
serverurl=unix://$tmp/supervisor.sock
[include]
files=$tmp/program.conf
EOF
ctl() { supervisorctl -c "$tmp/supervisord.conf" "$@"; }
count() { python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(sys.argv[2]).fetchone()[0])" "$data/cairn.db" "$1"; }
wait_for() { # wait_for <seconds> <description> <command...>
    local secs=$1 what=$2; shift 2
    for _ in $(seq $((secs * 10))); do "$@" >/dev/null && return 0; sleep 0.1; done
    echo "error: timed out waiting for $what" >&2; tail -20 "$tmp/worker.log" >&2 || true; exit 1
}
worker_pid() { ctl pid cairn-worker 2>/dev/null | grep -E '^[0-9]+$' | grep -v '^0$'; }
some_done() { [[ $(count "SELECT count(*) FROM pending_messages WHERE status='done'") -ge 3 ]]; }
claimed_now() { [[ $(count "SELECT count(*) FROM pending_messages WHERE status='claimed'") -ge 1 ]]; }

supervisord -c "$tmp/supervisord.conf"
sup_pid="$(cat "$tmp/supervisord.pid" 2>/dev/null || true)"
wait_for 20 "supervisord to start the worker" worker_pid
first="$(worker_pid)"
echo "supervisord started cairn-worker (pid $first); $jobs_total jobs queued"
wait_for 60 "the first jobs to finish" some_done
wait_for 60 "a batch in flight" claimed_now
before="$(count "SELECT count(*) FROM pending_messages WHERE status='done'")"
echo "kill -9 $first with $before jobs done and a batch in flight"
kill -9 "$first"
restarted() { local p; p="$(worker_pid)" && [[ "$p" != "$first" ]]; }
wait_for 30 "supervisord to restart the worker" restarted
echo "supervisord restarted cairn-worker (pid $(worker_pid))"
all_done() { [[ $(count "SELECT count(*) FROM pending_messages WHERE status='done'") -eq $jobs_total ]]; }
wait_for 120 "every job to be done" all_done

done_n="$(count "SELECT count(*) FROM pending_messages WHERE status='done'")"
other="$(count "SELECT count(*) FROM pending_messages WHERE status!='done'")"
obs="$(count "SELECT count(*) FROM observations")"
distinct="$(count "SELECT count(DISTINCT title) FROM observations")"
rescued="$(count "SELECT count(*) FROM job_errors WHERE error LIKE '%lost%'")"
echo "jobs done: $done_n/$jobs_total, not done: $other, observations: $obs ($distinct distinct), jobs rescued from the killed worker: $rescued"
if [[ "$done_n" -eq "$jobs_total" && "$other" -eq 0 && "$obs" -eq "$jobs_total" && "$distinct" -eq "$jobs_total" ]]; then
    echo "ok: the worker was killed and restarted, and no job was lost or done twice"
else
    echo "FAILED: jobs or observations are missing or doubled" >&2
    exit 1
fi

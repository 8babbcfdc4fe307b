//! Transcripts read back and written: the sample Claude Code wrote, and synthetic ones
//! built from its record shapes.

use std::path::{Path, PathBuf};

use serde_json::json;

use super::*;
use crate::capture::hook::Event;
use crate::capture::testing::{q, run as hook};
use crate::store::db::OpenOptions;
use crate::store::paths::DataDir;

const SAMPLE_SID: &str = "4268b601-cbcd-45ac-b3f1-4f61c888c668";

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/claude-code-hooks")
        .join(name)
}

fn read_all(text: &str, finished: bool) -> (Vec<Timed>, Stats) {
    let mut r = Reader::new(text.as_bytes(), "file-session", finished);
    let events: Vec<Timed> = r.by_ref().collect();
    (events, r.stats().clone())
}

fn names(events: &[Timed]) -> Vec<&'static str> {
    events.iter().map(|t| t.event.name()).collect()
}

/// Lines in the shapes Claude Code writes.
struct T {
    sid: String,
    cwd: String,
    lines: Vec<String>,
    clock: i64,
}

impl T {
    fn new(sid: &str, cwd: &str) -> T {
        T {
            sid: sid.into(),
            cwd: cwd.into(),
            lines: Vec::new(),
            clock: 1_790_000_000_000,
        }
    }
    fn ts(&mut self) -> String {
        self.clock += 1_000;
        crate::clock::iso_utc(self.clock)
    }
    fn push(&mut self, mut v: serde_json::Value) -> &mut Self {
        let ts = self.ts();
        let o = v.as_object_mut().expect("object");
        o.entry("sessionId").or_insert(json!(self.sid));
        o.entry("cwd").or_insert(json!(self.cwd));
        o.entry("timestamp").or_insert(json!(ts));
        o.entry("isSidechain").or_insert(json!(false));
        o.entry("version").or_insert(json!("2.1.330"));
        self.lines.push(v.to_string());
        self
    }
    fn prompt(&mut self, pid: &str, text: &str) -> &mut Self {
        self.push(
            json!({"type":"user","promptId":pid,"uuid":format!("u-{pid}"),
            "message":{"role":"user","content":text},"promptSource":"sdk"}),
        )
    }
    fn say(&mut self, text: &str) -> &mut Self {
        self.push(
            json!({"type":"assistant","message":{"role":"assistant","type":"message",
            "content":[{"type":"text","text":text}],"stop_reason":"end_turn"}}),
        )
    }
    fn tool(
        &mut self,
        pid: &str,
        id: &str,
        name: &str,
        input: serde_json::Value,
        out: &str,
    ) -> &mut Self {
        self.push(json!({"type":"assistant","message":{"role":"assistant",
            "content":[{"type":"tool_use","id":id,"name":name,"input":input}]}}));
        self.push(
            json!({"type":"user","promptId":pid,"message":{"role":"user",
            "content":[{"tool_use_id":id,"type":"tool_result","content":out,"is_error":false}]},
            "toolUseResult":{"stdout":out,"stderr":"","interrupted":false}}),
        )
    }
    fn failing_tool(&mut self, pid: &str, id: &str) -> &mut Self {
        self.push(json!({"type":"assistant","message":{"role":"assistant",
            "content":[{"type":"tool_use","id":id,"name":"Bash","input":{"command":"false"}}]}}));
        self.push(json!({"type":"user","promptId":pid,"message":{"role":"user",
            "content":[{"type":"tool_result","content":"Exit code 1","is_error":true,"tool_use_id":id}]},
            "toolUseResult":"Error: Exit code 1"}))
    }
    fn stop_hook(&mut self) -> &mut Self {
        self.push(json!({"type":"system","subtype":"stop_hook_summary","hookCount":1}))
    }
    fn text(&self) -> String {
        let mut s = self.lines.join("\n");
        s.push('\n');
        s
    }
}

/// `e` is the end of turn `prompt_id`, its final message `last`.
fn assert_turn_end(e: &Timed, prompt_id: &str, last: &str) {
    let Event::Stop {
        last_assistant_message,
        common,
    } = &e.event
    else {
        panic!("not a turn end: {:?}", e.event)
    };
    assert_eq!(common.prompt_id.as_deref(), Some(prompt_id));
    assert_eq!(last_assistant_message, last);
}

#[test]
fn the_sample_reads_as_its_hooks() {
    let text = std::fs::read_to_string(fixture("transcript.sample.jsonl")).expect("sample");
    let (events, stats) = read_all(&text, true);
    assert_eq!(
        names(&events),
        [
            "UserPromptSubmit",
            "PostToolUse",
            "PostToolUse",
            "PostToolUseFailure",
            "PostToolUse",
            "Stop",
            "SessionEnd"
        ]
    );
    assert_eq!(stats.unknown_records(), 0, "{stats:?}");
    assert_eq!(stats.bad_lines, 0);
    assert!(!stats.truncated_tail);
    // The same values the hooks sent.
    let hook: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("PostToolUse.json")).expect("read"))
            .expect("json");
    let Event::Tool { common, call } = &events[1].event else {
        panic!("tool")
    };
    assert_eq!(common.session_id, SAMPLE_SID);
    assert_eq!(common.prompt_id.as_deref(), hook["prompt_id"].as_str());
    assert_eq!(call.tool_use_id, hook["tool_use_id"].as_str().expect("id"));
    assert_eq!(call.tool_input, hook["tool_input"]);
    assert_eq!(call.tool_response, hook["tool_response"]);
    let Event::Tool { call, .. } = &events[3].event else {
        panic!("failure")
    };
    assert!(call.failed);
    assert_eq!(call.error.as_deref(), Some("Exit code 3\nfailing"));
    let Event::Stop {
        last_assistant_message,
        common,
    } = &events[5].event
    else {
        panic!("stop")
    };
    assert_eq!(
        last_assistant_message,
        "All done: out.txt and sub.txt written."
    );
    assert_eq!(
        common.prompt_id.as_deref(),
        Some("27e14413-d798-42bf-80a4-2cddf2998f80")
    );
    // Real times, to the millisecond.
    assert_eq!(
        events[0].at,
        read::parse_time("2026-11-22T02:01:14.631Z").expect("t")
    );
    assert_eq!(events[0].at % 1000, 631);
    // A session still being written leaves its last turn open.
    let (events, _) = read_all(&text, false);
    assert_eq!(events.len(), 5);
}

#[test]
fn odd_lines_are_counted_never_fatal_and_a_cut_last_line_waits() {
    let mut t = T::new("s1", "/nowhere/acme-api");
    t.prompt("p1", "hello");
    t.push(json!({"type":"hologram","payload":{"x":1}}));
    t.push(json!({"type":"assistant","message":{"content":[{"type":"vision","x":1},{"type":"text","text":"hi"}]},"newField":{"a":[1,2]}}));
    let mut text = t.text();
    text.push_str("{not json\n");
    text.push('\n');
    let full_tail =
        json!({"type":"user","promptId":"p2","sessionId":"s1","cwd":"/nowhere/acme-api",
        "timestamp":"2026-11-22T02:01:14.631Z","message":{"role":"user","content":"second"}})
        .to_string();
    text.push_str(&full_tail[..full_tail.len() / 2]);
    let (events, stats) = read_all(&text, false);
    assert_eq!(names(&events), ["UserPromptSubmit"]);
    assert_eq!(stats.unknown_types.get("hologram"), Some(&1));
    assert_eq!(stats.unknown_blocks, 1);
    assert_eq!(stats.bad_lines, 1);
    assert!(stats.truncated_tail);
}

#[test]
fn overlong_lines_are_skipped_without_being_held() {
    let mut text = String::from("{\"type\":\"user\",\"x\":\"");
    text.push_str(&"a".repeat(read::MAX_LINE_BYTES + 10));
    text.push_str("\"}\n");
    let mut t = T::new("s1", "/nowhere/acme-api");
    t.prompt("p1", "after");
    text.push_str(&t.text());
    let (events, stats) = read_all(&text, false);
    assert_eq!(stats.oversized_lines, 1);
    assert_eq!(names(&events), ["UserPromptSubmit"]);
}

#[test]
fn compaction_meta_commands_and_notifications_are_not_prompts() {
    let mut t = T::new("s1", "/nowhere/acme-api");
    t.prompt("p1", "build it");
    t.tool("p1", "t1", "Bash", json!({"command":"make"}), "ok");
    t.say("started in the background");
    t.stop_hook();
    t.prompt(
        "n1",
        "<task-notification>\n<task-id>x</task-id>\n</task-notification>",
    );
    t.tool("n1", "t2", "Read", json!({"file_path":"log"}), "done");
    t.say("the build finished");
    t.push(
        json!({"type":"system","subtype":"compact_boundary","content":"Conversation compacted"}),
    );
    t.push(json!({"type":"user","promptId":"c1","isCompactSummary":true,"isVisibleInTranscriptOnly":true,
        "message":{"role":"user","content":"This session is being continued from a previous conversation"}}));
    t.push(json!({"type":"user","promptId":"c1","isMeta":true,"message":{"role":"user","content":"<local-command-caveat>x</local-command-caveat>"}}));
    t.push(json!({"type":"user","promptId":"c1","message":{"role":"user","content":"<command-name>/compact</command-name>"}}));
    t.push(json!({"type":"user","promptId":"c1","message":{"role":"user","content":"<local-command-stdout>Compacted</local-command-stdout>"}}));
    t.prompt("p2", "now test it");
    t.say("tested");
    let (events, _) = read_all(&t.text(), true);
    assert_eq!(
        names(&events),
        [
            "UserPromptSubmit",
            "PostToolUse",
            "UserPromptSubmit",
            "PostToolUse",
            "Stop",
            "UserPromptSubmit",
            "Stop",
            "SessionEnd"
        ]
    );
    let Event::UserPrompt { synthetic, .. } = &events[2].event else {
        panic!()
    };
    assert!(synthetic);
    // The notification's tool and the turn's end belong to the turn it continues.
    assert_eq!(events[3].event.common().prompt_id.as_deref(), Some("p1"));
    assert_turn_end(&events[4], "p1", "the build finished");
}

#[test]
fn a_turn_an_api_error_ended_has_no_turn_end_nor_the_error_as_its_message() {
    // As Claude Code writes it when not logged in (2.1.197): a synthetic assistant line;
    // its hooks get `StopFailure`, not `Stop`.
    let api_error = |t: &mut T, text: &str, error: &str| {
        t.push(
            json!({"type":"assistant","isApiErrorMessage":true,"error":error,
            "message":{"role":"assistant","model":"<synthetic>","type":"message",
            "content":[{"type":"text","text":text}],"stop_reason":"stop_sequence"}}),
        );
    };
    let mut t = T::new("s1", "/nowhere/acme-api");
    t.prompt("p1", "hello there");
    api_error(
        &mut t,
        "Not logged in · Please run /login",
        "authentication_failed",
    );
    // Worked, then a spent quota ended the turn: the tool call is kept.
    t.prompt("p2", "build it");
    t.tool("p2", "t1", "Bash", json!({"command":"make"}), "ok");
    t.say("built; now the tests");
    api_error(&mut t, "API Error: Rate limit reached", "rate_limit");
    // An error the turn went on after (a retry that worked) does not end it.
    t.prompt("p3", "test it");
    api_error(&mut t, "API Error: overloaded", "overloaded");
    t.say("tested");
    let (events, _) = read_all(&t.text(), true);
    assert_eq!(
        names(&events),
        [
            "UserPromptSubmit",
            "UserPromptSubmit",
            "PostToolUse",
            "UserPromptSubmit",
            "Stop",
            "SessionEnd"
        ]
    );
    assert_turn_end(&events[4], "p3", "tested");
}

#[test]
fn sidechains_give_the_agents_tool_calls_under_the_turn_that_ran_them() {
    // Inline, as older Claude Code wrote them.
    let mut t = T::new("s1", "/nowhere/acme-api");
    t.prompt("p1", "delegate");
    t.push(
        json!({"type":"user","isSidechain":true,"agentId":"ag1","promptId":"p1",
        "message":{"role":"user","content":"SUBAGENT-TASK: look"}}),
    );
    t.push(
        json!({"type":"assistant","isSidechain":true,"agentId":"ag1","message":{"content":[
        {"type":"text","text":"sub says"},
        {"type":"tool_use","id":"st1","name":"Grep","input":{"pattern":"x"}}]}}),
    );
    t.push(json!({"type":"user","isSidechain":true,"agentId":"ag1","promptId":"p1","message":{"content":[
        {"type":"tool_result","tool_use_id":"st1","content":"found"}]}}));
    t.say("main done");
    let (events, _) = read_all(&t.text(), true);
    assert_eq!(
        names(&events),
        ["UserPromptSubmit", "PostToolUse", "Stop", "SessionEnd"]
    );
    let Event::Tool { call, common } = &events[1].event else {
        panic!()
    };
    assert_eq!(call.agent_id.as_deref(), Some("ag1"));
    assert_eq!(common.prompt_id.as_deref(), Some("p1"));
    let Event::Stop {
        last_assistant_message,
        ..
    } = &events[2].event
    else {
        panic!()
    };
    assert_eq!(last_assistant_message, "main done");

    // In their own file beside the session, as Claude Code writes them now: read before
    // the Agent call's result, with the agent's id and type.
    let tmp = tempfile::tempdir().expect("tmp");
    let proj = tmp.path().join("-home-dev-acme-api");
    std::fs::create_dir_all(proj.join(SAMPLE_SID).join("subagents")).expect("dirs");
    let main = proj.join(format!("{SAMPLE_SID}.jsonl"));
    std::fs::copy(fixture("transcript.sample.jsonl"), &main).expect("copy");
    let mut sub = T::new(SAMPLE_SID, "/home/dev/acme-api");
    sub.push(
        json!({"type":"user","isSidechain":true,"agentId":"a234c386c0b95e3d9",
        "message":{"role":"user","content":"SUBAGENT-TASK: write sub.txt"}}),
    );
    sub.push(json!({"type":"assistant","isSidechain":true,"message":{"content":[
        {"type":"tool_use","id":"toolu_sub_1","name":"Bash","input":{"command":"echo sub > sub.txt"}}]}}));
    sub.push(json!({"type":"user","isSidechain":true,"message":{"content":[
        {"type":"tool_result","tool_use_id":"toolu_sub_1","content":""}]},"toolUseResult":{"stdout":""}}));
    std::fs::write(
        proj.join(SAMPLE_SID)
            .join("subagents")
            .join("agent-a234c386c0b95e3d9.jsonl"),
        sub.text(),
    )
    .expect("write");
    let src = Source::of(&main).expect("src");
    let events: Vec<Timed> = SessionEvents::open(&src, true).expect("open").collect();
    let tools: Vec<(String, Option<String>, Option<String>)> = events
        .iter()
        .filter_map(|t| match &t.event {
            Event::Tool { call, .. } => Some((
                call.tool_name.clone(),
                call.agent_id.clone(),
                call.agent_type.clone(),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(tools.len(), 5);
    assert_eq!(
        tools[3],
        (
            "Bash".to_string(),
            Some("a234c386c0b95e3d9".to_string()),
            Some("general-purpose".to_string())
        )
    );
    assert_eq!(tools[4].0, "Agent");
    assert_eq!(locate(tmp.path(), SAMPLE_SID), Some(src.clone()));
    assert_eq!(list(tmp.path(), None), vec![src]);
    assert!(locate(tmp.path(), "../x").is_none());
}

// ---- writing ----

fn env() -> (tempfile::TempDir, DataDir, Settings) {
    let tmp = tempfile::tempdir().expect("tmp");
    let dd = DataDir::new(tmp.path().join("data"));
    let mut s = Settings::default();
    s.model.provider = "anthropic".into();
    (tmp, dd, s)
}

fn conn(dd: &DataDir) -> Connection {
    db::open_data_dir(
        dd,
        OpenOptions {
            create: true,
            ..OpenOptions::default()
        },
    )
    .expect("open")
}

fn write_transcript(dir: &Path, sid: &str, text: &str) -> Source {
    let proj = dir.join("-nowhere-acme-api");
    std::fs::create_dir_all(&proj).expect("dir");
    let p = proj.join(format!("{sid}.jsonl"));
    std::fs::write(&p, text).expect("write");
    Source::of(&p).expect("src")
}

fn run(c: &mut Connection, src: &Source, s: &Settings, dry_run: bool) -> Report {
    import(
        c,
        std::slice::from_ref(src),
        s,
        &Options {
            dry_run,
            mark_ended: true,
            ..Options::default()
        },
        src.mtime_ms + 1,
        &mut |_| {},
    )
    .expect("import")
}

#[test]
fn captured_live_then_imported_stores_nothing_twice() {
    let (tmp, dd, s) = env();
    for (i, f) in [
        "SessionStart.json",
        "UserPromptSubmit.json",
        "PostToolUse.json",
        "PostToolUse.Read.json",
        "PostToolUseFailure.json",
        "PostToolUse.Agent.json",
        "Stop.json",
        "SessionEnd.json",
    ]
    .iter()
    .enumerate()
    {
        let json = std::fs::read_to_string(fixture(f)).expect(f);
        hook(&dd, &s, &json, 1_000 + i as i64);
    }
    let mut c = conn(&dd);
    let before = (
        q(&c, "SELECT count(*) FROM pending_messages"),
        q(&c, "SELECT count(*) FROM user_prompts"),
    );
    assert_eq!(before, (5, 1));
    let text = std::fs::read_to_string(fixture("transcript.sample.jsonl")).expect("sample");
    let src = write_transcript(tmp.path(), SAMPLE_SID, &text);
    let plan = run(&mut c, &src, &s, true);
    assert_eq!(plan.total().tool_events, 4);
    assert_eq!(plan.total().new_jobs, 0, "{plan:?}");
    let r = run(&mut c, &src, &s, false);
    assert_eq!(r.added, 0, "{r:?}");
    // The prompt, four tool calls and the turn's end: the six events an import adds (the
    // session's end is no event).
    assert_eq!(r.total().existing, 6);
    assert_eq!(
        (
            q(&c, "SELECT count(*) FROM pending_messages"),
            q(&c, "SELECT count(*) FROM user_prompts")
        ),
        before
    );
}

#[test]
fn a_plan_counts_the_turns_left_open_and_says_when_they_close() {
    let (tmp, dd, s) = env();
    let text = std::fs::read_to_string(fixture("transcript.sample.jsonl")).expect("sample");
    let src = write_transcript(tmp.path(), SAMPLE_SID, &text);
    let mut c = conn(&dd);
    let plan = |c: &mut Connection, now: i64| {
        import(
            c,
            std::slice::from_ref(&src),
            &s,
            &Options {
                dry_run: true,
                mark_ended: true,
                quiet_ms: 600_000,
                ..Options::default()
            },
            now,
            &mut |_| {},
        )
        .expect("plan")
    };
    // Written a minute ago: the turn is open, its end and summary not counted.
    let recent = plan(&mut c, src.mtime_ms + 60_000);
    let t = recent.total();
    assert_eq!((t.turns, t.open_turns, t.new_jobs), (0, 1, 4), "{t:?}");
    assert_eq!(recent.open_until, Some(src.mtime_ms + 600_000));
    // Quiet long enough: the turn is read to its end.
    let quiet = plan(&mut c, src.mtime_ms + 600_000);
    let t = quiet.total();
    assert_eq!((t.turns, t.open_turns, t.new_jobs), (1, 0, 5), "{t:?}");
    assert_eq!(quiet.open_until, None);
}

#[test]
fn importing_twice_adds_nothing_and_keeps_real_times() {
    let (tmp, dd, s) = env();
    let text = std::fs::read_to_string(fixture("transcript.sample.jsonl")).expect("sample");
    let src = write_transcript(tmp.path(), SAMPLE_SID, &text);
    let mut c = conn(&dd);
    let plan = run(&mut c, &src, &s, true);
    let t = plan.total();
    assert_eq!(
        (t.sessions, t.prompts, t.turns, t.tool_events),
        (1, 1, 1, 4)
    );
    assert_eq!(t.new_jobs, 5);
    // One observation batch for the turn's four calls, one summary.
    assert_eq!(plan.estimated_model_calls(&s), 2);
    assert!(plan.estimated_input_tokens(&s) > 1_000);
    let mut offline = s.clone();
    offline.model.provider = "offline".into();
    assert_eq!(plan.estimated_model_calls(&offline), 0);
    assert_eq!(
        q(&c, "SELECT count(*) FROM sessions"),
        0,
        "a plan writes nothing"
    );

    let r = run(&mut c, &src, &s, false);
    assert_eq!(r.added, 6, "{r:?}");
    let r2 = run(&mut c, &src, &s, false);
    assert_eq!(r2.added, 0);
    assert_eq!(q(&c, "SELECT count(*) FROM pending_messages"), 5);
    let started = read::parse_time("2026-11-22T02:01:14.631Z").expect("t");
    assert_eq!(q(&c, "SELECT started_at FROM sessions"), started);
    assert_eq!(q(&c, "SELECT created_at FROM user_prompts"), started);
    assert_eq!(
        q(&c, "SELECT count(*) FROM sessions WHERE status = 'ended'"),
        1
    );
    assert_eq!(
        q(
            &c,
            "SELECT prompt_number FROM pending_messages WHERE kind = 'summarize'"
        ),
        1
    );
}

#[test]
fn hooks_broken_half_way_are_made_whole_by_reconciliation() {
    let (tmp, dd, s) = env();
    let cwd = "/nowhere/acme-api";
    let mut t = T::new("s9", cwd);
    t.prompt("p1", "first task");
    t.tool("p1", "a1", "Bash", json!({"command":"ls"}), "x");
    t.say("first done");
    t.stop_hook();
    t.prompt("p2", "second task");
    t.tool("p2", "b1", "Bash", json!({"command":"make"}), "y");
    t.failing_tool("p2", "b2");
    t.say("second done");
    t.prompt("p3", "third task");
    t.say("third done");
    let b = 1_790_000_000_000;
    // Live: the first turn, then the hooks broke (the second prompt's hook included).
    let base = r#""session_id":"s9","cwd":"/nowhere/acme-api""#;
    hook(
        &dd,
        &s,
        &format!(r#"{{"hook_event_name":"SessionStart",{base},"source":"startup"}}"#),
        b + 10,
    );
    hook(
        &dd,
        &s,
        &format!(
            r#"{{"hook_event_name":"UserPromptSubmit",{base},"prompt_id":"p1","prompt":"first task"}}"#
        ),
        b + 11,
    );
    hook(
        &dd,
        &s,
        &format!(
            r#"{{"hook_event_name":"PostToolUse",{base},"prompt_id":"p1","tool_name":"Bash","tool_use_id":"a1","tool_input":{{"command":"ls"}},"tool_response":{{"stdout":"x"}}}}"#
        ),
        b + 12,
    );
    hook(
        &dd,
        &s,
        &format!(
            r#"{{"hook_event_name":"Stop",{base},"prompt_id":"p1","last_assistant_message":"first done"}}"#
        ),
        b + 13,
    );
    // The third prompt's hook worked again (its turn end did not).
    hook(
        &dd,
        &s,
        &format!(
            r#"{{"hook_event_name":"UserPromptSubmit",{base},"prompt_id":"p3","prompt":"third task"}}"#
        ),
        b + 14,
    );
    hook(
        &dd,
        &s,
        &format!(r#"{{"hook_event_name":"SessionEnd",{base},"reason":"other"}}"#),
        b + 15,
    );
    write_transcript(tmp.path(), "s9", &t.text());

    let mut c = conn(&dd);
    let now = t.clock + 3_600_000;
    let done = reconcile(&mut c, &s, tmp.path(), now, 10).expect("reconcile");
    assert_eq!(done.sessions, 1);
    // The second prompt, its two tool calls, its turn end and the third's turn end.
    assert_eq!(done.recovered, 5);
    assert_eq!(recovered_since(&c, now - 1).expect("n"), 5);
    assert_eq!(
        q(
            &c,
            "SELECT count(*) FROM sessions WHERE status = 'ended' AND ended_at = 1790000000015"
        ),
        1,
        "an ended session stays ended"
    );
    let turns: Vec<(String, i64, String)> = c
        .prepare(
            "SELECT dedupe_key, prompt_number, json_extract(payload, '$.prompt_id')
             FROM pending_messages WHERE kind = 'summarize' ORDER BY prompt_number",
        )
        .expect("prep")
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .expect("q")
        .collect::<rusqlite::Result<_>>()
        .expect("rows");
    // Every turn once, under its own prompt (the third prompt was numbered 2 live).
    assert_eq!(
        turns,
        vec![
            ("turn:s9:1".to_string(), 1, "p1".to_string()),
            ("turn:s9:2".to_string(), 2, "p3".to_string()),
            ("turn:s9:3".to_string(), 3, "p2".to_string()),
        ]
    );
    assert_eq!(
        q(
            &c,
            "SELECT prompt_number FROM pending_messages WHERE dedupe_key = 'tool:b2'"
        ),
        3
    );
    // Compared once: a second pass finds nothing due.
    assert_eq!(
        reconcile(&mut c, &s, tmp.path(), now + 1, 10).expect("again"),
        Reconciled::default()
    );
    // A session with no transcript is noted and not looked for again.
    hook(
        &dd,
        &s,
        r#"{"hook_event_name":"SessionEnd","session_id":"gone","cwd":"/nowhere/acme-api","reason":"other"}"#,
        now + 1,
    );
    let done = reconcile(&mut c, &s, tmp.path(), now + 2, 10).expect("gone");
    assert_eq!(
        done,
        Reconciled {
            sessions: 1,
            recovered: 0
        }
    );
    assert_eq!(
        q(&c, "SELECT count(*) FROM transcript_sync WHERE path = ''"),
        1
    );
    // A session seen again whose transcript did not change is only marked.
    db::write(&mut c, |tx| {
        tx.execute(
            "UPDATE sessions SET updated_at = ?1 WHERE session_id = 's9'",
            [now + 3],
        )?;
        Ok(())
    })
    .expect("touch");
    let done = reconcile(&mut c, &s, tmp.path(), now + 4, 10).expect("same");
    assert_eq!(
        done,
        Reconciled {
            sessions: 1,
            recovered: 0
        }
    );
}

#[test]
fn a_transcript_cut_mid_line_is_finished_by_the_next_read() {
    let (tmp, dd, s) = env();
    let mut t = T::new("s2", "/nowhere/acme-api");
    t.prompt("p1", "go");
    t.tool("p1", "t1", "Bash", json!({"command":"ls"}), "x");
    t.tool("p1", "t2", "Bash", json!({"command":"pwd"}), "y");
    let full = t.text();
    let cut = &full[..full.len() - 20];
    let src = write_transcript(tmp.path(), "s2", cut);
    let mut c = conn(&dd);
    let r = run(&mut c, &src, &s, false);
    assert!(r.stats.truncated_tail);
    assert_eq!(r.total().tool_events, 1);
    let src = write_transcript(tmp.path(), "s2", &full);
    let r = run(&mut c, &src, &s, false);
    assert!(!r.stats.truncated_tail);
    assert_eq!(
        q(
            &c,
            "SELECT count(*) FROM pending_messages WHERE kind = 'observation'"
        ),
        2
    );
}

#[test]
fn privacy_canaries_never_reach_the_database() {
    let (tmp, dd, mut s) = env();
    s.capture.skip_tools = vec!["TodoWrite".into()];
    let mut t = T::new("s3", "/nowhere/acme-api");
    t.prompt(
        "p1",
        "deploy with <private>CANARY-PROMPT-1</private> please",
    );
    t.tool(
        "p1",
        "t1",
        "Bash",
        json!({"command":"curl -H 'x-api-key: sk-ant-api03-CANARYCANARYCANARYCANARY0123'"}),
        "<private>CANARY-OUTPUT-2</private> ok",
    );
    t.tool(
        "p1",
        "t2",
        "TodoWrite",
        json!({"todos":"CANARY-SKIPPED-3"}),
        "ok",
    );
    t.tool(
        "p1",
        "t3",
        "mcp__cairn__search",
        json!({"q":"CANARY-OWN-4"}),
        "ok",
    );
    t.say("done <cairn-context>CANARY-CONTEXT-5</cairn-context>");
    let src = write_transcript(tmp.path(), "s3", &t.text());
    let mut c = conn(&dd);
    let r = run(&mut c, &src, &s, false);
    assert_eq!(r.not_captured, 2);
    drop(c);
    let mut raw = std::fs::read(dd.db()).expect("db");
    if let Ok(wal) = std::fs::read(dd.root().join("cairn.db-wal")) {
        raw.extend(wal);
    }
    let raw = String::from_utf8_lossy(&raw);
    for canary in [
        "CANARY-PROMPT-1",
        "CANARYCANARY",
        "CANARY-OUTPUT-2",
        "CANARY-SKIPPED-3",
        "CANARY-OWN-4",
        "CANARY-CONTEXT-5",
    ] {
        assert!(!raw.contains(canary), "{canary} reached the database");
    }
    let c = conn(&dd);
    assert!(q(&c, "SELECT count(*) FROM pending_messages") >= 2);
}

#[test]
fn what_the_user_forgot_is_never_brought_back() {
    let (tmp, dd, s) = env();
    let mut t = T::new("s4", "/nowhere/acme-api");
    t.prompt("p1", "keep this");
    t.tool("p1", "t1", "Bash", json!({"command":"ls"}), "x");
    t.tool("p1", "t2", "Bash", json!({"command":"cat secret"}), "y");
    t.say("one");
    t.prompt("p2", "forget this prompt");
    t.tool("p2", "t3", "Bash", json!({"command":"pwd"}), "z");
    t.say("two");
    let src = write_transcript(tmp.path(), "s4", &t.text());
    let mut c = conn(&dd);
    db::write(&mut c, |tx| {
        forgotten::forget(tx, &Key::ToolUse("t2"), 1)?;
        let prompt = Key::Prompt {
            session_id: "s4",
            prompt: PromptRef::Id("p2"),
        };
        forgotten::forget(tx, &prompt, 1)
    })
    .expect("forget");
    let r = run(&mut c, &src, &s, false);
    assert_eq!(r.total().forgotten, 4, "{r:?}");
    assert_eq!(q(&c, "SELECT count(*) FROM user_prompts"), 1);
    let keys: String = c
        .query_row(
            "SELECT group_concat(dedupe_key, ',') FROM (SELECT dedupe_key FROM pending_messages ORDER BY id)",
            [],
            |r| r.get(0),
        )
        .expect("keys");
    assert_eq!(keys, "tool:t1,turn:s4:1");
}

#[test]
fn a_forgotten_session_or_turn_stays_forgotten() {
    let (tmp, dd, s) = env();
    let mut t = T::new("s5", "/nowhere/acme-api");
    t.prompt("p1", "x");
    t.say("y");
    let src = write_transcript(tmp.path(), "s5", &t.text());
    let mut c = conn(&dd);
    db::write(&mut c, |tx| forgotten::forget(tx, &Key::Session("s5"), 1)).expect("forget");
    let r = run(&mut c, &src, &s, false);
    assert_eq!(r.added, 0);
    assert_eq!(q(&c, "SELECT count(*) FROM sessions"), 0);
    db::write(&mut c, |tx| {
        tx.execute("DELETE FROM forgotten", [])?;
        let turn = Key::Summary {
            session_id: "s5",
            prompt_number: 1,
        };
        forgotten::forget(tx, &turn, 1)
    })
    .expect("turn");
    let r = run(&mut c, &src, &s, false);
    assert_eq!(r.added, 1, "the prompt only: {r:?}");
    assert_eq!(q(&c, "SELECT count(*) FROM pending_messages"), 0);
}

#[test]
fn a_turn_summarised_and_purged_is_not_queued_again() {
    let (tmp, dd, s) = env();
    let mut t = T::new("s6", "/nowhere/acme-api");
    t.prompt("p1", "x");
    t.tool("p1", "t1", "Bash", json!({"command":"ls"}), "x");
    t.say("y");
    let src = write_transcript(tmp.path(), "s6", &t.text());
    let mut c = conn(&dd);
    run(&mut c, &src, &s, false);
    db::write(&mut c, |tx| {
        crate::memory::observations::upsert_summary(
            tx,
            &crate::memory::observations::NewSummary {
                session_id: "s6".into(),
                project: "acme-api".into(),
                prompt_number: 1,
                learned: "y".into(),
                origin: "model".into(),
                created_at: 5,
                ..Default::default()
            },
        )?;
        tx.execute("DELETE FROM pending_messages", [])?;
        Ok(())
    })
    .expect("purge");
    let r = run(&mut c, &src, &s, false);
    assert_eq!(r.added, 0, "{r:?}");
    assert_eq!(q(&c, "SELECT count(*) FROM pending_messages"), 0);
}

#[test]
fn reconciling_a_quiet_session_leaves_it_open_and_prompts_without_ids_are_not_guessed() {
    let (tmp, dd, s) = env();
    let mut t = T::new("s7", "/nowhere/acme-api");
    t.prompt("p1", "x");
    t.tool("p1", "t1", "Bash", json!({"command":"ls"}), "x");
    t.say("y");
    t.push(json!({"type":"user","message":{"role":"user","content":"an old prompt with no id"}}));
    write_transcript(tmp.path(), "s7", &t.text());
    let b = 1_790_000_000_000;
    hook(
        &dd,
        &s,
        r#"{"hook_event_name":"SessionStart","session_id":"s7","cwd":"/nowhere/acme-api","source":"startup"}"#,
        b,
    );
    let mut c = conn(&dd);
    let done =
        reconcile(&mut c, &s, tmp.path(), t.clock + RECONCILE_QUIET_MS + 1, 10).expect("reconcile");
    assert_eq!(done.recovered, 3, "prompt, tool call, turn end");
    assert_eq!(
        q(&c, "SELECT count(*) FROM sessions WHERE status = 'active'"),
        1
    );
    assert_eq!(q(&c, "SELECT count(*) FROM user_prompts"), 1);
}

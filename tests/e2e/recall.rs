//! `cairn search`, `timeline`, `show`, `context` and `save` on a database seeded through
//! `cairn_core`, run as the real binary from a project directory.

use std::process::Output;

use cairn_core::memory;
use cairn_core::memory::observations::{NewObservation, NewSummary};
use cairn_core::memory::sessions;
use cairn_core::store::db::{self, OpenOptions};
use cairn_core::store::paths::DataDir;
use serde_json::Value;

use crate::support::{TestEnv, stderr, stdout};

const DAY: i64 = 86_400_000;
/// 2026-09-21T14:13:20Z
pub const T0: i64 = 1_790_000_000_000;

/// Ids of the seeded records.
pub struct Seeded {
    pub title_hit: i64,
    pub narrative_hit: i64,
    pub bugfix: i64,
    pub old: i64,
    pub other_project: i64,
    pub summary: i64,
    pub prompt: i64,
}

/// A project directory `acme` (not in a git repository) the commands run in.
pub fn project_dir(env: &TestEnv) -> std::path::PathBuf {
    let dir = env.tmp.path().join("acme");
    std::fs::create_dir_all(&dir).expect("project dir");
    dir
}

fn obs(
    session: &str,
    project: &str,
    kind: &str,
    title: &str,
    narrative: &str,
    at: i64,
) -> NewObservation {
    NewObservation {
        session_id: Some(session.into()),
        project: project.into(),
        prompt_number: Some(1),
        kind: kind.into(),
        origin: "model".into(),
        created_at: at,
        content: cairn_core::memory::rows::ObservationContent {
            title: title.into(),
            narrative: narrative.into(),
            ..Default::default()
        },
        ..NewObservation::default()
    }
}

/// Seeds two projects through `cairn_core`.
pub fn seed(env: &TestEnv) -> Seeded {
    let mut conn =
        db::open_data_dir(&DataDir::new(&env.data_dir), OpenOptions::default()).expect("open");
    db::write(&mut conn, |tx| {
        sessions::ensure(tx, "s1", "acme", "/acme", T0 - 30 * DAY)?;
        sessions::ensure(tx, "s2", "acme", "/acme", T0)?;
        sessions::ensure(tx, "x1", "globex", "/globex", T0)?;
        tx.execute(
            "INSERT INTO user_prompts (session_id, project, prompt_number, prompt_text, created_at)
             VALUES ('s2', 'acme', 1, 'why does the worker lose its lease?', ?1)",
            [T0 - 10],
        )?;
        let prompt = tx.last_insert_rowid();
        let narrative_hit = memory::observations::insert_observation(
            tx,
            &obs(
                "s2",
                "acme",
                "discovery",
                "Queue internals",
                "The worker lease expires after five minutes and is rescued by the next worker.",
                T0,
            ),
        )?
        .id();
        let mut b = obs(
            "s2",
            "acme",
            "bugfix",
            "Lease rescue counts as a failed attempt",
            "Rescued jobs used to loop forever.",
            T0 + 60_000,
        );
        b.content.concepts = vec!["gotcha".into(), "queue".into()];
        b.content.files_modified = vec!["core/src/queue.rs".into()];
        b.content.facts = vec!["three failed attempts skip a job".into()];
        let title_hit = memory::observations::insert_observation(tx, &b)?.id();
        let mut c = obs(
            "s2",
            "acme",
            "decision",
            "Busy timeout before WAL",
            "Set busy_timeout first on every connection.",
            T0 + 120_000,
        );
        c.content.files_read = vec!["core/src/db.rs".into()];
        let bugfix_decision = memory::observations::insert_observation(tx, &c)?.id();
        let old = memory::observations::insert_observation(
            tx,
            &obs(
                "s1",
                "acme",
                "feature",
                "Migration runner",
                "Numbered migrations applied in order.",
                T0 - 30 * DAY,
            ),
        )?
        .id();
        let other_project = memory::observations::insert_observation(
            tx,
            &obs(
                "x1",
                "globex",
                "bugfix",
                "Lease handling in globex",
                "Different project entirely.",
                T0,
            ),
        )?
        .id();
        let summary = memory::observations::upsert_summary(
            tx,
            &NewSummary {
                session_id: "s2".into(),
                project: "acme".into(),
                prompt_number: 1,
                request: "Find why the worker loses its lease".into(),
                completed: "Rescue now counts as a failed attempt".into(),
                next_steps: "Add a heartbeat metric".into(),
                origin: "model".into(),
                created_at: T0 + 180_000,
                ..NewSummary::default()
            },
        )?
        .id();
        Ok(Seeded {
            title_hit,
            narrative_hit,
            bugfix: bugfix_decision,
            old,
            other_project,
            summary,
            prompt,
        })
    })
    .expect("seed")
}

/// Runs `cairn` in the `acme` project directory.
pub fn cairn(env: &TestEnv, args: &[&str]) -> Output {
    let mut c = env.cmd("cairn");
    c.current_dir(project_dir(env)).args(args);
    crate::support::run_with_stdin(c, b"")
}

fn json_of(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("json: {e}: {}", stdout(o)))
}

fn ids(o: &Output) -> Vec<String> {
    json_of(o)
        .as_array()
        .expect("array")
        .iter()
        .map(|h| {
            // Each hit names itself as `show` and `timeline` take it.
            let id = h["id"].as_i64().expect("id");
            let by_kind = match h["kind"].as_str().expect("kind") {
                "summary" => format!("S{id}"),
                "prompt" => format!("P{id}"),
                _ => id.to_string(),
            };
            assert_eq!(h["ref"], by_kind.as_str(), "{h}");
            by_kind
        })
        .collect()
}

#[test]
fn search_ranks_filters_and_stays_in_its_project() {
    let env = TestEnv::new();
    let s = seed(&env);

    let o = cairn(&env, &["search", "lease"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let table = stdout(&o);
    assert!(table.starts_with("ID"), "{table}");
    assert!(
        table.contains("Lease rescue counts as a failed attempt"),
        "{table}"
    );
    assert!(!table.contains("globex"), "{table}");

    // A title hit beats a narrative hit; no other project leaks in.
    let o = cairn(
        &env,
        &["search", "lease", "--kind", "observations", "--json"],
    );
    assert_eq!(
        ids(&o),
        vec![s.title_hit.to_string(), s.narrative_hit.to_string()]
    );

    let check = |args: &[&str], want: Vec<String>| {
        let mut full = vec!["search", "--json"];
        full.extend_from_slice(args);
        let o = cairn(&env, &full);
        assert_eq!(ids(&o), want, "{args:?}: {}", stderr(&o));
    };
    check(
        &["lease", "--type", "bugfix"],
        vec![s.title_hit.to_string()],
    );
    check(&["--concept", "gotcha"], vec![s.title_hit.to_string()]);
    check(&["--file", "db.rs"], vec![s.bugfix.to_string()]);
    check(
        &["--file", "queue.rs", "--kind", "observations"],
        vec![s.title_hit.to_string()],
    );
    check(
        &["--until", "2026-09-01", "--order", "oldest"],
        vec![s.old.to_string()],
    );
    check(
        &["--since", "2026-09-21T14:14", "--order", "oldest"],
        vec![
            s.title_hit.to_string(),
            s.bugfix.to_string(),
            format!("S{}", s.summary),
        ],
    );
    check(
        &["lease", "--kind", "prompts"],
        vec![format!("P{}", s.prompt)],
    );
    check(
        &["heartbeat", "--kind", "summaries"],
        vec![format!("S{}", s.summary)],
    );
    check(
        &["busy OR migrations", "--order", "newest"],
        vec![s.bugfix.to_string(), s.old.to_string()],
    );
    check(&["\"busy timeout\""], vec![s.bugfix.to_string()]);
    check(&["migrat*"], vec![s.old.to_string()]);
    check(
        &["--kind", "observations", "--", "lease", "-rescued"],
        vec![],
    );
    check(
        &["lease", "NOT", "minutes", "--kind", "observations"],
        vec![s.title_hit.to_string()],
    );
    check(
        &["--order", "newest", "--limit", "2", "--offset", "1"],
        vec![s.bugfix.to_string(), s.title_hit.to_string()],
    );
    check(
        &["lease", "--project", "globex"],
        vec![s.other_project.to_string()],
    );

    // Widened: every line names its project.
    let o = cairn(
        &env,
        &[
            "search",
            "lease",
            "--all-projects",
            "--kind",
            "observations",
        ],
    );
    let table = stdout(&o);
    assert!(table.contains("PROJECT"), "{table}");
    assert!(
        table.contains("globex") && table.contains("acme"),
        "{table}"
    );
    let o = cairn(&env, &["search", "lease", "--all-projects", "--json"]);
    assert!(
        json_of(&o)
            .as_array()
            .expect("array")
            .iter()
            .any(|h| h["project"] == "globex")
    );

    // No results: exit 1, a hint on stderr, nothing on stdout.
    let o = cairn(&env, &["search", "zebra"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).is_empty());
    assert!(stderr(&o).contains("--all-projects"), "{}", stderr(&o));
    // A project no memory is of (a misspelt name) is not an empty project: the hint
    // names the projects there are.
    for args in [
        vec!["search", "lease", "--project", "acmee"],
        vec!["context", "--project", "acmee"],
    ] {
        let o = cairn(&env, &args);
        assert!(stdout(&o).is_empty(), "{args:?}");
        assert!(
            stderr(&o).contains("no memory is of project 'acmee'; the projects are ")
                && stderr(&o).contains("acme")
                && stderr(&o).contains("globex"),
            "{args:?}: {}",
            stderr(&o)
        );
    }
    // A project of memories saved by hand alone (no session) is a project.
    let saved = cairn(
        &env,
        &[
            "save",
            "Kept by hand",
            "--text",
            "t",
            "--project",
            "handmade",
        ],
    );
    assert_eq!(saved.status.code(), Some(0), "{}", stderr(&saved));
    let o = cairn(&env, &["search", "zebra", "--project", "handmade"]);
    assert!(
        stderr(&o).contains("no results in project 'handmade'"),
        "{}",
        stderr(&o)
    );

    // Errors: exit 2, one `error:` line.
    for bad in [
        vec!["search", "x", "--since", "tuesday"],
        vec!["search", "x", "--type", "idea"],
        vec!["search", "x", "--order", "worst"],
        vec!["search", "x", "--kind", "mail"],
        vec!["search", "x", "--project", "a", "--all-projects"],
    ] {
        let o = cairn(&env, &bad);
        assert_eq!(o.status.code(), Some(2), "{bad:?}");
        assert!(stderr(&o).contains("error"), "{bad:?}: {}", stderr(&o));
    }
    // A timeline without its anchor names both ways to give one.
    let o = cairn(&env, &["timeline"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("<ID|--query <QUERY>>"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn no_database_is_an_error_not_an_empty_result() {
    let env = TestEnv::new();
    for args in [
        vec!["search", "x"],
        vec!["timeline", "1"],
        vec!["show", "1"],
        vec!["context"],
    ] {
        let o = cairn(&env, &args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(
            stderr(&o).starts_with("error: no cairn database"),
            "{}",
            stderr(&o)
        );
    }
}

#[test]
fn timeline_show_context_and_save() {
    let env = TestEnv::new();
    let s = seed(&env);

    let o = cairn(
        &env,
        &[
            "timeline",
            &s.title_hit.to_string(),
            "--before",
            "2",
            "--after",
            "2",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let table = stdout(&o);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 6, "{table}");
    assert!(lines[1].contains(&format!("P{}", s.prompt)), "{table}");
    assert!(
        lines[3].starts_with('→') && lines[3].contains("Lease rescue"),
        "{table}"
    );
    assert!(lines[5].contains(&format!("S{}", s.summary)), "{table}");

    let o = cairn(&env, &["timeline", "--query", "busy timeout", "--json"]);
    let t = json_of(&o);
    assert_eq!(
        t["anchor"],
        serde_json::json!({"kind": "observation", "id": s.bugfix})
    );
    assert!(
        t["entries"]
            .as_array()
            .expect("entries")
            .iter()
            .any(|e| e["anchor"] == true)
    );

    // Another project's id names its record as `show` does: its timeline is its project's.
    // Asked for in another project, it is refused naming the flags that work.
    let other = s.other_project.to_string();
    let o = cairn(&env, &["timeline", &other]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains(&format!("{other} ")), "{}", stdout(&o));
    let o = cairn(&env, &["timeline", &other, "--project", "acme"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains(
            "belongs to project 'globex', not 'acme': pass --project globex or --all-projects"
        ),
        "{}",
        stderr(&o)
    );
    let o = cairn(&env, &["timeline", &other, "--all-projects"]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(cairn(&env, &["timeline", "999"]).status.code(), Some(1));

    let o = cairn(&env, &["show", &format!("#{}", s.title_hit), "999"]);
    assert_eq!(o.status.code(), Some(0));
    let text = stdout(&o);
    assert!(
        text.contains("Rescued jobs used to loop forever."),
        "{text}"
    );
    assert!(
        text.contains("- three failed attempts skip a job"),
        "{text}"
    );
    assert!(text.contains("- core/src/queue.rs"), "{text}");
    assert!(
        text.contains("Prompt: why does the worker lose its lease?"),
        "{text}"
    );
    assert!(
        stderr(&o).contains("nothing stored as 999"),
        "{}",
        stderr(&o)
    );
    let o = cairn(&env, &["show", "999", "--json"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(json_of(&o)["missing"], serde_json::json!(["999"]));

    let o = cairn(&env, &["context"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let block = stdout(&o);
    assert!(
        block.contains("- Next steps: Add a heartbeat metric"),
        "{block}"
    );
    assert!(block.contains(&format!("- #{} ", s.title_hit)), "{block}");
    assert!(!block.contains("globex"), "{block}");
    assert!(
        block
            .trim_end()
            .ends_with("`cairn show <id>`.\n</cairn-context>"),
        "{block}"
    );
    assert!(block.starts_with("<cairn-context>\n"), "{block}");
    let o = cairn(&env, &["context", "--project", "nobody"]);
    assert_eq!(o.status.code(), Some(1));
    // The budget comes from the settings.
    let mut small = env.cmd("cairn");
    small
        .current_dir(project_dir(&env))
        .env("CAIRN_CONTEXT__BUDGET_TOKENS", "60")
        .args(["context", "--json"]);
    let o = crate::support::run_with_stdin(small, b"");
    let j = json_of(&o);
    assert!(j["tokens"].as_u64().expect("tokens") <= 60, "{j}");
    assert_eq!(j["budget_tokens"], 60);

    let o = cairn(
        &env,
        &[
            "save",
            "Prefer BEGIN IMMEDIATE",
            "--text",
            "Deferred transactions get SQLITE_BUSY at once.",
            "--type",
            "decision",
            "--file",
            "core/src/db.rs",
            "--json",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let id = json_of(&o)["id"].as_i64().expect("id");
    let (origin, session): (String, Option<String>) = env
        .db()
        .query_row(
            "SELECT origin, session_id FROM observations WHERE id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .expect("row");
    assert_eq!((origin.as_str(), session), ("manual", None));
    let o = cairn(&env, &["search", "immediate", "--json"]);
    assert_eq!(ids(&o), vec![id.to_string()]);
    let mut piped = env.cmd("cairn");
    piped
        .current_dir(project_dir(&env))
        .args(["save", "From stdin", "--text", "-"]);
    let o = crate::support::run_with_stdin(piped, b"text read from stdin\n");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        env.count("SELECT count(*) FROM observations WHERE narrative = 'text read from stdin'"),
        1
    );
    assert_eq!(
        cairn(&env, &["save", "x", "--type", "idea"]).status.code(),
        Some(2)
    );

    // A memory saved by hand is cleaned like everything captured.
    let o = cairn(
        &env,
        &[
            "save",
            "Deploy key AKIAIOSFODNN7EXAMPLE",
            "--text",
            "password=hunter2 then <private>the vault phrase</private> done",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let dump: String = env
        .db()
        .query_row(
            "SELECT title || ' ' || narrative FROM observations ORDER BY id DESC LIMIT 1",
            [],
            |r| r.get(0),
        )
        .expect("row");
    for canary in ["AKIAIOSFODNN7EXAMPLE", "hunter2", "vault phrase"] {
        assert!(!dump.contains(canary), "{canary} stored: {dump}");
    }
    assert!(dump.contains("done"), "{dump}");
}

/// At least 300 queries a person, a model or an attacker might type: quotes, FTS5
/// operators and column names, SQL, unicode, control bytes and very long ones.
pub fn hostile_queries() -> Vec<String> {
    let mut q: Vec<String> = [
        "",
        " ",
        "\"",
        "\"\"",
        "\"\"\"",
        "'",
        "''",
        "`",
        "\\",
        "\\\"",
        "*",
        "**",
        "-",
        "--",
        "---",
        "^",
        "^lease",
        "lease^",
        "+",
        "+lease",
        "(",
        ")",
        "()",
        "(lease",
        "lease)",
        "((lease))",
        "{",
        "}",
        "{lease}",
        "[",
        "]",
        "[lease]",
        ":",
        "::",
        "title:",
        "title:lease",
        "narrative:lease",
        "{title narrative}:lease",
        "-title:lease",
        "observations_fts:lease",
        "rank:1",
        "bm25",
        "NEAR",
        "NEAR(",
        "NEAR(lease",
        "NEAR(lease rescue)",
        "NEAR(lease rescue, 2)",
        "lease NEAR rescue",
        "NEAR/2",
        "AND",
        "OR",
        "NOT",
        "AND AND",
        "OR OR OR",
        "NOT NOT",
        "lease AND",
        "AND lease",
        "lease OR",
        "OR lease",
        "lease NOT",
        "NOT lease",
        "lease AND OR NOT rescue",
        "a OR b OR c OR d",
        "and or not",
        "lease -",
        "- lease",
        "-lease",
        "--lease",
        "-\"lease\"",
        "-(lease)",
        "lease*",
        "*lease",
        "lea*se",
        "l*",
        "\"lease\"*",
        "\"lease",
        "lease\"",
        "\"lease rescue",
        "lease \"rescue\" \"",
        "\"a\"\"b\"",
        "\"\"lease\"\"",
        "lease\"\"rescue",
        "'lease'",
        "'; DROP TABLE observations; --",
        "\"; DROP TABLE observations; --",
        "1; SELECT * FROM sqlite_master",
        "' OR 1=1 --",
        "\" OR 1=1 --",
        "lease' OR '1'='1",
        "UNION SELECT",
        "%",
        "%%",
        "_",
        "lease%",
        "lease_",
        "\\%",
        "?",
        "?1",
        ":name",
        "@x",
        "$x",
        "#",
        "#1",
        "#include",
        "0",
        "-1",
        "1e309",
        "9223372036854775808",
        "NaN",
        "null",
        "NULL",
        "true",
        "[]",
        "{}",
        "{\"a\":1}",
        "<xml>",
        "</private>",
        "<private>secret</private>",
        "&&",
        "||",
        "|",
        "&",
        "!",
        "!lease",
        "~",
        "lease~",
        "=",
        "==",
        "!=",
        "<>",
        "<",
        ">",
        ";",
        ";;",
        ",",
        ".",
        "..",
        "...",
        "/",
        "//",
        "/etc/passwd",
        "../../etc/passwd",
        "C:\\Windows",
        "a/b/c.rs",
        "src/db.rs:42",
        "core::queue::claim",
        "fn main() {}",
        "println!(\"{}\", x);",
        "x => y",
        "a->b",
        "a::b",
        "é",
        "ß",
        "Æ",
        "ø",
        "naïve café",
        "résumé",
        "straße",
        "ﬁ",
        "İstanbul",
        "ǅ",
        "数据库",
        "データベース",
        "데이터베이스",
        "база данных",
        "قاعدة بيانات",
        "מסד נתונים",
        "ฐานข้อมูล",
        "🦀",
        "🦀🦀🦀",
        "lease 🦀",
        "👨‍👩‍👧",
        "🏳️‍🌈",
        "e\u{301}",
        "a\u{300}\u{301}\u{302}",
        "\u{200b}",
        "\u{200d}",
        "\u{feff}lease",
        "\u{202e}esael",
        "\u{2028}",
        "\u{2029}",
        "\u{fffd}",
        "\u{e000}",
        "\u{10ffff}",
        "\u{1d400}\u{1d401}",
        "Ⅻ",
        "½",
        "١٢٣",
        "٣",
        "\t",
        "\n",
        "\r\n",
        "lease\trescue",
        "lease\nrescue",
        "\u{7}",
        "\u{1b}[31mred",
        "\u{7f}",
        "\u{85}",
        "\u{1}\u{2}\u{3}",
        "lease\u{8}\u{8}",
        "\u{c}",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // Operators and syntax glued to words, in every position.
    for op in [
        "\"", "-", "*", "^", "(", ")", ":", "+", "OR", "AND", "NOT", "NEAR", "'", "{", "}",
    ] {
        q.push(format!("{op}lease rescue"));
        q.push(format!("lease{op} rescue"));
        q.push(format!("lease {op} rescue"));
        q.push(format!("lease rescue {op}"));
        q.push(format!("{op}{op}{op}"));
    }
    // Long ones.
    q.push("lease ".repeat(2_000));
    q.push("x".repeat(10_240));
    q.push("\"".repeat(10_240));
    q.push("(".repeat(5_000));
    q.push("-".repeat(10_240));
    q.push("*".repeat(10_240));
    q.push("OR ".repeat(3_000));
    q.push("NOT ".repeat(2_500));
    q.push("a OR ".repeat(2_000));
    q.push("\"a\" ".repeat(2_500));
    q.push("🦀".repeat(2_560));
    q.push("é".repeat(5_120));
    q.push(format!("{}lease", " ".repeat(10_000)));
    q.push(
        (0..2_000)
            .map(|i| format!("w{i}"))
            .collect::<Vec<_>>()
            .join(" "),
    );
    // Every ASCII punctuation character alone and around a word.
    for c in (0x21u8..0x7f)
        .map(char::from)
        .filter(|c| !c.is_ascii_alphanumeric())
    {
        q.push(c.to_string());
        q.push(format!("lease{c}rescue"));
    }
    q
}

#[test]
fn hostile_queries_never_break_the_cli() {
    let env = TestEnv::new();
    seed(&env);
    let corpus = hostile_queries();
    assert!(corpus.len() >= 300, "{}", corpus.len());
    for q in &corpus {
        // Arguments cannot hold NUL bytes; the MCP test sends those.
        let o = cairn(&env, &["search", "--all-projects", "--", q]);
        let err = stderr(&o);
        assert!(
            matches!(o.status.code(), Some(0) | Some(1)),
            "{q:?}: exit {:?}: {err}",
            o.status.code()
        );
        assert!(
            !err.contains("error") && !err.contains("panicked"),
            "{q:?}: {err}"
        );
    }
    // The same inputs as timeline anchors.
    for q in corpus.iter().step_by(7).filter(|q| !q.trim().is_empty()) {
        let o = cairn(
            &env,
            &["timeline", "--all-projects", &format!("--query={q}")],
        );
        assert!(
            matches!(o.status.code(), Some(0) | Some(1)),
            "{q:?}: {}",
            stderr(&o)
        );
    }
}

#[test]
fn timeline_centres_on_summaries_and_prompts_as_search_lists_them() {
    let env = TestEnv::new();
    let s = seed(&env);
    for reference in [format!("S{}", s.summary), format!("p{}", s.prompt)] {
        let o = cairn(&env, &["timeline", &reference, "--json"]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let t = json_of(&o);
        let anchor = t["entries"]
            .as_array()
            .expect("entries")
            .iter()
            .find(|e| e["anchor"] == Value::Bool(true))
            .cloned()
            .expect("an anchor");
        assert_eq!(
            anchor["id"].as_i64(),
            Some(if reference.starts_with('S') {
                s.summary
            } else {
                s.prompt
            }),
            "{t}"
        );
    }
    let o = cairn(&env, &["timeline", "S99999"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no record S99999"), "{}", stderr(&o));
    let o = cairn(&env, &["timeline", "X1"]);
    assert_eq!(o.status.code(), Some(2));

    // `show` takes the same references.
    let (summary, prompt) = (format!("S{}", s.summary), format!("P{}", s.prompt));
    let o = cairn(&env, &["show", &summary, &prompt, "S99999"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("Request: Find why the worker loses its lease"),
        "{text}"
    );
    assert!(
        text.contains("why does the worker lose its lease?"),
        "{text}"
    );
    assert!(
        stderr(&o).contains("nothing stored as S99999"),
        "{}",
        stderr(&o)
    );
    let o = cairn(&env, &["show", &prompt, "--json"]);
    let v = json_of(&o);
    assert_eq!(v["found"][0]["record"], "prompt");
    assert_eq!(v["found"][0]["id"].as_i64(), Some(s.prompt));
    let o = cairn(&env, &["show", "X1"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("S3 for a summary"), "{}", stderr(&o));
}

/// A file saved by hand from a subdirectory names the file as the hooks' memories do,
/// from the working tree's top, so a read of it finds the memory, and a read of a file of
/// the same name elsewhere does not; a long prompt is read from stdin.
#[test]
fn a_file_saved_from_a_subdirectory_is_named_from_the_project_top() {
    let env = TestEnv::new();
    let top = env.tmp.path().join("shop");
    std::fs::create_dir_all(top.join(".git")).expect("repo");
    std::fs::create_dir_all(top.join("src")).expect("src");
    let in_dir = |dir: &std::path::Path, args: &[&str], stdin: &[u8]| {
        let mut c = env.cmd("cairn");
        c.current_dir(dir).args(args);
        crate::support::run_with_stdin(c, stdin)
    };
    let init = in_dir(&top, &["install", "--project", "--no-mcp"], b"");
    assert_eq!(init.status.code(), Some(0), "{}", stderr(&init));
    let saved = in_dir(
        &top.join("src"),
        &[
            "save",
            "Lock retries back off",
            "--text",
            "x",
            "--file",
            "db.rs",
            "--file",
            "../Cargo.toml",
        ],
        b"",
    );
    assert_eq!(saved.status.code(), Some(0), "{}", stderr(&saved));
    let files: String = env
        .db()
        .query_row("SELECT files_modified FROM observations", [], |r| r.get(0))
        .expect("saved");
    assert_eq!(files, r#"["src/db.rs","Cargo.toml"]"#);

    let told = |file: &str| {
        let o = in_dir(&top, &["context", "--file", file, "--json"], b"");
        let v: Value = serde_json::from_slice(&o.stdout).expect("json");
        v["offered"].as_array().expect("offered").len()
    };
    assert_eq!(told(top.join("src/db.rs").to_str().expect("utf-8")), 1);
    assert_eq!(told("/usr/lib/rust/src/db.rs"), 0);

    let paste = format!(
        "why do the lock retries back off?\n{}",
        "traceback line\n".repeat(20_000)
    );
    let o = in_dir(
        &top,
        &["context", "--prompt", "-", "--json"],
        paste.as_bytes(),
    );
    // Read whole (an argument this long would exceed the system's limit), and searched:
    // the memory is a candidate, whether or not it reaches the threshold.
    assert_ne!(o.status.code(), Some(2), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["offered"].as_array().map(Vec::len), Some(1), "{v}");
}

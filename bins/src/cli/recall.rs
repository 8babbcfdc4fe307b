//! `cairn search`, `timeline`, `show`, `context`, `save` and `mcp`: everything that reads
//! memories back (and saves one by hand).
//!
//! Queries print a table (times UTC) or, with `--json`, JSON; they exit 0 with results, 1
//! without (like grep), 2 on error. Results are scoped to the current directory's project
//! unless `--project` names another or `--all-projects` widens the search; then every line
//! shows its project.

use std::io::Read;

use anyhow::Context as _;
use clap::Args;

use cairn_core::capture::project;
use cairn_core::clock;
use cairn_core::mcp;
use cairn_core::memory;
use cairn_core::memory::kind::Kind;
use cairn_core::memory::observations::{NewObservation, OBSERVATION_TYPES};
use cairn_core::memory::sessions;
use cairn_core::memory::told::Moment;
use cairn_core::privacy::Privacy;
use cairn_core::recall::context;
use cairn_core::recall::moment;
use cairn_core::recall::request::{RequestError, SearchFields};
use cairn_core::recall::search;
use cairn_core::recall::searcher::Searcher;
use cairn_core::recall::snippet::{self, one_line, shorten};
use cairn_core::recall::timeline::{self, Anchor, TimelineRequest};
use cairn_core::store::db;

use super::Ctx;
use super::out::{self, note, print};
use crate::exit;

/// Which project a query covers.
#[derive(Debug, Args)]
pub struct ScopeArgs {
    /// Project name (default: the project of the current directory).
    #[arg(long, value_name = "NAME", conflicts_with = "all_projects")]
    pub project: Option<String>,
    /// Every project; each line then shows its project.
    #[arg(long)]
    pub all_projects: bool,
}

/// A result count of at least 1.
fn parse_limit(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("'{s}' is not a number")),
    }
}

#[derive(Debug, Args)]
pub struct SearchArgs {
    /// Words, "exact phrases", NOT word (or -word after `--`), OR, prefix*. By relevance
    /// a memory needs one of the words (or be near in meaning), and holding more ranks
    /// higher; with `--order newest|oldest`, all must match. Empty: the newest records
    /// matching the filters.
    pub query: Vec<String>,
    #[command(flatten)]
    pub scope: ScopeArgs,
    /// Only observations of this type (repeat or comma-separate): decision, bugfix,
    /// feature, refactor, discovery, change.
    #[arg(long = "type", value_name = "TYPE", value_delimiter = ',')]
    pub types: Vec<String>,
    /// Only observations tagged with this concept.
    #[arg(long)]
    pub concept: Option<String>,
    /// Only records that read or modified a file whose path contains this text.
    #[arg(long)]
    pub file: Option<String>,
    /// From this time on: YYYY-MM-DD[THH:MM] (UTC) or an age like 7d, 12h, 2w.
    #[arg(long, value_name = "WHEN")]
    pub since: Option<String>,
    /// Before this time (same forms as --since).
    #[arg(long, value_name = "WHEN")]
    pub until: Option<String>,
    /// What to search: observations, summaries, prompts or all.
    #[arg(long, default_value = "all")]
    pub kind: String,
    /// relevance, newest or oldest.
    #[arg(long, default_value = "relevance")]
    pub order: String,
    /// Most results (at least 1).
    #[arg(long, default_value_t = 20, value_parser = parse_limit)]
    pub limit: usize,
    /// Skip this many results.
    #[arg(long, default_value_t = 0)]
    pub offset: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("anchor").required(true).args(["id", "query"])))]
pub struct TimelineArgs {
    /// Record to centre on, as search lists it: `12` (observation), `S3` (turn summary),
    /// `P7` (prompt). Or use --query.
    #[arg(value_name = "ID", value_parser = parse_reference)]
    pub id: Option<(Kind, i64)>,
    /// Centre on the best hit of this query instead.
    #[arg(long, short, conflicts_with = "id")]
    pub query: Option<String>,
    /// Records before the anchor.
    #[arg(long, short, default_value_t = 5)]
    pub before: usize,
    /// Records after the anchor.
    #[arg(long, short, default_value_t = 5)]
    pub after: usize,
    #[command(flatten)]
    pub scope: ScopeArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// What to show, as search and timeline list it: an observation (`12` or `#12`), a
    /// turn summary (`S3`) or a prompt (`P7`).
    #[arg(required = true, value_name = "ID", value_parser = parse_reference)]
    pub ids: Vec<(Kind, i64)>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ContextArgs {
    /// Project name (default: the project of the current directory).
    #[arg(long)]
    pub project: Option<String>,
    /// Show what this prompt would receive, and why: every memory found with its relevance
    /// and what became of it (given, under the threshold, already given, over the count or
    /// the budget). `-` reads it from stdin (a long paste).
    #[arg(long, value_name = "TEXT", conflicts_with = "file")]
    pub prompt: Option<String>,
    /// Show what a read or edit of this file would receive.
    #[arg(long, value_name = "PATH")]
    pub file: Option<String>,
    /// With --prompt or --file: as in this session (leaves out what it was already given).
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Print JSON ({"project", "text", "tokens"}; with --prompt or --file also "offered")
    /// instead of the block.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct SaveArgs {
    /// Title of the memory: one short line.
    pub title: String,
    /// What to remember (`-` reads it from stdin).
    #[arg(long, short)]
    pub text: Option<String>,
    /// decision, bugfix, feature, refactor, discovery or change.
    #[arg(long = "type", default_value = "discovery")]
    pub kind: String,
    /// A file it is about (repeatable; a relative path is taken from the current
    /// directory and kept relative to the project's top).
    #[arg(long = "file", value_name = "PATH")]
    pub files: Vec<String>,
    /// A concept tag (repeatable).
    #[arg(long = "concept", value_name = "TAG")]
    pub concepts: Vec<String>,
    /// Project name (default: the project of the current directory).
    #[arg(long)]
    pub project: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct McpArgs {
    /// Project the tools default to (default: the project of CLAUDE_PROJECT_DIR, which
    /// Claude Code sets, else of the current directory).
    #[arg(long)]
    pub project: Option<String>,
}

/// `12`, `#12`, `S3` or `P7`.
fn parse_reference(s: &str) -> Result<(Kind, i64), String> {
    Kind::parse_reference(s).ok_or_else(|| {
        format!(
            "'{s}' is not a record id (12 for an observation, S3 for a summary, P7 for a prompt)"
        )
    })
}

/// The project a record belongs to.
fn record_project(r: &timeline::Record) -> &str {
    match r {
        timeline::Record::Observation(o) => &o.project,
        timeline::Record::Summary(s) => &s.project,
        timeline::Record::Prompt(p) => &p.project,
    }
}

fn current_project() -> anyhow::Result<String> {
    let cwd = std::env::current_dir().context("failed to read the current directory")?;
    Ok(project::detect(&cwd))
}

impl ScopeArgs {
    /// `None` for every project.
    fn resolve(&self) -> anyhow::Result<Option<String>> {
        if self.all_projects {
            return Ok(None);
        }
        match &self.project {
            Some(p) => Ok(Some(p.clone())),
            None => current_project().map(Some),
        }
    }
}

/// The existing database (as every reading command opens it), tuned for searches.
fn open(ctx: &Ctx) -> anyhow::Result<rusqlite::Connection> {
    let conn = super::open(ctx)?;
    search::tune_for_reading(&conn)?;
    Ok(conn)
}

/// The sentence model for a search, or full text alone (said at `-v`) when there is none.
fn searcher(ctx: &Ctx) -> Searcher {
    Searcher::open(&ctx.settings().embed, &ctx.data_dir)
        .with_min_relevance(ctx.settings().search.min_relevance)
}

/// For a search ranked by relevance that found nothing: that a floor may have hidden
/// results, and how to see them.
fn floor_hint(searcher: &Searcher, req: &search::SearchRequest) -> String {
    let floor = searcher.floor(req);
    if req.order != search::Order::Relevance || floor <= 0.0 || req.query.trim().is_empty() {
        return String::new();
    }
    format!(
        "; nothing reached search.min_relevance {floor}, and CAIRN_SEARCH__MIN_RELEVANCE=0 shows the nearest memories however unlikely"
    )
}

fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    let mut text = serde_json::to_string_pretty(value)?;
    text.push('\n');
    print(&text)
}

/// Left-aligned columns, two spaces apart; the last column is not padded. The last
/// column may hold match marks: on a terminal (`width`) it is cut to fit the width (the
/// other columns never are), and the marks become bold with `color`, nothing otherwise.
fn table(header: &[&str], rows: &[Vec<String>], width: Option<usize>, color: bool) -> String {
    let cols = header.len();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate().take(cols - 1) {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    // What the last column gets on a terminal: the rest of the line, at least a little.
    let room = width.map(|w| {
        w.saturating_sub(widths[..cols - 1].iter().map(|c| c + 2).sum::<usize>())
            .max(12)
    });
    let mut out = String::new();
    let all = std::iter::once(header.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        .chain(rows.iter().cloned());
    for (n, row) in all.enumerate() {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 < cols {
                line.push_str(cell);
                line.push_str(&" ".repeat(widths[i] - cell.chars().count() + 2));
            } else {
                let cell = match room {
                    Some(room) => out::fit(cell, room),
                    None => cell.clone(),
                };
                // The header has no marks to colour.
                line.push_str(&out::highlight(&cell, color && n > 0));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A hit as `--json` prints it: the snippet as plain text, and where its matches are
/// (`[start, end)` in characters of the snippet).
fn hit_json(h: &search::Hit) -> anyhow::Result<serde_json::Value> {
    let mut v = serde_json::to_value(h)?;
    // What `show` and `timeline` take: an observation's and a summary's ids may be equal.
    v["ref"] = h.kind.reference(h.id).into();
    let (plain, matches) = snippet::plain_and_matches(&h.snippet);
    v["snippet"] = plain.into();
    v["matches"] = serde_json::json!(matches.iter().map(|(s, e)| [*s, *e]).collect::<Vec<_>>());
    Ok(v)
}

pub fn search(ctx: &Ctx, args: &SearchArgs) -> anyhow::Result<u8> {
    let project = args.scope.resolve()?;
    let req = SearchFields {
        query: args.query.join(" "),
        project: project.clone(),
        types: args.types.clone(),
        concept: args.concept.clone(),
        file: args.file.clone(),
        since: args.since.clone(),
        until: args.until.clone(),
        kind: Some(args.kind.clone()),
        order: Some(args.order.clone()),
        limit: args.limit,
        offset: args.offset,
        asking_session: None,
    }
    .to_request(clock::now_ms())
    .map_err(|e| match e {
        RequestError::UnknownType(_) => anyhow::anyhow!("{e}"),
        // The other fields are flags here: `--since`, `--kind`, `--order`.
        RequestError::BadTime { .. }
        | RequestError::UnknownKind(_)
        | RequestError::UnknownOrder(_) => anyhow::anyhow!("--{e}"),
    })?;
    let conn = open(ctx)?;
    let mut searcher = searcher(ctx);
    let hits = searcher.search(&conn, &req)?;
    if args.json {
        print_json(
            &hits
                .iter()
                .map(hit_json)
                .collect::<anyhow::Result<Vec<_>>>()?,
        )?;
    } else if hits.is_empty() {
        match &project {
            Some(p) => match unknown_project(&conn, p)? {
                Some(why) => note!("no results: {why}"),
                None => note!(
                    "no results in project '{p}' (--all-projects searches every project{})",
                    floor_hint(&searcher, &req)
                ),
            },
            None => note!("no results in any project{}", floor_hint(&searcher, &req)),
        }
    } else {
        let width = out::width();
        let wide = project.is_none();
        let mut header = vec!["ID", "WHEN (UTC)", "TYPE"];
        if wide {
            header.push("PROJECT");
        }
        header.push("TITLE — SNIPPET");
        let rows: Vec<Vec<String>> = hits
            .iter()
            .map(|h| {
                let mut row = vec![
                    h.reference(),
                    clock::minute_utc(h.created_at),
                    // A memory from another machine says which.
                    match &h.device {
                        Some(d) => format!("{} @{d}", h.label),
                        None => h.label.clone(),
                    },
                ];
                if wide {
                    row.push(h.project.clone());
                }
                // The title stays whole where it can; the snippet is what gets cut.
                let mut text = one_line(&h.title);
                if let Some(w) = width {
                    text = shorten(&text, (w / 2).max(24));
                }
                if !h.snippet.is_empty() {
                    text.push_str(" — ");
                    text.push_str(&h.snippet);
                }
                row.push(text);
                row
            })
            .collect();
        print(&table(&header, &rows, width, out::color()))?;
    }
    Ok(if hits.is_empty() {
        exit::NEGATIVE
    } else {
        exit::OK
    })
}

pub fn timeline(ctx: &Ctx, args: &TimelineArgs) -> anyhow::Result<u8> {
    let anchor = match (&args.id, &args.query) {
        (Some((kind, id)), _) => Anchor::Record(*kind, *id),
        (None, Some(q)) => Anchor::Query(q.clone()),
        (None, None) => anyhow::bail!("give an observation id or --query"),
    };
    let conn = open(ctx)?;
    let project = match anchor {
        // An id names one record wherever you are (as for `cairn show`): without a scope
        // flag its timeline is its project's.
        Anchor::Record(kind, id) => {
            let found = timeline::get_records(&conn, &[(kind, id)])?;
            match (found.found.first().map(record_project), &args.scope) {
                (
                    Some(its),
                    ScopeArgs {
                        project: Some(p), ..
                    },
                ) if its != p => anyhow::bail!(
                    "{} belongs to project '{its}', not '{p}': pass --project {its} or --all-projects",
                    kind.reference(id)
                ),
                (
                    Some(its),
                    ScopeArgs {
                        project: None,
                        all_projects: false,
                    },
                ) => Some(its.to_string()),
                _ => args.scope.resolve()?,
            }
        }
        _ => args.scope.resolve()?,
    };
    let t = searcher(ctx).timeline(
        &conn,
        &TimelineRequest {
            anchor: anchor.clone(),
            before: args.before,
            after: args.after,
            project: project.clone(),
        },
    )?;
    if args.json {
        print_json(&t)?;
    } else if t.anchor.is_none() {
        match anchor {
            Anchor::Observation(id) => note!("no observation {id}"),
            Anchor::Record(kind, id) => note!("no record {}", kind.reference(id)),
            Anchor::Query(_) => note!("no record matches the query"),
        }
    } else {
        let width = out::width();
        let wide = project.is_none();
        let mut header = vec!["", "ID", "WHEN (UTC)", "TYPE"];
        if wide {
            header.push("PROJECT");
        }
        header.push("TITLE — DETAIL");
        let rows: Vec<Vec<String>> = t
            .entries
            .iter()
            .map(|e| {
                let mut row = vec![
                    if e.anchor {
                        "→".into()
                    } else {
                        String::new()
                    },
                    e.reference(),
                    clock::minute_utc(e.created_at),
                    e.label.clone(),
                ];
                if wide {
                    row.push(e.project.clone());
                }
                let mut text = one_line(&e.title);
                if let Some(w) = width {
                    text = shorten(&text, (w / 2).max(24));
                }
                if !e.detail.is_empty() {
                    text.push_str(" — ");
                    text.push_str(&one_line(&e.detail));
                }
                row.push(text);
                row
            })
            .collect();
        print(&table(&header, &rows, width, false))?;
    }
    Ok(if t.anchor.is_some() {
        exit::OK
    } else {
        exit::NEGATIVE
    })
}

pub fn show(ctx: &Ctx, args: &ShowArgs) -> anyhow::Result<u8> {
    let conn = open(ctx)?;
    let fetched = timeline::get_records(&conn, &args.ids)?;
    if args.json {
        print_json(&fetched)?;
    } else {
        let texts: Vec<String> = fetched
            .found
            .iter()
            .map(mcp::tools::render_record)
            .collect();
        print(&texts.join("\n"))?;
    }
    if !fetched.missing.is_empty() && !args.json {
        note!("nothing stored as {}", fetched.missing.join(", "));
    }
    Ok(if fetched.found.is_empty() {
        exit::NEGATIVE
    } else {
        exit::OK
    })
}

pub fn context(ctx: &Ctx, args: &ContextArgs) -> anyhow::Result<u8> {
    let project = match &args.project {
        Some(p) => p.clone(),
        None => current_project()?,
    };
    let conn = open(ctx)?;
    if args.prompt.is_some() || args.file.is_some() {
        return moment_context(ctx, &conn, &project, args);
    }
    let settings = &ctx.settings().context;
    let text = context::session_start(&conn, &project, settings, clock::now_ms())?;
    if args.json {
        print_json(&serde_json::json!({
            "project": project,
            "text": text,
            "tokens": context::tokens(&text),
            "budget_tokens": settings.budget_tokens,
        }))?;
    } else if text.is_empty() {
        match unknown_project(&conn, &project)? {
            Some(why) => note!("nothing to tell the next session of project '{project}': {why}"),
            None => note!("nothing to tell the next session of project '{project}' yet"),
        }
    } else {
        print(&text)?;
    }
    Ok(if text.is_empty() {
        exit::NEGATIVE
    } else {
        exit::OK
    })
}

/// `cairn context --prompt` / `--file`: what the hook would give, with the scores.
fn moment_context(
    ctx: &Ctx,
    conn: &rusqlite::Connection,
    project: &str,
    args: &ContextArgs,
) -> anyhow::Result<u8> {
    let settings = ctx.settings();
    let session = args
        .session
        .as_deref()
        .map(cairn_core::memory::told::Listener::main);
    // Turned off, the hook gives nothing: say so rather than show what it would not give.
    let at = if args.prompt.is_some() {
        Moment::Prompt
    } else {
        Moment::File
    };
    let off = moment::turned_off_by(&settings.recall, at);
    if let Some(setting) = off {
        if args.json {
            print_json(&serde_json::json!({
                "project": project,
                "turned_off_by": setting,
                "offered": [],
                "text": "",
                "tokens": 0,
            }))?;
            return Ok(exit::NEGATIVE);
        }
        note!(
            "nothing is given: turned off by {setting} (`cairn config unset {}` turns it on)",
            setting.split(' ').next().unwrap_or(setting)
        );
        return Ok(exit::NEGATIVE);
    }
    let (recalled, how) = match (&args.prompt, &args.file) {
        (Some(prompt), _) => {
            let prompt = or_stdin(prompt, "the prompt")?;
            // As the hook sees it: cleaned of private spans and secrets.
            let prompt = Privacy::from_settings(&settings.capture).text(&prompt);
            if !moment::is_users_prompt(&prompt) {
                note!(
                    "not a prompt of the user's (a command, a notification, cairn's own context): nothing is given"
                );
                return Ok(exit::NEGATIVE);
            }
            let req = moment::prompt_request(project, &prompt, &settings.recall);
            let deadline = std::time::Duration::from_millis(settings.recall.worker_deadline_ms);
            let found = moment::find(conn, &ctx.data_dir.recall_socket(), &req, deadline)?;
            let how = match (&found.words_alone_because, found.by_meaning) {
                (_, true) => "words and meaning (the running worker answered)".to_string(),
                (Some(why), false) => format!("words alone ({why})"),
                (None, false) => "words alone (recall.worker_deadline_ms is 0)".to_string(),
            };
            let recalled = moment::at_prompt(conn, session, &found, &settings.recall)?;
            (recalled, how)
        }
        (None, Some(file)) => {
            // The working tree here, when the project is this directory's: a file outside
            // it is named only by its own path.
            let tree = match &args.project {
                Some(_) => None,
                None => std::env::current_dir()
                    .ok()
                    .map(|c| project::place(&c).tree),
            };
            let recalled = moment::at_file(
                conn,
                project,
                session,
                file,
                tree.as_deref(),
                &settings.recall,
            )?;
            (recalled, "the file's memories".to_string())
        }
        (None, None) => unreachable!("checked by the caller"),
    };
    if args.json {
        print_json(&serde_json::json!({
            "project": project,
            "found_by": how,
            "min_relevance": settings.recall.min_relevance,
            "offered": recalled.offered,
            "text": recalled.block,
            "tokens": context::tokens(&recalled.block),
            "budget_tokens": settings.recall.budget_tokens,
        }))?;
    } else {
        let mut out = if args.prompt.is_some() {
            format!(
                "found by {how}; given from relevance {:.2} up, at most {} memories and {} tokens\n",
                settings.recall.min_relevance,
                settings.recall.max_memories,
                settings.recall.budget_tokens
            )
        } else {
            format!(
                "found by {how}; at most {} memories and {} tokens given\n",
                settings.recall.max_file_memories, settings.recall.budget_tokens
            )
        };
        for o in &recalled.offered {
            let verdict = serde_json::to_value(o.verdict)?;
            out.push_str(&format!(
                "{:>6} {:.2} {:<15} {} {}\n",
                o.reference(),
                o.relevance,
                verdict.as_str().unwrap_or_default(),
                one_line(&o.label),
                shorten(&one_line(&o.title), 80)
            ));
        }
        if recalled.offered.is_empty() {
            out.push_str("no memory found\n");
        }
        if recalled.block.is_empty() {
            out.push_str("\nnothing is given\n");
        } else {
            out.push_str(&format!(
                "\ngiven ({} tokens):\n{}\n",
                context::tokens(&recalled.block),
                recalled.block
            ));
        }
        print(&out)?;
    }
    Ok(if recalled.block.is_empty() {
        exit::NEGATIVE
    } else {
        exit::OK
    })
}

pub fn save(ctx: &Ctx, args: &SaveArgs) -> anyhow::Result<u8> {
    let title = one_line(&args.title);
    anyhow::ensure!(!title.is_empty(), "the title is empty");
    let kind = args.kind.trim().to_ascii_lowercase();
    anyhow::ensure!(
        OBSERVATION_TYPES.contains(&kind.as_str()),
        "unknown type '{}' (use one of {})",
        args.kind,
        OBSERVATION_TYPES.join(", ")
    );
    let text = match args.text.as_deref() {
        Some(t) => or_stdin(t, "the text")?,
        None => String::new(),
    };
    let project = match &args.project {
        Some(p) => p.clone(),
        None => current_project()?,
    };
    // A path given here, in the project's working tree, is kept relative to the tree's
    // top, as a memory names files: `db.rs` typed in src/ is src/db.rs.
    let files = match &args.project {
        Some(_) => args.files.clone(),
        None => {
            let cwd = std::env::current_dir().context("failed to read the current directory")?;
            let tree = project::place(&cwd).tree;
            args.files.iter().map(|f| in_tree(&tree, &cwd, f)).collect()
        }
    };
    let mut obs = NewObservation {
        session_id: None,
        project: project.clone(),
        kind,
        origin: "manual".into(),
        created_at: clock::now_ms(),
        content: cairn_core::memory::rows::ObservationContent {
            title,
            narrative: text.trim_end().to_string(),
            files_modified: files,
            concepts: args.concepts.clone(),
            ..Default::default()
        },
        ..NewObservation::default()
    };
    Privacy::from_settings(&ctx.settings().capture).observation(&mut obs);
    // A missing data dir is a mistyped CAIRN_DATA_DIR far more often than a wish for a
    // second memory: say so instead of starting one.
    let mut conn = super::open(ctx)?;
    let stored = db::write(&mut conn, |tx| memory::observations::save_manual(tx, &obs))?;
    let again = matches!(stored, memory::observations::Stored::Duplicate(_));
    if args.json {
        print_json(&serde_json::json!({
            "id": stored.id(),
            "project": project,
            "already_saved": again,
        }))?;
    } else if again {
        print(&format!(
            "already saved as observation {} in project '{project}'\n",
            stored.id()
        ))?;
    } else {
        print(&format!(
            "saved observation {} in project '{project}'\n",
            stored.id()
        ))?;
    }
    Ok(exit::OK)
}

/// `arg` itself, or stdin's text when it is `-`.
fn or_stdin(arg: &str, what: &str) -> anyhow::Result<String> {
    if arg != "-" {
        return Ok(arg.to_string());
    }
    let mut s = String::new();
    std::io::stdin()
        .read_to_string(&mut s)
        .with_context(|| format!("failed to read {what} from stdin"))?;
    Ok(s)
}

/// `file`, typed in `cwd`, relative to the working tree's top `tree` when it lies in it;
/// as typed otherwise.
fn in_tree(tree: &std::path::Path, cwd: &std::path::Path, file: &str) -> String {
    let full = cwd.join(file);
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for c in full.components() {
        match c {
            std::path::Component::ParentDir => {
                parts.pop();
            }
            std::path::Component::CurDir => {}
            c => parts.push(c.as_os_str()),
        }
    }
    let full: std::path::PathBuf = parts.iter().collect();
    match full.strip_prefix(tree) {
        Ok(rel) if !rel.as_os_str().is_empty() => rel.to_string_lossy().into_owned(),
        _ => file.to_string(),
    }
}

pub fn mcp(ctx: &Ctx, args: &McpArgs) -> anyhow::Result<u8> {
    // Claude Code starts a stdio server with the project root in CLAUDE_PROJECT_DIR and
    // the session that started it in CLAUDE_CODE_SESSION_ID (see ARCHITECTURE.md).
    let project = match (&args.project, std::env::var_os("CLAUDE_PROJECT_DIR")) {
        (Some(p), _) => p.clone(),
        (None, Some(dir)) if !dir.is_empty() => project::detect(std::path::Path::new(&dir)),
        (None, _) => current_project()?,
    };
    let asking_session = std::env::var("CLAUDE_CODE_SESSION_ID").ok();
    log::info!("mcp server for project '{project}'");
    let searcher = searcher(ctx);
    // The database is opened (and made, if no hook ran yet) at the first tool call: a
    // start that only lists the tools, as `claude mcp list` does, writes nothing.
    let memory = mcp::tools::Database::At(ctx.data_dir.clone());
    let tools = mcp::tools::Tools::new(memory, project, clock::now_ms)
        .with_privacy(Privacy::from_settings(&ctx.settings().capture))
        .with_searcher(searcher)
        .with_asking_session(asking_session);
    let mut server = mcp::protocol::Server::new(tools);
    let stdin = std::io::stdin().lock();
    let stdout = std::io::stdout().lock();
    mcp::protocol::serve(&mut server, stdin, stdout)?;
    Ok(exit::OK)
}

/// Why `project` has no memory, when no session is of it (a misspelt `--project`, or a
/// directory cairn never saw): the projects there are, most recently active first.
fn unknown_project(conn: &rusqlite::Connection, project: &str) -> anyhow::Result<Option<String>> {
    if sessions::is_project(conn, project)? {
        return Ok(None);
    }
    let known = sessions::projects(conn)?;
    Ok(Some(if known.is_empty() {
        format!("no memory is of project '{project}'; there is none of any project yet")
    } else {
        let shown: Vec<&str> = known.iter().take(8).map(String::as_str).collect();
        format!(
            "no memory is of project '{project}'; the projects are {}{}",
            shown.join(", "),
            if known.len() > shown.len() {
                ", …"
            } else {
                ""
            }
        )
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_and_highlights_render() {
        let rows = [
            vec!["1".into(), "bugfix".into(), "a \u{2}b\u{3}".into()],
            vec![
                "S22".into(),
                "summary".into(),
                "long text that does not fit".into(),
            ],
        ];
        let t = table(&["ID", "TYPE", "TITLE"], &rows, None, false);
        assert_eq!(
            t,
            "ID   TYPE     TITLE\n1    bugfix   a b\nS22  summary  long text that does not fit\n"
        );
        let t = table(&["ID", "TYPE", "TITLE"], &rows, Some(30), true);
        assert_eq!(
            t,
            "ID   TYPE     TITLE\n1    bugfix   a \x1b[1mb\x1b[22m\nS22  summary  long text that…\n"
        );
        assert!(
            t.lines()
                .all(|l| out::visible_len(l) <= 30 || l.contains('\x1b'))
        );
        assert_eq!(parse_reference("#12"), Ok((Kind::Observation, 12)));
        assert_eq!(parse_reference("s3"), Ok((Kind::Summary, 3)));
        assert!(parse_reference("x").is_err());
    }
}

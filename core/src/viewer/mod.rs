//! The viewer: `cairn ui`, a local web page onto the memory. A live feed paged back to the
//! oldest memory, search (the same engine as `cairn search`, by meaning too when a model
//! is there, each hit with its relevance), sessions as a history and their turns, the
//! timeline around a memory, one memory in full, what the next session is told (the
//! context page), health as `cairn status` reports it with its remedies as buttons, and
//! forgetting.
//!
//! - `server`: the HTTP/1.1 server, bounded (connections, read time, sizes) and unkillable
//!   by accept errors.
//! - `access`: the loopback address, port and token, kept across runs.
//! - `http`: who may ask (token, `Host`, `Origin`, the form token), request decoding, the
//!   first visit's redirect.
//! - `data`: the reads only the viewer makes (feed, counts, sessions, tokens per day).
//! - `pages`: the HTML, pure; every memory text escaped.
//! - `assets/`: the stylesheet, the script and the icon, embedded in the binary.
//!
//! Writes nothing itself: replay and discard go through `queue::admin`, clearing the
//! quarantine through `capture::quarantine`, acknowledging through `store::incidents`,
//! forgetting through `memory::forget`, the context page's settings (`context.*`,
//! `recall.*` only) through `settings::write`, as `cairn config set` does.
//!
//! Invariants: it listens on its own loopback address only, and only while `cairn ui`
//! runs; every request for a page carries the access token (`?token=` once, then an
//! HttpOnly, SameSite=Strict cookie); `Host` must name the address and port (DNS
//! rebinding), `Origin` and `Sec-Fetch-Site` must not name another site; changes are POSTs
//! carrying the form token, and those that cannot be undone are asked first; every answer
//! has a strict Content-Security-Policy (no inline script or style); each request opens
//! its own connection and reads in autocommit, so no read transaction outlives a
//! statement and the WAL checkpoint is never held back.

pub mod access;
pub mod data;
pub mod http;
pub mod pages;
pub mod server;

use std::collections::HashMap;
use std::io::Write;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rusqlite::Connection;

use crate::capture::quarantine;
use crate::clock;
use crate::error::{Error, Result};
use crate::memory::forget::{self, Memory};
use crate::memory::kind::Kind;
use crate::ops::status;
use crate::queue::admin::{self, Selector};
use crate::queue::claim::JobStatus;
use crate::queue::stats::{self, ListFilter};
use crate::recall::context;
use crate::recall::moment;
use crate::recall::request::SearchFields;
use crate::recall::search::{self, SearchRequest};
use crate::recall::searcher::Searcher;
use crate::recall::timeline::{self, Anchor, TimelineRequest};
use crate::settings::{Settings, Source, write};
use crate::store::db::{self, OpenOptions};
use crate::store::incidents;
use crate::store::paths::DataDir;
use http::{Refusal, percent_encode};

const STYLE: &str = include_str!("assets/style.css");
const SCRIPT: &str = include_str!("assets/app.js");
const ICON: &str = include_str!("assets/favicon.svg");

/// How often the live feed looks for new rows.
pub const FEED_POLL: Duration = Duration::from_millis(500);
/// Memories the feed page starts with.
pub const FEED_ITEMS: usize = 50;
use pages::SEARCH_LIMIT;

/// A running viewer's shared state.
#[derive(Debug)]
struct App {
    dir: DataDir,
    settings: Settings,
    address: Ipv4Addr,
    port: u16,
    token: String,
    csrf: String,
    searcher: Mutex<Searcher>,
    stop: Arc<AtomicBool>,
}

/// The viewer's server, bound and ready.
pub struct Viewer {
    listener: TcpListener,
    app: Arc<App>,
}

impl std::fmt::Debug for Viewer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Viewer")
            .field("address", &self.app.address)
            .field("port", &self.app.port)
            .finish()
    }
}

impl Viewer {
    /// Binds the viewer's loopback address (kept from the last run, see [`access`]) on
    /// `port` (0: the last run's, else a free one) for the data dir's existing database.
    pub fn bind(dir: DataDir, settings: Settings, port: u16, searcher: Searcher) -> Result<Viewer> {
        // Fail now, not at the first page, when there is no database.
        drop(open(&dir)?);
        let (listener, access) = access::bind(&dir, port).map_err(|e| {
            Error::Invalid(format!(
                "cannot listen on a loopback address, port {port}: {e}"
            ))
        })?;
        let app = App {
            dir,
            settings,
            address: access.address,
            port: access.port,
            token: access.token,
            csrf: http::secret().map_err(io)?,
            searcher: Mutex::new(searcher),
            stop: Arc::new(AtomicBool::new(false)),
        };
        Ok(Viewer {
            listener,
            app: Arc::new(app),
        })
    }

    pub fn port(&self) -> u16 {
        self.app.port
    }

    /// The URL to open: it carries the access token.
    pub fn url(&self) -> String {
        access::Access {
            address: self.app.address,
            port: self.app.port,
            token: self.app.token.clone(),
            pid: None,
        }
        .url()
    }

    /// Answers requests (see [`server`]) until `stop` is set.
    pub fn run(&self, stop: &AtomicBool) -> Result<()> {
        let listener = self.listener.try_clone().map_err(io)?;
        let app = Arc::clone(&self.app);
        server::serve(listener, stop, move |request, stream| {
            handle(&app, request, stream)
        });
        self.app.stop.store(true, Ordering::Relaxed);
        Ok(())
    }
}

fn io(e: std::io::Error) -> Error {
    Error::Invalid(format!("viewer: {e}"))
}

fn open(dir: &DataDir) -> Result<Connection> {
    let conn = db::open_data_dir(
        dir,
        OpenOptions {
            busy_timeout: Duration::from_secs(3),
            create: false,
            ..OpenOptions::default()
        },
    )?;
    search::tune_for_reading(&conn)?;
    Ok(conn)
}

/// A page met a damaged database (`cause`): recovered here unless a worker runs on the
/// data dir (which then recovers it), and the page made again on the recovered one. Each
/// request has its own connection, closed by now; a live feed's ends at the damage and
/// the browser opens it again.
fn mend(app: &App, req: &Req, cause: &Error) -> Answer {
    let lock_wait = crate::settings::Settings::lock_wait(&app.dir);
    let now = crate::clock::now_ms();
    match crate::store::recover::recover_unless_worker(&app.dir, cause, lock_wait, now) {
        Ok(Some(done)) => {
            log::warn!("{cause}; {}", done.describe());
            match route(app, req) {
                Ok(a) => a,
                Err(e) => Answer::html(500, pages::message("Error", &e.to_string())),
            }
        }
        Ok(None) => Answer::html(
            503,
            pages::message(
                "Being recovered",
                &format!("{cause}. The worker is recovering the database: reload in a moment."),
            ),
        ),
        Err(e) => Answer::html(
            500,
            pages::message(
                "Error",
                &format!(
                    "{cause}; recovering it failed ({e}): restore a backup with `cairn restore PATH` (daily backups are in the data dir's backups/)"
                ),
            ),
        ),
    }
}

/// An answer: status, content type, body, extra headers.
struct Answer {
    status: u16,
    kind: &'static str,
    body: Vec<u8>,
    headers: Vec<(String, String)>,
}

const HTML: &str = "text/html; charset=utf-8";

impl Answer {
    fn html(status: u16, body: String) -> Answer {
        Answer {
            status,
            kind: HTML,
            body: body.into_bytes(),
            headers: Vec::new(),
        }
    }

    fn redirect(to: &str) -> Answer {
        Answer {
            status: 303,
            kind: HTML,
            body: Vec::new(),
            headers: vec![("Location".into(), to.into())],
        }
    }

    fn refused(r: Refusal) -> Answer {
        let status = match r {
            Refusal::Host => 421,
            _ => 403,
        };
        Answer::html(status, pages::message("Refused", r.message()))
    }

    fn not_found(what: &str) -> Answer {
        Answer::html(404, pages::message("Not found", what))
    }
}

/// What a page handler sees of a request.
struct Req {
    method: String,
    path: String,
    query: HashMap<String, String>,
    form: HashMap<String, String>,
}

fn handle(app: &App, request: server::Request, mut stream: TcpStream) {
    let started = Instant::now();
    let method = request.method.clone();
    let (path, query) = http::split_url(&request.target);
    let cookie_name = format!("cairn_{}", app.port);
    // Who is asking, before anything else is read.
    let refusal = if !http::allowed_host(request.header("Host"), app.address, app.port) {
        Some(Refusal::Host)
    } else if !http::allowed_origin(
        request.header("Origin"),
        request.header("Sec-Fetch-Site"),
        app.address,
        app.port,
    ) {
        Some(Refusal::Origin)
    } else {
        None
    };
    let from_cookie = request
        .header("Cookie")
        .and_then(|c| http::cookie(c, &cookie_name))
        .is_some_and(|t| http::same_secret(t, &app.token));
    let from_query = method == "GET"
        && query
            .get("token")
            .is_some_and(|t| http::same_secret(t, &app.token));
    let mut answer = if let Some(r) = refusal {
        Answer::refused(r)
    } else if method == "GET" && path == "/proof" {
        // That this is the viewer holding the token, without the token (`access::running`).
        match query
            .get("nonce")
            .and_then(|n| access::proof(&app.token, app.address, app.port, n))
        {
            Some(proof) => Answer {
                status: 200,
                kind: "text/plain; charset=utf-8",
                body: proof.into_bytes(),
                headers: Vec::new(),
            },
            None => Answer::not_found("a proof needs a nonce of 32 hex digits"),
        }
    } else if let Some(a) = (method == "GET").then(|| asset(&path)).flatten() {
        // The stylesheet, script and icon hold no memory: served without the token, so
        // the "Refused" page is styled too.
        a
    } else if from_query {
        // The first visit: keep the token in a cookie and drop it from the address bar.
        // The address is rebuilt by cairn from the decoded path's segments, never copied
        // from the request: no line break, no `//host`, the rest of the query kept.
        let mut a = Answer::redirect(&http::first_visit_location(&path, &query));
        a.headers.push((
            "Set-Cookie".into(),
            format!(
                "{cookie_name}={}; Path=/; HttpOnly; SameSite=Strict",
                app.token
            ),
        ));
        a
    } else if !from_cookie {
        Answer::refused(Refusal::Token)
    } else if method == "GET" && path == "/events" {
        return events(app, stream, &query);
    } else {
        let form = if method == "POST" {
            http::parse_form(&String::from_utf8_lossy(&request.body))
        } else {
            HashMap::new()
        };
        let req = Req {
            method: method.clone(),
            path: path.clone(),
            query,
            form,
        };
        if req.method == "POST"
            && !req
                .form
                .get("csrf")
                .is_some_and(|c| http::same_secret(c, &app.csrf))
        {
            Answer::refused(Refusal::Csrf)
        } else {
            match route(app, &req) {
                Ok(a) => a,
                Err(e) if e.is_corrupt() => mend(app, &req, &e),
                Err(e) => Answer::html(500, pages::message("Error", &e.to_string())),
            }
        }
    };
    let elapsed = started.elapsed();
    log::debug!("{method} {path} {} in {elapsed:?}", answer.status);
    answer.headers.push((
        "Server-Timing".into(),
        format!("app;dur={:.1}", elapsed.as_secs_f64() * 1000.0),
    ));
    let mut headers: Vec<(String, String)> = http::security_headers()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    headers.push(("Content-Type".into(), answer.kind.into()));
    headers.extend(answer.headers);
    if let Err(e) = server::respond(&mut stream, answer.status, &headers, &answer.body) {
        log::debug!("answering {path}: {e}");
    }
}

/// The embedded files, by path.
fn asset(path: &str) -> Option<Answer> {
    let (kind, body) = match path {
        "/style.css" => ("text/css; charset=utf-8", STYLE),
        "/app.js" => ("text/javascript; charset=utf-8", SCRIPT),
        "/favicon.svg" | "/favicon.ico" => ("image/svg+xml", ICON),
        _ => return None,
    };
    Some(Answer {
        status: 200,
        kind,
        body: body.as_bytes().to_vec(),
        headers: Vec::new(),
    })
}

/// Where a page of a list starts (`from`, 0 when absent or not a number).
fn from(q: &HashMap<String, String>) -> usize {
    q.get("from").and_then(|f| f.parse().ok()).unwrap_or(0)
}

fn project_of(q: &HashMap<String, String>) -> Option<String> {
    q.get("project").filter(|p| !p.is_empty()).cloned()
}

fn route(app: &App, req: &Req) -> Result<Answer> {
    let get = req.method == "GET";
    let post = req.method == "POST";
    let path = req.path.as_str();
    Ok(match path {
        "/" if get => {
            let conn = open(&app.dir)?;
            let project = project_of(&req.query);
            let before = req.query.get("before").and_then(|b| {
                let mut ids = b.split('.').map(|i| i.parse::<i64>().ok());
                Some(data::Seen {
                    observation: ids.next()??,
                    summary: ids.next()??,
                    prompt: ids.next()??,
                })
            });
            let page = data::latest(&conn, project.as_deref(), FEED_ITEMS, before)?;
            let total = data::count(&conn, project.as_deref())?;
            let offset = if before.is_some() {
                from(&req.query)
            } else {
                0
            };
            let projects = crate::memory::sessions::projects(&conn)?;
            Answer::html(
                200,
                pages::feed(&page, total, offset, &projects, project.as_deref()),
            )
        }
        "/search" if get => search_page(app, req)?,
        "/sessions" if get => {
            let conn = open(&app.dir)?;
            let project = project_of(&req.query);
            let offset = from(&req.query);
            let rows = data::sessions(&conn, project.as_deref(), pages::SESSIONS_PAGE, offset)?;
            let total = data::session_count(&conn, project.as_deref())?;
            let projects = crate::memory::sessions::projects(&conn)?;
            Answer::html(
                200,
                pages::sessions(&rows, total, offset, &projects, project.as_deref()),
            )
        }
        "/context" | "/context.json" if get => context_page(app, req)?,
        "/context/settings" if post => change_setting(app, req)?,
        "/health" if get => health_page(app, req.query.get("done").map(String::as_str))?,
        "/queue/replay" | "/queue/discard" if post => queue_action(app, req)?,
        "/quarantine/clear" if post => {
            if !confirmed(req) {
                return Ok(Answer::html(
                    200,
                    pages::confirm(
                        &pages::Confirm {
                            title: "Clear the quarantine?",
                            text: "This deletes every quarantined hook input for good.",
                            action: "/quarantine/clear",
                            fields: &[],
                            button: "Clear",
                            back: "/health",
                        },
                        &app.csrf,
                    ),
                ));
            }
            let mut conn = open(&app.dir)?;
            let n = quarantine::clear(&mut conn, &quarantine::Clear::All)?;
            done(&format!("{n} quarantined hook inputs cleared"))
        }
        "/acknowledge" if post => {
            let n = incidents::acknowledge(&app.dir)?;
            done(&format!("{n} notices acknowledged"))
        }
        "/forget" if post => forget_action(app, req)?,
        _ if get && path.starts_with("/memory/") => {
            let Some((kind, id)) = Kind::parse_reference(&path["/memory/".len()..]) else {
                return Ok(Answer::not_found("no such memory"));
            };
            let conn = open(&app.dir)?;
            let fetched = timeline::get_records(&conn, &[(kind, id)])?;
            match fetched.found.first() {
                Some(r) => Answer::html(200, pages::memory(r, &app.csrf)),
                None => Answer::not_found(&format!("memory {} does not exist", kind.reference(id))),
            }
        }
        _ if get && path.starts_with("/timeline/") => {
            let reference = &path["/timeline/".len()..];
            let Some((kind, id)) = Kind::parse_reference(reference) else {
                return Ok(Answer::not_found("no such memory"));
            };
            let conn = open(&app.dir)?;
            let req = TimelineRequest {
                anchor: Anchor::Record(kind, id),
                before: 10,
                after: 10,
                project: None,
            };
            let t = lock(&app.searcher).timeline(&conn, &req)?;
            if t.anchor.is_none() {
                return Ok(Answer::not_found(&format!(
                    "memory {} does not exist",
                    kind.reference(id)
                )));
            }
            Answer::html(200, pages::timeline(&kind.reference(id), &t))
        }
        _ if get && path.starts_with("/session/") => {
            let sid = &path["/session/".len()..];
            let conn = open(&app.dir)?;
            match data::session(&conn, sid, from(&req.query))? {
                Some(page) => Answer::html(200, pages::session(&page, &app.csrf)),
                None => Answer::not_found("no such session"),
            }
        }
        _ => Answer::not_found("no such page"),
    })
}

fn confirmed(req: &Req) -> bool {
    req.form.get("confirm").map(String::as_str) == Some("yes")
}

/// Back to the health page, saying what was done.
fn done(what: &str) -> Answer {
    Answer::redirect(&format!("/health?done={}", percent_encode(what)))
}

/// Replays or discards one skipped job (`id`) or all (`all=yes`); a discard asks first.
fn queue_action(app: &App, req: &Req) -> Result<Answer> {
    let replay = req.path == "/queue/replay";
    let all = req.form.get("all").map(String::as_str) == Some("yes");
    let id = req.form.get("id").and_then(|i| i.parse::<i64>().ok());
    let (selector, what) = match (all, id) {
        (true, _) => (Selector::AllSkipped, "every skipped job".to_string()),
        (false, Some(id)) => (Selector::Ids(vec![id]), format!("job {id}")),
        (false, None) => {
            return Ok(Answer::html(
                400,
                pages::message("Bad request", "no job id"),
            ));
        }
    };
    if !replay && !confirmed(req) {
        let id_text = id.map(|i| i.to_string()).unwrap_or_default();
        let fields: Vec<(&str, &str)> = if all {
            vec![("all", "yes")]
        } else {
            vec![("id", id_text.as_str())]
        };
        let title = format!("Discard {what}?");
        let text = format!(
            "Discarding deletes {what} for good: what it held is never observed. Replay is the way to try again."
        );
        return Ok(Answer::html(
            200,
            pages::confirm(
                &pages::Confirm {
                    title: &title,
                    text: &text,
                    action: "/queue/discard",
                    fields: &fields,
                    button: "Discard",
                    back: "/health",
                },
                &app.csrf,
            ),
        ));
    }
    let mut conn = open(&app.dir)?;
    let now = clock::now_ms();
    let (n, verb) = if replay {
        (admin::replay(&mut conn, &selector, now)?, "replayed")
    } else {
        (admin::discard(&mut conn, &selector, now)?, "discarded")
    };
    Ok(done(&match (all, n) {
        (true, n) => format!("{n} skipped jobs {verb}"),
        (false, 1) => format!("{what} {verb}"),
        (false, _) => format!("{what} was not skipped: nothing {verb}"),
    }))
}

/// What the next session of a project is told, as `cairn context` renders it, with the
/// settings read again from the data dir (so a change shows without a restart).
fn context_page(app: &App, req: &Req) -> Result<Answer> {
    let prompt = req.query.get("prompt").cloned().unwrap_or_default();
    context_answer(
        app,
        project_of(&req.query),
        &prompt,
        req.path == "/context.json",
        None,
    )
}

/// Whether the context page may change a setting: only those that shape what a session
/// is told (`context.*`, `recall.*`), never paths, model endpoints and keys, or sync;
/// `cairn config set` changes the others.
fn changeable(key: &str) -> bool {
    key.starts_with("context.") || key.starts_with("recall.")
}

/// A change of a setting from the context page (`key`, `value` or `unset=yes`), written
/// by the settings writer as `cairn config set` writes it, then the page again with the
/// new context, or with why nothing was written.
fn change_setting(app: &App, req: &Req) -> Result<Answer> {
    let key = req.form.get("key").cloned().unwrap_or_default();
    let outcome = if !changeable(&key) {
        Err(format!(
            "{key} cannot be changed here: the page changes context.* and recall.* settings \
             (`cairn config set` changes the others)"
        ))
    } else {
        let change = if req.form.get("unset").map(String::as_str) == Some("yes") {
            write::Change::Unset { key: key.clone() }
        } else {
            write::Change::Set {
                key: key.clone(),
                value: req.form.get("value").cloned().unwrap_or_default(),
            }
        };
        write::apply(&app.dir.settings(), &change)
            .map(|w| match &w.after {
                _ if w.unchanged() => format!("{key} unchanged"),
                Some(v) => format!("{key} set to {v} in settings.json"),
                None => format!("{key} back to its default, {}", w.effective),
            })
            .map_err(|e| format!("{e}; nothing was written"))
    };
    let refused = outcome.is_err();
    let mut answer = context_answer(app, project_of(&req.form), "", false, Some(outcome))?;
    if refused {
        answer.status = 400;
    }
    Ok(answer)
}

fn context_answer(
    app: &App,
    project: Option<String>,
    prompt: &str,
    json: bool,
    changed: Option<std::result::Result<String, String>>,
) -> Result<Answer> {
    let conn = open(&app.dir)?;
    let projects = crate::memory::sessions::projects(&conn)?;
    let Some(project) = project.or_else(|| projects.first().cloned()) else {
        return Ok(Answer::html(
            200,
            pages::message("Context", "No project has a session yet."),
        ));
    };
    let (settings, rows, error) = match Settings::load(&app.dir) {
        Ok(loaded) => {
            // Set in the file, whether or not a variable hides it.
            let file = Settings::load_from(&app.dir.settings(), std::iter::empty(), &[]).ok();
            let in_file = |key: &str| {
                file.as_ref()
                    .is_some_and(|f| matches!(f.sources.get(key), Some(Source::File(_))))
            };
            let rows = loaded
                .effective()
                .into_iter()
                .filter(|(k, _, _)| k.starts_with("context.") || k.starts_with("recall."))
                .map(|(key, value, src)| pages::SettingRow {
                    changeable: changeable(&key),
                    from_env: matches!(src, Source::Env(_)),
                    in_file: in_file(&key),
                    source: src.to_string(),
                    key,
                    value,
                })
                .collect::<Vec<_>>();
            (loaded.settings, rows, None)
        }
        Err(e) => (app.settings.clone(), Vec::new(), Some(e.to_string())),
    };
    let text = context::session_start(&conn, &project, &settings.context, clock::now_ms())?;
    let tokens = context::tokens(&text);
    if json {
        let json = serde_json::json!({ "project": project, "text": text, "tokens": tokens });
        return Ok(Answer {
            status: 200,
            kind: "application/json",
            body: json.to_string().into_bytes(),
            headers: Vec::new(),
        });
    }
    // What a prompt typed here would receive: the hook's own search and choice
    // (`recall::moment`): by the running worker, words and meaning, when it answers in
    // time, else by words alone; for a session given nothing yet.
    let prompt_off = moment::turned_off_by(&settings.recall, crate::memory::told::Moment::Prompt);
    let recalled = if prompt.trim().is_empty() || prompt_off.is_some() {
        None
    } else {
        let request = moment::prompt_request(&project, prompt, &settings.recall);
        let deadline = Duration::from_millis(settings.recall.worker_deadline_ms);
        Some(
            moment::find(&conn, &app.dir.recall_socket(), &request, deadline)
                .and_then(|f| {
                    let how = match (&f.by_meaning, &f.words_alone_because) {
                        (true, _) => {
                            "by words and by meaning (the running worker answered)".to_string()
                        }
                        (false, Some(why)) => format!("by words alone: {why}"),
                        (false, None) => "by words alone".to_string(),
                    };
                    Ok((moment::at_prompt(&conn, None, &f, &settings.recall)?, how))
                })
                .map_err(|e| e.to_string()),
        )
    };
    Ok(Answer::html(
        200,
        pages::context(pages::ContextView {
            project: &project,
            projects: &projects,
            text: &text,
            tokens,
            settings: &rows,
            settings_error: error.as_deref(),
            changed: changed
                .as_ref()
                .map(|c| c.as_deref().map_err(String::as_str)),
            csrf: &app.csrf,
            prompt,
            prompt_off,
            recalled: recalled.as_ref().map(|r| {
                r.as_ref()
                    .map(|(r, how)| (r, how.as_str()))
                    .map_err(Clone::clone)
            }),
        }),
    ))
}

fn lock(m: &Mutex<Searcher>) -> std::sync::MutexGuard<'_, Searcher> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn search_page(app: &App, req: &Req) -> Result<Answer> {
    let q = |k: &str| req.query.get(k).cloned().unwrap_or_default();
    let form = pages::SearchForm {
        q: q("q"),
        project: q("project"),
        types: q("type"),
        kind: if q("kind").is_empty() {
            "all".into()
        } else {
            q("kind")
        },
        order: if q("order").is_empty() {
            "relevance".into()
        } else {
            q("order")
        },
        concept: q("concept"),
        file: q("file"),
        since: q("since"),
        until: q("until"),
    };
    let conn = open(&app.dir)?;
    let projects = crate::memory::sessions::projects(&conn)?;
    let mut searcher = lock(&app.searcher);
    let by_meaning = searcher.unavailable().is_none();
    let asked = req.query.contains_key("q");
    let offset = from(&req.query);
    let hits = if asked {
        Some(match search_request(&form, offset) {
            Ok(sr) => searcher.search(&conn, &sr).map_err(|e| e.to_string()),
            Err(e) => Err(e),
        })
    } else {
        None
    };
    drop(searcher);
    // One more than shown was asked for: whether there is a next page.
    let more = matches!(&hits, Some(Ok(h)) if h.len() > SEARCH_LIMIT);
    let hits_ref = hits.as_ref().map(|r| {
        r.as_deref()
            .map(|h| &h[..h.len().min(SEARCH_LIMIT)])
            .map_err(Clone::clone)
    });
    Ok(Answer::html(
        200,
        pages::search(
            &form,
            &projects,
            hits_ref,
            offset,
            more,
            by_meaning,
            app.settings.search.min_relevance,
        ),
    ))
}

/// The search form as `cairn search` would take it: same filters, same words. An empty
/// field of the form is a field not given.
fn search_request(
    f: &pages::SearchForm,
    offset: usize,
) -> std::result::Result<SearchRequest, String> {
    let given = |s: &str| (!s.trim().is_empty()).then(|| s.trim().to_string());
    SearchFields {
        query: f.q.clone(),
        project: given(&f.project),
        types: vec![f.types.clone()],
        concept: given(&f.concept),
        file: given(&f.file),
        since: given(&f.since),
        until: given(&f.until),
        kind: Some(f.kind.clone()),
        order: Some(f.order.clone()),
        limit: SEARCH_LIMIT + 1,
        offset,
        asking_session: None,
    }
    .to_request(clock::now_ms())
    .map_err(|e| e.to_string())
}

/// Days the token chart covers.
pub const CHART_DAYS: usize = 30;

fn health_page(app: &App, notice: Option<&str>) -> Result<Answer> {
    let conn = open(&app.dir)?;
    let now = clock::now_ms();
    let status = status::gather(&app.dir, &conn, &app.settings, now)?;
    let skipped = stats::list(
        &conn,
        &ListFilter {
            status: Some(JobStatus::Skipped),
            session_id: None,
            limit: 100,
        },
    )?;
    let attention = status::attention_by_topic(&status);
    let today = now.div_euclid(86_400_000) * 86_400_000;
    let from = today - (CHART_DAYS as i64 - 1) * 86_400_000;
    let days = data::tokens_per_day(&conn, from)?;
    let chart = pages::chart(&days, from, CHART_DAYS);
    Ok(Answer::html(
        200,
        pages::health(&status, &attention, &skipped, &chart, &app.csrf, notice),
    ))
}

fn forget_action(app: &App, req: &Req) -> Result<Answer> {
    let confirmed = req.form.get("confirm").map(String::as_str) == Some("yes");
    let mut conn = open(&app.dir)?;
    if let Some(sid) = req.form.get("session").filter(|s| !s.is_empty()) {
        let what = format!("the memories of session {sid}");
        if !confirmed {
            let n = db::write(&mut conn, |tx| forget::session_memories(tx, sid))?.len();
            return Ok(Answer::html(
                200,
                pages::confirm_forget(&what, n, ("session", sid), &app.csrf),
            ));
        }
        let done = db::write(&mut conn, |tx| {
            forget::forget_session(tx, sid, clock::now_ms())
        })?;
        return Ok(Answer::html(200, pages::forgotten(&what, done.total())));
    }
    let reference = req.form.get("ref").cloned().unwrap_or_default();
    let Some((kind, id)) = Kind::parse_reference(&reference) else {
        return Ok(Answer::html(
            400,
            pages::message("Bad request", "nothing to forget"),
        ));
    };
    let memory = Memory::of(kind, id);
    let what = format!("memory {}", kind.reference(id));
    if !confirmed {
        let exists = !timeline::get_records(&conn, &[(kind, id)])?
            .found
            .is_empty();
        if !exists {
            return Ok(Answer::not_found(&format!("{what} does not exist")));
        }
        return Ok(Answer::html(
            200,
            pages::confirm_forget(&what, 1, ("ref", &kind.reference(id)), &app.csrf),
        ));
    }
    let done = db::write(&mut conn, |tx| {
        forget::forget(tx, &[memory], clock::now_ms())
    })?;
    Ok(Answer::html(200, pages::forgotten(&what, done.total())))
}

/// The live feed: server-sent events, one `memory` event per new row (JSON), polling the
/// database for rows past the last ids seen. Ends when the client goes or the viewer stops.
fn events(app: &App, mut out: TcpStream, query: &HashMap<String, String>) {
    let id = |k: &str| {
        query
            .get(k)
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or(0)
    };
    let project = project_of(query);
    let mut seen = data::Seen {
        observation: id("o"),
        summary: id("s"),
        prompt: id("p"),
    };
    let mut head = String::from("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n");
    for (k, v) in http::security_headers() {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("Connection: close\r\n\r\n: cairn live feed\n\n");
    if out
        .write_all(head.as_bytes())
        .and_then(|_| out.flush())
        .is_err()
    {
        return;
    }
    let conn = match open(&app.dir) {
        Ok(c) => c,
        Err(e) => {
            log::warn!("live feed: {e}");
            return;
        }
    };
    let mut quiet = 0u32;
    while !app.stop.load(Ordering::Relaxed) {
        let mut text = String::new();
        match data::since(&conn, project.as_deref(), seen, 100) {
            Ok((items, next)) => {
                for i in &items {
                    if let Ok(json) = serde_json::to_string(i) {
                        text.push_str(&format!("event: memory\ndata: {json}\n\n"));
                    }
                }
                // Where a tab goes on from when it opens the stream again.
                if next != seen
                    && let Ok(json) = serde_json::to_string(&next)
                {
                    text.push_str(&format!("event: seen\ndata: {json}\n\n"));
                }
                seen = next;
            }
            Err(e) if e.is_corrupt() => {
                log::warn!("live feed: {e}");
                return;
            }
            Err(e) => log::warn!("live feed: {e}"),
        }
        quiet += 1;
        // A comment now and then finds a client that has gone.
        if text.is_empty() && quiet >= 30 {
            text.push_str(": still here\n\n");
        }
        if !text.is_empty() {
            quiet = 0;
            if out
                .write_all(text.as_bytes())
                .and_then(|_| out.flush())
                .is_err()
            {
                return;
            }
        }
        std::thread::sleep(FEED_POLL);
    }
}

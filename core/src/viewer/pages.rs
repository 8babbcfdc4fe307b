//! The viewer's HTML, built as strings. Pure: values in, markup out. Every piece of memory
//! text goes through [`esc`] (or [`marked`] for a search snippet, which escapes first and
//! only then turns the match marks into `<mark>`), so a memory holding HTML or script shows
//! as text.

use std::fmt::Write as _;

use crate::clock;
use crate::ops::status::{Status, Topic};
use crate::queue::claim::JobStatus;
use crate::queue::stats::JobRow;
use crate::recall::moment::{Recalled, Verdict};
use crate::recall::search::Hit;
use crate::recall::snippet::{HIGHLIGHT_CLOSE, HIGHLIGHT_OPEN};
use crate::recall::timeline::{Record, Timeline};
use crate::viewer::data::{FeedPage, Item, SessionPage, SessionRow};
use crate::viewer::http::percent_encode;

/// Bidirectional controls (embeddings, overrides, isolates, marks): in memory text they
/// would reorder what is shown around them, so they are shown as U+FFFD instead. app.js
/// holds the same list for what it adds to a page.
pub fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}' | '\u{061C}')
}

/// Text made safe for HTML content and quoted attribute values, bidirectional controls
/// neutralised.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            c if is_bidi_control(c) => out.push('\u{FFFD}'),
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A snippet with its matches as `<mark>`: escaped first, so only cairn's marks become tags.
pub fn marked(snippet: &str) -> String {
    esc(snippet)
        .replace(HIGHLIGHT_OPEN, "<mark>")
        .replace(HIGHLIGHT_CLOSE, "</mark>")
}

/// A moment as a `<time>` element: UTC in the markup, turned into the reader's time zone
/// by app.js from `data-ms` (the page says which zone it shows).
fn time(ms: i64) -> String {
    format!(
        "<time datetime=\"{}\" data-ms=\"{ms}\">{} UTC</time>",
        clock::iso_utc(ms),
        clock::minute_utc(ms)
    )
}

/// "Showing 51–100 of 3,806" (`shown` from `offset`, of `total`).
fn showing(offset: usize, shown: usize, total: i64, what: &str) -> String {
    if shown == 0 {
        return format!(
            "<p class=\"count\">None of {} {what}.</p>",
            thousands(total)
        );
    }
    format!(
        "<p class=\"count\">Showing {}–{} of {} {what}.</p>",
        thousands(offset as i64 + 1),
        thousands((offset + shown) as i64),
        thousands(total)
    )
}

/// 12345 as "12,345".
pub fn thousands(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
}

/// A link to another page of a list: `base` with `params` (values encoded here).
fn page_link(base: &str, params: &[(&str, String)], text: &str, id: &str) -> String {
    let query: Vec<String> = params
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{k}={}", percent_encode(v)))
        .collect();
    let sep = if base.contains('?') { '&' } else { '?' };
    let href = if query.is_empty() {
        base.to_string()
    } else {
        format!("{base}{sep}{}", query.join("&"))
    };
    format!(
        "<a class=\"pager\" id=\"{id}\" href=\"{}\">{text}</a>",
        esc(&href)
    )
}

/// The page around `body`: navigation, the stylesheet and script (files, never inline).
pub fn layout(title: &str, active: &str, body: &str) -> String {
    let mut nav = String::new();
    for (href, name) in [
        ("/", "Feed"),
        ("/search", "Search"),
        ("/sessions", "Sessions"),
        ("/context", "Context"),
        ("/health", "Health"),
    ] {
        let class = if name == active { " class=\"on\"" } else { "" };
        let _ = write!(nav, "<a href=\"{href}\"{class}>{name}</a>");
    }
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} · cairn</title><link rel=\"icon\" href=\"/favicon.svg\" type=\"image/svg+xml\"><link rel=\"stylesheet\" href=\"/style.css\">\
         <script src=\"/app.js\" defer></script></head>\
         <body><header><span class=\"brand\">cairn</span><nav>{nav}</nav></header>\
         <main>{body}</main><footer><span id=\"tz\">Times in UTC.</span></footer></body></html>\n",
        esc(title)
    )
}

fn project_select(projects: &[String], current: Option<&str>) -> String {
    let mut out = String::from("<select name=\"project\"><option value=\"\">all projects</option>");
    for p in projects {
        let sel = if Some(p.as_str()) == current {
            " selected"
        } else {
            ""
        };
        let _ = write!(out, "<option value=\"{0}\"{sel}>{0}</option>", esc(p));
    }
    out.push_str("</select>");
    out
}

fn item_html(i: &Item) -> String {
    let detail = if i.detail.is_empty() || i.detail == i.title {
        String::new()
    } else {
        format!("<div class=\"detail\">{}</div>", esc(&i.detail))
    };
    format!(
        "<li class=\"item {kind}\"><div class=\"meta\"><a href=\"/memory/{r}\">{r}</a> \
         <span class=\"label\">{label}</span> <span class=\"project\">{project}</span> \
         {time}</div><div class=\"title\">{title}</div>{detail}</li>",
        kind = i.kind,
        r = esc(&i.reference),
        label = esc(&i.label),
        project = esc(&i.project),
        time = time(i.created_at),
        title = esc(&i.title),
    )
}

/// The live feed: the newest memories, then new ones as the worker writes them (app.js
/// listens on `/events`, from the ids in the list's data attributes), with a link to older
/// ones. `offset` is how many newer memories earlier pages showed.
pub fn feed(
    page: &FeedPage,
    total: i64,
    offset: usize,
    projects: &[String],
    project: Option<&str>,
) -> String {
    let first = offset == 0;
    let mut body = format!(
        "<h1>{}</h1><form class=\"bar\" method=\"get\" action=\"/\">{}\
         <button class=\"show\">Show</button></form>{}",
        if first { "Live feed" } else { "Older memories" },
        project_select(projects, project),
        showing(offset, page.items.len(), total, "memories"),
    );
    if first {
        let _ = write!(
            body,
            "<p class=\"hint\" id=\"live\">Waiting for new memories…</p>\
             <ul id=\"feed\" class=\"items\" data-project=\"{}\" data-o=\"{}\" data-s=\"{}\" data-p=\"{}\">",
            esc(project.unwrap_or("")),
            page.seen.observation,
            page.seen.summary,
            page.seen.prompt
        );
    } else {
        body.push_str("<ul class=\"items\">");
    }
    for i in &page.items {
        body.push_str(&item_html(i));
    }
    body.push_str("</ul>");
    if page.items.is_empty() && first {
        body.push_str("<p class=\"empty\">No memories yet.</p>");
    }
    body.push_str("<p class=\"pages\">");
    if !first {
        body.push_str(&page_link(
            "/",
            &[("project", project.unwrap_or("").to_string())],
            "Newest",
            "newest",
        ));
    }
    if let Some(o) = page.older {
        body.push_str(&page_link(
            "/",
            &[
                ("project", project.unwrap_or("").to_string()),
                (
                    "before",
                    format!("{}.{}.{}", o.observation, o.summary, o.prompt),
                ),
                ("from", (offset + page.items.len()).to_string()),
            ],
            "Older →",
            "older",
        ));
    }
    body.push_str("</p>");
    layout("Live feed", "Feed", &body)
}

/// Search results on a page.
pub const SEARCH_LIMIT: usize = 50;

/// The search form's values, as the person typed them.
#[derive(Debug, Clone, Default)]
pub struct SearchForm {
    pub q: String,
    pub project: String,
    pub types: String,
    pub kind: String,
    pub order: String,
    pub concept: String,
    pub file: String,
    pub since: String,
    pub until: String,
}

/// The search page: the form, then the hits (or the error).
pub fn search(
    form: &SearchForm,
    projects: &[String],
    hits: Option<Result<&[Hit], String>>,
    offset: usize,
    more: bool,
    by_meaning: bool,
    floor: f64,
) -> String {
    let ranked = form.order == "relevance" && !form.q.trim().is_empty();
    let opt = |name: &str, values: &[&str], current: &str| {
        let mut s = format!("<select name=\"{name}\">");
        for v in values {
            let sel = if *v == current { " selected" } else { "" };
            let _ = write!(s, "<option{sel}>{v}</option>");
        }
        s.push_str("</select>");
        s
    };
    let input = |name: &str, value: &str, placeholder: &str| {
        format!(
            "<input name=\"{name}\" value=\"{}\" placeholder=\"{placeholder}\">",
            esc(value)
        )
    };
    let how = format!(
        "{} Ordered by relevance; when even the best result is under {:.0}% likely to be the \
         one asked about, nothing is shown.",
        if by_meaning {
            "Searching by words and by meaning."
        } else {
            "Searching by words (no sentence model: `cairn embed --fetch` adds search by meaning)."
        },
        floor * 100.0
    );
    let mut body = format!(
        "<h1>Search</h1><form class=\"search\" method=\"get\" action=\"/search\">\
         <input type=\"search\" name=\"q\" id=\"q\" value=\"{q}\" placeholder=\"words, &quot;a phrase&quot;, -not, prefix*, OR\" autofocus>\
         <button>Search</button><details><summary>Filters</summary><div class=\"filters\">{project}{kind}{order}{types}{concept}{file}{since}{until}</div></details></form>\
         <p class=\"hint\">{how}</p>",
        q = esc(&form.q),
        project = project_select(projects, Some(form.project.as_str())),
        kind = opt(
            "kind",
            &["all", "observations", "summaries", "prompts"],
            &form.kind
        ),
        order = opt("order", &["relevance", "newest", "oldest"], &form.order),
        types = input("type", &form.types, "type: decision, bugfix…"),
        concept = input("concept", &form.concept, "concept"),
        file = input("file", &form.file, "file path contains"),
        since = input("since", &form.since, "since: 7d, 2026-01-31"),
        until = input("until", &form.until, "until"),
        how = esc(&how)
    );
    match hits {
        None => {}
        Some(Err(e)) => {
            let _ = write!(body, "<p class=\"error\">{}</p>", esc(&e));
        }
        Some(Ok([])) if offset == 0 && ranked => {
            let _ = write!(
                body,
                "<p class=\"empty\" id=\"none-relevant\">Nothing relevant: no memory reaches the relevance floor ({:.0}%, the setting <code>search.min_relevance</code>).</p>",
                floor * 100.0
            );
        }
        Some(Ok([])) if offset == 0 => body.push_str("<p class=\"empty\">No results.</p>"),
        Some(Ok(hits)) => {
            let _ = write!(
                body,
                "<p class=\"count\" id=\"count\">Results {}–{}{}.</p><ul class=\"items hits\">",
                thousands(offset as i64 + 1),
                thousands((offset + hits.len()) as i64),
                if more {
                    " (more on the next page)"
                } else {
                    ", the last"
                }
            );
            for h in hits {
                let _ = write!(
                    body,
                    "<li class=\"item\"><div class=\"meta\"><a href=\"/memory/{r}\">{r}</a> \
                     <span class=\"label\">{label}</span> <span class=\"project\">{project}</span>{device} \
                     {time}{score} <a class=\"side\" href=\"/timeline/{r}\">timeline</a></div>\
                     <div class=\"title\">{title}</div><div class=\"snippet\">{snippet}</div></li>",
                    score = if ranked {
                        format!(
                            " <span class=\"score\" title=\"estimated chance that it answers the query\">relevance {:.0}%</span>",
                            h.relevance * 100.0
                        )
                    } else {
                        String::new()
                    },
                    r = esc(&h.reference()),
                    label = esc(&h.label),
                    project = esc(&h.project),
                    device = h
                        .device
                        .as_ref()
                        .map(|d| format!(
                            " <span class=\"device\" title=\"from another device\">@{}</span>",
                            esc(d)
                        ))
                        .unwrap_or_default(),
                    time = time(h.created_at),
                    title = esc(&h.title),
                    snippet = marked(&h.snippet),
                );
            }
            body.push_str("</ul>");
            let params = |from: usize| {
                vec![
                    ("q", form.q.clone()),
                    ("project", form.project.clone()),
                    ("type", form.types.clone()),
                    ("kind", form.kind.clone()),
                    ("order", form.order.clone()),
                    ("concept", form.concept.clone()),
                    ("file", form.file.clone()),
                    ("since", form.since.clone()),
                    ("until", form.until.clone()),
                    ("from", from.to_string()),
                ]
            };
            body.push_str("<p class=\"pages\">");
            if offset > 0 {
                body.push_str(&page_link(
                    "/search",
                    &params(offset.saturating_sub(SEARCH_LIMIT)),
                    "← Previous",
                    "previous",
                ));
            }
            if more {
                body.push_str(&page_link(
                    "/search",
                    &params(offset + hits.len()),
                    "Next →",
                    "next",
                ));
            }
            body.push_str("</p>");
        }
    }
    layout("Search", "Search", &body)
}

fn list_html(name: &str, items: &[String]) -> String {
    if items.is_empty() {
        return String::new();
    }
    let mut s = format!("<dt>{name}</dt><dd><ul>");
    for i in items {
        let _ = write!(s, "<li>{}</li>", esc(i));
    }
    s.push_str("</ul></dd>");
    s
}

fn field(name: &str, value: &str) -> String {
    if value.is_empty() {
        String::new()
    } else {
        format!("<dt>{name}</dt><dd class=\"text\">{}</dd>", esc(value))
    }
}

/// One memory in full, with where it came from and what can be done with it.
pub fn memory(record: &Record, csrf: &str) -> String {
    let (reference, title, session, project, created, mut dl) = match record {
        Record::Observation(o) => {
            let mut dl = String::new();
            dl.push_str(&field("type", &o.kind));
            dl.push_str(&field("subtitle", &o.content.subtitle));
            dl.push_str(&field("narrative", &o.content.narrative));
            dl.push_str(&list_html("facts", &o.content.facts));
            dl.push_str(&list_html("concepts", &o.content.concepts));
            dl.push_str(&list_html("files read", &o.content.files_read));
            dl.push_str(&list_html("files modified", &o.content.files_modified));
            dl.push_str(&field("origin", &o.origin));
            if let Some(p) = &o.prompt {
                dl.push_str(&field("prompt of the turn", p));
            }
            (
                format!("{}", o.id),
                o.content.title.clone(),
                o.session_id.clone(),
                o.project.clone(),
                o.created_at,
                dl,
            )
        }
        Record::Summary(s) => {
            let mut dl = String::new();
            dl.push_str(&field("request", &s.request));
            dl.push_str(&field("investigated", &s.investigated));
            dl.push_str(&field("learned", &s.learned));
            dl.push_str(&field("completed", &s.completed));
            dl.push_str(&field("next steps", &s.next_steps));
            dl.push_str(&field("notes", &s.notes));
            dl.push_str(&list_html("files read", &s.files_read));
            dl.push_str(&list_html("files edited", &s.files_edited));
            dl.push_str(&field("origin", &s.origin));
            (
                format!("S{}", s.id),
                format!("Summary of turn {}", s.prompt_number),
                Some(s.session_id.clone()),
                s.project.clone(),
                s.created_at,
                dl,
            )
        }
        Record::Prompt(p) => (
            format!("P{}", p.id),
            format!("Prompt {}", p.prompt_number),
            Some(p.session_id.clone()),
            p.project.clone(),
            p.created_at,
            field("text", &p.text),
        ),
    };
    dl.push_str(&field("project", &project));
    let _ = write!(dl, "<dt>created</dt><dd>{}</dd>", time(created));
    let session_link = session
        .as_ref()
        .map(|s| {
            format!(
                "<a href=\"/session/{}\">session {}</a>",
                percent_encode(s),
                esc(s)
            )
        })
        .unwrap_or_default();
    let body = format!(
        "<h1><span class=\"ref\">{r}</span> {title}</h1><p class=\"links\">\
         <a href=\"/timeline/{r}\">timeline around it</a> {session_link}</p><dl>{dl}</dl>\
         <form method=\"post\" action=\"/forget\" class=\"danger\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
         <input type=\"hidden\" name=\"ref\" value=\"{r}\"><button name=\"confirm\" value=\"no\">Forget this memory…</button></form>",
        r = esc(&reference),
        title = esc(&title),
        csrf = esc(csrf),
    );
    layout(&reference, "", &body)
}

/// The timeline around a memory.
pub fn timeline(reference: &str, t: &Timeline) -> String {
    let mut body = format!(
        "<h1>Timeline around <a href=\"/memory/{0}\">{0}</a></h1><ul class=\"items\">",
        esc(reference)
    );
    for e in &t.entries {
        let class = if e.anchor { " anchor" } else { "" };
        let _ = write!(
            body,
            "<li class=\"item{class}\"><div class=\"meta\"><a href=\"/memory/{r}\">{r}</a> \
             <span class=\"label\">{label}</span> <span class=\"project\">{project}</span> \
             {time}</div><div class=\"title\">{title}</div>\
             <div class=\"detail\">{detail}</div></li>",
            r = esc(&e.reference()),
            label = esc(&e.label),
            project = esc(&e.project),
            time = time(e.created_at),
            title = esc(&e.title),
            detail = esc(&e.detail),
        );
    }
    body.push_str("</ul>");
    layout("Timeline", "", &body)
}

/// Sessions page size.
pub const SESSIONS_PAGE: usize = 50;

/// The sessions page: each session by what was asked in it, its project, size and time;
/// sessions without a memory left are not listed.
pub fn sessions(
    rows: &[SessionRow],
    total: i64,
    offset: usize,
    projects: &[String],
    project: Option<&str>,
) -> String {
    let mut body = format!(
        "<h1>Sessions</h1><form class=\"bar\" method=\"get\" action=\"/sessions\">{}\
         <button class=\"show\">Show</button></form>{}<ul class=\"items sessions\">",
        project_select(projects, project),
        showing(offset, rows.len(), total, "sessions"),
    );
    for r in rows {
        let what = r
            .first_prompt
            .as_deref()
            .or(r.summary.as_deref())
            .unwrap_or("(no prompt kept)");
        let summary = match (&r.first_prompt, &r.summary) {
            (Some(_), Some(s)) => format!("<div class=\"detail\">Last turn: {}</div>", esc(s)),
            _ => String::new(),
        };
        let _ = write!(
            body,
            "<li class=\"item\"><div class=\"meta\"><span class=\"project\">{project}</span> \
             {time} <span>{n} memor{y}</span> <span>{turns} turn{ts}</span></div>\
             <div class=\"title\"><a href=\"/session/{href}\">{what}</a></div>{summary}</li>",
            project = esc(&r.project),
            time = time(r.started_at),
            n = thousands(r.memories),
            y = if r.memories == 1 { "y" } else { "ies" },
            turns = r.prompts,
            ts = if r.prompts == 1 { "" } else { "s" },
            href = percent_encode(&r.session_id),
            what = esc(what),
        );
    }
    body.push_str("</ul><p class=\"pages\">");
    let project = project.unwrap_or("").to_string();
    if offset > 0 {
        body.push_str(&page_link(
            "/sessions",
            &[
                ("project", project.clone()),
                ("from", offset.saturating_sub(SESSIONS_PAGE).to_string()),
            ],
            "← Newer",
            "newer",
        ));
    }
    if ((offset + rows.len()) as i64) < total {
        body.push_str(&page_link(
            "/sessions",
            &[
                ("project", project),
                ("from", (offset + rows.len()).to_string()),
            ],
            "Older →",
            "older",
        ));
    }
    body.push_str("</p>");
    layout("Sessions", "Sessions", &body)
}

/// One session's turns, in order, a page of its observations at a time.
pub fn session(page: &SessionPage, csrf: &str) -> String {
    let row = &page.row;
    let shown: usize = page.turns.iter().map(|t| t.observations.len()).sum();
    let mut body = format!(
        "<h1>{title}</h1><p class=\"links\">{project} · {status} · started {started} · \
         {n} memor{y} · <span class=\"ref\">{sid}</span></p>{showing}",
        title = esc(row
            .first_prompt
            .as_deref()
            .or(row.summary.as_deref())
            .unwrap_or("Session")),
        sid = esc(&row.session_id),
        project = esc(&row.project),
        status = esc(&row.status),
        started = time(row.started_at),
        n = thousands(row.memories),
        y = if row.memories == 1 { "y" } else { "ies" },
        showing = showing(page.offset, shown, page.observations, "observations"),
    );
    for t in &page.turns {
        let _ = write!(
            body,
            "<section class=\"turn\"><h2>Turn {}</h2>",
            t.prompt_number
        );
        if let Some(p) = &t.prompt {
            let _ = write!(
                body,
                "<p class=\"prompt\"><a href=\"/memory/{}\">{}</a> {}</p>",
                esc(&p.reference),
                esc(&p.reference),
                esc(&p.title)
            );
        }
        if !t.observations.is_empty() {
            body.push_str("<ul class=\"items\">");
            for o in &t.observations {
                body.push_str(&item_html(o));
            }
            body.push_str("</ul>");
        }
        if let Some(s) = &t.summary {
            let _ = write!(
                body,
                "<div class=\"summary\"><a href=\"/memory/{r}\">{r}</a> <strong>{title}</strong> {detail}</div>",
                r = esc(&s.reference),
                title = esc(&s.title),
                detail = esc(&s.detail)
            );
        }
        body.push_str("</section>");
    }
    let base = format!("/session/{}", percent_encode(&row.session_id));
    body.push_str("<p class=\"pages\">");
    if page.offset > 0 {
        body.push_str(&page_link(
            &base,
            &[(
                "from",
                page.offset
                    .saturating_sub(crate::viewer::data::SESSION_OBSERVATIONS)
                    .to_string(),
            )],
            "← Earlier",
            "earlier",
        ));
    }
    if ((page.offset + shown) as i64) < page.observations {
        body.push_str(&page_link(
            &base,
            &[("from", (page.offset + shown).to_string())],
            "Later →",
            "later",
        ));
    }
    body.push_str("</p>");
    let _ = write!(
        body,
        "<form method=\"post\" action=\"/forget\" class=\"danger\"><input type=\"hidden\" name=\"csrf\" value=\"{}\">\
         <input type=\"hidden\" name=\"session\" value=\"{}\"><button name=\"confirm\" value=\"no\">Forget this session's memories…</button></form>",
        esc(csrf),
        esc(&row.session_id)
    );
    layout("Session", "Sessions", &body)
}

/// What the context page shows.
#[derive(Debug)]
pub struct ContextView<'a> {
    pub project: &'a str,
    pub projects: &'a [String],
    /// The SessionStart block and its tokens.
    pub text: &'a str,
    pub tokens: usize,
    /// The settings that shape it.
    pub settings: &'a [SettingRow],
    pub settings_error: Option<&'a str>,
    /// What a change of a setting just did (`Ok`) or why it was refused (`Err`).
    pub changed: Option<Result<&'a str, &'a str>>,
    /// The form token of the settings forms.
    pub csrf: &'a str,
    /// A prompt typed on the page, and what it would receive.
    pub prompt: &'a str,
    /// What it would receive, and how it was found.
    /// The setting that turns recall at prompts off, when one does: nothing is given.
    pub prompt_off: Option<&'static str>,
    pub recalled: Option<Result<(&'a Recalled, &'a str), String>>,
}

/// One setting on the context page: its effective value, where that came from, and
/// whether the page may change it.
#[derive(Debug, Clone, PartialEq)]
pub struct SettingRow {
    pub key: String,
    pub value: serde_json::Value,
    /// `default`, the file, or `env VAR`.
    pub source: String,
    /// An environment variable of `cairn ui`'s sets it: it wins over the file.
    pub from_env: bool,
    /// `settings.json` sets it (so Default has something to remove).
    pub in_file: bool,
    pub changeable: bool,
}

/// The context page: exactly what the next session of a project is told at its start (the
/// block `cairn context` prints), its size, what a prompt typed there would receive with
/// its scores, and the settings that shape both. app.js keeps the block current from
/// `/context.json`.
pub fn context(v: ContextView<'_>) -> String {
    let ContextView {
        project,
        projects,
        text,
        tokens,
        settings,
        settings_error,
        changed,
        csrf,
        prompt,
        prompt_off,
        recalled,
    } = v;
    let mut body = String::from("<h1>What the next session is told</h1>");
    match changed {
        None => {}
        Some(Ok(done)) => {
            let _ = write!(
                body,
                "<p class=\"notice\" id=\"setting-changed\">{}</p>",
                esc(done)
            );
        }
        Some(Err(why)) => {
            let _ = write!(
                body,
                "<p class=\"error\" id=\"setting-refused\">{}</p>",
                esc(why)
            );
        }
    }
    let _ = write!(
        body,
        "<form class=\"bar\" method=\"get\" action=\"/context\">{}\
         <button class=\"show\">Show</button></form>\
         <p class=\"hint\">The block Claude Code receives when a session of this project starts \
         (what <code>cairn context</code> prints): <strong id=\"context-tokens\">{}</strong> tokens (estimated as characters / 4). \
         It follows new memories as they are written.</p>\
         <pre id=\"context\" class=\"context\" data-project=\"{}\">{}</pre>",
        project_select_named(projects, project),
        tokens,
        esc(project),
        esc(text),
    );
    if text.is_empty() {
        body.push_str("<p class=\"empty\" id=\"context-empty\">Nothing to tell yet: this project has no summary or observation.</p>");
    }
    let _ = write!(
        body,
        "<h2>What a prompt would receive</h2><form class=\"search\" method=\"get\" action=\"/context\">\
         <input type=\"hidden\" name=\"project\" value=\"{}\">\
         <input type=\"search\" name=\"prompt\" id=\"prompt\" value=\"{}\" placeholder=\"a prompt, as you would type it to Claude\">\
         <button>What would it receive?</button></form>",
        esc(project),
        esc(prompt)
    );
    match recalled {
        None if !prompt.trim().is_empty() => {
            if let Some(setting) = prompt_off {
                let _ = write!(
                    body,
                    "<p class=\"empty\" id=\"prompt-off\">Nothing is given: turned off by <code>{}</code>.</p>",
                    esc(setting)
                );
            }
        }
        None => {}
        Some(Err(e)) => {
            let _ = write!(body, "<p class=\"error\">{}</p>", esc(&e));
        }
        Some(Ok((r, how))) => {
            let _ = write!(
                body,
                "<p class=\"hint\" id=\"prompt-how\">Found {}.</p>",
                esc(how)
            );
            if r.block.is_empty() {
                body.push_str("<p class=\"empty\" id=\"prompt-nothing\">Nothing: no memory is relevant enough.</p>");
            } else {
                let _ = write!(
                    body,
                    "<p class=\"hint\"><strong id=\"prompt-tokens\">{}</strong> tokens, given with the prompt:</p><pre class=\"context\" id=\"prompt-block\">{}</pre>",
                    crate::recall::context::tokens(&r.block),
                    esc(&r.block)
                );
            }
            if !r.offered.is_empty() {
                body.push_str("<table id=\"offered\"><thead><tr><th>memory</th><th>relevance</th><th>given?</th><th>title</th></tr></thead><tbody>");
                for o in &r.offered {
                    let verdict = match o.verdict {
                        Verdict::Given => "given",
                        Verdict::BelowThreshold => "below recall.min_relevance",
                        Verdict::AlreadyGiven => "already given this session",
                        Verdict::OverCount => "over recall.max_memories",
                        Verdict::OverBudget => "over recall.budget_tokens",
                    };
                    let _ = write!(
                        body,
                        "<tr class=\"{}\"><td><a href=\"/memory/{r}\">{r}</a></td><td class=\"score\">{:.0}%</td><td>{verdict}</td><td>{}</td></tr>",
                        if o.verdict == Verdict::Given {
                            ""
                        } else {
                            "weak"
                        },
                        o.relevance * 100.0,
                        esc(&o.title),
                        r = esc(&o.reference()),
                    );
                }
                body.push_str("</tbody></table>");
            }
        }
    }
    body.push_str("<h2>Settings that shape it</h2>");
    if let Some(e) = settings_error {
        let _ = write!(body, "<p class=\"error\">{}</p>", esc(e));
    }
    body.push_str("<table id=\"context-settings\"><thead><tr><th>setting</th><th>value</th><th>from</th></tr></thead><tbody>");
    for row in settings {
        let _ = write!(
            body,
            "<tr><td><code>{}</code></td><td>{}</td><td class=\"text\">{}{}</td></tr>",
            esc(&row.key),
            setting_value(row, project, csrf),
            esc(&row.source),
            if row.from_env {
                " (wins over settings.json)"
            } else {
                ""
            }
        );
    }
    body.push_str(
        "</tbody></table><p class=\"hint\">A change is written to the data dir's <code>settings.json</code> \
         as <code>cairn config set</code> writes it, checked the same way; Default removes it from the file. \
         A <code>CAIRN_CONTEXT__*</code> or <code>CAIRN_RECALL__*</code> variable in <code>cairn ui</code>'s \
         environment wins over the file. <code>cairn config</code> lists every setting.</p>",
    );
    layout("Context", "Context", &body)
}

/// A setting's value: a form that changes it when the page may, else the value.
fn setting_value(row: &SettingRow, project: &str, csrf: &str) -> String {
    let shown = match &row.value {
        serde_json::Value::String(s) => s.clone(),
        v => v.to_string(),
    };
    if !row.changeable {
        return esc(&shown);
    }
    let id = format!("set-{}", row.key.replace('.', "-"));
    let input = match row.value {
        serde_json::Value::Bool(b) => format!(
            "<select name=\"value\" id=\"{id}\"><option{}>true</option><option{}>false</option></select>",
            if b { " selected" } else { "" },
            if b { "" } else { " selected" },
        ),
        _ => format!(
            "<input name=\"value\" id=\"{id}\" value=\"{}\" size=\"8\">",
            esc(&shown)
        ),
    };
    let default = if row.in_file {
        format!(
            " <button name=\"unset\" value=\"yes\" id=\"{id}-default\" class=\"quiet\">Default</button>"
        )
    } else {
        String::new()
    };
    format!(
        "<form method=\"post\" action=\"/context/settings\" class=\"setting\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{}\">\
         <input type=\"hidden\" name=\"project\" value=\"{}\">\
         <input type=\"hidden\" name=\"key\" value=\"{}\">{input} \
         <button id=\"{id}-save\">Save</button>{default}</form>",
        esc(csrf),
        esc(project),
        esc(&row.key),
    )
}

/// A project list where one project is always chosen.
fn project_select_named(projects: &[String], current: &str) -> String {
    let mut out = String::from("<select name=\"project\">");
    let mut found = false;
    for p in projects {
        let sel = if p == current {
            found = true;
            " selected"
        } else {
            ""
        };
        let _ = write!(out, "<option value=\"{0}\"{sel}>{0}</option>", esc(p));
    }
    if !found {
        let _ = write!(
            out,
            "<option value=\"{0}\" selected>{0}</option>",
            esc(current)
        );
    }
    out.push_str("</select>");
    out
}

/// What forgetting would delete, and the button that does it.
pub fn confirm_forget(what: &str, count: usize, field: (&str, &str), csrf: &str) -> String {
    let body = format!(
        "<h1>Forget {what}?</h1><p>This deletes {count} memor{y} for good: {what}. It will not \
         come back from an import, and its vector is deleted with it.</p>\
         <form method=\"post\" action=\"/forget\" class=\"danger\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
         <input type=\"hidden\" name=\"{name}\" value=\"{value}\"><button name=\"confirm\" value=\"yes\" id=\"confirm\">Forget</button> \
         <a href=\"/\">Keep it</a></form>",
        what = esc(what),
        y = if count == 1 { "y" } else { "ies" },
        csrf = esc(csrf),
        name = field.0,
        value = esc(field.1),
    );
    layout("Forget", "", &body)
}

/// After a forget.
pub fn forgotten(what: &str, count: usize) -> String {
    let body = format!(
        "<h1>Forgotten</h1><p id=\"done\">{count} memor{y} deleted ({what}).</p><p><a href=\"/\">Back to the feed</a></p>",
        y = if count == 1 { "y" } else { "ies" },
        what = esc(what)
    );
    layout("Forgotten", "", &body)
}

/// A message page (not found, refused).
pub fn message(title: &str, text: &str) -> String {
    layout(
        title,
        "",
        &format!("<h1>{}</h1><p>{}</p>", esc(title), esc(text)),
    )
}

fn bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.1} GiB", n as f64 / (1u64 << 30) as f64),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}

/// Tokens per day as an inline SVG bar chart (no script, no style attributes); a sentence
/// when there were none.
pub fn chart(days: &[(i64, i64)], from: i64, count: usize) -> String {
    let Some(max) = days.iter().map(|d| d.1).max().filter(|m| *m > 0) else {
        return format!(
            "<p class=\"empty\" id=\"no-tokens\">No model tokens in the last {count} days.</p>"
        );
    };
    let (w, h, bar) = (count * 12, 120usize, 10usize);
    let mut s = format!(
        "<svg class=\"chart\" viewBox=\"0 0 {w} {}\" role=\"img\" aria-label=\"tokens per day\">",
        h + 14
    );
    for i in 0..count {
        let day = from + i as i64 * 86_400_000;
        let tokens = days.iter().find(|d| d.0 == day).map_or(0, |d| d.1);
        let bh = ((tokens as f64 / max as f64) * h as f64).round() as usize;
        let _ = write!(
            s,
            "<rect x=\"{}\" y=\"{}\" width=\"{bar}\" height=\"{}\" fill=\"#4b7bec\"><title>{} (UTC): {} tokens</title></rect>",
            i * 12,
            h - bh,
            bh.max(1),
            clock::date_utc(day),
            thousands(tokens)
        );
    }
    let _ = write!(
        s,
        "<text x=\"0\" y=\"{}\" font-size=\"10\" fill=\"#888\">{}</text><text x=\"{w}\" y=\"{}\" font-size=\"10\" fill=\"#888\" text-anchor=\"end\">highest day: {} tokens</text></svg>",
        h + 12,
        clock::date_utc(from),
        h + 12,
        thousands(max)
    );
    s
}

/// A form posting `fields` (and the form token) to `action`, as one button.
fn button(
    action: &str,
    fields: &[(&str, &str)],
    label: &str,
    class: &str,
    id: &str,
    csrf: &str,
) -> String {
    let mut s = format!(
        "<form method=\"post\" action=\"{action}\"><input type=\"hidden\" name=\"csrf\" value=\"{}\">",
        esc(csrf)
    );
    for (k, v) in fields {
        let _ = write!(
            s,
            "<input type=\"hidden\" name=\"{k}\" value=\"{}\">",
            esc(v)
        );
    }
    let _ = write!(
        s,
        "<button class=\"{class}\" id=\"{}\">{label}</button></form>",
        esc(id)
    );
    s
}

/// What a confirmation page asks.
#[derive(Debug)]
pub struct Confirm<'a> {
    pub title: &'a str,
    pub text: &'a str,
    pub action: &'a str,
    pub fields: &'a [(&'a str, &'a str)],
    pub button: &'a str,
    pub back: &'a str,
}

/// Asks before a change that cannot be undone; the button posts it with `confirm=yes`.
pub fn confirm(c: &Confirm<'_>, csrf: &str) -> String {
    let mut fields: Vec<(&str, &str)> = c.fields.to_vec();
    fields.push(("confirm", "yes"));
    let body = format!(
        "<h1>{}</h1><p>{}</p><div class=\"danger\">{} <a href=\"{}\">Cancel</a></div>",
        esc(c.title),
        esc(c.text),
        button(c.action, &fields, &esc(c.button), "", "confirm", csrf),
        esc(c.back)
    );
    layout(c.title, "", &body)
}

fn plural(n: i64, one: &str, many: &str) -> String {
    format!("{} {}", thousands(n), if n == 1 { one } else { many })
}

/// The health page: what `cairn status` reports (its data and its rules), with every
/// remedy the page can apply as a button here: replay and discard skipped jobs, clear the
/// quarantine, acknowledge notices.
pub fn health(
    status: &Status,
    attention: &[(Topic, String)],
    skipped: &[JobRow],
    chart_svg: &str,
    csrf: &str,
    notice: Option<&str>,
) -> String {
    let mut body = String::from("<h1>Health</h1>");
    if let Some(n) = notice {
        let _ = write!(body, "<p class=\"notice\" id=\"notice\">{}</p>", esc(n));
    }
    if attention.is_empty() {
        body.push_str("<p class=\"ok\">Healthy.</p>");
    } else {
        body.push_str("<ul class=\"attention\">");
        for (topic, text) in attention {
            // Where this page has the remedy, it says so instead of naming a command.
            let text = match topic {
                Topic::Skipped => format!(
                    "{} after failing: see the errors below, fix the cause, then replay them (or discard those that can never succeed).",
                    plural(
                        status.queue.count(JobStatus::Skipped),
                        "job was skipped",
                        "jobs were skipped"
                    )
                ),
                Topic::Quarantine => format!(
                    "{} quarantined as unreadable in the last 7 days (a Claude Code update may have changed its hook format): see them below, then clear them.",
                    plural(
                        status.quarantined_recently,
                        "hook input was",
                        "hook inputs were"
                    )
                ),
                Topic::Lost => match &status.lost {
                    Some(l) => format!(
                        "{} could not be kept (neither written nor spooled), the last at {}: {}; free space in the data dir, then acknowledge below.",
                        plural(l.count as i64, "hook event", "hook events"),
                        clock::minute_utc(l.last_at),
                        l.cause
                    ),
                    None => text.clone(),
                },
                _ => text.clone(),
            };
            let _ = write!(body, "<li>{}</li>", esc(&text));
        }
        body.push_str("</ul>");
    }
    if !status.notices.is_empty() || status.lost.is_some() {
        body.push_str("<h2>Notices</h2><ul>");
        for n in &status.notices {
            let _ = write!(body, "<li>{} {}</li>", time(n.at), esc(&n.message));
        }
        body.push_str("</ul>");
        body.push_str(&button(
            "/acknowledge",
            &[],
            "Acknowledge",
            "",
            "acknowledge",
            csrf,
        ));
    }

    let w = &status.worker;
    let worker = if w.running {
        let mut s = format!("running (pid {})", w.pid.unwrap_or(0));
        if let Some(u) = w.uptime_ms {
            let _ = write!(s, " for {}", clock::span(u, false));
        }
        if let (Some(p), Some(m)) = (&w.provider, &w.model) {
            let _ = write!(s, ", {p} {m}");
        }
        esc(&s)
            + &match w.last_heartbeat_at {
                Some(t) => format!(", last heartbeat {}", time(t)),
                None => ", no heartbeat yet".into(),
            }
    } else {
        "not running".to_string()
    };
    let _ = write!(
        body,
        "<h2>Worker and queue</h2><dl class=\"grid\"><dt>worker</dt><dd id=\"worker\">{worker}</dd>"
    );
    for st in [
        JobStatus::Pending,
        JobStatus::Claimed,
        JobStatus::Done,
        JobStatus::Skipped,
    ] {
        let _ = write!(
            body,
            "<dt>queue {}</dt><dd>{}</dd>",
            st.as_str(),
            thousands(status.queue.count(st))
        );
    }
    if let Some(d) = &status.next_due {
        let _ = write!(
            body,
            "<dt>next job</dt><dd>#{} due {}</dd>",
            d.job_id,
            time(d.due_at)
        );
    }
    let r = &status.recent_calls;
    let _ = write!(
        body,
        "<dt>recent model calls</dt><dd>{} of the last {} failed</dd>",
        r.failed, r.calls
    );
    if let Some(f) = &r.latest_failure {
        let _ = write!(
            body,
            "<dt>latest failure</dt><dd class=\"text\">{} {} {}: {}</dd>",
            esc(&f.provider),
            esc(&f.model),
            time(f.at),
            esc(&f.error)
        );
    }
    let budget = if status.daily_token_budget == 0 {
        "no daily limit".to_string()
    } else {
        format!("of {} a day", thousands(status.daily_token_budget as i64))
    };
    let _ = write!(
        body,
        "<dt>tokens today (UTC)</dt><dd>{} ({budget})</dd>",
        thousands(status.tokens_today)
    );
    if let Some(until) = status.budget_spent_until {
        let _ = write!(
            body,
            "<dt>budget spent</dt><dd>jobs wait until {}</dd>",
            time(until)
        );
    }
    for p in &status.model_calls_last_day {
        let _ = write!(
            body,
            "<dt>last 24 h: {} {}</dt><dd>{} calls ({} failed), {} tokens in, {} out{}</dd>",
            esc(&p.provider),
            esc(&p.model),
            p.totals.calls,
            p.totals.failed,
            thousands(p.totals.input_tokens as i64),
            thousands(p.totals.output_tokens as i64),
            if p.cost_usd > 0.0 {
                format!(", ${:.2}", p.cost_usd)
            } else {
                String::new()
            }
        );
    }
    let sr = &status.search;
    let by_meaning = match (&sr.model, &sr.unavailable) {
        (Some(m), _) => format!(
            "by words and by meaning ({}): {} memories with a vector, {} waiting",
            m,
            thousands(sr.embedded as i64),
            thousands(sr.queued as i64)
        ),
        (None, Some(why)) => format!("by words only: {why}"),
        (None, None) => "by words only".into(),
    };
    let m = &status.memories;
    let _ = write!(
        body,
        "</dl><h2>Memory</h2><dl class=\"grid\"><dt>search</dt><dd id=\"search-state\">{}</dd>\
         <dt>memories</dt><dd>{} observations, {} summaries, {} prompts, {} sessions</dd>\
         <dt>database</dt><dd>{}</dd><dt>spooled events</dt><dd>{}</dd>\
         <dt>recovered (7 days)</dt><dd>{}</dd><dt>data dir</dt><dd class=\"text\">{}</dd></dl>",
        esc(&by_meaning),
        thousands(m.observations),
        thousands(m.summaries),
        thousands(m.prompts),
        thousands(m.sessions),
        bytes(status.database_bytes),
        status.spooled,
        status.recovered_last_week,
        esc(&status.data_dir)
    );
    if let Some(e) = &status.settings_error {
        let _ = write!(body, "<p class=\"error\">settings: {}</p>", esc(e));
    }
    let _ = write!(body, "<h2>Tokens per day</h2>{chart_svg}");
    let total_skipped = status.queue.count(JobStatus::Skipped);
    let _ = write!(body, "<h2>Skipped jobs</h2>");
    if skipped.is_empty() {
        body.push_str("<p class=\"empty\">None.</p>");
    } else {
        body.push_str(&showing(0, skipped.len(), total_skipped, "skipped jobs"));
        let _ = write!(
            body,
            "<div class=\"actions\">{}{}</div>",
            button(
                "/queue/replay",
                &[("all", "yes")],
                "Replay all",
                "",
                "replay-all",
                csrf
            ),
            button(
                "/queue/discard",
                &[("all", "yes")],
                "Discard all…",
                "quiet",
                "discard-all",
                csrf
            ),
        );
        body.push_str("<table class=\"jobs\"><thead><tr><th>job</th><th>kind</th><th>project</th><th>error</th><th></th></tr></thead><tbody>");
        for j in skipped {
            let id = j.id.to_string();
            let _ = write!(
                body,
                "<tr><td>{id}</td><td>{kind}</td><td>{project}</td><td class=\"text\">{error}</td><td>{replay}{discard}</td></tr>",
                kind = j.kind.as_str(),
                project = esc(&j.project),
                error = esc(j.last_error.as_deref().unwrap_or("")),
                replay = button(
                    "/queue/replay",
                    &[("id", &id)],
                    "Replay",
                    "",
                    &format!("replay-{id}"),
                    csrf
                ),
                discard = button(
                    "/queue/discard",
                    &[("id", &id)],
                    "Discard…",
                    "quiet",
                    &format!("discard-{id}"),
                    csrf
                ),
            );
        }
        body.push_str("</tbody></table>");
    }
    let _ = write!(
        body,
        "<h2>Quarantine</h2><p>{} kept ({} in the last week).</p>",
        plural(
            status.quarantined,
            "unreadable hook input",
            "unreadable hook inputs"
        ),
        thousands(status.quarantined_recently)
    );
    if !status.recent_quarantine.is_empty() {
        body.push_str("<table><thead><tr><th>id</th><th>event</th><th>reason</th><th>size</th><th>when</th></tr></thead><tbody>");
        for q in &status.recent_quarantine {
            let _ = write!(
                body,
                "<tr><td>{}</td><td>{}</td><td class=\"text\">{}</td><td>{}</td><td>{}</td></tr>",
                q.id,
                esc(q.event.as_deref().unwrap_or("")),
                esc(&q.reason),
                bytes(q.raw_len.max(0) as u64),
                time(q.created_at)
            );
        }
        body.push_str("</tbody></table>");
    }
    if status.quarantined > 0 {
        body.push_str(&button(
            "/quarantine/clear",
            &[],
            "Clear the quarantine…",
            "quiet",
            "clear-quarantine",
            csrf,
        ));
    }
    layout("Health", "Health", &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_text_is_escaped_and_only_cairns_marks_become_tags() {
        assert_eq!(
            esc("<script>alert('x')</script> & \"q\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;"
        );
        assert_eq!(
            esc("a\u{202E}b\u{2066}c\u{200F}d\u{061C}e"),
            "a\u{FFFD}b\u{FFFD}c\u{FFFD}d\u{FFFD}e"
        );
        assert_eq!(esc("שלום"), "שלום");
        let s = format!("a <b>{HIGHLIGHT_OPEN}word{HIGHLIGHT_CLOSE}</b>");
        assert_eq!(marked(&s), "a &lt;b&gt;<mark>word</mark>&lt;/b&gt;");
    }

    #[test]
    fn the_chart_has_a_bar_per_day() {
        let svg = chart(&[(86_400_000, 50), (2 * 86_400_000, 100)], 0, 3);
        assert_eq!(svg.matches("<rect").count(), 3);
        assert!(svg.contains("height=\"120\""), "{svg}");
        assert!(svg.contains("highest day: 100 tokens"), "{svg}");
        let none = chart(&[], 0, 30);
        assert!(!none.contains("<svg") && !none.contains("max 1"), "{none}");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(999), "999");
        assert_eq!(bytes(2048), "2.0 KiB");
    }
}

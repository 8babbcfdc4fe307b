//! The viewer's HTML, built as strings. Pure: values in, markup out. Every piece of memory
//! text goes through [`esc`] (or [`marked`] for a search snippet, which escapes first and
//! only then turns the match marks into `<mark>`), so a memory holding HTML or script shows
//! as text.

use std::fmt::Write as _;

use crate::clock;
use crate::ops::status::Status;
use crate::queue::claim::JobStatus;
use crate::queue::stats::JobRow;
use crate::recall::search::Hit;
use crate::recall::snippet::{HIGHLIGHT_CLOSE, HIGHLIGHT_OPEN};
use crate::recall::timeline::{Record, Timeline};
use crate::viewer::data::{Item, Seen, SessionRow, Turn};
use crate::viewer::http::percent_encode;

/// Text made safe for HTML content and quoted attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
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

fn time(ms: i64) -> String {
    clock::minute_utc(ms)
}

/// The page around `body`: navigation, the stylesheet and script (files, never inline).
pub fn layout(title: &str, active: &str, body: &str) -> String {
    let mut nav = String::new();
    for (href, name) in [
        ("/", "Feed"),
        ("/search", "Search"),
        ("/sessions", "Sessions"),
        ("/health", "Health"),
    ] {
        let class = if name == active { " class=\"on\"" } else { "" };
        let _ = write!(nav, "<a href=\"{href}\"{class}>{name}</a>");
    }
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} · cairn</title><link rel=\"stylesheet\" href=\"/style.css\">\
         <script src=\"/app.js\" defer></script></head>\
         <body><header><span class=\"brand\">cairn</span><nav>{nav}</nav></header>\
         <main>{body}</main></body></html>\n",
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
    format!(
        "<li class=\"item {kind}\"><div class=\"meta\"><a href=\"/memory/{r}\">{r}</a> \
         <span class=\"label\">{label}</span> <span class=\"project\">{project}</span> \
         <time>{time}</time></div><div class=\"title\">{title}</div>\
         <div class=\"detail\">{detail}</div></li>",
        kind = i.kind,
        r = esc(&i.reference),
        label = esc(&i.label),
        project = esc(&i.project),
        time = time(i.created_at),
        title = esc(&i.title),
        detail = esc(&i.detail),
    )
}

/// The live feed: the newest memories, then new ones as the worker writes them (app.js
/// listens on `/events`, from the ids in the list's data attributes).
pub fn feed(items: &[Item], seen: Seen, projects: &[String], project: Option<&str>) -> String {
    let mut body = format!(
        "<h1>Live feed</h1><form class=\"bar\" method=\"get\" action=\"/\">{}\
         <button>Show</button></form><p class=\"hint\" id=\"live\">Waiting for new memories…</p>\
         <ul id=\"feed\" class=\"items\" data-project=\"{}\" data-o=\"{}\" data-s=\"{}\" data-p=\"{}\">",
        project_select(projects, project),
        esc(project.unwrap_or("")),
        seen.observation,
        seen.summary,
        seen.prompt
    );
    for i in items {
        body.push_str(&item_html(i));
    }
    body.push_str("</ul>");
    if items.is_empty() {
        body.push_str("<p class=\"empty\">No memories yet.</p>");
    }
    layout("Live feed", "Feed", &body)
}

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
    by_meaning: bool,
) -> String {
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
        how = if by_meaning {
            "Searching by words and by meaning."
        } else {
            "Searching by words (no sentence model: `cairn embed --fetch` adds search by meaning)."
        }
    );
    match hits {
        None => {}
        Some(Err(e)) => {
            let _ = write!(body, "<p class=\"error\">{}</p>", esc(&e));
        }
        Some(Ok([])) => body.push_str("<p class=\"empty\">No results.</p>"),
        Some(Ok(hits)) => {
            body.push_str("<ul class=\"items hits\">");
            for h in hits {
                let _ = write!(
                    body,
                    "<li class=\"item\"><div class=\"meta\"><a href=\"/memory/{r}\">{r}</a> \
                     <span class=\"label\">{label}</span> <span class=\"project\">{project}</span> \
                     <time>{time}</time> <a class=\"side\" href=\"/timeline/{r}\">timeline</a></div>\
                     <div class=\"title\">{title}</div><div class=\"snippet\">{snippet}</div></li>",
                    r = esc(&h.reference()),
                    label = esc(&h.label),
                    project = esc(&h.project),
                    time = time(h.created_at),
                    title = esc(&h.title),
                    snippet = marked(&h.snippet),
                );
            }
            body.push_str("</ul>");
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
    dl.push_str(&field("created", &time(created)));
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
             <time>{time}</time></div><div class=\"title\">{title}</div>\
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

/// The sessions page.
pub fn sessions(rows: &[SessionRow], projects: &[String], project: Option<&str>) -> String {
    let mut body = format!(
        "<h1>Sessions</h1><form class=\"bar\" method=\"get\" action=\"/sessions\">{}\
         <button>Show</button></form><table><thead><tr><th>session</th><th>project</th>\
         <th>turns</th><th>last active</th></tr></thead><tbody>",
        project_select(projects, project)
    );
    for r in rows {
        let _ = write!(
            body,
            "<tr><td><a href=\"/session/{}\">{}</a></td><td>{}</td><td>{}</td><td>{}</td></tr>",
            percent_encode(&r.session_id),
            esc(&r.session_id),
            esc(&r.project),
            r.prompts,
            time(r.updated_at)
        );
    }
    body.push_str("</tbody></table>");
    if rows.is_empty() {
        body.push_str("<p class=\"empty\">No sessions yet.</p>");
    }
    layout("Sessions", "Sessions", &body)
}

/// One session's turns, in order.
pub fn session(row: &SessionRow, turns: &[Turn], csrf: &str) -> String {
    let mut body = format!(
        "<h1>Session <span class=\"ref\">{sid}</span></h1><p class=\"links\">{project} · {status} · \
         started {started}</p>",
        sid = esc(&row.session_id),
        project = esc(&row.project),
        status = esc(&row.status),
        started = time(row.started_at),
    );
    for t in turns {
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
                esc(&p.detail)
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
    let _ = write!(
        body,
        "<form method=\"post\" action=\"/forget\" class=\"danger\"><input type=\"hidden\" name=\"csrf\" value=\"{}\">\
         <input type=\"hidden\" name=\"session\" value=\"{}\"><button name=\"confirm\" value=\"no\">Forget this session's memories…</button></form>",
        esc(csrf),
        esc(&row.session_id)
    );
    layout("Session", "Sessions", &body)
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

/// Tokens per day as an inline SVG bar chart (no script, no style attributes).
pub fn chart(days: &[(i64, i64)], from: i64, count: usize) -> String {
    let max = days.iter().map(|d| d.1).max().unwrap_or(0).max(1);
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
            "<rect x=\"{}\" y=\"{}\" width=\"{bar}\" height=\"{}\" fill=\"#4b7bec\"><title>{}: {tokens} tokens</title></rect>",
            i * 12,
            h - bh,
            bh.max(1),
            clock::date_utc(day)
        );
    }
    let _ = write!(
        s,
        "<text x=\"0\" y=\"{}\" font-size=\"10\" fill=\"#888\">{}</text><text x=\"{w}\" y=\"{}\" font-size=\"10\" fill=\"#888\" text-anchor=\"end\">max {max}</text></svg>",
        h + 12,
        clock::date_utc(from),
        h + 12
    );
    s
}

/// The health page: the worker, the queue, skipped jobs with replay and discard, the
/// quarantine, tokens per day, sizes.
pub fn health(
    status: &Status,
    skipped: &[JobRow],
    chart_svg: &str,
    csrf: &str,
    notice: Option<&str>,
) -> String {
    let mut body = String::from("<h1>Health</h1>");
    if let Some(n) = notice {
        let _ = write!(body, "<p class=\"notice\" id=\"notice\">{}</p>", esc(n));
    }
    if status.attention.is_empty() {
        body.push_str("<p class=\"ok\">Healthy.</p>");
    } else {
        body.push_str("<ul class=\"attention\">");
        for a in &status.attention {
            let _ = write!(body, "<li>{}</li>", esc(a));
        }
        body.push_str("</ul>");
    }
    let w = &status.worker;
    let worker = if w.running {
        format!(
            "running (pid {}), last heartbeat {}",
            w.pid.unwrap_or(0),
            w.last_heartbeat_at
                .map(time)
                .unwrap_or_else(|| "never".into())
        )
    } else {
        "not running".to_string()
    };
    let _ = write!(
        body,
        "<dl class=\"grid\"><dt>worker</dt><dd id=\"worker\">{}</dd>",
        esc(&worker)
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
            status.queue.count(st)
        );
    }
    let m = &status.memories;
    let _ = write!(
        body,
        "<dt>memories</dt><dd>{} observations, {} summaries, {} prompts, {} sessions</dd>\
         <dt>database</dt><dd>{}</dd><dt>tokens today</dt><dd>{}</dd><dt>spooled events</dt><dd>{}</dd></dl>",
        m.observations,
        m.summaries,
        m.prompts,
        m.sessions,
        bytes(status.database_bytes),
        status.tokens_today,
        status.spooled
    );
    let _ = write!(body, "<h2>Tokens per day</h2>{chart_svg}");
    body.push_str("<h2>Skipped jobs</h2>");
    if skipped.is_empty() {
        body.push_str("<p class=\"empty\">None.</p>");
    } else {
        body.push_str("<table class=\"jobs\"><thead><tr><th>job</th><th>kind</th><th>project</th><th>error</th><th></th></tr></thead><tbody>");
        for j in skipped {
            let _ = write!(
                body,
                "<tr><td>{id}</td><td>{kind}</td><td>{project}</td><td class=\"text\">{error}</td><td>\
                 <form method=\"post\" action=\"/queue/replay\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
                 <input type=\"hidden\" name=\"id\" value=\"{id}\"><button id=\"replay-{id}\">Replay</button></form>\
                 <form method=\"post\" action=\"/queue/discard\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
                 <input type=\"hidden\" name=\"id\" value=\"{id}\"><button class=\"quiet\">Discard</button></form></td></tr>",
                id = j.id,
                kind = j.kind.as_str(),
                project = esc(&j.project),
                error = esc(j.last_error.as_deref().unwrap_or("")),
                csrf = esc(csrf),
            );
        }
        body.push_str("</tbody></table>");
    }
    let _ = write!(
        body,
        "<h2>Quarantine</h2><p>{} hook inputs kept ({} unreadable in the last week).</p>",
        status.quarantined, status.quarantined_recently
    );
    if !status.recent_quarantine.is_empty() {
        body.push_str("<table><thead><tr><th>id</th><th>event</th><th>reason</th><th>when</th></tr></thead><tbody>");
        for q in &status.recent_quarantine {
            let _ = write!(
                body,
                "<tr><td>{}</td><td>{}</td><td class=\"text\">{}</td><td>{}</td></tr>",
                q.id,
                esc(q.event.as_deref().unwrap_or("")),
                esc(&q.reason),
                time(q.created_at)
            );
        }
        body.push_str("</tbody></table>");
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
        let s = format!("a <b>{HIGHLIGHT_OPEN}word{HIGHLIGHT_CLOSE}</b>");
        assert_eq!(marked(&s), "a &lt;b&gt;<mark>word</mark>&lt;/b&gt;");
    }

    #[test]
    fn the_chart_has_a_bar_per_day() {
        let svg = chart(&[(86_400_000, 50), (2 * 86_400_000, 100)], 0, 3);
        assert_eq!(svg.matches("<rect").count(), 3);
        assert!(svg.contains("height=\"120\""), "{svg}");
        assert_eq!(bytes(2048), "2.0 KiB");
    }
}

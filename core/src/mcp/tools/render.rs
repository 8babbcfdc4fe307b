//! How the tools' results read: one compact line per hit or timeline record, full records
//! for `get_observations`. Pure: values in, text out.
//!
//! Every result fits its token budget (`max_tokens`; tokens are characters / 4, as for the
//! context block): whole lines or records are left out, and the result ends saying which
//! and how to get them.

use crate::mcp::tools::schema::MAX_MAX_TOKENS;
use crate::memory::kind::Kind;
use crate::recall::search::{Hit, UNRANKED};
use crate::recall::snippet::{one_line, render_marks, shorten};
use crate::recall::timeline::{self, FetchedRecords, Timeline};

/// `search`'s result: a head, one line per hit (`id date type [project] relevance title —
/// snippet`, the relevance left out where nothing was ranked),
/// and, when some hits did not fit, a footer saying how to page on. `project` is the scope
/// searched (`None`: all projects, and each line names its project).
pub fn search_hits(hits: &[Hit], project: Option<&str>, budget: usize, offset: usize) -> String {
    let scope = match project {
        Some(p) => format!("project '{p}'"),
        None => "all projects".to_string(),
    };
    if hits.is_empty() {
        return format!(
            "No results in {scope}. Try fewer or broader words, a prefix like `migrat*`, \
             `OR` between alternatives{}.",
            if project.is_some() {
                ", or all_projects: true"
            } else {
                ""
            }
        );
    }
    let head = |n: usize| {
        format!(
            "{n} result{} in {scope} (id date type relevance title — snippet; relevance is the \
             estimated chance, 0 to 1, that the memory answers the query). Ids go to timeline or \
             get_observations (S = turn summary, P = user prompt: pass them as strings).\n",
            if n == 1 { "" } else { "s" }
        )
    };
    let lines: Vec<String> = hits
        .iter()
        .map(|h| {
            let mut line = format!(
                "{} {} {}{}{}{} {}",
                h.reference(),
                crate::clock::date_utc(h.created_at),
                h.label,
                h.device
                    .as_ref()
                    .map(|d| format!(" @{d}"))
                    .unwrap_or_default(),
                if project.is_none() {
                    format!(" [{}]", h.project)
                } else {
                    String::new()
                },
                if h.relevance < UNRANKED {
                    format!(" {:.2}", h.relevance)
                } else {
                    String::new()
                },
                shorten(&one_line(&h.title), 120)
            );
            if !h.snippet.is_empty() {
                line.push_str(" — ");
                line.push_str(&bold_marks(&shorten(&h.snippet, 160)));
            }
            line.push('\n');
            line
        })
        .collect();
    // The footer is never longer than this one (the most hits left out, the largest offset).
    let footer = |left: usize, next: usize| {
        format!(
            "{left} more result{} left out to stay within {budget} tokens: call search again \
             with offset: {next}, or pass max_tokens (up to {MAX_MAX_TOKENS}).\n",
            if left == 1 { "" } else { "s" }
        )
    };
    let reserve = footer(hits.len(), offset + hits.len()).chars().count();
    let room = budget_chars(budget)
        .saturating_sub(reserve)
        .saturating_sub(head(hits.len()).len());
    let kept = fit_lines(&lines, room);
    let mut out = head(kept);
    for line in &lines[..kept] {
        out.push_str(line);
    }
    if kept < lines.len() {
        out.push_str(&footer(lines.len() - kept, offset + kept));
    }
    out
}

/// `timeline`'s result: its records oldest first, the anchor marked `→`; over budget, the
/// records farthest from the anchor are left out first and named in a footer. `project` as
/// for [`search_hits`].
pub fn timeline(t: &Timeline, project: Option<&str>, budget: usize) -> String {
    let lines: Vec<String> = t
        .entries
        .iter()
        .map(|e| {
            let mut line = format!(
                "{} {} {} {}{} {}",
                if e.anchor { "→" } else { " " },
                e.reference(),
                crate::clock::iso_utc(e.created_at),
                e.label,
                if project.is_none() {
                    format!(" [{}]", e.project)
                } else {
                    String::new()
                },
                shorten(&one_line(&e.title), 120)
            );
            if !e.detail.is_empty() {
                line.push_str(" — ");
                line.push_str(&e.detail);
            }
            line.push('\n');
            line
        })
        .collect();
    // Over budget, the records farthest from the anchor go first.
    let centre = t.entries.iter().position(|e| e.anchor).unwrap_or(0);
    let mut order: Vec<usize> = (0..lines.len()).collect();
    order.sort_by_key(|&i| (i.abs_diff(centre), i));
    let head = "Timeline, oldest first (→ marks the anchor):\n";
    let footer = |left: &[String]| {
        format!(
            "Left out to stay within {budget} tokens: {}. Fetch them with get_observations, \
             ask for fewer with before/after, or pass max_tokens (up to {MAX_MAX_TOKENS}).\n",
            left.join(", ")
        )
    };
    let all_refs: Vec<String> = t.entries.iter().map(|e| e.reference()).collect();
    let room = budget_chars(budget)
        .saturating_sub(head.len())
        .saturating_sub(footer(&all_refs).chars().count());
    let ordered: Vec<String> = order.iter().map(|&i| lines[i].clone()).collect();
    let kept = fit_lines(&ordered, room);
    let mut keep = vec![false; lines.len()];
    for &i in &order[..kept] {
        keep[i] = true;
    }
    let mut out = String::from(head);
    let mut left = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if keep[i] {
            out.push_str(line);
        } else {
            left.push(all_refs[i].clone());
        }
    }
    if !left.is_empty() {
        out.push_str(&footer(&left));
    }
    out
}

/// `get_observations`' result: the records found, in the order asked, then the ids not
/// found; over budget, the last records are left out and named, and a first record bigger
/// than the whole budget is cut with a note saying how to read it whole.
pub fn records(fetched: &FetchedRecords, budget: usize) -> String {
    let texts: Vec<String> = fetched
        .found
        .iter()
        .map(|r| format!("{}\n", render_record(r)))
        .collect();
    let refs: Vec<String> = fetched.found.iter().map(record_reference).collect();
    let missing = if fetched.missing.is_empty() {
        String::new()
    } else {
        format!("Not found: {}\n", fetched.missing.join(", "))
    };
    let footer = |left: &[String]| {
        format!(
            "Left out to stay within {budget} tokens: {}. Ask for them in another \
             get_observations call, or pass max_tokens (up to {MAX_MAX_TOKENS}).\n",
            left.join(", ")
        )
    };
    let room = budget_chars(budget)
        .saturating_sub(missing.chars().count())
        .saturating_sub(footer(&refs[1..]).chars().count());
    let kept = fit_lines(&texts, room);
    let mut out = String::new();
    for (i, text) in texts[..kept].iter().enumerate() {
        if i == 0 && text.chars().count() > room {
            // One record bigger than the whole budget: its head, and how to read it all.
            out.push_str(&shorten(text, room.saturating_sub(200)));
            out.push_str(&format!(
                "\n[{} is cut here to stay within {budget} tokens; pass max_tokens (up to \
                 {MAX_MAX_TOKENS}) to read it whole.]\n\n",
                refs[0]
            ));
        } else {
            out.push_str(text);
        }
    }
    out.push_str(&missing);
    if kept < texts.len() {
        out.push_str(&footer(&refs[kept..]));
    }
    out
}

/// Full text of an observation, for a model or a person.
pub fn render_observation(o: &timeline::Observation) -> String {
    let mut out = format!(
        "#{} {} [{}] {} — {}\n",
        o.id,
        o.kind,
        o.project,
        crate::clock::iso_utc(o.created_at),
        o.content.title
    );
    if !o.content.subtitle.is_empty() {
        out.push_str(&format!("{}\n", o.content.subtitle));
    }
    if !o.content.narrative.is_empty() {
        out.push_str(&format!("\n{}\n", o.content.narrative.trim_end()));
    }
    for (label, list) in [
        ("Facts", &o.content.facts),
        ("Concepts", &o.content.concepts),
        ("Files read", &o.content.files_read),
        ("Files modified", &o.content.files_modified),
    ] {
        if list.is_empty() {
            continue;
        }
        out.push_str(&format!("{label}:\n"));
        for item in list {
            out.push_str(&format!("- {item}\n"));
        }
    }
    match (&o.session_id, o.prompt_number) {
        (Some(s), Some(n)) => out.push_str(&format!("Session {s}, prompt {n}\n")),
        (Some(s), None) => out.push_str(&format!("Session {s}\n")),
        _ => out.push_str(&format!("Saved by hand ({})\n", o.origin)),
    }
    if let Some(p) = &o.prompt {
        out.push_str(&format!("Prompt: {}\n", shorten(&one_line(p), 300)));
    }
    out
}

/// Any record as text: an observation as [`render_observation`] does, a summary with its
/// sections, a prompt with its text.
pub fn render_record(r: &timeline::Record) -> String {
    match r {
        timeline::Record::Observation(o) => render_observation(o),
        timeline::Record::Summary(s) => {
            let mut out = format!(
                "S{} summary [{}] {} — session {}, prompt {}\n",
                s.id,
                s.project,
                crate::clock::iso_utc(s.created_at),
                s.session_id,
                s.prompt_number
            );
            for (label, text) in [
                ("Request", &s.request),
                ("Investigated", &s.investigated),
                ("Learned", &s.learned),
                ("Completed", &s.completed),
                ("Next steps", &s.next_steps),
                ("Notes", &s.notes),
            ] {
                if !text.trim().is_empty() {
                    out.push_str(&format!("{label}: {}\n", text.trim_end()));
                }
            }
            for (label, list) in [
                ("Files read", &s.files_read),
                ("Files edited", &s.files_edited),
            ] {
                if list.is_empty() {
                    continue;
                }
                out.push_str(&format!("{label}:\n"));
                for item in list {
                    out.push_str(&format!("- {item}\n"));
                }
            }
            out
        }
        timeline::Record::Prompt(p) => format!(
            "P{} prompt [{}] {} — session {}, prompt {}\n\n{}\n",
            p.id,
            p.project,
            crate::clock::iso_utc(p.created_at),
            p.session_id,
            p.prompt_number,
            p.text.trim_end()
        ),
    }
}

/// A record's id as search lists it (`12`, `S3`, `P7`).
fn record_reference(r: &timeline::Record) -> String {
    match r {
        timeline::Record::Observation(o) => Kind::Observation.reference(o.id),
        timeline::Record::Summary(s) => Kind::Summary.reference(s.id),
        timeline::Record::Prompt(p) => Kind::Prompt.reference(p.id),
    }
}

/// Characters a token budget allows (tokens are characters / 4).
fn budget_chars(tokens: usize) -> usize {
    tokens * 4
}

/// How many of the leading `items` fit in `room` characters: at least one, so a result is
/// never empty (a single item too big is cut by its caller).
fn fit_lines(items: &[String], room: usize) -> usize {
    let mut used = 0;
    let mut n = 0;
    for item in items {
        used += item.chars().count();
        if used > room && n > 0 {
            break;
        }
        n += 1;
    }
    n
}

/// A snippet with its matches marked `**like this**`, for a model to read.
fn bold_marks(snippet: &str) -> String {
    render_marks(snippet, "**", "**")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_keep_whole_lines() {
        assert_eq!(fit_lines(&["ab".into(), "cd".into(), "ef".into()], 4), 2);
        assert_eq!(fit_lines(&["abcdef".into(), "g".into()], 2), 1);
        assert_eq!(fit_lines(&[], 10), 0);
    }
}

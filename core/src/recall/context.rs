//! The context block injected at `SessionStart`: the project's latest turn summary, an
//! index of recent observations grouped by day, and a footer saying how to get details.
//!
//! Split in two: [`load`] reads what the block may show (one small indexed query per
//! part), [`render`] turns it into text and is pure.
//!
//! Invariants of [`render`]:
//! - the block fits the budget: [`tokens`] of the result is at most `budget_tokens`
//!   (tokens are counted as characters / 4, rounded up);
//! - to fit, whole lines are dropped, never cut: the oldest observation lines first (a day
//!   heading goes with its last line), then the summary lines; when not even the heading,
//!   one line and the footer fit, the block is empty;
//! - nothing to show (no summary, no observation) is an empty block.
//!
//! The index is a compact list (id, time, type, title): the detail of a memory comes with
//! the prompt it answers or the file it is about (`recall::moment`). Asked for a session
//! ([`session_start_shown`]), it leaves out the observations, and the last turn's summary,
//! that session was already given (`memory_given`: at an earlier start, before a resume,
//! a prompt, a file; not what a compaction retired), and records the summary it shows as
//! given, so that nothing is given twice in one context whichever moment came first.

use rusqlite::{Connection, OptionalExtension, params};

use crate::clock;
use crate::error::Result;
use crate::memory::kind::Kind;
use crate::memory::told::Given;
use crate::recall::snippet::{one_line, shorten};
use crate::settings::ContextSettings;

/// The project's latest turn summary, as the block shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastSummary {
    /// Its row in `session_summaries`.
    pub id: i64,
    pub created_at: i64,
    pub request: String,
    pub completed: String,
    pub next_steps: String,
}

/// One observation in the index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexLine {
    pub id: i64,
    pub created_at: i64,
    /// The observation type.
    pub kind: String,
    pub title: String,
    /// The name of the other device it came from (sync); `None` for this machine's own.
    pub device: Option<String>,
}

/// Everything the block may show.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContextData {
    pub project: String,
    pub summary: Option<LastSummary>,
    /// Newest first.
    pub observations: Vec<IndexLine>,
}

/// Longest summary field shown, in characters.
const FIELD_CHARS: usize = 300;
/// Longest observation title shown, in characters.
const TITLE_CHARS: usize = 120;
/// The last line of every non-empty block.
pub const FOOTER: &str =
    "Details: MCP tools search → timeline → get_observations(ids), or `cairn show <id>`.";

/// Estimated tokens of a text: characters / 4, rounded up.
pub fn tokens(text: &str) -> usize {
    text.chars().count().div_ceil(4)
}

/// The block the next session of `project` is told, within the token budget.
pub fn session_start(
    conn: &Connection,
    project: &str,
    settings: &ContextSettings,
    now: i64,
) -> Result<String> {
    Ok(session_start_shown(conn, project, None, settings, now)?.0)
}

/// [`session_start`] for `session`, leaving out what it was already given, with the
/// observations the block shows (for `memory::told`: a prompt of the session is not given
/// them again).
pub fn session_start_shown(
    conn: &Connection,
    project: &str,
    session: Option<&str>,
    settings: &ContextSettings,
    now: i64,
) -> Result<(String, Vec<Given>)> {
    let data = load(conn, project, session, settings)?;
    Ok(render_shown(&data, settings.budget_tokens, now))
}

/// Reads the latest summary (when `show_last_summary`) and the `max_observations` newest
/// observations of the project's `max_sessions` most recent sessions that left any (plus
/// memories saved outside a session) that `session`, when given, was not given yet (an
/// older summary never stands in for the latest).
/// Sessions that left no memory (the one starting, quick questions) are passed over: they
/// would empty the index, and make finding it a scan of every memory of the project.
pub fn load(
    conn: &Connection,
    project: &str,
    session: Option<&str>,
    settings: &ContextSettings,
) -> Result<ContextData> {
    let summary = if settings.show_last_summary {
        conn.prepare_cached(
            "SELECT id, created_at, request, completed, next_steps FROM session_summaries s
             WHERE s.id = (SELECT id FROM session_summaries WHERE project = ?1
                           ORDER BY created_at DESC, id DESC LIMIT 1)
               AND NOT EXISTS (SELECT 1 FROM memory_given g
                    WHERE g.session_id = ?2 AND g.agent_id = '' AND g.kind = ?3 AND g.memory_id = s.id
                      AND g.retired_at IS NULL)",
        )?
        .query_row(params![project, session, Kind::Summary.code()], |r| {
            Ok(LastSummary {
                id: r.get(0)?,
                created_at: r.get(1)?,
                request: r.get(2)?,
                completed: r.get(3)?,
                next_steps: r.get(4)?,
            })
        })
        .optional()?
    } else {
        None
    };
    let observations = conn
        .prepare_cached(
            "SELECT id, created_at, type, title FROM observations
             WHERE project = ?1
               AND (session_id IS NULL OR session_id IN (
                    SELECT s.session_id FROM sessions s WHERE s.project = ?1
                      AND EXISTS (SELECT 1 FROM observations o
                                  WHERE o.session_id = s.session_id)
                    ORDER BY s.updated_at DESC LIMIT ?2))
               AND NOT EXISTS (SELECT 1 FROM memory_given g
                    WHERE g.session_id = ?4 AND g.agent_id = '' AND g.kind = ?5
                      AND g.memory_id = observations.id AND g.retired_at IS NULL)
             ORDER BY created_at DESC, id DESC LIMIT ?3",
        )?
        .query_map(
            params![
                project,
                settings.max_sessions as i64,
                settings.max_observations as i64,
                session,
                Kind::Observation.code()
            ],
            |r| {
                Ok(IndexLine {
                    id: r.get(0)?,
                    created_at: r.get(1)?,
                    kind: r.get(2)?,
                    title: r.get(3)?,
                    device: None,
                })
            },
        )?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let mut observations = observations;
    // SessionStart renders this: a store in no space pays one query, not one per line.
    if crate::memory::origin::any_devices(conn)? {
        for o in &mut observations {
            o.device = crate::memory::origin::device_of(conn, Kind::Observation, o.id)?;
        }
    }
    Ok(ContextData {
        project: project.to_string(),
        summary,
        observations,
    })
}

/// A line of the block, with what dropping it means.
#[derive(Debug)]
enum Line {
    Fixed(String),
    Summary(String),
    /// A day heading; `usize` is the day's index.
    Day(usize, String),
    /// An observation line of day `usize`, showing observation `i64`.
    Obs(usize, i64, String),
    ObsHeading(String),
}

impl Line {
    fn text(&self) -> &str {
        match self {
            Line::Fixed(s)
            | Line::Summary(s)
            | Line::Day(_, s)
            | Line::Obs(_, _, s)
            | Line::ObsHeading(s) => s,
        }
    }
}

/// Renders the block within `budget_tokens`. Pure.
pub fn render(data: &ContextData, budget_tokens: usize, now: i64) -> String {
    render_shown(data, budget_tokens, now).0
}

/// [`render`], with the observations the block shows: their ids and the estimated tokens
/// of their lines. Pure.
pub fn render_shown(data: &ContextData, budget_tokens: usize, now: i64) -> (String, Vec<Given>) {
    // The block is wrapped in cairn's context tag, which capture strips from everything it
    // stores: memory never feeds on its own injected context.
    let mut lines: Vec<Line> = vec![
        Line::Fixed(format!("<{}>", crate::privacy::CONTEXT_TAG)),
        Line::Fixed(format!(
            "# cairn memory of project {} (times UTC)",
            one_line(&data.project)
        )),
    ];
    if let Some(s) = &data.summary {
        let fields: Vec<Line> = [
            ("Request", &s.request),
            ("Completed", &s.completed),
            ("Next steps", &s.next_steps),
        ]
        .into_iter()
        .map(|(label, value)| (label, one_line(value)))
        .filter(|(_, value)| !value.is_empty())
        .map(|(label, value)| Line::Summary(format!("- {label}: {}", shorten(&value, FIELD_CHARS))))
        .collect();
        if !fields.is_empty() {
            lines.push(Line::Summary(String::new()));
            lines.push(Line::Summary(format!(
                "## Last turn ({})",
                clock::minute_utc(s.created_at)
            )));
            lines.extend(fields);
        }
    }
    if !data.observations.is_empty() {
        lines.push(Line::ObsHeading(String::new()));
        lines.push(Line::ObsHeading(
            "## Recent observations (id time type title)".into(),
        ));
        let today = clock::date_utc(now);
        let yesterday = clock::date_utc(now - 86_400_000);
        let mut day_index = 0usize;
        let mut current: Option<String> = None;
        for o in data.observations.iter().rev() {
            let date = clock::date_utc(o.created_at);
            if current.as_deref() != Some(date.as_str()) {
                day_index += 1;
                let label = if date == today {
                    format!("### {date} (today)")
                } else if date == yesterday {
                    format!("### {date} (yesterday)")
                } else {
                    format!("### {date}")
                };
                lines.push(Line::Day(day_index, label));
                current = Some(date);
            }
            let (_, (hh, mm, _)) = clock::civil_utc(o.created_at);
            lines.push(Line::Obs(
                day_index,
                o.id,
                format!(
                    "- #{} {hh:02}:{mm:02} {}{} {}",
                    o.id,
                    one_line(&o.kind),
                    o.device
                        .as_ref()
                        .map(|d| format!(" @{}", one_line(d)))
                        .unwrap_or_default(),
                    shorten(&one_line(&o.title), TITLE_CHARS)
                ),
            ));
        }
    }
    lines.push(Line::Fixed(String::new()));
    lines.push(Line::Fixed(FOOTER.to_string()));
    lines.push(Line::Fixed(format!("</{}>", crate::privacy::CONTEXT_TAG)));
    let summary = data.summary.as_ref().map(|s| s.id);
    fit(lines, budget_tokens.saturating_mul(4), summary)
}

/// Drops lines until the text has at most `max_chars` characters (see the module
/// invariants), then joins them; with the observations left, and the summary `summary`
/// when any of its lines is.
fn fit(mut lines: Vec<Line>, max_chars: usize, summary: Option<i64>) -> (String, Vec<Given>) {
    // Each line costs its characters plus a newline.
    let cost = |l: &Line| l.text().chars().count() + 1;
    let mut total: usize = lines.iter().map(cost).sum();
    while total > max_chars {
        let victim = lines
            .iter()
            .position(|l| matches!(l, Line::Obs(..)))
            .or_else(|| lines.iter().rposition(|l| matches!(l, Line::Summary(_))));
        let Some(i) = victim else {
            return (String::new(), Vec::new());
        };
        let removed = lines.remove(i);
        total -= cost(&removed);
        if let Line::Obs(day, _, _) = removed {
            let day_left = lines
                .iter()
                .any(|l| matches!(l, Line::Obs(d, _, _) if *d == day));
            if !day_left
                && let Some(h) = lines
                    .iter()
                    .position(|l| matches!(l, Line::Day(d, _) if *d == day))
            {
                total -= cost(&lines.remove(h));
            }
            if !lines.iter().any(|l| matches!(l, Line::Obs(..))) {
                while let Some(h) = lines.iter().position(|l| matches!(l, Line::ObsHeading(_))) {
                    total -= cost(&lines.remove(h));
                }
            }
        }
        // A summary reduced to its blank line and heading says nothing.
        let summary_lines = lines
            .iter()
            .filter(|l| matches!(l, Line::Summary(_)))
            .count();
        if summary_lines == 2 {
            while let Some(h) = lines.iter().position(|l| matches!(l, Line::Summary(_))) {
                total -= cost(&lines.remove(h));
            }
        }
    }
    let has_content = lines
        .iter()
        .any(|l| matches!(l, Line::Obs(..) | Line::Summary(_)));
    if !has_content {
        return (String::new(), Vec::new());
    }
    let mut out = String::with_capacity(total);
    let mut shown = Vec::new();
    for l in &lines {
        out.push_str(l.text());
        out.push('\n');
        if let Line::Obs(_, id, text) = l {
            shown.push(Given {
                kind: Kind::Observation,
                id: *id,
                tokens: tokens(text) + 1,
            });
        }
    }
    // The last turn, when any of it is shown: a prompt later in the session need not give
    // it again.
    let summary_tokens: usize = lines
        .iter()
        .filter(|l| matches!(l, Line::Summary(_)))
        .map(|l| tokens(l.text()) + 1)
        .sum();
    if let Some(id) = summary.filter(|_| summary_tokens > 0) {
        shown.push(Given {
            kind: Kind::Summary,
            id,
            tokens: summary_tokens,
        });
    }
    (out, shown)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory;
    use crate::memory::observations::{NewObservation, NewSummary};
    use crate::store::db;

    /// 2026-09-21T14:13:20Z
    const NOW: i64 = 1_790_000_000_000;
    const HOUR: i64 = 3_600_000;

    fn line(id: i64, at: i64, title: &str) -> IndexLine {
        IndexLine {
            id,
            created_at: at,
            kind: "bugfix".into(),
            title: title.into(),
            device: None,
        }
    }

    fn data(n: usize) -> ContextData {
        ContextData {
            project: "acme".into(),
            summary: Some(LastSummary {
                id: 7,
                created_at: NOW - HOUR,
                request: "Make the lease rescue safe".into(),
                completed: "Rescue counts\nas an attempt".into(),
                next_steps: "".into(),
            }),
            observations: (0..n as i64)
                .map(|i| {
                    line(
                        100 - i,
                        NOW - i * 5 * HOUR,
                        &format!("Observation number {i}"),
                    )
                })
                .collect(),
        }
    }

    fn check(d: &ContextData, budget: usize, expected: &str) {
        let got = render(d, budget, NOW);
        assert_eq!(got, expected, "\n--- got ---\n{got}");
        assert!(tokens(&got) <= budget);
    }

    #[test]
    fn renders_summary_days_and_footer() {
        let expected = "\
<cairn-context>
# cairn memory of project acme (times UTC)

## Last turn (2026-09-21 13:13)
- Request: Make the lease rescue safe
- Completed: Rescue counts as an attempt

## Recent observations (id time type title)
### 2026-09-20 (yesterday)
- #97 23:13 bugfix Observation number 3
### 2026-09-21 (today)
- #98 04:13 bugfix Observation number 2
- #99 09:13 bugfix Observation number 1
- #100 14:13 bugfix Observation number 0

Details: MCP tools search → timeline → get_observations(ids), or `cairn show <id>`.
</cairn-context>
";
        check(&data(4), 1_500, expected);
    }

    #[test]
    fn drops_oldest_lines_first_and_day_headings_with_them() {
        let full = render(&data(4), 1_500, NOW);
        // Exactly the budget of the full block: nothing dropped.
        let exact = tokens(&full);
        assert_eq!(render(&data(4), exact, NOW), full);
        // One token less: the oldest line and its now empty day go.
        let expected = full.replace(
            "### 2026-09-20 (yesterday)\n- #97 23:13 bugfix Observation number 3\n",
            "",
        );
        check(&data(4), exact - 1, &expected);
        // Without room for any observation: the summary alone.
        let summary_only = "\
<cairn-context>
# cairn memory of project acme (times UTC)

## Last turn (2026-09-21 13:13)
- Request: Make the lease rescue safe
- Completed: Rescue counts as an attempt

Details: MCP tools search → timeline → get_observations(ids), or `cairn show <id>`.
</cairn-context>
";
        check(&data(4), tokens(summary_only), summary_only);
        // Then summary lines go from the bottom; a heading alone goes too.
        let less = summary_only.replace("- Completed: Rescue counts as an attempt\n", "");
        check(&data(4), tokens(summary_only) - 1, &less);
        check(&data(4), 10, "");
        check(&data(4), 0, "");
    }

    #[test]
    fn every_budget_is_respected_to_the_token() {
        let d = data(300);
        let mut last_len = 0;
        for budget in 0..2_000 {
            let got = render(&d, budget, NOW);
            assert!(tokens(&got) <= budget, "budget {budget}");
            assert!(got.len() >= last_len, "more budget never shows less");
            last_len = got.len();
            if !got.is_empty() {
                assert!(got.ends_with(&format!("{FOOTER}\n</cairn-context>\n")));
                // Whole lines only: every observation line is complete.
                for l in got.lines().filter(|l| l.starts_with("- #")) {
                    assert!(l.contains("Observation number"), "{l}");
                }
            }
        }
        // With room to spare the newest observations are the ones kept.
        let got = render(&d, 300, NOW);
        assert!(got.contains("#100 "));
        assert!(!got.contains("#1 "));
        // Thousands of observations: the default budget, filled to within one line.
        let many = data(5_000);
        let got = render(&many, 1_500, NOW);
        assert!(tokens(&got) <= 1_500);
        assert!(tokens(&got) > 1_500 - 25, "{}", tokens(&got));
        assert!(got.contains("- #100 14:13 "), "the newest is kept");
        assert!(got.contains("## Last turn"), "the summary is kept");
    }

    #[test]
    fn nothing_to_show_is_empty() {
        check(&ContextData::default(), 1_500, "");
        let one = ContextData {
            project: "p".into(),
            summary: None,
            observations: vec![line(1, NOW, "Only one")],
        };
        check(
            &one,
            1_500,
            "<cairn-context>\n# cairn memory of project p (times UTC)\n\n## Recent observations (id time type title)\n### 2026-09-21 (today)\n- #1 14:13 bugfix Only one\n\nDetails: MCP tools search → timeline → get_observations(ids), or `cairn show <id>`.\n</cairn-context>\n",
        );
    }

    #[test]
    fn loads_from_the_database_within_settings() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = crate::store::paths::DataDir::new(tmp.path());
        let mut conn = db::open_data_dir(&dd, db::OpenOptions::default()).expect("open");
        let settings = ContextSettings::default();
        assert_eq!(
            session_start(&conn, "acme", &settings, NOW).expect("empty"),
            ""
        );
        db::write(&mut conn, |tx| {
            for s in 0..3i64 {
                let sid = format!("s{s}");
                crate::memory::sessions::ensure(tx, &sid, "acme", "/acme", NOW - (3 - s) * HOUR)?;
                for i in 0..4i64 {
                    memory::observations::insert_observation(
                        tx,
                        &NewObservation {
                            session_id: Some(sid.clone()),
                            project: "acme".into(),
                            kind: "change".into(),
                            origin: "model".into(),
                            created_at: NOW - (3 - s) * HOUR + i,
                            content: crate::memory::rows::ObservationContent {
                                title: format!("session {s} obs {i}"),
                                ..Default::default()
                            },
                            ..Default::default()
                        },
                    )?;
                }
                memory::observations::upsert_summary(
                    tx,
                    &NewSummary {
                        session_id: sid.clone(),
                        project: "acme".into(),
                        prompt_number: 1,
                        request: format!("request {s}"),
                        next_steps: format!("next {s}"),
                        origin: "model".into(),
                        created_at: NOW - (3 - s) * HOUR + 10,
                        ..Default::default()
                    },
                )?;
            }
            crate::memory::sessions::ensure(tx, "x", "other", "/other", NOW)?;
            memory::observations::insert_observation(
                tx,
                &NewObservation {
                    session_id: Some("x".into()),
                    project: "other".into(),
                    kind: "change".into(),
                    origin: "model".into(),
                    created_at: NOW,
                    content: crate::memory::rows::ObservationContent {
                        title: "other project".into(),
                        ..Default::default()
                    },
                    ..Default::default()
                },
            )?;
            Ok(())
        })
        .expect("seed");
        let settings = ContextSettings {
            max_sessions: 2,
            max_observations: 5,
            ..ContextSettings::default()
        };
        let d = load(&conn, "acme", None, &settings).expect("load");
        let titles: Vec<&str> = d.observations.iter().map(|o| o.title.as_str()).collect();
        assert_eq!(
            titles,
            vec![
                "session 2 obs 3",
                "session 2 obs 2",
                "session 2 obs 1",
                "session 2 obs 0",
                "session 1 obs 3"
            ]
        );
        assert_eq!(
            d.summary.as_ref().map(|s| s.request.as_str()),
            Some("request 2")
        );

        // Sessions that left no memory since (the one starting, quick questions) are passed
        // over: the index still shows the last two sessions that left some.
        db::write(&mut conn, |tx| {
            for e in 0..3i64 {
                crate::memory::sessions::ensure(
                    tx,
                    &format!("empty{e}"),
                    "acme",
                    "/acme",
                    NOW + e,
                )?;
            }
            Ok(())
        })
        .expect("empty sessions");
        let again = load(&conn, "acme", None, &settings).expect("load");
        let again: Vec<&str> = again
            .observations
            .iter()
            .map(|o| o.title.as_str())
            .collect();
        assert_eq!(again, titles);

        // A session given two of them at a prompt: its index leaves them out and shows
        // older ones in their place; another session's index is as before.
        let given: Vec<Given> = d.observations[..2]
            .iter()
            .map(|o| Given {
                kind: Kind::Observation,
                id: o.id,
                tokens: 9,
            })
            .collect();
        db::write(&mut conn, |tx| {
            crate::memory::told::record(
                tx,
                crate::memory::told::Listener::main("now"),
                crate::memory::told::Moment::Prompt,
                None,
                &given,
                NOW,
            )
        })
        .expect("told");
        let titles_for = |session: Option<&str>| -> Vec<String> {
            load(&conn, "acme", session, &settings)
                .expect("load")
                .observations
                .into_iter()
                .map(|o| o.title)
                .collect()
        };
        assert_eq!(
            titles_for(Some("now")),
            vec![
                "session 2 obs 1",
                "session 2 obs 0",
                "session 1 obs 3",
                "session 1 obs 2",
                "session 1 obs 1"
            ]
        );
        assert_eq!(titles_for(Some("other")), titles);
        let (text, shown) =
            session_start_shown(&conn, "acme", Some("now"), &settings, NOW).expect("render");
        assert!(!text.contains("session 2 obs 3"), "{text}");
        let (obs, summaries): (Vec<&Given>, Vec<&Given>) =
            shown.iter().partition(|g| g.kind == Kind::Observation);
        assert_eq!(obs.len(), 5);
        assert!(obs.iter().all(|s| given.iter().all(|g| g.id != s.id)));
        // The last turn is shown, and given with them.
        assert!(text.contains("## Last turn"), "{text}");
        assert_eq!(summaries.len(), 1, "{shown:?}");
        let text = session_start(&conn, "acme", &settings, NOW).expect("render");
        assert!(text.contains("- Next steps: next 2"), "{text}");
        assert!(!text.contains("other project"));
        let no_summary = ContextSettings {
            show_last_summary: false,
            ..settings
        };
        let text = session_start(&conn, "acme", &no_summary, NOW).expect("render");
        assert!(!text.contains("Last turn"));
        assert_eq!(
            session_start(&conn, "nobody", &no_summary, NOW).expect("x"),
            ""
        );
    }

    proptest::proptest! {
        #[test]
        fn never_over_budget(
            titles in proptest::collection::vec(".{0,200}", 0..60),
            request in ".{0,500}",
            budget in 0usize..3_000,
        ) {
            let d = ContextData {
                project: "p".into(),
                summary: Some(LastSummary {
                    id: 1,
                    created_at: NOW,
                    request,
                    completed: String::new(),
                    next_steps: "n".into(),
                }),
                observations: titles
                    .iter()
                    .enumerate()
                    .map(|(i, t)| line(i as i64, NOW - i as i64 * HOUR, t))
                    .collect(),
            };
            let got = render(&d, budget, NOW);
            proptest::prop_assert!(tokens(&got) <= budget);
        }
    }
}

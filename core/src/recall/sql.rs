//! The SQL vocabulary of recall: which rows a search may return ([`Filters`]), what differs
//! between the three searchable tables ([`Table`], [`table`]), a ranked row before its
//! text is read ([`Candidate`]), and the WHERE terms every statement shares
//! ([`full_text_led`], [`push_filters`]). Search, ranking, snippets and the timeline build
//! their statements from these; this module calls none of them. Pure: builds strings and
//! arguments, runs nothing.

use rusqlite::types::Value;

use crate::memory::kind::Kind;

/// BM25 column weights of `observations_fts(title, subtitle, narrative, facts_text,
/// concepts_text, pieces_text, project_key)`; the pieces of the words written as code
/// (migration 0018) weigh as the body, and the project's key is for narrowing, not for
/// ranking.
const OBSERVATION_WEIGHTS: &str = "10.0, 4.0, 1.0, 2.0, 4.0, 1.0, 0.0";
/// Of `session_summaries_fts(request, investigated, learned, completed, next_steps, notes,
/// pieces_text, project_key)`.
const SUMMARY_WEIGHTS: &str = "5.0, 1.0, 2.0, 2.0, 1.0, 1.0, 1.0, 0.0";
/// Of `user_prompts_fts(prompt_text, pieces_text, project_key)`.
const PROMPT_WEIGHTS: &str = "1.0, 1.0, 0.0";

/// Which rows a search or timeline may return.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filters {
    /// Only this project; `None` is every project.
    pub project: Option<String>,
    /// Only observations of these types (summaries and prompts have no type, so a type
    /// filter leaves them out).
    pub types: Vec<String>,
    /// Only observations tagged with this concept (case-insensitive, whole concept).
    pub concept: Option<String>,
    /// Only records that read or modified a file whose path contains this text.
    pub file: Option<String>,
    /// Created at or after this time (ms).
    pub since: Option<i64>,
    /// Created before this time (ms).
    pub until: Option<i64>,
}

/// The SQL pieces that differ between the three searchable tables.
pub(super) struct Table {
    pub(super) table: &'static str,
    pub(super) fts: &'static str,
    /// The full-text table's columns of text, in order (its last, `project_key`, is not):
    /// the row's own, then `pieces_text`, the pieces of its words written as code, which
    /// match a query but make no snippet ([`Table::shown_columns`]).
    pub(super) columns: &'static str,
    pub(super) select: &'static str,
    weights: &'static str,
    /// The text shown when there is no match to make a snippet from.
    pub(super) plain: &'static str,
    /// The FTS column a snippet comes from when the best one only repeats the title.
    pub(super) body_column: Option<u8>,
    /// The covering index of the columns search filters read (migration 0002).
    pub(super) search_index: &'static str,
}

impl Table {
    /// The first of [`Table::columns`]: the title, or what stands for it.
    pub(super) fn title_column(&self) -> &'static str {
        self.columns.split(',').next().unwrap_or_default().trim()
    }

    /// The columns a snippet may come from, as an FTS5 column filter: all of
    /// [`Table::columns`] but the last, `pieces_text`, which no one wrote as it reads.
    pub(super) fn shown_columns(&self) -> String {
        let columns: Vec<&str> = self.columns.split(',').map(str::trim).collect();
        format!("{{{}}}", columns[..columns.len() - 1].join(" "))
    }

    /// The BM25 score of a match, by the column weights (lower is better).
    pub(super) fn bm25(&self) -> String {
        format!("bm25({}, {})", self.fts, self.weights)
    }

    /// The same score for a statement ordered by it and limited to the number bound to
    /// parameter `limit`, which spares the rows that cannot be among them
    /// (`store::bm25`).
    pub(super) fn bm25_best(&self, limit: usize) -> String {
        format!(
            "{}({}, ?{limit}, {})",
            crate::store::bm25::NAME,
            self.fts,
            self.weights
        )
    }

    /// The full-text table joined to its rows. Filters on id, project, time and type read
    /// the covering index (a few dense pages); only concept and file filters need the row
    /// itself.
    pub(super) fn joined_rows(&self, f: &Filters) -> String {
        let fts = self.fts;
        if f.concept.is_none() && f.file.is_none() {
            format!(
                "{fts} JOIN {table} t INDEXED BY {index} ON t.id = {fts}.rowid",
                table = self.table,
                index = self.search_index
            )
        } else {
            format!(
                "{fts} JOIN {table} t ON t.id = {fts}.rowid",
                table = self.table
            )
        }
    }
}

pub(super) fn table(kind: Kind) -> Table {
    match kind {
        Kind::Observation => Table {
            table: "observations",
            fts: "observations_fts",
            columns: "title, subtitle, narrative, facts_text, concepts_text, pieces_text",
            select: "t.id, t.project, t.created_at, t.type, t.title",
            weights: OBSERVATION_WEIGHTS,
            plain: "CASE WHEN t.subtitle <> '' THEN t.subtitle ELSE t.narrative END",
            body_column: Some(2),
            search_index: "observations_search",
        },
        Kind::Summary => Table {
            table: "session_summaries",
            fts: "session_summaries_fts",
            columns: "request, investigated, learned, completed, next_steps, notes, pieces_text",
            select: "t.id, t.project, t.created_at, 'summary', t.request",
            weights: SUMMARY_WEIGHTS,
            plain: "CASE WHEN t.completed <> '' THEN t.completed ELSE t.learned END",
            body_column: Some(3),
            search_index: "session_summaries_search",
        },
        Kind::Prompt => Table {
            table: "user_prompts",
            fts: "user_prompts_fts",
            columns: "prompt_text, pieces_text",
            select: "t.id, t.project, t.created_at, 'prompt', t.prompt_text",
            weights: PROMPT_WEIGHTS,
            plain: "''",
            body_column: None,
            search_index: "user_prompts_search",
        },
    }
}

/// A ranked row before its text is read: ranking needs only these, and reading titles and
/// snippets for every match (not just the rows shown) would cost far more.
#[derive(Debug, Clone, Copy)]
pub(super) struct Candidate {
    pub(super) kind: Kind,
    pub(super) id: i64,
    pub(super) created_at: i64,
    pub(super) score: Option<f64>,
    /// See [`crate::recall::search::Hit::relevance`].
    pub(super) relevance: f64,
}

/// The arguments and WHERE terms of a statement led by the full-text index: `?1`, the
/// MATCH expression `expr` narrowed to the filters' project when they name one (the index
/// then intersects the words with the project's key, migration 0008, and reads no row of
/// another project), then every other filter, indexed columns written `+t.column` (a
/// unary `+` keeps SQLite from driving the join from a `created_at` index, one full-text
/// evaluation per row: the full-text index always leads).
pub(super) fn full_text_led(kind: Kind, expr: &str, f: &Filters) -> (Vec<Value>, Vec<String>) {
    let fts = table(kind).fts;
    let scoped = match &f.project {
        Some(p) => format!("({expr}) AND {PROJECT_KEY} : \"{}\"", project_key(p)),
        None => expr.to_string(),
    };
    let mut args = vec![Value::Text(scoped)];
    let mut wheres = vec![format!("{fts} MATCH ?1")];
    let rest = Filters {
        project: None,
        ..f.clone()
    };
    push_filters(kind, &rest, true, &mut args, &mut wheres);
    (args, wheres)
}

/// As [`full_text_led`], for a statement ordered by BM25: the project is a filter of the
/// rows (`+t.project`, read from the covering index), not part of the MATCH expression.
/// BM25 computes the IDF of every phrase of the expression by walking its whole doclist,
/// and the project's key is in every row of the project (about 3 ms per statement at
/// 100,000 memories of one project): unless the words match many rows, most of them
/// other projects', scoring them all and dropping the others' costs less
/// (`rank::scoping` chooses). The scores are the same: the key's column weighs
/// nothing.
pub(super) fn full_text_ranked(kind: Kind, expr: &str, f: &Filters) -> (Vec<Value>, Vec<String>) {
    let unscoped = Filters {
        project: None,
        ..f.clone()
    };
    let (mut args, mut wheres) = full_text_led(kind, expr, &unscoped);
    if let Some(p) = &f.project {
        args.push(Value::Text(p.clone()));
        wheres.push(format!("+t.project = ?{}", args.len()));
    }
    (args, wheres)
}

/// The column of every full-text table holding its row's project as one word (migration
/// 0008, [`project_key`]).
pub(crate) const PROJECT_KEY: &str = "project_key";

/// The word a project is indexed by in the [`PROJECT_KEY`] columns: `'x' || hex(project)`,
/// as the tokenizer lowercases it.
fn project_key(project: &str) -> String {
    format!("x{}", crate::hex::hex(project.as_bytes()))
}

/// `?1, ?2, …, ?n`: the numbered parameters of an `IN (…)` list of `n` values.
pub(super) fn marks(n: usize) -> String {
    (1..=n)
        .map(|i| format!("?{i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// With `no_index`, the indexed columns are written `+t.column` so that SQLite does not
/// use their indexes (see [`full_text_led`]).
pub(super) fn push_filters(
    kind: Kind,
    f: &Filters,
    no_index: bool,
    args: &mut Vec<Value>,
    wheres: &mut Vec<String>,
) {
    let plus = if no_index { "+" } else { "" };
    if let Some(p) = &f.project {
        args.push(Value::Text(p.clone()));
        wheres.push(format!("{plus}t.project = ?{}", args.len()));
    }
    if let Some(since) = f.since {
        args.push(Value::Integer(since));
        wheres.push(format!("{plus}t.created_at >= ?{}", args.len()));
    }
    if let Some(until) = f.until {
        args.push(Value::Integer(until));
        wheres.push(format!("{plus}t.created_at < ?{}", args.len()));
    }
    if kind == Kind::Observation {
        if !f.types.is_empty() {
            let mut marks = Vec::new();
            for ty in &f.types {
                args.push(Value::Text(ty.trim().to_ascii_lowercase()));
                marks.push(format!("?{}", args.len()));
            }
            wheres.push(format!("t.type IN ({})", marks.join(", ")));
        }
        if let Some(c) = &f.concept {
            args.push(Value::Text(c.trim().to_lowercase()));
            wheres.push(format!(
                "EXISTS (SELECT 1 FROM json_each(t.concepts) c WHERE lower(c.value) = ?{})",
                args.len()
            ));
        }
    }
    if let Some(file) = &f.file {
        let columns: &[&str] = match kind {
            Kind::Observation => &["files_read", "files_modified"],
            Kind::Summary => &["files_read", "files_edited"],
            Kind::Prompt => &[],
        };
        let file = file.trim();
        args.push(Value::Text(format!("%{}%", escape_like(file))));
        let n = args.len();
        // The list's text is read as JSON only when it holds the path's longest run of
        // characters that every JSON encoder writes as they are: scanning every row of a
        // project for a file, as a search by meaning must, then reads few of them.
        let raw = verbatim_run(file).map(|run| {
            args.push(Value::Text(format!("%{}%", escape_like(run))));
            args.len()
        });
        let any: Vec<String> = columns
            .iter()
            .map(|col| {
                let held = raw
                    .map(|r| format!("t.{col} LIKE ?{r} ESCAPE '\\' AND "))
                    .unwrap_or_default();
                format!(
                    "({held}EXISTS (SELECT 1 FROM json_each(t.{col}) f WHERE f.value LIKE ?{n} ESCAPE '\\'))"
                )
            })
            .collect();
        if !any.is_empty() {
            wheres.push(format!("({})", any.join(" OR ")));
        }
    }
}

/// The longest run of `path` made of ASCII letters and digits, spaces, `.`, `_` and `-`,
/// which no JSON encoder escapes (a slash may be written `\/`, any other letter `\u…`):
/// the JSON text of a list holding a path that contains `path` holds the run.
fn verbatim_run(path: &str) -> Option<&str> {
    path.split(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, ' ' | '.' | '_' | '-')))
        .max_by_key(|run| run.len())
        .filter(|run| !run.is_empty())
}

/// Escapes `%`, `_` and `\` for a `LIKE … ESCAPE '\'` pattern.
fn escape_like(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_patterns_escape_their_wildcards() {
        assert_eq!(escape_like("a%b_c\\"), "a\\%b\\_c\\\\");
    }
}

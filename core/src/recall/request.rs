//! A search request from text fields: what a command line, a web form or a tool call
//! gives (types, kind, order and dates as people write them), checked once and turned into
//! a [`SearchRequest`]. A field that does not parse is a [`RequestError`] naming it, for
//! the caller to render in its own words. Pure: `now` is passed in.

use crate::memory::kind::Kind;
use crate::memory::observations::OBSERVATION_TYPES;
use crate::recall::rank::Purpose;
use crate::recall::search::{Order, SearchRequest, parse_time};
use crate::recall::sql::Filters;

/// A search as text fields; `None` is a field not given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchFields {
    /// What the person typed; see [`crate::recall::query`].
    pub query: String,
    /// Only this project; `None` is every project (the caller decides its default).
    pub project: Option<String>,
    /// Observation types, each one of [`OBSERVATION_TYPES`]; an entry may list several,
    /// comma-separated; case and blanks do not matter, empty entries are none.
    pub types: Vec<String>,
    /// Only observations tagged with this concept.
    pub concept: Option<String>,
    /// Only records that read or modified a file whose path contains this text.
    pub file: Option<String>,
    /// From this time on: `YYYY-MM-DD[THH:MM[:SS]]` (UTC) or an age like `7d`, `12h`, `2w`.
    pub since: Option<String>,
    /// Before this time (same forms as `since`).
    pub until: Option<String>,
    /// `observations`, `summaries`, `prompts` or `all`; `None` is all.
    pub kind: Option<String>,
    /// `relevance`, `newest` or `oldest`; `None` is relevance.
    pub order: Option<String>,
    pub limit: usize,
    pub offset: usize,
    /// See [`SearchRequest::asking_session`].
    pub asking_session: Option<String>,
}

impl Default for SearchFields {
    fn default() -> Self {
        let req = SearchRequest::default();
        Self {
            query: String::new(),
            project: None,
            types: Vec::new(),
            concept: None,
            file: None,
            since: None,
            until: None,
            kind: None,
            order: None,
            limit: req.limit,
            offset: req.offset,
            asking_session: None,
        }
    }
}

/// A text field of a search that does not parse. The message names the field as the
/// search request does (`since`, `kind`); a caller whose fields are called otherwise
/// (`--since`, `'since'`) renders the variant in its own words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// Not one of [`OBSERVATION_TYPES`] (the type as compared: trimmed, lowercase).
    #[error("unknown type '{0}' (use one of {types})", types = OBSERVATION_TYPES.join(", "))]
    UnknownType(String),
    /// `since` or `until` is neither a date nor an age.
    #[error("{field} '{value}' is not a date (YYYY-MM-DD) or an age (7d, 12h, 2w)")]
    BadTime { field: &'static str, value: String },
    /// Not observations, summaries, prompts or all.
    #[error("kind '{0}' is not observations, summaries, prompts or all")]
    UnknownKind(String),
    /// Not relevance, newest or oldest.
    #[error("order '{0}' is not relevance, newest or oldest")]
    UnknownOrder(String),
}

impl SearchFields {
    /// The search these fields ask for, times read relative to `now` (ms). Checks the
    /// types, then the kind, the order, `since` and `until`; the first that does not
    /// parse is the error.
    pub fn to_request(&self, now: i64) -> Result<SearchRequest, RequestError> {
        let types: Vec<String> = self
            .types
            .iter()
            .flat_map(|t| t.split(','))
            .map(|t| t.trim().to_ascii_lowercase())
            .filter(|t| !t.is_empty())
            .collect();
        if let Some(bad) = types
            .iter()
            .find(|t| !OBSERVATION_TYPES.contains(&t.as_str()))
        {
            return Err(RequestError::UnknownType(bad.clone()));
        }
        let kinds = match &self.kind {
            None => Vec::new(),
            Some(k) => Kind::parse_list(k).ok_or_else(|| RequestError::UnknownKind(k.clone()))?,
        };
        let order = match &self.order {
            None => Order::Relevance,
            Some(o) => Order::parse(o).ok_or_else(|| RequestError::UnknownOrder(o.clone()))?,
        };
        let time = |field: &'static str, value: &Option<String>| {
            value
                .as_deref()
                .map(|v| {
                    parse_time(v, now).ok_or_else(|| RequestError::BadTime {
                        field,
                        value: v.to_string(),
                    })
                })
                .transpose()
        };
        Ok(SearchRequest {
            query: self.query.clone(),
            filters: Filters {
                project: self.project.clone(),
                types,
                concept: self.concept.clone(),
                file: self.file.clone(),
                since: time("since", &self.since)?,
                until: time("until", &self.until)?,
            },
            kinds,
            order,
            limit: self.limit,
            offset: self.offset,
            asking_session: self.asking_session.clone(),
            min_relevance: None,
            purpose: Purpose::Search,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: i64 = 86_400_000;

    fn fields(edit: impl FnOnce(&mut SearchFields)) -> Result<SearchRequest, RequestError> {
        let mut f = SearchFields::default();
        edit(&mut f);
        f.to_request(10 * DAY)
    }

    #[test]
    fn no_fields_is_the_default_search() {
        assert_eq!(fields(|_| {}), Ok(SearchRequest::default()));
    }

    #[test]
    fn fields_become_the_request() {
        let req = fields(|f| {
            f.query = "lease rescue".into();
            f.project = Some("p".into());
            f.types = vec![" BugFix, feature".into(), "".into(), "change".into()];
            f.concept = Some("gotcha".into());
            f.file = Some("queue.rs".into());
            f.since = Some("2d".into());
            f.until = Some("1970-01-10".into());
            f.kind = Some("observations".into());
            f.order = Some("oldest".into());
            f.limit = 5;
            f.offset = 10;
            f.asking_session = Some("s".into());
        })
        .expect("valid");
        assert_eq!(
            req,
            SearchRequest {
                query: "lease rescue".into(),
                filters: Filters {
                    project: Some("p".into()),
                    types: vec!["bugfix".into(), "feature".into(), "change".into()],
                    concept: Some("gotcha".into()),
                    file: Some("queue.rs".into()),
                    since: Some(8 * DAY),
                    until: Some(9 * DAY),
                },
                kinds: vec![Kind::Observation],
                order: Order::Oldest,
                limit: 5,
                offset: 10,
                asking_session: Some("s".into()),
                min_relevance: None,
                purpose: Purpose::Search,
            }
        );
        assert_eq!(
            fields(|f| f.kind = Some("all".into())).map(|r| r.kinds),
            Ok(Kind::ALL.to_vec())
        );
    }

    #[test]
    fn each_field_that_does_not_parse_is_named() {
        let check = |edit: &dyn Fn(&mut SearchFields), want: RequestError, text: &str| {
            let got = fields(edit).expect_err(text);
            assert_eq!(got, want);
            assert_eq!(got.to_string(), text);
        };
        check(
            &|f| f.types = vec!["bugfix".into(), "Idea".into()],
            RequestError::UnknownType("idea".into()),
            "unknown type 'idea' (use one of decision, bugfix, feature, refactor, discovery, change)",
        );
        check(
            &|f| f.since = Some("tuesday".into()),
            RequestError::BadTime {
                field: "since",
                value: "tuesday".into(),
            },
            "since 'tuesday' is not a date (YYYY-MM-DD) or an age (7d, 12h, 2w)",
        );
        check(
            &|f| f.until = Some("".into()),
            RequestError::BadTime {
                field: "until",
                value: "".into(),
            },
            "until '' is not a date (YYYY-MM-DD) or an age (7d, 12h, 2w)",
        );
        check(
            &|f| f.kind = Some("mail".into()),
            RequestError::UnknownKind("mail".into()),
            "kind 'mail' is not observations, summaries, prompts or all",
        );
        check(
            &|f| f.order = Some("worst".into()),
            RequestError::UnknownOrder("worst".into()),
            "order 'worst' is not relevance, newest or oldest",
        );
        // The type is checked first.
        check(
            &|f| {
                f.types = vec!["idea".into()];
                f.order = Some("worst".into());
            },
            RequestError::UnknownType("idea".into()),
            "unknown type 'idea' (use one of decision, bugfix, feature, refactor, discovery, change)",
        );
    }
}

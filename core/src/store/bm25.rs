//! `bm25_best(fts, k, weights…)`: FTS5's `bm25()` for the `k` best rows of a statement,
//! without its cost for the others. Registered on every connection [`db`] opens.
//!
//! FTS5's `bm25()` reads every matching row's length in tokens from the table's
//! `_docsize` (one B-tree lookup per row, most of a full-text pool's time at 100,000
//! memories) and merges the positions of all the query's phrases into one array. This
//! function scores each row from its phrases' positions alone and looks up its length
//! only when the row could still be among the `k` best seen so far: its score were it as
//! short as its positions allow (each column at least as long as the last position
//! matched in it) is an upper bound of its true score, and so is the sum of
//! `idf × (k1 + 1)` over the phrases it holds, read before its positions. A row that
//! cannot enter is given its bound, which sorts after the `k` best; every row that can
//! is given exactly what `bm25()` gives it (the same formula, constants and order of
//! operations, so the same double).
//!
//! So `ORDER BY bm25_best(fts, k, …) LIMIT k` returns the same rows with the same scores
//! as `ORDER BY bm25(fts, …) LIMIT k`, provided the statement passes every row it scores
//! to that sort (the function only in the result columns and `ORDER BY`, never in a
//! `WHERE`), with `k` the statement's `LIMIT`. Beyond the `k` best a value is only an
//! upper bound of the row's relevance. The state of the `k` best lives with the full-text
//! cursor and starts afresh with each run of the statement.
//!
//! [`db`]: super::db

#![allow(unsafe_code)] // FTS5's auxiliary functions are C callbacks; rusqlite offers none

use std::ffi::{CStr, c_int, c_void};
use std::ptr;

use rusqlite::Connection;
use rusqlite::ffi;

/// The name the function is registered under.
pub const NAME: &str = match C_NAME.to_str() {
    Ok(name) => name,
    Err(_) => panic!("the function's name is ASCII"),
};
const C_NAME: &CStr = c"bm25_best";

/// BM25's constants, as FTS5's `bm25()` has them.
const K1: f64 = 1.2;
const B: f64 = 0.75;
/// Columns whose last matched position is tracked; a row of a table with more is never
/// pruned by its length (none of cairn's has more than eight).
const MAX_COLUMNS: usize = 16;

/// Registers [`NAME`] on `conn`. A connection without FTS5 (never cairn's: the bundled
/// SQLite has it) is left without the function and told so.
pub fn register(conn: &Connection) -> rusqlite::Result<()> {
    // SAFETY: the handle is `conn`'s open database, used on this thread only while
    // `conn` is borrowed. The statement is prepared, stepped and finalized here; the
    // pointer bound to it is written by FTS5 during the step and read after.
    unsafe {
        let db = conn.handle();
        let mut stmt: *mut ffi::sqlite3_stmt = ptr::null_mut();
        check(
            db,
            ffi::sqlite3_prepare_v2(
                db,
                c"SELECT fts5(?1)".as_ptr(),
                -1,
                &mut stmt,
                ptr::null_mut(),
            ),
        )?;
        let mut api: *mut ffi::fts5_api = ptr::null_mut();
        let bound = ffi::sqlite3_bind_pointer(
            stmt,
            1,
            (&mut api as *mut *mut ffi::fts5_api).cast::<c_void>(),
            c"fts5_api_ptr".as_ptr(),
            None,
        );
        let stepped = if bound == ffi::SQLITE_OK {
            ffi::sqlite3_step(stmt)
        } else {
            bound
        };
        ffi::sqlite3_finalize(stmt);
        if stepped != ffi::SQLITE_ROW {
            return check(db, stepped);
        }
        let Some(create) = api.as_ref().and_then(|a| a.xCreateFunction) else {
            return Err(rusqlite::Error::SqliteFailure(
                ffi::Error::new(ffi::SQLITE_MISUSE),
                Some("FTS5 gave no API to register functions with".into()),
            ));
        };
        check(
            db,
            create(api, C_NAME.as_ptr(), ptr::null_mut(), Some(bm25_best), None),
        )
    }
}

/// `rc` as a result, with `db`'s message when it is an error.
///
/// # Safety
/// `db` is an open connection.
unsafe fn check(db: *mut ffi::sqlite3, rc: c_int) -> rusqlite::Result<()> {
    if rc == ffi::SQLITE_OK || rc == ffi::SQLITE_ROW || rc == ffi::SQLITE_DONE {
        return Ok(());
    }
    // SAFETY: `db` is open (the caller's promise); the message is copied at once.
    let message = unsafe {
        let m = ffi::sqlite3_errmsg(db);
        (!m.is_null()).then(|| std::ffi::CStr::from_ptr(m).to_string_lossy().into_owned())
    };
    Err(rusqlite::Error::SqliteFailure(ffi::Error::new(rc), message))
}

/// What one run of a statement keeps between rows: the query's IDFs and mean length, the
/// scores of the best rows so far, and the last row scored (a statement may ask twice).
#[derive(Debug)]
struct Run {
    k: usize,
    weights: Vec<f64>,
    idf: Vec<f64>,
    avgdl: f64,
    /// The best `k` exact scores so far (positive: higher is better), a min-heap.
    best: std::collections::BinaryHeap<std::cmp::Reverse<Score>>,
    last: Option<(i64, f64)>,
    freq: Vec<f64>,
}

/// A score ordered as a number (never NaN: logs of positive ratios and their sums).
#[derive(Debug, Clone, Copy)]
struct Score(f64);

impl PartialEq for Score {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for Score {}

impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Score {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

impl Run {
    /// The lowest score that still enters the `k` best, once there are `k` (never when
    /// `k` is 0: none are kept).
    fn threshold(&self) -> Option<f64> {
        let lowest = self.best.peek().map(|r| r.0.0);
        lowest.filter(|_| self.best.len() >= self.k)
    }

    fn keep(&mut self, score: f64) {
        self.best.push(std::cmp::Reverse(Score(score)));
        if self.best.len() > self.k {
            self.best.pop();
        }
    }

    /// BM25 of a row of `length` tokens with the phrase frequencies in `freq`, as FTS5
    /// computes it (positive: higher is better).
    fn score(&self, length: f64) -> f64 {
        let mut score = 0.0;
        for (idf, f) in self.idf.iter().zip(&self.freq) {
            score += idf * ((f * (K1 + 1.0)) / (f + K1 * (1.0 - B + B * length / self.avgdl)));
        }
        score
    }
}

/// The FTS5 auxiliary function. Arguments: `k`, then the column weights (1 where left
/// out, as for `bm25()`).
///
/// # Safety
/// Called by FTS5 with its API, a valid context and `n` values.
unsafe extern "C" fn bm25_best(
    api: *const ffi::Fts5ExtensionApi,
    fts: *mut ffi::Fts5Context,
    ctx: *mut ffi::sqlite3_context,
    n: c_int,
    values: *mut *mut ffi::sqlite3_value,
) {
    // SAFETY: FTS5 passes its API and context for the current row, and `n` values.
    let outcome = unsafe { score_row(&*api, fts, n, values) };
    // SAFETY: `ctx` is this call's context.
    unsafe {
        match outcome {
            Ok(score) => ffi::sqlite3_result_double(ctx, -score),
            Err(rc) => ffi::sqlite3_result_error_code(ctx, rc),
        }
    }
}

/// The row's score (positive), exact or, for a row that cannot enter the `k` best, its
/// bound; an SQLite error code when FTS5 reports one.
///
/// # Safety
/// As [`bm25_best`].
unsafe fn score_row(
    api: &ffi::Fts5ExtensionApi,
    fts: *mut ffi::Fts5Context,
    n: c_int,
    values: *mut *mut ffi::sqlite3_value,
) -> Result<f64, c_int> {
    let (Some(get), Some(rowid_of)) = (api.xGetAuxdata, api.xRowid) else {
        return Err(ffi::SQLITE_MISUSE);
    };
    // SAFETY: the context is FTS5's for this row.
    let rowid = unsafe { rowid_of(fts) };
    // SAFETY: the only auxiliary data set on this cursor's slot 0 by this function is a
    // `Box<Run>` (below); FTS5 keeps it until the cursor is reset or closed.
    let mut run = unsafe { get(fts, 0) }.cast::<Run>();
    if run.is_null() {
        // SAFETY: as above; `values` holds `n` values.
        let fresh = Box::new(unsafe { start(api, fts, n, values) }?);
        let Some(set) = api.xSetAuxdata else {
            return Err(ffi::SQLITE_MISUSE);
        };
        run = Box::into_raw(fresh);
        // SAFETY: FTS5 owns the box from here and frees it with `drop_run`, also on
        // failure.
        ok(unsafe { set(fts, run.cast(), Some(drop_run)) })?;
    }
    // SAFETY: `run` is the live box FTS5 holds for this cursor, used by this call alone.
    let run = unsafe { &mut *run };
    if let Some((last, score)) = run.last
        && last == rowid
    {
        return Ok(score);
    }
    let (Some(first), Some(next)) = (api.xPhraseFirst, api.xPhraseNext) else {
        return Err(ffi::SQLITE_MISUSE);
    };
    // The phrase's first position in the row: an iterator for the rest, its column (-1
    // when the row does not hold it) and its offset.
    let first_position = |phrase: usize| -> Result<(ffi::Fts5PhraseIter, c_int, c_int), c_int> {
        let mut iter = ffi::Fts5PhraseIter {
            a: ptr::null(),
            b: ptr::null(),
        };
        let (mut column, mut offset) = (-1, -1);
        // SAFETY: the iterator and outputs are ours; the phrase index is in range.
        ok(unsafe { first(fts, phrase as c_int, &mut iter, &mut column, &mut offset) })?;
        Ok((iter, column, offset))
    };
    let threshold = run.threshold();
    if let Some(t) = threshold {
        let mut bound = 0.0;
        for (phrase, idf) in run.idf.iter().enumerate() {
            if first_position(phrase)?.1 >= 0 {
                bound += idf * (K1 + 1.0);
            }
        }
        if bound < t {
            return Ok(bound);
        }
    }
    let mut last_offset = [-1i64; MAX_COLUMNS];
    let mut wide = false;
    for phrase in 0..run.idf.len() {
        let (mut iter, mut column, mut offset) = first_position(phrase)?;
        let mut f = 0.0;
        while column >= 0 {
            let c = column as usize;
            f += run.weights.get(c).copied().unwrap_or(1.0);
            match last_offset.get_mut(c) {
                Some(o) => *o = (*o).max(offset as i64),
                None => wide = true,
            }
            // SAFETY: the iterator was started by `first` on this row.
            unsafe { next(fts, &mut iter, &mut column, &mut offset) };
        }
        run.freq[phrase] = f;
    }
    if let Some(t) = threshold
        && !wide
    {
        let shortest: i64 = last_offset.iter().map(|o| o + 1).sum();
        let bound = run.score(shortest as f64);
        if bound < t {
            return Ok(bound);
        }
    }
    let Some(size) = api.xColumnSize else {
        return Err(ffi::SQLITE_MISUSE);
    };
    let mut tokens: c_int = 0;
    // SAFETY: column -1 asks for the row's total; the output is ours.
    ok(unsafe { size(fts, -1, &mut tokens) })?;
    let score = run.score(f64::from(tokens));
    run.keep(score);
    run.last = Some((rowid, score));
    Ok(score)
}

/// The state of a new run: `k` and the weights from the arguments, and, as FTS5's
/// `bm25()` computes them, each phrase's IDF over the rows holding it and the mean length.
///
/// # Safety
/// As [`bm25_best`].
unsafe fn start(
    api: &ffi::Fts5ExtensionApi,
    fts: *mut ffi::Fts5Context,
    n: c_int,
    values: *mut *mut ffi::sqlite3_value,
) -> Result<Run, c_int> {
    let (Some(phrases), Some(rows), Some(total), Some(query)) = (
        api.xPhraseCount,
        api.xRowCount,
        api.xColumnTotalSize,
        api.xQueryPhrase,
    ) else {
        return Err(ffi::SQLITE_MISUSE);
    };
    // SAFETY: `values` holds `n` values (FTS5's promise).
    let args: Vec<*mut ffi::sqlite3_value> = match usize::try_from(n) {
        Ok(n) if n > 0 && !values.is_null() => {
            unsafe { std::slice::from_raw_parts(values, n) }.to_vec()
        }
        _ => Vec::new(),
    };
    let Some((&k, weights)) = args.split_first() else {
        return Err(ffi::SQLITE_MISUSE);
    };
    // SAFETY: each value is a live argument of this call.
    let k = usize::try_from(unsafe { ffi::sqlite3_value_int64(k) }).unwrap_or(0);
    let weights = weights
        .iter()
        // SAFETY: as above.
        .map(|&w| unsafe { ffi::sqlite3_value_double(w) })
        .collect();
    // SAFETY: the context is FTS5's for this row; outputs are ours.
    let count = usize::try_from(unsafe { phrases(fts) }).unwrap_or(0);
    let (mut n_rows, mut n_tokens) = (0i64, 0i64);
    ok(unsafe { rows(fts, &mut n_rows) })?;
    ok(unsafe { total(fts, -1, &mut n_tokens) })?;
    let mut idf = Vec::with_capacity(count);
    for phrase in 0..count {
        let mut hits: i64 = 0;
        // SAFETY: `count_hit` reads `hits` through the pointer given, during this call.
        ok(unsafe {
            query(
                fts,
                phrase as c_int,
                (&mut hits as *mut i64).cast(),
                Some(count_hit),
            )
        })?;
        let i = ((n_rows as f64 - hits as f64 + 0.5) / (hits as f64 + 0.5)).ln();
        idf.push(if i <= 0.0 { 1e-6 } else { i });
    }
    Ok(Run {
        k,
        weights,
        freq: vec![0.0; count],
        idf,
        avgdl: n_tokens as f64 / n_rows as f64,
        best: std::collections::BinaryHeap::with_capacity(k.min(4096) + 1),
        last: None,
    })
}

/// FTS5's return code as a result.
fn ok(rc: c_int) -> Result<(), c_int> {
    if rc == ffi::SQLITE_OK {
        Ok(())
    } else {
        Err(rc)
    }
}

/// Counts a row holding a phrase, for its IDF.
///
/// # Safety
/// `hits` is the `i64` [`start`] passed.
unsafe extern "C" fn count_hit(
    _: *const ffi::Fts5ExtensionApi,
    _: *mut ffi::Fts5Context,
    hits: *mut c_void,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { *hits.cast::<i64>() += 1 };
    ffi::SQLITE_OK
}

/// Frees a run's state when FTS5 resets or closes its cursor.
///
/// # Safety
/// `run` came from `Box::into_raw` in [`score_row`] and is freed once, by FTS5.
unsafe extern "C" fn drop_run(run: *mut c_void) {
    // SAFETY: the caller's promise.
    drop(unsafe { Box::from_raw(run.cast::<Run>()) });
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use rusqlite::{Connection, params};

    /// A table shaped like cairn's (a heavy title, a long body, a column of weight 0 that
    /// every row holds once) with `rows` rows of words drawn from a small vocabulary, some
    /// far more common than others, and bodies of very different lengths.
    fn corpus(rows: usize, seed: u64) -> Connection {
        let conn = Connection::open_in_memory().expect("open");
        super::register(&conn).expect("register");
        conn.execute_batch(
            "CREATE TABLE t (id INTEGER PRIMARY KEY, project TEXT);
             CREATE VIRTUAL TABLE f USING fts5 (title, body, key, tokenize = 'porter unicode61');",
        )
        .expect("schema");
        let mut draw = crate::rand::seeded(seed | 1);
        let mut next = move |n: u64| draw() % n;
        // Word i is drawn about 1/(i+1) as often as word 0.
        let word = move |next: &mut dyn FnMut(u64) -> u64| {
            let i = next(40);
            let i = next(i + 1);
            format!("w{i}")
        };
        for id in 1..=rows as i64 {
            let title: Vec<String> = (0..1 + next(6)).map(|_| word(&mut next)).collect();
            let body: Vec<String> = (0..next(80)).map(|_| word(&mut next)).collect();
            let project = ["a", "b", "c"][next(3) as usize];
            conn.execute(
                "INSERT INTO t (id, project) VALUES (?1, ?2)",
                params![id, project],
            )
            .expect("row");
            conn.execute(
                "INSERT INTO f (rowid, title, body, key) VALUES (?1, ?2, ?3, ?4)",
                params![id, title.join(" "), body.join(" "), format!("k{project}")],
            )
            .expect("text");
        }
        conn
    }

    /// The `k` best of `expr` by `bm25()` and by `bm25_best()`, alone or with the rows
    /// joined and filtered on their project.
    fn both(conn: &Connection, expr: &str, k: i64, project: Option<&str>) -> [Vec<(i64, f64)>; 2] {
        [
            "bm25(f, 10.0, 1.0, 0.0)",
            "bm25_best(f, ?2, 10.0, 1.0, 0.0)",
        ]
        .map(|score| {
            let (sql, args): (String, Vec<rusqlite::types::Value>) = match project {
                None => (
                    format!(
                        "SELECT rowid, {score} FROM f WHERE f MATCH ?1
                         ORDER BY 2, rowid DESC LIMIT ?2"
                    ),
                    vec![expr.to_string().into(), k.into()],
                ),
                Some(p) => (
                    format!(
                        "SELECT t.id, {score} FROM f JOIN t ON t.id = f.rowid
                         WHERE f MATCH ?1 AND t.project = ?3 ORDER BY 2, t.id DESC LIMIT ?2"
                    ),
                    vec![expr.to_string().into(), k.into(), p.to_string().into()],
                ),
            };
            let mut stmt = conn.prepare_cached(&sql).expect("prepare");
            stmt.query_map(rusqlite::params_from_iter(args), |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .expect("query")
            .collect::<rusqlite::Result<Vec<_>>>()
            .expect("rows")
        })
    }

    #[test]
    fn the_best_rows_and_their_scores_are_bm25s_exactly() {
        let conn = corpus(3000, 7);
        let queries = [
            "w0 OR w1 OR w7",
            "w3 OR w20 OR w33 OR w38",
            "w1",
            "title : w5 OR w9",
            "(w2 OR w4 OR w30) NOT w6",
            "\"w1 w2\" OR w11",
            "(w1 OR w12) AND key : ka",
            "w39 OR w38 OR w37 OR w36 OR w35",
        ];
        let mut compared = 0;
        for expr in queries {
            for k in [1, 10, 50, 400] {
                for project in [None, Some("b")] {
                    let [want, got] = both(&conn, expr, k, project);
                    assert_eq!(got, want, "{expr}, k {k}, {project:?}");
                    compared += got.len();
                }
            }
        }
        assert!(compared > 5000, "the queries find rows: {compared}");
    }

    #[test]
    fn rows_beyond_the_best_are_spared_their_lookup_and_rank_after_them() {
        let conn = corpus(3000, 11);
        // Every row's value, in the order FTS5 visits them (no ORDER BY): once 10 are
        // known, a row that cannot beat them gets a bound, never a better value than the
        // tenth best's exact score.
        let values: Vec<(i64, f64, f64)> = conn
            .prepare("SELECT rowid, bm25_best(f, 10, 10.0, 1.0, 0.0), bm25(f, 10.0, 1.0, 0.0) FROM f WHERE f MATCH 'w0 OR w1 OR w3'")
            .expect("prepare")
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .expect("query")
            .collect::<rusqlite::Result<_>>()
            .expect("rows");
        let mut exact: Vec<f64> = values.iter().map(|v| v.2).collect();
        exact.sort_by(f64::total_cmp);
        let tenth = exact[9];
        let spared = values.iter().filter(|(_, best, bm25)| best != bm25).count();
        assert!(values.len() > 1000);
        assert!(
            spared * 2 > values.len(),
            "most rows are spared: {spared} of {}",
            values.len()
        );
        for (id, best, bm25) in &values {
            if best != bm25 {
                assert!(
                    best > &tenth,
                    "row {id}: {best} ranks after the tenth, {tenth}"
                );
                assert!(
                    best <= bm25,
                    "row {id}: its bound {best} is at least its relevance {bm25}"
                );
            }
        }
    }

    #[test]
    fn a_statement_run_again_starts_afresh() {
        let conn = corpus(500, 3);
        let [first, _] = both(&conn, "w2 OR w5", 5, None);
        let [_, other] = both(&conn, "w9", 5, None);
        let [want, again] = both(&conn, "w2 OR w5", 5, None);
        assert_eq!(again, want);
        assert_eq!(first, want);
        assert!(!other.is_empty());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(40))]
        #[test]
        fn any_query_of_the_vocabulary_gets_bm25s_best(
            words in proptest::collection::vec(0u64..40, 1..6),
            k in 1i64..80,
            filtered in any::<bool>(),
        ) {
            thread_local! {
                static CONN: Connection = corpus(1500, 5);
            }
            let expr = words.iter().map(|w| format!("w{w}")).collect::<Vec<_>>().join(" OR ");
            CONN.with(|conn| {
                let [want, got] = both(conn, &expr, k, filtered.then_some("c"));
                prop_assert_eq!(got, want);
                Ok(())
            })?;
        }
    }
}

//! Nearest neighbours among the stored vectors, with the search filters applied exactly.
//!
//! Every stored vector has two forms (`embeddings.bits`: one sign bit per dimension;
//! `embeddings.vector`: int8, scaled to the largest component). [`VectorIndex`] keeps the
//! bits of every vector of the current model in memory, with what the filters need (kind,
//! project, time), and catches up with rows stored since its last look (`embeddings.seq`).
//! A search scans the bits of the rows that pass the filters by Hamming distance, takes the
//! [`RESCORE`] closest and ranks those by the cosine of their int8 vectors, read from the
//! database, or held in memory by an index that keeps them ([`VectorIndex::keep_vectors`]:
//! the worker's, which answers every prompt; at most [`RESIDENT_MAX`] bytes of them, 384
//! each with all-MiniLM-L6-v2: 38 MB at 100,000 memories). Then only the rows that would be
//! returned are looked up, to know they are still there. Filters on type, concept and
//! file, which the index does not hold, are turned into the set of ids that pass them by
//! the caller before the scan, never applied to a fixed number of neighbours afterwards.
//!
//! Invariants: a row deleted or replaced since the index last looked is never returned
//! (its vector is read back, or its row looked up, before it counts); a vector of another
//! model is never compared.

use std::collections::{HashMap, HashSet};

use rusqlite::{Connection, OptionalExtension, params};

use super::{bits_of, cosine_i8, cosines_i8, store};
use crate::error::Result;
use crate::memory::kind::Kind;

/// Rows whose exact similarity is computed after the bit scan, at least; more when more
/// neighbours are asked for.
pub const RESCORE: usize = 400;

/// The most bytes of vectors an index keeps in memory ([`VectorIndex::keep_vectors`]);
/// past it they are read from the database again (273,066 vectors of all-MiniLM-L6-v2's,
/// 384 bytes each; fewer of a wider model's).
pub const RESIDENT_MAX: usize = 100 << 20;

#[derive(Debug, Clone)]
struct Entry {
    kind: Kind,
    id: i64,
    project: u32,
    created_at: i64,
    /// The row (`embeddings.seq`) its int8 vector is read from.
    seq: i64,
}

/// Bands of distances the bit scan takes one at a time, each a pass over every row,
/// before it takes every distance left in one (see [`VectorIndex::closest`]).
const MAX_BANDS: usize = 8;

/// What [`VectorIndex::refresh`] reads of the rows stored since it last looked: all in the
/// index `embeddings_scan`, so the rows' 1 KB of int8 vectors are not read with their 48
/// bytes of bits (`?1` the last `seq` seen, `?2` the model).
const READ_BITS: &str = "SELECT seq, kind, ref_id, project, created_at, bits, NULL
     FROM embeddings INDEXED BY embeddings_scan
     WHERE seq > ?1 AND model = ?2 ORDER BY seq";

/// [`READ_BITS`] with the int8 vectors, for an index that keeps them.
const READ_WITH_VECTORS: &str = "SELECT seq, kind, ref_id, project, created_at, bits, vector
     FROM embeddings WHERE seq > ?1 AND model = ?2 ORDER BY seq";

/// Which rows a nearest-neighbour search may return.
#[derive(Debug, Clone, Default)]
pub struct Scope<'a> {
    pub kinds: &'a [Kind],
    /// `None` is every project.
    pub project: Option<&'a str>,
    pub since: Option<i64>,
    pub until: Option<i64>,
    /// When set, only these ids of each kind (the rows passing the filters the index does
    /// not hold).
    pub allowed: Option<&'a HashMap<Kind, HashSet<i64>>>,
}

impl Scope<'_> {
    /// Whether a row of `kind` made at `created_at` passes every filter but the project.
    pub fn admits(&self, kind: Kind, id: i64, created_at: i64) -> bool {
        self.kinds.contains(&kind)
            && self.since.is_none_or(|s| created_at >= s)
            && self.until.is_none_or(|u| created_at < u)
            && self
                .allowed
                .is_none_or(|a| a.get(&kind).is_some_and(|ids| ids.contains(&id)))
    }
}

/// One neighbour: the row and its cosine similarity to the query.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Neighbour {
    pub kind: Kind,
    pub id: i64,
    pub created_at: i64,
    pub similarity: f32,
}

/// The in-memory bit index of one model's vectors.
#[derive(Debug, Default)]
pub struct VectorIndex {
    model: String,
    last_seq: i64,
    entries: Vec<Entry>,
    /// The bits of every entry, `words` 64-bit words each, in the order of `entries`: one
    /// block of memory the scan reads straight through.
    bits: Vec<u64>,
    words: usize,
    projects: HashMap<String, u32>,
    /// The int8 vector of every entry, in the order of `entries`, when kept in memory.
    vectors: Option<Vec<u8>>,
    /// The length of a vector: the first one's.
    dims: usize,
    /// The row at `last_seq` as it was read (kind, ref_id, bits): a `seq` is reused once
    /// the newest rows are deleted (it is the table's rowid), which this tells.
    last_row: Option<(i64, i64, Vec<u8>)>,
}

impl VectorIndex {
    /// An empty index for `model`; [`VectorIndex::refresh`] fills it.
    pub fn new(model: &str) -> VectorIndex {
        VectorIndex {
            model: model.to_string(),
            ..VectorIndex::default()
        }
    }

    /// Keeps the int8 vectors in memory too, up to [`RESIDENT_MAX`], so that rescoring
    /// reads only the rows it returns: for a process that searches again and again (the
    /// worker). Called before the first refresh.
    pub fn keep_vectors(&mut self) {
        if self.entries.is_empty() {
            self.vectors = Some(Vec::new());
        }
    }

    /// Vectors held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no vector is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Reads the vectors stored since the last refresh. When the newest rows it read were
    /// deleted since (their `seq` may then be given to new rows), it reads every row
    /// again.
    pub fn refresh(&mut self, conn: &Connection) -> Result<()> {
        if self.last_seq > 0 && self.newest_rows_changed(conn)? {
            log::debug!("the newest vectors were deleted since the index looked: read again");
            *self = VectorIndex {
                model: std::mem::take(&mut self.model),
                vectors: self.vectors.as_ref().map(|_| Vec::new()),
                ..VectorIndex::default()
            };
        }
        let mut stmt = conn.prepare_cached(if self.vectors.is_some() {
            READ_WITH_VECTORS
        } else {
            READ_BITS
        })?;
        let mut rows = stmt.query(params![self.last_seq, self.model])?;
        while let Some(r) = rows.next()? {
            let seq: i64 = r.get(0)?;
            let kind = Kind::from_code(r.get(1)?);
            let project: String = r.get(3)?;
            let blob: Vec<u8> = r.get(5)?;
            let bits = words_of(&blob);
            self.last_seq = seq;
            self.last_row = Some((r.get(1)?, r.get(2)?, blob));
            let Some(kind) = kind else { continue };
            let vector: Option<Vec<u8>> = r.get(6)?;
            if self.entries.is_empty() {
                self.words = bits.len();
                self.dims = vector.as_ref().map_or(0, Vec::len);
            }
            if bits.len() != self.words {
                continue;
            }
            if let Some(kept) = &mut self.vectors {
                match vector {
                    Some(v) if v.len() == self.dims && kept.len() + v.len() <= RESIDENT_MAX => {
                        kept.extend_from_slice(&v);
                    }
                    Some(v) if v.len() != self.dims => continue,
                    _ => {
                        log::info!(
                            "vectors past {} MB: they are read from the database again",
                            RESIDENT_MAX >> 20
                        );
                        self.vectors = None;
                    }
                }
            }
            let next = self.projects.len() as u32;
            let project = *self.projects.entry(project).or_insert(next);
            self.entries.push(Entry {
                kind,
                id: r.get(2)?,
                project,
                created_at: r.get(4)?,
                seq,
            });
            self.bits.extend(bits);
        }
        Ok(())
    }

    /// Whether the row at `last_seq` is gone or is another row now, or rows past it were
    /// deleted: then seqs the index holds may name other rows.
    fn newest_rows_changed(&self, conn: &Connection) -> Result<bool> {
        let top: i64 = conn
            .prepare_cached("SELECT coalesce(max(seq), 0) FROM embeddings")?
            .query_row([], |r| r.get(0))?;
        if top < self.last_seq {
            return Ok(true);
        }
        let now: Option<(i64, i64, Vec<u8>)> = conn
            .prepare_cached("SELECT kind, ref_id, bits FROM embeddings WHERE seq = ?1")?
            .query_row([self.last_seq], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .optional()?;
        Ok(now != self.last_row)
    }

    /// The `k` rows in `scope` most similar to `query` (a unit vector), best first.
    pub fn nearest(
        &self,
        conn: &Connection,
        query: &[f32],
        k: usize,
        scope: &Scope,
    ) -> Result<Vec<Neighbour>> {
        let closest = self.closest(query, k, scope);
        self.rescore(conn, query, closest, k)
    }

    /// The first half of [`VectorIndex::nearest`], which reads nothing from the database
    /// (a search runs it on a thread of its own): the rows in `scope` closest to `query` by
    /// the Hamming distance of their bits, [`RESCORE`] of them or `4 k`, whichever is more.
    pub fn closest(&self, query: &[f32], k: usize, scope: &Scope) -> Closest {
        if k == 0 || self.entries.is_empty() {
            return Closest(Vec::new());
        }
        let project = match scope.project {
            Some(p) => match self.projects.get(p) {
                Some(n) => Some(*n),
                None => return Closest(Vec::new()),
            },
            None => None,
        };
        let qbits = words_of(&bits_of(query));
        if qbits.len() != self.words {
            // A query of another model's width: nothing here compares with it.
            return Closest(Vec::new());
        }
        let depth = RESCORE.max(k * 4);
        let mut distances = Vec::with_capacity(self.entries.len());
        cairn_kernels::bits::distances(&self.bits, self.words, &qbits, &mut distances);
        let admitted = |i: usize| {
            let e = &self.entries[i];
            project.is_none_or(|p| p == e.project) && scope.admits(e.kind, e.id, e.created_at)
        };
        // The `depth` closest rows that pass the filters, the earlier of two at the same
        // distance first. A distance is at most the vectors' width in bits, so the rows
        // are taken by distance, nearest first, from a count of the rows at each: only the
        // rows that may be kept are looked at (the filters read each row's entry, which
        // on every row cost twice the distances themselves).
        let mut at = vec![0usize; self.words * 64 + 1];
        for &d in &distances {
            at[d as usize] += 1;
        }
        let mut kept = Vec::with_capacity(depth);
        let mut nearer = 0;
        let mut bands = 0;
        while kept.len() < depth && nearer < at.len() {
            // The next distances holding enough rows to fill what is left, were all of
            // them admitted; after MAX_BANDS such bands, every distance left: when the
            // filters admit few rows (a file filter), band after band would each pass
            // over every row again.
            bands += 1;
            let mut farther = if bands > MAX_BANDS { at.len() } else { nearer };
            let mut rows = 0;
            while farther < at.len() && rows < depth - kept.len() {
                rows += at[farther];
                farther += 1;
            }
            let band = nearer as u32..farther as u32;
            let mut found: Vec<(u32, usize)> = distances
                .iter()
                .enumerate()
                .filter(|(i, d)| band.contains(d) && admitted(*i))
                .map(|(i, &d)| (d, i))
                .collect();
            let left = depth - kept.len();
            if found.len() > left {
                found.select_nth_unstable(left);
                found.truncate(left);
            }
            found.sort_unstable();
            kept.extend(found.into_iter().map(|(_, i)| i));
            nearer = farther;
        }
        Closest(kept)
    }

    /// The second half of [`VectorIndex::nearest`]: the `k` of `closest` most similar to
    /// `query` by the cosine of their int8 vectors, best first.
    pub fn rescore(
        &self,
        conn: &Connection,
        query: &[f32],
        closest: Closest,
        k: usize,
    ) -> Result<Vec<Neighbour>> {
        if let Some(kept) = &self.vectors {
            return self.rescore_kept(conn, kept, query, closest, k);
        }
        // One row per memory (`UNIQUE (kind, ref_id)`): an entry whose row was replaced or
        // deleted since the index looked finds nothing and is skipped.
        // In the order of the table (entries are in `seq` order): neighbouring reads share
        // pages.
        let mut rows = closest.0;
        rows.sort_unstable();
        let mut out = Vec::with_capacity(rows.len());
        for i in rows {
            let e = &self.entries[i];
            if let Some(v) = store::vector_at(conn, e.seq, e.kind, e.id)? {
                out.push(Neighbour {
                    kind: e.kind,
                    id: e.id,
                    created_at: e.created_at,
                    similarity: cosine_i8(query, &v),
                });
            }
        }
        out.sort_by(|a, b| b.similarity.total_cmp(&a.similarity));
        out.truncate(k);
        Ok(out)
    }

    /// [`VectorIndex::rescore`] with the vectors in memory: all of `closest` ranked, then
    /// the best looked up, `k` at a time, until `k` are still there.
    fn rescore_kept(
        &self,
        conn: &Connection,
        kept: &[u8],
        query: &[f32],
        closest: Closest,
        k: usize,
    ) -> Result<Vec<Neighbour>> {
        let vectors: Vec<&[u8]> = closest
            .0
            .iter()
            .map(|i| &kept[i * self.dims..][..self.dims])
            .collect();
        let mut ranked: Vec<(f32, usize)> = cosines_i8(query, &vectors)
            .into_iter()
            .zip(closest.0)
            .collect();
        ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut out = Vec::with_capacity(k);
        for chunk in ranked.chunks(k.max(1)) {
            let seqs: Vec<i64> = chunk.iter().map(|(_, i)| self.entries[*i].seq).collect();
            let present = store::present(conn, &seqs)?;
            for (similarity, i) in chunk {
                let e = &self.entries[*i];
                if out.len() < k && present.contains(&(e.seq, e.kind.code(), e.id)) {
                    out.push(Neighbour {
                        kind: e.kind,
                        id: e.id,
                        created_at: e.created_at,
                        similarity: *similarity,
                    });
                }
            }
            if out.len() >= k {
                break;
            }
        }
        Ok(out)
    }
}

/// Rows found by a bit scan ([`VectorIndex::closest`]), for [`VectorIndex::rescore`] of the
/// same index.
#[derive(Debug, Default)]
pub struct Closest(Vec<usize>);

/// Packs a bit blob into 64-bit words for popcount.
fn words_of(bytes: &[u8]) -> Vec<u64> {
    bytes
        .chunks(8)
        .map(|c| {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            u64::from_le_bytes(w)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recall::testing::{T0, fixture, obs, unit};

    /// `rows` memories with vectors of `dims` random dimensions, each with the project and
    /// time `place` gives it, stored and indexed, and a random query.
    fn random_index(
        seed: u64,
        rows: i64,
        dims: usize,
        place: impl Fn(i64, &mut dyn FnMut() -> u64) -> (&'static str, i64),
    ) -> (
        crate::recall::testing::Fixture,
        HashMap<i64, Vec<f32>>,
        VectorIndex,
        Vec<f32>,
    ) {
        let mut f = fixture();
        let mut next = crate::rand::seeded(seed);
        let vectors: HashMap<i64, Vec<f32>> = (0..rows)
            .map(|i| {
                let (p, at) = place(i, &mut next);
                let id = f.add(obs(p, "bugfix", &format!("t{i}"), "", at));
                let v = (0..dims).map(|_| (next() % 200) as f32 - 100.0).collect();
                (id, v)
            })
            .collect();
        store::store_each(&mut f.conn, "m", |id| vectors.get(&id).cloned());
        let mut index = VectorIndex::new("m");
        index.refresh(&f.conn).expect("refresh");
        let query = (0..dims).map(|_| (next() % 200) as f32 - 100.0).collect();
        (f, vectors, index, query)
    }

    /// The places of the index's rows `admit` lets through, by their bits' distance to
    /// `query`, the earlier of two at the same distance first: what the scan must keep.
    fn by_distance(
        index: &VectorIndex,
        query: &[f32],
        admit: impl Fn(&Entry) -> bool,
    ) -> Vec<usize> {
        let qbits = words_of(&bits_of(query));
        let mut found: Vec<(u32, usize)> = (0..index.entries.len())
            .filter(|&i| admit(&index.entries[i]))
            .map(|i| {
                let row = &index.bits[i * index.words..][..index.words];
                (
                    row.iter()
                        .zip(&qbits)
                        .map(|(a, b)| (a ^ b).count_ones())
                        .sum(),
                    i,
                )
            })
            .collect();
        found.sort_unstable();
        found.into_iter().map(|(_, i)| i).collect()
    }

    #[test]
    fn the_nearest_come_first_and_another_models_query_finds_nothing() {
        let mut f = fixture();
        let a = f.add(obs("p", "bugfix", "a", "", T0));
        let b = f.add(obs("p", "bugfix", "b", "", T0 + 1));
        store::store_each(&mut f.conn, "m", |id| {
            Some(if id == a { unit(0) } else { unit(1) })
        });
        let mut index = VectorIndex::new("m");
        index.refresh(&f.conn).expect("refresh");
        let kinds = [Kind::Observation];
        let scope = Scope {
            kinds: &kinds,
            ..Scope::default()
        };
        let mut query = unit(1);
        query[0] = 0.5;
        let found = index.nearest(&f.conn, &query, 5, &scope).expect("nearest");
        let ids: Vec<i64> = found.iter().map(|n| n.id).collect();
        assert_eq!(ids, vec![b, a]);
        assert!(found[0].similarity > found[1].similarity);
        // A vector of 128 dimensions, as another model makes: nothing compares with it.
        let mut wide = query;
        wide.resize(128, 0.0);
        assert!(
            index
                .nearest(&f.conn, &wide, 5, &scope)
                .expect("nearest")
                .is_empty()
        );
    }

    #[test]
    fn the_bit_scan_keeps_the_closest_rows_that_pass_the_filters_first_come_first() {
        // 1,500 rows of 16 dimensions over three projects and two times: many share a
        // distance to the query, so which are kept at the edge is decided by their order.
        let (_f, vectors, index, query) = random_index(9, 1500, 16, |i, next| {
            (["p", "q", "r"][(next() % 3) as usize], T0 + (i % 2) * 1000)
        });
        let kinds = [Kind::Observation];
        // A filter the index does not hold admitting few rows (a file's): the scan must
        // still find all of them, the nearest first.
        let few: HashMap<Kind, HashSet<i64>> = HashMap::from([(
            Kind::Observation,
            vectors.keys().filter(|id| *id % 97 == 0).copied().collect(),
        )]);
        let none: HashMap<Kind, HashSet<i64>> =
            HashMap::from([(Kind::Observation, HashSet::new())]);
        for (project, since, allowed) in [
            (None, None, None),
            (Some("q"), None, None),
            (Some("r"), Some(T0 + 1), None),
            (None, None, Some(&few)),
            (Some("p"), None, Some(&few)),
            (None, None, Some(&none)),
        ] {
            let scope = Scope {
                kinds: &kinds,
                project,
                since,
                allowed,
                ..Scope::default()
            };
            for k in [1, 100, 150, 600] {
                // Every admitted row by (distance, place), the first `depth`.
                let mut want = by_distance(&index, &query, |e| {
                    project.is_none_or(|p| index.projects[p] == e.project)
                        && scope.admits(e.kind, e.id, e.created_at)
                });
                want.truncate(RESCORE.max(k * 4));
                assert!(want.len() >= 100 || allowed.is_some(), "{}", want.len());
                let mut got = index.closest(&query, k, &scope).0;
                want.sort_unstable();
                got.sort_unstable();
                assert_eq!(got, want, "{project:?} since {since:?}, k {k}");
            }
        }
    }

    #[test]
    fn a_filter_admitting_few_rows_gets_them_all_nearest_first_in_few_passes() {
        // 6,000 rows of 64 dimensions: 65 distances, bands of 400 rows or more; a filter
        // the index does not hold (a file's) admits one row in 150, so the scan goes past
        // MAX_BANDS bands and takes the rest at once.
        let (_f, vectors, index, query) = random_index(11, 6000, 64, |i, _| ("p", T0 + i));
        let few: HashSet<i64> = vectors
            .keys()
            .filter(|id| *id % 150 == 0)
            .copied()
            .collect();
        let allowed = HashMap::from([(Kind::Observation, few.clone())]);
        let kinds = [Kind::Observation];
        let scope = Scope {
            kinds: &kinds,
            allowed: Some(&allowed),
            ..Scope::default()
        };
        let want = by_distance(&index, &query, |e| few.contains(&e.id));
        assert_eq!(want.len(), few.len());
        let got = index.closest(&query, 1, &scope).0;
        assert_eq!(got, want);
    }

    #[test]
    fn the_bits_are_read_from_their_index_not_from_the_rows() {
        let f = fixture();
        let plan: String = f
            .conn
            .prepare(&format!("EXPLAIN QUERY PLAN {READ_BITS}"))
            .expect("plan")
            .query_map(params![0, "m"], |r| r.get::<_, String>(3))
            .expect("rows")
            .collect::<rusqlite::Result<Vec<_>>>()
            .expect("plan")
            .join("; ");
        assert!(
            plan.contains("USING COVERING INDEX embeddings_scan (model=? AND seq>?)"),
            "{plan}"
        );
        // The order the index is read in is the order of `seq`: no sort.
        assert!(!plan.contains("TEMP B-TREE"), "{plan}");
    }

    #[test]
    fn vectors_kept_in_memory_find_the_same_and_never_a_row_gone_since() {
        let mut f = fixture();
        let ids: Vec<i64> = (0..40)
            .map(|i| f.add(obs("p", "bugfix", &format!("m{i}"), "", T0 + i)))
            .collect();
        // Vectors spread around the query's, each a little further.
        let vector = |i: usize| -> Vec<f32> {
            let mut v = vec![0.0f32; 16];
            v[0] = 1.0;
            v[1 + i % 15] = 0.05 * (1 + i / 15) as f32 + 0.01 * i as f32;
            v
        };
        store::store_each(&mut f.conn, "m", |id| {
            ids.iter().position(|i| *i == id).map(vector)
        });
        let mut read = VectorIndex::new("m");
        read.refresh(&f.conn).expect("refresh");
        let mut kept = VectorIndex::new("m");
        kept.keep_vectors();
        kept.refresh(&f.conn).expect("refresh");
        assert_eq!(kept.vectors.as_ref().map(Vec::len), Some(40 * 16));
        let kinds = [Kind::Observation];
        let scope = Scope {
            kinds: &kinds,
            ..Scope::default()
        };
        let query = vector(3);
        for k in [1, 5, 40] {
            assert_eq!(
                kept.nearest(&f.conn, &query, k, &scope).expect("kept"),
                read.nearest(&f.conn, &query, k, &scope).expect("read"),
                "k = {k}"
            );
        }
        // Deleted after the index looked: neither index returns it, and the kept one
        // still returns k (the next best in its place).
        let best = kept.nearest(&f.conn, &query, 5, &scope).expect("kept")[0].id;
        f.conn
            .execute(
                "DELETE FROM embeddings WHERE kind = 0 AND ref_id = ?1",
                [best],
            )
            .expect("delete");
        let after = kept.nearest(&f.conn, &query, 5, &scope).expect("kept");
        assert_eq!(after.len(), 5);
        assert!(after.iter().all(|n| n.id != best));
        assert_eq!(
            after,
            read.nearest(&f.conn, &query, 5, &scope).expect("read")
        );
    }

    #[test]
    fn a_seq_given_again_after_the_newest_rows_went_is_read_as_the_new_row() {
        let mut f = fixture();
        let a = f.add(obs("p", "bugfix", "a", "", T0));
        let b = f.add(obs("p", "bugfix", "b", "", T0 + 1));
        let embed = |f: &mut crate::recall::testing::Fixture, which: &[(i64, usize)]| {
            store::store_each(&mut f.conn, "m", |id| {
                let axis = which.iter().find(|(i, _)| *i == id)?.1;
                Some(unit(axis))
            });
        };
        // b is stored first, a last: a holds the highest seq.
        embed(&mut f, &[(b, 1)]);
        embed(&mut f, &[(a, 0)]);
        let mut read = VectorIndex::new("m");
        let mut kept = VectorIndex::new("m");
        kept.keep_vectors();
        for index in [&mut read, &mut kept] {
            index.refresh(&f.conn).expect("refresh");
        }
        // a is deleted and c stored: c's row gets a's seq.
        f.conn
            .execute("DELETE FROM embeddings WHERE kind = 0 AND ref_id = ?1", [a])
            .expect("delete");
        let c = f.add(obs("p", "bugfix", "c", "", T0 + 2));
        embed(&mut f, &[(c, 2)]);
        let kinds = [Kind::Observation];
        let scope = Scope {
            kinds: &kinds,
            ..Scope::default()
        };
        for index in [&mut read, &mut kept] {
            // Before the index looks again: never the deleted memory in c's row.
            let found = index
                .nearest(&f.conn, &unit(0), 5, &scope)
                .expect("nearest");
            assert!(found.iter().all(|n| n.id != a), "{found:?}");
            // Once it looked: c is found, with its own vector.
            index.refresh(&f.conn).expect("refresh");
            let found = index
                .nearest(&f.conn, &unit(2), 1, &scope)
                .expect("nearest");
            assert_eq!(found.first().map(|n| n.id), Some(c), "{found:?}");
            assert!(found[0].similarity > 0.99);
        }
    }
}

//! Embeddings: every observation, turn summary and prompt gets a sentence vector, so search
//! can find a memory by meaning as well as by its words.
//!
//! Owns the `embeddings` table (one vector per memory, with the model that made it) and
//! consumes `embedding_queue`, which triggers fill when a memory is stored or changed
//! (migration 0003); deleting a memory deletes its vector in the same statement.
//!
//! - `bert`: the local encoder (candle, CPU), pure computation after loading.
//! - `remote`: the alternative, any OpenAI-compatible `/embeddings` endpoint.
//! - `model`: where the model comes from (settings, the data dir's `models/`), its
//!   identity, and `fetch` / `install_from` (downloads checked by SHA-256).
//! - `store`: the queue → vector writes (`backfill`), progress counts.
//! - `index`: nearest neighbours with the search filters applied exactly.
//!
//! Invariants: vectors record the model that made them, and a search only compares
//! vectors of the model it embedded the query with; nothing is downloaded except by an
//! explicit `cairn embed --fetch`; no model is loaded on a hook's path.

pub mod bert;
pub mod index;
pub mod model;
pub mod remote;
pub mod store;

/// The text of a memory that is embedded: its fields in reading order, one per line,
/// without words that carry no meaning for a sentence model (commit-hash-like hex runs).
pub fn text_of(fields: &[&str]) -> String {
    let mut out = String::new();
    for f in fields {
        let f = f.trim();
        if f.is_empty() {
            continue;
        }
        let kept: Vec<&str> = f.split_whitespace().filter(|w| !is_hash(w)).collect();
        if kept.is_empty() {
            continue;
        }
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&kept.join(" "));
    }
    out
}

/// The parts of a memory that get vectors of their own beside the whole
/// (`embeddings.parts`): its head (the first field: an observation's title, a summary's
/// request; the first line of [`text_of`]) and its body (the other fields), when it has
/// both; none otherwise, the whole being the one part. A question about one side is often
/// nearer that side alone than the whole, which mixes both (on the recall benchmarks a
/// commit's subject and its body; BENCHMARKS.md, "Recall quality"). The local model pools
/// them from its pass over the whole text (`bert::Bert::embed_split`).
pub fn parts_of(fields: &[&str]) -> Vec<String> {
    let Some((head, body)) = fields.split_first() else {
        return Vec::new();
    };
    let (head, body) = (text_of(&[head]), text_of(body));
    if head.is_empty() || body.is_empty() {
        return Vec::new();
    }
    vec![head, body]
}

/// A run of 7 or more hex digits with at least one digit and one letter: a commit or
/// object hash, which a sentence model reads as noise.
fn is_hash(word: &str) -> bool {
    let w = word.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    w.len() >= 7
        && w.chars().all(|c| c.is_ascii_hexdigit())
        && w.chars().any(|c| c.is_ascii_digit())
        && w.chars().any(|c| c.is_ascii_alphabetic())
}

/// One sign bit per dimension, little-endian within each byte.
pub fn bits_of(v: &[f32]) -> Vec<u8> {
    let mut out = vec![0u8; v.len().div_ceil(8)];
    for (i, x) in v.iter().enumerate() {
        if *x > 0.0 {
            out[i / 8] |= 1 << (i % 8);
        }
    }
    out
}

/// The vector scaled so its largest component is ±127, as bytes (two's complement).
pub fn quantize(v: &[f32]) -> Vec<u8> {
    let max = v.iter().fold(0f32, |m, x| m.max(x.abs()));
    let scale = if max > 0.0 { 127.0 / max } else { 0.0 };
    v.iter()
        .map(|x| ((x * scale).round().clamp(-127.0, 127.0) as i8) as u8)
        .collect()
}

/// The best cosine similarity of a float query and the stored int8 vectors of a memory's
/// parts (`embeddings.parts`, each as long as the query); `None` when it has none.
pub fn best_part(query: &[f32], parts: &[u8]) -> Option<f32> {
    if query.is_empty() {
        return None;
    }
    parts
        .chunks_exact(query.len())
        .map(|p| cosine_i8(query, p))
        .reduce(f32::max)
}

/// Cosine similarity of a float query and a stored int8 vector.
pub fn cosine_i8(query: &[f32], stored: &[u8]) -> f32 {
    let (mut dot, mut qq, mut ss) = (0f32, 0f32, 0f32);
    for (q, s) in query.iter().zip(stored) {
        let s = f32::from(*s as i8);
        dot += q * s;
        qq += q * q;
        ss += s * s;
    }
    if qq == 0.0 || ss == 0.0 {
        0.0
    } else {
        dot / (qq.sqrt() * ss.sqrt())
    }
}

/// [`cosine_i8`] of `query` and each of `stored`, the same bits, eight vectors at a
/// time: each vector's sum is still made in order, one component after another, but eight
/// sums are under way together instead of one (rescoring hundreds of neighbours waited on
/// each addition before the next).
pub fn cosines_i8(query: &[f32], stored: &[&[u8]]) -> Vec<f32> {
    const LANES: usize = 8;
    let mut out = Vec::with_capacity(stored.len());
    for block in stored.chunks(LANES) {
        let (mut dot, mut ss) = ([0f32; LANES], [0f32; LANES]);
        let len = block
            .iter()
            .map(|s| s.len())
            .min()
            .unwrap_or(0)
            .min(query.len());
        let qq = query[..len].iter().fold(0f32, |qq, q| qq + q * q);
        for (d, q) in query[..len].iter().enumerate() {
            for (lane, s) in block.iter().enumerate() {
                let s = f32::from(s[d] as i8);
                dot[lane] += q * s;
                ss[lane] += s * s;
            }
        }
        for (lane, s) in block.iter().enumerate() {
            out.push(if s.len() != len {
                cosine_i8(query, s)
            } else if qq == 0.0 || ss[lane] == 0.0 {
                0.0
            } else {
                dot[lane] / (qq.sqrt() * ss[lane].sqrt())
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cosines_in_blocks_are_the_same_bits_as_one_by_one() {
        let mut next = crate::rand::seeded(5);
        let query: Vec<f32> = (0..384)
            .map(|_| (next() % 2001) as f32 / 1000.0 - 1.0)
            .collect();
        // Vectors of the query's length, a shorter one, a zero one, in blocks of every size.
        let mut stored: Vec<Vec<u8>> = (0..61)
            .map(|_| (0..384).map(|_| next() as u8).collect())
            .collect();
        stored[9].truncate(100);
        stored[20] = vec![0; 384];
        let rows: Vec<&[u8]> = stored.iter().map(Vec::as_slice).collect();
        for n in [0, 1, 7, 8, 9, 61] {
            let got = cosines_i8(&query, &rows[..n]);
            let want: Vec<f32> = rows[..n].iter().map(|s| cosine_i8(&query, s)).collect();
            assert_eq!(
                got.iter().map(|c| c.to_bits()).collect::<Vec<_>>(),
                want.iter().map(|c| c.to_bits()).collect::<Vec<_>>(),
                "{n} vectors"
            );
        }
        assert_eq!(cosines_i8(&[0.0; 384], &rows[..3]), vec![0.0; 3]);
    }

    #[test]
    fn hashes_are_left_out_of_the_embedded_text() {
        assert_eq!(
            text_of(&[
                "Fix pager",
                "8f5a80ea07e0dc98792c259b03d1d7f7678f87fa",
                "see abc1234."
            ]),
            "Fix pager\nsee"
        );
        // Words that only look like hex are kept.
        assert_eq!(
            text_of(&["decade feedbeef 1234567"]),
            "decade feedbeef 1234567"
        );
    }

    #[test]
    fn a_memory_with_a_head_and_a_body_has_both_as_parts() {
        assert_eq!(
            parts_of(&["Fix pager", "8f5a80ea07e0", "It paged twice.", "", "pager"]),
            vec![
                "Fix pager".to_string(),
                "It paged twice.\npager".to_string()
            ]
        );
        // A head alone, or a body alone, is the whole: no parts.
        assert!(parts_of(&["Fix pager", "", "  "]).is_empty());
        assert!(parts_of(&["", "It paged twice."]).is_empty());
        assert!(parts_of(&["Fix pager", "abc1234def"]).is_empty());
        assert!(parts_of(&[]).is_empty());
    }

    #[test]
    fn quantized_vectors_keep_their_direction() {
        let v: Vec<f32> = (0..384)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
            .collect();
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        let unit: Vec<f32> = v.iter().map(|x| x / norm).collect();
        assert!(cosine_i8(&unit, &quantize(&unit)) > 0.999);
        let opposite: Vec<f32> = unit.iter().map(|x| -x).collect();
        assert!(cosine_i8(&unit, &quantize(&opposite)) < -0.999);
        assert_eq!(cosine_i8(&unit, &quantize(&vec![0.0; 384])), 0.0);
    }

    #[test]
    fn bits_are_the_signs() {
        assert_eq!(
            bits_of(&[1.0, -1.0, 0.5, 0.0, -0.1, 2.0, 3.0, -4.0, 1.0]),
            vec![0b0110_0101, 1]
        );
    }
}
